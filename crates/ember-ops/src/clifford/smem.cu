// Shared-memory helpers. The launch code puts this file before the row kernels (rows.cu) and the
// backward kernels (bwd_common.cu).
// The CTA's dynamic shared memory as f32 words (on the host emulation's stand-in off the GPU).
__device__ __forceinline__ float* cl_dynamic_smem() {
#ifdef EMBER_HOST_EMU
    return reinterpret_cast<float*>(ember_emu_dynamic_smem());
#else
    extern __shared__ __align__(16) float cl_dsmem[];
    return cl_dsmem;
#endif
}


// cp.async of BYTES (4 or 16) from global into shared memory (16-byte copies bypass L1), its
// commit and wait; on the host emulation a plain copy. Shared by the staged forward (rows.cu) and
// the backward kernels with copy rings (cols.cu, rowwise.cu, whole.cu).
template <int BYTES> __device__ __forceinline__ void cl_cp_async(void* dst, const void* src) {
#ifdef EMBER_HOST_EMU
    std::memcpy(dst, src, BYTES);
#else
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(BYTES) : "memory");
    }
#endif
}
__device__ __forceinline__ void cl_cp_commit() {
#ifndef EMBER_HOST_EMU
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int PENDING> __device__ __forceinline__ void cl_cp_wait() {
#ifndef EMBER_HOST_EMU
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}
