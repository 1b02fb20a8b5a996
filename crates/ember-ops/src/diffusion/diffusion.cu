// Spectral diffusion (DiffusionNet, method 'spectral'): fused forward and backward.
//
// One module per activation dtype: -DDIFF_DTYPE=0 (f32), 1 (f16), 2 (bf16). Four kernels:
//
//   diffusion_reduce_w{8,4,2}  P[chunk] = basisᵀ·diag(mass)·x over one chunk of vertices (or
//                              basisᵀ·d_out without mass): an f32 K×C partial per chunk, written to a
//                              workspace. Mass is applied to the x fragments in registers, so
//                              neither x⊙mass nor basisᵀ(…) ever reaches memory.
//   diffusion_finalize_{fwd,bwd}  Sums each mesh's partials in chunk order (deterministic, no
//                              atomics) and applies e = exp(−evals⊗times): forward writes spectral
//                              (activation dtype + f32 copy for backward) and the GEMM operand;
//                              backward adds d_spectral, writes e⊙s_grad and per-block d_times sums.
//   diffusion_expand_w{8,4,2}  Y = diag(w)·basis·S (out = basis·spectral; d_x = mass⊙basis·(e⊙s_grad)),
//                              persistent over 128-vertex tiles with S resident in shared memory;
//                              backward's first block also folds the d_times block sums in fixed order.
//   diffusion_{reduce_wg,expand_wg}*  The two GEMMs on Hopper wgmma (sm_90a, 16-bit; host-selected
//                              variants, same results contract): see their sections below.
//
// Tensor cores: 16-bit inputs use mma.sync m16n8k16 with f32 accumulation, fragments from ldmatrix
// (.trans where the reduction runs down smem rows). f32 inputs use three products hi·hi + hi·lo +
// lo·hi of split values: bf16 m16n8k16 with hi = bf16(x), lo = bf16(x − hi) (DIFF_F32_BF16X3 = 1, the
// host's default: ~5e-6 relative) or m16n8k8 TF32 with hi = tf32(x), lo = tf32(x − hi) (~1e-7, twice
// the tensor-core time).
// Shared-memory tiles are filled by cp.async (16-byte, zero-filling outside the matrix) when rows
// are 16-byte multiples ("vec"), else by plain element loads — same tiles, same arithmetic.
// Rows are indexed in 64 bits everywhere (V·C passes 2^31 at V = 8M, C = 256).
//
// Launch order of a pass (Hopper, programmatic dependent launch; see Launch::dependent): the reduce
// waits for the previous kernel on the stream (griddepcontrol.wait, a no-op for an ordinary launch)
// before it lets the finalize be scheduled, and the finalize lets the expand be scheduled at once.
// So once a pass's finalize or expand runs, all work before the pass is complete: they read the
// pass's inputs (basis, tile tables, evals, times, saved, d_spectral) before their own wait, which
// only the kernels of the pass stand behind (the partials, S, the d_times rows).

#ifndef DIFF_DTYPE
#define DIFF_DTYPE 2
#endif
#if DIFF_DTYPE == 0
typedef float T;
#define DIFF_HALF 0
#elif DIFF_DTYPE == 1
typedef ember_f16 T;
#define DIFF_HALF 1
#else
typedef ember_bf16 T;
#define DIFF_HALF 1
#endif

#define NTHREADS 256
// Elements of T per 16-byte vector.
#define EPC (16 / (int)sizeof(T))

// A range of vertex rows [begin, end) of mesh `mesh`; entries of one mesh are consecutive and
// `run_end` is the index one past the last entry of that mesh.
struct Seg {
    i64 begin, end, mesh, run_end;
};

// Entry i of a table, or, without a table (one mesh), the i-th block of `rows` rows of [0, n_rows).
__device__ __forceinline__ Seg seg_at(const Seg* table, i64 i, i64 rows, i64 n_rows, i64 n_entries) {
    if (table) return table[i];
    Seg s;
    s.begin = i * rows;
    s.end = min(n_rows, s.begin + rows);
    s.mesh = 0;
    s.run_end = n_entries;
    return s;
}

// ---- PTX helpers ---------------------------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// 16-byte global→shared copy; bytes < 16 zero-fills the rest (0: the whole vector).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

#if DIFF_HALF
// D += A·B, m16n8k16, 16-bit inputs, f32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if DIFF_DTYPE == 2
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#endif
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two 16-bit values times two 16-bit weights, rounded once (a·w + (−0) keeps the sign of zeros).
__device__ __forceinline__ u32 mul_pair(u32 a, u32 w) {
    u32 r;
#if DIFF_DTYPE == 2
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(w), "r"(0x80008000u));
#else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(w), "r"(0x80008000u));
#endif
    return r;
}
#else
__device__ __forceinline__ u32 to_tf32(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
// x ≈ hi + lo with both TF32: the three-pass product keeps ~f32 accuracy.
__device__ __forceinline__ void split_tf32(float x, u32& hi, u32& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void mma_1688(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#ifndef DIFF_F32_BF16X3
#define DIFF_F32_BF16X3 0
#endif
#if DIFF_F32_BF16X3
// DIFF_F32_BF16X3 = 1: f32 products as three bf16 m16n8k16 products (hi·hi + hi·lo + lo·hi with
// hi = bf16(x), lo = bf16(x − hi)): half the tensor-core time of the three TF32 m16n8k8 passes per 16
// deep, ~4.5e-6 relative (normwise, per GEMM) instead of ~1e-7 — inside the 3e-4 that f32 on tensor
// cores is held to. The fragments are the TF32 ones of two consecutive 8-deep steps packed in pairs:
// a k16 product sums over its 16 k in any order, so logical k = 2t, 2t + 1, 2t + 8, 2t + 9 of the bf16
// layout (lane t = lane % 4) take the TF32 steps' k = t, 8 + t, t + 4, 12 + t — for A and B alike, so
// each bf16 register is (first step's value, second step's value) of the same TF32 fragment slot.
__device__ __forceinline__ void mma_16816_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Small terms first: lo·hi, hi·lo, then hi·hi.
__device__ __forceinline__ void mma_3xbf16(float (&d)[4], const u32 (&ahi)[4], const u32 (&alo)[4], const u32 (&bhi)[2], const u32 (&blo)[2]) {
    mma_16816_bf16(d, alo, bhi[0], bhi[1]);
    mma_16816_bf16(d, ahi, blo[0], blo[1]);
    mma_16816_bf16(d, ahi, bhi[0], bhi[1]);
}
#endif
// Small terms first: lo·hi, hi·lo, then hi·hi.
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const u32 (&ahi)[4], const u32 (&alo)[4], const u32 (&bhi)[2], const u32 (&blo)[2]) {
    mma_1688(d, alo, bhi[0], bhi[1]);
    mma_1688(d, ahi, blo[0], blo[1]);
    mma_1688(d, ahi, bhi[0], bhi[1]);
}
#endif

__device__ __forceinline__ T zero_t() { return ember_from_f32<T>(0.0f); }

// ---- pass 1: partial basisᵀ·diag(mass)·y over a chunk of vertices ---------------------------------
//
// CTA tile: 128 eigenvectors (2 warps × 64) × BN channels (4 warps × 8·WN); the reduction runs over
// the chunk's vertices in stages of RBV rows, RNST stages in flight. Stage rows start at the chunk's
// first vertex rounded down to a multiple of 8, so the mass vector is 16-byte aligned; rows outside
// the chunk are zero in smem.

#define RBM 128
// Pipeline shape: always set by the launch code's build options (defaults match DEFAULT_STAGES).
#ifndef RBV
#define RBV 64
#endif
#ifndef RNST
#define RNST 3
#endif

template <int WN>
struct RLay {
    static constexpr int BN = 4 * WN * 8;
    // Row strides: 16-bit rows are an odd number of 16-byte vectors (conflict-free ldmatrix); f32
    // rows are ≡ 8 words mod 32 (conflict-free fragment loads t·stride + g).
    static constexpr int LDA = RBM + 8;
    static constexpr int LDB = BN + 8;
    static constexpr int A_OFF = 0;
    static constexpr int B_OFF = RBV * LDA;
    static constexpr int M_OFF = B_OFF + RBV * LDB;
    static constexpr int STAGE = M_OFF + RBV;  // elements of T
};

template <int WN>
__device__ __forceinline__ void reduce_load(T* st, const T* __restrict__ basis, const T* __restrict__ y, const T* __restrict__ mass,
                                            i64 row0, i64 vb, i64 ve, int e0, int K, int c0, int C, bool vec) {
    typedef RLay<WN> L;
    T* As = st + L::A_OFF;
    T* Bs = st + L::B_OFF;
    T* Ms = st + L::M_OFF;
    const int tid = threadIdx.x;
    if (vec) {
        constexpr int ACH = RBM / EPC;
        for (int i = tid; i < RBV * ACH; i += NTHREADS) {
            const int r = i / ACH, ch = i % ACH;
            const i64 v = row0 + r;
            const int e = e0 + ch * EPC;
            const bool ok = v >= vb && v < ve && e < K;
            cp_async16(As + r * L::LDA + ch * EPC, ok ? (const void*)(basis + v * K + e) : (const void*)basis, ok ? 16 : 0);
        }
        constexpr int BCH = L::BN / EPC;
        for (int i = tid; i < RBV * BCH; i += NTHREADS) {
            const int r = i / BCH, ch = i % BCH;
            const i64 v = row0 + r;
            const int c = c0 + ch * EPC;
            const bool ok = v >= vb && v < ve && c < C;
            cp_async16(Bs + r * L::LDB + ch * EPC, ok ? (const void*)(y + v * C + c) : (const void*)y, ok ? 16 : 0);
        }
    } else {
        for (int i = tid; i < RBV * RBM; i += NTHREADS) {
            const int r = i / RBM, e = i % RBM;
            const i64 v = row0 + r;
            As[r * L::LDA + e] = (v >= vb && v < ve && e0 + e < K) ? basis[v * K + e0 + e] : zero_t();
        }
        for (int i = tid; i < RBV * L::BN; i += NTHREADS) {
            const int r = i / L::BN, c = i % L::BN;
            const i64 v = row0 + r;
            Bs[r * L::LDB + c] = (v >= vb && v < ve && c0 + c < C) ? y[v * C + c0 + c] : zero_t();
        }
    }
    if (mass) {
        // row0 is a multiple of 8: each 16-byte vector of mass is aligned. Vectors that straddle
        // the chunk's ends are built element by element, zero outside.
        for (int i = tid; i < RBV / EPC; i += NTHREADS) {
            const i64 v = row0 + i * EPC;
            if (v >= vb && v + EPC <= ve) {
                cp_async16(Ms + i * EPC, mass + v, 16);
            } else {
                for (int j = 0; j < EPC; ++j) Ms[i * EPC + j] = (v + j >= vb && v + j < ve) ? mass[v + j] : zero_t();
            }
        }
    }
}

template <int WN>
__device__ __forceinline__ void reduce_compute(const T* st, float (&acc)[4][WN][4], bool weighted) {
    typedef RLay<WN> L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const T* As = st + L::A_OFF;
    const T* Bs = st + L::B_OFF;
    const T* Ms = st + L::M_OFF;
#if DIFF_HALF
    const u32 a_base = smem_addr(As), b_base = smem_addr(Bs);
    const int t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < RBV / 16; ++ks) {
        u32 a[4][4], b[WN][2];
        // A = basisᵀ (eigenvector × vertex); smem holds basis rows (vertex-major): ldmatrix.trans.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ks * 16 + ((lane >> 4) & 1) * 8 + (lane & 7);
            const int col = wm * 64 + i * 16 + ((lane >> 3) & 1) * 8;
            ldsm_x4_t(a_base + (r * L::LDA + col) * 2, a[i][0], a[i][1], a[i][2], a[i][3]);
        }
        // B = y (vertex × channel), row-major in smem: ldmatrix.trans gives the k-pairs.
#pragma unroll
        for (int j = 0; j < WN / 2; ++j) {
            const int r = ks * 16 + (lane & 15);
            const int col = wn * WN * 8 + j * 16 + (lane >> 4) * 8;
            ldsm_x4_t(b_base + (r * L::LDB + col) * 2, b[2 * j][0], b[2 * j][1], b[2 * j + 1][0], b[2 * j + 1][1]);
        }
        if (weighted) {
            // b[.][0] holds vertices (2t, 2t+1) of this k16 step, b[.][1] holds (2t+8, 2t+9).
            const u32* m32 = reinterpret_cast<const u32*>(Ms);
            const u32 w_lo = m32[(ks * 16 + 2 * t) >> 1], w_hi = m32[(ks * 16 + 8 + 2 * t) >> 1];
#pragma unroll
            for (int j = 0; j < WN; ++j) {
                b[j][0] = mul_pair(b[j][0], w_lo);
                b[j][1] = mul_pair(b[j][1], w_hi);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_16816(acc[i][j], a[i], b[j][0], b[j][1]);
    }
#elif DIFF_F32_BF16X3
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kp = 0; kp < RBV / 16; ++kp) {
        // The TF32 fragments of steps 2kp (rows r0, r1) and 2kp + 1 (rows r0 + 8, r1 + 8), paired.
        u32 ahi[4][4], alo[4][4], bhi[WN][2], blo[WN][2];
        const int r0 = kp * 16 + t, r1 = r0 + 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = wm * 64 + i * 16 + g;
            ember_split_bf16x2(As[r0 * L::LDA + col], As[(r0 + 8) * L::LDA + col], ahi[i][0], alo[i][0]);
            ember_split_bf16x2(As[r0 * L::LDA + col + 8], As[(r0 + 8) * L::LDA + col + 8], ahi[i][1], alo[i][1]);
            ember_split_bf16x2(As[r1 * L::LDA + col], As[(r1 + 8) * L::LDA + col], ahi[i][2], alo[i][2]);
            ember_split_bf16x2(As[r1 * L::LDA + col + 8], As[(r1 + 8) * L::LDA + col + 8], ahi[i][3], alo[i][3]);
        }
        const float w0 = weighted ? Ms[r0] : 1.0f, w0b = weighted ? Ms[r0 + 8] : 1.0f;
        const float w1 = weighted ? Ms[r1] : 1.0f, w1b = weighted ? Ms[r1 + 8] : 1.0f;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int col = wn * WN * 8 + j * 8 + g;
            ember_split_bf16x2(Bs[r0 * L::LDB + col] * w0, Bs[(r0 + 8) * L::LDB + col] * w0b, bhi[j][0], blo[j][0]);
            ember_split_bf16x2(Bs[r1 * L::LDB + col] * w1, Bs[(r1 + 8) * L::LDB + col] * w1b, bhi[j][1], blo[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_3xbf16(acc[i][j], ahi[i], alo[i], bhi[j], blo[j]);
    }
#else
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < RBV / 8; ++ks) {
        u32 ahi[4][4], alo[4][4], bhi[WN][2], blo[WN][2];
        const int r0 = ks * 8 + t, r1 = r0 + 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int col = wm * 64 + i * 16 + g;
            split_tf32(As[r0 * L::LDA + col], ahi[i][0], alo[i][0]);
            split_tf32(As[r0 * L::LDA + col + 8], ahi[i][1], alo[i][1]);
            split_tf32(As[r1 * L::LDA + col], ahi[i][2], alo[i][2]);
            split_tf32(As[r1 * L::LDA + col + 8], ahi[i][3], alo[i][3]);
        }
        const float w0 = weighted ? Ms[r0] : 1.0f, w1 = weighted ? Ms[r1] : 1.0f;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int col = wn * WN * 8 + j * 8 + g;
            split_tf32(Bs[r0 * L::LDB + col] * w0, bhi[j][0], blo[j][0]);
            split_tf32(Bs[r1 * L::LDB + col] * w1, bhi[j][1], blo[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_3xtf32(acc[i][j], ahi[i], alo[i], bhi[j], blo[j]);
    }
#endif
}

// grid: (chunks, m-tiles × n-tiles). ws: [chunks][KP][CP] f32, every element of the tile written.
template <int WN>
__device__ __forceinline__ void reduce_kernel(const T* __restrict__ basis, const T* __restrict__ y, const T* __restrict__ mass,
                                              float* __restrict__ ws, const Seg* __restrict__ chunks, i64 rows_per_chunk,
                                              i64 n_rows, i64 n_chunks, int K, int C, int KP, int CP, int vec, i64 chunk, int tile) {
    typedef RLay<WN> L;
    extern __shared__ __align__(128) unsigned char diff_smem[];
    T* smem = reinterpret_cast<T*>(diff_smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int n_nt = CP / L::BN;
    const int e0 = (tile / n_nt) * RBM, c0 = (tile % n_nt) * L::BN;
    const Seg s = seg_at(chunks, chunk, rows_per_chunk, n_rows, n_chunks);
    const i64 base = s.begin & ~(i64)7;
    const int n_steps = (int)((s.end - base + RBV - 1) / RBV);

    float acc[4][WN][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

#pragma unroll
    for (int st = 0; st < RNST - 1; ++st) {
        if (st < n_steps) reduce_load<WN>(smem + st * L::STAGE, basis, y, mass, base + (i64)st * RBV, s.begin, s.end, e0, K, c0, C, vec);
        cp_async_commit();
    }
    for (int it = 0; it < n_steps; ++it) {
        cp_async_wait<RNST - 2>();
        __syncthreads();
        const int nx = it + RNST - 1;
        if (nx < n_steps) reduce_load<WN>(smem + (nx % RNST) * L::STAGE, basis, y, mass, base + (i64)nx * RBV, s.begin, s.end, e0, K, c0, C, vec);
        cp_async_commit();
#if DIFF_HALF
        reduce_compute<WN>(smem + (it % RNST) * L::STAGE, acc, mass != nullptr);
#else
        // f32: the tensor cores' accumulation over thousands of steps drifts past the f32
        // tolerance at V ~ 1M, so each stage sums into fresh registers, added to acc in IEEE f32.
        float part[4][WN][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) part[i][j][q] = 0.0f;
        reduce_compute<WN>(smem + (it % RNST) * L::STAGE, part, mass != nullptr);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] += part[i][j][q];
#endif
    }
    cp_async_wait<0>();

    // Each thread owns rows (g, g+8) × columns (2t, 2t+1) of every 16×8 tile: 8-byte stores, each
    // warp store fills whole 32-byte sectors.
    const int g = lane >> 2, t = lane & 3;
    float* out = ws + chunk * (i64)KP * CP;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 e = e0 + wm * 64 + i * 16 + g;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int c = c0 + wn * WN * 8 + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(out + e * CP + c) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(out + (e + 8) * CP + c) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
    }
}

// ---- finalize: fixed-order sums of the partials, the decay, the GEMM operand ----------------------
//
// block (32, 8): thread (x, y) owns channel cb·32 + x and eigenvector blockIdx.y·8 + y; grid
// (mesh · CPe/32, KPe/8), so every (mesh, k, c) has its own thread. A mesh's chunks are
// chunk_prefix[m]..chunk_prefix[m+1] (or all chunks without a table).

// Σ over chunks [ch0, ch1) with eight independent accumulators (chunk ch goes to ch − ch0 mod 8)
// combined in a fixed tree: loads stay in flight, and the order depends only on the chunk range.
// L2 loads (ld.global.cg): coherent with stores of other blocks of the same launch once a grid
// barrier separates them, unlike the read-only path.
__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ float sum_partials(const float* ws, i64 ch0, i64 ch1, int e, int c, int KP, int CP) {
    float s[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j] = 0.0f;
    const i64 stride = (i64)KP * CP;
    const float* p = ws + (ch0 * KP + e) * (i64)CP + c;
    i64 n = ch1 - ch0;
    for (; n >= 8; n -= 8, p += 8 * stride) {
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j] += ld_cg(p + j * stride);
    }
#pragma unroll
    for (int j = 0; j < 7; ++j)
        if (j < n) s[j] += ld_cg(p + j * stride);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// A mesh of n ≥ FIN_SPLIT_MIN chunks is summed as FIN_PARTS sub-ranges (part p: chunks
// ch0 + n·p/FIN_PARTS up to ch0 + n·(p + 1)/FIN_PARTS), combined in a fixed tree; fewer chunks are
// one range (parts of a few chunks each, summed one after another by one thread, cost a latency
// round trip each: a batch of 16 small meshes got 6 % slower). The standalone finalize gives each
// part its own thread (blockDim.z of them), so four times the loads are in flight per output; the
// fused pass sums the parts in one thread. Either way the order depends only on the mesh's chunk
// count: the same bits from both paths, for any batch, and whatever blockDim.z is.
#define FIN_PARTS 4
#ifndef FIN_SPLIT_MIN  // the host passes it (cuda.rs, fin_split_min)
#define FIN_SPLIT_MIN 16
#endif

// Block (bx, by) of the finalize grid, thread (tx, ty) of its 32 × 8: which output it owns.
struct FinIdx {
    i64 m, ch0, ch1;
    int e, c;
    bool live;  // (e, c) inside K × C (the rest write the operand's zero padding)
};

__device__ __forceinline__ FinIdx fin_idx(const i64* __restrict__ chunk_prefix, i64 n_chunks, int K, int C, int CPe, i64 bx,
                                          int by, int tx, int ty) {
    FinIdx f;
    const int cblocks = CPe / 32;
    f.m = bx / cblocks;
    f.c = (int)(bx % cblocks) * 32 + tx;
    f.e = by * 8 + ty;
    f.ch0 = chunk_prefix ? chunk_prefix[f.m] : 0;
    f.ch1 = chunk_prefix ? chunk_prefix[f.m + 1] : n_chunks;
    f.live = f.e < K && f.c < C;
    return f;
}

// Parts of a mesh's chunk range (1 or FIN_PARTS; uniform over a block: a block is one mesh's).
__device__ __forceinline__ int fin_nparts(const FinIdx& f) { return f.ch1 - f.ch0 >= FIN_SPLIT_MIN ? FIN_PARTS : 1; }

__device__ __forceinline__ float fin_part(const float* ws, const FinIdx& f, int p, int np, int KP, int CP) {
    const i64 n = f.ch1 - f.ch0;
    return sum_partials(ws, f.ch0 + n * p / np, f.ch0 + n * (p + 1) / np, f.e, f.c, KP, CP);
}

__device__ __forceinline__ float fin_combine(const float* r, int np) { return np == 1 ? r[0] : (r[0] + r[1]) + (r[2] + r[3]); }

// All parts in this thread (the fused pass).
__device__ __forceinline__ float fin_sum_serial(const float* ws, const FinIdx& f, int KP, int CP) {
    const int np = fin_nparts(f);
    float r[FIN_PARTS];
#pragma unroll
    for (int p = 0; p < FIN_PARTS; ++p) r[p] = f.live && p < np ? fin_part(ws, f, p, np, KP, CP) : 0.0f;
    return fin_combine(r, np);
}

// Thread z of blockDim.z sums parts z, z + blockDim.z, …; every thread of the block must call it.
__device__ __forceinline__ float fin_sum_block(const float* ws, const FinIdx& f, int KP, int CP, float (*parts)[8][33]) {
    const int tx = threadIdx.x, ty = threadIdx.y, np = fin_nparts(f);
    for (int p = threadIdx.z; p < np; p += blockDim.z) parts[p][ty][tx] = f.live ? fin_part(ws, f, p, np, KP, CP) : 0.0f;
    __syncthreads();
    float r[FIN_PARTS];
#pragma unroll
    for (int p = 0; p < FIN_PARTS; ++p) r[p] = p < np ? parts[p][ty][tx] : 0.0f;
    return fin_combine(r, np);
}

// What output f's finalize reads besides the partials: the decay exp(−λt), λ, and in the backward
// the forward's f32 spectral and d_spectral at f (zeros where f is not live). All are inputs of
// the pass or written before it, so the finalize loads them before its grid-dependency wait
// (launch order: top of this file).
struct FinIn {
    float decay, ev, saved, d_spec;
};

template <bool BWD>
__device__ __forceinline__ FinIn fin_inputs(const FinIdx& f, const float* __restrict__ evals, const float* __restrict__ times,
                                            const float* __restrict__ saved, const T* __restrict__ d_spectral, int K, int C) {
    FinIn in{0.0f, 0.0f, 0.0f, 0.0f};
    if (f.live) {
        in.ev = evals[f.m * K + f.e];
        in.decay = expf(-in.ev * times[f.c]);
        if (BWD) {
            const i64 o = (f.m * K + f.e) * C + f.c;
            in.saved = saved[o];
            if (d_spectral) in.d_spec = ember_to_f32(d_spectral[o]);
        }
    }
    return in;
}

// s: the combined chunk sum of output f (meaningful where f.live).
__device__ __forceinline__ void finalize_fwd_block(const FinIdx& f, float s, const FinIn& in, int K, int C,
                                                   T* __restrict__ spectral, float* __restrict__ saved, T* __restrict__ s_op,
                                                   int KPe, int CPe) {
    float val = 0.0f;
    if (f.live) {
        val = in.decay * s;
        const i64 o = (f.m * K + f.e) * C + f.c;
        spectral[o] = ember_from_f32<T>(val);
        saved[o] = val;
    }
    s_op[(f.m * KPe + f.e) * CPe + f.c] = ember_from_f32<T>(val);
}

// The finalize's block: 32 × 8 × (1, 2 or 4) threads; layer z > 0 only helps with the sums.
// Two builds of each: registers for two 1024-thread blocks per SM (32: diffusion_finalize_{fwd,bwd};
// the sums spill 64–76 bytes), or for one (64, no spills: diffusion_finalize_{fwd,bwd}_1cta, v18b),
// which the host takes where asked and the four-layer grid fits one block per SM (finalize_1cta).
#define FIN_MAX_THREADS (32 * 8 * FIN_PARTS)

__device__ __forceinline__ void finalize_fwd_kernel(const float* __restrict__ ws, const i64* __restrict__ chunk_prefix,
                                                    i64 n_chunks, const float* __restrict__ evals, const float* __restrict__ times,
                                                    int K, int C, int KPr, int CPr, T* __restrict__ spectral,
                                                    float* __restrict__ saved, T* __restrict__ s_op, int KPe, int CPe) {
    __shared__ float parts[FIN_PARTS][8][33];
    ember_launch_dependents();
    const FinIdx f = fin_idx(chunk_prefix, n_chunks, K, C, CPe, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
    const FinIn in = threadIdx.z == 0 ? fin_inputs<false>(f, evals, times, nullptr, nullptr, K, C) : FinIn{0.0f, 0.0f, 0.0f, 0.0f};
    ember_grid_dependency_wait();  // the reduce's partials
    const float s = fin_sum_block(ws, f, KPr, CPr, parts);
    if (threadIdx.z == 0) finalize_fwd_block(f, s, in, K, C, spectral, saved, s_op, KPe, CPe);
}

#define DIFF_FINALIZE_FWD(NAME, MIN_BLOCKS)                                                                                    \
    extern "C" __global__ void __launch_bounds__(FIN_MAX_THREADS, MIN_BLOCKS) NAME(                                            \
        const float* __restrict__ ws, const i64* __restrict__ chunk_prefix, i64 n_chunks, const float* __restrict__ evals,     \
        const float* __restrict__ times, int K, int C, int KPr, int CPr, T* __restrict__ spectral, float* __restrict__ saved,  \
        T* __restrict__ s_op, int KPe, int CPe) {                                                                              \
        finalize_fwd_kernel(ws, chunk_prefix, n_chunks, evals, times, K, C, KPr, CPr, spectral, saved, s_op, KPe, CPe);        \
    }
DIFF_FINALIZE_FWD(diffusion_finalize_fwd, 2)
DIFF_FINALIZE_FWD(diffusion_finalize_fwd_1cta, 1)

// dt_part: [mesh · gridDim.y][CPe], the d_times contribution of each block of 8 eigenvectors.
// gy: the finalize grid's height (eigenvector blocks per mesh); red: 8 × 33 floats of shared memory.
// Every thread of the 32 × 8 layer calls it (it synchronises on red).
__device__ __forceinline__ void finalize_bwd_block(const FinIdx& f, float s, const FinIn& in, T* __restrict__ g_op, int KPe,
                                                   int CPe, float* __restrict__ dt_part, int by, int gy, int tx, int ty,
                                                   float (*red)[33]) {
    float val = 0.0f, dt = 0.0f;
    if (f.live) {
        s += in.d_spec;
        val = in.decay * s;
        dt = -in.ev * in.saved * s;
    }
    g_op[(f.m * KPe + f.e) * CPe + f.c] = ember_from_f32<T>(val);
    red[ty][tx] = dt;
    // The 256 threads of the layer (the first 8 warps of the block) only: in the standalone
    // finalize the other layers have exited.
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (ty == 0) {
        float s = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; ++y) s += red[y][tx];
        dt_part[(f.m * gy + by) * CPe + f.c] = s;
    }
}

__device__ __forceinline__ void finalize_bwd_kernel(const float* __restrict__ ws, const i64* __restrict__ chunk_prefix,
                                                    i64 n_chunks, const float* __restrict__ evals, const float* __restrict__ times,
                                                    const float* __restrict__ saved, const T* __restrict__ d_spectral, int K,
                                                    int C, int KPr, int CPr, T* __restrict__ g_op, int KPe, int CPe,
                                                    float* __restrict__ dt_part) {
    __shared__ float parts[FIN_PARTS][8][33];
    __shared__ float red[8][33];
    ember_launch_dependents();
    const FinIdx f = fin_idx(chunk_prefix, n_chunks, K, C, CPe, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
    const FinIn in = threadIdx.z == 0 ? fin_inputs<true>(f, evals, times, saved, d_spectral, K, C) : FinIn{0.0f, 0.0f, 0.0f, 0.0f};
    ember_grid_dependency_wait();  // the reduce's partials
    const float s = fin_sum_block(ws, f, KPr, CPr, parts);
    if (threadIdx.z != 0) return;  // layer 0 goes on alone (finalize_bwd_block's barrier counts 256)
    finalize_bwd_block(f, s, in, g_op, KPe, CPe, dt_part, blockIdx.y, gridDim.y, threadIdx.x, threadIdx.y, red);
}

#define DIFF_FINALIZE_BWD(NAME, MIN_BLOCKS)                                                                                    \
    extern "C" __global__ void __launch_bounds__(FIN_MAX_THREADS, MIN_BLOCKS) NAME(                                            \
        const float* __restrict__ ws, const i64* __restrict__ chunk_prefix, i64 n_chunks, const float* __restrict__ evals,     \
        const float* __restrict__ times, const float* __restrict__ saved, const T* __restrict__ d_spectral, int K, int C,      \
        int KPr, int CPr, T* __restrict__ g_op, int KPe, int CPe, float* __restrict__ dt_part) {                               \
        finalize_bwd_kernel(ws, chunk_prefix, n_chunks, evals, times, saved, d_spectral, K, C, KPr, CPr, g_op, KPe, CPe,       \
                            dt_part);                                                                                          \
    }
DIFF_FINALIZE_BWD(diffusion_finalize_bwd, 2)
DIFF_FINALIZE_BWD(diffusion_finalize_bwd_1cta, 1)

// ---- pass 2: Y = diag(w)·basis·S over 128-vertex tiles ---------------------------------------------
//
// CTA tile: 128 vertices (2 warps × 64) × BN channels (4 warps × 8·WN); the reduction over the K
// eigenvectors runs in EBK-wide chunks through ENST cp.async stages. The CTA owns a contiguous range
// of tiles (persistent); S (KP × BN of the tile's mesh) stays in shared memory while the mesh does
// not change, so each basis byte is read once and S costs no L2 traffic per tile.

#define EBM 128
#ifndef EBK
#define EBK 64
#endif
#ifndef ENST
#define ENST 3
#endif

template <int WN>
struct ELay {
    static constexpr int BN = 4 * WN * 8;
    static constexpr int LDA = EBK + (DIFF_HALF ? 8 : 4);  // 16-bit: an odd number of vectors/row; f32: ≡ 4 mod 32
    static constexpr int LDS = BN + 8;
    static constexpr int STAGE = EBM * LDA;
    // 16-bit epilogue: each warp stages 64 rows × SLICE channels, then writes 16-byte vectors.
    static constexpr int SLICE_NT = WN < 4 ? WN : 4;
    static constexpr int LDE = SLICE_NT * 8 + 8;
    static constexpr int EPI_WARP = 64 * LDE;
};

// Shared memory (elements of T): [S: KP·LDS][stages: ENST·STAGE][epilogue: 8·EPI_WARP (16-bit)].
template <int WN>
__device__ __forceinline__ void expand_load(T* st, const T* __restrict__ basis, i64 rb, i64 re, int kc, int K, bool vec) {
    typedef ELay<WN> L;
    const int tid = threadIdx.x;
    const int k0 = kc * EBK;
    if (vec) {
        constexpr int CH = EBK / EPC;
        for (int i = tid; i < EBM * CH; i += NTHREADS) {
            const int r = i / CH, ch = i % CH;
            const i64 v = rb + r;
            const int k = k0 + ch * EPC;
            const bool ok = v < re && k < K;
            cp_async16(st + r * L::LDA + ch * EPC, ok ? (const void*)(basis + v * K + k) : (const void*)basis, ok ? 16 : 0);
        }
    } else {
        for (int i = tid; i < EBM * EBK; i += NTHREADS) {
            const int r = i / EBK, k = i % EBK;
            const i64 v = rb + r;
            st[r * L::LDA + k] = (v < re && k0 + k < K) ? basis[v * K + k0 + k] : zero_t();
        }
    }
}

template <int WN>
__device__ __forceinline__ void expand_compute(const T* st, const T* Ss, int kc, float (&acc)[4][WN][4]) {
    typedef ELay<WN> L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 2, wn = warp & 3;
#if DIFF_HALF
    const u32 a_base = smem_addr(st), s_base = smem_addr(Ss);
#pragma unroll
    for (int ks = 0; ks < EBK / 16; ++ks) {
        u32 a[4][4], b[WN][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = wm * 64 + i * 16 + (lane & 15);
            const int col = ks * 16 + (lane >> 4) * 8;
            ldsm_x4(a_base + (r * L::LDA + col) * 2, a[i][0], a[i][1], a[i][2], a[i][3]);
        }
#pragma unroll
        for (int j = 0; j < WN / 2; ++j) {
            const int r = kc * EBK + ks * 16 + (lane & 15);
            const int col = wn * WN * 8 + j * 16 + (lane >> 4) * 8;
            ldsm_x4_t(s_base + (r * L::LDS + col) * 2, b[2 * j][0], b[2 * j][1], b[2 * j + 1][0], b[2 * j + 1][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_16816(acc[i][j], a[i], b[j][0], b[j][1]);
    }
#elif DIFF_F32_BF16X3
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kp = 0; kp < EBK / 16; ++kp) {
        // The TF32 fragments of steps 2kp (k = c0, c0 + 4) and 2kp + 1 (c0 + 8, c0 + 12), paired.
        u32 ahi[4][4], alo[4][4], bhi[WN][2], blo[WN][2];
        const int c0 = kp * 16 + t;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = wm * 64 + i * 16 + g;
            ember_split_bf16x2(st[r * L::LDA + c0], st[r * L::LDA + c0 + 8], ahi[i][0], alo[i][0]);
            ember_split_bf16x2(st[(r + 8) * L::LDA + c0], st[(r + 8) * L::LDA + c0 + 8], ahi[i][1], alo[i][1]);
            ember_split_bf16x2(st[r * L::LDA + c0 + 4], st[r * L::LDA + c0 + 12], ahi[i][2], alo[i][2]);
            ember_split_bf16x2(st[(r + 8) * L::LDA + c0 + 4], st[(r + 8) * L::LDA + c0 + 12], ahi[i][3], alo[i][3]);
        }
        const int k = kc * EBK + c0;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int col = wn * WN * 8 + j * 8 + g;
            ember_split_bf16x2(Ss[k * L::LDS + col], Ss[(k + 8) * L::LDS + col], bhi[j][0], blo[j][0]);
            ember_split_bf16x2(Ss[(k + 4) * L::LDS + col], Ss[(k + 12) * L::LDS + col], bhi[j][1], blo[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_3xbf16(acc[i][j], ahi[i], alo[i], bhi[j], blo[j]);
    }
#else
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < EBK / 8; ++ks) {
        u32 ahi[4][4], alo[4][4], bhi[WN][2], blo[WN][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = wm * 64 + i * 16 + g;
            const int col = ks * 8 + t;
            split_tf32(st[r * L::LDA + col], ahi[i][0], alo[i][0]);
            split_tf32(st[(r + 8) * L::LDA + col], ahi[i][1], alo[i][1]);
            split_tf32(st[r * L::LDA + col + 4], ahi[i][2], alo[i][2]);
            split_tf32(st[(r + 8) * L::LDA + col + 4], ahi[i][3], alo[i][3]);
        }
        const int k = kc * EBK + ks * 8 + t;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int col = wn * WN * 8 + j * 8 + g;
            split_tf32(Ss[k * L::LDS + col], bhi[j][0], blo[j][0]);
            split_tf32(Ss[(k + 4) * L::LDS + col], bhi[j][1], blo[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < WN; ++j) mma_3xtf32(acc[i][j], ahi[i], alo[i], bhi[j], blo[j]);
    }
#endif
}

// Rows [rb, re) of the tile; w[i][h] the weight of row wm·64 + 16i + g + 8h.
template <int WN>
__device__ __forceinline__ void expand_epilogue(T* epi, float (&acc)[4][WN][4], const float (&w)[4][2], T* __restrict__ out,
                                                i64 rb, i64 re, int c0, int C, bool vec) {
    typedef ELay<WN> L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    const i64 row0 = rb + wm * 64;
    const int col0 = c0 + wn * WN * 8;
#if DIFF_HALF
    T* stg = epi + warp * L::EPI_WARP;
    constexpr int SL = L::SLICE_NT;
    constexpr int CPR = SL * 8 / EPC;  // 16-byte vectors per staged row
#pragma unroll
    for (int sl = 0; sl < WN / SL; ++sl) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int jj = 0; jj < SL; ++jj) {
                const int j = sl * SL + jj;
                const int r = i * 16 + g, col = jj * 8 + 2 * t;
                *reinterpret_cast<u32*>(stg + r * L::LDE + col) = ember_pack2<T>(acc[i][j][0] * w[i][0], acc[i][j][1] * w[i][0]);
                *reinterpret_cast<u32*>(stg + (r + 8) * L::LDE + col) = ember_pack2<T>(acc[i][j][2] * w[i][1], acc[i][j][3] * w[i][1]);
            }
        __syncwarp();
        for (int q = lane; q < 64 * CPR; q += 32) {
            const int r = q / CPR, ch = q % CPR;
            const i64 v = row0 + r;
            const int c = col0 + sl * SL * 8 + ch * EPC;
            if (v < re) {
                const T* src = stg + r * L::LDE + ch * EPC;
                if (vec) {
                    if (c < C) *reinterpret_cast<uint4*>(out + v * C + c) = *reinterpret_cast<const uint4*>(src);
                } else {
                    for (int k = 0; k < EPC; ++k)
                        if (c + k < C) out[v * C + c + k] = src[k];
                }
            }
        }
        __syncwarp();
    }
#else
    (void)epi;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 v = row0 + i * 16 + g + 8 * h;
            if (v >= re) continue;
#pragma unroll
            for (int j = 0; j < WN; ++j) {
                const int c = col0 + j * 8 + 2 * t;
                const float x0 = acc[i][j][2 * h] * w[i][h], x1 = acc[i][j][2 * h + 1] * w[i][h];
                if (vec) {
                    // C is a multiple of 4 and c is even: both columns are in or both out.
                    if (c < C) *reinterpret_cast<float2*>(out + v * C + c) = make_float2(x0, x1);
                } else {
                    if (c < C) out[v * C + c] = x0;
                    if (c + 1 < C) out[v * C + c + 1] = x1;
                }
            }
        }
#endif
}

// grid: (persistent CTAs, n-tiles). s_op: [mesh][KP][CPs] (zero-padded). tiles: one Seg per
// 128-row tile (or none: tiles of one mesh of n_rows rows). mass (nullable) weights the rows.
// dt_part (nullable): block (0, 0) also writes d_times[c] = Σ_r dt_part[r][c], r in order.
template <int WN>
__device__ __forceinline__ void expand_kernel(const T* __restrict__ basis, const T* __restrict__ s_op, const T* __restrict__ mass,
                                              T* __restrict__ out, const Seg* __restrict__ tiles, i64 n_rows, i64 n_tiles, int K,
                                              int C, int KP, int CPs, int vec, const float* __restrict__ dt_part, int dt_rows,
                                              float* __restrict__ d_times, i64 bx, int by, i64 gx) {
    typedef ELay<WN> L;
    extern __shared__ __align__(128) unsigned char diff_smem[];
    T* Ss = reinterpret_cast<T*>(diff_smem);
    T* stages = Ss + KP * L::LDS;
    T* epi = stages + ENST * L::STAGE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, g = lane >> 2;
    const int c0 = by * L::BN;
    const int n_kc = KP / EBK;

    // Block (0, 0) of the backward also folds the d_times rows: the same fixed-order eight-way sum
    // as the partials (rows are the "chunks" here). The rows come from the finalize.
    const bool folds = dt_part && bx == 0 && by == 0;
    auto fold_d_times = [&]() {
        for (int c = tid; c < C; c += NTHREADS) d_times[c] = sum_partials(dt_part, 0, dt_rows, 0, c, 1, CPs);
    };

    const i64 per = n_tiles / gx, rem = n_tiles % gx;
    const i64 t_lo = bx * per + min(bx, rem);
    const i64 t_hi = t_lo + per + (bx < rem ? 1 : 0);

    // One segment: consecutive tiles of one mesh from t0, rows rb(t) = first.begin + (t − t0)·128.
    // Its S tile, and its first ENST − 1 basis stages (group 0 carries whatever was issued before).
    auto load_s = [&](const Seg& first) {
        const T* src = s_op + first.mesh * (i64)KP * CPs + c0;
        constexpr int CH = L::BN / EPC;
        for (int i = tid; i < KP * CH; i += NTHREADS) {
            const int r = i / CH, ch = i % CH;
            cp_async16(Ss + r * L::LDS + ch * EPC, src + (i64)r * CPs + ch * EPC, 16);
        }
    };
    auto issue_stages = [&](const Seg& first, i64 mesh_end, i64 n_it) {
#pragma unroll
        for (int s = 0; s < ENST - 1; ++s) {
            if (s < n_it) {
                const i64 rb = first.begin + (s / n_kc) * (i64)EBM;
                expand_load<WN>(stages + s * L::STAGE, basis, rb, min(mesh_end, rb + EBM), s % n_kc, K, vec);
            }
            cp_async_commit();
        }
    };
    auto segment = [&](i64 t0, Seg& first, i64& t1, i64& mesh_end) {
        first = seg_at(tiles, t0, EBM, n_rows, n_tiles);
        t1 = min(t_hi, first.run_end);
        mesh_end = tiles ? seg_at(tiles, first.run_end - 1, EBM, n_rows, n_tiles).end : n_rows;
    };
    // The first segment's basis stages go out before the grid-dependency wait: the basis and the
    // tile table are inputs no kernel of this pass writes (launch order: top of this file), so they
    // load while the finalize still runs; S and the d_times rows come from the finalize. On small
    // meshes (one tile per CTA, KP ≤ (ENST − 1)·EBK) these are all of the CTA's basis loads.
    bool loaded = false;  // the first segment's S and stages have landed
    if (t_lo < t_hi) {
        Seg first;
        i64 t1, mesh_end;
        segment(t_lo, first, t1, mesh_end);
        issue_stages(first, mesh_end, (t1 - t_lo) * n_kc);
    }
    ember_grid_dependency_wait();  // S and the d_times rows from the finalize
    // The next pass's reduce (a dependent launch, reduce_pdl) may take SMs as this grid's CTAs
    // exit; it waits for this kernel before it reads anything.
    ember_launch_dependents();
    if (t_lo < t_hi) {
        Seg first;
        i64 t1, mesh_end;
        segment(t_lo, first, t1, mesh_end);
        load_s(first);
        cp_async_commit();
        loaded = true;
    }
    if (folds) fold_d_times();  // while S is in flight
    if (loaded) cp_async_wait<0>();

    float acc[4][WN][4];
    float w[4][2];
    for (i64 t0 = t_lo; t0 < t_hi;) {
        Seg first;
        i64 t1, mesh_end;
        segment(t0, first, t1, mesh_end);
        const i64 n_it = (t1 - t0) * n_kc;
        if (!loaded) {
            __syncthreads();  // the previous segment's S and stages are no longer read
            load_s(first);
            issue_stages(first, mesh_end, n_it);
        }
        loaded = false;
        for (i64 it = 0; it < n_it; ++it) {
            cp_async_wait<ENST - 2>();
            __syncthreads();
            const i64 nx = it + ENST - 1;
            if (nx < n_it) {
                const i64 rb = first.begin + (nx / n_kc) * (i64)EBM;
                expand_load<WN>(stages + (nx % ENST) * L::STAGE, basis, rb, min(mesh_end, rb + EBM), (int)(nx % n_kc), K, vec);
            }
            cp_async_commit();
            const int kc = (int)(it % n_kc);
            const i64 rb = first.begin + (it / n_kc) * (i64)EBM;
            const i64 re = min(mesh_end, rb + EBM);
            if (kc == 0) {
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < WN; ++j)
#pragma unroll
                        for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
                // Row weights, loaded now and used by the epilogue a few stages later.
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const i64 v = rb + wm * 64 + i * 16 + g + 8 * h;
                        w[i][h] = mass ? (v < re ? ember_to_f32(mass[v]) : 0.0f) : 1.0f;
                    }
            }
            expand_compute<WN>(stages + (it % ENST) * L::STAGE, Ss, kc, acc);
            if (kc == n_kc - 1) expand_epilogue<WN>(epi, acc, w, out, rb, re, c0, C, vec);
        }
        cp_async_wait<0>();
        t0 = t1;
    }
}

#define DIFF_REDUCE(WN)                                                                                                        \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) diffusion_reduce_w##WN(                                         \
        const T* basis, const T* y, const T* mass, float* ws, const Seg* chunks, i64 rows_per_chunk, i64 n_rows, i64 n_chunks, \
        int K, int C, int KP, int CP, int vec) {                                                                               \
        ember_grid_dependency_wait(); /* the previous kernel, where a dependent launch (reduce_pdl) */                          \
        ember_launch_dependents();                                                                                             \
        reduce_kernel<WN>(basis, y, mass, ws, chunks, rows_per_chunk, n_rows, n_chunks, K, C, KP, CP, vec, blockIdx.x, blockIdx.y); \
    }
#define DIFF_EXPAND(WN)                                                                                                        \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) diffusion_expand_w##WN(                                         \
        const T* basis, const T* s_op, const T* mass, T* out, const Seg* tiles, i64 n_rows, i64 n_tiles, int K, int C, int KP, \
        int CPs, int vec, const float* dt_part, int dt_rows, float* d_times) {                                                 \
        expand_kernel<WN>(basis, s_op, mass, out, tiles, n_rows, n_tiles, K, C, KP, CPs, vec, dt_part, dt_rows, d_times,      \
                          blockIdx.x, blockIdx.y, gridDim.x);                                                                  \
    }

// f32: the reduce's per-stage partial sums need registers, so its tiles stop at 2; expand at 4.
#if DIFF_HALF
DIFF_REDUCE(8)
DIFF_REDUCE(4)
DIFF_EXPAND(8)
#endif
DIFF_REDUCE(2)
DIFF_EXPAND(4)
DIFF_EXPAND(2)

// ---- expand on Hopper warpgroup MMA (wgmma, sm_90a; 16-bit activations) ---------------------------
//
// diffusion_expand_wg{1,2}_s{2,4}: the same product as diffusion_expand_w* (Y = diag(w)·basis·S,
// persistent over 128-vertex tiles, S resident in shared memory, backward's block (0, 0) folds the
// d_times rows), with the tensor work on wgmma: two warpgroups, each 64 vertices × BN = 128·NH
// channels (NH m64n128k16 products per 16-deep step, NH·64 f32 accumulators per thread), the
// whole depth KP (K rounded up to 16) of a tile in one shared-memory stage, NST stages in flight
// filled by cp.async. Loads for tile it + NST − 1 are issued before tile it's products, so they
// overlap its tensor work and its epilogue. Inline PTX follows the gradfeat family's staged.cu
// (no-swizzle core-matrix tiles and descriptors; see there).
//
// Shared memory (bytes): [S: KP × BN, MN-major core matrices][NST stages: 128 × KP, K-major]
// [epilogue: 8 warps × 16 rows × (64 + 8) elements; the bulk-store variant diffusion_expand_wgb*
// (v8, below): 128 rows × (2·BN + 16) bytes of staging].
//   stage element (r, k) at (r/8)·(KP/8·128) + (k/8)·128 + (r%8)·16 + (k%8)·2   (K-major A:
//     LBO 128 between the two 8-deep halves of a step, SBO KP·16 between 8-row groups)
//   S element (k, n) at (k/8)·(BN/8·128) + (n/8)·128 + (k%8)·16 + (n%8)·2        (MN-major B:
//     LBO BN·16 between 8-deep groups, SBO 128 between 8-column groups)
// 16-byte chunk i of such a tile (NJ chunks per row) holds row (i/(8·NJ))·8 + i%8, columns
// 8·((i/8) % NJ)..+7: consecutive threads fill consecutive shared-memory bytes.
#if DIFF_HALF
#define EWG_EPI_LD 72  // elements per staged epilogue row (64 + 8: rows start 16 bytes apart mod 128)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EWG_HAS_WGMMA 1
#else
#define EWG_HAS_WGMMA 0  // the host launches these kernels only on sm_90a
#endif
// One inline-PTX statement of the sm_90a helpers below; nothing on other targets, where the helpers
// compile empty (their entries are built everywhere but launched only on sm_90a).
#if EWG_HAS_WGMMA
#define EWG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define EWG_ASM(...) ((void)0)
#endif

__device__ __forceinline__ void ewg_fence_async() {
    EWG_ASM("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void ewg_arrive() {
    EWG_ASM("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void ewg_commit() {
    EWG_ASM("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void ewg_wait0() {
    EWG_ASM("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Named barriers 1 and 2 between the two warpgroups of a CTA (256 threads; barrier 0 is
// __syncthreads): `sync` waits until the other warpgroup has arrived, `arrive` does not wait.
__device__ __forceinline__ void ewg_named_sync(int id) {
    EWG_ASM("bar.sync %0, 256;" ::"r"(id) : "memory");
}
__device__ __forceinline__ void ewg_named_arrive(int id) {
    EWG_ASM("bar.arrive %0, 256;" ::"r"(id) : "memory");
}
// Keep the compiler from moving accumulator accesses across the asynchronous products.
__device__ __forceinline__ void ewg_fence_regs(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// wgmma descriptor without swizzle: start address, leading and stride byte offsets.
__device__ __forceinline__ u64 ewg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32);
}
// d (64×128, f32) = (acc ? d : 0) + A·B over 16 of depth; A K-major (TA = 0, the expand) or
// MN-major (TA = 1, the reduce: basis rows are vertex-major), B MN-major (transposed).
#if DIFF_DTYPE == 2
#define EWG_TYPE "bf16"
#else
#define EWG_TYPE "f16"
#endif
template <int TA>
__device__ __forceinline__ void ewg_mma(float (&d)[64], u64 da, u64 db, int acc) {
    EWG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32." EWG_TYPE "." EWG_TYPE " "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
            "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
            "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "%64, %65, p, 1, 1, %67, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
              "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
              "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
              "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
              "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
              "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
              "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
              "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "r"(acc), "n"(TA));
}

// Byte offset of element (r, c) in a core-matrix tile with nj 16-byte chunks per row.
__device__ __forceinline__ u32 ewg_off(int r, int c, int nj) { return (u32)((r >> 3) * (nj * 128) + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2); }

// One basis tile: rows [rb, re) × KP columns (zeros past re and K) into a K-major stage.
__device__ __forceinline__ void ewg_load_tile(unsigned char* st, const T* __restrict__ basis, i64 rb, i64 re, int K, int KP, bool vec) {
    const int nj = KP / 8;
    if (vec) {
        for (int i = threadIdx.x; i < EBM * nj; i += NTHREADS) {
            const int r = (i / (8 * nj)) * 8 + (i & 7), ch = (i >> 3) % nj;
            const i64 v = rb + r;
            const bool ok = v < re && ch * 8 < K;
            cp_async16(st + 16 * i, ok ? (const void*)(basis + v * K + ch * 8) : (const void*)basis, ok ? 16 : 0);
        }
    } else {
        for (int i = threadIdx.x; i < EBM * KP; i += NTHREADS) {
            const int r = i / KP, k = i % KP;
            const i64 v = rb + r;
            *reinterpret_cast<T*>(st + ewg_off(r, k, nj)) = (v < re && k < K) ? basis[v * K + k] : zero_t();
        }
    }
}

// ---- v8: bulk stores of the output tile (cp.async.bulk, sm_90) ------------------------------------
// The direct epilogue (v5) issues a tile's 64 KB of st.global from the same warps that run the
// products, one after the other: with one CTA per SM nothing else overlaps either. The bulk variant
// (diffusion_expand_wgb*) writes the tile into a shared-memory staging buffer and hands each row to
// the bulk-copy unit, which drains it to global memory while the warps go on to the next tile's
// products. Each warp owns 16 whole rows of the tile (the wgmma accumulator layout), so staging,
// proxy fence, issue and the wait before the next write need only the warp, never a CTA barrier.
// The helpers are empty on sm_80, where the host never launches these entries.
#define EWG_STG_PAD 16  // bytes after each staged row of 2·BN bytes: (4g + t + 4j) mod 32 banks per b32 store

__device__ __forceinline__ void ewg_bulk_store(T* gdst, u32 ssrc, u32 bytes) {
    EWG_ASM("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst), "r"(ssrc), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ewg_bulk_commit() {
    EWG_ASM("cp.async.bulk.commit_group;" ::: "memory");
}
// This thread's bulk copies have read their shared-memory source: the rows may be written again.
__device__ __forceinline__ void ewg_bulk_wait_read() {
    EWG_ASM("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// This thread's bulk copies are complete (before the CTA and its shared memory go away).
__device__ __forceinline__ void ewg_bulk_wait_all() {
    EWG_ASM("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Direct epilogue (v5): rows row0 + {g, g + 8} of the warp's 16; per 64-column slice, stage the
// warp's 16 × 64 values in its slice `stg` (16 × EWG_EPI_LD), then write 16-byte vectors (8 per
// row), or elements where rows are not 16-byte multiples.
template <int NH>
__device__ __forceinline__ void ewg_epilogue_direct(const float (&acc)[NH][64], T* stg, float w0, float w1, T* __restrict__ out,
                                                    i64 row0, i64 re, int c0, int C, bool vec) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int sl = 0; sl < 2 * NH; ++sl) {
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            const int j = (sl & 1) * 8 + jj;
            const float* a = &acc[sl >> 1][4 * j];
            const int col = jj * 8 + 2 * t;
            *reinterpret_cast<u32*>(stg + g * EWG_EPI_LD + col) = ember_pack2<T>(a[0] * w0, a[1] * w0);
            *reinterpret_cast<u32*>(stg + (g + 8) * EWG_EPI_LD + col) = ember_pack2<T>(a[2] * w1, a[3] * w1);
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int idx = q * 32 + lane;
            const int r = idx >> 3, ch = idx & 7;
            const i64 v = row0 + r;
            const int c = c0 + sl * 64 + ch * 8;
            if (v < re) {
                const T* src = stg + r * EWG_EPI_LD + ch * 8;
                if (vec) {
                    if (c < C) *reinterpret_cast<uint4*>(out + v * C + c) = *reinterpret_cast<const uint4*>(src);
                } else {
                    for (int k = 0; k < 8; ++k)
                        if (c + k < C) out[v * C + c + k] = src[k];
                }
            }
        }
        __syncwarp();
    }
}

// Bulk epilogue (v8): the warp's 16 rows × BN columns (the same products, weights and roundings as
// the direct epilogue) into its rows of the staging buffer, then lane r < 16 copies row r to
// global memory if it is in range: min(BN, C − c0) elements, a multiple of 16 bytes where the host
// takes this path (C·2 a multiple of 16; c0 is a multiple of 128), as is the row's global address.
template <int NH>
__device__ __forceinline__ void ewg_epilogue_bulk(const float (&acc)[NH][64], unsigned char* stg, float w0, float w1, T* __restrict__ out,
                                                  i64 row0, i64 re, int c0, int C) {
    constexpr int P = 256 * NH + EWG_STG_PAD;  // bytes per staged row
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    ewg_bulk_wait_read();  // the copies this lane issued one tile ago have read the rows
    __syncwarp();          // ... and every lane knows it before writing
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const float* a = &acc[h][4 * j];
            const int cb = (h * 128 + j * 8 + 2 * t) * 2;
            *reinterpret_cast<u32*>(stg + g * P + cb) = ember_pack2<T>(a[0] * w0, a[1] * w0);
            *reinterpret_cast<u32*>(stg + (g + 8) * P + cb) = ember_pack2<T>(a[2] * w1, a[3] * w1);
        }
    ewg_fence_async();  // this lane's generic-proxy stores, visible to the bulk copies (async proxy)
    __syncwarp();       // every lane's
    if (lane < 16 && row0 + lane < re)
        ewg_bulk_store(out + (row0 + lane) * C + c0, smem_addr(stg + lane * P), (u32)(min(128 * NH, C - c0) * 2));
    ewg_bulk_commit();
}

// S rows k, columns c0..c0+BN of mesh `mesh`'s zero-padded operand (always 16-byte rows) into its
// MN-major core-matrix tile, by cp.async (the caller commits and waits).
template <int NH>
__device__ __forceinline__ void ewg_load_s(unsigned char* Ss, const T* __restrict__ s_op, i64 mesh, int KP, int CPs, int c0) {
    constexpr int NJ = 128 * NH / 8;
    const T* src = s_op + mesh * (i64)KP * CPs + c0;
    for (int i = threadIdx.x; i < KP * NJ; i += NTHREADS) {
        const int k = (i / (8 * NJ)) * 8 + (i & 7), ch = (i >> 3) % NJ;
        cp_async16(Ss + 16 * i, src + (i64)k * CPs + ch * 8, 16);
    }
}

// One 16-deep step ks of the warpgroup's 64 × BN product: A from descriptor da, B the resident S.
template <int NH>
__device__ __forceinline__ void ewg_step(float (&acc)[NH][64], u64 da, u32 s_base, int ks) {
    constexpr int BN = 128 * NH;
#pragma unroll
    for (int h = 0; h < NH; ++h) {
        const u64 db = ewg_desc(s_base + ks * 2 * BN * 16 + h * 16 * 128, BN * 16, 128);
        ewg_mma<0>(acc[h], da, db, ks);
    }
}

// The warp's 16 rows of tile [rb, re) out of the accumulators: mass weights (backward) in f32, then
// the bulk epilogue (BULK and 16-byte rows) or the direct one, in the warp's part of `epi`.
// The warp's first row of tile rb (rows rb + wg·64 + wq·16 + {g, g + 8} are the warp's 16), and the
// weights of this lane's two rows: mass (backward) or 1, 0 past the tile's end.
__device__ __forceinline__ i64 ewg_warp_rows(i64 rb, i64 re, const T* __restrict__ mass, float& w0, float& w1) {
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const i64 row0 = rb + (warp >> 2) * 64 + (warp & 3) * 16;
    w0 = 1.0f, w1 = 1.0f;
    if (mass) {
        w0 = row0 + g < re ? ember_to_f32(mass[row0 + g]) : 0.0f;
        w1 = row0 + g + 8 < re ? ember_to_f32(mass[row0 + g + 8]) : 0.0f;
    }
    return row0;
}

template <int NH, bool BULK>
__device__ __forceinline__ void ewg_tile_out(const float (&acc)[NH][64], unsigned char* epi, const T* __restrict__ mass, T* __restrict__ out,
                                             i64 rb, i64 re, int c0, int C, int vec) {
    constexpr int STG_P = 256 * NH + EWG_STG_PAD;
    const int warp = threadIdx.x >> 5;
    float w0, w1;
    const i64 row0 = ewg_warp_rows(rb, re, mass, w0, w1);
    if (BULK && vec)
        ewg_epilogue_bulk<NH>(acc, epi + warp * 16 * STG_P, w0, w1, out, row0, re, c0, C);
    else
        ewg_epilogue_direct<NH>(acc, reinterpret_cast<T*>(epi) + warp * 16 * EWG_EPI_LD, w0, w1, out, row0, re, c0, C, vec);
}

// BULK = false: diffusion_expand_wg{NH}_s{NST} (direct epilogue, v5). BULK = true:
// diffusion_expand_wgb{NH}_s{NST}, whose epilogue region is a 128-row staging buffer (pitch
// 2·BN + EWG_STG_PAD bytes) written out by bulk copies; where rows are not 16-byte multiples (!vec)
// it runs the direct epilogue in the same region (8 slices of 16 × EWG_EPI_LD fit in it).
template <int NH, int NST, bool BULK>
__device__ __forceinline__ void expand_wg_kernel(const T* __restrict__ basis, const T* __restrict__ s_op, const T* __restrict__ mass,
                                                 T* __restrict__ out, const Seg* __restrict__ tiles, i64 n_rows, i64 n_tiles, int K,
                                                 int C, int KP, int CPs, int vec, const float* __restrict__ dt_part, int dt_rows,
                                                 float* __restrict__ d_times) {
    constexpr int BN = 128 * NH;
    constexpr int STG_P = 2 * BN + EWG_STG_PAD;
    static_assert(!BULK || 8 * 16 * EWG_EPI_LD * 2 <= EBM * STG_P, "the direct slices fit in the staging buffer");
    extern __shared__ __align__(128) unsigned char diff_smem[];
    unsigned char* Ss = diff_smem;
    unsigned char* stages = Ss + (size_t)KP * BN * 2;
    const int stage_bytes = EBM * KP * 2;
    unsigned char* epi = stages + (size_t)NST * stage_bytes;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int c0 = blockIdx.y * BN;
    const i64 bx = blockIdx.x, gx = gridDim.x;

    if (dt_part && bx == 0 && blockIdx.y == 0) {
        for (int c = tid; c < C; c += NTHREADS) d_times[c] = sum_partials(dt_part, 0, dt_rows, 0, c, 1, CPs);
    }

    const i64 per = n_tiles / gx, rem = n_tiles % gx;
    const i64 t_lo = bx * per + min(bx, rem);
    const i64 t_hi = t_lo + per + (bx < rem ? 1 : 0);
    const u32 s_base = smem_addr(Ss), a_base = smem_addr(stages);

    float acc[NH][64];
    for (i64 t0 = t_lo; t0 < t_hi;) {
        const Seg first = seg_at(tiles, t0, EBM, n_rows, n_tiles);
        const i64 t1 = min(t_hi, first.run_end);
        const i64 mesh_end = tiles ? seg_at(tiles, first.run_end - 1, EBM, n_rows, n_tiles).end : n_rows;
        const i64 n_it = t1 - t0;
        __syncthreads();  // the previous segment's S and stages are no longer read
        ewg_load_s<NH>(Ss, s_op, first.mesh, KP, CPs, c0);
#pragma unroll
        for (int s = 0; s < NST - 1; ++s) {
            if (s < n_it) {
                const i64 rb = first.begin + s * (i64)EBM;
                ewg_load_tile(stages + s * stage_bytes, basis, rb, min(mesh_end, rb + EBM), K, KP, vec);
            }
            cp_async_commit();  // group 0 also carries S
        }
        for (i64 it = 0; it < n_it; ++it) {
            cp_async_wait<NST - 2>();
            ewg_fence_async();  // this thread's landed copies (and plain stores), visible to wgmma
            __syncthreads();    // everyone's; and every product of tile it − 1 has completed
            {
                // Refill the slot of tile it − 1 with tile it + NST − 1.
                const i64 nx = it + NST - 1;
                if (nx < n_it) {
                    const i64 rb = first.begin + nx * (i64)EBM;
                    ewg_load_tile(stages + (int)(nx % NST) * stage_bytes, basis, rb, min(mesh_end, rb + EBM), K, KP, vec);
                }
                cp_async_commit();
            }
            const i64 rb = first.begin + it * (i64)EBM;
            const i64 re = min(mesh_end, rb + EBM);
            const u32 a_tile = a_base + (u32)((int)(it % NST) * stage_bytes) + (u32)(wg * 8 * KP * 16);
#pragma unroll
            for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
            ewg_arrive();
            for (int ks = 0; ks < KP / 16; ++ks) ewg_step<NH>(acc, ewg_desc(a_tile + ks * 256, 128, KP * 16), s_base, ks);
            ewg_commit();
            ewg_wait0();
#pragma unroll
            for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);

            ewg_tile_out<NH, BULK>(acc, epi, mass, out, rb, re, c0, C, vec);
        }
        cp_async_wait<0>();
        t0 = t1;
    }
    if (BULK) ewg_bulk_wait_all();
}

#define DIFF_EXPAND_WG(NAME, NH, NST, BULK)                                                                                    \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) NAME(const T* basis, const T* s_op, const T* mass, T* out,         \
                                                                   const Seg* tiles, i64 n_rows, i64 n_tiles, int K, int C,     \
                                                                   int KP, int CPs, int vec, const float* dt_part, int dt_rows, \
                                                                   float* d_times) {                                            \
        ember_grid_dependency_wait(); /* S from the finalize */                                                                \
        ember_launch_dependents();    /* as in expand_kernel */                                                                \
        expand_wg_kernel<NH, NST, BULK>(basis, s_op, mass, out, tiles, n_rows, n_tiles, K, C, KP, CPs, vec, dt_part, dt_rows, \
                                        d_times);                                                                              \
    }
DIFF_EXPAND_WG(diffusion_expand_wg1_s2, 1, 2, false)
DIFF_EXPAND_WG(diffusion_expand_wg1_s4, 1, 4, false)
DIFF_EXPAND_WG(diffusion_expand_wg2_s2, 2, 2, false)
DIFF_EXPAND_WG(diffusion_expand_wg2_s4, 2, 4, false)
// Bulk stores: the staging buffer costs a load stage where C > 128 (S + 3 stages + 66 KB of staging
// = 226 KB at K = 128); 2 stages where K > 128 leaves no room for more.
DIFF_EXPAND_WG(diffusion_expand_wgb1_s2, 1, 2, true)
DIFF_EXPAND_WG(diffusion_expand_wgb1_s4, 1, 4, true)
DIFF_EXPAND_WG(diffusion_expand_wgb2_s2, 2, 2, true)
DIFF_EXPAND_WG(diffusion_expand_wgb2_s3, 2, 3, true)

// ---- v9: the wgmma expand fed by TMA (cp.async.bulk.tensor + mbarriers, sm_90) ------------------
// diffusion_expand_wgt{NH} (direct epilogue) and diffusion_expand_wgtb{NH} (bulk stores): the same
// tiles, products (same descriptors' values, same order, same scale-d), epilogue and d_times fold
// as diffusion_expand_wg*/wgb*, so the results are bit-identical; only the basis load path differs.
// Why: v8 showed the stores were not the bound; with cp.async every thread issues its share of
// each tile's copies and the CTA meets at a barrier per tile, so the load pipeline advances only
// as fast as the slowest warp reaches that barrier. Here one thread issues two 16 KB tensor copies
// per tile (K ≤ 128), NS slots ahead, and each warpgroup waits only on an mbarrier for its data.
//
// Ring: NS slots of one TMA box each: 128 vertices × 64 eigenvectors (128 bytes per row, the
// 128-byte swizzle span), 16 KB, written by the TMA unit in the canonical K-major 128B-swizzle
// layout: row r at r·128, its 16-byte chunk j at chunk position j ^ (r % 8); 8-row atoms of 1024
// bytes, so every slot starts on a 1024-byte boundary. A tile is NB = ⌈KP/64⌉ boxes (box b: columns
// 64b..64b+63; columns ≥ K and rows ≥ V read as zeros). Box q of the CTA's sequence (tile q / NB of
// its range, across mesh segments) goes to slot q % NS; full[s] (1 arrival + 16 KB of transactions)
// says it landed, empty[s] (8 arrivals, one per warp after its products completed) that it may be
// overwritten.
// Producer: thread 0, with no warp of its own (all 8 warps hold 64·NH accumulators; a ninth warp
// does not fit the register file at 255 registers per thread). It issues every box whose slot's
// previous box has been released, at three points: all NS at the start; before waiting for tile
// j's boxes, those of them not yet issued (only where NS < 2·NB: the ring holds less than two
// tiles, so tile j's boxes reuse tile j − 1's slots); and after it has issued its warpgroup's
// products of tile j (asynchronous, so it waits while they run) boxes up to j·NB + NS, whose slots
// held tiles ≤ j − 1. It waits there for the other warpgroup's release of tile j − 1, which lets
// warpgroup 0 lead by at most one tile; warpgroup 1 can lead by NS/NB.
// No CTA barrier in the tile loop; two per mesh segment (S is rewritten, as in the cp.async path).
// Rows past the tile's end inside V (the next mesh of a batch) are loaded but only affect output
// rows the epilogue does not write (row r of the product depends on row r of A only).
// Shared memory (bytes): [≤ 1 KB to the next 1024-byte boundary][NS × 16 KB slots][S][epilogue or
// staging][full[16], empty[16]].
#define ETM_BOX_K 64
#define ETM_BOX_BYTES (EBM * ETM_BOX_K * 2)
#define ETM_MAX_SLOTS 16

// The driver's CUtensorMap (128 opaque bytes, 64-byte aligned), received as a __grid_constant__
// parameter: its address is a valid tensor-map operand.
struct __align__(64) EtmMap {
    unsigned long long opaque[16];
};

// Box (col, row) of the tensor map into shared memory at `dst`; completes `bar`'s transactions.
__device__ __forceinline__ void etm_load_box(u32 dst, const EtmMap* map, int col, int row, u32 bar) {
    EWG_ASM("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
            "l"(reinterpret_cast<u64>(map)), "r"(col), "r"(row), "r"(bar)
            : "memory");
}
__device__ __forceinline__ void etm_prefetch_map(const EtmMap* map) {
    EWG_ASM("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}
// Descriptor of a K-major operand in the 128-byte swizzle: SBO = 1024 between 8-row atoms, LBO
// unused (encoded 1, as the K extent of one step, 32 bytes, stays inside the 128-byte span),
// layout type 1 in bits 62–63. A step's start moves 32 bytes along the row inside the atom; the
// hardware applies the XOR to the computed address, so the atom must start 1024-aligned (base
// offset 0).
__device__ __forceinline__ u64 etm_desc(u32 addr) { return ewg_desc(addr, 16, 1024) | (1ull << 62); }

// v14: box (col, row) of the tensor map written from shared memory at `src` (bulk group of this
// thread; elements outside the map's bounds are not written).
__device__ __forceinline__ void etm_store_box(const EtmMap* map, int col, int row, u32 src) {
    EWG_ASM("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(reinterpret_cast<u64>(map)),
            "r"(col), "r"(row), "r"(src)
            : "memory");
}

// v14 epilogue of the TMA expand with bulk stores (16-byte rows): the warp stages its 16 rows × BN
// as 2·NH boxes of 16 × 64 elements in the 128-byte swizzle (16-byte chunk q of row r at q ^ (r & 7):
// the lanes' 4-byte stores of one column group hit 32 different banks, no padding needed), and lane 0
// writes each box with one tensor store (the map of `out`: n_rows × C, boxes 16 × 64). This replaces
// the per-row bulk copies, which the compiler issued one lane at a time (a 16-round loop per warp and
// tile). A warp whose rows run past the tile's end inside the tensor (a mesh that ends mid-tile in a
// batch) writes its rows below `re` from the staging with 16-byte stores instead.
template <int NH>
__device__ __forceinline__ void etm_tile_out_boxes(const float (&acc)[NH][64], unsigned char* epi, const T* __restrict__ mass,
                                                   T* __restrict__ out, i64 rb, i64 re, i64 n_rows, int c0, int C,
                                                   const EtmMap* map_out) {
    constexpr int NB = 2 * NH;  // 64-column boxes per warp
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    unsigned char* stg = epi + warp * NB * 2048;  // 1024-byte aligned: the swizzle's period
    float w0, w1;
    const i64 row0 = ewg_warp_rows(rb, re, mass, w0, w1);
    ewg_bulk_wait_read();  // lane 0's stores of one tile ago have read the staging
    __syncwarp();
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const float* a = &acc[h][4 * j];
            // columns h·128 + j·8 + 2t, +1: box 2h + j / 8, chunk j % 8, byte 4t of it
            unsigned char* box = stg + (2 * h + (j >> 3)) * 2048;
            const int q = ((j & 7) ^ g) * 16 + 4 * t;
            *reinterpret_cast<u32*>(box + g * 128 + q) = ember_pack2<T>(a[0] * w0, a[1] * w0);
            *reinterpret_cast<u32*>(box + (g + 8) * 128 + q) = ember_pack2<T>(a[2] * w1, a[3] * w1);
        }
    if (row0 + 16 <= re || re == n_rows) {
        ewg_fence_async();  // this lane's staging stores, visible to the tensor stores (async proxy)
        __syncwarp();       // every lane's
        if (lane == 0) {
#pragma unroll
            for (int b = 0; b < NB; ++b)
                if (c0 + 64 * b < C) etm_store_box(map_out, c0 + 64 * b, (int)row0, smem_addr(stg + b * 2048));
        }
        ewg_bulk_commit();
    } else {
        __syncwarp();  // every lane's staging stores, visible to the warp
        for (int i = lane; i < 16 * NB * 8; i += 32) {
            const int r = i / (NB * 8), b = (i / 8) % NB, ch = i & 7;
            const i64 v = row0 + r;
            const int c = c0 + b * 64 + ch * 8;
            if (v < re && c < C)
                *reinterpret_cast<uint4*>(out + v * C + c) = *reinterpret_cast<const uint4*>(stg + b * 2048 + r * 128 + ((ch ^ (r & 7)) * 16));
        }
    }
}

template <int NH, bool BULK, bool PINGPONG>
__device__ __forceinline__ void expand_tma_kernel(const EtmMap* map, const T* __restrict__ s_op, const T* __restrict__ mass,
                                                  T* __restrict__ out, const Seg* __restrict__ tiles, i64 n_rows, i64 n_tiles, int C,
                                                  int KP, int CPs, int vec, const float* __restrict__ dt_part, int dt_rows,
                                                  float* __restrict__ d_times, int n_slots, const EtmMap* map_out) {
    constexpr int BN = 128 * NH;
    constexpr int EPI_BYTES = BULK ? EBM * (2 * BN + EWG_STG_PAD) : 8 * 16 * EWG_EPI_LD * 2;
    extern __shared__ __align__(128) unsigned char diff_smem[];
    const u32 raw = smem_addr(diff_smem);
    const u32 pad = (1024u - (raw & 1023u)) & 1023u;
    const u32 slot0 = raw + pad;
    unsigned char* Ss = diff_smem + pad + (size_t)n_slots * ETM_BOX_BYTES;
    unsigned char* epi = Ss + (size_t)KP * BN * 2;
    const u32 full0 = smem_addr(epi + EPI_BYTES), empty0 = full0 + 8 * ETM_MAX_SLOTS;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int c0 = blockIdx.y * BN;
    const i64 bx = blockIdx.x, gx = gridDim.x;

    const i64 per = n_tiles / gx, rem = n_tiles % gx;
    const i64 t_lo = bx * per + min(bx, rem);
    const i64 t_hi = t_lo + per + (bx < rem ? 1 : 0);
    const u32 s_base = smem_addr(Ss);
    const int nb = (KP + ETM_BOX_K - 1) / ETM_BOX_K, n_ks = KP / 16;
    const i64 n_box = (t_hi - t_lo) * nb;

    // Producer state (thread 0): the next box of the sequence to issue.
    i64 q_next = 0;
    // Issue boxes [q_next, min(q_end, n_box)); a slot's second and later uses wait for the release
    // of its previous box (phase use − 1 of empty).
    auto produce = [&](i64 q_end) {
        for (; q_next < min(q_end, n_box); ++q_next) {
            const int s = (int)(q_next % n_slots);
            const i64 use = q_next / n_slots;
            if (use > 0) ember_mbar_wait(empty0 + 8 * s, (u32)((use - 1) & 1));
            const i64 t = t_lo + q_next / nb;
            const int b = (int)(q_next % nb);
            const Seg ts = seg_at(tiles, t, EBM, n_rows, n_tiles);
            ember_mbar_arrive_tx(full0 + 8 * s, ETM_BOX_BYTES);
            etm_load_box(slot0 + (u32)s * ETM_BOX_BYTES, map, b * ETM_BOX_K, (int)ts.begin, full0 + 8 * s);
        }
    };
    if (tid == 0) {
        etm_prefetch_map(map);
        for (int s = 0; s < n_slots; ++s) {
            ember_mbar_init(full0 + 8 * s, 1);
            ember_mbar_init(empty0 + 8 * s, 8);
        }
        ember_mbar_fence_init();
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
    // First use of every slot: nothing to wait for. The basis and the tile table are inputs no
    // kernel of this pass writes, so as a dependent launch the CTA loads them while the finalize
    // (and the reduce before it) still run (launch order: top of this file).
    if (tid == 0) produce(n_slots);
    ember_grid_dependency_wait();  // S and the d_times partials from the finalize
    ember_launch_dependents();     // as in expand_kernel
    // Ping-pong (PINGPONG): the warpgroups take turns on the tensor cores, warpgroup 0 first; each
    // hands the turn over once its own products have completed (after the wait: an arrival between
    // commit and wait serialises the wgmmas, ptxas C7520), so one's products run while the other
    // converts and stores its half of the previous tile (barrier 1: warpgroup 0's turn, 2:
    // warpgroup 1's). Warpgroup 1 gives the first turn here and none after its last tile, so every
    // arrival is matched.
    const i64 my_tiles = t_hi - t_lo;
    if (PINGPONG && wg == 1 && my_tiles > 0) ewg_named_arrive(1);

    if (dt_part && bx == 0 && blockIdx.y == 0) {
        for (int c = tid; c < C; c += NTHREADS) d_times[c] = sum_partials(dt_part, 0, dt_rows, 0, c, 1, CPs);
    }

    float acc[NH][64];
    i64 j = 0;  // tile index within this CTA's range (all segments)
    for (i64 t0 = t_lo; t0 < t_hi;) {
        const Seg first = seg_at(tiles, t0, EBM, n_rows, n_tiles);
        const i64 t1 = min(t_hi, first.run_end);
        const i64 mesh_end = tiles ? seg_at(tiles, first.run_end - 1, EBM, n_rows, n_tiles).end : n_rows;
        __syncthreads();  // every product reading the previous segment's S has completed
        ewg_load_s<NH>(Ss, s_op, first.mesh, KP, CPs, c0);
        cp_async_commit();
        cp_async_wait<0>();
        ewg_fence_async();  // this thread's S copies, visible to wgmma
        __syncthreads();    // everyone's
        for (i64 t = t0; t < t1; ++t, ++j) {
            const i64 rb = first.begin + (t - t0) * EBM;
            const i64 re = min(mesh_end, rb + EBM);
            // The tile's boxes occupy consecutive slots from s0 (wrapping). All of them are waited
            // for before the first product: a wait between products puts a divergent loop between
            // wgmma instructions, and ptxas then serialises them (C7520).
            const int s0 = (int)((j * nb) % n_slots);
            // Where the ring holds fewer than two tiles (NS < 2·NB: K = 136 or 256 beside a large S
            // or staging buffer), some of this tile's boxes were not issued at tile j − 1; issue
            // them now, before thread 0 waits on them itself. Their slots held tiles ≤ j − 1,
            // which this warp has released and the others release without waiting on thread 0.
            if (tid == 0) produce((j + 1) * nb);
            __syncwarp();
            for (int b = 0; b < nb; ++b) {
                const i64 q = j * nb + b;
                ember_mbar_wait(full0 + 8 * (int)(q % n_slots), (u32)((q / n_slots) & 1));
            }
            __syncwarp();  // converged again before the warpgroup-wide instructions
            if (PINGPONG) ewg_named_sync(1 + wg);
#pragma unroll
            for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
            ewg_arrive();
            for (int ks = 0; ks < n_ks; ++ks) {
                const int s = s0 + (ks >> 2) < n_slots ? s0 + (ks >> 2) : s0 + (ks >> 2) - n_slots;
                const u32 a = slot0 + (u32)s * ETM_BOX_BYTES + (u32)(wg * 64 * 128) + (u32)((ks & 3) * 32);
                ewg_step<NH>(acc, etm_desc(a), s_base, ks);
            }
            ewg_commit();
            // While this warpgroup's products run: refill the slots tile j − 1 held.
            if (tid == 0) produce(j * nb + n_slots);
            __syncwarp();
            ewg_wait0();
#pragma unroll
            for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
            if (PINGPONG && (wg == 0 || j + 1 < my_tiles)) ewg_named_arrive(2 - wg);
            if ((tid & 31) == 0) {
                // This warp's products reading the tile's slots have completed.
                for (int b = 0; b < nb; ++b) ember_mbar_arrive(empty0 + 8 * (int)((j * nb + b) % n_slots));
            }
            if (BULK && vec)
                etm_tile_out_boxes<NH>(acc, epi, mass, out, rb, re, n_rows, c0, C, map_out);
            else
                ewg_tile_out<NH, false>(acc, epi, mass, out, rb, re, c0, C, vec);
        }
        t0 = t1;
    }
    if (BULK) ewg_bulk_wait_all();
}

#define DIFF_EXPAND_TMA(NAME, NH, BULK, PINGPONG)                                                                              \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1)                                                                  \
        NAME(const T* s_op, const T* mass, T* out, const Seg* tiles, i64 n_rows, i64 n_tiles, int C, int KP, int CPs, int vec, \
             const float* dt_part, int dt_rows, float* d_times, int n_slots, const __grid_constant__ EtmMap map,              \
             const __grid_constant__ EtmMap map_out) {                                                                         \
        expand_tma_kernel<NH, BULK, PINGPONG>(&map, s_op, mass, out, tiles, n_rows, n_tiles, C, KP, CPs, vec, dt_part, dt_rows, \
                                              d_times, n_slots, &map_out);                                                     \
    }
DIFF_EXPAND_TMA(diffusion_expand_wgt1, 1, false, false)
DIFF_EXPAND_TMA(diffusion_expand_wgt2, 2, false, false)
DIFF_EXPAND_TMA(diffusion_expand_wgtb1, 1, true, false)
DIFF_EXPAND_TMA(diffusion_expand_wgtb2, 2, true, false)
DIFF_EXPAND_TMA(diffusion_expand_wgtb1_pp, 1, true, true)
DIFF_EXPAND_TMA(diffusion_expand_wgtb2_pp, 2, true, true)
#endif  // DIFF_HALF

// ---- reduce on Hopper warpgroup MMA (wgmma, sm_90a; 16-bit activations) ---------------------------
//
// diffusion_reduce_wg{1,2}: the same partials as diffusion_reduce_w* (grid (chunks, m-tiles ×
// n-tiles), P[chunk] = basisᵀ·diag(mass)·y over the chunk's vertices, an f32 KP × CP tile per chunk,
// every element written), with the tensor work on wgmma: two warpgroups, each 64 eigenvectors ×
// BN = 128·NH channels (NH m64n128k16 per 16-vertex step). The reduction runs over vertices, and
// both operands are vertex-major in memory, so both are MN-major in shared memory (transpose bits
// set for A and B). RGNST stages of RGV vertices are filled by cp.async, RGNST − 1 in flight.
//
// v7 layout: MN-major with the 128-byte swizzle. A swizzle atom is 8 vertices × 64 columns
// (eigenvectors or channels), one 128-byte row per vertex, 1024 bytes; the 16-byte chunk j of
// vertex v's row sits at chunk position j ^ (v % 8). Atoms of one 64-column block follow each other
// along the vertices (SBO = 1024 between 8-vertex groups), blocks are RGV·128 bytes apart (LBO,
// the next 64 columns):
//   (v, col) at (col/64)·RGV·128 + v·128 + (((col/8) % 8) ^ (v % 8))·16 + (col % 8)·2
// Why (v6 used 8 × 8 core matrices without swizzle, where the 16 bytes of one vertex row that go to
// consecutive core matrices are 128 bytes apart): there the conflict-free fill had each warp load
// 64 bytes from each of 8 vertex rows, so every 128-byte line of x and of the basis was requested
// twice, in halves, by two different warp loads (twice the L1 line requests of the mma.sync
// reduce, whose warps load 512 contiguous bytes). Here consecutive lanes copy consecutive 16-byte
// chunks of a vertex row (a warp load = whole 128-byte lines, as in the mma.sync reduce), and the
// XOR spreads the 8 chunks of a 128-byte line over all 32 banks: each warp's 512 bytes of stores
// are 4 wavefronts, the minimum.
// Stage (bytes): [basis: 2 blocks × RGV × 128][y: 2·NH blocks × RGV × 128][mass: RGV elements,
// padded to 1024]: every stage and block starts on a 1024-byte boundary (the swizzle's period;
// the descriptors' base offset stays 0). The kernel rounds the dynamic shared memory base up to
// 1024 bytes (the host adds 1 KB).
// Mass (forward) scales the basis stage in shared memory once it has landed, with the bf16x2/f16x2
// FMA the mma.sync path applies to the y fragments (one rounding of each product); the basis tile
// is the smaller of the two at C ≥ 128.
#if DIFF_HALF
#define RGV 64
#define RGNST 4

template <int NH>
struct RGLay {
    static constexpr int BN = 128 * NH;
    static constexpr int BLOCK = RGV * 128;  // one 64-column block of a stage
    static constexpr int A_BYTES = 2 * BLOCK;
    static constexpr int B_BYTES = 2 * NH * BLOCK;
    static constexpr int M_OFF = A_BYTES + B_BYTES;
    static constexpr int STAGE = M_OFF + 1024;  // a multiple of 1024 bytes
};

// Byte offset of (v, col) in one swizzled operand of a stage (see above).
__device__ __forceinline__ u32 rwg_off(int v, int col) {
    return (u32)((col >> 6) * (RGV * 128) + v * 128 + ((((col >> 3) & 7) ^ (v & 7)) << 4) + (col & 7) * 2);
}

// Descriptor of a 128-byte-swizzled MN-major operand: LBO = the next 64-column block, SBO = the
// next 8 vertices (layout type 1 in bits 62–63).
__device__ __forceinline__ u64 rwg_desc(u32 addr) { return ewg_desc(addr, RGV * 128, 1024) | (1ull << 62); }

// A wgmma-reduce CTA's work: output tile (e0, c0) of chunk `chunk` (vertices [s.begin, s.end),
// staged from `base`, the start rounded down to 8, in n_steps stages of RGV), and its stages at
// the first 1024-byte boundary of dynamic shared memory (the swizzle's period; the host allocates
// 1 KB more than the stages need).
struct RwgCta {
    int e0, c0;
    i64 chunk, base;
    Seg s;
    int n_steps;
    unsigned char* sm;
    u32 sm0;
};

template <int NH>
__device__ __forceinline__ RwgCta rwg_cta(unsigned char* smem, const Seg* __restrict__ chunks, i64 rows_per_chunk, i64 n_rows,
                                          i64 n_chunks, int CP) {
    RwgCta w;
    const int n_nt = CP / RGLay<NH>::BN;
    w.e0 = ((int)blockIdx.y / n_nt) * RBM;
    w.c0 = ((int)blockIdx.y % n_nt) * RGLay<NH>::BN;
    w.chunk = blockIdx.x;
    w.s = seg_at(chunks, w.chunk, rows_per_chunk, n_rows, n_chunks);
    w.base = w.s.begin & ~(i64)7;
    w.n_steps = (int)((w.s.end - w.base + RGV - 1) / RGV);
    const u32 raw = smem_addr(smem);
    const u32 pad = (1024u - (raw & 1023u)) & 1023u;
    w.sm = smem + pad;
    w.sm0 = raw + pad;
    return w;
}

// Eight 16-bit values of a basis row times the row's mass (w: the mass in both halves), one
// rounding per product.
__device__ __forceinline__ void rwg_scale16(uint4* p, u32 w) {
    uint4 a = *p;
    a.x = mul_pair(a.x, w);
    a.y = mul_pair(a.y, w);
    a.z = mul_pair(a.z, w);
    a.w = mul_pair(a.w, w);
    *p = a;
}

// One stage's products: this warpgroup's 64 eigenvectors (A block at a_st) × BN channels (the B
// blocks from b_st), 16 vertices per wgmma, committed as one group.
template <int NH>
__device__ __forceinline__ void rwg_issue(float (&acc)[NH][64], u32 a_st, u32 b_st) {
    typedef RGLay<NH> L;
#pragma unroll
    for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
    ewg_arrive();
#pragma unroll
    for (int ks = 0; ks < RGV / 16; ++ks) {
        // 16 vertices = two 1024-byte atoms down each 64-column block.
        const u64 da = rwg_desc(a_st + ks * 2048);
#pragma unroll
        for (int h = 0; h < NH; ++h) {
            const u64 db = rwg_desc(b_st + h * 2 * L::BLOCK + ks * 2048);
            ewg_mma<1>(acc[h], da, db, 1);
        }
    }
    ewg_commit();
}

// The chunk's f32 partial (KP × CP at `out`) from the accumulators. Thread (g, t) of warp wq holds
// rows wq·16 + {g, g + 8} × columns 8j + {2t, 2t + 1} of each 64 × 128 product: 8-byte stores,
// each warp store fills whole 32-byte sectors.
template <int NH>
__device__ __forceinline__ void rwg_store_partial(const float (&acc)[NH][64], float* __restrict__ out, int e0, int c0, int CP) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const i64 e = e0 + (warp >> 2) * 64 + (warp & 3) * 16 + g;
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int c = c0 + h * 128 + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(out + e * CP + c) = make_float2(acc[h][4 * j], acc[h][4 * j + 1]);
            *reinterpret_cast<float2*>(out + (e + 8) * CP + c) = make_float2(acc[h][4 * j + 2], acc[h][4 * j + 3]);
        }
}

template <int NH>
__device__ __forceinline__ void rwg_load(unsigned char* st, const T* __restrict__ basis, const T* __restrict__ y, const T* __restrict__ mass,
                                         i64 row0, i64 vb, i64 ve, int e0, int K, int c0, int C, bool vec) {
    typedef RGLay<NH> L;
    unsigned char* As = st;
    unsigned char* Bs = st + L::A_BYTES;
    T* Ms = reinterpret_cast<T*>(st + L::M_OFF);
    const int tid = threadIdx.x;
    constexpr int NJA = RBM / 8, NJB = L::BN / 8;
    if (vec) {
        // Chunk i: vertex i / NJ, 16-byte chunk i % NJ of its row (consecutive lanes, consecutive
        // global bytes).
        for (int i = tid; i < RGV * NJA; i += NTHREADS) {
            const int r = i / NJA, ch = i % NJA;
            const i64 v = row0 + r;
            const int e = e0 + ch * 8;
            const bool ok = v >= vb && v < ve && e < K;
            cp_async16(As + rwg_off(r, ch * 8), ok ? (const void*)(basis + v * K + e) : (const void*)basis, ok ? 16 : 0);
        }
        for (int i = tid; i < RGV * NJB; i += NTHREADS) {
            const int r = i / NJB, ch = i % NJB;
            const i64 v = row0 + r;
            const int c = c0 + ch * 8;
            const bool ok = v >= vb && v < ve && c < C;
            cp_async16(Bs + rwg_off(r, ch * 8), ok ? (const void*)(y + v * C + c) : (const void*)y, ok ? 16 : 0);
        }
    } else {
        for (int i = tid; i < RGV * RBM; i += NTHREADS) {
            const int r = i / RBM, e = i % RBM;
            const i64 v = row0 + r;
            *reinterpret_cast<T*>(As + rwg_off(r, e)) = (v >= vb && v < ve && e0 + e < K) ? basis[v * K + e0 + e] : zero_t();
        }
        for (int i = tid; i < RGV * L::BN; i += NTHREADS) {
            const int r = i / L::BN, c = i % L::BN;
            const i64 v = row0 + r;
            *reinterpret_cast<T*>(Bs + rwg_off(r, c)) = (v >= vb && v < ve && c0 + c < C) ? y[v * C + c0 + c] : zero_t();
        }
    }
    if (mass) {
        // As in reduce_load: row0 is a multiple of 8, so whole vectors of mass are 16-byte aligned.
        for (int i = tid; i < RGV / 8; i += NTHREADS) {
            const i64 v = row0 + i * 8;
            if (v >= vb && v + 8 <= ve) {
                cp_async16(Ms + i * 8, mass + v, 16);
            } else {
                for (int j = 0; j < 8; ++j) Ms[i * 8 + j] = (v + j >= vb && v + j < ve) ? mass[v + j] : zero_t();
            }
        }
    }
}

template <int NH>
__device__ __forceinline__ void reduce_wg_kernel(const T* __restrict__ basis, const T* __restrict__ y, const T* __restrict__ mass,
                                                 float* __restrict__ ws, const Seg* __restrict__ chunks, i64 rows_per_chunk, i64 n_rows,
                                                 i64 n_chunks, int K, int C, int KP, int CP, int vec) {
    typedef RGLay<NH> L;
    extern __shared__ __align__(128) unsigned char diff_smem[];
    const int tid = threadIdx.x, wg = tid >> 7;
    const RwgCta w = rwg_cta<NH>(diff_smem, chunks, rows_per_chunk, n_rows, n_chunks, CP);
    const int e0 = w.e0, c0 = w.c0, n_steps = w.n_steps;
    const Seg s = w.s;
    const i64 base = w.base;
    unsigned char* sm = w.sm;
    const u32 sm0 = w.sm0;
    const bool weighted = mass != nullptr;

    // Zeroed once, then every product accumulates (a chunk always has at least one stage).
    float acc[NH][64];
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

#pragma unroll
    for (int st = 0; st < RGNST - 1; ++st) {
        if (st < n_steps) rwg_load<NH>(sm + st * L::STAGE, basis, y, mass, base + (i64)st * RGV, s.begin, s.end, e0, K, c0, C, vec);
        cp_async_commit();
    }
    // v12: stage it's products are issued first; while they run, the CTA waits for stage it + 1,
    // refills the slot of stage it − 1 and (forward, mass) scales stage it + 1's basis block by
    // mass in shared memory. Before v12 the products of stage it were issued only after the wait
    // for stage it − 1's, a barrier, the refill and (forward) the scaling between two more
    // barriers, all with the tensor cores idle (the forward reduce was ~20 % slower than the
    // backward's on an H200). Same products, same order, same roundings: bitwise the partials of
    // the serial order.
    auto scale_stage = [&](int it) {
        unsigned char* st = sm + (it % RGNST) * L::STAGE;
        // Basis chunk i (16 bytes at 16·i) belongs to vertex (i / 8) % RGV in either block; the
        // swizzle only permutes chunks within a vertex's row.
        const unsigned short* m16 = reinterpret_cast<const unsigned short*>(st + L::M_OFF);
        for (int i = tid; i < L::A_BYTES / 16; i += NTHREADS) {
            const u32 m = m16[(i >> 3) & (RGV - 1)];
            rwg_scale16(reinterpret_cast<uint4*>(st + 16 * i), m | (m << 16));
        }
        ewg_fence_async();  // the scaled basis (generic stores), visible to wgmma
    };
    auto issue_products = [&](int it) {
        rwg_issue<NH>(acc, sm0 + (u32)((it % RGNST) * L::STAGE) + (u32)(wg * L::BLOCK), sm0 + (u32)((it % RGNST) * L::STAGE + L::A_BYTES));
    };
    static_assert(RGNST >= 3, "the loop waits for stage it + 1 with one group pending");
    cp_async_wait<RGNST - 2>();  // stage 0 (this thread's copies)
    ewg_fence_async();           // visible to wgmma
    __syncthreads();             // everyone's
    if (weighted) {
        scale_stage(0);
        __syncthreads();
    }
    for (int it = 0; it < n_steps; ++it) {
        // Stage it has landed (and is scaled) for everyone: the barriers of the previous iteration.
        issue_products(it);
        cp_async_wait<RGNST - 3>();  // stage it + 1 landed (this thread's copies)
        ewg_fence_async();           // ... visible to wgmma
        // Everyone's copies of stage it + 1 landed; and every thread has waited for the products
        // of stage it − 1 (previous iteration), so its slot can be refilled.
        __syncthreads();
        {
            const int nx = it + RGNST - 1;
            if (nx < n_steps)
                rwg_load<NH>(sm + (nx % RGNST) * L::STAGE, basis, y, mass, base + (i64)nx * RGV, s.begin, s.end, e0, K, c0, C, vec);
            cp_async_commit();
        }
        if (weighted && it + 1 < n_steps) scale_stage(it + 1);  // while stage it's products run
        ewg_wait0();
#pragma unroll
        for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
        if (weighted) __syncthreads();  // stage it + 1 scaled by everyone
    }
    ewg_wait0();
#pragma unroll
    for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
    cp_async_wait<0>();

    rwg_store_partial<NH>(acc, ws + w.chunk * (i64)KP * CP, e0, c0, CP);
}

// ---- v12b: the wgmma reduce fed by TMA (diffusion_reduce_wgt{1,2}; EMBER_DIFFUSION_REDUCE_LOAD=tma) ----
//
// The same stages, products and partials as diffusion_reduce_wg{NH} (bitwise), but thread 0 fills
// each stage with 2 + 2·NH TMA boxes of 64 vertices × 64 columns (basis, then y) in the
// 128-byte swizzle, which is exactly the stage layout of rwg_off; one mbarrier per slot counts
// the bytes. Rows of a stage outside the chunk [vb, ve) (the first stage starts at vb rounded down
// to 8, the last runs past ve) hold the neighbours' vertices: they are zeroed in shared memory
// before the products (the cp.async loader zero-fills them), and the forward scales the basis
// rows by mass read into registers a stage ahead (0 outside the chunk, written as zeros).
// Boxes past K, C or V arrive as zeros (the tensor maps' bounds). Needs K, C multiples of 8
// (16-byte rows) and 16-byte aligned basis and y.
template <int NH>
__device__ __forceinline__ void reduce_tma_kernel(const EtmMap* map_b, const EtmMap* map_y, const T* __restrict__ mass,
                                                  float* __restrict__ ws, const Seg* __restrict__ chunks, i64 rows_per_chunk,
                                                  i64 n_rows, i64 n_chunks, int KP, int CP) {
    typedef RGLay<NH> L;
    extern __shared__ __align__(128) unsigned char diff_smem[];
    const int tid = threadIdx.x, wg = tid >> 7;
    const RwgCta w = rwg_cta<NH>(diff_smem, chunks, rows_per_chunk, n_rows, n_chunks, CP);
    const int e0 = w.e0, c0 = w.c0, n_steps = w.n_steps;
    const Seg s = w.s;
    const i64 base = w.base;
    unsigned char* sm = w.sm;
    const u32 sm0 = w.sm0;
    const bool weighted = mass != nullptr;
    // Slot sl's full barrier sits in its stage's (here unused) mass area.
    auto full = [&](int sl) { return sm0 + (u32)(sl * L::STAGE + L::M_OFF); };
    auto produce = [&](int st) {
        const int sl = st % RGNST;
        const u32 dst = sm0 + (u32)(sl * L::STAGE);
        const int row = (int)(base + (i64)st * RGV);
        ember_mbar_arrive_tx(full(sl), (u32)(L::A_BYTES + L::B_BYTES));
        etm_load_box(dst, map_b, e0, row, full(sl));
        etm_load_box(dst + L::BLOCK, map_b, e0 + 64, row, full(sl));
#pragma unroll
        for (int j = 0; j < 2 * NH; ++j) etm_load_box(dst + L::A_BYTES + j * L::BLOCK, map_y, c0 + 64 * j, row, full(sl));
    };
    // This thread's basis chunks i = tid + 256·q (q < 4) lie in vertex rows tid / 8 and tid / 8 + 32.
    const int ra = tid >> 3;
    auto mass_bits = [&](int st, int r) -> u32 {
        const i64 v = base + (i64)st * RGV + r;
        if (!weighted || v < s.begin || v >= s.end) return 0u;
        const u32 m = *reinterpret_cast<const unsigned short*>(mass + v);
        return m | (m << 16);
    };
    auto prep = [&](int st, u32 wa, u32 wb) {
        unsigned char* stp = sm + (st % RGNST) * L::STAGE;
        const i64 row0 = base + (i64)st * RGV;
        const bool edge = row0 < s.begin || row0 + RGV > s.end;
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        if (weighted || edge) {
            for (int i = tid; i < L::A_BYTES / 16; i += NTHREADS) {
                const int r = (i >> 3) & (RGV - 1);
                uint4* p = reinterpret_cast<uint4*>(stp + 16 * i);
                if (edge && (row0 + r < s.begin || row0 + r >= s.end)) {
                    *p = zero;
                } else if (weighted) {
                    rwg_scale16(p, r == ra ? wa : wb);
                }
            }
        }
        if (edge) {
            for (int i = tid; i < L::B_BYTES / 16; i += NTHREADS) {
                const int r = (i >> 3) & (RGV - 1);
                if (row0 + r < s.begin || row0 + r >= s.end) reinterpret_cast<uint4*>(stp + L::A_BYTES)[i] = zero;
            }
        }
        ewg_fence_async();  // generic stores, visible to wgmma
    };

    float acc[NH][64];
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

    if (tid == 0) {
        etm_prefetch_map(map_b);
        etm_prefetch_map(map_y);
        for (int sl = 0; sl < RGNST; ++sl) ember_mbar_init(full(sl), 1);
        ember_mbar_fence_init();
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
    if (tid == 0)
        for (int st = 0; st < min(RGNST, n_steps); ++st) produce(st);
    const u32 wa0 = mass_bits(0, ra), wb0 = mass_bits(0, ra + 32);
    u32 wa = mass_bits(1, ra), wb = mass_bits(1, ra + 32);  // stage 1's, a stage ahead
    ember_mbar_wait(full(0), 0u);
    prep(0, wa0, wb0);
    __syncthreads();
    for (int it = 0; it < n_steps; ++it) {
        // Stage it has landed and is prepared by everyone (the barrier closing the previous step).
        rwg_issue<NH>(acc, sm0 + (u32)((it % RGNST) * L::STAGE) + (u32)(wg * L::BLOCK), sm0 + (u32)((it % RGNST) * L::STAGE + L::A_BYTES));
        if (it + 1 < n_steps) {
            const int nx = it + 1;
            ember_mbar_wait(full(nx % RGNST), (u32)((nx / RGNST) & 1));
            prep(nx, wa, wb);  // while stage it's products run
        }
        wa = mass_bits(it + 2, ra);
        wb = mass_bits(it + 2, ra + 32);
        ewg_wait0();
#pragma unroll
        for (int h = 0; h < NH; ++h) ewg_fence_regs(acc[h]);
        // Stage it + 1 prepared by everyone; stage it's products complete in both warpgroups, so
        // its slot takes stage it + RGNST.
        __syncthreads();
        if (tid == 0 && it + RGNST < n_steps) produce(it + RGNST);
    }

    rwg_store_partial<NH>(acc, ws + w.chunk * (i64)KP * CP, e0, c0, CP);
}

#define DIFF_REDUCE_WG(NH)                                                                                                     \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) diffusion_reduce_wg##NH(                                        \
        const T* basis, const T* y, const T* mass, float* ws, const Seg* chunks, i64 rows_per_chunk, i64 n_rows, i64 n_chunks, \
        int K, int C, int KP, int CP, int vec) {                                                                               \
        ember_grid_dependency_wait(); /* the previous kernel, where a dependent launch (reduce_pdl) */                          \
        ember_launch_dependents();                                                                                             \
        reduce_wg_kernel<NH>(basis, y, mass, ws, chunks, rows_per_chunk, n_rows, n_chunks, K, C, KP, CP, vec);                \
    }
DIFF_REDUCE_WG(1)
DIFF_REDUCE_WG(2)

#define DIFF_REDUCE_TMA(NH)                                                                                                    \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) diffusion_reduce_wgt##NH(                                       \
        const T* mass, float* ws, const Seg* chunks, i64 rows_per_chunk, i64 n_rows, i64 n_chunks, int KP, int CP,             \
        const __grid_constant__ EtmMap map_b, const __grid_constant__ EtmMap map_y) {                                           \
        ember_grid_dependency_wait(); /* the previous kernel, where a dependent launch (reduce_pdl) */                          \
        ember_launch_dependents();                                                                                             \
        reduce_tma_kernel<NH>(&map_b, &map_y, mass, ws, chunks, rows_per_chunk, n_rows, n_chunks, KP, CP);                   \
    }
DIFF_REDUCE_TMA(1)
DIFF_REDUCE_TMA(2)
#endif  // DIFF_HALF


// ---- small problems: one cooperative launch per pass ----------------------------------------------
//
// diffusion_fused_{fwd,bwd}: the three phases of a pass (reduce, finalize, expand) in one launch,
// separated by grid-wide barriers; blocks loop over each phase's blocks (same tiles, same fixed-order
// sums as the three-launch path, so the results are the same bits for the same tile widths). Launched
// cooperatively: every block is resident, so the barrier cannot wait on a block that never runs.

// Grid barrier on bar[0] (arrivals) and bar[1] (generation). The last block to arrive resets the
// count before it bumps the generation, so the words return to {0, g + 1}: the same two words serve
// every barrier of every launch on the stream (launches on one stream do not overlap).
__device__ __forceinline__ void grid_sync(unsigned* bar) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// Pass arguments: fwd reduces x with mass (r_mass) and expands without (e_mass = 0); bwd reduces
// d_out, adds d_spectral and expands with mass. dt_part/d_times are null in fwd.
template <int RWN, int EWN, bool BWD>
__device__ __forceinline__ void fused_kernel(const T* __restrict__ basis, const T* __restrict__ y, const T* __restrict__ mass,
                                             const float* __restrict__ evals, const float* __restrict__ times,
                                             const float* __restrict__ saved_in, const T* __restrict__ d_spectral,
                                             T* __restrict__ spectral, float* __restrict__ saved_out, float* ws, T* s_op,
                                             T* __restrict__ out, float* dt_part, float* __restrict__ d_times,
                                             const Seg* __restrict__ chunks, const Seg* __restrict__ tiles,
                                             const i64* __restrict__ chunk_prefix, i64 rows_per_chunk, i64 n_rows, i64 n_chunks,
                                             i64 n_tiles, int K, int C, int KPr, int CPr, int KPe, int CPe, int vec, i64 meshes,
                                             unsigned* bar) {
    // The finalize phase's 8 × 33 floats live in the dynamic shared memory of the GEMM phases (the
    // phases are separated by barriers): a static array would push the block past the opt-in limit
    // the launch code raises the dynamic size to.
    extern __shared__ __align__(128) unsigned char diff_smem[];
    float(*red)[33] = reinterpret_cast<float(*)[33]>(diff_smem);
    // Phase 1: partials of every (chunk, tile).
    const int r_tiles = (KPr / RBM) * (CPr / RLay<RWN>::BN);
    const i64 n_r = n_chunks * r_tiles;
    for (i64 b = blockIdx.x; b < n_r; b += gridDim.x) {
        __syncthreads();  // the previous block's stages are no longer read
        reduce_kernel<RWN>(basis, y, BWD ? nullptr : mass, ws, chunks, rows_per_chunk, n_rows, n_chunks, K, C, KPr, CPr, vec,
                           b % n_chunks, (int)(b / n_chunks));
    }
    grid_sync(bar);
    // Phase 2: finalize, grid (meshes · CPe/32) × (KPe/8) of 32 × 8 threads.
    const i64 fx = meshes * (CPe / 32);
    const int fy = KPe / 8;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (i64 b = blockIdx.x; b < fx * fy; b += gridDim.x) {
        __syncthreads();  // red is free again
        const FinIdx f = fin_idx(chunk_prefix, n_chunks, K, C, CPe, b % fx, (int)(b / fx), tx, ty);
        const FinIn in = fin_inputs<BWD>(f, evals, times, saved_in, d_spectral, K, C);
        const float s = fin_sum_serial(ws, f, KPr, CPr);
        if (BWD)
            finalize_bwd_block(f, s, in, s_op, KPe, CPe, dt_part, (int)(b / fx), fy, tx, ty, red);
        else
            finalize_fwd_block(f, s, in, K, C, spectral, saved_out, s_op, KPe, CPe);
    }
    grid_sync(bar);
    // Phase 3: expand, persistent over tiles in each channel tile (the host makes gridDim.x ≥ n_nt).
    const int n_nt = CPe / ELay<EWN>::BN;
    const i64 gx = gridDim.x / n_nt;
    if (blockIdx.x < gx * n_nt)
        expand_kernel<EWN>(basis, s_op, BWD ? mass : nullptr, out, tiles, n_rows, n_tiles, K, C, KPe, CPe, vec,
                           BWD ? dt_part : nullptr, (int)(meshes * fy), BWD ? d_times : nullptr, blockIdx.x % gx,
                           (int)(blockIdx.x / gx), gx);
}

#define DIFF_FUSED(RWN, EWN, BWD, NAME)                                                                                        \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 1) NAME(                                                           \
        const T* basis, const T* y, const T* mass, const float* evals, const float* times, const float* saved_in,            \
        const T* d_spectral, T* spectral, float* saved_out, float* ws, T* s_op, T* out, float* dt_part, float* d_times,      \
        const Seg* chunks, const Seg* tiles, const i64* chunk_prefix, i64 rows_per_chunk, i64 n_rows, i64 n_chunks,          \
        i64 n_tiles, int K, int C, int KPr, int CPr, int KPe, int CPe, int vec, i64 meshes, unsigned* bar) {                 \
        fused_kernel<RWN, EWN, BWD>(basis, y, mass, evals, times, saved_in, d_spectral, spectral, saved_out, ws, s_op, out,   \
                                    dt_part, d_times, chunks, tiles, chunk_prefix, rows_per_chunk, n_rows, n_chunks, n_tiles,  \
                                    K, C, KPr, CPr, KPe, CPe, vec, meshes, bar);                                               \
    }
// The 2-wide tiles of both GEMMs (the widths small problems pick; every dtype has them).
DIFF_FUSED(2, 2, false, diffusion_fused_fwd)
DIFF_FUSED(2, 2, true, diffusion_fused_bwd)
