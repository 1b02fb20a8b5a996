//! `ember kernels`: compile every kernel ember can launch with NVRTC for an architecture and print
//! ptxas's resource report (registers, shared memory, spills) per kernel. Needs NVRTC, not a GPU.

use ember_core::cuda::nvrtc;
use ember_core::{Error, Result};
use std::process::ExitCode;

pub fn run(arch: &str, op: Option<&str>, save: Option<&str>) -> Result<ExitCode> {
    let (maj, min) = nvrtc::version()?;
    println!("NVRTC {maj}.{min}, target {arch}");
    let families = match op {
        Some(name) => vec![ember_ops::family(name)?],
        None => ember_ops::families(),
    };
    let mut failed = 0;
    for fam in families {
        for build in fam.kernels() {
            let mut opts = nvrtc::base_options(arch);
            opts.extend(build.options.iter().cloned());
            opts.push("--ptxas-options=-v".into());
            let label = format!("{} {}", build.source.name, build.options.join(" "));
            match nvrtc::compile_uncached(build.source.name, &build.source.full_code(), &opts, arch) {
                Ok(c) => {
                    println!("== {label}");
                    for line in c.log.lines().filter(|l| l.contains("Compiling entry") || l.contains("Used") || l.contains("spill") || l.contains("stack frame")) {
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
