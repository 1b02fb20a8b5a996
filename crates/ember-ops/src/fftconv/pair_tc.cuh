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

// Power-of-two scale s = 2^−ex of a pair whose largest component has the bit pattern `bits`
// (so that it lands in [1/2, 1)), and its inverse.
__device__ __forceinline__ void fp_pair_scale(int bits, float& s, float& inv) {
    int ex = ((bits >> 23) & 255) - 126;
    ex = max(-126, min(126, ex));
    s = __int_as_float((127 - ex) << 23);
    inv = __int_as_float((127 + ex) << 23);
}

// The DFT-16 matrix fragments of tc_table_fill's per-lane table, used by the first product of
// the forward DFT-256 and the last product of the inverse.
struct FpFrag {
    unsigned far[4], fai[4], fan[4];
};
__device__ __forceinline__ FpFrag fp_frag(const unsigned* __restrict__ tab) {
    const int lane = threadIdx.x & 31;
    FpFrag f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        f.far[q] = tab[q * 32 + lane];
        f.fai[q] = tab[(4 + q) * 32 + lane];
        f.fan[q] = tab[(8 + q) * 32 + lane];
    }
    return f;
}

// One warp: the forward DFT-256 of segment x (256 points, fp_idx order) times s1 (a power of two
// that puts the row pair's largest component in [1/2, 1) before rounding to f16). Bin
// a' + 16·b' (a' = g + 8·(q >> 1), b' = 8j + 2t + (q & 1)) lands in (dr[j][q], di[j][q]): the
// lane's fragment slot 4j + q, the order of fp_kpos. |D| ≤ 256·√2.
__device__ __forceinline__ void fp_dft256(const float2* __restrict__ x, const unsigned* __restrict__ tab, const FpFrag& F, float s1, float (&dr)[2][4], float (&di)[2][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const auto get = [&](int w) { return tab[w * 32 + lane]; };
    // X[a][b] = x[16a + b] as B fragments (tile j: columns b = 8j + g, rows 2t + 8h + e);
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
        tc_mma(cr, F.far, xr[0], xr[1]);
        tc_mma(cr, F.fan, xi[0], xi[1]);
        tc_mma(ci, F.fai, xr[0], xr[1]);
        tc_mma(ci, F.far, xi[0], xi[1]);
        float2 c[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            c[q] = c_mul(make_float2(cr[q], ci[q]), make_float2(__uint_as_float(get(24 + 4 * j + q)), __uint_as_float(get(32 + 4 * j + q))));
        ar[2 * j] = tc_pack(c[0].x, c[1].x);
        ai[2 * j] = tc_pack(c[0].y, c[1].y);
        ar[2 * j + 1] = tc_pack(c[2].x, c[3].x);
        ai[2 * j + 1] = tc_pack(c[2].y, c[3].y);
    }
    // D = C·F.
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const unsigned br0 = get(12 + 2 * j), br1 = get(13 + 2 * j);
        const unsigned bi0 = get(16 + 2 * j), bi1 = get(17 + 2 * j);
        const unsigned bn0 = get(20 + 2 * j), bn1 = get(21 + 2 * j);
#pragma unroll
        for (int q = 0; q < 4; ++q) dr[j][q] = di[j][q] = 0.f;
        tc_mma(dr[j], ar, br0, br1);
        tc_mma(dr[j], ai, bn0, bn1);
        tc_mma(di[j], ar, bi0, bi1);
        tc_mma(di[j], ai, br0, br1);
    }
}

// Packs a spectrum in fragment order (slot 4j + q = (y[j][q])) as the A fragments of the inverse.
__device__ __forceinline__ void fp_pack_y(const float2 (&y)[2][4], unsigned (&yr)[4], unsigned (&yi)[4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        yr[2 * j] = tc_pack(y[j][0].x, y[j][1].x);
        yi[2 * j] = tc_pack(y[j][0].y, y[j][1].y);
        yr[2 * j + 1] = tc_pack(y[j][2].x, y[j][3].x);
        yi[2 * j + 1] = tc_pack(y[j][2].y, y[j][3].y);
    }
}

// One warp: the inverse DFT-256 (unnormalised) of the fragment-order spectrum (yr, yi) into
// segment x. The caller's reads of x must be done (every lane's: the stores overwrite what other
// lanes read).
__device__ __forceinline__ void fp_idft256(float2* __restrict__ x, const unsigned* __restrict__ tab, const FpFrag& F, const unsigned (&yr)[4], const unsigned (&yi)[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const auto get = [&](int w) { return tab[w * 32 + lane]; };
    // E[a'][b] = Σ_b' Y[a'][b']·conj(W16^(b'·b)), twiddle conj(W_256^(a'·b)), then each 8×8 block
    // transposed so that E' becomes the B operand (rows a') of the last product.
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
    // x[16a + b] = Σ_a' conj(F)[a][a']·E'[a'][b]: A = conj(F) (Im and −Im swap roles).
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        float dr[4] = {0.f, 0.f, 0.f, 0.f}, di[4] = {0.f, 0.f, 0.f, 0.f};
        tc_mma(dr, F.far, er[j][0], er[j][1]);
        tc_mma(dr, F.fai, ei[j][0], ei[j][1]);  // −Im(conj F) = Im F
        tc_mma(di, F.fan, er[j][0], er[j][1]);  // Im(conj F) = −Im F
        tc_mma(di, F.far, ei[j][0], ei[j][1]);
        // Rows a = g + 8·(q >> 1), columns b = 8j + 2t + (q & 1): two neighbours per 16-byte store.
#pragma unroll
        for (int rh = 0; rh < 2; ++rh)
            *reinterpret_cast<float4*>(&x[fp_idx(g + 8 * rh, 8 * j + 2 * t)]) = make_float4(dr[2 * rh], di[2 * rh], dr[2 * rh + 1], di[2 * rh + 1]);
    }
}

// A head's spectrum in fragment order, segment k1: slots 4j + q of a lane at float4
// (2j + (q >> 1))·32 + lane, component q & 1 (fp_kpos).
__device__ __forceinline__ void fp_load_frag(const float4* __restrict__ kf, float2 (&k)[2][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const float4 k01 = kf[(2 * j) * 32 + lane], k23 = kf[(2 * j + 1) * 32 + lane];
        k[j][0] = make_float2(k01.x, k01.y);
        k[j][1] = make_float2(k01.z, k01.w);
        k[j][2] = make_float2(k23.x, k23.y);
        k[j][3] = make_float2(k23.z, k23.w);
    }
}

// One warp: the spectrum (dr, di) of a segment (fragment order) × K̂ (at kf) → inverse DFT-256
// into segment x.
__device__ __forceinline__ void fp_filter_idft(float2* __restrict__ x, const float4* __restrict__ kf, const unsigned* __restrict__ tab, const FpFrag& F, const float (&dr)[2][4], const float (&di)[2][4]) {
    float2 k[2][4], y[2][4];
    fp_load_frag(kf, k);
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) y[j][q] = c_mul(make_float2(dr[j][q], di[j][q]), k[j][q]);
    unsigned yr[4], yi[4];
    fp_pack_y(y, yr, yi);
    fp_idft256(x, tab, F, yr, yi);
}

// One warp: segment x → DFT-256 → × K̂ (fragment order, at kf) → inverse DFT-256 → back into x.
// The input is multiplied by s1 before rounding to f16; K̂'s components are below 1
// (fc_spectrum), so every f16 operand stays below 2^13 with no further scaling: |D| ≤ 256·√2,
// |Y| ≤ 512, |E| ≤ 16·512. The result is s1·(K̂-scaled) — the caller undoes both. The table
// `tab` is tc_table_fill's (forward DFT-16 fragments, W_256 twiddles; the inverse conjugates them).
__device__ __forceinline__ void fp_segment(float2* __restrict__ x, const float4* __restrict__ kf, const unsigned* __restrict__ tab, float s1) {
    const FpFrag F = fp_frag(tab);
    float dr[2][4], di[2][4];
    fp_dft256(x, tab, F, s1, dr, di);
    fp_filter_idft(x, kf, tab, F, dr, di);
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
    T* z;        // hd = 1 with z saved for the backward (p.zs): the z row
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
    f.z = reinterpret_cast<T*>(p.zs) + r.urow + n2;
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
// (as fc_epi_fwd). HD1: the output row (hd = 1); else the g_ij workspace row. ZS (with HD1): z
// itself also stored, in u's dtype, for the backward.
// Element n1 sits at offset n1·2^SH from the row pointers (SH = 8: every n1 of the column).
template <int P, bool GELU, bool POST, bool HD1, int SH = 8, bool ZS = false, typename T, typename TO>
__device__ __forceinline__ void fp_epilogue(const float2 (&a)[P], int n, float inv1, float ks, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
#pragma unroll
    for (int n1 = 0; n1 < P; ++n1) {
        if (n1 >= n) break;
        const int o = n1 << SH;
        float za = a[n1].x * inv1 * ks, zb = a[n1].y * inv1 * ks;
        if (ZS) {
            if (o < fa.len) fp_st(fa.z + o, za);
            if (o < fb.len) fp_st(fb.z + o, zb);
        }
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

// The epilogue's specialization: bit 2 GELU, bit 1 postgate, bit 0 hd = 1, bit 3 z saved (hd = 1,
// GELU or postgate: the backward's pair kernels then read z instead of recomputing it). One
// specialization per flag set, so that no flag is tested per element.
__device__ __forceinline__ int fp_epilogue_flags(const FcParams& p) {
    const bool zs = p.zs != 0 && p.hd == 1 && (p.gelu || p.has_post);
    return (zs ? 8 : 0) | (p.gelu ? 4 : 0) | (p.has_post ? 2 : 0) | (p.hd == 1 ? 1 : 0);
}

template <int P, int SH, typename T, typename TO>
__device__ __forceinline__ void fp_epilogue_sel(int sel, const float2 (&a)[P], int n, float inv1, float ks, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
    switch (sel) {
        case 0: fp_epilogue<P, false, false, false, SH>(a, n, inv1, ks, fa, fb); break;
        case 1: fp_epilogue<P, false, false, true, SH>(a, n, inv1, ks, fa, fb); break;
        case 2: fp_epilogue<P, false, true, false, SH>(a, n, inv1, ks, fa, fb); break;
        case 3: fp_epilogue<P, false, true, true, SH>(a, n, inv1, ks, fa, fb); break;
        case 4: fp_epilogue<P, true, false, false, SH>(a, n, inv1, ks, fa, fb); break;
        case 5: fp_epilogue<P, true, false, true, SH>(a, n, inv1, ks, fa, fb); break;
        case 6: fp_epilogue<P, true, true, false, SH>(a, n, inv1, ks, fa, fb); break;
        case 7: fp_epilogue<P, true, true, true, SH>(a, n, inv1, ks, fa, fb); break;
        case 11: fp_epilogue<P, false, true, true, SH, true>(a, n, inv1, ks, fa, fb); break;
        case 13: fp_epilogue<P, true, false, true, SH, true>(a, n, inv1, ks, fa, fb); break;
        default: fp_epilogue<P, true, true, true, SH, true>(a, n, inv1, ks, fa, fb); break;  // 15
    }
}

// Stage 1 of one row pair, thread n2 = column n2 (at `pos`): the P-point DFT over n1 of a[] (two
// P/2-point DFTs when `half`, i.e. only n1 < P/2 is nonzero), the twiddle W_N^(n2·k1) from the
// pass table (`wtab` offset by n2), stores into the pair's segments `xr`; the pair's largest
// component goes into *pmax (non-negative floats order as their bit patterns).
template <int P>
__device__ __forceinline__ void fp_stage1(float2 (&a)[P], bool half, float2* __restrict__ xr, int pos, const float2* __restrict__ wtab, int* pmax) {
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
    xr[pos] = a[0];
#pragma unroll
    for (int k1 = 1; k1 < P; ++k1) {
        const float2 v = c_mul(a[k1], wtab[k1 << 8]);
        mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
        xr[k1 * 256 + pos] = v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) atomicMax(pmax, __float_as_int(mx));
}

// The inverse of stage 1: conjugate twiddles, the inverse P-point DFT over k1 → a[n1] for the
// outputs n1 < the returned count (P/2 when `half`: the rest is not needed).
template <int P>
__device__ __forceinline__ int fp_stage1_inv(float2 (&a)[P], bool half, const float2* __restrict__ xr, int pos, const float2* __restrict__ wtab) {
    a[0] = xr[pos];
#pragma unroll
    for (int k1 = 1; k1 < P; ++k1) a[k1] = c_mulc(xr[k1 * 256 + pos], wtab[k1 << 8]);
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
        return P / 2;
    }
    fp_dft<P, 1>(a);
    return P;
}

// ---- u staged ahead (the persistent forward, p.prefetch): while a CTA transforms one group of
// pairs, cp.async copies the next group's u into shared memory, so stage 1 reads it from there
// instead of waiting on global loads (ncu at L = 4096: stage 1's load latency was 44 % of the
// forward's stall samples).
__device__ __forceinline__ void fp_cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void fp_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fp_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Copies elements [0, nin·256) of the valid rows of a group (rows[2r + s]) into
// stg[(2r + s)·nin·256 + t], 16 bytes at a time; chunks at or past L are skipped (stage 1 reads
// only elements below L). The host takes this path only where L % 8 == 0 and u is 16-byte aligned,
// so every chunk lies wholly inside or outside the row.
template <int R, typename T>
__device__ __forceinline__ void fp_prefetch(const FcParams& p, const FcRow* rows, T* stg, int nin) {
    const int per_row = nin * 32;
    const T* u = reinterpret_cast<const T*>(p.u);
    for (int i = threadIdx.x; i < 2 * R * per_row; i += 256) {
        const int rr = i / per_row;
        const i64 t = (i64)(i - rr * per_row) * 8;
        const FcRow row = rows[rr];
        if (row.valid && t < p.L) fp_cp_async16(stg + (i64)rr * nin * 256 + t, u + row.urow + t);
    }
    fp_cp_async_commit();
}

// Stage 1 of every valid pair of a CTA (R = 32/P pairs, rows[2r], rows[2r + 1]): thread n2 loads
// its column of w = u (or u·pregate), all loads first (independent), then fp_stage1 into the
// pair's segments at x + r·P·256; the pair's largest component into pmax[r].
template <int P, typename T, typename TO>
__device__ __forceinline__ void fp_stage1_pairs(const FcParams& p, const FcRow* rows, float2* __restrict__ x, int n2, int pos, bool half, const float2* __restrict__ wtab, int* pmax) {
#pragma unroll 1
    for (int r = 0; r < 32 / P; ++r) {
        const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
        if (!ra.valid) continue;
        const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
        float2 a[P];
        if (p.has_pre) fp_load<P, true>(a, half ? P / 2 : P, fa, fb);
        else fp_load<P, false>(a, half ? P / 2 : P, fa, fb);
        fp_stage1<P>(a, half, x + r * P * 256, pos, wtab, &pmax[r]);
    }
}

// fp_stage1_pairs from the staged copy of u (no pregate): element n1 of row 2r + s at
// stg[(2r + s)·nin·256 + n1·256 + n2], read where n1·256 + n2 < L.
template <int P>
__device__ __forceinline__ void fp_stage1_staged(const FcParams& p, const FcRow* rows, const ember_bf16* stg, float2* __restrict__ x, int n2, int pos, bool half, const float2* __restrict__ wtab, int* pmax) {
    const int nin = half ? P / 2 : P;
#pragma unroll 1
    for (int r = 0; r < 32 / P; ++r) {
        if (!rows[2 * r].valid) continue;
        const int la = (int)p.L - n2, lb = rows[2 * r + 1].valid ? la : 0;
        const ember_bf16* sa = stg + (2 * r) * nin * 256 + n2;
        const ember_bf16* sb = sa + nin * 256;
        float2 a[P];
#pragma unroll
        for (int n1 = 0; n1 < P; ++n1) {
            const int o = n1 << 8;
            const bool in = n1 < nin;
            a[n1] = make_float2(in && o < la ? ember_to_f32(sa[o]) : 0.f, in && o < lb ? ember_to_f32(sb[o]) : 0.f);
        }
        fp_stage1<P>(a, half, x + r * P * 256, pos, wtab, &pmax[r]);
    }
}

// The rows of group G of a launch (pairs G·R … G·R + R − 1; pair Q is rows 2q, 2q + 1 of head
// Q / ⌈rph/2⌉, q = Q mod ⌈rph/2⌉; an odd last row is paired with zeros), by threads < 2R.
template <int R>
__device__ __forceinline__ void fp_group_rows(const FcParams& p, FcRow* rows, int* pmax, i64 G, i64 rph, i64 pph) {
    if (threadIdx.x < 2 * R) {
        const int r = threadIdx.x >> 1, second = threadIdx.x & 1;
        const i64 Q = G * R + r;
        const i64 gl = Q / pph, qq = Q - gl * pph;
        FcRow row = fc_row(p, gl * rph + 2 * qq + second);
        // A pair beyond the launch, or the missing partner of an odd last row, is invalid.
        const bool first_valid = gl * rph + 2 * qq < p.nrows;
        row.valid = row.valid && first_valid && (second == 0 || 2 * qq + 1 < rph);
        rows[threadIdx.x] = row;
        if (second == 0) pmax[r] = 0;
    }
}

// Stage 2 of a group: each warp's DFT-256 segments of the valid pairs.
template <int LOGP>
__device__ __forceinline__ void fp_segments(const FcParams& p, const FcRow* rows, const int* pmax, float2* __restrict__ x, const unsigned* __restrict__ tab) {
    constexpr int P = 1 << LOGP, LOGN = LOGP + 8;
    for (int sg = threadIdx.x >> 5; sg < 32; sg += 8) {
        const int r = sg >> LOGP, k1 = sg & (P - 1);
        if (!rows[2 * r].valid) continue;
        float s1, inv1;
        fp_pair_scale(pmax[r], s1, inv1);
        // K̂ of the head: N float2 = N/2 float4; segment k1 at 128·k1 float4.
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + ((i64)rows[2 * r].g << (LOGN - 1)) + (k1 << 7);
        fp_segment(x + sg * 256, kf, tab, s1);
    }
}

// Inverse stage 1 and the epilogue of every valid pair of a group. The values carry s1 and
// 1/kscale: undone per output (two factors, so that neither product can overflow where the result
// does not).
template <int LOGP, typename T, typename TO>
__device__ __forceinline__ void fp_inverse_pairs(const FcParams& p, const FcRow* rows, const int* pmax, const float2* __restrict__ x, int n2, int pos, bool half, const float2* __restrict__ wtab) {
    constexpr int P = 1 << LOGP, LOGN = LOGP + 8;
    const float* kscale = reinterpret_cast<const float*>(p.spec) + ((i64)p.heads << (LOGN + 1));
    const int sel = fp_epilogue_flags(p);
#pragma unroll 1
    for (int r = 0; r < 32 / P; ++r) {
        const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
        if (!ra.valid) continue;
        const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
        float s1, inv1;
        fp_pair_scale(pmax[r], s1, inv1);
        const float ks = kscale[ra.g];
        float2 a[P];
        const int nout = fp_stage1_inv<P>(a, half, x + r * P * 256, pos, wtab);
        fp_epilogue_sel<P, 8>(sel, a, nout, inv1, ks, fa, fb);
    }
}

// Shared memory of the pair forward (P ≤ 32), in bytes from fc_smem: 32 segments of data, the
// per-lane table, then the rows (2 per pair) and pair scales (1 per pair) — NBUF sets of each —
// then, for the staged forward, u's staged copy at a 16-byte boundary (smem_bytes_pair in cuda.rs).
#define FP_TAB_OFF (32 * 256 * 8)
#define FP_ROWS_OFF (FP_TAB_OFF + TC_TAB_WORDS * 32 * 4)
#define FP_STG_OFF(R, NBUF) ((FP_ROWS_OFF + (NBUF) * (R) * (2 * 48 + 4) + 15) & ~15)

// The forward. CTA: 256 threads, one group of R = 32/P row pairs (fp_group_rows), group
// blockIdx.x.
template <int LOGP, typename T, typename TO>
__device__ void fc_fwd_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, R = 32 >> LOGP;
    FC_SMEM_DECL
    unsigned char* smem = reinterpret_cast<unsigned char*>(fc_smem);
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(smem + FP_TAB_OFF);
    FcRow* rows = reinterpret_cast<FcRow*>(smem + FP_ROWS_OFF);  // [2r] = row a, [2r + 1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2 * R);            // per pair: largest |component|
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    // The per-lane table, computed once per device after the twiddles (fc_tc_table).
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 256) tab[i] = gtab[i];
    const int n2 = threadIdx.x;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool half = p.L <= (P << 7);  // w[n] = 0 for n ≥ N/2
    const i64 rph = p.B * (i64)p.hd * p.hd;  // rows per head
    const i64 pph = (rph + 1) / 2;           // pairs per head
    // The CTA's rows, computed once (64-bit divisions) and shared.
    fp_group_rows<R>(p, rows, pmax, blockIdx.x, rph, pph);
    __syncthreads();
    // W_N^(n2·k1) = entry k1·256 + n2 of the pass table of shape (ns = 256, R = P) (fft.cuh; for
    // P = 32 its own table FC_TW_PAIR32): a
    // warp's loads are contiguous, and the table (N float2) stays in L1 across the CTA's rounds.
    const float2* wtab = tw + (LOGP == 5 ? FC_TW_PAIR32 : FC_STAGE_TW(8, LOGP)) + n2;
    // ---- stage 1: DFT over n1, twiddle, store; the pair's largest component into pmax.
    fp_stage1_pairs<P, T, TO>(p, rows, x, n2, pos, half, wtab, pmax);
    __syncthreads();
    // ---- stage 2: each warp's segments.
    fp_segments<LOGP>(p, rows, pmax, x, tab);
    __syncthreads();
    // ---- inverse stage 1 and the epilogue.
    fp_inverse_pairs<LOGP, T, TO>(p, rows, pmax, x, n2, pos, half, wtab);
}

// The staged forward (bf16 u without pregate, L % 8 = 0, 16-byte aligned u): a persistent grid
// (CTA i takes groups i, i + gridDim.x, …) in which the next group's u is copied by cp.async into
// shared memory while the current group is transformed, so stage 1 reads it there instead of
// waiting on global loads (ncu at L = 4096: stage 1's load latency was 44 % of the forward's stall
// samples). Rows and pair scales are double-buffered so the next group's are set up early. Same
// arithmetic as fc_fwd_pair: bitwise the same outputs.
template <int LOGP, typename T, typename TO>
__device__ void fc_fwd_pair_staged(const FcParams& p) {
    constexpr int P = 1 << LOGP, R = 32 >> LOGP;
    FC_SMEM_DECL
    unsigned char* smem = reinterpret_cast<unsigned char*>(fc_smem);
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(smem + FP_TAB_OFF);
    FcRow* rows = reinterpret_cast<FcRow*>(smem + FP_ROWS_OFF);  // [buf][2r + s]
    int* pmax = reinterpret_cast<int*>(rows + 4 * R);            // [buf][r]
    ember_bf16* stg = reinterpret_cast<ember_bf16*>(smem + FP_STG_OFF(R, 2));
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 256) tab[i] = gtab[i];
    const int n2 = threadIdx.x;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool half = p.L <= (P << 7);
    const int nin = half ? P / 2 : P;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    const i64 ngroups = ((p.nrows / rph) * pph + R - 1) / R;  // nrows is whole heads here
    const float2* wtab = tw + (LOGP == 5 ? FC_TW_PAIR32 : FC_STAGE_TW(8, LOGP)) + n2;
    i64 G = blockIdx.x;
    int cur = 0;
    fp_group_rows<R>(p, rows, pmax, G, rph, pph);
    __syncthreads();
    fp_prefetch<R>(p, rows, stg, nin);
#pragma unroll 1
    for (;;) {
        const FcRow* rc = rows + cur * 2 * R;
        int* pc = pmax + cur * R;
        fp_cp_async_wait_all();
        __syncthreads();
        fp_stage1_staged<P>(p, rc, stg, x, n2, pos, half, wtab, pc);
        const i64 Gn = G + gridDim.x;
        fp_group_rows<R>(p, rows + (cur ^ 1) * 2 * R, pmax + (cur ^ 1) * R, Gn, rph, pph);
        __syncthreads();
        // The staged copy has been read: fetch the next group's while this one is transformed.
        if (Gn < ngroups) fp_prefetch<R>(p, rows + (cur ^ 1) * 2 * R, stg, nin);
        fp_segments<LOGP>(p, rc, pc, x, tab);
        __syncthreads();
        fp_inverse_pairs<LOGP, T, TO>(p, rc, pc, x, n2, pos, half, wtab);
        G = Gn;
        cur ^= 1;
        if (G >= ngroups) break;  // uniform over the CTA
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
// The staged forward where it keeps the plain kernel's occupancy (2 CTAs per SM): P = 32.
extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pair_staged5_bf16_bf16(FcParams p) { fc_fwd_pair_staged<5, ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pair_staged5_bf16_f32(FcParams p) { fc_fwd_pair_staged<5, ember_bf16, float>(p); }

// The 32-point DFT of y[m] (only m < 16 nonzero) as two 16-point DFTs: a[2j + e] =
// DFT16(y[m]·W32^(m·e))[j]. Stage 1's first step at P = 64 and 128.
__device__ __forceinline__ void fp_dft32_half(const float2 (&y)[16], float2 (&a)[32]) {
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

// The first 16 outputs of the inverse 32-point DFT of a[]: o[m] = E[m] + W32^−m·O[m], m < 16.
__device__ __forceinline__ void fp_idft32_first16(const float2 (&a)[32], float2 (&o)[16]) {
    float2 ev[16], od[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        ev[j] = a[2 * j];
        od[j] = a[2 * j + 1];
    }
    dft16<1>(ev);
    dft16<1>(od);
#pragma unroll
    for (int m = 0; m < 16; ++m) o[m] = c_add(ev[m], m == 0 ? od[m] : c_mul(od[m], w32<1>(m)));
}

// Stage 1 at P = 64 for thread h of column n2 (at `pos`): y[m] = the pair's input at n1 = 2m + h
// (m < 16; L ≤ N/2). Y = DFT32 of y (two 16-point DFTs: only m < 16 is nonzero), then the radix-2
// step across the two threads: thread h keeps X[k + 32h] = Y0[k] ± W64^k·Y1[k] (the partner's Y by
// shuffle), times W_N^(n2·k1), stored at x[k1·256 + pos]; the pair's largest component into *pmax.
__device__ __forceinline__ void fp64_stage1(const float2 (&y)[16], int h, float2* __restrict__ x, int pos, const float2* __restrict__ tw, const float2* __restrict__ wtab, int* pmax) {
    float2 a[32];
    fp_dft32_half(y, a);
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
    if ((threadIdx.x & 31) == 0) atomicMax(pmax, __float_as_int(mx));
}

// Inverse stage 1 at P = 64: thread h takes B[k + 32h]·conj(W_N^(n2·k1)); thread 0 forms
// B[k] + B[k + 32] (the even outputs), thread 1 (B[k] − B[k + 32])·W64^−k (the odd ones); then
// the first 16 outputs of each 32-point inverse DFT: o[m] = output n1 = 2m + h, m < 16.
__device__ __forceinline__ void fp64_stage1_inv(float2 (&o)[16], int h, const float2* __restrict__ x, int pos, const float2* __restrict__ tw, const float2* __restrict__ wtab) {
    float2 a[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int k1 = k + 32 * h;
        const float2 v = x[k1 * 256 + pos];
        a[k] = k1 == 0 ? v : c_mulc(v, wtab[k1 << 8]);
    }
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
    fp_idft32_first16(a, o);
}

// N = 16384 (P = 64), L ≤ N/2 only: one row pair per CTA of 512 threads, two threads per column
// (thread 2·n2 + h, h = 0/1 in neighbouring lanes). Stage 1 and its inverse by a radix-2 split
// across the two (fp64_stage1, fp64_stage1_inv). Segments (64 per pair, 4 per warp) and the
// epilogue as fc_fwd_pair; 128 KB of data, one CTA (16 warps) per SM.
template <typename T, typename TO>
__device__ void fc_fwd_pair64(const FcParams& p) {
    constexpr int LOGN = 14;  // P = 64
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
    {
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            const int o = (2 * m + h) << 8;
            float va = o < fa.len ? ember_to_f32(fa.u[o]) : 0.f;
            float vb = o < fb.len ? ember_to_f32(fb.u[o]) : 0.f;
            if (pre) {
                va *= o < fa.len ? ember_to_f32(fa.pre[o]) : 0.f;
                vb *= o < fb.len ? ember_to_f32(fb.pre[o]) : 0.f;
            }
            y[m] = make_float2(va, vb);
        }
        fp64_stage1(y, h, x, pos, tw, wtab, &pmax[0]);
    }
    __syncthreads();
    // ---- stage 2: 64 segments, 4 per warp.
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) {
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + ((i64)ra.g << (LOGN - 1)) + (sg << 7);
        fp_segment(x + sg * 256, kf, tab, s1);
    }
    __syncthreads();
    // ---- inverse stage 1.
    const float ks = reinterpret_cast<const float*>(p.spec)[((i64)p.heads << (LOGN + 1)) + ra.g];
    float2 o16[16];
    fp64_stage1_inv(o16, h, x, pos, tw, wtab);
    // Outputs n1 = 2m + h, m < 16: offset h·256 + m·512 — the epilogue over 16 elements at stride 512.
    FpRow<T, TO> ea = fa, eb = fb;
    const int off = h << 8;
    ea.u += off; eb.u += off; ea.pre += off; eb.pre += off; ea.post += off; eb.post += off;
    ea.out += off; eb.out += off; ea.z += off; eb.z += off; ea.ws += off; eb.ws += off;
    ea.len -= off; eb.len -= off;
    fp_epilogue_sel<16, 9>(fp_epilogue_flags(p), o16, 16, inv1, ks, ea, eb);
}

extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_bf16(FcParams p) { fc_fwd_pair64<ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_f32(FcParams p) { fc_fwd_pair64<ember_bf16, float>(p); }

// ---- N = 32768 (P = 128, L ≤ N/2): one row pair per cluster of two CTAs ---------------------------
//
// The P = 64 design spread over a thread-block cluster of two CTAs of 512 threads: the data of one
// pair (32768 complex f32, 256 KB) is twice what one SM holds, so CTA c (its rank in the cluster)
// owns columns n2 ∈ [128c, 128c + 128) in stage 1 and its inverse, and segments k1 ∈ [64c, 64c + 64)
// in between (128 KB each, as at P = 64). Four threads per column; thread j = 2·j1 + j0 takes
// n1 = 4m + j (m < 16), a 32-point DFT of its 16 inputs (fp_dft32_half), then two radix-2 steps
// across the four by shuffles — j1 (xor 2, the 64-point DFTs of each parity), then j0 (xor 1) —
// after which it holds bins k1 = k + 32·j1 + 64·j0, k < 32: segment k + 32·j1 of CTA j0, written
// through distributed shared memory (half of each CTA's stores go to its peer). Every twiddle of
// the two steps is the same for all lanes of a warp but for a factor (−i)^j1 (a swap). The inverse
// mirrors it, reading both CTAs. The pair scale is the cluster's largest component: each warp's
// max goes to both CTAs (red.shared::cluster.max). Cluster barriers separate the phases.

__device__ __forceinline__ unsigned fp_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void fp_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void fp_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void fp_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The shared::cluster address of `p` (this CTA's shared memory) in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned fp_dsm(const void* p, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    return r;
}
// The generic address of `p` (this CTA's shared memory) in CTA `rank` of the cluster: plain loads
// and stores through it, which the compiler schedules as any other (batched ahead of their uses).
__device__ __forceinline__ float2* fp_peer(float2* p, unsigned rank) {
    unsigned long long r;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
    return reinterpret_cast<float2*>(r);
}
__device__ __forceinline__ void fp_max_dsm(unsigned a, int v) { asm volatile("red.shared::cluster.max.s32 [%0], %1;" ::"r"(a), "r"(v) : "memory"); }

// (−i)^s·w for s ∈ {0, 1} (forward) or i^s·w (DIR > 0): a swap and a sign.
template <int DIR> __device__ __forceinline__ float2 fp_rot(float2 w, int s) {
    if (!s) return w;
    return DIR < 0 ? make_float2(w.y, -w.x) : make_float2(-w.y, w.x);
}

// Stage 1 at P = 128 for thread j = 2·j1 + j0 of column n2 (at `pos`): y[m] = the pair's input at
// n1 = 4m + j. xg0, xg1: the segments' base in CTA 0 and 1 (generic addresses, fp_peer); pm0, pm1:
// the pair's max word in each (shared::cluster addresses).
__device__ __forceinline__ void fp128_stage1(const float2 (&y)[16], int j, float2* xg0, float2* xg1, int pos, const float2* __restrict__ tw, const float2* __restrict__ wtab, unsigned pm0, unsigned pm1) {
    const int j0 = j & 1, j1 = j >> 1;
    float2 a[32];
    fp_dft32_half(y, a);  // D_j[k]: the 32-point DFT of n1 = 4m + j
    // j1 step (xor 2): E_j0[k + 32·j1] = D_(j0, 0)[k] ± W64^k·D_(j0, 1)[k].
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 2), __shfl_xor_sync(0xffffffffu, a[k].y, 2));
        const float2 d0 = j1 == 0 ? a[k] : other, d1 = j1 == 0 ? other : a[k];
        const float2 t = k == 0 ? d1 : c_mul(d1, tw[k << (FC_TWN_LOG - 6)]);
        a[k] = j1 == 0 ? c_add(d0, t) : c_sub(d0, t);
    }
    // j0 step (xor 1): X[κ + 64·j0] = E_0[κ] ± W128^κ·E_1[κ], κ = k + 32·j1 (W128^(32·j1) = (−i)^j1).
    float2* xg = j0 ? xg1 : xg0;
    float mx = 0.f;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        const float2 e0 = j0 == 0 ? a[k] : other, e1 = j0 == 0 ? other : a[k];
        const float2 t = c_mul(e1, fp_rot<-1>(tw[k << (FC_TWN_LOG - 7)], j1));
        const float2 v0 = j0 == 0 ? c_add(e0, t) : c_sub(e0, t);
        const int k1 = k + 32 * j1 + 64 * j0;
        const float2 v = c_mul(v0, wtab[k1 << 8]);
        mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
        xg[(k + 32 * j1) * 256 + pos] = v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) {
        fp_max_dsm(pm0, __float_as_int(mx));
        fp_max_dsm(pm1, __float_as_int(mx));
    }
}

// Inverse stage 1 at P = 128: thread (j1, j0) reads B[κ + 64·j0]·conj(W_N^(n2·k1)), κ = k + 32·j1;
// the j0 step forms F_0[κ] = B[κ] + B[κ + 64] (j0 = 0) or F_1[κ] = (B[κ] − B[κ + 64])·W128^−κ; the
// j1 step G = F[k] + F[k + 32] (j1 = 0) or (F[k] − F[k + 32])·W64^−k; then the first 16 outputs of
// the inverse 32-point DFT: o[m] = output n1 = 4m + j.
__device__ __forceinline__ void fp128_stage1_inv(float2 (&o)[16], int j, const float2* xg0, const float2* xg1, int pos, const float2* __restrict__ tw, const float2* __restrict__ wtab) {
    const int j0 = j & 1, j1 = j >> 1;
    const float2* xg = (j0 ? xg1 : xg0) + 32 * j1 * 256 + pos;
    float2 a[32];
    // All loads first (half of them from the peer, at distributed shared memory's latency).
#pragma unroll
    for (int k = 0; k < 32; ++k) a[k] = xg[k * 256];
#pragma unroll
    for (int k = 0; k < 32; ++k) a[k] = c_mulc(a[k], wtab[(k + 32 * j1 + 64 * j0) << 8]);
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        if (j0 == 0) {
            a[k] = c_add(a[k], other);
        } else {
            const float2 w = tw[k << (FC_TWN_LOG - 7)];
            a[k] = c_mul(c_sub(other, a[k]), fp_rot<1>(make_float2(w.x, -w.y), j1));
        }
    }
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 2), __shfl_xor_sync(0xffffffffu, a[k].y, 2));
        if (j1 == 0) {
            a[k] = c_add(a[k], other);
        } else {
            const float2 d = c_sub(other, a[k]);
            a[k] = k == 0 ? d : c_mulc(d, tw[k << (FC_TWN_LOG - 6)]);
        }
    }
    fp_idft32_first16(a, o);
}

// Shared memory of the P = 128 kernels, per CTA: as P = 64's (64 segments, in the backward also
// their W), so smem_bytes_pair / smem_bytes_pair_bwd count logp 6 and 7 alike.
template <typename T, typename TO>
__device__ void fc_fwd_pair128(const FcParams& p) {
    constexpr int LOGN = 15;  // P = 128
    FC_SMEM_DECL
    float2* x = fc_smem;  // this CTA's 64 segments
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const unsigned rank = fp_cluster_rank();
    const int j = threadIdx.x & 3, n2 = (int)(rank << 7) + (threadIdx.x >> 2);
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool pre = p.has_pre;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    if (threadIdx.x < 2) {
        const i64 Q = blockIdx.x >> 1;  // the cluster's pair (clusters are consecutive CTAs)
        const i64 gl = Q / pph, qq = Q - gl * pph;
        FcRow row = fc_row(p, gl * rph + 2 * qq + threadIdx.x);
        const bool first_valid = gl * rph + 2 * qq < p.nrows;
        row.valid = row.valid && first_valid && (threadIdx.x == 0 || 2 * qq + 1 < rph);
        rows[threadIdx.x] = row;
        if (threadIdx.x == 0) pmax[0] = 0;
    }
    // Both CTAs have started, set their rows and zeroed their max before any remote access.
    fp_cluster_sync();
    const FcRow ra = rows[0], rb = rows[1];
    if (!ra.valid) return;  // uniform over the cluster (both CTAs compute the same rows)
    FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
    // Thread j's elements n1 = 4m + j sit at offset j·256 + m·1024.
    const int off = j << 8;
    fa.u += off; fb.u += off; fa.pre += off; fb.pre += off; fa.post += off; fb.post += off;
    fa.out += off; fb.out += off; fa.z += off; fb.z += off; fa.ws += off; fb.ws += off;
    fa.len -= off; fb.len -= off;
    const float2* wtab = tw + FC_TW_PAIR128 + n2;  // W_N^(n2·k1) at k1·256
    float2* const xg0 = fp_peer(x, 0);
    float2* const xg1 = fp_peer(x, 1);
    const unsigned pm0 = fp_dsm(pmax, 0), pm1 = fp_dsm(pmax, 1);
    // ---- stage 1.
    {
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            const int o = m << 10;
            float va = o < fa.len ? ember_to_f32(fa.u[o]) : 0.f;
            float vb = o < fb.len ? ember_to_f32(fb.u[o]) : 0.f;
            if (pre) {
                va *= o < fa.len ? ember_to_f32(fa.pre[o]) : 0.f;
                vb *= o < fb.len ? ember_to_f32(fb.pre[o]) : 0.f;
            }
            y[m] = make_float2(va, vb);
        }
        fp128_stage1(y, j, xg0, xg1, pos, tw, wtab, pm0, pm1);
    }
    fp_cluster_sync();
    // ---- stage 2: this CTA's 64 segments (k1 = 64·rank + sg), 4 per warp.
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) {
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + ((i64)ra.g << (LOGN - 1)) + ((int)((rank << 6) + sg) << 7);
        fp_segment(x + sg * 256, kf, tab, s1);
    }
    fp_cluster_sync();
    // ---- inverse stage 1 (both CTAs' segments), then the epilogue.
    const float ks = reinterpret_cast<const float*>(p.spec)[((i64)p.heads << (LOGN + 1)) + ra.g];
    float2 o16[16];
    fp128_stage1_inv(o16, j, xg0, xg1, pos, tw, wtab);
    fp_cluster_arrive();  // done reading the peer's shared memory
    fp_epilogue_sel<16, 10>(fp_epilogue_flags(p), o16, 16, inv1, ks, fa, fb);
    fp_cluster_wait();  // the peer is done reading ours: both may exit
}

#define FP128_FWD(TO, SFX) \
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_fwd_pair7_bf16_##SFX(FcParams p) { fc_fwd_pair128<ember_bf16, TO>(p); }
FP128_FWD(ember_bf16, bf16)
FP128_FWD(float, f32)

// =================================================================================================
// v6 backward (bf16 u, hd = 1, N = 512 … 8192): the backward in pair form, on the forward's engine.
//
// For a row pair (a, b) of one head, w = w_a + i·w_b, and the filter spectrum K:
//   phase 1: W = FFT(w), kept on chip as f16 pairs in fragment order; when GELU or a postgate
//            needs z, z = IFFT(W·K) (as the forward) and d_z from d_out, z, postgate, mask (the
//            postgate's gradient is stored here);
//   phase 2: G = FFT(d_z_a + i·d_z_b); T += G·conj(W); d_w = IFFT(G·conj(K)) (the correlation,
//            the adjoint of the forward's convolution);
//   phase 3: d_u = d_w·pregate, d_pregate = d_w·u.
// The filter is real, so every transform acts on the two rows independently, as in the forward.
// The filter gradient needs Σ_rows G_r·conj(W_r) of each row's own (real-signal) spectra: with
// G = G_a + i·G_b and W = W_a + i·W_b, G_a·conj(W_a) + G_b·conj(W_b) = (T[k] + conj T[N − k])/2,
// T = G·conj(W). Each pair slot accumulates T over its pairs in f32 (an L2-resident partial, each
// entry owned by one lane, so no synchronisation), and fc_dk_pair folds the partner bins once per
// head into the half-spectrum fc_dk transforms (no atomics: bitwise deterministic).
//
// Work split: R = 32/P pair slots per CTA; slot s = blockIdx.x·R + r is chunk c = s mod parts of
// head h = s / parts and takes the head's pairs c·ppc … c·ppc + ppc − 1, ppc = ⌈pph/parts⌉ (the
// host picks parts so that no chunk is empty; the partial of slot s is tbuf's entry s). Per pair
// four barriers. Shared memory: 32 segments of data (64 KB), every segment's W as f16 pairs
// (32 KB), the per-lane table, the row descriptors: 2 CTAs per SM.
//
// Precision: W is stored as s1·W in f16 (|s1·W| ≤ 256·√2), an extra rounding of 2^−11 relative on
// the filter gradient only; everything else is the forward's (f16 operands, f32 accumulation).

// A row of a pair for the backward, resolved once: one offset (hd = 1: a row's offset is the
// same in every (B, H, L) tensor) plus this thread's column n2, the mask, the length. The
// tensors' pointers are formed from the kernel parameters at each use rather than held: seven
// 64-bit pointers per row would take 28 registers of a pair, and the P = 32 kernel sits at the
// 128-register cap of two CTAs per SM.
template <typename T, typename TO>
struct FbRow {
    i64 off;
    float mask;
    int len;  // element n1 exists when n1·256 < len
    __device__ __forceinline__ const T* u(const FcParams& p) const { return reinterpret_cast<const T*>(p.u) + off; }
    __device__ __forceinline__ const T* pre(const FcParams& p) const { return reinterpret_cast<const T*>(p.pre) + off; }
    __device__ __forceinline__ const T* post(const FcParams& p) const { return reinterpret_cast<const T*>(p.post) + off; }
    __device__ __forceinline__ const TO* dout(const FcParams& p) const { return reinterpret_cast<const TO*>(p.dout) + off; }
    __device__ __forceinline__ const T* z(const FcParams& p) const { return reinterpret_cast<const T*>(p.zs) + off; }
    __device__ __forceinline__ T* du(const FcParams& p) const { return reinterpret_cast<T*>(p.du) + off; }
    __device__ __forceinline__ T* dpre(const FcParams& p) const { return reinterpret_cast<T*>(p.dpre) + off; }
    __device__ __forceinline__ T* dpost(const FcParams& p) const { return reinterpret_cast<T*>(p.dpost) + off; }
};

template <typename T, typename TO>
__device__ __forceinline__ FbRow<T, TO> fb_row(const FcParams& p, const FcRow& r, int n2) {
    FbRow<T, TO> f;
    f.off = r.urow + n2;
    f.len = r.valid ? (int)p.L - n2 : 0;
    f.mask = p.has_mask && r.valid ? reinterpret_cast<const float*>(p.mask)[(i64)r.b * p.H + r.g] : 1.f;
    return f;
}

// f16 pair (low half = real part) → float2.
__device__ __forceinline__ float2 fb_unpack(unsigned v) {
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}" : "=f"(lo), "=f"(hi) : "r"(v));
    return make_float2(lo, hi);
}

// Elements per batch of the backward's epilogues: loads of a batch are issued before its arithmetic.
// At P = 32 the column's 32 values already take 64 registers of the 128 of two CTAs per SM.
template <int P> constexpr int fb_batch() { return P < 8 ? P : P == 32 ? 4 : 8; }

// d_z of both rows for n1 < n into a[] (zero past L and for n1 ≥ n). With GELU or POST, a[] holds
// the recomputed z (times inv1·ks, as the forward's epilogue); with ZM the forward's saved z (p.zs)
// is loaded into a[] with the batch's other loads instead (no further registers).
// Element n1 sits at offset n1·2^SH.
template <int P, bool GELU, bool POST, int SH = 8, bool ZM = false, typename T, typename TO>
__device__ __forceinline__ void fb_dz(const FcParams& p, float2 (&a)[P], int n, float inv1, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb) {
    constexpr int CH = fb_batch<P>();
#pragma unroll
    for (int c0 = 0; c0 < P; c0 += CH) {
        float ga[CH], gb[CH], pa[CH], pb[CH];
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int n1 = c0 + i, o = n1 << SH;
            const bool va = n1 < n && o < fa.len, vb = n1 < n && o < fb.len;
            ga[i] = va ? ember_to_f32(fa.dout(p)[o]) : 0.f;
            gb[i] = vb ? ember_to_f32(fb.dout(p)[o]) : 0.f;
            if (POST) {
                pa[i] = va ? ember_to_f32(fa.post(p)[o]) : 0.f;
                pb[i] = vb ? ember_to_f32(fb.post(p)[o]) : 0.f;
            }
            if (ZM) a[n1] = make_float2(va ? ember_to_f32(fa.z(p)[o]) : 0.f, vb ? ember_to_f32(fb.z(p)[o]) : 0.f);
        }
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int n1 = c0 + i, o = n1 << SH;
            const bool va = n1 < n && o < fa.len, vb = n1 < n && o < fb.len;
            const float dga = ga[i] * fa.mask, dgb = gb[i] * fb.mask;
            float dza = dga, dzb = dgb;
            if (GELU || POST) {
                const float za = ZM ? a[n1].x : a[n1].x * inv1 * ks, zb = ZM ? a[n1].y : a[n1].y * inv1 * ks;
                float gza = za, gpa = 1.f, gzb = zb, gpb = 1.f;
                if (GELU) {
                    fc_gelu_grad(za, gza, gpa);
                    fc_gelu_grad(zb, gzb, gpb);
                }
                dza = dga * gpa;
                dzb = dgb * gpb;
                if (POST) {
                    dza *= pa[i];
                    dzb *= pb[i];
                    if (va) fp_st(fa.dpost(p) + o, dga * gza);
                    if (vb) fp_st(fb.dpost(p) + o, dgb * gzb);
                }
            }
            // Explicit zeros: z past the outputs (n1 ≥ n) was never computed.
            a[n1] = make_float2(va ? dza : 0.f, vb ? dzb : 0.f);
        }
    }
}

// fb_dz's specialization by (GELU, postgate); ZM: the kernel reads the forward's saved z (its own
// entry, `fc_bwd_pair*z_*`, so that the recomputing kernel keeps its registers and the reading one
// has no recompute path).
template <int P, int SH, bool ZM, typename T, typename TO>
__device__ __forceinline__ void fb_dz_sel(const FcParams& p, float2 (&a)[P], int n, float inv1, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb) {
    switch ((p.gelu ? 2 : 0) | (p.has_post ? 1 : 0)) {
        case 0: fb_dz<P, false, false, SH>(p, a, n, inv1, ks, fa, fb); break;
        case 1: fb_dz<P, false, true, SH, ZM>(p, a, n, inv1, ks, fa, fb); break;
        case 2: fb_dz<P, true, false, SH, ZM>(p, a, n, inv1, ks, fa, fb); break;
        default: fb_dz<P, true, true, SH, ZM>(p, a, n, inv1, ks, fa, fb); break;
    }
}

// d_u (and d_pregate) of both rows from d_w = a·inv2·ks, n1 < n (element n1 at offset n1·2^SH).
template <int P, bool PRE, int SH = 8, typename T, typename TO>
__device__ __forceinline__ void fb_dw(const FcParams& p, const float2 (&a)[P], int n, float inv2, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb) {
    constexpr int CH = fb_batch<P>();
#pragma unroll
    for (int c0 = 0; c0 < P; c0 += CH) {
        float ua[CH], ub[CH], qa[CH], qb[CH];
        if (PRE) {
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                const int n1 = c0 + i, o = n1 << SH;
                const bool va = n1 < n && o < fa.len, vb = n1 < n && o < fb.len;
                ua[i] = va ? ember_to_f32(fa.u(p)[o]) : 0.f;
                ub[i] = vb ? ember_to_f32(fb.u(p)[o]) : 0.f;
                qa[i] = va ? ember_to_f32(fa.pre(p)[o]) : 0.f;
                qb[i] = vb ? ember_to_f32(fb.pre(p)[o]) : 0.f;
            }
        }
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int n1 = c0 + i, o = n1 << SH;
            if (n1 >= n) break;
            const float dwa = a[n1].x * inv2 * ks, dwb = a[n1].y * inv2 * ks;
            if (o < fa.len) {
                fp_st(fa.du(p) + o, PRE ? dwa * qa[i] : dwa);
                if (PRE) fp_st(fa.dpre(p) + o, dwa * ua[i]);
            }
            if (o < fb.len) {
                fp_st(fb.du(p) + o, PRE ? dwb * qb[i] : dwb);
                if (PRE) fp_st(fb.dpre(p) + o, dwb * ub[i]);
            }
        }
    }
}

// Phase 1 of one segment: D = s1·W (fragment order) saved as f16 pairs at ws (lane's slots
// 4j … 4j + 3 in ws[j·32 + lane]); with need_z also × K̂, inverse DFT-256 back into x (as fp_segment).
__device__ __forceinline__ void fb_segment_w(float2* __restrict__ x, const float4* __restrict__ kf, const unsigned* __restrict__ tab, float s1, uint4* __restrict__ ws, bool need_z) {
    const int lane = threadIdx.x & 31;
    const FpFrag F = fp_frag(tab);
    float dr[2][4], di[2][4];
    fp_dft256(x, tab, F, s1, dr, di);
#pragma unroll
    for (int j = 0; j < 2; ++j)
        ws[j * 32 + lane] = make_uint4(tc_pack(dr[j][0], di[j][0]), tc_pack(dr[j][1], di[j][1]), tc_pack(dr[j][2], di[j][2]), tc_pack(dr[j][3], di[j][3]));
    if (need_z) fp_filter_idft(x, kf, tab, F, dr, di);
}

// Phase 2 of one segment: G = s2·DFT(d_z); the partial at tp (fragment order, as K̂) gets
// G·conj(W)·inv1·inv2 (written when `first`, added otherwise); then × conj(K̂), inverse DFT-256
// back into x.
__device__ __forceinline__ void fb_segment_g(float2* __restrict__ x, const float4* __restrict__ kf, const unsigned* __restrict__ tab, float s2, const uint4* __restrict__ ws, float4* __restrict__ tp, float inv1, float inv2, bool first) {
    const int lane = threadIdx.x & 31;
    const FpFrag F = fp_frag(tab);
    float dr[2][4], di[2][4];
    fp_dft256(x, tab, F, s2, dr, di);
    float2 k[2][4], y[2][4];
    fp_load_frag(kf, k);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint4 wv = ws[j * 32 + lane];
        const unsigned wq[4] = {wv.x, wv.y, wv.z, wv.w};
        float2 tc[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float2 gq = make_float2(dr[j][q], di[j][q]);
            // Two factors, so that neither product overflows where the result does not.
            tc[q] = c_scale(c_scale(c_mulc(gq, fb_unpack(wq[q])), inv1), inv2);
            y[j][q] = c_mulc(gq, k[j][q]);
        }
        float4* t01 = tp + (2 * j) * 32 + lane;
        float4* t23 = tp + (2 * j + 1) * 32 + lane;
        float4 v01 = make_float4(tc[0].x, tc[0].y, tc[1].x, tc[1].y), v23 = make_float4(tc[2].x, tc[2].y, tc[3].x, tc[3].y);
        if (!first) {
            const float4 o01 = *t01, o23 = *t23;
            v01 = make_float4(o01.x + v01.x, o01.y + v01.y, o01.z + v01.z, o01.w + v01.w);
            v23 = make_float4(o23.x + v23.x, o23.y + v23.y, o23.z + v23.z, o23.w + v23.w);
        }
        *t01 = v01;
        *t23 = v23;
    }
    unsigned yr[4], yi[4];
    fp_pack_y(y, yr, yi);
    fp_idft256(x, tab, F, yr, yi);
}

template <int LOGP, bool ZM, typename T, typename TO>
__device__ void fc_bwd_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, R = 32 >> LOGP, LOGN = LOGP + 8;
    FC_SMEM_DECL
    float2* x = fc_smem;
    uint4* wsave = reinterpret_cast<uint4*>(x + 32 * 256);  // [segment][j][lane]
    unsigned* tab = reinterpret_cast<unsigned*>(wsave + 32 * 64);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [2r] = row a, [2r + 1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2 * R);                 // [r]: w of pair r, [R + r]: its d_z
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 256) tab[i] = gtab[i];
    const int n2 = threadIdx.x;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool half = p.L <= (P << 7);  // w[n] = d_z[n] = 0 for n ≥ N/2
    const bool pre = p.has_pre, need_z = !ZM && p.need_z;
    const i64 rph = p.B;  // rows per head (hd = 1)
    const i64 pph = (rph + 1) / 2;
    const i64 ppc = (pph + p.parts - 1) / p.parts;
    const float2* wtab = tw + (LOGP == 5 ? FC_TW_PAIR32 : FC_STAGE_TW(8, LOGP)) + n2;
    const float4* spec = reinterpret_cast<const float4*>(p.spec);
    const float* kscale = reinterpret_cast<const float*>(p.spec) + ((i64)p.heads << (LOGN + 1));
#pragma unroll 1
    for (i64 it = 0; it < ppc; ++it) {
        if (threadIdx.x < 2 * R) {
            const int r = threadIdx.x >> 1, second = threadIdx.x & 1;
            const i64 s = (i64)blockIdx.x * R + r;
            const i64 h = s / p.parts, q = (s - h * p.parts) * ppc + it;
            const bool ok = h < p.nheads && q < pph && (second == 0 || 2 * q + 1 < rph);
            FcRow row = fc_row(p, h * rph + 2 * q + second);
            row.valid = row.valid && ok;
            rows[threadIdx.x] = row;
            if (second == 0) pmax[r] = pmax[R + r] = 0;
        }
        __syncthreads();
        // ---- phase 1, stage 1: w.
        fp_stage1_pairs<P, T, TO>(p, rows, x, n2, pos, half, wtab, pmax);
        __syncthreads();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        for (int sg = threadIdx.x >> 5; sg < 32; sg += 8) {
            const int r = sg >> LOGP, k1 = sg & (P - 1);
            if (!rows[2 * r].valid) continue;
            float s1, inv1;
            fp_pair_scale(pmax[r], s1, inv1);
            fb_segment_w(x + sg * 256, spec + ((i64)rows[2 * r].g << (LOGN - 1)) + (k1 << 7), tab, s1, wsave + sg * 64, need_z);
        }
        __syncthreads();
        // ---- phase 1 epilogue (z → d_z), phase 2 stage 1 (d_z), in registers: thread n2 owns
        // column n2 in both.
#pragma unroll 1
        for (int r = 0; r < R; ++r) {
            const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
            if (!ra.valid) continue;
            const FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
            float s1, inv1;
            fp_pair_scale(pmax[r], s1, inv1);
            const float ks = kscale[ra.g];
            float2 a[P];
            int n = half ? P / 2 : P;
            if (need_z) n = fp_stage1_inv<P>(a, half, x + r * P * 256, pos, wtab);
            fb_dz_sel<P, 8, ZM>(p, a, n, inv1, ks, fa, fb);
            fp_stage1<P>(a, half, x + r * P * 256, pos, wtab, &pmax[R + r]);
        }
        __syncthreads();
        // ---- phase 2, segments: T, × conj(K̂), inverse.
        for (int sg = threadIdx.x >> 5; sg < 32; sg += 8) {
            const int r = sg >> LOGP, k1 = sg & (P - 1);
            if (!rows[2 * r].valid) continue;
            float s1, inv1, s2, inv2;
            fp_pair_scale(pmax[r], s1, inv1);
            fp_pair_scale(pmax[R + r], s2, inv2);
            float4* tp = reinterpret_cast<float4*>(p.tbuf) + ((((i64)blockIdx.x * R + r) << (LOGN - 1)) + (k1 << 7));
            fb_segment_g(x + sg * 256, spec + ((i64)rows[2 * r].g << (LOGN - 1)) + (k1 << 7), tab, s2, wsave + sg * 64, tp, inv1, inv2, it == 0);
        }
        __syncthreads();
        // ---- phase 3: inverse stage 1 (d_w) and its epilogue.
#pragma unroll 1
        for (int r = 0; r < R; ++r) {
            const FcRow ra = rows[2 * r], rb = rows[2 * r + 1];
            if (!ra.valid) continue;
            const FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
            float s2, inv2;
            fp_pair_scale(pmax[R + r], s2, inv2);
            const float ks = kscale[ra.g];
            float2 a[P];
            const int nout = fp_stage1_inv<P>(a, half, x + r * P * 256, pos, wtab);
            if (pre) fb_dw<P, true>(p, a, nout, inv2, ks, fa, fb);
            else fb_dw<P, false>(p, a, nout, inv2, ks, fa, fb);
        }
        __syncthreads();
    }
}

// CTAs per SM the register cap aims at (2: 128 registers; EMBER_FFTCONV_PAIR_BWD_MINB, for
// measurements).
#ifndef FC_PAIR_BWD_MINB
#define FC_PAIR_BWD_MINB 2
#endif
#define FC_BWD_PAIR_ENTRIES(LOGP)                                                                                              \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##_bf16_bf16(FcParams p) { fc_bwd_pair<LOGP, false, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##_bf16_f32(FcParams p) { fc_bwd_pair<LOGP, false, ember_bf16, float>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##z_bf16_bf16(FcParams p) { fc_bwd_pair<LOGP, true, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##z_bf16_f32(FcParams p) { fc_bwd_pair<LOGP, true, ember_bf16, float>(p); }
FC_BWD_PAIR_ENTRIES(1)
FC_BWD_PAIR_ENTRIES(2)
FC_BWD_PAIR_ENTRIES(3)
FC_BWD_PAIR_ENTRIES(4)
FC_BWD_PAIR_ENTRIES(5)

// The backward at N = 16384 (P = 64, L ≤ N/2): fc_bwd_pair's phases for one row pair per CTA of
// 512 threads, two threads per column as fc_fwd_pair64 (stage 1 and its inverse by fp64_stage1 /
// fp64_stage1_inv; thread h's 16 elements n1 = 2m + h sit at offset h·256 + m·512, so the
// epilogues run over 16 elements at stride 2^9 on rows offset by h·256). Slot = CTA: the CTA takes
// the chunk blockIdx.x mod parts of head blockIdx.x / parts. Shared memory: 64 segments of data
// (128 KB), their W as f16 pairs (64 KB), the per-lane table, two rows: one CTA (16 warps) per SM.
template <bool ZM, typename T, typename TO>
__device__ void fc_bwd_pair64(const FcParams& p) {
    constexpr int LOGN = 14;  // P = 64
    FC_SMEM_DECL
    float2* x = fc_smem;
    uint4* wsave = reinterpret_cast<uint4*>(x + 64 * 256);  // [segment][j][lane]
    unsigned* tab = reinterpret_cast<unsigned*>(wsave + 64 * 64);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);                     // [0]: w, [1]: d_z
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const int h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15), off = h << 8;
    const bool pre = p.has_pre, need_z = !ZM && p.need_z;
    const i64 rph = p.B;  // rows per head (hd = 1)
    const i64 pph = (rph + 1) / 2;
    const i64 ppc = (pph + p.parts - 1) / p.parts;
    const float2* wtab = tw + FC_TW_PAIR64 + n2;
    const float4* spec = reinterpret_cast<const float4*>(p.spec);
    const float* kscale = reinterpret_cast<const float*>(p.spec) + ((i64)p.heads << (LOGN + 1));
    float4* tslot = reinterpret_cast<float4*>(p.tbuf) + ((i64)blockIdx.x << (LOGN - 1));
#pragma unroll 1
    for (i64 it = 0; it < ppc; ++it) {
        if (threadIdx.x < 2) {
            const i64 hh = blockIdx.x / p.parts, q = (blockIdx.x - hh * p.parts) * ppc + it;
            const bool ok = hh < p.nheads && q < pph && (threadIdx.x == 0 || 2 * q + 1 < rph);
            FcRow row = fc_row(p, hh * rph + 2 * q + threadIdx.x);
            row.valid = row.valid && ok;
            rows[threadIdx.x] = row;
            if (threadIdx.x == 0) pmax[0] = pmax[1] = 0;
        }
        __syncthreads();
        const FcRow ra = rows[0], rb = rows[1];
        // Uniform over the CTA; chunks are consecutive pairs, so no later pair is valid either.
        if (!ra.valid) break;
        FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
        fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
        const i64 kseg = (i64)ra.g << (LOGN - 1);
        // ---- phase 1, stage 1: w.
        {
            float2 y[16];
#pragma unroll
            for (int m = 0; m < 16; ++m) {
                const int o = m << 9;
                float va = o < fa.len ? ember_to_f32(fa.u(p)[o]) : 0.f;
                float vb = o < fb.len ? ember_to_f32(fb.u(p)[o]) : 0.f;
                if (pre) {
                    va *= o < fa.len ? ember_to_f32(fa.pre(p)[o]) : 0.f;
                    vb *= o < fb.len ? ember_to_f32(fb.pre(p)[o]) : 0.f;
                }
                y[m] = make_float2(va, vb);
            }
            fp64_stage1(y, h, x, pos, tw, wtab, &pmax[0]);
        }
        __syncthreads();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        float s1, inv1;
        fp_pair_scale(pmax[0], s1, inv1);
        for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) fb_segment_w(x + sg * 256, spec + kseg + (sg << 7), tab, s1, wsave + sg * 64, need_z);
        __syncthreads();
        // ---- phase 1 epilogue (z → d_z), phase 2 stage 1 (d_z), in registers.
        const float ks = kscale[ra.g];
        {
            float2 a[16];
            if (need_z) fp64_stage1_inv(a, h, x, pos, tw, wtab);
            fb_dz_sel<16, 9, ZM>(p, a, 16, inv1, ks, fa, fb);
            fp64_stage1(a, h, x, pos, tw, wtab, &pmax[1]);
        }
        __syncthreads();
        // ---- phase 2, segments: T, × conj(K̂), inverse.
        float s2, inv2;
        fp_pair_scale(pmax[1], s2, inv2);
        for (int sg = threadIdx.x >> 5; sg < 64; sg += 16)
            fb_segment_g(x + sg * 256, spec + kseg + (sg << 7), tab, s2, wsave + sg * 64, tslot + (sg << 7), inv1, inv2, it == 0);
        __syncthreads();
        // ---- phase 3: inverse stage 1 (d_w) and its epilogue.
        {
            float2 a[16];
            fp64_stage1_inv(a, h, x, pos, tw, wtab);
            if (pre) fb_dw<16, true, 9>(p, a, 16, inv2, ks, fa, fb);
            else fb_dw<16, false, 9>(p, a, 16, inv2, ks, fa, fb);
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair6_bf16_bf16(FcParams p) { fc_bwd_pair64<false, ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair6_bf16_f32(FcParams p) { fc_bwd_pair64<false, ember_bf16, float>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair6z_bf16_bf16(FcParams p) { fc_bwd_pair64<true, ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair6z_bf16_f32(FcParams p) { fc_bwd_pair64<true, ember_bf16, float>(p); }

// The backward at N = 32768 (P = 128, L ≤ N/2): fc_bwd_pair64's phases on a cluster of two CTAs as
// fc_fwd_pair128 (each CTA: half the columns in stage 1 and its inverse, half the segments and
// their W in between). Slot = cluster: cluster blockIdx.x / 2 takes chunk (cluster mod parts) of
// head cluster / parts; its filter-gradient partial is one N-bin slot of tbuf, each CTA writing
// its own segments' bins. Cluster barriers where a phase reads or writes the peer's shared memory.
template <bool ZM, typename T, typename TO>
__device__ void fc_bwd_pair128(const FcParams& p) {
    constexpr int LOGN = 15;  // P = 128
    FC_SMEM_DECL
    float2* x = fc_smem;
    uint4* wsave = reinterpret_cast<uint4*>(x + 64 * 256);  // [segment][j][lane]
    unsigned* tab = reinterpret_cast<unsigned*>(wsave + 64 * 64);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);                     // [0]: w, [1]: d_z
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const unsigned rank = fp_cluster_rank();
    const int j = threadIdx.x & 3, n2 = (int)(rank << 7) + (threadIdx.x >> 2);
    const int pos = fp_idx(n2 >> 4, n2 & 15), off = j << 8;
    const bool pre = p.has_pre, need_z = !ZM && p.need_z;
    const i64 rph = p.B;  // rows per head (hd = 1)
    const i64 pph = (rph + 1) / 2;
    const i64 ppc = (pph + p.parts - 1) / p.parts;
    const i64 slot = blockIdx.x >> 1;
    const float2* wtab = tw + FC_TW_PAIR128 + n2;
    const float4* spec = reinterpret_cast<const float4*>(p.spec);
    const float* kscale = reinterpret_cast<const float*>(p.spec) + ((i64)p.heads << (LOGN + 1));
    // This CTA's segments k1 = 64·rank + sg in the slot's partial (fragment order, 128 float4 each).
    float4* tslot = reinterpret_cast<float4*>(p.tbuf) + (slot << (LOGN - 1)) + ((i64)rank << 13);
    float2* const xg0 = fp_peer(x, 0);
    float2* const xg1 = fp_peer(x, 1);
    const unsigned pm0 = fp_dsm(pmax, 0), pm1 = fp_dsm(pmax, 1);
#pragma unroll 1
    for (i64 it = 0; it < ppc; ++it) {
        if (threadIdx.x < 2) {
            const i64 hh = slot / p.parts, q = (slot - hh * p.parts) * ppc + it;
            const bool ok = hh < p.nheads && q < pph && (threadIdx.x == 0 || 2 * q + 1 < rph);
            FcRow row = fc_row(p, hh * rph + 2 * q + threadIdx.x);
            row.valid = row.valid && ok;
            rows[threadIdx.x] = row;
            if (threadIdx.x == 0) pmax[0] = pmax[1] = 0;
        }
        // Rows set and maxima zeroed in both CTAs (and the previous pair's phase 3 done) before any
        // remote access.
        fp_cluster_sync();
        const FcRow ra = rows[0], rb = rows[1];
        // Uniform over the cluster; chunks are consecutive pairs, so no later pair is valid either.
        if (!ra.valid) break;
        FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
        fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
        const i64 kseg = ((i64)ra.g << (LOGN - 1)) + ((i64)rank << 13);
        // ---- phase 1, stage 1: w.
        {
            float2 y[16];
#pragma unroll
            for (int m = 0; m < 16; ++m) {
                const int o = m << 10;
                float va = o < fa.len ? ember_to_f32(fa.u(p)[o]) : 0.f;
                float vb = o < fb.len ? ember_to_f32(fb.u(p)[o]) : 0.f;
                if (pre) {
                    va *= o < fa.len ? ember_to_f32(fa.pre(p)[o]) : 0.f;
                    vb *= o < fb.len ? ember_to_f32(fb.pre(p)[o]) : 0.f;
                }
                y[m] = make_float2(va, vb);
            }
            fp128_stage1(y, j, xg0, xg1, pos, tw, wtab, pm0, pm1);
        }
        fp_cluster_sync();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        float s1, inv1;
        fp_pair_scale(pmax[0], s1, inv1);
        for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) fb_segment_w(x + sg * 256, spec + kseg + (sg << 7), tab, s1, wsave + sg * 64, need_z);
        // The peer's segments are done before this CTA reads them (z) or writes d_z's stage 1 there.
        fp_cluster_sync();
        // ---- phase 1 epilogue (z → d_z), phase 2 stage 1 (d_z), in registers: a thread writes
        // exactly the elements it read.
        const float ks = kscale[ra.g];
        {
            float2 a[16];
            if (need_z) fp128_stage1_inv(a, j, xg0, xg1, pos, tw, wtab);
            fb_dz_sel<16, 10, ZM>(p, a, 16, inv1, ks, fa, fb);
            fp128_stage1(a, j, xg0, xg1, pos, tw, wtab, pm0 + 4, pm1 + 4);
        }
        fp_cluster_sync();
        // ---- phase 2, segments: T, × conj(K̂), inverse.
        float s2, inv2;
        fp_pair_scale(pmax[1], s2, inv2);
        for (int sg = threadIdx.x >> 5; sg < 64; sg += 16)
            fb_segment_g(x + sg * 256, spec + kseg + (sg << 7), tab, s2, wsave + sg * 64, tslot + (sg << 7), inv1, inv2, it == 0);
        fp_cluster_sync();
        // ---- phase 3: inverse stage 1 (d_w, both CTAs' segments) and its epilogue.
        {
            float2 a[16];
            fp128_stage1_inv(a, j, xg0, xg1, pos, tw, wtab);
            if (pre) fb_dw<16, true, 10>(p, a, 16, inv2, ks, fa, fb);
            else fb_dw<16, false, 10>(p, a, 16, inv2, ks, fa, fb);
        }
    }
    // The peer is done reading this CTA's shared memory before either exits (also after a break:
    // both CTAs take it at the same pair).
    fp_cluster_sync();
}

#define FP128_BWD(ZM, ZS, TO, SFX) \
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_bwd_pair7##ZS##_bf16_##SFX(FcParams p) { fc_bwd_pair128<ZM, ember_bf16, TO>(p); }
FP128_BWD(false, , ember_bf16, bf16)
FP128_BWD(false, , float, f32)
FP128_BWD(true, z, ember_bf16, bf16)
FP128_BWD(true, z, float, f32)

// ---- The filter spectrum of the pair kernels on their own engine (fc_spec_pair*) -------------------
//
// K̂ = DFT_N(k_eff)/N / 2^e per head in fragment order, 2^e after all heads' bins (kscale): the layout
// and scaling rule of fc_spectrum's pair branch, which ran the v2 CUDA-core FFT at one head per lane
// group (ncu, H200, 768 heads: ~0.35 ms at N = 16384 and ~0.8 ms at N = 32768, a quarter of the
// forward). Here a head is a complex signal with zero imaginary part (k_eff = k + D at lag 0 is
// supported on n < N/2: Lk ≤ L and N ≥ L + Lk − 1), through the pair kernels' stage 1 and the forward
// DFT-256 of each segment on tensor cores; the result stays in shared memory until the head's
// largest component is known, then goes out scaled, 16 bytes per thread and access. Half of each
// transform's work is the zero imaginary part: the spectrum is ~1/(2B) of a forward's transforms.
// With k_rev (lags N − m) the host keeps fc_spectrum.

// One warp: the forward DFT-256 of segment x (× s1) stored back in place in fragment order (float2
// 2·((2j + (q >> 1))·32 + lane) + (q & 1), fp_kpos within a segment); returns the lane's largest
// component.
__device__ __forceinline__ float fp_spec_segment(float2* __restrict__ x, const unsigned* __restrict__ tab, float s1) {
    const int lane = threadIdx.x & 31;
    const FpFrag F = fp_frag(tab);
    float dr[2][4], di[2][4];
    fp_dft256(x, tab, F, s1, dr, di);
    __syncwarp();  // every lane's reads of x are done before the stores overwrite them
    float mx = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            reinterpret_cast<float4*>(x)[(2 * j + h) * 32 + lane] = make_float4(dr[j][2 * h], di[j][2 * h], dr[j][2 * h + 1], di[j][2 * h + 1]);
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(dr[j][2 * h]), fabsf(di[j][2 * h])), fmaxf(fabsf(dr[j][2 * h + 1]), fabsf(di[j][2 * h + 1]))));
        }
    return mx;
}

// The warp's largest of `mx` into the int at shared address *m (non-negative floats order as
// their bit patterns).
__device__ __forceinline__ void fp_warp_max_to(float mx, int* m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) atomicMax(m, __float_as_int(mx));
}

// Writes `count` float2 of a head's bins (this CTA's, fragment order, at src) to dst scaled to
// K̂ = D·inv1/N/2^e, e from the head's largest |D| (dmax bits); the thread with `put_scale` stores
// 2^e at kscale.
__device__ __forceinline__ void fp_spec_out(const float2* __restrict__ src, float2* __restrict__ dst, int count, int dmax, float inv1, int logn, float* kscale, bool put_scale, int nthreads) {
    const float inv_n = __int_as_float((127 - logn) << 23);
    const float kmax = __int_as_float(dmax) * inv1 * inv_n;  // powers of two: exact
    int ex = ((__float_as_int(kmax) >> 23) & 255) - 126;
    ex = max(-126, min(126, ex));
    const float f2 = inv_n * __int_as_float((127 - ex) << 23);
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (int i = threadIdx.x; i < count / 2; i += nthreads) {
        const float4 v = s4[i];
        d4[i] = make_float4(v.x * inv1 * f2, v.y * inv1 * f2, v.z * inv1 * f2, v.w * inv1 * f2);
    }
    if (put_scale) *kscale = __int_as_float((127 + ex) << 23);
}

// P ≤ 32: CTA of 256 threads, R = 32/P heads (as the forward's row pairs: thread n2 owns column n2).
template <int LOGP>
__device__ void fc_spec_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, R = 32 >> LOGP, LOGN = LOGP + 8;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(fc_smem) + FP_TAB_OFF);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [r]: stage 1's max, [R + r]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 256) tab[i] = gtab[i];
    if (threadIdx.x < 2 * R) pmax[threadIdx.x] = 0;
    __syncthreads();
    const int n2 = threadIdx.x, pos = fp_idx(n2 >> 4, n2 & 15);
    const float2* wtab = tw + (LOGP == 5 ? FC_TW_PAIR32 : FC_STAGE_TW(8, LOGP)) + n2;
    const i64 n = (i64)1 << LOGN;
    const int g0 = blockIdx.x * R;
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        const int g = g0 + r;
        if (g >= p.heads) break;  // uniform
        float2 a[P];
#pragma unroll
        for (int n1 = 0; n1 < P; ++n1) a[n1] = make_float2(n1 < P / 2 ? fc_keff(p, g, n1 * 256 + n2, n) : 0.f, 0.f);
        fp_stage1<P>(a, true, x + r * P * 256, pos, wtab, &pmax[r]);
    }
    __syncthreads();
    for (int sg = threadIdx.x >> 5; sg < 32; sg += 8) {
        const int r = sg >> LOGP;
        if (g0 + r >= p.heads) continue;
        float s1, inv1;
        fp_pair_scale(pmax[r], s1, inv1);
        fp_warp_max_to(fp_spec_segment(x + sg * 256, tab, s1), &pmax[R + r]);
    }
    __syncthreads();
    float* kscale = reinterpret_cast<float*>(p.spec) + 2 * (i64)p.heads * n;
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        const int g = g0 + r;
        if (g >= p.heads) break;
        float s1, inv1;
        fp_pair_scale(pmax[r], s1, inv1);
        fp_spec_out(x + r * P * 256, reinterpret_cast<float2*>(p.spec) + (i64)g * n, P * 256, pmax[R + r], inv1, LOGN, kscale + g, threadIdx.x == 0, 256);
    }
}

// P = 64: one head per CTA of 512 threads, two per column (fp64_stage1).
__device__ void fc_spec_pair64(const FcParams& p) {
    constexpr int LOGN = 14;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [0]: stage 1's max, [1]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    if (threadIdx.x < 2) pmax[threadIdx.x] = 0;
    __syncthreads();
    const int g = blockIdx.x, h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const i64 n = (i64)1 << LOGN;
    {
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) y[m] = make_float2(fc_keff(p, g, (2 * m + h) * 256 + n2, n), 0.f);
        fp64_stage1(y, h, x, pos, tw, tw + FC_TW_PAIR64 + n2, &pmax[0]);
    }
    __syncthreads();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) fp_warp_max_to(fp_spec_segment(x + sg * 256, tab, s1), &pmax[1]);
    __syncthreads();
    fp_spec_out(x, reinterpret_cast<float2*>(p.spec) + (i64)g * n, 64 * 256, pmax[1], inv1, LOGN, reinterpret_cast<float*>(p.spec) + 2 * (i64)p.heads * n + g, threadIdx.x == 0, 512);
}

// P = 128: one head per cluster of two CTAs of 512 threads (fp128_stage1); each CTA writes its own
// 64 segments.
__device__ void fc_spec_pair128(const FcParams& p) {
    constexpr int LOGN = 15;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [0]: stage 1's max, [1]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    if (threadIdx.x < 2) pmax[threadIdx.x] = 0;
    const unsigned rank = fp_cluster_rank();
    const int g = blockIdx.x >> 1, j = threadIdx.x & 3, n2 = (int)(rank << 7) + (threadIdx.x >> 2);
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const i64 n = (i64)1 << LOGN;
    float2* const xg0 = fp_peer(x, 0);
    float2* const xg1 = fp_peer(x, 1);
    const unsigned pm0 = fp_dsm(pmax, 0), pm1 = fp_dsm(pmax, 1);
    fp_cluster_sync();  // both CTAs started, maxima zeroed
    {
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) y[m] = make_float2(fc_keff(p, g, (4 * m + j) * 256 + n2, n), 0.f);
        fp128_stage1(y, j, xg0, xg1, pos, tw, tw + FC_TW_PAIR128 + n2, pm0, pm1);
    }
    fp_cluster_sync();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) {
        float mx = fp_spec_segment(x + sg * 256, tab, s1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if ((threadIdx.x & 31) == 0) {
            fp_max_dsm(pm0 + 4, __float_as_int(mx));
            fp_max_dsm(pm1 + 4, __float_as_int(mx));
        }
    }
    fp_cluster_sync();  // the head's largest |D| from both CTAs
    fp_spec_out(x, reinterpret_cast<float2*>(p.spec) + (i64)g * n + ((i64)rank << 14), 64 * 256, pmax[1], inv1, LOGN, reinterpret_cast<float*>(p.spec) + 2 * (i64)p.heads * n + g, rank == 0 && threadIdx.x == 0, 512);
}

#define FC_SPEC_PAIR_ENTRY(LOGP) \
    extern "C" __global__ void __launch_bounds__(256, 2) fc_spec_pair##LOGP(FcParams p) { fc_spec_pair<LOGP>(p); }
FC_SPEC_PAIR_ENTRY(1)
FC_SPEC_PAIR_ENTRY(2)
FC_SPEC_PAIR_ENTRY(3)
FC_SPEC_PAIR_ENTRY(4)
FC_SPEC_PAIR_ENTRY(5)
extern "C" __global__ void __launch_bounds__(512, 1) fc_spec_pair6(FcParams p) { fc_spec_pair64(p); }
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_spec_pair7(FcParams p) { fc_spec_pair128(p); }

// The filter-gradient spectrum of the pair backward, one thread per (head of the launch, bin
// k ≤ M = N/2): S[k] = 2·(T[k] + conj T[(N − k) mod N]) summed over the head's `parts` partials in
// order, i.e. 4·Σ_rows G_r·conj(W_r), written where fc_dk (parts = 1) reads it.
extern "C" __global__ void fc_dk_pair(FcParams p) {
    const i64 m = (i64)1 << p.logm, n = 2 * m;
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (i64)p.nheads * (m + 1)) return;
    const i64 h = i / (m + 1);
    const int k = (int)(i - h * (m + 1)), logp = p.logm - 7;
    const float2* t = reinterpret_cast<const float2*>(p.tbuf);
    const int pk = fp_kpos(k, logp), pm = fp_kpos((int)((n - k) & (n - 1)), logp);
    float2 tk = make_float2(0.f, 0.f), tm = make_float2(0.f, 0.f);
    for (int c = 0; c < p.parts; ++c) {
        const float2* tp = t + (h * p.parts + c) * n;
        tk = c_add(tk, tp[pk]);
        tm = c_add(tm, tp[pm]);
    }
    st2(p.sbuf, h * (m + 1) + k, c_scale(c_add(tk, c_conj(tm)), 2.f));
}

#endif  // FC_BLOCK == 256
