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
// The weights' permutations (kinds 1, 2) index P·N·N_out values: in 32 bits where they fit, since their
// divisions by N·N_out were 64-bit calls per value (~2 TB/s for ~31 MB at Cl(3,0), N = N_out = 512).
#define FB_LOOP_U32(i, total) for (u32 i = blockIdx.x * FB_THREADS + threadIdx.x; i < (u32)(total); i += gridDim.x * FB_THREADS)
#define FB_FITS_U32(total) ((total) < ((i64)1 << 31))

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
    if (FB_FITS_U32((i64)FB_P * NM)) {
        const u32 nm = (u32)NM;
        FB_LOOP_U32(i, (i64)FB_P * NM) {
            const u32 q = i / nm, r = i - q * nm;
            wg[i] = ember_from_f32<act_t>(__ldg(w + (i64)fb_path[q] * NM + r));
        }
        return;
    }
    FB_LOOP(i, (i64)FB_P * NM) {
        const i64 q = i / NM, r = i - q * NM;
        wg[i] = ember_from_f32<act_t>(__ldg(w + (i64)fb_path[q] * NM + r));
    }
}
#elif FB_KIND == 2
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const float* __restrict__ dwg, float* __restrict__ dw, i64 NM) {
    if (FB_FITS_U32((i64)FB_P * NM)) {
        const u32 nm = (u32)NM;
        FB_LOOP_U32(i, (i64)FB_P * NM) {
            const u32 q = i / nm, r = i - q * nm;
            dw[(i64)fb_path[q] * NM + r] = __ldg(dwg + i);
        }
        return;
    }
    FB_LOOP(i, (i64)FB_P * NM) {
        const i64 q = i / NM, r = i - q * NM;
        dw[(i64)fb_path[q] * NM + r] = __ldg(dwg + i);
    }
}
#elif FB_KIND == 3
// Consecutive threads take consecutive channels n: every store of a slot is coalesced. With FB_X3 the
// lo halves go LO elements after the hi halves. FB_V = 2 (N even, at most 8 blades: fcb.rs
// `terms_width`): a thread takes channels n, n + 1, each load and store two values wide (44 slots of
// 2-byte stores per element made this kernel ~2.7 TB/s at Cl(3,0), B = 4096, N = 512). Same values.
#ifndef FB_V
#define FB_V 1
#endif
template <typename T> __device__ __forceinline__ void fb_ld(const T* p, float (&v)[FB_V]) {
    if constexpr (FB_V == 2 && sizeof(T) == 4) {
        const float2 a = *reinterpret_cast<const float2*>(p);
        v[0] = a.x;
        v[1] = a.y;
    } else if constexpr (FB_V == 2) {
        const u32 w = *reinterpret_cast<const u32*>(p);
        T lo, hi;
        lo.bits = (u16)(w & 0xffffu);
        hi.bits = (u16)(w >> 16);
        v[0] = ember_to_f32(lo);
        v[1] = ember_to_f32(hi);
    } else {
        v[0] = ember_to_f32(p[0]);
    }
}
template <typename T> __device__ __forceinline__ void fb_st(T* p, const float (&v)[FB_V]) {
    if constexpr (FB_V == 2 && sizeof(T) == 4) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else if constexpr (FB_V == 2) {
        *reinterpret_cast<u32*>(p) = (u32)ember_from_f32<T>(v[0]).bits | ((u32)ember_from_f32<T>(v[1]).bits << 16);
    } else {
        p[0] = ember_from_f32<T>(v[0]);
    }
}
// v ≈ hi + lo of FB_V values into hi_p[0..] and lo_p[0..].
__device__ __forceinline__ void fb_st_split(ember_bf16* hi_p, ember_bf16* lo_p, const float (&v)[FB_V]) {
    ember_bf16 h[FB_V], l[FB_V];
#pragma unroll
    for (int k = 0; k < FB_V; ++k) fb_split(v[k], h[k], l[k]);
    if constexpr (FB_V == 2) {
        *reinterpret_cast<u32*>(hi_p) = (u32)h[0].bits | ((u32)h[1].bits << 16);
        *reinterpret_cast<u32*>(lo_p) = (u32)l[0].bits | ((u32)l[1].bits << 16);
    } else {
        hi_p[0] = h[0];
        lo_p[0] = l[0];
    }
}
#if FB_X3
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, ember_bf16* __restrict__ T, i64 B, i64 N, i64 LO) {
#else
extern "C" __global__ void __launch_bounds__(FB_THREADS) cl_kernel(const act_t* __restrict__ x, const act_t* __restrict__ y, act_t* __restrict__ T, i64 B, i64 N) {
#endif
    const i64 BN = B * N;
    FB_LOOP(ev, BN / FB_V) {
        const i64 e = ev * FB_V;
        const i64 b = e / N, n = e - b * N;
        float xv[CL_M][FB_V], yv[CL_M][FB_V], t[FB_V][CL_NT];
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            fb_ld(x + (i64)j * BN + e, xv[j]);
            fb_ld(y + (i64)j * BN + e, yv[j]);
        }
#pragma unroll
        for (int v = 0; v < FB_V; ++v) {
            float xs[CL_M], ys[CL_M];
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                xs[j] = xv[j][v];
                ys[j] = yv[j][v];
            }
            cl_terms(xs, ys, t[v]);
        }
        const float zero[FB_V] = {};
#define FB_AT(c1, pg, pp) ((i64)(c1) * BN + b * ((i64)(pg) * N) + (i64)(pp) * N + n)
#define FB_SLOT_VALS(q) \
    float tv[FB_V];     \
    _Pragma("unroll") for (int v = 0; v < FB_V; ++v) tv[v] = t[v][q];
#if FB_X3
#define FB_PUT(q, c1, pg, pp) { FB_SLOT_VALS(q) fb_st_split(T + FB_AT(c1, pg, pp), T + LO + FB_AT(c1, pg, pp), tv); }
        FB_SLOTS(FB_PUT)
#undef FB_PUT
#define FB_ZERO(c1, pg, pp) fb_st_split(T + FB_AT(c1, pg, pp), T + LO + FB_AT(c1, pg, pp), zero);
        FB_ZEROS(FB_ZERO)
#undef FB_ZERO
#else
#define FB_PUT(q, c1, pg, pp) { FB_SLOT_VALS(q) fb_st(T + FB_AT(c1, pg, pp), tv); }
        FB_SLOTS(FB_PUT)
#undef FB_PUT
#define FB_ZERO(c1, pg, pp) fb_st(T + FB_AT(c1, pg, pp), zero);
        FB_ZEROS(FB_ZERO)
#undef FB_ZERO
#endif
#undef FB_SLOT_VALS
#undef FB_AT
        (void)zero;
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
