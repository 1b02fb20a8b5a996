//! Bilinear products and linear maps at the level of basis blades.
//!
//! Every product of the crate is defined here once, per pair of basis blades;
//! the numeric oracle and the symbolic multivectors both read these rules.

use std::fmt;
use std::str::FromStr;

use crate::algebra::Algebra;
use crate::error::{GaError, Result};

/// A bilinear product of multivectors.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Product {
    /// Geometric product `ab`.
    Geometric,
    /// Outer (wedge) product `a ∧ b`: grade `ga + gb` part.
    Outer,
    /// Symmetric inner product `a | b`: grade `|ga - gb|` part (scalars included).
    Inner,
    /// Left contraction `a ⌋ b`: grade `gb - ga` part.
    LeftContraction,
    /// Right contraction `a ⌊ b`: grade `ga - gb` part.
    RightContraction,
    /// Scalar product `<ab>_0`.
    Scalar,
    /// Commutator product `(ab - ba) / 2`.
    Commutator,
    /// Anticommutator product `(ab + ba) / 2`.
    AntiCommutator,
    /// Regressive product `a ∨ b = undual(dual(a) ∧ dual(b))` with the complement dual.
    Regressive,
}

impl Product {
    /// All products.
    pub const ALL: [Product; 9] = [
        Product::Geometric,
        Product::Outer,
        Product::Inner,
        Product::LeftContraction,
        Product::RightContraction,
        Product::Scalar,
        Product::Commutator,
        Product::AntiCommutator,
        Product::Regressive,
    ];

    /// Short name used by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Product::Geometric => "gp",
            Product::Outer => "outer",
            Product::Inner => "inner",
            Product::LeftContraction => "lcontract",
            Product::RightContraction => "rcontract",
            Product::Scalar => "scalar",
            Product::Commutator => "commutator",
            Product::AntiCommutator => "anticommutator",
            Product::Regressive => "regressive",
        }
    }

    /// Product of basis blades `i` and `j`: `(sign, k)`; sign 0 when the term vanishes.
    pub fn blade(self, alg: &Algebra, i: usize, j: usize) -> (i8, usize) {
        let (s, k) = alg.product(i, j);
        let (gi, gj, gk) = (alg.grade(i), alg.grade(j), alg.grade(k));
        let keep = match self {
            Product::Geometric => true,
            Product::Outer => gk == gi + gj,
            Product::Inner => gk == gi.abs_diff(gj),
            Product::LeftContraction => gj >= gi && gk == gj - gi,
            Product::RightContraction => gi >= gj && gk == gi - gj,
            Product::Scalar => gk == 0,
            Product::Commutator => s != 0 && alg.product(j, i).0 == -s,
            Product::AntiCommutator => s != 0 && alg.product(j, i).0 == s,
            Product::Regressive => {
                let (s1, di) = alg.dual(i);
                let (s2, dj) = alg.dual(j);
                if alg.mask(di) & alg.mask(dj) != 0 {
                    return (0, 0);
                }
                let (so, m) = alg.product(di, dj);
                let (s3, r) = alg.undual(m);
                return (s1 * s2 * so * s3, r);
            }
        };
        if keep && s != 0 {
            (s, k)
        } else {
            (0, k)
        }
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Product {
    type Err = GaError;
    fn from_str(s: &str) -> Result<Product> {
        Product::ALL.iter().copied().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Product::ALL.iter().map(|p| p.name()).collect();
            GaError::unknown("product", s, &names)
        })
    }
}

/// A linear map applied blade by blade.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Linear {
    /// Reverse `x̃`.
    Reverse,
    /// Grade involution `x̂`.
    Involute,
    /// Clifford conjugate.
    Conjugate,
    /// Complement (right) dual.
    Dual,
    /// Inverse of [`Linear::Dual`].
    Undual,
}

impl Linear {
    /// Image of basis blade `i`: `(sign, j)`.
    pub fn blade(self, alg: &Algebra, i: usize) -> (i8, usize) {
        match self {
            Linear::Reverse => (alg.reverse_sign(i), i),
            Linear::Involute => (alg.involute_sign(i), i),
            Linear::Conjugate => (alg.conjugate_sign(i), i),
            Linear::Dual => alg.dual(i),
            Linear::Undual => alg.undual(i),
        }
    }
}
