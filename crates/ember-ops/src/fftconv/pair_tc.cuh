// The pair engine (bf16 u, on-chip sizes; since v4): two rows of one head as one complex signal,
// the DFT-256 stages on tensor cores, the whole spectrum step inside each warp's registers. This
// file: the shared pieces (fragments, DFT-256, stage 1 and its inverse for every P, the cluster
// helpers of P = 128, row descriptors, epilogues); the kernels are in pair_fwd.cuh, pair_bwd.cuh
// and pair_spec.cuh. The design as written for the v4 forward:
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

// exp(DIR·i·(q·π/2 + θ)) from c = cos θ, s = sin θ (q mod 4).
template <int DIR> __device__ __forceinline__ float2 fp_quarter_turn(float c, float s, int q) {
    float cc, ss;  // cos, sin of (q·π/2 + θ)
    switch (q & 3) {
        case 0: cc = c; ss = s; break;
        case 1: cc = -s; ss = c; break;
        case 2: cc = -c; ss = -s; break;
        default: cc = s; ss = -c; break;
    }
    return DIR < 0 ? make_float2(cc, -ss) : make_float2(cc, ss);
}

// exp(DIR·2πi·e/32) (exact constants; e is a compile-time constant at every use).
template <int DIR> __device__ __forceinline__ float2 w32(int e) {
    // cos(r·π/16), r = 0..8
    const float C[9] = {1.f, 0.98078528040323043f, 0.92387953251128674f, 0.83146961230254524f, 0.70710678118654752f,
                        0.55557023301960218f, 0.38268343236508978f, 0.19509032201612825f, 0.f};
    e &= 31;
    const int r = e & 7;
    return fp_quarter_turn<DIR>(C[r], C[8 - r], e >> 3);  // angle (e >> 3)·π/2 + r·π/16
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

// ---- Rows of very different magnitude in one pair (v15; the P = 64 and mixed-radix forwards). The
// pair's two rows share one complex signal, and an f16 tensor-core DFT's error is relative to the
// whole signal: the smaller row's output carries ~2^-11 of the larger row's magnitude. So these
// forwards find each row's largest |input| (fp_rows_absmax, fp_rows_max_commit into two words beside
// the pair max), take the pair scale from them (fp_pair_scale_rows) and decide per pair
// (fp_balance): a row that is all zeros gets output factor 0 (its convolution is exactly zero; D·0 is
// added after); rows more than FP_BAL_SLACK binades apart are rebalanced — stage 1 is done again with
// the smaller row multiplied up by 2^d (exact), and its outputs are multiplied by 2^-d in the
// epilogue. Non-finite maxima leave the pair as it was (NaN and inf propagate as before). (The P ≤ 32
// and cluster forwards and the backwards do not: it measured 3–6 % and 11–26 % slower there; NOTES
// "v15".)
#define FP_BAL_SLACK 2
#define FP_BAL_MAX_SHIFT 100

// The largest |value| of each row among the first M of y[] (.x row a, .y row b), folded into ma, mb.
template <int M, int N>
__device__ __forceinline__ void fp_rows_absmax(const float2 (&y)[N], float& ma, float& mb) {
    static_assert(M <= N, "M of the N values");
#pragma unroll
    for (int m = 0; m < M; ++m) {
        ma = fmaxf(ma, fabsf(y[m].x));
        mb = fmaxf(mb, fabsf(y[m].y));
    }
}

// The warp's row maxima into rm[0] (row a) and rm[1] (row b): non-negative floats order as their
// bit patterns, so one warp reduction (redux) and one shared atomic per row. Every lane calls it.
__device__ __forceinline__ void fp_rows_max_commit(float ma, float mb, int* rm) {
    const unsigned a = __reduce_max_sync(0xffffffffu, __float_as_uint(ma)), b = __reduce_max_sync(0xffffffffu, __float_as_uint(mb));
    if ((threadIdx.x & 31) == 0) {
        atomicMax(rm, (int)a);
        atomicMax(rm + 1, (int)b);
    }
}

// A pair's treatment from its rows' largest |input| (bit patterns ia, ib): `s` multiplies the rows'
// inputs when stage 1 is redone (`redo`), `f` their outputs (before the pair scale's inverse): 1/s,
// or 0 for a row of zeros.
struct FpBal {
    float2 s, f;
    bool redo;
};
__device__ __forceinline__ FpBal fp_balance(int ia, int ib) {
    FpBal b;
    b.s = make_float2(1.f, 1.f);
    b.f = make_float2(ia == 0 ? 0.f : 1.f, ib == 0 ? 0.f : 1.f);
    b.redo = false;
    const int ea = ia >> 23, eb = ib >> 23;
    if (ia == 0 || ib == 0 || ea == 255 || eb == 255) return b;
    const int d = min(abs(ea - eb), FP_BAL_MAX_SHIFT);
    if (d <= FP_BAL_SLACK) return b;
    const float up = __int_as_float((127 + d) << 23), down = __int_as_float((127 - d) << 23);
    if (ea > eb) {
        b.s.y = up;
        b.f.y = down;
    } else {
        b.s.x = up;
        b.f.x = down;
    }
    b.redo = true;
    return b;
}

template <int M>
__device__ __forceinline__ void fp_rows_scale(float2 (&y)[M], float2 s) {
#pragma unroll
    for (int m = 0; m < M; ++m) y[m] = make_float2(y[m].x * s.x, y[m].y * s.y);
}

// The pair scale (fp_pair_scale) from its rows' largest |input| (words rm[0], rm[1]) rather than from
// stage 1's largest component: every component of a column's stage-1 output is at most
// Σ_n |w_a[n] + i·w_b[n]| ≤ cnt·(ma·s.x + mb·s.y) over the column's cnt inputs (s: fp_balance's
// factors where the pair is rebalanced), so that bound put in [1/2, 1) keeps stage 1's output below
// 1 as the largest component did, and fp_segment's f16 bounds hold. It costs no reduction over stage
// 1's output (the row maxima are needed anyway) and gives up at most log2(cnt·√2) binades of
// headroom: f16 rounds relative to each value, so only values below 2^-14 of the bound lose
// precision, by at most 2^-25 of the bound each.
__device__ __forceinline__ void fp_pair_scale_rows(const int* rm, int cnt, float& s1, float& inv1) {
    const FpBal b = fp_balance(rm[0], rm[1]);
    const float bound = (float)cnt * (__int_as_float(rm[0]) * b.s.x + __int_as_float(rm[1]) * b.s.y);
    fp_pair_scale(__float_as_int(bound), s1, inv1);
}

// The epilogue's factors: the pair scale's inverse times each row's factor.
__device__ __forceinline__ float2 fp_out_factors(float inv1, const FpBal& b) { return make_float2(inv1 * b.f.x, inv1 * b.f.y); }

// The per-lane table of tc_fft256 (after the twiddles in p.tw) into shared memory, by `nthreads`
// threads (the caller's barrier publishes it).
__device__ __forceinline__ void fp_copy_tab(unsigned* tab, const FcParams& p, int nthreads) {
    const unsigned* gtab = reinterpret_cast<const unsigned*>(reinterpret_cast<const float2*>(p.tw) + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += nthreads) tab[i] = gtab[i];
}

// Threads 0 and 1 of a kernel with one row pair per CTA (or cluster): rows a, b of forward pair Q
// (⌈rph/2⌉ pairs per head; an odd last row is paired with an invalid one) into rows[0], rows[1], and
// pmax[0] = 0 and the rows' maxima pmax[1], pmax[2] = 0 (fp_rows_max_commit).
__device__ __forceinline__ void fp_one_pair_rows(const FcParams& p, FcRow* rows, int* pmax, i64 Q, i64 rph, i64 pph) {
    if (threadIdx.x < 2) {
        const i64 gl = Q / pph, qq = Q - gl * pph;
        FcRow row = fc_row(p, gl * rph + 2 * qq + threadIdx.x);
        const bool first_valid = gl * rph + 2 * qq < p.nrows;
        row.valid = row.valid && first_valid && (threadIdx.x == 0 || 2 * qq + 1 < rph);
        rows[threadIdx.x] = row;
        pmax[1 + threadIdx.x] = 0;
        if (threadIdx.x == 0) pmax[0] = 0;
    }
}

// Threads 0 and 1 of a backward with one pair slot per CTA (or cluster): rows a, b of pair `it` of
// slot `slot` (chunk slot mod parts of head slot / parts, ppc pairs per chunk; hd = 1) into rows[0],
// rows[1], and pmax[0] = pmax[1] = 0.
// (`slot` keeps the caller's type: blockIdx.x divides as 32-bit unsigned, as the kernels always did.)
template <typename S>
__device__ __forceinline__ void fp_slot_pair_rows(const FcParams& p, FcRow* rows, int* pmax, S slot, i64 it, i64 ppc, i64 rph, i64 pph) {
    if (threadIdx.x < 2) {
        const i64 hh = slot / p.parts, q = (slot - hh * p.parts) * ppc + it;
        const bool ok = hh < p.nheads && q < pph && (threadIdx.x == 0 || 2 * q + 1 < rph);
        FcRow row = fc_row(p, hh * rph + 2 * q + threadIdx.x);
        row.valid = row.valid && ok;
        rows[threadIdx.x] = row;
        if (threadIdx.x == 0) pmax[0] = pmax[1] = 0;
    }
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

// The row moved on by `off` elements (the thread of a column whose elements start at n1 = off/256).
template <typename T, typename TO>
__device__ __forceinline__ void fp_row_shift(FpRow<T, TO>& f, int off) {
    f.u += off;
    f.pre += off;
    f.post += off;
    f.out += off;
    f.z += off;
    f.ws += off;
    f.len -= off;
}

// The 16 inputs of both rows at offsets m·2^SH (m < 16) of the P ≥ 64 kernels, times the pregate
// when `pre`; zero past L. All u loads first, in one basic block: with the runtime `pre` test inside
// the loop every element was its own block, and each element's loads were issued only after the
// previous element's were used (ncu of the P = 128 forward: ~17 % of its warp samples waiting on
// them, one load pair at a time). Same products, same bits.
// NE < 16: the mixed-radix cluster forward's R/2 inputs per lane.
template <int SH, int NE = 16, typename T, typename TO>
__device__ __forceinline__ void fp_load16(float2 (&y)[NE], bool pre, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
#pragma unroll
    for (int m = 0; m < NE; ++m) {
        const int o = m << SH;
        y[m] = make_float2(o < fa.len ? ember_to_f32(fa.u[o]) : 0.f, o < fb.len ? ember_to_f32(fb.u[o]) : 0.f);
    }
    if (pre) {
#pragma unroll
        for (int m = 0; m < NE; ++m) {
            const int o = m << SH;
            y[m].x *= o < fa.len ? ember_to_f32(fa.pre[o]) : 0.f;
            y[m].y *= o < fb.len ? ember_to_f32(fb.pre[o]) : 0.f;
        }
    }
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

// The first `n` outputs of both rows: z = a·inv·ks (inv.x row a, inv.y row b; D included) → GELU →
// postgate, mask → store
// (as fc_epi_fwd). HD1: the output row (hd = 1); else the g_ij workspace row. ZS (with HD1): z
// itself also stored, in u's dtype, for the backward.
// Element n1 sits at offset n1·2^SH from the row pointers (SH = 8: every n1 of the column).
// OST > 0 (with HD1): the outputs go to a staging copy in shared memory instead, element n1 at
// out + n1·OST, written whether or not it lies inside the row (the copy's flush skips those).
template <int P, bool GELU, bool POST, bool HD1, int SH = 8, bool ZS = false, int OST = 0, typename T, typename TO>
__device__ __forceinline__ void fp_epilogue(const float2 (&a)[P], int n, float2 inv, float ks, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
#pragma unroll
    for (int n1 = 0; n1 < P; ++n1) {
        if (n1 >= n) break;
        const int o = n1 << SH;
        float za = a[n1].x * inv.x * ks, zb = a[n1].y * inv.y * ks;
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
            if constexpr (OST > 0) {
                fp_st(fa.out + n1 * OST, za);
                fp_st(fb.out + n1 * OST, zb);
            } else {
                if (o < fa.len) fp_st(fa.out + o, za);
                if (o < fb.len) fp_st(fb.out + o, zb);
            }
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

template <int P, int SH, int OST = 0, typename T, typename TO>
__device__ __forceinline__ void fp_epilogue_sel(int sel, const float2 (&a)[P], int n, float2 inv1, float ks, const FpRow<T, TO>& fa, const FpRow<T, TO>& fb) {
    if constexpr (OST > 0) {  // hd = 1 only (the caller's test)
        switch (sel) {
            case 1: fp_epilogue<P, false, false, true, SH, false, OST>(a, n, inv1, ks, fa, fb); break;
            case 3: fp_epilogue<P, false, true, true, SH, false, OST>(a, n, inv1, ks, fa, fb); break;
            case 5: fp_epilogue<P, true, false, true, SH, false, OST>(a, n, inv1, ks, fa, fb); break;
            case 7: fp_epilogue<P, true, true, true, SH, false, OST>(a, n, inv1, ks, fa, fb); break;
            case 11: fp_epilogue<P, false, true, true, SH, true, OST>(a, n, inv1, ks, fa, fb); break;
            case 13: fp_epilogue<P, true, false, true, SH, true, OST>(a, n, inv1, ks, fa, fb); break;
            default: fp_epilogue<P, true, true, true, SH, true, OST>(a, n, inv1, ks, fa, fb); break;  // 15
        }
        return;
    }
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

// Stage 1 of every valid pair of a CTA (R pairs, 32/P by default; rows[2r], rows[2r + 1]): thread n2 loads
// its column of w = u (or u·pregate), all loads first (independent), then fp_stage1 into the
// pair's segments at x + r·P·256; the pair's largest component into pmax[r].
template <int P, typename T, typename TO, int R = 32 / P>
__device__ __forceinline__ void fp_stage1_pairs(const FcParams& p, const FcRow* rows, float2* __restrict__ x, int n2, int pos, bool half, const float2* __restrict__ wtab, int* pmax) {
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
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
        fp_epilogue_sel<P, 8>(sel, a, nout, make_float2(inv1, inv1), ks, fa, fb);
    }
}

// Shared memory of the pair forward (P ≤ 32), in bytes from fc_smem: 32 segments of data, the
// per-lane table, then the rows (2 per pair) and pair scales (1 per pair) — NBUF sets of each —
// then, for the staged forward, u's staged copy at a 16-byte boundary (smem_bytes_pair in cuda.rs).
#define FP_TAB_OFF (32 * 256 * 8)
#define FP_ROWS_OFF (FP_TAB_OFF + TC_TAB_WORDS * 32 * 4)
#define FP_STG_OFF(R, NBUF) ((FP_ROWS_OFF + (NBUF) * (R) * (2 * 48 + 4) + 15) & ~15)

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
// shuffle), times W_N^(n2·k1), stored at x[k1·256 + pos]; with MAX the pair's largest component into
// *pmax (the forward takes its pair scale from the row maxima instead: fp_pair_scale_rows).
template <bool MAX = true>
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
        if (MAX) mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
        x[k1 * 256 + pos] = v;
    }
    if (!MAX) return;
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

// ---- small DFTs of mixed radix (the P = 2Q kernels, pair_mixed.cuh, and the cluster kernels at
// P = 2R·CS) ------------------------------------------------------------------------------------------

// exp(DIR·2πi·e/R) for R dividing 40, 48, 56, 160, 192 or 224 (e a compile-time constant at every use:
// the table folds into immediates). Quarter-wave tables of cos(2πr/B), B = 40, 48, 56 (the P = 2Q
// kernels), 160, 192, 224 (the lane steps of the cluster kernels at P = 2R·CS, R = 20, 24, 28).
template <int R> struct FqBase {
    static constexpr int B = 40 % R == 0 ? 40 : 48 % R == 0 ? 48 : 56 % R == 0 ? 56 : 160 % R == 0 ? 160 : 192 % R == 0 ? 192 : 224;
    static_assert(B % R == 0, "R divides 40, 48, 56, 160, 192 or 224");
};
template <int B> __device__ __forceinline__ float fq_cos_quarter(int r) {
    if constexpr (B == 40) {
        const float C[11] = {1.f, 0.98768834059513772619f, 0.95105651629515357212f, 0.89100652418836786236f, 0.8090169943749474241f, 0.7071067811865475244f,
                             0.58778525229247312917f, 0.45399049973954679156f, 0.3090169943749474241f, 0.15643446504023086901f, 0.f};
        return C[r];
    } else if constexpr (B == 48) {
        const float C[13] = {1.f, 0.99144486137381041114f, 0.96592582628906828675f, 0.92387953251128675613f, 0.86602540378443864676f, 0.79335334029123516458f, 0.7071067811865475244f,
                             0.60876142900872063942f, 0.5f, 0.38268343236508977173f, 0.25881904510252076235f, 0.13052619222005159155f, 0.f};
        return C[r];
    } else if constexpr (B == 56) {
        const float C[15] = {1.f, 0.99371220989324258353f, 0.97492791218182360702f, 0.9438833303083675629f, 0.90096886790241912624f, 0.84672419922828416835f, 0.78183148246802980871f, 0.7071067811865475244f,
                             0.62348980185873353053f, 0.53203207651533656356f, 0.43388373911755812048f, 0.33027906195516708177f, 0.22252093395631440429f, 0.11196447610330785847f, 0.f};
        return C[r];
    } else if constexpr (B == 160) {
        const float C[41] = {1.f, 0.99922903624072293474f, 0.9969173337331279762f, 0.99306845695492629564f, 0.98768834059513772619f, 0.98078528040323044913f, 0.97236992039767660183f, 0.96245523645364728763f, 0.95105651629515357212f, 0.93819133592248413445f, 0.92387953251128675613f, 0.90814317382508129926f, 0.89100652418836786236f, 0.87249600707279711453f, 0.85264016435409222152f, 0.83146961230254523708f, 0.8090169943749474241f, 0.78531693088074492747f, 0.76040596560003093817f, 0.73432250943568553564f, 0.7071067811865475244f, 0.67880074553294174139f, 0.64944804833018365573f, 0.61909394930983398694f, 0.58778525229247312917f, 0.55557023301960222474f, 0.52249856471594886499f, 0.48862124149695494742f, 0.45399049973954679156f, 0.41865973753742808668f, 0.38268343236508977173f, 0.34611705707749297647f, 0.3090169943749474241f, 0.27144044986507425334f, 0.23344536385590541177f, 0.19509032201612826785f, 0.15643446504023086901f, 0.11753739745783764411f, 0.078459095727844945033f, 0.039259815759068609021f, 0.f};
        return C[r];
    } else if constexpr (B == 192) {
        const float C[49] = {1.f, 0.99946458747636564443f, 0.99785892323860350674f, 0.99518472667219688624f, 0.99144486137381041114f, 0.98664333208487900475f, 0.98078528040323044913f, 0.97387697927733364815f, 0.96592582628906828675f, 0.95694033573220886494f, 0.94693012949510566426f, 0.93590592675732570029f, 0.92387953251128675613f, 0.91086382492117581857f, 0.89687274153268830389f, 0.88192126434835502971f, 0.86602540378443864676f, 0.84920218152657888765f, 0.83146961230254523708f, 0.81284668459161521658f, 0.79335334029123516458f, 0.77301045336273696081f, 0.75183980747897739641f, 0.72986407269783565735f, 0.7071067811865475244f, 0.68359230202287128051f, 0.65934581510006886843f, 0.63439328416364549822f, 0.60876142900872063942f, 0.5824776968678021492f, 0.55557023301960222474f, 0.52806785065036799587f, 0.5f, 0.47139673682599764856f, 0.442288690219001282f, 0.41270702980439473705f, 0.38268343236508977173f, 0.35225004792123350653f, 0.3214394653031615807f, 0.29028467725446236764f, 0.25881904510252076235f, 0.22707626303437320759f, 0.19509032201612826785f, 0.16289547339458873948f, 0.13052619222005159155f, 0.098017140329560601994f, 0.065403129230143066815f, 0.032719082821776142064f, 0.f};
        return C[r];
    } else {
        const float C[57] = {1.f, 0.99960662638305288551f, 0.99842681501781656213f, 0.99646149411761914653f, 0.99371220989324258353f, 0.99018112533644559044f, 0.98587101851823587392f, 0.98078528040323044913f, 0.97492791218182360702f, 0.96830352212226143939f, 0.96091732194509954321f, 0.95277512272289628966f, 0.9438833303083675629f, 0.93424894029459985508f, 0.92387953251128675613f, 0.91278326506131890892f, 0.90096886790241912624f, 0.88844563597887230031f, 0.8752234219087536975f, 0.861312628232408941f, 0.84672419922828416835f, 0.83146961230254523708f, 0.81556086895926017135f, 0.79901048535824903392f, 0.78183148246802980871f, 0.76403737582160743666f, 0.74564216488316560949f, 0.72666032203402704716f, 0.7071067811865475244f, 0.68699692603490163354f, 0.66634657795200394558f, 0.64517198354208763329f, 0.62348980185873353053f, 0.60131709129840580824f, 0.57867129617980574163f, 0.55557023301960222474f, 0.53203207651533656356f, 0.50807534524652945854f, 0.48371888710523979107f, 0.45898186446753768136f, 0.43388373911755812048f, 0.40844425693599613546f, 0.38268343236508977173f, 0.35662153266231302436f, 0.33027906195516708177f, 0.30367674510961473081f, 0.27683551142484938763f, 0.24977647816722684996f, 0.22252093395631440429f, 0.19509032201612826785f, 0.16750622330473640809f, 0.13979033953549947793f, 0.11196447610330785847f, 0.084050524929247545051f, 0.056070447237191788191f, 0.028046256275868958377f, 0.f};
        return C[r];
    }
}
template <int R, int DIR> __device__ __forceinline__ float2 fq_w(int e) {
    constexpr int B = FqBase<R>::B, Q4 = B / 4;
    e = (e % R + R) % R * (B / R);  // the angle 2π·e/B
    const int r = e % Q4;
    return fp_quarter_turn<DIR>(fq_cos_quarter<B>(r), fq_cos_quarter<B>(Q4 - r), e / Q4);  // angle (e / Q4)·π/2 + 2πr/B
}

// Natural-order DFT of R points in registers, a[k] ← Σ_n a[n]·exp(DIR·2πi·n·k/R): powers of two up
// to 16 (fft.cuh), the odd factors 3, 5, 7 directly, and R = A·B (A odd, B a power of two) by one
// Cooley–Tukey split: n = B·n1 + n2, k = k1 + A·k2 — A-point DFTs over n1, the twiddle W_R^(n2·k1),
// B-point DFTs over n2.
template <int R, int DIR> __device__ __forceinline__ void fq_dft(float2 (&a)[R]) {
    if constexpr ((R & (R - 1)) == 0) {
        if constexpr (R > 1) dft<R, DIR>(a);
    } else if constexpr (R == 3 || R == 5 || R == 7) {
        // The inputs n and R − n in pairs: a[n]·W^(nk) + a[R−n]·W^(−nk) = s_n·cos θ + i·DIR·d_n·sin θ
        // (s, d their sum and difference, θ = 2π·nk/R), so X[k] and X[R − k] share the real-coefficient
        // sums C = a[0] + Σ s_n·cos θ and T = Σ d_n·sin θ: X[k] = C + i·DIR·T, X[R − k] = C − i·DIR·T.
        // A quarter of the direct sum's multiplications (R = 7: 36 complex products → 18 real-by-complex).
        constexpr int H = (R - 1) / 2;
        float2 s[H], d[H];
        float2 x0 = a[0];
#pragma unroll
        for (int n = 1; n <= H; ++n) {
            s[n - 1] = c_add(a[n], a[R - n]);
            d[n - 1] = c_sub(a[n], a[R - n]);
            x0 = c_add(x0, s[n - 1]);
        }
        float2 o[R];
        o[0] = x0;
#pragma unroll
        for (int k = 1; k <= H; ++k) {
            float2 c = a[0], t = make_float2(0.f, 0.f);
#pragma unroll
            for (int n = 1; n <= H; ++n) {
                const float2 w = fq_w<R, 1>(n * k);  // (cos θ, sin θ)
                c = make_float2(c.x + s[n - 1].x * w.x, c.y + s[n - 1].y * w.x);
                t = make_float2(t.x + d[n - 1].x * w.y, t.y + d[n - 1].y * w.y);
            }
            const float2 it = DIR > 0 ? make_float2(-t.y, t.x) : make_float2(t.y, -t.x);  // i·DIR·T
            o[k] = c_add(c, it);
            o[R - k] = c_sub(c, it);
        }
#pragma unroll
        for (int k = 0; k < R; ++k) a[k] = o[k];
    } else {
        constexpr int A = R % 3 == 0 ? 3 : R % 5 == 0 ? 5 : 7, B = R / A;
        static_assert(A * B == R && (B & (B - 1)) == 0, "R = odd factor × power of two");
        float2 u[B][A];
#pragma unroll
        for (int n2 = 0; n2 < B; ++n2) {
#pragma unroll
            for (int n1 = 0; n1 < A; ++n1) u[n2][n1] = a[B * n1 + n2];
            fq_dft<A, DIR>(u[n2]);
#pragma unroll
            for (int k1 = 1; k1 < A; ++k1)
                if (n2 > 0) u[n2][k1] = c_mul(u[n2][k1], fq_w<R, DIR>(n2 * k1));
        }
#pragma unroll
        for (int k1 = 0; k1 < A; ++k1) {
            float2 v[B];
#pragma unroll
            for (int n2 = 0; n2 < B; ++n2) v[n2] = u[n2][k1];
            fq_dft<B, DIR>(v);
#pragma unroll
            for (int k2 = 0; k2 < B; ++k2) a[k1 + A * k2] = v[k2];
        }
    }
}

// The Q-point DFT of y[m] (only m < Q/2 nonzero) as two Q/2-point DFTs: a[2j + e] =
// DFT_{Q/2}(y[m]·W_Q^(m·e))[j] (fp_dft32_half for any even Q).
template <int Q> __device__ __forceinline__ void fq_dft_half(const float2 (&y)[Q / 2], float2 (&a)[Q]) {
    float2 ev[Q / 2], od[Q / 2];
#pragma unroll
    for (int m = 0; m < Q / 2; ++m) {
        ev[m] = y[m];
        od[m] = m == 0 ? y[m] : c_mul(y[m], fq_w<Q, -1>(m));
    }
    fq_dft<Q / 2, -1>(ev);
    fq_dft<Q / 2, -1>(od);
#pragma unroll
    for (int j = 0; j < Q / 2; ++j) {
        a[2 * j] = ev[j];
        a[2 * j + 1] = od[j];
    }
}

// The first Q/2 outputs of the inverse Q-point DFT of a[]: o[m] = E[m] + W_Q^−m·O[m] (E, O the
// inverse Q/2-point DFTs of the even and odd entries).
template <int Q> __device__ __forceinline__ void fq_idft_first_half(const float2 (&a)[Q], float2 (&o)[Q / 2]) {
    float2 ev[Q / 2], od[Q / 2];
#pragma unroll
    for (int j = 0; j < Q / 2; ++j) {
        ev[j] = a[2 * j];
        od[j] = a[2 * j + 1];
    }
    fq_dft<Q / 2, 1>(ev);
    fq_dft<Q / 2, 1>(od);
#pragma unroll
    for (int m = 0; m < Q / 2; ++m) o[m] = c_add(ev[m], m == 0 ? od[m] : c_mul(od[m], fq_w<Q, 1>(m)));
}

#if __CUDA_ARCH__ >= 900  // thread-block clusters: sm_90 and later (the host takes P ≥ 128 only there)
// ---- N = 32768 … 131072 (P = 128 … 512, L ≤ N/2): one row pair per cluster of 2, 4 or 8 CTAs ---------
// (The design below is written for two CTAs, P = 128; fpc_stage1 generalises its two radix-2 steps to
// log2(2·CS) steps for clusters of CS CTAs.)
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

// A thread's place in a cluster kernel (CS = 2, 4, 8 CTAs of 512 threads; P = 64·CS; T = 2·CS threads
// per column, adjacent lanes j = 0 … T − 1; CTA c holds columns [c·256/CS, (c + 1)·256/CS) and
// segments k1 ∈ [64c, 64c + 64)): its column n2 and position pos, the bins k + 32·r it holds after
// stage 1 (r = bitrev_TL(j)), where they live (segment k + 32·(r & 1) of CTA r / 2: xo, the generic
// address of its k = 0 element) and the pair-max word of every CTA (shared::cluster addresses of
// this CTA's `pmax`).
//
// Mixed radix (R = 20, 24, 28 at CS = 2, 4: P = R·T = 80 … 224, N = 20480 … 57344): each lane's
// R-point DFT of its R/2 inputs (fq_dft_half) in place of the 32-point one, the lane steps' twiddles
// W_(R·2^s)^k as immediates (fq_w), 2R segments per CTA; the rest as at R = 32.
// The mixed-radix cluster sizes as (P, CS, R), for the entry lists (pair_fwd.cuh, pair_spec.cuh) and the
// host's MIXED_CLUSTER_P (cuda.rs).
#define FPC_MIXED_SIZES(X) X(80, 2, 20) X(96, 2, 24) X(112, 2, 28) X(160, 4, 20) X(192, 4, 24) X(224, 4, 28)
template <int CS, int R = 32>
struct FpcLane {
    static constexpr int T = 2 * CS, TL = CS == 2 ? 2 : CS == 4 ? 3 : 4;
    // P, N = 256·P (16384·CS at R = 32), log2 N at R = 32, this CTA's segments, and the offset of N's
    // stage-1 twiddle table (fft.cuh).
    static constexpr int P = R * T, N = 256 * P, LOGN = 13 + TL, SEG = 2 * R;
    static constexpr int TW = R == 32 ? (CS == 2 ? FC_TW_PAIR128 : CS == 4 ? FC_TW_PAIR256 : FC_TW_PAIR512) : FC_TW_MIXC(P);
    int j, n2, pos, r;
    float2* xo;
    unsigned pm[CS];
};

template <int CS, int R = 32>
__device__ __forceinline__ FpcLane<CS, R> fpc_lane(float2* x, int* pmax) {
    static_assert(CS == 2 || CS == 4 || CS == 8, "clusters of 2, 4 or 8 CTAs");
    static_assert(R == 32 || ((R == 20 || R == 24 || R == 28) && CS <= 4), "R = 32, or 20, 24, 28 at CS = 2, 4");
    FpcLane<CS, R> l;
    const unsigned rank = fp_cluster_rank();
    l.j = threadIdx.x & (FpcLane<CS>::T - 1);
    l.n2 = (int)rank * (256 / CS) + (int)(threadIdx.x >> FpcLane<CS>::TL);
    l.pos = fp_idx(l.n2 >> 4, l.n2 & 15);
    l.r = (int)(__brev((unsigned)l.j) >> (32 - FpcLane<CS>::TL));
    l.xo = fp_peer(x, (unsigned)(l.r >> 1)) + R * (l.r & 1) * 256 + l.pos;
#pragma unroll
    for (int c = 0; c < CS; ++c) l.pm[c] = fp_dsm(pmax, (unsigned)c);
    return l;
}

// The lane's own factor W_N^(32·n2·r) of the stage-1 twiddles W_N^(n2·k1), k1 = k + 32·r (wtab
// offset by n2; row k1 at k1·256).
template <int CS, int R>
__device__ __forceinline__ float2 fpc_twiddle(const FpcLane<CS, R>& l, const float2* __restrict__ wtab) {
    return wtab[(R * l.r) << 8];
}

// Stage 1 at P = 64·CS for lane l: y[m] = the pair's input at n1 = T·m + j. The 32-point DFT of the
// lane's 16 inputs (fp_dft32_half), then TL radix-2 steps across the T lanes by shuffles: step s
// pairs lanes differing in bit TL − s of j and forms the 32·2^s-point DFTs with the twiddle
// W_(32·2^s)^k·W_(2^s)^ρ, ρ the bits combined so far reversed — the table factor is the same for all
// lanes of a warp, the lane factor (−i)^ρ at s = 2 is a swap and from s = 3 one complex constant per
// step (model: tests.rs, cluster_stage1_model_matches_the_dft). Then × W_N^(n2·k1) (wtab offset by
// n2), stored at the owning CTA (l.xo); the largest component to every CTA's max word at byte
// offset `pm_off`.
// At R ≠ 32 (mixed radix) the lanes hold bins k + R·r, k < R, and the table twiddles W_(R·2^s)^k are
// immediates (fq_w); the model covers R = 20, 24, 28 as well.
template <int CS, int R = 32>
__device__ __forceinline__ void fpc_stage1(const float2 (&y)[R / 2], const FpcLane<CS, R>& l, const float2* __restrict__ tw, const float2* __restrict__ wtab, unsigned pm_off) {
    constexpr int TL = FpcLane<CS, R>::TL;
    float2 a[R];
    if constexpr (R == 32) fp_dft32_half(y, a);
    else fq_dft_half<R>(y, a);
    int rho = 0;
#pragma unroll
    for (int s = 1; s <= TL; ++s) {
        const int b = TL - s, jb = (l.j >> b) & 1;
        const float2 c = s >= 3 ? tw[rho << (FC_TWN_LOG - s)] : make_float2(1.f, 0.f);
#pragma unroll
        for (int k = 0; k < R; ++k) {
            const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1 << b), __shfl_xor_sync(0xffffffffu, a[k].y, 1 << b));
            const float2 e0 = jb == 0 ? a[k] : other, e1 = jb == 0 ? other : a[k];
            float2 t;
            if constexpr (R == 32) {
                if (s == 1) t = k == 0 ? e1 : c_mul(e1, tw[k << (FC_TWN_LOG - 6)]);
                else if (s == 2) t = c_mul(e1, fp_rot<-1>(tw[k << (FC_TWN_LOG - 7)], rho));
                else t = c_mul(e1, c_mul(tw[k << (FC_TWN_LOG - 5 - s)], c));
            } else {
                if (s == 1) t = k == 0 ? e1 : c_mul(e1, fq_w<2 * R, -1>(k));
                else if (s == 2) t = c_mul(e1, fp_rot<-1>(fq_w<4 * R, -1>(k), rho));
                else t = c_mul(e1, c_mul(fq_w<8 * R, -1>(k), c));
            }
            a[k] = jb == 0 ? c_add(e0, t) : c_sub(e0, t);
        }
        rho |= jb << (s - 1);
    }
    float mx = 0.f;
    if constexpr (CS >= 4) {
        // W_N^(n2·(k + 32r)) = W_N^(n2·k)·W_N^(32·n2·r): the first factor is the same for the T
        // lanes of a column (one broadcast sector per warp and k instead of T = 8, 16 rows of the
        // table: at P = 512 those rows were a third of the kernel's L1 wavefronts), the second one
        // load per lane (fpc_twiddle). All products before the first store: the stores go through a
        // generic pointer that may alias the table as far as the compiler knows, and a store
        // between two loads serialises them. ncu, P = 512 forward: 3.48 → 2.90 ms.
        const float2 wr = fpc_twiddle(l, wtab);
#pragma unroll
        for (int k = 0; k < R; ++k) {
            a[k] = c_mul(a[k], k == 0 ? wr : c_mul(wtab[k << 8], wr));
            mx = fmaxf(mx, fmaxf(fabsf(a[k].x), fabsf(a[k].y)));
        }
#pragma unroll
        for (int k = 0; k < R; ++k) l.xo[k * 256] = a[k];
    } else {
        // P = 128: a warp's 8 columns × 4 lanes read whole sectors of the table's rows (as
        // measured and validated; the factored form above was not faster there).
#pragma unroll
        for (int k = 0; k < R; ++k) {
            const float2 v = c_mul(a[k], wtab[(k + R * l.r) << 8]);
            mx = fmaxf(mx, fmaxf(fabsf(v.x), fabsf(v.y)));
            l.xo[k * 256] = v;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int c = 0; c < CS; ++c) fp_max_dsm(l.pm[c] + pm_off, __float_as_int(mx));
}

// The inverse of fpc_stage1: lane l reads B[k + 32·r]·conj(W_N^(n2·k1)) (from the owning CTA, all
// loads first), the steps s = TL … 1 mirrored — the lane with bit TL − s clear forms F[κ] + F[κ + h],
// the other (F[κ] − F[κ + h])·conj(W_(32·2^s)^k·W_(2^s)^ρ) — then the first 16 outputs of the inverse
// 32-point DFT: o[m] = output n1 = T·m + j.
template <int CS, int R = 32>
__device__ __forceinline__ void fpc_stage1_inv(float2 (&o)[R / 2], const FpcLane<CS, R>& l, const float2* __restrict__ tw, const float2* __restrict__ wtab) {
    constexpr int TL = FpcLane<CS, R>::TL;
    float2 a[R];
#pragma unroll
    for (int k = 0; k < R; ++k) a[k] = l.xo[k * 256];
    if constexpr (CS >= 4) {
        const float2 wr = fpc_twiddle(l, wtab);  // factored as in fpc_stage1
#pragma unroll
        for (int k = 0; k < R; ++k) a[k] = c_mulc(a[k], k == 0 ? wr : c_mul(wtab[k << 8], wr));
    } else {
#pragma unroll
        for (int k = 0; k < R; ++k) a[k] = c_mulc(a[k], wtab[(k + R * l.r) << 8]);
    }
    int rho = l.r;
#pragma unroll
    for (int s = TL; s >= 1; --s) {
        const int b = TL - s, jb = (l.j >> b) & 1;
        rho &= ~(1 << (s - 1));  // the bits combined before step s
        const float2 c = s >= 3 ? c_conj(tw[rho << (FC_TWN_LOG - s)]) : make_float2(1.f, 0.f);
#pragma unroll
        for (int k = 0; k < R; ++k) {
            const float2 other = make_float2(__shfl_xor_sync(0xffffffffu, a[k].x, 1 << b), __shfl_xor_sync(0xffffffffu, a[k].y, 1 << b));
            if (jb == 0) {
                a[k] = c_add(a[k], other);
            } else {
                const float2 d = c_sub(other, a[k]);
                if constexpr (R == 32) {
                    if (s == 1) {
                        a[k] = k == 0 ? d : c_mulc(d, tw[k << (FC_TWN_LOG - 6)]);
                    } else if (s == 2) {
                        const float2 w = tw[k << (FC_TWN_LOG - 7)];
                        a[k] = c_mul(d, fp_rot<1>(make_float2(w.x, -w.y), rho));
                    } else {
                        a[k] = c_mul(d, c_mul(c_conj(tw[k << (FC_TWN_LOG - 5 - s)]), c));
                    }
                } else {
                    if (s == 1) a[k] = k == 0 ? d : c_mul(d, fq_w<2 * R, 1>(k));
                    else if (s == 2) a[k] = c_mul(d, fp_rot<1>(fq_w<4 * R, 1>(k), rho));
                    else a[k] = c_mul(d, c_mul(fq_w<8 * R, 1>(k), c));
                }
            }
        }
    }
    if constexpr (R == 32) fp_idft32_first16(a, o);
    else fq_idft_first_half<R>(a, o);
}

#endif  // __CUDA_ARCH__ >= 900

#endif  // FC_BLOCK == 256
