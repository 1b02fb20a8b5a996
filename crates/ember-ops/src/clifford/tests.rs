use super::reference::{self, Dims};
use super::*;
use crate::harness::check::{CheckCtx, Tier};
use crate::OpFamily;
use ember_core::rng;

fn randv(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|i| scale * rng::normal(seed, i as u64)).collect()
}

// ---- independent oracle: the weighted products of Cl(2,0) and Cl(3,0) written out by hand ---------

/// Cl(2,0), blades 1 e1 e2 e12; weights in flash-clifford's order:
/// w0 X0Y0, w1 X0Y1, w2 X0Y2, w3 X1·Y1, w4 X1Y0, w5 X1Y2, w6 X1∧Y1, w7 X2Y2, w8 X2Y1, w9 X2Y0.
fn cl20_hand(x: &[f64], y: &[f64], w: &[f64]) -> Vec<f64> {
    vec![
        w[0] * x[0] * y[0] + w[3] * (x[1] * y[1] + x[2] * y[2]) - w[7] * x[3] * y[3],
        w[1] * x[0] * y[1] + w[4] * x[1] * y[0] - w[5] * x[2] * y[3] + w[8] * x[3] * y[2],
        w[1] * x[0] * y[2] + w[4] * x[2] * y[0] + w[5] * x[1] * y[3] - w[8] * x[3] * y[1],
        w[2] * x[0] * y[3] + w[6] * (x[1] * y[2] - x[2] * y[1]) + w[9] * x[3] * y[0],
    ]
}

/// Cl(3,0), blades 1 e1 e2 e3 e12 e13 e23 e123, from vector algebra grade by grade. Paths by
/// (grade x, grade out, grade y): w0 (0,0,0) w1 (0,1,1) w2 (0,2,2) w3 (0,3,3) w4 (1,0,1)=X1·Y1
/// w5 (1,1,0) w6 (1,1,2) w7 (1,2,1)=X1∧Y1 w8 (1,2,3) w9 (1,3,2) w10 (2,0,2) w11 (2,1,1) w12 (2,1,3)
/// w13 (2,2,0) w14 (2,2,2) w15 (2,3,1) w16 (3,0,3) w17 (3,1,2) w18 (3,2,1) w19 (3,3,0).
fn cl30_hand(x: &[f64], y: &[f64], w: &[f64]) -> Vec<f64> {
    let (a0, a, ab, at) = (x[0], [x[1], x[2], x[3]], [x[4], x[5], x[6]], x[7]);
    let (b0, b, bb, bt) = (y[0], [y[1], y[2], y[3]], [y[4], y[5], y[6]], y[7]);
    // bivector components (B12, B13, B23)
    let dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let wedge = [a[0] * b[1] - a[1] * b[0], a[0] * b[2] - a[2] * b[0], a[1] * b[2] - a[2] * b[1]];
    // vector · bivector: ⟨a B⟩₁ and a∧B
    let vb1 = [-a[1] * bb[0] - a[2] * bb[1], a[0] * bb[0] - a[2] * bb[2], a[0] * bb[1] + a[1] * bb[2]];
    let vb3 = a[0] * bb[2] - a[1] * bb[1] + a[2] * bb[0];
    // vector · trivector: a e123 = a1 e23 − a2 e13 + a3 e12
    let vt2 = [a[2] * bt, -a[1] * bt, a[0] * bt];
    // bivector · vector: ⟨A b⟩₁ and A∧b
    let bv1 = [ab[0] * b[1] + ab[1] * b[2], -ab[0] * b[0] + ab[2] * b[2], -ab[1] * b[0] - ab[2] * b[1]];
    let bv3 = ab[0] * b[2] - ab[1] * b[1] + ab[2] * b[0];
    // bivector · bivector: scalar and commutator parts
    let bb0 = -(ab[0] * bb[0] + ab[1] * bb[1] + ab[2] * bb[2]);
    let bb2 = [-ab[1] * bb[2] + ab[2] * bb[1], ab[0] * bb[2] - ab[2] * bb[0], -ab[0] * bb[1] + ab[1] * bb[0]];
    // bivector · trivector: e12 e123 = −e3, e13 e123 = e2, e23 e123 = −e1
    let bt1 = [-ab[2] * bt, ab[1] * bt, -ab[0] * bt];
    // trivector · vector: e123 e1 = e23, e123 e2 = −e13, e123 e3 = e12
    let tv2 = [at * b[2], -at * b[1], at * b[0]];
    // trivector · bivector: e123 e12 = −e3, e123 e13 = e2, e123 e23 = −e1
    let tb1 = [-at * bb[2], at * bb[1], -at * bb[0]];
    let mut o = vec![0.0; 8];
    o[0] = w[0] * a0 * b0 + w[5] * dot + w[13] * bb0 - w[19] * at * bt;
    for k in 0..3 {
        o[1 + k] = w[1] * a0 * b[k] + w[4] * a[k] * b0 + w[7] * vb1[k] + w[11] * bv1[k] + w[15] * bt1[k] + w[18] * tb1[k];
        o[4 + k] = w[2] * a0 * bb[k] + w[6] * wedge[k] + w[9] * vt2[k] + w[10] * ab[k] * b0 + w[14] * bb2[k] + w[17] * tv2[k];
    }
    o[7] = w[3] * a0 * bt + w[8] * vb3 + w[12] * bv3 + w[16] * at * b0;
    o
}

/// The hand-written table above uses its own path numbering; map it to ember-ga's (flash-clifford's)
/// order by looking each path up.
fn cl30_hand_in_ga_order(x: &[f64], y: &[f64], w_ga: &[f64]) -> Vec<f64> {
    let alg = ember_ga::Algebra::new(3, 0, 0).unwrap();
    let t = ember_ga::wgp::PathTable::new(&alg);
    // (grade x, grade y, grade out) of the hand table's w0..w19
    let hand = [
        (0, 0, 0),
        (0, 1, 1),
        (0, 2, 2),
        (0, 3, 3),
        (1, 0, 1),
        (1, 1, 0),
        (1, 1, 2),
        (1, 2, 1),
        (1, 2, 3),
        (1, 3, 2),
        (2, 0, 2),
        (2, 1, 1),
        (2, 1, 3),
        (2, 2, 0),
        (2, 2, 2),
        (2, 3, 1),
        (3, 0, 3),
        (3, 1, 2),
        (3, 2, 1),
        (3, 3, 0),
    ];
    let w: Vec<f64> = hand.iter().map(|&(gx, gy, go)| w_ga[t.index(gx, gy, go).expect("path")]).collect();
    cl30_hand(x, y, &w)
}

#[test]
fn hand_written_products_match_the_reference() {
    for (spec, m, p) in [("2,0", 4, 10), ("3,0", 8, 20)] {
        let layer = Layer::new(spec).unwrap();
        assert_eq!((layer.blades(), layer.paths()), (m, p));
        let dims = Dims { m, b: 3, n: 5 };
        let x = randv(1, m * 15, 1.0);
        let y = randv(2, m * 15, 1.0);
        let w = randv(3, 5 * p, 1.0);
        let o = reference::wgp_layer(layer.algebra(), dims, &x, &y, &w, false);
        for b in 0..3 {
            for n in 0..5 {
                let xe: Vec<f64> = (0..m).map(|j| x[dims.at(j, b, n)]).collect();
                let ye: Vec<f64> = (0..m).map(|j| y[dims.at(j, b, n)]).collect();
                let we = &w[n * p..(n + 1) * p];
                let hand = if m == 4 { cl20_hand(&xe, &ye, we) } else { cl30_hand_in_ga_order(&xe, &ye, we) };
                for j in 0..m {
                    let got = o[dims.at(j, b, n)];
                    assert!((got - hand[j]).abs() < 1e-12 * (1.0 + hand[j].abs()), "{spec} blade {j}: {got} vs hand {}", hand[j]);
                }
            }
        }
    }
    // flash-clifford's Cl(2,0) weight order is ember-ga's order: paths are identical.
    let t = ember_ga::wgp::PathTable::new(&ember_ga::Algebra::new(2, 0, 0).unwrap());
    assert_eq!(t.index(1, 1, 2), Some(6));
    assert_eq!(t.index(2, 1, 1), Some(8));
}

// ---- reference gradients against finite differences ---------------------------------------------

const FD_ALGEBRAS: [&str; 6] = ["2,0", "3,0", "3,0,1", "1,3", "0,1,1", "1,1,1"];

/// Central differences of L(v) = Σ g·f(v) for every coordinate of v.
fn fd_grad(v: &[f64], g: &[f64], f: &dyn Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    let h = 1e-6;
    (0..v.len())
        .map(|i| {
            let mut vp = v.to_vec();
            vp[i] += h;
            let mut vm = v.to_vec();
            vm[i] -= h;
            let (lp, lm): (f64, f64) = (f(&vp).iter().zip(g).map(|(a, b)| a * b).sum(), f(&vm).iter().zip(g).map(|(a, b)| a * b).sum());
            (lp - lm) / (2.0 * h)
        })
        .collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    let err = ember_core::compare::rel_err(got, want);
    assert!(err < 1e-6, "{what}: relative error {err:e}");
}

#[test]
fn fused_reference_gradients_match_finite_differences() {
    for spec in FD_ALGEBRAS {
        let layer = Layer::new(spec).unwrap();
        let alg = layer.algebra().clone();
        let (m, p) = (layer.blades(), layer.paths());
        let dims = Dims { m, b: 2, n: 3 };
        let len = m * 6;
        let (x, y, w, g) = (randv(11, len, 1.0), randv(12, len, 1.0), randv(13, 3 * p, 0.7), randv(14, len, 1.0));
        for (gelu, norm) in [(false, false), (true, false), (true, true)] {
            let (dx, dy, dw) = reference::fused_backward(&alg, dims, &x, &y, &w, &g, gelu, norm);
            let fwd = |x: &[f64], y: &[f64], w: &[f64]| reference::fused_forward(&alg, dims, x, y, w, gelu, norm).0;
            let tag = format!("{spec} gelu={gelu} norm={norm}");
            assert_close(&format!("{tag} d_x"), &dx, &fd_grad(&x, &g, &|v| fwd(v, &y, &w)));
            assert_close(&format!("{tag} d_y"), &dy, &fd_grad(&y, &g, &|v| fwd(&x, v, &w)));
            assert_close(&format!("{tag} d_w"), &dw, &fd_grad(&w, &g, &|v| fwd(&x, &y, v)));
        }
        let dgx = reference::mvgelu_bwd(dims, &x, &g);
        assert_close(&format!("{spec} mvgelu"), &dgx, &fd_grad(&x, &g, &|v| reference::mvgelu(dims, v)));
    }
}

#[test]
fn fc_and_linear_reference_gradients_match_finite_differences() {
    for spec in FD_ALGEBRAS {
        let layer = Layer::new(spec).unwrap();
        let alg = layer.algebra().clone();
        let (m, p, ng) = (layer.blades(), layer.paths(), layer.grades());
        let (nb, nin, nout) = (2, 2, 3);
        let dims = Dims { m, b: nb, n: nin };
        let (x, y) = (randv(21, m * nb * nin, 1.0), randv(22, m * nb * nin, 1.0));
        let w = randv(23, p * nin * nout, 0.5);
        let g = randv(24, m * nb * nout, 1.0);
        for norm in [false, true] {
            let (dx, dy, dw) = reference::fc_backward(&alg, dims, nout, &x, &y, &w, &g, norm);
            let fwd = |x: &[f64], y: &[f64], w: &[f64]| reference::fc_forward(&alg, dims, nout, x, y, w, norm).0;
            let tag = format!("{spec} fc norm={norm}");
            assert_close(&format!("{tag} d_x"), &dx, &fd_grad(&x, &g, &|v| fwd(v, &y, &w)));
            assert_close(&format!("{tag} d_y"), &dy, &fd_grad(&y, &g, &|v| fwd(&x, v, &w)));
            assert_close(&format!("{tag} d_w"), &dw, &fd_grad(&w, &g, &|v| fwd(&x, &y, v)));
        }
        let lw = randv(25, ng * nin * nout, 0.5);
        let bias = randv(26, nout, 1.0);
        let (dx, dw, db) = reference::linear_backward(&alg, dims, nout, &x, &lw, &g);
        let fwd = |x: &[f64], w: &[f64], b: &[f64]| reference::linear_forward(&alg, dims, nout, x, w, Some(b));
        assert_close(&format!("{spec} linear d_x"), &dx, &fd_grad(&x, &g, &|v| fwd(v, &lw, &bias)));
        assert_close(&format!("{spec} linear d_w"), &dw, &fd_grad(&lw, &g, &|v| fwd(&x, v, &bias)));
        assert_close(&format!("{spec} linear d_bias"), &db, &fd_grad(&bias, &g, &|v| fwd(&x, &lw, v)));
    }
}

#[test]
fn the_fc_product_is_the_wgp_summed_over_input_channels() {
    // With N_in = 1 and w[p, 0, m] = v[m, p], the fully connected product equals the weighted
    // product of the same (gelu'd) element against each output channel's weights.
    let layer = Layer::new("3,0,1").unwrap();
    let alg = layer.algebra().clone();
    let (m, p) = (layer.blades(), layer.paths());
    let nout = 3;
    let x = randv(31, m, 1.0);
    let y = randv(32, m, 1.0);
    let v = randv(33, nout * p, 1.0);
    let mut w = vec![0.0; p * nout];
    for mo in 0..nout {
        for q in 0..p {
            w[q * nout + mo] = v[mo * p + q];
        }
    }
    let o = reference::fc_layer(&alg, Dims { m, b: 1, n: 1 }, nout, &x, &y, &w);
    let (gx, gy) = (reference::mvgelu1(&x), reference::mvgelu1(&y));
    for mo in 0..nout {
        let want = ember_ga::numeric::wgp(&alg, &gx, &gy, &v[mo * p..(mo + 1) * p]).unwrap();
        for j in 0..m {
            assert!((o[j * nout + mo] - want[j]).abs() < 1e-12, "blade {j} channel {mo}");
        }
    }
}

// ---- the CPU fast path against the reference ------------------------------------------------------

#[test]
fn cpu_fast_path_matches_reference_in_every_dtype() {
    ember_core::set_poison_outputs(true);
    let t0 = std::time::Instant::now();
    let rows = Family.check(&CheckCtx::new(Device::Cpu, Tier::Quick)).unwrap();
    assert!(rows.len() > 500, "{} rows", rows.len());
    for r in &rows {
        assert!(r.pass(), "{r:?}");
    }
    eprintln!("clifford quick check: {} rows in {:.1} s", rows.len(), t0.elapsed().as_secs_f64());
}

#[test]
fn six_dimensional_algebras_run_on_the_cpu() {
    ember_core::set_poison_outputs(true);
    for spec in ["4,1,1", "0,0,6"] {
        let rows = super::suite::check_one_algebra(&CheckCtx::new(Device::Cpu, Tier::Quick), spec, &[(2, 3)], &[(2, 2, 3)], &[DType::F32]).unwrap();
        assert!(rows.len() >= 20, "{spec}: {} rows", rows.len());
        for r in &rows {
            assert!(r.pass(), "{r:?}");
        }
    }
}

#[test]
fn f64_runs_the_reference() {
    let layer = Layer::new("2,0").unwrap();
    let x = Tensor::from_vec(randv(41, 4 * 2 * 3, 1.0), &[4, 2, 3]).unwrap();
    let w = Tensor::from_vec(randv(42, 30, 1.0), &[3, 10]).unwrap();
    let f = fused::forward(&layer, &x, &x, &w, true).unwrap();
    let xv = x.to_vec_f64().unwrap();
    let (want, r) = reference::fused_forward(layer.algebra(), Dims { m: 4, b: 2, n: 3 }, &xv, &xv, &w.to_vec_f64().unwrap(), true, true);
    assert_eq!(f.out.to_vec_f64().unwrap(), want);
    assert_eq!(f.rms.unwrap().to_vec_f64().unwrap(), r.unwrap());
}

#[test]
fn generated_programs_cover_every_pair_and_path() {
    for (spec, nt) in [("2,0", 14), ("3,0", 44), ("3,0,1", 108), ("1,3", 128)] {
        let layer = Layer::new(spec).unwrap();
        assert_eq!(layer.pairs(), nt, "{spec}");
        let terms = layer.ir(Prog::Terms).unwrap();
        assert_eq!(terms.outputs[0].len(), nt);
        let bwd = layer.ir(Prog::Bwd { gelu: true, norm: true }).unwrap();
        let names: Vec<&str> = bwd.inputs.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["x", "y", "w", "g", "a", "c"]);
    }
}

// ---- bad input ------------------------------------------------------------------------------------

#[test]
fn bad_input_is_a_clear_error() {
    let layer = Layer::new("3,0").unwrap();
    let f32z = |s: &[usize]| Tensor::zeros(s, DType::F32, Device::Cpu).unwrap();
    let (x, w) = (f32z(&[8, 2, 3]), f32z(&[3, 20]));
    let e = fused::forward(&layer, &f32z(&[4, 2, 3]), &f32z(&[4, 2, 3]), &w, false).unwrap_err().to_string();
    assert!(e.contains("argument `x`") && e.contains("expected 8 for Cl(3,0,0), got 4"), "{e}");
    let e = fused::forward(&layer, &x, &f32z(&[8, 2, 4]), &w, false).unwrap_err().to_string();
    assert!(e.contains("argument `y`: expected shape the shape of x = [8, 2, 3], got [8, 2, 4]"), "{e}");
    let e = fused::forward(&layer, &x, &x, &f32z(&[3, 10]), false).unwrap_err().to_string();
    assert!(e.contains("argument `w`") && e.contains("P = 20 paths") && e.contains("got [3, 10]"), "{e}");
    let e = fused::forward(&layer, &x, &x, &Tensor::zeros(&[3, 20], DType::BF16, Device::Cpu).unwrap(), false).unwrap_err().to_string();
    assert!(e.contains("argument `w`: expected dtype f32, got bf16"), "{e}");
    let e = fused::forward(&layer, &f32z(&[8, 0, 3]), &f32z(&[8, 0, 3]), &w, false).unwrap_err().to_string();
    assert!(e.contains("argument `x` is empty"), "{e}");
    let e = fused::forward(&layer, &f32z(&[8, 6]), &f32z(&[8, 6]), &w, false).unwrap_err().to_string();
    assert!(e.contains("argument `x`: expected shape 3 dimensions"), "{e}");
    let f = fused::forward(&layer, &x, &x, &w, false).unwrap();
    let e = fused::backward(&layer, &x, &x, &w, &f, &Tensor::zeros(&[8, 2, 3], DType::F16, Device::Cpu).unwrap()).unwrap_err().to_string();
    assert!(e.contains("argument `d_out`: expected dtype f32, got f16"), "{e}");
    let e = fc::forward(&layer, &x, &x, &f32z(&[20, 4, 5]), false).unwrap_err().to_string();
    assert!(e.contains("argument `w`") && e.contains("N_in = 3"), "{e}");
    let e = linear::forward(&layer, &x, &f32z(&[3, 3, 5]), None).unwrap_err().to_string();
    assert!(e.contains("argument `w`") && e.contains("4 grades"), "{e}");
    let e = linear::forward(&layer, &x, &f32z(&[4, 3, 5]), Some(&f32z(&[4]))).unwrap_err().to_string();
    assert!(e.contains("argument `bias`: expected shape (N_out) = [5], got [4]"), "{e}");
    let f = fc::forward(&layer, &x, &x, &f32z(&[20, 3, 5]), true).unwrap();
    let e = fc::backward(&layer, &x, &x, &f32z(&[20, 3, 5]), &f, &f32z(&[8, 2, 3])).unwrap_err().to_string();
    assert!(e.contains("argument `d_out`: expected shape (M, B, N_out) = [8, 2, 5], got [8, 2, 3]"), "{e}");
    let e = Layer::new("4,3").unwrap_err().to_string();
    assert!(e.contains("argument `algebra`") && e.contains("n <= 6"), "{e}");
    let e = Layer::new("three").unwrap_err().to_string();
    assert!(e.contains("argument `algebra`"), "{e}");
}

#[test]
fn every_named_algebra_has_tile_configs_that_fit() {
    for spec in ["2,0", "3,0", "3,0,1", "1,3"] {
        let layer = Layer::new(spec).unwrap();
        for half in [false, true] {
            for kind in cuda::TileKind::ALL {
                let cfg = cuda::tile_cfg(kind, layer.tables(), half).unwrap_or_else(|| panic!("{spec} {kind:?} half={half}: no tile fits"));
                assert!(cfg.smem <= 200 * 1024 && cfg.upw * 8 >= cfg.units, "{spec} {kind:?}: {cfg:?}");
            }
        }
    }
    // n = 5 has hundreds of pairs: the fully connected product falls back to CUDA cores.
    let layer = Layer::new("2,2,1").unwrap();
    assert!(cuda::tile_cfg(cuda::TileKind::FcFwd, layer.tables(), false).is_none());
    assert!(cuda::tile_cfg(cuda::TileKind::LinFwd, layer.tables(), false).is_some());
}
