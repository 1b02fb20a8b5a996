//! CPU fast path: f32 working buffers and `crate::cpu::sgemm` (multithreaded, strided, so basisᵀ
//! costs no transpose), one pair of GEMMs per mesh; half inputs are widened exactly to f32.

use super::{Forward, Grads, Meshes};
use crate::cpu::{from_f32, sgemm, to_f32};
use ember_core::{Result, Tensor};
use rayon::prelude::*;

/// e[k,c] = exp(−evals[mesh,k]·times[c]) for one mesh, K×C.
fn decay<'a>(evals: &'a [f32], times: &'a [f32], mesh: usize, k: usize) -> impl Fn(usize, usize) -> f32 + Sync + 'a {
    let ev = &evals[mesh * k..(mesh + 1) * k];
    move |kk, cc| (-ev[kk] * times[cc]).exp()
}

pub(crate) fn forward(m: &Meshes, x: &Tensor, times: &Tensor) -> Result<Forward> {
    let (k, c, dtype) = (m.k(), x.dim(1), m.dtype());
    let basis = to_f32(m.basis)?;
    let mass = to_f32(m.mass)?;
    let (evals, times) = (m.evals.as_slice::<f32>()?, times.as_slice::<f32>()?);
    // mass ⊙ x, in place on the f32 copy of x.
    let mut xm = to_f32(x)?;
    xm.par_chunks_mut(c).zip(mass.par_iter()).for_each(|(row, &w)| row.iter_mut().for_each(|v| *v *= w));
    let mut spectral = vec![0f32; m.meshes() * k * c];
    let mut out = vec![0f32; m.v() * c];
    for (mesh, s) in spectral.chunks_mut(k * c).enumerate() {
        let (lo, hi) = (m.offsets[mesh], m.offsets[mesh + 1]);
        let b = &basis[lo * k..hi * k];
        // s = bᵀ·xm: b is n×K row-major, so bᵀ has row stride 1 and column stride K.
        sgemm(k, hi - lo, c, 1.0, b, 1, k, &xm[lo * c..hi * c], c, 1, 0.0, s, c, 1);
        let e = decay(evals, times, mesh, k);
        s.par_chunks_mut(c).enumerate().for_each(|(kk, row)| row.iter_mut().enumerate().for_each(|(cc, v)| *v *= e(kk, cc)));
        sgemm(hi - lo, k, c, 1.0, b, k, 1, s, c, 1, 0.0, &mut out[lo * c..hi * c], c, 1);
    }
    Ok(Forward {
        out: from_f32(&out, x.shape(), dtype)?,
        spectral: from_f32(&spectral, &m.spectral_shape(c), dtype)?,
        saved: Tensor::from_vec(spectral, &[m.meshes(), k, c])?,
    })
}

pub(crate) fn backward(m: &Meshes, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
    let (k, c, dtype) = (m.k(), d_out.dim(1), m.dtype());
    let basis = to_f32(m.basis)?;
    let mass = to_f32(m.mass)?;
    let (evals, times) = (m.evals.as_slice::<f32>()?, times.as_slice::<f32>()?);
    let spectral = fwd.saved.as_slice::<f32>()?;
    let dy = to_f32(d_out)?;
    let ds = d_spectral.map(to_f32).transpose()?;
    // g = e ⊙ s_grad per mesh; d_times accumulates in f64 over meshes and eigenpairs.
    let mut g = vec![0f32; m.meshes() * k * c];
    let mut d_times = vec![0f64; c];
    let mut d_x = vec![0f32; m.v() * c];
    for (mesh, gm) in g.chunks_mut(k * c).enumerate() {
        let (lo, hi) = (m.offsets[mesh], m.offsets[mesh + 1]);
        let b = &basis[lo * k..hi * k];
        let range = mesh * k * c..(mesh + 1) * k * c;
        // s_grad = d_spectral + bᵀ·d_out, built in gm.
        match &ds {
            Some(ds) => gm.copy_from_slice(&ds[range.clone()]),
            None => gm.fill(0.0),
        }
        sgemm(k, hi - lo, c, 1.0, b, 1, k, &dy[lo * c..hi * c], c, 1, 1.0, gm, c, 1);
        let (ev, sp) = (&evals[mesh * k..(mesh + 1) * k], &spectral[range]);
        for (kk, row) in gm.chunks(c).enumerate() {
            for (cc, &sg) in row.iter().enumerate() {
                d_times[cc] -= ev[kk] as f64 * sp[kk * c + cc] as f64 * sg as f64;
            }
        }
        let e = decay(evals, times, mesh, k);
        gm.par_chunks_mut(c).enumerate().for_each(|(kk, row)| row.iter_mut().enumerate().for_each(|(cc, v)| *v *= e(kk, cc)));
        sgemm(hi - lo, k, c, 1.0, b, k, 1, gm, c, 1, 0.0, &mut d_x[lo * c..hi * c], c, 1);
    }
    d_x.par_chunks_mut(c).zip(mass.par_iter()).for_each(|(row, &w)| row.iter_mut().for_each(|v| *v *= w));
    let d_times: Vec<f32> = d_times.iter().map(|&v| v as f32).collect();
    Ok(Grads { d_x: from_f32(&d_x, d_out.shape(), dtype)?, d_times: Tensor::from_vec(d_times, &[c])? })
}

