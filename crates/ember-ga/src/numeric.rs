//! Dense numeric multivector arithmetic in `f64`, straight from the blade tables.
//!
//! This is the reference implementation: no symbolic machinery is involved, so it
//! serves as the test oracle of the generated code and as the `f64` reference of
//! layers built on this crate. Multivectors are dense slices of length `2^n` in
//! canonical blade order.

use crate::algebra::Algebra;
use crate::error::{GaError, Result};
use crate::product::{Linear, Product};
use crate::wgp::PathTable;

fn check_len(alg: &Algebra, what: &str, a: &[f64]) -> Result<()> {
    if a.len() != alg.dim() {
        return Err(GaError::shape(
            format!("{what} of {alg} (one coefficient per blade)"),
            alg.dim(),
            a.len(),
        ));
    }
    Ok(())
}

/// Any bilinear product of two dense multivectors.
pub fn product(alg: &Algebra, kind: Product, a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
    check_len(alg, "left operand", a)?;
    check_len(alg, "right operand", b)?;
    let mut out = vec![0.0; alg.dim()];
    for (i, &ai) in a.iter().enumerate() {
        if ai == 0.0 {
            continue;
        }
        for (j, &bj) in b.iter().enumerate() {
            let (s, k) = kind.blade(alg, i, j);
            if s != 0 {
                out[k] += f64::from(s) * ai * bj;
            }
        }
    }
    Ok(out)
}

/// Geometric product.
pub fn gp(alg: &Algebra, a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
    product(alg, Product::Geometric, a, b)
}

/// Blade-wise linear map (reverse, involution, conjugate, dual, undual).
pub fn linear(alg: &Algebra, kind: Linear, a: &[f64]) -> Result<Vec<f64>> {
    check_len(alg, "operand", a)?;
    let mut out = vec![0.0; alg.dim()];
    for (i, &ai) in a.iter().enumerate() {
        let (s, j) = kind.blade(alg, i);
        out[j] += f64::from(s) * ai;
    }
    Ok(out)
}

/// Reverse.
pub fn reverse(alg: &Algebra, a: &[f64]) -> Result<Vec<f64>> {
    linear(alg, Linear::Reverse, a)
}

/// Grade-`k` part.
pub fn grade(alg: &Algebra, a: &[f64], k: usize) -> Result<Vec<f64>> {
    check_len(alg, "operand", a)?;
    Ok(a.iter().enumerate().map(|(i, &v)| if alg.grade(i) == k { v } else { 0.0 }).collect())
}

/// Sandwich `x y x̃`.
pub fn sandwich(alg: &Algebra, x: &[f64], y: &[f64]) -> Result<Vec<f64>> {
    gp(alg, &gp(alg, x, y)?, &reverse(alg, x)?)
}

/// Squared norm `<x x̃>_0`.
pub fn norm2(alg: &Algebra, x: &[f64]) -> Result<f64> {
    Ok(product(alg, Product::Scalar, x, &reverse(alg, x)?)?[0])
}

/// Weighted geometric product: `Σ_p w_p <<x>_gx <y>_gy>_go` over the paths of
/// [`crate::wgp::paths`]; `w` has one weight per path.
pub fn wgp(alg: &Algebra, x: &[f64], y: &[f64], w: &[f64]) -> Result<Vec<f64>> {
    check_len(alg, "left operand", x)?;
    check_len(alg, "right operand", y)?;
    let table = PathTable::new(alg);
    if w.len() != table.len() {
        return Err(GaError::shape(format!("weights of the weighted product in {alg} (one per path)"), table.len(), w.len()));
    }
    let mut out = vec![0.0; alg.dim()];
    for (i, &xi) in x.iter().enumerate() {
        for (j, &yj) in y.iter().enumerate() {
            let (s, k) = alg.product(i, j);
            if s != 0 {
                let p = table.index(alg.grade(i), alg.grade(j), alg.grade(k)).expect("path of a nonzero product");
                out[k] += f64::from(s) * w[p] * xi * yj;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaternion_like_even_subalgebra() {
        let alg = Algebra::new(3, 0, 0).unwrap();
        let mut e12 = vec![0.0; 8];
        e12[4] = 1.0;
        let sq = gp(&alg, &e12, &e12).unwrap();
        assert_eq!(sq[0], -1.0);
        assert!(sq[1..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn lengths_are_checked() {
        let alg = Algebra::new(2, 0, 0).unwrap();
        let e = gp(&alg, &[1.0; 4], &[1.0; 3]).unwrap_err();
        assert!(e.to_string().contains("expected 4, got 3"), "{e}");
        let e = wgp(&alg, &[1.0; 4], &[1.0; 4], &[1.0; 9]).unwrap_err();
        assert!(e.to_string().contains("expected 10, got 9"), "{e}");
    }
}
