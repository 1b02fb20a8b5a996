// Tensor utility kernels: fill (poisoning outputs with NaN), counter-based uniform random numbers
// identical to the CPU's, and dtype conversion. Grid-stride loops with 64-bit indices.

template <typename T>
__device__ void fill_impl(T* out, i64 n, float value) {
    const T v = ember_from_f32<T>(value);
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) out[i] = v;
}

template <typename T>
__device__ void uniform_impl(T* out, i64 n, u64 seed, float lo, float hi) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = ember_from_f32<T>(ember_uniform(seed, (u64)i, lo, hi));
}

template <typename S, typename D>
__device__ void cast_impl(const S* in, D* out, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = ember_from_f32<D>(ember_to_f32(in[i]));
}

#define EMBER_FILL(T, NAME) \
    extern "C" __global__ void fill_##NAME(T* out, i64 n, float v) { fill_impl<T>(out, n, v); } \
    extern "C" __global__ void uniform_##NAME(T* out, i64 n, u64 seed, float lo, float hi) { uniform_impl<T>(out, n, seed, lo, hi); }
EMBER_FILL(float, f32)
EMBER_FILL(ember_f16, f16)
EMBER_FILL(ember_bf16, bf16)

#define EMBER_CAST(S, SN, D, DN) \
    extern "C" __global__ void cast_##SN##_##DN(const S* in, D* out, i64 n) { cast_impl<S, D>(in, out, n); }
EMBER_CAST(float, f32, ember_f16, f16)
EMBER_CAST(float, f32, ember_bf16, bf16)
EMBER_CAST(ember_f16, f16, float, f32)
EMBER_CAST(ember_bf16, bf16, float, f32)
EMBER_CAST(ember_f16, f16, ember_bf16, bf16)
EMBER_CAST(ember_bf16, bf16, ember_f16, f16)
