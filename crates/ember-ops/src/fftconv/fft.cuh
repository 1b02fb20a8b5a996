// Block-wide complex FFTs in shared memory, and the real-signal packing both fftconv paths share.
//
// A CTA of FC_BLOCK threads owns FC_SLOTS = 16·FC_BLOCK complex values in shared memory, seen as
// `nseq` sequences of length n (nseq·n = FC_SLOTS): element (s, i) sits at flat index s·ss + i·es
// (rows: ss = n, es = 1; columns of a tile: ss = 1, es = nseq), padded by FC_P so that strided
// passes do not pile onto one bank. Each transform is a Stockham autosort FFT (natural order in
// and out) of radix-16 passes and one smaller final radix: in every pass each thread reads its 16
// values, the block syncs, each thread does 16/R butterflies of radix R in registers and writes
// them back, the block syncs. Twiddles come from tables in global memory (accurate to f32
// rounding, computed once per device in f64): tw[e] = exp(−2πi·e/2^15), then per-pass tables laid
// out so that a warp's twiddle loads are contiguous.
//
// Real signals of length N = 2M are transformed as complex sequences of M points,
// z[n] = x[2n] + i·x[2n+1]; `real_post` turns Z = FFT_M(z) into the real spectrum X[k], X[M−k]
// (doubled, 2X, to save the halving), `real_pre` packs a Hermitian spectrum Y back so that an
// unnormalised inverse FFT of M points gives y[2n] + i·y[2n+1].

#ifndef FC_BLOCK
#define FC_BLOCK 256
#endif
#define FC_E 16
#define FC_SLOTS (FC_E * FC_BLOCK)
#define FC_P(i) ((i) + ((i) >> 5))
#define FC_SMEM_ELEMS (FC_SLOTS + FC_SLOTS / 32)
#define FC_TWN_LOG 15
// After the flat table, one table per pass shape (ns = 16^a, R = 2^lr, ns·R ≤ 2^14):
// entry r·ns + k = exp(−2πi·r·k/(ns·R)), at offset 2^15 + 2^(4a + lr) − 2 (the tables of smaller
// shapes come first). Passes run radix 16 first, so ns is always a power of 16.
#define FC_STAGE_TW(logns, logr) ((1 << FC_TWN_LOG) + (1 << ((logns) + (logr))) - 2)
// Then the tables of the pair kernels' N = 8192 … 131072 (pair_tc.cuh), shapes (ns = 256,
// R = 32 … 512): entry r·256 + k = exp(−2πi·r·k/N).
#define FC_TW_PAIR32 (2 << FC_TWN_LOG)
#define FC_TW_PAIR64 (FC_TW_PAIR32 + 8192)
#define FC_TW_PAIR128 (FC_TW_PAIR64 + 16384)
#define FC_TW_PAIR256 (FC_TW_PAIR128 + 32768)
#define FC_TW_PAIR512 (FC_TW_PAIR256 + 65536)
// Then the mixed-radix pair kernels' N = 256·P, P = 40, 48, 56 (pair_mixed.cuh), same entry rule.
#define FC_TW_MIX40 (FC_TW_PAIR512 + 131072)
#define FC_TW_MIX48 (FC_TW_MIX40 + 10240)
#define FC_TW_MIX56 (FC_TW_MIX48 + 12288)
// Then the mixed-radix cluster kernels' N = 256·P, P = 80, 96, 112, 160, 192, 224 (pair_fwd.cuh), same rule.
#define FC_TW_MIX80 (FC_TW_MIX56 + 14336)
#define FC_TW_MIX96 (FC_TW_MIX80 + 20480)
#define FC_TW_MIX112 (FC_TW_MIX96 + 24576)
#define FC_TW_MIX160 (FC_TW_MIX112 + 28672)
#define FC_TW_MIX192 (FC_TW_MIX160 + 40960)
#define FC_TW_MIX224 (FC_TW_MIX192 + 49152)
#define FC_TW_MIXC(P) ((P) == 80 ? FC_TW_MIX80 : (P) == 96 ? FC_TW_MIX96 : (P) == 112 ? FC_TW_MIX112 : (P) == 160 ? FC_TW_MIX160 : (P) == 192 ? FC_TW_MIX192 : FC_TW_MIX224)
#define FC_TW_TOTAL (FC_TW_MIX224 + 57344)

#ifndef FC_SMEM_DECL
#define FC_SMEM_DECL extern __shared__ float2 fc_smem[];
#endif

__device__ __forceinline__ float2 c_add(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 c_sub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 c_mul(float2 a, float2 b) { return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
// a · conj(b)
__device__ __forceinline__ float2 c_mulc(float2 a, float2 b) { return make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y); }
__device__ __forceinline__ float2 c_conj(float2 a) { return make_float2(a.x, -a.y); }
__device__ __forceinline__ float2 c_scale(float2 a, float s) { return make_float2(a.x * s, a.y * s); }
// a · (−i) for the forward transform (DIR = −1), a · (+i) for the inverse (DIR = +1).
template <int DIR> __device__ __forceinline__ float2 c_rot(float2 a) {
    return DIR < 0 ? make_float2(a.y, -a.x) : make_float2(-a.y, a.x);
}
// exp(DIR·2πi·e/2^15) from the forward table.
template <int DIR> __device__ __forceinline__ float2 tw_get(const float2* __restrict__ tw, int e) {
    const float2 w = tw[e];
    return DIR < 0 ? w : c_conj(w);
}

// ---- small DFTs in registers, natural order: a[k] ← Σ_r a[r]·exp(DIR·2πi·r·k/R) -----------------

template <int DIR> __device__ __forceinline__ void dft2(float2& a0, float2& a1) {
    const float2 t = a0;
    a0 = c_add(t, a1);
    a1 = c_sub(t, a1);
}

// ZIN: a2 = a3 = 0 (not read), so t0 = t1 = a0 and t2 = a1: half the adds of the first stage.
template <int DIR, bool ZIN = false> __device__ __forceinline__ void dft4(float2& a0, float2& a1, float2& a2, float2& a3) {
    const float2 t0 = ZIN ? a0 : c_add(a0, a2), t1 = ZIN ? a0 : c_sub(a0, a2);
    const float2 t2 = ZIN ? a1 : c_add(a1, a3), t3 = c_rot<DIR>(ZIN ? a1 : c_sub(a1, a3));
    a0 = c_add(t0, t2);
    a2 = c_sub(t0, t2);
    a1 = c_add(t1, t3);
    a3 = c_sub(t1, t3);
}

// exp(DIR·2πi·e/16) for e in 0..15 (exact constants).
template <int DIR> __device__ __forceinline__ float2 w16(int e) {
    const float c1 = 0.92387953251128674f, s1 = 0.38268343236508978f, h = 0.70710678118654752f;
    float2 w;
    switch (e & 15) {
        case 0: w = make_float2(1.f, 0.f); break;
        case 1: w = make_float2(c1, -s1); break;
        case 2: w = make_float2(h, -h); break;
        case 3: w = make_float2(s1, -c1); break;
        case 4: w = make_float2(0.f, -1.f); break;
        case 5: w = make_float2(-s1, -c1); break;
        case 6: w = make_float2(-h, -h); break;
        case 7: w = make_float2(-c1, -s1); break;
        case 8: w = make_float2(-1.f, 0.f); break;
        case 9: w = make_float2(-c1, s1); break;
        case 10: w = make_float2(-h, h); break;
        case 11: w = make_float2(-s1, c1); break;
        case 12: w = make_float2(0.f, 1.f); break;
        case 13: w = make_float2(s1, c1); break;
        case 14: w = make_float2(h, h); break;
        default: w = make_float2(c1, s1); break;
    }
    return DIR < 0 ? w : c_conj(w);
}

template <int DIR> __device__ __forceinline__ void dft8(float2 (&a)[8]) {
    // Radix-2 split: E = DFT4(even), O = DFT4(odd); X[k] = E[k] + W8^k·O[k], X[k+4] = E[k] − W8^k·O[k].
    dft4<DIR>(a[0], a[2], a[4], a[6]);
    dft4<DIR>(a[1], a[3], a[5], a[7]);
    float2 e[4] = {a[0], a[2], a[4], a[6]};
    float2 o[4] = {a[1], a[3], a[5], a[7]};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 t = k == 0 ? o[k] : c_mul(o[k], w16<DIR>(2 * k));
        a[k] = c_add(e[k], t);
        a[k + 4] = c_sub(e[k], t);
    }
}

template <int DIR, bool ZIN = false> __device__ __forceinline__ void dft16(float2 (&a)[16]) {
    // n = 4·n1 + n2, k = k1 + 4·k2: DFT4 over n1 for each n2, twiddle W16^(n2·k1), DFT4 over n2.
    float2 b[4][4];
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) {
        float2 x0 = a[n2], x1 = a[4 + n2], x2 = a[8 + n2], x3 = a[12 + n2];
        dft4<DIR, ZIN>(x0, x1, x2, x3);
        b[n2][0] = x0;
        b[n2][1] = n2 == 0 ? x1 : c_mul(x1, w16<DIR>(n2));
        b[n2][2] = n2 == 0 ? x2 : c_mul(x2, w16<DIR>(2 * n2));
        b[n2][3] = n2 == 0 ? x3 : c_mul(x3, w16<DIR>(3 * n2));
    }
#pragma unroll
    for (int k1 = 0; k1 < 4; ++k1) {
        float2 y0 = b[0][k1], y1 = b[1][k1], y2 = b[2][k1], y3 = b[3][k1];
        dft4<DIR>(y0, y1, y2, y3);
        a[k1] = y0;
        a[k1 + 4] = y1;
        a[k1 + 8] = y2;
        a[k1 + 12] = y3;
    }
}

// ZIN: a[R/2 ..] are zero and not read (a pruned first pass, which block_fft makes radix 16).
template <int R, int DIR, bool ZIN = false> __device__ __forceinline__ void dft(float2 (&a)[R]) {
    static_assert(!ZIN || R == 16, "pruned first passes are radix 16");
    if constexpr (R == 2) {
        dft2<DIR>(a[0], a[1]);
    } else if constexpr (R == 4) {
        dft4<DIR>(a[0], a[1], a[2], a[3]);
    } else if constexpr (R == 8) {
        dft8<DIR>(a);
    } else {
        dft16<DIR, ZIN>(a);
    }
}

// ---- one Stockham pass and the whole transform -------------------------------------------------

// Layout of the sequences being transformed.
struct FcSeqs {
    int logn;   // log2 of the sequence length
    int lognseq;  // log2 of the number of sequences
    int ss, es;   // flat index of (s, i) = s·ss + i·es
};

// ZIN (first pass only, logns = 0): the upper half of every sequence is zero, i.e. inputs r ≥ R/2; they
// are not read. HOUT (last pass only): only outputs r < R/2 (the lower half of every sequence) are
// stored; the compiler drops the arithmetic of the others.
template <int LOGR, int DIR, bool ZIN = false, bool HOUT = false>
__device__ __forceinline__ void fft_pass(float2* __restrict__ x, const FcSeqs q, int logns, const float2* __restrict__ tw) {
    constexpr int R = 1 << LOGR;
    constexpr int Q = FC_E / R;  // butterflies per thread
    const int lognr = q.logn - LOGR;  // log2(n / R)
    const bool seq_fast = q.es != 1;  // columns: neighbouring threads take neighbouring sequences
    float2 a[Q][R];
    int base[Q], jj[Q];
#pragma unroll
    for (int c = 0; c < Q; ++c) {
        const int id = threadIdx.x + FC_BLOCK * c;
        int s, j;
        if (seq_fast) {
            s = id & ((1 << q.lognseq) - 1);
            j = id >> q.lognseq;
        } else {
            j = id & ((1 << lognr) - 1);
            s = id >> lognr;
        }
        base[c] = s * q.ss;
        jj[c] = j;
#pragma unroll
        for (int r = 0; r < R; ++r) a[c][r] = ZIN && r >= R / 2 ? make_float2(0.f, 0.f) : x[FC_P(base[c] + (j + (r << lognr)) * q.es)];
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < Q; ++c) {
        const int ns = 1 << logns;
        const int k = jj[c] & (ns - 1);
        if (!ZIN && logns > 0) {
            // W_{ns·R}^{r·k} from the pass's own table (neighbouring k are neighbours there, so a
            // warp's loads coalesce; indexing the flat table by r·k would scatter them).
            const float2* st = tw + FC_STAGE_TW(logns, LOGR);
#pragma unroll
            for (int r = 1; r < R; ++r) a[c][r] = c_mul(a[c][r], tw_get<DIR>(st, r * ns + k));
        }
        dft<R, DIR, ZIN>(a[c]);
        const int out = (jj[c] - k) * R + k;
#pragma unroll
        for (int r = 0; r < (HOUT ? R / 2 : R); ++r) x[FC_P(base[c] + (out + r * ns) * q.es)] = a[c][r];
    }
    __syncthreads();
}

// Pruned transforms of zero-padded signals (a convolution's rows are zero from L on, and only its first
// L outputs are kept): FFT_ZIN — the upper half of every input sequence is zero and is not read (the
// first pass loads half its inputs and does half its first-stage adds); FFT_HOUT — only the lower half
// of every output sequence is wanted (the last pass computes and stores only that half; the upper half
// of x is left stale). Both need sequences of at least 16 (a radix-16 first pass; fc_prune_row and
// fc_prune_filter in fftconv.cu decide per launch).
#define FFT_FULL 0
#define FFT_ZIN 1
#define FFT_HOUT 2

// FFT of every sequence (unnormalised; DIR = −1 forward, +1 inverse). Callers sync before. Not
// inlined: each kernel calls it several times, and one copy per direction and mode keeps NVRTC fast.
template <int DIR, int MODE = FFT_FULL>
__device__ __noinline__ void block_fft(float2* __restrict__ x, const FcSeqs q, const float2* __restrict__ tw) {
    constexpr bool HOUT = (MODE & FFT_HOUT) != 0;
    int done = 0;
    if constexpr ((MODE & FFT_ZIN) != 0) {
        if (HOUT && q.logn == 4) {
            fft_pass<4, DIR, true, true>(x, q, 0, tw);
            return;
        }
        fft_pass<4, DIR, true>(x, q, 0, tw);
        done = 4;
    }
    const int rem = q.logn & 3;
    // Radix-16 passes; with HOUT the last of them is the transform's last pass when no smaller radix follows.
    while (q.logn - done >= 4) {
        if (HOUT && rem == 0 && q.logn - done == 4) fft_pass<4, DIR, false, HOUT>(x, q, done, tw);
        else fft_pass<4, DIR>(x, q, done, tw);
        done += 4;
    }
    switch (q.logn - done) {
        case 3: fft_pass<3, DIR, false, HOUT>(x, q, done, tw); break;
        case 2: fft_pass<2, DIR, false, HOUT>(x, q, done, tw); break;
        case 1: fft_pass<1, DIR, false, HOUT>(x, q, done, tw); break;
        default: break;
    }
}

// ---- real-signal packing -----------------------------------------------------------------------

// From a = Z[k], b = Z[M−k] (0 < k < M) and wk = exp(−2πi·k/N): Xk = 2X[k], Xmk = 2X[M−k].
__device__ __forceinline__ void real_post(float2 a, float2 b, float2 wk, float2& Xk, float2& Xmk) {
    const float2 e2 = make_float2(a.x + b.x, a.y - b.y);       // a + conj(b) = 2E[k]
    const float2 d = make_float2(a.x - b.x, a.y + b.y);        // a − conj(b) = 2i·O[k]
    const float2 o2 = make_float2(d.y, -d.x);                  // −i·d = 2O[k]
    const float2 t = c_mul(wk, o2);
    Xk = c_add(e2, t);
    Xmk = c_conj(c_sub(e2, t));
}
// k = 0: from a = Z[0], the real values 2X[0] and 2X[M].
__device__ __forceinline__ void real_post0(float2 a, float& X0, float& XM) {
    X0 = 2.f * (a.x + a.y);
    XM = 2.f * (a.x - a.y);
}
// From Y[k], Y[M−k] of a Hermitian spectrum: the packed Z'[k], Z'[M−k] whose unnormalised inverse
// FFT of M points is y[2n] + i·y[2n+1], with y = Σ_k Y[k]·exp(2πi·k·t/N).
__device__ __forceinline__ void real_pre(float2 yk, float2 ymk, float2 wk, float2& Zk, float2& Zmk) {
    // Z'[k] = (Yk + conj Ymk) + i·conj(wk)·(Yk − conj Ymk); Z'[M−k] = (Ymk + conj Yk) − i·wk·(Ymk − conj Yk)
    const float2 s = make_float2(yk.x + ymk.x, yk.y - ymk.y);
    const float2 d = make_float2(yk.x - ymk.x, yk.y + ymk.y);
    const float2 t = c_mulc(d, wk);             // conj(wk)·d
    Zk = make_float2(s.x - t.y, s.y + t.x);     // s + i·t
    const float2 s2 = c_conj(s);                // Ymk + conj Yk
    const float2 d2 = make_float2(-d.x, d.y);   // Ymk − conj Yk = −conj(d)
    const float2 t2 = c_mul(wk, d2);
    Zmk = make_float2(s2.x + t2.y, s2.y - t2.x);  // s2 − i·t2
}
// k = 0: Y[0], Y[M] real.
__device__ __forceinline__ float2 real_pre0(float y0, float yM) { return make_float2(y0 + yM, y0 - yM); }
