//! CPU fast path: f32 working buffers, real FFTs of size N (realfft), rayon over (batch, head)
//! blocks. The filter spectrum (k, k_rev and D folded into one real filter) is computed once per
//! call; d_k is reduced over the batch in a fixed order, so results are deterministic.

use super::{Dims, Grads, Options};
use crate::cpu::{from_f32, to_f32};
use ember_core::{DType, Error, Result, Tensor};
use rayon::prelude::*;
use realfft::num_complex::Complex32;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use std::sync::Arc;

struct Plan {
    n: usize,
    r2c: Arc<dyn RealToComplex<f32>>,
    c2r: Arc<dyn ComplexToReal<f32>>,
}

impl Plan {
    fn new(n: usize) -> Self {
        let mut p = RealFftPlanner::<f32>::new();
        Plan { n, r2c: p.plan_fft_forward(n), c2r: p.plan_fft_inverse(n) }
    }
    fn bins(&self) -> usize {
        self.n / 2 + 1
    }
    /// Spectrum of x zero-padded to N.
    fn forward(&self, x: &[f32], buf: &mut [f32], spec: &mut [Complex32]) -> Result<()> {
        buf[..x.len()].copy_from_slice(x);
        buf[x.len()..].fill(0.0);
        self.r2c.process(buf, spec).map_err(internal)
    }
    /// Unnormalised inverse; the spectrum is consumed.
    fn inverse(&self, spec: &mut [Complex32], out: &mut [f32]) -> Result<()> {
        // The DC and Nyquist bins of a real signal's spectrum are real; rounding can leave a tiny
        // imaginary part there, which the transform rejects.
        spec[0].im = 0.0;
        let last = spec.len() - 1;
        spec[last].im = 0.0;
        self.c2r.process(spec, out).map_err(internal)
    }
}

fn internal(e: realfft::FftError) -> Error {
    Error::invalid("fft", format!("internal FFT error: {e}"))
}

/// The scaled spectrum rfft(k_eff)/N of each head, k_eff = k + D·δ + k_rev reflected (lag −m).
fn filter_spectra(plan: &Plan, dims: Dims, k: &[f32], d: Option<&[f32]>, k_rev: Option<&[f32]>) -> Result<Vec<Vec<Complex32>>> {
    let (n, lk, lkr) = (plan.n, dims.lk, dims.lk_rev);
    (0..dims.heads())
        .into_par_iter()
        .map(|g| {
            let mut c = vec![0.0f32; n];
            c[..lk].copy_from_slice(&k[g * lk..(g + 1) * lk]);
            if let Some(d) = d {
                c[0] += d[g];
            }
            if let Some(kr) = k_rev {
                for m in 0..lkr {
                    c[(n - m) % n] += kr[g * lkr + m];
                }
            }
            let mut spec = vec![Complex32::new(0.0, 0.0); plan.bins()];
            let mut buf = vec![0.0f32; n];
            plan.forward(&c, &mut buf, &mut spec)?;
            let scale = 1.0 / n as f32;
            spec.iter_mut().for_each(|s| *s *= scale);
            Ok(spec)
        })
        .collect()
}

/// Inputs converted to f32 once.
struct Inputs {
    u: Vec<f32>,
    pre: Option<Vec<f32>>,
    post: Option<Vec<f32>>,
    mask: Option<Vec<f32>>,
    spectra: Vec<Vec<Complex32>>,
}

fn inputs(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, plan: &Plan) -> Result<Inputs> {
    let opt = |t: Option<&Tensor>| t.map(to_f32).transpose();
    let k = to_f32(k)?;
    let d = opt(d)?;
    let kr = opt(opts.k_rev)?;
    Ok(Inputs {
        u: to_f32(u)?,
        pre: opt(opts.pregate)?,
        post: opt(opts.postgate)?,
        mask: opt(opts.dropout_mask)?,
        spectra: filter_spectra(plan, dims, &k, d.as_deref(), kr.as_deref())?,
    })
}

/// Per-task scratch buffers.
struct Scratch {
    buf: Vec<f32>,
    spec: Vec<Complex32>,
    w: Vec<f32>,
    z: Vec<f32>,
}

impl Scratch {
    fn new(plan: &Plan) -> Self {
        Scratch { buf: vec![0.0; plan.n], spec: vec![Complex32::new(0.0, 0.0); plan.bins()], w: Vec::new(), z: vec![0.0; plan.n] }
    }
}

/// w = u_i ⊙ pre_j for batch b.
fn gated(x: &Inputs, dims: Dims, b: usize, ci: usize, cj: usize, w: &mut Vec<f32>) {
    let l = dims.l;
    let ui = &x.u[(b * dims.h + ci) * l..][..l];
    w.clear();
    match &x.pre {
        Some(p) => w.extend(ui.iter().zip(&p[(b * dims.h + cj) * l..][..l]).map(|(a, b)| a * b)),
        None => w.extend_from_slice(ui),
    }
}

/// z = conv_g(w) (+ D·w, folded in the spectrum), in s.z[..L]. Leaves the spectrum of w in `wspec`
/// when given.
fn conv(plan: &Plan, spectrum: &[Complex32], s: &mut Scratch, wspec: Option<&mut Vec<Complex32>>) -> Result<()> {
    plan.forward(&s.w, &mut s.buf, &mut s.spec)?;
    if let Some(ws) = wspec {
        ws.clear();
        ws.extend_from_slice(&s.spec);
    }
    s.spec.iter_mut().zip(spectrum).for_each(|(x, k)| *x *= k);
    plan.inverse(&mut s.spec, &mut s.z)
}

pub fn forward(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims) -> Result<Tensor> {
    let plan = Plan::new(dims.fft_size());
    let x = inputs(u, k, d, opts, dims, &plan)?;
    let (l, hd) = (dims.l, dims.hd);
    let mut out = vec![0.0f32; dims.numel()];
    // One task per (b, g): its hd output channels are contiguous.
    out.par_chunks_mut(hd * l).enumerate().try_for_each(|(task, out_bg)| -> Result<()> {
        let (b, g) = (task / dims.heads(), task % dims.heads());
        let mut s = Scratch::new(&plan);
        for j in 0..hd {
            let cj = g * hd + j;
            let acc = &mut out_bg[j * l..(j + 1) * l];
            acc.fill(0.0);
            for i in 0..hd {
                let ci = g * hd + i;
                gated(&x, dims, b, ci, cj, &mut s.w);
                conv(&plan, &x.spectra[g], &mut s, None)?;
                let post = x.post.as_ref().map(|p| &p[(b * dims.h + ci) * l..][..l]);
                for t in 0..l {
                    let z = s.z[t];
                    let gz = if opts.gelu { crate::gelu::cpu::gelu(z) } else { z };
                    acc[t] += post.map_or(gz, |p| p[t] * gz);
                }
            }
            if let Some(m) = &x.mask {
                let m = m[b * dims.h + cj];
                acc.iter_mut().for_each(|a| *a *= m);
            }
        }
        Ok(())
    })?;
    from_f32(&out, u.shape(), super::out_dtype(u.dtype(), opts))
}

/// What one (b, g) task of the backward produces.
struct TaskGrads {
    d_u: Vec<f32>,
    d_pre: Vec<f32>,
    d_post: Vec<f32>,
    /// Σ_{i,j} rfft(d_z)·conj(rfft(w)), the task's share of the filter gradient's spectrum.
    s: Vec<Complex32>,
}

pub fn backward(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, d_out: &Tensor) -> Result<Grads> {
    let plan = Plan::new(dims.fft_size());
    let x = inputs(u, k, d, opts, dims, &plan)?;
    let d_out = to_f32(d_out)?;
    let (l, hd, h, heads) = (dims.l, dims.hd, dims.h, dims.heads());
    let need_z = opts.gelu || opts.postgate.is_some();
    let tasks: Vec<TaskGrads> = (0..dims.b * heads)
        .into_par_iter()
        .map(|task| -> Result<TaskGrads> {
            let (b, g) = (task / heads, task % heads);
            let mut s = Scratch::new(&plan);
            let mut t_out = TaskGrads {
                d_u: vec![0.0; hd * l],
                d_pre: vec![0.0; if x.pre.is_some() { hd * l } else { 0 }],
                d_post: vec![0.0; if x.post.is_some() { hd * l } else { 0 }],
                s: vec![Complex32::new(0.0, 0.0); plan.bins()],
            };
            let mut wspec = Vec::with_capacity(plan.bins());
            let mut dz = vec![0.0f32; l];
            let mut gspec = vec![Complex32::new(0.0, 0.0); plan.bins()];
            for i in 0..hd {
                let ci = g * hd + i;
                let post_i = x.post.as_ref().map(|p| &p[(b * h + ci) * l..][..l]);
                for j in 0..hd {
                    let cj = g * hd + j;
                    let m = x.mask.as_ref().map_or(1.0, |m| m[b * h + cj]);
                    let dout_j = &d_out[(b * h + cj) * l..][..l];
                    gated(&x, dims, b, ci, cj, &mut s.w);
                    if need_z {
                        conv(&plan, &x.spectra[g], &mut s, Some(&mut wspec))?;
                    } else {
                        plan.forward(&s.w, &mut s.buf, &mut s.spec)?;
                        wspec.clear();
                        wspec.extend_from_slice(&s.spec);
                    }
                    for t in 0..l {
                        let dg = dout_j[t] * m;
                        let (gz, gp) = match (need_z, opts.gelu) {
                            (false, _) => (0.0, 1.0),
                            (true, true) => (crate::gelu::cpu::gelu(s.z[t]), crate::gelu::cpu::gelu_grad(s.z[t])),
                            (true, false) => (s.z[t], 1.0),
                        };
                        if x.post.is_some() {
                            t_out.d_post[i * l + t] += dg * gz;
                        }
                        dz[t] = dg * post_i.map_or(1.0, |p| p[t]) * gp;
                    }
                    plan.forward(&dz, &mut s.buf, &mut gspec)?;
                    for ((acc, &gk), &wk) in t_out.s.iter_mut().zip(&gspec).zip(&wspec) {
                        *acc += gk * wk.conj();
                    }
                    // d_w = corr(d_z): the conjugate filter spectrum (D included).
                    gspec.iter_mut().zip(&x.spectra[g]).for_each(|(gk, kk)| *gk *= kk.conj());
                    plan.inverse(&mut gspec, &mut s.z)?;
                    let pre_j = x.pre.as_ref().map(|p| &p[(b * h + cj) * l..][..l]);
                    let u_i = &x.u[(b * h + ci) * l..][..l];
                    for t in 0..l {
                        let dw = s.z[t];
                        t_out.d_u[i * l + t] += pre_j.map_or(dw, |p| dw * p[t]);
                        if x.pre.is_some() {
                            t_out.d_pre[j * l + t] += dw * u_i[t];
                        }
                    }
                }
            }
            Ok(t_out)
        })
        .collect::<Result<_>>()?;

    // Filter gradients: per head, the batch's spectra summed in order, one inverse FFT.
    let (n, lk, lkr) = (plan.n, dims.lk, dims.lk_rev);
    let per_head: Vec<Vec<f32>> = (0..heads)
        .into_par_iter()
        .map(|g| -> Result<Vec<f32>> {
            let mut acc = vec![Complex32::new(0.0, 0.0); plan.bins()];
            for b in 0..dims.b {
                acc.iter_mut().zip(&tasks[b * heads + g].s).for_each(|(a, s)| *a += s);
            }
            let mut r = vec![0.0f32; n];
            plan.inverse(&mut acc, &mut r)?;
            let scale = 1.0 / n as f32;
            r.iter_mut().for_each(|v| *v *= scale);
            Ok(r)
        })
        .collect::<Result<_>>()?;
    let mut d_k = vec![0.0f32; heads * lk];
    let mut d_kr = vec![0.0f32; heads * lkr];
    let mut d_d = vec![0.0f32; heads];
    for (g, r) in per_head.iter().enumerate() {
        d_k[g * lk..(g + 1) * lk].copy_from_slice(&r[..lk]);
        for m in 0..lkr {
            d_kr[g * lkr + m] = r[(n - m) % n];
        }
        d_d[g] = r[0];
    }

    // Scatter the tasks' rows back into (B, H, L) order: task (b, g) owns channels g·hd .. g·hd+hd.
    let dt = u.dtype();
    let gather = |pick: &(dyn Fn(&TaskGrads) -> &Vec<f32> + Sync)| -> Vec<f32> {
        let mut v = vec![0.0f32; dims.numel()];
        v.par_chunks_mut(hd * l).zip(&tasks).for_each(|(dst, t)| dst.copy_from_slice(pick(t)));
        v
    };
    let d_u = from_f32(&gather(&|t| &t.d_u), u.shape(), dt)?;
    let d_pregate = if x.pre.is_some() { Some(from_f32(&gather(&|t| &t.d_pre), u.shape(), dt)?) } else { None };
    let d_postgate = if x.post.is_some() { Some(from_f32(&gather(&|t| &t.d_post), u.shape(), dt)?) } else { None };
    Ok(Grads {
        d_u,
        d_k: from_f32(&d_k, &[heads, lk], DType::F32)?,
        d_k_rev: if opts.k_rev.is_some() { Some(from_f32(&d_kr, &[heads, lkr], DType::F32)?) } else { None },
        d_d: if d.is_some() { Some(from_f32(&d_d, &[heads], DType::F32)?) } else { None },
        d_pregate,
        d_postgate,
    })
}
