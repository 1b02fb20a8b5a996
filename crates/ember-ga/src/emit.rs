//! Command-line-facing entry point: named expressions, generated code and counts.
//!
//! `ember ga emit --algebra P,Q,R --expr NAME [--grad] --lang cuda|rust|ir` calls
//! [`emit`]. [`EXPRS`] lists the expression names with a one-line description.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::algebra::Algebra;
use crate::error::{GaError, Result};
use crate::ir::Ir;
use crate::product::{Linear, Product};
use crate::program::Program;
use crate::wgp::PathTable;

/// Supported expressions: `(name, description)`.
pub const EXPRS: &[(&str, &str)] = &[
    ("gp", "geometric product x*y of two full multivectors"),
    ("wgp", "weighted geometric product: one weight w[p] per (grade_x, grade_y, grade_out) path"),
    ("sandwich", "sandwich x*y*~x of an even multivector x and a vector y"),
    ("outer", "outer product x^y"),
    ("inner", "symmetric inner product x|y (grade |gx-gy| part)"),
    ("lcontract", "left contraction of x onto y"),
    ("rcontract", "right contraction of x by y"),
    ("scalar", "scalar product <x*y>_0"),
    ("commutator", "commutator product (x*y - y*x)/2"),
    ("anticommutator", "anticommutator product (x*y + y*x)/2"),
    ("regressive", "regressive product x&y = undual(dual(x)^dual(y))"),
    ("reverse", "reverse ~x"),
    ("involute", "grade involution of x"),
    ("conjugate", "Clifford conjugate of x"),
    ("dual", "complement dual of x (well defined for degenerate metrics)"),
    ("undual", "inverse of dual"),
    ("norm2", "squared norm <x*~x>_0"),
];

/// Names of the supported expressions.
pub fn expr_names() -> Vec<&'static str> {
    EXPRS.iter().map(|(n, _)| *n).collect()
}

/// Output language of [`emit`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lang {
    /// CUDA C: a device function and an elementwise kernel.
    Cuda,
    /// Rust source: a function over fixed-size arrays.
    Rust,
    /// The IR listing.
    Ir,
}

impl Lang {
    /// All languages.
    pub const ALL: [Lang; 3] = [Lang::Cuda, Lang::Rust, Lang::Ir];
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Cuda => "cuda",
            Lang::Rust => "rust",
            Lang::Ir => "ir",
        }
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Lang {
    type Err = GaError;
    fn from_str(s: &str) -> Result<Lang> {
        match s.to_ascii_lowercase().as_str() {
            "cuda" | "cu" => Ok(Lang::Cuda),
            "rust" | "rs" => Ok(Lang::Rust),
            "ir" => Ok(Lang::Ir),
            _ => Err(GaError::unknown("language", s, &["cuda", "rust", "ir"])),
        }
    }
}

/// Builds the program of a named expression: inputs `x`, `y` (multivectors),
/// `w` (weights, for `wgp`), output `out`, and with `grad` the upstream input
/// `g_out` and outputs `d_x`, `d_y`, `d_w`.
pub fn program(alg: &Arc<Algebra>, expr: &str, grad: bool) -> Result<Program> {
    let mut prog = Program::new();
    let binary = |p: Product| -> Option<Product> { Some(p) };
    let kind = match expr {
        "gp" => binary(Product::Geometric),
        "outer" => binary(Product::Outer),
        "inner" => binary(Product::Inner),
        "lcontract" => binary(Product::LeftContraction),
        "rcontract" => binary(Product::RightContraction),
        "scalar" => binary(Product::Scalar),
        "commutator" => binary(Product::Commutator),
        "anticommutator" => binary(Product::AntiCommutator),
        "regressive" => binary(Product::Regressive),
        _ => None,
    };
    let linear = match expr {
        "reverse" => Some(Linear::Reverse),
        "involute" => Some(Linear::Involute),
        "conjugate" => Some(Linear::Conjugate),
        "dual" => Some(Linear::Dual),
        "undual" => Some(Linear::Undual),
        _ => None,
    };
    let mut wrt = vec!["x"];
    if let Some(kind) = kind {
        let x = prog.input_full("x", alg)?;
        let y = prog.input_full("y", alg)?;
        let out = x.product(kind, &y)?;
        if kind == Product::Scalar {
            prog.output_scalars("out", &[out.coeff(0)])?;
        } else {
            prog.output("out", &out)?;
        }
        wrt.push("y");
    } else if let Some(lin) = linear {
        let x = prog.input_full("x", alg)?;
        let out = x.linear(lin);
        let blades: Vec<usize> = (0..alg.dim()).collect();
        prog.output_blades("out", &out, &blades)?;
    } else {
        match expr {
            "wgp" => {
                let x = prog.input_full("x", alg)?;
                let y = prog.input_full("y", alg)?;
                let w = prog.input_scalars("w", PathTable::new(alg).len())?;
                prog.output("out", &x.wgp(&y, &w)?)?;
                wrt.extend(["y", "w"]);
            }
            "sandwich" => {
                let x = prog.input_even("x", alg)?;
                let y = prog.input_grades("y", alg, &[1])?;
                let out = prog.sandwich(&x, &y)?;
                prog.output("out", &out)?;
                wrt.push("y");
            }
            "norm2" => {
                let x = prog.input_full("x", alg)?;
                prog.output_scalars("out", &[x.norm2()])?;
            }
            _ => return Err(GaError::unknown("expression", expr, &expr_names())),
        }
    }
    if grad {
        prog.vjp(&wrt)?;
    }
    Ok(prog)
}

/// Function name used for a generated expression, e.g. `ga_cl301_wgp_grad`.
pub fn function_name(alg: &Algebra, expr: &str, grad: bool) -> String {
    let (p, q, r) = alg.signature();
    format!("ga_cl{p}{q}{r}_{expr}{}", if grad { "_grad" } else { "" })
}

/// Lowers a named expression of an algebra given by spec (`"3,0,1"`).
pub fn lower(algebra: &str, expr: &str, grad: bool) -> Result<Ir> {
    let alg = Algebra::parse(algebra)?;
    let prog = program(&alg, expr, grad)?;
    prog.lower(&function_name(&alg, expr, grad))
}

/// Generated code of one expression with its operation counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Emitted {
    /// Function (and kernel) name.
    pub name: String,
    /// The code text.
    pub code: String,
    /// Multiplications.
    pub muls: usize,
    /// Additions and subtractions.
    pub adds: usize,
    /// The lowered program.
    pub ir: Ir,
}

/// Generates code for a named expression: `algebra` is `"P,Q"` or `"P,Q,R"`,
/// `expr` one of [`EXPRS`]; with `grad` the VJPs are generated together with the
/// forward outputs. CUDA output is a device function followed by an `f32`
/// elementwise kernel (`<name>_kernel`); Rust output is an `f32` function.
pub fn emit(algebra: &str, expr: &str, grad: bool, lang: Lang) -> Result<Emitted> {
    let ir = lower(algebra, expr, grad)?;
    let c = ir.counts();
    let code = match lang {
        Lang::Ir => ir.to_text(),
        Lang::Rust => crate::print_rust::function(&ir, crate::print_rust::RustFloat::F32),
        Lang::Cuda => {
            let spec = crate::print_cuda::KernelSpec::elementwise(&ir, &format!("{}_kernel", ir.name), crate::layout::DType::F32);
            let kernel = crate::print_cuda::kernel(&ir, &spec)?;
            format!("{}\n{}", crate::print_cuda::device_function(&ir), kernel)
        }
    };
    Ok(Emitted { name: ir.name.clone(), code, muls: c.muls, adds: c.adds, ir })
}
