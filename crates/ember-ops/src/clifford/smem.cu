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
// A hint to bring the 128-byte line holding p into L2 (no-op on the host emulation). Safe before a
// dependent launch's grid-dependency wait: L2 is where every kernel's writes meet, so a line brought
// in early is still updated by the kernel before; only the registers and shared memory of this
// kernel must wait.
__device__ __forceinline__ void cl_l2_line(const void* p) {
#ifndef EMBER_HOST_EMU
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#else
    (void)p;
#endif
}
// The lines of n consecutive values of T at p, spread over the CTA's threads (each line once).
template <typename T> __device__ __forceinline__ void cl_l2_range(const T* p, i64 n) {
    if (n <= 0) return;
    const char* c = reinterpret_cast<const char*>(p);
    const i64 first = (i64)(reinterpret_cast<unsigned long long>(c) & 127), lines = (first + n * (i64)sizeof(T) + 127) / 128;
    // The first line from p itself (its aligned start may lie before the tensor), the rest from
    // their starts; the last start is at most p's last byte.
    for (i64 k = threadIdx.x; k < lines; k += blockDim.x) cl_l2_line(k == 0 ? c : c - first + 128 * k);
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
