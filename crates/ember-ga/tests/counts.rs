use ember_ga::{Algebra, Program};

fn counts(spec: &str, expr: &str) -> (usize, usize) {
    let alg = Algebra::parse(spec).unwrap();
    let mut prog = Program::new();
    match expr {
        "gp" => {
            let x = prog.input_full("x", &alg).unwrap();
            let y = prog.input_full("y", &alg).unwrap();
            prog.output("out", &(&x * &y).unwrap()).unwrap();
        }
        "wgp" => {
            let x = prog.input_full("x", &alg).unwrap();
            let y = prog.input_full("y", &alg).unwrap();
            let p = ember_ga::wgp::paths(&alg).len();
            let w = prog.input_scalars("w", p).unwrap();
            prog.output("out", &x.wgp(&y, &w).unwrap()).unwrap();
        }
        "sandwich" => {
            let x = prog.input_even("x", &alg).unwrap();
            let y = prog.input_grades("y", &alg, &[1]).unwrap();
            let s = prog.sandwich(&x, &y).unwrap();
            prog.output("out", &s).unwrap();
        }
        _ => unreachable!(),
    }
    let ir = prog.lower("k").unwrap();
    let c = ir.counts();
    (c.muls, c.adds)
}

#[test]
fn table() {
    for expr in ["gp", "sandwich", "wgp"] {
        for spec in ["2,0,0", "3,0,0", "3,0,1", "1,3,0"] {
            let t = std::time::Instant::now();
            let (m, a) = counts(spec, expr);
            println!("{expr} {spec}: {m}/{a}  ({:?})", t.elapsed());
        }
    }
}
