//! The fused layer: multivector GELU of x and y → weighted geometric product → optional per-grade
//! RMS norm, forward and backward (d_x, d_y, d_w). See the module doc of [`super`] for the spec.

use super::reference::{self, Dims};
use super::{activation, cpu, cuda, is_f64_cpu, like_x, rms_of, weights, Forward, Grads, Layer};
use ember_core::{Device, Result, Tensor};

/// Which stages run around the weighted product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stages {
    /// Multivector GELU of both inputs first.
    pub gelu: bool,
    /// Per-grade RMS norm of the output.
    pub norm: bool,
}

/// gelu(x), gelu(y) → weighted product with w (N × P) → per-grade RMS norm when `norm`.
pub fn forward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, norm: bool) -> Result<Forward> {
    forward_stages(layer, x, y, w, Stages { gelu: true, norm })
}

/// d_x, d_y, d_w of [`forward`] for the upstream gradient `d_out` (like x); `fwd` is what forward
/// returned (the norm's gradient reads its output and r).
pub fn backward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, fwd: &Forward, d_out: &Tensor) -> Result<Grads> {
    let dims = check(layer, x, y, w)?;
    let normed = match fwd.rms {
        Some(_) => {
            like_x("fwd.out", &fwd.out, x)?;
            Some((&fwd.out, rms_of(layer, fwd, x, dims.b)?))
        }
        None => None,
    };
    backward_stages(layer, x, y, w, normed, d_out, true)
}

fn check(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor) -> Result<Dims> {
    let dims = activation(layer, "x", x)?;
    like_x("y", y, x)?;
    weights("w", w, x, &[dims.n, layer.paths()], &format!("(N, P) with P = {} paths of {}", layer.paths(), layer.name()))?;
    Ok(dims)
}

pub(crate) fn forward_stages(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages) -> Result<Forward> {
    let dims = check(layer, x, y, w)?;
    if is_f64_cpu(x) {
        let alg = layer.algebra();
        let (out, r) = reference::fused_forward(alg, dims, &x.to_vec_f64()?, &y.to_vec_f64()?, &w.to_vec_f64()?, st.gelu, st.norm);
        return Ok(Forward {
            out: Tensor::from_vec(out, x.shape())?,
            rms: r.map(|r| Tensor::from_vec(r, &[dims.b, layer.grades()])).transpose()?,
            o: None,
        });
    }
    match x.device() {
        Device::Cpu => cpu::fused_forward(layer, dims, x, y, w, st),
        Device::Cuda(_) => cuda::fused_forward(layer, dims, x, y, w, st),
    }
}

/// `normed`: the forward's (out, r) when the norm is on.
pub(crate) fn backward_stages(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, gelu: bool) -> Result<Grads> {
    let dims = check(layer, x, y, w)?;
    like_x("d_out", d_out, x)?;
    let st = Stages { gelu, norm: normed.is_some() };
    if is_f64_cpu(x) {
        let (dx, dy, dw) = reference::fused_backward(layer.algebra(), dims, &x.to_vec_f64()?, &y.to_vec_f64()?, &w.to_vec_f64()?, &d_out.to_vec_f64()?, st.gelu, st.norm);
        return Ok(Grads { d_x: Tensor::from_vec(dx, x.shape())?, d_y: Tensor::from_vec(dy, x.shape())?, d_w: Tensor::from_vec(dw, w.shape())? });
    }
    match x.device() {
        Device::Cpu => cpu::fused_backward(layer, dims, x, y, w, normed, d_out, st),
        Device::Cuda(_) => cuda::fused_backward(layer, dims, x, y, w, normed, d_out, st),
    }
}
