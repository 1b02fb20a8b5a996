// Tensor-core FFTs of M = P·256 complex points (P = 1..16) in shared memory, for the on-chip
// forward (bf16 inputs). `FC_SLOTS` complex f32 values as in fft.cuh, padded by TC_P (below).
//
// Decomposition (n = 256·n1 + n2, k = k1 + P·k2, n1, k1 < P; n2, k2 < 256):
//   X[k1 + P·k2] = Σ_n2 W_256^(n2·k2) · [W_M^(n2·k1) · Σ_n1 x[256·n1 + n2]·W_P^(n1·k1)]
// Pass A (P > 1, CUDA cores, f32): for each column n2 a P-point DFT over n1 and the twiddle
// W_M^(n2·k1), in place: element (k1, n2) stays at flat offset 256·k1 + n2. Then every 256-point
// segment is transformed by one warp on tensor cores (tc_fft256), in place, natural order, so the
// forward spectrum bin k = k1 + P·k2 ends at offset 256·k1 + k2 ("TC order"; fc_tc_pos). The
// inverse runs the same steps backwards (segments first, then pass A with conjugate twiddles) and
// returns natural order.
//
// tc_fft256: with x[16·a + b] as the 16×16 matrix X[a][b], X = F·X (DFT over a), twiddle
// W_256^(a'·b) elementwise, then X·F (DFT over b): out[a' + 16·b'] — two complex 16×16 matrix
// products, each as 4 real mma.sync m16n8k16 per 8 columns (f16 operands, f32 accumulation). The
// accumulators of the first product are exactly the A fragments of the second (no shuffles). Each
// warp scales its segment by a power of two so that max |x| ∈ [1/2, 1) before rounding to f16
// (no overflow or underflow for any input scale; removed exactly after), so the only error is the
// f16 rounding of the two operands and of the DFT-16 matrix: ~2.4e-4 relative each (measured
// end-to-end in the GPU tests against the f64 reference).

// Pack two f32 into f16x2 (round to nearest), lo in the low half.
__device__ __forceinline__ unsigned tc_pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// d += a·b, m16n8k16, f16 operands, f32 accumulators.
__device__ __forceinline__ void tc_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// exp(−2πi·e/16) from the flat table (entry e·2^11).
__device__ __forceinline__ float2 tc_w16(const float2* __restrict__ tw, int e) { return tw[(e & 15) << (FC_TWN_LOG - 4)]; }

// Storage of the tensor-core kernel: 4 float2 of padding per 32 (FC_P has 1), so that the warp
// FFT's accesses (flat offsets 32t + g + const for lane 4g + t) hit 16 distinct 8-byte bank slots
// per half-warp: g + 4t mod 16. Consecutive offsets stay conflict-free.
#define TC_P(i) ((i) + (((i) >> 5) << 2))
#define TC_SMEM_ELEMS (FC_SLOTS + FC_SLOTS / 8)
// After the data, a per-lane table (word w of lane λ at w·32 + λ, conflict-free): the DFT-16
// matrix fragments of the forward transform as f16x2 — A: Re 0–3, Im 4–7, −Im 8–11; B: Re 12–15,
// Im 16–19, −Im 20–23 — and the lane's eight W_256 twiddles, Re 24–31, Im 32–39.
#define TC_TAB_WORDS 40

__device__ __forceinline__ void tc_table_fill(unsigned* __restrict__ tab, const float2* __restrict__ tw) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const auto put = [&](int w, unsigned v) { tab[w * 32 + lane] = v; };
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int row = g + 8 * (q & 1), col = 2 * t + 8 * (q >> 1);
        const float2 w0 = tc_w16(tw, row * col), w1 = tc_w16(tw, row * (col + 1));
        put(q, tc_pack(w0.x, w1.x));
        put(4 + q, tc_pack(w0.y, w1.y));
        put(8 + q, tc_pack(-w0.y, -w1.y));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int k = 2 * t + 8 * h, n = 8 * j + g;
            const float2 w0 = tc_w16(tw, k * n), w1 = tc_w16(tw, (k + 1) * n);
            put(12 + 2 * j + h, tc_pack(w0.x, w1.x));
            put(16 + 2 * j + h, tc_pack(w0.y, w1.y));
            put(20 + 2 * j + h, tc_pack(-w0.y, -w1.y));
        }
    const float2* st = tw + FC_STAGE_TW(4, 4);  // entry r·16 + k = W_256^(r·k)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = g + 8 * (q >> 1), col = 8 * j + 2 * t + (q & 1);
            const float2 w = st[row * 16 + col];
            put(24 + 4 * j + q, __float_as_uint(w.x));
            put(32 + 4 * j + q, __float_as_uint(w.y));
        }
}

// One warp: the 256-point DFT of the segment at flat offset sb, in place, natural order in and out.
// The inverse (DIR = +1) uses the conjugate matrix: the roles of Im and −Im swap.
template <int DIR>
__device__ __forceinline__ void tc_fft256(float2* __restrict__ x, int sb, const unsigned* __restrict__ tab) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const auto get = [&](int w) { return tab[w * 32 + lane]; };
    constexpr int IM = DIR < 0 ? 0 : 4, NIM = DIR < 0 ? 4 : 0;  // offsets of Im and −Im (+4)
    // Input: B fragments of X[a][b] = x[16a + b]; tile j holds columns b = 8j + g, rows
    // a = 2t + 8h + e (register h, half e).
    float2 v[2][2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) v[j][h][e] = x[TC_P(sb + 16 * (2 * t + 8 * h + e) + 8 * j + g)];
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) m = fmaxf(m, fmaxf(fabsf(v[j][h][e].x), fabsf(v[j][h][e].y)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    // m = f·2^ex with f in [1/2, 1): scale by 2^−ex (clamped to stay a normal float both ways).
    int ex = ((__float_as_int(m) >> 23) & 255) - 126;
    ex = max(-126, min(126, ex));
    const float s = __int_as_float((127 - ex) << 23), inv = __int_as_float((127 + ex) << 23);
    unsigned far[4], fai[4], fan[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        far[q] = get(q);
        fai[q] = get(4 + IM + q);
        fan[q] = get(4 + NIM + q);
    }
    // First product, per tile j: C = F·X.
    float cr[2][4], ci[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        unsigned xr[2], xi[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            xr[h] = tc_pack(v[j][h][0].x * s, v[j][h][1].x * s);
            xi[h] = tc_pack(v[j][h][0].y * s, v[j][h][1].y * s);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) cr[j][q] = ci[j][q] = 0.f;
        tc_mma(cr[j], far, xr[0], xr[1]);
        tc_mma(cr[j], fan, xi[0], xi[1]);
        tc_mma(ci[j], fai, xr[0], xr[1]);
        tc_mma(ci[j], far, xi[0], xi[1]);
    }
    // Twiddle W_256^(a'·b): C[j][q] sits at row a' = g + 8·(q >> 1), column b = 8j + 2t + (q & 1).
    unsigned ar[4], ai[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        float2 c[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float wr = __uint_as_float(get(24 + 4 * j + q)), wi = __uint_as_float(get(32 + 4 * j + q));
            c[q] = c_mul(make_float2(cr[j][q], ci[j][q]), make_float2(wr, DIR < 0 ? wi : -wi));
        }
        // A fragments of the second product: tile 0 gives registers 0, 1; tile 1 gives 2, 3.
        ar[2 * j] = tc_pack(c[0].x, c[1].x);
        ai[2 * j] = tc_pack(c[0].y, c[1].y);
        ar[2 * j + 1] = tc_pack(c[2].x, c[3].x);
        ai[2 * j + 1] = tc_pack(c[2].y, c[3].y);
    }
    // Second product, per tile j of output columns b' = 8j + g: D = C·F (F symmetric).
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const unsigned br0 = get(12 + 2 * j), br1 = get(13 + 2 * j);
        const unsigned bi0 = get(16 + IM + 2 * j), bi1 = get(17 + IM + 2 * j);
        const unsigned bn0 = get(16 + NIM + 2 * j), bn1 = get(17 + NIM + 2 * j);
        float dr[4] = {0.f, 0.f, 0.f, 0.f}, di[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(dr, ar, br0, br1);
        tc_mma(dr, ai, bn0, bn1);
        tc_mma(di, ar, bi0, bi1);
        tc_mma(di, ai, br0, br1);
        // D[a'][b'] with a' = g + 8·(q >> 1), b' = 8j + 2t + (q & 1) → out[a' + 16·b'].
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = g + 8 * (q >> 1), col = 8 * j + 2 * t + (q & 1);
            x[TC_P(sb + row + 16 * col)] = make_float2(dr[q] * inv, di[q] * inv);
        }
    }
}

// Pass A over every row of the CTA (rows of M = 256·P points at offsets ρ·M).
template <int LOGP, int DIR>
__device__ __forceinline__ void tc_pass_a(float2* __restrict__ x, int logm, const float2* __restrict__ tw) {
    constexpr int P = 1 << LOGP;
    const float2* st = tw + FC_STAGE_TW(8, LOGP);  // entry k1·256 + n2 = W_M^(k1·n2)
#pragma unroll
    for (int i = 0; i < FC_E / P; ++i) {
        const int c = threadIdx.x + FC_BLOCK * i;
        const int n2 = c & 255;
        const int b = ((c >> 8) << logm) + n2;
        float2 a[P];
#pragma unroll
        for (int r = 0; r < P; ++r) a[r] = x[TC_P(b + (r << 8))];
        if (DIR < 0) {
            dft<P, DIR>(a);
#pragma unroll
            for (int r = 1; r < P; ++r) a[r] = c_mul(a[r], tw_get<DIR>(st, r * 256 + n2));
        } else {
#pragma unroll
            for (int r = 1; r < P; ++r) a[r] = c_mul(a[r], tw_get<DIR>(st, r * 256 + n2));
            dft<P, DIR>(a);
        }
#pragma unroll
        for (int r = 0; r < P; ++r) x[TC_P(b + (r << 8))] = a[r];
    }
}

template <int DIR> __device__ __forceinline__ void tc_pass_a_any(float2* __restrict__ x, int logm, const float2* __restrict__ tw) {
    switch (logm - 8) {
        case 1: tc_pass_a<1, DIR>(x, logm, tw); break;
        case 2: tc_pass_a<2, DIR>(x, logm, tw); break;
        case 3: tc_pass_a<3, DIR>(x, logm, tw); break;
        case 4: tc_pass_a<4, DIR>(x, logm, tw); break;
        default: break;
    }
}

// The whole transform of every row (8 ≤ logm ≤ 12): forward natural → TC order, inverse TC order →
// natural. Unnormalised, as block_fft. Callers sync before; returns after a sync.
template <int DIR>
__device__ __noinline__ void tc_fft(float2* __restrict__ x, int logm, const float2* __restrict__ tw, const unsigned* __restrict__ tab) {
    if (DIR < 0 && logm > 8) {
        tc_pass_a_any<DIR>(x, logm, tw);
        __syncthreads();
    }
    constexpr int warps = FC_BLOCK / 32, segs = FC_SLOTS / 256;
    for (int sgm = threadIdx.x / 32; sgm < segs; sgm += warps) tc_fft256<DIR>(x, sgm * 256, tab);
    __syncthreads();
    if (DIR > 0 && logm > 8) {
        tc_pass_a_any<DIR>(x, logm, tw);
        __syncthreads();
    }
}

// Offset of spectrum bin k (0 ≤ k < M) in TC order.
__device__ __forceinline__ int fc_tc_pos(int k, int logm) {
    const int logp = logm - 8;
    return ((k & ((1 << logp) - 1)) << 8) | (k >> logp);
}
