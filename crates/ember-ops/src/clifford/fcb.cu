// Fully connected product, backward through cuBLAS (fcb.rs): the elementwise kernels around the
// per-grade GEMMs. The path terms T and their gradients dT live in a workspace where output grade G
// is one row-major matrix with rows (jj, b) (blade j0+jj of G, batch row b) and columns (pp, n)
// (pp-th path into G, input channel n): element (jj, b, pp, n) of grade G at
//   (S_G + jj·P_G)·B·N + b·P_G·N + pp·N + n,   S_G = slots (blade, path) of the grades before G.
//
// Prefix (generated, fcb.rs): CL_M, CL_NT, the device functions of the kind, FB_P (paths),
// fb_path[q] (the path of grade-ordered weight slice q), FB_SLOTS(X): X(q, c1, pg, pp) for every
// pair q (c1 = S_G + jj·P_G), FB_ZEROS(X): X(c1, pg, pp) for every slot of a grade with no term.
// Options: -DEMBER_T=..., -DFB_KIND=<1..4>:
//   1  wg[q][n][m] = w[fb_path[q]][n][m] in the activation type (the weights of each grade contiguous)
//   2  dw[fb_path[q]][n][m] = dwg[q][n][m] (f32, back to the weights' path order)
//   3  T from x, y (generated cl_terms, GELU included), in the activation type
//   4  d_x, d_y from x, y and dT (generated cl_terms_vjp, through the GELU)
// -DFB_X3=1 (f32, kinds 1 and 3): bf16 halves (v ≈ hi + lo, 16 significant bits) for GEMMs that compute
// lo·hi + hi·lo + hi·hi in place of one f32 GEMM (fcb.rs): the terms as hi halves followed by the lo
// halves (three accumulating GEMMs for dW); the weights as rows [hi | lo | hi] of 3·N_out values (one
// GEMM of depth 3·N_out for dT, against d_out's rows [lo | hi | hi] from cl_split3_bf16).
// One thread per element, grid-stride; every output element written once (no atomics).

typedef EMBER_T act_t;
#define FB_THREADS 256
#ifndef FB_X3
#define FB_X3 0
#endif

// v ≈ hi + lo in bf16: hi = bf16(v), lo = bf16(v − hi).
__device__ __forceinline__ void fb_split(float v, ember_bf16& hi, ember_bf16& lo) {
    hi = ember_from_f32<ember_bf16>(v);
    lo = ember_from_f32<ember_bf16>(v - ember_to_f32(hi));
}

#define FB_LOOP(i, total) for (i64 i = (i64)blockIdx.x * FB_THREADS + threadIdx.x; i < (total); i += (i64)gridDim.x * FB_THREADS)

#if FB_KIND == 1 && FB_X3
// Row (q, n) of the grade-ordered weights (Mo values) as the 3·Mo values [hi | lo | hi].
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const float* __restrict__ w, ember_bf16* __restrict__ wg, i64 NM, i64 Mo) {
    FB_LOOP(i, (i64)FB_P * NM) {
        const i64 q = i / NM, r = i - q * NM;
        ember_bf16 hi, lo;
        fb_split(__ldg(w + (i64)fb_path[q] * NM + r), hi, lo);
        const i64 row = i / Mo, m = i - row * Mo;
        ember_bf16* out = wg + row * 3 * Mo + m;
        out[0] = hi;
        out[Mo] = lo;
        out[2 * Mo] = hi;
    }
}
#elif FB_KIND == 1
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const float* __restrict__ w, act_t* __restrict__ wg, i64 NM) {
    FB_LOOP(i, (i64)FB_P * NM) {
        const i64 q = i / NM, r = i - q * NM;
        wg[i] = ember_from_f32<act_t>(__ldg(w + (i64)fb_path[q] * NM + r));
    }
}
#elif FB_KIND == 2
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const float* __restrict__ dwg, float* __restrict__ dw, i64 NM) {
    FB_LOOP(i, (i64)FB_P * NM) {
        const i64 q = i / NM, r = i - q * NM;
        dw[(i64)fb_path[q] * NM + r] = __ldg(dwg + i);
    }
}
#elif FB_KIND == 3
// Consecutive threads take consecutive channels n: every store of a slot is coalesced. With FB_X3 the
// lo halves go LO elements after the hi halves.
#if FB_X3
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, ember_bf16* __restrict__ T, i64 B, i64 N, i64 LO) {
#else
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, act_t* __restrict__ T, i64 B, i64 N) {
#endif
    const i64 BN = B * N;
    FB_LOOP(e, BN) {
        const i64 b = e / N, n = e - b * N;
        float xs[CL_M], ys[CL_M], t[CL_NT];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            xs[j] = ember_to_f32(x[(i64)j * BN + e]);
            ys[j] = ember_to_f32(y[(i64)j * BN + e]);
        }
        cl_terms(xs, ys, t);
#if FB_X3
#define FB_AT(c1, pg, pp) ((i64)(c1) * BN + b * ((i64)(pg) * N) + (i64)(pp) * N + n)
#define FB_PUT(q, c1, pg, pp) fb_split(t[q], T[FB_AT(c1, pg, pp)], T[LO + FB_AT(c1, pg, pp)]);
        FB_SLOTS(FB_PUT)
#undef FB_PUT
#define FB_ZERO(c1, pg, pp) fb_split(0.0f, T[FB_AT(c1, pg, pp)], T[LO + FB_AT(c1, pg, pp)]);
        FB_ZEROS(FB_ZERO)
#undef FB_ZERO
#undef FB_AT
#else
#define FB_PUT(q, c1, pg, pp) T[(i64)(c1) * BN + b * ((i64)(pg) * N) + (i64)(pp) * N + n] = ember_from_f32<act_t>(t[q]);
        FB_SLOTS(FB_PUT)
#undef FB_PUT
#define FB_ZERO(c1, pg, pp) T[(i64)(c1) * BN + b * ((i64)(pg) * N) + (i64)(pp) * N + n] = ember_from_f32<act_t>(0.0f);
        FB_ZEROS(FB_ZERO)
#undef FB_ZERO
#endif
    }
}
#elif FB_KIND == 4
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, const float* __restrict__ dT, act_t* __restrict__ dx, act_t* __restrict__ dy, i64 B, i64 N) {
    const i64 BN = B * N;
    FB_LOOP(e, BN) {
        const i64 b = e / N, n = e - b * N;
        float xs[CL_M], ys[CL_M], gt[CL_NT], dxs[CL_M], dys[CL_M];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            xs[j] = ember_to_f32(x[(i64)j * BN + e]);
            ys[j] = ember_to_f32(y[(i64)j * BN + e]);
        }
#define FB_GET(q, c1, pg, pp) gt[q] = ember_to_f32(dT[(i64)(c1) * BN + b * ((i64)(pg) * N) + (i64)(pp) * N + n]);
        FB_SLOTS(FB_GET)
#undef FB_GET
        cl_terms_vjp(xs, ys, gt, dxs, dys);
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            dx[(i64)j * BN + e] = ember_from_f32<act_t>(dxs[j]);
            dy[(i64)j * BN + e] = ember_from_f32<act_t>(dys[j]);
        }
    }
}
#endif
