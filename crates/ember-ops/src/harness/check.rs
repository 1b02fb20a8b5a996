//! Correctness checks shared by `ember check`, the CPU test suite and the GPU test binary: run an op
//! on a device in some dtype, compare every output and gradient with the f64 CPU reference by
//! ‖out − ref‖ / ‖ref‖, and collect one row per comparison.

use ember_core::{DType, Device, Result, Tensor};

/// How many and how large the cases are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// A few small sizes: `ember check` and the CPU test suite.
    Quick,
    /// Every awkward size the issue names, large ones included: the GPU test binary.
    Full,
    /// Small sizes only, for compute-sanitizer runs.
    Small,
}

#[derive(Clone, Copy, Debug)]
pub struct CheckCtx {
    pub device: Device,
    pub tier: Tier,
    pub seed: u64,
}

impl CheckCtx {
    pub fn new(device: Device, tier: Tier) -> Self {
        CheckCtx { device, tier, seed: 0x5eed }
    }
    /// A line on stderr after each case where `EMBER_CHECK_PROGRESS=1`: a long tier that hangs or
    /// runs out of time then shows how far it got.
    pub fn progress(&self, line: impl FnOnce() -> String) {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *ON.get_or_init(|| std::env::var("EMBER_CHECK_PROGRESS").is_ok_and(|v| v == "1")) {
            eprintln!("  {}", line());
        }
    }
    /// The activation dtypes a family's cases run in: all of them, or those named in
    /// `EMBER_CHECK_DTYPES` (comma-separated, e.g. "f32"), to narrow a sanitizer run to the kernels
    /// one change touched.
    pub fn dtypes(&self) -> Vec<DType> {
        let only = ember_core::knob("EMBER_CHECK_DTYPES").unwrap_or_default();
        DType::ACTIVATIONS.into_iter().filter(|d| only.is_empty() || only.split(',').any(|n| n.trim() == d.name())).collect()
    }
    /// A fresh seed for each case, so every case draws new random inputs.
    pub fn seed_for(&self, case: &str) -> u64 {
        let mut h = self.seed ^ 0xcbf2_9ce4_8422_2325;
        for b in case.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        h
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckRow {
    pub op: String,
    pub case: String,
    pub quantity: String,
    pub dtype: DType,
    pub device: String,
    pub rel_err: f64,
    pub tol: f64,
}

impl CheckRow {
    /// NaN and infinite errors never pass.
    pub fn pass(&self) -> bool {
        self.rel_err.is_finite() && self.rel_err <= self.tol
    }
}

/// Compare `out` (any device, any dtype) with the f64 reference values.
pub fn compare(op: &str, case: &str, quantity: &str, out: &Tensor, reference: &[f64], tol: f64) -> Result<CheckRow> {
    let got = out.to_vec_f64()?;
    Ok(CheckRow {
        op: op.into(),
        case: case.into(),
        quantity: quantity.into(),
        dtype: out.dtype(),
        device: out.device().to_string(),
        rel_err: ember_core::compare::rel_err(&got, reference),
        tol,
    })
}

/// A row for a property that holds or not (bitwise determinism, an expected error), with error 0 or ∞.
pub fn property(op: &str, case: &str, quantity: &str, dtype: DType, device: Device, holds: bool) -> CheckRow {
    CheckRow {
        op: op.into(),
        case: case.into(),
        quantity: quantity.into(),
        dtype,
        device: device.to_string(),
        rel_err: if holds { 0.0 } else { f64::INFINITY },
        tol: 0.0,
    }
}

/// Print rows as an aligned table; returns the number of failures.
pub fn print_table(rows: &[CheckRow], out: &mut dyn std::io::Write) -> usize {
    let mut failures = 0;
    let _ = writeln!(out, "{:<10} {:<36} {:<12} {:<5} {:<7} {:>10} {:>9}  result", "op", "case", "quantity", "dtype", "device", "rel_err", "tol");
    for r in rows {
        let ok = r.pass();
        failures += usize::from(!ok);
        let _ = writeln!(
            out,
            "{:<10} {:<36} {:<12} {:<5} {:<7} {:>10.3e} {:>9.1e}  {}",
            r.op,
            r.case,
            r.quantity,
            r.dtype.name(),
            r.device,
            r.rel_err,
            r.tol,
            if ok { "ok" } else { "FAIL" }
        );
    }
    failures
}

/// Run every family's check on `ctx`, logging progress to stderr with `tag`. Returns the rows and
/// the number of families whose check returned an error (each counts as a failure).
pub fn run_families(families: &[&dyn crate::OpFamily], ctx: &CheckCtx, tag: &str) -> (Vec<CheckRow>, usize) {
    let mut rows = Vec::new();
    let mut errors = 0;
    for fam in families {
        let t0 = std::time::Instant::now();
        match fam.check(ctx) {
            Ok(r) => {
                eprintln!("[{tag}] {}: {} comparisons in {:.1} s", fam.name(), r.len(), t0.elapsed().as_secs_f64());
                rows.extend(r);
            }
            Err(e) => {
                errors += 1;
                eprintln!("[{tag}] {}: FAILED with an error: {e}", fam.name());
            }
        }
    }
    (rows, errors)
}
