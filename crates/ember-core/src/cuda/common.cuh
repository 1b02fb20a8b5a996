// ember common device helpers, prepended to every ember kernel source.
//
// Self-contained on purpose: NVRTC compiles these without any CUDA header, so libnvrtc alone is
// enough at run time. Half types are stored as raw 16-bit words and converted with bit operations
// (bf16) or single PTX instructions (f16); all arithmetic is f32.
#ifndef EMBER_COMMON_CUH
#define EMBER_COMMON_CUH

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

struct __align__(2) ember_bf16 { u16 bits; };
struct __align__(2) ember_f16 { u16 bits; };

__device__ __forceinline__ float ember_to_f32(float v) { return v; }
__device__ __forceinline__ float ember_to_f32(ember_bf16 v) { return __uint_as_float(((u32)v.bits) << 16); }
__device__ __forceinline__ float ember_to_f32(ember_f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}

template <typename T> __device__ __forceinline__ T ember_from_f32(float v);
template <> __device__ __forceinline__ float ember_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ ember_bf16 ember_from_f32<ember_bf16>(float v) {
    // Round to nearest even; NaN stays a (quiet) NaN.
    u32 u = __float_as_uint(v);
    ember_bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (u16)((u >> 16) | 0x0040u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        r.bits = (u16)(u >> 16);
    }
    return r;
}
template <> __device__ __forceinline__ ember_f16 ember_from_f32<ember_f16>(float v) {
    ember_f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}

// Raw 16-bit word <-> f32, for code that loads half types through wide vector loads.
__device__ __forceinline__ float ember_bf16_bits_to_f32(u32 bits) { return __uint_as_float(bits << 16); }
__device__ __forceinline__ float ember_f16_bits_to_f32(u32 bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((u16)bits));
    return f;
}

// Exact GELU (erf form) and its derivative; the Hyena and Clifford layers share these.
__device__ __forceinline__ float ember_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float ember_gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

// Counter-based random numbers: the same (seed, index) gives the same value on the CPU
// (ember_core::rng) and on the GPU. Round-to-nearest intrinsics keep the f32 arithmetic from being
// contracted into FMAs, so results are bit-identical.
__device__ __forceinline__ u64 ember_splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float ember_uniform(u64 seed, u64 i, float lo, float hi) {
    const u64 h = ember_splitmix64(ember_splitmix64(seed) ^ i);
    const float u = (float)(u32)(h >> 40) * 5.9604644775390625e-8f;  // [0, 1) in steps of 2^-24
    return __fadd_rn(lo, __fmul_rn(__fsub_rn(hi, lo), u));
}

// 16-byte vector loads and stores of 4 f32 or 8 half values, converted to/from f32 registers.
// Pointers must be 16-byte aligned (ember tensors are whole allocations, 256-byte aligned).
__device__ __forceinline__ void ember_load16(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
__device__ __forceinline__ void ember_store16(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void ember_unpack8(const uint4 q, float (&v)[8], bool is_bf16) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = is_bf16 ? ember_bf16_bits_to_f32(w[k] & 0xffffu) : ember_f16_bits_to_f32(w[k] & 0xffffu);
        v[2 * k + 1] = is_bf16 ? ember_bf16_bits_to_f32(w[k] >> 16) : ember_f16_bits_to_f32(w[k] >> 16);
    }
}
__device__ __forceinline__ void ember_load16(const ember_bf16* p, float (&v)[8]) { ember_unpack8(*reinterpret_cast<const uint4*>(p), v, true); }
__device__ __forceinline__ void ember_load16(const ember_f16* p, float (&v)[8]) { ember_unpack8(*reinterpret_cast<const uint4*>(p), v, false); }
// Two f32 -> one 32-bit word of two half values (lo in the low 16 bits), round to nearest even.
// sm_80+ has a single instruction for each pair.
template <typename T> __device__ __forceinline__ u32 ember_pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 ember_pack2<ember_bf16>(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (u32)ember_from_f32<ember_bf16>(lo).bits | ((u32)ember_from_f32<ember_bf16>(hi).bits << 16);
#endif
}
template <> __device__ __forceinline__ u32 ember_pack2<ember_f16>(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (u32)ember_from_f32<ember_f16>(lo).bits | ((u32)ember_from_f32<ember_f16>(hi).bits << 16);
#endif
}
// f32 on bf16 tensor cores: x ≈ hi + lo with hi = bf16(x), lo = bf16(x − hi) (16 significant bits), for
// two values at once (x0 in the low half of each word). Three m16n8k16 products hi·hi + hi·lo + lo·hi
// then give ~5e-6 relative per product sum (the dropped lo·lo and the tails below lo's bits).
__device__ __forceinline__ void ember_split_bf16x2(float x0, float x1, u32& hi, u32& lo) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
    const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - h1), "f"(x0 - h0));
}
template <typename T>
__device__ __forceinline__ void ember_store16(T* p, const float (&v)[8]) {
    u32 w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = ember_pack2<T>(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
// Elements per 16-byte vector.
template <typename T> struct ember_vec { static constexpr int N = 16 / sizeof(T); };

// Σ_{s < n} src[s·stride], added in the order s = 0, 1, …: the fixed-order sum of split-K slices.
// EMBER_SUM_AHEAD terms are loaded before they are added (the same bits as one term at a time, more
// bytes in flight: such sums are latency-bound, few elements and ~100 slices deep).
#define EMBER_SUM_AHEAD 16
__device__ __forceinline__ float ember_ordered_sum(const float* __restrict__ src, i64 stride, i64 n) {
    float s = 0.0f;
    i64 k = 0;
    for (; k + EMBER_SUM_AHEAD <= n; k += EMBER_SUM_AHEAD, src += EMBER_SUM_AHEAD * stride) {
        float v[EMBER_SUM_AHEAD];
#pragma unroll
        for (int u = 0; u < EMBER_SUM_AHEAD; ++u) v[u] = src[u * stride];
#pragma unroll
        for (int u = 0; u < EMBER_SUM_AHEAD; ++u) s += v[u];
    }
    for (; k < n; ++k, src += stride) s += *src;
    return s;
}

// Programmatic dependent launch (sm_90+; no-ops before). A kernel launched as dependent
// (`Launch::dependent` on the host) may start while the previous kernel still runs: it calls
// ember_grid_dependency_wait() before touching anything earlier kernels write (the wait returns
// once they have completed and their writes are visible). A kernel calls ember_launch_dependents()
// to let the next, dependent kernel be scheduled before it ends (its CTAs can then take SMs as
// this kernel's CTAs exit, and run their prologue).
__device__ __forceinline__ void ember_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ember_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// mbarriers and 1-D bulk copies (sm_90+; nothing before, where kernels that use them are never
// launched). `bar` is a shared-memory address (__cvta_generic_to_shared) of an 8-byte barrier.
// A phase of a barrier initialised with `count` completes once `count` arrivals have come and every
// transaction byte announced in it (arrive_tx) has landed.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define EMBER_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define EMBER_SM90_ASM(...) ((void)0)
#endif
__device__ __forceinline__ void ember_mbar_init(u32 bar, u32 count) {
    EMBER_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// The initialised barriers, visible to the async proxy (bulk copies' complete-tx).
__device__ __forceinline__ void ember_mbar_fence_init() {
    EMBER_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void ember_mbar_arrive(u32 bar) {
    EMBER_SM90_ASM("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(bar) : "memory");
}
// Arrive and add `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void ember_mbar_arrive_tx(u32 bar, u32 bytes) {
    EMBER_SM90_ASM("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" ::"r"(bar), "r"(bytes) : "memory");
}
// Until the phase of parity `parity` has completed. A phase that never completes (a copy that
// faulted, a pipeline bug) traps once the wait has lasted EMBER_MBAR_WATCHDOG_NS of wall time —
// against microseconds for a real wait, with room for compute-sanitizer's slowdown — so a broken
// pipeline is a launch error within seconds, not a hung device. The clock is read only every 1024
// failed tries (each try_wait may suspend the thread for a hardware-chosen time).
#define EMBER_MBAR_WATCHDOG_NS 4000000000ull
__device__ __forceinline__ void ember_mbar_wait(u32 bar, u32 parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    u32 done = 0, tries = 0;
    u64 since = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
        if (!done && (++tries & 1023u) == 0) {
            u64 now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if (since == 0) since = now;
            else if (now - since > EMBER_MBAR_WATCHDOG_NS) __trap();
        }
    } while (!done);
#else
    (void)bar, (void)parity;
#endif
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global → shared by the bulk-copy unit,
// completing as transactions on `bar`.
__device__ __forceinline__ void ember_bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    EMBER_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

#endif  // EMBER_COMMON_CUH
