// Host emulation of the CUDA features the Clifford kernels use, for tests on machines without a
// GPU. The kernel sources compile as C++20 against these stand-ins: the threads of a block run as
// OS threads, __syncthreads is a barrier of the block, a warp shuffle or an mma.sync exchanges
// values through per-warp buffers between two barriers of the warp. Fragment layouts of mma.sync
// follow the PTX ISA (m16n8k8 .tf32, m16n8k16 .bf16/.f16, row.col, f32 accumulators).
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

struct ember_emu_dim3 {
    unsigned int x, y, z;
};
static thread_local ember_emu_dim3 threadIdx, blockIdx;
static ember_emu_dim3 blockDim, gridDim;

#define __device__
#define __forceinline__ inline
#define __global__
#define __restrict__ __restrict
#define __launch_bounds__(...)
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
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// ---- ember's common header (half types as raw 16-bit words) ----
struct ember_bf16 { u16 bits; };
struct ember_f16 { u16 bits; };
inline float ember_bf16_bits_to_f32(u32 bits) { return __uint_as_float(bits << 16); }
inline float ember_f16_bits_to_f32(u32 bits) { _Float16 h; u16 b = (u16)bits; std::memcpy(&h, &b, 2); return (float)h; }
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

// ---- blocks, warps, tensor cores ----
struct ember_emu_block {
    std::barrier<>* block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    float shfl[32][32];
    u32 a[32][32][4];
    u32 b[32][32][2];
    unsigned char* dynamic_smem;
};
static ember_emu_block* ember_emu;

inline void __syncthreads() { ember_emu->block->arrive_and_wait(); }
inline u32* ember_emu_dynamic_smem() { return reinterpret_cast<u32*>(ember_emu->dynamic_smem); }

inline float __shfl_xor_sync(unsigned, float v, int off) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    ember_emu->shfl[w][l] = v;
    ember_emu->warps[w]->arrive_and_wait();
    const float r = ember_emu->shfl[w][l ^ off];
    ember_emu->warps[w]->arrive_and_wait();
    return r;
}

// KIND 0: m16n8k8 tf32 (the tensor cores read the top 19 bits); 1: m16n8k16 bf16; 2: f16.
template <int KIND> inline float ember_emu_elem(u32 word, int half) {
    if (KIND == 0) return __uint_as_float(word & 0xffffe000u);
    const u32 bits = (word >> (16 * half)) & 0xffffu;
    return KIND == 1 ? ember_bf16_bits_to_f32(bits) : ember_f16_bits_to_f32(bits);
}

template <int KIND> inline void ember_emu_mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    std::memcpy(ember_emu->a[w][l], a, sizeof(a));
    std::memcpy(ember_emu->b[w][l], b, sizeof(b));
    ember_emu->warps[w]->arrive_and_wait();
    const int g = l >> 2, t = l & 3, K = KIND == 0 ? 8 : 16;
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        double acc = d[e];
        for (int k = 0; k < K; ++k) {
            float av, bv;
            if (KIND == 0) {
                av = ember_emu_elem<0>(ember_emu->a[w][(row % 8) * 4 + k % 4][(row >= 8) + 2 * (k >= 4)], 0);
                bv = ember_emu_elem<0>(ember_emu->b[w][col * 4 + k % 4][k >= 4], 0);
            } else {
                av = ember_emu_elem<KIND>(ember_emu->a[w][(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1);
                bv = ember_emu_elem<KIND>(ember_emu->b[w][col * 4 + (k % 8) / 2][k >= 8], k & 1);
            }
            acc += (double)av * (double)bv;
        }
        d[e] = (float)acc;
    }
    ember_emu->warps[w]->arrive_and_wait();
}
