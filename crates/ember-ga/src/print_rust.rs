//! Rust source printer: a function over fixed-size arrays.

use std::fmt::Write as _;

use crate::ir::{Instr, Ir, Out, UnaryOp};

/// Scalar type of printed Rust code.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RustFloat {
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl RustFloat {
    fn name(self) -> &'static str {
        match self {
            RustFloat::F32 => "f32",
            RustFloat::F64 => "f64",
        }
    }
}

fn literal(x: f64, t: RustFloat) -> String {
    let ty = t.name();
    if x.is_nan() {
        format!("{ty}::NAN")
    } else if x.is_infinite() {
        if x > 0.0 { format!("{ty}::INFINITY") } else { format!("{ty}::NEG_INFINITY") }
    } else {
        match t {
            RustFloat::F32 => format!("{:?}_f32", x as f32),
            RustFloat::F64 => format!("{x:?}_f64"),
        }
    }
}

/// `erf` for the printed code (std has none): Maclaurin series below 2.5,
/// continued fraction of `erfc` above.
fn erf_helper(t: RustFloat) -> String {
    let ty = t.name();
    format!(
        r#"    fn ember_erf(x: {ty}) -> {ty} {{
        let ax = (x as f64).abs();
        let r = if ax < 2.5 {{
            let x2 = ax * ax;
            let (mut term, mut sum, mut n) = (ax, ax, 0.0f64);
            loop {{
                n += 1.0;
                term *= -x2 / n;
                let add = term / (2.0 * n + 1.0);
                sum += add;
                if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {{
                    break;
                }}
            }}
            sum * std::f64::consts::FRAC_2_SQRT_PI
        }} else {{
            let mut f = 0.0f64;
            for k in (1..=60).rev() {{
                f = (k as f64 / 2.0) / (ax + f);
            }}
            1.0 - (-ax * ax).exp() / (ax + f) / std::f64::consts::PI.sqrt()
        }};
        (if x < 0.0 {{ -r }} else {{ r }}) as {ty}
    }}
"#
    )
}

/// `pub fn name(x: &[T; 8], ..., out: &mut [T; 8], ...)` computing the program.
pub fn function(ir: &Ir, t: RustFloat) -> String {
    let ty = t.name();
    let c = ir.counts();
    let mut s = format!("/// {}: {} muls / {} adds", ir.name, c.muls, c.adds);
    if c.other > 0 {
        let _ = write!(s, " / {} other", c.other);
    }
    s.push('\n');
    for g in &ir.inputs {
        let _ = writeln!(s, "///   in  `{}`: {}", g.name, g.labels.join(" "));
    }
    for g in &ir.outputs {
        let _ = writeln!(s, "///   out `{}`: {}", g.name, g.labels.join(" "));
    }
    let mut params: Vec<String> = ir.inputs.iter().map(|g| format!("{}: &[{ty}; {}]", g.name, g.len())).collect();
    params.extend(ir.outputs.iter().map(|g| format!("{}: &mut [{ty}; {}]", g.name, g.len())));
    s.push_str("#[allow(clippy::all, unused_variables, unused_parens, non_snake_case)]\n");
    let _ = writeln!(s, "pub fn {}({}) {{", ir.name, params.join(", "));
    if ir.instrs.iter().any(|i| matches!(i, Instr::Unary(UnaryOp::Erf, _))) {
        s.push_str(&erf_helper(t));
    }
    let mut name: Vec<String> = Vec::with_capacity(ir.instrs.len());
    for (i, ins) in ir.instrs.iter().enumerate() {
        let v = |j: &u32| name[*j as usize].clone();
        let rhs = match ins {
            Instr::Input { group, index } => {
                name.push(format!("{}[{}]", ir.inputs[*group as usize].name, index));
                continue;
            }
            Instr::Const(c) => {
                name.push(literal(*c, t));
                continue;
            }
            Instr::Add(a, b) => format!("{} + {}", v(a), v(b)),
            Instr::Sub(a, b) => format!("{} - {}", v(a), v(b)),
            Instr::Mul(a, b) => format!("{} * {}", v(a), v(b)),
            Instr::Div(a, b) => format!("{} / {}", v(a), v(b)),
            Instr::Neg(a) => format!("-{}", v(a)),
            Instr::Unary(op, a) => {
                let a = v(a);
                match op {
                    UnaryOp::Sqrt => format!("{a}.sqrt()"),
                    UnaryOp::Rsqrt => format!("1.0 / {a}.sqrt()"),
                    UnaryOp::Recip => format!("1.0 / {a}"),
                    UnaryOp::Exp => format!("{a}.exp()"),
                    UnaryOp::Log => format!("{a}.ln()"),
                    UnaryOp::Tanh => format!("{a}.tanh()"),
                    UnaryOp::Erf => format!("ember_erf({a})"),
                    UnaryOp::Abs => format!("{a}.abs()"),
                }
            }
        };
        let _ = writeln!(s, "    let t_{i}: {ty} = {rhs};");
        name.push(format!("t_{i}"));
    }
    for (g, outs) in ir.results.iter().enumerate() {
        for (k, o) in outs.iter().enumerate() {
            let val = match o {
                Out::Zero => format!("0.0_{ty}"),
                Out::Val { id, neg: false } => name[*id as usize].clone(),
                Out::Val { id, neg: true } => format!("-{}", name[*id as usize]),
            };
            let _ = writeln!(s, "    {}[{}] = {val};", ir.outputs[g].name, k);
        }
    }
    s.push_str("}\n");
    s
}
