// The CTA's dynamic shared memory as f32 words (on the host emulation's stand-in off the GPU). The
// launch code puts this file before the row kernels (rows.cu) and the backward kernels
// (bwd_common.cu).
__device__ __forceinline__ float* cl_dynamic_smem() {
#ifdef EMBER_HOST_EMU
    return reinterpret_cast<float*>(ember_emu_dynamic_smem());
#else
    extern __shared__ __align__(16) float cl_dsmem[];
    return cl_dsmem;
#endif
}
