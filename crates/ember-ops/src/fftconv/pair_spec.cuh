// The pair kernels' filter spectrum (pair_tc.cuh's engine). Compiled after pair_tc.cuh.
#if FC_BLOCK == 256

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
// 2^e at kscale. inv_n = 1/N (exact for a power of two; the mixed-radix sizes round it once).
__device__ __forceinline__ float fp_inv_pow2(int logn) { return __int_as_float((127 - logn) << 23); }
__device__ __forceinline__ void fp_spec_out(const float2* __restrict__ src, float2* __restrict__ dst, int count, int dmax, float inv1, float inv_n, float* kscale, bool put_scale, int nthreads) {
    const float kmax = __int_as_float(dmax) * inv1 * inv_n;  // powers of two: exact (it only sets e)
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

// k_eff[t] on the pair spectrum's path, without D: k[t] for t < Lk (k_rev is never given here, see
// use_pair_spectrum; D, the tap at t = 0, is added by fp_keff_d). Branch-free, so that a thread's
// loads of one head are issued together: fc_keff's tests (D, k_rev) split the loads into one basic
// block each, one in flight at a time (as fp_load16 before v9c).
__device__ __forceinline__ float fp_keff_k(const FcParams& p, int g, i64 t) {
    return t < p.lk ? reinterpret_cast<const float*>(p.k)[(i64)g * p.lk + t] : 0.f;
}
// D of head g (0 without D): k_eff[0] = k[0] + D.
__device__ __forceinline__ float fp_keff_d(const FcParams& p, int g) {
    return p.dd ? reinterpret_cast<const float*>(p.dd)[g] : 0.f;
}

// P ≤ 32: CTA of 256 threads, R heads (as the forward's row pairs: thread n2 owns column n2); R = 32/P
// (32 segments) or fewer for small P (fc_spec_pair{LOGP}g{R}): the spectrum has only H heads, and at
// 32 segments per CTA small P leaves most SMs idle (L = 256: 48 CTAs for 768 heads).
template <int LOGP, int R = (32 >> LOGP)>
__device__ void fc_spec_pair(const FcParams& p) {
    constexpr int P = 1 << LOGP, LOGN = LOGP + 8;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(fc_smem) + FP_TAB_OFF);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [r]: stage 1's max, [R + r]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, 256);
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
        for (int n1 = 0; n1 < P; ++n1) a[n1] = make_float2(n1 < P / 2 ? fp_keff_k(p, g, n1 * 256 + n2) : 0.f, 0.f);
        if (n2 == 0) a[0].x += fp_keff_d(p, g);
        fp_stage1<P>(a, true, x + r * P * 256, pos, wtab, &pmax[r]);
    }
    __syncthreads();
    for (int sg = threadIdx.x >> 5; sg < R * P; sg += 8) {
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
        fp_spec_out(x + r * P * 256, reinterpret_cast<float2*>(p.spec) + (i64)g * n, P * 256, pmax[R + r], inv1, fp_inv_pow2(LOGN), kscale + g, threadIdx.x == 0, 256);
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
    fp_copy_tab(tab, p, 512);
    if (threadIdx.x < 2) pmax[threadIdx.x] = 0;
    __syncthreads();
    const int g = blockIdx.x, h = threadIdx.x & 1, n2 = threadIdx.x >> 1;
    const int pos = fp_idx(n2 >> 4, n2 & 15);
    const i64 n = (i64)1 << LOGN;
    {
        float2 y[16];
#pragma unroll
        for (int m = 0; m < 16; ++m) y[m] = make_float2(fp_keff_k(p, g, (2 * m + h) * 256 + n2), 0.f);
        if (threadIdx.x == 0) y[0].x += fp_keff_d(p, g);  // t = 0: h = 0, n2 = 0
        fp64_stage1(y, h, x, pos, tw, tw + FC_TW_PAIR64 + n2, &pmax[0]);
    }
    __syncthreads();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < 64; sg += 16) fp_warp_max_to(fp_spec_segment(x + sg * 256, tab, s1), &pmax[1]);
    __syncthreads();
    fp_spec_out(x, reinterpret_cast<float2*>(p.spec) + (i64)g * n, 64 * 256, pmax[1], inv1, fp_inv_pow2(LOGN), reinterpret_cast<float*>(p.spec) + 2 * (i64)p.heads * n + g, threadIdx.x == 0, 512);
}

#if __CUDA_ARCH__ >= 900  // clusters (P = 128 … 512)
// P = 64·CS: one head per cluster of CS CTAs of 512 threads (fpc_lane, fpc_stage1); each CTA writes
// its own 64 segments. R ≠ 32: the mixed-radix sizes P = 2R·CS (2R segments per CTA).
template <int CS, int R = 32>
__device__ void fc_spec_pairc(const FcParams& p) {
    using L = FpcLane<CS, R>;
    constexpr int LOGN = L::LOGN, TL = L::TL, SEG = L::SEG;
    FC_SMEM_DECL
    float2* x = fc_smem;
    unsigned* tab = reinterpret_cast<unsigned*>(x + 64 * 256);
    int* pmax = reinterpret_cast<int*>(tab + TC_TAB_WORDS * 32);  // [0]: stage 1's max, [1]: D's
    const float2* tw = reinterpret_cast<const float2*>(p.tw);
    fp_copy_tab(tab, p, 512);
    if (threadIdx.x < 2) pmax[threadIdx.x] = 0;
    const unsigned rank = fp_cluster_rank();
    const L l = fpc_lane<CS, R>(x, pmax);
    const int g = blockIdx.x / CS;
    const i64 n = L::N;
    fp_cluster_sync();  // every CTA started, maxima zeroed
    {
        float2 y[R / 2];
#pragma unroll
        for (int m = 0; m < R / 2; ++m) y[m] = make_float2(fp_keff_k(p, g, (i64)((m << TL) + l.j) * 256 + l.n2), 0.f);
        if (l.j == 0 && l.n2 == 0) y[0].x += fp_keff_d(p, g);  // t = 0
        fpc_stage1<CS, R>(y, l, tw, tw + L::TW + l.n2, 0);
    }
    fp_cluster_sync();
    float s1, inv1;
    fp_pair_scale(pmax[0], s1, inv1);
    for (int sg = threadIdx.x >> 5; sg < SEG; sg += 16) {
        float mx = fp_spec_segment(x + sg * 256, tab, s1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if ((threadIdx.x & 31) == 0)
#pragma unroll
            for (int c = 0; c < CS; ++c) fp_max_dsm(l.pm[c] + 4, __float_as_int(mx));
    }
    fp_cluster_sync();  // the head's largest |D| from every CTA
    const float inv_n = R == 32 ? fp_inv_pow2(LOGN) : 1.f / L::N;
    fp_spec_out(x, reinterpret_cast<float2*>(p.spec) + (i64)g * n + (i64)rank * SEG * 256, SEG * 256, pmax[1], inv1, inv_n, reinterpret_cast<float*>(p.spec) + 2 * (i64)p.heads * n + g, rank == 0 && threadIdx.x == 0, 512);
}

#endif  // __CUDA_ARCH__ >= 900

#define FC_SPEC_PAIR_ENTRY(LOGP) \
    extern "C" __global__ void __launch_bounds__(256, 2) fc_spec_pair##LOGP(FcParams p) { ember_grid_dependency_wait(); fc_spec_pair<LOGP>(p); }
FC_SPEC_PAIR_ENTRY(1)
FC_SPEC_PAIR_ENTRY(2)
FC_SPEC_PAIR_ENTRY(3)
FC_SPEC_PAIR_ENTRY(4)
FC_SPEC_PAIR_ENTRY(5)
#define FC_SPEC_PAIR_NARROW(LOGP, R) \
    extern "C" __global__ void __launch_bounds__(256, 2) fc_spec_pair##LOGP##g##R(FcParams p) { ember_grid_dependency_wait(); fc_spec_pair<LOGP, R>(p); }
FC_SPEC_PAIR_NARROW(1, 4)
FC_SPEC_PAIR_NARROW(2, 2)
FC_SPEC_PAIR_NARROW(3, 2)
extern "C" __global__ void __launch_bounds__(512, 1) fc_spec_pair6(FcParams p) { ember_grid_dependency_wait(); fc_spec_pair64(p); }
#if __CUDA_ARCH__ >= 900
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512, 1) fc_spec_pair7(FcParams p) { ember_grid_dependency_wait(); fc_spec_pairc<2>(p); }
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(512, 1) fc_spec_pair8(FcParams p) { ember_grid_dependency_wait(); fc_spec_pairc<4>(p); }
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(512, 1) fc_spec_pair9(FcParams p) { ember_grid_dependency_wait(); fc_spec_pairc<8>(p); }
// The mixed-radix cluster sizes (pair_fwd.cuh, FPC_FWD_MIXED).
#define FC_SPEC_PAIR_MIXED(P, CS, R) \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(512, 1) fc_spec_pairm##P(FcParams p) { ember_grid_dependency_wait(); fc_spec_pairc<CS, R>(p); }
FPC_MIXED_SIZES(FC_SPEC_PAIR_MIXED)
#endif

#endif  // FC_BLOCK == 256
