//! The weighted geometric product alone (no GELU, no norm): o = Σ_p w[n, p]·⟨⟨x⟩_gx ⟨y⟩_gy⟩_gz.
//! The same generated kernels as the fused layer, built without the GELU and the norm.

use super::fused::{backward_stages, forward_stages, Stages};
use super::{Grads, Layer};
use ember_core::{Result, Tensor};

/// o = wgp(x, y, w) with w (N × P).
pub fn forward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(forward_stages(layer, x, y, w, Stages { gelu: false, norm: false })?.out)
}

/// d_x, d_y, d_w of [`forward`] for the upstream gradient `d_out`.
pub fn backward(layer: &Layer, x: &Tensor, y: &Tensor, w: &Tensor, d_out: &Tensor) -> Result<Grads> {
    backward_stages(layer, x, y, w, None, d_out, false)
}
