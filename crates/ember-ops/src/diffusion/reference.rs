//! The f64 reference: plain loops over a batch of meshes, the test oracle.
//!
//! Layout (row-major): x, out, d_out, d_x are V×C; basis V×K; mass V; evals M×K; times C;
//! spectral and d_spectral M×K×C. Mesh m owns the vertex rows `offsets[m]..offsets[m + 1]`.
//! The only concession to speed is parallelism (rayon over vertex blocks or rows): every sum is
//! still the textbook sum, so the reference stays obviously correct at a million vertices.

use rayon::prelude::*;

/// Sizes of one problem: K eigenpairs per mesh, C channels, mesh m on rows offsets[m]..offsets[m+1].
#[derive(Clone, Copy, Debug)]
pub struct Dims<'a> {
    pub k: usize,
    pub c: usize,
    pub offsets: &'a [usize],
}

impl Dims<'_> {
    pub fn meshes(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn vertices(&self) -> usize {
        *self.offsets.last().unwrap()
    }
}

/// Vertices per parallel block of the reductions over V.
const BLOCK: usize = 2048;

/// exp(−evals[m,k]·times[c]), the diffusion factor of mesh m.
pub fn decay(evals: &[f64], times: &[f64], d: Dims, m: usize, k: usize, c: usize) -> f64 {
    (-evals[m * d.k + k] * times[c]).exp()
}

/// Σ_{v in mesh m} basis[v,k]·w[v]·y[v,c] for all (k, c) — basisᵀ·diag(w)·y — as a K×C matrix.
/// `w = None` means weights of one.
fn project(basis: &[f64], w: Option<&[f64]>, y: &[f64], d: Dims, m: usize) -> Vec<f64> {
    let (k_n, c_n) = (d.k, d.c);
    let rows: Vec<usize> = (d.offsets[m]..d.offsets[m + 1]).collect();
    let partials: Vec<Vec<f64>> = rows
        .par_chunks(BLOCK)
        .map(|block| {
            let mut acc = vec![0.0; k_n * c_n];
            for &v in block {
                for k in 0..k_n {
                    let b = basis[v * k_n + k] * w.map_or(1.0, |w| w[v]);
                    for c in 0..c_n {
                        acc[k * c_n + c] += b * y[v * c_n + c];
                    }
                }
            }
            acc
        })
        .collect();
    let mut total = vec![0.0; k_n * c_n];
    for p in &partials {
        for (t, x) in total.iter_mut().zip(p) {
            *t += x;
        }
    }
    total
}

/// z[v,c] = w[v]·Σ_k basis[v,k]·s[m(v),k,c] for every vertex (`w = None`: weights of one).
fn expand(basis: &[f64], w: Option<&[f64]>, s: &[f64], d: Dims) -> Vec<f64> {
    let (k_n, c_n) = (d.k, d.c);
    let mut z = vec![0.0; d.vertices() * c_n];
    for m in 0..d.meshes() {
        let (lo, hi) = (d.offsets[m], d.offsets[m + 1]);
        let sm = &s[m * k_n * c_n..(m + 1) * k_n * c_n];
        z[lo * c_n..hi * c_n].par_chunks_mut(c_n).enumerate().for_each(|(i, row)| {
            let v = lo + i;
            for k in 0..k_n {
                let b = basis[v * k_n + k];
                for c in 0..c_n {
                    row[c] += b * sm[k * c_n + c];
                }
            }
            let wv = w.map_or(1.0, |w| w[v]);
            for r in row.iter_mut() {
                *r *= wv;
            }
        });
    }
    z
}

/// Forward: returns (out V×C, spectral M×K×C).
pub fn forward(x: &[f64], basis: &[f64], mass: &[f64], evals: &[f64], times: &[f64], d: Dims) -> (Vec<f64>, Vec<f64>) {
    let mut spectral = Vec::with_capacity(d.meshes() * d.k * d.c);
    for m in 0..d.meshes() {
        let in_basis = project(basis, Some(mass), x, d, m);
        for k in 0..d.k {
            for c in 0..d.c {
                spectral.push(decay(evals, times, d, m, k, c) * in_basis[k * d.c + c]);
            }
        }
    }
    let out = expand(basis, None, &spectral, d);
    (out, spectral)
}

/// Backward: given the forward's `spectral`, d_out (V×C) and optional d_spectral (M×K×C), returns
/// (d_x V×C, d_times C).
///
/// With s_grad = d_spectral + basisᵀ·d_out (per mesh) and e = exp(−evals⊗times):
/// - d_x = mass ⊙ basis·(e ⊙ s_grad), since spectral = e ⊙ basisᵀ·(mass ⊙ x);
/// - d_times[c] = Σ_m Σ_k s_grad·∂spectral/∂times[c] = −Σ_m Σ_k evals[m,k]·spectral[m,k,c]·s_grad[m,k,c].
#[allow(clippy::too_many_arguments)]
pub fn backward(basis: &[f64], mass: &[f64], evals: &[f64], times: &[f64], spectral: &[f64], d_out: &[f64], d_spectral: Option<&[f64]>, d: Dims) -> (Vec<f64>, Vec<f64>) {
    let kc = d.k * d.c;
    let mut g = vec![0.0; d.meshes() * kc];
    let mut d_times = vec![0.0; d.c];
    for m in 0..d.meshes() {
        let mut s_grad = project(basis, None, d_out, d, m);
        if let Some(ds) = d_spectral {
            for (s, x) in s_grad.iter_mut().zip(&ds[m * kc..(m + 1) * kc]) {
                *s += x;
            }
        }
        for k in 0..d.k {
            for (c, dt) in d_times.iter_mut().enumerate() {
                let i = k * d.c + c;
                g[m * kc + i] = decay(evals, times, d, m, k, c) * s_grad[i];
                *dt -= evals[m * d.k + k] * spectral[m * kc + i] * s_grad[i];
            }
        }
    }
    let d_x = expand(basis, Some(mass), &g, d);
    (d_x, d_times)
}
