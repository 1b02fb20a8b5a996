// v4 forward (bf16 u, on-chip sizes): two rows of one head as one complex signal, the DFT-256
// stages on tensor cores, the whole spectrum step inside each warp's registers.
//
// Why. The v2/v3 forwards are issue-bound (ncu at L = 4096: 68 % of issue slots busy, 38 k warp
// instructions per row, integer/address math the busiest pipe): every radix pass and the
// real-signal pair step walk shared memory with computed, padded indices and a barrier each. v4
// keeps the arithmetic, drops the bookkeeping:
//
// - Two rows a, b of one head (same filter) are convolved as z = w_a + i·w_b: the convolution with
//   a real filter is real-linear, so IFFT(FFT(z)·K) = y_a + i·y_b. No real-signal packing, no pair
//   step. N (complex) = the real FFT size of the other paths = P·256, P = 2^LOGP ≤ 32.
// - n = 256·n1 + n2, k = k1 + P·k2. Stage 1 (thread n2 owns column n2 of every row pair of the CTA,
//   in registers): the P-point DFT over n1 — when L ≤ N/2 only n1 < P/2 is nonzero, so it is two
//   P/2-point DFTs — and the twiddle W_N^(n2·k1), then one store to shared memory. Stage 2: each
//   256-point segment (row pair r, k1) is one warp's job: DFT-256 as two 16×16 complex products on
//   tensor cores (as tc_fft256), × K in the accumulators (K stored per head in exactly the lanes'
//   fragment order, so a lane reads 64 contiguous bytes), inverse DFT-256 (two more products; the
//   one transpose the chain needs is `movmatrix`), one store back. Inverse stage 1 in registers
//   (only n1 < P/2 is needed when L ≤ N/2), then the epilogue straight from registers: GELU (a
//   short erf, fc_gelu), gates, mask, one store per output.
// - Three barriers per CTA (after the row setup, after stage 1, after stage 2); shared memory
//   64 KB of data (no padding: an XOR swizzle of 16-byte chunks keeps every access pattern
//   conflict-free, see fp_idx) + the 5 KB per-lane table of tc_fft256 + the rows; 2 CTAs per SM.
//
// Precision: f16 operands, f32 accumulation; stage 1 and all twiddles in f32. Range: each row
// pair is scaled by a power of two so that its largest component after stage 1 is in [1/2, 1), and
// the filter spectrum is stored divided by a power of two so that its largest component is in
// [1/2, 1) (fc_spectrum); then no f16 operand exceeds 2^13 (see fp_segment) and both factors are
// undone exactly in the inverse stage 1. Bins far below the row's largest lose relative precision
// (f16's normal range ends at 2^-14), but the error stays small against the output's norm.

// Fragment-order position (in float2) of spectrum bin k (0 ≤ k < N = 256·P) in a head's K array.
// After the forward DFT-256 of segment k1, lane 4g + t holds in slot 4j + q the bin k2 = a' + 16·b'
// with a' = g + 8·(q >> 1), b' = 8j + 2t + (q & 1). Slots 2i, 2i + 1 of all 32 lanes form the
// i-th 512-byte block of the segment, so each of a lane's four 16-byte loads is coalesced.
__device__ __forceinline__ int fp_kpos(int k, int logp) {
    const int k1 = k & ((1 << logp) - 1), k2 = k >> logp;
    const int ap = k2 & 15, bp = k2 >> 4;
    const int lane = ((ap & 7) << 2) | ((bp & 7) >> 1);
    const int slot = ((bp >> 3) << 2) | ((ap >> 3) << 1) | (bp & 1);
    return ((((k1 << 2) | (slot >> 1)) << 5 | lane) << 1) | (slot & 1);
}

#if FC_BLOCK == 256

static_assert(sizeof(FcRow) == 48, "smem_bytes_pair in cuda.rs counts 48 bytes per row descriptor");

// Position of element n2 = 16a + b of a 256-point segment: the 16-byte chunk b/2 of row a is XORed
// with f(a) = 2·((a >> 1) & 3) ^ 4·(a & 1). Conflict-free for: stage 1 (a warp stores/loads 32
// consecutive n2, 8 bytes each); the B-fragment loads of the first product (lanes (g, t) read
// a = 2t + const, b = g + const); the 16-byte stores of the last product (lanes read a = g + const,
// chunk t + const).
__device__ __forceinline__ int fp_idx(int a, int b) {
    const int f = (((a >> 1) & 3) << 1) ^ ((a & 1) << 2);
    return (a << 4) | ((((b >> 1) ^ f) & 7) << 1) | (b & 1);
}

// exp(DIR·2πi·e/32) (exact constants; e is a compile-time constant at every use).
template <int DIR> __device__ __forceinline__ float2 w32(int e) {
    // cos(r·π/16), r = 0..8
    const float C[9] = {1.f, 0.98078528040323043f, 0.92387953251128674f, 0.83146961230254524f, 0.70710678118654752f,
                        0.55557023301960218f, 0.38268343236508978f, 0.19509032201612825f, 0.f};
    e &= 31;
    const int q = e >> 3, r = e & 7;
    const float c = C[r], s = C[8 - r];
    float cc, ss;  // cos, sin of (q·π/2 + r·π/16)
    switch (q) {
        case 0: cc = c; ss = s; break;
        case 1: cc = -s; ss = c; break;
        case 2: cc = -c; ss = -s; break;
        default: cc = s; ss = -c; break;
    }
    return DIR < 0 ? make_float2(cc, -ss) : make_float2(cc, ss);
}

// Natural-order DFT of R ≤ 32 points in registers (R = 1 is the identity).
template <int R, int DIR> __device__ __forceinline__ void fp_dft(float2 (&a)[R]) {
    if constexpr (R == 1) {
    } else if constexpr (R <= 16) {
        dft<R, DIR>(a);
    } else {
        float2 e[16], o[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            e[i] = a[2 * i];
            o[i] = a[2 * i + 1];
        }
        dft16<DIR>(e);
        dft16<DIR>(o);
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const float2 t = k == 0 ? o[k] : c_mul(o[k], w32<DIR>(k));
            a[k] = c_add(e[k], t);
            a[k + 16] = c_sub(e[k], t);
        }
    }
}

// Transpose of an 8×8 b16 matrix held as one register per lane (row lane/4, columns 2·(lane%4) + {0,1}).
__device__ __forceinline__ unsigned fp_trans(unsigned v) {
    unsigned r;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(v));
    return r;
}

// Scale so that the warp's largest |component| lands in [1/2, 1): s = 2^−ex, inv = 2^ex (both normal).
__device__ __forceinline__ void fp_scale(float m, float& s, float& inv) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int ex = ((__float_as_int(m) >> 23) & 255) - 126;
    ex = max(-126, min(126, ex));
    s = __int_as_float((127 - ex) << 23);
    inv = __int_as_float((127 + ex) << 23);
}

// One warp: segment x (256 points, fp_idx order) → DFT-256 → × K̂ (8 float2 per lane, fragment
// order, at kf) → inverse DFT-256 → back into x. The input is multiplied by s1 (a power of two
// that puts the row pair's largest component in [1/2, 1)) before rounding to f16; K̂'s components
// are below 1 (fc_spectrum), so every f16 operand stays below 2^13 with no further scaling: |D| ≤
// 256·√2, |Y| ≤ 512, |E| ≤ 16·512. The result is s1·(K̂-scaled) — the caller undoes both. The table
// `tab` is tc_table_fill's (forward DFT-16 fragments, W_256 twiddles; the inverse conjugates them).
__device__ __forceinline__ void fp_segment(float2* __restrict__ x, const float4* __restrict__ kf, const unsigned* __restrict__ tab, float s1) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const auto get = [&](int w) { return tab[w * 32 + lane]; };
    unsigned far[4], fai[4], fan[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        far[q] = get(q);
        fai[q] = get(4 + q);
        fan[q] = get(8 + q);
    }
    // ---- forward. X[a][b] = x[16a + b] as B fragments (tile j: columns b = 8j + g, rows 2t + 8h + e);
    // C = F·X, twiddle W_256^(a'·b) → the A fragments of D = C·F.
    unsigned ar[4], ai[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        unsigned xr[2], xi[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float2 v0 = x[fp_idx(2 * t + 8 * h, 8 * j + g)], v1 = x[fp_idx(2 * t + 8 * h + 1, 8 * j + g)];
            xr[h] = tc_pack(v0.x * s1, v1.x * s1);
            xi[h] = tc_pack(v0.y * s1, v1.y * s1);
        }
        float cr[4] = {0.f, 0.f, 0.f, 0.f}, ci[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(cr, far, xr[0], xr[1]);
        tc_mma(cr, fan, xi[0], xi[1]);
        tc_mma(ci, fai, xr[0], xr[1]);
        tc_mma(ci, far, xi[0], xi[1]);
        float2 c[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            c[q] = c_mul(make_float2(cr[q], ci[q]), make_float2(__uint_as_float(get(24 + 4 * j + q)), __uint_as_float(get(32 + 4 * j + q))));
        ar[2 * j] = tc_pack(c[0].x, c[1].x);
        ai[2 * j] = tc_pack(c[0].y, c[1].y);
        ar[2 * j + 1] = tc_pack(c[2].x, c[3].x);
        ai[2 * j + 1] = tc_pack(c[2].y, c[3].y);
    }
    // D = C·F (bin a' + 16·b' at row a' = g + 8·(q >> 1), column b' = 8j + 2t + (q & 1)), Y = D·K̂,
    // packed at once as the A fragments of the inverse's E = Y·conj(F).
    unsigned yr[4], yi[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const unsigned br0 = get(12 + 2 * j), br1 = get(13 + 2 * j);
        const unsigned bi0 = get(16 + 2 * j), bi1 = get(17 + 2 * j);
        const unsigned bn0 = get(20 + 2 * j), bn1 = get(21 + 2 * j);
        float dr[4] = {0.f, 0.f, 0.f, 0.f}, di[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(dr, ar, br0, br1);
        tc_mma(dr, ai, bn0, bn1);
        tc_mma(di, ar, bi0, bi1);
        tc_mma(di, ai, br0, br1);
        const float4 k01 = kf[(2 * j) * 32 + lane], k23 = kf[(2 * j + 1) * 32 + lane];
        const float2 y0 = c_mul(make_float2(dr[0], di[0]), make_float2(k01.x, k01.y));
        const float2 y1 = c_mul(make_float2(dr[1], di[1]), make_float2(k01.z, k01.w));
        const float2 y2 = c_mul(make_float2(dr[2], di[2]), make_float2(k23.x, k23.y));
        const float2 y3 = c_mul(make_float2(dr[3], di[3]), make_float2(k23.z, k23.w));
        yr[2 * j] = tc_pack(y0.x, y1.x);
        yi[2 * j] = tc_pack(y0.y, y1.y);
        yr[2 * j + 1] = tc_pack(y2.x, y3.x);
        yi[2 * j + 1] = tc_pack(y2.y, y3.y);
    }
    // ---- inverse. E[a'][b] = Σ_b' Y[a'][b']·conj(W16^(b'·b)), twiddle conj(W_256^(a'·b)), then each
    // 8×8 block transposed so that E' becomes the B operand (rows a') of the last product.
    unsigned er[2][2], ei[2][2];  // [column tile j][row half]
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const unsigned br0 = get(12 + 2 * j), br1 = get(13 + 2 * j);
        const unsigned bi0 = get(20 + 2 * j), bi1 = get(21 + 2 * j);  // Im(conj F) = −Im F
        const unsigned bn0 = get(16 + 2 * j), bn1 = get(17 + 2 * j);  // −Im(conj F) = Im F
        float dr[4] = {0.f, 0.f, 0.f, 0.f}, di[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(dr, yr, br0, br1);
        tc_mma(dr, yi, bn0, bn1);
        tc_mma(di, yr, bi0, bi1);
        tc_mma(di, yi, br0, br1);
        float2 c[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            c[q] = c_mul(make_float2(dr[q], di[q]), make_float2(__uint_as_float(get(24 + 4 * j + q)), -__uint_as_float(get(32 + 4 * j + q))));
#pragma unroll
        for (int rh = 0; rh < 2; ++rh) {
            er[j][rh] = fp_trans(tc_pack(c[2 * rh].x, c[2 * rh + 1].x));
            ei[j][rh] = fp_trans(tc_pack(c[2 * rh].y, c[2 * rh + 1].y));
        }
    }
    // x[16a + b] = Σ_a' conj(F)[a][a']·E'[a'][b]: A = conj(F) (Im and −Im swap roles). Every lane's
    // reads of x are done; the stores below overwrite what other lanes read.
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        float dr[4] = {0.f, 0.f, 0.f, 0.f}, di[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(dr, far, er[j][0], er[j][1]);
        tc_mma(dr, fai, ei[j][0], ei[j][1]);  // −Im(conj F) = Im F
        tc_mma(di, fan, er[j][0], er[j][1]);  // Im(conj F) = −Im F
        tc_mma(di, far, ei[j][0], ei[j][1]);
        // Rows a = g + 8·(q >> 1), columns b = 8j + 2t + (q & 1): two neighbours per 16-byte store.
#pragma unroll
        for (int rh = 0; rh < 2; ++rh)
            *reinterpret_cast<float4*>(&x[fp_idx(g + 8 * rh, 8 * j + 2 * t)]) = make_float4(dr[2 * rh], di[2 * rh], dr[2 * rh + 1], di[2 * rh + 1]);
    }
}

// One row of a pair, resolved once into registers: pointers already offset by this thread's
// column n2 (element n1 is then at a constant offset n1·256), the number of samples to touch (0
// for an invalid row) minus n2, and the mask value.
template <typename T, typename TO>
struct FpRow {
    const T* u;
    const T* pre;
    const T* post;
    TO* out;     // hd = 1
    float* ws;   // hd > 1: the g_ij row
    float mask;
    int len;     // element n1 exists when n1·256 < len
};

template <typename T, typename TO>
__device__ __forceinline__ FpRow<T, TO> fp_row(const FcParams& p, const FcRow& r, int n2) {
    FpRow<T, TO> f;
    f.len = r.valid ? (int)p.L - n2 : 0;
    f.u = reinterpret_cast<const T*>(p.u) + r.urow + n2;
    f.pre = reinterpret_cast<const T*>(p.pre) + r.prow + n2;
    f.post = reinterpret_cast<const T*>(p.post) + r.urow + n2;
    f.out = reinterpret_cast<TO*>(p.out) + r.urow + n2;
    f.ws = reinterpret_cast<float*>(p.wsa) + r.local * p.L + n2;
    f.mask = p.has_mask && r.valid && p.hd == 1 ? reinterpret_cast<const float*>(p.mask)[(i64)r.b * p.H + r.g] : 1.f;
    return f;
}

// Stores of the output dtype: bf16 by one cvt (round to nearest even, NaN kept).
__device__ __forceinline__ void fp_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void fp_st(ember_bf16* p, float v) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    *reinterpret_cast<unsigned short*>(p) = h;
}

// Loads the first `n` elements (n1 < n) of both rows of a pair, times the pregate when PRE.
template <int P, bool PRE, typename T, typename TO>
__device__ __forceinline__ void fp_load(float2 (&a)[P], int n, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
#pragma unroll
    for (int n1 = 0; n1 < P; ++n1) {
        if (n1 >= n) {
            a[n1] = make_float2(0.f, 0.f);
            continue;
        }
        const int o = n1 << 8;
        float va = o < fa.len ? ember_to_f32(fa.u[o]) : 0.f;
        float vb = o < fb.len ? ember_to_f32(fb.u[o]) : 0.f;
        if (PRE) {
            va *= o < fa.len ? ember_to_f32(fa.pre[o]) : 0.f;
            vb *= o < fb.len ? ember_to_f32(fb.pre[o]) : 0.f;
        }
        a[n1] = make_float2(va, vb);
    }
}

// The first `n` outputs of both rows: z = a·s1·ks (D included) → GELU → postgate, mask → store
// (as fc_epi_fwd). HD1: the output row (hd = 1); else the g_ij workspace row.
// Element n1 sits at offset n1·2^SH from the row pointers (SH = 8: every n1 of the column).
template <int P, bool GELU, bool POST, bool HD1, int SH = 8, typename T, typename TO>
__device__ __forceinline__ void fp_epilogue(const float2 (&a)[P], int n, float inv1, float ks, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
#pragma unroll
    for (int n1 = 0; n1 < P; ++n1) {
        if (n1 >= n) break;
        const int o = n1 << SH;
        float za = a[n1].x * inv1 * ks, zb = a[n1].y * inv1 * ks;
        if (GELU) {
            za = fc_gelu(za);
            zb = fc_gelu(zb);
        }
        if (HD1) {
            za *= fa.mask;
            zb *= fb.mask;
            if (POST) {
                if (o < fa.len) za *= ember_to_f32(fa.post[o]);
                if (o < fb.len) zb *= ember_to_f32(fb.post[o]);
            }
            if (o < fa.len) fp_st(fa.out + o, za);
            if (o < fb.len) fp_st(fb.out + o, zb);
        } else {
            if (o < fa.len) fa.ws[o] = za;
            if (o < fb.len) fb.ws[o] = zb;
        }
    }
}

// The forward. CTA: 256 threads, R = 32/P row pairs; pair Q of a launch is rows 2q, 2q + 1 of head
// Q / ⌈rph/2⌉ (q = Q mod ⌈rph/2⌉; an odd last row is paired with zeros).
template <int LOGP, typename T, typename TO>
__device__ void fc_fwd_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, R = 32 >> LOGP, LOGN = LOGP + 8;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 32 * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [2r] = row a, [2r + 1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2 * R);                 // per pair: largest |component|
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    // The per-lane table, computed once per device after the twiddles (fc_tc_table).
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 256) tab[i] = gtab[i];
    const int n2 = threadIdx.x;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool half = p.L <= (P << 7);  // w[n] = 0 for n ≥ N/2
    const bool pre = p.has_pre;
    const i64 rph = p.B * (i64)p.hd * p.hd;  // rows per head
    const i64 pph = (rph + 1) / 2;           // pairs per head
    // The CTA's rows, computed once (64-bit divisions) and shared.
    if (threadIdx.x < 2 * R) {
        const int r = threadIdx.x >> 1, second = threadIdx.x & 1;
        const i64 Q = (i64)blockIdx.x * R + r;
        const i64 gl = Q / pph, qq = Q - gl * pph;
        FcRow row = fc_row(p, gl * rph + 2 * qq + second);
        // A pair beyond the launch, or the missing partner of an odd last row, is invalid.
        const bool first_valid = gl * rph + 2 * qq < p.nrows;
        row.valid = row.valid && first_valid && (second == 0 || 2 * qq + 1 < rph);
        rows[threadIdx.x] = row;
        if (second == 0) pmax[r] = 0;
    }
    __syncthreads();
    // W_N^(n2·k1) = entry k1·256 + n2 of the pass table of shape (ns = 256, R = P) (fft.cuh; for
    // P = 32 its own table FC_TW_PAIR32): a
    // warp's loads are contiguous, and the table (N float2) stays in L1 across the CTA's rounds.
    const float2* wtab = tw + (LOGP == 5 ? FC_TW_PAIR32 : FC_STAGE_TW(8, LOGP)) + n2;
    // ---- stage 1: DFT over n1, twiddle, store; the pair's largest component into pmax.
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
        if (!ra.valid) continue;
        const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
        float2 a[P];
        // All loads first (independent), then the arithmetic.
        if (pre) fp_load<P, true>(a, half ? P / 2 : P, fa, fb);
        else fp_load<P, false>(a, half ? P / 2 : P, fa, fb);
        if (half) {
            float2 ev[P / 2], od[P / 2];
#pragma unroll
            for (int n1 = 0; n1 < P / 2; ++n1) {
                ev[n1] = a[n1];
                od[n1] = n1 == 0 ? ev[n1] : c_mul(ev[n1], w32<-1>(n1 * (32 / P)));
            }
            fp_dft<P / 2, -1>(ev);
            fp_dft<P / 2, -1>(od);
#pragma unroll
            for (int mm = 0; mm < P / 2; ++mm) {
                a[2 * mm] = ev[mm];
                a[2 * mm + 1] = od[mm];
            }
        } else {
            fp_dft<P, -1>(a);
        }
        float mx = fmaxf(fabsf(a[0].x), fabsf(a[0].y));
        x[(r * P) * 256 + pos] = a[0];
#pragma unroll
        for (int k1 = 1; k1 < P; ++k1) {
            const float2 v = c_mul(a[k1], wtab[k1 << 8]);
            mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
            x[(r * P + k1) * 256 + pos] = v;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if ((threadIdx.x & 31) == 0) atomicMax(&pmax[r], __float_as_int(mx));
    }
    __syncthreads();
    // ---- stage 2: each warp's segments.
    for (int sg = threadIdx.x >> 5; sg < 32; sg += 8) {
        const int r = sg >> LOGP, k1 = sg & (P - 1);
        if (!rows[2 * r].valid) continue;
        int ex = ((pmax[r] >> 23) & 255) - 126;
        ex = max(-126, min(126, ex));
        // K̂ of the head: N float2 = N/2 float4; segment k1 at 128·k1 float4.
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + ((i64)rows[2 * r].g << (LOGN - 1)) + (k1 << 7);
        fp_segment(x + sg * 256, kf, tab, __int_as_float((127 - ex) << 23));
    }
    __syncthreads();
    // ---- inverse stage 1 and the epilogue. The values carry s1 and 1/kscale: undone per output
    // (two factors, so that neither product can overflow where the result does not).
    const float* kscale = reinterpret_cast<const float*>(p.spec) + ((i64)p.heads << (LOGN + 1));
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
        if (!ra.valid) continue;
        const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
        int ex = ((pmax[r] >> 23) & 255) - 126;
        ex = max(-126, min(126, ex));
        const float inv1 = __int_as_float((127 + ex) << 23), ks = kscale[ra.g];
        float2 a[P];
        a[0] = x[(r * P) * 256 + pos];
#pragma unroll
        for (int k1 = 1; k1 < P; ++k1) a[k1] = c_mulc(x[(r * P + k1) * 256 + pos], wtab[k1 << 8]);
        int nout = P;
        if (half) {
            float2 ev[P / 2], od[P / 2];
#pragma unroll
            for (int mm = 0; mm < P / 2; ++mm) {
                ev[mm] = a[2 * mm];
                od[mm] = a[2 * mm + 1];
            }
            fp_dft<P / 2, 1>(ev);
            fp_dft<P / 2, 1>(od);
#pragma unroll
            for (int n1 = 0; n1 < P / 2; ++n1) a[n1] = c_add(ev[n1], n1 == 0 ? od[n1] : c_mul(od[n1], w32<1>(n1 * (32 / P))));
            nout = P / 2;
        } else {
            fp_dft<P, 1>(a);
        }
        // One specialization per (GELU, postgate, hd = 1) so that no flag is tested per element.
        const int sel = (p.gelu ? 4 : 0) | (p.has_post ? 2 : 0) | (p.hd == 1 ? 1 : 0);
        switch (sel) {
            case 0: fp_epilogue<P, false, false, false>(a, nout, inv1, ks, fa, fb); break;
            case 1: fp_epilogue<P, false, false, true>(a, nout, inv1, ks, fa, fb); break;
            case 2: fp_epilogue<P, false, true, false>(a, nout, inv1, ks, fa, fb); break;
            case 3: fp_epilogue<P, false, true, true>(a, nout, inv1, ks, fa, fb); break;
            case 4: fp_epilogue<P, true, false, false>(a, nout, inv1, ks, fa, fb); break;
            case 5: fp_epilogue<P, true, false, true>(a, nout, inv1, ks, fa, fb); break;
            case 6: fp_epilogue<P, true, true, false>(a, nout, inv1, ks, fa, fb); break;
            default: fp_epilogue<P, true, true, true>(a, nout, inv1, ks, fa, fb); break;
        }
    }
}

// CTAs per SM: 3 (80 registers; P ≤ 16 spill at most 44 bytes) except P = 32, whose 32 complex
// values per thread need 128 registers (2 CTAs).
#define FP_MINB(LOGP) ((LOGP) == 5 ? 2 : 3)
#define FC_PAIR_ENTRIES(LOGP)                                                                                                   \
    extern "C" __global__ void __launch_bounds__(256, FP_MINB(LOGP)) fc_fwd_pair##LOGP##_bf16_bf16(FcParams p) { fc_fwd_pair<LOGP, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FP_MINB(LOGP)) fc_fwd_pair##LOGP##_bf16_f32(FcParams p) { fc_fwd_pair<LOGP, ember_bf16, float>(p); }
FC_PAIR_ENTRIES(1)
FC_PAIR_ENTRIES(2)
FC_PAIR_ENTRIES(3)
FC_PAIR_ENTRIES(4)
FC_PAIR_ENTRIES(5)

// N = 16384 (P = 64), L ≤ N/2 only: one row pair per CTA of 512 threads, two threads per column
// (thread 2·n2 + h, h = 0/1 in neighbouring lanes). Stage 1 by a radix-2 split across the two:
// thread h transforms the subsequence x[2m + h] (32 points, only m < 16 nonzero: two 16-point
// DFTs), then X[k] = Y0[k] + W64^k·Y1[k] (thread 0, k < 32) and X[k + 32] = Y0[k] − W64^k·Y1[k]
// (thread 1) with the partner's values by shuffle. The inverse mirrors it: x[2m] = IDFT32(B[k] +
// B[k + 32]) (thread 0), x[2m + 1] = IDFT32(W64^−k·(B[k] − B[k + 32])) (thread 1), first 16 outputs
// each. Segments (64 per pair, 4 per warp) and the epilogue as fc_fwd_pair; 128 KB of data, one
// CTA (16 warps) per SM.
template <typename T, typename TO>
__device__ void fc_fwd_pair64(const FcParams& p) {
    constexpr int LOGP = 6, LOGN = 14;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const int h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool pre = p.has_pre;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    if (threadIdx.x < 2) {
        const i64 Q = blockIdx.x;
        const i64 gl = Q / pph, qq = Q - gl * pph;
        FcRow row = fc_row(p, gl * rph + 2 * qq + threadIdx.x);
        const bool first_valid = gl * rph + 2 * qq < p.nrows;
        row.valid = row.valid && first_valid && (threadIdx.x == 0 || 2 * qq + 1 < rph);
        rows[threadIdx.x] = row;
        if (threadIdx.x == 0) pmax[0] = 0;
    }
    __syncthreads();
    const FcRow ra = rows[0], rb = rows[1];
    if (!ra.valid) return;  // uniform over the CTA
    const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
    const float2* wtab = tw + FC_TW_PAIR64 + n2;  // W_N^(n2·k1) at k1·256
    // ---- stage 1. y[m] = x[2m + h] (offset (2m + h)·256), m < 16.
    float2 a[32];
    {
        const FpRow<T, TO> ga = fa, gb = fb;
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            const int o = (2 * m + h) << 8;
            float va = o < ga.len ? ember_to_f32(ga.u[o]) : 0.f;
            float vb = o < gb.len ? ember_to_f32(gb.u[o]) : 0.f;
            if (pre) {
                va *= o < ga.len ? ember_to_f32(ga.pre[o]) : 0.f;
                vb *= o < gb.len ? ember_to_f32(gb.pre[o]) : 0.f;
            }
            y[m] = make_float2(va, vb);
        }
        // Y[2j + e] = DFT16(y[m]·W32^(m·e))[j]
        float2 ev[16], od[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            ev[m] = y[m];
            od[m] = m == 0 ? y[m] : c_mul(y[m], w32<-1>(m));
        }
        dft16<-1>(ev);
        dft16<-1>(od);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            a[2 * j] = ev[j];
            a[2 * j + 1] = od[j];
        }
    }
    // Radix-2 across the pair of threads: thread h keeps X[k + 32h] = Y0[k] ± W64^k·Y1[k].
    float mx = 0.f;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        const float2 y0 = h == 0 ? a[k] : other, y1 = h == 0 ? other : a[k];
        const float2 w = tw[k << (FC_TWN_LOG - 6)];  // W64^k from the flat table
        const float2 t = c_mul(y1, w);
        const float2 v0 = h == 0 ? c_add(y0, t) : c_sub(y0, t);
        const int k1 = k + 32 * h;
        const float2 v = k1 == 0 ? v0 : c_mul(v0, wtab[k1 << 8]);
        mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
        x[k1 * 256 + pos] = v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) atomicMax(&pmax[0], __float_as_int(mx));
    __syncthreads();
    // ---- stage 2: 64 segments, 4 per warp.
    int ex = ((pmax[0] >> 23) & 255) - 126;
    ex = max(-126, min(126, ex));
    const float s1 = __int_as_float((127 - ex) << 23), inv1 = __int_as_float((127 + ex) << 23);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) {
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + ((i64)ra.g << (LOGN - 1)) + (sg << 7);
        fp_segment(x + sg * 256, kf, tab, s1);
    }
    __syncthreads();
    // ---- inverse stage 1: thread h holds B[k + 32h]·conj(W_N^(n2·k1)).
    const float ks = reinterpret_cast<const float*>(p.spec)[((i64)p.heads << (LOGN + 1)) + ra.g];
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int k1 = k + 32 * h;
        const float2 v = x[k1 * 256 + pos];
        a[k] = k1 == 0 ? v : c_mulc(v, wtab[k1 << 8]);
    }
    // Thread 0: c[k] = B[k] + B[k + 32] → even outputs; thread 1: (B[k] − B[k + 32])·W64^−k → odd.
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        if (h == 0) {
            a[k] = c_add(a[k], other);
        } else {
            const float2 d = c_sub(other, a[k]);
            a[k] = k == 0 ? d : c_mulc(d, tw[k << (FC_TWN_LOG - 6)]);
        }
    }
    // First 16 outputs of the 32-point inverse DFT: x[m] = E[m] + W32^−m·O[m], m < 16.
    {
        float2 ev[16], od[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            ev[j] = a[2 * j];
            od[j] = a[2 * j + 1];
        }
        dft16<1>(ev);
        dft16<1>(od);
#pragma unroll
        for (int m = 0; m < 16; ++m) a[m] = c_add(ev[m], m == 0 ? od[m] : c_mul(od[m], w32<1>(m)));
    }
    // Outputs n1 = 2m + h, m < 16: offset h·256 + m·512 — the epilogue over 16 elements at stride 512.
    FpRow<T, TO> ea = fa, eb = fb;
    const int off = h << 8;
    ea.u += off; eb.u += off; ea.pre += off; eb.pre += off; ea.post += off; eb.post += off;
    ea.out += off; eb.out += off; ea.ws += off; eb.ws += off;
    ea.len -= off; eb.len -= off;
    float2 o16[16];
#pragma unroll
    for (int m = 0; m < 16; ++m) o16[m] = a[m];
    const int sel = (p.gelu ? 4 : 0) | (p.has_post ? 2 : 0) | (p.hd == 1 ? 1 : 0);
    switch (sel) {
        case 0: fp_epilogue<16, false, false, false, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 1: fp_epilogue<16, false, false, true, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 2: fp_epilogue<16, false, true, false, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 3: fp_epilogue<16, false, true, true, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 4: fp_epilogue<16, true, false, false, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 5: fp_epilogue<16, true, false, true, 9>(o16, 16, inv1, ks, ea, eb); break;
        case 6: fp_epilogue<16, true, true, false, 9>(o16, 16, inv1, ks, ea, eb); break;
        default: fp_epilogue<16, true, true, true, 9>(o16, 16, inv1, ks, ea, eb); break;
    }
}

extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_bf16(FcParams p) { fc_fwd_pair64<ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_f32(FcParams p) { fc_fwd_pair64<ember_bf16, float>(p); }

#endif  // FC_BLOCK == 256
