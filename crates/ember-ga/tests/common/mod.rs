#![allow(dead_code)]

use ember_ga::program::{Group, Shape};
use ember_ga::Algebra;

/// Small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// Dense multivector (all blades) from group values.
pub fn dense(alg: &Algebra, shape: &Shape, vals: &[f64]) -> Vec<f64> {
    let mut d = vec![0.0; alg.dim()];
    match shape {
        Shape::Multivector { blades, .. } => {
            for (&b, &v) in blades.iter().zip(vals) {
                d[b] = v;
            }
        }
        Shape::Scalars(_) => panic!("not a multivector"),
    }
    d
}

/// Group values from a dense multivector.
pub fn gather(shape: &Shape, dense: &[f64]) -> Vec<f64> {
    match shape {
        Shape::Multivector { blades, .. } => blades.iter().map(|&b| dense[b]).collect(),
        Shape::Scalars(_) => panic!("not a multivector"),
    }
}

pub fn group<'a>(groups: &'a [Group], name: &str) -> &'a Group {
    groups.iter().find(|g| g.name == name).unwrap()
}

pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

pub const ALGEBRAS: [&str; 5] = ["2,0,0", "3,0,0", "3,0,1", "1,3,0", "4,1,1"];
