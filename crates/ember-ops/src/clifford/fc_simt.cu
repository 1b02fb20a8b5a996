// CUDA-core fallback of the fully connected product for algebras whose path terms do not fit the
// tensor-core tiles in shared memory (n ≥ 5: hundreds of (blade, path) pairs). Table driven: the
// prefix carries the algebra's blade products grouped by (output blade, path) pair.
//
// Prefix: CL_M, CL_P, CL_NT, CL_NPROD and the __constant__ tables
//   fs_pair_blade[CL_NT], fs_pair_path[CL_NT]   the output blade and path of pair q
//   fs_pair_start[CL_NT + 1]                    products of pair q: fs_prod[start .. end)
//   fs_blade_start[CL_M + 1]                    pairs of output blade j (pairs are sorted by blade)
//   fs_prod[CL_NPROD]                           i | l << 8 | (sign < 0) << 16: s·x_i·y_l
// Options: -DEMBER_T=..., -DFS_KIND=<1 forward | 2 data gradient | 3 weight gradient>, -DFS_F32=<0|1>
// (forward: the output is f32; gradients: the upstream gradient d_o is f32).
//
// Every thread owns its outputs and sums in a fixed order: deterministic.
typedef EMBER_T act_t;

__device__ __forceinline__ float fs_cdf(float v) { return 0.5f * (1.0f + erff(v * 0.70710678118654752f)); }
__device__ __forceinline__ float fs_pdf(float v) { return 0.39894228040143268f * expf(-0.5f * v * v); }

// Σ s·x_i·y_l over the products of pair q, at element offset e of x and y (stride BN per blade).
__device__ __forceinline__ float fs_term(const act_t* __restrict__ x, const act_t* __restrict__ y, i64 BN, i64 e, int q) {
    float t = 0.0f;
    for (int k = fs_pair_start[q]; k < fs_pair_start[q + 1]; ++k) {
        const u32 pr = fs_prod[k];
        const int i = pr & 0xff, l = (pr >> 8) & 0xff;
        const float v = ember_to_f32(x[(i64)i * BN + e]) * ember_to_f32(y[(i64)l * BN + e]);
        t += (pr >> 16) ? -v : v;
    }
    return t;
}

#if FS_KIND == 1
// o[j, b, m] = Σ_n Σ_{pairs q of j} w[p_q, n, m]·Φx·Φy·T_q(b, n); one thread per output element.
extern "C" __global__ void __launch_bounds__(256) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                            void* __restrict__ out, i64 B, i64 NI, i64 NO) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)CL_M * B * NO) return;
    const int j = (int)(idx / (B * NO));
    const i64 b = (idx / NO) % B, m = idx % NO, BN = B * NI;
    float acc = 0.0f;
    for (i64 n = 0; n < NI; ++n) {
        const i64 e = b * NI + n;
        const float gate = fs_cdf(ember_to_f32(x[e])) * fs_cdf(ember_to_f32(y[e]));
        for (int q = fs_blade_start[j]; q < fs_blade_start[j + 1]; ++q) {
            acc += __ldg(w + ((i64)fs_pair_path[q] * NI + n) * NO + m) * gate * fs_term(x, y, BN, e, q);
        }
    }
#if FS_F32
    reinterpret_cast<float*>(out)[idx] = acc;
#else
    reinterpret_cast<act_t*>(out)[idx] = ember_from_f32<act_t>(acc);
#endif
}
#endif

#if FS_KIND == 2
// d_x, d_y at (b, n): u_q = Σ_m w[p_q, n, m]·d_o[j_q, b, m], then the products' VJP and the GELU's.
extern "C" __global__ void __launch_bounds__(256) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ w,
                                                            const void* __restrict__ d_o, act_t* __restrict__ dx, act_t* __restrict__ dy, i64 B, i64 NI,
                                                            i64 NO) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NI) return;
    const i64 b = idx / NI, n = idx % NI, BN = B * NI;
    float xr[CL_M], yr[CL_M], gx[CL_M], gy[CL_M], dgx[CL_M], dgy[CL_M];
    for (int i = 0; i < CL_M; ++i) {
        xr[i] = ember_to_f32(x[(i64)i * BN + idx]);
        yr[i] = ember_to_f32(y[(i64)i * BN + idx]);
    }
    const float cx = fs_cdf(xr[0]), cy = fs_cdf(yr[0]);
    for (int i = 0; i < CL_M; ++i) {
        gx[i] = xr[i] * cx;
        gy[i] = yr[i] * cy;
        dgx[i] = 0.0f;
        dgy[i] = 0.0f;
    }
    for (int q = 0; q < CL_NT; ++q) {
        const int j = fs_pair_blade[q];
        const float* wr = w + ((i64)fs_pair_path[q] * NI + n) * NO;
        float u = 0.0f;
        for (i64 m = 0; m < NO; ++m) {
            const i64 gi = ((i64)j * B + b) * NO + m;
#if FS_F32
            const float g = reinterpret_cast<const float*>(d_o)[gi];
#else
            const float g = ember_to_f32(reinterpret_cast<const act_t*>(d_o)[gi]);
#endif
            u += __ldg(wr + m) * g;
        }
        for (int k = fs_pair_start[q]; k < fs_pair_start[q + 1]; ++k) {
            const u32 pr = fs_prod[k];
            const int i = pr & 0xff, l = (pr >> 8) & 0xff;
            const float s = (pr >> 16) ? -u : u;
            dgx[i] += s * gy[l];
            dgy[l] += s * gx[i];
        }
    }
    float sx = 0.0f, sy = 0.0f;
    for (int i = 0; i < CL_M; ++i) {
        sx += dgx[i] * xr[i];
        sy += dgy[i] * yr[i];
    }
    for (int i = 0; i < CL_M; ++i) {
        float vx = dgx[i] * cx, vy = dgy[i] * cy;
        if (i == 0) {
            vx += fs_pdf(xr[0]) * sx;
            vy += fs_pdf(yr[0]) * sy;
        }
        dx[(i64)i * BN + idx] = ember_from_f32<act_t>(vx);
        dy[(i64)i * BN + idx] = ember_from_f32<act_t>(vy);
    }
}
#endif

#if FS_KIND == 3
// d_w[p, n, m] = Σ_b Σ_{pairs q of path p} Φx·Φy·T_q(b, n)·d_o[j_q, b, m]; one thread per weight.
extern "C" __global__ void __launch_bounds__(256) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const void* __restrict__ d_o,
                                                            float* __restrict__ dw, i64 B, i64 NI, i64 NO) {
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)CL_P * NI * NO) return;
    const int p = (int)(idx / (NI * NO));
    const i64 n = (idx / NO) % NI, m = idx % NO, BN = B * NI;
    float acc = 0.0f;
    for (i64 b = 0; b < B; ++b) {
        const i64 e = b * NI + n;
        const float gate = fs_cdf(ember_to_f32(x[e])) * fs_cdf(ember_to_f32(y[e]));
        for (int q = 0; q < CL_NT; ++q) {
            if (fs_pair_path[q] != p) continue;
            const i64 gi = ((i64)fs_pair_blade[q] * B + b) * NO + m;
#if FS_F32
            const float g = reinterpret_cast<const float*>(d_o)[gi];
#else
            const float g = ember_to_f32(reinterpret_cast<const act_t*>(d_o)[gi]);
#endif
            acc += gate * fs_term(x, y, BN, e, q) * g;
        }
    }
    dw[idx] = acc;
}
#endif
