// Column kernel of the fused layer's backward: a CTA owns `ct` channels (threadIdx.x % ct) and a
// chunk of batch rows (blockIdx.y); its 256/ct row lanes walk the chunk's rows, each thread calling
// the generated cl_bwd_* for one element (b, n) at a time. Gradients of x and y are written
// directly; d_w is accumulated in registers over the thread's rows, reduced over the row lanes in a
// fixed order through shared memory, and written as one partial per chunk: dw_part[chunk][n][p]
// (summed over chunks, in order, by cl_dw_reduce). No atomics: deterministic.
//
// Prefix: CL_M, CL_P, CL_NG and the device function cl_bwd_plain (CL_NORM = 0: the upstream
// gradient is the gradient of o) or cl_bwd_norm (CL_NORM = 1: coef[b][k] = (a, c) from the row
// kernel CL_KIND_DOT turn it into the gradient of o inside the function).
// Options: -DEMBER_T=... -DCL_NORM=<0|1>. The launch code puts smem.cu and bwd_common.cu (act_t,
// cl_bwd_elem: the gradient program on one element) before this file.
// Two CTAs per SM where the gradient program fits 128 registers (up to 8 blades): the kernel needs
// every load in flight it can get.
#if CL_M <= 8
#define CL_COLS_MIN_BLOCKS 2
#else
#define CL_COLS_MIN_BLOCKS 1
#endif

#ifndef CL_PIPE
#define CL_PIPE 0
#endif
#ifndef CL_FOLD
#define CL_FOLD 0
#endif

#if CL_FOLD
// CL_FOLD = 1: the chunk sums of d_w folded into the column kernel instead of cl_sum_tree launches
// after it. Same tree, same order: level k sums groups of CL_FOLD_G consecutive partials of level
// k - 1, in order from 0.0f (cl_sum_tree's formula), so d_w is bitwise the default's. Who sums a
// group: the CTA of the group that finishes last (an integer ticket per (level, group, column
// tile); the counters start at zero, set by the dot pass before this kernel). The summing CTA
// reads the others' partials after the ticket, through L2 (ld.global.cg: never an L1 line that
// could predate them). Which CTA is last changes from run to run; what it computes does not.
#define CL_FOLD_G 16
// The values of one column tile are contiguous in every partial (channels tile·ct.., all P
// paths): [v0, v0 + nv) of each (chunk) row of `len` words. Vector loads where everything is a
// multiple of 4 words (16 B aligned); the sums per value are the same either way.
__device__ __forceinline__ void cl_fold_group(const float* src, float* dst, i64 len, i64 v0, i64 nv, i64 first, int cnt) {
    if (((len | v0 | nv) & 3) == 0) {
        for (i64 i = (i64)threadIdx.x * 4; i < nv; i += (i64)blockDim.x * 4) {
            float4 v[CL_FOLD_G];
#pragma unroll
            for (int q = 0; q < CL_FOLD_G; ++q) {
                v[q] = q < cnt ? __ldcg(reinterpret_cast<const float4*>(src + (first + q) * len + v0 + i)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int q = 0; q < CL_FOLD_G; ++q) {
                if (q < cnt) {
                    s.x += v[q].x;
                    s.y += v[q].y;
                    s.z += v[q].z;
                    s.w += v[q].w;
                }
            }
            *reinterpret_cast<float4*>(dst + v0 + i) = s;
        }
    } else {
        for (i64 i = threadIdx.x; i < nv; i += blockDim.x) {
            float v[CL_FOLD_G];
#pragma unroll
            for (int q = 0; q < CL_FOLD_G; ++q) v[q] = q < cnt ? __ldcg(src + (first + q) * len + v0 + i) : 0.0f;
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < CL_FOLD_G; ++q) {
                if (q < cnt) s += v[q];
            }
            dst[v0 + i] = s;
        }
    }
}
// After this CTA's partial of chunk `node` is written: climb the tree while this CTA is the last
// of its group. Level outputs: the final one into dw, the others one after the other in lvl
// (groups × len words each); counters: (groups × tiles) per level, one after the other in cnt.
__device__ __forceinline__ void cl_fold(const float* part, float* __restrict__ dw, float* lvl, u32* cnt, i64 chunks, i64 len, i64 v0, i64 nv, int tile,
                                        int tiles, i64 node) {
    __shared__ int last;
    const float* src = part;
    i64 n = chunks, loff = 0, coff = 0;
    while (n > 1) {
        const i64 groups = (n + CL_FOLD_G - 1) / CL_FOLD_G, grp = node / CL_FOLD_G;
        const int size = (int)min((i64)CL_FOLD_G, n - grp * CL_FOLD_G);
        float* dst = groups == 1 ? dw : lvl + loff;
        // Every thread's stores of this CTA's partial visible device-wide before the ticket.
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(cnt + coff + grp * tiles + tile, 1u) == (u32)(size - 1);
        __syncthreads();
        if (!last) return;
        __threadfence();
        cl_fold_group(src, dst + grp * len, len, v0, nv, grp * CL_FOLD_G, size);
        if (groups > 1) loff += groups * len;
        coff += groups * tiles;
        src = dst;
        n = groups;
        node = grp;
    }
}
#define CL_FOLD_ARGS , float* __restrict__ dw, float* lvl, u32* cnt, i64 chunks
#else
#define CL_FOLD_ARGS
#endif

#if !CL_PIPE
extern "C" __global__ void __launch_bounds__(256, CL_COLS_MIN_BLOCKS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                            const act_t* __restrict__ g, const float* __restrict__ coef, act_t* __restrict__ dx,
                                                            act_t* __restrict__ dy, float* __restrict__ dw_part, i64 B, i64 N, i64 rows_per_chunk,
                                                            int ct CL_FOLD_ARGS) {
    __shared__ float red[256];
    const int c = threadIdx.x % ct, r = threadIdx.x / ct, rt = blockDim.x / ct;
    const i64 n = (i64)blockIdx.x * ct + c;
    const i64 b_begin = (i64)blockIdx.y * rows_per_chunk;
    const i64 b_end = min(B, b_begin + rows_per_chunk);
    const i64 BN = B * N;
    float acc[CL_P], wi[CL_P];
#pragma unroll
    for (int p = 0; p < CL_P; ++p) {
        acc[p] = 0.0f;
        wi[p] = n < N ? __ldg(w + n * CL_P + p) : 0.0f;
    }
    for (i64 b = b_begin + r; n < N && b < b_end; b += rt) {
        const i64 base = b * N + n;
        float xi[CL_M], yi[CL_M], gi[CL_M], a[CL_NG], cc[CL_NG];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            xi[j] = ember_to_f32(x[(i64)j * BN + base]);
            yi[j] = ember_to_f32(y[(i64)j * BN + base]);
            gi[j] = ember_to_f32(g[(i64)j * BN + base]);
        }
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) {
            a[k] = CL_NORM ? __ldg(coef + (b * CL_NG + k) * 2) : 0.0f;
            cc[k] = CL_NORM ? __ldg(coef + (b * CL_NG + k) * 2 + 1) : 0.0f;
        }
        cl_bwd_elem(xi, yi, wi, gi, a, cc, dx, dy, BN, base, acc);
    }
#pragma unroll
    for (int p = 0; p < CL_P; ++p) {
        red[threadIdx.x] = acc[p];
        __syncthreads();
        if (r == 0 && n < N) {
            float s = 0.0f;
            for (int q = 0; q < rt; ++q) s += red[q * ct + c];
            dw_part[((i64)blockIdx.y * N + n) * CL_P + p] = s;
        }
        __syncthreads();
    }
#if CL_FOLD
    const i64 c0 = (i64)blockIdx.x * ct;
    cl_fold(dw_part, dw, lvl, cnt, chunks, N * CL_P, c0 * CL_P, min((i64)ct, N - c0) * CL_P, (int)blockIdx.x, (int)gridDim.x, (i64)blockIdx.y);
#endif
}
#else
// CL_PIPE = 1 (f32): the same CTA geometry, work items (column tile, row chunk) and d_w partials as
// above, but persistent (a grid stride over the items, column tile fastest) and with each thread's
// x, y, g words of a row copied by cp.async into its own slots of a CL_ST-stage ring in shared
// memory, CL_ST - 1 rows ahead of the row it computes and across item boundaries: the loads of the
// next rows are in flight while the gradient program runs (v1 issues them only after it). A thread
// reads back only what it copied, so the ring needs no barrier.
#define CL_ST 3
#define CL_Q (3 * CL_M)
#define CL_T 256

// Where step k of this CTA's walk lands: item blockIdx.x + (k / spi)·gridDim.x, row step k % spi,
// the item's column tile item % col_tiles and row chunk item / col_tiles. Counts are 32-bit (the
// host runs this kernel only where items·spi and B fit), addresses 64-bit.
struct cl_pos {
    int tile, chunk, step;
};
__device__ __forceinline__ cl_pos cl_pos_of(int k, int spi, int col_tiles) {
    cl_pos q;
    const int it = k / spi;
    const int item = (int)blockIdx.x + it * (int)gridDim.x;
    q.step = k - it * spi;
    q.chunk = item / col_tiles;
    q.tile = item - q.chunk * col_tiles;
    return q;
}

// Dynamic shared memory: the ring, ring[(stage·CL_Q + word)·256 + thread] (f32), then the d_w
// reduction buffer red[p·256 + thread].
extern "C" __global__ void __launch_bounds__(CL_T, CL_COLS_MIN_BLOCKS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                              const act_t* __restrict__ g, const float* __restrict__ coef, act_t* __restrict__ dx,
                                                              act_t* __restrict__ dy, float* __restrict__ dw_part, i64 B, i64 N, i64 rows_per_chunk,
                                                              int ct, i64 col_tiles, i64 items) {
    float* ring = cl_dynamic_smem();
    float* red = ring + CL_ST * CL_Q * CL_T;
    const int tid = threadIdx.x;
    const int c = tid % ct, r = tid / ct, rt = CL_T / ct;
    const int rpc = (int)rows_per_chunk, tiles = (int)col_tiles, nb = (int)B, nn_ = (int)N;
    const i64 BN = B * N;
    const int spi = (rpc + rt - 1) / rt;
    const int mine = (int)items > (int)blockIdx.x ? ((int)items - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int K = mine * spi;
    // Row and channel of step k for this thread; b < 0 where out of range (nothing loaded or
    // computed). Both only feed addresses.
    auto where = [&](int k, int& n, int& b) {
        const cl_pos q = cl_pos_of(k, spi, tiles);
        n = q.tile * ct + c;
        const int b0 = q.chunk * rpc;
        b = b0 + q.step * rt + r;
        if (n >= nn_ || b >= min(nb, b0 + rpc)) b = -1;
    };
    // Copies step k's words into ring stage k % CL_ST (nothing where out of range), as one commit
    // group either way so that the group count stays in step with k.
    auto issue = [&](int k) {
        if (k < K) {
            int n, b;
            where(k, n, b);
            if (b >= 0) {
                const i64 base = (i64)b * N + n;
                float* st = ring + (k % CL_ST) * CL_Q * CL_T + tid;
#pragma unroll
                for (int j = 0; j < CL_M; ++j) {
                    cl_cp_async<4>(st + j * CL_T, x + (i64)j * BN + base);
                    cl_cp_async<4>(st + (CL_M + j) * CL_T, y + (i64)j * BN + base);
                    cl_cp_async<4>(st + (2 * CL_M + j) * CL_T, g + (i64)j * BN + base);
                }
            }
        }
        cl_cp_commit();
    };
#pragma unroll
    for (int k = 0; k < CL_ST - 1; ++k) issue(k);
    float acc[CL_P], wi[CL_P];
    int wtile = -1;
#pragma unroll
    for (int p = 0; p < CL_P; ++p) acc[p] = 0.0f;
    for (int k = 0; k < K; ++k) {
        issue(k + CL_ST - 1);
        const int tile = cl_pos_of(k, spi, tiles).tile;
        if (tile != wtile) {
            wtile = tile;
            const int n = tile * ct + c;
#pragma unroll
            for (int p = 0; p < CL_P; ++p) wi[p] = n < nn_ ? __ldg(w + (i64)n * CL_P + p) : 0.0f;
        }
        int n, b;
        where(k, n, b);
        // Row coefficients (with the norm) before the wait: their latency overlaps it (one broadcast
        // word pair per grade and row, L1-resident after the row's first warp).
        float a[CL_NG], cc[CL_NG];
#pragma unroll
        for (int kk = 0; kk < CL_NG; ++kk) {
            a[kk] = CL_NORM && b >= 0 ? __ldg(coef + ((i64)b * CL_NG + kk) * 2) : 0.0f;
            cc[kk] = CL_NORM && b >= 0 ? __ldg(coef + ((i64)b * CL_NG + kk) * 2 + 1) : 0.0f;
        }
        cl_cp_wait<CL_ST - 1>();
        if (b >= 0) {
            const i64 base = (i64)b * N + n;
            const float* st = ring + (k % CL_ST) * CL_Q * CL_T + tid;
            float xi[CL_M], yi[CL_M], gi[CL_M];
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                xi[j] = st[j * CL_T];
                yi[j] = st[(CL_M + j) * CL_T];
                gi[j] = st[(2 * CL_M + j) * CL_T];
            }
            cl_bwd_elem(xi, yi, wi, gi, a, cc, dx, dy, BN, base, acc);
        }
        const cl_pos q = cl_pos_of(k, spi, tiles);
        if (q.step == spi - 1) {
            // End of the item: the row lanes' d_w summed in lane order (v1's order), one partial
            // per (chunk, channel, path); consecutive threads write consecutive words.
#pragma unroll
            for (int p = 0; p < CL_P; ++p) {
                red[p * CL_T + tid] = acc[p];
                acc[p] = 0.0f;
            }
            __syncthreads();
            for (int i = tid; i < CL_P * ct; i += CL_T) {
                const int cl = i / CL_P, p = i - cl * CL_P;
                const int nq = q.tile * ct + cl;
                if (nq < nn_) {
                    float s = 0.0f;
                    for (int l = 0; l < rt; ++l) s += red[p * CL_T + l * ct + cl];
                    dw_part[((i64)q.chunk * N + nq) * CL_P + p] = s;
                }
            }
            __syncthreads();
        }
    }
    cl_cp_wait<0>();
}
#endif
