//! CPU fast path: f32 working buffers, every matrix product through `crate::cpu::sgemm`
//! (multithreaded, strided, so transposes cost nothing), elementwise steps over rayon chunks.

use super::{Grads, Input, InputGrads, Problem, WeightGrads, Weights};
use crate::cpu::{from_f32, sgemm, to_f32};
use ember_core::{Result, Tensor};
use rayon::prelude::*;

const CHUNK: usize = 1 << 12;

/// The weights as f32: (A_re or A, A_im when rotating).
struct W {
    re: Vec<f32>,
    im: Option<Vec<f32>>,
}

fn weights_f32(weights: &Weights) -> Result<W> {
    Ok(match *weights {
        Weights::Rotation { a_re, a_im } => W { re: to_f32(a_re)?, im: Some(to_f32(a_im)?) },
        Weights::Plain { a } => W { re: to_f32(a)?, im: None },
    })
}

/// g_re, g_im (V×C, f32) of either input form.
fn g_f32(p: &Problem, input: &Input) -> Result<(Vec<f32>, Vec<f32>)> {
    match *input {
        Input::Spectral { x, grads_re, grads_im, .. } => {
            let (x, gre, gim) = (to_f32(x)?, to_f32(grads_re)?, to_f32(grads_im)?);
            let (k, c) = (p.k, p.c);
            let mut g_re = vec![0.0f32; p.v * c];
            let mut g_im = vec![0.0f32; p.v * c];
            for (m, w) in p.offsets.windows(2).enumerate() {
                let rows = w[1] - w[0];
                let xm = &x[m * k * c..(m + 1) * k * c];
                sgemm(rows, k, c, 1.0, &gre[w[0] * k..], k, 1, xm, c, 1, 0.0, &mut g_re[w[0] * c..], c, 1);
                sgemm(rows, k, c, 1.0, &gim[w[0] * k..], k, 1, xm, c, 1, 0.0, &mut g_im[w[0] * c..], c, 1);
            }
            Ok((g_re, g_im))
        }
        Input::Vertex { g_re, g_im } => Ok((to_f32(g_re)?, to_f32(g_im)?)),
    }
}

/// b_re, b_im (V×C): g·Aᵀ products, where Aᵀ is A read with swapped strides.
fn rotate(v: usize, c: usize, g_re: &[f32], g_im: &[f32], w: &W) -> (Vec<f32>, Vec<f32>) {
    let mut b_re = vec![0.0f32; v * c];
    let mut b_im = vec![0.0f32; v * c];
    // (V×C)·Aᵀ: Aᵀ[j][i] = A[i][j], so row stride 1 and column stride C.
    sgemm(v, c, c, 1.0, g_re, c, 1, &w.re, 1, c, 0.0, &mut b_re, c, 1);
    sgemm(v, c, c, 1.0, g_im, c, 1, &w.re, 1, c, 0.0, &mut b_im, c, 1);
    if let Some(im) = &w.im {
        sgemm(v, c, c, -1.0, g_im, c, 1, im, 1, c, 1.0, &mut b_re, c, 1);
        sgemm(v, c, c, 1.0, g_re, c, 1, im, 1, c, 1.0, &mut b_im, c, 1);
    }
    (b_re, b_im)
}

pub fn forward(p: &Problem, input: &Input, weights: &Weights) -> Result<Tensor> {
    let w = weights_f32(weights)?;
    let (g_re, g_im) = g_f32(p, input)?;
    let (b_re, b_im) = rotate(p.v, p.c, &g_re, &g_im, &w);
    let mut out = vec![0.0f32; p.v * p.c];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, o)| {
        let base = ci * CHUNK;
        for (i, o) in o.iter_mut().enumerate() {
            let e = base + i;
            *o = (g_re[e] * b_re[e] + g_im[e] * b_im[e]).tanh();
        }
    });
    from_f32(&out, &[p.v, p.c], p.dtype)
}

pub fn backward(p: &Problem, input: &Input, weights: &Weights, d_out: &Tensor) -> Result<Grads> {
    let (v, c) = (p.v, p.c);
    let w = weights_f32(weights)?;
    let (g_re, g_im) = g_f32(p, input)?;
    let (b_re, b_im) = rotate(v, c, &g_re, &g_im, &w);
    let d_out = to_f32(d_out)?;
    // ds = d_out·(1 − out²); P = ds·g_re and Q = ds·g_im are the gradients of b_re and b_im; d_g
    // starts as the direct term ds·b and gets P·A, Q·A added below.
    let n = v * c;
    let (mut pm, mut qm) = (vec![0.0f32; n], vec![0.0f32; n]);
    let (mut d_g_re, mut d_g_im) = (vec![0.0f32; n], vec![0.0f32; n]);
    pm.par_chunks_mut(CHUNK)
        .zip(qm.par_chunks_mut(CHUNK))
        .zip(d_g_re.par_chunks_mut(CHUNK).zip(d_g_im.par_chunks_mut(CHUNK)))
        .enumerate()
        .for_each(|(ci, ((pc, qc), (dr, di)))| {
            let base = ci * CHUNK;
            for i in 0..pc.len() {
                let e = base + i;
                let out = (g_re[e] * b_re[e] + g_im[e] * b_im[e]).tanh();
                let ds = d_out[e] * (1.0 - out * out);
                pc[i] = ds * g_re[e];
                qc[i] = ds * g_im[e];
                dr[i] = ds * b_re[e];
                di[i] = ds * b_im[e];
            }
        });
    // d_g_re += P·A_re + Q·A_im;  d_g_im += Q·A_re − P·A_im  (without rotations: P·A, Q·A).
    sgemm(v, c, c, 1.0, &pm, c, 1, &w.re, c, 1, 1.0, &mut d_g_re, c, 1);
    sgemm(v, c, c, 1.0, &qm, c, 1, &w.re, c, 1, 1.0, &mut d_g_im, c, 1);
    // d_A_re = Pᵀ·g_re + Qᵀ·g_im (Pᵀ is P read with swapped strides).
    let mut d_a_re = vec![0.0f32; c * c];
    sgemm(c, v, c, 1.0, &pm, 1, c, &g_re, c, 1, 0.0, &mut d_a_re, c, 1);
    sgemm(c, v, c, 1.0, &qm, 1, c, &g_im, c, 1, 1.0, &mut d_a_re, c, 1);
    let weight_grads = match &w.im {
        Some(im) => {
            sgemm(v, c, c, 1.0, &qm, c, 1, im, c, 1, 1.0, &mut d_g_re, c, 1);
            sgemm(v, c, c, -1.0, &pm, c, 1, im, c, 1, 1.0, &mut d_g_im, c, 1);
            // d_A_im = Qᵀ·g_re − Pᵀ·g_im
            let mut d_a_im = vec![0.0f32; c * c];
            sgemm(c, v, c, 1.0, &qm, 1, c, &g_re, c, 1, 0.0, &mut d_a_im, c, 1);
            sgemm(c, v, c, -1.0, &pm, 1, c, &g_im, c, 1, 1.0, &mut d_a_im, c, 1);
            WeightGrads::Rotation { d_a_re: from_f32(&d_a_re, &[c, c], p.dtype)?, d_a_im: from_f32(&d_a_im, &[c, c], p.dtype)? }
        }
        None => WeightGrads::Plain { d_a: from_f32(&d_a_re, &[c, c], p.dtype)? },
    };
    let input_grads = match *input {
        Input::Spectral { grads_re, grads_im, .. } => {
            // d_x[m] = grads_reᵀ·d_g_re + grads_imᵀ·d_g_im over the mesh's rows.
            let (gre, gim) = (to_f32(grads_re)?, to_f32(grads_im)?);
            let k = p.k;
            let mut d_x = vec![0.0f32; p.meshes() * k * c];
            for (m, wnd) in p.offsets.windows(2).enumerate() {
                let (r0, rows) = (wnd[0], wnd[1] - wnd[0]);
                let dxm = &mut d_x[m * k * c..(m + 1) * k * c];
                sgemm(k, rows, c, 1.0, &gre[r0 * k..], 1, k, &d_g_re[r0 * c..], c, 1, 0.0, dxm, c, 1);
                sgemm(k, rows, c, 1.0, &gim[r0 * k..], 1, k, &d_g_im[r0 * c..], c, 1, 1.0, dxm, c, 1);
            }
            InputGrads::Spectral { d_x: from_f32(&d_x, &p.x_shape(), p.dtype)? }
        }
        Input::Vertex { .. } => InputGrads::Vertex { d_g_re: from_f32(&d_g_re, &[v, c], p.dtype)?, d_g_im: from_f32(&d_g_im, &[v, c], p.dtype)? },
    };
    Ok(Grads { input: input_grads, weights: weight_grads })
}
