// Row-oriented backward of the fused layer (EMBER_CLIFFORD_BWD=rowwise, f32): one persistent
// kernel does what the row kernel CL_KIND_DOT (rows.cu) and the column kernel (cols.cu) do in two
// passes. A CTA walks row chunks c = blockIdx.x, blockIdx.x + gridDim.x, ... (the chunks, rows_per_chunk
// rows each, depend only on (B, N): so do the d_w partials and their order); each chunk in steps of
// S whole rows (S·N ≤ blockDim.x). Per step:
//   1. x, y, g (and, with the norm, the forward's out) of the step's S rows, contiguous in every
//      blade plane, are copied by cp.async into one stage of a two-stage ring in shared memory, one
//      step ahead of the step that reads them;
//   2. (norm) the per-row, per-grade Σ g·out with the thread mapping and summation order of the row
//      kernel CL_KIND_DOT (teams of `team` threads per row, CL_RW_V channels per thread and group,
//      warp shuffles, then the team's warps in order), so coef = (1/r, Σ g·out/(N r)) is bitwise
//      the row kernel's;
//   3. thread t < S·N takes element (row t / N, channel t % N) of the step: the generated
//      cl_bwd_norm / cl_bwd_plain (cols.cu's program on the same words: d_x and d_y bitwise the
//      column kernel's), d_x and d_y stored, d_w accumulated in registers (a thread's channel is
//      the same in every step).
// At the end of a chunk the S row lanes' d_w are summed in lane order (S > 1, through shared
// memory) into one partial per chunk, dw_part[chunk][n][p]; the host sums the chunks in a fixed tree
// (cl_sum_tree). No atomics: deterministic and the same on every GPU.
//
// Prefix: CL_M, CL_P, CL_NG, cl_bwd_norm (CL_NORM = 1, with cl_dot) or cl_bwd_plain (CL_NORM = 0),
// then smem.cu and bwd_common.cu (the row statistics, cl_bwd_elem).
// Options: -DEMBER_T=float -DCL_NORM=<0|1> -DCL_RW_V=<1|2|4> (the row kernel's vector width: N is a
// multiple) -DCL_RW_VEC=<1|4> (words per cp.async: 4 where N is a multiple of 4).
//
// Dynamic shared memory (f32 words): ring[stage][array][blade][lp] (arrays x, y, g, out), then with
// the norm cf[S][NG][2] and dred[S][team/32][NG], then with S > 1 wred[P][blockDim.x].
#if CL_M <= 8
#define CL_RW_TMAX 512
#else
#define CL_RW_TMAX 256
#endif
#define CL_RW_NA (CL_NORM ? 4 : 3)


extern "C" __global__ void __launch_bounds__(CL_RW_TMAX, 1)
    cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w, const act_t* __restrict__ g,
              const act_t* __restrict__ out, const float* __restrict__ rms, act_t* __restrict__ dx, act_t* __restrict__ dy,
              float* __restrict__ dw_part, i64 B, i64 N, i64 rows_per_chunk, int S, int team, i64 chunks, int lp) {
    float* ring = cl_dynamic_smem();
    const int T = (int)blockDim.x, tid = (int)threadIdx.x, nn = (int)N;
    const int stage_words = CL_RW_NA * CL_M * lp;
    float* tail = ring + 2 * stage_words;
    float* cf = tail;
#if CL_NORM
    float* dred = cf + S * CL_NG * 2;
    tail = dred + S * (team / 32) * CL_NG;
#endif
    float* wred = tail;
    const i64 BN = B * N;
    const int spc = (int)(rows_per_chunk / S);
    const i64 mine = chunks > (i64)blockIdx.x ? (chunks - 1 - (i64)blockIdx.x) / gridDim.x + 1 : 0;
    const i64 K = mine * spc;
    // First row and row count of step k (count ≤ 0 past B: nothing copied or computed).
    auto rows_of = [&](i64 k, i64& b0) -> int {
        const i64 it = k / spc;
        const i64 chunk = (i64)blockIdx.x + it * gridDim.x;
        b0 = chunk * rows_per_chunk + (k - it * spc) * S;
        const i64 left = B - b0;
        return left <= 0 ? 0 : left < S ? (int)left : S;
    };
    // Step k's words into ring stage k & 1; one commit group per step either way.
    auto issue = [&](i64 k) {
        if (k < K) {
            i64 b0;
            const int nr = rows_of(k, b0);
            const int words = nr * nn;
            float* st = ring + (int)(k & 1) * stage_words;
            const act_t* src[4] = {x, y, g, out};
#pragma unroll
            for (int a = 0; a < CL_RW_NA; ++a) {
#pragma unroll
                for (int j = 0; j < CL_M; ++j) {
                    const act_t* s = src[a] + (i64)j * BN + b0 * N;
                    float* d = st + (a * CL_M + j) * lp;
                    for (int e = tid * CL_RW_VEC; e < words; e += T * CL_RW_VEC) cl_cp_async<4 * CL_RW_VEC>(d + e, s + e);
                }
            }
        }
        cl_cp_commit();
    };
    // This thread's element of every step: row lane r, channel n (threads past S·N idle there).
    const bool worker = tid < S * nn;
    const int r = worker ? tid / nn : 0, n = worker ? tid - r * nn : 0;
    float acc[CL_P], wi[CL_P];
#pragma unroll
    for (int p = 0; p < CL_P; ++p) {
        acc[p] = 0.0f;
        wi[p] = worker ? __ldg(w + (i64)n * CL_P + p) : 0.0f;
    }
    issue(0);
    for (i64 k = 0; k < K; ++k) {
        issue(k + 1);
        cl_cp_wait<1>();
        __syncthreads();
        i64 b0;
        const int nr = rows_of(k, b0);
        const float* st = ring + (int)(k & 1) * stage_words;
#if CL_NORM
        {
            // Row statistics from the ring, as the row kernel maps and orders them (bwd_common.cu).
            const float* gs = st + 2 * CL_M * lp;
            const float* us = st + 3 * CL_M * lp;
            cl_bwd_row_sums<CL_RW_V>(nr, nn, team, dred, [&](int row, int c0, float (&gv)[CL_M][CL_RW_V], float (&uv)[CL_M][CL_RW_V]) {
#pragma unroll
                for (int j = 0; j < CL_M; ++j) {
#pragma unroll
                    for (int c = 0; c < CL_RW_V; ++c) {
                        gv[j][c] = gs[j * lp + row * nn + c0 + c];
                        uv[j][c] = us[j * lp + row * nn + c0 + c];
                    }
                }
            });
            __syncthreads();
            cl_bwd_row_coef(nr, team, dred, rms, b0, N, cf);
            __syncthreads();
        }
#endif
        if (worker && r < nr) {
            float xi[CL_M], yi[CL_M], gi[CL_M], a[CL_NG], cc[CL_NG];
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                xi[j] = st[j * lp + tid];
                yi[j] = st[(CL_M + j) * lp + tid];
                gi[j] = st[(2 * CL_M + j) * lp + tid];
            }
#pragma unroll
            for (int kk = 0; kk < CL_NG; ++kk) {
                a[kk] = CL_NORM ? cf[(r * CL_NG + kk) * 2] : 0.0f;
                cc[kk] = CL_NORM ? cf[(r * CL_NG + kk) * 2 + 1] : 0.0f;
            }
            cl_bwd_elem(xi, yi, wi, gi, a, cc, dx, dy, BN, b0 * N + tid, acc);
        }
        const i64 it = k / spc;
        if (k - it * spc == spc - 1) {
            // End of a chunk: its d_w partial, the row lanes summed in lane order.
            const i64 chunk = (i64)blockIdx.x + it * gridDim.x;
            float* dst = dw_part + chunk * N * CL_P;
            if (S == 1) {
                if (worker) {
#pragma unroll
                    for (int p = 0; p < CL_P; ++p) dst[(i64)n * CL_P + p] = acc[p];
                }
            } else {
#pragma unroll
                for (int p = 0; p < CL_P; ++p) wred[p * T + tid] = acc[p];
                __syncthreads();
                for (int i = tid; i < nn * CL_P; i += T) {
                    const int c = i / CL_P, p = i - c * CL_P;
                    float s = 0.0f;
                    for (int l = 0; l < S; ++l) s += wred[p * T + l * nn + c];
                    dst[i] = s;
                }
            }
#pragma unroll
            for (int p = 0; p < CL_P; ++p) acc[p] = 0.0f;
        }
        // Every read of this stage done before the next iteration copies into it.
        __syncthreads();
    }
    cl_cp_wait<0>();
}
