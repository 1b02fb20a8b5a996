//! The f64 reference: plain loops straight from the formulas of the module doc — the test oracle.
//! Rows are independent, so the loops over vertices (and over output rows of the weight gradient)
//! run in parallel; every sum runs in a fixed order.

use rayon::prelude::*;

/// The channel map: A_re, A_im (C×C, row-major) or one matrix A.
pub enum W<'a> {
    Rotation { re: &'a [f64], im: &'a [f64] },
    Plain(&'a [f64]),
}

/// g = grads·x, mesh by mesh: rows offsets[m]..offsets[m+1] use x[m] (K×C). Returns V×C.
pub fn spectral_g(grads: &[f64], x: &[f64], offsets: &[usize], k: usize, c: usize) -> Vec<f64> {
    let v = *offsets.last().unwrap();
    let mut g = vec![0.0; v * c];
    g.par_chunks_mut(c).enumerate().for_each(|(row, g_row)| {
        let mesh = mesh_of(offsets, row);
        let xm = &x[mesh * k * c..(mesh + 1) * k * c];
        for (j, out) in g_row.iter_mut().enumerate() {
            let mut s = 0.0;
            for kk in 0..k {
                s += grads[row * k + kk] * xm[kk * c + j];
            }
            *out = s;
        }
    });
    g
}

/// The mesh that holds `row` (the last m with offsets[m] <= row < offsets[m+1]).
pub fn mesh_of(offsets: &[usize], row: usize) -> usize {
    (0..offsets.len() - 1).find(|&m| offsets[m] <= row && row < offsets[m + 1]).expect("row inside the offsets")
}

/// b_re, b_im for one vertex row.
fn rotate_row(g_re: &[f64], g_im: &[f64], w: &W, c: usize) -> (Vec<f64>, Vec<f64>) {
    let mut b_re = vec![0.0; c];
    let mut b_im = vec![0.0; c];
    for i in 0..c {
        let (mut sr, mut si) = (0.0, 0.0);
        for j in 0..c {
            match w {
                W::Rotation { re, im } => {
                    // b_re = g_re·A_reᵀ − g_im·A_imᵀ,  b_im = g_im·A_reᵀ + g_re·A_imᵀ
                    sr += g_re[j] * re[i * c + j] - g_im[j] * im[i * c + j];
                    si += g_im[j] * re[i * c + j] + g_re[j] * im[i * c + j];
                }
                W::Plain(a) => {
                    sr += g_re[j] * a[i * c + j];
                    si += g_im[j] * a[i * c + j];
                }
            }
        }
        b_re[i] = sr;
        b_im[i] = si;
    }
    (b_re, b_im)
}

/// out = tanh(g_re ⊙ b_re + g_im ⊙ b_im), V×C.
pub fn forward(g_re: &[f64], g_im: &[f64], w: &W, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; g_re.len()];
    out.par_chunks_mut(c).enumerate().for_each(|(row, o)| {
        let (gr, gi) = (&g_re[row * c..(row + 1) * c], &g_im[row * c..(row + 1) * c]);
        let (br, bi) = rotate_row(gr, gi, w, c);
        for i in 0..c {
            o[i] = (gr[i] * br[i] + gi[i] * bi[i]).tanh();
        }
    });
    out
}

pub struct VertexGrads {
    pub d_g_re: Vec<f64>,
    pub d_g_im: Vec<f64>,
    /// d_A_re (or d_A without rotations).
    pub d_w_re: Vec<f64>,
    /// d_A_im (rotations only).
    pub d_w_im: Option<Vec<f64>>,
}

/// Gradients of Σ d_out ⊙ out with respect to g_re, g_im and the weights.
pub fn backward(g_re: &[f64], g_im: &[f64], w: &W, d_out: &[f64], c: usize) -> VertexGrads {
    let v = g_re.len() / c;
    // Per row: ds = d_out·(1 − out²), P = ds·g_re, Q = ds·g_im, and d_g.
    let mut p = vec![0.0; v * c];
    let mut q = vec![0.0; v * c];
    let mut d_g_re = vec![0.0; v * c];
    let mut d_g_im = vec![0.0; v * c];
    p.par_chunks_mut(c)
        .zip(q.par_chunks_mut(c))
        .zip(d_g_re.par_chunks_mut(c).zip(d_g_im.par_chunks_mut(c)))
        .enumerate()
        .for_each(|(row, ((p, q), (dgr, dgi)))| {
            let r = row * c..(row + 1) * c;
            let (gr, gi, dout) = (&g_re[r.clone()], &g_im[r.clone()], &d_out[r]);
            let (br, bi) = rotate_row(gr, gi, w, c);
            let mut ds = vec![0.0; c];
            for i in 0..c {
                let out = (gr[i] * br[i] + gi[i] * bi[i]).tanh();
                ds[i] = dout[i] * (1.0 - out * out);
                p[i] = ds[i] * gr[i];
                q[i] = ds[i] * gi[i];
            }
            for j in 0..c {
                // The direct term (g multiplies b in the dot), then the term through b.
                let (mut sr, mut si) = (ds[j] * br[j], ds[j] * bi[j]);
                for i in 0..c {
                    match w {
                        W::Rotation { re, im } => {
                            sr += p[i] * re[i * c + j] + q[i] * im[i * c + j];
                            si += -p[i] * im[i * c + j] + q[i] * re[i * c + j];
                        }
                        W::Plain(a) => {
                            sr += p[i] * a[i * c + j];
                            si += q[i] * a[i * c + j];
                        }
                    }
                }
                dgr[j] = sr;
                dgi[j] = si;
            }
        });
    // d_A_re[i][j] = Σ_v P[v][i]·g_re[v][j] + Q[v][i]·g_im[v][j];  d_A_im = Σ_v Q[v][i]·g_re[v][j] − P[v][i]·g_im[v][j]
    let rotation = matches!(w, W::Rotation { .. });
    let mut d_w_re = vec![0.0; c * c];
    let mut d_w_im = vec![0.0; c * c];
    d_w_re.par_chunks_mut(c).zip(d_w_im.par_chunks_mut(c)).enumerate().for_each(|(i, (dre, dim))| {
        for row in 0..v {
            let (pi, qi) = (p[row * c + i], q[row * c + i]);
            for j in 0..c {
                let (gr, gi) = (g_re[row * c + j], g_im[row * c + j]);
                dre[j] += pi * gr + qi * gi;
                if rotation {
                    dim[j] += qi * gr - pi * gi;
                }
            }
        }
    });
    VertexGrads { d_g_re, d_g_im, d_w_re, d_w_im: rotation.then_some(d_w_im) }
}

/// d_x[m] = grads_reᵀ·d_g_re + grads_imᵀ·d_g_im over the rows of mesh m. Returns M×K×C.
pub fn spectral_dx(grads_re: &[f64], grads_im: &[f64], d_g_re: &[f64], d_g_im: &[f64], offsets: &[usize], k: usize, c: usize) -> Vec<f64> {
    let meshes = offsets.len() - 1;
    let mut d_x = vec![0.0; meshes * k * c];
    d_x.par_chunks_mut(c).enumerate().for_each(|(mk, out)| {
        let (m, kk) = (mk / k, mk % k);
        for row in offsets[m]..offsets[m + 1] {
            let (a, b) = (grads_re[row * k + kk], grads_im[row * k + kk]);
            for j in 0..c {
                out[j] += a * d_g_re[row * c + j] + b * d_g_im[row * c + j];
            }
        }
    });
    d_x
}
