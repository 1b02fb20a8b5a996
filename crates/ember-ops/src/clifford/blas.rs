//! MVLinear through cuBLAS. Blades are grade-ordered and X is (M × B × N_in) contiguous, so the
//! blades of grade k form one row-major (C(n,k)·B × N_in) matrix X_k, and each pass is one plain
//! GEMM per grade:
//!
//! - forward: O_k = X_k · W_k (+ the bias on the scalar blade: its rows are filled with the bias
//!   first and the scalar grade's GEMM accumulates into them, β = 1);
//! - backward: dX_k = dO_k · W_kᵀ, dW_k = X_kᵀ · dO_k (K = C(n,k)·B), d_bias = column sums of
//!   dO_scalar (the fixed-order chunked sums of the tile path).
//!
//! cuBLAS runs with CUBLAS_COMPUTE_32F (f32 accumulation); cuBLAS multiplies operands of one type, so
//! half-type activations take the f32 weights rounded to their type (one small launch per call).
//! f32 operands are split into bf16 halves, v ≈ hi + lo, and each GEMM computes lo·hi + hi·lo + hi·hi in f32
//! (~5e-6 relative, held to the 3e-4 of f32 on tensor cores): the forward and the data gradient as one
//! bf16 GEMM three times as deep (`cl_split3_bf16` lays the parts side by side along K), the weight
//! gradient (a small C) as three accumulating GEMMs; `EMBER_CLIFFORD_LINEAR_F32=f32` keeps the f32
//! GEMMs on CUDA cores. Every GEMM is deterministic for a fixed cuBLAS version and GPU (no
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

/// Whether f32 runs its GEMMs on bf16 halves (the default) rather than in f32 on CUDA cores.
pub fn f32_halves() -> bool {
    ember_core::knob("EMBER_CLIFFORD_LINEAR_F32") != Some("f32")
}

/// `cl_split3_bf16`: f32 buffer `src` as `rows` rows of `cols` values, K along each row, laid out for one
/// GEMM of depth 3·cols (parts lo where the bits of `lo_parts` are set); with `halves` also the plain
/// halves. Returns (the K-concatenated buffer, the halves' buffer or `src` where none).
fn split3(plan: &mut Plan, src: usize, rows: usize, cols: usize, lo_parts: i32, halves: bool, name: &'static str) -> (usize, usize) {
    let len = rows * cols;
    let cat = plan.alloc(&[rows, 3 * cols], DType::BF16);
    let h = if halves { plan.alloc(&[2, len], DType::BF16) } else { src };
    let args = vec![Arg::Buf(src), Arg::Buf(cat), if halves { Arg::Buf(h) } else { Arg::Null }, Arg::I64(rows as i64), Arg::I64(cols as i64), Arg::I32(lo_parts)];
    plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_split3_bf16".into(), grid: (grid(len), 1, 1), block: THREADS, smem: 0, args, name, dependent: false });
    (cat, h)
}
/// Parts of the K-concatenated operands: A lo, hi, hi against B hi, lo, hi.
const A_PARTS: i32 = 0b001;
const B_PARTS: i32 = 0b010;

/// The bf16 halves of f32 buffer `src` (`len` values): hi, then lo `len` elements further.
fn split(plan: &mut Plan, src: usize, len: usize, name: &'static str) -> usize {
    let h = plan.alloc(&[2, len], DType::BF16);
    let args = vec![Arg::Buf(src), Arg::Buf(h), Arg::I64(len as i64)];
    plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_split_bf16".into(), grid: (grid(len), 1, 1), block: THREADS, smem: 0, args, name, dependent: false });
    h
}

/// One GEMM `desc` of A = (buffer, offset) and B into C; with `lo` = (A's lo offset, B's lo offset),
/// three of bf16 halves instead — A lo · B hi, A hi · B lo, A hi · B hi, the small ones first — the
/// first with `desc`'s β, the others accumulating (β = 1).
pub(crate) fn gemm3(plan: &mut Plan, desc: GemmDesc, a: (usize, usize), b: (usize, usize), c: (usize, usize), lo: Option<(usize, usize)>) {
    let Some((al, bl)) = lo else {
        plan.gemm(Gemm { desc, a, b, c });
        return;
    };
    for (i, (da, db)) in [(al, 0), (0, bl), (0, 0)].into_iter().enumerate() {
        let d = GemmDesc { ab: DType::BF16, beta: if i == 0 { desc.beta } else { 1.0 }, ..desc };
        plan.gemm(Gemm { desc: d, a: (a.0, a.1 + da), b: (b.0, b.1 + db), c });
    }
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
    let x3 = dt == DType::F32 && f32_halves();
    // f32: one GEMM per grade of depth 3·N_in, X's rows [lo | hi | hi] against W's stacked [hi; lo; hi]
    // (each grade's N_in × N_out block taken as one row of the split).
    let (xa, wb, depth) = if x3 {
        let (xc, _) = split3(&mut plan, 0, dims.m * dims.b, dims.n, A_PARTS, false, "clifford_linear_split_x");
        let (wc, _) = split3(&mut plan, 1, layer.grades(), dims.n * n_out, B_PARTS, false, "clifford_linear_split_w");
        (xc, wc, 3)
    } else {
        (0, weights_as(&mut plan, layer, dims, n_out, dt, 1), 1)
    };
    if bias {
        let args = vec![Arg::Buf(2), Arg::Buf(out), Arg::I64(dims.b as i64), Arg::I64(n_out as i64)];
        let g = grid(dims.b * n_out);
        plan.launch(Launch { src: SUMS, opts: vec![], entry: format!("cl_bias_rows_{}", dt.name()), grid: (g, 1, 1), block: THREADS, smem: 0, args, name: "clifford_linear_bias", dependent: false });
    }
    for (k, &(j0, nb)) in ranges.iter().enumerate() {
        let ab = if x3 { DType::BF16 } else { dt };
        let desc = GemmDesc { ab, c: dt, ta: false, tb: false, m: nb * dims.b, n: n_out, k: depth * dims.n, beta: if k == 0 && bias { 1.0 } else { 0.0 } };
        plan.gemm(Gemm { desc, a: (xa, j0 * dims.b * depth * dims.n), b: (wb, k * depth * dims.n * n_out), c: (out, j0 * dims.b * n_out) });
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
    let x3 = dt == DType::F32 && f32_halves();
    let (x_len, g_len) = (dims.m * dims.b * dims.n, dims.m * dims.b * n_out);
    // f32: the data gradient as one GEMM of depth 3·N_out (d_out's rows [lo | hi | hi] against W's rows
    // [hi | lo | hi], K = N_out along both); the weight gradient (K down the batch rows) as three GEMMs
    // of the plain halves of X and d_out.
    let (xa, wb, gc, ga, depth) = if x3 {
        let (gc, gh) = split3(&mut plan, 2, dims.m * dims.b, n_out, A_PARTS, true, "clifford_linear_split_g");
        let (wc, _) = split3(&mut plan, 1, layer.grades() * dims.n, n_out, B_PARTS, false, "clifford_linear_split_w");
        (split(&mut plan, 0, x_len, "clifford_linear_split_x"), wc, gc, gh, 3)
    } else {
        (0, weights_as(&mut plan, layer, dims, n_out, dt, 1), 2, 2, 1)
    };
    plan_bias_grad(&mut plan, dims, n_out, dt, 2, db)?;
    for (k, &(j0, nb)) in ranges.iter().enumerate() {
        let rows = nb * dims.b;
        let ab = if x3 { DType::BF16 } else { dt };
        let data = GemmDesc { ab, c: dt, ta: false, tb: true, m: rows, n: dims.n, k: depth * n_out, beta: 0.0 };
        plan.gemm(Gemm { desc: data, a: (gc, j0 * dims.b * depth * n_out), b: (wb, k * dims.n * depth * n_out), c: (dx, j0 * dims.b * dims.n) });
        let weight = GemmDesc { ab: dt, c: DType::F32, ta: true, tb: false, m: dims.n, n: n_out, k: rows, beta: 0.0 };
        gemm3(&mut plan, weight, (xa, j0 * dims.b * dims.n), (ga, j0 * dims.b * n_out), (dw, k * dims.n * n_out), x3.then_some((x_len, g_len)));
    }
    Ok(plan)
}
