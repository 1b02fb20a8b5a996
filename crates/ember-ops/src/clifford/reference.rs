//! The f64 references: plain loops over the blade product table of ember-ga (`Algebra::product`,
//! `numeric::wgp`), the test oracle of every CPU and CUDA path. Tensors are flat slices in the
//! (M × B × N) layout: element (j, b, n) at j·B·N + b·N + n.

// Indexed loops over blades read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

use super::gen::NORM_EPS;
use ember_ga::wgp::PathTable;
use ember_ga::{numeric, Algebra};
use rayon::prelude::*;

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;

/// Φ(v), the standard normal CDF.
pub fn cdf(v: f64) -> f64 {
    0.5 * (1.0 + libm::erf(v * FRAC_1_SQRT_2))
}

/// φ(v), the standard normal density.
pub fn pdf(v: f64) -> f64 {
    (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Sizes of an (M × B × N) tensor.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub m: usize,
    pub b: usize,
    pub n: usize,
}

impl Dims {
    pub fn at(&self, j: usize, b: usize, n: usize) -> usize {
        (j * self.b + b) * self.n + n
    }
    fn gather(&self, t: &[f64], b: usize, n: usize) -> Vec<f64> {
        (0..self.m).map(|j| t[self.at(j, b, n)]).collect()
    }
}

/// The multivector GELU of one element: x·Φ(x₀).
pub fn mvgelu1(x: &[f64]) -> Vec<f64> {
    let g = cdf(x[0]);
    x.iter().map(|v| v * g).collect()
}

/// The VJP of [`mvgelu1`] for the upstream gradient `d`.
pub fn mvgelu1_vjp(x: &[f64], d: &[f64]) -> Vec<f64> {
    let g = cdf(x[0]);
    let mut dx: Vec<f64> = d.iter().map(|v| v * g).collect();
    dx[0] += pdf(x[0]) * x.iter().zip(d).map(|(a, b)| a * b).sum::<f64>();
    dx
}

/// The multivector GELU over a tensor.
pub fn mvgelu(dims: Dims, x: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for b in 0..dims.b {
        for n in 0..dims.n {
            for (j, v) in mvgelu1(&dims.gather(x, b, n)).into_iter().enumerate() {
                out[dims.at(j, b, n)] = v;
            }
        }
    }
    out
}

/// Its VJP.
pub fn mvgelu_bwd(dims: Dims, x: &[f64], g: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for b in 0..dims.b {
        for n in 0..dims.n {
            for (j, v) in mvgelu1_vjp(&dims.gather(x, b, n), &dims.gather(g, b, n)).into_iter().enumerate() {
                out[dims.at(j, b, n)] = v;
            }
        }
    }
    out
}

/// Per-grade RMS normalization over the channels of each row: r_k(b) = sqrt(mean_n Σ_{grade k} o²
/// + ε), out = o / r. Returns (out, r) with r laid out (B × NG).
pub fn rms_norm(alg: &Algebra, dims: Dims, o: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let ng = alg.n() + 1;
    let mut r = vec![0.0; dims.b * ng];
    let mut out = vec![0.0; o.len()];
    for b in 0..dims.b {
        for k in 0..ng {
            let mut s = 0.0;
            for j in alg.grade_range(k) {
                for n in 0..dims.n {
                    s += o[dims.at(j, b, n)] * o[dims.at(j, b, n)];
                }
            }
            r[b * ng + k] = (s / dims.n as f64 + NORM_EPS).sqrt();
        }
        for j in 0..dims.m {
            for n in 0..dims.n {
                out[dims.at(j, b, n)] = o[dims.at(j, b, n)] / r[b * ng + alg.grade(j)];
            }
        }
    }
    (out, r)
}

/// Gradient of o given the gradient `g` of the normalized output (o, not out, is the input here):
/// d_o_j = g_j / r_k − o_j · D_k / (N r_k³), D_k(b) = Σ_n Σ_{grade k} g·o.
pub fn rms_norm_bwd(alg: &Algebra, dims: Dims, o: &[f64], g: &[f64]) -> Vec<f64> {
    let ng = alg.n() + 1;
    let (_, r) = rms_norm(alg, dims, o);
    let mut d = vec![0.0; o.len()];
    for b in 0..dims.b {
        for k in 0..ng {
            let mut dk = 0.0;
            for j in alg.grade_range(k) {
                for n in 0..dims.n {
                    dk += g[dims.at(j, b, n)] * o[dims.at(j, b, n)];
                }
            }
            let rk = r[b * ng + k];
            for j in alg.grade_range(k) {
                for n in 0..dims.n {
                    let i = dims.at(j, b, n);
                    d[i] = g[i] / rk - o[i] * dk / (dims.n as f64 * rk * rk * rk);
                }
            }
        }
    }
    d
}

/// o = wgp(act x, act y, w[n, ·]) for every element, `act` the GELU when `gelu`.
pub fn wgp_layer(alg: &Algebra, dims: Dims, x: &[f64], y: &[f64], w: &[f64], gelu: bool) -> Vec<f64> {
    let p = PathTable::new(alg).len();
    let mut o = vec![0.0; x.len()];
    for b in 0..dims.b {
        for n in 0..dims.n {
            let (mut xe, mut ye) = (dims.gather(x, b, n), dims.gather(y, b, n));
            if gelu {
                xe = mvgelu1(&xe);
                ye = mvgelu1(&ye);
            }
            let oe = numeric::wgp(alg, &xe, &ye, &w[n * p..(n + 1) * p]).expect("validated sizes");
            for (j, v) in oe.into_iter().enumerate() {
                o[dims.at(j, b, n)] = v;
            }
        }
    }
    o
}

/// The fused layer: act → weighted product → optional per-grade RMS norm. Returns (out, r).
pub fn fused_forward(alg: &Algebra, dims: Dims, x: &[f64], y: &[f64], w: &[f64], gelu: bool, norm: bool) -> (Vec<f64>, Option<Vec<f64>>) {
    let o = wgp_layer(alg, dims, x, y, w, gelu);
    if norm {
        let (out, r) = rms_norm(alg, dims, &o);
        (out, Some(r))
    } else {
        (o, None)
    }
}

/// Gradients (d_x, d_y, d_w) of the fused layer for the upstream gradient `g` of its output.
#[allow(clippy::too_many_arguments)]
pub fn fused_backward(alg: &Algebra, dims: Dims, x: &[f64], y: &[f64], w: &[f64], g: &[f64], gelu: bool, norm: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let table = PathTable::new(alg);
    let p = table.len();
    let d_o = if norm { rms_norm_bwd(alg, dims, &wgp_layer(alg, dims, x, y, w, gelu), g) } else { g.to_vec() };
    let (mut dx, mut dy, mut dw) = (vec![0.0; x.len()], vec![0.0; y.len()], vec![0.0; w.len()]);
    for b in 0..dims.b {
        for n in 0..dims.n {
            let (xr, yr) = (dims.gather(x, b, n), dims.gather(y, b, n));
            let (xe, ye) = if gelu { (mvgelu1(&xr), mvgelu1(&yr)) } else { (xr.clone(), yr.clone()) };
            let de = dims.gather(&d_o, b, n);
            let (mut dxe, mut dye) = (vec![0.0; dims.m], vec![0.0; dims.m]);
            for i in 0..dims.m {
                for l in 0..dims.m {
                    let (s, k) = alg.product(i, l);
                    if s == 0 {
                        continue;
                    }
                    let path = table.index(alg.grade(i), alg.grade(l), alg.grade(k)).expect("nonzero product has a path");
                    let s = f64::from(s);
                    dxe[i] += s * w[n * p + path] * ye[l] * de[k];
                    dye[l] += s * w[n * p + path] * xe[i] * de[k];
                    dw[n * p + path] += s * xe[i] * ye[l] * de[k];
                }
            }
            if gelu {
                dxe = mvgelu1_vjp(&xr, &dxe);
                dye = mvgelu1_vjp(&yr, &dye);
            }
            for j in 0..dims.m {
                dx[dims.at(j, b, n)] = dxe[j];
                dy[dims.at(j, b, n)] = dye[j];
            }
        }
    }
    (dx, dy, dw)
}

/// The fully connected product: o[j, b, m] = Σ_n Σ_{i,l} s·w[path, n, m]·gx[i, b, n]·gy[l, b, n]
/// over the blade pairs (i, l) whose product is ±blade j; weights (P × N_in × N_out). x, y have
/// `dims_in`; o has (M × B × N_out).
pub fn fc_layer(alg: &Algebra, dims_in: Dims, n_out: usize, x: &[f64], y: &[f64], w: &[f64]) -> Vec<f64> {
    let table = PathTable::new(alg);
    let m = dims_in.m;
    let dims_out = Dims { m, b: dims_in.b, n: n_out };
    // Rows b are independent: one task each, writing its own (M × N_out) block.
    let rows: Vec<Vec<f64>> = (0..dims_in.b)
        .into_par_iter()
        .map(|b| {
            let mut o = vec![0.0; m * n_out];
            for n in 0..dims_in.n {
                let xe = mvgelu1(&dims_in.gather(x, b, n));
                let ye = mvgelu1(&dims_in.gather(y, b, n));
                for i in 0..m {
                    for l in 0..m {
                        let (s, k) = alg.product(i, l);
                        if s == 0 {
                            continue;
                        }
                        let path = table.index(alg.grade(i), alg.grade(l), alg.grade(k)).expect("nonzero product has a path");
                        let c = f64::from(s) * xe[i] * ye[l];
                        let wrow = &w[(path * dims_in.n + n) * n_out..][..n_out];
                        for (om, wv) in o[k * n_out..(k + 1) * n_out].iter_mut().zip(wrow) {
                            *om += c * wv;
                        }
                    }
                }
            }
            o
        })
        .collect();
    let mut out = vec![0.0; m * dims_in.b * n_out];
    for (b, row) in rows.iter().enumerate() {
        for j in 0..m {
            out[dims_out.at(j, b, 0)..][..n_out].copy_from_slice(&row[j * n_out..(j + 1) * n_out]);
        }
    }
    out
}

/// Forward of the fully connected layer with the optional norm (over the N_out channels).
pub fn fc_forward(alg: &Algebra, dims_in: Dims, n_out: usize, x: &[f64], y: &[f64], w: &[f64], norm: bool) -> (Vec<f64>, Option<Vec<f64>>) {
    let o = fc_layer(alg, dims_in, n_out, x, y, w);
    if norm {
        let (out, r) = rms_norm(alg, Dims { m: dims_in.m, b: dims_in.b, n: n_out }, &o);
        (out, Some(r))
    } else {
        (o, None)
    }
}

/// Gradients (d_x, d_y, d_w) of the fully connected layer for the upstream gradient `g`.
#[allow(clippy::too_many_arguments)]
pub fn fc_backward(alg: &Algebra, dims_in: Dims, n_out: usize, x: &[f64], y: &[f64], w: &[f64], g: &[f64], norm: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let table = PathTable::new(alg);
    let p = table.len();
    let m = dims_in.m;
    let (nb, nin) = (dims_in.b, dims_in.n);
    let dims_out = Dims { m, b: nb, n: n_out };
    let d_o = if norm { rms_norm_bwd(alg, dims_out, &fc_layer(alg, dims_in, n_out, x, y, w), g) } else { g.to_vec() };
    // d_x, d_y: one task per row b; d_w: one task per path p (each owns its slice).
    let rows: Vec<(Vec<f64>, Vec<f64>)> = (0..nb)
        .into_par_iter()
        .map(|b| {
            let (mut dx, mut dy) = (vec![0.0; m * nin], vec![0.0; m * nin]);
            for n in 0..nin {
                let (xr, yr) = (dims_in.gather(x, b, n), dims_in.gather(y, b, n));
                let (xe, ye) = (mvgelu1(&xr), mvgelu1(&yr));
                let (mut dxe, mut dye) = (vec![0.0; m], vec![0.0; m]);
                for i in 0..m {
                    for l in 0..m {
                        let (s, k) = alg.product(i, l);
                        if s == 0 {
                            continue;
                        }
                        let path = table.index(alg.grade(i), alg.grade(l), alg.grade(k)).expect("nonzero product has a path");
                        // u = Σ_m w[path, n, m]·d_o[k, b, m]
                        let wrow = &w[(path * nin + n) * n_out..][..n_out];
                        let grow = &d_o[dims_out.at(k, b, 0)..][..n_out];
                        let u: f64 = wrow.iter().zip(grow).map(|(a, c)| a * c).sum();
                        let s = f64::from(s);
                        dxe[i] += s * ye[l] * u;
                        dye[l] += s * xe[i] * u;
                    }
                }
                let (dxr, dyr) = (mvgelu1_vjp(&xr, &dxe), mvgelu1_vjp(&yr, &dye));
                for j in 0..m {
                    dx[j * nin + n] = dxr[j];
                    dy[j * nin + n] = dyr[j];
                }
            }
            (dx, dy)
        })
        .collect();
    let (mut dx, mut dy) = (vec![0.0; x.len()], vec![0.0; y.len()]);
    for (b, (rx, ry)) in rows.iter().enumerate() {
        for j in 0..m {
            dx[dims_in.at(j, b, 0)..][..nin].copy_from_slice(&rx[j * nin..(j + 1) * nin]);
            dy[dims_in.at(j, b, 0)..][..nin].copy_from_slice(&ry[j * nin..(j + 1) * nin]);
        }
    }
    let acts: Vec<(Vec<f64>, Vec<f64>)> = (0..nb * nin)
        .map(|e| {
            let (b, n) = (e / nin, e % nin);
            (mvgelu1(&dims_in.gather(x, b, n)), mvgelu1(&dims_in.gather(y, b, n)))
        })
        .collect();
    let dw_paths: Vec<Vec<f64>> = (0..p)
        .into_par_iter()
        .map(|path| {
            let mut dw = vec![0.0; nin * n_out];
            for b in 0..nb {
                for n in 0..nin {
                    let (xe, ye) = &acts[b * nin + n];
                    for i in 0..m {
                        for l in 0..m {
                            let (s, k) = alg.product(i, l);
                            if s == 0 || table.index(alg.grade(i), alg.grade(l), alg.grade(k)) != Some(path) {
                                continue;
                            }
                            let c = f64::from(s) * xe[i] * ye[l];
                            let grow = &d_o[dims_out.at(k, b, 0)..][..n_out];
                            for (d, gv) in dw[n * n_out..(n + 1) * n_out].iter_mut().zip(grow) {
                                *d += c * gv;
                            }
                        }
                    }
                }
            }
            dw
        })
        .collect();
    (dx, dy, dw_paths.concat())
}

/// MVLinear: O[j, b, m] = Σ_n X[j, b, n]·W[grade j, n, m] (+ bias[m] on the scalar blade).
pub fn linear_forward(alg: &Algebra, dims_in: Dims, n_out: usize, x: &[f64], w: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let (nb, nin) = (dims_in.b, dims_in.n);
    let dims_out = Dims { m: dims_in.m, b: nb, n: n_out };
    let mut o = vec![0.0; dims_in.m * nb * n_out];
    for j in 0..dims_in.m {
        let g = alg.grade(j);
        for b in 0..nb {
            for mo in 0..n_out {
                let mut s = if j == 0 { bias.map_or(0.0, |v| v[mo]) } else { 0.0 };
                for n in 0..nin {
                    s += x[dims_in.at(j, b, n)] * w[(g * nin + n) * n_out + mo];
                }
                o[dims_out.at(j, b, mo)] = s;
            }
        }
    }
    o
}

/// Gradients (d_x, d_w, d_bias) of MVLinear for the upstream gradient `g`.
pub fn linear_backward(alg: &Algebra, dims_in: Dims, n_out: usize, x: &[f64], w: &[f64], g: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (nb, nin, ng) = (dims_in.b, dims_in.n, alg.n() + 1);
    let dims_out = Dims { m: dims_in.m, b: nb, n: n_out };
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; ng * nin * n_out];
    let mut db = vec![0.0; n_out];
    for j in 0..dims_in.m {
        let gr = alg.grade(j);
        for b in 0..nb {
            for n in 0..nin {
                let mut s = 0.0;
                for mo in 0..n_out {
                    s += g[dims_out.at(j, b, mo)] * w[(gr * nin + n) * n_out + mo];
                    dw[(gr * nin + n) * n_out + mo] += x[dims_in.at(j, b, n)] * g[dims_out.at(j, b, mo)];
                }
                dx[dims_in.at(j, b, n)] = s;
            }
        }
    }
    for b in 0..nb {
        for (mo, d) in db.iter_mut().enumerate() {
            *d += g[dims_out.at(0, b, mo)];
        }
    }
    (dx, dw, db)
}
