// Spatial gradient features: the staged backward on Hopper (sm_90a), every product on warpgroup MMA
// (wgmma). Formulas in mod.rs; design, byte and FLOP counts and predictions in NOTES.md (v3).
//
//   gs_map_rot / gs_map_plain   one CTA per tile of vertices: g = grads·x (spectral form), b = g·Aᵀ,
//                               ds = d_out·(1 − tanh²(g_re·b_re + g_im·b_im)), P = ds·g_re,
//                               Q = ds·g_im, d_g = ds·b + [P Q]·conj(A); writes g (spectral form),
//                               P, Q and d_g to device memory, row-major.
//   gs_fwd_rot / gs_fwd_plain   the forward from the same kernel: g, b, out = tanh(g_re·b_re + g_im·b_im).
//   gs_reduce_rot / _sum        split-K reductions over vertices: d_A from P, Q, g; d_x from grads
//                               and d_g; f32 slices per split, summed in split order by gf_reduce
//                               (gradfeat.cu), so the result is the same bits on every run.
//   gs_reduce_rot_img / _sum_img  d_A as above, from the tile images of g, P, Q that the map
//                               kernel's GS_IMG build writes (NOTES.md, v6): copies without bounds.
//   gs_transpose                xᵀ per mesh, A_reᵀ and −A_imᵀ, so that every operand of the map kernel
//                               is K-major.
//
// Specialisations (NVRTC options):
//   GS_DTYPE  1: f16, 2: bf16 (f32 accumulation)
//   GS_KIND   0: the map kernel, 1: reductions and transposes
//   GS_NCH    map kernel: 128-channel chunks held on chip (1: C ≤ 128, 128 rows per CTA;
//             2: C ≤ 256, 64 rows per CTA)
//
// Shared-memory tiles are stored the way wgmma reads them without swizzle: 8×8 core matrices of 128
// contiguous bytes (8 rows of 16 bytes). A tile of R rows × 8·NJ columns, row-major in device memory,
// has element (r, c) at
//   (r/8)·(NJ·128) + (c/8)·128 + (r%8)·16 + (c%8)·2          (gs_off)
// and, numbering its 16-byte chunks in that order, chunk i sits at byte 16·i and holds row
// (i/(8·NJ))·8 + i%8, columns 8·((i/8) % NJ)..+7. Loads and stores walk the chunks in that order:
// consecutive threads touch consecutive shared-memory bytes (no bank conflicts) and each warp moves
// 8 rows × 64 contiguous bytes of device memory.
// - When the columns are the contraction index (K) the tile is K-major for wgmma: leading byte
//   offset (LBO, between the two 8-column halves of a 16-deep step) 128, stride byte offset (SBO,
//   between 8-row groups) NJ·128 — the layout of the forward's wgmma kernel.
// - When the rows are the contraction index (the vertices of the reductions), the same bytes are
//   MN-major (transposed operands): SBO 128 (between 8-column groups of M or N), LBO NJ·128
//   (between 8-row groups of K), following the PTX ISA's canonical layout
//   ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) for MN-major operands without swizzle.
//
// Pipelines: GS_STAGES-deep rings of k-tiles filled by cp.async (16-byte chunks, zero-filled outside
// the matrix; checked scalar loads when rows are not 16-byte aligned). Each compute step issues one
// wgmma group and waits until at most LAG groups are pending, so the tensor cores keep the previous
// step's products while the next step is issued; a slot is refilled only after the products that
// read it have completed (see gs_ring_next).

#if GS_DTYPE == 1
typedef ember_f16 T;
#elif GS_DTYPE == 2
typedef ember_bf16 T;
#else
#error "GS_DTYPE must be 1 (f16) or 2 (bf16)"
#endif

// GS_PP 1 (GS_KIND 0, with GS_PACK): only the forward entries gs_fwd_*_pp, one warpgroup per CTA and
// two CTAs per multiprocessor (NOTES.md, v9).
#ifndef GS_PP
#define GS_PP 0
#endif
#undef GS_THREADS
#if GS_PP
#define GS_THREADS 128
#else
#define GS_THREADS 256
#endif
// GS_PACK 1: the map kernel reads xᵀ and the weights as pre-packed k-tile images (gs_pack), each
// k-tile one contiguous, zero-padded block in the ring slot's own byte order, copied without bounds
// checks or 64-bit index arithmetic; its wgmma descriptors are built once and advanced by constants.
#ifndef GS_PACK
#define GS_PACK 0
#endif
// GS_IMG 1 (with GS_PACK): the `_sv` map kernels write g and P, Q (the d_A operands) as tile images,
// row tile t's on-chip plane copied verbatim to image t, for the image reductions (gs_reduce_*_img).
#ifndef GS_IMG
#define GS_IMG 0
#endif
// GS_DEFER 1 (with GS_PACK): the `_sv` map kernels write a row tile's result (out, or d_g) from G
// while the next row tile's first stage-1 products run, instead of before them (NOTES.md, v7).
#ifndef GS_DEFER
#define GS_DEFER 0
#endif

// ---------------------------------------------------------------------------------------------------
// Primitives: the only inline PTX of this file. A host model (tests.rs) supplies its own versions to
// run these kernels on the CPU, one thread per CUDA thread.
#ifndef GS_HOST_MODEL
#define GS_SMEM_DECL extern __shared__ __align__(16) unsigned char smem[]
// 256 threads: one CTA per multiprocessor; 128 (GS_PP): two.
#define GS_ENTRY(THREADS) extern "C" __global__ void __launch_bounds__(THREADS, 256 / (THREADS))
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GS_HAS_WGMMA 1
#else
#define GS_HAS_WGMMA 0
#endif

__device__ __forceinline__ u32 gs_smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ u32 gs_dynamic_smem_size() {
    u32 r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}
// 16 bytes from global to shared memory; `bytes` < 16 zero-fills the rest (0: all zeros).
__device__ __forceinline__ void gs_cp16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gs_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gs_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void gs_st16(u32 dst, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// 16 bytes to global memory if `ok`, as a predicated store: no branch, so that the loads feeding
// several such stores can all be issued before the first of them.
__device__ __forceinline__ void gs_stg16_if(void* dst, uint4 v, bool ok) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %5, 0; @p st.global.v4.b32 [%0], {%1, %2, %3, %4}; }" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"((int)ok)
                 : "memory");
}
// Shared memory written by ordinary stores or cp.async and read next by wgmma (the async proxy).
__device__ __forceinline__ void gs_fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Accumulators written by ordinary instructions before, or read after, asynchronous wgmma: keep the
// compiler from moving those accesses across the fence or the wait.
__device__ __forceinline__ void gs_fence_regs(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// threadIdx.x read afresh at each use: keeps the compiler from hoisting the per-chunk addresses of
// the tile copies out of the k-loops into registers that the accumulators need (ptxas spilled).
__device__ __forceinline__ int gs_tid() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}
// 2^x and 1/x on the special-function unit, without the range handling of exp2f / __fdividef (the
// arguments of gs_sech2 need none).
__device__ __forceinline__ float gs_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float gs_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// tanh of the forward's 16-bit output: the one-instruction approximation (relative error under
// 2^-10.9, below the output's rounding), as in the fused forward.
__device__ __forceinline__ float gs_tanh_out(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void gs_wg_arrive() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void gs_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gs_wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// d (64×128 per warpgroup, f32) += (SCALE_A·A)·Bᵀ over 16 of depth: A 64×16 and B 128×16 in shared
// memory (descriptors da, db); TRANS = 0: both K-major, 1: both MN-major.
#define GS_WGMMA_ASM(TYPE)                                                                                                        \
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                                                 \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
                 "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "    \
                 "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                     \
                 "%64, %65, 1, %66, 1, %67, %67;"                                                                                  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
                   "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),          \
                   "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),         \
                   "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),         \
                   "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),         \
                   "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),         \
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),         \
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                      \
                 : "l"(da), "l"(db), "n"(SCALE_A), "n"(TRANS))
template <int SCALE_A, int TRANS>
__device__ __forceinline__ void gs_mma(float (&d)[64], u64 da, u64 db) {
#if GS_HAS_WGMMA
#if GS_DTYPE == 2
    GS_WGMMA_ASM("bf16");
#else
    GS_WGMMA_ASM("f16");
#endif
#endif
}
#endif  // GS_HOST_MODEL

// ---------------------------------------------------------------------------------------------------
// Tiles, descriptors, element pairs

// Byte offset of element (r, c) in a tile with NJ 16-byte chunks per row (see the top of the file).
__device__ __forceinline__ u32 gs_off(int r, int c, int nj) { return (u32)((r >> 3) * (nj * 128) + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2); }

// wgmma shared-memory descriptor without swizzle: start address, leading and stride byte offsets.
__device__ __forceinline__ u64 gs_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32);
}

__device__ __forceinline__ u32 gs_bits(T v) { return v.bits; }
__device__ __forceinline__ float gs_half_to_f32(u32 bits) {
#if GS_DTYPE == 2
    return ember_bf16_bits_to_f32(bits);
#else
    return ember_f16_bits_to_f32(bits);
#endif
}
// Two 16-bit values at p (shared memory), as f32; and two f32 stored there rounded.
__device__ __forceinline__ void gs_lds_pair(const unsigned char* p, float& v0, float& v1) {
    const u32 w = *reinterpret_cast<const u32*>(p);
    v0 = gs_half_to_f32(w & 0xffffu);
    v1 = gs_half_to_f32(w >> 16);
}
__device__ __forceinline__ void gs_sts_pair(unsigned char* p, float v0, float v1) { *reinterpret_cast<u32*>(p) = ember_pack2<T>(v0, v1); }
__device__ __forceinline__ u32 gs_lds32(const unsigned char* p) { return *reinterpret_cast<const u32*>(p); }
__device__ __forceinline__ void gs_unpack(u32 w, float& v0, float& v1) {
    v0 = gs_half_to_f32(w & 0xffffu);
    v1 = gs_half_to_f32(w >> 16);
}

// 1 − tanh²(s) = sech²(s) = 4e / (1 + e)² with e = exp(−2|s|) = 2^(−2·log2(e)·|s|): one ex2 and
// one rcp on the special-function unit (d² lies in [1, 4]), relative error ~1e-6 for every s
// (1 − tanh² itself cancels near saturation). Six instructions; __expf and __fdividef took eleven.
__device__ __forceinline__ float gs_sech2(float s) {
    const float e = gs_ex2(fabsf(s) * -2.8853900817779268f);
    const float d = 1.0f + e;
    return 4.0f * e * gs_rcp(d * d);
}

__device__ __forceinline__ void gs_zero(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
}

// One 16-byte chunk (8 elements of row r from column c) by checked scalar loads; zeros outside.
// Branch-free (loads from the matrix's first element where outside), so that it may run while
// wgmma products are in flight: ptxas serialises wgmma across divergent paths.
__device__ __forceinline__ void gs_chunk_scalar(u32 dst, const T* __restrict__ src, i64 ld, i64 row_end, i64 ncols, i64 r, i64 c) {
    u32 w[4] = {0u, 0u, 0u, 0u};
    const bool row_ok = r < row_end;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const bool ok = row_ok && c + e < ncols;
        const u32 b = gs_bits(*(ok ? src + r * ld + c + e : src));
        w[e >> 1] |= (ok ? b : 0u) << (16 * (e & 1));
    }
    gs_st16(dst, w[0], w[1], w[2], w[3]);
}

// Stage rows [row0, row0 + ROWS) × columns [col0, col0 + 8·NJ) of a row-major matrix (leading
// dimension ld; rows at or past row_end and columns at or past ncols read as zero) into the tile at
// dst. `vec`: ld and ncols are multiples of 8, so each chunk is wholly inside or outside and goes by
// cp.async.
template <int ROWS, int NJ>
__device__ __forceinline__ void gs_load_tile(u32 dst, const T* __restrict__ src, i64 ld, i64 row0, i64 row_end, i64 col0, i64 ncols, bool vec) {
    constexpr int N = ROWS * NJ;
    static_assert(ROWS % 8 == 0 && N % GS_THREADS == 0, "tiles of whole 8-row groups, a multiple of the CTA's chunks");
    const int tid = gs_tid();  // once per tile: a read of %tid.x costs a long-latency S2R
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += GS_THREADS) {
        const int i = i0 + tid;
        const i64 r = row0 + (i / (8 * NJ)) * 8 + (i & 7);
        const i64 c = col0 + 8 * ((i >> 3) % NJ);
        const u32 d = dst + 16 * (u32)i;
        if (vec) {
            const bool ok = r < row_end && c < ncols;
            gs_cp16(d, ok ? (const void*)(src + r * ld + c) : (const void*)src, ok ? 16 : 0);
        } else {
            gs_chunk_scalar(d, src, ld, row_end, ncols, r, c);
        }
    }
}

// Write the tile at sp (ROWS × 8·NJ, 16-bit) to rows row0.. (below row_end), columns below ncols, of a
// row-major matrix with leading dimension ld. `vec` as for gs_load_tile.
template <int ROWS, int NJ>
__device__ __forceinline__ void gs_store_tile(const unsigned char* sp, T* __restrict__ dst, i64 ld, i64 row0, i64 row_end, i64 ncols, bool vec) {
    constexpr int N = ROWS * NJ;
    static_assert(ROWS % 8 == 0 && N % GS_THREADS == 0, "tiles of whole 8-row groups, a multiple of the CTA's chunks");
    const int tid = gs_tid();
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += GS_THREADS) {
        const int i = i0 + tid;
        const i64 r = row0 + (i / (8 * NJ)) * 8 + (i & 7);
        const i64 c = 8 * ((i >> 3) % NJ);
        if (r >= row_end || c >= ncols) continue;
        const uint4 v = *reinterpret_cast<const uint4*>(sp + 16 * i);
        T* p = dst + r * ld + c;
        if (vec) {
            *reinterpret_cast<uint4*>(p) = v;
        } else {
            const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (c + e < ncols) p[e].bits = (u16)(w[e >> 1] >> (16 * (e & 1)));
        }
    }
}

// Copy a packed k-tile image (N 16-byte chunks, contiguous and in the tile's byte order, see gs_pack)
// to the tile at dst: chunk i from src + 8·i elements, with no bounds to check. gs_copy_image_from
// takes this thread's first chunk already offset (dst + 16·tid, src + 8·tid).
template <int N>
__device__ __forceinline__ void gs_copy_image_from(u32 d, const T* __restrict__ s) {
    static_assert(N % GS_THREADS == 0, "a multiple of the CTA's chunks");
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += GS_THREADS) gs_cp16(d + 16 * (u32)i0, s + 8 * i0, 16);
}
template <int N>
__device__ __forceinline__ void gs_copy_image(u32 dst, const T* __restrict__ src) {
    const int tid = gs_tid();
    gs_copy_image_from<N>(dst + 16 * (u32)tid, src + 8 * tid);
}

// gs_store_tile for `vec` tiles (ld and ncols multiples of 8) with this thread's chunk positions
// given: all of its chunks are read from shared memory first, then stored by predicated stores, so
// that the stores do not wait on one another's registers (a branch per store kept each read in its
// store's block, where the chunks shared one register set: NOTES.md, v10).
// Chunk i = tid + GS_THREADS·q is row (i / (8·NJ))·8 + i % 8, columns 8·((i / 8) % NJ).., as in
// gs_store_tile.
template <int ROWS, int NJ>
__device__ __forceinline__ void gs_store_tile_vec(const unsigned char* sp, T* __restrict__ dst, i64 ld, i64 row0, i64 row_end, i64 ncols, int tid) {
    constexpr int N = ROWS * NJ, Q = N / GS_THREADS;
    static_assert(ROWS % 8 == 0 && N % GS_THREADS == 0, "tiles of whole 8-row groups, a multiple of the CTA's chunks");
    static_assert((GS_THREADS / 8) % NJ == 0, "a thread's chunks share their columns");
    uint4 v[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) v[q] = *reinterpret_cast<const uint4*>(sp + 16 * (tid + GS_THREADS * q));
    const int c = 8 * ((tid >> 3) % NJ);
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const int i = tid + GS_THREADS * q;
        const i64 r = row0 + (i / (8 * NJ)) * 8 + (i & 7);
        const bool ok = r < row_end && c < ncols;
        gs_stg16_if(dst + (ok ? r * ld + c : 0), v[q], ok);
    }
}

// Write N 16-byte chunks of shared memory at sp to dst, in the same order: a tile image (see gs_map)
// goes out verbatim, each chunk one load and one store at a constant offset from this thread's first.
template <int N>
__device__ __forceinline__ void gs_store_image(const unsigned char* sp, T* __restrict__ dst) {
    static_assert(N % GS_THREADS == 0, "a multiple of the CTA's chunks");
    const int tid = gs_tid();
    const unsigned char* s = sp + 16 * tid;
    T* d = dst + 8 * tid;
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += GS_THREADS) *reinterpret_cast<uint4*>(d + 8 * i0) = *reinterpret_cast<const uint4*>(s + 16 * i0);
}

// A STAGES-slot ring of k-tiles numbered 0..n−1 (possibly spanning several stages of a kernel):
// load(slot, it) issues the copies of tile it. gs_ring_start loads the first STAGES − 1 − LAG tiles;
// gs_ring_next, at the top of iteration it, waits for tile it, then loads tile it + STAGES − 1 − LAG
// into the slot of tile it − 1 − LAG and returns tile it's slot. The caller issues tile it's wgmma
// group, commits it and waits until at most LAG groups are pending (wgmma.wait_group LAG) before
// the next gs_ring_next, and waits for all (wait_group 0) only after its loop over a stage: ptxas
// serialises wgmma when the wait differs between paths. So when every thread passes the barrier in
// gs_ring_next(it), the products of tile it − 1 − LAG have completed in both warpgroups and its slot
// may be refilled. Each thread fences its landed copies (and the shared memory it wrote since the
// last barrier) into the async proxy before the barrier.
template <int STAGES, int LAG, class Load>
__device__ __forceinline__ void gs_ring_start(int n, Load&& load) {
    static_assert(STAGES - 2 - LAG >= 0, "the ring needs a slot in flight, one being read and one being filled");
#pragma unroll 1
    for (int s = 0; s < STAGES - 1 - LAG; ++s) {
        if (s < n) load(s, s);
        gs_commit();
    }
}
template <int STAGES, int LAG, class Load>
__device__ __forceinline__ int gs_ring_next(int it, int n, Load&& load) {
    gs_wait<STAGES - 2 - LAG>();
    gs_fence_async();
    __syncthreads();
    const int next = it + STAGES - 1 - LAG;
    if (next < n) load(next % STAGES, next);
    gs_commit();
    return it % STAGES;
}
// gs_ring_next in two halves, so that a k-tile's products are issued between them: gs_ring_wait(it)
// (tile it landed; the barrier) returns tile it's slot, gs_ring_refill(it) then loads tile
// it + STAGES − 1 − LAG into the slot of tile it − 1 − LAG (free since the barrier, as above) and
// commits its group. The copies' address arithmetic then runs under the products instead of
// between the barrier and their issue (NOTES.md, v10).
template <int STAGES, int LAG>
__device__ __forceinline__ int gs_ring_wait(int it) {
    gs_wait<STAGES - 2 - LAG>();
    gs_fence_async();
    __syncthreads();
    return it % STAGES;
}
template <int STAGES, int LAG, class Load>
__device__ __forceinline__ void gs_ring_refill(int it, int n, Load&& load) {
    const int next = it + STAGES - 1 - LAG;
    if (next < n) load(next % STAGES, next);
    gs_commit();
}

#if GS_KIND == 0
// ---------------------------------------------------------------------------------------------------
// The map kernel. A CTA of two warpgroups owns GS_BM vertices of one mesh and all their channels
// (padded to GS_CPAD); each warpgroup owns one 64-row × 128-channel block of every result (with
// GS_NCH = 2 the two warpgroups split the channels, with 1 the rows), as a "re" and an "im"
// accumulator at the same positions. Three stages run through one pipeline:
//   1. g_re, g_im = grads_re·x, grads_im·x (spectral form; K-deep; B = xᵀ); the epilogue rounds g
//      into the on-chip tile G (in the vertex form G is loaded instead);
//   2. b = g·(A_re + i·A_im)ᵀ (C-deep; A = G, B = A_re, A_im); after every warpgroup's last product
//      the epilogue forms ds from d_out (staged on chip), writes P = ds·g_re, Q = ds·g_im over G
//      in place (the thread that reads an element of G writes it) and keeps ds·b in the accumulators;
//   3. d_g = ds·b + [P Q]·conj(A) (C-deep; A = P, Q from G; B = A_reᵀ, −A_imᵀ), accumulated onto
//      ds·b; the epilogue stages d_g in G and writes it out.
// G goes to device memory twice while the next stage's first products run: g (spectral form, for
// d_A) and P, Q. Every write to device memory is a 16-byte store of 8 channels.
// The forward (FWD) runs stages 1 and 2 only; its epilogue writes out = tanh(g_re·b_re + g_im·b_im)
// over G and from there to device memory.
#if GS_NCH == 1
#define GS_BM 128
#elif GS_NCH == 2
#define GS_BM 64
#else
#error "GS_NCH must be 1 or 2"
#endif
#define GS_CPAD (128 * GS_NCH)
#define GS_NJ (GS_CPAD / 8)             // 16-byte chunks per row of the on-chip tiles
#define GS_PLANE (GS_BM * GS_CPAD * 2)  // bytes of one on-chip plane (32 KB)
#define GS_BK 32                         // depth of a k-tile
#define GS_STAGES 4
#define GS_LAG 1
#define GS_STAGE_G (2 * GS_BM * GS_BK * 2 + GS_CPAD * GS_BK * 2)  // grads_re, grads_im, xᵀ
#define GS_STAGE_W (2 * GS_CPAD * GS_BK * 2)                      // two weight planes
#define GS_STAGE (GS_STAGE_G > GS_STAGE_W ? GS_STAGE_G : GS_STAGE_W)
// Shared memory: G (2 planes), the d_out tile and the ring, 3·GS_PLANE + GS_STAGES·(slot) with the
// slot GS_STAGE (STAGE in gs_map: larger with saved b and one chunk): 224 KB with GS_NCH = 2.
// Mirrors map_smem_bytes and map_smem_bytes_saved in staged.rs.

struct MapArgs {
    const T* grads_re;
    const T* grads_im;
    const T* xt;  // spectral form: xᵀ, one C×K block per mesh
    const T* g_re;  // vertex form
    const T* g_im;
    const T* w_re;  // A_re, A_im (C×C, row c: output channel)
    const T* w_im;
    const T* t_re;  // A_reᵀ, −A_imᵀ (without rotations: t_re = Aᵀ)
    const T* t_im;
    const T* d_out;
    T* gws_re;  // spectral form: g, for d_A
    T* gws_im;
    T* p;  // P, Q
    T* q;
    T* dg_re;  // d_g: the outputs (vertex form) or a workspace for d_x
    T* dg_im;
    T* out;  // the forward's output
    const i64* tiles;  // batches: (first row, end of the mesh's rows, mesh) per row tile; null: one mesh
    i64 ntiles;        // row tiles
    i64 V;
    int K, C, spectral, vec_k, vec_c;
    // Saved b (GS_IMG builds' *_save / *_saved entries; null elsewhere): b_re, b_im as tile images,
    // written by the training forward, read by the backward instead of recomputing b (NOTES.md, v13).
    T* b_re;
    T* b_im;
};

#if !GS_PP
// SAVE (GS_IMG builds, `_sv` entries only): the forward also writes b_re, b_im as tile images
// (straight from the accumulators, in their fragment order); the backward takes them instead of
// stage 2's products.
// Its ring then carries, between stage 1 and stage 3, two image tiles per row tile (b_re with d_out,
// then b_im), and the ds epilogue reads b from their slots (NOTES.md, v13).
template <bool ROT, bool FWD, bool SV, bool SAVE = false>
__device__ __forceinline__ void gs_map(const MapArgs& a) {
#if !GS_HAS_WGMMA
    __trap();  // launched on sm_90a only; other targets build the module for the compile test
#else
    static_assert(!SAVE || (GS_IMG && GS_PACK && SV), "saved b: the image build's _sv entries only");
    constexpr bool SAVED = SAVE && !FWD;  // the backward reads b's images
    // A ring slot holds a k-tile, or (SAVED) one plane of b's tile image.
    constexpr u32 STAGE = SAVED && GS_PLANE > GS_STAGE ? GS_PLANE : GS_STAGE;
    GS_SMEM_DECL;
    const u32 sbase = gs_smem_addr(smem);
    const u32 sG = sbase, sD = sbase + 2 * GS_PLANE, sR = sbase + 3 * GS_PLANE;
    unsigned char* const pG = smem;
    const unsigned char* const pD = smem + 2 * GS_PLANE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wg = warp >> 2, wr = warp & 3;
    const int wrow = GS_NCH == 1 ? 64 * wg : 0;   // the warpgroup's rows in the tile
    const int wcol = GS_NCH == 1 ? 0 : 128 * wg;  // and channels
    if (threadIdx.x == 0 && gs_dynamic_smem_size() < 3u * GS_PLANE + GS_STAGES * STAGE) __trap();  // launch code and kernel disagree

    // Row tiles blockIdx.x, + gridDim.x, …: several per CTA in the spectral form (a persistent grid,
    // whose ring runs on into the next tile's first k-tiles, so only the CTA's first tile waits for a
    // pipeline fill); one in the vertex form, where the ring loads G, which must not be refilled while
    // the previous tile still uses it.
    struct Rows {
        i64 row0, row_end;
        int mesh;
    };
    auto rows_of = [&](i64 t) -> Rows {
        if (a.tiles) return {a.tiles[3 * t], a.tiles[3 * t + 1], (int)a.tiles[3 * t + 2]};
        return {t * GS_BM, a.V, 0};
    };
    const int C = a.C, K = a.K;
    // SV: the spectral form with K and C multiples of 8, as compile-time facts, so that neither the
    // scalar copies nor the vertex form's loads of G are compiled in (a third of the code; the
    // general kernel overflowed the instruction cache: NOTES.md, v4).
    const bool spectral = SV || a.spectral != 0;
    const bool vk = SV || a.vec_k != 0, vc = SV || a.vec_c != 0;
    const int nk1 = spectral ? (K + GS_BK - 1) / GS_BK : 0;
    const int nk2 = (C + GS_BK - 1) / GS_BK;
    const int n2 = SAVED ? 2 : nk2;                   // ring tiles of stage 2 (SAVED: b's two planes)
    const int per = nk1 + (FWD ? nk2 : n2 + nk2);  // ring tiles per row tile
    // IMG: g, P and Q go out as tile images (GS_IMG; the spectral form only): row tile t's plane of G,
    // GS_BM × GS_CPAD in G's own byte order, verbatim at element t·GS_BM·GS_CPAD of its workspace. G
    // is zero at rows past the mesh (grads and d_out zero-filled) and channels past C (xᵀ's image
    // zero-padded), so the image reductions sum whole images without bounds.
    // d_g, too, goes out as an image, straight from the accumulators (d_x's reduction reads it:
    // gs_reduce_dx*_img; NOTES.md, v11).
    constexpr bool IMG = GS_IMG && GS_PACK && SV && !FWD;
    // DEFER: row tile j's last store (out, or d_g) reads G after tile j + 1's first stage-1 products
    // are issued: stage 1 reads only the ring, and G is next written by stage 1's epilogue, which
    // every thread reaches only after a barrier that follows its deferred reads (gs_ring_wait's of
    // the second k-tile, or the one below when stage 1 has a single k-tile). The CTA's last tile is
    // written after the loop. SV implies the spectral form (the vertex form loads G through the ring).
    // The image build stores d_g from registers, not through G: nothing to defer there.
    constexpr bool DEFER = GS_DEFER && GS_PACK && SV && !IMG;
    const int mine = (int)((a.ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x);  // the launch keeps mine·per < 2³¹
    constexpr u32 GSBO = GS_NJ * 128;  // SBO of the on-chip tiles
    float re[64], im[64];

    // Ring tile it = j·per + local: row tile j of this CTA; stage 1 (local < nk1): grads_re, grads_im,
    // xᵀ; stage 2: A_re, A_im (with the first one, d_out and, in the vertex form, G), or (SAVED) the
    // images of b_re (with d_out) and b_im; stage 3: A_reᵀ, −A_imᵀ.
    const int n = mine * per;
    // The ring's tiles are loaded in order, 0, 1, 2, … (gs_ring_start, then one per gs_ring_refill), so
    // the loader keeps its place — row tile lj of this CTA, ring tile lk within it, and that row
    // tile's rows — and steps by one per call: no integer division, 64-bit multiply or table load per
    // k-tile (NOTES.md, v10).
    int lj = 0, lk = 0;
    Rows lr = mine > 0 ? rows_of(blockIdx.x) : Rows{0, 0, 0};
    // Per-thread parts of the copies, set once. Stage 1's grads k-tile (GS_BM × 32, 4 chunks per row)
    // gives this thread chunks tid + GS_THREADS·q: rows g_row + 64·q, columns g_col..g_col + 7 (as in
    // gs_load_tile); the images' chunks start at 16·tid bytes / 8·tid elements.
    const int tid = threadIdx.x;
    const u32 my16 = 16 * (u32)tid, my8 = 8 * (u32)tid;
    constexpr int GQ = GS_BM * 4 / GS_THREADS;
    static_assert(GQ * GS_THREADS == GS_BM * 4 && (GS_THREADS / 8) % 4 == 0, "whole chunks per thread, one column per thread");
    const int g_row = (tid >> 5) * 8 + (tid & 7), g_col = 8 * ((tid >> 3) & 3);
    // Stage 1's grads k-tile kt of the row tile with rows r (both planes, GS_BM × 32 each) at dst.
    auto grads_tile = [&](u32 dst, const Rows& r, int kt) {
        const int k0 = kt * GS_BK;
        if (SV) {
            // K is a multiple of 8: a chunk is wholly inside the matrix or outside.
            const bool kin = k0 + g_col < K;
#pragma unroll
            for (int q = 0; q < GQ; ++q) {
                const i64 row = r.row0 + g_row + 64 * q;
                const bool ok = kin && row < r.row_end;
                const i64 off = ok ? row * K + k0 + g_col : 0;
                gs_cp16(dst + my16 + 16 * GS_THREADS * q, a.grads_re + off, ok ? 16 : 0);
                gs_cp16(dst + GS_BM * 64 + my16 + 16 * GS_THREADS * q, a.grads_im + off, ok ? 16 : 0);
            }
        } else {
            gs_load_tile<GS_BM, 4>(dst, a.grads_re, K, r.row0, r.row_end, k0, K, vk);
            gs_load_tile<GS_BM, 4>(dst + GS_BM * 64, a.grads_im, K, r.row0, r.row_end, k0, K, vk);
        }
    };
    auto load = [&](int slot, int it) {
#ifdef GS_HOST_MODEL
        if (it != lj * per + lk) __trap();  // the ring's loads out of order
#endif
        (void)it;
        const Rows r = lr;
        const int local = lk, jl = lj;
        if (++lk == per) {
            lk = 0;
            ++lj;
            if (lj < mine) lr = rows_of(blockIdx.x + (i64)lj * gridDim.x);
        }
        const u32 s = sR + slot * STAGE;
        if (local < nk1) {
            grads_tile(s, r, local);
#if GS_PACK
            gs_copy_image_from<GS_CPAD * 4>(s + 2 * GS_BM * 64 + my16, a.xt + ((i64)r.mesh * nk1 + local) * (GS_CPAD * GS_BK) + my8);
#else
            gs_load_tile<GS_CPAD, 4>(s + 2 * GS_BM * 64, a.xt + (i64)r.mesh * C * K, K, 0, C, local * GS_BK, K, vk);
#endif
            return;
        }
        if (SAVED && local < nk1 + 2) {
            // One plane of this row tile's b image, verbatim (GS_BM × GS_CPAD values in fragment order).
            if (local == nk1) gs_load_tile<GS_BM, GS_NJ>(sD, a.d_out, C, r.row0, r.row_end, 0, C, true);
            const T* b = (local == nk1 ? a.b_re : a.b_im) + (blockIdx.x + (i64)jl * gridDim.x) * (GS_BM * GS_CPAD);
            gs_copy_image_from<GS_BM * GS_NJ>(s + my16, b + my8);
            return;
        }
        const bool map2 = !SAVED && local < nk1 + nk2;
        const int kt = map2 ? local - nk1 : local - nk1 - n2;
        if (map2 && kt == 0) {
            if (!FWD) gs_load_tile<GS_BM, GS_NJ>(sD, a.d_out, C, r.row0, r.row_end, 0, C, vc);
            if (!spectral) {
                gs_load_tile<GS_BM, GS_NJ>(sG, a.g_re, C, r.row0, r.row_end, 0, C, vc);
                gs_load_tile<GS_BM, GS_NJ>(sG + GS_PLANE, a.g_im, C, r.row0, r.row_end, 0, C, vc);
            }
        }
#if GS_PACK
        // Both planes of the k-tile, one block: A_re | A_im (stage 2), A_reᵀ | −A_imᵀ (stage 3).
        gs_copy_image_from<(ROT ? 2 : 1) * GS_CPAD * 4>(s + my16, (map2 ? a.w_re : a.t_re) + kt * ((ROT ? 2 : 1) * GS_CPAD * GS_BK) + my8);
#else
        const i64 k0 = (i64)kt * GS_BK;
        gs_load_tile<GS_CPAD, 4>(s, map2 ? a.w_re : a.t_re, C, 0, C, k0, C, vc);
        if (ROT) gs_load_tile<GS_CPAD, 4>(s + GS_CPAD * 64, map2 ? a.w_im : a.t_im, C, 0, C, k0, C, vc);
#endif
    };
    // One 32-deep k-tile of stages 2 and 3 (the same products: with B = A_reᵀ, −A_imᵀ in stage 3
    //   re += g_re·A_reᵀ − g_im·A_imᵀ = b_re      becomes  re += P·A_re + Q·A_im,
    //   im += g_im·A_reᵀ + g_re·A_imᵀ = b_im      becomes  im += Q·A_re − P·A_im,
    // the terms of d_g = ds·b + [P Q]·conj(A); without rotations re += a0·B, im += a1·B).
#if GS_PACK
    // Descriptor bases: this warpgroup's rows of G (k = 0) and its channels in ring slot 0.
    const u64 dG = gs_desc(sG + gs_off(wrow, 0, GS_NJ), 128, GSBO);
    const u64 dS = gs_desc(sR + gs_off(wcol, 0, 4), 128, 512);
    const u64 dS1 = gs_desc(sR + gs_off(wrow, 0, 4), 128, 512);  // stage 1's grads rows
#endif
    auto map_step = [&](u32 s, int kt) {
        gs_fence_regs(re);
        gs_fence_regs(im);
        gs_wg_arrive();
#pragma unroll
        for (int ks = 0; ks < GS_BK / 16; ++ks) {
#if GS_PACK
            // Descriptors advanced from bases built once: a descriptor's low 14 bits are the address / 16,
            // and every address here stays inside shared memory, so adding (bytes / 16) moves it.
            const u64 a0 = dG + (u64)((kt * GS_BK + 16 * ks) / 8 * 128 / 16);  // g_re, or P
            const u64 a1 = a0 + GS_PLANE / 16;                                  // g_im, or Q
            const u64 b0 = dS + (s - sR) / 16 + (u64)(gs_off(0, 16 * ks, 4) / 16);  // A_re, or A_reᵀ
            if (ROT) {
                const u64 b1 = b0 + GS_CPAD * 64 / 16;  // A_im, or −A_imᵀ
#else
            const int k = kt * GS_BK + 16 * ks;
            const u64 a0 = gs_desc(sG + gs_off(wrow, k, GS_NJ), 128, GSBO);             // g_re, or P
            const u64 a1 = gs_desc(sG + GS_PLANE + gs_off(wrow, k, GS_NJ), 128, GSBO);  // g_im, or Q
            const u64 b0 = gs_desc(s + gs_off(wcol, 16 * ks, 4), 128, 512);             // A_re, or A_reᵀ
            if (ROT) {
                const u64 b1 = gs_desc(s + GS_CPAD * 64 + gs_off(wcol, 16 * ks, 4), 128, 512);  // A_im, or −A_imᵀ
#endif
                gs_mma<1, 0>(re, a0, b0);
                gs_mma<-1, 0>(re, a1, b1);
                gs_mma<1, 0>(im, a1, b0);
                gs_mma<1, 0>(im, a0, b1);
            } else {
                gs_mma<1, 0>(re, a0, b0);
                gs_mma<1, 0>(im, a1, b0);
            }
        }
        gs_wg_commit();
    };

    // The last store of a row tile (rows [row0, row_end)) from G: the forward's out, the backward's d_g.
    auto store_result = [&](i64 row0, i64 row_end) {
        if (SV) {
            if (FWD) {
                gs_store_tile_vec<GS_BM, GS_NJ>(pG, a.out, C, row0, row_end, C, tid);
            } else {
                gs_store_tile_vec<GS_BM, GS_NJ>(pG, a.dg_re, C, row0, row_end, C, tid);
                gs_store_tile_vec<GS_BM, GS_NJ>(pG + GS_PLANE, a.dg_im, C, row0, row_end, C, tid);
            }
        } else if (FWD) {
            gs_store_tile<GS_BM, GS_NJ>(pG, a.out, C, row0, row_end, C, vc);
        } else {
            gs_store_tile<GS_BM, GS_NJ>(pG, a.dg_re, C, row0, row_end, C, vc);
            gs_store_tile<GS_BM, GS_NJ>(pG + GS_PLANE, a.dg_im, C, row0, row_end, C, vc);
        }
    };
    auto store_tile_result = [&](int j) {
        const Rows r = rows_of(blockIdx.x + (i64)j * gridDim.x);
        store_result(r.row0, r.row_end);
    };
    // The accumulators (rounded) to a tile image at element `img` of dst_re, dst_im: for each (i, h) a
    // warp's 32 pairs are one 8 × 8 block of the image, 128 contiguous bytes.
    auto store_acc_image = [&](T* dst_re, T* dst_im, i64 img) {
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const i64 off = img + ((wrow + 16 * wr + 8 * h) >> 3) * (8 * GS_CPAD) + ((wcol >> 3) + i) * 64 + 8 * gq + 2 * tq;
                *reinterpret_cast<u32*>(dst_re + off) = ember_pack2<T>(re[4 * i + 2 * h], re[4 * i + 2 * h + 1]);
                *reinterpret_cast<u32*>(dst_im + off) = ember_pack2<T>(im[4 * i + 2 * h], im[4 * i + 2 * h + 1]);
            }
    };
    // The accumulators (rounded) in fragment order, the layout of saved b's images: chunk q of this
    // thread (accumulators 8q..8q + 7, i.e. the pairs of column groups i = 2q, 2q + 1, rows h = 0, 1)
    // at 16-byte chunk q·GS_THREADS + tid of the row tile's plane. Each warp store is 512 contiguous
    // bytes, 8 per plane and thread (the G-order image above takes 32 four-byte stores); the
    // backward's ds epilogue reads the chunks back with one 16-byte load each.
    auto store_acc_fragments = [&](T* dst_re, T* dst_im, i64 img) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const i64 off = img + 8 * ((i64)q * GS_THREADS + tid);
            const uint4 r = {ember_pack2<T>(re[8 * q], re[8 * q + 1]), ember_pack2<T>(re[8 * q + 2], re[8 * q + 3]), ember_pack2<T>(re[8 * q + 4], re[8 * q + 5]),
                             ember_pack2<T>(re[8 * q + 6], re[8 * q + 7])};
            const uint4 m = {ember_pack2<T>(im[8 * q], im[8 * q + 1]), ember_pack2<T>(im[8 * q + 2], im[8 * q + 3]), ember_pack2<T>(im[8 * q + 4], im[8 * q + 5]),
                             ember_pack2<T>(im[8 * q + 6], im[8 * q + 7])};
            *reinterpret_cast<uint4*>(dst_re + off) = r;
            *reinterpret_cast<uint4*>(dst_im + off) = m;
        }
    };

    gs_ring_start<GS_STAGES, GS_LAG>(n, load);
#pragma unroll 1
    for (int j = 0; j < mine; ++j) {
        const Rows rows = rows_of(blockIdx.x + (i64)j * gridDim.x);
        const i64 row0 = rows.row0, row_end = rows.row_end;
        const int base = j * per;
        const i64 img = (blockIdx.x + (i64)j * gridDim.x) * (GS_BM * GS_CPAD);  // IMG: this row tile's image

        // ---- stage 1: g = grads·x into G ----
        if (spectral) {
            gs_zero(re);
            gs_zero(im);
#pragma unroll 1
            for (int it = base; it < base + nk1; ++it) {
                const u32 s = sR + gs_ring_wait<GS_STAGES, GS_LAG>(it) * STAGE;
                gs_fence_regs(re);
                gs_fence_regs(im);
                gs_wg_arrive();
#pragma unroll
                for (int ks = 0; ks < GS_BK / 16; ++ks) {
#if GS_PACK
                    const u64 ar = dS1 + (s - sR) / 16 + (u64)(gs_off(0, 16 * ks, 4) / 16);
                    const u64 ai = ar + GS_BM * 64 / 16;
                    const u64 bx = dS + (s - sR) / 16 + (u64)((2 * GS_BM * 64 + gs_off(0, 16 * ks, 4)) / 16);
#else
                    const u64 ar = gs_desc(s + gs_off(wrow, 16 * ks, 4), 128, 512);
                    const u64 ai = gs_desc(s + GS_BM * 64 + gs_off(wrow, 16 * ks, 4), 128, 512);
                    const u64 bx = gs_desc(s + 2 * GS_BM * 64 + gs_off(wcol, 16 * ks, 4), 128, 512);
#endif
                    gs_mma<1, 0>(re, ar, bx);
                    gs_mma<1, 0>(im, ai, bx);
                }
                gs_wg_commit();
                gs_ring_refill<GS_STAGES, GS_LAG>(it, n, load);
                // While the first products run: the previous row tile's result, from G.
                if (DEFER && j > 0 && it == base) store_tile_result(j - 1);
                gs_wg_wait<GS_LAG>();
            }
            gs_wg_wait<0>();
            gs_fence_regs(re);
            gs_fence_regs(im);
            // With one k-tile no gs_ring_wait barrier followed the deferred reads of G.
            if (DEFER && j > 0 && nk1 == 1) __syncthreads();
            // Nothing reads G during stage 1; the next barrier orders these stores before stage 2.
#pragma unroll
            for (int i = 0; i < 16; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * i + 2 * tq, GS_NJ);
                    gs_sts_pair(pG + off, re[4 * i + 2 * h], re[4 * i + 2 * h + 1]);
                    gs_sts_pair(pG + GS_PLANE + off, im[4 * i + 2 * h], im[4 * i + 2 * h + 1]);
                }
        }

        // G's two planes to device memory, as this row tile's images or row-major: g (for d_A, while
        // stage 2's first products run, or b's second plane lands; not where d_A is factored through
        // x and gws_re is null: NOTES.md, v14), then P and Q (while stage 3's first products run).
        auto store_planes = [&](T* dst_re, T* dst_im) {
            if (IMG) {
                gs_store_image<GS_BM * GS_NJ>(pG, dst_re + img);
                gs_store_image<GS_BM * GS_NJ>(pG + GS_PLANE, dst_im + img);
            } else {
                gs_store_tile<GS_BM, GS_NJ>(pG, dst_re, C, row0, row_end, C, vc);
                gs_store_tile<GS_BM, GS_NJ>(pG + GS_PLANE, dst_im, C, row0, row_end, C, vc);
            }
        };
        if (SAVED) {
            // ---- stage 2 (saved b): its two planes through the ring, no products ----
            // After the second wait's barrier G (stage 1's epilogue), d_out and both planes are in
            // shared memory; the slots are refilled only at stage 3's first two waits, after the
            // epilogue below has read them.
#pragma unroll 1
            for (int it = base + nk1; it < base + nk1 + 2; ++it) {
                gs_ring_wait<GS_STAGES, GS_LAG>(it);
                gs_ring_refill<GS_STAGES, GS_LAG>(it, n, load);
                if (it == base + nk1 && a.gws_re) store_planes(a.gws_re, a.gws_im);
            }
        } else {
            // ---- stage 2: b = g·(A_re + i·A_im)ᵀ ----
            gs_zero(re);
            gs_zero(im);
#pragma unroll 1
            for (int it = base + nk1; it < base + nk1 + nk2; ++it) {
                map_step(sR + gs_ring_wait<GS_STAGES, GS_LAG>(it) * STAGE, it - base - nk1);
                gs_ring_refill<GS_STAGES, GS_LAG>(it, n, load);
                if (!FWD && it == base + nk1 && spectral && a.gws_re) store_planes(a.gws_re, a.gws_im);
                gs_wg_wait<GS_LAG>();
            }
            gs_wg_wait<0>();
            gs_fence_regs(re);
            gs_fence_regs(im);
            // The training forward's b, straight from the accumulators to its tile image.
            if (SAVE && FWD) store_acc_fragments(a.b_re, a.b_im, img);
            // Both warpgroups' products, which read all of G, and the copies of G are done before G is
            // overwritten.
            __syncthreads();
        }
        if (FWD) {
            // out = tanh(g_re·b_re + g_im·b_im) over G's first plane, then to device memory. A thread
            // reads its g of EB column groups before writing any of them: the writes go to the plane
            // the reads come from, so the compiler keeps every read after the writes before it, and
            // read → tanh → write ran as one dependent chain per pair (NOTES.md, v10).
            constexpr int EB = 4;
#pragma unroll
            for (int i0 = 0; i0 < 16; i0 += EB) {
                u32 wre[EB][2], wim[EB][2];
#pragma unroll
                for (int i = 0; i < EB; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * (i0 + i) + 2 * tq, GS_NJ);
                        wre[i][h] = gs_lds32(pG + off);
                        wim[i][h] = gs_lds32(pG + GS_PLANE + off);
                    }
#pragma unroll
                for (int i = 0; i < EB; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int e = 4 * (i0 + i) + 2 * h;
                        const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * (i0 + i) + 2 * tq, GS_NJ);
                        float gr0, gr1, gi0, gi1;
                        gs_unpack(wre[i][h], gr0, gr1);
                        gs_unpack(wim[i][h], gi0, gi1);
                        gs_sts_pair(pG + off, gs_tanh_out(gr0 * re[e] + gi0 * im[e]), gs_tanh_out(gr1 * re[e + 1] + gi1 * im[e + 1]));
                    }
            }
            if (DEFER) continue;  // the next gs_ring_wait's barrier (or the one after the loop) orders it
            __syncthreads();
            store_result(row0, row_end);
            continue;
        }
        // ds; P, Q over G (each thread rewrites the elements it read); ds·b stays in the accumulators.
        // Outside the problem d_out was staged as zeros, so ds, P and Q are zero there. Reads of EB
        // column groups first, as in the forward's epilogue. b: the accumulators, or (SAVED) the
        // planes of its image (fragment order: see store_acc_fragments) in the ring slots of stage 2's
        // two tiles, chunk i0 / 2 of this thread holding the pairs of column groups i0, i0 + 1.
        const unsigned char* const pBre = smem + 3 * GS_PLANE + ((base + nk1) % GS_STAGES) * STAGE;
        const unsigned char* const pBim = smem + 3 * GS_PLANE + ((base + nk1 + 1) % GS_STAGES) * STAGE;
        constexpr int EB = 2;
        static_assert(EB == 2, "one saved-b chunk per step");
#pragma unroll
        for (int i0 = 0; i0 < 16; i0 += EB) {
            u32 wre[EB][2], wim[EB][2], wd[EB][2];
            uint4 cbr, cbi;
            if (SAVED) {
                cbr = *reinterpret_cast<const uint4*>(pBre + 16 * ((i0 / 2) * GS_THREADS + tid));
                cbi = *reinterpret_cast<const uint4*>(pBim + 16 * ((i0 / 2) * GS_THREADS + tid));
            }
#pragma unroll
            for (int i = 0; i < EB; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * (i0 + i) + 2 * tq, GS_NJ);
                    wre[i][h] = gs_lds32(pG + off);
                    wim[i][h] = gs_lds32(pG + GS_PLANE + off);
                    wd[i][h] = gs_lds32(pD + off);
                }
#pragma unroll
            for (int i = 0; i < EB; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int e = 4 * (i0 + i) + 2 * h;
                    const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * (i0 + i) + 2 * tq, GS_NJ);
                    float gr0, gr1, gi0, gi1, d0, d1, br0, br1, bi0, bi1;
                    gs_unpack(wre[i][h], gr0, gr1);
                    gs_unpack(wim[i][h], gi0, gi1);
                    gs_unpack(wd[i][h], d0, d1);
                    if (SAVED) {
                        const int w = 2 * i + h;  // the pair's word in the chunk
                        gs_unpack(w == 0 ? cbr.x : w == 1 ? cbr.y : w == 2 ? cbr.z : cbr.w, br0, br1);
                        gs_unpack(w == 0 ? cbi.x : w == 1 ? cbi.y : w == 2 ? cbi.z : cbi.w, bi0, bi1);
                    } else {
                        br0 = re[e], br1 = re[e + 1], bi0 = im[e], bi1 = im[e + 1];
                    }
                    const float ds0 = d0 * gs_sech2(gr0 * br0 + gi0 * bi0);
                    const float ds1 = d1 * gs_sech2(gr1 * br1 + gi1 * bi1);
                    gs_sts_pair(pG + off, ds0 * gr0, ds1 * gr1);
                    gs_sts_pair(pG + GS_PLANE + off, ds0 * gi0, ds1 * gi1);
                    re[e] = br0 * ds0;
                    re[e + 1] = br1 * ds1;
                    im[e] = bi0 * ds0;
                    im[e + 1] = bi1 * ds1;
                }
        }

        // ---- stage 3: d_g = ds·b + [P Q]·conj(A), accumulated onto ds·b ----
#pragma unroll 1
        for (int it = base + nk1 + n2; it < base + per; ++it) {
            map_step(sR + gs_ring_wait<GS_STAGES, GS_LAG>(it) * STAGE, it - base - nk1 - n2);
            gs_ring_refill<GS_STAGES, GS_LAG>(it, n, load);
            if (it == base + nk1 + n2) store_planes(a.p, a.q);  // P, Q for d_A, under the first products
            gs_wg_wait<GS_LAG>();
        }
        gs_wg_wait<0>();
        gs_fence_regs(re);
        gs_fence_regs(im);
        if (IMG) {
            // d_g to its image straight from the accumulators. No barrier: G is next written by the
            // next tile's stage-1 epilogue, after the barriers of its k-loop, which every thread reaches
            // only after its wait above.
            store_acc_image(a.dg_re, a.dg_im, img);
            continue;
        }
        __syncthreads();
        // d_g through G to device memory.
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 off = gs_off(wrow + 16 * wr + gq + 8 * h, wcol + 8 * i + 2 * tq, GS_NJ);
                gs_sts_pair(pG + off, re[4 * i + 2 * h], re[4 * i + 2 * h + 1]);
                gs_sts_pair(pG + GS_PLANE + off, im[4 * i + 2 * h], im[4 * i + 2 * h + 1]);
            }
        if (DEFER) continue;  // as in the forward
        __syncthreads();
        store_result(row0, row_end);
    }  // row tiles
    if (DEFER && mine > 0) {
        __syncthreads();  // the last epilogue's writes of G
        store_tile_result(mine - 1);
    }
    gs_wait<0>();  // the ring's last (empty) groups
#endif
}

#define GS_MAP_ENTRY(NAME, ROT, FWD, SV)                                                                                           \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* grads_re, const T* grads_im, const T* xt, const T* g_re, const T* g_im, const T* w_re, const T* w_im,          \
         const T* t_re, const T* t_im, const T* d_out, T* gws_re, T* gws_im, T* p, T* q, T* dg_re, T* dg_im, T* out,            \
         const i64* tiles, i64 ntiles, i64 V, int K, int C, int spectral, int vec_k, int vec_c) {                                \
        const MapArgs a = {grads_re, grads_im, xt,    g_re,  g_im,  w_re,   w_im, t_re, t_im,     d_out, gws_re, gws_im, p,     \
                           q,        dg_re,    dg_im, out,   tiles, ntiles, V,    K,    C,        spectral, vec_k, vec_c};     \
        gs_map<ROT, FWD, SV>(a);                                                                                                  \
    }
// *_sv: only for the spectral form with K and C multiples of 8 (the launch code checks).
GS_MAP_ENTRY(gs_map_rot, true, false, false)
GS_MAP_ENTRY(gs_map_plain, false, false, false)
GS_MAP_ENTRY(gs_fwd_rot, true, true, false)
GS_MAP_ENTRY(gs_fwd_plain, false, true, false)
GS_MAP_ENTRY(gs_map_rot_sv, true, false, true)
GS_MAP_ENTRY(gs_map_plain_sv, false, false, true)
GS_MAP_ENTRY(gs_fwd_rot_sv, true, true, true)
GS_MAP_ENTRY(gs_fwd_plain_sv, false, true, true)
#if GS_IMG && !GS_DEFER
// Saved b (the image build only): the training forward writes b's images, the backward reads them.
#define GS_MAP_SAVE_ENTRY(NAME, ROT, FWD)                                                                                          \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* grads_re, const T* grads_im, const T* xt, const T* g_re, const T* g_im, const T* w_re, const T* w_im,          \
         const T* t_re, const T* t_im, const T* d_out, T* gws_re, T* gws_im, T* p, T* q, T* dg_re, T* dg_im, T* out,            \
         const i64* tiles, i64 ntiles, i64 V, int K, int C, int spectral, int vec_k, int vec_c, T* b_re, T* b_im) {              \
        const MapArgs a = {grads_re, grads_im, xt,    g_re,  g_im,  w_re,   w_im, t_re, t_im,     d_out, gws_re, gws_im, p,     \
                           q,        dg_re,    dg_im, out,   tiles, ntiles, V,    K,    C,        spectral, vec_k, vec_c, b_re, \
                           b_im};                                                                                                 \
        gs_map<ROT, FWD, true, true>(a);                                                                                          \
    }
GS_MAP_SAVE_ENTRY(gs_fwd_rot_sv_save, true, true)
GS_MAP_SAVE_ENTRY(gs_fwd_plain_sv_save, false, true)
GS_MAP_SAVE_ENTRY(gs_map_rot_sv_saved, true, false)
GS_MAP_SAVE_ENTRY(gs_map_plain_sv_saved, false, false)
#endif
#else  // GS_PP
// ---------------------------------------------------------------------------------------------------
// fwd=packed-pp (NOTES.md, v9): the packed forward with one warpgroup per CTA and two CTAs per
// multiprocessor, so that one CTA's epilogues, stage switches and copy waits can run while the other
// CTA's products keep the tensor cores busy (gs_map's two warpgroups share every barrier, so both
// stop issuing products at the same time). A CTA owns whole 64-row tiles (persistent: row tiles
// blockIdx.x, + gridDim.x, …) and runs each 128-channel chunk h of a tile as a pass of its own, with
// the 128 accumulators of one gs_map warpgroup:
//   stage 1, pass h: g[:, chunk h] = grads·xᵀ[chunk h], rounded into G (64 rows × GS_CPAD channels,
//                    gs_map's G);
//   stage 2, pass h: b[:, chunk h] = g·A[chunk h]ᵀ (all of G), then out[:, chunk h] =
//                    tanh(g_re·b_re + g_im·b_im) from the accumulators straight to device memory
//                    (4-byte pairs: G is read by the next pass, so out is not staged there).
// Every element's products (the same operands in the same order) and epilogue are gs_map's: the same
// bits as fwd=packed. Ring: GP_STAGES slots of 16 KB (stage 1: grads_re, grads_im 64 × 32 and xᵀ's
// chunk h 128 × 32; stage 2: the A_re, A_im rows of chunk h, 128 × 32: contiguous halves of the
// packed k-tile images), LAG 0: each k-tile's products are waited for before the next k-tile's
// barrier (the other CTA's products fill the gap), and copies run two k-tiles ahead. Shared memory
// 2·GP_PLANE + 48 KB (112 KB with GS_NCH = 2): two CTAs fit a multiprocessor.
#define GP_BM 64
#define GP_PLANE (GP_BM * GS_CPAD * 2)  // one plane of G
#define GP_STAGES 3
#define GP_LAG 0
#define GP_SLOT (2 * 128 * GS_BK * 2)   // 16 KB
#define GP_SMEM (2 * GP_PLANE + GP_STAGES * GP_SLOT)  // Mirrors staged.rs.

template <bool ROT>
__device__ __forceinline__ void gs_fwd_pp(const MapArgs& a) {
#if !GS_HAS_WGMMA
    __trap();  // launched on sm_90a only; other targets build the module for the compile test
#else
    GS_SMEM_DECL;
    const u32 sbase = gs_smem_addr(smem);
    const u32 sG = sbase, sR = sbase + 2 * GP_PLANE;
    unsigned char* const pG = smem;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    if (threadIdx.x == 0 && gs_dynamic_smem_size() < (u32)GP_SMEM) __trap();  // launch code and kernel disagree
    struct Rows {
        i64 row0, row_end;
        int mesh;
    };
    auto rows_of = [&](i64 t) -> Rows {
        if (a.tiles) return {a.tiles[3 * t], a.tiles[3 * t + 1], (int)a.tiles[3 * t + 2]};
        return {t * GP_BM, a.V, 0};
    };
    const int C = a.C, K = a.K;
    const int nk1 = (K + GS_BK - 1) / GS_BK, nk2 = (C + GS_BK - 1) / GS_BK;
    const int per = GS_NCH * (nk1 + nk2);  // ring tiles per row tile: every pass of both stages
    const int mine = (int)((a.ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x);  // the launch keeps mine·per < 2³¹
    const int n = mine * per;
    constexpr u32 GSBO = GS_NJ * 128;  // SBO of G
    float re[64], im[64];

    // Ring tile it = j·per + local: row tile j of this CTA; local < GS_NCH·nk1: stage 1, pass
    // local / nk1 (grads_re, grads_im, xᵀ's chunk); else stage 2, pass (local − GS_NCH·nk1) / nk2
    // (the chunk's rows of A_re, A_im). Chunk h of a packed image's plane is its rows 128h..: the
    // contiguous 8 KB from element 128·GS_BK·h (gs_off with 4 chunks per row).
    auto load = [&](int slot, int it) {
        const int j = it / per, local = it - j * per;
        const Rows r = rows_of(blockIdx.x + (i64)j * gridDim.x);
        const u32 s = sR + slot * GP_SLOT;
        if (local < GS_NCH * nk1) {
            const int h = local / nk1, kt = local - h * nk1;
            const i64 k0 = (i64)kt * GS_BK;
            gs_load_tile<GP_BM, 4>(s, a.grads_re, K, r.row0, r.row_end, k0, K, true);
            gs_load_tile<GP_BM, 4>(s + GP_BM * 64, a.grads_im, K, r.row0, r.row_end, k0, K, true);
            gs_copy_image<128 * 4>(s + 2 * GP_BM * 64, a.xt + ((i64)r.mesh * nk1 + kt) * (GS_CPAD * GS_BK) + h * (128 * GS_BK));
            return;
        }
        const int l2 = local - GS_NCH * nk1, h = l2 / nk2, kt = l2 - h * nk2;
        const T* w = a.w_re + (i64)kt * ((ROT ? 2 : 1) * GS_CPAD * GS_BK) + h * (128 * GS_BK);
        gs_copy_image<128 * 4>(s, w);
        if (ROT) gs_copy_image<128 * 4>(s + 128 * 64, w + GS_CPAD * GS_BK);
    };
    // Descriptor bases (advanced by constants, as in gs_map's packed build): G's rows at k = 0, and
    // ring slot 0 (K-major 32-deep tiles: SBO 512).
    const u64 dG = gs_desc(sG, 128, GSBO);
    const u64 dR = gs_desc(sR, 128, 512);

    // One pass of `count` ring k-tiles from `first` into zeroed re, im: per k-tile the products
    // `mma(slot offset, k-tile of the pass)`, LAG groups in flight; on return every group is done.
    auto pass = [&](int first, int count, auto mma) {
        gs_zero(re);
        gs_zero(im);
#pragma unroll 1
        for (int it = first; it < first + count; ++it) {
            const u32 so = gs_ring_next<GP_STAGES, GP_LAG>(it, n, load) * GP_SLOT;
            gs_fence_regs(re);
            gs_fence_regs(im);
            gs_wg_arrive();
            mma(so, it - first);
            gs_wg_commit();
            gs_wg_wait<GP_LAG>();
        }
        gs_wg_wait<0>();
        gs_fence_regs(re);
        gs_fence_regs(im);
    };
    gs_ring_start<GP_STAGES, GP_LAG>(n, load);
#pragma unroll 1
    for (int j = 0; j < mine; ++j) {
        const Rows rows = rows_of(blockIdx.x + (i64)j * gridDim.x);
        const int base = j * per;
        // ---- stage 1, one pass per chunk: g into G. The previous tile's stage-2 products and
        // epilogue reads of G were all done before the barrier of this stage's first k-tile (nk1 ≥ 1:
        // the launch code offers this build for K ≥ 8 only). ----
#pragma unroll 1
        for (int h = 0; h < GS_NCH; ++h) {
            pass(base + h * nk1, nk1, [&](u32 so, int) {
#pragma unroll
                for (int ks = 0; ks < GS_BK / 16; ++ks) {
                    const u64 ar = dR + (u64)((so + gs_off(0, 16 * ks, 4)) / 16);
                    const u64 ai = ar + GP_BM * 64 / 16;
                    const u64 bx = ar + 2 * GP_BM * 64 / 16;
                    gs_mma<1, 0>(re, ar, bx);
                    gs_mma<1, 0>(im, ai, bx);
                }
            });
            // Nothing reads G in stage 1; the next k-tile's barrier orders these stores before stage 2.
#pragma unroll
            for (int i = 0; i < 16; ++i)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const u32 off = gs_off(16 * warp + gq + 8 * hh, 128 * h + 8 * i + 2 * tq, GS_NJ);
                    gs_sts_pair(pG + off, re[4 * i + 2 * hh], re[4 * i + 2 * hh + 1]);
                    gs_sts_pair(pG + GP_PLANE + off, im[4 * i + 2 * hh], im[4 * i + 2 * hh + 1]);
                }
        }
        // ---- stage 2, one pass per chunk: b = g·(A_re + i·A_im)ᵀ for the chunk's channels, then
        // out. The products as gs_map's map_step (with B = the chunk's rows of A_re, A_im). ----
#pragma unroll 1
        for (int h = 0; h < GS_NCH; ++h) {
            pass(base + GS_NCH * nk1 + h * nk2, nk2, [&](u32 so, int kt) {
#pragma unroll
                for (int ks = 0; ks < GS_BK / 16; ++ks) {
                    const u64 a0 = dG + (u64)((kt * GS_BK + 16 * ks) / 8 * 128 / 16);  // g_re
                    const u64 a1 = a0 + GP_PLANE / 16;                                  // g_im
                    const u64 b0 = dR + (u64)((so + gs_off(0, 16 * ks, 4)) / 16);        // A_re
                    if (ROT) {
                        const u64 b1 = b0 + 128 * 64 / 16;  // A_im
                        gs_mma<1, 0>(re, a0, b0);
                        gs_mma<-1, 0>(re, a1, b1);
                        gs_mma<1, 0>(im, a1, b0);
                        gs_mma<1, 0>(im, a0, b1);
                    } else {
                        gs_mma<1, 0>(re, a0, b0);
                        gs_mma<1, 0>(im, a1, b0);
                    }
                }
            });
            // out of the chunk, gs_map's epilogue arithmetic; rows past the mesh and channels past C
            // are not written.
#pragma unroll
            for (int i = 0; i < 16; ++i)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int e = 4 * i + 2 * hh;
                    const int r = 16 * warp + gq + 8 * hh, c = 128 * h + 8 * i + 2 * tq;
                    const u32 off = gs_off(r, c, GS_NJ);
                    float gr0, gr1, gi0, gi1;
                    gs_lds_pair(pG + off, gr0, gr1);
                    gs_lds_pair(pG + GP_PLANE + off, gi0, gi1);
                    const u32 v = ember_pack2<T>(gs_tanh_out(gr0 * re[e] + gi0 * im[e]), gs_tanh_out(gr1 * re[e + 1] + gi1 * im[e + 1]));
                    const i64 row = rows.row0 + r;
                    if (row < rows.row_end && c < C) *reinterpret_cast<u32*>(a.out + row * C + c) = v;
                }
        }
    }  // row tiles
    gs_wait<0>();  // the ring's last (empty) groups
#endif
}

#define GS_PP_ENTRY(NAME, ROT)                                                                                                     \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* grads_re, const T* grads_im, const T* xt, const T* g_re, const T* g_im, const T* w_re, const T* w_im,          \
         const T* t_re, const T* t_im, const T* d_out, T* gws_re, T* gws_im, T* p, T* q, T* dg_re, T* dg_im, T* out,            \
         const i64* tiles, i64 ntiles, i64 V, int K, int C, int spectral, int vec_k, int vec_c) {                                \
        const MapArgs a = {grads_re, grads_im, xt,    g_re,  g_im,  w_re,   w_im, t_re, t_im,     d_out, gws_re, gws_im, p,     \
                           q,        dg_re,    dg_im, out,   tiles, ntiles, V,    K,    C,        spectral, vec_k, vec_c};     \
        gs_fwd_pp<ROT>(a);                                                                                                        \
    }
// Only for the spectral form with K ≥ 8 and K, C multiples of 8, packed images (the launch code checks).
GS_PP_ENTRY(gs_fwd_rot_pp, true)
GS_PP_ENTRY(gs_fwd_plain_pp, false)
#endif  // GS_PP
#endif  // GS_KIND == 0

#if GS_KIND == 1
// ---------------------------------------------------------------------------------------------------
// Reductions over vertices, split-K: CTA (split, tile), tile fastest in the 1-D grid (the tiles of
// one split run together and share its rows through L2), sums rows [r_begin, r_end) of
//   out (M×N) = Σ_r a_re[r]ᵀ·b_re[r] ⊕ a_im[r]ᵀ·b_im[r]
// into its own f32 slice of a workspace; gf_reduce adds the slices in split order. ROT: two outputs,
// re = a_reᵀb_re + a_imᵀb_im, im = a_imᵀb_re − a_reᵀb_im (d_A_re, d_A_im from a = (P, Q),
// b = (g_re, g_im)); SUM: re only (d_A without rotations; d_x from a = grads, b = d_g, per mesh).
// A CTA owns a 128×128 output tile, each warpgroup 64 rows of it; a k-tile is 32 rows of the four
// operands, each staged as a 32 × 128 tile (16 chunks per row) that wgmma reads MN-major.
#define GR_BK 32
#define GR_STAGES 6
#define GR_LAG 1
#define GR_PLANE (GR_BK * 128 * 2)       // 8 KB
#define GR_STAGE (4 * GR_PLANE)          // 32 KB
#define GR_SMEM (GR_STAGES * GR_STAGE)  // 192 KB. Mirrors staged.rs.

//
// IMG (gs_reduce_*_img): the four operands are tile images of the map kernel's GS_IMG build (row
// group q of 8 rows holds its ldi channels as ldi/8 chunks of 8 rows × 16 bytes: element (r, c) at
// (r/8)·8·ldi + (c/8)·64 + (r%8)·8 + c%8), R whole image rows, zero wherever the problem is not, and
// M, N ≤ ldi (a multiple of 128). Then a k-tile's 128 columns of one row group are 2 KB, contiguous
// and already in the ring slot's byte order: each operand of a k-tile is 4 such blocks, 2 chunks per
// thread, copied without bounds (the splits are whole k-tiles: rows_per_split a multiple of GR_BK).
template <bool ROT, bool IMG>
__device__ __forceinline__ void gs_reduce(const T* a_re, const T* a_im, const T* b_re, const T* b_im, float* ws, const i64* splits, i64 R, int M, int N,
                                          i64 rows_per_split, int vec_m, int vec_n, int ldi) {
#if !GS_HAS_WGMMA
    __trap();
#else
    GS_SMEM_DECL;
    const u32 sbase = gs_smem_addr(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wg = warp >> 2, wr = warp & 3;
    if (threadIdx.x == 0 && gs_dynamic_smem_size() < (u32)GR_SMEM) __trap();
    const int tiles_m = (M + 127) / 128, tiles = tiles_m * ((N + 127) / 128);
    const int tile = (int)(blockIdx.x % (u32)tiles);
    const i64 split = blockIdx.x / (u32)tiles;
    const int m0 = (tile % tiles_m) * 128, n0 = (tile / tiles_m) * 128;
    i64 r_begin, r_end;
    if (splits) {
        r_begin = splits[2 * split];
        r_end = splits[2 * split + 1];
    } else {
        r_begin = split * rows_per_split;
        r_end = r_begin + rows_per_split < R ? r_begin + rows_per_split : R;
    }
    const int nk = r_end > r_begin ? (int)((r_end - r_begin + GR_BK - 1) / GR_BK) : 0;
    const bool vm = vec_m != 0, vn = vec_n != 0;
    if (IMG && threadIdx.x == 0 && (rows_per_split % GR_BK != 0 || R % GR_BK != 0 || ldi % 128 != 0 || M > ldi || N > ldi)) __trap();  // launch code and kernel disagree
    // IMG: this thread's two chunks of a k-tile operand are chunk tid and tid + 256 of its 4 blocks,
    // i.e. block tid/128 (+2), chunk tid%128 of the block; in the image, element offset
    // (tid/128)·8·ldi + 8·(tid%128) from the k-tile's first row group (+ 2 row groups).
    const int tid = IMG ? gs_tid() : 0;
    const i64 rg = 8 * (i64)ldi;  // elements of one row group of an image
    const i64 thr = (tid >> 7) * rg + 8 * (tid & 127);
    float re[64], im[64];
    gs_zero(re);
    gs_zero(im);
    auto load = [&](int slot, int kt) {
        const u32 s = sbase + slot * GR_STAGE;
        const i64 r = r_begin + (i64)kt * GR_BK;
        if (IMG) {
            const u32 d = s + 16 * (u32)tid;
            const i64 q = (r >> 3) * rg + thr;  // the k-tile's first row group, this thread's chunk
            const T* src[4] = {a_re + q + 8 * m0, a_im + q + 8 * m0, b_re + q + 8 * n0, b_im + q + 8 * n0};
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                gs_cp16(d + o * GR_PLANE, src[o], 16);
                gs_cp16(d + o * GR_PLANE + 16 * GS_THREADS, src[o] + 2 * rg, 16);
            }
            return;
        }
        gs_load_tile<GR_BK, 16>(s, a_re, M, r, r_end, m0, M, vm);
        gs_load_tile<GR_BK, 16>(s + GR_PLANE, a_im, M, r, r_end, m0, M, vm);
        gs_load_tile<GR_BK, 16>(s + 2 * GR_PLANE, b_re, N, r, r_end, n0, N, vn);
        gs_load_tile<GR_BK, 16>(s + 3 * GR_PLANE, b_im, N, r, r_end, n0, N, vn);
    };
    gs_ring_start<GR_STAGES, GR_LAG>(nk, load);
#pragma unroll 1
    for (int kt = 0; kt < nk; ++kt) {
        const u32 s = sbase + gs_ring_next<GR_STAGES, GR_LAG>(kt, nk, load) * GR_STAGE;
        gs_fence_regs(re);
        if (ROT) gs_fence_regs(im);
        gs_wg_arrive();
#pragma unroll
        for (int ks = 0; ks < GR_BK / 16; ++ks) {
            // Rows 16·ks.. of the k-tile: two 8-row groups, 2048 bytes apart (LBO); the 8-column groups
            // of M or N 128 bytes apart (SBO); this warpgroup's 64 rows of M from column group 8·wg.
            const u32 k = 2 * ks * (16 * 128);
            const u64 ar = gs_desc(s + k + 1024 * wg, 16 * 128, 128);
            const u64 ai = gs_desc(s + GR_PLANE + k + 1024 * wg, 16 * 128, 128);
            const u64 br = gs_desc(s + 2 * GR_PLANE + k, 16 * 128, 128);
            const u64 bi = gs_desc(s + 3 * GR_PLANE + k, 16 * 128, 128);
            gs_mma<1, 1>(re, ar, br);
            gs_mma<1, 1>(re, ai, bi);
            if (ROT) {
                gs_mma<1, 1>(im, ai, br);
                gs_mma<-1, 1>(im, ar, bi);
            }
        }
        gs_wg_commit();
        gs_wg_wait<GR_LAG>();
    }
    gs_wg_wait<0>();
    gs_fence_regs(re);
    if (ROT) gs_fence_regs(im);
    gs_wait<0>();  // the ring's last (empty) groups
    const int planes = ROT ? 2 : 1;
    float* w0 = ws + split * planes * (i64)M * N;
    float* w1 = w0 + (i64)M * N;
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + 64 * wg + 16 * wr + gq + 8 * h;
            const int n = n0 + 8 * i + 2 * tq;
            if (m >= M) continue;
            const int e = 4 * i + 2 * h;
            if (n < N) w0[(i64)m * N + n] = re[e];
            if (n + 1 < N) w0[(i64)m * N + n + 1] = re[e + 1];
            if (ROT) {
                if (n < N) w1[(i64)m * N + n] = im[e];
                if (n + 1 < N) w1[(i64)m * N + n + 1] = im[e + 1];
            }
        }
#endif
}

#define GS_REDUCE_ENTRY(NAME, ROT)                                                                                                \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* a_re, const T* a_im, const T* b_re, const T* b_im, float* ws, const i64* splits, i64 R, int M, int N,          \
         i64 rows_per_split, int vec_m, int vec_n) {                                                                             \
        gs_reduce<ROT, false>(a_re, a_im, b_re, b_im, ws, splits, R, M, N, rows_per_split, vec_m, vec_n, 0);                     \
    }
GS_REDUCE_ENTRY(gs_reduce_rot, true)
GS_REDUCE_ENTRY(gs_reduce_sum, false)
// Over tile images (R image rows, ldi padded channels; uniform splits of rows_per_split rows).
#define GS_REDUCE_IMG_ENTRY(NAME, ROT)                                                                                            \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* a_re, const T* a_im, const T* b_re, const T* b_im, float* ws, i64 R, int M, int N, i64 rows_per_split, int ldi) { \
        gs_reduce<ROT, true>(a_re, a_im, b_re, b_im, ws, nullptr, R, M, N, rows_per_split, 1, 1, ldi);                           \
    }
GS_REDUCE_IMG_ENTRY(gs_reduce_rot_img, true)
GS_REDUCE_IMG_ENTRY(gs_reduce_sum_img, false)

// ---------------------------------------------------------------------------------------------------
// Reductions over the map kernel's image rows with grads as the A operand: d_x per mesh,
// d_x = grads_reᵀ·d_g_re + grads_imᵀ·d_g_im (NOTES.md, v11), and with it the factored d_A's R (v14),
// from row-major grads (V × K) and the tile images of d_g (and P, Q) that the GS_IMG build writes.
// Rows are image rows (row tile t = rows [t·bm, (t+1)·bm) of image t, vertices from tiles[3t] up to
// tiles[3t+1], or t·bm up to V without a tile table); a split holds whole 32-row k-tiles of one mesh
// (splits table), so a k-tile lies in one row tile. Rows past the row tile's end read grads as zeros
// (the images are zero there too). Ring: DX_STAGES slots of grads_re, grads_im (32 × 128, gs_off order,
// MN-major like gs_reduce's) and up to four 32 × 128 image tiles; LAG 0, so three k-tiles of copies
// are in flight (up to 144 KB per multiprocessor).
#define DX_STAGES 4
#define DX_LAG 0
#define DX_GRADS (GR_BK * 128 * 2)  // 8 KB: one plane of a grads k-tile
#define DX_STAGE (2 * DX_GRADS + 4 * GR_BK * 128 * 2)  // 48 KB: grads, then up to four image tiles
#define DX_SMEM (DX_STAGES * DX_STAGE)                  // 192 KB. Mirrors staged.rs.

// A k-tile of grads_re and grads_im for the reductions over image rows: image rows r..r + 31 (one row
// tile's: vertices from tiles[3t] up to tiles[3t + 1], or t·bm up to V without a tile table), columns
// m0..m0 + 127 of K, into the two 8 KB planes at s (gs_off order, 16 chunks per row: this thread's
// chunks tid + 256·q, q = 0, 1, are row (tid/128)·8 + tid%8 + 16·q, columns m0 + 8·((tid/8)%16)..+7),
// zero past the row tile's end and past K.
__device__ __forceinline__ void gs_dx_grads_tile(u32 s, const T* grads_re, const T* grads_im, const i64* tiles, i64 V, int K, int bm, i64 r, int m0) {
    const int tid = gs_tid();
    const int g_row = (tid >> 7) * 8 + (tid & 7), g_col = m0 + 8 * ((tid >> 3) & 15);
    const i64 t = r / bm;
    const i64 v0 = (tiles ? tiles[3 * t] : t * bm) + (r - t * bm), v_end = tiles ? tiles[3 * t + 1] : V;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const i64 v = v0 + g_row + 16 * q;
        const bool ok = g_col < K && v < v_end;
        const i64 off = ok ? v * K + g_col : 0;
        gs_cp16(s + 16 * (u32)(tid + GS_THREADS * q), grads_re + off, ok ? 16 : 0);
        gs_cp16(s + DX_GRADS + 16 * (u32)(tid + GS_THREADS * q), grads_im + off, ok ? 16 : 0);
    }
}

// ---------------------------------------------------------------------------------------------------
// d_x, alone or with the factored d_A, in one reduction over image rows (NOTES.md, v14). In the spectral form
// g = grads·x per mesh, so d_A's sums over vertices factor through x:
//   d_A_re = Σ_v P[v]ᵀg_re[v] + Q[v]ᵀg_im[v] = R_reᵀ·x,   R_re = grads_reᵀ·P + grads_imᵀ·Q   (K × C)
//   d_A_im = Σ_v Q[v]ᵀg_re[v] − P[v]ᵀg_im[v] = R_imᵀ·x,   R_im = grads_reᵀ·Q − grads_imᵀ·P
// (without rotations d_A = R_reᵀ·x): K-deep instead of C-deep sums over vertices, and the map kernel
// writes no g. R shares its A operand (grads) with d_x = grads_reᵀ·d_g_re + grads_imᵀ·d_g_im, so one
// CTA computes, for 128 rows of K (two warpgroups of 64) and one 128-channel chunk h of C, all three:
//   dx += G_reᵀ·dG_re,h + G_imᵀ·dG_im,h;  re += G_reᵀ·P_h + G_imᵀ·Q_h;  im += G_imᵀ·P_h − G_reᵀ·Q_h
// (im = −R_im; the split sum flips it). OUTS says which: 1 d_x alone (d_A from g's images), 2 d_x and
// re (no rotations), 3 all three. CTA (split, m-tile, h), h fastest: the CTAs of one split run
// together and share its grads rows through L2. Ring slots as DX_STAGE: the grads planes, then
// d_g_re, d_g_im (and P, Q) of chunk h as 32 × 128 tiles in gs_reduce's IMG order (the chunk's 2 KB
// of each of the k-tile's 4 row groups, MN-major: LBO 2 KB, SBO 128). Slices ws[split][plane][K][C],
// planes dx (and re, im).
template <int NCH, int OUTS>
__device__ __forceinline__ void gs_reduce_dxa(const T* grads_re, const T* grads_im, const T* dg_re, const T* dg_im, const T* p, const T* q, float* ws,
                                              const i64* splits, const i64* tiles, i64 V, int K, int C, int bm) {
#if !GS_HAS_WGMMA
    __trap();
#else
    GS_SMEM_DECL;
    constexpr int LDI = 128 * NCH;
    static_assert(OUTS >= 1 && OUTS <= 3, "d_x, R_re, −R_im");
    constexpr bool R = OUTS >= 2, ROT = OUTS == 3;
    constexpr int NB = R ? 4 : 2;  // image tiles per k-tile
    const u32 sbase = gs_smem_addr(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wg = warp >> 2, wr = warp & 3;
    if (threadIdx.x == 0 && (gs_dynamic_smem_size() < (u32)DX_SMEM || bm % GR_BK != 0 || C > LDI)) __trap();  // launch code and kernel disagree
    const int tiles_m = (K + 127) / 128;
    const int h = (int)(blockIdx.x % (u32)NCH);
    const u32 mt = blockIdx.x / (u32)NCH;
    const int m0 = (int)(mt % (u32)tiles_m) * 128;
    const i64 split = mt / (u32)tiles_m;
    const i64 r_begin = splits[2 * split], r_end = splits[2 * split + 1];
    if (threadIdx.x == 0 && (r_begin % GR_BK != 0 || r_end % GR_BK != 0)) __trap();  // splits of whole k-tiles
    const int nk = r_end > r_begin ? (int)((r_end - r_begin) / GR_BK) : 0;
    // This thread's chunks of chunk h's tiles: chunk j = tid + 256·u (u = 0, 1) of a k-tile's 4 blocks
    // of 2 KB, block j/128 (one row group: 8·LDI elements apart in the image), chunk j%128 of it.
    const int tid = gs_tid();
    const i64 rg = 8 * (i64)LDI;
    const i64 thr = (tid >> 7) * rg + 8 * (tid & 127) + 1024 * h;
    float dx[64], re[64], im[64];
    gs_zero(dx);
    if (R) gs_zero(re);
    if (ROT) gs_zero(im);
    constexpr u32 B0 = 2 * DX_GRADS, BT = GR_BK * 128 * 2;  // the first B tile, and its size (8 KB)
    auto load = [&](int slot, int kt) {
        const u32 s = sbase + slot * DX_STAGE;
        const i64 r = r_begin + (i64)kt * GR_BK;  // the k-tile's first image row
        gs_dx_grads_tile(s, grads_re, grads_im, tiles, V, K, bm, r, m0);
        const i64 e = (r >> 3) * rg + thr;
        const T* src[4] = {dg_re + e, dg_im + e, R ? p + e : nullptr, R ? q + e : nullptr};
#pragma unroll
        for (int o = 0; o < NB; ++o) {
            gs_cp16(s + B0 + o * BT + 16 * (u32)tid, src[o], 16);
            gs_cp16(s + B0 + o * BT + 16 * (u32)(tid + GS_THREADS), src[o] + 2 * rg, 16);
        }
    };
    gs_ring_start<DX_STAGES, DX_LAG>(nk, load);
#pragma unroll 1
    for (int kt = 0; kt < nk; ++kt) {
        const u32 s = sbase + gs_ring_wait<DX_STAGES, DX_LAG>(kt) * DX_STAGE;
        gs_fence_regs(dx);
        if (R) gs_fence_regs(re);
        if (ROT) gs_fence_regs(im);
        gs_wg_arrive();
#pragma unroll
        for (int ks = 0; ks < GR_BK / 16; ++ks) {
            // Rows 16·ks.. of the k-tile: two 8-row groups 2048 bytes apart (LBO) in every tile; 8-column
            // groups 128 bytes apart (SBO); this warpgroup's 64 columns of K from column group 8·wg.
            const u32 k = 2 * ks * (16 * 128);
            const u64 ar = gs_desc(s + k + 1024 * wg, 16 * 128, 128);
            const u64 ai = gs_desc(s + DX_GRADS + k + 1024 * wg, 16 * 128, 128);
            const u64 bdr = gs_desc(s + B0 + k, 16 * 128, 128);
            const u64 bdi = gs_desc(s + B0 + BT + k, 16 * 128, 128);
            gs_mma<1, 1>(dx, ar, bdr);
            gs_mma<1, 1>(dx, ai, bdi);
            if (R) {
                const u64 bp = gs_desc(s + B0 + 2 * BT + k, 16 * 128, 128);
                const u64 bq = gs_desc(s + B0 + 3 * BT + k, 16 * 128, 128);
                gs_mma<1, 1>(re, ar, bp);
                gs_mma<1, 1>(re, ai, bq);
                if (ROT) {
                    gs_mma<1, 1>(im, ai, bp);
                    gs_mma<-1, 1>(im, ar, bq);
                }
            }
        }
        gs_wg_commit();
        gs_ring_refill<DX_STAGES, DX_LAG>(kt, nk, load);
        gs_wg_wait<DX_LAG>();
    }
    gs_wg_wait<0>();
    gs_fence_regs(dx);
    if (R) gs_fence_regs(re);
    if (ROT) gs_fence_regs(im);
    gs_wait<0>();  // the ring's last (empty) groups
    float* const w = ws + split * OUTS * (i64)K * C;
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int m = m0 + 64 * wg + 16 * wr + gq + 8 * hh;
            const int n = 128 * h + 8 * i + 2 * tq;
            const int e = 4 * i + 2 * hh;
            if (m >= K) continue;
            float* const row = w + (i64)m * C + n;
            const i64 pk = (i64)K * C;  // between planes
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                if (n + u >= C) continue;
                row[u] = dx[e + u];
                if (R) row[pk + u] = re[e + u];
                if (ROT) row[2 * pk + u] = im[e + u];
            }
        }
#endif
}
#define GS_REDUCE_DXA_ENTRY(NAME, NCH, OUTS)                                                                                      \
    GS_ENTRY(GS_THREADS)                                                                                                          \
    NAME(const T* grads_re, const T* grads_im, const T* dg_re, const T* dg_im, const T* p, const T* q, float* ws, const i64* splits, \
         const i64* tiles, i64 V, int K, int C, int bm) {                                                                         \
        gs_reduce_dxa<NCH, OUTS>(grads_re, grads_im, dg_re, dg_im, p, q, ws, splits, tiles, V, K, C, bm);                         \
    }
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa1_dx, 1, 1)
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa2_dx, 2, 1)
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa1_plain, 1, 2)
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa2_plain, 2, 2)
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa1_rot, 1, 3)
GS_REDUCE_DXA_ENTRY(gs_reduce_dxa2_rot, 2, 3)

// The split sums of gs_reduce_dxa, per mesh g (splits groups[2g]..groups[2g+1], or all): d_x[g] (K × C)
// from plane 0, and R of planes 1.. as the A operand of d_A's last product (gs_reduce_sum over the
// M·K rows of all meshes, B = x): row g·K + k of a_hi, a_lo holds R_re[k, ·] (and R_im[k, ·] = −plane 2
// after it: ld = (planes − 1)·C), each value as hi + lo, two 16-bit numbers (hi = its rounding,
// lo = the rounding of the rest), so that the product sees R to ~2⁻¹⁷ and not to 16-bit precision.
extern "C" __global__ void __launch_bounds__(256) gs_sum_dxa(const float* __restrict__ ws, T* d_x, T* a_hi, T* a_lo, const i64* groups, int ngroups, int planes,
                                                             int K, int C, i64 nsplits) {
    const i64 elems = (i64)K * C, total = (i64)ngroups * planes * elems;
    const int ld = (planes - 1) * C;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (i64)gridDim.x * blockDim.x) {
        const i64 i = idx % elems, gpl = idx / elems;
        const int pl = (int)(gpl % planes), g = (int)(gpl / planes);
        const i64 sb = groups ? groups[2 * g] : 0, se = groups ? groups[2 * g + 1] : nsplits;
        const float s = ember_ordered_sum(ws + (sb * planes + pl) * elems + i, (i64)planes * elems, se - sb);
        if (pl == 0) {
            d_x[(i64)g * elems + i] = ember_from_f32<T>(s);
            continue;
        }
        const float v = pl == 2 ? -s : s;
        const T hi = ember_from_f32<T>(v);
        const i64 at = ((i64)g * K + i / C) * ld + (pl - 1) * C + i % C;
        a_hi[at] = hi;
        a_lo[at] = ember_from_f32<T>(v - ember_to_f32(hi));
    }
}

// dst[b] = ±src[b]ᵀ for `batches` row-major rows × cols blocks (xᵀ per mesh, A_reᵀ, −A_imᵀ): small,
// read once. `negate` flips sign bits (exact).
extern "C" __global__ void __launch_bounds__(256) gs_transpose(const T* src, T* dst, i64 batches, int rows, int cols, int negate) {
    const i64 per = (i64)rows * cols, total = batches * per;
    const u16 flip = negate ? 0x8000u : 0u;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (i64)gridDim.x * blockDim.x) {
        const i64 b = idx / per, rem = idx - b * per;
        const int j = (int)(rem / rows), i = (int)(rem - (i64)j * rows);
        T v = src[b * per + (i64)i * cols + j];
        v.bits ^= flip;
        dst[idx] = v;
    }
}

// Packed k-tile images for the map kernel's GS_PACK build: for each of `batches` matrices M (rows ×
// cols; M = src, or srcᵀ when `trans`, src then being cols × rows; sign bits flipped when `negate`),
// and each 32-column k-tile kt, the tile of rows 0..rpad − 1 × columns 32·kt.. in the byte order of
// the ring slot (gs_off with 4 chunks per row, chunk i = 8 elements), zero outside M. Image
// (b, kt) holds `planes` (1 or 2) such tiles one after another, plane i from src_i, negated where bit
// i of `negate` is set. So the map kernel copies a k-tile as one contiguous block (gs_copy_image).
// One launch packs up to GS_PACK_JOBS such jobs (a call's A, xᵀ and, in the backward, Aᵀ images):
// each launch costs a few µs at the sizes where these matter (NOTES.md, v14).
#define GS_PACK_JOBS 3
struct GsPackJob {
    const T* src0;
    const T* src1;
    T* dst;
    i64 batches;
    int rows, cols, rpad, nkt, planes, trans, negate;
};
struct GsPackJobs {
    GsPackJob job[GS_PACK_JOBS];
    int njobs;
};
__device__ __forceinline__ i64 gs_pack_elems(const GsPackJob& j) { return (i64)j.planes * j.batches * j.nkt * j.rpad * 32; }
extern "C" __global__ void __launch_bounds__(256) gs_pack(const GsPackJobs jobs) {
    i64 total = 0;
    for (int n = 0; n < jobs.njobs; ++n) total += gs_pack_elems(jobs.job[n]);
    for (i64 idx0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx0 < total; idx0 += (i64)gridDim.x * blockDim.x) {
        int n = 0;
        i64 idx = idx0;
        while (idx >= gs_pack_elems(jobs.job[n])) idx -= gs_pack_elems(jobs.job[n++]);
        const GsPackJob& j = jobs.job[n];
        const i64 tile = (i64)j.rpad * 32, per = j.nkt * tile, per_plane = j.batches * per;
        const int plane = (int)(idx / per_plane);
        const i64 rem0 = idx - plane * per_plane, b = rem0 / per, rem = rem0 - b * per;
        const int kt = (int)(rem / tile), e = (int)(rem - (i64)kt * tile);
        const int i = e >> 3;
        const int r = (i >> 5) * 8 + (i & 7), c = kt * 32 + 8 * ((i >> 3) & 3) + (e & 7);
        T v;
        v.bits = 0;
        if (r < j.rows && c < j.cols) {
            v = (plane ? j.src1 : j.src0)[b * j.rows * j.cols + (j.trans ? (i64)c * j.rows + r : (i64)r * j.cols + c)];
            v.bits ^= ((j.negate >> plane) & 1) ? 0x8000u : 0u;
        }
        j.dst[((b * j.nkt + kt) * j.planes + plane) * tile + e] = v;
    }
}
#endif  // GS_KIND == 1
