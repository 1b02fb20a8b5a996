// FFT long convolution: fused forward and backward kernels (see fft.cuh for the FFT itself).
//
// Rows. Every kernel works on "virtual rows", head-major: R = ((g·B + b)·hd + i)·hd + j, the
// convolution of w_ij = u[b, g·hd+i] ⊙ pregate[b, g·hd+j] with the filter of head g. With hd = 1
// a virtual row is a channel (b, g). Rows of one head are contiguous, so CTAs that run together
// read the same filter spectrum (from L2), and the backward reduces d_k over a head's rows in a CTA.
//
// Filter. k, k_rev and D are folded into one real filter k_eff (D is the tap at lag 0, k_rev the
// taps at lags −m ≡ N − m); its spectrum Ks = FFT_N(k_eff)/(2N) is computed once per call
// (fc_spectrum_* kernels) and read by every row; the forward multiplies by Ks, the backward by
// conj(Ks), which is the adjoint (correlation) of the same causal + anticausal + skip operator.
//
// On-chip path (N ≤ 2^15, complex M = N/2 ≤ 16·FC_BLOCK): one CTA holds 16·FC_BLOCK/M rows in
// shared memory; fc_fwd loads u (and pregate) once, FFT, × Ks, inverse FFT, GELU, gates, mask,
// stores once. fc_bwd recomputes z when GELU or a postgate needs it, forms d_z, transforms it,
// accumulates the d_k spectrum Σ G·conj(W) in a per-CTA partial, multiplies by conj(Ks), inverse
// transforms, and writes d_u and d_pregate. fc_dk sums a head's partials in a fixed order and
// inverse transforms once: d_k, d_k_rev and d_D (= d_k_eff[0]) — deterministic, no atomics.
//
// Four-step path (larger N): M = M1·M2, data in a global buffer T laid out [k1][n2]. Pass 1
// (fc_col_*): column FFTs of M1 points over a tile of columns, twiddle W_M^(n2·k1). Pass 2
// (fc_row_*): two rows k1 and M1−k1 together (they hold the real-signal partners X[k], X[M−k]),
// row FFTs of M2 points, the real-spectrum step and × Ks, inverse row FFTs. Pass 3 (fc_col_*):
// twiddle back, column inverse FFTs, epilogue. The backward fuses pass 3 of the recomputed forward
// with pass 1 of d_z.
//
// Half types are loaded and stored through ember's converters; all arithmetic is f32.

struct FcParams {
    u64 u, pre, post, mask, out, dout, du, dpre, dpost;
    u64 k, krev, dd;
    u64 dk, dkrev, ddd;
    u64 spec;  // filter spectrum, float2
    u64 tw;    // twiddle table, float2
    u64 tbuf;  // four-step intermediate, float2, (rows, M)
    u64 vbuf;  // saved spectra of w for the backward, float2
    u64 sbuf;  // filter-gradient spectrum partials, float2
    u64 wsa;   // hd > 1: g_ij (forward) or d_w_ij (backward), f32 (rows, L)
    u64 wsb;   // hd > 1: d_out·mask·g_ij (backward), f32 (rows, L)
    i64 B, H, L;
    i64 row0;   // first virtual row of this launch
    i64 nrows;  // virtual rows of this launch
    int hd, heads, lk, lkr;
    int logm, logm1, logm2;  // M = 2^logm complex points; four-step M1 = 2^logm1, M2 = 2^logm2
    int gelu, need_z, has_pre, has_post, has_mask;
    int parts;  // filter-gradient partials per head (on-chip backward)
    int head0;  // first head of this launch
    int nheads; // heads of this launch
    int tc;     // 1: the filter spectrum is stored in TC order (fft_tc.cuh), for fc_fwd_tc_*;
                // 2: all N bins in fragment order (pair_tc.cuh), for fc_fwd_pair*
    u64 zs;     // z saved for the backward (u's dtype, (B, H, L); pair kernels, hd = 1): the
                // forward writes it, the backward reads it instead of recomputing; 0: none
    int zstage; // cluster forward at P = 80, 96, 112 and 160 … 256: z through the output's staging copy
};

template <typename T> __device__ __forceinline__ float ld(u64 p, i64 i) { return ember_to_f32(reinterpret_cast<const T*>(p)[i]); }
template <typename T> __device__ __forceinline__ void st(u64 p, i64 i, float v) { reinterpret_cast<T*>(p)[i] = ember_from_f32<T>(v); }
__device__ __forceinline__ float2 ld2(u64 p, i64 i) { return reinterpret_cast<const float2*>(p)[i]; }
__device__ __forceinline__ void st2(u64 p, i64 i, float2 v) { reinterpret_cast<float2*>(p)[i] = v; }

// Where a virtual row's data lives.
struct FcRow {
    int g, b, i, j;
    i64 urow;  // offset of channel g·hd+i of batch b in (B, H, L) tensors
    i64 prow;  // offset of channel g·hd+j
    i64 local; // row index within this launch (workspace rows)
    bool valid;
};

__device__ __forceinline__ FcRow fc_row(const FcParams& p, i64 local) {
    FcRow r;
    r.valid = local < p.nrows;
    r.local = local;
    const i64 R = p.row0 + (r.valid ? local : 0);
    const i64 hd2 = (i64)p.hd * p.hd;
    const i64 rph = p.B * hd2;  // rows per head
    r.g = (int)(R / rph);
    const i64 rem = R - (i64)r.g * rph;
    r.b = (int)(rem / hd2);
    r.i = (int)((rem / p.hd) % p.hd);
    r.j = (int)(rem % p.hd);
    r.urow = ((i64)r.b * p.H + (i64)r.g * p.hd + r.i) * p.L;
    r.prow = ((i64)r.b * p.H + (i64)r.g * p.hd + r.j) * p.L;
    return r;
}

// w[t] = u[t]·pregate[t] (0 outside [0, L) or for an invalid row).
template <typename T>
__device__ __forceinline__ float fc_w(const FcParams& p, const FcRow& r, i64 t) {
    if (!r.valid || t >= p.L) return 0.f;
    float v = ld<T>(p.u, r.urow + t);
    if (p.has_pre) v *= ld<T>(p.pre, r.prow + t);
    return v;
}

// w at the sample pairs (2n, 2n + 1) of four positions n[i]: the batch's u loads first (predicated),
// then the pregate's. fc_w per sample puts a branch (the pregate test) between samples, so each
// sample's load is issued only after the previous one is used (the pattern v9c removed from the pair
// kernels' loads); this keeps 8 loads in flight. Same products: same bits as fc_w.
template <typename T>
__device__ __forceinline__ void fc_w4(const FcParams& p, const FcRow& r, const i64 (&n)[4], float2 (&v)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 t = 2 * n[i];
        v[i] = make_float2(r.valid && t < p.L ? ld<T>(p.u, r.urow + t) : 0.f, r.valid && t + 1 < p.L ? ld<T>(p.u, r.urow + t + 1) : 0.f);
    }
    if (p.has_pre) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const i64 t = 2 * n[i];
            v[i].x *= r.valid && t < p.L ? ld<T>(p.pre, r.prow + t) : 0.f;
            v[i].y *= r.valid && t + 1 < p.L ? ld<T>(p.pre, r.prow + t + 1) : 0.f;
        }
    }
}

// k_eff[t] of head g for t in [0, N): k[t] + D·δ[t] + k_rev[(N − t) mod N].
__device__ __forceinline__ float fc_keff(const FcParams& p, int g, i64 t, i64 n) {
    float v = 0.f;
    if (t < p.lk) v += reinterpret_cast<const float*>(p.k)[(i64)g * p.lk + t];
    if (t == 0 && p.dd) v += reinterpret_cast<const float*>(p.dd)[g];
    if (p.lkr > 0) {
        const i64 m = t == 0 ? 0 : n - t;
        if (m < p.lkr) v += reinterpret_cast<const float*>(p.krev)[(i64)g * p.lkr + m];
    }
    return v;
}

// Pruned transforms (fft.cuh, FFT_ZIN / FFT_HOUT). A row's signal fills at most the lower half of the
// N = 2M points when L ≤ M: its pairs n ≥ M/2 are zero on the way in and not wanted on the way out. The
// filter's are when k_eff has no taps from M on (Lk ≤ M, no k_rev beyond its lag-0 tap). Sequences of at
// least 16 points (the pruned first pass is radix 16). FC_PRUNE=0 (EMBER_FFTCONV_PRUNE=0) keeps the full
// transforms, for measurements.
#ifndef FC_PRUNE
#define FC_PRUNE 1
#endif
__device__ __forceinline__ bool fc_prune_row(const FcParams& p, int logn) {
    return FC_PRUNE && logn >= 4 && p.L <= ((i64)1 << p.logm);
}
__device__ __forceinline__ bool fc_prune_filter(const FcParams& p, int logn) {
    return FC_PRUNE && logn >= 4 && p.lk <= ((i64)1 << p.logm) && p.lkr <= 1;
}
template <int DIR, int MODE>
__device__ __forceinline__ void block_fft_if(bool pruned, float2* __restrict__ x, const FcSeqs q, const float2* __restrict__ tw) {
    if (pruned) block_fft<DIR, MODE>(x, q, tw);
    else block_fft<DIR>(x, q, tw);
}

// Forward epilogue for element t of a valid row: z (D included) → output or, for hd > 1, g_ij.
__device__ __forceinline__ int fp_kpos(int k, int logp);  // pair_tc.cuh

// GELU and its derivative with erf from Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7; with the
// approximate reciprocal and exp2 about 3e-7, far inside every dtype's tolerance, f32's 1e-5
// included): about 15 instructions instead of erff's ~25 with branches, and the derivative reuses
// the same exp(−z²/2) for the normal pdf. x = |z|/√2, t = 1/(1 + p·x), erf(x) = 1 − t·P(t)·e^(−x²).
__device__ __forceinline__ void fc_gelu_parts(float z, float& cdf, float& e) {
    const float x = fabsf(z) * 0.70710678118654752f;
    float t;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.3275911f, x, 1.f)));
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-1.4426950408889634f * x * x));
    float poly = fmaf(1.061405429f, t, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    const float erf_abs = fmaf(-poly * t, e, 1.f);
    cdf = 0.5f * (1.f + copysignf(erf_abs, z));  // Φ(z)
}
__device__ __forceinline__ float fc_gelu(float z) {
    float cdf, e;
    fc_gelu_parts(z, cdf, e);
    return z * cdf;
}
// gelu(z) and gelu'(z) = Φ(z) + z·φ(z), φ(z) = e^(−z²/2)/√(2π).
__device__ __forceinline__ void fc_gelu_grad(float z, float& g, float& gp) {
    float cdf, e;
    fc_gelu_parts(z, cdf, e);
    g = z * cdf;
    gp = fmaf(z * 0.39894228040143268f, e, cdf);
}

template <typename T, typename TO>
__device__ __forceinline__ void fc_epi_fwd(const FcParams& p, const FcRow& r, i64 t, float z) {
    const float gz = p.gelu ? fc_gelu(z) : z;
    if (p.hd == 1) {
        // A training forward on the four-step path keeps z for the backward (p.zs; the pair kernels
        // write theirs in their own epilogues).
        if (p.zs) st<T>(p.zs, r.urow + t, z);
        float o = gz;
        if (p.has_post) o *= ld<T>(p.post, r.urow + t);
        if (p.has_mask) o *= reinterpret_cast<const float*>(p.mask)[(i64)r.b * p.H + r.g];
        st<TO>(p.out, r.urow + t, o);
    } else {
        reinterpret_cast<float*>(p.wsa)[r.local * p.L + t] = gz;
    }
}

// Backward epilogue 1 for element t of a valid row: d_z from d_out (and z when need_z); stores the
// postgate's gradient (hd = 1) or its per-row share (hd > 1).
// `dout`: d_out at t, loaded by the caller (batched ahead of the arithmetic, see fc_dz4).
template <typename T, typename TO>
__device__ __forceinline__ float fc_epi_dz(const FcParams& p, const FcRow& r, i64 t, float z, float dout) {
    const float m = p.has_mask ? reinterpret_cast<const float*>(p.mask)[(i64)r.b * p.H + r.g * p.hd + r.j] : 1.f;
    const float dg = dout * m;
    float gz = z, gp = 1.f;
    if (p.gelu) {
        fc_gelu_grad(z, gz, gp);
    }
    float dz = dg * gp;
    if (p.has_post) {
        dz *= ld<T>(p.post, r.urow + t);
        if (p.hd == 1) st<T>(p.dpost, r.urow + t, dg * gz);
        else reinterpret_cast<float*>(p.wsb)[r.local * p.L + t] = dg * gz;
    }
    return dz;
}

// d_z of four sample pairs (2n[i], 2n[i] + 1) of a row from z[i] (zero where t ≥ L or the row is
// invalid): the four pairs' d_out loads first, then the arithmetic (one load in flight per sample
// otherwise, as fc_w4 explains).
template <typename T, typename TO>
__device__ __forceinline__ void fc_dz4(const FcParams& p, const FcRow& r, const i64 (&n)[4], float2 (&z)[4]) {
    float2 g[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 t = 2 * n[i];
        g[i] = make_float2(r.valid && t < p.L ? ld<TO>(p.dout, r.prow + t) : 0.f, r.valid && t + 1 < p.L ? ld<TO>(p.dout, r.prow + t + 1) : 0.f);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 t = 2 * n[i];
        float2 dz = make_float2(0.f, 0.f);
        if (r.valid && t < p.L) dz.x = fc_epi_dz<T, TO>(p, r, t, z[i].x, g[i].x);
        if (r.valid && t + 1 < p.L) dz.y = fc_epi_dz<T, TO>(p, r, t + 1, z[i].y, g[i].y);
        z[i] = dz;
    }
}

// Backward epilogue 2: d_w → d_u and d_pregate (hd = 1) or the workspace row (hd > 1).
template <typename T>
__device__ __forceinline__ void fc_epi_dw(const FcParams& p, const FcRow& r, i64 t, float dw) {
    if (p.hd == 1) {
        if (p.has_pre) {
            st<T>(p.du, r.urow + t, dw * ld<T>(p.pre, r.prow + t));
            st<T>(p.dpre, r.prow + t, dw * ld<T>(p.u, r.urow + t));
        } else {
            st<T>(p.du, r.urow + t, dw);
        }
    } else {
        reinterpret_cast<float*>(p.wsa)[r.local * p.L + t] = dw;
    }
}

// d_k, d_k_rev and d_D from r[t] (t in [0, N)) of head g.
__device__ __forceinline__ void fc_epi_dk(const FcParams& p, int g, i64 t, i64 n, float v) {
    if (t < p.lk) reinterpret_cast<float*>(p.dk)[(i64)g * p.lk + t] = v;
    if (p.lkr > 0) {
        const i64 m = t == 0 ? 0 : n - t;
        if (m < p.lkr) reinterpret_cast<float*>(p.dkrev)[(i64)g * p.lkr + m] = v;
    }
    if (t == 0 && p.ddd) reinterpret_cast<float*>(p.ddd)[g] = v;
}

// =================================================================================================
// On-chip path. Each CTA: `lanes` = 16·FC_BLOCK/M rows, FC_BLOCK/lanes threads per row.
// =================================================================================================

struct FcLane {
    int logm, m, lanes, tpr, lane, lt;
    int base;  // flat index of the lane's first element
};

__device__ __forceinline__ int fc_log2(int v) {
    int r = 0;
    while ((1 << r) < v) ++r;
    return r;
}

__device__ __forceinline__ FcLane fc_lane(int logm) {
    FcLane l;
    l.logm = logm;
    l.m = 1 << logm;
    l.lanes = FC_SLOTS >> logm;
    l.tpr = FC_BLOCK / l.lanes;
    l.lane = threadIdx.x / l.tpr;
    l.lt = threadIdx.x % l.tpr;
    l.base = l.lane << logm;
    return l;
}

__device__ __forceinline__ FcSeqs fc_rows_layout(int logm) {
    FcSeqs q;
    q.logn = logm;
    q.lognseq = fc_log2(FC_SLOTS) - logm;
    q.ss = 1 << logm;
    q.es = 1;
    return q;
}

// The pair step over one lane's M bins: Z (forward FFT of packed w) in x → callback per pair.
// Pairs k in [0, M/2]; thread lt takes k = lt + tpr·c. `op(k, Xk, Xmk, Zk, Zmk)` receives 2X[k],
// 2X[M−k] (k = 0: 2X[0] and 2X[M] as real parts) and returns the packed values to write back.
// For k = M/2 both halves are the same bin and are written once.

// exp(−2πi·k/N) on the on-chip path (N = 2M ≤ 2^15): from the table.
__device__ __forceinline__ float2 fc_wk_table(const float2* __restrict__ tw, int k, int logm) {
    return tw[k << (FC_TWN_LOG - 1 - logm)];
}

// Load a lane's rows of real samples packed in pairs; `src(t)` gives sample t (0 beyond the data).
template <typename F>
__device__ __forceinline__ void fc_pack(float2* __restrict__ x, const FcLane& l, F src) {
#pragma unroll 4
    for (int c = 0; c < FC_E; ++c) {
        const int n = l.lt + l.tpr * c;
        x[FC_P(l.base + n)] = make_float2(src(2 * (i64)n), src(2 * (i64)n + 1));
    }
}

// fc_pack of w (u times the pregate) in batches of four pairs (fc_w4).
template <typename T>
__device__ __forceinline__ void fc_pack_w(float2* __restrict__ x, const FcLane& l, const FcParams& p, const FcRow& r) {
    static_assert(FC_E % 4 == 0, "batches of four");
#pragma unroll 1
    for (int c0 = 0; c0 < FC_E; c0 += 4) {
        i64 n[4];
        float2 v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) n[i] = l.lt + l.tpr * (c0 + i);
        fc_w4<T>(p, r, n, v);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[FC_P(l.base + (int)n[i])] = v[i];
    }
}

// ---- filter spectrum: lanes = heads ---------------------------------------------------------------

__device__ void fc_spectrum_onchip(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcLane l = fc_lane(p.logm);
    const int g = blockIdx.x * l.lanes + l.lane;
    const bool valid = g < p.heads;
    const i64 n = 2 * (i64)l.m;
    __shared__ int fp_kmax[16];  // pair spectrum: per-lane largest component (lanes ≤ 16 there)
    if (threadIdx.x < 16) fp_kmax[threadIdx.x] = 0;
    fc_pack(x, l, [&](i64 t) { return valid ? fc_keff(p, g, t, n) : 0.f; });
    __syncthreads();
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    block_fft_if<-1, FFT_ZIN>(fc_prune_filter(p, p.logm), x, fc_rows_layout(p.logm), tw);
    if (p.tc == 2) {
        // The pair forward (pair_tc.cuh): all N bins of K = X/N in its fragment order (real_post
        // gives 2X; bins above N/2 are the conjugates of bins below), divided by a power of two
        // 2^e so that the largest component is in [1/2, 1) — the kernel's f16 operands then need no
        // scaling of their own after × K; 2^e goes to kscale[g], after all heads' bins.
        const float sp = 1.f / (2.f * (float)n);
        const int logp = p.logm - 7;
        // Pass 1: the lane's largest component (non-negative floats order as their bit patterns).
        float mx = 0.f;
        for (int c = 0; c <= FC_E / 2; ++c) {
            const int k = l.lt + l.tpr * c;
            if (k > l.m / 2 || !valid) continue;
            if (k == 0) {
                float X0, XM;
                real_post0(x[FC_P(l.base)], X0, XM);
                mx = fmaxf(mx, fmaxf(fabsf(X0), fabsf(XM)));
            } else {
                float2 Xk, Xmk;
                real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], fc_wk_table(tw, k, p.logm), Xk, Xmk);
                mx = fmaxf(mx, fmaxf(fmaxf(fabsf(Xk.x), fabsf(Xk.y)), fmaxf(fabsf(Xmk.x), fabsf(Xmk.y))));
            }
        }
        atomicMax(&fp_kmax[l.lane], __float_as_int(mx * sp));
        __syncthreads();
        int ex = ((fp_kmax[l.lane] >> 23) & 255) - 126;
        ex = max(-126, min(126, ex));
        const float down = sp * __int_as_float((127 - ex) << 23);
        float2* kp = reinterpret_cast<float2*>(p.spec) + (i64)g * n;
        const auto put = [&](int k, float2 v) {
            kp[fp_kpos(k, logp)] = c_scale(v, down);
            if (k != 0 && k != l.m) kp[fp_kpos((int)n - k, logp)] = c_scale(c_conj(v), down);
        };
        for (int c = 0; c <= FC_E / 2; ++c) {
            const int k = l.lt + l.tpr * c;
            if (k > l.m / 2 || !valid) continue;
            if (k == 0) {
                float X0, XM;
                real_post0(x[FC_P(l.base)], X0, XM);
                put(0, make_float2(X0, 0.f));
                put(l.m, make_float2(XM, 0.f));
            } else {
                float2 Xk, Xmk;
                real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], fc_wk_table(tw, k, p.logm), Xk, Xmk);
                put(k, Xk);
                put(l.m - k, Xmk);
            }
        }
        if (valid && l.lt == 0) reinterpret_cast<float*>(p.spec)[2 * (i64)p.heads * n + g] = __int_as_float((127 + ex) << 23);
        return;
    }
    const float s = 1.f / (4.f * (float)n);  // Ks = 2X/(4N) = X/(2N)
    const i64 row = (i64)g * (l.m + 1);
    // Bin k < M at k (natural order) or at fc_tc_pos(k) (TC order); the Nyquist bin at M.
    const auto at = [&](int k) { return row + (p.tc ? fc_tc_pos(k, p.logm) : k); };
    for (int c = 0; c <= FC_E / 2; ++c) {
        const int k = l.lt + l.tpr * c;
        if (k > l.m / 2 || !valid) continue;
        if (k == 0) {
            float X0, XM;
            real_post0(x[FC_P(l.base)], X0, XM);
            st2(p.spec, row, make_float2(X0 * s, 0.f));
            st2(p.spec, row + l.m, make_float2(XM * s, 0.f));
        } else {
            float2 Xk, Xmk;
            real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], fc_wk_table(tw, k, p.logm), Xk, Xmk);
            st2(p.spec, at(k), c_scale(Xk, s));
            st2(p.spec, at(l.m - k), c_scale(Xmk, s));
        }
    }
}

// ---- forward -------------------------------------------------------------------------------------

// In place over a lane: Z → 2X → Y = 2X·Ks (or ·conj(Ks)) → packed Z'.
template <bool CONJ>
__device__ __forceinline__ void fc_pair_mul(float2* __restrict__ x, const FcLane& l, u64 spec, i64 srow, const float2* __restrict__ tw) {
    for (int c = 0; c <= FC_E / 2; ++c) {
        const int k = l.lt + l.tpr * c;
        if (k > l.m / 2) continue;
        if (k == 0) {
            float X0, XM;
            real_post0(x[FC_P(l.base)], X0, XM);
            const float y0 = X0 * ld2(spec, srow).x, yM = XM * ld2(spec, srow + l.m).x;
            x[FC_P(l.base)] = real_pre0(y0, yM);
        } else {
            const float2 wk = fc_wk_table(tw, k, l.logm);
            float2 Xk, Xmk;
            real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], wk, Xk, Xmk);
            const float2 Kk = ld2(spec, srow + k), Kmk = ld2(spec, srow + l.m - k);
            const float2 Yk = CONJ ? c_mulc(Xk, Kk) : c_mul(Xk, Kk);
            const float2 Ymk = CONJ ? c_mulc(Xmk, Kmk) : c_mul(Xmk, Kmk);
            float2 Zk, Zmk;
            real_pre(Yk, Ymk, wk, Zk, Zmk);
            x[FC_P(l.base + k)] = Zk;
            if (2 * k != l.m) x[FC_P(l.base + l.m - k)] = Zmk;
        }
    }
}

template <typename T, typename TO>
__device__ void fc_fwd_onchip(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcLane l = fc_lane(p.logm);
    const FcRow r = fc_row(p, (i64)blockIdx.x * l.lanes + l.lane);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fc_pack_w<T>(x, l, p, r);
    __syncthreads();
    const FcSeqs q = fc_rows_layout(p.logm);
    const bool pruned = fc_prune_row(p, p.logm);
    block_fft_if<-1, FFT_ZIN>(pruned, x, q, tw);
    fc_pair_mul<false>(x, l, p.spec, (i64)r.g * (l.m + 1), tw);
    __syncthreads();
    block_fft_if<1, FFT_HOUT>(pruned, x, q, tw);
    if (!r.valid) return;
#pragma unroll 4
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int n = l.lt + l.tpr * c;
        const float2 y = x[FC_P(l.base + n)];
        const i64 t = 2 * (i64)n;
        if (t < p.L) fc_epi_fwd<T, TO>(p, r, t, y.x);
        if (t + 1 < p.L) fc_epi_fwd<T, TO>(p, r, t + 1, y.y);
    }
}

// ---- forward on tensor cores (bf16 u, 256 ≤ M ≤ 4096) -----------------------------------------------
// As fc_fwd_onchip with tc_fft (fft_tc.cuh) for the transforms. The spectrum step works in TC
// order: position p = 256·k1 + k2 of a row holds bin k = k1 + P·k2; its partner M − k sits at
// fc_tc_pos(M − k), and the filter spectrum Ks is stored in the same order (p.tc), so a warp's
// loads of Ks are contiguous. exp(−2πi·k/N) = W_N^k1 · W_512^k2 (N/P = 512), both from tables read
// contiguously or as broadcasts.

__device__ __forceinline__ void fc_pair_mul_tc(float2* __restrict__ x, const FcLane& l, u64 spec, i64 srow, const float2* __restrict__ tw) {
    const int logp = l.logm - 8;
    const float2* w512 = tw + FC_STAGE_TW(8, 1) + 256;  // entry k2 = W_512^k2
    // k = k1 + P·k2 < M/2 exactly when k2 < 128: the first half of each 256-point segment owns the
    // pairs (k, M − k), k = 0 included (with the Nyquist bin); bin M/2 (k1 = 0, k2 = 128) pairs with
    // itself and is done by thread 0 of the row.
    for (int c = 0; c <= FC_E / 2; ++c) {
        const int idx = l.lt + l.tpr * c;
        if (c == FC_E / 2 && l.lt != 0) break;
        const int k1 = c == FC_E / 2 ? 0 : idx >> 7, k2 = c == FC_E / 2 ? 128 : idx & 127;
        const int pos = (k1 << 8) + k2;
        const int k = k1 + (k2 << logp);
        if (k == 0) {
            float X0, XM;
            real_post0(x[TC_P(l.base)], X0, XM);
            const float y0 = X0 * ld2(spec, srow).x, yM = XM * ld2(spec, srow + l.m).x;
            x[TC_P(l.base)] = real_pre0(y0, yM);
            continue;
        }
        const int km = l.m - k;
        const int pm = fc_tc_pos(km, l.logm);
        const float2 wk = c_mul(tw[k1 << (FC_TWN_LOG - 1 - l.logm)], w512[k2]);
        float2 Xk, Xmk;
        real_post(x[TC_P(l.base + pos)], x[TC_P(l.base + pm)], wk, Xk, Xmk);
        const float2 Yk = c_mul(Xk, ld2(spec, srow + pos)), Ymk = c_mul(Xmk, ld2(spec, srow + pm));
        float2 Zk, Zmk;
        real_pre(Yk, Ymk, wk, Zk, Zmk);
        x[TC_P(l.base + pos)] = Zk;
        if (k != km) x[TC_P(l.base + pm)] = Zmk;
    }
}

template <typename T, typename TO>
__device__ void fc_fwd_onchip_tc(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcLane l = fc_lane(p.logm);
    const FcRow r = fc_row(p, (i64)blockIdx.x * l.lanes + l.lane);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    unsigned* tab = reinterpret_cast<unsigned*>(x + TC_SMEM_ELEMS);
    tc_table_fill(tab, tw);
#pragma unroll 4
    for (int c = 0; c < FC_E; ++c) {
        const int n = l.lt + l.tpr * c;
        x[TC_P(l.base + n)] = make_float2(fc_w<T>(p, r, 2 * (i64)n), fc_w<T>(p, r, 2 * (i64)n + 1));
    }
    __syncthreads();
    tc_fft<-1>(x, p.logm, tw, tab);
    fc_pair_mul_tc(x, l, p.spec, (i64)r.g * (l.m + 1), tw);
    __syncthreads();
    tc_fft<1>(x, p.logm, tw, tab);
    if (!r.valid) return;
#pragma unroll 4
    for (int c = 0; c < FC_E; ++c) {
        const int n = l.lt + l.tpr * c;
        const float2 y = x[TC_P(l.base + n)];
        const i64 t = 2 * (i64)n;
        if (t < p.L) fc_epi_fwd<T, TO>(p, r, t, y.x);
        if (t + 1 < p.L) fc_epi_fwd<T, TO>(p, r, t + 1, y.y);
    }
}

// ---- backward --------------------------------------------------------------------------------------
// Grid: (parts_per_cta_row = gridDim.x, heads of this launch). Lane `lane` of CTA (c, h) is partial
// pidx = c·lanes + lane of head head0 + h and takes rows pidx, pidx + parts, ... of that head.
// Partials: sbuf[(h·parts + pidx)·(M+1) + k] = Σ 2G·conj(2W) (first row writes, later rows add);
// vbuf has the same layout and holds the current row's 2W.

template <typename T, typename TO>
__device__ void fc_bwd_onchip(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcLane l = fc_lane(p.logm);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const FcSeqs q = fc_rows_layout(p.logm);
    const bool pruned = fc_prune_row(p, p.logm);
    const int h = blockIdx.y;
    const int g = p.head0 + h;
    const int pidx = blockIdx.x * l.lanes + l.lane;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 part = ((i64)h * p.parts + pidx) * (l.m + 1);
    const i64 srow = (i64)g * (l.m + 1);
    const i64 iters = (rph + p.parts - 1) / p.parts;
    for (i64 it = 0; it < iters; ++it) {
        const i64 within = pidx + it * p.parts;  // row of head g
        // Rows are numbered within this launch from head0's first row.
        FcRow r = fc_row(p, (i64)h * rph + within);
        r.valid = r.valid && within < rph;
        fc_pack_w<T>(x, l, p, r);
        __syncthreads();
        block_fft_if<-1, FFT_ZIN>(pruned, x, q, tw);
        // Save 2W; with need_z also form Y = 2W·Ks for the recomputation of z.
        for (int c = 0; c <= FC_E / 2; ++c) {
            const int k = l.lt + l.tpr * c;
            if (k > l.m / 2) continue;
            if (k == 0) {
                float X0, XM;
                real_post0(x[FC_P(l.base)], X0, XM);
                st2(p.vbuf, part, make_float2(X0, 0.f));
                st2(p.vbuf, part + l.m, make_float2(XM, 0.f));
                if (p.need_z) x[FC_P(l.base)] = real_pre0(X0 * ld2(p.spec, srow).x, XM * ld2(p.spec, srow + l.m).x);
            } else {
                const float2 wk = fc_wk_table(tw, k, l.logm);
                float2 Xk, Xmk;
                real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], wk, Xk, Xmk);
                st2(p.vbuf, part + k, Xk);
                st2(p.vbuf, part + l.m - k, Xmk);
                if (p.need_z) {
                    float2 Zk, Zmk;
                    real_pre(c_mul(Xk, ld2(p.spec, srow + k)), c_mul(Xmk, ld2(p.spec, srow + l.m - k)), wk, Zk, Zmk);
                    x[FC_P(l.base + k)] = Zk;
                    if (2 * k != l.m) x[FC_P(l.base + l.m - k)] = Zmk;
                }
            }
        }
        __syncthreads();
        if (p.need_z) block_fft_if<1, FFT_HOUT>(pruned, x, q, tw);
        // d_z, packed in place of z.
        // (Per element: batching the d_out loads as fc_col_dz does took the 256-thread kernel from
        // 128 to 142 registers, one CTA per SM instead of two.)
#pragma unroll 2
        for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
            const int n = l.lt + l.tpr * c;
            const float2 z = x[FC_P(l.base + n)];
            const i64 t = 2 * (i64)n;
            float2 dz = make_float2(0.f, 0.f);
            if (r.valid && t < p.L) dz.x = fc_epi_dz<T, TO>(p, r, t, z.x, ld<TO>(p.dout, r.prow + t));
            if (r.valid && t + 1 < p.L) dz.y = fc_epi_dz<T, TO>(p, r, t + 1, z.y, ld<TO>(p.dout, r.prow + t + 1));
            x[FC_P(l.base + n)] = dz;
        }
        __syncthreads();
        block_fft_if<-1, FFT_ZIN>(pruned, x, q, tw);
        // S += 2G·conj(2W); Y = 2G·conj(Ks).
        for (int c = 0; c <= FC_E / 2; ++c) {
            const int k = l.lt + l.tpr * c;
            if (k > l.m / 2) continue;
            if (k == 0) {
                float G0, GM;
                real_post0(x[FC_P(l.base)], G0, GM);
                const float s0 = G0 * ld2(p.vbuf, part).x, sM = GM * ld2(p.vbuf, part + l.m).x;
                const float2 o0 = it ? ld2(p.sbuf, part) : make_float2(0.f, 0.f);
                const float2 oM = it ? ld2(p.sbuf, part + l.m) : make_float2(0.f, 0.f);
                st2(p.sbuf, part, make_float2(o0.x + s0, 0.f));
                st2(p.sbuf, part + l.m, make_float2(oM.x + sM, 0.f));
                x[FC_P(l.base)] = real_pre0(G0 * ld2(p.spec, srow).x, GM * ld2(p.spec, srow + l.m).x);
            } else {
                const float2 wk = fc_wk_table(tw, k, l.logm);
                float2 Gk, Gmk;
                real_post(x[FC_P(l.base + k)], x[FC_P(l.base + l.m - k)], wk, Gk, Gmk);
                const float2 sk = c_mulc(Gk, ld2(p.vbuf, part + k));
                const float2 smk = c_mulc(Gmk, ld2(p.vbuf, part + l.m - k));
                if (2 * k != l.m) {
                    st2(p.sbuf, part + k, it ? c_add(ld2(p.sbuf, part + k), sk) : sk);
                    st2(p.sbuf, part + l.m - k, it ? c_add(ld2(p.sbuf, part + l.m - k), smk) : smk);
                } else {
                    st2(p.sbuf, part + k, it ? c_add(ld2(p.sbuf, part + k), sk) : sk);
                }
                float2 Zk, Zmk;
                real_pre(c_mulc(Gk, ld2(p.spec, srow + k)), c_mulc(Gmk, ld2(p.spec, srow + l.m - k)), wk, Zk, Zmk);
                x[FC_P(l.base + k)] = Zk;
                if (2 * k != l.m) x[FC_P(l.base + l.m - k)] = Zmk;
            }
        }
        __syncthreads();
        block_fft_if<1, FFT_HOUT>(pruned, x, q, tw);
        if (r.valid) {
#pragma unroll 2
            for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
                const int n = l.lt + l.tpr * c;
                const float2 dw = x[FC_P(l.base + n)];
                const i64 t = 2 * (i64)n;
                if (t < p.L) fc_epi_dw<T>(p, r, t, dw.x);
                if (t + 1 < p.L) fc_epi_dw<T>(p, r, t + 1, dw.y);
            }
        }
        __syncthreads();
    }
}

// ---- filter gradients: lanes = heads of this launch; sums the partials in order ------------------

__device__ void fc_dk_onchip(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcLane l = fc_lane(p.logm);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const int h = blockIdx.x * l.lanes + l.lane;
    const bool valid = h < p.nheads;
    const i64 n = 2 * (i64)l.m;
    const float s = 1.f / (4.f * (float)n);  // S holds 4·Σ G·conj(W); r = IFFT(S/N)
    for (int c = 0; c <= FC_E / 2; ++c) {
        const int k = l.lt + l.tpr * c;
        if (k > l.m / 2) continue;
        float2 Sk = make_float2(0.f, 0.f), Smk = make_float2(0.f, 0.f);
        if (valid) {
            for (int q = 0; q < p.parts; ++q) {
                const i64 part = ((i64)h * p.parts + q) * (l.m + 1);
                Sk = c_add(Sk, ld2(p.sbuf, part + k));
                Smk = c_add(Smk, ld2(p.sbuf, part + (k == 0 ? l.m : l.m - k)));
            }
        }
        if (k == 0) {
            x[FC_P(l.base)] = real_pre0(Sk.x * s, Smk.x * s);
        } else {
            float2 Zk, Zmk;
            real_pre(c_scale(Sk, s), c_scale(Smk, s), fc_wk_table(tw, k, p.logm), Zk, Zmk);
            x[FC_P(l.base + k)] = Zk;
            if (2 * k != l.m) x[FC_P(l.base + l.m - k)] = Zmk;
        }
    }
    __syncthreads();
    const bool pruned = fc_prune_filter(p, p.logm);
    block_fft_if<1, FFT_HOUT>(pruned, x, fc_rows_layout(p.logm), tw);
    if (!valid) return;
    const int g = p.head0 + h;
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int nn = l.lt + l.tpr * c;
        const float2 v = x[FC_P(l.base + nn)];
        fc_epi_dk(p, g, 2 * (i64)nn, n, v.x);
        fc_epi_dk(p, g, 2 * (i64)nn + 1, n, v.y);
    }
}

// =================================================================================================
// Four-step path. M = M1·M2; T[row][k1·M2 + n2].
// Column kernels: a tile of C = FC_SLOTS/M1 columns [c0, c0 + C) of one row; element (n1, c) at
// flat index n1·C + c. Row kernels: `npc` = FC_SLOTS/(2·M2) pair jobs per CTA, each two rows of M2.
// =================================================================================================

// Four-step loads of the intermediate T issued together per thread, before their shared-memory stores.
#ifndef FC_IO_BATCH
#define FC_IO_BATCH 16
#endif
// Pairs of the row pass whose filter-spectrum entries are loaded together.
#ifndef FC_ROW_AHEAD
#define FC_ROW_AHEAD 3
#endif

// exp(−2πi·e/2^logm) for any e (reduced mod 2^logm), accurate to f32 rounding. The angle −2e/2^logm
// (in units of π) is formed exactly: e < 2^24 converts from 32 bits and 2^(1 − logm) is a power of
// two, so the product is what (−2·e)/2^logm gives, with a 32-bit conversion and a multiply instead
// of a 64-bit conversion and an IEEE division. (Two table
// loads — the flat 2^15-th roots times a fine 2^24-th root — measured 7–10 % slower on the four-step
// passes than this arithmetic: the gathers' latency, NOTES.md "v16".)
__device__ __forceinline__ float2 fc_twiddle(i64 e, int logm) {
    e &= ((i64)1 << logm) - 1;
    const float scale = __int_as_float((int)0x80000000u | ((128 - logm) << 23));  // −2^(1 − logm)
    const float a = (logm <= 24 ? __int2float_rn((int)e) : (float)e) * scale;
    float s, c;
    sincospif(a, &s, &c);
    return make_float2(c, s);
}

struct FcTile {
    int logc, c, c0;  // tile width (log2, value) and first column
    i64 row;          // local row of this launch
};

__device__ __forceinline__ FcTile fc_tile(const FcParams& p) {
    FcTile t;
    t.logc = fc_log2(FC_SLOTS) - p.logm1;
    t.c = 1 << t.logc;
    const i64 tiles = (i64)1 << (p.logm2 - t.logc);
    t.row = blockIdx.x / tiles;
    t.c0 = (int)(blockIdx.x % tiles) << t.logc;
    return t;
}

__device__ __forceinline__ FcSeqs fc_cols_layout(const FcParams& p, const FcTile& t) {
    FcSeqs q;
    q.logn = p.logm1;
    q.lognseq = t.logc;
    q.ss = 1;
    q.es = t.c;
    return q;
}

// The twiddles W_M^(n2·k1) of a thread's elements e = tid + FC_BLOCK·c (c < FC_E) in a column tile at
// most FC_BLOCK columns wide: all of them lie in the thread's column n2 = c0 + tid mod c, at k1 =
// tid / c + D·c with D = FC_BLOCK / c, so the twiddle of element c is W_M^(n2·k1(0)) · s^c with
// s = W_M^(n2·D). Two chains of FC_E/2 from exact anchors at c = 0 and c = FC_E/2, each next one by a
// complex product (at most 7 roundings after the anchor: ~4e-7 relative at worst, against f32's 1e-5
// bound): 3 fc_twiddle per thread instead of FC_E (each a sincospif with its argument reduction).
// FC_TW_DIRECT = 1 (knob EMBER_FFTCONV_TWIDDLE=direct) keeps fc_twiddle per element, for measurements.
// The row pass keeps fc_twiddle per pair: its twiddles from the flat table (one load and a complex
// product per pair) measured slower (NOTES, "v17").
#ifndef FC_TW_DIRECT
#define FC_TW_DIRECT 0
#endif
struct FcColTw {
    int n2, k0, d;      // the thread's column, its first k1, the k1 step
    float2 wa, wb, s;   // twiddles of elements c and c + FC_E/2 (advanced by s after each use), the step
};
__device__ __forceinline__ bool fc_col_tw_chained(const FcTile& t) { return !FC_TW_DIRECT && t.c <= FC_BLOCK; }
__device__ __forceinline__ FcColTw fc_col_tw(const FcParams& p, const FcTile& t) {
    FcColTw w;
    w.n2 = t.c0 + ((int)threadIdx.x & (t.c - 1));
    w.k0 = (int)threadIdx.x >> t.logc;
    w.d = FC_BLOCK >> t.logc;
    w.wa = fc_twiddle((i64)w.n2 * w.k0, p.logm);
    w.wb = fc_twiddle((i64)w.n2 * (w.k0 + w.d * (FC_E / 2)), p.logm);
    w.s = fc_twiddle((i64)w.n2 * w.d, p.logm);
    return w;
}

// Column forward FFT + twiddle of the tile in x, then store to T. `pruned`: the tile's upper half
// (n1 ≥ M1/2, its elements e ≥ FC_SLOTS/2) is padding and was not written (FFT_ZIN).
__device__ __forceinline__ void fc_col_fwd_store(const FcParams& p, float2* x, const FcTile& t, const float2* tw, bool pruned) {
    __syncthreads();
    block_fft_if<-1, FFT_ZIN>(pruned, x, fc_cols_layout(p, t), tw);
    const i64 m2 = (i64)1 << p.logm2;
    const i64 base = t.row << p.logm;
    if (fc_col_tw_chained(t)) {
        FcColTw w = fc_col_tw(p, t);
#pragma unroll 4
        for (int c = 0; c < FC_E / 2; ++c) {
            const int ka = w.k0 + w.d * c, kb = ka + w.d * (FC_E / 2);
            st2(p.tbuf, base + ka * m2 + w.n2, c_mul(x[FC_P(threadIdx.x + FC_BLOCK * c)], w.wa));
            st2(p.tbuf, base + kb * m2 + w.n2, c_mul(x[FC_P(threadIdx.x + FC_BLOCK * (c + FC_E / 2))], w.wb));
            w.wa = c_mul(w.wa, w.s);
            w.wb = c_mul(w.wb, w.s);
        }
        return;
    }
#pragma unroll 4
    for (int c = 0; c < FC_E; ++c) {
        const int e = threadIdx.x + FC_BLOCK * c;
        const int k1 = e >> t.logc, cc = e & (t.c - 1);
        const int n2 = t.c0 + cc;
        const float2 v = c_mul(x[FC_P(e)], fc_twiddle((i64)n2 * k1, p.logm));
        st2(p.tbuf, base + k1 * m2 + n2, v);
    }
}

// Load the tile from T, twiddle back and column inverse FFT: x holds y-pairs at (n1, c). `pruned`: only
// the lower half (n1 < M1/2, elements e < FC_SLOTS/2) is transformed (FFT_HOUT); the upper half is stale.
__device__ __forceinline__ void fc_col_load_inv(const FcParams& p, float2* x, const FcTile& t, const float2* tw, bool pruned) {
    const i64 m2 = (i64)1 << p.logm2;
    const i64 base = t.row << p.logm;
    // The loads in batches ahead of the shared-memory stores: each generic load would otherwise wait
    // for the store before it (they might alias), one load in flight per thread.
    if (FC_IO_BATCH == FC_E && fc_col_tw_chained(t)) {
        // All of the thread's loads in one batch, then the twiddles by the two chains (fc_col_tw).
        float2 v[FC_E];
#pragma unroll
        for (int c = 0; c < FC_E; ++c) {
            const int e = threadIdx.x + FC_BLOCK * c;
            v[c] = ld2(p.tbuf, base + (e >> t.logc) * m2 + t.c0 + (e & (t.c - 1)));
        }
        FcColTw w = fc_col_tw(p, t);
#pragma unroll
        for (int c = 0; c < FC_E / 2; ++c) {
            x[FC_P(threadIdx.x + FC_BLOCK * c)] = c_mulc(v[c], w.wa);
            x[FC_P(threadIdx.x + FC_BLOCK * (c + FC_E / 2))] = c_mulc(v[c + FC_E / 2], w.wb);
            w.wa = c_mul(w.wa, w.s);
            w.wb = c_mul(w.wb, w.s);
        }
        __syncthreads();
        block_fft_if<1, FFT_HOUT>(pruned, x, fc_cols_layout(p, t), tw);
        return;
    }
#pragma unroll 1
    for (int c0 = 0; c0 < FC_E; c0 += FC_IO_BATCH) {
        float2 v[FC_IO_BATCH];
#pragma unroll
        for (int u = 0; u < FC_IO_BATCH; ++u) {
            const int e = threadIdx.x + FC_BLOCK * (c0 + u);
            v[u] = ld2(p.tbuf, base + (e >> t.logc) * m2 + t.c0 + (e & (t.c - 1)));
        }
#pragma unroll
        for (int u = 0; u < FC_IO_BATCH; ++u) {
            const int e = threadIdx.x + FC_BLOCK * (c0 + u);
            const int k1 = e >> t.logc, n2 = t.c0 + (e & (t.c - 1));
            x[FC_P(e)] = c_mulc(v[u], fc_twiddle((i64)n2 * k1, p.logm));
        }
    }
    __syncthreads();
    block_fft_if<1, FFT_HOUT>(pruned, x, fc_cols_layout(p, t), tw);
}

// Sample index pair of tile element e: n = M2·n1 + c0 + c.
__device__ __forceinline__ i64 fc_tile_n(const FcParams& p, const FcTile& t, int e) {
    return ((i64)(e >> t.logc) << p.logm2) + t.c0 + (e & (t.c - 1));
}

// Pass 1 of a data row: pack w, column FFT, store.
template <typename T>
__device__ void fc_col_data(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const FcRow r = fc_row(p, t.row);
    const bool pruned = fc_prune_row(p, p.logm1);
#pragma unroll 1
    for (int c0 = 0; c0 < (pruned ? FC_E / 2 : FC_E); c0 += 4) {
        i64 n[4];
        float2 v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) n[i] = fc_tile_n(p, t, threadIdx.x + FC_BLOCK * (c0 + i));
        fc_w4<T>(p, r, n, v);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[FC_P(threadIdx.x + FC_BLOCK * (c0 + i))] = v[i];
    }
    fc_col_fwd_store(p, x, t, reinterpret_cast<const float2*>(p.tw), pruned);
}

// Pass 1 of a filter: row = head.
__device__ void fc_col_filter(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const i64 nn = (i64)2 << p.logm;
    const int g = p.head0 + (int)t.row;
    const bool pruned = fc_prune_filter(p, p.logm1);
#pragma unroll 4
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int e = threadIdx.x + FC_BLOCK * c;
        const i64 n = fc_tile_n(p, t, e);
        x[FC_P(e)] = make_float2(fc_keff(p, g, 2 * n, nn), fc_keff(p, g, 2 * n + 1, nn));
    }
    fc_col_fwd_store(p, x, t, reinterpret_cast<const float2*>(p.tw), pruned);
}

// Pass 3 of the forward: column inverse FFT, epilogue.
template <typename T, typename TO>
__device__ void fc_col_out(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const FcRow r = fc_row(p, t.row);
    const bool pruned = fc_prune_row(p, p.logm1);
    fc_col_load_inv(p, x, t, reinterpret_cast<const float2*>(p.tw), pruned);
#pragma unroll 4
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int e = threadIdx.x + FC_BLOCK * c;
        const i64 n = fc_tile_n(p, t, e);
        const float2 y = x[FC_P(e)];
        if (2 * n < p.L) fc_epi_fwd<T, TO>(p, r, 2 * n, y.x);
        if (2 * n + 1 < p.L) fc_epi_fwd<T, TO>(p, r, 2 * n + 1, y.y);
    }
}

// Backward middle: (z by column inverse FFT when need_z) → d_z → column FFT of d_z → store.
template <typename T, typename TO>
__device__ void fc_col_dz(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const FcRow r = fc_row(p, t.row);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    // Pruned: z only where t < L (FFT_HOUT), d_z zero from L on (FFT_ZIN), both the tile's lower half.
    // With the training forward's z (p.zs, hd = 1; need_z is 0 then) z is read instead of recomputed.
    const bool pruned = fc_prune_row(p, p.logm1);
    if (p.need_z) fc_col_load_inv(p, x, t, tw, pruned);
#pragma unroll 1
    for (int c0 = 0; c0 < (pruned ? FC_E / 2 : FC_E); c0 += 4) {
        i64 n[4];
        float2 z[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = threadIdx.x + FC_BLOCK * (c0 + i);
            n[i] = fc_tile_n(p, t, e);
            if (p.zs) {
                const i64 tt = 2 * n[i];
                z[i] = make_float2(r.valid && tt < p.L ? ld<T>(p.zs, r.urow + tt) : 0.f, r.valid && tt + 1 < p.L ? ld<T>(p.zs, r.urow + tt + 1) : 0.f);
            } else {
                z[i] = p.need_z ? x[FC_P(e)] : make_float2(0.f, 0.f);
            }
        }
        fc_dz4<T, TO>(p, r, n, z);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[FC_P(threadIdx.x + FC_BLOCK * (c0 + i))] = z[i];
    }
    fc_col_fwd_store(p, x, t, tw, pruned);
}

// Backward end: column inverse FFT → d_w → d_u, d_pregate.
template <typename T>
__device__ void fc_col_dw(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const FcRow r = fc_row(p, t.row);
    const bool pruned = fc_prune_row(p, p.logm1);
    fc_col_load_inv(p, x, t, reinterpret_cast<const float2*>(p.tw), pruned);
#pragma unroll 4
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int e = threadIdx.x + FC_BLOCK * c;
        const i64 n = fc_tile_n(p, t, e);
        const float2 dw = x[FC_P(e)];
        if (2 * n < p.L) fc_epi_dw<T>(p, r, 2 * n, dw.x);
        if (2 * n + 1 < p.L) fc_epi_dw<T>(p, r, 2 * n + 1, dw.y);
    }
}

// Filter gradient end: row = head of this launch.
__device__ void fc_col_dk(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const FcTile t = fc_tile(p);
    const bool pruned = fc_prune_filter(p, p.logm1);
    fc_col_load_inv(p, x, t, reinterpret_cast<const float2*>(p.tw), pruned);
    const i64 nn = (i64)2 << p.logm;
    const int g = p.head0 + (int)t.row;
#pragma unroll 4
    for (int c = 0; c < (pruned ? FC_E / 2 : FC_E); ++c) {
        const int e = threadIdx.x + FC_BLOCK * c;
        const i64 n = fc_tile_n(p, t, e);
        const float2 v = x[FC_P(e)];
        fc_epi_dk(p, g, 2 * n, nn, v.x);
        fc_epi_dk(p, g, 2 * n + 1, nn, v.y);
    }
}

// ---- row pass ------------------------------------------------------------------------------------
// Pair job pj of a row: pj = 0 → rows 0 and M1/2 (each its own partner set); pj ≥ 1 → rows pj and
// M1 − pj. Slot s of the CTA holds the job's two rows as sequences 2s (row A) and 2s + 1 (row B).
// Pair index q of a job (q in [0, M2] for pj = 0, [0, M2) otherwise) names two bins: element
// (rowA/rowB, col) and its partner, whose frequencies are k and M − k.

struct FcPair {
    bool ok;        // this q exists
    int fa, fb;     // flat smem indices of the element and its partner
    i64 ka, kb;     // T offsets (k1·M2 + k2) of both
    i64 k;          // frequency of the element (k = k1 + M1·k2); 0 means the DC/Nyquist pair
    bool self;      // partner is the element itself (k = M/2)
};

__device__ __forceinline__ FcPair fc_pair(const FcParams& p, int pj, int slot, int q) {
    FcPair r;
    const int m1 = 1 << p.logm1, m2 = 1 << p.logm2;
    const int sa = (2 * slot) << p.logm2, sb = (2 * slot + 1) << p.logm2;  // flat starts of rows A, B
    r.ok = true;
    r.self = false;
    if (pj == 0) {
        if (q <= m2 / 2) {  // row 0: (0, q) ↔ (0, (M2 − q) mod M2)
            const int qb = (m2 - q) & (m2 - 1);
            r.fa = sa + q;
            r.fb = sa + qb;
            r.ka = q;
            r.kb = qb;
            r.k = (i64)m1 * q;
            r.self = q == m2 / 2;
        } else if (q <= m2) {  // row M1/2: (M1/2, q') ↔ (M1/2, M2 − 1 − q')
            const int qa = q - m2 / 2 - 1;
            const int h1 = m1 / 2;
            r.fa = sb + qa;
            r.fb = sb + (m2 - 1 - qa);
            r.ka = (i64)h1 * m2 + qa;
            r.kb = (i64)h1 * m2 + (m2 - 1 - qa);
            r.k = h1 + (i64)m1 * qa;
        } else {
            r.ok = false;
        }
    } else if (q < m2) {  // (pj, q) ↔ (M1 − pj, M2 − 1 − q)
        r.fa = sa + q;
        r.fb = sb + (m2 - 1 - q);
        r.ka = (i64)pj * m2 + q;
        r.kb = (i64)(m1 - pj) * m2 + (m2 - 1 - q);
        r.k = pj + (i64)m1 * q;
    } else {
        r.ok = false;
    }
    return r;
}

struct FcJobs {
    int lognpc, npc, slot, tps, lt;  // jobs per CTA, this thread's slot, threads per slot
    i64 job;                          // global job index of this slot
};

__device__ __forceinline__ FcJobs fc_jobs(const FcParams& p) {
    FcJobs j;
    j.lognpc = fc_log2(FC_SLOTS) - p.logm2 - 1;
    j.npc = 1 << j.lognpc;
    j.tps = FC_BLOCK >> j.lognpc;
    j.slot = threadIdx.x / j.tps;
    j.lt = threadIdx.x % j.tps;
    j.job = (i64)blockIdx.x * j.npc + j.slot;
    return j;
}

__device__ __forceinline__ FcSeqs fc_rowpairs_layout(const FcParams& p) {
    FcSeqs q;
    q.logn = p.logm2;
    q.lognseq = fc_log2(FC_SLOTS) - p.logm2;
    q.ss = 1 << p.logm2;
    q.es = 1;
    return q;
}

// Rows of job pj of a slot from/to T (row base `base` = local row << logm).
template <int BATCH>
__device__ __forceinline__ void fc_rows_io(const FcParams& p, float2* x, const FcJobs& j, int pj, i64 base, bool load, bool valid) {
    const int m1 = 1 << p.logm1, m2 = 1 << p.logm2;
    const int ra = pj, rb = pj == 0 ? m1 / 2 : m1 - pj;
    // Elements per thread over both rows: (2·M2) / tps = FC_E (a CTA's jobs fill its FC_SLOTS).
    auto at = [&](int c, int& f, i64& off) {
        const int e = j.lt + j.tps * c;  // 0 .. 2·M2
        const int which = e >> p.logm2, col = e & (m2 - 1);
        f = ((2 * j.slot + which) << p.logm2) + col;
        off = base + (i64)(which ? rb : ra) * m2 + col;
    };
    if (load) {
        // In batches, the loads ahead of the shared-memory stores (see fc_col_load_inv).
#pragma unroll 1
        for (int c0 = 0; c0 < FC_E; c0 += BATCH) {
            float2 v[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int f;
                i64 off;
                at(c0 + u, f, off);
                v[u] = valid ? ld2(p.tbuf, off) : make_float2(0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int f;
                i64 off;
                at(c0 + u, f, off);
                x[FC_P(f)] = v[u];
            }
        }
    } else if (valid) {
#pragma unroll 1
        for (int c = 0; c < FC_E; ++c) {
            int f;
            i64 off;
            at(c, f, off);
            st2(p.tbuf, off, x[FC_P(f)]);
        }
    }
}

// Row-pass modes.
#define FC_ROW_SPECTRUM 0  // filter: row FFT → Ks (four-step layout, Nyquist at [M])
#define FC_ROW_CONV 1      // forward: × Ks; a training forward also saves 2W to vbuf (set: saves_w)
#define FC_ROW_SAVE 2      // backward 1: save 2W to vbuf; with need_z × Ks
#define FC_ROW_CORR 3      // backward 2: S += 2G·conj(2W); × conj(Ks)
#define FC_ROW_DK 4        // filter gradient: S/(4N) → packed, inverse row FFT

template <int MODE>
__device__ void fc_row_pass(const FcParams& p) {
    FC_SMEM_DECL
    float2* x = fc_smem;
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const FcJobs j = fc_jobs(p);
    const int jobs_per_row = 1 << (p.logm1 - 1);
    const i64 m = (i64)1 << p.logm;
    const float inv4n = 1.f / (8.f * (float)m);  // 1/(4N), N = 2M
    const FcSeqs q = fc_rowpairs_layout(p);
    // CORR and DK: one CTA owns job pj of a head (gridDim.x covers the jobs of one head, y the
    // heads) and loops over the head's rows in order, so the S update has a single writer.
    i64 first, count;
    int pj, g = 0;
    if (MODE == FC_ROW_CORR || MODE == FC_ROW_DK) {
        pj = (int)j.job;
        const int h = blockIdx.y;
        g = p.head0 + h;
        const i64 rph = MODE == FC_ROW_DK ? 1 : p.B * (i64)p.hd * p.hd;
        first = (i64)h * rph;
        count = rph;
    } else {
        pj = (int)(j.job % jobs_per_row);
        first = j.job / jobs_per_row;
        count = 1;
        if (MODE == FC_ROW_SPECTRUM) g = p.head0 + (int)first;
        else g = fc_row(p, first < p.nrows ? first : 0).g;
    }
    const bool job_ok = pj < jobs_per_row;
    for (i64 it = 0; it < count; ++it) {
        const i64 row = first + it;
        const bool valid = job_ok && (MODE == FC_ROW_SPECTRUM ? row < p.nheads : MODE == FC_ROW_DK ? true : row < p.nrows);
        const i64 base = row << p.logm;
        if (MODE != FC_ROW_DK) {
            // (Half as many loads ahead in the correlation pass, whose registers are short.)
            fc_rows_io<(MODE == FC_ROW_CORR && FC_IO_BATCH > 1 ? FC_IO_BATCH / 2 : FC_IO_BATCH)>(p, x, j, pj, base, true, valid);
            __syncthreads();
            block_fft<-1>(x, q, tw);
        }
        const i64 srow = (i64)g * (m + 1);
        const i64 hrow = (i64)(g - p.head0) * (m + 1);  // per-launch head row of vbuf/sbuf
        const i64 vrow = row * (m + 1);                  // the row's saved spectrum
        // One pair (k, M − k): ka, kb are its Ks entries where the forward product or the saving pass
        // loaded them ahead.
        auto pair_step = [&](const FcPair& pr, float2 ka, float2 kb) {
            const bool dc = pr.k == 0;
            float2 Xa, Xb;  // 2X at k and M − k (dc: 2X[0], 2X[M] in .x)
            if (MODE != FC_ROW_DK) {
                if (dc) {
                    real_post0(x[FC_P(pr.fa)], Xa.x, Xb.x);
                    Xa.y = Xb.y = 0.f;
                } else {
                    real_post(x[FC_P(pr.fa)], x[FC_P(pr.fb)], fc_twiddle(pr.k, p.logm + 1), Xa, Xb);
                }
            }
            const i64 ia = pr.ka, ib = dc ? m : pr.kb;  // spectrum indices (Nyquist stored at M)
            float2 Ya, Yb;
            if (MODE == FC_ROW_SPECTRUM) {
                st2(p.spec, srow + ia, c_scale(Xa, inv4n));
                if (!pr.self) st2(p.spec, srow + ib, c_scale(Xb, inv4n));
                return;
            } else if (MODE == FC_ROW_CONV) {
                // The backward's saving pass would store the same values (same transform of the same row).
                if (p.vbuf) {
                    st2(p.vbuf, vrow + ia, Xa);
                    if (!pr.self) st2(p.vbuf, vrow + ib, Xb);
                }
                Ya = c_mul(Xa, ka);
                Yb = c_mul(Xb, kb);
            } else if (MODE == FC_ROW_SAVE) {
                st2(p.vbuf, vrow + ia, Xa);
                if (!pr.self) st2(p.vbuf, vrow + ib, Xb);
                if (!p.need_z) return;
                Ya = c_mul(Xa, ka);
                Yb = c_mul(Xb, kb);
            } else if (MODE == FC_ROW_CORR) {
                const float2 sa = c_mulc(Xa, ld2(p.vbuf, vrow + ia));
                const float2 sb = c_mulc(Xb, ld2(p.vbuf, vrow + ib));
                st2(p.sbuf, hrow + ia, it ? c_add(ld2(p.sbuf, hrow + ia), sa) : sa);
                if (!pr.self) st2(p.sbuf, hrow + ib, it ? c_add(ld2(p.sbuf, hrow + ib), sb) : sb);
                Ya = c_mulc(Xa, ld2(p.spec, srow + ia));
                Yb = c_mulc(Xb, ld2(p.spec, srow + ib));
            } else {  // FC_ROW_DK
                Ya = c_scale(ld2(p.sbuf, hrow + ia), inv4n);
                Yb = c_scale(ld2(p.sbuf, hrow + ib), inv4n);
            }
            if (dc) {
                x[FC_P(pr.fa)] = real_pre0(Ya.x, Yb.x);
            } else {
                float2 Za, Zb;
                real_pre(Ya, Yb, fc_twiddle(pr.k, p.logm + 1), Za, Zb);
                x[FC_P(pr.fa)] = Za;
                if (!pr.self) x[FC_P(pr.fb)] = Zb;
            }
        };
        if constexpr (MODE == FC_ROW_CONV || MODE == FC_ROW_SAVE) {
            // The pairs in batches of FC_ROW_AHEAD, their Ks entries loaded ahead of the batch's
            // shared-memory traffic (one load in flight per thread otherwise: see fc_col_load_inv).
            // The other modes keep one pair at a time: the correlation's registers are short (its
            // own loads beside these spilled 0.2–0.5 KB).
            for (int c0 = 0; c0 <= FC_E / 2; c0 += FC_ROW_AHEAD) {
                FcPair prs[FC_ROW_AHEAD];
                float2 ksa[FC_ROW_AHEAD], ksb[FC_ROW_AHEAD];
#pragma unroll
                for (int u = 0; u < FC_ROW_AHEAD; ++u) {
                    prs[u] = fc_pair(p, pj, j.slot, j.lt + j.tps * (c0 + u));
                    prs[u].ok = prs[u].ok && valid && c0 + u <= FC_E / 2;
                    if (prs[u].ok && (MODE == FC_ROW_CONV || p.need_z)) {
                        ksa[u] = ld2(p.spec, srow + prs[u].ka);
                        ksb[u] = ld2(p.spec, srow + (prs[u].k == 0 ? m : prs[u].kb));
                    }
                }
#pragma unroll
                for (int u = 0; u < FC_ROW_AHEAD; ++u)
                    if (prs[u].ok) pair_step(prs[u], ksa[u], ksb[u]);
            }
        } else {
            for (int c = 0; c <= FC_E / 2; ++c) {
                const FcPair pr = fc_pair(p, pj, j.slot, j.lt + j.tps * c);
                if (pr.ok && valid) pair_step(pr, make_float2(0.f, 0.f), make_float2(0.f, 0.f));
            }
        }
        if (MODE == FC_ROW_SPECTRUM || (MODE == FC_ROW_SAVE && !p.need_z)) {
            __syncthreads();
            continue;
        }
        __syncthreads();
        block_fft<1>(x, q, tw);
        fc_rows_io<1>(p, x, j, pj, base, false, valid);
        __syncthreads();
    }
}

// ---- hd > 1: head mixing ---------------------------------------------------------------------------
// Rows of this launch are heads [head0, head0 + nheads); element (b, channel c of those heads, t).

template <typename T, typename TO>
__device__ void fc_mix_fwd(const FcParams& p) {
    const i64 per_b = (i64)p.nheads * p.hd * p.L;
    const i64 total = p.B * per_b;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const int b = (int)(e / per_b);
        const i64 rem = e % per_b;
        const int hl = (int)(rem / ((i64)p.hd * p.L));
        const int jj = (int)((rem / p.L) % p.hd);
        const i64 t = rem % p.L;
        const int g = p.head0 + hl;
        float acc = 0.f;
        for (int i = 0; i < p.hd; ++i) {
            const i64 local = (((i64)hl * p.B + b) * p.hd + i) * p.hd + jj;
            float v = reinterpret_cast<const float*>(p.wsa)[local * p.L + t];
            if (p.has_post) v *= ld<T>(p.post, ((i64)b * p.H + (i64)g * p.hd + i) * p.L + t);
            acc += v;
        }
        const i64 oi = ((i64)b * p.H + (i64)g * p.hd + jj) * p.L + t;
        if (p.has_mask) acc *= reinterpret_cast<const float*>(p.mask)[(i64)b * p.H + (i64)g * p.hd + jj];
        st<TO>(p.out, oi, acc);
    }
}

template <typename T>
__device__ void fc_mix_bwd(const FcParams& p) {
    const i64 per_b = (i64)p.nheads * p.hd * p.L;
    const i64 total = p.B * per_b;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const int b = (int)(e / per_b);
        const i64 rem = e % per_b;
        const int hl = (int)(rem / ((i64)p.hd * p.L));
        const int c = (int)((rem / p.L) % p.hd);  // channel within the head: i for d_u/d_post, j for d_pregate
        const i64 t = rem % p.L;
        const int g = p.head0 + hl;
        const i64 rowc = ((i64)b * p.H + (i64)g * p.hd + c) * p.L;
        const float* dw = reinterpret_cast<const float*>(p.wsa);
        const float* dp = reinterpret_cast<const float*>(p.wsb);
        float du = 0.f, dpre = 0.f, dpost = 0.f;
        for (int o = 0; o < p.hd; ++o) {
            const i64 lij = (((i64)hl * p.B + b) * p.hd + c) * p.hd + o;  // (i = c, j = o)
            const i64 lji = (((i64)hl * p.B + b) * p.hd + o) * p.hd + c;  // (i = o, j = c)
            const i64 rowo = ((i64)b * p.H + (i64)g * p.hd + o) * p.L;
            const float pre_o = p.has_pre ? ld<T>(p.pre, rowo + t) : 1.f;
            du += dw[lij * p.L + t] * pre_o;
            if (p.has_pre) dpre += dw[lji * p.L + t] * ld<T>(p.u, rowo + t);
            if (p.has_post) dpost += dp[lij * p.L + t];
        }
        st<T>(p.du, rowc + t, du);
        if (p.has_pre) st<T>(p.dpre, rowc + t, dpre);
        if (p.has_post) st<T>(p.dpost, rowc + t, dpost);
    }
}

// ---- twiddle table ---------------------------------------------------------------------------------

extern "C" __global__ void fc_twiddles(float2* tw) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= FC_TW_TOTAL) return;
    // The flat table, or entry r·ns + k of a pass table: the angle −2π·num/den.
    double num = e, den = 1 << FC_TWN_LOG;
    if (e >= FC_TW_MIX40) {
        // The mixed-radix tables: N = 256·P, P = 40, 48, 56, 80, 96, 112, 160, 192, 224, entry
        // r·256 + k = exp(−2πi·r·k/N); each table follows the previous one.
        const int ps[9] = {40, 48, 56, 80, 96, 112, 160, 192, 224};
        int off = FC_TW_MIX40, t = 0;
        while (t < 8 && e >= off + 256 * ps[t]) off += 256 * ps[t++];
        num = (double)((e - off) >> 8) * ((e - off) & 255);
        den = 256 * ps[t];
    } else if (e >= FC_TW_PAIR32) {
        // The pair tables: N = 8192 << i from offset FC_TW_PAIR32 + (8192 << i) − 8192.
        int off = FC_TW_PAIR32, size = 8192;
        while (e >= off + size) {
            off += size;
            size <<= 1;
        }
        num = (double)((e - off) >> 8) * ((e - off) & 255);
        den = size;
    } else if (e >= (1 << FC_TWN_LOG)) {
        num = 0.0;  // the 2 unused slots at the end
        for (int a = 0; a <= 3; ++a)
            for (int lr = 1; lr <= 4; ++lr) {
                const int ns = 1 << (4 * a), size = ns << lr, off = FC_STAGE_TW(4 * a, lr);
                if (4 * a + lr <= 14 && e >= off && e < off + size) {
                    const int r = (e - off) / ns, k = (e - off) % ns;
                    num = (double)r * k;
                    den = size;
                }
            }
    }
    double s, c;
    sincospi(-2.0 * num / den, &s, &c);
    tw[e] = make_float2((float)c, (float)s);
}

// The per-lane DFT-16 / W_256 table of the tensor-core kernels (tc_table_fill), once per device, after
// the twiddles in the same buffer (one warp).
extern "C" __global__ void fc_tc_table(float2* tw) { tc_table_fill(reinterpret_cast<unsigned*>(tw + FC_TW_TOTAL), tw); }

// ---- entry points ----------------------------------------------------------------------------------

// Registers: 256-thread CTAs capped at 85 (3 CTAs per SM, 24 warps; uncapped the forward took 98
// and ran 2 CTAs per SM); 512 and 1024 at 64.
#ifdef FC_MINB
#elif FC_BLOCK <= 128
#define FC_MINB 4
#elif FC_BLOCK == 256
#define FC_MINB 3
#elif FC_BLOCK == 512
#define FC_MINB 2
#else
#define FC_MINB 1
#endif
#define FC_LB __launch_bounds__(FC_BLOCK, FC_MINB)

extern "C" __global__ void FC_LB fc_spectrum(FcParams p) { ember_grid_dependency_wait(); fc_spectrum_onchip(p); }
extern "C" __global__ void FC_LB fc_dk(FcParams p) { ember_grid_dependency_wait(); fc_dk_onchip(p); }
extern "C" __global__ void FC_LB fc_col_filter_k(FcParams p) { ember_grid_dependency_wait(); fc_col_filter(p); }
extern "C" __global__ void FC_LB fc_col_dk_k(FcParams p) { ember_grid_dependency_wait(); fc_col_dk(p); }
extern "C" __global__ void FC_LB fc_row_spectrum(FcParams p) { ember_grid_dependency_wait(); fc_row_pass<FC_ROW_SPECTRUM>(p); }
extern "C" __global__ void FC_LB fc_row_conv(FcParams p) { ember_grid_dependency_wait(); fc_row_pass<FC_ROW_CONV>(p); }
extern "C" __global__ void FC_LB fc_row_save(FcParams p) { ember_grid_dependency_wait(); fc_row_pass<FC_ROW_SAVE>(p); }
extern "C" __global__ void FC_LB fc_row_corr(FcParams p) { ember_grid_dependency_wait(); fc_row_pass<FC_ROW_CORR>(p); }
extern "C" __global__ void FC_LB fc_row_dk(FcParams p) { ember_grid_dependency_wait(); fc_row_pass<FC_ROW_DK>(p); }

#define FC_TYPED(T, TO, NAME)                                                                        \
    extern "C" __global__ void FC_LB fc_fwd_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_fwd_onchip<T, TO>(p); }          \
    extern "C" __global__ void FC_LB fc_bwd_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_bwd_onchip<T, TO>(p); }          \
    extern "C" __global__ void FC_LB fc_col_data_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_col_data<T>(p); }           \
    extern "C" __global__ void FC_LB fc_col_out_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_col_out<T, TO>(p); }         \
    extern "C" __global__ void FC_LB fc_col_dz_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_col_dz<T, TO>(p); }           \
    extern "C" __global__ void FC_LB fc_col_dw_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_col_dw<T>(p); }               \
    extern "C" __global__ void FC_LB fc_mix_fwd_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_mix_fwd<T, TO>(p); }         \
    extern "C" __global__ void FC_LB fc_mix_bwd_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_mix_bwd<T>(p); }
FC_TYPED(float, float, f32_f32)
FC_TYPED(ember_f16, ember_f16, f16_f16)
FC_TYPED(ember_f16, float, f16_f32)
FC_TYPED(ember_bf16, ember_bf16, bf16_bf16)
FC_TYPED(ember_bf16, float, bf16_f32)
extern "C" __global__ void FC_LB fc_fwd_tc_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_onchip_tc<ember_bf16, ember_bf16>(p); }
extern "C" __global__ void FC_LB fc_fwd_tc_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_onchip_tc<ember_bf16, float>(p); }
