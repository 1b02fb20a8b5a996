//! Algebraic identities checked exactly on symbolic multivectors.

mod common;

use common::*;
use ember_ga::emit::program;
use ember_ga::eval::Compiled;
use ember_ga::{Algebra, GaError, Multivector, Poly, Program};

const SPECS: [&str; 5] = ["2,0,0", "3,0,0", "3,0,1", "1,3,0", "2,1,1"];

fn three_inputs(spec: &str) -> (Program, Multivector, Multivector, Multivector) {
    let alg = Algebra::parse(spec).unwrap();
    let mut prog = Program::new();
    let a = prog.input_full("a", &alg).unwrap();
    let b = prog.input_full("b", &alg).unwrap();
    let c = prog.input_full("c", &alg).unwrap();
    (prog, a, b, c)
}

#[test]
fn geometric_product_is_associative_and_distributive() {
    for spec in SPECS {
        let (_p, a, b, c) = three_inputs(spec);
        let left = ((&a * &b) * &c).unwrap();
        let right = (&a * (&b * &c)).unwrap();
        assert_eq!(left, right, "{spec}: (ab)c = a(bc)");
        let d1 = (&a * (&b + &c)).unwrap();
        let d2 = ((&a * &b).unwrap() + (&a * &c).unwrap()).unwrap();
        assert_eq!(d1, d2, "{spec}: a(b+c) = ab + ac");
        let d3 = ((&b + &c) * &a).unwrap();
        let d4 = ((&b * &a).unwrap() + (&c * &a).unwrap()).unwrap();
        assert_eq!(d3, d4, "{spec}: (b+c)a = ba + ca");
    }
}

#[test]
fn basis_vectors_square_to_the_metric_and_anticommute() {
    for spec in SPECS {
        let alg = Algebra::parse(spec).unwrap();
        let vecs: Vec<usize> = alg.grade_range(1).collect();
        for (bi, &i) in vecs.iter().enumerate() {
            let ei = Multivector::blade(&alg, i).unwrap();
            let sq = (&ei * &ei).unwrap();
            let m = alg.vector_square(bi) as i64;
            assert_eq!(sq, Multivector::scalar(&alg, m), "{spec}: {}^2", alg.blade_name(i));
            for &j in &vecs {
                if i == j {
                    continue;
                }
                let ej = Multivector::blade(&alg, j).unwrap();
                let ij = (&ei * &ej).unwrap();
                let ji = (&ej * &ei).unwrap();
                assert_eq!(ij, -ji, "{spec}: e_i e_j = -e_j e_i");
            }
        }
    }
}

#[test]
fn reverse_of_product_is_product_of_reverses() {
    for spec in SPECS {
        let (_p, a, b, _c) = three_inputs(spec);
        let lhs = (&a * &b).unwrap().rev();
        let rhs = (b.rev() * a.rev()).unwrap();
        assert_eq!(lhs, rhs, "{spec}: ~(ab) = ~b ~a");
        assert_eq!(a.rev().rev(), a);
        assert_eq!(a.involute().involute(), a);
        // conjugate = reverse ∘ involution, and an anti-automorphism
        assert_eq!(a.conjugate(), a.rev().involute());
        assert_eq!((&a * &b).unwrap().conjugate(), (b.conjugate() * a.conjugate()).unwrap());
        // involution is an automorphism
        assert_eq!((&a * &b).unwrap().involute(), (a.involute() * b.involute()).unwrap());
    }
}

#[test]
fn dual_undual_are_inverse_also_for_degenerate_metrics() {
    for spec in SPECS {
        let (_p, a, _b, _c) = three_inputs(spec);
        assert_eq!(a.dual().undual(), a, "{spec}: undual(dual(a)) = a");
        assert_eq!(a.undual().dual(), a, "{spec}: dual(undual(a)) = a");
    }
    // in PGA every blade's complement wedges to the pseudoscalar
    let alg = Algebra::parse("3,0,1").unwrap();
    let ps = Multivector::blade(&alg, alg.dim() - 1).unwrap();
    for i in 0..alg.dim() {
        let e = Multivector::blade(&alg, i).unwrap();
        assert_eq!((&e ^ &e.dual()).unwrap(), ps, "{} ∧ dual", alg.blade_name(i));
    }
}

#[test]
fn outer_product_from_grade_projections() {
    for spec in SPECS {
        let (_p, a, b, _c) = three_inputs(spec);
        let alg = a.algebra().clone();
        let wedge = (&a ^ &b).unwrap();
        let mut sum = Multivector::zero(&alg);
        for r in alg.grades() {
            for s in alg.grades() {
                if r + s <= alg.n() {
                    let part = (a.grade(r) * b.grade(s)).unwrap().grade(r + s);
                    sum = (sum + part).unwrap();
                }
            }
        }
        assert_eq!(wedge, sum, "{spec}: a∧b = Σ <<a>_r <b>_s>_(r+s)");
        // inner and contractions likewise
        let mut inner = Multivector::zero(&alg);
        let mut left = Multivector::zero(&alg);
        for r in alg.grades() {
            for s in alg.grades() {
                let prod = (a.grade(r) * b.grade(s)).unwrap();
                inner = (inner + prod.grade(r.abs_diff(s))).unwrap();
                if s >= r {
                    left = (left + prod.grade(s - r)).unwrap();
                }
            }
        }
        assert_eq!((&a | &b).unwrap(), inner, "{spec}: inner");
        assert_eq!((&a << &b).unwrap(), left, "{spec}: left contraction");
    }
}

#[test]
fn commutator_and_products_relations() {
    for spec in SPECS {
        let (_p, a, b, _c) = three_inputs(spec);
        let ab = (&a * &b).unwrap();
        let ba = (&b * &a).unwrap();
        let comm2 = a.commutator(&b).unwrap().scale(2);
        assert_eq!(comm2, (&ab - &ba).unwrap(), "{spec}: 2 a×b = ab - ba");
        let anti2 = a.anticommutator(&b).unwrap().scale(2);
        assert_eq!(anti2, (&ab + &ba).unwrap(), "{spec}: ab + ba");
        assert_eq!(a.scalar_product(&b).unwrap(), ab.coeff(0));
        // regressive via duals
        let reg = (&a & &b).unwrap();
        let via = (a.dual() ^ b.dual()).unwrap().undual();
        assert_eq!(reg, via, "{spec}: a ∨ b");
    }
}

#[test]
fn sandwich_of_even_with_vector_is_a_vector() {
    for spec in ["3,0,0", "3,0,1", "1,3,0", "2,2,2"] {
        let alg = Algebra::parse(spec).unwrap();
        let mut prog = Program::new();
        let r = prog.input_even("r", &alg).unwrap();
        let v = prog.input_grades("v", &alg, &[1]).unwrap();
        let s = r.sandwich(&v).unwrap();
        // odd and reverse-symmetric: grades 1 and 5 only (5 needs n >= 5)
        let want = if alg.n() >= 5 { vec![1, 5] } else { vec![1] };
        assert_eq!(s.grades(), want, "{spec}");
        // the staged version expands to the same thing
        let staged = prog.sandwich(&r, &v).unwrap();
        for (b, p) in staged.terms() {
            assert_eq!(prog.expand(p), s.coeff(*b));
        }
    }
}

#[test]
fn vector_times_bivector_touches_only_reachable_blades() {
    let alg = Algebra::parse("4,0,0").unwrap();
    let mut prog = Program::new();
    let v = prog.input_grades("v", &alg, &[1]).unwrap();
    let b = prog.input_grades("b", &alg, &[2]).unwrap();
    let p = (&v * &b).unwrap();
    assert_eq!(p.grades(), vec![1, 3]);
    assert_eq!(p.terms().len(), 4 + 4);
}

#[test]
fn mismatched_algebras_and_contexts_are_errors() {
    let a3 = Algebra::parse("3,0,0").unwrap();
    let a2 = Algebra::parse("2,0,0").unwrap();
    let mut p = Program::new();
    let x = p.input_full("x", &a3).unwrap();
    let y = p.input_full("y", &a2).unwrap();
    let e = (&x * &y).unwrap_err();
    assert!(matches!(e, GaError::AlgebraMismatch { .. }));
    assert_eq!(e.to_string(), "mismatched algebras: expected Cl(3,0,0), got Cl(2,0,0)");
    let e = (&x ^ &y).unwrap_err();
    assert!(e.to_string().contains("mismatched algebras"));
    let e = x.wgp(&y, &[]).unwrap_err();
    assert!(e.to_string().contains("mismatched algebras"));
    // a chained expression propagates the error
    let e = ((&x * &x) * &y).unwrap_err();
    assert!(matches!(e, GaError::AlgebraMismatch { .. }));

    let mut q = Program::new();
    let z = q.input_full("z", &a3).unwrap();
    let e = (&x * &z).unwrap_err();
    assert!(matches!(e, GaError::ContextMismatch { .. }), "{e}");
    let e = p.output("out", &z).unwrap_err();
    assert!(matches!(e, GaError::ContextMismatch { .. }), "{e}");
    // wrong number of weights
    let w = p.input_scalars("w", 3).unwrap();
    let e = x.wgp(&x, &w).unwrap_err();
    assert!(e.to_string().contains("expected 20, got 3"), "{e}");
    // duplicate and invalid names
    assert!(p.input_full("x", &a3).unwrap_err().to_string().contains("declared twice"));
    assert!(p.input_full("1x", &a3).unwrap_err().to_string().contains("expected an identifier"));
    // polynomials of another program cannot be recorded or lowered
    let mut big = Program::new();
    let many = big.input_scalars("m", 100).unwrap();
    let e = p.output_scalars("o", &[many[99].clone()]).unwrap_err();
    assert!(e.to_string().contains("expected symbols of this program"), "{e}");
    let mut b = ember_ga::Builder::new();
    let e = ember_ga::lower::lower_system(&mut b, &[vec![many[5].clone()]], &Default::default()).unwrap_err();
    assert!(e.to_string().contains("neither bound"), "{e}");
    // unknown expression, bad spec via emit
    let e = program(&a3, "gpp", false).unwrap_err();
    assert!(e.to_string().contains("unknown expression \"gpp\"; expected one of: gp, wgp"), "{e}");
    let e = ember_ga::emit::lower("3,0,x", "gp", false).unwrap_err();
    assert!(matches!(e, GaError::BadSpec { .. }));
    let e = ember_ga::emit::lower("4,3,0", "gp", false).unwrap_err();
    assert!(e.to_string().contains("n = p+q+r = 7"), "{e}");
}

#[test]
fn cse_preserves_values() {
    // the lowered program evaluates to the same numbers as its exact polynomials
    let mut rng = Rng::new(99);
    for spec in ["3,0,0", "3,0,1", "1,3,0"] {
        let alg = Algebra::parse(spec).unwrap();
        for expr in ["wgp", "sandwich", "gp", "norm2", "regressive"] {
            let prog = program(&alg, expr, true).unwrap();
            let ir = prog.lower("k").unwrap();
            let c = Compiled::new(&ir);
            let inputs = prog.inputs();
            let vals: Vec<Vec<f64>> = inputs.iter().map(|g| rng.vec(g.shape.len())).collect();
            let mut symval = Vec::new();
            for (g, v) in inputs.iter().zip(&vals) {
                let syms = prog.input_syms(&g.name).unwrap();
                for (s, x) in syms.iter().zip(v) {
                    if symval.len() <= *s as usize {
                        symval.resize(*s as usize + 1, 0.0);
                    }
                    symval[*s as usize] = *x;
                }
            }
            let refs: Vec<&[f64]> = vals.iter().map(|v| v.as_slice()).collect();
            let got = c.eval(&refs).unwrap();
            for (k, o) in prog.outputs().iter().enumerate() {
                let polys = prog.output_polys(&o.name).unwrap();
                let want: Vec<f64> = polys.iter().map(|p: &Poly| p.eval(&|s| symval[s as usize])).collect();
                assert_close(&got[k], &want, 1e-12, &format!("{spec} {expr} {}", o.name));
            }
        }
    }
}

#[test]
fn generation_is_deterministic_and_displayable() {
    for (spec, expr) in [("3,0,1", "sandwich"), ("1,3,0", "wgp"), ("2,0,0", "regressive")] {
        let alg = Algebra::parse(spec).unwrap();
        let a = program(&alg, expr, true).unwrap().lower("k").unwrap();
        let b = program(&alg, expr, true).unwrap().lower("k").unwrap();
        assert_eq!(a, b, "{spec} {expr}");
    }
    let alg = Algebra::parse("2,0").unwrap();
    let mut p = Program::new();
    let x = p.input_grades("x", &alg, &[1]).unwrap();
    let y = p.input_grades("y", &alg, &[1]).unwrap();
    let w = (&x ^ &y).unwrap();
    assert_eq!(p.display(&w), "(x[0]*y[1] - x[1]*y[0])*e12");
}
