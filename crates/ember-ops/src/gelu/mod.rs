//! GELU, exact (erf) form, and its derivative — the activation the Hyena and Clifford layers fuse.
//!
//! Spec, elementwise over a tensor of any shape:
//! - forward:  y = x·Φ(x), Φ(x) = ½(1 + erf(x/√2))
//! - backward: dx = dy·(Φ(x) + x·φ(x)), φ(x) = e^(−x²/2)/√(2π)
//!
//! dtypes f32, f16, bf16 (f32 arithmetic); f64 on the CPU runs the reference. Empty tensors are an
//! error, like every ember op's.

pub mod cpu;
pub mod cuda;
pub mod reference;
mod suite;
#[cfg(test)]
mod tests;

use crate::harness::validate;
use ember_core::{DType, Device, Result, Tensor};

pub use suite::Family;

/// y = gelu(x).
pub fn forward(x: &Tensor) -> Result<Tensor> {
    validate::non_empty("x", x)?;
    validate::activation_dtype("x", x)?;
    match x.device() {
        Device::Cpu if x.dtype() == DType::F64 => {
            let y = reference::forward(x.as_slice::<f64>()?);
            Tensor::from_vec(y, x.shape())
        }
        Device::Cpu => cpu::forward(x),
        Device::Cuda(_) => cuda::forward(x),
    }
}

/// dx = dy·gelu'(x). `dy` must match `x` in shape, dtype and device.
pub fn backward(x: &Tensor, dy: &Tensor) -> Result<Tensor> {
    validate::non_empty("x", x)?;
    validate::activation_dtype("x", x)?;
    validate::like("dy", dy, x.device(), x.dtype(), x.shape(), "the shape of x")?;
    match x.device() {
        Device::Cpu if x.dtype() == DType::F64 => {
            let dx = reference::backward(x.as_slice::<f64>()?, dy.as_slice::<f64>()?);
            Tensor::from_vec(dx, x.shape())
        }
        Device::Cpu => cpu::backward(x, dy),
        Device::Cuda(_) => cuda::backward(x, dy),
    }
}
