//! MVLinear through cuBLAS. Blades are grade-ordered and X is (M × B × N_in) contiguous, so the
//! blades of grade k form one row-major (C(n,k)·B × N_in) matrix X_k, and each pass is one plain
//! GEMM per grade:
//!
//! - forward: O_k = X_k · W_k (+ the bias on the scalar blade: its rows are filled with the bias
//!   first and the scalar grade's GEMM accumulates into them, β = 1);
//! - backward: dX_k = dO_k · W_kᵀ, dW_k = X_kᵀ · dO_k (K = C(n,k)·B), d_bias = column sums of
//!   dO_scalar (the fixed-order chunked sums of the tile path).
//!
//! cuBLAS runs with CUBLAS_COMPUTE_32F (no TF32: f32 inputs keep f32 accuracy); cuBLAS multiplies
//! operands of one type, so half-type activations take the f32 weights rounded to their type (one
//! small launch per call). Every GEMM is deterministic for a fixed cuBLAS version and GPU (no
//! atomics mode), so the outputs are bitwise reproducible; the GPU checks verify it.

use super::cuda::{plan_bias_grad, SUMS};
use super::layer::Layer;
use super::plan::{Arg, Gemm, Launch, Plan};
use super::reference::Dims;
use ember_core::cuda::blas::{Blas, GemmDesc};
use ember_core::{DType, Error, Result, Tensor};

const THREADS: u32 = 256;

/// Whether cuBLAS loads for the device of `x` (the handle is created once per device).
pub fn available(x: &Tensor) -> bool {
    x.cuda_device().is_ok_and(|d| Blas::shared(d).is_ok())
}

/// (first blade, blades) of every grade, in grade order.
fn grade_ranges(layer: &Layer) -> Result<Vec<(usize, usize)>> {
    let g = &layer.tables().grade_of;
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (j, &k) in g.iter().enumerate() {
        let grades = out.len();
        if k + 1 == grades {
            out[grades - 1].1 += 1;
        } else if k == grades {
            out.push((j, 1));
        } else {
            return Err(Error::invalid("layer", format!("{}: blades are not grade-ordered", layer.name())));
        }
    }
    if out.len() != layer.grades() || out[0] != (0, 1) {
        return Err(Error::invalid("layer", format!("{}: blades are not grade-ordered", layer.name())));
    }
    Ok(out)
}

/// cuBLAS takes i32 dimensions.
fn fits(dims: Dims, n_out: usize) -> Result<()> {
    let big = [dims.m * dims.b, dims.n, n_out].into_iter().any(|v| v > i32::MAX as usize);
    if big {
        return Err(Error::TooLarge { arg: "x".into(), what: format!("blades·B = {} or N exceed the i32 dimensions of a cuBLAS GEMM", dims.m * dims.b) });
    }
    Ok(())
}

fn grid(len: usize) -> u32 {
    len.div_ceil(THREADS as usize).clamp(1, 4096) as u32
}

/// The weights as GEMM operands: buffer `w` itself for f32, else a rounded copy in `dt`.
fn weights_as(plan: &mut Plan, layer: &Layer, dims: Dims, n_out: usize, dt: DType, w: usize) -> usize {
    if dt == DType::F32 {
        return w;
    }
    let len = layer.grades() * dims.n * n_out;
    let wb = plan.alloc(&[layer.grades(), dims.n, n_out], dt);
    let args = vec![Arg::Buf(w), Arg::Buf(wb), Arg::I64(len as i64)];
    plan.launch(Launch { src: SUMS, opts: vec![], entry: format!("cl_round_{}", dt.name()), grid: (grid(len), 1, 1), block: THREADS, smem: 0, args, name: "clifford_linear_round_w", dependent: false });
    wb
}

/// Forward: inputs [x, w] or [x, w, bias]; output [out].
pub fn plan_forward(layer: &Layer, dims: Dims, n_out: usize, dt: DType, bias: bool) -> Result<Plan> {
    fits(dims, n_out)?;
    let ranges = grade_ranges(layer)?;
    let mut plan = Plan::new(if bias { 3 } else { 2 });
    let out = plan.output(&[dims.m, dims.b, n_out], dt);
    let wb = weights_as(&mut plan, layer, dims, n_out, dt, 1);
    if bias {
        let args = vec![Arg::Buf(2), Arg::Buf(out), Arg::I64(dims.b as i64), Arg::I64(n_out as i64)];
        let g = grid(dims.b * n_out);
        plan.launch(Launch { src: SUMS, opts: vec![], entry: format!("cl_bias_rows_{}", dt.name()), grid: (g, 1, 1), block: THREADS, smem: 0, args, name: "clifford_linear_bias", dependent: false });
    }
    for (k, &(j0, nb)) in ranges.iter().enumerate() {
        let desc = GemmDesc { ab: dt, c: dt, ta: false, tb: false, m: nb * dims.b, n: n_out, k: dims.n, beta: if k == 0 && bias { 1.0 } else { 0.0 } };
        plan.gemm(Gemm { desc, a: (0, j0 * dims.b * dims.n), b: (wb, k * dims.n * n_out), c: (out, j0 * dims.b * n_out) });
    }
    Ok(plan)
}

/// Backward: inputs [x, w, d_out]; outputs [d_x, d_w, d_bias].
pub fn plan_backward(layer: &Layer, dims: Dims, n_out: usize, dt: DType) -> Result<Plan> {
    fits(dims, n_out)?;
    let ranges = grade_ranges(layer)?;
    let mut plan = Plan::new(3);
    let dx = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dw = plan.output(&[layer.grades(), dims.n, n_out], DType::F32);
    let db = plan.output(&[n_out], DType::F32);
    let wb = weights_as(&mut plan, layer, dims, n_out, dt, 1);
    plan_bias_grad(&mut plan, dims, n_out, dt, 2, db)?;
    for (k, &(j0, nb)) in ranges.iter().enumerate() {
        let rows = nb * dims.b;
        let data = GemmDesc { ab: dt, c: dt, ta: false, tb: true, m: rows, n: dims.n, k: n_out, beta: 0.0 };
        plan.gemm(Gemm { desc: data, a: (2, j0 * dims.b * n_out), b: (wb, k * dims.n * n_out), c: (dx, j0 * dims.b * dims.n) });
        let weight = GemmDesc { ab: dt, c: DType::F32, ta: true, tb: false, m: dims.n, n: n_out, k: rows, beta: 0.0 };
        plan.gemm(Gemm { desc: weight, a: (0, j0 * dims.b * dims.n), b: (2, j0 * dims.b * n_out), c: (dw, k * dims.n * n_out) });
    }
    Ok(plan)
}
