//! Benchmarks: median times with CUDA events (or the host clock on the CPU), the ceilings measured in
//! the same run (device copy bandwidth, cuBLAS GEMM rate), and each row's roofline floor.
//!
//! `floor_ms` is the larger of bytes/bandwidth and flops/GEMM-rate, with the byte and flop counts of
//! `docs/BENCHMARKS.md` (each input read once, each output written once); `floor_frac =
//! floor_ms / ms`.

use ember_core::cuda::{blas::Blas, timing, CudaDevice};
use ember_core::{DType, Device, Result, Tensor};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Machine ceilings measured in this run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read + written per second, in GB/s.
    pub copy_gbps: f64,
    /// Large bf16 GEMM (cuBLAS on CUDA; f32 matrixmultiply on the CPU), TFLOP/s.
    pub gemm_bf16_tflops: f64,
    /// Other GEMM precisions measured on request (e.g. "f32-tf32", "f16").
    pub gemm_other_tflops: HashMap<String, f64>,
}

pub struct BenchCtx {
    pub device: Device,
    pub quick: bool,
    pub ceilings: Ceilings,
    cuda: Option<Arc<CudaDevice>>,
    extra_gemm: Mutex<HashMap<String, f64>>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub op: String,
    /// "fwd" or "fwd+bwd" (or another pass name an op documents).
    pub pass: String,
    pub dtype: DType,
    /// Sizes and options, in the order the op documents; the PyTorch reference gets the same.
    pub params: Map<String, Value>,
    pub ms: f64,
    pub floor_ms: f64,
    pub floor_frac: f64,
    /// Which ceiling sets the floor: "memory" or "compute".
    pub bound: String,
    pub bytes: f64,
    pub flops: f64,
    pub gbps: f64,
    pub tflops: f64,
    pub note: String,
}

impl BenchRow {
    /// Key shared with the PyTorch reference's output.
    pub fn key(&self) -> String {
        format!("{}|{}|{}|{}", self.op, self.pass, self.dtype, Value::Object(self.params.clone()))
    }
}

/// Build a `params` map from (name, value) pairs.
pub fn params(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

impl BenchCtx {
    /// Measure the ceilings on `device` and get ready to time ops there.
    pub fn new(device: Device, quick: bool) -> Result<Self> {
        let cuda = match device {
            Device::Cuda(i) => Some(CudaDevice::get(i)?),
            Device::Cpu => None,
        };
        let ceilings = match &cuda {
            Some(dev) => Ceilings {
                copy_gbps: cuda_copy_gbps(dev, quick)?,
                gemm_bf16_tflops: cuda_gemm_tflops(dev, DType::BF16, false)?,
                gemm_other_tflops: HashMap::new(),
            },
            None => Ceilings { copy_gbps: cpu_copy_gbps(), gemm_bf16_tflops: cpu_gemm_tflops(), gemm_other_tflops: HashMap::new() },
        };
        Ok(BenchCtx { device, quick, ceilings, cuda, extra_gemm: Mutex::new(HashMap::new()) })
    }

    /// Median time in ms of `f`, over repetitions lasting about `budget_ms` in all. `f` gets the
    /// repetition index (to rotate among input sets).
    pub fn time(&self, budget_ms: f64, mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
        match &self.cuda {
            Some(dev) => Ok(timing::time_adaptive(dev, budget_ms, f)?.median_ms),
            None => {
                f(0)?;
                let t0 = Instant::now();
                f(1)?;
                let per = t0.elapsed().as_secs_f64() * 1e3;
                let reps = ((budget_ms / per.max(1e-3)) as usize).clamp(3, 200);
                let mut v: Vec<f64> = (0..reps)
                    .map(|i| {
                        let t = Instant::now();
                        f(i + 2).map(|_| t.elapsed().as_secs_f64() * 1e3)
                    })
                    .collect::<Result<_>>()?;
                v.sort_by(|a, b| a.total_cmp(b));
                Ok(v[v.len() / 2])
            }
        }
    }

    /// CPU time in ms to enqueue one call of `f` (median of 200, the GPU running behind; the queue
    /// drained every 20 calls so it stays short), on a CUDA device; `None` on the CPU. Beside the
    /// event-timed and graph-replayed rows it says whether a call's time is the GPU's or the host's.
    pub fn host_ms(&self, mut f: impl FnMut(usize) -> Result<()>) -> Result<Option<f64>> {
        let Some(dev) = &self.cuda else { return Ok(None) };
        for i in 0..5 {
            f(i)?;
        }
        dev.synchronize()?;
        let mut t: Vec<f64> = Vec::with_capacity(200);
        for i in 0..200 {
            let t0 = Instant::now();
            f(i)?;
            t.push(t0.elapsed().as_secs_f64() * 1e3);
            if i % 20 == 19 {
                dev.synchronize()?;
            }
        }
        dev.synchronize()?;
        t.sort_by(|a, b| a.total_cmp(b));
        Ok(Some(t[t.len() / 2]))
    }

    /// How many input sets of `bytes_per_set` to rotate among so that repeated runs do not just
    /// measure the L2 cache (1 when one set is already several times the L2).
    pub fn rotation(&self, bytes_per_set: f64) -> usize {
        let l2 = self.cuda.as_ref().map(|d| d.info().l2_bytes as f64).unwrap_or(32e6);
        if bytes_per_set >= 3.0 * l2 {
            1
        } else {
            ((3.0 * l2 / bytes_per_set.max(1.0)).ceil() as usize).clamp(2, 64)
        }
    }

    /// GEMM rate of another precision ("f32-tf32", "f16", "bf16"), measured once per run.
    pub fn gemm_tflops(&self, dtype: DType, tf32: bool) -> Result<f64> {
        if dtype == DType::BF16 {
            return Ok(self.ceilings.gemm_bf16_tflops);
        }
        let key = format!("{}{}", dtype.name(), if tf32 { "-tf32" } else { "" });
        if let Some(v) = self.extra_gemm.lock().unwrap().get(&key) {
            return Ok(*v);
        }
        let v = match &self.cuda {
            Some(dev) => cuda_gemm_tflops(dev, dtype, tf32)?,
            None => self.ceilings.gemm_bf16_tflops,
        };
        self.extra_gemm.lock().unwrap().insert(key, v);
        Ok(v)
    }

    /// The ceilings including any extra GEMM precisions measured so far.
    pub fn ceilings_now(&self) -> Ceilings {
        let mut c = self.ceilings.clone();
        c.gemm_other_tflops = self.extra_gemm.lock().unwrap().clone();
        c
    }

    /// A memory-bound row: the floor is `bytes` at the copy bandwidth (compute shown for reference).
    #[allow(clippy::too_many_arguments)]
    pub fn row(&self, op: &str, pass: &str, dtype: DType, params: Map<String, Value>, ms: f64, bytes: f64, flops: f64) -> BenchRow {
        self.row_with_rate(op, pass, dtype, params, ms, bytes, flops, self.ceilings.gemm_bf16_tflops)
    }

    /// A row whose compute floor uses `tflops_ceiling` (e.g. the TF32 GEMM rate for f32 math).
    #[allow(clippy::too_many_arguments)]
    pub fn row_with_rate(&self, op: &str, pass: &str, dtype: DType, params: Map<String, Value>, ms: f64, bytes: f64, flops: f64, tflops_ceiling: f64) -> BenchRow {
        let mem_ms = bytes / (self.ceilings.copy_gbps * 1e9) * 1e3;
        let flop_ms = if flops > 0.0 { flops / (tflops_ceiling * 1e12) * 1e3 } else { 0.0 };
        let (floor_ms, bound) = if mem_ms >= flop_ms { (mem_ms, "memory") } else { (flop_ms, "compute") };
        BenchRow {
            op: op.into(),
            pass: pass.into(),
            dtype,
            params,
            ms,
            floor_ms,
            floor_frac: floor_ms / ms,
            bound: bound.into(),
            bytes,
            flops,
            gbps: bytes / (ms * 1e-3) / 1e9,
            tflops: flops / (ms * 1e-3) / 1e12,
            note: String::new(),
        }
    }
}

fn cuda_copy_gbps(dev: &CudaDevice, quick: bool) -> Result<f64> {
    let bytes: usize = if quick { 1 << 30 } else { 2 << 30 };
    let src = Tensor::rand(&[bytes / 4], -1.0, 1.0, DType::F32, Device::Cuda(dev.info().ordinal), 1)?;
    let mut dst = Tensor::zeros(&[bytes / 4], DType::F32, Device::Cuda(dev.info().ordinal))?;
    let t = timing::time_events(dev, 2, 10, |_| dev.copy_raw(dst.cuda_ptr()?, src.cuda_ptr()?, bytes))?;
    dst.fill(0.0)?;
    Ok(2.0 * bytes as f64 / (t.median_ms * 1e-3) / 1e9)
}

fn cuda_gemm_tflops(dev: &CudaDevice, dtype: DType, tf32: bool) -> Result<f64> {
    let blas = Blas::new(dev)?;
    let n = 8192usize;
    let d = Device::Cuda(dev.info().ordinal);
    let a = Tensor::rand(&[n, n], -1.0, 1.0, dtype, d, 11)?;
    let b = Tensor::rand(&[n, n], -1.0, 1.0, dtype, d, 12)?;
    let c = Tensor::zeros(&[n, n], dtype, d)?;
    let t = timing::time_events(dev, 3, 10, |_| blas.gemm_rowmajor(dtype, tf32, n, n, n, a.cuda_ptr()?, b.cuda_ptr()?, c.cuda_ptr()?))?;
    Ok(2.0 * (n as f64).powi(3) / (t.median_ms * 1e-3) / 1e12)
}

fn cpu_copy_gbps() -> f64 {
    use rayon::prelude::*;
    let n = 64 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.par_chunks_mut(1 << 20).zip(src.par_chunks(1 << 20)).for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    2.0 * n as f64 / best / 1e9
}

fn cpu_gemm_tflops() -> f64 {
    let n = 512;
    let a = vec![1.0f32; n * n];
    let b = vec![1.0f32; n * n];
    let mut c = vec![0.0f32; n * n];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        crate::cpu::sgemm(n, n, n, 1.0, &a, n, 1, &b, n, 1, 0.0, &mut c, n, 1);
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&c);
    2.0 * (n as f64).powi(3) / best / 1e12
}
