//! Symbolic multivectors: a sparse map from basis blades to exact polynomials.
//!
//! Only the blades that can be nonzero are stored, so a vector times a bivector
//! touches only the blades it can reach. Binary operations check that both
//! operands belong to the same algebra and the same symbol context and return
//! `Err` otherwise; the operators (`*`, `^`, `|`, `<<`, `>>`, `&`, `+`, `-`)
//! therefore yield `Result<Multivector>` and also accept `Result` operands on
//! the left, so expressions chain: `((&a * &b) * &c)?`.

use std::fmt;
use std::ops;
use std::sync::Arc;

use crate::algebra::Algebra;
use crate::error::{GaError, Result};
use crate::poly::{Poly, PolyAcc, Sym};
use crate::product::{Linear, Product};
use crate::wgp::PathTable;

/// A symbolic multivector.
#[derive(Clone, Debug)]
pub struct Multivector {
    alg: Arc<Algebra>,
    /// Symbol context (program) id; 0 when the multivector has no symbols.
    ctx: u64,
    /// `(blade index, coefficient)`, sorted by blade, no zero coefficients.
    terms: Vec<(usize, Poly)>,
}

impl PartialEq for Multivector {
    fn eq(&self, other: &Self) -> bool {
        *self.alg == *other.alg && self.terms == other.terms
    }
}

impl Multivector {
    /// The zero multivector of `alg`.
    pub fn zero(alg: &Arc<Algebra>) -> Multivector {
        Multivector { alg: alg.clone(), ctx: 0, terms: Vec::new() }
    }
    /// A constant scalar.
    pub fn scalar(alg: &Arc<Algebra>, c: i64) -> Multivector {
        Multivector::from_terms(alg, 0, [(0, Poly::constant(c))])
    }
    /// The basis blade `i` with coefficient 1.
    pub fn blade(alg: &Arc<Algebra>, i: usize) -> Result<Multivector> {
        if i >= alg.dim() {
            return Err(GaError::shape(format!("blade index in {alg}"), format!("< {}", alg.dim()), i));
        }
        Ok(Multivector::from_terms(alg, 0, [(i, Poly::constant(1))]))
    }
    /// Builds a multivector from `(blade, coefficient)` pairs of context `ctx`
    /// (use 0 for constants). Duplicate blades are summed; blade indices must be
    /// below `alg.dim()`.
    pub fn from_terms(alg: &Arc<Algebra>, ctx: u64, terms: impl IntoIterator<Item = (usize, Poly)>) -> Multivector {
        let mut acc: Vec<Option<Poly>> = vec![None; alg.dim()];
        for (b, p) in terms {
            let slot = &mut acc[b];
            *slot = Some(match slot.take() {
                Some(q) => q.add(&p),
                None => p,
            });
        }
        let terms = acc.into_iter().enumerate().filter_map(|(b, p)| p.filter(|p| !p.is_zero()).map(|p| (b, p))).collect();
        Multivector { alg: alg.clone(), ctx, terms }
    }
    /// The algebra.
    pub fn algebra(&self) -> &Arc<Algebra> {
        &self.alg
    }
    /// The symbol context id (0 for constants).
    pub fn context(&self) -> u64 {
        self.ctx
    }
    /// `(blade, coefficient)` pairs of the nonzero blades, in canonical order.
    pub fn terms(&self) -> &[(usize, Poly)] {
        &self.terms
    }
    /// Canonical indices of the nonzero blades.
    pub fn blades(&self) -> Vec<usize> {
        self.terms.iter().map(|(b, _)| *b).collect()
    }
    /// Coefficient of blade `i` (zero when absent).
    pub fn coeff(&self, i: usize) -> Poly {
        self.get(i).cloned().unwrap_or_default()
    }
    /// Coefficient of blade `i` when present.
    pub fn get(&self, i: usize) -> Option<&Poly> {
        self.terms.binary_search_by_key(&i, |(b, _)| *b).ok().map(|k| &self.terms[k].1)
    }
    /// Whether every coefficient is zero.
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }
    /// Grades with a nonzero part.
    pub fn grades(&self) -> Vec<usize> {
        let mut g: Vec<usize> = self.terms.iter().map(|(b, _)| self.alg.grade(*b)).collect();
        g.dedup();
        g.sort_unstable();
        g.dedup();
        g
    }

    fn join(&self, other: &Multivector) -> Result<u64> {
        self.alg.check_same(&other.alg)?;
        match (self.ctx, other.ctx) {
            (0, c) | (c, 0) => Ok(c),
            (a, b) if a == b => Ok(a),
            (a, b) => Err(GaError::ContextMismatch { expected: a, got: b }),
        }
    }

    /// Any bilinear product.
    pub fn product(&self, kind: Product, other: &Multivector) -> Result<Multivector> {
        let ctx = self.join(other)?;
        let alg = &self.alg;
        let mut acc: Vec<Option<PolyAcc>> = (0..alg.dim()).map(|_| None).collect();
        for (i, p) in &self.terms {
            for (j, q) in &other.terms {
                let (s, k) = kind.blade(alg, *i, *j);
                if s != 0 {
                    acc[k].get_or_insert_with(PolyAcc::default).add_poly(&p.mul(q), i64::from(s));
                }
            }
        }
        let terms = acc
            .into_iter()
            .enumerate()
            .filter_map(|(k, a)| a.map(|a| (k, a.finish())))
            .filter(|(_, p)| !p.is_zero())
            .collect();
        Ok(Multivector { alg: alg.clone(), ctx, terms })
    }
    /// Geometric product `ab`.
    pub fn gp(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::Geometric, other)
    }
    /// Outer product `a ∧ b`.
    pub fn outer(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::Outer, other)
    }
    /// Symmetric inner product `a | b` (grade `|ga - gb|` of each pair of grades).
    pub fn inner(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::Inner, other)
    }
    /// Left contraction `a ⌋ b`.
    pub fn lcontract(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::LeftContraction, other)
    }
    /// Right contraction `a ⌊ b`.
    pub fn rcontract(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::RightContraction, other)
    }
    /// Scalar product `<ab>_0` as a polynomial.
    pub fn scalar_product(&self, other: &Multivector) -> Result<Poly> {
        Ok(self.product(Product::Scalar, other)?.coeff(0))
    }
    /// Commutator product `(ab - ba)/2`.
    pub fn commutator(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::Commutator, other)
    }
    /// Anticommutator product `(ab + ba)/2`.
    pub fn anticommutator(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::AntiCommutator, other)
    }
    /// Regressive product `a ∨ b = undual(dual(a) ∧ dual(b))`.
    pub fn regressive(&self, other: &Multivector) -> Result<Multivector> {
        self.product(Product::Regressive, other)
    }

    /// Any blade-wise linear map.
    pub fn linear(&self, kind: Linear) -> Multivector {
        let terms = self.terms.iter().map(|(i, p)| {
            let (s, j) = kind.blade(&self.alg, *i);
            (j, p.scale(i64::from(s)))
        });
        Multivector::from_terms(&self.alg, self.ctx, terms)
    }
    /// Reverse `x̃`.
    pub fn rev(&self) -> Multivector {
        self.linear(Linear::Reverse)
    }
    /// Grade involution.
    pub fn involute(&self) -> Multivector {
        self.linear(Linear::Involute)
    }
    /// Clifford conjugate.
    pub fn conjugate(&self) -> Multivector {
        self.linear(Linear::Conjugate)
    }
    /// Complement dual (well defined for degenerate metrics).
    pub fn dual(&self) -> Multivector {
        self.linear(Linear::Dual)
    }
    /// Inverse of [`Multivector::dual`].
    pub fn undual(&self) -> Multivector {
        self.linear(Linear::Undual)
    }
    /// Grade-`k` part.
    pub fn grade(&self, k: usize) -> Multivector {
        self.grade_set(&[k])
    }
    /// Part of the grades in `ks`.
    pub fn grade_set(&self, ks: &[usize]) -> Multivector {
        let terms = self.terms.iter().filter(|(b, _)| ks.contains(&self.alg.grade(*b))).cloned().collect();
        Multivector { alg: self.alg.clone(), ctx: self.ctx, terms }
    }
    /// Sandwich `x y x̃`, fully expanded.
    pub fn sandwich(&self, y: &Multivector) -> Result<Multivector> {
        self.gp(y)?.gp(&self.rev())
    }
    /// Squared norm `<x x̃>_0`.
    pub fn norm2(&self) -> Poly {
        self.scalar_product(&self.rev()).expect("same algebra and context")
    }
    /// Weighted geometric product with one weight per path of [`crate::wgp::paths`].
    pub fn wgp(&self, y: &Multivector, w: &[Poly]) -> Result<Multivector> {
        let ctx = self.join(y)?;
        let alg = &self.alg;
        let table = PathTable::new(alg);
        if w.len() != table.len() {
            return Err(GaError::shape(format!("weights of the weighted product in {alg} (one per path)"), table.len(), w.len()));
        }
        let mut acc: Vec<Option<PolyAcc>> = (0..alg.dim()).map(|_| None).collect();
        for (i, p) in &self.terms {
            for (j, q) in &y.terms {
                let (s, k) = alg.product(*i, *j);
                if s != 0 {
                    let path = table.index(alg.grade(*i), alg.grade(*j), alg.grade(k)).expect("nonzero product has a path");
                    let t = p.mul(q).mul(&w[path]);
                    acc[k].get_or_insert_with(PolyAcc::default).add_poly(&t, i64::from(s));
                }
            }
        }
        let terms = acc
            .into_iter()
            .enumerate()
            .filter_map(|(k, a)| a.map(|a| (k, a.finish())))
            .filter(|(_, p)| !p.is_zero());
        Ok(Multivector::from_terms(alg, ctx, terms))
    }
    /// Componentwise dot product `Σ_i a_i b_i` of the coefficients (metric-free).
    pub fn dot(&self, other: &Multivector) -> Result<Poly> {
        self.join(other)?;
        let mut acc = PolyAcc::default();
        for (i, p) in &self.terms {
            if let Some(q) = other.get(*i) {
                acc.add_poly(&p.mul(q), 1);
            }
        }
        Ok(acc.finish())
    }
    /// `a + b`.
    pub fn add(&self, other: &Multivector) -> Result<Multivector> {
        let ctx = self.join(other)?;
        Ok(Multivector::from_terms(&self.alg, ctx, self.terms.iter().chain(other.terms.iter()).cloned()))
    }
    /// `a - b`.
    pub fn sub(&self, other: &Multivector) -> Result<Multivector> {
        self.add(&other.neg())
    }
    /// `-a`.
    pub fn neg(&self) -> Multivector {
        self.scale(-1)
    }
    /// `c a` for an integer `c`.
    pub fn scale(&self, c: i64) -> Multivector {
        let terms = self.terms.iter().map(|(b, p)| (*b, p.scale(c))).filter(|(_, p)| !p.is_zero()).collect();
        Multivector { alg: self.alg.clone(), ctx: self.ctx, terms }
    }
    /// `p a` for a scalar polynomial `p` (of this multivector's context).
    pub fn mul_poly(&self, p: &Poly) -> Multivector {
        let terms = self.terms.iter().map(|(b, q)| (*b, q.mul(p))).filter(|(_, q)| !q.is_zero()).collect();
        Multivector { alg: self.alg.clone(), ctx: self.ctx, terms }
    }
    /// Applies `f` to every coefficient.
    pub fn map(&self, f: impl Fn(&Poly) -> Poly) -> Multivector {
        Multivector::from_terms(&self.alg, self.ctx, self.terms.iter().map(|(b, p)| (*b, f(p))))
    }
    /// Evaluates every coefficient to a dense `f64` vector.
    pub fn eval(&self, val: &impl Fn(Sym) -> f64) -> Vec<f64> {
        let mut out = vec![0.0; self.alg.dim()];
        for (b, p) in &self.terms {
            out[*b] = p.eval(val);
        }
        out
    }
    /// Formats with a symbol naming function.
    pub fn display_with(&self, name: &impl Fn(Sym) -> String) -> String {
        if self.terms.is_empty() {
            return "0".into();
        }
        let parts: Vec<String> =
            self.terms.iter().map(|(b, p)| format!("({})*{}", p.display_with(name), self.alg.blade_name(*b))).collect();
        parts.join(" + ")
    }
}

impl fmt::Display for Multivector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display_with(&|s| format!("s{s}")))
    }
}

macro_rules! binop {
    ($tr:ident, $m:ident, $f:ident) => {
        impl ops::$tr<&Multivector> for &Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: &Multivector) -> Result<Multivector> {
                Multivector::$f(self, rhs)
            }
        }
        impl ops::$tr<Multivector> for Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: Multivector) -> Result<Multivector> {
                Multivector::$f(&self, &rhs)
            }
        }
        impl ops::$tr<&Multivector> for Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: &Multivector) -> Result<Multivector> {
                Multivector::$f(&self, rhs)
            }
        }
        impl ops::$tr<Multivector> for &Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: Multivector) -> Result<Multivector> {
                Multivector::$f(self, &rhs)
            }
        }
        impl ops::$tr<&Multivector> for Result<Multivector> {
            type Output = Result<Multivector>;
            fn $m(self, rhs: &Multivector) -> Result<Multivector> {
                Multivector::$f(&self?, rhs)
            }
        }
        impl ops::$tr<Multivector> for Result<Multivector> {
            type Output = Result<Multivector>;
            fn $m(self, rhs: Multivector) -> Result<Multivector> {
                Multivector::$f(&self?, &rhs)
            }
        }
        impl ops::$tr<Result<Multivector>> for &Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: Result<Multivector>) -> Result<Multivector> {
                Multivector::$f(self, &rhs?)
            }
        }
        impl ops::$tr<Result<Multivector>> for Multivector {
            type Output = Result<Multivector>;
            fn $m(self, rhs: Result<Multivector>) -> Result<Multivector> {
                Multivector::$f(&self, &rhs?)
            }
        }
    };
}

binop!(Mul, mul, gp);
binop!(BitXor, bitxor, outer);
binop!(BitOr, bitor, inner);
binop!(Shl, shl, lcontract);
binop!(Shr, shr, rcontract);
binop!(BitAnd, bitand, regressive);
binop!(Add, add, add);
binop!(Sub, sub, sub);

impl ops::Neg for &Multivector {
    type Output = Multivector;
    fn neg(self) -> Multivector {
        Multivector::neg(self)
    }
}
impl ops::Neg for Multivector {
    type Output = Multivector;
    fn neg(self) -> Multivector {
        Multivector::neg(&self)
    }
}
impl ops::Mul<i64> for &Multivector {
    type Output = Multivector;
    fn mul(self, c: i64) -> Multivector {
        self.scale(c)
    }
}
impl ops::Mul<&Poly> for &Multivector {
    type Output = Multivector;
    fn mul(self, p: &Poly) -> Multivector {
        self.mul_poly(p)
    }
}
