//! Multivector GELU: x ↦ x·Φ(x₀) (one gate, the normal CDF of the scalar part, for every blade),
//! and its VJP dx_j = g_j·Φ(x₀) + [j = 0]·φ(x₀)·Σ_i g_i·x_i. Generated elementwise kernels.

use super::reference;
use super::{activation, cpu, cuda, is_f64_cpu, like_x, Layer};
use ember_core::{Device, Result, Tensor};

/// gelu(x) for an (M × B × N) activation.
pub fn forward(layer: &Layer, x: &Tensor) -> Result<Tensor> {
    let dims = activation(layer, "x", x)?;
    if is_f64_cpu(x) {
        return Tensor::from_vec(reference::mvgelu(dims, &x.to_vec_f64()?), x.shape());
    }
    match x.device() {
        Device::Cpu => cpu::mvgelu_forward(layer, dims, x),
        Device::Cuda(_) => cuda::mvgelu_forward(layer, dims, x),
    }
}

/// d_x for the upstream gradient `d_out` (like x).
pub fn backward(layer: &Layer, x: &Tensor, d_out: &Tensor) -> Result<Tensor> {
    let dims = activation(layer, "x", x)?;
    like_x("d_out", d_out, x)?;
    if is_f64_cpu(x) {
        return Tensor::from_vec(reference::mvgelu_bwd(dims, &x.to_vec_f64()?, &d_out.to_vec_f64()?), x.shape());
    }
    match x.device() {
        Device::Cpu => cpu::mvgelu_backward(layer, dims, x, d_out),
        Device::Cuda(_) => cuda::mvgelu_backward(layer, dims, x, d_out),
    }
}
