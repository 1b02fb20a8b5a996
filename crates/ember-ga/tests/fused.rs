//! Composing the IR by hand, as fused layers do: activations before the
//! weighted product, a per-grade RMS normalization after it, and the chain rule
//! through the activation in the backward pass.

mod common;

use std::collections::HashMap;

use common::*;
use ember_ga::eval::Compiled;
use ember_ga::ir::{Builder, UnaryOp, Val};
use ember_ga::wgp::PathTable;
use ember_ga::{numeric, Algebra, Program};

/// Φ(v) = 0.5 (1 + erf(v / √2)), the standard normal CDF.
fn normal_cdf(b: &mut Builder, v: Val) -> Val {
    let s = b.constant(std::f64::consts::FRAC_1_SQRT_2);
    let a = b.mul(v, s);
    let e = b.unary(UnaryOp::Erf, a);
    let one = b.constant(1.0);
    let t = b.add(one, e);
    let h = b.constant(0.5);
    b.mul(h, t)
}

fn gelu(b: &mut Builder, v: Val) -> Val {
    // v Φ(v)
    let cdf = normal_cdf(b, v);
    b.mul(v, cdf)
}

fn gelu_grad(b: &mut Builder, v: Val) -> Val {
    // Φ(v) + v exp(-v²/2) / √(2π)
    let cdf = normal_cdf(b, v);
    let vv = b.mul(v, v);
    let mh = b.constant(-0.5);
    let ex = b.mul(vv, mh);
    let ex = b.unary(UnaryOp::Exp, ex);
    let k = b.constant(1.0 / (2.0 * std::f64::consts::PI).sqrt());
    let pdf = b.mul(ex, k);
    let vp = b.mul(v, pdf);
    b.add(cdf, vp)
}

fn gelu_f64(v: f64) -> f64 {
    0.5 * v * (1.0 + ember_ga::ir::erf(v * std::f64::consts::FRAC_1_SQRT_2))
}

#[test]
fn gelu_wgp_rmsnorm_forward_and_backward() {
    let alg = Algebra::parse("3,0,1").unwrap();
    let dim = alg.dim();
    let labels: Vec<String> = alg.blade_names().to_vec();
    let p = PathTable::new(&alg).len();
    let eps = 1e-6;

    let mut b = Builder::new();
    let xr = b.input_group("x_raw", labels.clone()).unwrap();
    let yr = b.input_group("y_raw", labels.clone()).unwrap();
    let gx: Vec<Val> = xr.iter().map(|&v| gelu(&mut b, v)).collect();
    let gy: Vec<Val> = yr.iter().map(|&v| gelu(&mut b, v)).collect();
    let up = b.input_group("g_out", labels.clone()).unwrap();

    let mut prog = Program::new();
    let x = prog.input_full("x", &alg).unwrap();
    let y = prog.input_full("y", &alg).unwrap();
    let w = prog.input_scalars("w", p).unwrap();
    let out = x.wgp(&y, &w).unwrap();
    prog.output_blades("out", &out, &(0..dim).collect::<Vec<_>>()).unwrap();
    prog.vjp(&["x", "y", "w"]).unwrap();
    let bind: HashMap<String, Vec<Val>> =
        [("x".to_string(), gx), ("y".to_string(), gy), ("g_out".to_string(), up)].into_iter().collect();
    let vals = prog.lower_into(&mut b, &bind).unwrap();

    // per-grade RMS normalization of the forward output
    let o = &vals["out"];
    let mut normed = vec![Val::Zero; dim];
    for k in alg.grades() {
        let r = alg.grade_range(k);
        let sq: Vec<Val> = r.clone().map(|j| b.mul(o[j], o[j])).collect();
        let ss = b.sum(&sq);
        let inv = b.constant(1.0 / r.len() as f64);
        let ms = b.mul(ss, inv);
        let e = b.constant(eps);
        let ms = b.add(ms, e);
        let rs = b.unary(UnaryOp::Rsqrt, ms);
        for j in r {
            normed[j] = b.mul(o[j], rs);
        }
    }
    b.output_group("y_norm", labels.clone(), normed).unwrap();
    // chain rule through gelu
    let dx: Vec<Val> = (0..dim)
        .map(|j| {
            let d = gelu_grad(&mut b, xr[j]);
            b.mul(vals["d_x"][j], d)
        })
        .collect();
    b.output_group("d_x_raw", labels.clone(), dx).unwrap();
    b.output_group("d_w", (0..p).map(|i| format!("w{i}")).collect(), vals["d_w"].clone()).unwrap();
    let ir = b.finish("fused").unwrap();
    assert_eq!(ir.inputs.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["x_raw", "y_raw", "g_out", "w"]);
    let c = Compiled::new(&ir);

    let mut rng = Rng::new(8);
    let xv = rng.vec(dim);
    let yv = rng.vec(dim);
    let gv = rng.vec(dim);
    let wv = rng.vec(p);
    let got = c.eval(&[&xv, &yv, &gv, &wv]).unwrap();

    let fwd = |xv: &[f64], yv: &[f64], wv: &[f64]| {
        let gx: Vec<f64> = xv.iter().map(|&v| gelu_f64(v)).collect();
        let gy: Vec<f64> = yv.iter().map(|&v| gelu_f64(v)).collect();
        numeric::wgp(&alg, &gx, &gy, wv).unwrap()
    };
    let o = fwd(&xv, &yv, &wv);
    let mut want = vec![0.0; dim];
    for k in alg.grades() {
        let r = alg.grade_range(k);
        let ms = r.clone().map(|j| o[j] * o[j]).sum::<f64>() / r.len() as f64;
        for j in r {
            want[j] = o[j] / (ms + eps).sqrt();
        }
    }
    assert_close(&got[0], &want, 1e-9, "y_norm");
    let loss = |xv: &[f64], wv: &[f64]| fwd(xv, &yv, wv).iter().zip(&gv).map(|(a, b)| a * b).sum::<f64>();
    for j in 0..dim {
        let h = 1e-6;
        let mut xp = xv.clone();
        xp[j] += h;
        let mut xm = xv.clone();
        xm[j] -= h;
        let fd = (loss(&xp, &wv) - loss(&xm, &wv)) / (2.0 * h);
        assert!((fd - got[1][j]).abs() < 1e-6, "d_x_raw[{j}]: {} vs {fd}", got[1][j]);
    }
    for i in 0..p {
        let h = 1e-6;
        let mut wp = wv.clone();
        wp[i] += h;
        let mut wm = wv.clone();
        wm[i] -= h;
        let fd = (loss(&xv, &wp) - loss(&xv, &wm)) / (2.0 * h);
        assert!((fd - got[2][i]).abs() < 1e-6, "d_w[{i}]: {} vs {fd}", got[2][i]);
    }
    // the fused program prints as CUDA and Rust
    let spec = ember_ga::cuda::KernelSpec::elementwise(&ir, "fused_kernel", ember_ga::layout::DType::BF16);
    let src = ember_ga::cuda::kernel(&ir, &spec).unwrap();
    assert!(src.contains("erff(") && src.contains("rsqrtf(") && src.contains("expf("));
    let rs = ember_ga::print_rust::function(&ir, ember_ga::print_rust::RustFloat::F32);
    assert!(rs.contains("ember_erf("));
}
