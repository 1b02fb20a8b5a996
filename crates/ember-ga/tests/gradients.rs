//! Vector–Jacobian products against central finite differences.

mod common;

use common::*;
use ember_ga::emit::program;
use ember_ga::eval::Compiled;
use ember_ga::{Algebra, Multivector, Program};

/// Checks every gradient output of `prog` (after `vjp`) against finite differences
/// of `L = Σ g_out · out` computed with the forward-only program `fwd`.
fn check(fwd: &Program, prog: &Program, what: &str, rng: &mut Rng) {
    let f = Compiled::new(&fwd.lower("f").unwrap());
    let ir = prog.lower("g").unwrap();
    let g = Compiled::new(&ir);
    let fwd_inputs = fwd.inputs();
    let all_inputs = prog.inputs();
    let vals: Vec<Vec<f64>> = all_inputs.iter().map(|grp| rng.vec(grp.shape.len())).collect();
    let refs: Vec<&[f64]> = vals.iter().map(|v| v.as_slice()).collect();
    let got = g.eval(&refs).unwrap();
    let outs = prog.outputs();
    let n_fwd_out = fwd.outputs().len();
    let upstream: Vec<&Vec<f64>> =
        fwd.outputs().iter().map(|o| &vals[all_inputs.iter().position(|i| i.name == format!("g_{}", o.name)).unwrap()]).collect();
    let loss = |x: &[Vec<f64>]| -> f64 {
        let r: Vec<&[f64]> = x.iter().map(|v| v.as_slice()).collect();
        let o = f.eval(&r).unwrap();
        o.iter().zip(&upstream).map(|(oi, gi)| oi.iter().zip(gi.iter()).map(|(a, b)| a * b).sum::<f64>()).sum()
    };
    let mut checked = 0;
    for (k, out) in outs.iter().enumerate().skip(n_fwd_out) {
        let wrt = out.name.strip_prefix("d_").unwrap();
        let gi = fwd_inputs.iter().position(|i| i.name == wrt).unwrap();
        for j in 0..out.shape.len() {
            let h = 1e-5;
            let mut p: Vec<Vec<f64>> = vals[..fwd_inputs.len()].to_vec();
            p[gi][j] += h;
            let lp = loss(&p);
            p[gi][j] -= 2.0 * h;
            let lm = loss(&p);
            let fd = (lp - lm) / (2.0 * h);
            let an = got[k][j];
            assert!((fd - an).abs() < 1e-6 * (1.0 + an.abs()), "{what}: d_{wrt}[{j}] analytic {an} vs finite difference {fd}");
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn named_expressions_have_correct_vjps() {
    let mut rng = Rng::new(11);
    for spec in ["3,0,0", "1,3,0", "3,0,1"] {
        let alg = Algebra::parse(spec).unwrap();
        for expr in ["gp", "wgp", "sandwich", "norm2", "regressive", "inner", "commutator", "dual", "scalar"] {
            let fwd = program(&alg, expr, false).unwrap();
            let prog = program(&alg, expr, true).unwrap();
            check(&fwd, &prog, &format!("{spec} {expr}"), &mut rng);
        }
    }
}

#[test]
fn vjp_uses_componentwise_dot_not_reversed_scalar_product() {
    // In Cl(1,3) e2*e2 = -1, so <x ~g>_0 differs from Σ x_i g_i; the VJP of the
    // identity map must be the upstream gradient itself.
    let alg = Algebra::parse("1,3").unwrap();
    let mut prog = Program::new();
    let x = prog.input_full("x", &alg).unwrap();
    prog.output("out", &x).unwrap();
    prog.vjp(&["x"]).unwrap();
    let d = prog.output_polys("d_x").unwrap();
    let g = prog.input_syms("g_out").unwrap();
    for (k, p) in d.iter().enumerate() {
        assert_eq!(*p, ember_ga::Poly::sym(g[k]));
    }
}

#[test]
fn staged_expression_gradients() {
    // user-built expression with staging: (x y) staged, then sandwich-like product
    let mut rng = Rng::new(5);
    for spec in ["3,0,0", "1,3,0", "3,0,1"] {
        let alg = Algebra::parse(spec).unwrap();
        let build = |grad: bool| {
            let mut prog = Program::new();
            let x = prog.input_grades("x", &alg, &[1, 2]).unwrap();
            let y = prog.input_grades("y", &alg, &[0, 1]).unwrap();
            let xy = prog.stage(&(&x * &y).unwrap()).unwrap();
            let out: Multivector = ((&xy ^ &x).unwrap() + (&xy * &y).unwrap()).unwrap();
            prog.output("out", &out).unwrap();
            if grad {
                prog.vjp(&["x", "y"]).unwrap();
            }
            prog
        };
        check(&build(false), &build(true), &format!("{spec} staged"), &mut rng);
    }
}
