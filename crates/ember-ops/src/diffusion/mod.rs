//! Spectral diffusion — DiffusionNet's `LearnedTimeDiffusion`, method 'spectral' (Sharp et al.,
//! "DiffusionNet: Discretization Agnostic Learning on Surfaces", arXiv 2012.00888) — forward and
//! backward, on one mesh or on a batch of meshes in one call.
//!
//! Spec. Inputs x (V×C), basis (V×K, the Laplacian eigenvectors), mass (V), evals (K), times (C):
//! - spectral = exp(−evals ⊗ times) ⊙ (basisᵀ · (mass ⊙ x))      (K×C)
//! - out      = basis · spectral                                  (V×C)
//!
//! `forward` returns `out` and `spectral` (the gradient-features layer consumes `spectral`).
//! `backward`, given d_out (V×C) and an optional d_spectral (K×C), returns d_x and d_times:
//! - s_grad   = d_spectral + basisᵀ · d_out
//! - d_times[c] = −Σ_k evals[k] · spectral[k,c] · s_grad[k,c]
//! - d_x      = mass ⊙ (basis · (exp(−evals ⊗ times) ⊙ s_grad))
//!
//! basis, mass and evals are precomputed constants of the mesh (its Laplacian eigenpairs and lumped
//! vertex areas): no gradient is computed for them. The op is pure; the layer
//! [`LearnedTimeDiffusion`] clamps its times to ≥ 1e-8 before use, as DiffusionNet does.
//!
//! Batches ([`MeshBatch`], [`forward_batch`], [`backward_batch`]): meshes with different vertex
//! counts in one call. Their vertices are concatenated (x, basis, mass, out, d_out, d_x have
//! V = Σ V_m rows, mesh m owning rows `offsets[m]..offsets[m+1]`), evals is M×K (one row per mesh),
//! spectral and d_spectral are M×K×C, and the times are shared, so d_times sums over the meshes.
//!
//! dtypes: x, basis, mass, out, spectral, d_out, d_spectral and d_x share the activation dtype
//! (f32, f16 or bf16; arithmetic and accumulation in f32); evals, times and d_times are f32. With f64
//! activations (CPU only) the f64 reference runs and evals, times and d_times are f64.
//!
//! CUDA: every product runs on tensor cores (bf16/f16 mma.sync or wgmma with f32 accumulation). f32
//! inputs are split into bf16 halves, x ≈ hi + lo, and multiplied as hi·hi + hi·lo + lo·hi: ~5e-6
//! relative error per product pass (1.4e-5 at most in the GPU checks; they hold it to the 3e-4 of f32 on
//! tensor cores), 1.4–1.5× faster than the three TF32 passes before (~1e-7), which
//! `EMBER_DIFFUSION_F32=tf32x3` still selects. Sums over vertices are
//! split over thread blocks and reduced in a fixed order: results are bit-identical run to run on a
//! given GPU. K ≤ 256 on CUDA; the CPU takes any K.

pub mod cpu;
pub mod cuda;
pub mod reference;
mod suite;
#[cfg(test)]
mod tests;

use crate::harness::validate;
use ember_core::{DType, Device, Error, Result, Tensor};

pub use suite::Family;

/// Largest K (eigenpairs per mesh) the CUDA kernels take.
pub const MAX_K_CUDA: usize = 256;
/// The lower bound [`LearnedTimeDiffusion`] clamps its times to, as DiffusionNet does.
pub const MIN_TIME: f64 = 1e-8;

/// What `forward` returns: the two outputs, and what `backward` needs.
#[derive(Debug)]
pub struct Forward {
    /// basis · spectral, V×C, activation dtype.
    pub out: Tensor,
    /// exp(−evals ⊗ times) ⊙ basisᵀ(mass ⊙ x): K×C for one mesh, M×K×C for a batch; activation dtype.
    pub spectral: Tensor,
    /// `spectral` in f32 (f64 on the reference path), M×K×C: backward's d_times reads it unrounded.
    saved: Tensor,
}

impl Forward {
    /// The unrounded spectral coefficients (f32; f64 on the reference path), M×K×C.
    pub fn spectral_f32(&self) -> &Tensor {
        &self.saved
    }
}

/// What `backward` returns.
#[derive(Debug)]
pub struct Grads {
    /// V×C, activation dtype.
    pub d_x: Tensor,
    /// C, f32 (f64 on the reference path).
    pub d_times: Tensor,
}

/// The dtype of evals, times and d_times for activations of dtype `act`.
pub fn param_dtype(act: DType) -> DType {
    if act == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// A batch of meshes for one call: concatenated basis (V×K) and mass (V), evals M×K, and the vertex
/// offsets (M + 1 of them, from 0 to V). Built once per batch; on CUDA it holds the small tables
/// (vertex ranges of each thread block's work) that let one launch sequence serve every mesh.
pub struct MeshBatch<'a> {
    basis: &'a Tensor,
    mass: &'a Tensor,
    evals: &'a Tensor,
    offsets: Vec<usize>,
    plan: Option<cuda::Plan>,
}

impl<'a> MeshBatch<'a> {
    /// `offsets[m]..offsets[m + 1]` are mesh m's rows: offsets start at 0, increase strictly (no
    /// empty mesh) and end at V, the rows of `basis`.
    pub fn new(basis: &'a Tensor, mass: &'a Tensor, evals: &'a Tensor, offsets: &[usize]) -> Result<Self> {
        Self::build(basis, mass, evals, offsets, None)
    }

    /// As `new`, with `chunk_rows` vertices per CUDA reduce chunk instead of the default (tests use
    /// it to cover several chunks per mesh at small sizes).
    pub(crate) fn with_chunk_rows(basis: &'a Tensor, mass: &'a Tensor, evals: &'a Tensor, offsets: &[usize], chunk_rows: usize) -> Result<Self> {
        Self::build(basis, mass, evals, offsets, Some(chunk_rows.max(1)))
    }

    fn build(basis: &'a Tensor, mass: &'a Tensor, evals: &'a Tensor, offsets: &[usize], chunk_rows: Option<usize>) -> Result<Self> {
        if offsets.len() < 2 {
            return Err(Error::Empty { arg: "offsets".into(), what: format!("{} offsets, i.e. no mesh in the batch", offsets.len()) });
        }
        let (v, k) = validate_mesh(basis, mass)?;
        if offsets[0] != 0 {
            return Err(Error::invalid("offsets", format!("expected offsets[0] = 0, got {}", offsets[0])));
        }
        if let Some(i) = (1..offsets.len()).find(|&i| offsets[i] <= offsets[i - 1]) {
            return Err(Error::invalid(
                "offsets",
                format!("expected strictly increasing offsets (every mesh has ≥ 1 vertex), got offsets[{}] = {} after {}", i, offsets[i], offsets[i - 1]),
            ));
        }
        if *offsets.last().unwrap() != v {
            return Err(Error::invalid("offsets", format!("expected the last offset to be V = rows of basis = {v}, got {}", offsets.last().unwrap())));
        }
        let m = offsets.len() - 1;
        validate::like("evals", evals, basis.device(), param_dtype(basis.dtype()), &[m, k], "(meshes, K)")?;
        let plan = match basis.device() {
            Device::Cuda(_) => Some(match chunk_rows {
                Some(rows) => cuda::Plan::with_chunk_rows(basis, offsets, rows)?,
                None => cuda::Plan::new(basis, offsets)?,
            }),
            Device::Cpu => None,
        };
        Ok(MeshBatch { basis, mass, evals, offsets: offsets.to_vec(), plan })
    }

    /// A batch from the vertex count of each mesh (offsets are their running sums).
    pub fn from_vertex_counts(basis: &'a Tensor, mass: &'a Tensor, evals: &'a Tensor, counts: &[usize]) -> Result<Self> {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        offsets.push(0usize);
        for &n in counts {
            let next = offsets.last().unwrap().checked_add(n).ok_or_else(|| Error::TooLarge { arg: "counts".into(), what: "the vertex counts overflow usize".into() })?;
            offsets.push(next);
        }
        MeshBatch::new(basis, mass, evals, &offsets)
    }

    pub fn meshes(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }
    pub fn vertices(&self) -> usize {
        *self.offsets.last().unwrap()
    }
    pub fn k(&self) -> usize {
        self.basis.dim(1)
    }

    pub(crate) fn view(&self) -> Meshes<'_> {
        Meshes { basis: self.basis, mass: self.mass, evals: self.evals, offsets: &self.offsets, plan: self.plan.as_ref(), batched: true }
    }
}

/// The mesh side of one call, validated: one mesh (`offsets = [0, V]`, no plan) or a batch.
pub(crate) struct Meshes<'a> {
    pub basis: &'a Tensor,
    pub mass: &'a Tensor,
    pub evals: &'a Tensor,
    pub offsets: &'a [usize],
    pub plan: Option<&'a cuda::Plan>,
    /// Whether spectral is M×K×C (a batch) or K×C (one mesh).
    pub batched: bool,
}

impl Meshes<'_> {
    pub fn v(&self) -> usize {
        self.basis.dim(0)
    }
    pub fn k(&self) -> usize {
        self.basis.dim(1)
    }
    pub fn meshes(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn dtype(&self) -> DType {
        self.basis.dtype()
    }
    pub fn device(&self) -> Device {
        self.basis.device()
    }
    pub fn spectral_shape(&self, c: usize) -> Vec<usize> {
        if self.batched {
            vec![self.meshes(), self.k(), c]
        } else {
            vec![self.k(), c]
        }
    }
    pub fn dims(&self, c: usize) -> reference::Dims<'_> {
        reference::Dims { k: self.k(), c, offsets: self.offsets }
    }
}

/// basis (V, K) and mass (V): non-empty, activation dtype, same device. Returns (V, K).
fn validate_mesh(basis: &Tensor, mass: &Tensor) -> Result<(usize, usize)> {
    validate::rank("basis", basis, 2, "(V, K)")?;
    validate::non_empty("basis", basis)?;
    validate::activation_dtype("basis", basis)?;
    let (v, k) = (basis.dim(0), basis.dim(1));
    if basis.device().is_cuda() && k > MAX_K_CUDA {
        return Err(Error::shape("basis", format!("(V, K) with K ≤ {MAX_K_CUDA} on CUDA"), basis.shape()));
    }
    validate::device("mass", mass, basis.device())?;
    validate::dtype("mass", mass, basis.dtype())?;
    validate::shape("mass", mass, &[v], "(V) with V = rows of basis")?;
    Ok((v, k))
}

/// x (V, C) like basis, times (C) of the parameter dtype. Returns C.
fn validate_x_times(m: &Meshes, x: &Tensor, times: &Tensor) -> Result<usize> {
    validate::rank("x", x, 2, "(V, C)")?;
    validate::non_empty("x", x)?;
    validate::device("x", x, m.device())?;
    validate::dtype("x", x, m.dtype())?;
    if x.dim(0) != m.v() {
        return Err(Error::shape("x", format!("(V, C) with V = rows of basis = {}", m.v()), x.shape()));
    }
    let c = x.dim(1);
    validate_times(m, times, c)?;
    Ok(c)
}

fn validate_times(m: &Meshes, times: &Tensor, c: usize) -> Result<()> {
    validate::like("times", times, m.device(), param_dtype(m.dtype()), &[c], "(C) with C = channels")
}

fn single<'a>(basis: &'a Tensor, mass: &'a Tensor, evals: &'a Tensor, offsets: &'a mut [usize; 2]) -> Result<Meshes<'a>> {
    let (v, k) = validate_mesh(basis, mass)?;
    validate::like("evals", evals, basis.device(), param_dtype(basis.dtype()), &[k], "(K) with K = columns of basis")?;
    *offsets = [0, v];
    let offsets: &'a [usize; 2] = offsets;
    Ok(Meshes { basis, mass, evals, offsets, plan: None, batched: false })
}

/// Forward on one mesh: `out` = basis·spectral and `spectral` = exp(−evals⊗times) ⊙ basisᵀ(mass⊙x).
pub fn forward(x: &Tensor, basis: &Tensor, mass: &Tensor, evals: &Tensor, times: &Tensor) -> Result<Forward> {
    let mut offsets = [0; 2];
    let m = single(basis, mass, evals, &mut offsets)?;
    forward_impl(&m, x, times)
}

/// Backward on one mesh: d_x and d_times from d_out and an optional d_spectral (K×C, activation
/// dtype), given what `forward` returned for the same inputs.
#[allow(clippy::too_many_arguments)]
pub fn backward(basis: &Tensor, mass: &Tensor, evals: &Tensor, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
    let mut offsets = [0; 2];
    let m = single(basis, mass, evals, &mut offsets)?;
    backward_impl(&m, times, fwd, d_out, d_spectral)
}

/// Forward on every mesh of `batch` in one launch sequence; spectral is M×K×C.
pub fn forward_batch(batch: &MeshBatch, x: &Tensor, times: &Tensor) -> Result<Forward> {
    forward_impl(&batch.view(), x, times)
}

/// Backward on every mesh of `batch`; d_spectral (if any) is M×K×C; d_times sums over the meshes.
pub fn backward_batch(batch: &MeshBatch, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
    backward_impl(&batch.view(), times, fwd, d_out, d_spectral)
}

fn forward_impl(m: &Meshes, x: &Tensor, times: &Tensor) -> Result<Forward> {
    let c = validate_x_times(m, x, times)?;
    match m.device() {
        Device::Cpu if m.dtype() == DType::F64 => {
            let (out, spectral) = reference::forward(
                x.as_slice()?,
                m.basis.as_slice()?,
                m.mass.as_slice()?,
                m.evals.as_slice()?,
                times.as_slice()?,
                m.dims(c),
            );
            let out = Tensor::from_vec(out, x.shape())?;
            let spectral = Tensor::from_vec(spectral, &m.spectral_shape(c))?;
            let saved = spectral.try_clone()?.reshape(&[m.meshes(), m.k(), c])?;
            Ok(Forward { out, spectral, saved })
        }
        Device::Cpu => cpu::forward(m, x, times),
        Device::Cuda(_) => cuda::forward(m, x, times),
    }
}

fn backward_impl(m: &Meshes, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
    validate::rank("d_out", d_out, 2, "(V, C)")?;
    validate::device("d_out", d_out, m.device())?;
    validate::dtype("d_out", d_out, m.dtype())?;
    let c = d_out.dim(1);
    validate::shape("d_out", d_out, &[m.v(), c], "(V, C) with V = rows of basis")?;
    validate::non_empty("d_out", d_out)?;
    validate_times(m, times, c)?;
    validate::like("fwd.out", &fwd.out, m.device(), m.dtype(), &[m.v(), c], "(V, C), the forward's out for these inputs")?;
    validate::like("fwd.spectral", &fwd.spectral, m.device(), m.dtype(), &m.spectral_shape(c), "the forward's spectral for these inputs")?;
    validate::like("fwd.saved", &fwd.saved, m.device(), param_dtype(m.dtype()), &[m.meshes(), m.k(), c], "(M, K, C)")?;
    if let Some(ds) = d_spectral {
        validate::like("d_spectral", ds, m.device(), m.dtype(), &m.spectral_shape(c), "the shape of spectral")?;
    }
    match m.device() {
        Device::Cpu if m.dtype() == DType::F64 => {
            let ds = d_spectral.map(|t| t.as_slice::<f64>()).transpose()?;
            let (d_x, d_times) = reference::backward(
                m.basis.as_slice()?,
                m.mass.as_slice()?,
                m.evals.as_slice()?,
                times.as_slice()?,
                fwd.saved.as_slice()?,
                d_out.as_slice()?,
                ds,
                m.dims(c),
            );
            Ok(Grads { d_x: Tensor::from_vec(d_x, d_out.shape())?, d_times: Tensor::from_vec(d_times, &[c])? })
        }
        Device::Cpu => cpu::backward(m, times, fwd, d_out, d_spectral),
        Device::Cuda(_) => cuda::backward(m, times, fwd, d_out, d_spectral),
    }
}

/// DiffusionNet's `LearnedTimeDiffusion` layer (method 'spectral'): it owns the learned diffusion
/// times (C; f32, or f64 with f64 activations) and, like DiffusionNet, clamps them in place to
/// ≥ [`MIN_TIME`] before every forward; backward's d_times is the gradient at the clamped times.
#[derive(Debug)]
pub struct LearnedTimeDiffusion {
    pub times: Tensor,
}

impl LearnedTimeDiffusion {
    pub fn new(times: Tensor) -> Result<Self> {
        validate::rank("times", &times, 1, "(C)")?;
        validate::non_empty("times", &times)?;
        if !matches!(times.dtype(), DType::F32 | DType::F64) {
            return Err(Error::dtype("times", "f32 (or f64 for the CPU reference)", times.dtype()));
        }
        Ok(LearnedTimeDiffusion { times })
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.times.dim(0)
    }

    /// Clamp the times to ≥ MIN_TIME in place (what DiffusionNet does under `no_grad`).
    pub fn clamp_times(&mut self) -> Result<()> {
        match self.times.device() {
            Device::Cpu => {
                match self.times.dtype() {
                    // `t < min` leaves NaN as NaN, like torch.clamp.
                    DType::F64 => self.times.as_mut_slice::<f64>()?.iter_mut().filter(|t| **t < MIN_TIME).for_each(|t| *t = MIN_TIME),
                    _ => self.times.as_mut_slice::<f32>()?.iter_mut().filter(|t| **t < MIN_TIME as f32).for_each(|t| *t = MIN_TIME as f32),
                }
                Ok(())
            }
            Device::Cuda(_) => cuda::clamp_min(&self.times, MIN_TIME as f32),
        }
    }

    pub fn forward(&mut self, x: &Tensor, basis: &Tensor, mass: &Tensor, evals: &Tensor) -> Result<Forward> {
        validate::device("times", &self.times, x.device())?;
        self.clamp_times()?;
        forward(x, basis, mass, evals, &self.times)
    }

    pub fn backward(&self, basis: &Tensor, mass: &Tensor, evals: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
        backward(basis, mass, evals, &self.times, fwd, d_out, d_spectral)
    }

    pub fn forward_batch(&mut self, batch: &MeshBatch, x: &Tensor) -> Result<Forward> {
        validate::device("times", &self.times, x.device())?;
        self.clamp_times()?;
        forward_batch(batch, x, &self.times)
    }

    pub fn backward_batch(&self, batch: &MeshBatch, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
        backward_batch(batch, &self.times, fwd, d_out, d_spectral)
    }
}
