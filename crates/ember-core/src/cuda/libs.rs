//! Finding the CUDA shared libraries at run time.
//!
//! ember links nothing from CUDA at build time: `cudarc` opens libcuda, libnvrtc, libcublas and
//! libcufft by their sonames when first used, and panics if one is missing. So before any cudarc
//! call, ember checks that the library can be opened. Where the loader's default search path does not
//! hold it, ember looks in the usual install places (a CUDA toolkit, the NVIDIA pip wheels) and
//! opens it by absolute path; the dynamic loader then hands that already-loaded copy to cudarc's
//! later open by soname.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Libraries that ember opened by absolute path; kept loaded for the life of the process.
fn pinned() -> &'static Mutex<Vec<(String, PathBuf, libloading::Library)>> {
    static PINNED: OnceLock<Mutex<Vec<(String, PathBuf, libloading::Library)>>> = OnceLock::new();
    PINNED.get_or_init(|| Mutex::new(Vec::new()))
}

/// Directories searched, in order, after the loader's own search path.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut push_list = |v: &str| {
        for p in v.split(':').filter(|p| !p.is_empty()) {
            dirs.push(PathBuf::from(p));
        }
    };
    if let Ok(v) = std::env::var("EMBER_CUDA_LIB_DIR") {
        push_list(&v);
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Ok(root) = std::env::var(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
            dirs.push(root.join("targets/x86_64-linux/lib"));
        }
    }
    for d in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64"] {
        dirs.push(PathBuf::from(d));
    }
    // NVIDIA's pip wheels (nvidia-cuda-nvrtc, nvidia-cublas, ...) inside a virtual environment or on PYTHONPATH.
    let mut site_roots: Vec<PathBuf> = Vec::new();
    if let Ok(v) = std::env::var("VIRTUAL_ENV") {
        if let Ok(rd) = std::fs::read_dir(Path::new(&v).join("lib")) {
            for e in rd.flatten() {
                site_roots.push(e.path().join("site-packages"));
            }
        }
    }
    if let Ok(v) = std::env::var("PYTHONPATH") {
        site_roots.extend(v.split(':').filter(|p| !p.is_empty()).map(PathBuf::from));
    }
    for root in site_roots {
        for sub in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cublas/lib", "nvidia/cufft/lib"] {
            dirs.push(root.join(sub));
        }
    }
    dirs
}

/// Candidate files for `lib{stem}.so*` in `dir`, newest soname version first.
fn candidates_in(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let prefix = format!("lib{stem}.so");
    let mut found: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n == prefix || (n.starts_with(&prefix) && n[prefix.len()..].starts_with('.'))
                })
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort();
    found.reverse();
    found
}

/// Make sure `lib{stem}` can be opened by soname, loading it by absolute path from a known install
/// place if needed. `present` is cudarc's own check (it opens by soname). `companions` are libraries
/// from the same folder that must be loaded first (libnvrtc-builtins for libnvrtc).
pub fn ensure(stem: &str, companions: &[&str], present: impl Fn() -> bool) -> Result<(), String> {
    if present() {
        return Ok(());
    }
    let dirs = search_dirs();
    for dir in &dirs {
        let cands = candidates_in(dir, stem);
        let Some(main) = cands.first() else { continue };
        for comp in companions {
            if let Some(c) = candidates_in(dir, comp).first() {
                if let Ok(lib) = unsafe { libloading::Library::new(c) } {
                    pinned().lock().unwrap().push((comp.to_string(), c.clone(), lib));
                }
            }
        }
        if let Ok(lib) = unsafe { libloading::Library::new(main) } {
            pinned().lock().unwrap().push((stem.to_string(), main.clone(), lib));
            if present() {
                return Ok(());
            }
        }
    }
    Err(format!(
        "lib{stem}.so was not found by the dynamic loader (LD_LIBRARY_PATH) nor in {} other places \
         (CUDA_HOME, /usr/local/cuda, NVIDIA pip wheels; set EMBER_CUDA_LIB_DIR to its folder)",
        dirs.len()
    ))
}

/// Where a library ember loaded by absolute path came from (for `ember info`).
pub fn loaded_from(stem: &str) -> Option<PathBuf> {
    pinned().lock().unwrap().iter().find(|(s, _, _)| s == stem).map(|(_, p, _)| p.clone())
}

pub fn ensure_driver() -> Result<(), String> {
    ensure("cuda", &[], || unsafe { cudarc::driver::sys::is_culib_present() })
        .map_err(|_| "no NVIDIA driver (libcuda.so could not be opened)".to_string())
}

pub fn ensure_nvrtc() -> Result<(), String> {
    ensure("nvrtc", &["nvrtc-builtins"], || unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

pub fn ensure_cublas() -> Result<(), String> {
    ensure("cublasLt", &[], || unsafe { cudarc::cublaslt::sys::is_culib_present() })?;
    ensure("cublas", &[], || unsafe { cudarc::cublas::sys::is_culib_present() })
}

pub fn ensure_cufft() -> Result<(), String> {
    ensure("cufft", &[], || unsafe { cudarc::cufft::sys::is_culib_present() })
}
