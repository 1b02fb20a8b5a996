//! `ember info`.

use ember_core::cuda::{self, libs, nvrtc, CudaDevice};
use ember_core::{DeviceRequest, Result};
use std::process::ExitCode;

pub fn run(request: DeviceRequest) -> Result<ExitCode> {
    println!("ember {}", env!("CARGO_PKG_VERSION"));
    println!("backends:   cpu ({} threads), cuda", rayon_threads());
    match cuda::device_count() {
        Ok(n) => {
            println!("cuda:       {n} device(s)");
            for i in 0..n {
                match CudaDevice::get(i) {
                    Ok(dev) => {
                        let d = dev.info();
                        println!(
                            "  cuda:{i}    {} — compute capability {}.{} (NVRTC target {}), {} SMs, {:.0} MB L2, {:.1} GiB, {} KiB shared memory per block, DRAM peak {}",
                            d.name,
                            d.compute_capability.0,
                            d.compute_capability.1,
                            d.arch,
                            d.multiprocessors,
                            d.l2_bytes as f64 / 1e6,
                            d.total_memory as f64 / (1u64 << 30) as f64,
                            d.shared_memory_per_block_optin / 1024,
                            if d.dram_peak_gbps > 0.0 { format!("{:.0} GB/s", d.dram_peak_gbps) } else { "unknown".into() }
                        );
                        if i == 0 {
                            println!("driver:     CUDA {}.{}", d.driver_version / 1000, (d.driver_version % 1000) / 10);
                            let limit = dev.cache_limit();
                            if limit > 0 {
                                println!("buffers:    dropped tensors' buffers kept for reuse, up to {:.1} GiB per device (EMBER_CUDA_CACHE_MB)", limit as f64 / (1u64 << 30) as f64);
                            } else {
                                println!("buffers:    freed when their tensor drops (EMBER_CUDA_CACHE_MB=0)");
                            }
                        }
                    }
                    Err(e) => println!("  cuda:{i}    unusable: {e}"),
                }
            }
        }
        Err(e) => println!("cuda:       {e}"),
    }
    match nvrtc::version() {
        Ok((maj, min)) => {
            let from = libs::loaded_from("nvrtc").map(|p| format!(" ({})", p.display())).unwrap_or_default();
            println!("nvrtc:      {maj}.{min}{from}");
        }
        Err(e) => println!("nvrtc:      {e}"),
    }
    match nvrtc::cache_dir() {
        Some(d) => {
            let n = std::fs::read_dir(&d).map(|r| r.count()).unwrap_or(0);
            println!("kernels:    cache {} ({n} files)", d.display());
        }
        None => println!("kernels:    disk cache off"),
    }
    let ops: Vec<_> = ember_ops::families().iter().map(|f| f.name()).collect();
    println!("ops:        {}", ops.join(", "));
    match request.resolve() {
        Ok(r) => println!("device:     {}", r.note),
        Err(e) => {
            println!("device:     {e}");
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
