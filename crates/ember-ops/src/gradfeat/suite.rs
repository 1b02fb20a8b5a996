//! Spatial gradient features' `ember check` cases and `ember bench` rows.

use super::cuda::{BwdVariant, FwdVariant};
use super::{backward, backward_from, backward_from_with, backward_with, cuda, forward, forward_train_with, forward_with, reference, staged, validate, Grads, Input, InputGrads, WeightGrads, Weights};
use crate::harness::bench::{params, BenchCtx, BenchRow};
use crate::harness::check::{compare, property, CheckCtx, CheckRow, Tier};
use crate::KernelBuild;
use ember_core::{rng, DType, Device, Error, Result, Tensor};
use rayon::prelude::*;
use serde_json::json;

pub struct Family;

/// One problem shape: V rows split into meshes by `offsets`, K spectral coefficients (spectral form),
/// C channels.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub offsets: Vec<usize>,
    pub k: usize,
    pub c: usize,
    pub spectral: bool,
    pub rotation: bool,
    /// x given as (M, K, C) with offsets (else (K, C), one mesh).
    pub batched: bool,
}

impl Case {
    pub fn new(v: usize, k: usize, c: usize, spectral: bool, rotation: bool) -> Case {
        Case { offsets: vec![0, v], k, c, spectral, rotation, batched: false }
    }
    pub fn batch(offsets: &[usize], k: usize, c: usize, rotation: bool) -> Case {
        Case { offsets: offsets.to_vec(), k, c, spectral: true, rotation, batched: true }
    }
    pub fn v(&self) -> usize {
        *self.offsets.last().unwrap()
    }
    pub fn name(&self) -> String {
        let form = if self.spectral { "spec" } else { "vert" };
        let rot = if self.rotation { "rot" } else { "plain" };
        let m = if self.batched { format!(" M={}", self.offsets.len() - 1) } else { String::new() };
        let k = if self.spectral { format!(" K={}", self.k) } else { String::new() };
        format!("{form} {rot} V={}{k} C={}{m}", self.v(), self.c)
    }
}

/// The tensors of one case, on the CPU in the op's dtype (drawn so that tanh's argument is O(1):
/// g ~ N(0, 1) per entry, b likewise), with their exact f64 values.
pub(crate) struct Data {
    pub x: Tensor,
    pub grads_re: Tensor,
    pub grads_im: Tensor,
    pub g_re: Tensor,
    pub g_im: Tensor,
    pub a_re: Tensor,
    pub a_im: Tensor,
    pub d_out: Tensor,
}

fn randn(shape: &[usize], scale: f64, dtype: DType, seed: u64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).into_par_iter().with_min_len(4096).map(|i| scale * rng::normal(seed, i as u64)).collect();
    Tensor::from_f64(&v, shape, dtype, Device::Cpu)
}

impl Data {
    /// Normal draws on the CPU (exact, reproducible: the check cases). Tensors the case's form does
    /// not read are one-element placeholders.
    pub fn new(case: &Case, dtype: DType, seed: u64) -> Result<Data> {
        Data::draw(case, |shape, scale, s| randn(shape, scale, dtype, seed + s))
    }

    /// Uniform draws with the same variances, made on `device` (fast at benchmark sizes).
    pub fn bench(case: &Case, dtype: DType, device: Device, seed: u64) -> Result<Data> {
        Data::draw(case, |shape, scale, s| {
            let half_width = (3.0f64).sqrt() * scale;
            Tensor::rand(shape, -half_width as f32, half_width as f32, dtype, device, seed + s)
        })
    }

    fn draw(case: &Case, mut make: impl FnMut(&[usize], f64, u64) -> Result<Tensor>) -> Result<Data> {
        let (v, k, c, m) = (case.v(), case.k.max(1), case.c, case.offsets.len() - 1);
        let x_shape = if case.batched { vec![m, k, c] } else { vec![k, c] };
        // Rotations sum 2C products per entry of b, the plain map C.
        let a_scale = 1.0 / ((if case.rotation { 2 } else { 1 } * c) as f64).sqrt();
        let (sp, vx) = (case.spectral, !case.spectral);
        let mut pick = |used: bool, shape: &[usize], scale: f64, s: u64| if used { make(shape, scale, s) } else { make(&[1], scale, s) };
        Ok(Data {
            x: pick(sp, &x_shape, 1.0 / (k as f64).sqrt(), 0)?,
            grads_re: pick(sp, &[v, k], 1.0, 1)?,
            grads_im: pick(sp, &[v, k], 1.0, 2)?,
            g_re: pick(vx, &[v, c], 1.0, 3)?,
            g_im: pick(vx, &[v, c], 1.0, 4)?,
            a_re: pick(true, &[c, c], a_scale, 5)?,
            a_im: pick(case.rotation, &[c, c], a_scale, 6)?,
            d_out: pick(true, &[v, c], 1.0, 7)?,
        })
    }

    pub fn to_device(&self, device: Device) -> Result<Data> {
        Ok(Data {
            x: self.x.to_device(device)?,
            grads_re: self.grads_re.to_device(device)?,
            grads_im: self.grads_im.to_device(device)?,
            g_re: self.g_re.to_device(device)?,
            g_im: self.g_im.to_device(device)?,
            a_re: self.a_re.to_device(device)?,
            a_im: self.a_im.to_device(device)?,
            d_out: self.d_out.to_device(device)?,
        })
    }

    pub fn input<'a>(&'a self, case: &'a Case) -> Input<'a> {
        if case.spectral {
            Input::Spectral { x: &self.x, grads_re: &self.grads_re, grads_im: &self.grads_im, mesh_offsets: case.batched.then_some(&case.offsets[..]) }
        } else {
            Input::Vertex { g_re: &self.g_re, g_im: &self.g_im }
        }
    }

    pub fn weights<'a>(&'a self, case: &Case) -> Weights<'a> {
        if case.rotation {
            Weights::Rotation { a_re: &self.a_re, a_im: &self.a_im }
        } else {
            Weights::Plain { a: &self.a_re }
        }
    }
}

/// The f64 reference's outputs of a case: out, then the gradients in the order `grad_list` gives.
pub(crate) fn reference_outputs(case: &Case, d: &Data) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let c = case.c;
    let (g_re, g_im, gr, gi) = if case.spectral {
        let (x, gr, gi) = (d.x.to_vec_f64()?, d.grads_re.to_vec_f64()?, d.grads_im.to_vec_f64()?);
        (reference::spectral_g(&gr, &x, &case.offsets, case.k, c), reference::spectral_g(&gi, &x, &case.offsets, case.k, c), gr, gi)
    } else {
        (d.g_re.to_vec_f64()?, d.g_im.to_vec_f64()?, vec![], vec![])
    };
    let (a_re, a_im) = (d.a_re.to_vec_f64()?, d.a_im.to_vec_f64()?);
    let w = if case.rotation { reference::W::Rotation { re: &a_re, im: &a_im } } else { reference::W::Plain(&a_re) };
    let out = reference::forward(&g_re, &g_im, &w, c);
    let r = reference::backward(&g_re, &g_im, &w, &d.d_out.to_vec_f64()?, c);
    let mut v = vec![("out", out)];
    if case.spectral {
        v.push(("d_x", reference::spectral_dx(&gr, &gi, &r.d_g_re, &r.d_g_im, &case.offsets, case.k, c)));
    } else {
        v.push(("d_g_re", r.d_g_re));
        v.push(("d_g_im", r.d_g_im));
    }
    match r.d_w_im {
        Some(im) => {
            v.push(("d_a_re", r.d_w_re));
            v.push(("d_a_im", im));
        }
        None => v.push(("d_a", r.d_w_re)),
    }
    Ok(v)
}

/// The op's gradients in the order of `reference_outputs`.
pub(crate) fn grad_list(g: Grads) -> Vec<Tensor> {
    let mut v = match g.input {
        InputGrads::Spectral { d_x } => vec![d_x],
        InputGrads::Vertex { d_g_re, d_g_im } => vec![d_g_re, d_g_im],
    };
    match g.weights {
        WeightGrads::Rotation { d_a_re, d_a_im } => v.extend([d_a_re, d_a_im]),
        WeightGrads::Plain { d_a } => v.push(d_a),
    }
    v
}

/// The backward variants to check or time on the inputs' device, each with the suffix of its rows'
/// case names: on the CPU the one path; on CUDA every variant that runs the problem as itself.
/// Whether a bench row is timed: `EMBER_GRADFEAT_BENCH_ONLY` (for profiling one configuration under
/// a profiler) holds `key=value` tokens that must all equal the row's params (`V=524288`,
/// `bwd=staged`), its pass (`pass=fwd+bwd`) or its dtype (`dtype=bf16`); unset or empty: every row.
fn bench_selected(params: &serde_json::Map<String, serde_json::Value>, dtype: DType, backward: bool) -> bool {
    let only = std::env::var("EMBER_GRADFEAT_BENCH_ONLY").unwrap_or_default();
    row_selected(&only, params, dtype, backward)
}

pub(crate) fn row_selected(only: &str, params: &serde_json::Map<String, serde_json::Value>, dtype: DType, backward: bool) -> bool {
    only.split_whitespace().all(|tok| {
        let Some((k, want)) = tok.split_once('=') else { return false };
        match k {
            "pass" => want == if backward { "fwd+bwd" } else { "fwd" },
            "dtype" => want == dtype.name(),
            _ => params.get(k).is_some_and(|v| match v {
                serde_json::Value::String(s) => s == want,
                other => *other == want.parse::<serde_json::Value>().unwrap_or(serde_json::Value::Null),
            }),
        }
    })
}

fn bwd_variants(input: &Input, weights: &Weights) -> Result<Vec<(BwdVariant, String)>> {
    let p = validate(input, weights)?;
    if p.device == Device::Cpu {
        return Ok(vec![(BwdVariant::from_env(), String::new())]);
    }
    Ok(cuda::bwd_variants(&p)?.into_iter().map(|b| (b, format!(" bwd={}", b.name()))).collect())
}

/// Whether the training pair (`forward_train` + `backward_from`) keeps b for this problem.
fn saves_b(input: &Input, weights: &Weights) -> Result<bool> {
    cuda::saves_b(&validate(input, weights)?)
}

/// The same for the forward.
fn fwd_variants(input: &Input, weights: &Weights) -> Result<Vec<(FwdVariant, String)>> {
    let p = validate(input, weights)?;
    if p.device == Device::Cpu {
        return Ok(vec![(FwdVariant::from_env(), String::new())]);
    }
    Ok(cuda::fwd_variants(&p)?.into_iter().map(|f| (f, format!(" fwd={}", f.name()))).collect())
}

fn check_case(ctx: &CheckCtx, case: &Case, dtype: DType) -> Result<Vec<CheckRow>> {
    let name = case.name();
    let data = Data::new(case, dtype, ctx.seed_for(&format!("{name}{dtype}")))?;
    let expected = reference_outputs(case, &data)?;
    let dev = data.to_device(ctx.device)?;
    let (input, weights) = (dev.input(case), dev.weights(case));
    let tol = if ctx.device.is_cuda() { cuda::tolerance(dtype) } else { dtype.tolerance() };
    let mut rows = Vec::new();
    let mut out = None;
    // packed-pp runs packed's products and epilogue per element in the same order: the same bits.
    let (mut packed_bits, mut pp_bits) = (None, None);
    for (variant, suffix) in fwd_variants(&input, &weights)? {
        let o = forward_with(&input, &weights, variant)?.out;
        rows.push(compare("gradfeat", &format!("{name}{suffix}"), expected[0].0, &o, &expected[0].1, tol)?);
        let bits = || -> Result<Vec<u64>> { Ok(o.to_vec_f64()?.into_iter().map(f64::to_bits).collect()) };
        match variant {
            FwdVariant::Packed => packed_bits = Some(bits()?),
            FwdVariant::PackedPp => pp_bits = Some(bits()?),
            _ => {}
        }
        out.get_or_insert(o);
    }
    if let (Some(a), Some(b)) = (&packed_bits, &pp_bits) {
        rows.push(property("gradfeat", &format!("{name} fwd=packed-pp"), "bitwise = fwd=packed", dtype, ctx.device, a == b));
    }
    let out = out.expect("at least one forward variant");
    for (variant, suffix) in bwd_variants(&input, &weights)? {
        let mut got = vec![out.try_clone()?];
        got.extend(grad_list(backward_with(&input, &weights, &dev.d_out, variant)?));
        let label = format!("{name}{suffix}");
        let mut r: Vec<CheckRow> = expected.iter().zip(&got).map(|((q, e), t)| compare("gradfeat", &label, q, t, e, tol)).collect::<Result<_>>()?;
        rescale_degenerate(case, &data, &expected, &got, &mut r)?;
        rows.extend(r.into_iter().skip(1));
    }
    // The training pair where it keeps b: out the same bits as the packed forward's, every gradient
    // (through the saved, rounded b) against the reference.
    if saves_b(&input, &weights)? {
        let f = forward_train_with(&input, &weights, true)?;
        rows.push(property("gradfeat", &format!("{name} fwd=packed-save"), "saves b", dtype, ctx.device, f.saved.is_some()));
        if let Some(a) = &packed_bits {
            let b: Vec<u64> = f.out.to_vec_f64()?.into_iter().map(f64::to_bits).collect();
            rows.push(property("gradfeat", &format!("{name} fwd=packed-save"), "bitwise = fwd=packed", dtype, ctx.device, *a == b));
        }
        // d_A both ways (NOTES.md v14): from g's images, and factored through x.
        for (variant, suffix) in SAVED_DA {
            let mut got = vec![f.out.try_clone()?];
            got.extend(grad_list(backward_from_with(&f, &input, &weights, &dev.d_out, variant)?));
            let label = format!("{name} bwd=saved-b{suffix}");
            let mut r: Vec<CheckRow> = expected.iter().zip(&got).map(|((q, e), t)| compare("gradfeat", &label, q, t, e, tol)).collect::<Result<_>>()?;
            rescale_degenerate(case, &data, &expected, &got, &mut r)?;
            rows.extend(r.into_iter().skip(1));
        }
        rows.push(compare("gradfeat", &format!("{name} bwd=saved-b"), expected[0].0, &f.out, &expected[0].1, tol)?);
    }
    Ok(rows)
}

/// The two ways the backward from saved b takes d_A, with the suffixes of their rows.
const SAVED_DA: [(BwdVariant, &str); 2] = [(BwdVariant::PackedImgGImages, "-gimages"), (BwdVariant::PackedImgFactored, "-factored")];

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Two weight-gradient shapes make ‖ref‖ meaningless as the yardstick, and get another, named in the
/// row's quantity:
/// - C = 1: d_A is one sum over vertices, Σ ds·|g|², whose terms have random signs and cancel
///   (by a factor of ~100 at V = 4109), so rounding P and Q to 16 bits is amplified by that factor.
///   Its error is measured against the root-sum-square of the terms, the size such a sum has before
///   cancellation.
/// - d_A_im is zero in exact arithmetic when every g row is a multiple of one vector (K = 1, or
///   C = 1): its error is measured against ‖d_A_re‖.
fn rescale_degenerate(case: &Case, d: &Data, expected: &[(&'static str, Vec<f64>)], got: &[Tensor], rows: &mut [CheckRow]) -> Result<()> {
    let find = |q: &str| expected.iter().position(|(n, _)| *n == q);
    let mut set = |i: usize, label: &str, scale: f64| -> Result<()> {
        let out = got[i].to_vec_f64()?;
        let diff = out.iter().zip(&expected[i].1).map(|(a, b)| if a.is_finite() { (a - b) * (a - b) } else { f64::INFINITY }).sum::<f64>().sqrt();
        rows[i].quantity = format!("{}/{label}", expected[i].0);
        rows[i].rel_err = diff / scale;
        Ok(())
    };
    if case.c == 1 {
        let (g_re, g_im) = reference_g(case, d)?;
        let (out, d_out) = (&expected[0].1, d.d_out.to_vec_f64()?);
        let terms: Vec<f64> = (0..case.v()).map(|v| d_out[v] * (1.0 - out[v] * out[v]) * (g_re[v] * g_re[v] + g_im[v] * g_im[v])).collect();
        let rss = norm(&terms);
        for q in ["d_a_re", "d_a_im", "d_a"] {
            if let Some(i) = find(q) {
                set(i, "rss", rss)?;
            }
        }
    } else if let (Some(re), Some(im)) = (find("d_a_re"), find("d_a_im")) {
        let (n_re, n_im) = (norm(&expected[re].1), norm(&expected[im].1));
        if n_im < 1e-6 * n_re {
            set(im, "|d_a_re|", n_re)?;
        }
    }
    Ok(())
}

/// g_re, g_im (V×C) of a case, in f64 from the case's rounded inputs.
fn reference_g(case: &Case, d: &Data) -> Result<(Vec<f64>, Vec<f64>)> {
    if case.spectral {
        let x = d.x.to_vec_f64()?;
        Ok((
            reference::spectral_g(&d.grads_re.to_vec_f64()?, &x, &case.offsets, case.k, case.c),
            reference::spectral_g(&d.grads_im.to_vec_f64()?, &x, &case.offsets, case.k, case.c),
        ))
    } else {
        Ok((d.g_re.to_vec_f64()?, d.g_im.to_vec_f64()?))
    }
}

/// Two runs give bitwise identical results, in every forward and every backward variant.
fn determinism(ctx: &CheckCtx, case: &Case, dtype: DType) -> Result<Vec<CheckRow>> {
    let data = Data::new(case, dtype, ctx.seed_for(&format!("det{}", case.name())))?.to_device(ctx.device)?;
    let (input, weights) = (data.input(case), data.weights(case));
    let mut rows = Vec::new();
    let bits = |t: Tensor| -> Result<Vec<u64>> { Ok(t.to_vec_f64()?.into_iter().map(f64::to_bits).collect()) };
    for (variant, suffix) in fwd_variants(&input, &weights)? {
        let same = bits(forward_with(&input, &weights, variant)?.out)? == bits(forward_with(&input, &weights, variant)?.out)?;
        rows.push(property("gradfeat", &format!("{}{suffix}", case.name()), "bitwise-det", dtype, ctx.device, same));
    }
    for (variant, suffix) in bwd_variants(&input, &weights)? {
        let run = || -> Result<Vec<Vec<f64>>> {
            let mut v = vec![forward(&input, &weights)?.out.to_vec_f64()?];
            for t in grad_list(backward_with(&input, &weights, &data.d_out, variant)?) {
                v.push(t.to_vec_f64()?);
            }
            Ok(v)
        };
        let (a, b) = (run()?, run()?);
        rows.push(property("gradfeat", &format!("{}{suffix}", case.name()), "bitwise-det", dtype, ctx.device, same_bits(&a, &b)));
    }
    if saves_b(&input, &weights)? {
        for (variant, suffix) in SAVED_DA {
            let run = || -> Result<Vec<Vec<f64>>> {
                let f = forward_train_with(&input, &weights, true)?;
                let mut v = vec![f.out.to_vec_f64()?];
                for t in grad_list(backward_from_with(&f, &input, &weights, &data.d_out, variant)?) {
                    v.push(t.to_vec_f64()?);
                }
                Ok(v)
            };
            let (a, b) = (run()?, run()?);
            rows.push(property("gradfeat", &format!("{} bwd=saved-b{suffix}", case.name()), "bitwise-det", dtype, ctx.device, same_bits(&a, &b)));
        }
    }
    Ok(rows)
}

fn same_bits(a: &[Vec<f64>], b: &[Vec<f64>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()))
}

/// On CUDA: errors for bad input leave the context usable, and a C beyond the kernels' on-chip
/// tiles is a clear error.
fn cuda_error_properties(ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
    let case = Case::new(40, 8, 16, true, true);
    let data = Data::new(&case, DType::BF16, 7)?.to_device(ctx.device)?;
    let cpu_d_out = Tensor::zeros(&[40, 16], DType::BF16, Device::Cpu)?;
    let e = backward(&data.input(&case), &data.weights(&case), &cpu_d_out);
    let mut rows = vec![property("gradfeat", "d_out on the CPU", "Err(Device)", DType::BF16, ctx.device, matches!(e, Err(Error::Device { .. })))];
    let big = 4096;
    let g = Tensor::zeros(&[2, big], DType::BF16, ctx.device)?;
    let a = Tensor::zeros(&[big, big], DType::BF16, ctx.device)?;
    let e = forward(&Input::Vertex { g_re: &g, g_im: &g }, &Weights::Plain { a: &a });
    rows.push(property("gradfeat", "C=4096 beyond the tiles", "Err(Unsupported)", DType::BF16, ctx.device, matches!(e, Err(Error::Unsupported(_)))));
    if saves_b(&data.input(&case), &data.weights(&case))? {
        // b saved by a forward of another problem (V = 41 instead of 40).
        let f = forward_train_with(&data.input(&case), &data.weights(&case), true)?;
        let other = Case::new(41, 8, 16, true, true);
        let od = Data::new(&other, DType::BF16, 8)?.to_device(ctx.device)?;
        let e = backward_from(&f, &od.input(&other), &od.weights(&other), &od.d_out);
        rows.push(property("gradfeat", "saved b of another problem", "Err(Invalid)", DType::BF16, ctx.device, matches!(e, Err(Error::Invalid { .. }))));
    }
    let ok = forward(&data.input(&case), &data.weights(&case)).and_then(|f| f.out.to_vec_f64()).is_ok_and(|v| v.iter().all(|x| x.is_finite()));
    rows.push(property("gradfeat", "no sticky error after bad input", "holds", DType::BF16, ctx.device, ok));
    Ok(rows)
}

fn cases(tier: Tier) -> Vec<Case> {
    let mut v = Vec::new();
    match tier {
        Tier::Quick => {
            v.push(Case::new(1, 1, 1, true, true));
            v.push(Case::new(7, 5, 3, false, false));
            v.push(Case::batch(&[0, 10, 10, 37], 6, 9, true));
            v.push(Case::new(130, 16, 20, true, false));
            v.push(Case::new(64, 0, 17, false, true));
        }
        // Tiny, but through every kernel path: vector and scalar tile loads, both tile heights of the
        // fused kernels (C = 257 takes the smaller ones), batched tiles and per-mesh splits, several
        // split-K chunks.
        Tier::Small => {
            v.push(Case::new(150, 64, 64, true, true));
            v.push(Case::new(7, 1, 1, true, false));
            v.push(Case::batch(&[0, 60, 60, 130], 8, 257, true));
            v.push(Case::new(129, 0, 72, false, true));
            v.push(Case::new(33, 0, 5, false, false));
            // The staged map kernel's two-chunk shape (C in 129..256): vector and scalar loads,
            // a batch with an empty mesh.
            v.push(Case::batch(&[0, 50, 50, 140], 24, 200, false));
            v.push(Case::new(70, 0, 131, false, true));
            // bwd=packed-img's tile images: an empty first mesh, partial row tiles per mesh, C a
            // multiple of 8 but not of 128 (zero channels in every image).
            v.push(Case::batch(&[0, 0, 77, 213], 16, 136, true));
            // fwd=packed-pp's persistent grid (two CTAs per multiprocessor) with more 64-row tiles
            // than CTAs on 132 multiprocessors (267 tiles: some CTAs run two, of different meshes),
            // per-mesh partial tiles, C = 136; and one chunk with a row tile of 64 + 1 rows.
            v.push(Case::batch(&[0, 130, 130, 17000], 16, 136, true));
            v.push(Case::new(65, 8, 64, true, false));
        }
        // Every size the issue names: V ∈ {1, 7, 4109, 131077}, C ∈ {1, 64, 256, 257},
        // K ∈ {1, 64, 128}, both forms, with and without rotations, and batches.
        Tier::Full => {
            for &n in &[1, 7, 4109, 131077] {
                v.push(Case::new(n, 128, 256, true, true));
                v.push(Case::new(n, 0, 256, false, false));
            }
            v.push(Case::new(4109, 128, 256, true, false));
            v.push(Case::new(4109, 0, 256, false, true));
            for &c in &[1, 64, 257] {
                v.push(Case::new(4109, 64, c, true, true));
                v.push(Case::new(4109, 64, c, true, false));
                v.push(Case::new(4109, 0, c, false, true));
                v.push(Case::new(4109, 0, c, false, false));
            }
            for &k in &[1, 64] {
                v.push(Case::new(4109, k, 64, true, true));
                v.push(Case::new(4109, k, 256, true, false));
            }
            v.push(Case::batch(&[0, 1000, 1000, 4109], 128, 256, true));
            v.push(Case::batch(&[0, 1, 130, 2177, 2178, 9000], 64, 257, false));
            // The staged kernels' other paths: C in 129..256 not a multiple of 128 (and of 8), K not
            // a multiple of 8.
            v.push(Case::new(4109, 12, 200, true, true));
            v.push(Case::new(4109, 0, 131, false, false));
            // bwd=packed-img (tile images): empty first mesh, partial tiles per mesh, C = 136 (one of
            // 8, not of 128) and C = 72 (one chunk, 128-row tiles).
            v.push(Case::batch(&[0, 0, 77, 4109], 24, 136, true));
            v.push(Case::batch(&[0, 130, 4109], 40, 72, false));
            // fwd=packed-defer / bwd=packed-img-defer with several row tiles per CTA (more tiles
            // than multiprocessors) and a single stage-1 k-tile (K ≤ 32: the deferred store's own
            // barrier), per-mesh partial tiles, C = 136; the K = 128 path runs at V = 131077 above.
            v.push(Case::batch(&[0, 77, 77, 20011], 24, 136, true));
        }
    }
    v
}

impl crate::OpFamily for Family {
    fn name(&self) -> &'static str {
        "gradfeat"
    }
    fn summary(&self) -> &'static str {
        "DiffusionNet spatial gradient features tanh(Re(conj(g)·(A·g))), fused forward and backward"
    }

    fn check(&self, ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
        let mut rows = Vec::new();
        for case in cases(ctx.tier) {
            for dtype in ctx.dtypes() {
                rows.extend(check_case(ctx, &case, dtype)?);
            }
        }
        if matches!(ctx.device, Device::Cuda(_)) {
            let det = match ctx.tier {
                Tier::Full => Case::new(131077, 128, 256, true, true),
                _ => Case::batch(&[0, 70, 150], 64, 64, true),
            };
            let dtypes = ctx.dtypes();
            if dtypes.contains(&DType::BF16) {
                rows.extend(determinism(ctx, &det, DType::BF16)?);
            }
            if dtypes.contains(&DType::F32) {
                rows.extend(determinism(ctx, &Case::new(300, 0, 257, false, false), DType::F32)?);
            }
            rows.extend(cuda_error_properties(ctx)?);
        }
        Ok(rows)
    }

    fn bench(&self, ctx: &BenchCtx, progress: &mut dyn FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
        // (V, K, C, dtype); K = 128, C = 256 is DiffusionNet's usual width, as in the issue.
        let mut sizes: Vec<(usize, usize, usize, DType)> = Vec::new();
        match (ctx.device, ctx.quick) {
            (Device::Cpu, _) => sizes.push((4096, 128, 256, DType::BF16)),
            (_, true) => {
                sizes.extend([131072, 524288].map(|v| (v, 128, 256, DType::BF16)));
                sizes.push((524288, 128, 128, DType::BF16));
                sizes.push((131072, 128, 256, DType::F32));
            }
            (_, false) => {
                sizes.extend([4096, 32768, 131072, 524288, 2097152].map(|v| (v, 128, 256, DType::BF16)));
                sizes.extend([131072, 2097152].map(|v| (v, 128, 128, DType::BF16)));
                sizes.extend([131072, 524288].map(|v| (v, 128, 256, DType::F32)));
            }
        }
        let mut rows = Vec::new();
        for (v, k, c, dtype) in sizes {
            let es = dtype.size() as f64;
            let (vf, kf, cf) = (v as f64, k as f64, c as f64);
            // Fewest bytes: read grads_re, grads_im, x, A_re, A_im, write out; the backward also reads
            // d_out and writes d_x, d_A_re, d_A_im.
            let fwd_bytes = es * (2.0 * vf * kf + kf * cf + 2.0 * cf * cf + vf * cf);
            let bwd_bytes = fwd_bytes + es * (vf * cf + kf * cf + 2.0 * cf * cf);
            let fwd_flops = vf * (4.0 * kf * cf + 8.0 * cf * cf);
            let case = Case::new(v, k, c, true, true);
            let sets = ctx.rotation(es * vf * (2.0 * kf + 2.0 * cf));
            let data: Vec<Data> = (0..sets).map(|i| Data::bench(&case, dtype, ctx.device, 500 + 10 * i as u64)).collect::<Result<_>>()?;
            // f32 runs as split products on tensor cores (bf16 or TF32 halves): its ceiling is the TF32 GEMM rate.
            let rate = if dtype == DType::F32 { ctx.gemm_tflops(DType::F32, true)? } else { ctx.gemm_tflops(dtype, false)? };
            let p = params(&[("V", json!(v)), ("K", json!(k)), ("C", json!(c)), ("form", json!("spectral")), ("rotation", json!(true))]);
            // The issue's sizes time every variant (NOTES.md compares them): each forward, each
            // backward after the default forward, and both staged together; other sizes the defaults.
            // CUDA rows name their variants in their params.
            let issue_size = dtype == DType::BF16 && k == 128 && c == 256 && [131072, 524288, 2097152].contains(&v);
            let (input0, weights0) = (data[0].input(&case), data[0].weights(&case));
            let (fwds, bwds) = (fwd_variants(&input0, &weights0)?, bwd_variants(&input0, &weights0)?);
            let labelled = ctx.device != Device::Cpu;
            let (fwd_default, bwd_default) = (FwdVariant::from_env(), BwdVariant::from_env());
            // A default that does not apply to this problem runs (and is labelled) as what the launch
            // code runs instead (the fused forward; the packed or the fused backward).
            let fwd_default = if fwds.iter().any(|(f, _)| *f == fwd_default) { fwd_default } else { FwdVariant::Fused };
            let bwd_default = bwd_default.effective(&bwds.iter().map(|(b, _)| *b).collect::<Vec<_>>());
            // (forward, backward): a "fwd" row without a backward, else a "fwd+bwd" row.
            let mut passes: Vec<(FwdVariant, Option<BwdVariant>)> = Vec::new();
            for (f, _) in &fwds {
                if issue_size || *f == fwd_default {
                    passes.push((*f, None));
                }
            }
            for (b, _) in &bwds {
                if issue_size || *b == bwd_default {
                    passes.push((fwd_default, Some(*b)));
                }
            }
            if issue_size && fwds.len() > 1 && bwds.len() > 1 && !passes.contains(&(FwdVariant::Staged, Some(BwdVariant::Staged))) {
                passes.push((FwdVariant::Staged, Some(BwdVariant::Staged)));
            }
            if issue_size && fwds.len() > 1 && bwds.len() > 1 && !passes.contains(&(FwdVariant::Packed, Some(BwdVariant::Packed))) {
                passes.push((FwdVariant::Packed, Some(BwdVariant::Packed)));
            }
            // Both deferred-store builds together (NOTES.md v7), beside the default pair.
            let defer_pair = (FwdVariant::PackedDefer, Some(BwdVariant::PackedImgDefer));
            if issue_size && fwds.iter().any(|(f, _)| *f == FwdVariant::PackedDefer) && bwds.iter().any(|(b, _)| *b == BwdVariant::PackedImgDefer) && !passes.contains(&defer_pair) {
                passes.push(defer_pair);
            }
            let note = |row: &mut BenchRow| row.note = format!("{:.1}% of the {} GEMM rate measured in this run", 100.0 * row.floor_frac, if dtype == DType::F32 { "TF32" } else { "bf16" });
            for (fv, bv) in passes {
                // The variants first, so that they survive truncated labels in summaries.
                let mut pp = serde_json::Map::new();
                if labelled {
                    pp.insert("fwd".into(), json!(fv.name()));
                    if let Some(b) = bv {
                        pp.insert("bwd".into(), json!(b.name()));
                    }
                }
                pp.extend(p.clone());
                if !bench_selected(&pp, dtype, bv.is_some()) {
                    continue;
                }
                let mut row = match bv {
                    None => {
                        let ms = ctx.time(400.0, |i| {
                            let d = &data[i % sets];
                            forward_with(&d.input(&case), &d.weights(&case), fv).map(drop)
                        })?;
                        ctx.row_with_rate("gradfeat", "fwd", dtype, pp, ms, fwd_bytes, fwd_flops, rate)
                    }
                    Some(bv) => {
                        let ms = ctx.time(400.0, |i| {
                            let d = &data[i % sets];
                            let (input, weights) = (d.input(&case), d.weights(&case));
                            let _out = forward_with(&input, &weights, fv)?;
                            backward_with(&input, &weights, &d.d_out, bv).map(drop)
                        })?;
                        ctx.row_with_rate("gradfeat", "fwd+bwd", dtype, pp, ms, bwd_bytes, 3.0 * fwd_flops, rate)
                    }
                };
                note(&mut row);
                progress(&row);
                rows.push(row);
            }
            // The training pair (forward_train + backward_from) where it keeps b, and at the issue's
            // sizes the saving forward alone (NOTES.md v13).
            // The backward's rows: the default, and at the issue's sizes d_A from g's images beside it
            // (NOTES.md v14).
            let train: &[(bool, Option<BwdVariant>)] = match (saves_b(&input0, &weights0)?, issue_size) {
                (false, _) => &[],
                (true, false) => &[(true, None)],
                (true, true) => &[(false, None), (true, None), (true, Some(BwdVariant::PackedImgGImages))],
            };
            for &(with_bwd, da) in train {
                let mut pp = serde_json::Map::new();
                pp.insert("fwd".into(), json!("packed-save"));
                if with_bwd {
                    pp.insert("bwd".into(), json!(if da.is_some() { "saved-b-gimages" } else { "saved-b" }));
                }
                pp.extend(p.clone());
                if !bench_selected(&pp, dtype, with_bwd) {
                    continue;
                }
                let ms = ctx.time(400.0, |i| {
                    let d = &data[i % sets];
                    let (input, weights) = (d.input(&case), d.weights(&case));
                    let f = forward_train_with(&input, &weights, true)?;
                    if with_bwd {
                        backward_from_with(&f, &input, &weights, &d.d_out, da.unwrap_or_else(BwdVariant::from_env)).map(drop)
                    } else {
                        Ok(())
                    }
                })?;
                let mut row = if with_bwd {
                    ctx.row_with_rate("gradfeat", "fwd+bwd", dtype, pp, ms, bwd_bytes, 3.0 * fwd_flops, rate)
                } else {
                    ctx.row_with_rate("gradfeat", "fwd", dtype, pp, ms, fwd_bytes, fwd_flops, rate)
                };
                note(&mut row);
                progress(&row);
                rows.push(row);
            }
        }
        Ok(rows)
    }

    fn kernels(&self) -> Vec<KernelBuild> {
        let mut v = cuda::all_builds();
        v.extend(staged::all_builds());
        v
    }
}
