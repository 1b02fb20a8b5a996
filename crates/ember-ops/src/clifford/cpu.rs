//! CPU fast path: the generated programs in ember-ga's evaluator (f32, chunked, multithreaded) over
//! f32 working buffers, per-row norms with rayon, GEMMs through `crate::cpu::sgemm`.

use super::fused::Stages;
use super::gen::NORM_EPS;
use super::reference::Dims;
use super::{Forward, Grads, Layer, Prog};
use crate::cpu::{from_f32, sgemm, to_f32};
use ember_core::{DType, Error, Result, Tensor};
use ember_ga::eval::{Compiled, InputArg, OutputArg};
use ember_ga::layout::{Layout, OutLayout};
use rayon::prelude::*;

fn ga(e: ember_ga::GaError) -> Error {
    Error::invalid("clifford", format!("CPU evaluator: {e}"))
}

fn inp(data: &[f32]) -> InputArg<'_, f32> {
    InputArg { data, layout: Layout::PerElement }
}
fn per_channel(data: &[f32]) -> InputArg<'_, f32> {
    InputArg { data, layout: Layout::PerChannel }
}
fn outp(data: &mut [f32]) -> OutputArg<'_, f32> {
    OutputArg { data, layout: OutLayout::PerElement }
}

fn run(c: &Compiled, b: usize, n: usize, ins: &[InputArg<'_, f32>], outs: &mut [OutputArg<'_, f32>]) -> Result<()> {
    c.run(b, n, ins, outs).map_err(ga)
}

/// Per-row, per-grade Σ_n Σ_{grade k} f(j, i) over an (M × B × N) layout, in f64; (B × NG).
fn row_sums(layer: &Layer, dims: Dims, f: impl Fn(usize) -> f64 + Sync + Send + Copy) -> Vec<f64> {
    let ng = layer.grades();
    let alg = layer.algebra();
    (0..dims.b)
        .into_par_iter()
        .flat_map_iter(|b| {
            (0..ng).map(move |k| alg.grade_range(k).map(|j| (0..dims.n).map(|n| f(dims.at(j, b, n))).sum::<f64>()).sum::<f64>()).collect::<Vec<_>>()
        })
        .collect()
}

/// out = o / r_k per row and grade; returns r (B × NG).
fn normalize(layer: &Layer, dims: Dims, o: &mut [f32]) -> Vec<f32> {
    let ss = row_sums(layer, dims, |i| (o[i] as f64) * (o[i] as f64));
    let r: Vec<f64> = ss.iter().map(|s| (s / dims.n as f64 + NORM_EPS).sqrt()).collect();
    let ng = layer.grades();
    let grade: Vec<usize> = (0..dims.m).map(|j| layer.algebra().grade(j)).collect();
    o.par_chunks_mut(dims.n).enumerate().for_each(|(row, v)| {
        let (j, b) = (row / dims.b, row % dims.b);
        let a = (1.0 / r[b * ng + grade[j]]) as f32;
        v.iter_mut().for_each(|e| *e *= a);
    });
    r.iter().map(|&v| v as f32).collect()
}

/// The gradient of o from the upstream gradient g of out = o / r: d_o = (g − o·c_k)·a_k with
/// a = 1/r and c = a²·D_k/N, D_k the row's Σ g·o of grade k.
fn norm_backward(layer: &Layer, dims: Dims, g: &[f32], o: &[f32], r: &[f32]) -> Vec<f32> {
    let (a, c) = norm_coefficients(layer, dims, g, o, r);
    let ng = layer.grades();
    let grade: Vec<usize> = (0..dims.m).map(|j| layer.algebra().grade(j)).collect();
    let mut d = vec![0f32; g.len()];
    d.par_chunks_mut(dims.n).enumerate().for_each(|(row, v)| {
        let (j, b) = (row / dims.b, row % dims.b);
        let k = b * ng + grade[j];
        for (n, dv) in v.iter_mut().enumerate() {
            let i = row * dims.n + n;
            *dv = ((g[i] as f64 - o[i] as f64 * c[k]) * a[k]) as f32;
        }
    });
    d
}

/// Per row and grade (B × NG): a = 1/r and c = a²·Σ g·o / N.
fn norm_coefficients(layer: &Layer, dims: Dims, g: &[f32], o: &[f32], r: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let dsum = row_sums(layer, dims, |i| g[i] as f64 * o[i] as f64);
    let a: Vec<f64> = r.iter().map(|&r| 1.0 / r as f64).collect();
    let c = dsum.iter().zip(&a).map(|(d, a)| a * a * d / dims.n as f64).collect();
    (a, c)
}

pub fn fused_forward(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages) -> Result<Forward> {
    let prog = layer.cpu(Prog::Fwd { gelu: st.gelu })?;
    let (xv, yv, wv) = (to_f32(x)?, to_f32(y)?, to_f32(w)?);
    let mut o = vec![0f32; xv.len()];
    let mut ss = vec![0f32; layer.grades() * dims.b * dims.n];
    run(&prog, dims.b, dims.n, &[inp(&xv), inp(&yv), per_channel(&wv)], &mut [outp(&mut o), outp(&mut ss)])?;
    let rms = if st.norm {
        let r = normalize(layer, dims, &mut o);
        Some(from_f32(&r, &[dims.b, layer.grades()], DType::F32)?)
    } else {
        None
    };
    Ok(Forward { out: from_f32(&o, x.shape(), x.dtype())?, rms, o: None })
}

/// Per-element copies of per-row values (B × NG) in the (NG × B × N) layout.
fn per_element(layer: &Layer, dims: Dims, rows: &[f64]) -> Vec<f32> {
    let ng = layer.grades();
    let mut v = vec![0f32; ng * dims.b * dims.n];
    v.par_chunks_mut(dims.n).enumerate().for_each(|(row, s)| {
        let (k, b) = (row / dims.b, row % dims.b);
        s.fill(rows[b * ng + k] as f32);
    });
    v
}

#[allow(clippy::too_many_arguments)]
pub fn fused_backward(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, st: Stages) -> Result<Grads> {
    let prog = layer.cpu(Prog::Bwd { gelu: st.gelu, norm: st.norm })?;
    let (xv, yv, wv, gv) = (to_f32(x)?, to_f32(y)?, to_f32(w)?, to_f32(d_out)?);
    let (mut dx, mut dy, mut dw) = (vec![0f32; xv.len()], vec![0f32; yv.len()], vec![0f32; wv.len()]);
    let mut outs = [outp(&mut dx), outp(&mut dy), OutputArg { data: &mut dw, layout: OutLayout::PerChannelSum }];
    match normed {
        Some((_, rms)) => {
            // The product o again, in f32 (the rounded `out` of half types would spoil the gradient
            // where g and o·c nearly cancel).
            let mut o = vec![0f32; xv.len()];
            let mut ss = vec![0f32; layer.grades() * dims.b * dims.n];
            run(&*layer.cpu(Prog::Fwd { gelu: st.gelu })?, dims.b, dims.n, &[inp(&xv), inp(&yv), per_channel(&wv)], &mut [outp(&mut o), outp(&mut ss)])?;
            let (a, c) = norm_coefficients(layer, dims, &gv, &o, &to_f32(rms)?);
            let (ae, ce) = (per_element(layer, dims, &a), per_element(layer, dims, &c));
            run(&prog, dims.b, dims.n, &[inp(&xv), inp(&yv), per_channel(&wv), inp(&gv), inp(&ae), inp(&ce)], &mut outs)?;
        }
        None => run(&prog, dims.b, dims.n, &[inp(&xv), inp(&yv), per_channel(&wv), inp(&gv)], &mut outs)?,
    }
    Ok(Grads { d_x: from_f32(&dx, x.shape(), x.dtype())?, d_y: from_f32(&dy, y.shape(), y.dtype())?, d_w: from_f32(&dw, w.shape(), w.dtype())? })
}

pub fn mvgelu_forward(layer: &Layer, dims: Dims, x: &Tensor) -> Result<Tensor> {
    let xv = to_f32(x)?;
    let mut o = vec![0f32; xv.len()];
    run(&*layer.cpu(Prog::GeluFwd)?, dims.b, dims.n, &[inp(&xv)], &mut [outp(&mut o)])?;
    from_f32(&o, x.shape(), x.dtype())
}

pub fn mvgelu_backward(layer: &Layer, dims: Dims, x: &Tensor, d_out: &Tensor) -> Result<Tensor> {
    let (xv, gv) = (to_f32(x)?, to_f32(d_out)?);
    let mut dx = vec![0f32; xv.len()];
    run(&*layer.cpu(Prog::GeluBwd)?, dims.b, dims.n, &[inp(&xv), inp(&gv)], &mut [outp(&mut dx)])?;
    from_f32(&dx, x.shape(), x.dtype())
}

/// Rows of a (M × B × N) buffer for b in `rows`, as a (M × rows × N) buffer.
fn gather_rows(v: &[f32], dims: Dims, rows: std::ops::Range<usize>) -> Vec<f32> {
    let mut out = Vec::with_capacity(dims.m * rows.len() * dims.n);
    for j in 0..dims.m {
        out.extend_from_slice(&v[dims.at(j, rows.start, 0)..dims.at(j, rows.end - 1, 0) + dims.n]);
    }
    out
}

/// Rows of a (M × rows × N) block back into a (M × B × N) buffer.
fn scatter_rows(dst: &mut [f32], dims: Dims, rows: std::ops::Range<usize>, blk: &[f32]) {
    let len = rows.len() * dims.n;
    for j in 0..dims.m {
        dst[dims.at(j, rows.start, 0)..][..len].copy_from_slice(&blk[j * len..(j + 1) * len]);
    }
}

/// Rows per block of the fully connected product, so the path terms of a block stay ~16 MB.
fn fc_block_rows(layer: &Layer, dims: Dims) -> usize {
    ((1usize << 22) / (layer.pairs() * dims.n).max(1)).clamp(1, dims.b)
}

#[allow(clippy::too_many_arguments)]
pub fn fc_forward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages) -> Result<Forward> {
    let terms = layer.cpu(Prog::Terms)?;
    let (xv, yv, wv) = (to_f32(x)?, to_f32(y)?, to_f32(w)?);
    let t = layer.tables();
    let (nin, nt) = (dims.n, t.nt());
    let dout = Dims { m: dims.m, b: dims.b, n: n_out };
    let mut o = vec![0f32; dims.m * dims.b * n_out];
    let rows = fc_block_rows(layer, dims);
    let mut b0 = 0;
    while b0 < dims.b {
        let b1 = (b0 + rows).min(dims.b);
        let nb = b1 - b0;
        let (xb, yb) = (gather_rows(&xv, dims, b0..b1), gather_rows(&yv, dims, b0..b1));
        let mut tb = vec![0f32; nt * nb * nin];
        run(&terms, nb, nin, &[inp(&xb), inp(&yb)], &mut [outp(&mut tb)])?;
        for (q, pair) in t.pairs.iter().enumerate() {
            // O_j[rows × N_out] += T_q[rows × N_in] · W_p[N_in × N_out]
            let c = &mut o[dout.at(pair.blade, b0, 0)..][..nb * n_out];
            sgemm(nb, nin, n_out, 1.0, &tb[q * nb * nin..][..nb * nin], nin, 1, &wv[pair.path * nin * n_out..][..nin * n_out], n_out, 1, 1.0, c, n_out, 1);
        }
        b0 = b1;
    }
    if !st.norm {
        return Ok(Forward { out: from_f32(&o, &[dims.m, dims.b, n_out], x.dtype())?, rms: None, o: None });
    }
    let kept = from_f32(&o, &[dims.m, dims.b, n_out], DType::F32)?;
    let r = normalize(layer, dout, &mut o);
    Ok(Forward { out: from_f32(&o, &[dims.m, dims.b, n_out], x.dtype())?, rms: Some(from_f32(&r, &[dims.b, layer.grades()], DType::F32)?), o: Some(kept) })
}

#[allow(clippy::too_many_arguments)]
pub fn fc_backward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor) -> Result<Grads> {
    let (terms, vjp) = (layer.cpu(Prog::Terms)?, layer.cpu(Prog::TermsVjp)?);
    let (xv, yv, wv) = (to_f32(x)?, to_f32(y)?, to_f32(w)?);
    let t = layer.tables();
    let (nin, nt) = (dims.n, t.nt());
    let dout = Dims { m: dims.m, b: dims.b, n: n_out };
    let gv = to_f32(d_out)?;
    let d_o = match normed {
        Some((o, rms)) => norm_backward(layer, dout, &gv, &to_f32(o)?, &to_f32(rms)?),
        None => gv,
    };
    let (mut dx, mut dy, mut dw) = (vec![0f32; xv.len()], vec![0f32; yv.len()], vec![0f32; wv.len()]);
    let rows = fc_block_rows(layer, dims);
    let mut b0 = 0;
    while b0 < dims.b {
        let b1 = (b0 + rows).min(dims.b);
        let nb = b1 - b0;
        let (xb, yb) = (gather_rows(&xv, dims, b0..b1), gather_rows(&yv, dims, b0..b1));
        let mut tb = vec![0f32; nt * nb * nin];
        run(&terms, nb, nin, &[inp(&xb), inp(&yb)], &mut [outp(&mut tb)])?;
        let mut gt = vec![0f32; nt * nb * nin];
        for (q, pair) in t.pairs.iter().enumerate() {
            let go = &d_o[dout.at(pair.blade, b0, 0)..][..nb * n_out];
            let wp = &wv[pair.path * nin * n_out..][..nin * n_out];
            // dT_q[rows × N_in] = dO_j[rows × N_out] · W_pᵀ
            sgemm(nb, n_out, nin, 1.0, go, n_out, 1, wp, 1, n_out, 0.0, &mut gt[q * nb * nin..][..nb * nin], nin, 1);
            // dW_p[N_in × N_out] += T_qᵀ · dO_j, blocks and pairs in a fixed order
            sgemm(nin, nb, n_out, 1.0, &tb[q * nb * nin..][..nb * nin], 1, nin, go, n_out, 1, 1.0, &mut dw[pair.path * nin * n_out..][..nin * n_out], n_out, 1);
        }
        let (mut dxb, mut dyb) = (vec![0f32; xb.len()], vec![0f32; yb.len()]);
        run(&vjp, nb, nin, &[inp(&xb), inp(&yb), inp(&gt)], &mut [outp(&mut dxb), outp(&mut dyb)])?;
        scatter_rows(&mut dx, dims, b0..b1, &dxb);
        scatter_rows(&mut dy, dims, b0..b1, &dyb);
        b0 = b1;
    }
    Ok(Grads { d_x: from_f32(&dx, x.shape(), x.dtype())?, d_y: from_f32(&dy, y.shape(), y.dtype())?, d_w: from_f32(&dw, w.shape(), w.dtype())? })
}

pub fn linear_forward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (xv, wv) = (to_f32(x)?, to_f32(w)?);
    let (nb, nin) = (dims.b, dims.n);
    let mut o = vec![0f32; dims.m * nb * n_out];
    for k in 0..layer.grades() {
        // The blades of grade k are contiguous: one GEMM of (C(n,k)·B) rows.
        let r = layer.algebra().grade_range(k);
        let rows = r.len() * nb;
        sgemm(rows, nin, n_out, 1.0, &xv[r.start * nb * nin..][..rows * nin], nin, 1, &wv[k * nin * n_out..][..nin * n_out], n_out, 1, 0.0, &mut o[r.start * nb * n_out..][..rows * n_out], n_out, 1);
    }
    if let Some(bias) = bias {
        let bv = to_f32(bias)?;
        for row in o[..nb * n_out].chunks_mut(n_out) {
            row.iter_mut().zip(&bv).for_each(|(v, b)| *v += b);
        }
    }
    from_f32(&o, &[dims.m, nb, n_out], x.dtype())
}

pub fn linear_backward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, d_out: &Tensor) -> Result<super::linear::LinearGrads> {
    let (xv, wv, gv) = (to_f32(x)?, to_f32(w)?, to_f32(d_out)?);
    let (nb, nin) = (dims.b, dims.n);
    let (mut dx, mut dw) = (vec![0f32; xv.len()], vec![0f32; wv.len()]);
    for k in 0..layer.grades() {
        let r = layer.algebra().grade_range(k);
        let rows = r.len() * nb;
        let g = &gv[r.start * nb * n_out..][..rows * n_out];
        let wk = &wv[k * nin * n_out..][..nin * n_out];
        // dX_k = dO_k · W_kᵀ;  dW_k = X_kᵀ · dO_k
        sgemm(rows, n_out, nin, 1.0, g, n_out, 1, wk, 1, n_out, 0.0, &mut dx[r.start * nb * nin..][..rows * nin], nin, 1);
        sgemm(nin, rows, n_out, 1.0, &xv[r.start * nb * nin..][..rows * nin], 1, nin, g, n_out, 1, 0.0, &mut dw[k * nin * n_out..][..nin * n_out], n_out, 1);
    }
    let mut db = vec![0f64; n_out];
    for row in gv[..nb * n_out].chunks(n_out) {
        db.iter_mut().zip(row).for_each(|(d, g)| *d += *g as f64);
    }
    let db: Vec<f32> = db.iter().map(|&v| v as f32).collect();
    Ok(super::linear::LinearGrads {
        d_x: from_f32(&dx, x.shape(), x.dtype())?,
        d_w: from_f32(&dw, w.shape(), w.dtype())?,
        d_bias: from_f32(&db, &[n_out], w.dtype())?,
    })
}
