//! Compiles every kernel and every specialization ember can emit with NVRTC, for sm_90a (Hopper)
//! and sm_80 (Ampere), and fails on any error. No GPU is needed, only libnvrtc.
//!
//! Without NVRTC this test reports itself as skipped (and passes nothing); with
//! `EMBER_REQUIRE_NVRTC=1` (set by CI) a missing NVRTC is a failure.

use ember_core::cuda::{nvrtc, TENSOR_SOURCE};
use ember_ops::KernelBuild;

fn main() {
    let required = std::env::var("EMBER_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let version = match nvrtc::version() {
        Ok(v) => v,
        Err(e) => {
            if required {
                eprintln!("nvrtc_compile: NVRTC is required (EMBER_REQUIRE_NVRTC=1) but not usable: {e}");
                println!("0 passed, 1 failed");
                std::process::exit(1);
            }
            println!("nvrtc_compile: SKIPPED — {e}. Install NVRTC (e.g. pip install nvidia-cuda-nvrtc) and set EMBER_REQUIRE_NVRTC=1 to run it.");
            println!("0 passed, 0 failed, 1 skipped");
            return;
        }
    };
    println!("nvrtc_compile: NVRTC {}.{}", version.0, version.1);
    let mut builds = vec![KernelBuild { source: TENSOR_SOURCE, options: vec![] }];
    for fam in ember_ops::families() {
        builds.extend(fam.kernels());
    }
    let mut units: Vec<(String, String, Vec<String>)> = builds
        .iter()
        .map(|b| (format!("{} {}", b.source.name, b.options.join(" ")), b.source.full_code(), b.options.clone()))
        .collect();
    units.extend(ember_ops::generated_cuda_corpus().into_iter().map(|(name, code)| (name, code, vec![])));
    // NVRTC programs are independent: compile on every core.
    type Unit = (String, String, Vec<String>);
    let jobs: Vec<(&str, &Unit)> = ["sm_90a", "sm_80"].iter().flat_map(|a| units.iter().map(move |u| (*a, u))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((arch, (name, code, options))) = jobs.get(i) else { break };
                let mut opts = nvrtc::base_options(arch);
                opts.extend(options.iter().cloned());
                let err = match nvrtc::compile_uncached(name, code, &opts, arch) {
                    Ok(c) if !c.cubin.is_empty() => continue,
                    Ok(_) => "empty CUBIN".to_string(),
                    Err(e) => e.to_string(),
                };
                failures.lock().unwrap().push(format!("FAIL {name} [{arch}]: {err}"));
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    for f in &failures {
        eprintln!("{f}");
    }
    let (passed, failed) = (jobs.len() - failures.len(), failures.len());
    println!("nvrtc_compile: {} units × 2 architectures in {:.1} s", units.len(), t0.elapsed().as_secs_f64());
    println!("{passed} passed, {failed} failed");
    if failed > 0 || passed == 0 {
        std::process::exit(1);
    }
}
