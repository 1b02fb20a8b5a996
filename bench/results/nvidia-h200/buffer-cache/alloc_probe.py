# Does a stream-ordered allocation and free between two kernels cost GPU time? (H200, torch for the
# kernel, the driver's cuMemAllocAsync / cuMemFreeAsync through ctypes on the same stream.)
import ctypes, torch
cuda = ctypes.CDLL("libcuda.so.1")
s = torch.cuda.Stream()
h = ctypes.c_void_p(s.cuda_stream)
x = torch.zeros(1 << 24, device="cuda")
def run(n, allocs, size):
    ptr = ctypes.c_uint64()
    with torch.cuda.stream(s):
        for _ in range(20): x.add_(1.0)
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(s)
        for _ in range(n):
            x.add_(1.0)
            ps = []
            for _ in range(allocs):
                r = cuda.cuMemAllocAsync(ctypes.byref(ptr), ctypes.c_size_t(size), h); assert r == 0, r
                ps.append(ptr.value)
            for p in ps:
                r = cuda.cuMemFreeAsync(ctypes.c_uint64(p), h); assert r == 0, r
        b.record(s)
        torch.cuda.synchronize()
        return a.elapsed_time(b) * 1000 / n
for size in (1 << 20, 64 << 20):
    for allocs in (0, 1, 3, 6):
        t = [run(2000, allocs, size) for _ in range(3)]
        print(f"size {size>>20:3d} MiB, {allocs} alloc+free per kernel: {' '.join(f'{v:6.2f}' for v in t)} us per iteration")
import time
for allocs in (0, 3):
    t0 = time.perf_counter(); run(2000, allocs, 1 << 20); print(f"host wall per iteration with {allocs}: {(time.perf_counter()-t0)/2000*1e6:.2f} us")
