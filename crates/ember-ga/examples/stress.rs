//! Generation time of heavier user expressions: `cargo run --release -p ember-ga --example stress`.
use std::time::Instant;

use ember_ga::{Algebra, Program};

fn main() -> Result<(), ember_ga::GaError> {
    for spec in ["3,0,1", "4,1,0", "6,0,0"] {
        let alg = Algebra::parse(spec)?;
        let t = Instant::now();
        let mut prog = Program::new();
        let r = prog.input_even("r", &alg)?;
        let y = prog.input_full("y", &alg)?;
        let s = prog.sandwich(&r, &y)?;
        prog.output("out", &s)?;
        let t_build = t.elapsed();
        let ir = prog.lower("k")?;
        let c = ir.counts();
        println!("sandwich even x full Cl({spec}): build {t_build:?}, total {:?}, {} muls / {} adds", t.elapsed(), c.muls, c.adds);
        let t = Instant::now();
        prog.vjp(&["r", "y"])?;
        let ir = prog.lower("k")?;
        let c = ir.counts();
        println!("  with VJP: {:?}, {} muls / {} adds", t.elapsed(), c.muls, c.adds);
    }
    Ok(())
}
