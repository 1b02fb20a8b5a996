// Whole-row backward of the fused layer (EMBER_CLIFFORD_BWD=whole, f32 up to 8 blades): one
// persistent kernel does what the dot pass (rows.cu, CL_KIND_DOT) and the column kernel (cols.cu)
// do in two. The rows are cut into chunks of R whole rows (all N channels) and the chunks into
// `slots` runs of `cps` consecutive chunks; R, cps and the slots depend only on (B, N) and the
// algebra. CTA i walks slots i, i + gridDim.x, ...; per chunk of its slot:
//   1. (norm) g and the forward's out of the chunk's rows are read once, g kept in shared memory,
//      and the per-row, per-grade Σ g·out reduced with the dot pass's mapping and order
//      (cl_bwd_row_sums, bwd_common.cu): coefficients bitwise the dot pass's. Without the norm g
//      is only copied.
//   2. The column program: thread (c = t % ct, l = t / ct) takes channels n = c, c + ct, ... and,
//      for each, rows l, l + rt, ... of the chunk (rt = blockDim.x / ct): x and y from global
//      memory, g from shared memory, the generated cl_bwd_norm / cl_bwd_plain (the column kernel's
//      program on the same words: d_x and d_y bitwise the default's), d_w summed over the rows in
//      registers and added to the thread's own words of the slot's d_w in shared memory.
// At the end of a slot its d_w (row lanes summed in lane order) is one partial, dw_part[slot][n][p];
// cl_sum_tree sums the slots. No atomics: deterministic, the same on every GPU.
//
// Prefix: CL_M, CL_P, CL_NG, cl_dot (norm) and cl_bwd_norm / cl_bwd_plain, then bwd_common.cu.
// Options: -DEMBER_T=float -DCL_NORM=<0|1> -DCL_WH_V=<1|2|4> (the dot pass's vector width: N is a
// multiple).
//
// Dynamic shared memory (f32 words): gs[blade][R·N] (the chunk's g, as in global memory), then
// dws[rt][P][N + 1] (d_w of the slot per row lane), then with the norm cf[R][NG][2] and
// dred[R][team/32][NG].
#define CL_WH_T 256

// V words at p (aligned to 4·V bytes where V = 2, 4) into v, and back.
template <int V> __device__ __forceinline__ void cl_wh_ld(const float* __restrict__ p, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(p));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else if constexpr (V == 2) {
        const float2 q = __ldg(reinterpret_cast<const float2*>(p));
        v[0] = q.x, v[1] = q.y;
    } else {
#pragma unroll
        for (int c = 0; c < V; ++c) v[c] = __ldg(p + c);
    }
}
template <int V> __device__ __forceinline__ void cl_wh_st(float* p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int c = 0; c < V; ++c) p[c] = v[c];
    }
}

// Channel n's CL_P weights. CL_WH_WV = 1 (the host's default since v15): as CL_WH_WW-word vectors
// (the widest of 4, 2 dividing CL_P) where w is aligned for them — a warp's request then spans the
// same lines with a quarter or half of the instructions (at N = 512 the 40 KB of weights do not stay
// in L1 beside two CTAs' shared memory, so each request goes to L2); the same values either way.
// CL_WH_WV = 0: one word per load.
#ifndef CL_WH_WV
#define CL_WH_WV 0
#endif
#define CL_WH_WW (CL_P % 4 == 0 ? 4 : CL_P % 2 == 0 ? 2 : 1)
__device__ __forceinline__ void cl_wh_weights(const float* __restrict__ w, int n, float (&wi)[CL_P]) {
#if CL_WH_WV
    if (CL_WH_WW > 1 && (reinterpret_cast<unsigned long long>(w) & (4 * CL_WH_WW - 1)) == 0) {
#pragma unroll
        for (int q = 0; q < CL_P / CL_WH_WW; ++q) {
            float v[CL_WH_WW];
            cl_wh_ld<CL_WH_WW>(w + (i64)n * CL_P + q * CL_WH_WW, v);
#pragma unroll
            for (int e = 0; e < CL_WH_WW; ++e) wi[q * CL_WH_WW + e] = v[e];
        }
        return;
    }
#endif
#pragma unroll
    for (int p = 0; p < CL_P; ++p) wi[p] = __ldg(w + (i64)n * CL_P + p);
}

extern "C" __global__ void __launch_bounds__(CL_WH_T, 2)
    cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w, const act_t* __restrict__ g,
              const act_t* __restrict__ out, const float* __restrict__ rms, act_t* __restrict__ dx, act_t* __restrict__ dy,
              float* __restrict__ dw_part, i64 B, i64 N, int R, int ct, int team, i64 slots, i64 cps) {
    // A programmatic dependent launch (cuda.rs entry_pdl): nothing is read before the wait.
    ember_grid_dependency_wait();
    const int tid = (int)threadIdx.x, nn = (int)N, rt = CL_WH_T / ct;
    const int c = tid % ct, l = tid / ct;
    const int RN = R * nn, ld = nn + 1;
    float* gs = cl_dynamic_smem();
    float* dws = gs + CL_M * RN;
    float* cf = dws + rt * CL_P * ld;
#if CL_NORM
    float* dred = cf + R * CL_NG * 2;
#endif
    const i64 BN = B * N, chunks = (B + R - 1) / R;
    for (i64 slot = blockIdx.x; slot < slots; slot += gridDim.x) {
        // This thread's words of the slot's d_w: only it adds to them until the slot's end.
        for (int n = c; n < nn; n += ct) {
#pragma unroll
            for (int p = 0; p < CL_P; ++p) dws[(l * CL_P + p) * ld + n] = 0.0f;
        }
        const i64 ch_end = min(chunks, (slot + 1) * cps);
        for (i64 chunk = slot * cps; chunk < ch_end; ++chunk) {
            const i64 b0 = chunk * R;
            const int nr = (int)min((i64)R, B - b0);
            // Phase 1: the chunk's g into shared memory (and, with the norm, its row statistics).
#if CL_NORM
            cl_bwd_row_sums<CL_WH_V>(nr, nn, team, dred, [&](int row, int c0, float (&gv)[CL_M][CL_WH_V], float (&uv)[CL_M][CL_WH_V]) {
                const i64 base = (b0 + row) * N + c0;
#pragma unroll
                for (int j = 0; j < CL_M; ++j) {
                    cl_wh_ld<CL_WH_V>(g + (i64)j * BN + base, gv[j]);
                    cl_wh_ld<CL_WH_V>(out + (i64)j * BN + base, uv[j]);
                    cl_wh_st<CL_WH_V>(gs + j * RN + row * nn + c0, gv[j]);
                }
            });
            __syncthreads();
            cl_bwd_row_coef(nr, team, dred, rms, b0, N, cf);
#else
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                const act_t* src = g + (i64)j * BN + b0 * N;
                for (int e = tid; e < nr * nn; e += CL_WH_T) gs[j * RN + e] = __ldg(src + e);
            }
#endif
            __syncthreads();
            // Phase 2: the gradient program, channel by channel, over this row lane's rows.
            for (int n = c; n < nn; n += ct) {
                float wi[CL_P], acc[CL_P];
                cl_wh_weights(w, n, wi);
#pragma unroll
                for (int p = 0; p < CL_P; ++p) acc[p] = 0.0f;
                for (int r = l; r < nr; r += rt) {
                    const i64 base = (b0 + r) * N + n;
                    float xi[CL_M], yi[CL_M], gi[CL_M], a[CL_NG], cc[CL_NG];
#pragma unroll
                    for (int j = 0; j < CL_M; ++j) {
                        xi[j] = x[(i64)j * BN + base];
                        yi[j] = y[(i64)j * BN + base];
                        gi[j] = gs[j * RN + r * nn + n];
                    }
#pragma unroll
                    for (int k = 0; k < CL_NG; ++k) {
                        a[k] = CL_NORM ? cf[(r * CL_NG + k) * 2] : 0.0f;
                        cc[k] = CL_NORM ? cf[(r * CL_NG + k) * 2 + 1] : 0.0f;
                    }
                    cl_bwd_elem(xi, yi, wi, gi, a, cc, dx, dy, BN, base, acc);
                }
#pragma unroll
                for (int p = 0; p < CL_P; ++p) dws[(l * CL_P + p) * ld + n] += acc[p];
            }
            // g and the coefficients are refilled by the next chunk.
            __syncthreads();
        }
        // The slot's partial: the row lanes summed in lane order; consecutive threads write
        // consecutive words.
        float* dst = dw_part + slot * N * CL_P;
        for (int i = tid; i < nn * CL_P; i += CL_WH_T) {
            const int n = i / CL_P, p = i - n * CL_P;
            float s = 0.0f;
            for (int q = 0; q < rt; ++q) s += dws[(q * CL_P + p) * ld + n];
            dst[i] = s;
        }
        // Read before the next slot zeroes them.
        __syncthreads();
    }
}
