//! How results are compared with the f64 reference: ‖out − ref‖ / ‖ref‖, where any non-finite value
//! in `out` makes the error infinite, so NaN never passes.

/// Relative L2 error of `out` against `reference`. Returns `f64::INFINITY` when lengths differ or
/// `out` holds NaN/Inf; when ‖ref‖ = 0, returns ‖out‖ (absolute error).
pub fn rel_err(out: &[f64], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        if !o.is_finite() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn nan_never_passes() {
        assert!(rel_err(&[1.0, f64::NAN], &[1.0, 2.0]).is_infinite());
        assert!(rel_err(&[1.0], &[1.0, 2.0]).is_infinite());
        assert_eq!(rel_err(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        assert!((rel_err(&[3.0, 4.0], &[3.0, 4.5]) - 0.5 / (9.0f64 + 20.25).sqrt()).abs() < 1e-15);
    }
}
