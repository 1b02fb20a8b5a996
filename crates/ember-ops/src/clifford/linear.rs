//! MVLinear: per-grade channel mixing O[j, b, m] = Σ_n X[j, b, n]·W[grade(j), n, m], weights
//! ((n+1) × N_in × N_out), and an optional bias (N_out) on the scalar blade only, so the layer stays
//! equivariant. Blades of one grade are contiguous, so each grade is one GEMM of (C(n,k)·B) rows.

use super::reference::{self, Dims};
use super::{activation, cpu, cuda, is_f64_cpu, weights, Layer};
use crate::harness::validate;
use ember_core::{Device, Result, Tensor};

/// Gradients of MVLinear.
#[derive(Debug)]
pub struct LinearGrads {
    pub d_x: Tensor,
    pub d_w: Tensor,
    /// Σ_b of the scalar blade's upstream gradient (N_out), in the weight dtype.
    pub d_bias: Tensor,
}

fn check(layer: &Layer, x: &Tensor, w: &Tensor) -> Result<(Dims, usize)> {
    let dims = activation(layer, "x", x)?;
    validate::rank("w", w, 3, "(n+1 grades × N_in × N_out)")?;
    let n_out = w.dim(2);
    weights("w", w, x, &[layer.grades(), dims.n, n_out], &format!("(n+1, N_in, N_out) with n+1 = {} grades of {} and N_in = {}", layer.grades(), layer.name(), dims.n))?;
    validate::non_empty("w", w)?;
    Ok((dims, n_out))
}

/// O = MVLinear(X; W, bias).
pub fn forward(layer: &Layer, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (dims, n_out) = check(layer, x, w)?;
    if let Some(b) = bias {
        weights("bias", b, x, &[n_out], "(N_out)")?;
    }
    if is_f64_cpu(x) {
        let bv = bias.map(|b| b.to_vec_f64()).transpose()?;
        let o = reference::linear_forward(layer.algebra(), dims, n_out, &x.to_vec_f64()?, &w.to_vec_f64()?, bv.as_deref());
        return Tensor::from_vec(o, &[dims.m, dims.b, n_out]);
    }
    match x.device() {
        Device::Cpu => cpu::linear_forward(layer, dims, n_out, x, w, bias),
        Device::Cuda(_) => cuda::linear_forward(layer, dims, n_out, x, w, bias),
    }
}

/// d_x, d_w, d_bias for the upstream gradient `d_out` (M × B × N_out).
pub fn backward(layer: &Layer, x: &Tensor, w: &Tensor, d_out: &Tensor) -> Result<LinearGrads> {
    let (dims, n_out) = check(layer, x, w)?;
    validate::like("d_out", d_out, x.device(), x.dtype(), &[dims.m, dims.b, n_out], "(M, B, N_out)")?;
    if is_f64_cpu(x) {
        let (dx, dw, db) = reference::linear_backward(layer.algebra(), dims, n_out, &x.to_vec_f64()?, &w.to_vec_f64()?, &d_out.to_vec_f64()?);
        return Ok(LinearGrads { d_x: Tensor::from_vec(dx, x.shape())?, d_w: Tensor::from_vec(dw, w.shape())?, d_bias: Tensor::from_vec(db, &[n_out])? });
    }
    match x.device() {
        Device::Cpu => cpu::linear_backward(layer, dims, n_out, x, w, d_out),
        Device::Cuda(_) => cuda::linear_backward(layer, dims, n_out, x, w, d_out),
    }
}
