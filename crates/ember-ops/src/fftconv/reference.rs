//! The f64 reference: the test oracle. Convolutions by plain direct sums when L·Lk is small, by an
//! f64 FFT of size ≥ L + Lk − 1 when it is large (the two are checked against each other in the
//! tests); everything else is plain loops over the formulas of the module doc.

use super::Dims;
use rustfft::num_complex::Complex64;
use rustfft::FftPlanner;

pub use crate::gelu::reference::{gelu, gelu_grad};

/// The inputs of one call, as f64 slices (row-major, shapes as in the module doc).
#[derive(Clone, Copy)]
pub struct Problem<'a> {
    pub dims: Dims,
    pub u: &'a [f64],
    pub k: &'a [f64],
    pub d: Option<&'a [f64]>,
    pub k_rev: Option<&'a [f64]>,
    pub mask: Option<&'a [f64]>,
    pub pregate: Option<&'a [f64]>,
    pub postgate: Option<&'a [f64]>,
    pub gelu: bool,
}

/// Gradients as f64 vectors (d_d is all zeros when the problem has no D).
pub struct Grads {
    pub d_u: Vec<f64>,
    pub d_k: Vec<f64>,
    pub d_k_rev: Option<Vec<f64>>,
    pub d_d: Vec<f64>,
    pub d_pregate: Option<Vec<f64>>,
    pub d_postgate: Option<Vec<f64>>,
}

/// How the convolution sums are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Direct,
    Fft,
}

/// Direct sums up to this many multiply-adds per row, FFT beyond.
const DIRECT_MAX_WORK: usize = 1 << 21;

fn method_for(l: usize, lk: usize) -> Method {
    if l * lk <= DIRECT_MAX_WORK {
        Method::Direct
    } else {
        Method::Fft
    }
}

// ---- the four linear maps of one row, and their direct and FFT forms ------------------------

/// y[t] = Σ_{0≤s≤t, s<Lk} k[s]·x[t−s].
pub fn causal(k: &[f64], x: &[f64], method: Method) -> Vec<f64> {
    match method {
        Method::Direct => (0..x.len()).map(|t| (0..k.len().min(t + 1)).map(|s| k[s] * x[t - s]).sum()).collect(),
        Method::Fft => fft_apply(x, k, x.len(), |xf, kf| xf * kf),
    }
}

/// y[t] = Σ_{m<Lkr, t+m<L} kr[m]·x[t+m].
pub fn anticausal(kr: &[f64], x: &[f64], method: Method) -> Vec<f64> {
    let l = x.len();
    match method {
        Method::Direct => (0..l).map(|t| (0..kr.len().min(l - t)).map(|m| kr[m] * x[t + m]).sum()).collect(),
        Method::Fft => fft_apply(x, kr, l, |xf, kf| xf * kf.conj()),
    }
}

/// dk[s] = Σ_t g[t]·x[t−s] for s < lk (the gradient of Σ g·causal(k, x) with respect to k).
pub fn causal_filter_grad(x: &[f64], g: &[f64], lk: usize, method: Method) -> Vec<f64> {
    let l = x.len();
    match method {
        Method::Direct => (0..lk).map(|s| (s..l).map(|t| g[t] * x[t - s]).sum()).collect(),
        Method::Fft => fft_apply(g, x, lk, |gf, xf| gf * xf.conj()),
    }
}

/// dkr[m] = Σ_t g[t]·x[t+m] for m < lkr.
pub fn anticausal_filter_grad(x: &[f64], g: &[f64], lkr: usize, method: Method) -> Vec<f64> {
    let l = x.len();
    match method {
        Method::Direct => (0..lkr).map(|m| (0..l - m).map(|t| g[t] * x[t + m]).sum()).collect(),
        Method::Fft => fft_apply(x, g, lkr, |xf, gf| xf * gf.conj()),
    }
}

/// The first `keep` values of IFFT(op(FFT(a), FFT(b))) with both zero-padded to a power of two
/// ≥ len(a) + len(b) − 1, so the circular result equals the linear one (no wrap reaches the kept
/// range for any of the four maps above).
fn fft_apply(a: &[f64], b: &[f64], keep: usize, op: impl Fn(Complex64, Complex64) -> Complex64) -> Vec<f64> {
    let n = (a.len() + b.len()).next_power_of_two();
    let mut planner = FftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(n);
    let pad = |x: &[f64]| {
        let mut v = vec![Complex64::new(0.0, 0.0); n];
        for (o, &x) in v.iter_mut().zip(x) {
            o.re = x;
        }
        v
    };
    let (mut fa, mut fb) = (pad(a), pad(b));
    fwd.process(&mut fa);
    fwd.process(&mut fb);
    let mut prod: Vec<Complex64> = fa.iter().zip(&fb).map(|(&x, &y)| op(x, y)).collect();
    inv.process(&mut prod);
    prod[..keep].iter().map(|c| c.re / n as f64).collect()
}

// ---- the op ------------------------------------------------------------------------------------

struct Layout {
    b: usize,
    h: usize,
    l: usize,
    hd: usize,
    heads: usize,
}

impl Layout {
    fn new(d: &Dims) -> Self {
        Layout { b: d.b, h: d.h, l: d.l, hd: d.hd, heads: d.heads() }
    }
    /// Offset of channel c of batch b in a (B, H, L) tensor.
    fn row(&self, b: usize, c: usize) -> usize {
        (b * self.h + c) * self.l
    }
}

fn slice_or_ones(t: Option<&[f64]>, off: usize, l: usize) -> Vec<f64> {
    match t {
        Some(t) => t[off..off + l].to_vec(),
        None => vec![1.0; l],
    }
}

/// z_ij = conv_g(w) + D[g]·w for one (row, head).
fn conv_row(p: &Problem, g: usize, w: &[f64], method: Method) -> Vec<f64> {
    let (lk, lkr) = (p.dims.lk, p.dims.lk_rev);
    let k = &p.k[g * lk..(g + 1) * lk];
    let mut z = causal(k, w, method);
    if let Some(kr) = p.k_rev {
        let a = anticausal(&kr[g * lkr..(g + 1) * lkr], w, method);
        z.iter_mut().zip(a).for_each(|(z, a)| *z += a);
    }
    let dg = p.d.map_or(0.0, |d| d[g]);
    z.iter_mut().zip(w).for_each(|(z, &w)| *z += dg * w);
    z
}

pub fn forward(p: &Problem) -> Vec<f64> {
    forward_with(p, method_for(p.dims.l, p.dims.lk.max(p.dims.lk_rev)))
}

pub fn forward_with(p: &Problem, method: Method) -> Vec<f64> {
    let s = Layout::new(&p.dims);
    let mut out = vec![0.0; s.b * s.h * s.l];
    for b in 0..s.b {
        for g in 0..s.heads {
            for j in 0..s.hd {
                let cj = g * s.hd + j;
                let pre_j = slice_or_ones(p.pregate, s.row(b, cj), s.l);
                let mut acc = vec![0.0; s.l];
                for i in 0..s.hd {
                    let ci = g * s.hd + i;
                    let u_i = &p.u[s.row(b, ci)..s.row(b, ci) + s.l];
                    let post_i = slice_or_ones(p.postgate, s.row(b, ci), s.l);
                    let w: Vec<f64> = u_i.iter().zip(&pre_j).map(|(a, b)| a * b).collect();
                    let z = conv_row(p, g, &w, method);
                    for t in 0..s.l {
                        let gz = if p.gelu { gelu(z[t]) } else { z[t] };
                        acc[t] += post_i[t] * gz;
                    }
                }
                let m = p.mask.map_or(1.0, |m| m[b * s.h + cj]);
                let o = s.row(b, cj);
                for t in 0..s.l {
                    out[o + t] = m * acc[t];
                }
            }
        }
    }
    out
}

pub fn backward(p: &Problem, d_out: &[f64]) -> Grads {
    backward_with(p, d_out, method_for(p.dims.l, p.dims.lk.max(p.dims.lk_rev)))
}

pub fn backward_with(p: &Problem, d_out: &[f64], method: Method) -> Grads {
    let s = Layout::new(&p.dims);
    let (lk, lkr, l) = (p.dims.lk, p.dims.lk_rev, s.l);
    let n = s.b * s.h * l;
    let mut d_u = vec![0.0; n];
    let mut d_pre = vec![0.0; n];
    let mut d_post = vec![0.0; n];
    let mut d_k = vec![0.0; s.heads * lk];
    let mut d_kr = vec![0.0; s.heads * lkr];
    let mut d_d = vec![0.0; s.heads];
    for b in 0..s.b {
        for g in 0..s.heads {
            let kg = &p.k[g * lk..(g + 1) * lk];
            let dg = p.d.map_or(0.0, |d| d[g]);
            for i in 0..s.hd {
                let ci = g * s.hd + i;
                let u_i = &p.u[s.row(b, ci)..s.row(b, ci) + l];
                let post_i = slice_or_ones(p.postgate, s.row(b, ci), l);
                for j in 0..s.hd {
                    let cj = g * s.hd + j;
                    let pre_j = slice_or_ones(p.pregate, s.row(b, cj), l);
                    let m = p.mask.map_or(1.0, |m| m[b * s.h + cj]);
                    let dout_j = &d_out[s.row(b, cj)..s.row(b, cj) + l];
                    let w: Vec<f64> = u_i.iter().zip(&pre_j).map(|(a, b)| a * b).collect();
                    let z = conv_row(p, g, &w, method);
                    // d_z = d_out·mask·post·gelu'(z); d_post gathers d_out·mask·g.
                    let mut dz = vec![0.0; l];
                    for t in 0..l {
                        let (gz, gp) = if p.gelu { (gelu(z[t]), gelu_grad(z[t])) } else { (z[t], 1.0) };
                        d_post[s.row(b, ci) + t] += dout_j[t] * m * gz;
                        dz[t] = dout_j[t] * m * post_i[t] * gp;
                    }
                    // d_w = adjoint of the convolution (+ D) applied to d_z.
                    let mut dw = anticausal(kg, &dz, method);
                    if let Some(kr) = p.k_rev {
                        let c = causal(&kr[g * lkr..(g + 1) * lkr], &dz, method);
                        dw.iter_mut().zip(c).for_each(|(a, c)| *a += c);
                    }
                    for t in 0..l {
                        dw[t] += dg * dz[t];
                        d_u[s.row(b, ci) + t] += dw[t] * pre_j[t];
                        d_pre[s.row(b, cj) + t] += dw[t] * u_i[t];
                        d_d[g] += dz[t] * w[t];
                    }
                    for (a, v) in d_k[g * lk..(g + 1) * lk].iter_mut().zip(causal_filter_grad(&w, &dz, lk, method)) {
                        *a += v;
                    }
                    if p.k_rev.is_some() {
                        for (a, v) in d_kr[g * lkr..(g + 1) * lkr].iter_mut().zip(anticausal_filter_grad(&w, &dz, lkr, method)) {
                            *a += v;
                        }
                    }
                }
            }
        }
    }
    Grads {
        d_u,
        d_k,
        d_k_rev: p.k_rev.map(|_| d_kr),
        d_d,
        d_pregate: p.pregate.map(|_| d_pre),
        d_postgate: p.postgate.map(|_| d_post),
    }
}
