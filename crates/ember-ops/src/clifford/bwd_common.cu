// Pieces shared by the fused layer's backward kernels (cols.cu, rowwise.cu, whole.cu): the launch
// code puts this file between the algebra's prefix (CL_M, CL_P, CL_NG, cl_bwd_norm or cl_bwd_plain,
// cl_dot where the kernel takes row statistics), smem.cu, and the kernel's own file.
// Options: -DEMBER_T=... -DCL_NORM=<0|1>.
typedef EMBER_T act_t;

// The gradient program on one element (b, n): x, y and g of its blades, the channel's weights wi
// and, with the norm, the row's coefficients (a, cc) per grade (unused without). d_x and d_y are
// stored at `base` of every blade plane (BN words apart), d_w is added to acc.
__device__ __forceinline__ void cl_bwd_elem(const float* xi, const float* yi, const float* wi, const float* gi, const float* a, const float* cc, act_t* __restrict__ dx,
                                            act_t* __restrict__ dy, i64 BN, i64 base, float* acc) {
    float dxi[CL_M], dyi[CL_M], dwi[CL_P];
#if CL_NORM
    cl_bwd_norm(xi, yi, wi, gi, a, cc, dxi, dyi, dwi);
#else
    (void)a;
    (void)cc;
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

#if CL_NORM && defined(CL_BWD_STATS)
// Row statistics of the normed backward for nr rows held by one CTA (rowwise.cu, whole.cu): the
// per-row, per-grade Σ g·out with the mapping and summation order of the row kernel CL_KIND_DOT
// (rows.cu, CL_DOT_O = 0), so the coefficients below are bitwise the dot pass's. Teams of `team`
// threads per row, blockDim.x / team rows at a time; thread lt of a row's team sums the groups
// q = lt, lt + team, ... of V channels (load(row, first channel, g, out) gives the group's words as
// [blade][channel]); the warp's lanes by xor shuffles; each warp's sums go to
// dred[(row·(team/32) + warp)·NG + k].
template <int V, typename Load> __device__ __forceinline__ void cl_bwd_row_sums(int nr, int nn, int team, float* dred, Load&& load) {
    const int tid = (int)threadIdx.x, teams = (int)blockDim.x / team, per = team / 32;
    const int lt = tid % team, tm = tid / team, warp = lt >> 5, G = nn / V;
    for (int row0 = 0; row0 < nr; row0 += teams) {
        const int row = row0 + tm;
        if (tm < teams) {
            const bool live = row < nr;
            float e[CL_NG];
#pragma unroll
            for (int k = 0; k < CL_NG; ++k) e[k] = 0.0f;
            for (int q = lt; live && q < G; q += team) {
                float gv[CL_M][V], uv[CL_M][V];
                load(row, q * V, gv, uv);
#pragma unroll
                for (int c = 0; c < V; ++c) {
                    float gi[CL_M], ui[CL_M], s[CL_NG];
#pragma unroll
                    for (int j = 0; j < CL_M; ++j) {
                        gi[j] = gv[j][c];
                        ui[j] = uv[j][c];
                    }
                    cl_dot(gi, ui, s);
#pragma unroll
                    for (int k = 0; k < CL_NG; ++k) e[k] += s[k];
                }
            }
#pragma unroll
            for (int k = 0; k < CL_NG; ++k) {
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) e[k] += __shfl_xor_sync(0xffffffffu, e[k], off);
            }
            if (live && (tid & 31) == 0) {
#pragma unroll
                for (int k = 0; k < CL_NG; ++k) dred[(row * per + warp) * CL_NG + k] = e[k];
            }
        }
    }
}

// After a barrier behind cl_bwd_row_sums: the team's warps summed in order and the coefficients
// (1/r, Σ g·out/(N r)) of rows b0 .. b0 + nr - 1 computed as cl_store_coef (rows.cu) does, into
// cf[(row·NG + k)·2 ..].
__device__ __forceinline__ void cl_bwd_row_coef(int nr, int team, const float* dred, const float* __restrict__ rms, i64 b0, i64 N, float* cf) {
    const int per = team / 32;
    for (int i = (int)threadIdx.x; i < nr * CL_NG; i += (int)blockDim.x) {
        const int row = i / CL_NG, k = i - row * CL_NG;
        float t = 0.0f;
        for (int q = 0; q < per; ++q) t += dred[(row * per + q) * CL_NG + k];
        const float a = 1.0f / rms[(b0 + row) * CL_NG + k];
        cf[i * 2] = a;
        cf[i * 2 + 1] = a * t / (float)N;
    }
}
#endif
