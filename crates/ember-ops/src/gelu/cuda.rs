//! CUDA launch code for `gelu.cu`.

use ember_core::cuda::{cfg_1d, KernelSource};
use ember_core::{Error, Result, Tensor};

pub const SOURCE: KernelSource = KernelSource::new("gelu", include_str!("gelu.cu"));
const BLOCK: u32 = 256;
/// Elements each thread handles (`ELEMS_PER_THREAD` in gelu.cu).
const ELEMS_PER_THREAD: usize = 16;

fn grid(n: usize) -> Result<u32> {
    let per_block = BLOCK as usize * ELEMS_PER_THREAD;
    u32::try_from(n.div_ceil(per_block).max(1))
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| Error::TooLarge { arg: "x".into(), what: format!("{n} elements exceed one launch's grid") })
}

pub fn forward(x: &Tensor) -> Result<Tensor> {
    let dev = x.cuda_device()?.clone();
    let y = Tensor::output(x.shape(), x.dtype(), x.device())?;
    let f = dev.function(&SOURCE, &[], &format!("gelu_fwd_{}", x.dtype().name()))?;
    let (px, py, n) = (x.cuda_ptr()?, y.cuda_ptr()?, x.numel() as i64);
    let cfg = cfg_1d(grid(x.numel())?, BLOCK, 0);
    dev.launch(&f, cfg).arg(&px).arg(&py).arg(&n).named("gelu_fwd").run()?;
    Ok(y)
}

pub fn backward(x: &Tensor, dy: &Tensor) -> Result<Tensor> {
    let dev = x.cuda_device()?.clone();
    let dx = Tensor::output(x.shape(), x.dtype(), x.device())?;
    let f = dev.function(&SOURCE, &[], &format!("gelu_bwd_{}", x.dtype().name()))?;
    let (px, pdy, pdx, n) = (x.cuda_ptr()?, dy.cuda_ptr()?, dx.cuda_ptr()?, x.numel() as i64);
    let cfg = cfg_1d(grid(x.numel())?, BLOCK, 0);
    dev.launch(&f, cfg).arg(&px).arg(&pdy).arg(&pdx).arg(&n).named("gelu_bwd").run()?;
    Ok(dx)
}
