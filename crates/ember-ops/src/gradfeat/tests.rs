use super::suite::{grad_list, reference_outputs, Case, Data};
use super::*;
use crate::harness::check::{CheckCtx, Tier};
use crate::OpFamily;

fn clone_data(d: &Data) -> Data {
    Data {
        x: d.x.try_clone().unwrap(),
        grads_re: d.grads_re.try_clone().unwrap(),
        grads_im: d.grads_im.try_clone().unwrap(),
        g_re: d.g_re.try_clone().unwrap(),
        g_im: d.g_im.try_clone().unwrap(),
        a_re: d.a_re.try_clone().unwrap(),
        a_im: d.a_im.try_clone().unwrap(),
        d_out: d.d_out.try_clone().unwrap(),
    }
}

fn field<'a>(d: &'a mut Data, name: &str) -> &'a mut Tensor {
    match name {
        "x" => &mut d.x,
        "g_re" => &mut d.g_re,
        "g_im" => &mut d.g_im,
        "a_re" | "a" => &mut d.a_re,
        "a_im" => &mut d.a_im,
        _ => unreachable!(),
    }
}

/// Σ d_out ⊙ out through the public API (f64 runs the reference).
fn loss(case: &Case, d: &Data) -> f64 {
    let out = forward(&d.input(case), &d.weights(case)).unwrap().out.to_vec_f64().unwrap();
    out.iter().zip(d.d_out.to_vec_f64().unwrap()).map(|(o, g)| o * g).sum()
}

/// Every gradient of the f64 reference against central finite differences of the loss.
fn check_finite_differences(case: &Case) {
    let data = Data::new(case, DType::F64, 11).unwrap();
    let grads = grad_list(backward(&data.input(case), &data.weights(case), &data.d_out).unwrap());
    let names: Vec<&str> = match (case.spectral, case.rotation) {
        (true, true) => vec!["x", "a_re", "a_im"],
        (true, false) => vec!["x", "a"],
        (false, true) => vec!["g_re", "g_im", "a_re", "a_im"],
        (false, false) => vec!["g_re", "g_im", "a"],
    };
    assert_eq!(names.len(), grads.len());
    let h = 1e-6;
    for (name, grad) in names.iter().zip(&grads) {
        let analytic = grad.to_vec_f64().unwrap();
        assert!(analytic.iter().any(|v| v.abs() > 1e-3), "{} {name}: gradient is trivially zero", case.name());
        let base = field(&mut clone_data(&data), name).to_vec_f64().unwrap();
        assert_eq!(base.len(), analytic.len(), "{name}");
        for i in 0..base.len() {
            let eval = |delta: f64| {
                let mut d = clone_data(&data);
                let t = field(&mut d, name);
                let mut v = base.clone();
                v[i] += delta;
                *t = Tensor::from_vec(v, t.shape()).unwrap();
                loss(case, &d)
            };
            let fd = (eval(h) - eval(-h)) / (2.0 * h);
            let err = (fd - analytic[i]).abs();
            assert!(err <= 1e-7 * (1.0 + analytic[i].abs()), "{} d{name}[{i}]: finite difference {fd} vs backward {}", case.name(), analytic[i]);
        }
    }
}

#[test]
fn reference_gradients_match_finite_differences() {
    check_finite_differences(&Case::new(5, 3, 4, true, true));
    check_finite_differences(&Case::new(5, 3, 4, true, false));
    check_finite_differences(&Case::new(6, 0, 3, false, true));
    check_finite_differences(&Case::new(6, 0, 3, false, false));
    // A batch: two meshes and an empty one between them.
    check_finite_differences(&Case::batch(&[0, 3, 3, 7], 2, 3, true));
}

#[test]
fn reference_forward_matches_the_seed_formula_on_a_hand_example() {
    // One vertex, one channel: g = (2, -1), A = 0.5 + 0.25i:
    // b_re = 2·0.5 − (−1)·0.25 = 1.25, b_im = −1·0.5 + 2·0.25 = 0; out = tanh(2·1.25 + (−1)·0) = tanh(2.5).
    let g_re = Tensor::from_vec(vec![2.0f64], &[1, 1]).unwrap();
    let g_im = Tensor::from_vec(vec![-1.0f64], &[1, 1]).unwrap();
    let a_re = Tensor::from_vec(vec![0.5f64], &[1, 1]).unwrap();
    let a_im = Tensor::from_vec(vec![0.25f64], &[1, 1]).unwrap();
    let out = forward(&Input::Vertex { g_re: &g_re, g_im: &g_im }, &Weights::Rotation { a_re: &a_re, a_im: &a_im }).unwrap().out;
    assert_eq!(out.to_vec_f64().unwrap(), vec![2.5f64.tanh()]);
    // Spectral: g = grads·x with K = 2.
    let x = Tensor::from_vec(vec![1.0f64, 0.5], &[2, 1]).unwrap();
    let gr = Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2]).unwrap();
    let gi = Tensor::from_vec(vec![-3.0f64, 4.0], &[1, 2]).unwrap();
    let out = forward(&Input::Spectral { x: &x, grads_re: &gr, grads_im: &gi, mesh_offsets: None }, &Weights::Rotation { a_re: &a_re, a_im: &a_im }).unwrap().out;
    assert_eq!(out.to_vec_f64().unwrap(), vec![2.5f64.tanh()]);
}

#[test]
fn cpu_fast_path_matches_reference_in_every_dtype() {
    ember_core::set_poison_outputs(true);
    let t0 = std::time::Instant::now();
    let rows = Family.check(&CheckCtx::new(Device::Cpu, Tier::Quick)).unwrap();
    assert!(t0.elapsed().as_secs_f64() < 20.0, "Tier::Quick took {:?}", t0.elapsed());
    // 5 cases × 3 dtypes; spectral cases compare out, d_x and 1–2 weight gradients.
    assert!(rows.len() >= 5 * 3 * 3, "{}", rows.len());
    for r in &rows {
        assert!(r.pass(), "{r:?}");
    }
}

#[test]
fn batches_equal_meshes_run_one_by_one() {
    let offsets = [0usize, 4, 4, 9];
    let batch = Case::batch(&offsets, 3, 5, true);
    let data = Data::new(&batch, DType::F32, 3).unwrap();
    let out = forward(&data.input(&batch), &data.weights(&batch)).unwrap().out.to_vec_f64().unwrap();
    let grads = grad_list(backward(&data.input(&batch), &data.weights(&batch), &data.d_out).unwrap());
    let (d_x, d_a_re) = (grads[0].to_vec_f64().unwrap(), grads[1].to_vec_f64().unwrap());
    let (x, gr, gi, dout) = (data.x.to_vec_f64().unwrap(), data.grads_re.to_vec_f64().unwrap(), data.grads_im.to_vec_f64().unwrap(), data.d_out.to_vec_f64().unwrap());
    let mut d_a_sum = [0.0; 25];
    for m in 0..3 {
        let (r0, r1) = (offsets[m], offsets[m + 1]);
        let x_m = Tensor::from_f64(&x[m * 15..(m + 1) * 15], &[3, 5], DType::F32, Device::Cpu).unwrap();
        if r1 == r0 {
            assert!(d_x[m * 15..(m + 1) * 15].iter().all(|&v| v == 0.0), "empty mesh {m} has a zero d_x");
            continue;
        }
        let g_re = Tensor::from_f64(&gr[r0 * 3..r1 * 3], &[r1 - r0, 3], DType::F32, Device::Cpu).unwrap();
        let g_im = Tensor::from_f64(&gi[r0 * 3..r1 * 3], &[r1 - r0, 3], DType::F32, Device::Cpu).unwrap();
        let d_o = Tensor::from_f64(&dout[r0 * 5..r1 * 5], &[r1 - r0, 5], DType::F32, Device::Cpu).unwrap();
        let input = Input::Spectral { x: &x_m, grads_re: &g_re, grads_im: &g_im, mesh_offsets: None };
        let one = forward(&input, &data.weights(&batch)).unwrap().out.to_vec_f64().unwrap();
        for (a, b) in one.iter().zip(&out[r0 * 5..r1 * 5]) {
            assert!((a - b).abs() < 1e-6, "mesh {m}: {a} vs {b}");
        }
        let g = grad_list(backward(&input, &data.weights(&batch), &d_o).unwrap());
        for (a, b) in g[0].to_vec_f64().unwrap().iter().zip(&d_x[m * 15..(m + 1) * 15]) {
            assert!((a - b).abs() < 1e-5, "mesh {m} d_x: {a} vs {b}");
        }
        for (s, v) in d_a_sum.iter_mut().zip(g[1].to_vec_f64().unwrap()) {
            *s += v;
        }
    }
    for (a, b) in d_a_sum.iter().zip(&d_a_re) {
        assert!((a - b).abs() < 1e-5, "d_a_re: sum over meshes {a} vs batch {b}");
    }
}

#[test]
fn reference_outputs_list_follows_the_op() {
    let case = Case::new(3, 2, 2, false, true);
    let data = Data::new(&case, DType::F64, 1).unwrap();
    let names: Vec<_> = reference_outputs(&case, &data).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["out", "d_g_re", "d_g_im", "d_a_re", "d_a_im"]);
}

/// The default backward asked for where it does not apply runs (and is labelled) as what the launch
/// code runs instead: "packed-img" as "packed" off the `_sv` entries, anything as "fused" where only
/// the fused backward runs.
#[test]
fn bwd_default_falls_back_to_what_runs() {
    use cuda::BwdVariant as B;
    let all = B::ALL.to_vec();
    let no_img: Vec<B> = B::ALL.into_iter().filter(|b| *b != B::PackedImg).collect();
    assert_eq!(B::PackedImg.effective(&all), B::PackedImg);
    assert_eq!(B::PackedImg.effective(&no_img), B::Packed);
    assert_eq!(B::PackedImg.effective(&[B::Fused]), B::Fused);
    assert_eq!(B::Packed.effective(&no_img), B::Packed);
    assert_eq!(B::Staged.effective(&[B::Fused]), B::Fused);
}

#[test]
fn bad_input_is_a_clear_error() {
    let z = |shape: &[usize]| Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap();
    let (x, gr, a) = (z(&[3, 4]), z(&[5, 3]), z(&[4, 4]));
    let plain = Weights::Plain { a: &a };
    let spec = |x, gr, gi, o| Input::Spectral { x, grads_re: gr, grads_im: gi, mesh_offsets: o };
    let msg = |r: Result<Forward>| r.unwrap_err().to_string();

    let (g52, x24, a45, g03, x334, x3134, g53) = (z(&[5, 2]), z(&[2, 4]), z(&[4, 5]), z(&[0, 3]), z(&[3, 3, 4]), z(&[3, 1, 3, 4]), z(&[5, 3]));
    let e = msg(forward(&spec(&x, &gr, &g52, None), &plain));
    assert!(e.contains("argument `grads_im`: expected shape the shape of grads_re (V, K) = [5, 3], got [5, 2]"), "{e}");
    let e = msg(forward(&spec(&x24, &gr, &gr, None), &plain));
    assert!(e.contains("argument `x`") && e.contains("K = 3"), "{e}");
    let e = msg(forward(&spec(&x, &gr, &gr, None), &Weights::Plain { a: &a45 }));
    assert!(e.contains("argument `a`: expected shape (C, C) = [4, 4], got [4, 5]"), "{e}");
    let bf = Tensor::zeros(&[4, 4], DType::BF16, Device::Cpu).unwrap();
    let e = msg(forward(&spec(&x, &gr, &gr, None), &Weights::Rotation { a_re: &a, a_im: &bf }));
    assert!(e.contains("argument `a_im`: expected dtype f32, got bf16"), "{e}");
    let e = forward(&spec(&x, &g03, &g03, None), &plain).unwrap_err();
    assert!(matches!(e, Error::Empty { .. }) && e.to_string().contains("`grads_re`"), "{e}");

    // Batches.
    let xb = z(&[2, 3, 4]);
    let e = msg(forward(&spec(&xb, &gr, &gr, None), &plain));
    assert!(e.contains("argument `mesh_offsets`: expected 3 offsets for the 2 meshes of x, got none"), "{e}");
    let e = msg(forward(&spec(&xb, &gr, &gr, Some(&[0, 2, 4])), &plain));
    assert!(e.contains("argument `mesh_offsets`: expected offsets from 0 to V = 5"), "{e}");
    let e = msg(forward(&spec(&xb, &gr, &gr, Some(&[0, 2])), &plain));
    assert!(e.contains("expected 3 entries (meshes + 1), got 2"), "{e}");
    let e = msg(forward(&spec(&x334, &gr, &gr, Some(&[0, 4, 2, 5])), &plain));
    assert!(e.contains("expected non-decreasing offsets"), "{e}");
    let e = msg(forward(&spec(&x3134, &gr, &gr, None), &plain));
    assert!(e.contains("argument `x`: expected shape 2 dimensions (K, C) or 3 dimensions (M, K, C), got [3, 1, 3, 4]"), "{e}");

    // Vertex form and d_out.
    let g = z(&[5, 4]);
    let e = msg(forward(&Input::Vertex { g_re: &g, g_im: &g53 }, &plain));
    assert!(e.contains("argument `g_im`: expected shape the shape of g_re (V, C) = [5, 4], got [5, 3]"), "{e}");
    let e = backward(&Input::Vertex { g_re: &g, g_im: &g }, &plain, &z(&[4, 4])).unwrap_err().to_string();
    assert!(e.contains("argument `d_out`: expected shape (V, C) = [5, 4], got [4, 4]"), "{e}");
    let e = backward(&Input::Vertex { g_re: &g, g_im: &g }, &plain, &Tensor::zeros(&[5, 4], DType::F16, Device::Cpu).unwrap()).unwrap_err().to_string();
    assert!(e.contains("argument `d_out`: expected dtype f32, got f16"), "{e}");
}


/// The staged forward and backward (staged.cu, sm_90a) run on the CPU by their host model (host_model.cpp): the
/// kernels' own source compiled as C++, one fiber per CUDA thread (host_fibers.h), wgmma computed from the
/// shared-memory descriptors, with the launch plans of staged.rs; against the f64 reference. This
/// checks every copy, descriptor and epilogue index of the kernels without a GPU.
mod host_model {
    use super::super::staged::{self, Reductions};
    use super::*;
    use ember_core::{bf16, f16};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn cxx() -> String {
        if let Ok(c) = std::env::var("CXX") {
            return c;
        }
        ["c++", "g++", "clang++"]
            .into_iter()
            .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
            .expect("a C++ compiler (c++, g++ or clang++; or $CXX) to run the staged kernels on the host")
            .to_string()
    }

    /// Compile the model for one (dtype, chunks) specialisation, with AddressSanitizer where the
    /// compiler has it (out-of-bounds accesses to the tensors then abort the run).
    fn build(dir: &Path, dtype: DType, nch: usize) -> PathBuf {
        let exe = dir.join(format!("host_model_{}_{nch}", dtype.name()));
        let code = if dtype == DType::BF16 { 2 } else { 1 };
        let base = |asan: bool| {
            let mut c = Command::new(cxx());
            c.args(["-std=c++20", "-O2", "-fno-strict-aliasing", "-w"]).arg(format!("-DGS_DTYPE={code}")).arg(format!("-DGS_NCH={nch}"));
            if asan {
                c.args(["-fsanitize=address", "-fno-omit-frame-pointer"]);
            }
            c.arg("-o").arg(&exe).arg(dir.join("host_model.cpp"));
            c
        };
        let out = base(true).output().unwrap();
        if out.status.success() {
            eprintln!("host model {dtype} chunks={nch}: built with AddressSanitizer");
        } else {
            let out = base(false).output().unwrap();
            assert!(out.status.success(), "compiling the host model: {}", String::from_utf8_lossy(&out.stderr));
            eprintln!("host model {dtype} chunks={nch}: built without AddressSanitizer (the compiler lacks it)");
        }
        exe
    }

    fn bits(t: &Tensor) -> Vec<u16> {
        match t.dtype() {
            DType::BF16 => t.as_slice::<bf16>().unwrap().iter().map(|v| v.to_bits()).collect(),
            DType::F16 => t.as_slice::<f16>().unwrap().iter().map(|v| v.to_bits()).collect(),
            d => panic!("the staged backward takes 16-bit inputs, not {d}"),
        }
    }

    fn values(words: &[u16], dtype: DType) -> Vec<f64> {
        words.iter().map(|&w| if dtype == DType::BF16 { bf16::from_bits(w).to_f64() } else { f16::from_bits(w).to_f64() }).collect()
    }

    /// The model's input file: the problem, the launch plans staged.rs makes (the map kernel's grid
    /// for a GPU of 2 multiprocessors, the reductions' for 132), the tensors' 16-bit words. Returns the reference outputs (out, then the gradients) with
    /// their names.
    fn write_input(path: &Path, case: &Case, data: &Data, dtype: DType) -> Vec<(&'static str, Vec<f64>)> {
        let (input, weights) = (data.input(case), data.weights(case));
        let p = validate(&input, &weights).unwrap();
        let nch = staged::chunks(p.c);
        let ctas = 4 * 132;
        let mut w: Vec<i64> = vec![p.v as i64, p.k as i64, p.c as i64, p.meshes() as i64, p.spectral as i64, p.rotation as i64, if dtype == DType::BF16 { 2 } else { 1 }, nch as i64];
        let table = |w: &mut Vec<i64>, t: &[i64]| {
            w.push(t.len() as i64);
            w.extend_from_slice(t);
        };
        let entries = super::super::cuda::row_tile_entries(&p, 128 / nch);
        let ntiles = entries.as_ref().map_or(p.v.div_ceil(128 / nch), |t| t.len() / 3);
        table(&mut w, &entries.unwrap_or_default());
        // Two multiprocessors: the persistent grid of the spectral form runs several row tiles per CTA.
        w.extend([ntiles as i64, staged::map_grid(&p, ntiles, true, 2) as i64, staged::map_grid(&p, ntiles, false, 2) as i64]);
        let mut plans = vec![staged::plan(&p, Reductions::Wgmma, p.c, p.c, false, ctas).0];
        if p.spectral {
            plans.push(staged::plan(&p, Reductions::Wgmma, p.k, p.c, true, ctas).0);
        }
        for plan in &plans {
            w.extend([plan.nsplits as i64, plan.rows_per_split as i64]);
            table(&mut w, &plan.splits);
            table(&mut w, &plan.groups);
        }
        // The image reductions' plan (bwd=packed-img) over the map kernel's tile images.
        let img = staged::img_plan(ntiles * (128 / nch), p.c.div_ceil(128).pow(2), ctas);
        w.extend([img.nsplits as i64, img.rows_per_split as i64]);
        // fwd=packed-pp: 64-row tiles, its persistent grid for two multiprocessors (four CTAs).
        let pp_entries = super::super::cuda::row_tile_entries(&p, 64);
        let pp_ntiles = pp_entries.as_ref().map_or(p.v.div_ceil(64), |t| t.len() / 3);
        table(&mut w, &pp_entries.unwrap_or_default());
        w.extend([pp_ntiles as i64, staged::pp_grid(&p, pp_ntiles, 2) as i64]);
        // d_x's image reduction and the factored d_A (v14): gs_reduce_dxa's per-mesh splits of the map
        // kernel's image rows, and the splits of d_A's last product.
        let (dxa, fin) = staged::dxa_plans(&p, 132);
        w.extend([dxa.nsplits as i64, dxa.rows_per_split as i64]);
        table(&mut w, &dxa.splits);
        table(&mut w, &dxa.groups);
        w.extend([fin.nsplits as i64, fin.rows_per_split as i64]);
        let mut bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut tensors = vec![];
        if p.spectral {
            tensors.extend([&data.grads_re, &data.grads_im, &data.x]);
        } else {
            tensors.extend([&data.g_re, &data.g_im]);
        }
        tensors.push(&data.a_re);
        if p.rotation {
            tensors.push(&data.a_im);
        }
        tensors.push(&data.d_out);
        for t in tensors {
            bytes.extend(bits(t).iter().flat_map(|v| v.to_le_bytes()));
        }
        std::fs::write(path, bytes).unwrap();
        let mut expected = reference_outputs(case, data).unwrap();
        // Where the `_sv` map kernel runs, the model appends d_A from the image path (bwd=packed-img).
        if p.spectral && p.k.is_multiple_of(8) && p.c.is_multiple_of(8) {
            let planes = if p.rotation { 2 } else { 1 };
            let d_a: Vec<_> = expected[expected.len() - planes..].iter().map(|(n, v)| (if *n == "d_a_im" { "d_a_im (images)" } else if *n == "d_a_re" { "d_a_re (images)" } else { "d_a (images)" }, v.clone())).collect();
            expected.extend(d_a);
            let d_x = expected.iter().find(|(n, _)| *n == "d_x").expect("the spectral form's d_x").1.clone();
            expected.push(("d_x (images)", d_x.clone()));
            // Then the same two from the backward that reads the training forward's saved b.
            let d_a: Vec<_> = expected[expected.len() - 1 - 2 * planes..expected.len() - 1 - planes]
                .iter()
                .map(|(n, v)| (if *n == "d_a_im" { "d_a_im (saved b)" } else if *n == "d_a_re" { "d_a_re (saved b)" } else { "d_a (saved b)" }, v.clone()))
                .collect();
            expected.extend(d_a);
            expected.push(("d_x (saved b)", d_x.clone()));
            // Then the same two with d_A factored through x (v14).
            let d_a: Vec<_> = expected[expected.len() - 1 - planes..expected.len() - 1]
                .iter()
                .map(|(n, v)| (if n.starts_with("d_a_im") { "d_a_im (factored)" } else if n.starts_with("d_a_re") { "d_a_re (factored)" } else { "d_a (factored)" }, v.clone()))
                .collect();
            expected.extend(d_a);
            expected.push(("d_x (factored)", d_x));
        }
        expected
    }

    #[test]
    fn staged_kernels_match_the_reference_on_the_host() {
        let dir = std::env::temp_dir().join(format!("ember-gradfeat-host-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("staged.cu"), include_str!("staged.cu")).unwrap();
        std::fs::write(dir.join("host_model.cpp"), include_str!("host_model.cpp")).unwrap();
        std::fs::write(dir.join("host_fibers.h"), include_str!("../host_fibers.h")).unwrap();
        let cases = [
            // Two 128-channel chunks (64-row tiles, the last one partial), vector loads; rotations.
            (Case::new(150, 24, 200, true, true), DType::BF16),
            // One chunk (128-row tiles), K not a multiple of 8 (scalar loads of grads and xᵀ), a batch
            // with an empty mesh (per-mesh tiles and splits); plain weights.
            (Case::batch(&[0, 50, 50, 140], 12, 72, false), DType::BF16),
            // A batch whose CTAs (persistent, two of them) run row tiles of different meshes in turn.
            (Case::batch(&[0, 70, 70, 200], 20, 136, true), DType::BF16),
            // The same on the `_sv` entries (K a multiple of 8): tile images of partial, per-mesh row
            // tiles for the image reductions; and f16 with plain weights.
            (Case::batch(&[0, 70, 70, 200], 24, 136, true), DType::BF16),
            (Case::batch(&[0, 100, 100, 230], 16, 64, false), DType::F16),
            // The vertex form, C not a multiple of 8 (scalar loads and stores), both chunk counts.
            (Case::new(70, 0, 131, false, true), DType::BF16),
            (Case::new(33, 0, 5, false, false), DType::BF16),
            // The shape, in f16 and bf16.
            (Case::new(130, 128, 256, true, true), DType::F16),
            (Case::new(200, 128, 256, true, false), DType::BF16),
            // fwd=packed-pp (and every `_sv` build) at awkward sizes: V = 1 and 7, a prime V, 64-row
            // tiles ± 1, one and two stage-1 k-tiles, both chunk counts, a batch with partial tiles.
            (Case::new(1, 8, 8, true, true), DType::BF16),
            (Case::new(7, 16, 136, true, false), DType::F16),
            (Case::new(65, 32, 64, true, true), DType::BF16),
            (Case::new(131, 16, 72, true, false), DType::BF16),
            (Case::new(127, 40, 256, true, true), DType::F16),
            (Case::batch(&[0, 63, 63, 193], 24, 200, true), DType::BF16),
            // Two chunks, K = 64: row tiles of two meshes in turn per CTA.
            (Case::batch(&[0, 70, 70, 330], 64, 136, true), DType::BF16),
            // K = 136: two 128-column tiles of K in d_x's image reduction, the second partial.
            (Case::batch(&[0, 40, 100], 136, 64, true), DType::BF16),
        ];
        let mut built: Vec<((DType, usize), PathBuf)> = Vec::new();
        for (i, (case, dtype)) in cases.iter().enumerate() {
            let nch = staged::chunks(case.c);
            let exe = match built.iter().find(|(k, _)| *k == (*dtype, nch)) {
                Some((_, e)) => e.clone(),
                None => {
                    let e = build(&dir, *dtype, nch);
                    built.push(((*dtype, nch), e.clone()));
                    e
                }
            };
            let data = Data::new(case, *dtype, 40 + i as u64).unwrap();
            let inp = dir.join(format!("in{i}"));
            let expected = write_input(&inp, case, &data, *dtype);
            // Both timings of the asynchronous copies and products (see host_model.cpp); the same
            // arithmetic in the same order, so the same bits.
            // Each model run is one OS thread (its CUDA threads are fibers): both timings side by side.
            let timings = ["eager", "lazy"];
            let outs: Vec<PathBuf> = timings.iter().map(|t| dir.join(format!("out{i}-{t}"))).collect();
            let runs: Vec<_> = timings
                .iter()
                .zip(&outs)
                .map(|(timing, out)| {
                    Command::new(&exe).arg(&inp).arg(out).arg(timing).env("ASAN_OPTIONS", "detect_leaks=0").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
                })
                .collect();
            let mut results = Vec::new();
            for ((timing, run), outp) in timings.iter().zip(runs).zip(&outs) {
                let run = run.wait_with_output().unwrap();
                assert!(run.status.success(), "{} {dtype} {timing}: the host model failed: {}", case.name(), String::from_utf8_lossy(&run.stderr));
                let words: Vec<u16> = std::fs::read(outp).unwrap().chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
                let got = values(&words, *dtype);
                assert_eq!(got.len(), expected.iter().map(|(_, v)| v.len()).sum::<usize>(), "{}", case.name());
                let mut at = 0;
                for (q, e) in &expected {
                    let t = Tensor::from_vec(got[at..at + e.len()].to_vec(), &[e.len()]).unwrap();
                    at += e.len();
                    let row = crate::harness::check::compare("gradfeat", &case.name(), q, &t, e, dtype.tolerance()).unwrap();
                    assert!(row.pass(), "host model ({timing}): {row:?}");
                    eprintln!("host model {} {dtype} {timing} {q}: {:.2e}", case.name(), row.rel_err);
                }
                results.push(words);
            }
            assert!(results[0] == results[1], "{} {dtype}: eager and lazy timings differ", case.name());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// d_x's image splits: whole 32-row k-tiles, each inside one mesh's row tiles, covering every image
/// row of every mesh once, in order, grouped by mesh (an empty mesh has an empty group).
#[test]
fn dx_image_splits_cover_each_mesh_in_whole_k_tiles() {
    use super::staged;
    for (offsets, c) in [(vec![0usize, 5000], 256), (vec![0, 70, 70, 330, 4000], 136), (vec![0, 0, 100], 64), (vec![0, 1, 2, 3], 256)] {
        let case = Case::batch(&offsets, 16, c, true);
        let data = Data::new(&case, DType::F32, 1).unwrap();
        let p = validate(&data.input(&case), &data.weights(&case)).unwrap();
        let bm = 128 / staged::chunks(c);
        let entries = super::cuda::row_tile_entries(&p, bm);
        let ntiles = entries.as_ref().map_or(p.v.div_ceil(bm), |t| t.len() / 3);
        for ctas in [1, 7, 132] {
            let plan = staged::dx_img_plan(&p, entries.as_deref(), ntiles, bm, 1, ctas);
            let splits: Vec<(i64, i64)> = plan.splits.chunks(2).map(|s| (s[0], s[1])).collect();
            assert!(splits.iter().all(|&(a, b)| a % 32 == 0 && b % 32 == 0 && a <= b), "{offsets:?} ctas {ctas}: {splits:?}");
            // Each mesh's image rows, from its row tiles.
            let mesh_rows = |m: usize| -> (i64, i64) {
                match &entries {
                    Some(t) => {
                        let mine: Vec<usize> = t.chunks(3).enumerate().filter(|(_, e)| e[2] as usize == m).map(|(i, _)| i).collect();
                        mine.first().map_or((0, 0), |&f| ((f * bm) as i64, ((mine.last().unwrap() + 1) * bm) as i64))
                    }
                    None => (0, (ntiles * bm) as i64),
                }
            };
            for m in 0..p.meshes() {
                let (g0, g1) = if plan.groups.is_empty() { (0, plan.nsplits) } else { (plan.groups[2 * m] as usize, plan.groups[2 * m + 1] as usize) };
                let (lo, hi) = mesh_rows(m);
                let mut at = lo;
                for &(a, b) in &splits[g0..g1] {
                    assert_eq!(a, at, "{offsets:?} ctas {ctas} mesh {m}");
                    at = b;
                }
                assert_eq!(at, hi, "{offsets:?} ctas {ctas} mesh {m}");
            }
        }
    }
}

#[test]
fn bench_filter_matches_whole_tokens() {
    use super::suite::row_selected;
    use serde_json::json;
    let mut p = serde_json::Map::new();
    p.insert("fwd".into(), json!("fused"));
    p.insert("bwd".into(), json!("staged-mma"));
    p.insert("V".into(), json!(524288));
    p.insert("rotation".into(), json!(true));
    assert!(row_selected("", &p, DType::BF16, true));
    assert!(row_selected("V=524288 bwd=staged-mma pass=fwd+bwd dtype=bf16 rotation=true", &p, DType::BF16, true));
    assert!(!row_selected("bwd=staged", &p, DType::BF16, true));
    assert!(!row_selected("V=52428", &p, DType::BF16, true));
    assert!(!row_selected("pass=fwd", &p, DType::BF16, true));
    assert!(!row_selected("dtype=f32", &p, DType::BF16, true));
    assert!(!row_selected("C=256", &p, DType::BF16, true));
    assert!(!row_selected("V", &p, DType::BF16, true));
}
