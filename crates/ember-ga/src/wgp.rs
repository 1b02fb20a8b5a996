//! Path table of the weighted geometric product.
//!
//! The weighted geometric product has one weight per triple
//! `(grade_x, grade_y, grade_out)` whose part `<<x>_gx <y>_gy>_go` is not
//! identically zero in the algebra. Paths are ordered lexicographically by
//! `(grade_x, grade_out, grade_y)`, the layout used by flash-clifford, so
//! weights move between the two unchanged (10 paths in Cl(2,0), 20 in Cl(3,0)).

use crate::algebra::Algebra;

/// One path of the weighted geometric product.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    /// Grade taken from the left operand.
    pub gx: usize,
    /// Grade taken from the right operand.
    pub gy: usize,
    /// Grade of the output.
    pub go: usize,
}

/// All paths of the algebra in weight order.
pub fn paths(alg: &Algebra) -> Vec<Path> {
    let n = alg.n();
    let mut present = vec![false; (n + 1) * (n + 1) * (n + 1)];
    for i in 0..alg.dim() {
        for j in 0..alg.dim() {
            let (s, k) = alg.product(i, j);
            if s != 0 {
                let (gx, gy, go) = (alg.grade(i), alg.grade(j), alg.grade(k));
                present[(gx * (n + 1) + go) * (n + 1) + gy] = true;
            }
        }
    }
    let mut out = Vec::new();
    for gx in 0..=n {
        for go in 0..=n {
            for gy in 0..=n {
                if present[(gx * (n + 1) + go) * (n + 1) + gy] {
                    out.push(Path { gx, gy, go });
                }
            }
        }
    }
    out
}

/// Lookup from grade triple to path index.
#[derive(Clone, Debug)]
pub struct PathTable {
    n: usize,
    paths: Vec<Path>,
    index: Vec<Option<usize>>,
}

impl PathTable {
    /// Builds the table of `alg`.
    pub fn new(alg: &Algebra) -> PathTable {
        let n = alg.n();
        let paths = paths(alg);
        let mut index = vec![None; (n + 1) * (n + 1) * (n + 1)];
        for (p, path) in paths.iter().enumerate() {
            index[(path.gx * (n + 1) + path.gy) * (n + 1) + path.go] = Some(p);
        }
        PathTable { n, paths, index }
    }
    /// The paths in weight order.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }
    /// Number of paths (weights per channel).
    pub fn len(&self) -> usize {
        self.paths.len()
    }
    /// Whether there are no paths (never true: the scalar path always exists).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
    /// Path index of a grade triple.
    pub fn index(&self, gx: usize, gy: usize, go: usize) -> Option<usize> {
        let n = self.n;
        if gx > n || gy > n || go > n {
            return None;
        }
        self.index[(gx * (n + 1) + gy) * (n + 1) + go]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cl20_matches_flash_kingdon_layout() {
        let alg = Algebra::new(2, 0, 0).unwrap();
        let got: Vec<(usize, usize, usize)> = paths(&alg).iter().map(|p| (p.gx, p.gy, p.go)).collect();
        // w0 X0Y0, w1 X0Y1, w2 X0Y2, w3 X1|Y1, w4 X1Y0, w5 X1Y2, w6 X1^Y1, w7 X2Y2, w8 X2Y1, w9 X2Y0
        let expect = vec![
            (0, 0, 0),
            (0, 1, 1),
            (0, 2, 2),
            (1, 1, 0),
            (1, 0, 1),
            (1, 2, 1),
            (1, 1, 2),
            (2, 2, 0),
            (2, 1, 1),
            (2, 0, 2),
        ];
        assert_eq!(got, expect);
    }

    #[test]
    fn cl30_has_20_paths_in_flash_order() {
        let alg = Algebra::new(3, 0, 0).unwrap();
        let t = PathTable::new(&alg);
        assert_eq!(t.len(), 20);
        // flash-kingdon vga3d: w4 = X1|Y1, w8 = X1*Y3, w14 = X2.cp(Y2), w19 = X3*Y0
        assert_eq!(t.index(1, 1, 0), Some(4));
        assert_eq!(t.index(1, 3, 2), Some(8));
        assert_eq!(t.index(2, 2, 2), Some(14));
        assert_eq!(t.index(3, 0, 3), Some(19));
        assert_eq!(t.index(2, 2, 4), None);
    }

    #[test]
    fn degenerate_and_mixed_path_counts() {
        for (p, q, r) in [(3, 0, 1), (1, 3, 0)] {
            let alg = Algebra::new(p, q, r).unwrap();
            let t = PathTable::new(&alg);
            // every listed path has a nonzero blade product, every other triple none
            for gx in 0..=alg.n() {
                for gy in 0..=alg.n() {
                    for go in 0..=alg.n() {
                        let any = (0..alg.dim()).any(|i| {
                            (0..alg.dim()).any(|j| {
                                let (s, k) = alg.product(i, j);
                                s != 0 && alg.grade(i) == gx && alg.grade(j) == gy && alg.grade(k) == go
                            })
                        });
                        assert_eq!(any, t.index(gx, gy, go).is_some());
                    }
                }
            }
        }
    }
}
