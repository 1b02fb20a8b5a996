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

