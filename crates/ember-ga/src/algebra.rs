//! Clifford algebras Cl(p,q,r): signature, basis blades, and sign tables.
//!
//! Basis vectors are numbered by bit position: the `r` null vectors come first,
//! then the `p` positive ones, then the `q` negative ones. A basis blade is a
//! bitmask of basis vectors in increasing order. Blades are stored in canonical
//! order: by grade, then lexicographically by their index lists, so Cl(3,0) has
//! `1, e1, e2, e3, e12, e13, e23, e123`. Names count from 0 when the algebra has
//! null vectors (projective GA: `e0` null, `e1..e3` positive) and from 1 otherwise.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{GaError, Result};

/// Largest supported number of basis vectors (64 blades).
pub const MAX_N: usize = 6;

/// A Clifford algebra with its precomputed blade tables.
#[derive(Debug)]
pub struct Algebra {
    p: usize,
    q: usize,
    r: usize,
    n: usize,
    /// Square of each basis vector, by bit position: 0, 1 or -1.
    metric: Vec<i8>,
    /// Canonical blade index -> bitmask.
    masks: Vec<u32>,
    /// Bitmask -> canonical blade index.
    index_of: Vec<usize>,
    names: Vec<String>,
    /// Geometric product of canonical blades `i*dim + j` -> (sign, blade index); sign 0 when null.
    table: Vec<(i8, u16)>,
    grade_start: Vec<usize>,
}

impl PartialEq for Algebra {
    fn eq(&self, other: &Self) -> bool {
        (self.p, self.q, self.r) == (other.p, other.q, other.r)
    }
}
impl Eq for Algebra {}

impl fmt::Display for Algebra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cl({},{},{})", self.p, self.q, self.r)
    }
}

/// Sign of reordering the concatenation of blades `a` and `b` (bitmasks) into increasing order.
pub fn reorder_sign(a: u32, b: u32) -> i8 {
    let mut a = a >> 1;
    let mut swaps = 0u32;
    while a != 0 {
        swaps += (a & b).count_ones();
        a >>= 1;
    }
    if swaps & 1 == 0 {
        1
    } else {
        -1
    }
}

impl Algebra {
    /// Builds Cl(p,q,r). Fails when `p+q+r > MAX_N`.
    pub fn new(p: usize, q: usize, r: usize) -> Result<Arc<Algebra>> {
        let n = p + q + r;
        if n > MAX_N {
            return Err(GaError::TooLarge { p, q, r, n, max: MAX_N });
        }
        let mut metric = vec![0i8; r];
        metric.extend(std::iter::repeat_n(1i8, p));
        metric.extend(std::iter::repeat_n(-1i8, q));
        let dim = 1usize << n;
        let mut masks: Vec<u32> = (0..dim as u32).collect();
        let key = |m: &u32| {
            let idx: Vec<u32> = (0..n as u32).filter(|b| m & (1 << b) != 0).collect();
            (m.count_ones(), idx)
        };
        masks.sort_by_key(key);
        let mut index_of = vec![0usize; dim];
        for (i, &m) in masks.iter().enumerate() {
            index_of[m as usize] = i;
        }
        let base = if r > 0 { 0 } else { 1 };
        let names = masks
            .iter()
            .map(|&m| {
                if m == 0 {
                    "1".to_string()
                } else {
                    let mut s = String::from("e");
                    for b in 0..n {
                        if m & (1 << b) != 0 {
                            s.push_str(&(b + base).to_string());
                        }
                    }
                    s
                }
            })
            .collect();
        let mut table = Vec::with_capacity(dim * dim);
        for &a in &masks {
            for &b in &masks {
                let common = a & b;
                let mut sign = reorder_sign(a, b);
                for (bit, &m) in metric.iter().enumerate() {
                    if common & (1 << bit) != 0 {
                        sign *= m;
                    }
                }
                table.push((sign, index_of[(a ^ b) as usize] as u16));
            }
        }
        let mut grade_start = vec![0usize; n + 2];
        for k in 0..=n {
            grade_start[k + 1] = grade_start[k] + binomial(n, k);
        }
        Ok(Arc::new(Algebra { p, q, r, n, metric, masks, index_of, names, table, grade_start }))
    }

    /// Parses `"P,Q"`, `"P,Q,R"`, `"P"` or `"Cl(P,Q,R)"`.
    pub fn parse(spec: &str) -> Result<Arc<Algebra>> {
        let bad = |reason: String| GaError::BadSpec { spec: spec.to_string(), reason };
        let mut s = spec.trim();
        if let Some(inner) = s.strip_prefix("Cl(").or_else(|| s.strip_prefix("cl(")) {
            s = inner.strip_suffix(')').ok_or_else(|| bad("a missing closing ')'".into()))?;
        }
        if s.is_empty() {
            return Err(bad("an empty string".into()));
        }
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.len() > 3 {
            return Err(bad(format!("{} comma-separated numbers", parts.len())));
        }
        let mut v = [0usize; 3];
        for (i, part) in parts.iter().enumerate() {
            v[i] = part.parse::<usize>().map_err(|_| bad(format!("{part:?} where a non-negative integer belongs")))?;
        }
        Algebra::new(v[0], v[1], v[2])
    }

    /// Number of positive basis vectors.
    pub fn p(&self) -> usize {
        self.p
    }
    /// Number of negative basis vectors.
    pub fn q(&self) -> usize {
        self.q
    }
    /// Number of null basis vectors.
    pub fn r(&self) -> usize {
        self.r
    }
    /// Number of basis vectors.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Number of basis blades, `2^n`.
    pub fn dim(&self) -> usize {
        self.masks.len()
    }
    /// `(p, q, r)`.
    pub fn signature(&self) -> (usize, usize, usize) {
        (self.p, self.q, self.r)
    }
    /// Square of basis vector at bit position `bit` (0, 1 or -1).
    pub fn vector_square(&self, bit: usize) -> i8 {
        self.metric[bit]
    }
    /// Bitmask of the blade with canonical index `i`.
    pub fn mask(&self, i: usize) -> u32 {
        self.masks[i]
    }
    /// Canonical index of the blade with bitmask `mask`.
    pub fn index(&self, mask: u32) -> usize {
        self.index_of[mask as usize]
    }
    /// Grade of the blade with canonical index `i`.
    pub fn grade(&self, i: usize) -> usize {
        self.masks[i].count_ones() as usize
    }
    /// Name of the blade with canonical index `i` (`"1"`, `"e12"`, ...).
    pub fn blade_name(&self, i: usize) -> &str {
        &self.names[i]
    }
    /// All blade names in canonical order.
    pub fn blade_names(&self) -> &[String] {
        &self.names
    }
    /// Canonical index of a blade given by name (`"e13"`, `"1"`).
    pub fn blade_by_name(&self, name: &str) -> Result<usize> {
        self.names.iter().position(|s| s == name).ok_or_else(|| GaError::Unknown {
            kind: format!("blade of {self}"),
            got: name.to_string(),
            expected: self.names.join(", "),
        })
    }
    /// Canonical indices of the blades of grade `k` (contiguous; empty when `k > n`).
    pub fn grade_range(&self, k: usize) -> Range<usize> {
        if k > self.n {
            return 0..0;
        }
        self.grade_start[k]..self.grade_start[k + 1]
    }
    /// Canonical indices of all blades whose grade is in `grades`.
    pub fn blades_of_grades(&self, grades: &[usize]) -> Vec<usize> {
        (0..self.dim()).filter(|&i| grades.contains(&self.grade(i))).collect()
    }
    /// Canonical indices of the even blades.
    pub fn even_blades(&self) -> Vec<usize> {
        (0..self.dim()).filter(|&i| self.grade(i) & 1 == 0).collect()
    }
    /// Geometric product of canonical blades: `(sign, index)`, sign 0 when the product vanishes.
    pub fn product(&self, i: usize, j: usize) -> (i8, usize) {
        let (s, k) = self.table[i * self.dim() + j];
        (s, k as usize)
    }
    /// Sign of the reverse on blade `i`: `(-1)^(k(k-1)/2)`.
    pub fn reverse_sign(&self, i: usize) -> i8 {
        let k = self.grade(i);
        if (k * k.saturating_sub(1) / 2) & 1 == 0 {
            1
        } else {
            -1
        }
    }
    /// Sign of the grade involution on blade `i`: `(-1)^k`.
    pub fn involute_sign(&self, i: usize) -> i8 {
        if self.grade(i) & 1 == 0 {
            1
        } else {
            -1
        }
    }
    /// Sign of the Clifford conjugate on blade `i`.
    pub fn conjugate_sign(&self, i: usize) -> i8 {
        self.reverse_sign(i) * self.involute_sign(i)
    }
    /// Metric-free (right complement) dual of blade `i`: `(sign, j)` such that
    /// `e_i ∧ (sign·e_j)` is the pseudoscalar. Well defined for degenerate metrics.
    pub fn dual(&self, i: usize) -> (i8, usize) {
        let a = self.masks[i];
        let full = (self.dim() - 1) as u32;
        let c = full ^ a;
        (reorder_sign(a, c), self.index(c))
    }
    /// Inverse of [`Algebra::dual`]: `undual(dual(x)) = x`.
    pub fn undual(&self, j: usize) -> (i8, usize) {
        let b = self.masks[j];
        let full = (self.dim() - 1) as u32;
        let a = full ^ b;
        (reorder_sign(a, b), self.index(a))
    }
    /// Checks that `other` is the same algebra.
    pub fn check_same(&self, other: &Algebra) -> Result<()> {
        if self == other {
            Ok(())
        } else {
            Err(GaError::AlgebraMismatch { expected: self.to_string(), got: other.to_string() })
        }
    }
    /// Grades `k` for which the algebra has blades (`0..=n`).
    pub fn grades(&self) -> Range<usize> {
        0..self.n + 1
    }
}

fn binomial(n: usize, k: usize) -> usize {
    if k > n {
        return 0;
    }
    let mut r = 1usize;
    for i in 0..k {
        r = r * (n - i) / (i + 1);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sign of sorting a list of indices by bubble sort, with squares applied.
    fn slow_product(alg: &Algebra, a: u32, b: u32) -> (i8, u32) {
        let mut list: Vec<usize> = (0..alg.n()).filter(|i| a & (1 << i) != 0).collect();
        list.extend((0..alg.n()).filter(|i| b & (1 << i) != 0));
        let mut sign = 1i8;
        loop {
            let mut changed = false;
            let mut i = 0;
            while i + 1 < list.len() {
                if list[i] > list[i + 1] {
                    list.swap(i, i + 1);
                    sign = -sign;
                    changed = true;
                } else if list[i] == list[i + 1] {
                    sign *= alg.vector_square(list[i]);
                    list.drain(i..i + 2);
                    changed = true;
                    continue;
                }
                i += 1;
            }
            if !changed {
                break;
            }
        }
        let mask = list.iter().fold(0u32, |m, &i| m | (1 << i));
        (sign, mask)
    }

    #[test]
    fn canonical_order_and_names() {
        let a = Algebra::new(3, 0, 0).unwrap();
        assert_eq!(a.blade_names(), &["1", "e1", "e2", "e3", "e12", "e13", "e23", "e123"]);
        let pga = Algebra::new(3, 0, 1).unwrap();
        assert_eq!(pga.blade_name(1), "e0");
        assert_eq!(pga.blade_name(5), "e01");
        assert_eq!(pga.blade_name(15), "e0123");
        assert_eq!(pga.vector_square(0), 0);
        assert_eq!(pga.vector_square(1), 1);
        let sta = Algebra::new(1, 3, 0).unwrap();
        assert_eq!(sta.vector_square(0), 1);
        assert_eq!(sta.vector_square(3), -1);
        assert_eq!(a.grade_range(2), 4..7);
        assert_eq!(a.blade_by_name("e13").unwrap(), 5);
        assert!(a.blade_by_name("e31").is_err());
    }

    #[test]
    fn table_matches_bubble_sort() {
        for (p, q, r) in [(2, 0, 0), (3, 0, 0), (3, 0, 1), (1, 3, 0), (2, 2, 2)] {
            let alg = Algebra::new(p, q, r).unwrap();
            for i in 0..alg.dim() {
                for j in 0..alg.dim() {
                    let (s, k) = alg.product(i, j);
                    let (s2, m2) = slow_product(&alg, alg.mask(i), alg.mask(j));
                    assert_eq!(s, s2, "{alg} {} * {}", alg.blade_name(i), alg.blade_name(j));
                    if s != 0 {
                        assert_eq!(alg.mask(k), m2);
                    }
                }
            }
        }
    }

    #[test]
    fn dual_undual_inverse() {
        let alg = Algebra::new(3, 0, 1).unwrap();
        let ps = alg.dim() - 1;
        for i in 0..alg.dim() {
            let (s, j) = alg.dual(i);
            let (s2, k) = alg.undual(j);
            assert_eq!(k, i);
            assert_eq!(s * s2, 1);
            // e_i ∧ dual(e_i) = I  (outer product sign is the reorder sign)
            assert_eq!(reorder_sign(alg.mask(i), alg.mask(j)) * s, 1);
            assert_eq!(alg.mask(i) | alg.mask(j), alg.mask(ps));
        }
    }

    #[test]
    fn bad_specs() {
        for spec in ["", "3,a", "1,2,3,4", "-1,0", "Cl(3,0"] {
            let e = Algebra::parse(spec).unwrap_err();
            assert!(matches!(e, GaError::BadSpec { .. }), "{spec}: {e}");
            assert!(e.to_string().contains("expected"));
        }
        let e = Algebra::parse("5,2,0").unwrap_err();
        assert!(matches!(e, GaError::TooLarge { n: 7, .. }), "{e}");
        assert!(e.to_string().contains("n <= 6"));
        assert_eq!(*Algebra::parse("3,0").unwrap(), *Algebra::new(3, 0, 0).unwrap());
        assert_eq!(*Algebra::parse(" Cl(3, 0, 1) ").unwrap(), *Algebra::new(3, 0, 1).unwrap());
    }
}
