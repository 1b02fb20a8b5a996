//! The `ember` binary as a user runs it.

use std::process::Command;

fn ember(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ember")).args(args).output().expect("run ember");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn cuda_usable() -> bool {
    ember_core::cuda::CudaDevice::get(0).is_ok()
}

#[test]
fn info_exits_zero_and_names_the_backends() {
    let (code, out, err) = ember(&["info"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("backends:") && out.contains("nvrtc:") && out.contains("device:"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn check_on_cpu_passes() {
    let (code, out, err) = ember(&["check", "--device", "cpu"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" 0 failed"), "{out}");
    assert!(out.lines().filter(|l| l.ends_with(" ok")).count() >= 24, "{out}");
}

#[test]
fn cuda_without_a_gpu_is_a_clear_error_not_a_panic() {
    if cuda_usable() {
        // On a GPU machine the same command must work instead.
        let (code, out, err) = ember(&["--device", "cuda", "check", "--op", "gelu"]);
        assert_eq!(code, 0, "{out}{err}");
        return;
    }
    for args in [&["--device", "cuda", "check"][..], &["--device", "cuda:1", "bench", "--quick"], &["--device", "cuda", "info"]] {
        let (code, out, err) = ember(args);
        assert_ne!(code, 0, "{args:?}: {out}{err}");
        let text = format!("{out}{err}");
        assert!(text.contains("CUDA is not usable"), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    let (code, _, err) = ember(&["--device", "tpu", "info"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected auto, cpu, cuda or cuda:N, got `tpu`"), "{err}");
    let (code, _, err) = ember(&["check", "--device", "cpu", "--op", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("argument `op`: expected one of gelu"), "{err}");
}

#[test]
fn bench_on_cpu_writes_json_with_floors() {
    let path = std::env::temp_dir().join(format!("ember-bench-{}.json", std::process::id()));
    let (code, out, err) = ember(&["bench", "--device", "cpu", "--op", "gelu", "--quick", "--json", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let frac = r["floor_frac"].as_f64().unwrap();
        assert!(frac > 0.0 && frac.is_finite(), "{r}");
        assert!(r["key"].as_str().unwrap().starts_with("gelu|"), "{r}");
    }
    assert!(doc["ceilings"]["copy_gbps"].as_f64().unwrap() > 0.0);
    std::fs::remove_file(&path).ok();
}

#[test]
fn ga_emit_prints_code_and_counts() {
    let (code, out, err) = ember(&["ga", "emit", "--algebra", "3,0", "--expr", "wgp", "--grad", "--lang", "cuda"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("muls /") && out.contains("__device__"), "{out}");
    let (code, out, _) = ember(&["ga", "emit", "--algebra", "2,0", "--expr", "gp", "--lang", "rust"]);
    assert_eq!(code, 0);
    assert!(out.contains("16 muls / 12 adds") && out.contains("fn "), "{out}");
    let (code, _, err) = ember(&["ga", "emit", "--algebra", "9,0", "--expr", "gp"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected n <= 6") && !err.contains("panicked"), "{err}");
}
