// Row kernels of the Clifford layers: one team of threads per batch row b covers all N channels, so
// the per-grade RMS norm's reduction over channels happens on chip, in a fixed order.
//
// Prepended by the launch code (cuda.rs): ember's common header, then the generated prefix with
//   CL_M (blades), CL_P (paths), CL_NG (grades) and the ember-ga device functions this kernel calls,
// and these options: -DEMBER_T=<float|ember_f16|ember_bf16> -DCL_KIND=<kind> -DCL_V=<1|2|4>, and for
// the fused forward -DCL_NORM=<0|1> -DCL_K=<0|1>.
//
// Layout: activations (M × B × N), element (j, b, n) at j·B·N + b·N + n; weights w (N × P) f32;
// per-row values (B × NG). Each thread takes CL_V consecutive channels of one row per step (one
// CL_V-wide vector load per blade); N % CL_V == 0 is the launcher's promise.
//
// Kinds:
//   CL_KIND_FWD      fused forward: o = cl_fwd(x, y, w); no norm: out = o; norm: per-row sums of
//                    squares → r, out = cl_scale(o, 1/r). CL_K = 1 keeps each thread's o in registers
//                    across the reduction (N ≤ team·V); CL_K = 0 recomputes o in a second pass (the
//                    inputs come back from L2).
//   CL_KIND_DOT      backward stats of the fused layer: per row and grade D = Σ g·o →
//                    coef[b][k] = (a, c) = (1/r, D/(N r²)), what cl_bwd_norm needs.
//   CL_KIND_NORMFWD  norm of a product computed elsewhere: o (f32) → out = o/r, rms.
//   CL_KIND_NORMBWD  its gradient: d_o = cl_normbwd(g, o, 1/r, D/(N r²)) (f32).
#define CL_KIND_FWD 1
#define CL_KIND_DOT 2
#define CL_KIND_NORMFWD 3
#define CL_KIND_NORMBWD 4

// CL_WS = 1 selects the staged variants (weights in shared memory, persistent CTAs) of the fused
// forward and of CL_KIND_DOT with CL_DOT_O = 1.
#ifndef CL_WS
#define CL_WS 0
#endif

typedef EMBER_T act_t;
#define CL_EPS 1e-6f
#define CL_THREADS 256

// ---- CL_V-wide loads and stores, converted to/from f32 -------------------------------------------
template <int V> __device__ __forceinline__ void cl_ldv(const float* p, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else if constexpr (V == 2) {
        const float2 q = *reinterpret_cast<const float2*>(p);
        v[0] = q.x; v[1] = q.y;
    } else {
        v[0] = *p;
    }
}
// Raw 16-bit words of a half type to f32.
template <typename H> struct cl_half;
template <> struct cl_half<ember_bf16> {
    static __device__ __forceinline__ float f32(u32 bits) { return ember_bf16_bits_to_f32(bits); }
};
template <> struct cl_half<ember_f16> {
    static __device__ __forceinline__ float f32(u32 bits) { return ember_f16_bits_to_f32(bits); }
};
template <int V, typename H> __device__ __forceinline__ void cl_ldv(const H* p, float (&v)[V]) {
    if constexpr (V == 4) {
        const uint2 q = *reinterpret_cast<const uint2*>(p);
        v[0] = cl_half<H>::f32(q.x & 0xffffu);
        v[1] = cl_half<H>::f32(q.x >> 16);
        v[2] = cl_half<H>::f32(q.y & 0xffffu);
        v[3] = cl_half<H>::f32(q.y >> 16);
    } else if constexpr (V == 2) {
        const u32 q = *reinterpret_cast<const u32*>(p);
        v[0] = cl_half<H>::f32(q & 0xffffu);
        v[1] = cl_half<H>::f32(q >> 16);
    } else {
        v[0] = ember_to_f32(*p);
    }
}
template <int V> __device__ __forceinline__ void cl_stv(float* p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        *p = v[0];
    }
}
template <int V, typename H> __device__ __forceinline__ void cl_stv(H* p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<uint2*>(p) = make_uint2(ember_pack2<H>(v[0], v[1]), ember_pack2<H>(v[2], v[3]));
    } else if constexpr (V == 2) {
        *reinterpret_cast<u32*>(p) = ember_pack2<H>(v[0], v[1]);
    } else {
        *p = ember_from_f32<H>(v[0]);
    }
}

// Load blade j of CL_V channels for all blades: v[j][lane] from t + j·BN + base.
template <typename T> __device__ __forceinline__ void cl_load_mv(const T* t, i64 BN, i64 base, float (&v)[CL_M][CL_V]) {
#pragma unroll
    for (int j = 0; j < CL_M; ++j) cl_ldv<CL_V>(t + (i64)j * BN + base, v[j]);
}
template <typename T> __device__ __forceinline__ void cl_store_mv(T* t, i64 BN, i64 base, const float (&o)[CL_V][CL_M]) {
#pragma unroll
    for (int j = 0; j < CL_M; ++j) {
        float v[CL_V];
#pragma unroll
        for (int c = 0; c < CL_V; ++c) v[c] = o[c][j];
        cl_stv<CL_V>(t + (i64)j * BN + base, v);
    }
}

// Sum NS values over the team of `team` threads (a multiple of 32 dividing the block): warp
// shuffles, then the team's warps in order through shared memory. Every thread of the block must
// call it; afterwards every thread holds its team's sums. Deterministic.
template <int NS> __device__ __forceinline__ void cl_team_sum(float (&v)[NS], float* red, int team) {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v[s] += __shfl_xor_sync(0xffffffffu, v[s], off);
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int s = 0; s < NS; ++s) red[warp * NS + s] = v[s];
    }
    __syncthreads();
    const int per = team >> 5, first = (threadIdx.x / team) * per;
#if CL_FAST_NORM
    // All NS sums in one loop over the team's warps (one pass of loads and one loop test per warp,
    // not NS loops); each sum still runs over q in order from 0: the same bits as the loops below.
    float t[NS];
#pragma unroll
    for (int s = 0; s < NS; ++s) t[s] = 0.0f;
    for (int q = 0; q < per; ++q) {
#pragma unroll
        for (int s = 0; s < NS; ++s) t[s] += red[(first + q) * NS + s];
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) v[s] = t[s];
#else
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        float t = 0.0f;
        for (int q = 0; q < per; ++q) t += red[(first + q) * NS + s];
        v[s] = t;
    }
#endif
    __syncthreads();
}

// CL_FAST_NORM = 1 (the half types' builds, cuda.rs `fast_norm_opt`): the row kernels' norm tail in
// fewer instructions — a grade's 1/r as one rsqrt (within 2 ulp) and r = m·rsqrt(m) instead of an IEEE
// sqrt and division (~25 instructions per grade), 1/N once per kernel, and the team sum's second half
// in one loop. Measured on an H200 (NOTES "v18"): the half types' staged forward 19–25 % faster; the
// f32 forward slower at N = 1024 and B·N ≥ 2^22 when timed back to back (faster under ncu alone, not
// understood), so f32 keeps 0 and its bits.
#ifndef CL_FAST_NORM
#define CL_FAST_NORM 0
#endif
// A grade's r = sqrt(ss/N + eps) and a = 1/r (inv_n = 1/N).
__device__ __forceinline__ float cl_inv_rms(float ss, float inv_n, i64 N, float& r) {
#if CL_FAST_NORM
    const float m = fmaf(ss, inv_n, CL_EPS);
    const float a = rsqrtf(m);
    r = m * a;
    return a;
#else
    r = sqrtf(ss / (float)N + CL_EPS);
    return 1.0f / r;
#endif
}

#if CL_KIND == CL_KIND_FWD || CL_KIND == CL_KIND_DOT
// o (and the per-grade sums of squares, added to ss) of CL_V channels n0.. of row b.
__device__ __forceinline__ void cl_fwd_group(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                             i64 BN, i64 base, i64 n0, float (&o)[CL_V][CL_M], float (&ss)[CL_NG]) {
    float xv[CL_M][CL_V], yv[CL_M][CL_V];
    cl_load_mv(x, BN, base, xv);
    cl_load_mv(y, BN, base, yv);
#pragma unroll
    for (int c = 0; c < CL_V; ++c) {
        float xi[CL_M], yi[CL_M], wi[CL_P], s[CL_NG];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) { xi[j] = xv[j][c]; yi[j] = yv[j][c]; }
#pragma unroll
        for (int p = 0; p < CL_P; ++p) wi[p] = __ldg(w + (n0 + c) * CL_P + p);
        cl_fwd(xi, yi, wi, o[c], s);
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) ss[k] += s[k];
    }
}

#if CL_WS
// The weights of all N channels staged once per CTA in shared memory, in one of two layouts.
//
// CL_WGROUP = 1 (default): w's own order (channel-major, N × P), each group of CL_V channels' CL_V·P
// words contiguous, the groups CL_WGS words apart with CL_WGS / 4 odd, so the P 16-byte reads of a
// quarter-warp (8 groups) fall on 8 different bank quads: conflict-free. Copied by 16-byte
// cp.async straight from w (N·P / 4 units, 10 per thread at N = 512 in Cl(3,0)), all in flight at
// once with the first step's x and y; 4-byte copies where w is not 16-byte aligned.
//
// CL_WGROUP = 0: transposed, sw[p][n], read as CL_V-wide vectors per path (conflict-free too), but
// staged element by element: a 4-byte cp.async per weight (CL_WCP = 1; 40 per thread at N = 512,
// each issue waiting on the previous one's address registers: ~12 % of the forward's samples at
// 4096 × 512 on an H200, ~5 µs before the first step) or v2's __ldg and transposing store
// (CL_WCP = 0). (A row stride of N + 4 words for the transposing stores was measured no faster.)
#ifndef CL_WGROUP
#define CL_WGROUP 1
#endif
#if CL_WGROUP && (CL_V * CL_P) % 4 != 0
#undef CL_WGROUP
#define CL_WGROUP 0  // groups of 16-byte units only
#endif
#ifndef CL_WCP
#define CL_WCP 1
#endif
#if CL_WGROUP
#define CL_WGW (CL_V * CL_P)                                     // words of a group
#define CL_WGS (CL_WGW + ((CL_WGW / 4) % 2 == 0 ? 4 : 0))        // group stride, CL_WGS / 4 odd
#define CL_WWORDS(N) ((N) / CL_V * CL_WGS)
#else
#define CL_WSTRIDE(N) (N)
#define CL_WWORDS(N) (CL_P * CL_WSTRIDE(N))
#endif
// Issues the weights' copies (CL_WCP = 0: copies them); the caller commits and waits.
__device__ __forceinline__ void cl_stage_w_issue(const float* __restrict__ w, float* sw, i64 N) {
    const int total = (int)N * CL_P;
#if CL_WGROUP
    if ((reinterpret_cast<unsigned long long>(w) & 15) == 0) {
        for (int u = threadIdx.x; u < total / 4; u += blockDim.x) {
            const int g = u / (CL_WGW / 4);
            cl_cp_async<16>(sw + g * CL_WGS + 4 * (u - g * (CL_WGW / 4)), w + 4 * u);
        }
    } else {
        for (int i = threadIdx.x; i < total; i += blockDim.x) {
            const int g = i / CL_WGW;
            cl_cp_async<4>(sw + g * CL_WGS + (i - g * CL_WGW), w + i);
        }
    }
#elif CL_WCP
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        const int n = i / CL_P;
        cl_cp_async<4>(sw + (i - n * CL_P) * CL_WSTRIDE(N) + n, w + i);
    }
#else
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
        const int n = i / CL_P;
        sw[(i - n * CL_P) * CL_WSTRIDE(N) + n] = __ldg(w + i);
    }
#endif
}
// The weights staged, and every copy this thread issued before landed.
__device__ __forceinline__ void cl_stage_w(const float* __restrict__ w, float* sw, i64 N) {
    cl_stage_w_issue(w, sw, N);
    cl_cp_commit();
    cl_cp_wait<0>();
}
// cl_fwd_group with x and y already loaded and the weights from sw.
__device__ __forceinline__ void cl_fwd_vals(const float (&xv)[CL_M][CL_V], const float (&yv)[CL_M][CL_V], const float* sw, i64 N, i64 n0,
                                            float (&o)[CL_V][CL_M], float (&ss)[CL_NG]) {
    float wv[CL_P][CL_V];
#if CL_WGROUP
    // The group's words are (channel c, path p) at c·P + p.
    const float* gw = sw + n0 / CL_V * CL_WGS;
    float f[CL_WGW / 4][4];
#pragma unroll
    for (int k = 0; k < CL_WGW / 4; ++k) cl_ldv<4>(gw + 4 * k, f[k]);
#pragma unroll
    for (int p = 0; p < CL_P; ++p) {
#pragma unroll
        for (int c = 0; c < CL_V; ++c) wv[p][c] = f[(c * CL_P + p) / 4][(c * CL_P + p) % 4];
    }
#else
#pragma unroll
    for (int p = 0; p < CL_P; ++p) cl_ldv<CL_V>(sw + (i64)p * CL_WSTRIDE(N) + n0, wv[p]);
#endif
#pragma unroll
    for (int c = 0; c < CL_V; ++c) {
        float xi[CL_M], yi[CL_M], wi[CL_P], s[CL_NG];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) { xi[j] = xv[j][c]; yi[j] = yv[j][c]; }
#pragma unroll
        for (int p = 0; p < CL_P; ++p) wi[p] = wv[p][c];
        cl_fwd(xi, yi, wi, o[c], s);
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) ss[k] += s[k];
    }
}
#endif

#endif

#if CL_KIND == CL_KIND_FWD
__device__ __forceinline__ void cl_scale_store(act_t* __restrict__ out, i64 BN, i64 base, float (&o)[CL_V][CL_M], const float (&a)[CL_NG]) {
    float s[CL_V][CL_M];
#pragma unroll
    for (int c = 0; c < CL_V; ++c) cl_scale(o[c], a, s[c]);
    cl_store_mv(out, BN, base, s);
}

#if CL_WS
// Staged variant (CL_WS = 1; CL_K = 1 rows only, CL_V > 1). Persistent CTAs walk steps of
// CL_THREADS / team rows (grid-stride). The weights are staged once per CTA in shared memory as
// sw[p][n] (f32), read as CL_V-wide vectors (conflict-free), instead of CL_V·CL_P scalar __ldg per
// thread and step at a stride of CL_P words, which cost ~20 L1 wavefronts per warp request. The
// next step's x and y are copied by cp.async into this thread's own slots of a second buffer while
// the current step computes, reduces and stores, so every thread always has a step's loads in
// flight. Each thread reads back only the slots it copied itself: no barrier is needed for them.
// Dynamic shared memory: the weights (CL_WWORDS(N) f32), then stage[2 buffers][x, y][CL_M][CL_THREADS][CL_V].
#define CL_SLOT (CL_M * CL_THREADS * CL_V)
// Copy x and y of CL_V channels at `base` into this thread's slots `st` of one buffer.
__device__ __forceinline__ void cl_issue(const act_t* __restrict__ x, const act_t* __restrict__ y, act_t* st, i64 BN, i64 base) {
#pragma unroll
    for (int j = 0; j < CL_M; ++j) {
        cl_cp_async<CL_V * sizeof(act_t)>(st + j * CL_THREADS * CL_V, x + (i64)j * BN + base);
        cl_cp_async<CL_V * sizeof(act_t)>(st + CL_SLOT + j * CL_THREADS * CL_V, y + (i64)j * BN + base);
    }
}
//
// CL_DYN = 1: after its first two steps (blockIdx.x and blockIdx.x + gridDim.x) a CTA takes its
// steps at run time, one atomicAdd ticket on the device's work counters each (`tickets[0]`; step =
// 2·gridDim.x + ticket), so an SM that runs faster than the others moves more rows, instead of
// every SM owning a fixed grid-stride share and the launch ending with the slowest one. Thread 0
// takes the ticket of the step after next at the start of a step, only while the next step is a
// real one, and publishes it through shared memory before the step's barrier (the prefetch needs
// it one step ahead). So each CTA that takes tickets takes exactly one past the last step, and
// the CTA that draws the last ticket of all (`last_ticket`) knows no other will be taken in this
// launch and zeroes the word for the next one: no fence and no count at the kernel's end. Rows and
// their sums are computed as with the fixed order: the same bits. CL_DYN = 0: the fixed order.
#ifndef CL_DYN
#define CL_DYN 0
#endif
// CL_PRE2 = 1 (default with the fixed order): the prologue copies the first two steps (v16b);
// 0: the first step only, the second issued by the loop's first iteration.
#ifndef CL_PRE2
#define CL_PRE2 (!CL_DYN)
#endif
#if CL_PRE2 && CL_DYN
#error "CL_PRE2 needs the fixed step order"
#endif
#if CL_DYN
#define CL_TICKET_ARGS , u32* __restrict__ tickets
#else
#define CL_TICKET_ARGS
#endif
extern "C" __global__ void __launch_bounds__(CL_THREADS, 1) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                                      act_t* __restrict__ out, float* __restrict__ rms, i64 B, i64 N, int team CL_TICKET_ARGS) {
    // A programmatic dependent launch (cuda.rs entry_pdl): nothing is read before the wait.
    ember_grid_dependency_wait();
    float* sw = cl_dynamic_smem();
    act_t* stage = reinterpret_cast<act_t*>(sw + CL_WWORDS(N));
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int tid = threadIdx.x, lt = tid % team, rows = CL_THREADS / team;
    const i64 G = N / CL_V, BN = B * N, steps = (B + rows - 1) / rows, n0 = (i64)lt * CL_V;
    const bool mine = lt < G;
    act_t* my = stage + tid * CL_V;
    const float inv_n = 1.0f / (float)N;
    i64 s = blockIdx.x;
#if CL_PRE2
    // The weights first, then the first two steps into the two (still free) buffers: twice the
    // bytes in flight while the launch ramps up, and the barrier waits for the weights alone.
    cl_stage_w_issue(w, sw, N);
    cl_cp_commit();
    for (int k = 0; k < 2; ++k) {
        const i64 sk = s + k * (i64)gridDim.x, b = sk * rows + tid / team;
        if (sk < steps && b < B && mine) cl_issue(x, y, my + k * 2 * CL_SLOT, BN, b * N + n0);
        cl_cp_commit();
    }
    cl_cp_wait<2>();
    __syncthreads();
#else
    {
        const i64 b = s * rows + tid / team;
        if (s < steps && b < B && mine) cl_issue(x, y, my, BN, b * N + n0);
        cl_cp_commit();
    }
#endif
#if CL_DYN
    __shared__ i64 next_step[2];
    const i64 grid = gridDim.x;
    // Tickets in range: steps − 2·grid; one past the end per CTA whose second step is real.
    const i64 in_range = steps > 2 * grid ? steps - 2 * grid : 0, claimers = steps > 2 * grid ? grid : (steps > grid ? steps - grid : 0);
    const i64 last_ticket = in_range + claimers - 1;
#endif
#if !CL_PRE2
    cl_stage_w(w, sw, N);
    __syncthreads();
#endif
    for (int buf = 0, it = 0; s < steps; ++it, buf ^= 1) {
#if CL_DYN
        const i64 nx = it == 0 ? s + grid : next_step[it & 1];
        u32 ticket = 0;
        if (tid == 0 && nx < steps) ticket = atomicAdd(tickets, 1u);
#else
        const i64 nx = s + gridDim.x;
#endif
        // With CL_PRE2 the first step's next one is already in flight.
        if (!CL_PRE2 || it > 0) {
            const i64 bn = nx * rows + tid / team;
            if (nx < steps && bn < B && mine) cl_issue(x, y, my + (buf ^ 1) * 2 * CL_SLOT, BN, bn * N + n0);
            cl_cp_commit();
        }
        cl_cp_wait<1>();
        const i64 b = s * rows + tid / team;
        const bool live = b < B;
        float ss[CL_NG], o[CL_V][CL_M];
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) ss[k] = 0.0f;
        if (live && mine) {
            const act_t* cur = my + buf * 2 * CL_SLOT;
            float xv[CL_M][CL_V], yv[CL_M][CL_V];
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                cl_ldv<CL_V>(cur + j * CL_THREADS * CL_V, xv[j]);
                cl_ldv<CL_V>(cur + CL_SLOT + j * CL_THREADS * CL_V, yv[j]);
            }
            cl_fwd_vals(xv, yv, sw, N, n0, o, ss);
        }
#if CL_DYN
        // Every thread read next_step[it & 1] before the previous step's last barrier, and reads
        // next_step[(it + 1) & 1] after this step's.
        if (tid == 0 && nx < steps) {
            next_step[(it + 1) & 1] = 2 * grid + ticket;
            if ((i64)ticket == last_ticket) *tickets = 0u;
        }
#endif
#if CL_NORM
        cl_team_sum<CL_NG>(ss, red, team);
        float a[CL_NG];
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) {
            float r;
            a[k] = cl_inv_rms(ss[k], inv_n, N, r);
            if (live && lt == 0) rms[b * CL_NG + k] = r;
        }
        if (live && mine) cl_scale_store(out, BN, b * N + n0, o, a);
#else
        if (live && mine) cl_store_mv(out, BN, b * N + n0, o);
#endif
#if CL_DYN && !CL_NORM
        __syncthreads();  // without the norm no team sum separates the steps
#endif
        s = nx;
    }
    cl_cp_wait<0>();
}
#elif CL_NORM == 0
// One thread per (row, CL_V channels): grid covers B·N/CL_V threads.
extern "C" __global__ void __launch_bounds__(CL_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                                   act_t* __restrict__ out, float* __restrict__ rms, i64 B, i64 N, int team) {
    const i64 G = N / CL_V;
    const i64 gid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (gid >= B * G) return;
    const i64 b = gid / G, n0 = (gid - b * G) * CL_V, BN = B * N, base = b * N + n0;
    float o[CL_V][CL_M], ss[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) ss[k] = 0.0f;
    cl_fwd_group(x, y, w, BN, base, n0, o, ss);
    cl_store_mv(out, BN, base, o);
}
#else
extern "C" __global__ void __launch_bounds__(CL_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                                   act_t* __restrict__ out, float* __restrict__ rms, i64 B, i64 N, int team) {
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int lt = threadIdx.x % team;
    const i64 b = (i64)blockIdx.x * (blockDim.x / team) + threadIdx.x / team;
    const bool live = b < B;
    const i64 G = N / CL_V, BN = B * N;
    float ss[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) ss[k] = 0.0f;
#if CL_K == 1
    float o[CL_V][CL_M];
    const bool mine = live && lt < G;
    if (mine) cl_fwd_group(x, y, w, BN, b * N + (i64)lt * CL_V, (i64)lt * CL_V, o, ss);
#else
    for (i64 g = lt; live && g < G; g += team) {
        float o[CL_V][CL_M];
        cl_fwd_group(x, y, w, BN, b * N + g * CL_V, g * CL_V, o, ss);
    }
#endif
    cl_team_sum<CL_NG>(ss, red, team);
    float a[CL_NG];
    const float inv_n = 1.0f / (float)N;
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) {
        float r;
        a[k] = cl_inv_rms(ss[k], inv_n, N, r);
        if (live && lt == 0) rms[b * CL_NG + k] = r;
    }
#if CL_K == 1
    if (mine) cl_scale_store(out, BN, b * N + (i64)lt * CL_V, o, a);
#else
    for (i64 g = lt; live && g < G; g += team) {
        float o[CL_V][CL_M], unused[CL_NG];
        cl_fwd_group(x, y, w, BN, b * N + g * CL_V, g * CL_V, o, unused);
        cl_scale_store(out, BN, b * N + g * CL_V, o, a);
    }
#endif
}
#endif
#endif  // CL_KIND_FWD

#if CL_KIND == CL_KIND_DOT || CL_KIND == CL_KIND_NORMFWD || CL_KIND == CL_KIND_NORMBWD
// Per-grade Σ g·u over the CL_V channels of loaded words ([blade][channel]), added to e.
__device__ __forceinline__ void cl_dot_vals(const float (&gv)[CL_M][CL_V], const float (&uv)[CL_M][CL_V], float (&e)[CL_NG]) {
#pragma unroll
    for (int c = 0; c < CL_V; ++c) {
        float gi[CL_M], ui[CL_M], s[CL_NG];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) { gi[j] = gv[j][c]; ui[j] = uv[j][c]; }
        cl_dot(gi, ui, s);
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) e[k] += s[k];
    }
}
// Per-grade Σ g·u over CL_V channels at base, added to e.
template <typename U>
__device__ __forceinline__ void cl_dot_group(const act_t* __restrict__ g, const U* __restrict__ u, i64 BN, i64 base, float (&e)[CL_NG]) {
    float gv[CL_M][CL_V], uv[CL_M][CL_V];
    cl_load_mv(g, BN, base, gv);
    cl_load_mv(u, BN, base, uv);
    cl_dot_vals(gv, uv, e);
}
#endif

#if CL_KIND == CL_KIND_DOT
// Per-grade Σ g·o over the CL_V channels of one group: g as loaded ([blade][channel]), o as the
// forward computes it ([channel][blade]); added to e.
__device__ __forceinline__ void cl_dot_loaded(const float (&gv)[CL_M][CL_V], const float (&o)[CL_V][CL_M], float (&e)[CL_NG]) {
#pragma unroll
    for (int c = 0; c < CL_V; ++c) {
        float gi[CL_M], s[CL_NG];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) gi[j] = gv[j][c];
        cl_dot(gi, o[c], s);
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) e[k] += s[k];
    }
}

// coef[b][k] = (a, a^p·e[k]/N) with a = 1/rms[b][k]; p = 2 when e sums g·o (o recomputed), 1 when
// it sums g·out (out = a·o already).
__device__ __forceinline__ void cl_store_coef(float* __restrict__ coef, const float* __restrict__ rms, i64 b, const float (&e)[CL_NG], i64 N, bool e_of_o) {
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) {
        const float a = 1.0f / rms[b * CL_NG + k];
        coef[(b * CL_NG + k) * 2] = a;
        coef[(b * CL_NG + k) * 2 + 1] = (e_of_o ? a * a : a) * e[k] / (float)N;
    }
}
#endif

#if CL_KIND == CL_KIND_DOT
// CL_ZERO = 1: the dot pass also zeroes the column kernel's counters of the folded chunk sums
// (cols.cu, CL_FOLD = 1), which runs after it: no memset launch of its own.
#ifndef CL_ZERO
#define CL_ZERO 0
#endif
#if CL_ZERO
#define CL_ZERO_ARGS , u32* __restrict__ zero, i64 nzero
__device__ __forceinline__ void cl_zero_counters(u32* __restrict__ zero, i64 nzero) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < nzero; i += (i64)gridDim.x * blockDim.x) zero[i] = 0u;
}
#define CL_ZERO_COUNTERS() cl_zero_counters(zero, nzero)
#else
#define CL_ZERO_ARGS
#define CL_ZERO_COUNTERS()
#endif
#endif

#if CL_KIND == CL_KIND_DOT && CL_WS
// Staged variant of the kernel below (CL_DOT_O = 1 only): persistent CTAs (two per SM) walk steps
// of CL_THREADS / team rows; the weights for the recomputed o are staged once per CTA.
extern "C" __global__ void __launch_bounds__(CL_THREADS, 2) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                                      const act_t* __restrict__ g, const act_t* __restrict__ u, const float* __restrict__ rms,
                                                                      float* __restrict__ coef, i64 B, i64 N, int team CL_ZERO_ARGS) {
    float* sw = cl_dynamic_smem();
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int lt = threadIdx.x % team, rows = CL_THREADS / team;
    const i64 G = N / CL_V, BN = B * N, steps = (B + rows - 1) / rows;
    CL_ZERO_COUNTERS();
    cl_stage_w(w, sw, N);
    __syncthreads();
    for (i64 s = blockIdx.x; s < steps; s += gridDim.x) {
        const i64 b = s * rows + threadIdx.x / team;
        const bool live = b < B;
        float e[CL_NG];
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) e[k] = 0.0f;
        for (i64 q = lt; live && q < G; q += team) {
            const i64 base = b * N + q * CL_V;
            float xv[CL_M][CL_V], yv[CL_M][CL_V], gv[CL_M][CL_V], o[CL_V][CL_M], unused[CL_NG];
            cl_load_mv(x, BN, base, xv);
            cl_load_mv(y, BN, base, yv);
            cl_load_mv(g, BN, base, gv);
            cl_fwd_vals(xv, yv, sw, N, q * CL_V, o, unused);
            cl_dot_loaded(gv, o, e);
        }
        cl_team_sum<CL_NG>(e, red, team);
        if (live && lt == 0) cl_store_coef(coef, rms, b, e, N, true);
    }
}
#elif CL_KIND == CL_KIND_DOT
// CL_DOT_O = 1 recomputes o from x, y, w (f32; for half-precision activations, whose rounded `out`
// would spoil the gradient where g and out·E/N nearly cancel); CL_DOT_O = 0 reads the forward's
// out (f32 activations: one tensor less to read). Either way coef[b][k] = (a, c) with a = 1/r and
// c = a·Σ g·out / N = a²·Σ g·o / N.
extern "C" __global__ void __launch_bounds__(CL_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                                   const act_t* __restrict__ g, const act_t* __restrict__ u, const float* __restrict__ rms,
                                                                   float* __restrict__ coef, i64 B, i64 N, int team CL_ZERO_ARGS) {
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int lt = threadIdx.x % team;
    const i64 b = (i64)blockIdx.x * (blockDim.x / team) + threadIdx.x / team;
    const bool live = b < B;
    const i64 G = N / CL_V, BN = B * N;
    CL_ZERO_COUNTERS();
    float e[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) e[k] = 0.0f;
    for (i64 q = lt; live && q < G; q += team) {
#if CL_DOT_O
        float o[CL_V][CL_M], unused[CL_NG], gv[CL_M][CL_V];
        cl_fwd_group(x, y, w, BN, b * N + q * CL_V, q * CL_V, o, unused);
        cl_load_mv(g, BN, b * N + q * CL_V, gv);
        cl_dot_loaded(gv, o, e);
#else
        cl_dot_group(g, u, BN, b * N + q * CL_V, e);
#endif
    }
    cl_team_sum<CL_NG>(e, red, team);
    if (live && lt == 0) cl_store_coef(coef, rms, b, e, N, CL_DOT_O);
}
#endif

#if CL_KIND == CL_KIND_NORMFWD || CL_KIND == CL_KIND_NORMBWD
// CL_K = 1 (the host's choice where N ≤ team·V: at most one group of CL_V channels per thread): the
// row's words are read once and held in registers across the row reduction. CL_K = 0 reads them
// again after it (B = 4096, N = 512: the whole grid of 2048 CTAs is resident at once, and the 67 MB
// of o do not fit in the L2 between the two reads). Same sums, same bits.
#ifndef CL_K
#define CL_K 0
#endif
#endif

#if CL_KIND == CL_KIND_NORMFWD
// The per-grade scale factors a = 1/r of a row from its sums of squares (summed over the team here),
// r stored by the team's first thread.
__device__ __forceinline__ void cl_norm_scales(float (&ss)[CL_NG], float* red, int team, i64 N, float* __restrict__ rms, i64 b, bool store, float (&a)[CL_NG]) {
    cl_team_sum<CL_NG>(ss, red, team);
    const float inv_n = 1.0f / (float)N;
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) {
        float r;
        a[k] = cl_inv_rms(ss[k], inv_n, N, r);
        if (store) rms[b * CL_NG + k] = r;
    }
}
// out = o/r of the CL_V channels of loaded words ([blade][channel]) at base.
__device__ __forceinline__ void cl_scale_vals_store(act_t* __restrict__ out, i64 BN, i64 base, const float (&ov)[CL_M][CL_V], const float (&a)[CL_NG]) {
    float s[CL_V][CL_M];
#pragma unroll
    for (int c = 0; c < CL_V; ++c) {
        float oi[CL_M];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) oi[j] = ov[j][c];
        cl_scale(oi, a, s[c]);
    }
    cl_store_mv(out, BN, base, s);
}

extern "C" __global__ void __launch_bounds__(CL_THREADS) cl_kernel(const float* __restrict__ o, act_t* __restrict__ out, float* __restrict__ rms, i64 B, i64 N, int team) {
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int lt = threadIdx.x % team;
    const i64 b = (i64)blockIdx.x * (blockDim.x / team) + threadIdx.x / team;
    const bool live = b < B;
    const i64 G = N / CL_V, BN = B * N;
    float ss[CL_NG], a[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) ss[k] = 0.0f;
#if CL_K
    const bool mine = live && lt < G;
    float ov[CL_M][CL_V];
    if (mine) {
        cl_load_mv(o, BN, b * N + lt * CL_V, ov);
        cl_dot_vals(ov, ov, ss);
    }
    cl_norm_scales(ss, red, team, N, rms, b, live && lt == 0, a);
    if (mine) cl_scale_vals_store(out, BN, b * N + lt * CL_V, ov, a);
#else
    for (i64 q = lt; live && q < G; q += team) {
        float ov[CL_M][CL_V];
        cl_load_mv(o, BN, b * N + q * CL_V, ov);
        cl_dot_vals(ov, ov, ss);
    }
    cl_norm_scales(ss, red, team, N, rms, b, live && lt == 0, a);
    for (i64 q = lt; live && q < G; q += team) {
        float ov[CL_M][CL_V];
        cl_load_mv(o, BN, b * N + q * CL_V, ov);
        cl_scale_vals_store(out, BN, b * N + q * CL_V, ov, a);
    }
#endif
}
#endif

#if CL_KIND == CL_KIND_NORMBWD
// Where the gradient goes. Plain: d_o (f32, or the activation type) as [blade][b][n]. CL_DO_SPLIT3 = 1
// (f32 activations, the fully connected GEMM backward): each value as bf16 halves hi = bf16(d),
// lo = bf16(d − hi) (~16 significant bits together), into `cat`, rows j·B + b of 3N values
// [lo | hi | hi], and `halves`, hi at [j][b][n] then lo CL_M·B·N further — the layouts fcb.rs's
// three-product GEMMs read, which cl_split3_bf16 wrote from an f32 copy before (same bits).
template <typename D> struct cl_do_plain {
    D* p;
    __device__ __forceinline__ void store(i64 B, i64 N, i64 b, i64 n0, const float (&d)[CL_V][CL_M]) const { cl_store_mv(p, B * N, b * N + n0, d); }
};
template <int V> __device__ __forceinline__ void cl_st_bits(ember_bf16* p, const u32 (&h)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<uint2*>(p) = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
    } else if constexpr (V == 2) {
        *reinterpret_cast<u32*>(p) = h[0] | (h[1] << 16);
    } else {
        p->bits = (u16)h[0];
    }
}
struct cl_do_split3 {
    ember_bf16* cat;
    ember_bf16* halves;
    __device__ __forceinline__ void store(i64 B, i64 N, i64 b, i64 n0, const float (&d)[CL_V][CL_M]) const {
        const i64 BN = B * N;
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            u32 hi[CL_V], lo[CL_V];
#pragma unroll
            for (int c = 0; c < CL_V; ++c) {
                const ember_bf16 h = ember_from_f32<ember_bf16>(d[c][j]);
                hi[c] = h.bits;
                lo[c] = ember_from_f32<ember_bf16>(d[c][j] - ember_to_f32(h)).bits;
            }
            ember_bf16* row = cat + ((i64)j * B + b) * 3 * N + n0;
            cl_st_bits<CL_V>(row, lo);
            cl_st_bits<CL_V>(row + N, hi);
            cl_st_bits<CL_V>(row + 2 * N, hi);
            const i64 i = (i64)j * BN + b * N + n0;
            cl_st_bits<CL_V>(halves + i, hi);
            cl_st_bits<CL_V>(halves + CL_M * BN + i, lo);
        }
    }
};

// d_o = cl_normbwd(g, o, a, c) of the CL_V channels n0.. of row b from loaded words.
template <typename S>
__device__ __forceinline__ void cl_normbwd_vals_store(const S& sink, i64 B, i64 N, i64 b, i64 n0, const float (&gv)[CL_M][CL_V], const float (&ov)[CL_M][CL_V],
                                                      const float (&a)[CL_NG], const float (&c)[CL_NG]) {
    float d[CL_V][CL_M];
#pragma unroll
    for (int cc = 0; cc < CL_V; ++cc) {
        float gi[CL_M], oi[CL_M];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) { gi[j] = gv[j][cc]; oi[j] = ov[j][cc]; }
        cl_normbwd(gi, oi, a, c, d[cc]);
    }
    sink.store(B, N, b, n0, d);
}

// The gradient of the product o (f32, kept by the forward) from the gradient g of out = o/r:
// d_o = cl_normbwd(g, o, a, c) = (g − o·c)·a with a = 1/r, c = a²·Σ g·o / N. In f32, or with
// CL_DO_ACT = 1 rounded to the activation type as it is stored (for the fully connected layer's GEMM
// backward, whose operands share one type), or with CL_DO_SPLIT3 = 1 as bf16 halves (cl_do_split3).
#ifndef CL_DO_ACT
#define CL_DO_ACT 0
#endif
#ifndef CL_DO_SPLIT3
#define CL_DO_SPLIT3 0
#endif
#if CL_DO_SPLIT3
#define CL_DO_PARAMS ember_bf16* __restrict__ d_cat, ember_bf16* __restrict__ d_halves
#define CL_DO_SINK cl_do_split3{d_cat, d_halves}
#elif CL_DO_ACT
#define CL_DO_PARAMS act_t* __restrict__ d_o
#define CL_DO_SINK cl_do_plain<act_t>{d_o}
#else
#define CL_DO_PARAMS float* __restrict__ d_o
#define CL_DO_SINK cl_do_plain<float>{d_o}
#endif
extern "C" __global__ void __launch_bounds__(CL_THREADS) cl_kernel(const act_t* __restrict__ g, const float* __restrict__ o, const float* __restrict__ rms,
                                                                   CL_DO_PARAMS, i64 B, i64 N, int team) {
    const auto sink = CL_DO_SINK;
    __shared__ float red[(CL_THREADS / 32) * CL_NG];
    const int lt = threadIdx.x % team;
    const i64 b = (i64)blockIdx.x * (blockDim.x / team) + threadIdx.x / team;
    const bool live = b < B;
    const i64 G = N / CL_V, BN = B * N;
    float e[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) e[k] = 0.0f;
#if CL_K
    const bool mine = live && lt < G;
    float gv[CL_M][CL_V], ov[CL_M][CL_V];
    if (mine) {
        cl_load_mv(g, BN, b * N + lt * CL_V, gv);
        cl_load_mv(o, BN, b * N + lt * CL_V, ov);
        cl_dot_vals(gv, ov, e);
    }
#else
    for (i64 q = lt; live && q < G; q += team) cl_dot_group(g, o, BN, b * N + q * CL_V, e);
#endif
    cl_team_sum<CL_NG>(e, red, team);
    float a[CL_NG], c[CL_NG];
#pragma unroll
    for (int k = 0; k < CL_NG; ++k) {
        a[k] = live ? 1.0f / rms[b * CL_NG + k] : 0.0f;
        c[k] = a[k] * a[k] * e[k] / (float)N;
    }
#if CL_K
    if (mine) cl_normbwd_vals_store(sink, B, N, b, lt * CL_V, gv, ov, a, c);
#else
    for (i64 q = lt; live && q < G; q += team) {
        float gv[CL_M][CL_V], ov[CL_M][CL_V];
        cl_load_mv(g, BN, b * N + q * CL_V, gv);
        cl_load_mv(o, BN, b * N + q * CL_V, ov);
        cl_normbwd_vals_store(sink, B, N, b, q * CL_V, gv, ov, a, c);
    }
#endif
}
#endif
