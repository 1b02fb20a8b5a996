//! Operation counts against kingdon 3.0.0 on the same expressions, and generation time.

use std::time::{Duration, Instant};

use ember_ga::emit::{lower, EXPRS};

/// kingdon 3.0.0: (expression, algebra, muls, adds) of its generated code.
const KINGDON: &[(&str, &str, usize, usize)] = &[
    ("gp", "2,0,0", 16, 12),
    ("gp", "3,0,0", 64, 56),
    ("gp", "3,0,1", 192, 176),
    ("gp", "1,3,0", 256, 240),
    ("sandwich", "2,0,0", 8, 6),
    ("sandwich", "3,0,0", 35, 19),
    ("sandwich", "3,0,1", 52, 31),
    ("sandwich", "1,3,0", 97, 64),
    ("wgp", "2,0,0", 28, 12),
    ("wgp", "3,0,0", 104, 58),
    ("wgp", "3,0,1", 299, 178),
    ("wgp", "1,3,0", 389, 245),
];

#[test]
fn op_counts_are_no_worse_than_kingdon() {
    println!("| expression | algebra | kingdon muls/adds | ember muls/adds |");
    println!("|---|---|---|---|");
    for &(expr, spec, km, ka) in KINGDON {
        let c = lower(spec, expr, false).unwrap().counts();
        println!("| {expr} | Cl({spec}) | {km}/{ka} | {}/{} |", c.muls, c.adds);
        assert!(c.muls <= km, "{expr} Cl({spec}): {} muls, kingdon {km}", c.muls);
        assert!(c.adds <= ka, "{expr} Cl({spec}): {} adds, kingdon {ka}", c.adds);
        assert_eq!(c.other, 0);
    }
}

#[test]
fn exact_counts_do_not_regress() {
    // current results; a change of the lowering heuristics must not make them worse
    let expect: &[(&str, &str, usize, usize)] = &[
        ("gp", "3,0,0", 64, 56),
        ("sandwich", "2,0,0", 8, 4),
        ("sandwich", "3,0,0", 24, 17),
        ("sandwich", "3,0,1", 34, 24),
        ("sandwich", "1,3,0", 52, 48),
        ("wgp", "2,0,0", 26, 12),
        ("wgp", "3,0,0", 92, 56),
        ("wgp", "3,0,1", 264, 176),
        ("wgp", "1,3,0", 340, 240),
    ];
    for &(expr, spec, m, a) in expect {
        let c = lower(spec, expr, false).unwrap().counts();
        assert!(c.muls <= m && c.adds <= a, "{expr} Cl({spec}): {}/{} regressed from {m}/{a}", c.muls, c.adds);
    }
}

#[test]
fn gradient_counts_table() {
    println!("| expression | algebra | forward muls/adds | forward+VJP muls/adds |");
    println!("|---|---|---|---|");
    for expr in ["gp", "wgp", "sandwich"] {
        for spec in ["2,0,0", "3,0,0", "3,0,1", "1,3,0"] {
            let f = lower(spec, expr, false).unwrap().counts();
            let g = lower(spec, expr, true).unwrap().counts();
            println!("| {expr} | Cl({spec}) | {}/{} | {}/{} |", f.muls, f.adds, g.muls, g.adds);
            assert!(g.muls > f.muls && g.adds >= f.adds);
        }
    }
}

fn strict() -> bool {
    !cfg!(debug_assertions)
}

#[test]
fn generation_is_fast() {
    // Release builds (`cargo test --release`) check the targets; debug builds a 10x bound.
    let scale = if strict() { 1 } else { 10 };
    let t = Instant::now();
    let ir = lower("3,0,0", "wgp", true).unwrap();
    let dt = t.elapsed();
    println!("Cl(3,0,0) wgp forward+gradient: {dt:?} ({} instructions)", ir.instrs.len());
    assert!(dt < Duration::from_millis(50 * scale), "Cl(3,0) wgp fwd+grad took {dt:?}");
    let mut worst = (Duration::ZERO, String::new());
    for spec in ["6,0,0", "4,1,1", "3,3,0", "0,0,6"] {
        for (expr, _) in EXPRS {
            let t = Instant::now();
            lower(spec, expr, false).unwrap();
            let dt = t.elapsed();
            if dt > worst.0 {
                worst = (dt, format!("{expr} Cl({spec})"));
            }
            assert!(dt < Duration::from_secs(scale), "{expr} Cl({spec}) took {dt:?}");
        }
    }
    println!("slowest n = 6 expression: {} in {:?}", worst.1, worst.0);
}
