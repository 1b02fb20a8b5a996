// The pair backwards (pair_tc.cuh's engine) and the fold of their filter-gradient partials.
// Compiled after pair_tc.cuh.
#if FC_BLOCK == 256

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
// Work split: R pair slots per CTA (32/P, or fewer for small P: the `g{R}` entries); slot s = blockIdx.x·R + r is chunk c = s mod parts of
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

// The NE inputs w = u (× pregate when `pre`) of both rows at offsets m·2^SH (m < NE) of the P ≥ 64
// backwards (NE = 16; R/2 on the mixed-radix clusters); zero past L.
template <int SH, int NE, typename T, typename TO>
__device__ __forceinline__ void fb_load16(const FcParams& p, float2 (&y)[NE], bool pre, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb) {
    // All u loads first, in one basic block (as fp_load16).
#pragma unroll
    for (int m = 0; m < NE; ++m) {
        const int o = m << SH;
        y[m] = make_float2(o < fa.len ? ember_to_f32(fa.u(p)[o]) : 0.f, o < fb.len ? ember_to_f32(fb.u(p)[o]) : 0.f);
    }
    if (pre) {
#pragma unroll
        for (int m = 0; m < NE; ++m) {
            const int o = m << SH;
            y[m].x *= o < fa.len ? ember_to_f32(fa.pre(p)[o]) : 0.f;
            y[m].y *= o < fb.len ? ember_to_f32(fb.pre(p)[o]) : 0.f;
        }
    }
}

// f16 pair (low half = real part) → float2.
__device__ __forceinline__ float2 fb_unpack(unsigned v) {
    float lo, hi;
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}" : "=f"(lo), "=f"(hi) : "r"(v));
    return make_float2(lo, hi);
}

// Elements per batch of the backward's epilogues: loads of a batch are issued before its arithmetic.
// At P = 32 the column's 32 values already take 64 registers of the 128 of two CTAs per SM.
// (A batch divides P: the mixed-radix backward's 10, 12, 14 elements per thread go in halves.)
template <int P> constexpr int fb_batch() { return P < 8 ? P : P == 32 ? 4 : P % 8 == 0 ? 8 : P / 2; }

// d_z of both rows for n1 < n into a[] (zero past L and for n1 ≥ n). With GELU or POST, a[] holds
// the recomputed z (times inv1·ks, as the forward's epilogue); with ZM the forward's saved z (p.zs)
// is loaded into a[] with the batch's other loads instead (no further registers).
// Element n1 sits at offset n1·2^SH.
// SDS > 0 (P = 16 of the staged P = 128 backward, bf16 d_out): each batch of 8 elements is one
// half of the lane's column, and `stage(c0)` first copies that half of both d_out rows into shared
// memory by 16-byte loads (its own barriers); the lane then reads element c0 + i at sd.a/b[i·SDS].
struct FbStaged {
    const unsigned short* a;
    const unsigned short* b;
};
struct FbNoStage {
    __device__ void operator()(int) const {}
};
template <int P, bool GELU, bool POST, int SH = 8, bool ZM = false, int SDS = 0, typename T, typename TO, typename F = FbNoStage>
__device__ __forceinline__ void fb_dz(const FcParams& p, float2 (&a)[P], int n, float inv1, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb, const FbStaged& sd = {}, const F& stage = {}) {
    constexpr int CH = fb_batch<P>();
    static_assert(SDS == 0 || (P == 16 && CH == 8), "staged d_out: two halves of 8");
#pragma unroll
    for (int c0 = 0; c0 < P; c0 += CH) {
        float ga[CH], gb[CH], pa[CH], pb[CH];
        if constexpr (SDS > 0) stage(c0);
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int n1 = c0 + i, o = n1 << SH;
            const bool va = n1 < n && o < fa.len, vb = n1 < n && o < fb.len;
            if constexpr (SDS > 0) {
                ga[i] = va ? __uint_as_float((unsigned)sd.a[i * SDS] << 16) : 0.f;
                gb[i] = vb ? __uint_as_float((unsigned)sd.b[i * SDS] << 16) : 0.f;
            } else {
                ga[i] = va ? ember_to_f32(fa.dout(p)[o]) : 0.f;
                gb[i] = vb ? ember_to_f32(fb.dout(p)[o]) : 0.f;
            }
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
template <int P, int SH, bool ZM, int SDS = 0, typename T, typename TO, typename F = FbNoStage>
__device__ __forceinline__ void fb_dz_sel(const FcParams& p, float2 (&a)[P], int n, float inv1, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb, const FbStaged& sd = {}, const F& stage = {}) {
    switch ((p.gelu ? 2 : 0) | (p.has_post ? 1 : 0)) {
        case 0: fb_dz<P, false, false, SH, false, SDS>(p, a, n, inv1, ks, fa, fb, sd, stage); break;
        case 1: fb_dz<P, false, true, SH, ZM, SDS>(p, a, n, inv1, ks, fa, fb, sd, stage); break;
        case 2: fb_dz<P, true, false, SH, ZM, SDS>(p, a, n, inv1, ks, fa, fb, sd, stage); break;
        default: fb_dz<P, true, true, SH, ZM, SDS>(p, a, n, inv1, ks, fa, fb, sd, stage); break;
    }
}

// The staged d_out of the P = 128 backward (STG with bf16 d_out): half hh (n1 < NR/2 or ≥) of
// both rows' columns of this CTA, laid out as fpc_stage_u's copy (HR = NR/2 rows of SW words per
// row), after the backward's shared memory (FB_STG_OFF; 17 KB: the whole copy would not fit beside
// the segments and W). Two 16-byte chunks per thread (fpc_copy_rows).
#define FB_STG_OFF ((64 * (256 * 8 + 1024) + TC_TAB_WORDS * 32 * 4 + 2 * 48 + 8 + 15) & ~15)
template <int CS>
__device__ __forceinline__ void fb_stage_dout(const FcParams& p, const FcRow& ra, const FcRow& rb, unsigned rank, int hh, unsigned* __restrict__ stg) {
    constexpr int HR = FpcStg<CS>::NR / 2;
    if (hh > 0) __syncthreads();  // every lane has read the first half
    fpc_copy_rows<CS, HR>(p, reinterpret_cast<const ember_bf16*>(p.dout), ra, rb, rank, hh * HR, stg);
    __syncthreads();
}

// fb_dz_sel with d_out from fb_stage_dout (STG at P = 128 with bf16 d_out) or from global memory:
// lane j of column n2, T = 2·CS lanes per column (element m of the lane at n1 = T·m + j: half m / 8,
// row T·(m mod 8) + j of it). H200, same run against u staged alone: P = 128 (L = 16384) fwd+bwd
// −2.0 %, training −3.4 %; at P = 64 (L = 5000) −1.5 % but training +3.4 % (the two barriers per
// pair cost more where two lanes per column already load whole sectors), so P = 64 loads directly.
// At mixed radix (NE = R/2 ≠ 16) d_out is read directly.
template <int CS, int SH, bool ZM, bool STG, int NE, typename T, typename TO>
__device__ __forceinline__ void fb_dz_staged(const FcParams& p, float2 (&a)[NE], float inv1, float ks, const FbRow<T, TO>& fa, const FbRow<T, TO>& fb, const FcRow& ra, const FcRow& rb, unsigned rank, int n2, int j) {
    if constexpr (STG && FpIsBf16<TO>::v && CS == 2 && NE == 16) {
        using S = FpcStg<CS>;
        FC_SMEM_DECL
        unsigned* stg = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(fc_smem) + FB_STG_OFF);
        const unsigned short* h = reinterpret_cast<const unsigned short*>(stg) + j * 2 * S::SW + (n2 - (int)rank * S::COLS);
        const FbStaged sd{h, h + (S::NR / 2) * 2 * S::SW};
        const auto stage = [&](int c0) { fb_stage_dout<CS>(p, ra, rb, rank, c0 >> 3, stg); };
        fb_dz_sel<16, SH, ZM, 2 * CS * 2 * S::SW>(p, a, 16, inv1, ks, fa, fb, sd, stage);
    } else {
        fb_dz_sel<NE, SH, ZM>(p, a, NE, inv1, ks, fa, fb);
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

template <int LOGP, bool ZM, typename T, typename TO, int R = (32 >> LOGP)>
__device__ void fc_bwd_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, LOGN = LOGP + 8;
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
        fp_stage1_pairs<P, T, TO, R>(p, rows, x, n2, pos, half, wtab, pmax);
        __syncthreads();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        for (int sg = threadIdx.x >> 5; sg < R * P; sg += 8) {
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
        for (int sg = threadIdx.x >> 5; sg < R * P; sg += 8) {
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
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, false, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, false, ember_bf16, float>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##z_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, true, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##z_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, true, ember_bf16, float>(p); }
FC_BWD_PAIR_ENTRIES(1)
FC_BWD_PAIR_ENTRIES(2)
FC_BWD_PAIR_ENTRIES(3)
FC_BWD_PAIR_ENTRIES(4)
FC_BWD_PAIR_ENTRIES(5)
// Narrow slot groups (R = 16/P slots per CTA: 16 segments) at P = 2 and 4; the partial of
// slot s is tbuf's entry s whatever R is, so at the same pairs per slot the bits are the wide kernel's.
#define FC_BWD_PAIR_NARROW(LOGP, R)                                                                                              \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##g##R##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, false, ember_bf16, ember_bf16, R>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##g##R##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, false, ember_bf16, float, R>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##g##R##z_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, true, ember_bf16, ember_bf16, R>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FC_PAIR_BWD_MINB) fc_bwd_pair##LOGP##g##R##z_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair<LOGP, true, ember_bf16, float, R>(p); }
FC_BWD_PAIR_NARROW(1, 8)
FC_BWD_PAIR_NARROW(2, 4)

// The backward at N = 16384 (P = 64, L ≤ N/2): fc_bwd_pair's phases for one row pair per CTA of
// 512 threads, two threads per column as fc_fwd_pair64 (stage 1 and its inverse by fp64_stage1 /
// fp64_stage1_inv; thread h's 16 elements n1 = 2m + h sit at offset h·256 + m·512, so the
// epilogues run over 16 elements at stride 2^9 on rows offset by h·256). Slot = CTA: the CTA takes
// the chunk blockIdx.x mod parts of head blockIdx.x / parts. Shared memory: 64 segments of data
// (128 KB), their W as f16 pairs (64 KB), the per-lane table, two rows: one CTA (16 warps) per SM.
// STG: stage 1 of w reads u from fpc_stage_u<1>'s copy, made in the W area (as fc_bwd_pairc).
template <bool ZM, typename T, typename TO, bool STG = false>
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
        fp_slot_pair_rows(p, rows, pmax, blockIdx.x, it, ppc, rph, pph);
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
            if constexpr (STG) {
                fpc_load_staged<1>(y, p, ra, rb, 0, n2, h, reinterpret_cast<unsigned*>(wsave));
            } else {
                fb_load16<9>(p, y, pre, fa, fb);
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
            fb_dz_staged<1, 9, ZM, STG>(p, a, inv1, ks, fa, fb, ra, rb, 0, n2, h);
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

// Each with its staged-u variant (STG; fc_bwd_pair_staged6*, the host's choice).
#define FP64_BWD(ZM, ZS, TO, SFX) \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair6##ZS##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair64<ZM, ember_bf16, TO>(p); } \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pair_staged6##ZS##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pair64<ZM, ember_bf16, TO, true>(p); }
FP64_BWD(false, , ember_bf16, bf16)
FP64_BWD(false, , float, f32)
FP64_BWD(true, z, ember_bf16, bf16)
FP64_BWD(true, z, float, f32)

#if __CUDA_ARCH__ >= 900  // clusters (P = 128)
// The backward at N = 32768 (P = 128, L ≤ N/2): fc_bwd_pair64's phases on a cluster of two CTAs as
// fc_fwd_pair128 (each CTA: half the columns in stage 1 and its inverse, half the segments and
// their W in between). Slot = cluster: cluster blockIdx.x / 2 takes chunk (cluster mod parts) of
// head cluster / parts; its filter-gradient partial is one N-bin slot of tbuf, each CTA writing
// its own segments' bins. Cluster barriers where a phase reads or writes the peer's shared memory.
// STG (bf16 u without pregate, L % 8 = 0, 16-byte aligned u: the host's choice, as the forward's):
// stage 1 of w reads u from fpc_stage_u's copy, made in the W area (free until this pair's
// segments: the previous pair's last reads of it end before the loop's first cluster barrier).
//
// Written for any cluster the forward runs on (fpc_lane: CS = 2 or 4 CTAs, lane DFTs of R = 32 points
// or the mixed-radix 20, 24, 28): each CTA holds SEG = 2R segments and their W, a lane R/2 elements
// n1 = T·m + j (offset j·256 + m·T·256). The staged d_out is built for P = 128 alone (FB_STG_OFF).
template <int CS, int R, bool ZM, typename T, typename TO, bool STG = false>
__device__ void fc_bwd_pairc(const FcParams& p) {
    using L = FpcLane<CS, R>;
    constexpr int N = L::N, SEG = L::SEG, SH = 8 + L::TL, NE = R / 2;
    constexpr i64 HN = N / 2;  // float4 per N-bin spectrum or partial
    FC_SMEM_DECL
    float2* x = fc_smem;
    uint4* wsave = reinterpret_cast<uint4*>(x + SEG * 256);  // [segment][j][lane]
    unsigned* tab = reinterpret_cast<unsigned*>(wsave + SEG * 64);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);                     // [0]: w, [1]: d_z
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const unsigned rank = fp_cluster_rank();
    const L l = fpc_lane<CS, R>(x, pmax);
    const int n2 = l.n2, off = l.j << 8;
    const bool pre = p.has_pre, need_z = !ZM && p.need_z;
    const i64 rph = p.B;  // rows per head (hd = 1)
    const i64 pph = (rph + 1) / 2;
    const i64 ppc = (pph + p.parts - 1) / p.parts;
    const i64 slot = blockIdx.x / CS;
    const float2* wtab = tw + L::TW + n2;
    const float4* spec = reinterpret_cast<const float4*>(p.spec);
    const float* kscale = reinterpret_cast<const float*>(p.spec) + (i64)p.heads * 2 * N;
    // This CTA's segments k1 = SEG·rank + sg in the slot's partial (fragment order, 128 float4 each).
    float4* tslot = reinterpret_cast<float4*>(p.tbuf) + slot * HN + (i64)rank * (HN / CS);
#pragma unroll 1
    for (i64 it = 0; it < ppc; ++it) {
        fp_slot_pair_rows(p, rows, pmax, slot, it, ppc, rph, pph);
        // Rows set and maxima zeroed in both CTAs (and the previous pair's phase 3 done) before any
        // remote access.
        fp_cluster_sync();
        const FcRow ra = rows[0], rb = rows[1];
        // Uniform over the cluster; chunks are consecutive pairs, so no later pair is valid either.
        if (!ra.valid) break;
        FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
        fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
        const i64 kseg = (i64)ra.g * HN + (i64)rank * (HN / CS);
        // ---- phase 1, stage 1: w.
        {
            float2 y[NE];
            if constexpr (STG) {
                fpc_load_staged<CS, R>(y, p, ra, rb, rank, l.n2, l.j, reinterpret_cast<unsigned*>(wsave));
            } else {
                fb_load16<SH>(p, y, pre, fa, fb);
            }
            fpc_stage1<CS, R>(y, l, tw, wtab, 0);
        }
        fp_cluster_sync();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        float s1, inv1;
        fp_pair_scale(pmax[0], s1, inv1);
        for (int sg = threadIdx.x >> 5; sg < SEG; sg += 16) fb_segment_w(x + sg * 256, spec + kseg + (sg << 7), tab, s1, wsave + sg * 64, need_z);
        // The peer's segments are done before this CTA reads them (z) or writes d_z's stage 1 there.
        fp_cluster_sync();
        // ---- phase 1 epilogue (z → d_z), phase 2 stage 1 (d_z), in registers: a thread writes
        // exactly the elements it read.
        const float ks = kscale[ra.g];
        {
            float2 a[NE];
            if (need_z) fpc_stage1_inv<CS, R>(a, l, tw, wtab);
            fb_dz_staged<CS, SH, ZM, STG>(p, a, inv1, ks, fa, fb, ra, rb, rank, n2, l.j);
            fpc_stage1<CS, R>(a, l, tw, wtab, 4);
        }
        fp_cluster_sync();
        // ---- phase 2, segments: T, × conj(K̂), inverse.
        float s2, inv2;
        fp_pair_scale(pmax[1], s2, inv2);
        for (int sg = threadIdx.x >> 5; sg < SEG; sg += 16)
            fb_segment_g(x + sg * 256, spec + kseg + (sg << 7), tab, s2, wsave + sg * 64, tslot + (sg << 7), inv1, inv2, it == 0);
        fp_cluster_sync();
        // ---- phase 3: inverse stage 1 (d_w, both CTAs' segments) and its epilogue.
        {
            float2 a[NE];
            fpc_stage1_inv<CS, R>(a, l, tw, wtab);
            if (pre) fb_dw<NE, true, SH>(p, a, NE, inv2, ks, fa, fb);
            else fb_dw<NE, false, SH>(p, a, NE, inv2, ks, fa, fb);
        }
    }
    // The peer is done reading this CTA's shared memory before either exits (also after a break:
    // both CTAs take it at the same pair).
    fp_cluster_sync();
}

// Each with its staged variant (STG; fc_bwd_pair_staged7*, the host's choice).
#define FP128_BWD(ZM, ZS, TO, SFX) \
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_bwd_pair7##ZS##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<2, 32, ZM, ember_bf16, TO>(p); } \
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_bwd_pair_staged7##ZS##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<2, 32, ZM, ember_bf16, TO, true>(p); }
FP128_BWD(false, , ember_bf16, bf16)
FP128_BWD(false, , float, f32)
FP128_BWD(true, z, ember_bf16, bf16)
FP128_BWD(true, z, float, f32)

// The cluster backward at the mixed-radix sizes (P = 80, 96, 112 on clusters of 2, 160, 192, 224 on
// clusters of 4; FPC_MIXED_SIZES) and at P = 256 (clusters of 4, N = 65536): fc_bwd_pairm{P}{z} with u
// read directly, fc_bwd_pairms{P}{z} staged (the forward's condition); d_out read directly. Their
// filter gradient is fc_dk_pairm{P} (pair_mixed.cuh).
#define FPC_BWD_ENTRIES(P, CS, R)                                                                                                                                               \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairm##P##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, false, ember_bf16, ember_bf16>(p); }        \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairm##P##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, false, ember_bf16, float>(p); }             \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairm##P##z_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, true, ember_bf16, ember_bf16>(p); }       \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairm##P##z_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, true, ember_bf16, float>(p); }            \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairms##P##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, false, ember_bf16, ember_bf16, true>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairms##P##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, false, ember_bf16, float, true>(p); }      \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairms##P##z_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, true, ember_bf16, ember_bf16, true>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_bwd_pairms##P##z_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairc<CS, R, true, ember_bf16, float, true>(p); }
FPC_MIXED_SIZES(FPC_BWD_ENTRIES)
FPC_BWD_ENTRIES(256, 4, 32)

#endif  // __CUDA_ARCH__ >= 900

// The filter-gradient spectrum of the pair backward, one thread per (head of the launch, bin
// k ≤ M = N/2): S[k] = 2·(T[k] + conj T[(N − k) mod N]) summed over the head's `parts` partials in
// order, i.e. 4·Σ_rows G_r·conj(W_r), written where fc_dk (parts = 1) reads it.
extern "C" __global__ void fc_dk_pair(FcParams p) { ember_grid_dependency_wait();
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
