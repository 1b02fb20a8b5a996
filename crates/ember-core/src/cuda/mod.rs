//! The CUDA backend's runtime: one context and stream per device, NVRTC-compiled modules cached in
//! memory (and on disk, see [`nvrtc`]), launches, events.
//!
//! Built on `cudarc` with dynamic loading: nothing from CUDA is needed to build ember, and a machine
//! without a driver gets `Error::CudaUnavailable` (never a panic: [`libs`] checks that each library
//! can be opened before cudarc touches it).

pub mod blas;
pub mod cache;
pub mod libs;
pub mod nvrtc;
pub mod timing;

use crate::{Error, Result};
use cudarc::driver::{sys, CudaContext, CudaModule, CudaStream, PushKernelArg};
pub use cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// ember's device-side helpers, prepended to every kernel source.
pub const COMMON_CUH: &str = include_str!("common.cuh");
const TENSOR_KERNELS: &str = include_str!("tensor_kernels.cu");

/// A CUDA source file of ember and the name it is cached and reported under. The common helpers are
/// prepended when it is compiled.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    pub name: &'static str,
    pub body: &'static str,
}

impl KernelSource {
    pub const fn new(name: &'static str, body: &'static str) -> Self {
        Self { name, body }
    }
    /// The complete translation unit NVRTC sees.
    pub fn full_code(&self) -> String {
        let mut s = String::with_capacity(COMMON_CUH.len() + self.body.len() + 1);
        s.push_str(COMMON_CUH);
        s.push('\n');
        s.push_str(self.body);
        s
    }
}

pub const TENSOR_SOURCE: KernelSource = KernelSource::new("tensor", TENSOR_KERNELS);

/// What `ember info` reports about a device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    /// NVRTC target: `sm_90a` on Hopper (arch-specific features such as wgmma), else `sm_XY`.
    pub arch: String,
    pub multiprocessors: i32,
    pub l2_bytes: i32,
    pub total_memory: usize,
    pub shared_memory_per_block_optin: i32,
    pub driver_version: i32,
    /// Peak DRAM bandwidth in GB/s (2 transfers per memory clock × bus width); 0 when the driver
    /// does not report the memory clock or bus width.
    pub dram_peak_gbps: f64,
}

/// The NVRTC architecture string for a compute capability.
pub fn arch_for(cc: (i32, i32)) -> String {
    match cc {
        (9, 0) => "sm_90a".into(),
        (10, 0) => "sm_100a".into(),
        (maj, min) => format!("sm_{maj}{min}"),
    }
}

/// Number of u32 words behind [`CudaDevice::work_counters`].
pub const WORK_COUNTERS: usize = 64;

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// Loaded functions by "source name|options#entry".
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// The dynamic shared memory each function (by its driver handle) was last allowed, so that a
    /// launch asking for no more skips the driver call ([`CudaDevice::set_max_dynamic_smem`]).
    smem_allowed: Mutex<HashMap<usize, usize>>,
    /// See [`CudaDevice::work_counters`]: the buffer and its address, made on first use.
    work_counters: Mutex<Option<(cudarc::driver::CudaSlice<u8>, u64)>>,
    /// Dropped tensors' buffers kept for reuse ([`cache`]), and the most bytes it may hold.
    cache: Mutex<cache::FreeLists<cudarc::driver::CudaSlice<u8>>>,
    cache_limit: usize,
}

/// Devices initialised so far, or why initialisation failed (remembered so it is not retried).
type Registry = Mutex<HashMap<usize, std::result::Result<Arc<CudaDevice>, String>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Number of CUDA devices, or why CUDA is not usable.
pub fn device_count() -> Result<usize> {
    libs::ensure_driver().map_err(Error::CudaUnavailable)?;
    guard("cuInit", || cudarc::driver::result::init().map_err(|e| Error::CudaUnavailable(format!("cuInit failed: {e}"))))?;
    let n = guard("cuDeviceGetCount", || {
        CudaContext::device_count().map_err(|e| Error::CudaUnavailable(format!("cuDeviceGetCount failed: {e}")))
    })?;
    Ok(n.max(0) as usize)
}

/// Run a cudarc call, turning a panic inside it (a symbol missing from an old driver) into an error.
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Error::CudaUnavailable(format!("{what} failed inside the CUDA bindings (driver too old?)"))))
}

impl CudaDevice {
    /// The device with this ordinal, initialised once per process.
    pub fn get(ordinal: usize) -> Result<Arc<CudaDevice>> {
        let mut reg = registry().lock().unwrap();
        if let Some(r) = reg.get(&ordinal) {
            return r.clone().map_err(Error::CudaUnavailable);
        }
        let made = Self::init(ordinal);
        reg.insert(ordinal, made.as_ref().map(Arc::clone).map_err(|e| e.to_string().trim_start_matches("CUDA is not usable: ").to_string()));
        made
    }

    fn init(ordinal: usize) -> Result<Arc<CudaDevice>> {
        let n = device_count()?;
        if n == 0 {
            return Err(Error::CudaUnavailable("the driver reports no CUDA device".into()));
        }
        if ordinal >= n {
            return Err(Error::CudaUnavailable(format!("cuda:{ordinal} requested but only {n} device(s) exist")));
        }
        guard("context creation", || {
            let ctx = CudaContext::new(ordinal).map_err(|e| Error::CudaUnavailable(format!("cannot create a context on cuda:{ordinal}: {e}")))?;
            // One stream per device: cudarc's per-buffer event tracking is not needed.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(|e| Error::cuda("cuStreamCreate", e))?;
            let attr = |a: sys::CUdevice_attribute| ctx.attribute(a).map_err(|e| Error::cuda("cuDeviceGetAttribute", e));
            let cc = ctx.compute_capability().map_err(|e| Error::cuda("compute capability", e))?;
            let mut driver_version = 0;
            unsafe {
                let _ = cudarc::driver::sys::cuDriverGetVersion(&mut driver_version);
            }
            let info = DeviceInfo {
                ordinal,
                name: ctx.name().map_err(|e| Error::cuda("cuDeviceGetName", e))?,
                compute_capability: cc,
                arch: arch_for(cc),
                multiprocessors: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                l2_bytes: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
                total_memory: ctx.total_mem().map_err(|e| Error::cuda("cuDeviceTotalMem", e))?,
                shared_memory_per_block_optin: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
                driver_version,
                dram_peak_gbps: {
                    // Both attributes are optional in recent drivers: unknown → 0.
                    let khz = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).unwrap_or(0).max(0) as f64;
                    let bits = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).unwrap_or(0).max(0) as f64;
                    2.0 * khz * 1e3 * bits / 8.0 / 1e9
                },
            };
            let cache_limit = cache::limit_for(info.total_memory);
            Ok(Arc::new(CudaDevice {
                ctx,
                stream,
                info,
                modules: Mutex::new(HashMap::new()),
                functions: Mutex::new(HashMap::new()),
                smem_allowed: Mutex::new(HashMap::new()),
                work_counters: Mutex::new(None),
                cache: Mutex::new(cache::FreeLists::new(cache_limit)),
                cache_limit,
            }))
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Wait for all queued work and report any asynchronous error.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| Error::cuda("stream synchronize", e))
    }

    /// Load (compiling with NVRTC on first use) the module of `src` built with `options` (e.g.
    /// `-DTILE=64`), and return its function `entry`.
    pub fn function(&self, src: &KernelSource, options: &[String], entry: &str) -> Result<CudaFunction> {
        // One key string, "name|options#entry", built without intermediate allocations: this lookup
        // runs before every launch.
        let mut fkey = String::with_capacity(src.name.len() + entry.len() + 2 + options.iter().map(|o| o.len() + 1).sum::<usize>());
        fkey.push_str(src.name);
        fkey.push('|');
        for (i, o) in options.iter().enumerate() {
            if i > 0 {
                fkey.push(' ');
            }
            fkey.push_str(o);
        }
        let module_len = fkey.len();
        fkey.push('#');
        fkey.push_str(entry);
        if let Some(f) = self.functions.lock().unwrap().get(&fkey) {
            return Ok(f.clone());
        }
        let module_key = fkey[..module_len].to_string();
        let module = {
            let mut modules = self.modules.lock().unwrap();
            match modules.get(&module_key) {
                Some(m) => m.clone(),
                None => {
                    let compiled = nvrtc::compile(src.name, &src.full_code(), &self.info.arch, options)?;
                    if !compiled.log.trim().is_empty() && std::env::var("EMBER_PTXAS_VERBOSE").is_ok_and(|v| v == "1") {
                        eprintln!("[ember] nvrtc log for {} {}:\n{}", src.name, options.join(" "), compiled.log);
                    }
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin))
                        .map_err(|e| Error::cuda(&format!("loading module {}", src.name), e))?;
                    modules.insert(module_key.clone(), m.clone());
                    m
                }
            }
        };
        let f = module.load_function(entry).map_err(|e| Error::cuda(&format!("kernel {entry} in {}", src.name), e))?;
        self.functions.lock().unwrap().insert(fkey, f.clone());
        Ok(f)
    }

    /// Allow `f` to use more than 48 KiB of dynamic shared memory.
    pub fn set_max_dynamic_smem(&self, f: &CudaFunction, bytes: usize) -> Result<()> {
        if bytes > self.info.shared_memory_per_block_optin as usize {
            return Err(Error::Unsupported(format!(
                "{bytes} bytes of shared memory per block (the device allows {})",
                self.info.shared_memory_per_block_optin
            )));
        }
        // Called before every launch that needs more than 48 KB; the attribute only has to be raised,
        // so a launch that needs no more than before makes no driver call (host time per call).
        let handle = f.cu_function() as usize;
        let mut allowed = self.smem_allowed.lock().unwrap();
        if allowed.get(&handle).is_some_and(|&a| a >= bytes) {
            return Ok(());
        }
        f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
            .map_err(|e| Error::cuda("cuFuncSetAttribute", e))?;
        allowed.insert(handle, bytes);
        Ok(())
    }

    /// Start building a launch of `f` on this device's stream.
    pub fn launch<'a>(&'a self, f: &'a CudaFunction, cfg: LaunchConfig) -> Launch<'a> {
        Launch { args: self.stream.launch_builder(f), params: Vec::new(), func: f, stream: &self.stream, cc: self.info.compute_capability, cfg, name: "kernel", pdl: false }
    }

    /// Allocate at least `bytes` of device memory (at least one byte, so empty tensors have a valid
    /// pointer): a cached buffer of the request's size class when one is free ([`cache`]), else a new
    /// one of that class. Returns the buffer and whether it may go back to the cache
    /// ([`CudaDevice::recycle`]) when its owner drops it: not when caching is off, nor for buffers
    /// allocated while the stream is being captured into a graph (those belong to the graph).
    pub fn alloc_bytes(&self, bytes: usize) -> Result<(cudarc::driver::CudaSlice<u8>, bool)> {
        let fresh = |n: usize| unsafe { self.stream.alloc::<u8>(n) }.map_err(|e| Error::cuda(&format!("allocating {bytes} bytes"), e));
        if self.cache_limit == 0 || self.capturing() {
            return Ok((fresh(bytes.max(1))?, false));
        }
        let class = cache::size_class(bytes);
        if let Some(buf) = self.cache.lock().unwrap().take(class) {
            return Ok((buf, true));
        }
        let buf = match fresh(class) {
            Ok(buf) => buf,
            // Out of memory, perhaps because of what the cache holds: free it and try once more.
            Err(_) if self.cache.lock().unwrap().held() > 0 => {
                self.release_cached();
                fresh(class)?
            }
            Err(e) => return Err(e),
        };
        Ok((buf, true))
    }

    /// Take back a buffer that [`CudaDevice::alloc_bytes`] returned as cacheable, once its owner is
    /// done with it (its work may still be queued: the next owner's work queues after it on the
    /// device's one stream). Freed instead when the cache is full.
    pub fn recycle(&self, buf: cudarc::driver::CudaSlice<u8>) {
        let class = cudarc::driver::DeviceSlice::len(&buf);
        let over = self.cache.lock().unwrap().put(class, buf);
        drop(over);
    }

    /// Free every cached buffer (as `torch.cuda.empty_cache()` does); tensors alive are untouched.
    pub fn release_cached(&self) {
        let bufs = self.cache.lock().unwrap().drain();
        drop(bufs);
    }

    /// The most bytes the cache may hold (0: caching off).
    pub fn cache_limit(&self) -> usize {
        self.cache_limit
    }

    /// Bytes of device memory the cache holds for reuse.
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().unwrap().held()
    }

    /// Whether the stream is being captured into a CUDA graph.
    fn capturing(&self) -> bool {
        !matches!(self.stream.capture_status(), Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE))
    }

    /// Address of [`WORK_COUNTERS`] zeroed u32 words kept for the device's lifetime, for kernels that
    /// hand out work items at run time (one `atomicAdd` ticket per item) instead of a fixed
    /// grid-stride order. Contract: such a kernel leaves its words at zero when it ends (e.g. the
    /// CTA that takes the last ticket resets it), so the next launch finds them zeroed without a
    /// memset; the device's single stream keeps two such launches from overlapping.
    pub fn work_counters(&self) -> Result<u64> {
        let mut slot = self.work_counters.lock().unwrap();
        if let Some((_, ptr)) = slot.as_ref() {
            return Ok(*ptr);
        }
        let buf = self.stream.alloc_zeros::<u8>(WORK_COUNTERS * 4).map_err(|e| Error::cuda("allocating the work counters", e))?;
        let ptr = {
            let (p, _sync) = cudarc::driver::DevicePtr::device_ptr(&buf, &self.stream);
            p
        };
        *slot = Some((buf, ptr));
        Ok(ptr)
    }

    /// Asynchronous device-to-device copy of `bytes` between raw addresses on this device.
    pub fn copy_raw(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|e| Error::cuda("device-to-device copy", e))
    }

    /// Number of blocks for a grid-stride loop over `n` elements.
    pub fn grid_for(&self, n: usize, block: u32) -> u32 {
        let needed = n.div_ceil(block as usize).max(1);
        needed.min(self.info.multiprocessors.max(1) as usize * 32) as u32
    }
}

/// A kernel launch under construction; `run` checks the launch result.
pub struct Launch<'a> {
    args: cudarc::driver::LaunchArgs<'a>,
    /// The same arguments as raw parameter pointers, for launches through `cuLaunchKernelEx`.
    params: Vec<*mut std::ffi::c_void>,
    func: &'a CudaFunction,
    stream: &'a Arc<CudaStream>,
    cc: (i32, i32),
    cfg: LaunchConfig,
    name: &'static str,
    pdl: bool,
}

/// Whether launches marked [`Launch::dependent`] use programmatic dependent launch: on (compute
/// capability 9.0 and newer) unless `EMBER_PDL=0`.
pub fn pdl_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::knob("EMBER_PDL") != Some("0"))
}

impl<'a> Launch<'a> {
    pub fn arg<T: cudarc::driver::DeviceRepr>(mut self, v: &'a T) -> Self {
        self.args.arg(v);
        self.params.push(v as *const T as *mut std::ffi::c_void);
        self
    }
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
    /// Programmatic dependent launch (Hopper and newer): this kernel may be scheduled while the
    /// previous kernel on the stream is still running, once every CTA of that kernel has executed
    /// `griddepcontrol.launch_dependents` (or exited). Contract for the kernel: it executes
    /// `griddepcontrol.wait` (`ember_grid_dependency_wait` in common.cuh) before it reads anything
    /// the previous kernels write or writes anything they touch; before that it may only read
    /// data that no kernel since the last ordinary launch on the stream writes (e.g. an op's
    /// constant inputs, when the op's first kernel is an ordinary launch). Ignored (an ordinary
    /// launch) before compute capability 9.0 or with `EMBER_PDL=0`.
    pub fn dependent(mut self) -> Self {
        self.pdl = self.cc.0 >= 9 && pdl_enabled();
        self
    }
    /// [`Launch::dependent`] where `on`, else an ordinary launch.
    pub fn dependent_if(self, on: bool) -> Self {
        if on {
            self.dependent()
        } else {
            self
        }
    }
    /// Launch. The caller guarantees that the argument list matches the kernel's signature and that
    /// every pointer covers the extent the kernel touches (ops validate shapes before launching).
    pub fn run(mut self) -> Result<()> {
        if self.pdl {
            return self.run_dependent();
        }
        unsafe { self.args.launch(self.cfg) }.map(|_| ()).map_err(|e| Error::cuda(&format!("launching {}", self.name), e))
    }
    fn run_dependent(mut self) -> Result<()> {
        // The error text is built only on failure, not formatted on every launch.
        let name = self.name;
        let what = move |e| Error::cuda(&format!("launching {name} (programmatic dependent launch)"), e);
        self.stream.context().bind_to_thread().map_err(what)?;
        // SAFETY: the attribute union is plain data; only the field the id names is read.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let c = &self.cfg;
        let config = sys::CUlaunchConfig {
            gridDimX: c.grid_dim.0,
            gridDimY: c.grid_dim.1,
            gridDimZ: c.grid_dim.2,
            blockDimX: c.block_dim.0,
            blockDimY: c.block_dim.1,
            blockDimZ: c.block_dim.2,
            sharedMemBytes: c.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as `run`; `params` points at the arguments, which outlive this call ('a).
        unsafe { sys::cuLaunchKernelEx(&config, self.func.cu_function(), self.params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(what)
    }
    /// Cooperative launch (cuLaunchCooperativeKernel): every block of the grid is resident at once,
    /// so blocks may wait on each other; a grid larger than the device can hold is an error from the
    /// driver, not a hang. Same contract as [`Launch::run`].
    pub fn run_cooperative(mut self) -> Result<()> {
        unsafe { self.args.launch_cooperative(self.cfg) }.map(|_| ()).map_err(|e| Error::cuda(&format!("launching {} (cooperative)", self.name), e))
    }
}

/// A TMA descriptor (the driver's 128-byte `CUtensorMap`), passed by value to a kernel parameter
/// declared `const __grid_constant__` with a 64-byte-aligned 128-byte struct type: the kernel hands
/// the parameter's address to `cp.async.bulk.tensor`, so the map needs no global-memory copy.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct TensorMap(sys::CUtensorMap);

// SAFETY: plain bytes, `#[repr(C)]` inside; the driver copies the kernel's 128 parameter bytes.
unsafe impl DeviceRepr for TensorMap {}

/// The tiled tensor map of a row-major `rows × cols` matrix of 16-bit elements (`dtype` F16 or
/// BF16) at device address `ptr`, rows `row_bytes` apart, read in boxes of `box_rows × box_cols`
/// with the 128-byte shared-memory swizzle; elements outside the matrix read as zeros. The
/// driver's rules, checked here so that a violation is an error naming the rule rather than an
/// opaque launch failure: `ptr` 16-byte aligned, `row_bytes` a multiple of 16 below 2^40,
/// `box_cols · 2` ≤ 128 (the swizzle span) and a multiple of 16, boxes of 1 to 256 per dimension.
pub fn tensor_map_2d_sw128(dtype: crate::DType, ptr: u64, rows: u64, cols: u64, row_bytes: u64, box_rows: u32, box_cols: u32) -> Result<TensorMap> {
    use sys::{CUtensorMapDataType as Ty, CUtensorMapFloatOOBfill as Fill, CUtensorMapInterleave as Il, CUtensorMapL2promotion as L2, CUtensorMapSwizzle as Sw};
    let ty = match dtype {
        crate::DType::F16 => Ty::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        crate::DType::BF16 => Ty::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        other => return Err(Error::Unsupported(format!("a 16-bit tensor map of {other} elements"))),
    };
    let rule = |ok: bool, what: String| if ok { Ok(()) } else { Err(Error::Unsupported(format!("TMA tensor map: {what}"))) };
    rule(ptr.is_multiple_of(16), format!("global address {ptr:#x} is not 16-byte aligned"))?;
    rule(row_bytes.is_multiple_of(16) && row_bytes < 1 << 40, format!("row stride of {row_bytes} bytes (must be a multiple of 16 below 2^40)"))?;
    rule((1..=1u64 << 32).contains(&rows) && (1..=1u64 << 32).contains(&cols), format!("extent {rows} × {cols} (each 1 to 2^32)"))?;
    rule((1..=256).contains(&box_rows) && box_cols * 2 <= 128 && (box_cols * 2).is_multiple_of(16) && box_cols > 0, format!("box {box_rows} × {box_cols}"))?;
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    let dims = [cols, rows];
    let strides = [row_bytes]; // rank − 1 strides: dimension 0 is contiguous
    let boxes = [box_cols, box_rows];
    let elem_strides = [1u32, 1];
    let res = guard("cuTensorMapEncodeTiled", || {
        // SAFETY: every array has the rank's length (2, and 1 stride); the map is written in place.
        Ok(unsafe {
            sys::cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                ty,
                2,
                ptr as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem_strides.as_ptr(),
                Il::CU_TENSOR_MAP_INTERLEAVE_NONE,
                Sw::CU_TENSOR_MAP_SWIZZLE_128B,
                L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        })
    })?;
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::cuda("cuTensorMapEncodeTiled", format!("{res:?}")));
    }
    // SAFETY: the driver filled the map (success above); zeroed bytes were valid before that too.
    Ok(TensorMap(unsafe { map.assume_init() }))
}

/// A 1-D launch configuration.
pub fn cfg_1d(grid: u32, block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: smem }
}
