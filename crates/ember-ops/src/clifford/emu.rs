//! Runs launch plans ([`super::plan`]) on the host: every CUDA module of the plan is compiled as
//! C++ against the stand-ins of `emu_prelude.h` with the system's C++ compiler, linked with
//! `emu_runtime.cpp` (blocks, warps, tensor cores, and the driver) and run over its whole grid. The same plans that run on a GPU, with the same kernel sources,
//! grids and arguments: a test of the kernels' indexing, reductions, tile staging and fragment
//! layouts on machines without a GPU. Test-only.

use super::plan::{Arg, Plan};
use ember_core::{bf16, f16, CpuStorage, DType, Tensor};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const PRELUDE: &str = include_str!("emu_prelude.h");
const RUNTIME: &str = concat!(include_str!("../host_fibers.h"), "\n", include_str!("emu_runtime.cpp"));
/// Compiler flags of the kernels' units (part of the cache key).
const FLAGS: [&str; 4] = ["-std=c++17", "-O1", "-w", "-DEMBER_HOST_EMU"];

/// The host C++ compiler, if any.
pub fn cxx() -> Option<&'static str> {
    static CXX: OnceLock<Option<&'static str>> = OnceLock::new();
    *CXX.get_or_init(|| {
        ["c++", "g++", "clang++"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
    })
}

fn work_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ember-clifford-emu-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temporary directory");
    d
}

/// Compiled executables, shared by test processes: named by a hash of everything that goes in.
fn cache_dir() -> PathBuf {
    let d = std::env::temp_dir().join("ember-clifford-emu-cache");
    std::fs::create_dir_all(&d).expect("cache directory");
    d
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

fn compile(args: &[String], what: &str) {
    let out = Command::new(cxx().expect("a C++ compiler")).args(args).output().expect("run the C++ compiler");
    assert!(out.status.success(), "compiling {what} for the host failed:\n{}", String::from_utf8_lossy(&out.stderr).lines().take(40).collect::<Vec<_>>().join("\n"));
}

/// The runtime object (heavy headers: compiled once).
fn runtime_object() -> PathBuf {
    static OBJ: OnceLock<PathBuf> = OnceLock::new();
    OBJ.get_or_init(|| {
        let key = hash_of(&[RUNTIME, "runtime"]);
        let obj = cache_dir().join(format!("runtime-{key:016x}.o"));
        if !obj.exists() {
            let src = work_dir().join("emu_runtime.cpp");
            std::fs::write(&src, RUNTIME).expect("write the emulation runtime");
            let tmp = work_dir().join("runtime.o");
            compile(&["-std=c++20".into(), "-O2".into(), "-c".into(), src.display().to_string(), "-o".into(), tmp.display().to_string()], "the emulation runtime");
            let _ = std::fs::remove_file(&src);
            std::fs::rename(&tmp, &obj).expect("cache the emulation runtime");
        }
        obj
    })
    .clone()
}

/// The host executable of one (module, options, entry), compiled once.
fn executable(source: &str, name: &str, opts: &[String], entry: &str) -> PathBuf {
    static CACHE: OnceLock<Mutex<HashMap<u64, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let joined = opts.join(" ");
    let key = hash_of(&[PRELUDE, RUNTIME, &FLAGS.join(" "), source, &joined, entry]);
    let cell = CACHE.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap().entry(key).or_default().clone();
    cell.get_or_init(|| {
        let t0 = std::time::Instant::now();
        let exe = cache_dir().join(format!("{name}-{key:016x}"));
        if exe.exists() {
            return exe;
        }
        let runtime = runtime_object();
        let src = work_dir().join(format!("{name}-{key:016x}.cpp"));
        std::fs::write(&src, format!("{PRELUDE}\n{source}\nextern \"C\" void* ember_emu_kernel = (void*)&{entry};\n")).expect("write emulation source");
        let tmp = work_dir().join(format!("{name}-{key:016x}"));
        let mut args: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
        args.extend(opts.iter().cloned());
        args.extend([src.display().to_string(), runtime.display().to_string(), "-pthread".into(), "-o".into(), tmp.display().to_string()]);
        compile(&args, &format!("{name} {opts:?}"));
        let _ = std::fs::remove_file(&src);
        std::fs::rename(&tmp, &exe).expect("cache the emulated kernel");
        if std::env::var("EMBER_EMU_TIMES").is_ok() {
            eprintln!("compiled {name} {opts:?}: {:.2} s", t0.elapsed().as_secs_f64());
        }
        exe
    })
    .clone()
}

fn to_bytes(t: &Tensor) -> Vec<u8> {
    match t.cpu_storage().expect("host tensor") {
        CpuStorage::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        CpuStorage::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        CpuStorage::F64(_) => panic!("f64 does not run on CUDA"),
    }
}

fn from_bytes(b: &[u8], shape: &[usize], dtype: DType) -> Tensor {
    let s = match dtype {
        DType::F32 => CpuStorage::F32(b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        DType::F16 => CpuStorage::F16(b.chunks(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()),
        DType::BF16 => CpuStorage::BF16(b.chunks(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()),
        DType::F64 => panic!("f64 does not run on CUDA"),
    };
    Tensor::from_cpu_storage(s, shape).expect("shape")
}

/// NaN in every element: what `Tensor::output` does with poisoning on.
fn poison(len: usize, dtype: DType) -> Vec<u8> {
    let word: &[u8] = match dtype {
        DType::F32 => &[0x00, 0x00, 0xc0, 0x7f],
        DType::F16 => &[0x00, 0x7e],
        _ => &[0xc0, 0x7f],
    };
    word.iter().copied().cycle().take(len * dtype.size()).collect()
}

/// Run `plan` on the host; inputs are CPU tensors in the dtypes the plan expects.
pub fn run_host(plan: &Plan, inputs: &[&Tensor]) -> Vec<Tensor> {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    assert_eq!(inputs.len(), plan.inputs);
    let dir = work_dir().join(format!("run{}", RUN.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let p = dir.join(format!("b{i}.bin"));
        std::fs::write(&p, to_bytes(t)).unwrap();
        files.push(p);
    }
    for (k, b) in plan.allocs.iter().enumerate() {
        let p = dir.join(format!("b{}.bin", plan.inputs + k));
        std::fs::write(&p, poison(b.shape.iter().product(), b.dtype)).unwrap();
        files.push(p);
    }
    // The device's work counters: one zeroed file per first word used, kept across the plan's
    // launches as on a GPU, and checked to be zero again after every launch (the kernels' contract).
    let mut counters: HashMap<usize, usize> = HashMap::new();
    for l in &plan.launches {
        for a in &l.args {
            if let Arg::Counters(word) = *a {
                counters.entry(word).or_insert_with(|| {
                    let p = dir.join(format!("counters{word}.bin"));
                    std::fs::write(&p, vec![0u8; (ember_core::cuda::WORK_COUNTERS - word) * 4]).unwrap();
                    files.push(p);
                    files.len() - 1
                });
            }
        }
    }
    for (li, l) in plan.launches.iter().enumerate() {
        for g in plan.gemms_before(li) {
            host_gemm(g, &files);
        }
        let exe = executable(l.src.body, l.src.name, &l.opts, &l.entry);
        let mut spec = format!("{}\n", files.len());
        for p in &files {
            spec += &format!("{} {}\n", p.display(), std::fs::metadata(p).unwrap().len());
        }
        spec += &format!("{} {} {} {} {} {}\n", l.grid.0, l.grid.1, l.grid.2, l.block, l.smem, l.args.len());
        for a in &l.args {
            spec += &match a {
                Arg::Buf(i) => format!("B {i}\n"),
                Arg::Null => "N 0\n".into(),
                Arg::Counters(word) => format!("B {}\n", counters[word]),
                Arg::I64(v) => format!("S {v}\n"),
                Arg::I32(v) => format!("S {v}\n"),
            };
        }
        let lf = dir.join(format!("launch{li}.txt"));
        std::fs::write(&lf, spec).unwrap();
        let t0 = std::time::Instant::now();
        let out = Command::new(&exe).arg(&lf).output().expect("run the emulated kernel");
        if std::env::var("EMBER_EMU_TIMES").is_ok() {
            eprintln!("emulated {} {} {:?} grid {:?}: {:.2} s", l.name, l.src.name, l.opts, l.grid, t0.elapsed().as_secs_f64());
        }
        assert!(out.status.success(), "emulated launch {} ({} {:?}) failed: {:?} {}", l.name, l.src.name, l.opts, out.status, String::from_utf8_lossy(&out.stderr));
        for &f in counters.values() {
            assert!(std::fs::read(&files[f]).unwrap().iter().all(|&b| b == 0), "emulated launch {} left its work counters non-zero", l.name);
        }
    }
    for g in plan.gemms_before(plan.launches.len()) {
        host_gemm(g, &files);
    }
    let outs = plan
        .outputs
        .iter()
        .map(|&id| {
            let b = &plan.allocs[id - plan.inputs];
            from_bytes(&std::fs::read(&files[id]).unwrap(), &b.shape, b.dtype)
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    outs
}

fn read_words(b: &[u8], dt: DType) -> Vec<f64> {
    match dt {
        DType::F32 => b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        DType::F16 => b.chunks(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()).collect(),
        DType::BF16 => b.chunks(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()).collect(),
        DType::F64 => panic!("f64 does not run on CUDA"),
    }
}

fn write_word(v: f64, dt: DType) -> Vec<u8> {
    match dt {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F16 => f16::from_f64(v).to_bits().to_le_bytes().to_vec(),
        DType::BF16 => bf16::from_f64(v).to_bits().to_le_bytes().to_vec(),
        DType::F64 => panic!("f64 does not run on CUDA"),
    }
}

/// A plan's cuBLAS GEMM on the host (f64 accumulation), with the same row-major operand layout
/// and offsets as on the GPU; elements outside the three matrices are left as they are.
fn host_gemm(g: &super::plan::Gemm, files: &[PathBuf]) {
    let d = &g.desc;
    let (m, n, k) = (d.m, d.n, d.k);
    let a = read_words(&std::fs::read(&files[g.a.0]).unwrap(), d.ab);
    let b = read_words(&std::fs::read(&files[g.b.0]).unwrap(), d.ab);
    let mut cbytes = std::fs::read(&files[g.c.0]).unwrap();
    let c = read_words(&cbytes, d.c);
    let es = d.c.size();
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for l in 0..k {
                let av = if d.ta { a[g.a.1 + l * m + i] } else { a[g.a.1 + i * k + l] };
                let bv = if d.tb { b[g.b.1 + j * k + l] } else { b[g.b.1 + l * n + j] };
                s += av * bv;
            }
            let ci = g.c.1 + i * n + j;
            // β = 0 ignores C (it may hold NaN), as cuBLAS does.
            if d.beta != 0.0 {
                s += d.beta as f64 * c[ci];
            }
            cbytes[ci * es..(ci + 1) * es].copy_from_slice(&write_word(s, d.c));
        }
    }
    std::fs::write(&files[g.c.0], cbytes).unwrap();
}
