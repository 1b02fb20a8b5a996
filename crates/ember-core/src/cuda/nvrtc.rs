//! Run-time compilation of ember's CUDA sources with NVRTC, straight to CUBIN for the device's exact
//! architecture, with an on-disk cache.
//!
//! Cache key: SHA-256 of (source, options, architecture, NVRTC version). The cache lives in
//! `$EMBER_CACHE_DIR`, else `$XDG_CACHE_HOME/ember/kernels`, else `~/.cache/ember/kernels`;
//! `EMBER_KERNEL_CACHE=off` disables it. A failed compile returns `Error::Compile` with NVRTC's log.

use crate::{Error, Result};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::path::PathBuf;

/// Check that NVRTC can be loaded and report its version.
pub fn version() -> Result<(i32, i32)> {
    super::libs::ensure_nvrtc().map_err(Error::NvrtcUnavailable)?;
    let (mut major, mut minor) = (0, 0);
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::NvrtcUnavailable(format!("nvrtcVersion failed: {rc:?}")));
    }
    Ok((major, minor))
}

/// The kernel cache folder, if caching is on and a home for it exists.
pub fn cache_dir() -> Option<PathBuf> {
    if std::env::var("EMBER_KERNEL_CACHE").is_ok_and(|v| v == "off" || v == "0") {
        return None;
    }
    if let Ok(d) = std::env::var("EMBER_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ember/kernels"));
    }
    std::env::var("HOME").ok().map(|h| PathBuf::from(h).join(".cache/ember/kernels"))
}

/// Options every ember kernel is compiled with, besides the architecture.
pub fn base_options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "-std=c++17".into(), "-lineinfo".into(), "--device-as-default-execution-space".into()]
}

pub struct Compiled {
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings; the ptxas resource report when `EMBER_PTXAS_VERBOSE=1`).
    pub log: String,
    pub from_disk_cache: bool,
}

fn cache_key(code: &str, options: &[String], nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(code.as_bytes());
    for o in options {
        h.update([0u8]);
        h.update(o.as_bytes());
    }
    h.update(format!("\0nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compile `code` for `arch` (e.g. `sm_90a`), using and filling the disk cache.
pub fn compile(kernel: &str, code: &str, arch: &str, extra_options: &[String]) -> Result<Compiled> {
    let mut options = base_options(arch);
    options.extend(extra_options.iter().cloned());
    if std::env::var("EMBER_PTXAS_VERBOSE").is_ok_and(|v| v == "1") {
        options.push("--ptxas-options=-v".into());
    }
    let nvrtc = version()?;
    let path = cache_dir().map(|d| d.join(format!("{}-{kernel}-{arch}.cubin", &cache_key(code, &options, nvrtc)[..32])));
    if let Some(p) = &path {
        if let Ok(cubin) = std::fs::read(p) {
            if !cubin.is_empty() {
                return Ok(Compiled { cubin, log: String::new(), from_disk_cache: true });
            }
        }
    }
    let compiled = compile_uncached(kernel, code, &options, arch)?;
    if let Some(p) = &path {
        // Best effort: a read-only or missing home only costs a recompile next time.
        if let Some(dir) = p.parent() {
            if std::fs::create_dir_all(dir).is_ok() {
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &compiled.cubin).is_ok() {
                    let _ = std::fs::rename(&tmp, p);
                }
            }
        }
    }
    Ok(compiled)
}

/// Compile without touching any cache. `options` must include the architecture.
pub fn compile_uncached(kernel: &str, code: &str, options: &[String], arch: &str) -> Result<Compiled> {
    use cudarc::nvrtc::{result, sys};
    super::libs::ensure_nvrtc().map_err(Error::NvrtcUnavailable)?;
    let src = CString::new(code).map_err(|_| Error::invalid("kernel source", "contains a NUL byte"))?;
    let name = CString::new(format!("{kernel}.cu")).map_err(|_| Error::invalid("kernel name", "contains a NUL byte"))?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| Error::cuda("nvrtcCreateProgram", e))?;
    let status = unsafe { result::compile_program(prog, options) };
    let log = unsafe { result::get_program_log(prog) }
        .map(|v| {
            let bytes: Vec<u8> = v.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let out = match status {
        Err(_) => Err(Error::Compile { kernel: kernel.into(), arch: arch.into(), log: log.clone() }),
        Ok(()) => unsafe {
            let mut size = 0usize;
            let rc = sys::nvrtcGetCUBINSize(prog, &mut size);
            if rc != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                Err(Error::Compile {
                    kernel: kernel.into(),
                    arch: arch.into(),
                    log: format!("no CUBIN produced ({rc:?}); is `{arch}` a real architecture?\n{log}"),
                })
            } else {
                let mut cubin = vec![0u8; size];
                let rc = sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char);
                if rc != sys::nvrtcResult::NVRTC_SUCCESS {
                    Err(Error::cuda("nvrtcGetCUBIN", format!("{rc:?}")))
                } else {
                    Ok(Compiled { cubin, log: log.clone(), from_disk_cache: false })
                }
            }
        },
    };
    unsafe {
        let _ = result::destroy_program(prog);
    }
    out
}
