//! Sparse multivariate polynomials with exact integer coefficients.
//!
//! A [`Poly`] is a sorted list of `(monomial, coefficient)` pairs with no zero
//! coefficients; a [`Mono`] is a sorted list of symbol ids with repetition
//! (`x*x*y` is `[x, x, y]`). Coefficients are `i64`: every product, sandwich
//! and derivative of the supported algebras (n <= 6) stays far inside that range.

use std::collections::HashMap;
use std::fmt;

/// A scalar symbol, numbered within one program.
pub type Sym = u32;

/// A monomial: sorted symbol ids, repeated for powers.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Mono(Vec<Sym>);

impl Mono {
    /// The empty monomial (the constant 1).
    pub fn one() -> Mono {
        Mono(Vec::new())
    }
    /// A single symbol.
    pub fn sym(s: Sym) -> Mono {
        Mono(vec![s])
    }
    /// Builds a monomial from symbols in any order.
    pub fn from_syms(mut syms: Vec<Sym>) -> Mono {
        syms.sort_unstable();
        Mono(syms)
    }
    /// The symbols, sorted, with repetition.
    pub fn syms(&self) -> &[Sym] {
        &self.0
    }
    /// Total degree.
    pub fn degree(&self) -> usize {
        self.0.len()
    }
    /// Product of two monomials.
    pub fn mul(&self, other: &Mono) -> Mono {
        let (a, b) = (&self.0, &other.0);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i] <= b[j] {
                out.push(a[i]);
                i += 1;
            } else {
                out.push(b[j]);
                j += 1;
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
        Mono(out)
    }
    /// Exponent of symbol `s`.
    pub fn exponent(&self, s: Sym) -> usize {
        self.0.iter().filter(|&&x| x == s).count()
    }
    /// Whether `s` occurs.
    pub fn contains(&self, s: Sym) -> bool {
        self.0.binary_search(&s).is_ok()
    }
    /// This monomial with one factor `s` removed, or `None` if `s` does not occur.
    pub fn without(&self, s: Sym) -> Option<Mono> {
        let pos = self.0.binary_search(&s).ok()?;
        let mut v = self.0.clone();
        v.remove(pos);
        Some(Mono(v))
    }
    /// Removes every factor of `sub` (a sub-multiset) from this monomial.
    pub fn divide(&self, sub: &Mono) -> Option<Mono> {
        let mut v = self.0.clone();
        for s in &sub.0 {
            let pos = v.binary_search(s).ok()?;
            v.remove(pos);
        }
        Some(Mono(v))
    }
}

/// A polynomial with exact integer coefficients.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Poly {
    terms: Vec<(Mono, i64)>,
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a as i64
}

impl Poly {
    /// The zero polynomial.
    pub fn zero() -> Poly {
        Poly { terms: Vec::new() }
    }
    /// A constant.
    pub fn constant(c: i64) -> Poly {
        if c == 0 {
            Poly::zero()
        } else {
            Poly { terms: vec![(Mono::one(), c)] }
        }
    }
    /// A single symbol.
    pub fn sym(s: Sym) -> Poly {
        Poly { terms: vec![(Mono::sym(s), 1)] }
    }
    /// `c * m`.
    pub fn term(m: Mono, c: i64) -> Poly {
        if c == 0 {
            Poly::zero()
        } else {
            Poly { terms: vec![(m, c)] }
        }
    }
    /// Builds a polynomial from unsorted terms, merging duplicates.
    pub fn from_terms(terms: impl IntoIterator<Item = (Mono, i64)>) -> Poly {
        let mut acc = PolyAcc::default();
        for (m, c) in terms {
            acc.add_term(m, c);
        }
        acc.finish()
    }
    /// Sorted terms.
    pub fn terms(&self) -> &[(Mono, i64)] {
        &self.terms
    }
    /// Number of terms.
    pub fn len(&self) -> usize {
        self.terms.len()
    }
    /// Whether this is the zero polynomial.
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }
    /// Whether there are no terms (the zero polynomial).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
    /// The constant value if the polynomial has no symbols.
    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(m, c)] if m.degree() == 0 => Some(*c),
            _ => None,
        }
    }
    /// Largest total degree (0 for zero).
    pub fn degree(&self) -> usize {
        self.terms.iter().map(|(m, _)| m.degree()).max().unwrap_or(0)
    }
    /// Distinct symbols, sorted.
    pub fn symbols(&self) -> Vec<Sym> {
        let mut v: Vec<Sym> = self.terms.iter().flat_map(|(m, _)| m.0.iter().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
    /// `-self`.
    pub fn neg(&self) -> Poly {
        Poly { terms: self.terms.iter().map(|(m, c)| (m.clone(), -c)).collect() }
    }
    /// `c * self`.
    pub fn scale(&self, c: i64) -> Poly {
        if c == 0 {
            return Poly::zero();
        }
        Poly { terms: self.terms.iter().map(|(m, k)| (m.clone(), k * c)).collect() }
    }
    /// `self + other`.
    pub fn add(&self, other: &Poly) -> Poly {
        self.add_scaled(other, 1)
    }
    /// `self - other`.
    pub fn sub(&self, other: &Poly) -> Poly {
        self.add_scaled(other, -1)
    }
    /// `self + c * other`, by merging sorted term lists.
    pub fn add_scaled(&self, other: &Poly, c: i64) -> Poly {
        let (a, b) = (&self.terms, &other.terms);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let ord = if i == a.len() {
                std::cmp::Ordering::Greater
            } else if j == b.len() {
                std::cmp::Ordering::Less
            } else {
                a[i].0.cmp(&b[j].0)
            };
            match ord {
                std::cmp::Ordering::Less => {
                    out.push(a[i].clone());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let k = b[j].1 * c;
                    if k != 0 {
                        out.push((b[j].0.clone(), k));
                    }
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let k = a[i].1 + b[j].1 * c;
                    if k != 0 {
                        out.push((a[i].0.clone(), k));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Poly { terms: out }
    }
    /// `self * other`.
    pub fn mul(&self, other: &Poly) -> Poly {
        if self.is_zero() || other.is_zero() {
            return Poly::zero();
        }
        if self.terms.len() == 1 && other.terms.len() == 1 {
            let (m1, c1) = &self.terms[0];
            let (m2, c2) = &other.terms[0];
            return Poly::term(m1.mul(m2), c1 * c2);
        }
        let mut acc = PolyAcc::default();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &other.terms {
                acc.add_term(m1.mul(m2), c1 * c2);
            }
        }
        acc.finish()
    }
    /// Partial derivative with respect to `s`.
    pub fn derivative(&self, s: Sym) -> Poly {
        let mut terms = Vec::new();
        for (m, c) in &self.terms {
            let e = m.exponent(s) as i64;
            if e > 0 {
                terms.push((m.without(s).expect("symbol occurs"), c * e));
            }
        }
        // Removing one factor of the same symbol from every term keeps the order
        // for terms of equal exponent but not in general, so re-sort.
        Poly::from_terms(terms)
    }
    /// Substitutes polynomials for symbols; symbols for which `f` returns `None` stay.
    pub fn substitute(&self, f: &mut impl FnMut(Sym) -> Option<Poly>) -> Poly {
        let mut acc = PolyAcc::default();
        let mut cache: HashMap<Sym, Option<Poly>> = HashMap::new();
        for (m, c) in &self.terms {
            let mut prod = Poly::constant(*c);
            let mut rest = Vec::new();
            for &s in &m.0 {
                let sub = cache.entry(s).or_insert_with(|| f(s)).clone();
                match sub {
                    Some(p) => prod = prod.mul(&p),
                    None => rest.push(s),
                }
            }
            let restp = Poly::term(Mono::from_syms(rest), 1);
            for (m2, c2) in prod.mul(&restp).terms {
                acc.add_term(m2, c2);
            }
        }
        acc.finish()
    }
    /// Evaluates with `val(s)` for every symbol.
    pub fn eval(&self, val: &impl Fn(Sym) -> f64) -> f64 {
        self.terms
            .iter()
            .map(|(m, c)| m.0.iter().fold(*c as f64, |acc, &s| acc * val(s)))
            .sum()
    }
    /// Splits `self = content * primitive` where `primitive` has coprime coefficients
    /// and a positive leading coefficient. Zero gives `(0, zero)`.
    pub fn normalize(&self) -> (i64, Poly) {
        if self.is_zero() {
            return (0, Poly::zero());
        }
        let g = self.terms.iter().fold(0i64, |g, (_, c)| gcd(g, *c));
        let g = if self.terms[0].1 < 0 { -g } else { g };
        if g == 1 {
            return (1, self.clone());
        }
        (g, Poly { terms: self.terms.iter().map(|(m, c)| (m.clone(), c / g)).collect() })
    }
}

/// Accumulator for building polynomials from many terms.
#[derive(Default)]
pub struct PolyAcc {
    map: HashMap<Mono, i64>,
}

impl PolyAcc {
    /// Adds `c * m`.
    pub fn add_term(&mut self, m: Mono, c: i64) {
        if c != 0 {
            *self.map.entry(m).or_insert(0) += c;
        }
    }
    /// Adds `c * p`.
    pub fn add_poly(&mut self, p: &Poly, c: i64) {
        for (m, k) in &p.terms {
            self.add_term(m.clone(), k * c);
        }
    }
    /// The accumulated polynomial.
    pub fn finish(self) -> Poly {
        let mut terms: Vec<(Mono, i64)> = self.map.into_iter().filter(|(_, c)| *c != 0).collect();
        terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Poly { terms }
    }
}

impl Poly {
    /// Formats with a symbol naming function.
    pub fn display_with(&self, name: &impl Fn(Sym) -> String) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut s = String::new();
        for (i, (m, c)) in self.terms.iter().enumerate() {
            let neg = *c < 0;
            if i == 0 {
                if neg {
                    s.push('-');
                }
            } else {
                s.push_str(if neg { " - " } else { " + " });
            }
            let a = c.unsigned_abs();
            let factors: Vec<String> = m.0.iter().map(|&x| name(x)).collect();
            if factors.is_empty() {
                s.push_str(&a.to_string());
            } else {
                if a != 1 {
                    s.push_str(&format!("{a}*"));
                }
                s.push_str(&factors.join("*"));
            }
        }
        s
    }
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.display_with(&|s| format!("s{s}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_exact() {
        let x = Poly::sym(0);
        let y = Poly::sym(1);
        let s = x.add(&y);
        let d = x.sub(&y);
        // (x+y)(x-y) = x^2 - y^2
        let p = s.mul(&d);
        let expect = x.mul(&x).sub(&y.mul(&y));
        assert_eq!(p, expect);
        assert_eq!(p.len(), 2);
        assert!(s.sub(&x).sub(&y).is_zero());
        assert_eq!(p.to_string(), "s0*s0 - s1*s1");
    }

    #[test]
    fn derivative_and_substitute() {
        let x = Poly::sym(0);
        let y = Poly::sym(1);
        let p = x.mul(&x).mul(&y).scale(3).add(&y); // 3x^2y + y
        assert_eq!(p.derivative(0), x.mul(&y).scale(6));
        assert_eq!(p.derivative(1), x.mul(&x).scale(3).add(&Poly::constant(1)));
        let q = p.substitute(&mut |s| if s == 1 { Some(x.add(&Poly::constant(1))) } else { None });
        // 3x^2(x+1) + x + 1
        let v = q.eval(&|_| 2.0);
        assert_eq!(v, 3.0 * 4.0 * 3.0 + 3.0);
    }

    #[test]
    fn normalize_content() {
        let p = Poly::sym(0).scale(-4).add(&Poly::sym(1).scale(6));
        let (c, q) = p.normalize();
        assert_eq!(c, -2);
        assert_eq!(q.scale(c), p);
        assert_eq!(q.terms()[0].1, 2);
        assert_eq!(Poly::zero().normalize().0, 0);
    }
}
