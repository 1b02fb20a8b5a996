//! `ember kernels`: compile every kernel ember can launch with NVRTC for an architecture and print
//! ptxas's resource report (registers, shared memory, spills) per kernel. Needs NVRTC, not a GPU.

use ember_core::cuda::nvrtc;
use ember_core::{Error, Result};
use std::process::ExitCode;

/// Compile every kernel into the disk cache (`EMBER_CACHE_DIR`) for `arch`, in parallel, so that a
/// machine with the same NVRTC loads them without compiling (the GPU bundle ships such a cache).
pub fn fill_cache(arch: &str, op: Option<&str>) -> Result<ExitCode> {
    let (maj, min) = nvrtc::version()?;
    let dir = nvrtc::cache_dir().ok_or_else(|| Error::invalid("EMBER_CACHE_DIR", "the kernel cache is off"))?;
    let mut builds = vec![ember_ops::KernelBuild { source: ember_core::cuda::TENSOR_SOURCE, options: vec![] }];
    match op {
        Some(name) => builds.extend(ember_ops::family(name)?.kernels()),
        None => ember_ops::families().iter().for_each(|f| builds.extend(f.kernels())),
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(b) = builds.get(i) else { break };
                if let Err(e) = nvrtc::compile(b.source.name, &b.source.full_code(), arch, &b.options) {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    eprintln!("{} {}: {e}", b.source.name, b.options.join(" "));
                }
            });
        }
    });
    let failed = failed.into_inner();
    println!("NVRTC {maj}.{min}: {} modules for {arch} in {} ({:.0} s), {failed} failed", builds.len(), dir.display(), t0.elapsed().as_secs_f64());
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn run(arch: &str, op: Option<&str>, only: Option<&str>, save: Option<&str>) -> Result<ExitCode> {
    let (maj, min) = nvrtc::version()?;
    println!("NVRTC {maj}.{min}, target {arch}");
    let families = match op {
        Some(name) => vec![ember_ops::family(name)?],
        None => ember_ops::families(),
    };
    let mut failed = 0;
    for fam in families {
        for build in fam.kernels().into_iter().filter(|b| only.is_none_or(|o| b.source.name.contains(o) || b.options.iter().any(|x| x.contains(o)))) {
            let mut opts = nvrtc::base_options(arch);
            opts.extend(build.options.iter().cloned());
            opts.push("--ptxas-options=-v".into());
            let label = format!("{} {}", build.source.name, build.options.join(" "));
            match nvrtc::compile_uncached(build.source.name, &build.source.full_code(), &opts, arch) {
                Ok(c) => {
                    println!("== {label}");
                    for line in c.log.lines().filter(|l| l.contains("Compiling entry") || l.contains("Used") || l.contains("spill") || l.contains("stack frame") || l.contains("arning") || l.contains("Potential")) {
                        println!("   {}", line.trim().trim_start_matches("ptxas info    : "));
                    }
                    if let Some(dir) = save {
                        let name = label.trim().replace([' ', '=', '/'], "_");
                        let path = std::path::Path::new(dir).join(format!("{name}.{arch}.cubin"));
                        std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.into(), source })?;
                        std::fs::write(&path, &c.cubin).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
                    }
                }
                Err(e) => {
                    failed += 1;
                    println!("== {label}: {e}");
                }
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
