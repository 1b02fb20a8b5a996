//! The fully connected geometric product: o[j, b, m] = Σ_n Σ_p w[p, n, m]·T_(j,p)[b, n] with the path
//! terms T_(j,p) = ⟨⟨gelu x_bn⟩_gx ⟨gelu y_bn⟩_gy⟩_j of every (output blade j, path p) pair, then the
//! optional per-grade RMS norm over the N_out channels. Weights (P × N_in × N_out).
//!
//! Per output grade this is a GEMM with K = N_in·P_gz whose A operand (the path terms) is generated
//! on the fly from x and y: on CUDA inside the tensor-core kernel's tile loads, never written to
//! memory. bf16/f16 natively; f32 on Hopper as three bf16 products of each value's hi and lo halves
//! (~5e-6 relative, held to 3e-4), elsewhere in three TF32 passes (~1e-7).

use super::fused::Stages;
use super::reference::{self, Dims};
use super::{activation, cpu, cuda, is_f64_cpu, like_x, rms_of, weights, Forward, Grads, Layer};
use crate::harness::validate;
use ember_core::{Device, Result, Tensor};

/// Validate x, y, w; returns (dims of x, N_out).
fn check(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor) -> Result<(Dims, usize)> {
    let dims = activation(layer, "x", x)?;
    like_x("y", y, x)?;
    validate::rank("w", w, 3, "(P paths × N_in × N_out)")?;
    let n_out = w.dim(2);
    weights("w", w, x, &[layer.paths(), dims.n, n_out], &format!("(P, N_in, N_out) with P = {} paths of {} and N_in = {}", layer.paths(), layer.name(), dims.n))?;
    validate::non_empty("w", w)?;
    Ok((dims, n_out))
}

/// gelu(x), gelu(y) → fully connected product with w → per-grade RMS norm when `norm`.
pub fn forward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, norm: bool) -> Result<Forward> {
    let (dims, n_out) = check(layer, x, y, w)?;
    if is_f64_cpu(x) {
        let (xv, yv, wv) = (x.to_vec_f64()?, y.to_vec_f64()?, w.to_vec_f64()?);
        let (out, r) = reference::fc_forward(layer.algebra(), dims, n_out, &xv, &yv, &wv, norm);
        let o = if norm { Some(Tensor::from_vec(reference::fc_layer(layer.algebra(), dims, n_out, &xv, &yv, &wv), &[dims.m, dims.b, n_out])?) } else { None };
        return Ok(Forward {
            out: Tensor::from_vec(out, &[dims.m, dims.b, n_out])?,
            rms: r.map(|r| Tensor::from_vec(r, &[dims.b, layer.grades()])).transpose()?,
            o,
        });
    }
    let st = Stages { gelu: true, norm };
    match x.device() {
        Device::Cpu => cpu::fc_forward(layer, dims, n_out, x, y, w, st),
        Device::Cuda(_) => cuda::fc_forward(layer, dims, n_out, x, y, w, st),
    }
}

/// d_x, d_y, d_w of [`forward`] for the upstream gradient `d_out` (M × B × N_out).
pub fn backward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, fwd: &Forward, d_out: &Tensor) -> Result<Grads> {
    let (dims, n_out) = check(layer, x, y, w)?;
    let out_shape = [dims.m, dims.b, n_out];
    validate::like("d_out", d_out, x.device(), x.dtype(), &out_shape, "(M, B, N_out)")?;
    let normed = match fwd.rms {
        Some(_) => {
            let o = fwd.o.as_ref().ok_or_else(|| ember_core::Error::invalid("fwd", "expected the Forward of a normalized fully connected layer (o present), got one without o"))?;
            validate::like("fwd.o", o, x.device(), super::weight_dtype(x.dtype()), &out_shape, "(M, B, N_out)")?;
            Some((o, rms_of(layer, fwd, x, dims.b)?))
        }
        None => None,
    };
    if is_f64_cpu(x) {
        let (dx, dy, dw) = reference::fc_backward(layer.algebra(), dims, n_out, &x.to_vec_f64()?, &y.to_vec_f64()?, &w.to_vec_f64()?, &d_out.to_vec_f64()?, normed.is_some());
        return Ok(Grads { d_x: Tensor::from_vec(dx, x.shape())?, d_y: Tensor::from_vec(dy, x.shape())?, d_w: Tensor::from_vec(dw, w.shape())? });
    }
    match x.device() {
        Device::Cpu => cpu::fc_backward(layer, dims, n_out, x, y, w, normed, d_out),
        Device::Cuda(_) => cuda::fc_backward(layer, dims, n_out, x, y, w, normed, d_out),
    }
}
