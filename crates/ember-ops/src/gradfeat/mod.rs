//! Spatial gradient features: DiffusionNet's `SpatialGradientFeatures` layer, fused, forward and
//! backward.
//!
//! Each vertex carries a tangent gradient per channel, a complex number g = g_re + i·g_im. The layer
//! maps the channels of g through a learned complex (or real) C×C matrix and keeps the real part of
//! conj(g)·b, squashed by tanh:
//!
//! - spectral form (the input is DiffusionNet's spectral output): x (K×C spectral coefficients) and
//!   the per-mesh operators grads_re, grads_im (V×K: gradX·basis, gradY·basis) give
//!   g_re = grads_re·x, g_im = grads_im·x (V×C);
//! - vertex form: g_re, g_im (V×C) are given directly (for users who apply sparse gradX/gradY
//!   themselves);
//! - with rotations (weights A_re, A_im, C×C): b_re = g_re·A_reᵀ − g_im·A_imᵀ,
//!   b_im = g_im·A_reᵀ + g_re·A_imᵀ; without (one matrix A): b_re = g_re·Aᵀ, b_im = g_im·Aᵀ;
//! - out = tanh(g_re ⊙ b_re + g_im ⊙ b_im)   (V×C).
//!
//! Backward, with ds = d_out ⊙ (1 − out²), P = ds ⊙ g_re, Q = ds ⊙ g_im (the gradients of b_re, b_im):
//! - d_g_re = ds ⊙ b_re + P·A_re + Q·A_im,   d_g_im = ds ⊙ b_im − P·A_im + Q·A_re
//!   (without rotations: d_g_re = ds ⊙ b_re + P·A, d_g_im = ds ⊙ b_im + Q·A);
//! - d_A_re = Pᵀ·g_re + Qᵀ·g_im,   d_A_im = Qᵀ·g_re − Pᵀ·g_im   (without: d_A = Pᵀ·g_re + Qᵀ·g_im);
//! - spectral form: d_x = grads_reᵀ·d_g_re + grads_imᵀ·d_g_im.
//!
//! Batches of meshes (spectral form): x is M×K×C (one K×C block per mesh), the rows of grads_re and
//! grads_im of all meshes are concatenated (V = total vertices), and `mesh_offsets` (M+1 entries,
//! from 0 to V, non-decreasing) says which rows belong to which mesh; A is shared, so d_A sums over
//! all meshes and d_x is M×K×C. A mesh may have no vertices (its d_x is zero).
//!
//! dtypes f32, f16, bf16 (accumulation in f32; the CUDA kernels run 16-bit inputs on tensor cores and
//! f32 inputs as three bf16 products of split values, ~5e-6 relative and held to the 3e-4 of f32 on
//! tensor cores — `EMBER_GRADFEAT_F32=tf32x3` takes three TF32 passes instead, ~1e-7 at 1.5× the
//! time; `crate::f32_products`); f64 on the CPU runs the reference.
//! `backward` recomputes g and b rather than keeping V×C intermediates from `forward`. For training,
//! `forward_train` + `backward_from` trade memory for time where the CUDA kernels support it and it
//! pays (Hopper, 16-bit inputs, spectral form, K and C multiples of 8, 128 < C ≤ 256): the forward
//! also writes b_re, b_im (2·C values per vertex in the input dtype, as tile images) and the backward
//! reads them instead of recomputing b — a third of the backward's map-kernel products (NOTES.md, v13). b is then rounded
//! to the input dtype before ds and ds·b are formed (the recomputing backward keeps it in f32).
//! Elsewhere `forward_train` keeps nothing and `backward_from` recomputes.
//!
//! CUDA: the forward is one kernel per tile of vertices (g on chip, the C×C map, dot and tanh in the
//! epilogue: nothing but `out` goes to device memory); on Hopper (sm_90a) its channel map runs on
//! wgmma, elsewhere on mma.sync. The backward of 16-bit inputs with C ≤ 256 on Hopper runs the staged
//! map kernel of `staged.cu` (g, b, ds, P, Q and d_g on wgmma in one kernel) followed by deterministic
//! reductions over vertices for d_A and d_x; by default (`packed-img`, NOTES.md v6 and v11) the map
//! kernel writes the d_A operands and d_g as tile images, reduced on wgmma without bounds (d_x in one
//! wave, all channels per CTA) where its `_sv` entries apply (spectral form, K and C multiples of 8),
//! else d_A and d_x on mma.sync split-K (`packed`);
//! elsewhere one fused kernel (g, b, ds, P, Q, d_g) takes the map kernel's place.
//! `EMBER_GRADFEAT_BWD=fused` forces the fused backward, `packed` the mma.sync d_A, `staged` runs
//! the reductions on wgmma with bounds checks; `EMBER_GRADFEAT_TILES=wide` or `narrow` selects other
//! mma.sync tile families (all measured in NOTES.md); `EMBER_GRADFEAT_FWD=staged` runs the forward as
//! the map kernel's first two stages. The on-chip
//! tiles bound C on CUDA (about 640 for 16-bit inputs and the f32 forward, 384 for the f32 backward on
//! Hopper); larger C is an error that says so.

pub mod cpu;
pub mod cuda;
pub mod reference;
pub mod staged;
mod suite;
#[cfg(test)]
mod tests;

use crate::harness::validate;
use ember_core::{DType, Device, Error, Result, Tensor};

pub use suite::Family;

/// What the layer reads per vertex.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// x: (K, C), or (M, K, C) for a batch of M meshes; grads_re, grads_im: (V, K). `mesh_offsets`
    /// (M+1 entries from 0 to V) is required for a batch; for a single mesh it may be `None`.
    Spectral { x: &'a Tensor, grads_re: &'a Tensor, grads_im: &'a Tensor, mesh_offsets: Option<&'a [usize]> },
    /// g_re, g_im: (V, C), the per-vertex tangent gradients.
    Vertex { g_re: &'a Tensor, g_im: &'a Tensor },
}

/// The learned channel map, shared by every mesh.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    /// A complex C×C matrix A_re + i·A_im (DiffusionNet's `with_gradient_rotations=True`).
    Rotation { a_re: &'a Tensor, a_im: &'a Tensor },
    /// One real C×C matrix (`with_gradient_rotations=False`).
    Plain { a: &'a Tensor },
}

/// The forward result. `backward` needs nothing from it: it recomputes g and b; `backward_from`
/// uses what `forward_train` saved.
#[derive(Debug)]
pub struct Forward {
    /// (V, C).
    pub out: Tensor,
    /// What `forward_train` kept for `backward_from` (None from `forward`, and where the saved path
    /// does not apply).
    pub saved: Option<Saved>,
}

/// The training forward's b_re, b_im as the map kernel's tile images (row tile t: GS_BM rows × the
/// padded channels, in the map kernel's accumulator-fragment order), with the problem they belong to.
#[derive(Debug)]
pub struct Saved {
    problem: Problem,
    b_re: Tensor,
    b_im: Tensor,
}

impl Saved {
    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        (self.b_re.numel() + self.b_im.numel()) * self.b_re.dtype().size()
    }
}

/// Gradient with respect to the input, in the input's form.
#[derive(Debug)]
pub enum InputGrads {
    /// d_x, shaped like x.
    Spectral { d_x: Tensor },
    Vertex { d_g_re: Tensor, d_g_im: Tensor },
}

/// Gradient with respect to the weights, in the weights' form.
#[derive(Debug)]
pub enum WeightGrads {
    Rotation { d_a_re: Tensor, d_a_im: Tensor },
    Plain { d_a: Tensor },
}

#[derive(Debug)]
pub struct Grads {
    pub input: InputGrads,
    pub weights: WeightGrads,
}

/// A validated problem: sizes, mesh layout, dtype and device of every tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Total vertices (rows of grads or g).
    pub v: usize,
    /// Spectral coefficients per mesh (0 in the vertex form).
    pub k: usize,
    /// Channels.
    pub c: usize,
    /// Row offsets of the meshes, M+1 entries from 0 to V (one mesh: [0, V]).
    pub offsets: Vec<usize>,
    /// Whether x was given as (M, K, C) rather than (K, C).
    pub batched: bool,
    pub spectral: bool,
    pub rotation: bool,
    pub dtype: DType,
    pub device: Device,
}

impl Problem {
    pub fn meshes(&self) -> usize {
        self.offsets.len() - 1
    }
    /// The shape of x (and d_x).
    pub fn x_shape(&self) -> Vec<usize> {
        if self.batched {
            vec![self.meshes(), self.k, self.c]
        } else {
            vec![self.k, self.c]
        }
    }
}

fn first_tensor<'a>(input: &Input<'a>) -> (&'static str, &'a Tensor) {
    match input {
        Input::Spectral { grads_re, .. } => ("grads_re", grads_re),
        Input::Vertex { g_re, .. } => ("g_re", g_re),
    }
}

/// Check every tensor (shapes, dtype, device, sizes, mesh offsets) and describe the problem.
pub fn validate(input: &Input, weights: &Weights) -> Result<Problem> {
    let (name0, t0) = first_tensor(input);
    validate::activation_dtype(name0, t0)?;
    let (dtype, device) = (t0.dtype(), t0.device());
    let same = |arg: &str, t: &Tensor| -> Result<()> {
        validate::device(arg, t, device)?;
        validate::dtype(arg, t, dtype)?;
        validate::non_empty(arg, t)
    };
    let (v, k, c, offsets, batched, spectral) = match *input {
        Input::Spectral { x, grads_re, grads_im, mesh_offsets } => {
            for (arg, t) in [("grads_re", grads_re), ("grads_im", grads_im), ("x", x)] {
                same(arg, t)?;
            }
            validate::rank("grads_re", grads_re, 2, "(V, K)")?;
            let (v, k) = (grads_re.dim(0), grads_re.dim(1));
            validate::shape("grads_im", grads_im, &[v, k], "the shape of grads_re (V, K)")?;
            let (batched, meshes, xk, c) = match x.dims() {
                2 => (false, 1, x.dim(0), x.dim(1)),
                3 => (true, x.dim(0), x.dim(1), x.dim(2)),
                _ => return Err(Error::shape("x", "2 dimensions (K, C) or 3 dimensions (M, K, C)", x.shape())),
            };
            if xk != k {
                let what = if batched { format!("(M, K, C) with K = {k} (the columns of grads_re)") } else { format!("(K, C) with K = {k} (the columns of grads_re)") };
                return Err(Error::shape("x", what, x.shape()));
            }
            let offsets = match (mesh_offsets, batched) {
                (Some(o), _) => o.to_vec(),
                (None, false) => vec![0, v],
                (None, true) => return Err(Error::invalid("mesh_offsets", format!("expected {} offsets for the {meshes} meshes of x, got none", meshes + 1))),
            };
            check_offsets(&offsets, meshes, v)?;
            (v, k, c, offsets, batched, true)
        }
        Input::Vertex { g_re, g_im } => {
            same("g_re", g_re)?;
            same("g_im", g_im)?;
            validate::rank("g_re", g_re, 2, "(V, C)")?;
            let (v, c) = (g_re.dim(0), g_re.dim(1));
            validate::shape("g_im", g_im, &[v, c], "the shape of g_re (V, C)")?;
            (v, 0, c, vec![0, v], false, false)
        }
    };
    let rotation = match *weights {
        Weights::Rotation { a_re, a_im } => {
            for (arg, t) in [("a_re", a_re), ("a_im", a_im)] {
                same(arg, t)?;
                validate::shape(arg, t, &[c, c], "(C, C)")?;
            }
            true
        }
        Weights::Plain { a } => {
            same("a", a)?;
            validate::shape("a", a, &[c, c], "(C, C)")?;
            false
        }
    };
    // Every count the kernels form (V·C, V·K, M·K·C, C·C) must fit in i64 for 64-bit indexing.
    let fits = |n: Option<usize>| n.is_some_and(|n| n <= i64::MAX as usize / 8);
    if !fits(v.checked_mul(c)) || !fits(v.checked_mul(k)) || !fits(c.checked_mul(c)) {
        return Err(Error::TooLarge { arg: name0.into(), what: format!("V = {v}, K = {k}, C = {c}: element counts overflow 64-bit indexing") });
    }
    Ok(Problem { v, k, c, offsets, batched, spectral, rotation, dtype, device })
}

fn check_offsets(offsets: &[usize], meshes: usize, v: usize) -> Result<()> {
    if offsets.len() != meshes + 1 {
        return Err(Error::invalid("mesh_offsets", format!("expected {} entries (meshes + 1), got {}", meshes + 1, offsets.len())));
    }
    if offsets[0] != 0 || offsets[meshes] != v {
        return Err(Error::invalid("mesh_offsets", format!("expected offsets from 0 to V = {v}, got {offsets:?}")));
    }
    if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::invalid("mesh_offsets", format!("expected non-decreasing offsets, got {} then {} at entries {i} and {}", offsets[i], offsets[i + 1], i + 1)));
    }
    Ok(())
}

/// out = tanh(g_re ⊙ b_re + g_im ⊙ b_im), (V, C). On CUDA, `EMBER_GRADFEAT_FWD` picks the kernels
/// (see [`cuda::FwdVariant`]).
pub fn forward(input: &Input, weights: &Weights) -> Result<Forward> {
    forward_with(input, weights, cuda::FwdVariant::from_env())
}

/// `forward` through the given CUDA variant (the CPU paths ignore it).
pub fn forward_with(input: &Input, weights: &Weights, variant: cuda::FwdVariant) -> Result<Forward> {
    let p = validate(input, weights)?;
    let out = match p.device {
        Device::Cpu if p.dtype == DType::F64 => reference_forward(&p, input, weights)?,
        Device::Cpu => cpu::forward(&p, input, weights)?,
        Device::Cuda(_) => cuda::forward(&p, input, weights, variant)?,
    };
    Ok(Forward { out, saved: None })
}

/// The training forward: `forward`'s out (the same bits), and, where the saved path applies (see the
/// module docs; `EMBER_GRADFEAT_SAVE=0` turns it off), b_re and b_im for `backward_from`.
pub fn forward_train(input: &Input, weights: &Weights) -> Result<Forward> {
    let save = ember_core::knob("EMBER_GRADFEAT_SAVE") != Some("0");
    forward_train_with(input, weights, save)
}

/// `forward_train`, saving b only when `save` is set (and the saved path applies).
pub fn forward_train_with(input: &Input, weights: &Weights, save: bool) -> Result<Forward> {
    let p = validate(input, weights)?;
    if save && cuda::saves_b(&p)? {
        let dev = first_tensor(input).1.cuda_device()?.clone();
        let (out, b_re, b_im) = staged::forward_save(&dev, &p, input, weights)?;
        return Ok(Forward { out, saved: Some(Saved { problem: p, b_re, b_im }) });
    }
    forward(input, weights)
}

/// The backward of a training step: through `forward.saved` when `forward_train` kept b (the same
/// inputs and weights must be passed as to it), else as `backward`.
pub fn backward_from(forward: &Forward, input: &Input, weights: &Weights, d_out: &Tensor) -> Result<Grads> {
    backward_from_with(forward, input, weights, d_out, cuda::BwdVariant::from_env())
}

/// `backward_from` taking d_A as `variant` does (see [`cuda::BwdVariant`]: factored through x or from
/// g's images) where b was saved; else `backward_with` of `variant`.
pub fn backward_from_with(forward: &Forward, input: &Input, weights: &Weights, d_out: &Tensor, variant: cuda::BwdVariant) -> Result<Grads> {
    let Some(saved) = &forward.saved else { return backward_with(input, weights, d_out, variant) };
    let p = validate(input, weights)?;
    validate::like("d_out", d_out, p.device, p.dtype, &[p.v, p.c], "(V, C)")?;
    if saved.problem != p {
        return Err(Error::invalid("forward", format!("saved b of a forward of another problem: expected V = {}, K = {}, C = {}, {} meshes, {} on {}, got V = {}, K = {}, C = {}, {} meshes, {} on {}", p.v, p.k, p.c, p.meshes(), p.dtype, p.device, saved.problem.v, saved.problem.k, saved.problem.c, saved.problem.meshes(), saved.problem.dtype, saved.problem.device)));
    }
    let dev = d_out.cuda_device()?.clone();
    staged::backward(&dev, &p, input, weights, d_out, staged::Reductions::MmaSync, true, true, false, Some((&saved.b_re, &saved.b_im)), variant.factors(&p))
}

/// Gradients of Σ d_out ⊙ out with respect to the input (x, or g_re and g_im) and the weights.
/// `d_out` must be (V, C) with the inputs' dtype and device. On CUDA, `EMBER_GRADFEAT_BWD` picks the
/// kernels (see [`cuda::BwdVariant`]).
pub fn backward(input: &Input, weights: &Weights, d_out: &Tensor) -> Result<Grads> {
    backward_with(input, weights, d_out, cuda::BwdVariant::from_env())
}

/// `backward` through the given CUDA variant (the CPU paths ignore it).
pub fn backward_with(input: &Input, weights: &Weights, d_out: &Tensor, variant: cuda::BwdVariant) -> Result<Grads> {
    let p = validate(input, weights)?;
    validate::like("d_out", d_out, p.device, p.dtype, &[p.v, p.c], "(V, C)")?;
    match p.device {
        Device::Cpu if p.dtype == DType::F64 => reference_backward(&p, input, weights, d_out),
        Device::Cpu => cpu::backward(&p, input, weights, d_out),
        Device::Cuda(_) => cuda::backward(&p, input, weights, d_out, variant),
    }
}

/// The f64 tensors of a problem as plain vectors.
struct Values {
    g_re: Vec<f64>,
    g_im: Vec<f64>,
    w_re: Vec<f64>,
    w_im: Option<Vec<f64>>,
}

fn values(p: &Problem, input: &Input, weights: &Weights) -> Result<Values> {
    let (g_re, g_im) = match *input {
        Input::Spectral { x, grads_re, grads_im, .. } => {
            let x = x.to_vec_f64()?;
            (
                reference::spectral_g(&grads_re.to_vec_f64()?, &x, &p.offsets, p.k, p.c),
                reference::spectral_g(&grads_im.to_vec_f64()?, &x, &p.offsets, p.k, p.c),
            )
        }
        Input::Vertex { g_re, g_im } => (g_re.to_vec_f64()?, g_im.to_vec_f64()?),
    };
    let (w_re, w_im) = match *weights {
        Weights::Rotation { a_re, a_im } => (a_re.to_vec_f64()?, Some(a_im.to_vec_f64()?)),
        Weights::Plain { a } => (a.to_vec_f64()?, None),
    };
    Ok(Values { g_re, g_im, w_re, w_im })
}

impl Values {
    fn w(&self) -> reference::W<'_> {
        match &self.w_im {
            Some(im) => reference::W::Rotation { re: &self.w_re, im },
            None => reference::W::Plain(&self.w_re),
        }
    }
}

fn reference_forward(p: &Problem, input: &Input, weights: &Weights) -> Result<Tensor> {
    let val = values(p, input, weights)?;
    Tensor::from_vec(reference::forward(&val.g_re, &val.g_im, &val.w(), p.c), &[p.v, p.c])
}

fn reference_backward(p: &Problem, input: &Input, weights: &Weights, d_out: &Tensor) -> Result<Grads> {
    let val = values(p, input, weights)?;
    let r = reference::backward(&val.g_re, &val.g_im, &val.w(), &d_out.to_vec_f64()?, p.c);
    let input_grads = match *input {
        Input::Spectral { grads_re, grads_im, .. } => {
            let d_x = reference::spectral_dx(&grads_re.to_vec_f64()?, &grads_im.to_vec_f64()?, &r.d_g_re, &r.d_g_im, &p.offsets, p.k, p.c);
            InputGrads::Spectral { d_x: Tensor::from_vec(d_x, &p.x_shape())? }
        }
        Input::Vertex { .. } => {
            InputGrads::Vertex { d_g_re: Tensor::from_vec(r.d_g_re, &[p.v, p.c])?, d_g_im: Tensor::from_vec(r.d_g_im, &[p.v, p.c])? }
        }
    };
    let weight_grads = match r.d_w_im {
        Some(d_a_im) => WeightGrads::Rotation { d_a_re: Tensor::from_vec(r.d_w_re, &[p.c, p.c])?, d_a_im: Tensor::from_vec(d_a_im, &[p.c, p.c])? },
        None => WeightGrads::Plain { d_a: Tensor::from_vec(r.d_w_re, &[p.c, p.c])? },
    };
    Ok(Grads { input: input_grads, weights: weight_grads })
}
