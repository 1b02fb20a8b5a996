//! GPU tests: every CUDA op, forward and every gradient, against the f64 CPU reference on fresh
//! random inputs in every dtype, at awkward sizes, with outputs poisoned (NaN) before each run.
//!
//! Runs on `cuda:0` whenever a CUDA device is usable. Without one it reports every test as skipped
//! (it never reports a pass it did not run); `EMBER_REQUIRE_GPU=1` turns that into a failure.
//! Options: `--small` (small sizes only, for compute-sanitizer), `--op NAME`, `--json FILE`.

use ember_core::{DType, Device, DeviceRequest, Error, Tensor};
use ember_ops::harness::check::{print_table, property, run_families, CheckCtx, CheckRow, Tier};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let small = args.iter().any(|a| a == "--small");
    let op = args.iter().position(|a| a == "--op").and_then(|i| args.get(i + 1)).cloned();
    let json = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1)).cloned();
    let required = std::env::var("EMBER_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let families: Vec<_> = ember_ops::families().into_iter().filter(|f| op.as_deref().is_none_or(|o| o == f.name())).collect();

    let device = match DeviceRequest::Cuda(0).resolve() {
        Ok(r) => r.device,
        Err(e) => {
            println!("gpu: SKIPPED {} op families — {e}", families.len());
            if required {
                println!("0 passed, 1 failed");
                std::process::exit(1);
            }
            println!("0 passed, 0 failed, {} skipped", families.len());
            return;
        }
    };
    ember_core::set_poison_outputs(true);
    let tier = if small { Tier::Small } else { Tier::Full };
    let ctx = CheckCtx::new(device, tier);
    let (mut rows, errors) = run_families(&families, &ctx, "gpu");
    rows.extend(runtime_properties(device));
    let failures = print_table(&rows, &mut std::io::stdout()) + errors;
    if let Some(path) = json {
        let _ = std::fs::write(&path, serde_json::to_string_pretty(&rows).unwrap());
    }
    println!("{} passed, {} failed", rows.len() + errors - failures, failures);
    if failures > 0 {
        std::process::exit(1);
    }
}

/// Properties of the runtime itself on a real device.
fn runtime_properties(device: Device) -> Vec<CheckRow> {
    let mut rows = Vec::new();
    let p = |name: &str, holds: bool| property("runtime", name, "holds", DType::F32, device, holds);
    // Counter-based random numbers are bit-identical on both sides.
    for dtype in DType::ACTIVATIONS {
        let a = Tensor::rand(&[100_003], -2.0, 3.0, dtype, device, 99).and_then(|t| t.to_vec_f64());
        let b = Tensor::rand(&[100_003], -2.0, 3.0, dtype, Device::Cpu, 99).and_then(|t| t.to_vec_f64());
        rows.push(property("runtime", "rand cpu == cuda", "bitwise", dtype, device, matches!((a, b), (Ok(a), Ok(b)) if a == b)));
        // dtype conversion on the device equals the host's.
        let x = Tensor::randn(&[4099], DType::F32, Device::Cpu, 5).unwrap();
        let host = x.to_dtype(dtype).and_then(|t| t.to_vec_f64());
        let dev = x.to_device(device).and_then(|t| t.to_dtype(dtype)).and_then(|t| t.to_vec_f64());
        rows.push(property("runtime", "cast cpu == cuda", "bitwise", dtype, device, matches!((host, dev), (Ok(a), Ok(b)) if a == b)));
    }
    // A CPU tensor handed to an op with a CUDA tensor is a clear error, and the context stays usable.
    let x = Tensor::rand(&[64], -1.0, 1.0, DType::F32, device, 1).unwrap();
    let dy_cpu = Tensor::rand(&[64], -1.0, 1.0, DType::F32, Device::Cpu, 2).unwrap();
    let e = ember_ops::gelu::backward(&x, &dy_cpu);
    rows.push(p("device mismatch is Err(Device)", matches!(e, Err(Error::Device { .. }))));
    rows.push(p("no sticky error after bad input", ember_ops::gelu::forward(&x).and_then(|y| y.to_vec_f64()).is_ok()));
    // f64 is the CPU reference dtype only.
    rows.push(p("f64 on cuda is Err", Tensor::zeros(&[4], DType::F64, device).is_err()));
    rows.extend(buffer_cache_properties(device));
    rows
}

/// The device's buffer cache (ember_core::cuda::cache): a dropped tensor's buffer serves the next
/// allocation of its size class, holds whatever the new owner writes, and is freed on request.
fn buffer_cache_properties(device: Device) -> Vec<CheckRow> {
    let p = |name: &str, holds: bool| property("runtime", name, "holds", DType::F32, device, holds);
    let run = || -> ember_core::Result<Vec<bool>> {
        let a = Tensor::rand(&[1000], -1.0, 1.0, DType::F32, device, 3)?;
        let dev = a.cuda_device()?.clone();
        let caching = std::env::var("EMBER_CUDA_CACHE_MB").map(|v| v.trim() != "0").unwrap_or(true);
        let first = a.cuda_ptr()?;
        drop(a);
        let held = dev.cached_bytes();
        // 1000 and 900 f32 words are one class (4 KiB): the same buffer, with the new tensor's values.
        let values: Vec<f32> = (0..900).map(|i| i as f32 * 0.5 - 7.0).collect();
        let b = Tensor::from_vec(values.clone(), &[900])?.to_device(device)?;
        let reused = b.cuda_ptr()? == first;
        let back = b.to_vec_f64()?.iter().zip(&values).all(|(x, &y)| *x == y as f64);
        drop(b);
        dev.release_cached();
        Ok(vec![!caching || (held >= 4096 && reused), back, dev.cached_bytes() == 0])
    };
    match run() {
        Ok(v) => vec![
            p("a dropped buffer serves the next allocation of its class", v[0]),
            p("a reused buffer holds the new owner's values", v[1]),
            p("release_cached empties the buffer cache", v[2]),
        ],
        Err(_) => vec![p("buffer cache checks ran", false)],
    }
}
