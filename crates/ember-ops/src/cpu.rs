//! Shared pieces of the CPU backend's fast path: GEMM through `matrixmultiply` (multithreaded,
//! arbitrary strides, so transposes are free) and conversion of half-precision tensors to f32
//! working buffers.

use ember_core::{CpuStorage, DType, Result, Tensor};
use rayon::prelude::*;

/// C (m×n) = alpha·A (m×k)·B (k×n) + beta·C, f32, with row and column strides for each matrix.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(m: usize, k: usize, n: usize, alpha: f32, a: &[f32], rsa: usize, csa: usize, b: &[f32], rsb: usize, csb: usize, beta: f32, c: &mut [f32], rsc: usize, csc: usize) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(a.len() >= extent(m, k, rsa, csa) && b.len() >= extent(k, n, rsb, csb) && c.len() >= extent(m, n, rsc, csc));
    unsafe {
        matrixmultiply::sgemm(m, k, n, alpha, a.as_ptr(), rsa as isize, csa as isize, b.as_ptr(), rsb as isize, csb as isize, beta, c.as_mut_ptr(), rsc as isize, csc as isize);
    }
}

/// The f64 version of [`sgemm`].
#[allow(clippy::too_many_arguments)]
pub fn dgemm(m: usize, k: usize, n: usize, alpha: f64, a: &[f64], rsa: usize, csa: usize, b: &[f64], rsb: usize, csb: usize, beta: f64, c: &mut [f64], rsc: usize, csc: usize) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(a.len() >= extent(m, k, rsa, csa) && b.len() >= extent(k, n, rsb, csb) && c.len() >= extent(m, n, rsc, csc));
    unsafe {
        matrixmultiply::dgemm(m, k, n, alpha, a.as_ptr(), rsa as isize, csa as isize, b.as_ptr(), rsb as isize, csb as isize, beta, c.as_mut_ptr(), rsc as isize, csc as isize);
    }
}

fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    }
}

/// The values of a CPU tensor as f32 (a copy; exact for f16/bf16).
pub fn to_f32(t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t.cpu_storage()? {
        CpuStorage::F32(v) => v.clone(),
        CpuStorage::F64(v) => v.par_iter().with_min_len(4096).map(|&x| x as f32).collect(),
        CpuStorage::F16(v) => v.par_iter().with_min_len(4096).map(|x| x.to_f32()).collect(),
        CpuStorage::BF16(v) => v.par_iter().with_min_len(4096).map(|x| x.to_f32()).collect(),
    })
}

/// A CPU tensor of `dtype` from f32 working values (rounding to nearest even).
pub fn from_f32(values: &[f32], shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::from_cpu_storage(CpuStorage::from_f32(values, dtype), shape)
}

/// A CPU tensor of `dtype` from f64 values.
pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::from_cpu_storage(CpuStorage::from_f64(values, dtype), shape)
}
