//! Generated Rust source is compiled with rustc, run, and compared with the evaluator.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use ember_ga::emit::program;
use ember_ga::eval::Compiled;
use ember_ga::ir::{Builder, UnaryOp};
use ember_ga::print_rust::{function, RustFloat};
use ember_ga::Algebra;

#[test]
fn printed_rust_compiles_and_matches() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    assert!(
        Command::new(&rustc).arg("--version").output().is_ok_and(|o| o.status.success()),
        "rustc ({rustc}) must run: cargo test always has it"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rust_printer");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng::new(4);
    let mut irs = Vec::new();
    for (spec, expr, grad) in [("3,0,1", "wgp", true), ("1,3,0", "sandwich", true), ("2,0,0", "regressive", false)] {
        let alg = Algebra::parse(spec).unwrap();
        irs.push(program(&alg, expr, grad).unwrap().lower(&format!("f_{}_{expr}", spec.replace(',', ""))).unwrap());
    }
    // raw nodes: x / sqrt(x*x + y*y), erf, tanh, exp
    let mut b = Builder::new();
    let v = b.input_group("v", vec!["a".into(), "b".into()]).unwrap();
    let aa = b.mul(v[0], v[0]);
    let bb = b.mul(v[1], v[1]);
    let s = b.add(aa, bb);
    let r = b.unary(UnaryOp::Rsqrt, s);
    let q = b.mul(v[0], r);
    let e = b.unary(UnaryOp::Erf, v[1].negate());
    let t = b.unary(UnaryOp::Tanh, v[0]);
    let x = b.unary(UnaryOp::Exp, v[1].negate());
    let d = b.div(t, x);
    b.output_group("o", vec!["q".into(), "e".into(), "d".into()], vec![q, e, d]).unwrap();
    irs.push(b.finish("f_raw").unwrap());

    let mut src = String::new();
    let mut main = String::from("fn main() {\n");
    let mut want_all = Vec::new();
    for ir in &irs {
        src.push_str(&function(ir, RustFloat::F64));
        let vals: Vec<Vec<f64>> = ir.inputs.iter().map(|g| rng.vec(g.len())).collect();
        let refs: Vec<&[f64]> = vals.iter().map(|v| v.as_slice()).collect();
        want_all.extend(Compiled::new(ir).eval(&refs).unwrap().into_iter().flatten());
        main.push_str("    {\n");
        let mut args = Vec::new();
        for (g, v) in ir.inputs.iter().zip(&vals) {
            let lits: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
            main.push_str(&format!("        let {}: [f64; {}] = [{}];\n", g.name, g.len(), lits.join(", ")));
            args.push(format!("&{}", g.name));
        }
        for g in &ir.outputs {
            main.push_str(&format!("        let mut {}: [f64; {}] = [0.0; {}];\n", g.name, g.len(), g.len()));
            args.push(format!("&mut {}", g.name));
        }
        main.push_str(&format!("        {}({});\n", ir.name, args.join(", ")));
        for g in &ir.outputs {
            main.push_str(&format!("        for v in {}.iter() {{ println!(\"{{v:?}}\"); }}\n", g.name));
        }
        main.push_str("    }\n");
    }
    main.push_str("}\n");
    let file = dir.join("printed.rs");
    std::fs::write(&file, format!("{src}\n{main}")).unwrap();
    let exe = dir.join("printed_bin");
    let out = Command::new(&rustc).args(["--edition", "2021", "-O", "-o"]).arg(&exe).arg(&file).output().unwrap();
    assert!(out.status.success(), "rustc failed: {}", String::from_utf8_lossy(&out.stderr));
    let warn = String::from_utf8_lossy(&out.stderr);
    assert!(!warn.contains("warning"), "printed code has warnings: {warn}");
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let got: Vec<f64> = String::from_utf8(run.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_close(&got, &want_all, 1e-12, "printed Rust vs evaluator");
}
