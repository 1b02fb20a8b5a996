// Deterministic reductions shared by the Clifford layers (algebra-independent).

// out[i] = Σ_c part[c·len + i] over c = 0..chunks-1, in order: d_w partials of the fused layer's
// column kernel, split-K partials of the tile GEMMs.
extern "C" __global__ void __launch_bounds__(256) cl_sum_chunks(const float* __restrict__ part, float* __restrict__ out, i64 chunks, i64 len) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (i64)blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (i64 c = 0; c < chunks; ++c) s += part[c * len + i];
        out[i] = s;
    }
}

// First level of a fixed tree over the chunks: out[gi·len + i] = Σ part[c·len + i] over the group
// c = gi·CL_SUM_G .. min(chunks, (gi + 1)·CL_SUM_G) - 1, in order; one CTA per (256 values, group),
// blockIdx.y = group. The groups' sums are then summed in order by cl_sum_chunks, so the order
// ((c0 + … + c15) + (c16 + … + c31) + …) depends only on the chunk count: the same bits on every
// GPU and run. The group's loads are issued together (unrolled into registers) before the adds.
#define CL_SUM_G 16
extern "C" __global__ void __launch_bounds__(256) cl_sum_tree(const float* __restrict__ part, float* __restrict__ out, i64 chunks, i64 len) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    const i64 c0 = (i64)blockIdx.y * CL_SUM_G;
    const int cnt = (int)min((i64)CL_SUM_G, chunks - c0);
    float v[CL_SUM_G];
#pragma unroll
    for (int q = 0; q < CL_SUM_G; ++q) v[q] = q < cnt ? __ldg(part + (c0 + q) * len + i) : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < CL_SUM_G; ++q) {
        if (q < cnt) s += v[q];
    }
    out[(i64)blockIdx.y * len + i] = s;
}

// Both levels of cl_sum_tree in one launch, for CL_SUM_G < chunks ≤ CL_SUM_G²: thread (word j, group
// g) of a CTA of CL_SUM_G words × CL_SUM_G groups sums group g's partials of its word in order from
// 0.0f (the first level), then one thread per word sums the groups' sums in order from 0.0f (the
// second level): the same additions in the same order as the two launches, so the same bits.
// Launched as a programmatic dependent of the kernel that writes the partials (cuda.rs sum_pdl):
// nothing is read before the grid-dependency wait.
extern "C" __global__ void __launch_bounds__(CL_SUM_G * CL_SUM_G) cl_sum_tree2(const float* __restrict__ part, float* __restrict__ out, i64 chunks, i64 len) {
    __shared__ float group_sums[CL_SUM_G][CL_SUM_G + 1];
    ember_grid_dependency_wait();
    const int j = threadIdx.x % CL_SUM_G, g = threadIdx.x / CL_SUM_G;
    const i64 i = (i64)blockIdx.x * CL_SUM_G + j;
    const i64 c0 = (i64)g * CL_SUM_G;
    const i64 rest = chunks - c0;
    const int cnt = rest <= 0 ? 0 : (int)min((i64)CL_SUM_G, rest);
    float v[CL_SUM_G];
#pragma unroll
    for (int q = 0; q < CL_SUM_G; ++q) v[q] = (i < len && q < cnt) ? __ldg(part + (c0 + q) * len + i) : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < CL_SUM_G; ++q) {
        if (q < cnt) s += v[q];
    }
    group_sums[g][j] = s;
    __syncthreads();
    if (g == 0 && i < len) {
        const int groups = (int)((chunks + CL_SUM_G - 1) / CL_SUM_G);
        float t = 0.0f;
        for (int q = 0; q < groups; ++q) t += group_sums[q][j];
        out[i] = t;
    }
}

// Partial column sums of a (rows × cols) matrix over row chunks: part[chunk][col] = Σ over the
// chunk's rows in order (the bias gradient of MVLinear is the column sum of the scalar blade's
// upstream gradient). One thread per column; the chunks are summed by cl_sum_chunks.
template <typename T>
__device__ __forceinline__ void cl_col_sums_impl(const T* __restrict__ g, float* __restrict__ part, i64 rows, i64 cols, i64 rows_per_chunk) {
    const i64 col = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const i64 r0 = (i64)blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float s = 0.0f;
    for (i64 r = r0; r < r1; ++r) s += ember_to_f32(g[r * cols + col]);
    part[(i64)blockIdx.y * cols + col] = s;
}
extern "C" __global__ void __launch_bounds__(256) cl_col_sums_f32(const float* g, float* part, i64 rows, i64 cols, i64 rpc) { cl_col_sums_impl(g, part, rows, cols, rpc); }
extern "C" __global__ void __launch_bounds__(256) cl_col_sums_f16(const ember_f16* g, float* part, i64 rows, i64 cols, i64 rpc) { cl_col_sums_impl(g, part, rows, cols, rpc); }
extern "C" __global__ void __launch_bounds__(256) cl_col_sums_bf16(const ember_bf16* g, float* part, i64 rows, i64 cols, i64 rpc) { cl_col_sums_impl(g, part, rows, cols, rpc); }

// MVLinear through cuBLAS. cuBLAS multiplies operands of one type, so half-type activations take
// the (f32) weights rounded to their type: out[i] = (T) w[i].
template <typename T>
__device__ __forceinline__ void cl_round_impl(const float* __restrict__ w, T* __restrict__ out, i64 len) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (i64)blockDim.x * gridDim.x) out[i] = ember_from_f32<T>(w[i]);
}
extern "C" __global__ void __launch_bounds__(256) cl_round_f16(const float* w, ember_f16* out, i64 len) { cl_round_impl(w, out, len); }
extern "C" __global__ void __launch_bounds__(256) cl_round_bf16(const float* w, ember_bf16* out, i64 len) { cl_round_impl(w, out, len); }
// f32 operands as bf16 halves laid out for ONE GEMM three times as deep (K' = 3·K) in place of three
// accumulating GEMMs (each of those reads and writes the whole f32 C again): row r of x (cols values, K
// along the row) becomes the 3·cols values [part 0 | part 1 | part 2] of row r of `cat`, part p the lo half
// where bit p of `lo_parts` is set, else the hi half (A: lo, hi, hi against B: hi, lo, hi gives
// lo·hi + hi·lo + hi·hi). With K down the rows of an R × cols matrix, pass rows = 1 and cols = R·cols: the
// three parts are then stacked blocks. `halves` (null: none) also gets the plain halves, hi then lo
// rows·cols further, for the GEMMs that stay three.
extern "C" __global__ void __launch_bounds__(256) cl_split3_bf16(const float* __restrict__ x, ember_bf16* __restrict__ cat, ember_bf16* __restrict__ halves,
                                                                 i64 rows, i64 cols, int lo_parts) {
    const i64 len = rows * cols;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (i64)blockDim.x * gridDim.x) {
        const float v = x[i];
        const ember_bf16 hi = ember_from_f32<ember_bf16>(v), lo = ember_from_f32<ember_bf16>(v - ember_to_f32(hi));
        const i64 r = i / cols, c = i - r * cols;
        ember_bf16* row = cat + r * 3 * cols + c;
#pragma unroll
        for (int p = 0; p < 3; ++p) row[p * cols] = ((lo_parts >> p) & 1) ? lo : hi;
        if (halves) {
            halves[i] = hi;
            halves[len + i] = lo;
        }
    }
}
// f32 operands of MVLinear's GEMMs as bf16 halves, x ≈ hi + lo: h[i] = bf16(x[i]), h[len + i] = bf16(x[i] − h[i])
// (three bf16 GEMMs lo·hi + hi·lo + hi·hi then stand in for one f32 GEMM; blas.rs).
extern "C" __global__ void __launch_bounds__(256) cl_split_bf16(const float* __restrict__ x, ember_bf16* __restrict__ h, i64 len) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (i64)blockDim.x * gridDim.x) {
        const float v = x[i];
        const ember_bf16 hi = ember_from_f32<ember_bf16>(v);
        h[i] = hi;
        h[len + i] = ember_from_f32<ember_bf16>(v - ember_to_f32(hi));
    }
}

// The bias broadcast over the rows of the scalar blade, out[r][c] = bias[c] (rows × cols), which
// the scalar grade's GEMM then accumulates into (β = 1).
template <typename T>
__device__ __forceinline__ void cl_bias_rows_impl(const float* __restrict__ bias, T* __restrict__ out, i64 rows, i64 cols) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += (i64)blockDim.x * gridDim.x) out[i] = ember_from_f32<T>(bias[i % cols]);
}
extern "C" __global__ void __launch_bounds__(256) cl_bias_rows_f32(const float* b, float* out, i64 rows, i64 cols) { cl_bias_rows_impl(b, out, rows, cols); }
extern "C" __global__ void __launch_bounds__(256) cl_bias_rows_f16(const float* b, ember_f16* out, i64 rows, i64 cols) { cl_bias_rows_impl(b, out, rows, cols); }
extern "C" __global__ void __launch_bounds__(256) cl_bias_rows_bf16(const float* b, ember_bf16* out, i64 rows, i64 cols) { cl_bias_rows_impl(b, out, rows, cols); }
