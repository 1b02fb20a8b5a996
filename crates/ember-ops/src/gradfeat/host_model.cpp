// Host model of the staged kernels (staged.cu): the kernels' own source, compiled as C++ with host
// versions of the few primitives it writes in PTX, run on the CPU with the threads of a CTA as fibers
// of one OS thread (host_fibers.h: __syncthreads is a real barrier) and wgmma computed from its shared-memory
// descriptors by the layouts of the PTX ISA. It checks the index arithmetic of every copy, descriptor
// and epilogue, and the launch sequence of staged.rs, without a GPU; tests.rs drives it.
// Two timings of the asynchronous operations: "eager", where cp.async copies land and wgmma products
// run when issued, and "lazy", where each lands or runs only when a wait forces it (cp.async.wait_group,
// wgmma.wait_group: everything but the N most recent groups), reading shared memory then — so a slot
// refilled before the products that read it completed, a read before its copy was waited for, or an
// accumulator used before its wait gives wrong results. What it cannot see: whether the hardware
// agrees with the documented layouts, and the proxy fences (no-ops here).
//
// Build: c++ -std=c++20 -O2 -fno-strict-aliasing -DGS_DTYPE=1|2 -DGS_NCH=1|2 host_model.cpp (host_fibers.h beside it)
// Usage: host_model IN OUT [lazy]. IN: the problem, plans and inputs written by tests.rs; OUT: the
// forward's output and the gradients, as raw 16-bit words.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "host_fibers.h"

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
struct ember_bf16 { u16 bits; };
struct ember_f16 { u16 bits; };
struct uint4 { u32 x, y, z, w; };
struct model_dim3 { u32 x = 0, y = 0, z = 0; };

// The running fiber's (set each time the scheduler resumes one).
static model_dim3 threadIdx, blockIdx;
static model_dim3 blockDim, gridDim;

static float f32_from_bits(u32 u) { float f; std::memcpy(&f, &u, 4); return f; }
static u32 bits_from_f32(float f) { u32 u; std::memcpy(&u, &f, 4); return u; }
static float ember_bf16_bits_to_f32(u32 bits) { return f32_from_bits(bits << 16); }
static float ember_f16_bits_to_f32(u32 bits) { _Float16 h; u16 b = (u16)bits; std::memcpy(&h, &b, 2); return (float)h; }
static u16 bf16_bits(float v) {
    u32 u = bits_from_f32(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
static u16 f16_bits(float v) { _Float16 h = (_Float16)v; u16 b; std::memcpy(&b, &h, 2); return b; }
template <typename T> u32 ember_pack2(float lo, float hi);
template <> u32 ember_pack2<ember_bf16>(float lo, float hi) { return (u32)bf16_bits(lo) | ((u32)bf16_bits(hi) << 16); }
template <> u32 ember_pack2<ember_f16>(float lo, float hi) { return (u32)f16_bits(lo) | ((u32)f16_bits(hi) << 16); }

#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n)

// One CTA at a time: its shared memory and its barrier; its threads are fibers of g_sched.
static unsigned char* g_smem = nullptr;
static u32 g_smem_bytes = 0;
static host_fibers::Barrier g_barrier;
static host_fibers::Scheduler g_sched;

// CUDA's fast intrinsics, exactly (glibc declares an __expf of its own: a macro takes precedence).
#define __expf(x) std::exp((float)(x))
#define __fdividef(a, b) ((float)(a) / (float)(b))
[[noreturn]] static void __trap() {
    std::fprintf(stderr, "__trap in block %u thread %u\n", blockIdx.x, threadIdx.x);
    std::abort();
}
static void __syncthreads() { g_sched.wait(g_barrier); }

// common.cuh's conversions and its fixed-order sum of split slices (the loads it issues ahead do not
// change the order of the adds).
template <typename T> T ember_from_f32(float v);
template <> ember_bf16 ember_from_f32<ember_bf16>(float v) { return {bf16_bits(v)}; }
template <> ember_f16 ember_from_f32<ember_f16>(float v) { return {f16_bits(v)}; }
static float ember_to_f32(ember_bf16 v) { return ember_bf16_bits_to_f32(v.bits); }
static float ember_to_f32(ember_f16 v) { return ember_f16_bits_to_f32(v.bits); }
static float ember_ordered_sum(const float* src, i64 stride, i64 n) {
    float s = 0.0f;
    for (i64 k = 0; k < n; ++k) s += src[k * stride];
    return s;
}

#define GS_HOST_MODEL 1
#define GS_SMEM_DECL unsigned char* smem = g_smem
#define GS_ENTRY(THREADS) extern "C" void
#define GS_HAS_WGMMA 1

static u32 gs_smem_addr(const void* p) { return (u32)((const unsigned char*)p - g_smem); }
static u32 gs_dynamic_smem_size() { return g_smem_bytes; }
static void check_smem(u32 addr, u32 bytes) {
    if (addr + bytes > g_smem_bytes) {
        std::fprintf(stderr, "shared memory access [%u, %u) past %u bytes (block %u thread %u)\n", addr, addr + bytes, g_smem_bytes, blockIdx.x, threadIdx.x);
        std::abort();
    }
}
static bool g_lazy = false;

// cp.async: eager, the copy lands at once; lazy, it lands when a wait_group retires its group (the
// source, an input of the kernel, is read at issue).
struct Copy {
    u32 dst;
    unsigned char bytes[16];
};
// The committed groups and the open group of one emulated thread's asynchronous operations.
template <class Op>
struct AsyncGroups {
    std::vector<std::vector<Op>> groups;
    std::vector<Op> open;
};
// The running fiber's copies.
static AsyncGroups<Copy>* t_copies = nullptr;
#define t_copy_groups (t_copies->groups)
#define t_copy_open (t_copies->open)
static void land(const Copy& c) {
    check_smem(c.dst, 16);
    std::memcpy(g_smem + c.dst, c.bytes, 16);
}
static void gs_cp16(u32 dst, const void* src, int bytes) {
    Copy c{dst, {}};
    if (bytes > 0) std::memcpy(c.bytes, src, (size_t)bytes);
    if (g_lazy) {
        t_copy_open.push_back(c);
    } else {
        land(c);
    }
}
static void gs_commit() {
    t_copy_groups.push_back(std::move(t_copy_open));
    t_copy_open.clear();
}
template <int N> static void gs_wait() {
    while (t_copy_groups.size() > (size_t)N) {
        for (const Copy& c : t_copy_groups.front()) land(c);
        t_copy_groups.erase(t_copy_groups.begin());
    }
}
static void gs_st16(u32 dst, u32 a, u32 b, u32 c, u32 d) {
    check_smem(dst, 16);
    const u32 w[4] = {a, b, c, d};
    std::memcpy(g_smem + dst, w, 16);
}
static float gs_ex2(float x) { return std::exp2(x); }
static float gs_rcp(float x) { return 1.0f / x; }
static void gs_stg16_if(void* dst, uint4 v, bool ok) {
    if (ok) std::memcpy(dst, &v, 16);
}
static void gs_fence_async() {}
static void gs_fence_regs(float (&)[64]) {}
static int gs_tid() { return (int)threadIdx.x; }
static float gs_tanh_out(float x) { return std::tanh(x); }
static float model_elem(u32 addr) {
    check_smem(addr, 2);
    u16 b;
    std::memcpy(&b, g_smem + addr, 2);
#if GS_DTYPE == 2
    return ember_bf16_bits_to_f32(b);
#else
    return ember_f16_bits_to_f32(b);
#endif
}
// wgmma.m64n128k16, f32 accumulators: this thread's 64 of them (warp w of the warpgroup, lane
// 4g + t holds rows 16w + g + 8h, columns 8i + 2t + e as element 4i + 2h + e), from A (64×16) and
// B (128×16) read through their descriptors. Canonical layouts without swizzle, element (mn, k):
//   K-major:  start + (mn/8)·SBO + (k/8)·LBO + (mn%8)·16 + (k%8)·2
//   MN-major: start + (mn/8)·SBO + (k/8)·LBO + (k%8)·16 + (mn%8)·2
struct Product {
    float* d;
    u64 da, db;
    int scale_a, trans;
};
static void run_product(const Product& p) {
    auto field = [](u64 desc, int shift) { return (u32)((desc >> shift) & 0x3FFFu) << 4; };
    auto addr = [&](u64 desc, int mn, int k) {
        const u32 start = field(desc, 0), lbo = field(desc, 16), sbo = field(desc, 32);
        const u32 inner = p.trans ? (k % 8) * 16 + (mn % 8) * 2 : (mn % 8) * 16 + (k % 8) * 2;
        return start + (mn / 8) * sbo + (k / 8) * lbo + inner;
    };
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 16; ++i)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const int row = 16 * warp + g + 8 * h, col = 8 * i + 2 * t + e;
                float s = 0.0f;
                for (int k = 0; k < 16; ++k) s += model_elem(addr(p.da, row, k)) * model_elem(addr(p.db, col, k));
                p.d[4 * i + 2 * h + e] += (float)p.scale_a * s;
            }
}
// Eager: the product runs at issue; lazy: when wgmma.wait_group retires its group, reading shared
// memory and updating the accumulators then.
// The running fiber's products.
static AsyncGroups<Product>* t_products = nullptr;
#define t_mma_groups (t_products->groups)
#define t_mma_open (t_products->open)
template <int SCALE_A, int TRANS>
static void gs_mma(float (&d)[64], u64 da, u64 db) {
    const Product p{d, da, db, SCALE_A, TRANS};
    if (g_lazy) {
        t_mma_open.push_back(p);
    } else {
        run_product(p);
    }
}
static void gs_wg_arrive() {}
static void gs_wg_commit() {
    t_mma_groups.push_back(std::move(t_mma_open));
    t_mma_open.clear();
}
template <int N> static void gs_wg_wait() {
    while (t_mma_groups.size() > (size_t)N) {
        for (const Product& p : t_mma_groups.front()) run_product(p);
        t_mma_groups.erase(t_mma_groups.begin());
    }
}

namespace map_kernels {
#define GS_KIND 0
#include "staged.cu"
#undef GS_KIND
}  // namespace map_kernels
namespace reduce_kernels {
#define GS_KIND 1
#include "staged.cu"
#undef GS_KIND
}  // namespace reduce_kernels
// The packed build of the map kernel (GS_PACK): entries of the same names in their own namespace.
#undef GS_ENTRY
#define GS_ENTRY(THREADS) void
#undef GS_PACK
#define GS_PACK 1
namespace map_kernels_pk {
#define GS_KIND 0
#include "staged.cu"
#undef GS_KIND
}  // namespace map_kernels_pk
// The image build (GS_PACK and GS_IMG): its `_sv` map kernels write g, P, Q as tile images.
#undef GS_IMG
#define GS_IMG 1
namespace map_kernels_img {
#define GS_KIND 0
#include "staged.cu"
#undef GS_KIND
}  // namespace map_kernels_img
// The deferred-store build (GS_PACK, GS_IMG and GS_DEFER): its `_sv` entries write a row tile's out
// or d_g while the next row tile's first products run (fwd=packed-defer, bwd=packed-img-defer).
#undef GS_DEFER
#define GS_DEFER 1
namespace map_kernels_defer {
#define GS_KIND 0
#include "staged.cu"
#undef GS_KIND
}  // namespace map_kernels_defer
// The forward's packed-pp build (GS_PP; fwd=packed-pp): one warpgroup per CTA (128 threads), whole
// 64-row tiles per CTA, a pass per 128-channel chunk; only its entries gs_fwd_*_pp.
#undef GS_IMG
#define GS_IMG 0
#undef GS_DEFER
#define GS_DEFER 0
#define GS_PP 1
namespace map_kernels_pp {
#define GS_KIND 0
#include "staged.cu"
#undef GS_KIND
}  // namespace map_kernels_pp

// Run `grid` CTAs of `threads` threads one after another, each thread calling body(); shared memory
// starts as NaN so that a read of anything not written first shows in the results.
static void launch(u32 grid, u32 threads, u32 smem_bytes, const std::function<void()>& body) {
    std::vector<unsigned char> smem(smem_bytes);
    gridDim.x = grid;
    blockDim.x = threads;
    for (u32 b = 0; b < grid; ++b) {
        for (u32 i = 0; i + 1 < smem_bytes; i += 2) smem[i] = 0xff, smem[i + 1] = 0x7f;
        g_smem = smem.data();
        g_smem_bytes = smem_bytes;
        g_barrier = host_fibers::Barrier{};
        g_barrier.expected = threads;
        std::vector<AsyncGroups<Copy>> copies(threads);
        std::vector<AsyncGroups<Product>> products(threads);
        auto resume = [&](unsigned t) {
            threadIdx.x = t;
            blockIdx.x = b;
            t_copies = &copies[t];
            t_products = &products[t];
        };
        auto thread_body = [&](unsigned t) {
            body();
            // Every copy and product was waited for before the thread ended.
            const bool copies_done = t_copy_open.empty() && std::all_of(t_copy_groups.begin(), t_copy_groups.end(), [](const auto& g) { return g.empty(); });
            if (!copies_done || !t_mma_open.empty() || !t_mma_groups.empty()) {
                std::fprintf(stderr, "block %u thread %u ended with copies or products not waited for\n", b, t);
                std::abort();
            }
        };
        if (!g_sched.run(threads, thread_body, resume)) {
            std::fprintf(stderr, "deadlock in block %u: every thread left waits on a barrier that cannot complete\n", b);
            std::abort();
        }
    }
}

// ---- input ----
static FILE* g_in;
static i64 rd() {
    i64 v;
    if (std::fread(&v, 8, 1, g_in) != 1) std::abort();
    return v;
}
static std::vector<i64> rd_table() {
    const i64 n = rd();
    std::vector<i64> t((size_t)n);
    for (auto& v : t) v = rd();
    return t;
}
// A 16-bit tensor in 256-byte aligned memory (as the device allocator gives), NaN-poisoned when it
// is an output. Exactly n elements: with AddressSanitizer an access past the end aborts the run.
static u16* tensor(size_t n) {
    const size_t len = n ? n : 1;
    u16* p = new (std::align_val_t(256)) u16[len];
    for (size_t i = 0; i < len; ++i) p[i] = 0x7fff;
    return p;
}
static u16* rd_tensor(size_t n) {
    u16* p = tensor(n);
    if (n && std::fread(p, 2, n, g_in) != n) std::abort();
    return p;
}
struct Plan {
    i64 nsplits, rows_per_split;
    std::vector<i64> splits, groups;
};
static Plan rd_plan() {
    Plan p;
    p.nsplits = rd();
    p.rows_per_split = rd();
    p.splits = rd_table();
    p.groups = rd_table();
    return p;
}

typedef reduce_kernels::T T;

// out[g] = Σ over the rows of group g (see gs_reduce), then the split-order sum of gf_reduce. With
// `split_rows` (no rotations) the M × N result's first M/2 rows go to out0, the rest to out1.
static void reduce(bool rot, const u16* a_re, const u16* a_im, const u16* b_re, const u16* b_im, i64 R, int M, int N, const Plan& plan, u16* out0, u16* out1,
                   int ngroups, bool split_rows = false) {
    const int planes = rot ? 2 : 1;
    const int tiles = ((M + 127) / 128) * ((N + 127) / 128);
    std::vector<float> ws((size_t)(plan.nsplits * planes * M * N), NAN);
    const i64* splits = plan.splits.empty() ? nullptr : plan.splits.data();
    const int vm = M % 8 == 0, vn = N % 8 == 0;
    launch((u32)(plan.nsplits * tiles), 256, 6 * 4 * 32 * 128 * 2, [&] {
        auto f = rot ? reduce_kernels::gs_reduce_rot : reduce_kernels::gs_reduce_sum;
        f((const T*)a_re, (const T*)a_im, (const T*)b_re, (const T*)b_im, ws.data(), splits, R, M, N, plan.rows_per_split, vm, vn);
    });
    const i64 elems = (i64)M * N;
    for (int g = 0; g < ngroups; ++g)
        for (int p = 0; p < planes; ++p)
            for (i64 i = 0; i < elems; ++i) {
                i64 sb = 0, se = plan.nsplits;
                if (!plan.groups.empty()) sb = plan.groups[2 * g], se = plan.groups[2 * g + 1];
                float s = 0.0f;
                for (i64 sp = sb; sp < se; ++sp) s += ws[(size_t)((sp * planes + p) * elems + i)];
                const u16 v = GS_DTYPE == 2 ? bf16_bits(s) : f16_bits(s);
                if (split_rows) {
                    (i < elems / 2 ? out0 : out1)[g * elems / 2 + i % (elems / 2)] = v;
                } else {
                    (p == 0 ? out0 : out1)[g * elems + i] = v;
                }
            }
}

// staged.rs's reduce_img: d_A from tile images (R image rows of ldi channels), uniform splits, then
// the split-order sum.
static void reduce_img(bool rot, const u16* a_re, const u16* a_im, const u16* b_re, const u16* b_im, i64 R, int ldi, int M, int N, i64 nsplits, i64 per,
                       u16* out0, u16* out1) {
    const int planes = rot ? 2 : 1;
    const int tiles = ((M + 127) / 128) * ((N + 127) / 128);
    std::vector<float> ws((size_t)(nsplits * planes * M * N), NAN);
    launch((u32)(nsplits * tiles), 256, 6 * 4 * 32 * 128 * 2, [&] {
        auto f = rot ? reduce_kernels::gs_reduce_rot_img : reduce_kernels::gs_reduce_sum_img;
        f((const T*)a_re, (const T*)a_im, (const T*)b_re, (const T*)b_im, ws.data(), R, M, N, per, ldi);
    });
    const i64 elems = (i64)M * N;
    for (int p = 0; p < planes; ++p)
        for (i64 i = 0; i < elems; ++i) {
            float s = 0.0f;
            for (i64 sp = 0; sp < nsplits; ++sp) s += ws[(size_t)((sp * planes + p) * elems + i)];
            (p == 0 ? out0 : out1)[i] = GS_DTYPE == 2 ? bf16_bits(s) : f16_bits(s);
        }
}

// staged.rs's reduce_dx_img: d_x per mesh from grads (row-major) and d_g's tile images by
// gs_reduce_dxa's d_x-only entries (the splits and groups of dxa_plans), then the split-order sum per
// group.
static void reduce_dx_img(const u16* grads_re, const u16* grads_im, const u16* dg_re, const u16* dg_im, const std::vector<i64>& map_tiles, i64 V, int K, int C,
                          int bm, const Plan& plan, u16* out, int ngroups) {
    const int per_split = ((K + 127) / 128) * GS_NCH;
    std::vector<float> ws((size_t)(plan.nsplits * K * C), NAN);
    launch((u32)(plan.nsplits * per_split), 256, 4 * (2 * 32 * 128 * 2 + 4 * 32 * 128 * 2), [&] {
        auto f = GS_NCH == 1 ? reduce_kernels::gs_reduce_dxa1_dx : reduce_kernels::gs_reduce_dxa2_dx;
        f((const T*)grads_re, (const T*)grads_im, (const T*)dg_re, (const T*)dg_im, nullptr, nullptr, ws.data(), plan.splits.data(),
          map_tiles.empty() ? nullptr : map_tiles.data(), V, K, C, bm);
    });
    const i64 elems = (i64)K * C;
    for (int g = 0; g < ngroups; ++g)
        for (i64 i = 0; i < elems; ++i) {
            i64 sb = 0, se = plan.nsplits;
            if (!plan.groups.empty()) sb = plan.groups[2 * g], se = plan.groups[2 * g + 1];
            float s = 0.0f;
            for (i64 sp = sb; sp < se; ++sp) s += ws[(size_t)(sp * elems + i)];
            out[g * elems + i] = GS_DTYPE == 2 ? bf16_bits(s) : f16_bits(s);
        }
}

// staged.rs's reduce_dxa_img: d_x and R per mesh by gs_reduce_dxa over grads and the images of d_g, P,
// Q (the splits and groups of its dx_img_plan), gs_sum_dxa into d_x and R's hi + lo rows, then d_A by
// gs_reduce_sum over those M·K rows against x (uniform splits fin_nsplits × fin_per).
static void reduce_dxa(bool rot, const u16* grads_re, const u16* grads_im, const u16* dg_re, const u16* dg_im, const u16* p, const u16* q, const u16* x,
                       const std::vector<i64>& map_tiles, i64 V, int K, int C, int bm, const Plan& plan, i64 fin_nsplits, i64 fin_per, int meshes, u16* d_x,
                       u16* d_a0, u16* d_a1) {
    const int per_split = ((K + 127) / 128) * GS_NCH, planes = rot ? 3 : 2;
    std::vector<float> ws((size_t)(plan.nsplits * planes * K * C), NAN);
    launch((u32)(plan.nsplits * per_split), 256, 4 * (2 * 32 * 128 * 2 + 4 * 32 * 128 * 2), [&] {
        auto f = GS_NCH == 1 ? (rot ? reduce_kernels::gs_reduce_dxa1_rot : reduce_kernels::gs_reduce_dxa1_plain)
                             : (rot ? reduce_kernels::gs_reduce_dxa2_rot : reduce_kernels::gs_reduce_dxa2_plain);
        f((const T*)grads_re, (const T*)grads_im, (const T*)dg_re, (const T*)dg_im, (const T*)p, (const T*)q, ws.data(), plan.splits.data(),
          map_tiles.empty() ? nullptr : map_tiles.data(), V, K, C, bm);
    });
    const int ld = (planes - 1) * C;
    const i64 rows = (i64)meshes * K;
    u16 *a_hi = tensor((size_t)(rows * ld)), *a_lo = tensor((size_t)(rows * ld));
    launch(1, 256, 0, [&] {
        reduce_kernels::gs_sum_dxa(ws.data(), (T*)d_x, (T*)a_hi, (T*)a_lo, plan.groups.empty() ? nullptr : plan.groups.data(), meshes, planes, K, C, plan.nsplits);
    });
    reduce(false, a_hi, a_lo, x, x, rows, ld, C, Plan{fin_nsplits, fin_per, {}, {}}, d_a0, rot ? d_a1 : nullptr, 1, rot);
}

// Whether `img` (ntiles tile images of bm rows × ldi channels) holds the row-major V × C matrix `rm`
// tile by tile (row tile t: rows row0.. of its mesh, to row_end), and zeros (either sign) elsewhere.
static bool image_matches(const u16* img, const u16* rm, const std::vector<i64>& map_tiles, i64 ntiles, i64 V, i64 C, int bm, int ldi) {
    for (i64 t = 0; t < ntiles; ++t) {
        const i64 row0 = map_tiles.empty() ? t * bm : map_tiles[3 * t], row_end = map_tiles.empty() ? V : map_tiles[3 * t + 1];
        for (int r = 0; r < bm; ++r)
            for (int c = 0; c < ldi; ++c) {
                const u16 got = img[t * bm * ldi + (r / 8) * 8 * ldi + (c / 8) * 64 + (r % 8) * 8 + c % 8];
                const bool inside = row0 + r < row_end && c < C;
                if (inside ? got != rm[(row0 + r) * C + c] : (got & 0x7fffu) != 0) {
                    std::fprintf(stderr, "image of tile %lld differs at row %d channel %d\n", t, r, c);
                    return false;
                }
            }
    }
    return true;
}

static u16* transpose(const u16* src, i64 batches, int rows, int cols, bool negate) {
    u16* dst = tensor((size_t)(batches * rows * cols));
    gridDim.x = 1;
    blockDim.x = 256;
    for (u32 t = 0; t < 256; ++t) {
        threadIdx.x = t;
        blockIdx.x = 0;
        reduce_kernels::gs_transpose((const T*)src, (T*)dst, batches, rows, cols, negate);
    }
    return dst;
}

// staged.rs's pack: `srcs.size()` planes of k-tile images (gs_pack), plane i from srcs[i].
static u16* pack(const std::vector<std::pair<const u16*, bool>>& srcs, i64 batches, int rows, int cols, int rpad, bool trans) {
    const int nkt = (cols + 31) / 32, planes = (int)srcs.size();
    u16* dst = tensor((size_t)(batches * nkt * rpad * 32 * planes));
    gridDim.x = 1;
    blockDim.x = 256;
    int negate = 0;
    for (int i = 0; i < planes; ++i) negate |= (int)srcs[i].second << i;
    for (u32 t = 0; t < 256; ++t) {
        threadIdx.x = t;
        blockIdx.x = 0;
        reduce_kernels::GsPackJobs jobs{};
        jobs.job[0] = {(const T*)srcs[0].first, (const T*)srcs[planes - 1].first, (T*)dst, batches, rows, cols, rpad, nkt, planes, trans, negate};
        jobs.njobs = 1;
        reduce_kernels::gs_pack(jobs);
    }
    return dst;
}

static bool same(const u16* a, const u16* b, i64 n) { return n == 0 || std::memcmp(a, b, (size_t)n * 2) == 0; }

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) return 2;
    g_lazy = argc == 4 && std::strcmp(argv[3], "lazy") == 0;
    g_in = std::fopen(argv[1], "rb");
    if (!g_in) return 2;
    const i64 V = rd(), K = rd(), C = rd(), M = rd(), spectral = rd(), rot = rd(), dtype = rd(), nch = rd();
    if (dtype != GS_DTYPE || nch != GS_NCH) {
        std::fprintf(stderr, "built for dtype %d nch %d, asked for %lld %lld\n", GS_DTYPE, GS_NCH, dtype, nch);
        return 2;
    }
    const std::vector<i64> map_tiles = rd_table();
    const i64 ntiles = rd(), grid_fwd = rd(), grid_bwd = rd();
    const Plan plan_a = rd_plan();
    const Plan plan_x = spectral ? rd_plan() : Plan{};
    const i64 img_nsplits = rd(), img_per = rd();  // staged.rs's img_plan
    const std::vector<i64> pp_tiles = rd_table();   // staged.rs's packed-pp launch: 64-row tiles
    const i64 pp_ntiles = rd(), pp_grid = rd();
    const Plan plan_dxa = rd_plan();                 // staged.rs's dxa_plans: gs_reduce_dxa's splits
    const i64 fin_nsplits = rd(), fin_per = rd();   // and its last product's uniform splits
    const u16* grads_re = rd_tensor(spectral ? V * K : 0);
    const u16* grads_im = rd_tensor(spectral ? V * K : 0);
    const u16* x = rd_tensor(spectral ? M * K * C : 0);
    const u16* g_in_re = rd_tensor(spectral ? 0 : V * C);
    const u16* g_in_im = rd_tensor(spectral ? 0 : V * C);
    const u16* a_re = rd_tensor(C * C);
    const u16* a_im = rd_tensor(rot ? C * C : 0);
    const u16* d_out = rd_tensor(V * C);
    std::fclose(g_in);

    // The launch sequence of staged.rs.
    const u16* t_re = transpose(a_re, 1, (int)C, (int)C, false);
    const u16* t_im = rot ? transpose(a_im, 1, (int)C, (int)C, true) : nullptr;
    const u16* xt = spectral ? transpose(x, M, (int)K, (int)C, false) : nullptr;
    u16 *p = tensor(V * C), *q = tensor(V * C), *dg_re = tensor(V * C), *dg_im = tensor(V * C);
    u16 *gws_re = spectral ? tensor(V * C) : nullptr, *gws_im = spectral ? tensor(V * C) : nullptr;
    const int bm = 128 / GS_NCH;
    const i64* tiles = map_tiles.empty() ? nullptr : map_tiles.data();
    const int vec_k = K % 8 == 0, vec_c = C % 8 == 0;
    const bool sv = spectral && vec_k && vec_c;  // staged.rs's map_entry
    const u32 smem = (u32)(3 * bm * 128 * GS_NCH * 2 + 4 * std::max(2 * bm * 32 * 2 + 128 * GS_NCH * 32 * 2, 2 * 128 * GS_NCH * 32 * 2));
    // The forward (staged.rs's forward), then the backward's map kernel.
    u16* out_fwd = tensor(V * C);
    launch((u32)grid_fwd, 256, smem, [&] {
        auto f = sv ? (rot ? map_kernels::gs_fwd_rot_sv : map_kernels::gs_fwd_plain_sv) : (rot ? map_kernels::gs_fwd_rot : map_kernels::gs_fwd_plain);
        f((const T*)grads_re, (const T*)grads_im, (const T*)xt, (const T*)g_in_re, (const T*)g_in_im, (const T*)a_re, (const T*)a_im, nullptr, nullptr, nullptr,
          nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, (T*)out_fwd, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
    });
    launch((u32)grid_bwd, 256, smem, [&] {
        auto f = sv ? (rot ? map_kernels::gs_map_rot_sv : map_kernels::gs_map_plain_sv) : (rot ? map_kernels::gs_map_rot : map_kernels::gs_map_plain);
        f((const T*)grads_re, (const T*)grads_im, (const T*)xt, (const T*)g_in_re, (const T*)g_in_im, (const T*)a_re, (const T*)a_im, (const T*)t_re, (const T*)t_im,
          (const T*)d_out, (T*)gws_re, (T*)gws_im, (T*)p, (T*)q, (T*)dg_re, (T*)dg_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
    });

    // The packed build on packed images (staged.rs's launch sequence with `packed`): the same
    // arithmetic in the same order, so the same bits as the build above.
    {
        const int rpad = 128 * GS_NCH;
        const u16* w_img = rot ? pack({{a_re, false}, {a_im, false}}, 1, (int)C, (int)C, rpad, false) : pack({{a_re, false}}, 1, (int)C, (int)C, rpad, false);
        const u16* t_img = rot ? pack({{a_re, false}, {a_im, true}}, 1, (int)C, (int)C, rpad, true) : pack({{a_re, false}}, 1, (int)C, (int)C, rpad, true);
        const u16* xt_img = spectral ? pack({{x, false}}, M, (int)C, (int)K, rpad, true) : nullptr;
        // The three images again from one gs_pack launch of three jobs (staged.rs's launch_map): the
        // same bits.
        if (spectral) {
            const int nkc = ((int)C + 31) / 32, nkk = ((int)K + 31) / 32, planes = rot ? 2 : 1;
            const size_t nw = (size_t)(planes * nkc * rpad * 32), nx = (size_t)(M * nkk * rpad * 32);
            u16 *w3 = tensor(nw), *x3 = tensor(nx), *t3 = tensor(nw);
            reduce_kernels::GsPackJobs jobs{};
            jobs.job[0] = {(const T*)a_re, (const T*)(rot ? a_im : a_re), (T*)w3, 1, (int)C, (int)C, rpad, nkc, planes, 0, 0};
            jobs.job[1] = {(const T*)x, (const T*)x, (T*)x3, M, (int)C, (int)K, rpad, nkk, 1, 1, 0};
            jobs.job[2] = {(const T*)a_re, (const T*)(rot ? a_im : a_re), (T*)t3, 1, (int)C, (int)C, rpad, nkc, planes, 1, rot ? 2 : 0};
            jobs.njobs = 3;
            gridDim.x = 3;
            blockDim.x = 256;
            for (u32 b = 0; b < 3; ++b)
                for (u32 t = 0; t < 256; ++t) {
                    threadIdx.x = t;
                    blockIdx.x = b;
                    reduce_kernels::gs_pack(jobs);
                }
            if (!same(w3, w_img, (i64)nw) || !same(x3, xt_img, (i64)nx) || !same(t3, t_img, (i64)nw)) {
                std::fprintf(stderr, "one gs_pack launch of three jobs differs from three launches\n");
                return 1;
            }
        }
        u16 *p2 = tensor(V * C), *q2 = tensor(V * C), *dg2_re = tensor(V * C), *dg2_im = tensor(V * C), *out2 = tensor(V * C);
        u16 *gws2_re = spectral ? tensor(V * C) : nullptr, *gws2_im = spectral ? tensor(V * C) : nullptr;
        launch((u32)grid_fwd, 256, smem, [&] {
            auto f = sv ? (rot ? map_kernels_pk::gs_fwd_rot_sv : map_kernels_pk::gs_fwd_plain_sv) : (rot ? map_kernels_pk::gs_fwd_rot : map_kernels_pk::gs_fwd_plain);
            f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, (const T*)g_in_re, (const T*)g_in_im, (const T*)w_img, nullptr, nullptr, nullptr, nullptr,
              nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, (T*)out2, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
        });
        launch((u32)grid_bwd, 256, smem, [&] {
            auto f = sv ? (rot ? map_kernels_pk::gs_map_rot_sv : map_kernels_pk::gs_map_plain_sv) : (rot ? map_kernels_pk::gs_map_rot : map_kernels_pk::gs_map_plain);
            f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, (const T*)g_in_re, (const T*)g_in_im, (const T*)w_img, nullptr, (const T*)t_img, nullptr,
              (const T*)d_out, (T*)gws2_re, (T*)gws2_im, (T*)p2, (T*)q2, (T*)dg2_re, (T*)dg2_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
        });
        const bool ok = same(out2, out_fwd, V * C) && same(p2, p, V * C) && same(q2, q, V * C) && same(dg2_re, dg_re, V * C) && same(dg2_im, dg_im, V * C) &&
                        (!spectral || (same(gws2_re, gws_re, V * C) && same(gws2_im, gws_im, V * C)));
        if (!ok) {
            std::fprintf(stderr, "the packed map kernel differs from the unpacked one\n");
            return 1;
        }
    }
    // The image build (bwd=packed-img), where its `_sv` entries run: d_g the same bits as above, the
    // images of g, P, Q exactly the row-major matrices above tile by tile (zeros elsewhere); d_A from
    // the images by the image reductions, written after the other outputs.
    const int ldi = 128 * GS_NCH;
    const i64 img_rows = ntiles * bm;
    u16 *d_a_img0 = tensor(C * C), *d_a_img1 = tensor(C * C), *d_x_img = tensor(M * K * C);
    u16 *d_a_sv0 = tensor(C * C), *d_a_sv1 = tensor(C * C), *d_x_sv = tensor(M * K * C);
    u16 *d_a_fac0 = tensor(C * C), *d_a_fac1 = tensor(C * C), *d_x_fac = tensor(M * K * C);
    if (sv) {
        const u16* w_img = rot ? pack({{a_re, false}, {a_im, false}}, 1, (int)C, (int)C, ldi, false) : pack({{a_re, false}}, 1, (int)C, (int)C, ldi, false);
        const u16* t_img = rot ? pack({{a_re, false}, {a_im, true}}, 1, (int)C, (int)C, ldi, true) : pack({{a_re, false}}, 1, (int)C, (int)C, ldi, true);
        const u16* xt_img = pack({{x, false}}, M, (int)C, (int)K, ldi, true);
        u16 *p3 = tensor(img_rows * ldi), *q3 = tensor(img_rows * ldi), *g3_re = tensor(img_rows * ldi), *g3_im = tensor(img_rows * ldi);
        u16 *dg3_re = tensor(img_rows * ldi), *dg3_im = tensor(img_rows * ldi);
        launch((u32)grid_bwd, 256, smem, [&] {
            auto f = rot ? map_kernels_img::gs_map_rot_sv : map_kernels_img::gs_map_plain_sv;
            f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, (const T*)t_img, nullptr, (const T*)d_out,
              (T*)g3_re, (T*)g3_im, (T*)p3, (T*)q3, (T*)dg3_re, (T*)dg3_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
        });
        const bool ok = image_matches(dg3_re, dg_re, map_tiles, ntiles, V, C, bm, ldi) && image_matches(dg3_im, dg_im, map_tiles, ntiles, V, C, bm, ldi) &&
                        image_matches(p3, p, map_tiles, ntiles, V, C, bm, ldi) &&
                        image_matches(q3, q, map_tiles, ntiles, V, C, bm, ldi) && image_matches(g3_re, gws_re, map_tiles, ntiles, V, C, bm, ldi) &&
                        image_matches(g3_im, gws_im, map_tiles, ntiles, V, C, bm, ldi);
        if (!ok) {
            std::fprintf(stderr, "the image map kernel differs from the packed one\n");
            return 1;
        }
        reduce_img(rot, p3, q3, g3_re, g3_im, img_rows, ldi, (int)C, (int)C, img_nsplits, img_per, d_a_img0, d_a_img1);
        reduce_dx_img(grads_re, grads_im, dg3_re, dg3_im, map_tiles, V, (int)K, (int)C, bm, plan_dxa, d_x_img, (int)M);

        // Saved b (staged.rs's forward_save and backward with `saved`): the training forward writes
        // out (the same bits as every forward here) and b's tile images; the backward reads them in
        // place of stage 2 (g's images the same bits as the image build's: stage 1 is unchanged), and
        // its gradients go through the image reductions, against the reference like the others.
        {
            u16 *out6 = tensor(V * C), *b6_re = tensor(img_rows * ldi), *b6_im = tensor(img_rows * ldi);
            launch((u32)grid_fwd, 256, smem, [&] {
                auto f = rot ? map_kernels_img::gs_fwd_rot_sv_save : map_kernels_img::gs_fwd_plain_sv_save;
                f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, nullptr, nullptr, nullptr, nullptr,
                  nullptr, nullptr, nullptr, nullptr, nullptr, (T*)out6, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c, (T*)b6_re, (T*)b6_im);
            });
            if (!same(out6, out_fwd, V * C)) {
                std::fprintf(stderr, "the saving forward's out differs from the packed forward's\n");
                return 1;
            }
            u16 *p6 = tensor(img_rows * ldi), *q6 = tensor(img_rows * ldi), *g6_re = tensor(img_rows * ldi), *g6_im = tensor(img_rows * ldi);
            u16 *dg6_re = tensor(img_rows * ldi), *dg6_im = tensor(img_rows * ldi);
            const int plane = bm * 128 * GS_NCH * 2, stage = std::max(2 * bm * 32 * 2 + 128 * GS_NCH * 32 * 2, 2 * 128 * GS_NCH * 32 * 2);
            const u32 smem_saved = (u32)(3 * plane + 4 * std::max(stage, plane));
            launch((u32)grid_bwd, 256, smem_saved, [&] {
                auto f = rot ? map_kernels_img::gs_map_rot_sv_saved : map_kernels_img::gs_map_plain_sv_saved;
                f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, (const T*)t_img, nullptr, (const T*)d_out,
                  (T*)g6_re, (T*)g6_im, (T*)p6, (T*)q6, (T*)dg6_re, (T*)dg6_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c, (T*)b6_re,
                  (T*)b6_im);
            });
            if (!same(g6_re, g3_re, img_rows * ldi) || !same(g6_im, g3_im, img_rows * ldi)) {
                std::fprintf(stderr, "the saved-b map kernel's g images differ from the image build's\n");
                return 1;
            }
            reduce_img(rot, p6, q6, g6_re, g6_im, img_rows, ldi, (int)C, (int)C, img_nsplits, img_per, d_a_sv0, d_a_sv1);
            reduce_dx_img(grads_re, grads_im, dg6_re, dg6_im, map_tiles, V, (int)K, (int)C, bm, plan_dxa, d_x_sv, (int)M);

            // d_A factored through x (staged.rs's backward with `factored`): the same map kernel without
            // g's images (P, Q and d_g the same bits), then reduce_dxa_img.
            u16 *p7 = tensor(img_rows * ldi), *q7 = tensor(img_rows * ldi), *dg7_re = tensor(img_rows * ldi), *dg7_im = tensor(img_rows * ldi);
            launch((u32)grid_bwd, 256, smem_saved, [&] {
                auto f = rot ? map_kernels_img::gs_map_rot_sv_saved : map_kernels_img::gs_map_plain_sv_saved;
                f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, (const T*)t_img, nullptr, (const T*)d_out,
                  nullptr, nullptr, (T*)p7, (T*)q7, (T*)dg7_re, (T*)dg7_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c, (T*)b6_re,
                  (T*)b6_im);
            });
            if (!same(p7, p6, img_rows * ldi) || !same(q7, q6, img_rows * ldi) || !same(dg7_re, dg6_re, img_rows * ldi) || !same(dg7_im, dg6_im, img_rows * ldi)) {
                std::fprintf(stderr, "the map kernel without g's images differs from the one with them\n");
                return 1;
            }
            reduce_dxa(rot, grads_re, grads_im, dg7_re, dg7_im, p7, q7, x, map_tiles, V, (int)K, (int)C, bm, plan_dxa, fin_nsplits, fin_per, (int)M, d_x_fac, d_a_fac0,
                       d_a_fac1);
        }

        // The deferred-store build: the same arithmetic in the same order, so out and the images are
        // the same bits as the builds above (every element: a store skipped or done from a G already
        // overwritten shows). Its backward writes d_g as an image from registers, as the image build.
        u16 *out4 = tensor(V * C), *dg4_re = tensor(img_rows * ldi), *dg4_im = tensor(img_rows * ldi);
        u16 *p4 = tensor(img_rows * ldi), *q4 = tensor(img_rows * ldi), *g4_re = tensor(img_rows * ldi), *g4_im = tensor(img_rows * ldi);
        launch((u32)grid_fwd, 256, smem, [&] {
            auto f = rot ? map_kernels_defer::gs_fwd_rot_sv : map_kernels_defer::gs_fwd_plain_sv;
            f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, nullptr, nullptr, nullptr,
              nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, (T*)out4, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
        });
        launch((u32)grid_bwd, 256, smem, [&] {
            auto f = rot ? map_kernels_defer::gs_map_rot_sv : map_kernels_defer::gs_map_plain_sv;
            f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, (const T*)t_img, nullptr, (const T*)d_out,
              (T*)g4_re, (T*)g4_im, (T*)p4, (T*)q4, (T*)dg4_re, (T*)dg4_im, nullptr, tiles, ntiles, V, (int)K, (int)C, (int)spectral, vec_k, vec_c);
        });
        const bool ok4 = same(out4, out_fwd, V * C) && same(dg4_re, dg3_re, img_rows * ldi) && same(dg4_im, dg3_im, img_rows * ldi) && same(p4, p3, img_rows * ldi) &&
                         same(q4, q3, img_rows * ldi) && same(g4_re, g3_re, img_rows * ldi) && same(g4_im, g3_im, img_rows * ldi);
        if (!ok4) {
            std::fprintf(stderr, "the deferred-store map kernel differs from the image one\n");
            return 1;
        }

        // The packed-pp forward (K ≥ 8, where staged.rs offers it): the same products and epilogue
        // per element in the same order, so out is the same bits as every forward above.
        if (K >= 8) {
            u16* out5 = tensor(V * C);
            const u32 pp_smem = (u32)(2 * 64 * 128 * GS_NCH * 2 + 3 * 16384);
            launch((u32)pp_grid, 128, pp_smem, [&] {
                auto f = rot ? map_kernels_pp::gs_fwd_rot_pp : map_kernels_pp::gs_fwd_plain_pp;
                f((const T*)grads_re, (const T*)grads_im, (const T*)xt_img, nullptr, nullptr, (const T*)w_img, nullptr, nullptr, nullptr, nullptr, nullptr,
                  nullptr, nullptr, nullptr, nullptr, nullptr, (T*)out5, pp_tiles.empty() ? nullptr : pp_tiles.data(), pp_ntiles, V, (int)K, (int)C, (int)spectral,
                  vec_k, vec_c);
            });
            if (!same(out5, out_fwd, V * C)) {
                std::fprintf(stderr, "the packed-pp forward differs from the packed one\n");
                return 1;
            }
            std::fprintf(stderr, "packed-pp forward: %lld row tiles on %lld CTAs, the same bits as packed\n", pp_ntiles, pp_grid);
        }
    }
    const u16* g_re = spectral ? gws_re : g_in_re;
    const u16* g_im = spectral ? gws_im : g_in_im;
    u16 *d_a0 = tensor(C * C), *d_a1 = tensor(C * C);
    reduce(rot, p, q, g_re, g_im, V, (int)C, (int)C, plan_a, d_a0, d_a1, 1);
    u16* d_x = spectral ? tensor(M * K * C) : nullptr;
    if (spectral) reduce(false, grads_re, grads_im, dg_re, dg_im, V, (int)K, (int)C, plan_x, d_x, nullptr, (int)M);

    FILE* out = std::fopen(argv[2], "wb");
    if (!out) return 2;
    std::fwrite(out_fwd, 2, (size_t)(V * C), out);
    if (spectral) {
        std::fwrite(d_x, 2, (size_t)(M * K * C), out);
    } else {
        std::fwrite(dg_re, 2, (size_t)(V * C), out);
        std::fwrite(dg_im, 2, (size_t)(V * C), out);
    }
    std::fwrite(d_a0, 2, (size_t)(C * C), out);
    if (rot) std::fwrite(d_a1, 2, (size_t)(C * C), out);
    if (sv) {
        std::fwrite(d_a_img0, 2, (size_t)(C * C), out);
        if (rot) std::fwrite(d_a_img1, 2, (size_t)(C * C), out);
        std::fwrite(d_x_img, 2, (size_t)(M * K * C), out);
        std::fwrite(d_a_sv0, 2, (size_t)(C * C), out);
        if (rot) std::fwrite(d_a_sv1, 2, (size_t)(C * C), out);
        std::fwrite(d_x_sv, 2, (size_t)(M * K * C), out);
        std::fwrite(d_a_fac0, 2, (size_t)(C * C), out);
        if (rot) std::fwrite(d_a_fac1, 2, (size_t)(C * C), out);
        std::fwrite(d_x_fac, 2, (size_t)(M * K * C), out);
    }
    std::fclose(out);
    return 0;
}
