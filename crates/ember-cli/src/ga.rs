//! `ember ga emit`: print the code ember-ga generates for a geometric-algebra expression.

use ember_core::{Error, Result};
use ember_ga::emit::{emit, Lang};
use std::process::ExitCode;

pub fn emit_cmd(algebra: &str, expr: &str, grad: bool, lang: &str) -> Result<ExitCode> {
    let lang: Lang = lang.parse().map_err(|e: ember_ga::GaError| Error::invalid("lang", e.to_string()))?;
    let out = emit(algebra, expr, grad, lang).map_err(|e| Error::invalid("ga emit", e.to_string()))?;
    println!("// {} — Cl({algebra}) {expr}{}: {} muls / {} adds", out.name, if grad { " + gradient" } else { "" }, out.muls, out.adds);
    println!("{}", out.code);
    Ok(ExitCode::SUCCESS)
}
