// Host emulation of the CUDA features the Clifford kernels use, for tests on machines without a
// GPU. The kernel sources compile as C++ against these stand-ins; blocks, warps and tensor cores
// are emulated by emu_runtime.cpp (linked in): the threads of a cluster run as fibers of one OS
// thread (host_fibers.h), __syncthreads is a barrier of the block, a warp shuffle or an mma.sync exchanges values through
// per-warp buffers between two barriers of the warp.
#include <cmath>
#include <cstdint>
#include <cstring>

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

struct ember_emu_dim3 {
    unsigned int x, y, z;
};
extern thread_local ember_emu_dim3 threadIdx, blockIdx;
extern ember_emu_dim3 blockDim, gridDim;

#define __device__
#define __forceinline__ inline
#define __global__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __constant__ static

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { u32 x, y; };
struct uint4 { u32 x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(u32 a, u32 b) { return {a, b}; }
inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return {a, b, c, d}; }
inline float __uint_as_float(u32 u) { float f; std::memcpy(&f, &u, 4); return f; }
inline u32 __float_as_uint(float f) { u32 u; std::memcpy(&u, &f, 4); return u; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
// Blocks run one after another here, so a device-wide fence has nothing to order beyond what the
// block's own barriers already do; the counter is atomic among the block's threads.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline u32 atomicAdd(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// ---- ember's common header (half types as raw 16-bit words) ----
struct ember_bf16 { u16 bits; };
struct ember_f16 { u16 bits; };
inline float ember_bf16_bits_to_f32(u32 bits) { return __uint_as_float(bits << 16); }
inline float ember_f16_bits_to_f32(u32 bits) { _Float16 h; u16 b = (u16)bits; std::memcpy(&h, &b, 2); return (float)h; }
// Programmatic dependent launch: blocks run after the previous launch completes, so the wait and
// the trigger (common.cuh) have nothing to do.
inline void ember_grid_dependency_wait() {}
inline void ember_launch_dependents() {}
inline float ember_to_f32(float v) { return v; }
inline float ember_to_f32(ember_bf16 v) { return ember_bf16_bits_to_f32(v.bits); }
inline float ember_to_f32(ember_f16 v) { return ember_f16_bits_to_f32(v.bits); }
template <typename T> T ember_from_f32(float v);
template <> inline float ember_from_f32<float>(float v) { return v; }
template <> inline ember_bf16 ember_from_f32<ember_bf16>(float v) {
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
template <> inline ember_f16 ember_from_f32<ember_f16>(float v) {
    _Float16 h = (_Float16)v;
    ember_f16 r;
    std::memcpy(&r.bits, &h, 2);
    return r;
}
template <typename T> inline u32 ember_pack2(float lo, float hi) {
    return (u32)ember_from_f32<T>(lo).bits | ((u32)ember_from_f32<T>(hi).bits << 16);
}

// ---- ember-ga's printed helpers ----
#define EMBER_GA_HELPERS
inline float ember_ld_f32(const float* p) { return *p; }
inline void ember_st_f32(float* p, float v) { *p = v; }
inline float ember_ld_bf16(const unsigned short* p) { return ember_bf16_bits_to_f32(*p); }
inline void ember_st_bf16(unsigned short* p, float v) { *p = ember_from_f32<ember_bf16>(v).bits; }
inline float ember_ld_f16(const unsigned short* p) { return ember_f16_bits_to_f32(*p); }
inline void ember_st_f16(unsigned short* p, float v) { *p = ember_from_f32<ember_f16>(v).bits; }

// ---- blocks, warps, tensor cores: implemented by emu_runtime.cpp ----
void ember_emu_syncthreads();
float ember_emu_shfl_xor(float v, int off);
u32* ember_emu_dynamic_smem();
// Thread block clusters: a barrier of all the cluster's threads, this block's rank, and an address
// of this block's dynamic shared memory as seen in block `rank`'s.
void ember_emu_cluster_sync();
unsigned ember_emu_cluster_rank();
const void* ember_emu_cluster_map(const void* p, unsigned rank);
// KIND 0: m16n8k8 tf32; 1: m16n8k16 bf16; 2: m16n8k16 f16.
void ember_emu_mma_kind(int kind, float* d, const u32* a, const u32* b);

inline void __syncthreads() { ember_emu_syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int off) { return ember_emu_shfl_xor(v, off); }
template <int KIND> inline void ember_emu_mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) { ember_emu_mma_kind(KIND, d, a, b); }

// wgmma.m64nNk16 with A (64 × 16) and B (N × 16) K-major in shared memory as 8×8 core matrices
// without swizzle (element (r, k) at (r/8)·128 + (k/8)·64 + (r%8)·8 + k%8 halves): this thread's
// N/2 accumulators of the warpgroup's block (fragment layout of the PTX ISA). KIND 1: bf16, 2: f16.
template <int KIND, int N> inline void ember_emu_wgmma_now(float* d, const u16* a, const u16* b) {
    const int t = (int)(threadIdx.x % 128), w = t / 32, lane = t % 32;
    auto at = [](const u16* p, int r, int k) {
        const u32 bits = p[(r >> 3) * 128 + (k >> 3) * 64 + (r & 7) * 8 + (k & 7)];
        return KIND == 1 ? ember_bf16_bits_to_f32(bits) : ember_f16_bits_to_f32(bits);
    };
    for (int i = 0; i < N / 2; ++i) {
        const int row = 16 * w + lane / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; ++k) s += at(a, row, k) * at(b, col, k);
        d[i] += s;
    }
}
// Asynchronous as on the GPU: a product is recorded at issue and computed when
// wgmma.wait_group retires its group, reading shared memory then — so a stage overwritten before
// the wait that covers its products gives wrong results here too.
struct ember_emu_wgmma_op {
    void (*run)(float*, const u16*, const u16*);
    float* d;
    const u16* a;
    const u16* b;
};
// Up to 32 products per group (fc3's f32 build issues three per path: 18 for a 6-path type).
struct ember_emu_wgmma_queue {
    ember_emu_wgmma_op ops[64][32];
    int count[64];
    int head = 0, tail = 0;  // groups [head, tail) committed; group `tail` is open
};
void* ember_emu_thread_local(size_t bytes);
inline ember_emu_wgmma_queue& ember_emu_wgmma_q() {
    return *static_cast<ember_emu_wgmma_queue*>(ember_emu_thread_local(sizeof(ember_emu_wgmma_queue)));
}
template <int KIND, int N> inline void ember_emu_wgmma(float* d, const u16* a, const u16* b) {
    ember_emu_wgmma_queue& q = ember_emu_wgmma_q();
    int& c = q.count[q.tail % 64];
    if (c == 32) __builtin_trap();  // more products in one group than the queue holds
    q.ops[q.tail % 64][c++] = {&ember_emu_wgmma_now<KIND, N>, d, a, b};
}
inline void ember_emu_wgmma_commit() {
    ember_emu_wgmma_queue& q = ember_emu_wgmma_q();
    ++q.tail;
    q.count[q.tail % 64] = 0;
}
// Retires committed groups until at most `pending` remain.
inline void ember_emu_wgmma_wait(int pending) {
    ember_emu_wgmma_queue& q = ember_emu_wgmma_q();
    while (q.tail - q.head > pending) {
        const int g = q.head % 64;
        for (int i = 0; i < q.count[g]; ++i) q.ops[g][i].run(q.ops[g][i].d, q.ops[g][i].a, q.ops[g][i].b);
        ++q.head;
    }
}
