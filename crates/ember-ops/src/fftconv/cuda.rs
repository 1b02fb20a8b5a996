//! CUDA launch code for `fftconv.cu`.

use super::{Dims, Grads, Options};
use crate::KernelBuild;
use ember_core::{Error, Result, Tensor};

/// The filter spectrum of one call, kept for the backward.
pub struct Spectrum {
    pub spec: Tensor,
}

pub fn forward(_u: &Tensor, _k: &Tensor, _d: Option<&Tensor>, _opts: &Options, _dims: Dims) -> Result<(Tensor, Spectrum)> {
    Err(Error::Unsupported("fftconv on CUDA".into()))
}

pub fn backward(_u: &Tensor, _k: &Tensor, _d: Option<&Tensor>, _opts: &Options, _dims: Dims, _spec: Option<&Spectrum>, _d_out: &Tensor) -> Result<Grads> {
    Err(Error::Unsupported("fftconv on CUDA".into()))
}

pub fn kernel_builds() -> Vec<KernelBuild> {
    Vec::new()
}
