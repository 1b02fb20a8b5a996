// The pair engine at mixed-radix sizes N = 256·P, P = 2Q ∈ {40, 48, 56} (N = 10240, 12288, 14336).
// Compiled after pair_tc.cuh and pair_spec.cuh.
//
// Why. N was the smallest power of two ≥ L + Lk − 1, so 4096 < L ≤ 7168 with a full-length filter
// paid N = 16384 (L = 5000: 1.64× the points of N = 10240, which is enough). The pair engine's
// segments are DFT-256 on tensor cores whatever P is; only stage 1 (the P-point DFT down each
// column, in registers) and its twiddle table depend on P. So these kernels are fc_fwd_pair64 /
// fc_spec_pair64 (two threads per column, L ≤ N/2) with P = 2Q: thread h of column n2 takes
// n1 = 2m + h (m < Q/2: L ≤ N/2, so n1 < P/2 = Q), forms the Q-point DFT of its Q/2 inputs as two
// Q/2-point DFTs (Q/2 = 10, 12, 14: a Cooley–Tukey split into an odd factor 5, 3, 7 done directly
// and a factor 2 or 4), then the radix-2 step across the two threads by shuffle, the twiddle
// W_N^(n2·k1) from its table and the store of segment k1 = k + Q·h. The inverse mirrors it.
// Index and twiddle arithmetic: the host model in tests.rs (mixed_stage1_model_matches_the_dft).
#if FC_BLOCK == 256

// Stage 1 at P = 2Q for thread h of column n2 (at `pos`): y[m] = the pair's input at n1 = 2m + h
// (m < Q/2). Y = DFT_Q of y, then the radix-2 step across the two threads: thread h keeps
// X[k + Q·h] = Y0[k] ± W_P^k·Y1[k] (the partner's Y by shuffle), times W_N^(n2·k1) (wtab offset by
// n2: entry k1·256), stored at x[k1·256 + pos]; with MAX the pair's largest component into *pmax
// (the forward takes its pair scale from the row maxima instead: fp_pair_scale_rows).
template <int Q, bool MAX = true>
__device__ __forceinline__ void fq_stage1(const float2 (&y)[Q / 2], int h, float2* __restrict__ x, int pos, const float2* __restrict__ wtab, int* pmax) {
    float2 a[Q];
    fq_dft_half<Q>(y, a);
    float mx = 0.f;
#pragma unroll
    for (int k = 0; k < Q; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        const float2 y0 = h == 0 ? a[k] : other, y1 = h == 0 ? other : a[k];
        const float2 t = k == 0 ? y1 : c_mul(y1, fq_w<2 * Q, -1>(k));
        const float2 v0 = h == 0 ? c_add(y0, t) : c_sub(y0, t);
        const int k1 = k + Q * h;
        const float2 v = k1 == 0 ? v0 : c_mul(v0, wtab[k1 << 8]);
        if (MAX) mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
        x[k1 * 256 + pos] = v;
    }
    if (!MAX) return;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) atomicMax(pmax, __float_as_int(mx));
}

// Inverse of fq_stage1: thread h takes B[k + Q·h]·conj(W_N^(n2·k1)); thread 0 forms B[k] + B[k + Q]
// (the even outputs), thread 1 (B[k] − B[k + Q])·W_P^−k (the odd ones); then the first Q/2 outputs
// of each inverse Q-point DFT: o[m] = output n1 = 2m + h.
template <int Q>
__device__ __forceinline__ void fq_stage1_inv(float2 (&o)[Q / 2], int h, const float2* __restrict__ x, int pos, const float2* __restrict__ wtab) {
    float2 a[Q];
#pragma unroll
    for (int k = 0; k < Q; ++k) {
        const int k1 = k + Q * h;
        const float2 v = x[k1 * 256 + pos];
        a[k] = k1 == 0 ? v : c_mulc(v, wtab[k1 << 8]);
    }
#pragma unroll
    for (int k = 0; k < Q; ++k) {
        const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1), __shfl_xor_sync(0xffffffffu, a[k].y, 1));
        if (h == 0) {
            a[k] = c_add(a[k], other);
        } else {
            const float2 d = c_sub(other, a[k]);
            a[k] = k == 0 ? d : c_mul(d, fq_w<2 * Q, 1>(k));
        }
    }
    fq_idft_first_half<Q>(a, o);
}

// Rows a and b of column n2 for thread h, whose elements n1 = 2m + h sit at offset h·256 + m·512:
// the forward's descriptors moved on by h·256.
template <typename T, typename TO>
__device__ __forceinline__ void fq_col_rows(const FcParams& p, const FcRow& ra, const FcRow& rb, int n2, int h, FpRow<T, TO>& fa, FpRow<T, TO>& fb) {
    fa = fp_row<T, TO>(p, ra, n2);
    fb = fp_row<T, TO>(p, rb, n2);
    fp_row_shift(fa, h << 8);
    fp_row_shift(fb, h << 8);
}

// Offset (float2) of the twiddle table W_N^(n2·k1), N = 512·Q (fft.cuh).
template <int Q> struct FqTw {
    static constexpr int OFF = Q == 20 ? FC_TW_MIX40 : Q == 24 ? FC_TW_MIX48 : FC_TW_MIX56;
};

// Stage 1 of the mixed forward's pair, column by column: y[m] = x[2m + h], m < Q/2 (all u loads
// first, then the pregate's), times `s` (fp_balance's input factors; 1 on the first pass). Thread h's
// elements n1 = 2m + h sit at offset h·256 + m·512: the rows moved on by h·256. With `ma`, `mb`, the
// thread's largest |input| of each row (before `s`) is folded into them.
template <int Q, typename T, typename TO, int NT>
__device__ __forceinline__ void fq_stage1_cols(const FcParams& p, const FcRow& ra, const FcRow& rb, int h, float2* __restrict__ x, const float2* __restrict__ tw, int* pmax, float2 s, float* ma, float* mb) {
    constexpr int CPT = 512 / NT;
#pragma unroll 1
    for (int c = 0; c < CPT; ++c) {
        const int n2 = (threadIdx.x >> 1) + c * (NT / 2);
        FpRow<T, TO> fa, fb;
        fq_col_rows(p, ra, rb, n2, h, fa, fb);
        float2 y[Q / 2];
#pragma unroll
        for (int m = 0; m < Q / 2; ++m) {
            const int o = m << 9;
            y[m] = make_float2(o < fa.len ? ember_to_f32(fa.u[o]) : 0.f, o < fb.len ? ember_to_f32(fb.u[o]) : 0.f);
        }
        if (p.has_pre) {
#pragma unroll
            for (int m = 0; m < Q / 2; ++m) {
                const int o = m << 9;
                y[m].x *= o < fa.len ? ember_to_f32(fa.pre[o]) : 0.f;
                y[m].y *= o < fb.len ? ember_to_f32(fb.pre[o]) : 0.f;
            }
        }
        if (ma) fp_rows_absmax<Q / 2>(y, *ma, *mb);
        else fp_rows_scale(y, s);
        // W_N^(n2·k1) at k1·256 of the table offset by n2 (the pair scale from the row maxima).
        fq_stage1<Q, false>(y, h, x, fp_idx(n2 >> 4, n2 & 15), tw + FqTw<Q>::OFF + n2, &pmax[0]);
    }
}

// The forward at P = 2Q (fc_fwd_pair64's design): one row pair per CTA, two threads per column, 2Q
// segments of 256 (80 – 112 KB). NT = 512: a thread per column half (one CTA per SM: 512 × 128
// registers fill the register file). NT = 256: each thread pair takes columns c and c + 128 one after
// the other (same per-column code, same bits), so two CTAs share an SM where their shared memory fits
// (P = 40, 48) and one CTA's barrier waits overlap the other's work; and 2Q segments spread evenly
// over 8 warps (40 over 16 took three rounds on some warps and two on others).
template <int Q, typename T, typename TO, int NT = 512>
__device__ void fc_fwd_pairq(const FcParams& p) {
    constexpr int P = 2 * Q, N = 256 * P, CPT = 512 / NT, NW = NT / 32;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + P * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);  // [1], [2]: the rows' largest |input| ([0] unused: fp_pair_scale_rows)
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, NT);
    const int h = threadIdx.x & 1;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    fp_one_pair_rows(p, rows, pmax, blockIdx.x, rph, pph);
    __syncthreads();
    const FcRow ra = rows[0], rb = rows[1];
    if (!ra.valid) return;  // uniform over the CTA
    // ---- stage 1, column by column (fq_stage1_cols); again with the rows rebalanced where they are
    // binades apart (fp_balance).
    {
        float ma = 0.f, mb = 0.f;
        fq_stage1_cols<Q, T, TO, NT>(p, ra, rb, h, x, tw, pmax, make_float2(1.f, 1.f), &ma, &mb);
        fp_rows_max_commit(ma, mb, &pmax[1]);
    }
    __syncthreads();
    const FpBal bal = fp_balance(pmax[1], pmax[2]);
    if (bal.redo) {  // uniform over the CTA
        fq_stage1_cols<Q, T, TO, NT>(p, ra, rb, h, x, tw, pmax, bal.s, nullptr, nullptr);
        __syncthreads();
    }
    // ---- stage 2: the 2Q segments over the warps (pair scale from the row maxima: fp_pair_scale_rows).
    float s1, inv1;
    fp_pair_scale_rows(&pmax[1], Q, s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < P; sg += NW) {
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + (i64)ra.g * (N / 2) + sg * 128;
        fp_segment(x + sg * 256, kf, tab, s1);
    }
    __syncthreads();
    // ---- inverse stage 1 and the epilogue (elements m < Q/2 at stride 512), column by column.
    const float ks = reinterpret_cast<const float*>(p.spec)[(i64)p.heads * 2 * N + ra.g];
    const int sel = fp_epilogue_flags(p);
#pragma unroll 1
    for (int c = 0; c < CPT; ++c) {
        const int n2 = (threadIdx.x >> 1) + c * (NT / 2);
        FpRow<T, TO> fa, fb;
        fq_col_rows(p, ra, rb, n2, h, fa, fb);
        float2 o[Q / 2];
        fq_stage1_inv<Q>(o, h, x, fp_idx(n2 >> 4, n2 & 15), tw + FqTw<Q>::OFF + n2);
        fp_epilogue_sel<Q / 2, 9>(sel, o, Q / 2, fp_out_factors(inv1, bal), ks, fa, fb);
    }
}

// The filter spectrum at P = 2Q (fc_spec_pair64's design): one head per CTA of 512 threads.
template <int Q>
__device__ void fc_spec_pairq(const FcParams& p) {
    constexpr int P = 2 * Q, N = 256 * P;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + P * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [0]: stage 1's max, [1]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, 512);
    if (threadIdx.x < 2) pmax[threadIdx.x] = 0;
    __syncthreads();
    const int g = blockIdx.x, h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    {
        float2 y[Q / 2];
#pragma unroll
        for (int m = 0; m < Q / 2; ++m) y[m] = make_float2(fp_keff_k(p, g, (2 * m + h) * 256 + n2), 0.f);
        if (threadIdx.x == 0) y[0].x += fp_keff_d(p, g);  // t = 0: h = 0, n2 = 0
        fq_stage1<Q>(y, h, x, pos, tw + FqTw<Q>::OFF + n2, &pmax[0]);
    }
    __syncthreads();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < P; sg += 16) fp_warp_max_to(fp_spec_segment(x + sg * 256, tab, s1), &pmax[1]);
    __syncthreads();
    fp_spec_out(x, reinterpret_cast<float2*>(p.spec) + (i64)g * N, P * 256, pmax[1], inv1, 1.f / N, reinterpret_cast<float*>(p.spec) + (i64)p.heads * 2 * N + g, threadIdx.x == 0, 512);
}

#define FQ_ENTRIES(Q)                                                                                                                        \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pairq##Q##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairq<Q, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pairq##Q##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairq<Q, ember_bf16, float>(p); }     \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_spec_pairq##Q(FcParams p) { ember_grid_dependency_wait(); fc_spec_pairq<Q>(p); }
FQ_ENTRIES(20)
FQ_ENTRIES(24)
FQ_ENTRIES(28)
// Two columns per thread pair, two CTAs per SM (P = 40, 48: 86 / 102 KB of shared memory each).
#define FQ_ENTRIES_NARROW(Q)                                                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pairq##Q##n_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairq<Q, ember_bf16, ember_bf16, 256>(p); } \
    extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pairq##Q##n_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairq<Q, ember_bf16, float, 256>(p); }
FQ_ENTRIES_NARROW(20)
FQ_ENTRIES_NARROW(24)

#endif  // FC_BLOCK == 256

#if FC_BLOCK == 256
// ---- The backward at P = 2Q (fc_bwd_pair64's phases, pair_bwd.cuh) and its filter gradient --------

// One row-pair slot per CTA of 512 threads, two threads per column: thread h's Q/2 elements n1 = 2m + h
// sit at offset h·256 + m·512. The CTA takes chunk blockIdx.x mod parts of head blockIdx.x / parts;
// its partial T = Σ G·conj(W) (fragment order, N bins) is tbuf's slot blockIdx.x. Shared memory: 2Q
// segments of data, their W as f16 pairs, the per-lane table, two rows: one CTA per SM. Each phase
// forms the column's row descriptors anew rather than holding them across the barriers (a first build
// that held them spilled 20–76 B at P = 40 and ran ~14 % slower, NOTES "v14c").
// (A 256-thread build with W in global scratch, two CTAs per SM as the forward, measured −6 % at
// L = 5000 but +3 % and +9 % in training at L = 5000 / 6000: not kept, NOTES "v14c".)
template <int Q, bool ZM, typename T, typename TO>
__device__ void fc_bwd_pairq(const FcParams& p) {
    constexpr int P = 2 * Q, N = 256 * P, NT = 512, CPT = 1, NW = NT / 32;
    FC_SMEM_DECL
    float2* x = fc_smem;
    uint4* wsave = reinterpret_cast<uint4*>(x + P * 256);  // [segment][j][lane]
    unsigned* tab = reinterpret_cast<unsigned*>(wsave + P * 64);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);                     // [0]: w, [1]: d_z
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, NT);
    const int h = threadIdx.x & 1, off = h << 8;
    const bool pre = p.has_pre, need_z = !ZM && p.need_z;
    const i64 rph = p.B;  // rows per head (hd = 1)
    const i64 pph = (rph + 1) / 2;
    const i64 ppc = (pph + p.parts - 1) / p.parts;
    const float4* spec = reinterpret_cast<const float4*>(p.spec);
    const float* kscale = reinterpret_cast<const float*>(p.spec) + (i64)p.heads * 2 * N;
    float4* tslot = reinterpret_cast<float4*>(p.tbuf) + (i64)blockIdx.x * (N / 2);
    // Column c of this thread: n2, its position in a segment, its rows moved on by h·256.
    const auto col = [&](int c) { return (int)(threadIdx.x >> 1) + c * (NT / 2); };
#pragma unroll 1
    for (i64 it = 0; it < ppc; ++it) {
        fp_slot_pair_rows(p, rows, pmax, blockIdx.x, it, ppc, rph, pph);
        __syncthreads();
        const FcRow ra = rows[0], rb = rows[1];
        // Uniform over the CTA; chunks are consecutive pairs, so no later pair is valid either.
        if (!ra.valid) break;
        const i64 kseg = (i64)ra.g * (N / 2);
        // ---- phase 1, stage 1: w (all u loads first, then the pregate's).
#pragma unroll 1
        for (int c = 0; c < CPT; ++c) {
            const int n2 = col(c);
            FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
            fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
            float2 y[Q / 2];
#pragma unroll
            for (int m = 0; m < Q / 2; ++m) {
                const int o = m << 9;
                y[m] = make_float2(o < fa.len ? ember_to_f32(fa.u(p)[o]) : 0.f, o < fb.len ? ember_to_f32(fb.u(p)[o]) : 0.f);
            }
            if (pre) {
#pragma unroll
                for (int m = 0; m < Q / 2; ++m) {
                    const int o = m << 9;
                    y[m].x *= o < fa.len ? ember_to_f32(fa.pre(p)[o]) : 0.f;
                    y[m].y *= o < fb.len ? ember_to_f32(fb.pre(p)[o]) : 0.f;
                }
            }
            fq_stage1<Q>(y, h, x, fp_idx(n2 >> 4, n2 & 15), tw + FqTw<Q>::OFF + n2, &pmax[0]);
        }
        __syncthreads();
        // ---- phase 1, segments: W saved; z's spectrum when needed.
        float s1, inv1;
        fp_pair_scale(pmax[0], s1, inv1);
        for (int sg = threadIdx.x >> 5; sg < P; sg += NW) fb_segment_w(x + sg * 256, spec + kseg + sg * 128, tab, s1, wsave + sg * 64, need_z);
        __syncthreads();
        // ---- phase 1 epilogue (z → d_z), phase 2 stage 1 (d_z), in registers.
        const float ks = kscale[ra.g];
#pragma unroll 1
        for (int c = 0; c < CPT; ++c) {
            const int n2 = col(c), pos = fp_idx(n2 >> 4, n2 & 15);
            FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
            fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
            float2 a[Q / 2];
            if (need_z) fq_stage1_inv<Q>(a, h, x, pos, tw + FqTw<Q>::OFF + n2);
            fb_dz_sel<Q / 2, 9, ZM>(p, a, Q / 2, inv1, ks, fa, fb);
            fq_stage1<Q>(a, h, x, pos, tw + FqTw<Q>::OFF + n2, &pmax[1]);
        }
        __syncthreads();
        // ---- phase 2, segments: T, × conj(K̂), inverse.
        float s2, inv2;
        fp_pair_scale(pmax[1], s2, inv2);
        for (int sg = threadIdx.x >> 5; sg < P; sg += NW)
            fb_segment_g(x + sg * 256, spec + kseg + sg * 128, tab, s2, wsave + sg * 64, tslot + sg * 128, inv1, inv2, it == 0);
        __syncthreads();
        // ---- phase 3: inverse stage 1 (d_w) and its epilogue.
#pragma unroll 1
        for (int c = 0; c < CPT; ++c) {
            const int n2 = col(c);
            FbRow<T, TO> fa = fb_row<T, TO>(p, ra, n2), fb = fb_row<T, TO>(p, rb, n2);
            fa.off += off; fb.off += off; fa.len -= off; fb.len -= off;
            float2 a[Q / 2];
            fq_stage1_inv<Q>(a, h, x, fp_idx(n2 >> 4, n2 & 15), tw + FqTw<Q>::OFF + n2);
            if (pre) fb_dw<Q / 2, true, 9>(p, a, Q / 2, inv2, ks, fa, fb);
            else fb_dw<Q / 2, false, 9>(p, a, Q / 2, inv2, ks, fa, fb);
        }
        __syncthreads();
    }
}

// Position (float2) of bin k in a fragment-order spectrum of N = 256·P bins: segment k mod P at
// 256·(k mod P), bin k / P within it as fp_kpos places it.
template <int P> __device__ __forceinline__ int fq_kpos(int k) { return (k % P) * 256 + fp_kpos(k / P, 0); }

// Bin k of a head's filter-gradient spectrum at N = 256·P: Σ_parts (T[k] + conj T[N − k]) over the
// head's `parts` partials (t: its first, N bins each, fragment order) in slot order; its position
// fq_kpos<P>(k) in *pk.
template <int P>
__device__ __forceinline__ float2 fq_dk_bin(const float2* __restrict__ t, int parts, int k, int* pk) {
    constexpr int N = 256 * P;
    const int a = fq_kpos<P>(k), b = fq_kpos<P>(k == 0 ? 0 : N - k);
    float2 tk = make_float2(0.f, 0.f), tm = make_float2(0.f, 0.f);
    for (int c = 0; c < parts; ++c) {
        tk = c_add(tk, t[(i64)c * N + a]);
        tm = c_add(tm, t[(i64)c * N + b]);
    }
    *pk = a;
    return c_add(tk, c_conj(tm));
}

// Segments [0, nseg) of x (fragment order) scaled by s1 and inverse transformed in place (DFT-256
// on tensor cores), 16 warps.
__device__ __forceinline__ void fq_idft_segments(float2* __restrict__ x, const unsigned* __restrict__ tab, int nseg, float s1) {
    const FpFrag F = fp_frag(tab);
    for (int sg = threadIdx.x >> 5; sg < nseg; sg += 16) {
        float2 y[2][4];
        fp_load_frag(reinterpret_cast<const float4*>(x + sg * 256), y);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) y[j][q] = c_scale(y[j][q], s1);
        unsigned yr[4], yi[4];
        fp_pack_y(y, yr, yi);
        __syncwarp();  // every lane's reads of the segment are done before fp_idft256 stores
        fp_idft256(x + sg * 256, tab, F, yr, yi);
    }
}

// The filter gradient at P = 2Q, one head per CTA of 512 threads: S[k] = Σ_parts (T[k] + conj T[N − k])
// = 2·Σ_rows G_r·conj(W_r) (the fold of fc_dk_pair, the partials summed in slot order), kept in
// shared memory in fragment order; scaled by a power of two to f16's range (the head's largest
// component); per segment the inverse DFT-256 on tensor cores; the inverse stage 1; then d_k_eff[t] =
// Re/(2N) for t < Lk (d_k, and d_D = d_k_eff[0]). Heads of the launch: p.head0 + blockIdx.x.
template <int Q>
__device__ void fc_dk_pairq(const FcParams& p) {
    constexpr int P = 2 * Q, N = 256 * P;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + P * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, 512);
    if (threadIdx.x == 0) pmax[0] = 0;
    __syncthreads();
    const int hl = blockIdx.x;
    const float2* t = reinterpret_cast<const float2*>(p.tbuf) + (i64)hl * p.parts * N;
    float mx = 0.f;
    for (int k = threadIdx.x; k < N; k += 512) {
        int pk;
        const float2 v = fq_dk_bin<P>(t, p.parts, k, &pk);
        x[pk] = v;
        mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
    }
    fp_warp_max_to(mx, &pmax[0]);
    __syncthreads();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    fq_idft_segments(x, tab, P, s1);
    __syncthreads();
    const int h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    float2 o[Q / 2];
    fq_stage1_inv<Q>(o, h, x, pos, tw + FqTw<Q>::OFF + n2);
    const int g = p.head0 + hl;
    const float sc = inv1 * (0.5f / N);
#pragma unroll
    for (int m = 0; m < Q / 2; ++m) fc_epi_dk(p, g, (i64)(2 * m + h) * 256 + n2, N, o[m].x * sc);
}

#define FQ_BWD_ENTRIES(Q)                                                                                                                       \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pairq##Q##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairq<Q, false, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pairq##Q##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairq<Q, false, ember_bf16, float>(p); }       \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pairq##Q##z_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairq<Q, true, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_bwd_pairq##Q##z_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_bwd_pairq<Q, true, ember_bf16, float>(p); }       \
    extern "C" __global__ void __launch_bounds__(512, 1) fc_dk_pairq##Q(FcParams p) { ember_grid_dependency_wait(); fc_dk_pairq<Q>(p); }
// P = 40, 48 only: at P = 56 the backward measured slower than the power-of-two one (cuda.rs,
// MIXED_BWD_MAX_P).
FQ_BWD_ENTRIES(20)
FQ_BWD_ENTRIES(24)

#if __CUDA_ARCH__ >= 900  // clusters
// The filter gradient of the cluster backward (fc_bwd_pairc: the mixed-radix sizes and P = 256), one
// head per cluster of CS CTAs as the forward's (fpc_lane): CTA c folds the bins of its segments
// k1 ∈ [c·SEG, (c + 1)·SEG) (bins k with k mod P = k1) into its shared memory, the head's largest
// component goes to every CTA's max word, each CTA inverse transforms its segments, and after a
// cluster barrier every lane's inverse stage 1 (reading all CTAs) gives d_k_eff at its outputs
// n1 = T·m + j, m < R/2 (t = n1·256 + n2 < N/2, which holds Lk ≤ L ≤ N/2). As fc_dk_pairq otherwise.
template <int CS, int R>
__device__ void fc_dk_pairc(const FcParams& p) {
    using L = FpcLane<CS, R>;
    constexpr int P = L::P, N = L::N, SEG = L::SEG;
    FC_SMEM_DECL
    float2* x = fc_smem;  // this CTA's SEG segments
    unsigned* tab = reinterpret_cast<unsigned*>(x + SEG * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, 512);
    if (threadIdx.x == 0) pmax[0] = 0;
    const unsigned rank = fp_cluster_rank();
    const L l = fpc_lane<CS, R>(x, pmax);
    fp_cluster_sync();  // every CTA's max word zeroed before any remote max
    const int hl = blockIdx.x / CS;
    const float2* t = reinterpret_cast<const float2*>(p.tbuf) + (i64)hl * p.parts * N;
    float mx = 0.f;
    for (int i = threadIdx.x; i < SEG * 256; i += 512) {
        int pk;
        const float2 v = fq_dk_bin<P>(t, p.parts, (i / SEG) * P + (int)rank * SEG + i % SEG, &pk);
        x[pk - (int)rank * SEG * 256] = v;
        mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int c = 0; c < CS; ++c) fp_max_dsm(l.pm[c], __float_as_int(mx));
    fp_cluster_sync();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    fq_idft_segments(x, tab, SEG, s1);
    fp_cluster_sync();
    float2 o[R / 2];
    fpc_stage1_inv<CS, R>(o, l, tw, tw + L::TW + l.n2);
    fp_cluster_arrive();  // done reading the other CTAs' shared memory
    const int g = p.head0 + hl;
    const float sc = inv1 * (0.5f / N);
#pragma unroll
    for (int m = 0; m < R / 2; ++m) fc_epi_dk(p, g, (i64)(L::T * m + l.j) * 256 + l.n2, N, o[m].x * sc);
    fp_cluster_wait();
}

#define FPC_DK_ENTRY(P, CS, R) \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_dk_pairm##P(FcParams p) { ember_grid_dependency_wait(); fc_dk_pairc<CS, R>(p); }
FPC_MIXED_SIZES(FPC_DK_ENTRY)
FPC_DK_ENTRY(256, 4, 32)
#endif  // __CUDA_ARCH__ >= 900

#endif  // FC_BLOCK == 256
