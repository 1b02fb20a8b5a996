// The pair forwards (pair_tc.cuh's engine): P ≤ 32 (plain and staged), P = 64, P = 128 (a cluster
// of two CTAs). Compiled after pair_tc.cuh.
#if FC_BLOCK == 256

// The forward. CTA: 256 threads, one group of R = 32/P row pairs (fp_group_rows), group
// blockIdx.x. (Groups of 8 or 16 segments at P ≤ 16, as the backward and the spectrum take there,
// measured 3–6 % slower: NOTES.md, v10.)
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
    extern "C" __global__ void __launch_bounds__(256, FP_MINB(LOGP)) fc_fwd_pair##LOGP##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair<LOGP, ember_bf16, ember_bf16>(p); } \
    extern "C" __global__ void __launch_bounds__(256, FP_MINB(LOGP)) fc_fwd_pair##LOGP##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair<LOGP, ember_bf16, float>(p); }
FC_PAIR_ENTRIES(1)
FC_PAIR_ENTRIES(2)
FC_PAIR_ENTRIES(3)
FC_PAIR_ENTRIES(4)
FC_PAIR_ENTRIES(5)
// The staged forward where it keeps the plain kernel's occupancy (2 CTAs per SM): P = 32.
extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pair_staged5_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair_staged<5, ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(256, 2) fc_fwd_pair_staged5_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair_staged<5, ember_bf16, float>(p); }

// The staged u (STG) of the backward at P = 64 (CS = 1: one CTA), of the cluster forwards at
// P = 64·CS and of the cluster backward at P = 128. At T = 2·CS = 2, 4, 8 or 16 lanes per
// column a warp holds 16, 8, 4 or 2 columns, so its 2-byte loads of one m touched 2, 4, 8 or 16
// sectors for 64 useful bytes (ncu, CS = 8: the u loads and the output stores were a fifth of the
// L1 wavefronts), each thread issuing 16 of them. Here
// the CTA copies its columns [c0, c0 + 256/CS) of both rows, n1 < P/2 (L ≤ N/2 on these paths), by
// 16-byte loads into shared memory (rows of SW words: W = 128/CS words of data plus 8/CS of
// padding, so that the reads below, lanes j = 0 … T − 1 at word j·SW + w, fall in distinct banks),
// then each thread reads its 16 elements n1 = T·m + j there. Zero past L (L % 8 = 0: no chunk
// straddles it) and for an invalid row b.
// At mixed radix (R ≠ 32) the rows n1 < P/2 = R·CS.
template <int CS, int R = 32> struct FpcStg {
    static constexpr int COLS = 256 / CS, W = COLS / 2, SW = W + 8 / CS, NR = R * CS, CPR = COLS / 8;
    static constexpr int BYTES = 2 * NR * SW * 4;  // both rows
};
// After the CTA's segments, table, rows and pair max (with room for two sets of rows and pair maxima;
// the forward's row maxima, pmax[1] and pmax[2], lie within the first set's room).
#define FPC_STG_OFF ((64 * 256 * 8 + TC_TAB_WORDS * 32 * 4 + 2 * (2 * 48 + 4) + 15) & ~15)

// Rows n1 ∈ [n0, n0 + HR) of both rows of `src` (bf16, u's row layout), this CTA's columns, into
// stg (row r = n1 − n0 of row s at word (s·HR + r)·SW); all of a thread's 16-byte loads before its
// stores. fpc_stage_u takes all P/2 rows; the P = 128 backward's d_out two halves of them.
// At mixed radix the chunks (2·HR·CPR = 64·R) are not a multiple of 512: the last round's threads
// past the end load and store nothing (dst = −1 marks them).
template <int CS, int HR, int R = 32>
__device__ __forceinline__ void fpc_copy_rows(const FcParams& p, const ember_bf16* __restrict__ src, const FcRow& ra, const FcRow& rb, unsigned rank, int n0, unsigned* __restrict__ stg) {
    using S = FpcStg<CS, R>;
    constexpr int ALL = 2 * HR * S::CPR, PER = (ALL + 511) / 512;
    const int c0 = (int)rank * S::COLS;
    uint4 v[PER];
    int dst[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int w = threadIdx.x + 512 * i, s = w / (HR * S::CPR), e = w % (HR * S::CPR);
        const int r = e / S::CPR, q = e % S::CPR;
        // Fields, not a reference to either row: that would put both rows in local memory.
        const bool valid = s ? rb.valid : ra.valid;
        const i64 urow = s ? rb.urow : ra.urow;
        const i64 n = (i64)(n0 + r) * 256 + c0 + 8 * q;
        const bool in = ALL % 512 == 0 || w < ALL;
        v[i] = in && valid && n < p.L ? *reinterpret_cast<const uint4*>(src + urow + n) : make_uint4(0u, 0u, 0u, 0u);
        dst[i] = in ? (s * HR + r) * S::SW + 4 * q : -1;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        if (ALL % 512 != 0 && dst[i] < 0) continue;
        stg[dst[i]] = v[i].x;
        stg[dst[i] + 1] = v[i].y;
        stg[dst[i] + 2] = v[i].z;
        stg[dst[i] + 3] = v[i].w;
    }
}

template <int CS, int R = 32>
__device__ __forceinline__ void fpc_stage_u(const FcParams& p, const FcRow& ra, const FcRow& rb, unsigned rank, unsigned* __restrict__ stg) {
    fpc_copy_rows<CS, FpcStg<CS, R>::NR, R>(p, reinterpret_cast<const ember_bf16*>(p.u), ra, rb, rank, 0, stg);
}

// y[m] = (row a, row b) at n1 = T·m + j of the lane's column, from fpc_stage_u's copy.
// Lane j of column n2 (of the whole row; this CTA's columns start at rank·256/CS).
template <int CS, int R = 32>
__device__ __forceinline__ void fpc_read_u(float2 (&y)[R / 2], int n2, int j, unsigned rank, const unsigned* __restrict__ stg) {
    using S = FpcStg<CS, R>;
    const unsigned short* h = reinterpret_cast<const unsigned short*>(stg);
    const int c = n2 - (int)rank * S::COLS;
#pragma unroll
    for (int m = 0; m < R / 2; ++m) {
        const int n1 = 2 * CS * m + j;
        const unsigned a = h[n1 * 2 * S::SW + c], b = h[(S::NR + n1) * 2 * S::SW + c];
        y[m] = make_float2(__uint_as_float(a << 16), __uint_as_float(b << 16));
    }
}

// u staged and read back: the copy (fpc_stage_u), a block barrier, the lane's 16 elements.
template <int CS, int R = 32>
__device__ __forceinline__ void fpc_load_staged(float2 (&y)[R / 2], const FcParams& p, const FcRow& ra, const FcRow& rb, unsigned rank, int n2, int j, unsigned* __restrict__ stg) {
    fpc_stage_u<CS, R>(p, ra, rb, rank, stg);
    __syncthreads();
    fpc_read_u<CS, R>(y, n2, j, rank, stg);
}

// The staged output (STG at CS = 8 with bf16 output, hd = 1): the epilogue writes the lane's outputs into the
// staging copy at the places fpc_read_u read u from (fp_epilogue with OST = 2·T·SW bf16 per m),
// then the CTA stores its columns of both rows by 16-byte stores, the reverse of fpc_stage_u (only
// chunks below L, valid rows). The output rows are u's (hd = 1); so are z's, which a training
// forward stages and flushes the same way first (to `dst` = p.zs).
template <typename X> struct FpIsBf16 { static constexpr bool v = false; };
template <> struct FpIsBf16<ember_bf16> { static constexpr bool v = true; };

template <int CS, int R = 32>
__device__ __forceinline__ ember_bf16* fpc_out_slot(int n2, int j, unsigned rank, unsigned* __restrict__ stg) {
    using S = FpcStg<CS, R>;
    return reinterpret_cast<ember_bf16*>(stg) + j * 2 * S::SW + (n2 - (int)rank * S::COLS);
}

template <int CS, int R = 32>
__device__ __forceinline__ void fpc_flush_out(u64 dst, const FcParams& p, const FcRow& ra, const FcRow& rb, unsigned rank, const unsigned* __restrict__ stg) {
    using S = FpcStg<CS, R>;
    constexpr int ALL = 2 * S::NR * S::CPR;
    const int c0 = (int)rank * S::COLS;
    ember_bf16* out = reinterpret_cast<ember_bf16*>(dst);
#pragma unroll
    for (int i = 0; i < (ALL + 511) / 512; ++i) {
        const int w = threadIdx.x + 512 * i, s = w / (S::NR * S::CPR), e = w % (S::NR * S::CPR);
        if (ALL % 512 != 0 && w >= ALL) break;
        const int n1 = e / S::CPR, q = e % S::CPR;
        const bool valid = s ? rb.valid : ra.valid;
        const i64 urow = s ? rb.urow : ra.urow;
        const i64 n = (i64)n1 * 256 + c0 + 8 * q;
        const int src = (s * S::NR + n1) * S::SW + 4 * q;
        if (valid && n < p.L) *reinterpret_cast<uint4*>(out + urow + n) = make_uint4(stg[src], stg[src + 1], stg[src + 2], stg[src + 3]);
    }
}

// N = 16384 (P = 64), L ≤ N/2 only: one row pair per CTA of 512 threads, two threads per column
// (thread 2·n2 + h, h = 0/1 in neighbouring lanes). Stage 1 and its inverse by a radix-2 split
// across the two (fp64_stage1, fp64_stage1_inv). Segments (64 per pair, 4 per warp) and the
// epilogue as fc_fwd_pair; 128 KB of data, one CTA (16 warps) per SM.
// (A staged u, as the cluster forwards read, measured no faster here: the two lanes of a column
// already load whole 32-byte sectors. The P = 64 backward does stage it.)
template <typename T, typename TO>
__device__ void fc_fwd_pair64(const FcParams& p) {
    constexpr int LOGN = 14;  // P = 64
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);  // [1], [2]: the rows' largest |input| ([0] unused: fp_pair_scale_rows)
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const int h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const bool pre = p.has_pre;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    fp_one_pair_rows(p, rows, pmax, blockIdx.x, rph, pph);
    __syncthreads();
    const FcRow ra = rows[0], rb = rows[1];
    if (!ra.valid) return;  // uniform over the CTA
    const FpRow<T, TO> fa = fp_row<T, TO>(p, ra, n2), fb = fp_row<T, TO>(p, rb, n2);
    const float2* wtab = tw + FC_TW_PAIR64 + n2;  // W_N^(n2·k1) at k1·256
    // ---- stage 1. y[m] = x[2m + h] (offset (2m + h)·256), m < 16: the rows moved on by h·256.
    // Again with the rows rebalanced where they are binades apart (fp_balance).
    FpRow<T, TO> ha = fa, hb = fb;
    fp_row_shift(ha, h << 8);
    fp_row_shift(hb, h << 8);
    {
        float2 y[16];
        fp_load16<9>(y, pre, ha, hb);
        float ma = 0.f, mb = 0.f;
        fp_rows_absmax<16>(y, ma, mb);
        fp_rows_max_commit(ma, mb, &pmax[1]);
        fp64_stage1<false>(y, h, x, pos, tw, wtab, &pmax[0]);
    }
    __syncthreads();
    const FpBal bal = fp_balance(pmax[1], pmax[2]);
    if (bal.redo) {  // uniform over the CTA
        float2 y[16];
        fp_load16<9>(y, pre, ha, hb);
        fp_rows_scale(y, bal.s);
        fp64_stage1<false>(y, h, x, pos, tw, wtab, &pmax[0]);
        __syncthreads();
    }
    // ---- stage 2: 64 segments, 4 per warp (pair scale from the row maxima: fp_pair_scale_rows).
    float s1, inv1;
    fp_pair_scale_rows(&pmax[1], 32, s1, inv1);
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
    fp_epilogue_sel<16, 9>(fp_epilogue_flags(p), o16, 16, fp_out_factors(inv1, bal), ks, ea, eb);
}

extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair64<ember_bf16, ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(512, 1) fc_fwd_pair6_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pair64<ember_bf16, float>(p); }

#if __CUDA_ARCH__ >= 900  // clusters (P = 128 … 512)
// The forward on a cluster of CS CTAs (P = 64·CS, N = 16384·CS, L ≤ N/2; fpc_lane, fpc_stage1): one
// row pair per cluster, clusters consecutive CTAs.
// STG (bf16 u without pregate, L % 8 = 0, 16-byte aligned u: the host's choice): stage 1
// reads u from fpc_stage_u's copy in shared memory instead of by 2-byte global loads.
// R ≠ 32: the mixed-radix sizes P = R·2·CS (FpcLane), staged or not as at R = 32 (the host's choice).
template <int CS, typename T, typename TO, bool STG = false, int R = 32>
__device__ void fc_fwd_pairc(const FcParams& p) {
    using L = FpcLane<CS, R>;
    constexpr int TL = L::TL, N = L::N, SEG = L::SEG;
    FC_SMEM_DECL
    float2* x = fc_smem;  // this CTA's 64 segments
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    FcRow* rows = reinterpret_cast<FcRow*>(tab + TC_TAB_WORDS * 32);  // [0] = row a, [1] = row b
    int* pmax = reinterpret_cast<int*>(rows + 2);
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    const unsigned* gtab = reinterpret_cast<const unsigned*>(tw + FC_TW_TOTAL);
    for (int i = threadIdx.x; i < TC_TAB_WORDS * 32; i += 512) tab[i] = gtab[i];
    const unsigned rank = fp_cluster_rank();
    const L l = fpc_lane<CS, R>(x, pmax);
    const bool pre = p.has_pre;
    const i64 rph = p.B * (i64)p.hd * p.hd;
    const i64 pph = (rph + 1) / 2;
    fp_one_pair_rows(p, rows, pmax, blockIdx.x / CS, rph, pph);  // the cluster's pair (clusters are consecutive CTAs)
    // Every CTA has started, set its rows and zeroed its max before any remote access.
    fp_cluster_sync();
    const FcRow ra = rows[0], rb = rows[1];
    if (!ra.valid) return;  // uniform over the cluster (every CTA computes the same rows)
    FpRow<T, TO> fa = fp_row<T, TO>(p, ra, l.n2), fb = fp_row<T, TO>(p, rb, l.n2);
    // Thread j's elements n1 = T·m + j sit at offset j·256 + m·T·256.
    fp_row_shift(fa, l.j << 8);
    fp_row_shift(fb, l.j << 8);
    const float2* wtab = tw + L::TW + l.n2;  // W_N^(n2·k1) at k1·256
    // ---- stage 1.
    {
        float2 y[R / 2];
        if constexpr (STG) {
            unsigned* stg = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(fc_smem) + FPC_STG_OFF);
            fpc_load_staged<CS, R>(y, p, ra, rb, rank, l.n2, l.j, stg);
        } else {
            fp_load16<8 + TL>(y, pre, fa, fb);
        }
        fpc_stage1<CS, R>(y, l, tw, wtab, 0);
    }
    fp_cluster_sync();
    // ---- stage 2: this CTA's SEG = 2R segments (k1 = SEG·rank + sg; 64, 4 per warp, at R = 32).
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < SEG; sg += 16) {
        const float4* kf = reinterpret_cast<const float4*>(p.spec) + (i64)ra.g * (N / 2) + ((i64)(rank * SEG + sg) << 7);
        fp_segment(x + sg * 256, kf, tab, s1);
    }
    fp_cluster_sync();
    // ---- inverse stage 1 (every CTA's segments), then the epilogue.
    const float ks = reinterpret_cast<const float*>(p.spec)[(i64)p.heads * 2 * N + ra.g];
    float2 o16[R / 2];
    fpc_stage1_inv<CS, R>(o16, l, tw, wtab);
    fp_cluster_arrive();  // done reading the other CTAs' shared memory
    // Staged output at CS = 8 only (H200, same run: P = 512 fwd −8.7 %; P = 256 +0.7 %, P = 128 +3.5 %:
    // with 4 or 8 lanes per column the direct 2-byte stores cost less than the extra barrier).
    // A training forward's z goes through the staging copy at CS = 4 too (p.zstage; NOTES.md "v22b"),
    // and at CS = 2 in the mixed-radix builds (R ≠ 32; "v24c"), the output after it by direct stores.
    // Not at P = 128: that build then spilled 36 bytes instead of 16 and its plain forward took
    // 3.46 ms instead of 3.01 (H200, L = 16384, B = 16, H = 768).
    int sel = fp_epilogue_flags(p);
    if constexpr (STG && FpIsBf16<TO>::v && (CS == 8 || CS == 4 || R != 32)) {
        if (p.hd == 1 && (CS == 8 || ((sel & 8) && p.zstage))) {
            using S = FpcStg<CS, R>;
            unsigned* stg = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(fc_smem) + FPC_STG_OFF);
            constexpr int OST = 2 * L::T * S::SW;
            TO* const out_a = fa.out;
            TO* const out_b = fb.out;
            fa.out = reinterpret_cast<TO*>(fpc_out_slot<CS, R>(l.n2, l.j, rank, stg));
            fb.out = fa.out + S::NR * 2 * S::SW;
            if (sel & 8) {
                // A training forward's z (u's dtype, bf16 here as the output) through the staging copy
                // first: its direct 2-byte stores cost a training forward at P = 512 +14 % (H200,
                // B = 4, H = 256, L = 65536), as the unstaged output did. z is the epilogue's value
                // before GELU, mask and postgate, i.e. its hd = 1 form with the mask at 1.
                const float ma = fa.mask, mb = fb.mask;
                fa.mask = fb.mask = 1.f;
                fp_epilogue_sel<R / 2, 8 + TL, OST>(1, o16, R / 2, make_float2(inv1, inv1), ks, fa, fb);
                __syncthreads();
                fpc_flush_out<CS, R>(p.zs, p, ra, rb, rank, stg);
                __syncthreads();  // the staging copy is free again
                fa.mask = ma;
                fb.mask = mb;
                sel &= ~8;
            }
            if constexpr (CS == 8) {
                fp_epilogue_sel<R / 2, 8 + TL, OST>(sel, o16, R / 2, make_float2(inv1, inv1), ks, fa, fb);
                __syncthreads();
                fpc_flush_out<CS, R>(p.out, p, ra, rb, rank, stg);
                fp_cluster_wait();
                return;
            }
            fa.out = out_a;
            fb.out = out_b;
        }
    }
    fp_epilogue_sel<R / 2, 8 + TL>(sel, o16, R / 2, make_float2(inv1, inv1), ks, fa, fb);
    fp_cluster_wait();  // the others are done reading ours: all may exit
}

// P = 128 (logp 7, clusters of 2: the default for N = 32768); P = 256 and 512 (logp 8 and 9, clusters
// of 4 and 8: N = 65536 by default, 131072 opt-in by EMBER_FFTCONV_PAIR_BIG=1; cuda.rs, pair_big).
// Each with its staged-u variant (STG; fc_fwd_pair_staged*, the host's choice).
#define FPC_FWD(LOGP, CS, TO, SFX) \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pair##LOGP##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, TO>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pair_staged##LOGP##_bf16_##SFX(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, TO, true>(p); }
FPC_FWD(7, 2, ember_bf16, bf16)
FPC_FWD(7, 2, float, f32)
FPC_FWD(8, 4, ember_bf16, bf16)
FPC_FWD(8, 4, float, f32)
FPC_FWD(9, 8, ember_bf16, bf16)
FPC_FWD(9, 8, float, f32)

// Mixed radix on clusters (NOTES.md "v23"): P = 80, 96, 112 on clusters of 2 (N = 20480, 24576, 28672
// in place of 32768) and P = 160, 192, 224 on clusters of 4 (N = 40960, 49152, 57344 in place of
// 65536): fc_fwd_pairm{P} with u staged, fc_fwd_pairmd{P} with direct loads (a pregate, L % 8 ≠ 0 or an
// unaligned u).
#define FPC_FWD_MIXED(P, CS, R)                                                                                                                                                        \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pairm##P##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, ember_bf16, true, R>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pairm##P##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, float, true, R>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pairmd##P##_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, ember_bf16, false, R>(p); } \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_fwd_pairmd##P##_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_pairc<CS, ember_bf16, float, false, R>(p); }
FPC_MIXED_SIZES(FPC_FWD_MIXED)

#endif  // __CUDA_ARCH__ >= 900

#endif  // FC_BLOCK == 256
