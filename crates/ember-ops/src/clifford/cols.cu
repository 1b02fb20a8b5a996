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
// Options: -DEMBER_T=... -DCL_NORM=<0|1>.
typedef EMBER_T act_t;
// Two CTAs per SM where the gradient program fits 128 registers (up to 8 blades): the kernel needs
// every load in flight it can get.
#if CL_M <= 8
#define CL_COLS_MIN_BLOCKS 2
#else
#define CL_COLS_MIN_BLOCKS 1
#endif

extern "C" __global__ void __launch_bounds__(256, CL_COLS_MIN_BLOCKS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                            const act_t* __restrict__ g, const float* __restrict__ coef, act_t* __restrict__ dx,
                                                            act_t* __restrict__ dy, float* __restrict__ dw_part, i64 B, i64 N, i64 rows_per_chunk,
                                                            int ct) {
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
        float xi[CL_M], yi[CL_M], gi[CL_M], dxi[CL_M], dyi[CL_M], dwi[CL_P];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            xi[j] = ember_to_f32(x[(i64)j * BN + base]);
            yi[j] = ember_to_f32(y[(i64)j * BN + base]);
            gi[j] = ember_to_f32(g[(i64)j * BN + base]);
        }
#if CL_NORM
        float a[CL_NG], cc[CL_NG];
#pragma unroll
        for (int k = 0; k < CL_NG; ++k) {
            a[k] = __ldg(coef + (b * CL_NG + k) * 2);
            cc[k] = __ldg(coef + (b * CL_NG + k) * 2 + 1);
        }
        cl_bwd_norm(xi, yi, wi, gi, a, cc, dxi, dyi, dwi);
#else
        cl_bwd_plain(xi, yi, wi, gi, dxi, dyi, dwi);
#endif
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            dx[(i64)j * BN + base] = ember_from_f32<act_t>(dxi[j]);
            dy[(i64)j * BN + base] = ember_from_f32<act_t>(dyi[j]);
        }
#pragma unroll
        for (int p = 0; p < CL_P; ++p) acc[p] += dwi[p];
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
}
