//! The IR evaluator against the independent numeric Clifford products.

mod common;

use common::*;
use ember_ga::emit::{program, EXPRS};
use ember_ga::eval::Compiled;
use ember_ga::numeric;
use ember_ga::product::{Linear, Product};
use ember_ga::program::Shape;
use ember_ga::Algebra;

fn reference(alg: &Algebra, expr: &str, x: &[f64], y: &[f64], w: &[f64]) -> Vec<f64> {
    let prod = |k: Product| numeric::product(alg, k, x, y).unwrap();
    let lin = |k: Linear| numeric::linear(alg, k, x).unwrap();
    match expr {
        "gp" => prod(Product::Geometric),
        "outer" => prod(Product::Outer),
        "inner" => prod(Product::Inner),
        "lcontract" => prod(Product::LeftContraction),
        "rcontract" => prod(Product::RightContraction),
        "scalar" => vec![prod(Product::Scalar)[0]],
        "commutator" => {
            // (xy - yx)/2 from geometric products
            let a = numeric::gp(alg, x, y).unwrap();
            let b = numeric::gp(alg, y, x).unwrap();
            a.iter().zip(&b).map(|(p, q)| (p - q) / 2.0).collect()
        }
        "anticommutator" => {
            let a = numeric::gp(alg, x, y).unwrap();
            let b = numeric::gp(alg, y, x).unwrap();
            a.iter().zip(&b).map(|(p, q)| (p + q) / 2.0).collect()
        }
        "regressive" => {
            let dx = numeric::linear(alg, Linear::Dual, x).unwrap();
            let dy = numeric::linear(alg, Linear::Dual, y).unwrap();
            numeric::linear(alg, Linear::Undual, &numeric::product(alg, Product::Outer, &dx, &dy).unwrap()).unwrap()
        }
        "reverse" => lin(Linear::Reverse),
        "involute" => lin(Linear::Involute),
        "conjugate" => lin(Linear::Conjugate),
        "dual" => lin(Linear::Dual),
        "undual" => lin(Linear::Undual),
        "norm2" => vec![numeric::norm2(alg, x).unwrap()],
        "wgp" => numeric::wgp(alg, x, y, w).unwrap(),
        "sandwich" => numeric::sandwich(alg, x, y).unwrap(),
        _ => unreachable!("{expr}"),
    }
}

#[test]
fn every_expression_in_every_algebra_matches_the_oracle() {
    let mut rng = Rng::new(7);
    let edge_cases = ["0,0,0", "1,0,0", "0,2,0", "0,0,2", "1,1,1"];
    for spec in ALGEBRAS.iter().chain(&edge_cases) {
        let alg = Algebra::parse(spec).unwrap();
        for (expr, _) in EXPRS {
            if alg.n() == 0 && *expr == "sandwich" {
                // no vectors to sandwich: a clear error instead
                let e = program(&alg, expr, false).unwrap_err();
                assert!(e.to_string().contains("grade of input \"y\" in Cl(0,0,0): expected <= 0, got 1"), "{e}");
                continue;
            }
            let prog = program(&alg, expr, false).unwrap();
            let ir = prog.lower("k").unwrap();
            let c = Compiled::new(&ir);
            let inputs = prog.inputs();
            for _trial in 0..3 {
                let vals: Vec<Vec<f64>> = inputs.iter().map(|g| rng.vec(g.shape.len())).collect();
                let mut x = vec![0.0; alg.dim()];
                let mut y = vec![0.0; alg.dim()];
                let mut w = vec![];
                for (g, v) in inputs.iter().zip(&vals) {
                    match g.name.as_str() {
                        "x" => x = dense(&alg, &g.shape, v),
                        "y" => y = dense(&alg, &g.shape, v),
                        "w" => w = v.clone(),
                        other => panic!("unexpected input {other}"),
                    }
                }
                let refs: Vec<&[f64]> = vals.iter().map(|v| v.as_slice()).collect();
                let got = c.eval(&refs).unwrap();
                let want_dense = reference(&alg, expr, &x, &y, &w);
                let out = &prog.outputs()[0];
                let want = match &out.shape {
                    Shape::Scalars(_) => want_dense.clone(),
                    shape => {
                        // components not stored must vanish
                        let stored = gather(shape, &want_dense);
                        let back = dense(&alg, shape, &stored);
                        assert_close(&back, &want_dense, 1e-12, &format!("{spec} {expr} unstored blades"));
                        stored
                    }
                };
                assert_close(&got[0], &want, 1e-12, &format!("{spec} {expr}"));
            }
        }
    }
}

#[test]
fn batched_f32_and_f64_runs_match_single_elements() {
    // odd sizes exercise partial chunks; the large one runs on several threads
    for (b, n) in [(37, 5), (300, 7), (1, 1)] {
        check_batched(b, n);
    }
}

fn check_batched(b: usize, n: usize) {
    use ember_ga::eval::{InputArg, OutputArg};
    use ember_ga::layout::{Layout, OutLayout};
    let alg = Algebra::parse("3,0,1").unwrap();
    let prog = program(&alg, "wgp", true).unwrap();
    let ir = prog.lower("k").unwrap();
    let c = Compiled::new(&ir);
    let mut rng = Rng::new(3);
    let lens: Vec<usize> = ir.inputs.iter().map(|g| g.len()).collect();
    // x, y, g_out per element; w per channel
    let layouts = [Layout::PerElement, Layout::PerElement, Layout::PerChannel, Layout::PerElement];
    let data: Vec<Vec<f64>> = lens.iter().zip(&layouts).map(|(&m, l)| rng.vec(l.len(m, b, n).unwrap())).collect();
    let out_lens: Vec<usize> = ir.outputs.iter().map(|g| g.len()).collect();
    // out, d_x, d_y per element; d_w summed per channel
    let olayouts = [OutLayout::PerElement, OutLayout::PerElement, OutLayout::PerElement, OutLayout::PerChannelSum];
    let mut outs: Vec<Vec<f64>> = out_lens.iter().zip(&olayouts).map(|(&m, l)| vec![0.0; l.len(m, b, n).unwrap()]).collect();
    {
        let ins: Vec<InputArg<f64>> = data.iter().zip(&layouts).map(|(d, &l)| InputArg { data: d, layout: l }).collect();
        let mut os: Vec<OutputArg<f64>> =
            outs.iter_mut().zip(&olayouts).map(|(d, &l)| OutputArg { data: d, layout: l }).collect();
        c.run(b, n, &ins, &mut os).unwrap();
    }
    let data32: Vec<Vec<f32>> = data.iter().map(|v| v.iter().map(|&x| x as f32).collect()).collect();
    let mut outs32: Vec<Vec<f32>> =
        out_lens.iter().zip(&olayouts).map(|(&m, l)| vec![0.0f32; l.len(m, b, n).unwrap()]).collect();
    {
        let ins: Vec<InputArg<f32>> = data32.iter().zip(&layouts).map(|(d, &l)| InputArg { data: d, layout: l }).collect();
        let mut os: Vec<OutputArg<f32>> =
            outs32.iter_mut().zip(&olayouts).map(|(d, &l)| OutputArg { data: d, layout: l }).collect();
        c.run(b, n, &ins, &mut os).unwrap();
    }
    let bn = b * n;
    let mut dw_sum = vec![0.0; n * out_lens[3]];
    for bi in 0..b {
        for ni in 0..n {
            let i = bi * n + ni;
            let single: Vec<Vec<f64>> = lens
                .iter()
                .zip(&layouts)
                .zip(&data)
                .map(|((&m, l), d)| match l {
                    Layout::PerElement => (0..m).map(|j| d[j * bn + i]).collect(),
                    Layout::PerChannel => (0..m).map(|j| d[ni * m + j]).collect(),
                    Layout::Uniform => d.clone(),
                })
                .collect();
            let refs: Vec<&[f64]> = single.iter().map(|v| v.as_slice()).collect();
            let want = c.eval(&refs).unwrap();
            for g in 0..3 {
                for j in 0..out_lens[g] {
                    assert_eq!(outs[g][j * bn + i], want[g][j]);
                    assert!((f64::from(outs32[g][j * bn + i]) - want[g][j]).abs() < 1e-4 * (1.0 + want[g][j].abs()));
                }
            }
            for j in 0..out_lens[3] {
                dw_sum[ni * out_lens[3] + j] += want[3][j];
            }
        }
    }
    assert_close(&outs[3], &dw_sum, 1e-12, "d_w per-channel sum");
    let o32: Vec<f64> = outs32[3].iter().map(|&x| f64::from(x)).collect();
    assert_close(&o32, &dw_sum, 1e-4, "d_w per-channel sum f32");
}

#[test]
fn run_checks_argument_shapes() {
    use ember_ga::eval::{InputArg, OutputArg};
    use ember_ga::layout::{Layout, OutLayout};
    let alg = Algebra::parse("2,0").unwrap();
    let ir = program(&alg, "gp", false).unwrap().lower("k").unwrap();
    let c = Compiled::new(&ir);
    let x = vec![0.0f32; 4 * 6];
    let y = vec![0.0f32; 4 * 5];
    let mut o = vec![0.0f32; 4 * 6];
    let ins = [InputArg { data: &x, layout: Layout::PerElement }, InputArg { data: &y, layout: Layout::PerElement }];
    let mut os = [OutputArg { data: &mut o, layout: OutLayout::PerElement }];
    let e = c.run(2, 3, &ins, &mut os).unwrap_err();
    assert!(e.to_string().contains("expected 24, got 20"), "{e}");
    let e = c.run(2, 3, &ins[..1], &mut os).unwrap_err();
    assert!(e.to_string().contains("number of input arguments: expected 2, got 1"), "{e}");
}
