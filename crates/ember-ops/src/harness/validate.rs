//! Input validation shared by every op: each failure names the argument, the expectation and what
//! was got.

use ember_core::{DType, Device, Error, Result, Tensor};

/// `t` must have exactly `expected` as its shape; `what` spells the dims (e.g. "(V, C)").
pub fn shape(arg: &str, t: &Tensor, expected: &[usize], what: &str) -> Result<()> {
    if t.shape() != expected {
        return Err(Error::shape(arg, format!("{what} = {expected:?}"), t.shape()));
    }
    Ok(())
}

/// `t` must have `rank` dimensions; `what` spells them.
pub fn rank(arg: &str, t: &Tensor, rank: usize, what: &str) -> Result<()> {
    if t.dims() != rank {
        return Err(Error::shape(arg, format!("{rank} dimensions {what}"), t.shape()));
    }
    Ok(())
}

/// `t` must hold at least one element.
pub fn non_empty(arg: &str, t: &Tensor) -> Result<()> {
    if t.numel() == 0 {
        return Err(Error::Empty { arg: arg.into(), what: format!("shape {:?}", t.shape()) });
    }
    Ok(())
}

/// `t` must be on `device`.
pub fn device(arg: &str, t: &Tensor, device: Device) -> Result<()> {
    if t.device() != device {
        return Err(Error::Device { arg: arg.into(), expected: device, got: t.device() });
    }
    Ok(())
}

/// `t` must have dtype `dtype`.
pub fn dtype(arg: &str, t: &Tensor, dtype: DType) -> Result<()> {
    if t.dtype() != dtype {
        return Err(Error::dtype(arg, dtype.name(), t.dtype()));
    }
    Ok(())
}

/// An activation dtype usable on `device`: f32/f16/bf16 anywhere, f64 on the CPU (reference path).
pub fn activation_dtype(arg: &str, t: &Tensor) -> Result<()> {
    match (t.dtype(), t.device()) {
        (DType::F64, Device::Cuda(_)) => Err(Error::dtype(arg, "f32, f16 or bf16 on CUDA", DType::F64)),
        _ => Ok(()),
    }
}

/// `t` must be on `device` with `dtype` and shape `expected`.
pub fn like(arg: &str, t: &Tensor, device: Device, dtype: DType, expected: &[usize], what: &str) -> Result<()> {
    self::device(arg, t, device)?;
    self::dtype(arg, t, dtype)?;
    shape(arg, t, expected, what)
}
