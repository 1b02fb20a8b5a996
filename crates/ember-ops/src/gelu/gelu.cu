// GELU forward and backward, memory-bound elementwise kernels.
//
// Bytes: fwd reads x and writes y (2·es·n); bwd reads x, dy and writes dx (3·es·n). Each thread
// takes 16 elements per array (4 vectors of f32, 2 of f16/bf16: the same bytes per element in flight
// with half the registers for half types), all loads issued before the math, so enough bytes are in
// flight to saturate HBM; the tail (n not a multiple of the vector width) is handled by scalar code.

#define ELEMS_PER_THREAD 16

template <typename T>
__device__ __forceinline__ void gelu_fwd_impl(const T* __restrict__ x, T* __restrict__ y, i64 n) {
    constexpr int V = ember_vec<T>::N;
    constexpr int UNROLL = ELEMS_PER_THREAD / V;
    const i64 nvec = n / V;
    const i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float v[UNROLL][V];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const i64 i = base + (i64)u * blockDim.x;
        if (i < nvec) ember_load16(x + i * V, v[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const i64 i = base + (i64)u * blockDim.x;
        if (i < nvec) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[u][k] = ember_gelu(v[u][k]);
            ember_store16(y + i * V, v[u]);
        }
    }
    // Tail: the first few threads of block 0 take the last n % V elements.
    if (blockIdx.x == 0 && threadIdx.x < n - nvec * V) {
        const i64 i = nvec * V + threadIdx.x;
        y[i] = ember_from_f32<T>(ember_gelu(ember_to_f32(x[i])));
    }
}

template <typename T>
__device__ __forceinline__ void gelu_bwd_impl(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, i64 n) {
    constexpr int V = ember_vec<T>::N;
    constexpr int UNROLL = ELEMS_PER_THREAD / V;
    const i64 nvec = n / V;
    const i64 base = (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
    float a[UNROLL][V], g[UNROLL][V];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const i64 i = base + (i64)u * blockDim.x;
        if (i < nvec) {
            ember_load16(x + i * V, a[u]);
            ember_load16(dy + i * V, g[u]);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const i64 i = base + (i64)u * blockDim.x;
        if (i < nvec) {
#pragma unroll
            for (int k = 0; k < V; ++k) a[u][k] = g[u][k] * ember_gelu_grad(a[u][k]);
            ember_store16(dx + i * V, a[u]);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x < n - nvec * V) {
        const i64 i = nvec * V + threadIdx.x;
        dx[i] = ember_from_f32<T>(ember_to_f32(dy[i]) * ember_gelu_grad(ember_to_f32(x[i])));
    }
}

#define EMBER_GELU(T, NAME)                                                                              \
    extern "C" __global__ void __launch_bounds__(256) gelu_fwd_##NAME(const T* x, T* y, i64 n) {        \
        gelu_fwd_impl<T>(x, y, n);                                                                      \
    }                                                                                                   \
    extern "C" __global__ void __launch_bounds__(256) gelu_bwd_##NAME(const T* x, const T* dy, T* dx, i64 n) { \
        gelu_bwd_impl<T>(x, dy, dx, n);                                                                 \
    }
EMBER_GELU(float, f32)
EMBER_GELU(ember_f16, f16)
EMBER_GELU(ember_bf16, bf16)
