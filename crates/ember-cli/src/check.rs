//! `ember check`.

use ember_core::{DeviceRequest, Error, Result};
use ember_ops::harness::check::{print_table, run_families, CheckCtx, Tier};
use std::process::ExitCode;

pub fn run(request: DeviceRequest, op: Option<&str>, tier: &str, json: Option<&str>) -> Result<ExitCode> {
    let tier = match tier {
        "quick" => Tier::Quick,
        "full" => Tier::Full,
        "small" => Tier::Small,
        other => return Err(Error::invalid("tier", format!("expected quick, full or small, got `{other}`"))),
    };
    let resolved = request.resolve()?;
    eprintln!("[ember] device: {}", resolved.note);
    let families = match op {
        Some(name) => vec![ember_ops::family(name)?],
        None => ember_ops::families(),
    };
    ember_core::set_poison_outputs(true);
    let ctx = CheckCtx::new(resolved.device, tier);
    let (rows, errors) = run_families(&families, &ctx, "ember");
    let failures = print_table(&rows, &mut std::io::stdout()) + errors;
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&rows).unwrap_or_default())
            .map_err(|source| Error::Io { path: path.into(), source })?;
    }
    println!("{} passed, {} failed", rows.len() + errors - failures, failures);
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
