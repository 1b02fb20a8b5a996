//! `ember bench`.

use ember_core::{Device, DeviceRequest, Error, Result};
use ember_ops::harness::bench::{BenchCtx, BenchRow};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

pub fn run(request: DeviceRequest, op: Option<&str>, quick: bool, json_path: Option<&str>) -> Result<ExitCode> {
    let resolved = request.resolve()?;
    eprintln!("[ember] device: {}", resolved.note);
    let families = match op {
        Some(name) => vec![ember_ops::family(name)?],
        None => ember_ops::families(),
    };
    eprintln!("[ember] measuring ceilings (device copy bandwidth, GEMM rate)...");
    let ctx = BenchCtx::new(resolved.device, quick)?;
    eprintln!("[ember] copy {:.0} GB/s, bf16 GEMM {:.1} TFLOP/s", ctx.ceilings.copy_gbps, ctx.ceilings.gemm_bf16_tflops);
    let mut rows: Vec<BenchRow> = Vec::new();
    let mut failed = Vec::new();
    for fam in families {
        let mut progress = |r: &BenchRow| {
            eprintln!("[ember] {:<10} {:<8} {:<5} {:<40} {:>10.4} ms  floor {:>5.1}%", r.op, r.pass, r.dtype.name(), compact(r), r.ms, 100.0 * r.floor_frac);
            let _ = std::io::stderr().flush();
        };
        match fam.bench(&ctx, &mut progress) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("[ember] {}: error: {e}", fam.name());
                failed.push(fam.name());
            }
        }
    }
    print_table(&rows);
    if let Some(path) = json_path {
        let device_name = match resolved.device {
            Device::Cuda(i) => ember_core::cuda::CudaDevice::get(i)?.info().name.clone(),
            Device::Cpu => "cpu".to_string(),
        };
        let doc = json!({
            "device": device_name,
            "device_kind": if resolved.device.is_cuda() { "cuda" } else { "cpu" },
            "date": today(),
            "commit": commit(),
            "quick": quick,
            "ceilings": ctx.ceilings_now(),
            "rows": rows.iter().map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["key"] = json!(r.key());
                v
            }).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default()).map_err(|source| Error::Io { path: path.into(), source })?;
        eprintln!("[ember] wrote {path}");
    }
    Ok(if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn compact(r: &BenchRow) -> String {
    r.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn print_table(rows: &[BenchRow]) {
    println!("{:<10} {:<8} {:<5} {:<40} {:>10} {:>10} {:>7} {:>9} {:>9}", "op", "pass", "dtype", "shape", "ms", "floor_ms", "floor%", "GB/s", "TFLOP/s");
    for r in rows {
        println!(
            "{:<10} {:<8} {:<5} {:<40} {:>10.4} {:>10.4} {:>6.1}% {:>9.0} {:>9.1}",
            r.op,
            r.pass,
            r.dtype.name(),
            compact(r),
            r.ms,
            r.floor_ms,
            100.0 * r.floor_frac,
            r.gbps,
            r.tflops
        );
    }
}

/// The commit being measured: `EMBER_COMMIT` (set by the GPU bundle), else git's HEAD.
fn commit() -> String {
    if let Ok(c) = std::env::var("EMBER_COMMIT") {
        return c;
    }
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Today's UTC date, YYYY-MM-DD.
fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
