//! Launch plans: every CUDA op of the layers is first described as buffers and kernel launches
//! (module, options, grid, arguments), independently of any device, then run. On a GPU
//! [`run_cuda`] allocates the buffers and launches; the unit tests run the same plans through a
//! host emulation of the kernels (`emu.rs`), so the launch logic and the kernels are exercised
//! without a GPU too.

use ember_core::cuda::blas::{Blas, GemmDesc};
use ember_core::cuda::{KernelSource, LaunchConfig};
use ember_core::{DType, Error, Result, Tensor};

/// A kernel argument: a buffer of the plan, a null pointer, a scalar, or the device's work
/// counters from this word on (`CudaDevice::work_counters`: zero before and after every launch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Buf(usize),
    Null,
    Counters(usize),
    I64(i64),
    I32(i32),
}

/// One kernel launch.
#[derive(Clone, Debug)]
pub struct Launch {
    pub src: KernelSource,
    pub opts: Vec<String>,
    pub entry: String,
    pub grid: (u32, u32, u32),
    pub block: u32,
    /// Dynamic shared memory in bytes.
    pub smem: usize,
    pub args: Vec<Arg>,
    pub name: &'static str,
    /// A programmatic dependent launch (`Launch::dependent` in ember-core): the kernel may be
    /// scheduled while the launch before it drains, and calls `ember_grid_dependency_wait()`
    /// before it touches memory.
    pub dependent: bool,
}

/// One cuBLAS GEMM on buffers of the plan: (buffer, element offset) of A, B and C (A and B of
/// `desc.ab`, C of `desc.c`). A plan's launches and GEMMs run in the order they were added.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub desc: GemmDesc,
    pub a: (usize, usize),
    pub b: (usize, usize),
    pub c: (usize, usize),
}

/// A buffer the plan allocates (outputs and workspaces), filled with NaN when poisoning is on.
#[derive(Clone, Debug)]
pub struct BufSpec {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

/// Buffers 0..inputs are the op's inputs, in its order; then the allocated ones.
#[derive(Clone, Debug)]
pub struct Plan {
    pub inputs: usize,
    pub allocs: Vec<BufSpec>,
    pub launches: Vec<Launch>,
    pub gemms: Vec<Gemm>,
    /// For each GEMM, how many launches run before it (`launches.len()` when it was added).
    pub gemm_at: Vec<usize>,
    /// Buffers returned, in order.
    pub outputs: Vec<usize>,
}

impl Plan {
    pub fn new(inputs: usize) -> Plan {
        Plan { inputs, allocs: Vec::new(), launches: Vec::new(), gemms: Vec::new(), gemm_at: Vec::new(), outputs: Vec::new() }
    }
    /// A new buffer; returns its id.
    pub fn alloc(&mut self, shape: &[usize], dtype: DType) -> usize {
        self.allocs.push(BufSpec { shape: shape.to_vec(), dtype });
        self.inputs + self.allocs.len() - 1
    }
    /// An allocated buffer that the op returns.
    pub fn output(&mut self, shape: &[usize], dtype: DType) -> usize {
        let id = self.alloc(shape, dtype);
        self.outputs.push(id);
        id
    }
    pub fn launch(&mut self, l: Launch) {
        self.launches.push(l);
    }
    pub fn gemm(&mut self, g: Gemm) {
        self.gemms.push(g);
        self.gemm_at.push(self.launches.len());
    }
    /// The GEMMs that run after launch `before - 1` and before launch `before` (all remaining ones
    /// for `before == launches.len()`).
    pub fn gemms_before(&self, before: usize) -> impl Iterator<Item = &Gemm> {
        let last = before == self.launches.len();
        self.gemms.iter().zip(&self.gemm_at).filter(move |(_, &at)| at == before || (last && at > before)).map(|(g, _)| g)
    }
}

/// Run `plan` on the CUDA device of `inputs[0]`; returns the output buffers in order.
pub fn run_cuda(plan: Plan, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    assert_eq!(inputs.len(), plan.inputs, "plan built for another input count");
    let dev = inputs[0].cuda_device()?.clone();
    let device = inputs[0].device();
    let mut bufs: Vec<Option<Tensor>> = Vec::with_capacity(plan.allocs.len());
    for b in &plan.allocs {
        bufs.push(Some(Tensor::output(&b.shape, b.dtype, device)?));
    }
    let ptr = |id: usize| -> Result<u64> {
        if id < plan.inputs {
            inputs[id].cuda_ptr()
        } else {
            bufs[id - plan.inputs].as_ref().expect("buffer alive").cuda_ptr()
        }
    };
    let blas = if plan.gemms.is_empty() { None } else { Some(Blas::shared(&dev)?) };
    let run_gemms = |before: usize| -> Result<()> {
        for g in plan.gemms_before(before) {
            let at = |(id, off): (usize, usize), dt: DType| -> Result<u64> { Ok(ptr(id)? + (off * dt.size()) as u64) };
            blas.as_ref().expect("handle created when the plan has GEMMs").gemm(&g.desc, at(g.a, g.desc.ab)?, at(g.b, g.desc.ab)?, at(g.c, g.desc.c)?)?;
        }
        Ok(())
    };
    for (li, l) in plan.launches.iter().enumerate() {
        run_gemms(li)?;
        let f = dev.function(&l.src, &l.opts, &l.entry)?;
        if l.smem > 48 * 1024 {
            dev.set_max_dynamic_smem(&f, l.smem)?;
        }
        // Scalars and pointers live in these vectors while the launch borrows them.
        let mut u64s = Vec::new();
        let mut i64s = Vec::new();
        let mut i32s = Vec::new();
        for a in &l.args {
            match *a {
                Arg::Buf(id) => u64s.push(ptr(id)?),
                Arg::Null => u64s.push(0),
                Arg::Counters(word) => {
                    assert!(word < ember_core::cuda::WORK_COUNTERS, "work counter {word} out of range");
                    u64s.push(dev.work_counters()? + 4 * word as u64)
                }
                Arg::I64(v) => i64s.push(v),
                Arg::I32(v) => i32s.push(v),
            }
        }
        let smem = u32::try_from(l.smem).map_err(|_| Error::invalid("clifford", "shared memory size overflows u32"))?;
        let cfg = LaunchConfig { grid_dim: l.grid, block_dim: (l.block, 1, 1), shared_mem_bytes: smem };
        let mut launch = dev.launch(&f, cfg);
        let (mut iu, mut ii, mut ij) = (0, 0, 0);
        for a in &l.args {
            launch = match a {
                Arg::Buf(_) | Arg::Null | Arg::Counters(_) => {
                    iu += 1;
                    launch.arg(&u64s[iu - 1])
                }
                Arg::I64(_) => {
                    ii += 1;
                    launch.arg(&i64s[ii - 1])
                }
                Arg::I32(_) => {
                    ij += 1;
                    launch.arg(&i32s[ij - 1])
                }
            };
        }
        launch.named(l.name).dependent_if(l.dependent).run()?;
    }
    run_gemms(plan.launches.len())?;
    let mut out = Vec::new();
    for &id in &plan.outputs {
        out.push(bufs[id - plan.inputs].take().expect("each output returned once"));
    }
    Ok(out)
}
