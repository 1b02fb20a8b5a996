// The layer's in-place clamp of its diffusion times: t ← max(t, lo), NaN stays NaN like torch.clamp.
extern "C" __global__ void diffusion_clamp_min_f32(float* t, i64 n, float lo) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && t[i] < lo) t[i] = lo;
}
