// Spatial gradient features on tensor cores: the fused forward, the fused backward, and the split-K
// reductions over vertices for the weight and spectral gradients. Formulas in mod.rs; byte and FLOP
// counts, design and measurements in NOTES.md.
//
// Specialisations (NVRTC options):
//   GF_DTYPE  0: f32 (three products of split values, see GF_F32_BF16X3), 1: f16, 2: bf16
//             (mma.m16n8k16), f32 accumulate
//   GF_F32_BF16X3  f32 only: 1 (the host's default) three bf16 m16n8k16 products per 16 deep,
//             0 three TF32 m16n8k8 passes per 8 deep (twice the tensor-core time, ~1e-7 instead of ~5e-6)
//   GF_KIND   0: fused forward, 1: fused backward, 2: split-K reductions and their final sums
//   GF_BM     vertices per CTA of the fused kernels (128, 64, 32 or 16)
//   GF_NT     n8 tiles per warp of the fused kernels (4 or 8: warp blocks 32×32 or 32×64 per plane)
//   GF_STAGES depth of the stage ring (3, or 2 where the wide backward tiles leave no room)
//   GF_WGMMA  forward with the channel map on wgmma (sm_90a; GF_BM = 128)
//
// Every warp owns a (16·MT)-row × (8·NT)-column block of each of two accumulators, "re" and "im",
// that sit at the same positions: the real and imaginary parts of one complex result, so the
// epilogues combine them without moving data between threads. One k-step multiplies the warp's
// fragments of two A planes (re, im) by one or two weight planes:
//   SHARED   re += a_re·w0            im += a_im·w0               (g = grads·x; b without rotations)
//   ROT_FWD  re += a_re·w0 − a_im·w1  im += a_im·w0 + a_re·w1     (b = g·(A_re + i·A_im)ᵀ)
//   ROT_BWD  re += a_re·w0 + a_im·w1  im += a_im·w0 − a_re·w1     (d_g through b; d_A_re, d_A_im)
//   SUM      re += a_re·w0 + a_im·w1                              (d_A without rotations; d_x)
// Operands are staged in shared memory by cp.async (16-byte chunks, zero-filled outside the matrix)
// in a GF_STAGES-deep ring, or by checked scalar loads when rows are not 16-byte aligned.

#ifndef GF_F32_BF16X3
#define GF_F32_BF16X3 0
#endif
#if GF_DTYPE == 0
typedef float T;
#define GF_ES 4
#define GF_BK 16
#if GF_F32_BF16X3
#define GF_KSTEP 16
#else
#define GF_KSTEP 8
#endif
#elif GF_DTYPE == 1
typedef ember_f16 T;
#define GF_ES 2
#define GF_BK 32
#define GF_KSTEP 16
#elif GF_DTYPE == 2
typedef ember_bf16 T;
#define GF_ES 2
#define GF_BK 32
#define GF_KSTEP 16
#else
#error "GF_DTYPE must be 0 (f32), 1 (f16) or 2 (bf16)"
#endif

#ifndef GF_STAGES
#define GF_STAGES 3
#endif
#define GF_VEC (16 / GF_ES)
// Row padding of staged tiles, chosen so that fragment loads hit 32 distinct banks: +16 bytes for
// tiles read along rows (ldmatrix, or f32 words at rows g and columns t), +32 bytes for f32 tiles
// read along columns (f32 words at rows t and columns g).
#define GF_PAD_NT 16
#define GF_PAD_T (GF_ES == 4 ? 32 : 16)

enum { M_SHARED = 0, M_ROT_FWD = 1, M_ROT_BWD = 2, M_SUM = 3 };

// ---------------------------------------------------------------------------------------------------
// Shared memory, cp.async

__device__ __forceinline__ u32 gf_smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void gf_cp16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void gf_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gf_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void gf_st16(u32 dst, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__device__ __forceinline__ u32 gf_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ u32 gf_bits(ember_bf16 v) { return v.bits; }
__device__ __forceinline__ u32 gf_bits(ember_f16 v) { return v.bits; }

// One 16-byte chunk (GF_VEC elements from row r, columns c..) by checked scalar loads; zeros outside.
__device__ __forceinline__ void gf_chunk_scalar(u32 dst, const T* __restrict__ src, i64 ld, i64 row_end, i64 ncols, i64 r, i64 c) {
    u32 w[4] = {0u, 0u, 0u, 0u};
    if (r < row_end) {
        const T* p = src + r * ld;
#pragma unroll
        for (int e = 0; e < GF_VEC; ++e) {
            if (c + e < ncols) {
#if GF_ES == 4
                w[e] = gf_bits(p[c + e]);
#else
                w[e >> 1] |= gf_bits(p[c + e]) << (16 * (e & 1));
#endif
            }
        }
    }
    gf_st16(dst, w[0], w[1], w[2], w[3]);
}

// Stage rows [r0, r0 + ROWS) × columns [c0, c0 + COLS) of a row-major matrix (leading dimension ld;
// rows at or past row_end and columns at or past ncols read as zero) into shared memory at dst with
// row pitch `pitch` bytes. `vec`: ld and ncols are multiples of GF_VEC, so each 16-byte chunk is
// wholly inside or outside and goes by cp.async.
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void gf_load_tile(u32 dst, int pitch, const T* __restrict__ src, i64 ld, i64 row_end, i64 ncols, i64 r0, i64 c0, bool vec) {
    constexpr int CPR = COLS / GF_VEC;
    constexpr int N = ROWS * CPR;
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += THREADS) {
        const int i = i0 + (int)threadIdx.x;
        if (N % THREADS == 0 || i < N) {
            const int r = i / CPR, ch = i - r * CPR;
            const i64 gr = r0 + r, gc = c0 + (i64)ch * GF_VEC;
            const u32 d = dst + r * pitch + ch * 16;
            if (vec) {
                const bool ok = gr < row_end && gc < ncols;
                gf_cp16(d, ok ? (const void*)(src + gr * ld + gc) : (const void*)src, ok ? 16 : 0);
            } else {
                gf_chunk_scalar(d, src, ld, row_end, ncols, gr, gc);
            }
        }
    }
}

// The same with a run-time width (`cols`, a multiple of GF_VEC).
template <int THREADS>
__device__ __forceinline__ void gf_load_rows(u32 dst, int pitch, const T* __restrict__ src, i64 ld, i64 row_end, i64 ncols, i64 r0, int rows, int cols, bool vec) {
    const int cpr = cols / GF_VEC;
    const int n = rows * cpr;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        const int r = i / cpr, ch = i - r * cpr;
        const i64 gr = r0 + r, gc = (i64)ch * GF_VEC;
        const u32 d = dst + r * pitch + ch * 16;
        if (vec) {
            const bool ok = gr < row_end && gc < ncols;
            gf_cp16(d, ok ? (const void*)(src + gr * ld + gc) : (const void*)src, ok ? 16 : 0);
        } else {
            gf_chunk_scalar(d, src, ld, row_end, ncols, gr, gc);
        }
    }
}

// Run a loop over nk staged k-tiles through GF_STAGES slots: load(slot, kt) issues the copies of
// tile kt, compute(slot, kt) consumes it. Ends with every copy landed and every warp past its last
// compute, so the slots are free for the next loop. ASYNC_READ: the tiles are read by wgmma (the async
// proxy), so each thread fences its landed copies into that proxy before the barrier.
template <bool ASYNC_READ = false, class Load, class Compute>
__device__ __forceinline__ void gf_pipeline(int nk, Load&& load, Compute&& compute) {
#pragma unroll 1
    for (int s = 0; s < GF_STAGES - 1; ++s) {
        if (s < nk) load(s, s);
        gf_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < nk; ++kt) {
        gf_wait<GF_STAGES - 2>();
        if (ASYNC_READ) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const int next = kt + GF_STAGES - 1;
        if (next < nk) load(next % GF_STAGES, next);
        gf_commit();
        compute(kt % GF_STAGES, kt);
    }
    gf_wait<0>();
    __syncthreads();
}

// ---------------------------------------------------------------------------------------------------
// Fragments and tensor-core products. Lane l = 4·g + t. Loaders take the shared address of a staged
// tile, its pitch in bytes and the fragment's origin; "_t" loaders read a tile stored transposed
// ([k][m] for A, [k][n] for B).

#if GF_ES == 2
struct FragA { u32 r[4]; };  // A 16×16: (g, 2t..2t+1), (g+8, ·), (g, 8+2t..), (g+8, 8+2t..)
struct FragB { u32 r[2]; };  // B 16×8: (k 2t..2t+1, n g), (k 8+2t.., n g)

__device__ __forceinline__ void gf_ldsm4(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void gf_ldsm4_t(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
// A stored [m][k]: lanes 8j..8j+7 address the rows of 8×8 block j = (rows +8·(j&1), cols +8·(j>>1)).
__device__ __forceinline__ void load_a(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31;
    const int m = m0 + (l & 7) + ((l >> 3) & 1) * 8;
    const int k = k0 + (l >> 4) * 8;
    gf_ldsm4(base + m * pitch + k * 2, f.r[0], f.r[1], f.r[2], f.r[3]);
}
// A stored [k][m]: block j covers m +8·(j&1), k +8·(j>>1); .trans hands lane (g, t) the pair (m g, k 2t..).
__device__ __forceinline__ void load_a_t(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31, j = l >> 3;
    const int k = k0 + (l & 7) + (j >> 1) * 8;
    const int m = m0 + (j & 1) * 8;
    gf_ldsm4_t(base + k * pitch + m * 2, f.r[0], f.r[1], f.r[2], f.r[3]);
}
// B stored [n][k], two n8 tiles: block j covers n +8·(j>>1), k +8·(j&1).
__device__ __forceinline__ void load_b2(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, j = l >> 3;
    const int n = n0 + (l & 7) + (j >> 1) * 8;
    const int k = k0 + (j & 1) * 8;
    gf_ldsm4(base + n * pitch + k * 2, f[0].r[0], f[0].r[1], f[1].r[0], f[1].r[1]);
}
// B stored [k][n], two n8 tiles: block j covers k +8·(j&1), n +8·(j>>1).
__device__ __forceinline__ void load_b2_t(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, j = l >> 3;
    const int k = k0 + (l & 7) + (j & 1) * 8;
    const int n = n0 + (j >> 1) * 8;
    gf_ldsm4_t(base + k * pitch + n * 2, f[0].r[0], f[0].r[1], f[1].r[0], f[1].r[1]);
}
__device__ __forceinline__ void mma(float (&d)[4], const FragA& a, const FragB& b) {
#if GF_DTYPE == 2
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
#endif
}
__device__ __forceinline__ FragA neg(const FragA& a) {
    FragA n;
#pragma unroll
    for (int i = 0; i < 4; ++i) n.r[i] = a.r[i] ^ 0x80008000u;
    return n;
}
#else
__device__ __forceinline__ float gf_lds(u32 addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
    return v;
}
#if GF_F32_BF16X3
// f32 inputs on bf16 tensor cores: each value splits into bf16 halves hi + lo (ember_split_bf16x2);
// a·b ≈ ah·bh + ah·bl + al·bh as three m16n8k16 products, ~5e-6 relative — inside the 3e-4 that f32
// on tensor cores is held to, at half the tensor-core time of three TF32 passes. One k-step is 16
// deep. A k16 product sums its 16 k in any order, so each lane takes the f32 words of the TF32 layout
// of two 8-deep steps (columns t, 8 + t, t + 4, 12 + t) as the bf16 layout's logical k = 2t, 2t + 1,
// 2t + 8, 2t + 9 — A and B alike — and the f32 tiles keep their layout and padding.
struct FragA { u32 hi[4], lo[4]; };  // A 16×16: (g, t | 8+t), (g+8, t | 8+t), (g, t+4 | 12+t), (g+8, t+4 | 12+t)
struct FragB { u32 hi[2], lo[2]; };  // B 16×8: (k t | 8+t, n g), (k t+4 | 12+t, n g)

// A stored [m][k].
__device__ __forceinline__ void load_a(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    const u32 r0 = base + (m0 + g) * pitch + (k0 + t) * 4, r1 = r0 + 8 * pitch;
    ember_split_bf16x2(gf_lds(r0), gf_lds(r0 + 32), f.hi[0], f.lo[0]);
    ember_split_bf16x2(gf_lds(r1), gf_lds(r1 + 32), f.hi[1], f.lo[1]);
    ember_split_bf16x2(gf_lds(r0 + 16), gf_lds(r0 + 48), f.hi[2], f.lo[2]);
    ember_split_bf16x2(gf_lds(r1 + 16), gf_lds(r1 + 48), f.hi[3], f.lo[3]);
}
// A stored [k][m].
__device__ __forceinline__ void load_a_t(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    const u32 k0a = base + (k0 + t) * pitch + (m0 + g) * 4, k4a = k0a + 4 * pitch, k8a = k0a + 8 * pitch, k12a = k0a + 12 * pitch;
    ember_split_bf16x2(gf_lds(k0a), gf_lds(k8a), f.hi[0], f.lo[0]);
    ember_split_bf16x2(gf_lds(k0a + 32), gf_lds(k8a + 32), f.hi[1], f.lo[1]);
    ember_split_bf16x2(gf_lds(k4a), gf_lds(k12a), f.hi[2], f.lo[2]);
    ember_split_bf16x2(gf_lds(k4a + 32), gf_lds(k12a + 32), f.hi[3], f.lo[3]);
}
// B stored [n][k], two n8 tiles.
__device__ __forceinline__ void load_b2(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const u32 a = base + (n0 + 8 * j + g) * pitch + (k0 + t) * 4;
        ember_split_bf16x2(gf_lds(a), gf_lds(a + 32), f[j].hi[0], f[j].lo[0]);
        ember_split_bf16x2(gf_lds(a + 16), gf_lds(a + 48), f[j].hi[1], f[j].lo[1]);
    }
}
// B stored [k][n], two n8 tiles.
__device__ __forceinline__ void load_b2_t(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const u32 a = base + (k0 + t) * pitch + (n0 + 8 * j + g) * 4;
        ember_split_bf16x2(gf_lds(a), gf_lds(a + 8 * pitch), f[j].hi[0], f[j].lo[0]);
        ember_split_bf16x2(gf_lds(a + 4 * pitch), gf_lds(a + 12 * pitch), f[j].hi[1], f[j].lo[1]);
    }
}
// One product of halves; a register holds two bf16 values, so negation flips both sign bits.
__device__ __forceinline__ void gf_mma_part(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#define GF_SIGN_BITS 0x80008000u
#else
// f32 inputs: each value splits into a TF32 head and a TF32 tail; a·b ≈ ah·bh + ah·bt + at·bh keeps
// about 22 bits, so results match f32 arithmetic. One k-step is 8 deep.
struct FragA { u32 hi[4], lo[4]; };  // A 16×8: (g, t), (g+8, t), (g, t+4), (g+8, t+4)
struct FragB { u32 hi[2], lo[2]; };  // B 8×8: (k t, n g), (k t+4, n g)

__device__ __forceinline__ void gf_split(float x, u32& hi, u32& lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    const float rest = x - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}
__device__ __forceinline__ void load_a(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    const u32 r0 = base + (m0 + g) * pitch + (k0 + t) * 4, r1 = r0 + 8 * pitch;
    gf_split(gf_lds(r0), f.hi[0], f.lo[0]);
    gf_split(gf_lds(r1), f.hi[1], f.lo[1]);
    gf_split(gf_lds(r0 + 16), f.hi[2], f.lo[2]);
    gf_split(gf_lds(r1 + 16), f.hi[3], f.lo[3]);
}
__device__ __forceinline__ void load_a_t(FragA& f, u32 base, int pitch, int m0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    const u32 k0a = base + (k0 + t) * pitch + (m0 + g) * 4, k4a = k0a + 4 * pitch;
    gf_split(gf_lds(k0a), f.hi[0], f.lo[0]);
    gf_split(gf_lds(k0a + 32), f.hi[1], f.lo[1]);
    gf_split(gf_lds(k4a), f.hi[2], f.lo[2]);
    gf_split(gf_lds(k4a + 32), f.hi[3], f.lo[3]);
}
__device__ __forceinline__ void load_b2(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const u32 a = base + (n0 + 8 * j + g) * pitch + (k0 + t) * 4;
        gf_split(gf_lds(a), f[j].hi[0], f[j].lo[0]);
        gf_split(gf_lds(a + 16), f[j].hi[1], f[j].lo[1]);
    }
}
__device__ __forceinline__ void load_b2_t(FragB (&f)[2], u32 base, int pitch, int n0, int k0) {
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const u32 a = base + (k0 + t) * pitch + (n0 + 8 * j + g) * 4;
        gf_split(gf_lds(a), f[j].hi[0], f[j].lo[0]);
        gf_split(gf_lds(a + 4 * pitch), f[j].hi[1], f[j].lo[1]);
    }
}
__device__ __forceinline__ void gf_mma_part(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#define GF_SIGN_BITS 0x80000000u
#endif  // GF_F32_BF16X3
// a·b of split f32 values: three products of the halves, small terms first.
__device__ __forceinline__ void mma(float (&d)[4], const FragA& a, const FragB& b) {
    gf_mma_part(d, a.lo, b.hi);
    gf_mma_part(d, a.hi, b.lo);
    gf_mma_part(d, a.hi, b.hi);
}
__device__ __forceinline__ FragA neg(const FragA& a) {
    FragA n;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        n.hi[i] = a.hi[i] ^ GF_SIGN_BITS;
        n.lo[i] = a.lo[i] ^ GF_SIGN_BITS;
    }
    return n;
}
#endif

template <int MT, int NT>
struct Acc {
    float re[MT][NT][4];
    float im[MT][NT][4];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) re[i][j][e] = im[i][j][e] = 0.0f;
    }
};

// One GF_KSTEP-deep step of the warp's block: A planes a0, a1 (pitch ap; the warp's rows from am,
// depth offset ak), weight planes w0, w1 (pitch wp; the warp's columns from wn, depth offset wk).
template <int MODE, bool A_T, bool W_T, int MT, int NT>
__device__ __forceinline__ void gf_kstep(Acc<MT, NT>& acc, u32 a0, u32 a1, int ap, int am, int ak, u32 w0, u32 w1, int wp, int wn, int wk) {
    FragA fa0[MT], fa1[MT], fneg[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (A_T) {
            load_a_t(fa0[mt], a0, ap, am + 16 * mt, ak);
            load_a_t(fa1[mt], a1, ap, am + 16 * mt, ak);
        } else {
            load_a(fa0[mt], a0, ap, am + 16 * mt, ak);
            load_a(fa1[mt], a1, ap, am + 16 * mt, ak);
        }
        if (MODE == M_ROT_FWD) fneg[mt] = neg(fa1[mt]);
        if (MODE == M_ROT_BWD) fneg[mt] = neg(fa0[mt]);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        FragB fb0[2], fb1[2];
        if (W_T) load_b2_t(fb0, w0, wp, wn + 16 * np, wk);
        else load_b2(fb0, w0, wp, wn + 16 * np, wk);
        if (MODE != M_SHARED) {
            if (W_T) load_b2_t(fb1, w1, wp, wn + 16 * np, wk);
            else load_b2(fb1, w1, wp, wn + 16 * np, wk);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float(&re)[4] = acc.re[mt][2 * np + j];
                float(&im)[4] = acc.im[mt][2 * np + j];
                if (MODE == M_SHARED) {
                    mma(re, fa0[mt], fb0[j]);
                    mma(im, fa1[mt], fb0[j]);
                } else if (MODE == M_ROT_FWD) {
                    mma(re, fa0[mt], fb0[j]);
                    mma(re, fneg[mt], fb1[j]);
                    mma(im, fa1[mt], fb0[j]);
                    mma(im, fa0[mt], fb1[j]);
                } else if (MODE == M_ROT_BWD) {
                    mma(re, fa0[mt], fb0[j]);
                    mma(re, fa1[mt], fb1[j]);
                    mma(im, fa1[mt], fb0[j]);
                    mma(im, fneg[mt], fb1[j]);
                } else {
                    mma(re, fa0[mt], fb0[j]);
                    mma(re, fa1[mt], fb1[j]);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Element pairs (columns c, c+1) in shared and global memory.

// tanh for the forward's output: for 16-bit outputs the one-instruction approximation (relative
// error under 2^-10.9, below the output's own rounding); f32 outputs get tanhf. The backward always
// uses tanhf: 1 − tanh² loses relative accuracy near saturation.
__device__ __forceinline__ float gf_tanh_out(float x) {
#if GF_ES == 2
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return tanhf(x);
#endif
}

__device__ __forceinline__ float gf_half_bits_to_f32(u32 bits) {
#if GF_DTYPE == 2
    return ember_bf16_bits_to_f32(bits);
#else
    return ember_f16_bits_to_f32(bits);
#endif
}
__device__ __forceinline__ void gf_sts_pair(unsigned char* p, float v0, float v1) {
#if GF_ES == 4
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
#else
    *reinterpret_cast<u32*>(p) = ember_pack2<T>(v0, v1);
#endif
}
__device__ __forceinline__ void gf_lds_pair(const unsigned char* p, float& v0, float& v1) {
#if GF_ES == 4
    const float2 q = *reinterpret_cast<const float2*>(p);
    v0 = q.x;
    v1 = q.y;
#else
    const u32 w = *reinterpret_cast<const u32*>(p);
    v0 = gf_half_bits_to_f32(w & 0xffffu);
    v1 = gf_half_bits_to_f32(w >> 16);
#endif
}
// row[col], row[col+1] for even col; elements at or past n are skipped. With n even the pair is one
// aligned access.
__device__ __forceinline__ void gf_store_pair(T* row, int col, int n, float v0, float v1) {
    if ((n & 1) == 0) {
        if (col < n) {
#if GF_ES == 4
            *reinterpret_cast<float2*>(row + col) = make_float2(v0, v1);
#else
            *reinterpret_cast<u32*>(row + col) = ember_pack2<T>(v0, v1);
#endif
        }
    } else {
        if (col < n) row[col] = ember_from_f32<T>(v0);
        if (col + 1 < n) row[col + 1] = ember_from_f32<T>(v1);
    }
}
__device__ __forceinline__ void gf_load_pair(const T* row, int col, int n, float& v0, float& v1) {
    v0 = 0.0f;
    v1 = 0.0f;
    if ((n & 1) == 0) {
        if (col < n) {
#if GF_ES == 4
            const float2 q = *reinterpret_cast<const float2*>(row + col);
            v0 = q.x;
            v1 = q.y;
#else
            const u32 w = *reinterpret_cast<const u32*>(row + col);
            v0 = gf_half_bits_to_f32(w & 0xffffu);
            v1 = gf_half_bits_to_f32(w >> 16);
#endif
        }
    } else {
        if (col < n) v0 = ember_to_f32(row[col]);
        if (col + 1 < n) v1 = ember_to_f32(row[col + 1]);
    }
}

#if GF_KIND == 0 || GF_KIND == 1
// ---------------------------------------------------------------------------------------------------
// The fused kernels. A CTA of 8 warps owns BM vertices (one mesh's): it builds their g tile in
// shared memory (grads·x, or loaded in the vertex form), then runs the channel map in column chunks
// of BN with the weights streamed through the stage ring.
//
// Forward: each chunk's epilogue forms s = g_re·b_re + g_im·b_im and writes tanh(s); nothing else
// leaves the chip.
// Backward, pass A (per chunk): b as in the forward, then ds = d_out·(1 − tanh²s), P = ds·g_re and
// Q = ds·g_im into shared memory (and to device memory, for d_A), and the direct term ds·b into d_g.
// Pass B (per chunk): d_g += [P Q]·(weights, transposed access); the thread that wrote ds·b to an
// element in pass A is the one that reads it back here, so no synchronisation is involved.

template <int BM, int WARPS_M, int NT_>
struct FusedCfg {
    static constexpr int WARPS_N = 8 / WARPS_M;
    static constexpr int MT = BM / (16 * WARPS_M);
    static constexpr int NT = NT_;
    static constexpr int BN = 8 * NT * WARPS_N;
    static constexpr int P_NT = GF_BK * GF_ES + GF_PAD_NT;  // [rows][GF_BK] tiles
    static constexpr int P_T = BN * GF_ES + GF_PAD_T;       // [GF_BK][BN] tiles
};

template <int BM, int WARPS_M, int NT, bool ROT, bool BWD>
__host__ __device__ constexpr int gf_stage_bytes() {
    typedef FusedCfg<BM, WARPS_M, NT> C;
    const int s1 = 2 * BM * C::P_NT + GF_BK * C::P_T;       // grads_re, grads_im, x
    const int s2 = (ROT ? 2 : 1) * C::BN * C::P_NT;         // weights, read [c][c']
    const int s3 = BWD ? (ROT ? 2 : 1) * GF_BK * C::P_T : 0;  // weights, read [c][j] transposed
    const int m = s1 > s2 ? (s1 > s3 ? s1 : s3) : (s2 > s3 ? s2 : s3);
    return (m + 15) / 16 * 16;
}

struct FusedArgs {
    const T* grads_re;
    const T* grads_im;
    const T* x;
    const T* g_re;
    const T* g_im;
    const T* w_re;
    const T* w_im;
    T* out;
    const T* d_out;
    T* gws_re;  // backward, spectral form: g for the weight-gradient reduction
    T* gws_im;
    T* db_re;  // backward: P, Q
    T* db_im;
    T* dg_re;  // backward: d_g (the outputs, or a workspace in the spectral form)
    T* dg_im;
    const i64* tiles;  // batches: (first row, end of the mesh's rows, mesh) per CTA; null: one mesh
    i64 V;
    int K, C, Cpad, spectral, vec_k, vec_c;
};

template <int BM, int WARPS_M, int NT_, bool ROT, bool BWD>
__device__ __forceinline__ void gf_fused(const FusedArgs& a) {
    typedef FusedCfg<BM, WARPS_M, NT_> Cfg;
    constexpr int MT = Cfg::MT, NT = Cfg::NT, BN = Cfg::BN, P_NT = Cfg::P_NT, P_T = Cfg::P_T;
    constexpr int STAGE = gf_stage_bytes<BM, WARPS_M, NT_, ROT, BWD>();
    constexpr int PLANES = BWD ? 4 : 2;
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 sbase = gf_smem_addr(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wm = (warp % WARPS_M) * 16 * MT;
    const int wn = (warp / WARPS_M) * 8 * NT;
    const int C = a.C, K = a.K, Cpad = a.Cpad;
    const int gp = Cpad * GF_ES + GF_PAD_NT;
    // Shared memory: g_re, g_im tiles [BM][Cpad], in the backward P, Q tiles, then the stage ring.
    const u32 sG0 = sbase, sG1 = sbase + BM * gp, sD0 = sbase + 2 * BM * gp, sD1 = sbase + 3 * BM * gp;
    const u32 sS = sbase + PLANES * BM * gp;
    unsigned char* const pG0 = smem;
    unsigned char* const pG1 = smem + BM * gp;
    unsigned char* const pD0 = smem + 2 * BM * gp;
    unsigned char* const pD1 = smem + 3 * BM * gp;
    if (threadIdx.x == 0) {
        // The launch code sizes shared memory with the same formula; a mismatch must not go unseen.
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < (u32)(PLANES * BM * gp + GF_STAGES * STAGE)) __trap();
    }

    i64 row0, row_end;
    int mesh = 0;
    if (a.tiles) {
        row0 = a.tiles[3 * blockIdx.x];
        row_end = a.tiles[3 * blockIdx.x + 1];
        mesh = (int)a.tiles[3 * blockIdx.x + 2];
    } else {
        row0 = (i64)blockIdx.x * BM;
        row_end = a.V;
    }
    const int nchunks = (C + BN - 1) / BN;  // nchunks·BN ≥ Cpad: the chunks cover the whole tile

    // ---- g tile ----
    if (a.spectral) {
        const T* x = a.x + (i64)mesh * K * C;
        const int nk = (K + GF_BK - 1) / GF_BK;
        // One pipeline over (chunk, k-tile), so the copies run ahead across chunk boundaries.
        Acc<MT, NT> acc;
        gf_pipeline(
            nchunks * nk,
            [&](int slot, int it) {
                const int nc = it / nk, kt = it - nc * nk;
                const u32 s = sS + slot * STAGE;
                const i64 k0 = (i64)kt * GF_BK;
                gf_load_tile<BM, GF_BK, 256>(s, P_NT, a.grads_re, K, row_end, K, row0, k0, a.vec_k);
                gf_load_tile<BM, GF_BK, 256>(s + BM * P_NT, P_NT, a.grads_im, K, row_end, K, row0, k0, a.vec_k);
                gf_load_tile<GF_BK, BN, 256>(s + 2 * BM * P_NT, P_T, x, C, K, C, k0, (i64)nc * BN, a.vec_c);
            },
            [&](int slot, int it) {
                const int nc = it / nk, kt = it - nc * nk;
                const u32 s = sS + slot * STAGE;
                if (kt == 0) acc.zero();
#pragma unroll
                for (int ks = 0; ks < GF_BK; ks += GF_KSTEP)
                    gf_kstep<M_SHARED, false, true, MT, NT>(acc, s, s + BM * P_NT, P_NT, wm, ks, s + 2 * BM * P_NT, 0u, P_T, wn, ks);
                if (kt != nk - 1) return;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = wm + 16 * mt + gq + 8 * h;
                            const int col = nc * BN + wn + 8 * nt + 2 * tq;
                            const float re0 = acc.re[mt][nt][2 * h], re1 = acc.re[mt][nt][2 * h + 1];
                            const float im0 = acc.im[mt][nt][2 * h], im1 = acc.im[mt][nt][2 * h + 1];
                            if (col < Cpad) {
                                gf_sts_pair(pG0 + r * gp + col * GF_ES, re0, re1);
                                gf_sts_pair(pG1 + r * gp + col * GF_ES, im0, im1);
                            }
                            if (BWD && row0 + r < row_end) {
                                gf_store_pair(a.gws_re + (row0 + r) * C, col, C, re0, re1);
                                gf_store_pair(a.gws_im + (row0 + r) * C, col, C, im0, im1);
                            }
                        }
            });
    } else {
        gf_load_rows<256>(sG0, gp, a.g_re, C, a.V, C, row0, BM, Cpad, a.vec_c);
        gf_load_rows<256>(sG1, gp, a.g_im, C, a.V, C, row0, BM, Cpad, a.vec_c);
        gf_commit();
        gf_wait<0>();
    }
    __syncthreads();

    // ---- b = g·(weights)ᵀ in column chunks, and the epilogues ----
    const int nk2 = (C + GF_BK - 1) / GF_BK;
    {
        Acc<MT, NT> acc;
        gf_pipeline(
            nchunks * nk2,
            [&](int slot, int it) {
                const int nc = it / nk2, kt = it - nc * nk2;
                const u32 s = sS + slot * STAGE;
                gf_load_tile<BN, GF_BK, 256>(s, P_NT, a.w_re, C, C, C, (i64)nc * BN, (i64)kt * GF_BK, a.vec_c);
                if (ROT) gf_load_tile<BN, GF_BK, 256>(s + BN * P_NT, P_NT, a.w_im, C, C, C, (i64)nc * BN, (i64)kt * GF_BK, a.vec_c);
            },
            [&](int slot, int it) {
                const int nc = it / nk2, kt = it - nc * nk2;
                const u32 s = sS + slot * STAGE;
                if (kt == 0) acc.zero();
#pragma unroll
                for (int ks = 0; ks < GF_BK; ks += GF_KSTEP)
                    gf_kstep<ROT ? M_ROT_FWD : M_SHARED, false, false, MT, NT>(acc, sG0, sG1, gp, wm, kt * GF_BK + ks, s, s + BN * P_NT, P_NT, wn, ks);
                if (kt != nk2 - 1) return;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = wm + 16 * mt + gq + 8 * h;
                            const int col = nc * BN + wn + 8 * nt + 2 * tq;
                            const i64 grow = row0 + r;
                            const bool inside = grow < row_end && col < C;
                            if (col >= Cpad) continue;
                            const float re0 = acc.re[mt][nt][2 * h], re1 = acc.re[mt][nt][2 * h + 1];
                            const float im0 = acc.im[mt][nt][2 * h], im1 = acc.im[mt][nt][2 * h + 1];
                            float g0r, g1r, g0i, g1i;
                            gf_lds_pair(pG0 + r * gp + col * GF_ES, g0r, g1r);
                            gf_lds_pair(pG1 + r * gp + col * GF_ES, g0i, g1i);
                            const float s0 = g0r * re0 + g0i * im0, s1 = g1r * re1 + g1i * im1;
                            if (!BWD) {
                                if (inside) gf_store_pair(a.out + grow * C, col, C, gf_tanh_out(s0), gf_tanh_out(s1));
                            } else {
                                // Outside the problem ds = 0, so the P, Q tiles hold zeros there.
                                float ds0 = 0.0f, ds1 = 0.0f;
                                if (inside) {
                                    float d0, d1;
                                    gf_load_pair(a.d_out + grow * C, col, C, d0, d1);
                                    const float t0 = tanhf(s0), t1 = tanhf(s1);
                                    ds0 = d0 * (1.0f - t0 * t0);
                                    ds1 = d1 * (1.0f - t1 * t1);
                                }
                                const float p0 = ds0 * g0r, p1 = ds1 * g1r, q0 = ds0 * g0i, q1 = ds1 * g1i;
                                gf_sts_pair(pD0 + r * gp + col * GF_ES, p0, p1);
                                gf_sts_pair(pD1 + r * gp + col * GF_ES, q0, q1);
                                if (inside) {
                                    gf_store_pair(a.db_re + grow * C, col, C, p0, p1);
                                    gf_store_pair(a.db_im + grow * C, col, C, q0, q1);
                                    gf_store_pair(a.dg_re + grow * C, col, C, ds0 * re0, ds1 * re1);
                                    gf_store_pair(a.dg_im + grow * C, col, C, ds0 * im0, ds1 * im1);
                                }
                            }
                        }
            });
    }
    if (!BWD) return;
    __syncthreads();

    // ---- pass B: d_g += [P Q]·(weights) ----
    Acc<MT, NT> acc;
    gf_pipeline(
        nchunks * nk2,
        [&](int slot, int it) {
            const int nc = it / nk2, kt = it - nc * nk2;
            const u32 s = sS + slot * STAGE;
            gf_load_tile<GF_BK, BN, 256>(s, P_T, a.w_re, C, C, C, (i64)kt * GF_BK, (i64)nc * BN, a.vec_c);
            if (ROT) gf_load_tile<GF_BK, BN, 256>(s + GF_BK * P_T, P_T, a.w_im, C, C, C, (i64)kt * GF_BK, (i64)nc * BN, a.vec_c);
        },
        [&](int slot, int it) {
            const int nc = it / nk2, kt = it - nc * nk2;
            const u32 s = sS + slot * STAGE;
            if (kt == 0) acc.zero();
#pragma unroll
            for (int ks = 0; ks < GF_BK; ks += GF_KSTEP)
                gf_kstep<ROT ? M_ROT_BWD : M_SHARED, false, true, MT, NT>(acc, sD0, sD1, gp, wm, kt * GF_BK + ks, s, s + GF_BK * P_T, P_T, wn, ks);
            if (kt != nk2 - 1) return;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = wm + 16 * mt + gq + 8 * h;
                        const int col = nc * BN + wn + 8 * nt + 2 * tq;
                        const i64 grow = row0 + r;
                        if (grow < row_end && col < C) {
                            float e0, e1, f0, f1;
                            gf_load_pair(a.dg_re + grow * C, col, C, e0, e1);
                            gf_load_pair(a.dg_im + grow * C, col, C, f0, f1);
                            gf_store_pair(a.dg_re + grow * C, col, C, e0 + acc.re[mt][nt][2 * h], e1 + acc.re[mt][nt][2 * h + 1]);
                            gf_store_pair(a.dg_im + grow * C, col, C, f0 + acc.im[mt][nt][2 * h], f1 + acc.im[mt][nt][2 * h + 1]);
                        }
                    }
        });
}


#if defined(GF_WGMMA)
// ---------------------------------------------------------------------------------------------------
// Forward on Hopper (sm_90a): the channel map, 80% of the forward's products, runs on wgmma.
// Two warpgroups own 64 rows each of a 128-row tile; per 64-deep k-tile each issues, for a 128-wide
// column chunk, 4 (rotations) or 2 wgmma.m64n128k16 per 16 of depth, reading g and the weights
// straight from shared memory, with −g_im through the instruction's A scale. The g tile is built by
// the same mma.sync stage as the other kernels (32×64 warp blocks), but stored in wgmma's canonical
// K-major layout without swizzle: 8×8 core matrices of 128 contiguous bytes, element (r, k) at
//   (r/8)·SBO + (k/8)·128 + (r%8)·16 + (k%8)·2,   SBO = Cpad·16 (g) or 8·128 (weight tiles),
// whose 16-byte rows also keep the epilogue's pair accesses free of bank conflicts.
#define WG_BM 128
#define WG_BN 128
#define WG_BK 64

__device__ __forceinline__ u32 wg_off(int r, int k, int sbo) { return (u32)((r >> 3) * sbo + (k >> 3) * 128 + (r & 7) * 16 + (k & 7) * 2); }
// Shared-memory matrix descriptor: start address, leading (K) and stride (M/N) byte offsets, no swizzle.
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32);
}
// Registers written by ordinary instructions before, or read after, asynchronous wgmma: keep the
// compiler from moving those accesses across the fence or the wait.
__device__ __forceinline__ void wg_fence_regs(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int SCALE_A>
__device__ __forceinline__ void wg_mma(float (&d)[64], u64 da, u64 db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if GF_DTYPE == 2
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 1, %66, 1, 0, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "n"(SCALE_A));
#else
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 1, %66, 1, 0, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "n"(SCALE_A));
#endif
#endif
}

// SV: the spectral form with K and C multiples of 8, as compile-time facts (the `_sv` entries), so
// that neither the scalar copies and stores nor the vertex form's loads are compiled in.
template <bool ROT, bool SV>
__device__ __forceinline__ void gf_fused_wg(const FusedArgs& a) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();  // launched on sm_90a only; other targets build the module for the compile test
#else
    typedef FusedCfg<WG_BM, 4, 8> Cfg;  // the mma.sync stage that builds g
    constexpr int MT = Cfg::MT, NT = Cfg::NT, BN1 = Cfg::BN, P_NT = Cfg::P_NT, P_T = Cfg::P_T;
    constexpr int S1 = 2 * WG_BM * P_NT + GF_BK * P_T;
    constexpr int S2 = (ROT ? 2 : 1) * WG_BN * WG_BK * 2;
    constexpr int STAGE = S1 > S2 ? S1 : S2;
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 sbase = gf_smem_addr(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wm = (warp % 4) * 16 * MT, wn = (warp / 4) * 8 * NT;
    const int wg = warp >> 2, wr = warp & 3;
    const int C = a.C, K = a.K, Cpad = a.Cpad;
    const bool spectral = SV || a.spectral != 0, vec_k = SV || a.vec_k != 0, vec_c = SV || a.vec_c != 0;
    const int gsbo = Cpad * 16;
    const u32 gbytes = (u32)WG_BM * Cpad * 2;
    const u32 sG0 = sbase, sG1 = sbase + gbytes, sS = sbase + 2 * gbytes;
    unsigned char* const pG0 = smem;
    unsigned char* const pG1 = smem + gbytes;
    if (threadIdx.x == 0) {
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < 2 * gbytes + GF_STAGES * STAGE) __trap();
    }
    i64 row0, row_end;
    int mesh = 0;
    if (a.tiles) {
        row0 = a.tiles[3 * blockIdx.x];
        row_end = a.tiles[3 * blockIdx.x + 1];
        mesh = (int)a.tiles[3 * blockIdx.x + 2];
    } else {
        row0 = (i64)blockIdx.x * WG_BM;
        row_end = a.V;
    }

    // ---- g tile (mma.sync), stored in the canonical layout ----
    if (spectral) {
        const T* x = a.x + (i64)mesh * K * C;
        const int nk = (K + GF_BK - 1) / GF_BK;
        const int nchunks = (Cpad + BN1 - 1) / BN1;
        Acc<MT, NT> acc;
        gf_pipeline(
            nchunks * nk,
            [&](int slot, int it) {
                const int nc = it / nk, kt = it - nc * nk;
                const u32 s = sS + slot * STAGE;
                const i64 k0 = (i64)kt * GF_BK;
                gf_load_tile<WG_BM, GF_BK, 256>(s, P_NT, a.grads_re, K, row_end, K, row0, k0, vec_k);
                gf_load_tile<WG_BM, GF_BK, 256>(s + WG_BM * P_NT, P_NT, a.grads_im, K, row_end, K, row0, k0, vec_k);
                gf_load_tile<GF_BK, BN1, 256>(s + 2 * WG_BM * P_NT, P_T, x, C, K, C, k0, (i64)nc * BN1, vec_c);
            },
            [&](int slot, int it) {
                const int nc = it / nk, kt = it - nc * nk;
                const u32 s = sS + slot * STAGE;
                if (kt == 0) acc.zero();
#pragma unroll
                for (int ks = 0; ks < GF_BK; ks += GF_KSTEP)
                    gf_kstep<M_SHARED, false, true, MT, NT>(acc, s, s + WG_BM * P_NT, P_NT, wm, ks, s + 2 * WG_BM * P_NT, 0u, P_T, wn, ks);
                if (kt != nk - 1) return;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = wm + 16 * mt + gq + 8 * h;
                            const int col = nc * BN1 + wn + 8 * nt + 2 * tq;
                            if (col < Cpad) {
                                gf_sts_pair(pG0 + wg_off(r, col, gsbo), acc.re[mt][nt][2 * h], acc.re[mt][nt][2 * h + 1]);
                                gf_sts_pair(pG1 + wg_off(r, col, gsbo), acc.im[mt][nt][2 * h], acc.im[mt][nt][2 * h + 1]);
                            }
                        }
            });
    } else {
        const int cpr = Cpad / GF_VEC, n = WG_BM * cpr;
        for (int i = threadIdx.x; i < 2 * n; i += 256) {
            const int plane = i >= n, j = i - plane * n, r = j / cpr, ch = j - r * cpr;
            const T* src = plane ? a.g_im : a.g_re;
            const u32 d = (plane ? sG1 : sG0) + wg_off(r, ch * GF_VEC, gsbo);
            const i64 gr = row0 + r, gc = (i64)ch * GF_VEC;
            if (vec_c) {
                const bool ok = gr < a.V && gc < C;
                gf_cp16(d, ok ? (const void*)(src + gr * C + gc) : (const void*)src, ok ? 16 : 0);
            } else {
                gf_chunk_scalar(d, src, C, a.V, C, gr, gc);
            }
        }
        gf_commit();
        gf_wait<0>();
    }
    // g was written by ordinary stores and copies; wgmma reads it through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    // ---- b = g·(weights)ᵀ on wgmma, 128-column chunks, epilogue tanh(g_re·b_re + g_im·b_im) ----
    const int nk2 = (C + WG_BK - 1) / WG_BK;
    const int nchunks2 = (C + WG_BN - 1) / WG_BN;
    float dre[64], dim[64];
    gf_pipeline<true>(
        nchunks2 * nk2,
        [&](int slot, int it) {
            const int nc = it / nk2, kt = it - nc * nk2;
            const u32 s = sS + slot * STAGE;
            // Weight tile rows c (the output channel, N), columns c' (the depth, K), canonical layout.
            for (int i = threadIdx.x; i < (ROT ? 2 : 1) * WG_BN * (WG_BK / GF_VEC); i += 256) {
                const int plane = i / (WG_BN * (WG_BK / GF_VEC)), j = i - plane * (WG_BN * (WG_BK / GF_VEC));
                const int nrow = j / (WG_BK / GF_VEC), kc = j - nrow * (WG_BK / GF_VEC);
                const T* w = plane ? a.w_im : a.w_re;
                const u32 d = s + plane * (WG_BN * WG_BK * 2) + wg_off(nrow, kc * GF_VEC, (WG_BK / 8) * 128);
                const i64 gr = (i64)nc * WG_BN + nrow, gc = (i64)kt * WG_BK + kc * GF_VEC;
                if (vec_c) {
                    const bool ok = gr < C && gc < C;
                    gf_cp16(d, ok ? (const void*)(w + gr * C + gc) : (const void*)w, ok ? 16 : 0);
                } else {
                    gf_chunk_scalar(d, w, C, C, C, gr, gc);
                }
            }
        },
        [&](int slot, int it) {
            const int nc = it / nk2, kt = it - nc * nk2;
            const u32 s = sS + slot * STAGE;
            if (kt == 0) {
#pragma unroll
                for (int i = 0; i < 64; ++i) dre[i] = dim[i] = 0.0f;
            }
            wg_fence_regs(dre);
            wg_fence_regs(dim);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int ks = 0; ks < WG_BK / 16; ++ks) {
                const int k = kt * WG_BK + ks * 16;
                const u64 are = wg_desc(sG0 + wg_off(wg * 64, k, gsbo), 128, gsbo);
                const u64 aim = wg_desc(sG1 + wg_off(wg * 64, k, gsbo), 128, gsbo);
                const u64 bre = wg_desc(s + ks * 256, 128, (WG_BK / 8) * 128);
                if (ROT) {
                    const u64 bim = wg_desc(s + WG_BN * WG_BK * 2 + ks * 256, 128, (WG_BK / 8) * 128);
                    wg_mma<1>(dre, are, bre);
                    wg_mma<-1>(dre, aim, bim);
                    wg_mma<1>(dim, aim, bre);
                    wg_mma<1>(dim, are, bim);
                } else {
                    wg_mma<1>(dre, are, bre);
                    wg_mma<1>(dim, aim, bre);
                }
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            wg_fence_regs(dre);
            wg_fence_regs(dim);
            if (kt != nk2 - 1) return;
            // Accumulator element 4i + 2h + e: row 16·(warp in group) + g + 8h, column 8i + 2t + e.
#pragma unroll
            for (int i = 0; i < 16; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wg * 64 + wr * 16 + gq + 8 * h;
                    const int col = nc * WG_BN + 8 * i + 2 * tq;
                    const i64 grow = row0 + r;
                    if (grow < row_end && col < C) {
                        float g0r, g1r, g0i, g1i;
                        gf_lds_pair(pG0 + wg_off(r, col, gsbo), g0r, g1r);
                        gf_lds_pair(pG1 + wg_off(r, col, gsbo), g0i, g1i);
                        const float s0 = g0r * dre[4 * i + 2 * h] + g0i * dim[4 * i + 2 * h];
                        const float s1 = g1r * dre[4 * i + 2 * h + 1] + g1i * dim[4 * i + 2 * h + 1];
                        if (SV)  // C even: one pair store, col < C checked above
                            *reinterpret_cast<u32*>(a.out + grow * C + col) = ember_pack2<T>(gf_tanh_out(s0), gf_tanh_out(s1));
                        else
                            gf_store_pair(a.out + grow * C, col, C, gf_tanh_out(s0), gf_tanh_out(s1));
                    }
                }
        });
#endif
}
#endif  // GF_WGMMA

#if GF_BM == 128
#define GF_WARPS_M 4
#elif GF_BM == 64 || GF_BM == 32
#define GF_WARPS_M 2
#elif GF_BM == 16
#define GF_WARPS_M 1
#else
#error "GF_BM must be 128, 64, 32 or 16"
#endif
#ifndef GF_NT
#define GF_NT 4
#endif

#if defined(GF_WGMMA)
#define GF_FUSED_BODY(ROT) gf_fused_wg<ROT, false>(a)
#else
#define GF_FUSED_BODY(ROT) gf_fused<GF_BM, GF_WARPS_M, GF_NT, ROT, GF_KIND == 1>(a)
#endif
#define GF_FUSED_ENTRY(NAME, ROT) GF_FUSED_ENTRY_BODY(NAME, GF_FUSED_BODY(ROT))
#define GF_FUSED_ENTRY_BODY(NAME, BODY)                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                                          \
        NAME(const T* grads_re, const T* grads_im, const T* x, const T* g_re, const T* g_im, const T* w_re, const T* w_im, T* out, \
             const T* d_out, T* gws_re, T* gws_im, T* db_re, T* db_im, T* dg_re, T* dg_im, const i64* tiles, i64 V, int K, int C,   \
             int Cpad, int spectral, int vec_k, int vec_c) {                                                                      \
        const FusedArgs a = {grads_re, grads_im, x,     g_re,  g_im,  w_re, w_im, out,  d_out,    gws_re, gws_im,                  \
                             db_re,    db_im,    dg_re, dg_im, tiles, V,    K,    C,    Cpad, spectral, vec_k,  vec_c};            \
        BODY;                                                                                                                      \
    }
GF_FUSED_ENTRY(gf_fused_rot, true)
GF_FUSED_ENTRY(gf_fused_plain, false)
#if defined(GF_WGMMA)
// *_sv: only for the spectral form with K and C multiples of 8 (the launch code checks).
GF_FUSED_ENTRY_BODY(gf_fused_rot_sv, (gf_fused_wg<true, true>(a)))
GF_FUSED_ENTRY_BODY(gf_fused_plain_sv, (gf_fused_wg<false, true>(a)))
#endif
#endif  // fused kinds

#if GF_KIND == 2
// ---------------------------------------------------------------------------------------------------
// Reductions over vertices, split-K: CTA (split, tile), tile fastest in the 1-D grid, sums rows [r_begin, r_end) of
//   out (M×N) = Σ_r a_re[r]ᵀ·b_re[r] ⊕ a_im[r]ᵀ·b_im[r]   (ROT_BWD: two outputs; SUM: one)
// into its own slice of an f32 workspace; gf_reduce then adds the slices in split order. No
// atomics: the result is the same bits on every run.
//   d_A (rotations): a = (P, Q), b = (g_re, g_im), M = N = C, ROT_BWD → d_A_re, d_A_im
//   d_A (plain):     same operands, SUM → d_A
//   d_x:             a = (grads_re, grads_im), b = (d_g_re, d_g_im), M = K, N = C, SUM, per mesh

#define SK_THREADS 128
#define SK_WARPS_M 2
#define SK_MT 2
#define SK_NT 4
#define SK_P (64 * GF_ES + GF_PAD_T)
#define SK_STAGE (4 * GF_BK * SK_P)

// f32 inputs: the tensor cores' f32 adder truncates, and a split can sum thousands of rows, so the
// running sum moves to a second accumulator (ordinary rounded adds) every SK_FLUSH k-tiles.
#define SK_TWO_LEVEL (GF_ES == 4)
// Three CTAs per multiprocessor for 16-bit inputs; the split f32 fragments need more registers.
#define SK_MIN_BLOCKS (GF_ES == 4 ? 2 : 3)
#define SK_FLUSH 16

template <bool ROT>
__device__ __forceinline__ void gf_splitk(const T* a_re, const T* a_im, const T* b_re, const T* b_im, float* ws, const i64* splits, i64 R, int M, int N,
                                          i64 rows_per_split, int vec_m, int vec_n) {
    extern __shared__ __align__(16) unsigned char smem[];
    const u32 sbase = gf_smem_addr(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int wm = (warp % SK_WARPS_M) * 16 * SK_MT;
    const int wn = (warp / SK_WARPS_M) * 8 * SK_NT;
    // The output tiles of one split are neighbours in the grid, so they run together and share the
    // split's rows through L2.
    const int tiles_m = (M + 63) / 64, tiles = tiles_m * ((N + 63) / 64);
    const int tile = (int)(blockIdx.x % (u32)tiles);
    const i64 split = blockIdx.x / (u32)tiles;
    const int m0 = (tile % tiles_m) * 64, n0 = (tile / tiles_m) * 64;
    if (threadIdx.x == 0) {
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        if (dyn < (u32)(GF_STAGES * SK_STAGE)) __trap();
    }
    i64 r_begin, r_end;
    if (splits) {
        r_begin = splits[2 * split];
        r_end = splits[2 * split + 1];
    } else {
        r_begin = split * rows_per_split;
        r_end = r_begin + rows_per_split < R ? r_begin + rows_per_split : R;
    }
    const int nk = r_end > r_begin ? (int)((r_end - r_begin + GF_BK - 1) / GF_BK) : 0;
    Acc<SK_MT, SK_NT> acc;
    acc.zero();
#if SK_TWO_LEVEL
    Acc<SK_MT, SK_NT> total;
    total.zero();
#endif
    gf_pipeline(
        nk,
        [&](int slot, int kt) {
            const u32 s = sbase + slot * SK_STAGE;
            const i64 r = r_begin + (i64)kt * GF_BK;
            gf_load_tile<GF_BK, 64, SK_THREADS>(s, SK_P, a_re, M, r_end, M, r, m0, vec_m);
            gf_load_tile<GF_BK, 64, SK_THREADS>(s + GF_BK * SK_P, SK_P, a_im, M, r_end, M, r, m0, vec_m);
            gf_load_tile<GF_BK, 64, SK_THREADS>(s + 2 * GF_BK * SK_P, SK_P, b_re, N, r_end, N, r, n0, vec_n);
            gf_load_tile<GF_BK, 64, SK_THREADS>(s + 3 * GF_BK * SK_P, SK_P, b_im, N, r_end, N, r, n0, vec_n);
        },
        [&](int slot, int kt) {
            const u32 s = sbase + slot * SK_STAGE;
#pragma unroll
            for (int ks = 0; ks < GF_BK; ks += GF_KSTEP)
                gf_kstep<ROT ? M_ROT_BWD : M_SUM, true, true, SK_MT, SK_NT>(acc, s, s + GF_BK * SK_P, SK_P, wm, ks, s + 2 * GF_BK * SK_P, s + 3 * GF_BK * SK_P,
                                                                           SK_P, wn, ks);
#if SK_TWO_LEVEL
            if ((kt + 1) % SK_FLUSH == 0) {
#pragma unroll
                for (int i = 0; i < SK_MT; ++i)
#pragma unroll
                    for (int j = 0; j < SK_NT; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            total.re[i][j][e] += acc.re[i][j][e];
                            acc.re[i][j][e] = 0.0f;
                            if (ROT) {
                                total.im[i][j][e] += acc.im[i][j][e];
                                acc.im[i][j][e] = 0.0f;
                            }
                        }
            }
#endif
        });
#if SK_TWO_LEVEL
#pragma unroll
    for (int i = 0; i < SK_MT; ++i)
#pragma unroll
        for (int j = 0; j < SK_NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                total.re[i][j][e] += acc.re[i][j][e];
                if (ROT) total.im[i][j][e] += acc.im[i][j][e];
            }
#else
    const Acc<SK_MT, SK_NT>& total = acc;
#endif
    const int planes = ROT ? 2 : 1;
    float* w0 = ws + split * planes * M * N;
    float* w1 = w0 + (i64)M * N;
#pragma unroll
    for (int mt = 0; mt < SK_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < SK_NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm + 16 * mt + gq + 8 * h;
                const int n = n0 + wn + 8 * nt + 2 * tq;
                if (m >= M) continue;
                if (n < N) w0[(i64)m * N + n] = total.re[mt][nt][2 * h];
                if (n + 1 < N) w0[(i64)m * N + n + 1] = total.re[mt][nt][2 * h + 1];
                if (ROT) {
                    if (n < N) w1[(i64)m * N + n] = total.im[mt][nt][2 * h];
                    if (n + 1 < N) w1[(i64)m * N + n + 1] = total.im[mt][nt][2 * h + 1];
                }
            }
}

#define GF_SPLITK_ENTRY(NAME, ROT)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(SK_THREADS, SK_MIN_BLOCKS) NAME(const T* a_re, const T* a_im, const T* b_re, const T* b_im,     \
                                                                  float* ws, const i64* splits, i64 R, int M, int N,              \
                                                                  i64 rows_per_split, int vec_m, int vec_n) {                     \
        gf_splitk<ROT>(a_re, a_im, b_re, b_im, ws, splits, R, M, N, rows_per_split, vec_m, vec_n);                                \
    }
GF_SPLITK_ENTRY(gf_splitk_rot, true)
GF_SPLITK_ENTRY(gf_splitk_sum, false)

// out_p[g][i] = Σ_{s in group g's splits, in order} ws[s][p][i]; groups are meshes for d_x (splits
// from groups[2g] to groups[2g+1]) or one group of `nsplits` splits (groups null). ember_ordered_sum
// loads 16 splits of the element before adding them, in order. The sums are latency-bound (few
// elements, ~130 splits deep): four elements per thread (16-byte loads) measured slower, 41 against
// 29 µs for d_A's 69 MB on an H100, having a quarter of the threads (NOTES.md, v11).
extern "C" __global__ void __launch_bounds__(256) gf_reduce(const float* __restrict__ ws, T* out0, T* out1, const i64* groups, int ngroups, int planes, i64 elems,
                                                            i64 nsplits) {
    const i64 total = (i64)ngroups * planes * elems;
    for (i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (i64)gridDim.x * blockDim.x) {
        const i64 i = idx % elems, gpl = idx / elems;
        const int p = (int)(gpl % planes), g = (int)(gpl / planes);
        i64 sb = 0, se = nsplits;
        if (groups) {
            sb = groups[2 * g];
            se = groups[2 * g + 1];
        }
        const float s = ember_ordered_sum(ws + (sb * planes + p) * elems + i, (i64)planes * elems, se - sb);
        (p == 0 ? out0 : out1)[(i64)g * elems + i] = ember_from_f32<T>(s);
    }
}
#endif  // GF_KIND == 2
