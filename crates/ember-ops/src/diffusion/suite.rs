//! Spectral diffusion's `ember check` cases and `ember bench` rows.

use super::cuda::{self, ExpandLoad, ExpandStore, Tuning, WgmmaMode};
use super::{backward_batch, forward_batch, param_dtype, reference, Forward, Grads, MeshBatch, Meshes};
use crate::harness::bench::{params, BenchCtx, BenchRow};
use crate::harness::check::{compare, property, CheckCtx, CheckRow, Tier};
use crate::KernelBuild;
use ember_core::{rng, DType, Device, Result, Tensor};
use serde_json::json;

pub struct Family;

/// One problem's inputs, generated in f64, rounded to the op's dtypes, with the rounded values the
/// reference sees. Scales keep every stored quantity O(1) (half-precision safe) at any V and K:
/// basis ~ N(0,1)/√K, mass ~ U(½, 3⁄2)·√(K/V_m), so spectral, out and d_x are O(1).
pub struct Problem {
    pub offsets: Vec<usize>,
    pub k: usize,
    pub c: usize,
    pub dtype: DType,
    pub x: Tensor,
    pub basis: Tensor,
    pub mass: Tensor,
    pub evals: Tensor,
    pub times: Tensor,
    pub d_out: Tensor,
    pub d_spectral: Option<Tensor>,
    /// The same values in f64, for the reference.
    pub r: RefInputs,
}

pub struct RefInputs {
    pub x: Vec<f64>,
    pub basis: Vec<f64>,
    pub mass: Vec<f64>,
    pub evals: Vec<f64>,
    pub times: Vec<f64>,
    pub d_out: Vec<f64>,
    pub d_spectral: Option<Vec<f64>>,
}

fn gen(n: usize, seed: u64, f: impl Fn(u64, usize) -> f64 + Sync) -> Vec<f64> {
    use rayon::prelude::*;
    (0..n).into_par_iter().with_min_len(4096).map(|i| f(seed, i)).collect()
}

impl Problem {
    /// Meshes of `sizes` vertices, K eigenpairs, C channels, on the CPU.
    pub fn new(sizes: &[usize], k: usize, c: usize, dtype: DType, with_d_spectral: bool, seed: u64) -> Result<Problem> {
        let mut offsets = vec![0usize];
        for &s in sizes {
            offsets.push(offsets.last().unwrap() + s);
        }
        let (v, m) = (*offsets.last().unwrap(), sizes.len());
        let mesh_of = |row: usize| offsets.partition_point(|&o| o <= row) - 1;
        let sk = 1.0 / (k as f64).sqrt();
        let x = gen(v * c, seed, |s, i| rng::normal(s, i as u64));
        let basis = gen(v * k, seed + 1, |s, i| rng::normal(s, i as u64) * sk);
        let mass = gen(v, seed + 2, |s, i| (0.5 + rng::uniform(s, i as u64, 0.0, 1.0) as f64) * (k as f64 / sizes[mesh_of(i)] as f64).sqrt());
        // Eigenvalues start at 0 (the constant eigenvector) and grow; times in [0.01, 0.2].
        let evals = gen(m * k, seed + 3, |s, i| if i % k == 0 { 0.0 } else { rng::uniform(s, i as u64, 0.0, 20.0) as f64 });
        let times = gen(c, seed + 4, |s, i| rng::uniform(s, i as u64, 0.01, 0.2) as f64);
        let d_out = gen(v * c, seed + 5, |s, i| rng::normal(s, i as u64));
        let d_spectral = with_d_spectral.then(|| gen(m * k * c, seed + 6, |s, i| rng::normal(s, i as u64) * (sizes[i / (k * c)] as f64 * sk * sk).sqrt()));
        let r = RefInputs { x, basis, mass, evals, times, d_out, d_spectral };
        Problem::from_values(offsets, k, c, dtype, r)
    }

    /// Tensors holding `r` rounded to the op's dtypes; `r` becomes the rounded values.
    pub fn from_values(offsets: Vec<usize>, k: usize, c: usize, dtype: DType, r: RefInputs) -> Result<Problem> {
        let (v, m) = (*offsets.last().unwrap(), offsets.len() - 1);
        let pd = param_dtype(dtype);
        let t = |vals: &[f64], shape: &[usize], dt: DType| Tensor::from_f64(vals, shape, dt, Device::Cpu);
        let (xt, bt, mt) = (t(&r.x, &[v, c], dtype)?, t(&r.basis, &[v, k], dtype)?, t(&r.mass, &[v], dtype)?);
        let (et, tt, dot) = (t(&r.evals, &[m, k], pd)?, t(&r.times, &[c], pd)?, t(&r.d_out, &[v, c], dtype)?);
        let dst = r.d_spectral.as_ref().map(|d| t(d, &[m, k, c], dtype)).transpose()?;
        let r = RefInputs {
            x: xt.to_vec_f64()?,
            basis: bt.to_vec_f64()?,
            mass: mt.to_vec_f64()?,
            evals: et.to_vec_f64()?,
            times: tt.to_vec_f64()?,
            d_out: dot.to_vec_f64()?,
            d_spectral: dst.as_ref().map(|d| d.to_vec_f64()).transpose()?,
        };
        Ok(Problem { offsets, k, c, dtype, x: xt, basis: bt, mass: mt, evals: et, times: tt, d_out: dot, d_spectral: dst, r })
    }

    /// Mesh `m` of this batch alone (the same values).
    pub fn mesh(&self, m: usize) -> Result<Problem> {
        let (lo, hi) = (self.offsets[m], self.offsets[m + 1]);
        let (k, c) = (self.k, self.c);
        let r = RefInputs {
            x: self.r.x[lo * c..hi * c].to_vec(),
            basis: self.r.basis[lo * k..hi * k].to_vec(),
            mass: self.r.mass[lo..hi].to_vec(),
            evals: self.r.evals[m * k..(m + 1) * k].to_vec(),
            times: self.r.times.clone(),
            d_out: self.r.d_out[lo * c..hi * c].to_vec(),
            d_spectral: self.r.d_spectral.as_ref().map(|d| d[m * k * c..(m + 1) * k * c].to_vec()),
        };
        Problem::from_values(vec![0, hi - lo], k, c, self.dtype, r)
    }

    pub fn meshes(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The reference's (out, spectral, d_x, d_times).
    pub fn reference(&self) -> [Vec<f64>; 4] {
        let r = &self.r;
        let d = reference::Dims { k: self.k, c: self.c, offsets: &self.offsets };
        let (out, spectral) = reference::forward(&r.x, &r.basis, &r.mass, &r.evals, &r.times, d);
        let (d_x, d_times) = reference::backward(&r.basis, &r.mass, &r.evals, &r.times, &spectral, &r.d_out, r.d_spectral.as_deref(), d);
        [out, spectral, d_x, d_times]
    }

    /// This problem's tensors on `device`.
    pub fn on(&self, device: Device) -> Result<OnDevice> {
        Ok(OnDevice {
            x: self.x.to_device(device)?,
            basis: self.basis.to_device(device)?,
            mass: self.mass.to_device(device)?,
            evals: self.evals.to_device(device)?,
            times: self.times.to_device(device)?,
            d_out: self.d_out.to_device(device)?,
            d_spectral: self.d_spectral.as_ref().map(|t| t.to_device(device)).transpose()?,
        })
    }
}

pub struct OnDevice {
    pub x: Tensor,
    pub basis: Tensor,
    pub mass: Tensor,
    pub evals: Tensor,
    pub times: Tensor,
    pub d_out: Tensor,
    pub d_spectral: Option<Tensor>,
}

impl OnDevice {
    /// Forward then backward through the batched front end (a batch of one is one mesh), with
    /// forced launch choices on CUDA when `tune` says so.
    pub fn run(&self, offsets: &[usize], tune: Option<(&Tuning, Option<usize>)>) -> Result<(Forward, Grads)> {
        let batch = match tune.and_then(|(_, rows)| rows) {
            Some(rows) => MeshBatch::with_chunk_rows(&self.basis, &self.mass, &self.evals, offsets, rows)?,
            None => MeshBatch::new(&self.basis, &self.mass, &self.evals, offsets)?,
        };
        match tune {
            Some((t, _)) if self.x.device().is_cuda() => {
                let m = batch.view();
                let fwd = cuda::forward_tuned(&m, &self.x, &self.times, t)?;
                let grads = cuda::backward_tuned(&m, &self.times, &fwd, &self.d_out, self.d_spectral.as_ref(), t)?;
                Ok((fwd, grads))
            }
            _ => {
                let fwd = forward_batch(&batch, &self.x, &self.times)?;
                let grads = backward_batch(&batch, &self.times, &fwd, &self.d_out, self.d_spectral.as_ref())?;
                Ok((fwd, grads))
            }
        }
    }

    /// One mesh through the single-mesh front end (evals as (K), spectral as (K, C)).
    pub fn run_single(&self, tune: Option<&Tuning>) -> Result<(Forward, Grads)> {
        let k = self.basis.dim(1);
        let evals = self.evals.try_clone()?.reshape(&[k])?;
        let d_spectral = match &self.d_spectral {
            Some(t) => Some(t.try_clone()?.reshape(&[k, self.x.dim(1)])?),
            None => None,
        };
        match tune {
            Some(t) if self.x.device().is_cuda() => {
                let offsets = [0, self.x.dim(0)];
                let m = Meshes { basis: &self.basis, mass: &self.mass, evals: &evals, offsets: &offsets, plan: None, batched: false };
                let fwd = cuda::forward_tuned(&m, &self.x, &self.times, t)?;
                let grads = cuda::backward_tuned(&m, &self.times, &fwd, &self.d_out, d_spectral.as_ref(), t)?;
                Ok((fwd, grads))
            }
            _ => {
                let fwd = super::forward(&self.x, &self.basis, &self.mass, &evals, &self.times)?;
                let grads = super::backward(&self.basis, &self.mass, &evals, &self.times, &fwd, &self.d_out, d_spectral.as_ref())?;
                Ok((fwd, grads))
            }
        }
    }
}

/// A check case: mesh sizes, K, C, whether d_spectral is given, forced launch choices.
struct Case {
    sizes: Vec<usize>,
    k: usize,
    c: usize,
    d_spectral: bool,
    tune: Option<(Tuning, Option<usize>)>,
    dtypes: &'static [DType],
}

const ALL: &[DType] = &DType::ACTIVATIONS;
const BF16: &[DType] = &[DType::BF16];

fn case(sizes: &[usize], k: usize, c: usize, d_spectral: bool) -> Case {
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: None, dtypes: ALL }
}

fn tuned(sizes: &[usize], k: usize, c: usize, reduce_wn: usize, expand_wn: usize, chunk_rows: usize) -> Case {
    let t = Tuning {
        reduce_wn: Some(reduce_wn),
        expand_wn: Some(expand_wn),
        chunk_rows: Some(chunk_rows),
        fused: Some(false),
        expand_wg: Some(false),
        reduce_wg: Some(WgmmaMode::Never),
        expand_store: None,
        expand_load: None,
        expand_ctas: None,
        reduce_load: None,
    };
    Case { sizes: sizes.to_vec(), k, c, d_spectral: true, tune: Some((t, Some(chunk_rows))), dtypes: ALL }
}

/// One cooperative launch per pass (2-wide tiles), `chunk_rows` vertices per reduce chunk.
fn fused(sizes: &[usize], k: usize, c: usize, d_spectral: bool, chunk_rows: usize) -> Case {
    let t = Tuning { reduce_wn: Some(2), expand_wn: Some(2), chunk_rows: Some(chunk_rows), fused: Some(true), expand_wg: Some(false), reduce_wg: Some(WgmmaMode::Never), expand_store: None, expand_load: None, expand_ctas: None, reduce_load: None };
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: Some((t, Some(chunk_rows))), dtypes: ALL }
}

/// The expand on wgmma (sm_90a), everything else chosen as by default; 16-bit dtypes.
fn wg(sizes: &[usize], k: usize, c: usize, d_spectral: bool) -> Case {
    let t = Tuning { expand_wg: Some(true), ..Tuning::default() };
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: Some((t, None)), dtypes: &[DType::F16, DType::BF16] }
}

/// The wgmma expand with bulk stores (v8, sm_90a) forced, everything else chosen as by default;
/// 16-bit dtypes. `check_case` also runs it with the direct epilogue and asserts the same bits.
fn wgb(sizes: &[usize], k: usize, c: usize, d_spectral: bool) -> Case {
    let t = Tuning { expand_wg: Some(true), expand_store: Some(ExpandStore::Bulk), ..Tuning::default() };
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: Some((t, None)), dtypes: &[DType::F16, DType::BF16] }
}

/// v9, the wgmma expand fed by TMA forced, with the store path `store` (None: as by default),
/// everything else as by default; 16-bit dtypes. `check_case` also runs it with cp.async loads
/// (where that variant fits) and asserts the same bits.
fn wgt(sizes: &[usize], k: usize, c: usize, d_spectral: bool, store: Option<ExpandStore>) -> Case {
    let t = Tuning { expand_wg: Some(true), expand_load: Some(ExpandLoad::Tma), expand_store: store, ..Tuning::default() };
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: Some((t, None)), dtypes: &[DType::F16, DType::BF16] }
}

/// [`wgt`] on at most `ctas` persistent CTAs per channel tile, so that each CTA takes many tiles
/// and its slot ring wraps at sizes small enough for compute-sanitizer.
fn wgt_few(sizes: &[usize], k: usize, c: usize, d_spectral: bool, store: Option<ExpandStore>, ctas: usize) -> Case {
    let mut case = wgt(sizes, k, c, d_spectral, store);
    if let Some((t, _)) = &mut case.tune {
        t.expand_ctas = Some(ctas);
    }
    case
}

/// The reduce on wgmma (sm_90a) in `mode` (`Always`: forced; `Auto`: its size rule, whatever the
/// environment says), `chunk_rows` vertices per chunk or the default; the expand by default (or
/// forced onto wgmma with `expand_wg`); 16-bit dtypes.
fn rwg(sizes: &[usize], k: usize, c: usize, d_spectral: bool, mode: WgmmaMode, chunk_rows: Option<usize>, expand_wg: bool) -> Case {
    let t = Tuning { reduce_wg: Some(mode), chunk_rows, expand_wg: expand_wg.then_some(true), ..Tuning::default() };
    Case { sizes: sizes.to_vec(), k, c, d_spectral, tune: Some((t, chunk_rows)), dtypes: &[DType::F16, DType::BF16] }
}

/// v12b: [`rwg`] forced (`Always`) with TMA-fed stages; `check_case` also runs it with cp.async
/// stages and asserts the same bits.
fn rwgt(sizes: &[usize], k: usize, c: usize, d_spectral: bool, chunk_rows: Option<usize>) -> Case {
    let mut case = rwg(sizes, k, c, d_spectral, WgmmaMode::Always, chunk_rows, false);
    if let Some((t, _)) = &mut case.tune {
        t.reduce_load = Some(cuda::ReduceLoad::Tma);
    }
    case
}

/// Whether the cp.async-fed wgmma expand (with bulk stores or not) fits `dtype`, K and C on `device`.
fn wg_fits(device: Device, dtype: DType, k: usize, c: usize, bulk: bool) -> bool {
    match device {
        Device::Cuda(i) => ember_core::cuda::CudaDevice::get(i).is_ok_and(|d| cuda::expand_wg_available(&d, dtype, k, c, bulk)),
        Device::Cpu => false,
    }
}

/// Whether `device` runs the sm_90a kernels (wgmma).
fn has_wgmma(device: Device) -> bool {
    match device {
        Device::Cuda(i) => ember_core::cuda::CudaDevice::get(i).is_ok_and(|d| d.info().compute_capability == (9, 0)),
        Device::Cpu => false,
    }
}

fn cases(tier: Tier, device: Device) -> Vec<Case> {
    let mut v = match tier {
        // A few seconds on two cores, every dtype.
        Tier::Quick => vec![case(&[1], 1, 1, false), case(&[7], 5, 3, true), case(&[300], 16, 40, false), case(&[40, 1, 77], 8, 9, true)],
        // Tiny, but every kernel path: 16-byte and element loaders, every tile width, K above one
        // reduce tile, several chunks per mesh, batches, d_spectral or not.
        Tier::Small => vec![
            case(&[1], 1, 1, false),
            case(&[77], 5, 33, true),
            case(&[300], 64, 64, false),
            case(&[50], 136, 16, true),
            case(&[37, 1, 130], 16, 24, true),
            // 17 chunks of the default 128 rows: the finalize's four layers (four parts per
            // output), which smaller meshes never reach (in its one-block-per-SM build by
            // default, v18b).
            case(&[2100], 64, 64, true),
        ],
        // The sizes: V ∈ {1, 7, 4109, 131077, 1M+}, C ∈ {1, 64, 256, 257}, K ∈ {1, 64, 128, 256}.
        Tier::Full => vec![
            case(&[1], 1, 1, true),
            case(&[7], 64, 257, false),
            case(&[4109], 128, 256, true),
            case(&[4109], 256, 64, false),
            case(&[4109], 1, 257, true),
            case(&[131077], 128, 256, false),
            case(&[131077], 64, 1, true),
            case(&[131077], 256, 257, true),
            case(&[1 << 20 | 7], 128, 64, true),
            Case { dtypes: BF16, ..case(&[1 << 20 | 7], 128, 256, false) },
            case(&[5003, 19997, 1, 12000, 7777], 128, 256, true),
        ],
    };
    if device.is_cuda() {
        // Every tile width of both GEMMs, several chunks per mesh, aligned and unaligned rows.
        let extra: Vec<Case> = match tier {
            Tier::Quick => vec![],
            Tier::Small => vec![
                tuned(&[300], 64, 64, 2, 2, 64),
                tuned(&[200], 8, 72, 2, 4, 40),
                tuned(&[200], 8, 72, 4, 4, 40),
                tuned(&[29, 161], 32, 128, 8, 8, 48),
                tuned(&[150], 64, 40, 2, 4, 32),
                fused(&[77], 5, 33, true, 16),
                fused(&[300], 136, 64, false, 64),
                fused(&[37, 1, 130], 16, 24, true, 24),
            ],
            Tier::Full => vec![
                tuned(&[4109], 128, 256, 8, 8, 256),
                tuned(&[4109], 128, 256, 4, 4, 1000),
                tuned(&[4109], 128, 256, 2, 4, 1000),
                tuned(&[9001], 200, 100, 2, 2, 512),
                tuned(&[777, 5000, 3], 64, 33, 2, 2, 300),
                fused(&[4109], 128, 256, true, 128),
                fused(&[4109], 256, 257, false, 1000),
                fused(&[7], 64, 1, true, 128),
                fused(&[131077], 128, 64, true, 1000),
                fused(&[5003, 19997, 1, 12000, 7777], 128, 256, true, 640),
            ],
        };
        // The wgmma expand: 16-byte and element loaders, one and two 128-channel halves, 4 and 2
        // stages (K = 136: KP = 144 leaves room for 2), batches, the backward's mass and d_times.
        let wg_cases: Vec<Case> = match tier {
            _ if !has_wgmma(device) => vec![],
            Tier::Quick => vec![],
            Tier::Small => vec![wg(&[77], 5, 33, true), wg(&[300], 64, 64, false), wg(&[37, 1, 130], 16, 24, true), wg(&[150], 136, 256, true), wg(&[200], 128, 136, false)],
            Tier::Full => vec![
                wg(&[7], 64, 1, true),
                wg(&[4109], 128, 256, true),
                wg(&[4109], 256, 100, false),
                wg(&[4109], 136, 257, true),
                wg(&[131077], 128, 256, false),
                wg(&[1 << 20 | 7], 128, 64, true),
                wg(&[5003, 19997, 1, 12000, 7777], 128, 256, true),
            ],
        };
        v.extend(wg_cases);
        // v8, the wgmma expand with bulk stores: both shapes of each width (NH = 1: 4 stages, and 2
        // at K = 256; NH = 2: 3 stages, and 2 at K = 136), tiles partial in rows (V = 7, 4109,
        // 131077, every mesh of a batch) and in channels (C = 64 of 128, 136 and 264 of 256: a
        // second channel tile of 8), the direct fallback where rows are not 16-byte multiples
        // (K = 1, 5; C = 1, 33, 257), forward and backward (mass, d_times), with and without dS.
        let wgb_cases: Vec<Case> = match tier {
            _ if !has_wgmma(device) => vec![],
            Tier::Quick => vec![],
            Tier::Small => vec![
                wgb(&[77], 5, 33, true),
                wgb(&[300], 64, 64, false),
                wgb(&[37, 1, 130], 16, 24, true),
                wgb(&[150], 136, 256, true),
                wgb(&[200], 128, 136, false),
                wgb(&[129], 256, 128, true),
            ],
            Tier::Full => vec![
                wgb(&[1], 1, 1, true),
                wgb(&[7], 64, 256, false),
                wgb(&[7], 64, 33, true),
                wgb(&[4109], 128, 256, true),
                wgb(&[4109], 256, 64, false),
                wgb(&[4109], 136, 256, true),
                wgb(&[4109], 136, 257, false),
                wgb(&[131077], 128, 256, false),
                wgb(&[131077], 64, 264, true),
                wgb(&[131077], 64, 1, true),
                wgb(&[131077], 256, 128, true),
                wgb(&[1 << 20 | 7], 128, 64, true),
                wgb(&[5003, 19997, 1, 12000, 7777], 128, 256, true),
            ],
        };
        v.extend(wgb_cases);
        // v9, the TMA-fed wgmma expand (K a multiple of 8: TMA's 16-byte row stride; K = 1, 5 are
        // property rows): one box per tile (K ≤ 64, boxes wider than K), two (K = 128), three with
        // a partial last box (K = 136), four (K = 256, where at C = 256 only this variant fits:
        // a ring of exactly one tile, no bitwise row); V below one tile (1, 7), partial last tiles
        // (129, 4109, 131077, 1M + 7: rows past V are TMA's zero fill), batches whose tiles start
        // at unaligned rows and end inside the next mesh's rows; both store paths and the direct
        // fallback where C·2 is not a multiple of 16 (C = 1, 33, 257); forward and backward.
        use ExpandStore::{Bulk, Direct};
        let wgt_cases: Vec<Case> = match tier {
            _ if !has_wgmma(device) => vec![],
            Tier::Quick => vec![],
            Tier::Small => vec![
                wgt(&[7], 8, 33, true, None),
                wgt(&[300], 64, 64, false, None),
                wgt(&[37, 1, 130], 16, 24, true, None),
                wgt(&[150], 136, 256, true, Some(Bulk)),
                wgt(&[200], 128, 136, false, Some(Direct)),
                wgt(&[129], 256, 128, true, Some(Bulk)),
                wgt(&[77], 128, 33, true, Some(Bulk)),
                // Few CTAs, many tiles each: the ring wraps. K = 256 beside bulk staging leaves 5
                // slots for 4-box tiles (less than two tiles: the producer must issue a tile's
                // boxes before waiting on them); K = 256, C = 256 direct is a ring of exactly one
                // tile; K = 128 with bulk stores 5 slots for 2-box tiles; K = 136 three boxes.
                wgt_few(&[1100], 256, 128, true, Some(Bulk), 2),
                wgt_few(&[600], 256, 256, true, Some(Direct), 1),
                wgt_few(&[2000], 128, 256, true, Some(Bulk), 2),
                wgt_few(&[1000], 136, 256, false, None, 3),
                wgt_few(&[37, 1, 130, 300], 64, 136, true, Some(Direct), 2),
                // v14 (tensor stores of the bulk epilogue): meshes ending mid-tile (the warps whose
                // rows cross a mesh end store from the staging), C = 72 (a box past C), a wrapped ring.
                wgt(&[37, 1, 130, 300], 64, 72, true, Some(Bulk)),
                wgt_few(&[37, 1, 130, 300, 1000], 128, 256, false, Some(Bulk), 2),
            ],
            Tier::Full => vec![
                wgt(&[1], 8, 1, true, None),
                wgt(&[7], 64, 256, false, Some(Bulk)),
                wgt(&[4109], 128, 256, true, None),
                wgt(&[4109], 128, 256, true, Some(Bulk)),
                wgt(&[4109], 256, 64, false, None),
                wgt(&[4109], 136, 257, true, None),
                wgt(&[4109], 256, 256, true, Some(Direct)),
                wgt(&[131077], 128, 256, false, Some(Bulk)),
                wgt(&[131077], 64, 264, true, None),
                wgt(&[131077], 16, 1, true, None),
                wgt(&[131077], 256, 128, true, Some(Bulk)),
                wgt(&[131077], 256, 256, true, Some(Direct)),
                wgt(&[1 << 20 | 7], 128, 64, true, None),
                Case { dtypes: BF16, ..wgt(&[1 << 20 | 7], 128, 256, false, Some(Bulk)) },
                wgt(&[40, 1, 77, 3], 64, 136, true, Some(Direct)),
                wgt(&[5003, 19997, 1, 12000, 7777], 128, 256, true, None),
                wgt(&[5003, 19997, 1, 12000, 7777], 128, 256, false, Some(Bulk)),
            ],
        };
        v.extend(wgt_cases);
        // The wgmma reduce (v6): 16-byte and element loaders, one and two 128-channel halves, K
        // above one 128-eigenvector tile, chunks whose first row is not 8-aligned (partial first
        // stage), single chunks shorter than a stage, batches, forward with mass and backward
        // without; the auto rule on both sides of its threshold; with the wgmma expand forced.
        use WgmmaMode::{Always, Auto};
        let rwg_cases: Vec<Case> = match tier {
            _ if !has_wgmma(device) => vec![],
            Tier::Quick => vec![],
            Tier::Small => vec![
                rwg(&[1], 1, 1, false, Always, None, false),
                rwg(&[77], 5, 33, true, Always, None, false),
                rwg(&[300], 64, 64, false, Always, Some(44), false),
                rwg(&[50], 136, 16, true, Always, None, false),
                rwg(&[37, 1, 130], 16, 24, true, Always, Some(20), false),
                rwg(&[200], 128, 136, false, Always, Some(100), false),
                rwg(&[150], 136, 256, true, Always, None, true),
                // v12b, TMA-fed stages: chunks not 8-aligned and shorter than a stage, a batch
                // whose meshes end inside stages, K above one tile, C of one and of two tiles.
                rwgt(&[300], 64, 64, false, Some(44)),
                rwgt(&[37, 1, 130], 16, 24, true, Some(20)),
                rwgt(&[200], 128, 136, false, Some(100)),
                rwgt(&[150], 136, 256, true, None),
                rwgt(&[1], 8, 8, true, None),
                // Chunks of 10 stages: the slot ring wraps and the barriers' parities flip.
                rwgt(&[1500], 64, 64, true, Some(600)),
            ],
            Tier::Full => vec![
                rwg(&[1], 1, 1, true, Always, None, false),
                rwg(&[7], 64, 257, false, Always, None, false),
                rwg(&[7], 1, 33, true, Always, None, false),
                rwg(&[4109], 128, 256, true, Always, None, false),
                rwg(&[4109], 256, 64, false, Always, Some(300), false),
                rwg(&[4109], 1, 257, true, Always, None, false),
                rwg(&[4109], 136, 33, true, Always, Some(1000), true),
                rwg(&[4109], 128, 256, false, Auto, None, false),
                rwg(&[131077], 128, 256, false, Always, None, false),
                rwg(&[131077], 64, 1, true, Always, None, false),
                rwg(&[131077], 256, 257, true, Always, None, false),
                rwg(&[131077], 128, 256, true, Auto, None, true),
                rwg(&[1 << 20 | 7], 128, 64, true, Always, None, false),
                rwg(&[5003, 19997, 1, 12000, 7777], 128, 256, true, Always, None, false),
                rwg(&[5003, 19997, 1, 12000, 7777], 128, 256, false, Auto, Some(640), true),
                rwgt(&[4109], 128, 256, true, None),
                rwgt(&[4109], 256, 64, false, Some(300)),
                rwgt(&[131077], 128, 256, true, None),
                rwgt(&[131077], 256, 264, false, None),
                rwgt(&[5003, 19997, 1, 12000, 7777], 128, 256, true, Some(640)),
            ],
        };
        v.extend(rwg_cases);
        for mut c in extra {
            // f32 has no 8-wide tiles, and its reduce only the 2-wide one.
            if c.tune.as_ref().is_some_and(|(t, _)| t.reduce_wn != Some(2) || t.expand_wn == Some(8)) {
                c.dtypes = &[DType::F16, DType::BF16];
            }
            v.push(c);
        }
    }
    v
}

fn check_case(ctx: &CheckCtx, c: &Case, dtype: DType) -> Result<Vec<CheckRow>> {
    let label = {
        let v = if c.sizes.len() == 1 { format!("V={}", c.sizes[0]) } else { format!("V={:?}", c.sizes) };
        let mut s = format!("{v} K={} C={}{}", c.k, c.c, if c.d_spectral { " +dS" } else { "" });
        if let Some((t, rows)) = &c.tune {
            s += &format!(" w{}/{} r{}", t.reduce_wn.unwrap_or(0), t.expand_wn.unwrap_or(0), rows.unwrap_or(0));
            if t.fused == Some(true) {
                s += " fused";
            }
            if t.expand_wg == Some(true) {
                s += " wgmma";
            }
            match t.expand_store {
                Some(ExpandStore::Bulk) => s += " store=bulk",
                Some(ExpandStore::Direct) if t.expand_load == Some(ExpandLoad::Tma) => s += " store=direct",
                _ => {}
            }
            if t.expand_load == Some(ExpandLoad::Tma) {
                s += " load=tma";
            }
            if let Some(n) = t.expand_ctas {
                s += &format!(" ctas={n}");
            }
            match t.reduce_wg {
                Some(WgmmaMode::Always) => s += " reduce=wgmma",
                Some(WgmmaMode::Auto) => s += " reduce=auto",
                _ => {}
            }
            if t.reduce_load == Some(cuda::ReduceLoad::Tma) {
                s += " rload=tma";
            }
        }
        s
    };
    let seed = ctx.seed_for(&format!("{label}{dtype}"));
    let p = Problem::new(&c.sizes, c.k, c.c, dtype, c.d_spectral, seed)?;
    let [out, spectral, d_x, d_times] = p.reference();
    let dev = p.on(ctx.device)?;
    let tol = if ctx.device.is_cuda() { cuda::tolerance(dtype) } else { dtype.tolerance() };
    let mut rows = Vec::new();
    let push = |rows: &mut Vec<CheckRow>, tag: &str, fwd: &Forward, g: &Grads| -> Result<()> {
        rows.push(compare("diffusion", &format!("{label}{tag}"), "out", &fwd.out, &out, tol)?);
        rows.push(compare("diffusion", &format!("{label}{tag}"), "spectral", &fwd.spectral, &spectral, tol)?);
        rows.push(compare("diffusion", &format!("{label}{tag}"), "d_x", &g.d_x, &d_x, tol)?);
        rows.push(compare("diffusion", &format!("{label}{tag}"), "d_times", &g.d_times, &d_times, tol)?);
        Ok(())
    };
    let tune = c.tune.as_ref().map(|(t, r)| (t, *r));
    // v8: the bulk-store expand must give the bits of the direct wgmma expand (same products, same
    // order, same roundings; only the store path differs).
    let direct = tune
        .filter(|(t, _)| t.expand_store == Some(ExpandStore::Bulk) && t.expand_load != Some(ExpandLoad::Tma))
        .map(|(t, r)| (Tuning { expand_store: Some(ExpandStore::Direct), ..*t }, r));
    // v9: the TMA-fed expand must give the bits of the cp.async-fed one (same products, same order;
    // only the load path differs), wherever the cp.async variant fits (not at K = 256, C > 128).
    let cp_async = tune
        .filter(|(t, _)| t.expand_load == Some(ExpandLoad::Tma) && wg_fits(ctx.device, dtype, c.k, c.c, t.expand_store == Some(ExpandStore::Bulk)))
        .map(|(t, r)| (Tuning { expand_load: Some(ExpandLoad::CpAsync), ..*t }, r));
    // v12b: the TMA-fed reduce must give the bits of the cp.async-fed one (same stage contents).
    let r_cp_async = tune
        .filter(|(t, _)| t.reduce_load == Some(cuda::ReduceLoad::Tma))
        .map(|(t, r)| (Tuning { reduce_load: Some(cuda::ReduceLoad::CpAsync), ..*t }, r));
    let bits_eq = |a: (&Forward, &Grads), b: &(Forward, Grads)| -> Result<bool> {
        let mut eq = true;
        for (x, y) in [(&a.0.out, &b.0.out), (&a.0.spectral, &b.0.spectral), (&a.1.d_x, &b.1.d_x), (&a.1.d_times, &b.1.d_times)] {
            let (x, y) = (x.to_vec_f64()?, y.to_vec_f64()?);
            eq &= !x.is_empty() && x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits());
        }
        Ok(eq)
    };
    if c.sizes.len() == 1 {
        let (fwd, g) = dev.run_single(tune.map(|(t, _)| t))?;
        push(&mut rows, "", &fwd, &g)?;
        if let Some((t, _)) = &direct {
            let same = bits_eq((&fwd, &g), &dev.run_single(Some(t))?)?;
            rows.push(property("diffusion", &format!("{label} =store=direct"), "bitwise", dtype, ctx.device, same));
        }
        if let Some((t, _)) = &cp_async {
            let same = bits_eq((&fwd, &g), &dev.run_single(Some(t))?)?;
            rows.push(property("diffusion", &format!("{label} =load=cp.async"), "bitwise", dtype, ctx.device, same));
        }
        if let Some((t, _)) = &r_cp_async {
            let same = bits_eq((&fwd, &g), &dev.run_single(Some(t))?)?;
            rows.push(property("diffusion", &format!("{label} =rload=cp.async"), "bitwise", dtype, ctx.device, same));
        }
        return Ok(rows);
    }
    let (fwd, g) = dev.run(&p.offsets, tune)?;
    push(&mut rows, " batch", &fwd, &g)?;
    if let Some((t, r)) = &direct {
        let same = bits_eq((&fwd, &g), &dev.run(&p.offsets, Some((t, *r)))?)?;
        rows.push(property("diffusion", &format!("{label} batch =store=direct"), "bitwise", dtype, ctx.device, same));
    }
    if let Some((t, r)) = &cp_async {
        let same = bits_eq((&fwd, &g), &dev.run(&p.offsets, Some((t, *r)))?)?;
        rows.push(property("diffusion", &format!("{label} batch =load=cp.async"), "bitwise", dtype, ctx.device, same));
    }
    if let Some((t, r)) = &r_cp_async {
        let same = bits_eq((&fwd, &g), &dev.run(&p.offsets, Some((t, *r)))?)?;
        rows.push(property("diffusion", &format!("{label} batch =rload=cp.async"), "bitwise", dtype, ctx.device, same));
    }
    // Batched == per mesh: each mesh alone through the single-mesh front end.
    let mut per_out = Vec::new();
    let mut per_dx = Vec::new();
    let mut per_spec = Vec::new();
    let mut per_dt = vec![0.0; c.c];
    for m in 0..p.meshes() {
        let d1 = p.mesh(m)?.on(ctx.device)?;
        let (f1, g1) = d1.run_single(tune.map(|(t, _)| t))?;
        per_out.extend(f1.out.to_vec_f64()?);
        per_spec.extend(f1.spectral.to_vec_f64()?);
        per_dx.extend(g1.d_x.to_vec_f64()?);
        for (a, b) in per_dt.iter_mut().zip(g1.d_times.to_vec_f64()?) {
            *a += b;
        }
    }
    rows.push(compare("diffusion", &format!("{label} batch=per-mesh"), "out", &fwd.out, &per_out, tol)?);
    rows.push(compare("diffusion", &format!("{label} batch=per-mesh"), "spectral", &fwd.spectral, &per_spec, tol)?);
    rows.push(compare("diffusion", &format!("{label} batch=per-mesh"), "d_x", &g.d_x, &per_dx, tol)?);
    rows.push(compare("diffusion", &format!("{label} batch=per-mesh"), "d_times", &g.d_times, &per_dt, tol)?);
    Ok(rows)
}

/// Two runs give bit-identical results: the default path (`tune` None) or forced launch choices.
fn determinism(ctx: &CheckCtx, sizes: &[usize], k: usize, c: usize, dtype: DType, tune: Option<(&Tuning, &str)>) -> Result<CheckRow> {
    let p = Problem::new(sizes, k, c, dtype, true, ctx.seed_for("determinism"))?;
    let dev = p.on(ctx.device)?;
    let bits = |(f, g): (Forward, Grads)| -> Result<Vec<u64>> {
        let mut v: Vec<u64> = Vec::new();
        for t in [&f.out, &f.spectral, &g.d_x, &g.d_times] {
            v.extend(t.to_vec_f64()?.iter().map(|x| x.to_bits()));
        }
        Ok(v)
    };
    let t = tune.map(|(t, _)| (t, None));
    let a = bits(dev.run(&p.offsets, t)?)?;
    let b = bits(dev.run(&p.offsets, t)?)?;
    let label = format!("V={sizes:?} K={k} C={c} two runs{}", tune.map_or("", |(_, name)| name));
    Ok(property("diffusion", &label, "bitwise", dtype, ctx.device, a == b))
}

/// The fused pass (one cooperative launch) gives the same bits as the three launches with the same
/// tiles and chunks, batched and single.
fn fused_matches_launches(ctx: &CheckCtx, sizes: &[usize], k: usize, c: usize, dtype: DType) -> Result<CheckRow> {
    let p = Problem::new(sizes, k, c, dtype, true, ctx.seed_for("fused=launches"))?;
    let dev = p.on(ctx.device)?;
    let bits = |(f, g): (Forward, Grads)| -> Result<Vec<u64>> {
        let mut v: Vec<u64> = Vec::new();
        for t in [&f.out, &f.spectral, &f.saved, &g.d_x, &g.d_times] {
            v.extend(t.to_vec_f64()?.iter().map(|x| x.to_bits()));
        }
        Ok(v)
    };
    let rows = 64;
    let t = |fused| Tuning { reduce_wn: Some(2), expand_wn: Some(2), chunk_rows: Some(rows), fused: Some(fused), expand_wg: Some(false), reduce_wg: Some(WgmmaMode::Never), expand_store: None, expand_load: None, expand_ctas: None, reduce_load: None };
    let (a, b) = (bits(dev.run(&p.offsets, Some((&t(true), Some(rows))))?)?, bits(dev.run(&p.offsets, Some((&t(false), Some(rows))))?)?);
    let (m1, s1) = (p.mesh(0)?.on(ctx.device)?, t(true));
    let (c1, d1) = (bits(m1.run_single(Some(&s1))?)?, bits(m1.run_single(Some(&t(false)))?)?);
    let label = format!("V={sizes:?} K={k} C={c} fused vs three launches");
    Ok(property("diffusion", &label, "bitwise", dtype, ctx.device, a == b && c1 == d1 && !a.is_empty()))
}

/// Bad input on a CUDA device is an `Err` before any launch, and the device stays usable.
fn cuda_properties(device: Device) -> Result<Vec<CheckRow>> {
    let p = Problem::new(&[50], 8, 16, DType::BF16, false, 9)?;
    let dev = p.on(device)?;
    let evals = dev.evals.try_clone()?.reshape(&[8])?;
    let prop = |name: &str, holds: bool| property("diffusion", name, "holds", DType::BF16, device, holds);
    let mut rows = Vec::new();
    let e = super::forward(&p.x, &dev.basis, &dev.mass, &evals, &dev.times);
    rows.push(prop("x on cpu, basis on cuda: Err(Device)", matches!(e, Err(ember_core::Error::Device { .. }))));
    let wide = Tensor::zeros(&[50, 257], DType::BF16, device)?;
    let e = super::forward(&dev.x, &wide, &dev.mass, &Tensor::zeros(&[257], DType::F32, device)?, &dev.times);
    rows.push(prop("K = 257 on cuda: Err(Shape)", matches!(e, Err(ember_core::Error::Shape { .. }))));
    let e = super::forward(&dev.x, &dev.basis, &dev.mass, &evals, &dev.times.to_dtype(DType::BF16)?);
    rows.push(prop("bf16 times: Err(DType)", matches!(e, Err(ember_core::Error::DType { .. }))));
    let ok = super::forward(&dev.x, &dev.basis, &dev.mass, &evals, &dev.times).and_then(|f| f.out.to_vec_f64());
    rows.push(prop("no sticky error after bad input", ok.is_ok_and(|v| v.iter().all(|x| x.is_finite()))));
    // The layer clamps its times on the device.
    let mut layer = super::LearnedTimeDiffusion::new(Tensor::from_vec(vec![-1.0f32; 16], &[16])?.to_device(device)?)?;
    let f = layer.forward(&dev.x, &dev.basis, &dev.mass, &evals)?;
    let clamped = layer.times.to_vec_f64()?.iter().all(|&t| t == super::MIN_TIME as f32 as f64);
    rows.push(prop("layer clamps times to 1e-8 on cuda", clamped && f.out.to_vec_f64()?.iter().all(|x| x.is_finite())));
    // v8: bulk stores forced where they cannot run are a clear error, not a silent fallback: off
    // sm_90a (any shape), and on sm_90a where S (K = 256 × 256 channels), two stages and the staging
    // buffer exceed an SM's shared memory; together with the mma.sync expand, an invalid choice.
    let (big, offs) = (Problem::new(&[50], 256, 256, DType::BF16, false, 9)?.on(device)?, [0usize, 50]);
    let big_evals = big.evals.try_clone()?.reshape(&[256])?;
    let mb = Meshes { basis: &big.basis, mass: &big.mass, evals: &big_evals, offsets: &offs, plan: None, batched: false };
    let bulk = Tuning { expand_wg: Some(true), expand_store: Some(ExpandStore::Bulk), ..Tuning::default() };
    let e = cuda::forward_tuned(&mb, &big.x, &big.times, &bulk);
    rows.push(prop("bulk stores forced at K = 256, C = 256: Err(Unsupported)", matches!(e, Err(ember_core::Error::Unsupported(_)))));
    let m1 = Meshes { basis: &dev.basis, mass: &dev.mass, evals: &evals, offsets: &[0, 50], plan: None, batched: false };
    let e = cuda::forward_tuned(&m1, &dev.x, &dev.times, &Tuning { expand_wg: Some(false), ..bulk });
    rows.push(prop("bulk stores with expand_wg = false: Err(Invalid)", matches!(e, Err(ember_core::Error::Invalid { .. }))));
    let e = cuda::forward_tuned(&m1, &dev.x, &dev.times, &bulk);
    rows.push(prop("bulk stores forced at K = 8, C = 16: runs on sm_90a, Err(Unsupported) elsewhere", if has_wgmma(device) { e.is_ok() } else { matches!(e, Err(ember_core::Error::Unsupported(_))) }));
    // v9: TMA loads forced where they cannot run are a clear error: K = 5 (rows of 10 bytes, not a
    // multiple of TMA's 16), off sm_90a, and with the bulk staging buffer at K = 256, C = 256 (S,
    // the staging buffer and one tile's four boxes exceed shared memory); with the mma.sync expand,
    // an invalid choice. At K = 8, C = 16 and at K = 256, C = 256 with the direct epilogue (where
    // the cp.async stages do not fit) it runs on sm_90a.
    let tma = Tuning { expand_wg: Some(true), expand_load: Some(ExpandLoad::Tma), ..Tuning::default() };
    let unsupported = |e: &Result<super::Forward>| matches!(e, Err(ember_core::Error::Unsupported(_)));
    let e = cuda::forward_tuned(&m1, &dev.x, &dev.times, &tma);
    rows.push(prop("TMA loads forced at K = 8, C = 16: runs on sm_90a, Err(Unsupported) elsewhere", if has_wgmma(device) { e.is_ok() } else { unsupported(&e) }));
    let e = cuda::forward_tuned(&m1, &dev.x, &dev.times, &Tuning { expand_wg: Some(false), ..tma });
    rows.push(prop("TMA loads with expand_wg = false: Err(Invalid)", matches!(e, Err(ember_core::Error::Invalid { .. }))));
    let odd = Problem::new(&[50], 5, 16, DType::BF16, false, 9)?.on(device)?;
    let odd_evals = odd.evals.try_clone()?.reshape(&[5])?;
    let m5 = Meshes { basis: &odd.basis, mass: &odd.mass, evals: &odd_evals, offsets: &offs, plan: None, batched: false };
    let e = cuda::forward_tuned(&m5, &odd.x, &odd.times, &tma);
    rows.push(prop("TMA loads forced at K = 5: Err(Unsupported)", unsupported(&e)));
    let e = cuda::forward_tuned(&mb, &big.x, &big.times, &Tuning { expand_store: Some(ExpandStore::Bulk), ..tma });
    rows.push(prop("TMA loads with bulk stores forced at K = 256, C = 256: Err(Unsupported)", unsupported(&e)));
    let e = cuda::forward_tuned(&mb, &big.x, &big.times, &Tuning { expand_store: Some(ExpandStore::Direct), ..tma });
    rows.push(prop("TMA loads, direct stores at K = 256, C = 256: runs on sm_90a, Err(Unsupported) elsewhere", if has_wgmma(device) { e.is_ok() } else { unsupported(&e) }));
    Ok(rows)
}

/// The batch of 16 meshes (5k–20k vertices) of the GPU bench, shared with the PyTorch reference.
fn gpu_batch_sizes() -> Vec<usize> {
    (0..16).map(|i| 5000 + (i * 7919) % 15001).collect()
}

impl crate::OpFamily for Family {
    fn name(&self) -> &'static str {
        "diffusion"
    }
    fn summary(&self) -> &'static str {
        "DiffusionNet spectral diffusion: out = basis·(e^(−λt) ⊙ basisᵀ(mass⊙x)), its gradients, batches of meshes"
    }

    fn check(&self, ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
        let mut rows = Vec::new();
        // EMBER_DIFFUSION_CHECK=rload: only the cases that force the TMA-fed reduce (a short GPU
        // call after a change to it); the properties below are skipped then.
        // EMBER_DIFFUSION_CHECK=eload: likewise, only the cases that force the TMA-fed expand.
        let only = std::env::var("EMBER_DIFFUSION_CHECK").ok();
        let (only_rload, only_eload) = (only.as_deref() == Some("rload"), only.as_deref() == Some("eload"));
        for c in cases(ctx.tier, ctx.device) {
            if only_rload && !c.tune.as_ref().is_some_and(|(t, _)| t.reduce_load == Some(cuda::ReduceLoad::Tma)) {
                continue;
            }
            if only_eload && !c.tune.as_ref().is_some_and(|(t, _)| t.expand_load == Some(ExpandLoad::Tma)) {
                continue;
            }
            for &dtype in c.dtypes {
                let t0 = std::time::Instant::now();
                let r = check_case(ctx, &c, dtype)?;
                ctx.progress(|| format!("diffusion {} {dtype}: {} rows in {:.1} s", r.first().map_or("", |r| r.case.as_str()), r.len(), t0.elapsed().as_secs_f64()));
                rows.extend(r);
            }
        }
        let (sizes, k, c): (&[usize], usize, usize) = match ctx.tier {
            Tier::Full => (&[131077], 128, 256),
            _ => (&[300, 41], 16, 24),
        };
        if has_wgmma(ctx.device) {
            let t = Tuning { reduce_wg: Some(WgmmaMode::Always), reduce_load: Some(cuda::ReduceLoad::Tma), ..Tuning::default() };
            for dtype in [DType::F16, DType::BF16] {
                rows.push(determinism(ctx, sizes, k, c, dtype, Some((&t, " reduce=wgmma rload=tma")))?);
            }
        }
        if only_rload || only_eload {
            return Ok(rows);
        }
        for dtype in DType::ACTIVATIONS {
            rows.push(determinism(ctx, sizes, k, c, dtype, None)?);
        }
        if has_wgmma(ctx.device) {
            let t = Tuning { reduce_wg: Some(WgmmaMode::Always), ..Tuning::default() };
            for dtype in [DType::F16, DType::BF16] {
                rows.push(determinism(ctx, sizes, k, c, dtype, Some((&t, " reduce=wgmma")))?);
            }
            let t = Tuning { expand_wg: Some(true), expand_store: Some(ExpandStore::Bulk), ..Tuning::default() };
            for dtype in [DType::F16, DType::BF16] {
                rows.push(determinism(ctx, sizes, k, c, dtype, Some((&t, " store=bulk")))?);
            }
            let t = Tuning { expand_wg: Some(true), expand_load: Some(ExpandLoad::Tma), ..Tuning::default() };
            for dtype in [DType::F16, DType::BF16] {
                rows.push(determinism(ctx, sizes, k, c, dtype, Some((&t, " load=tma")))?);
            }
        }
        if ctx.device.is_cuda() {
            rows.extend(cuda_properties(ctx.device)?);
            for dtype in DType::ACTIVATIONS {
                rows.push(fused_matches_launches(ctx, sizes, k, c, dtype)?);
            }
        }
        Ok(rows)
    }

    fn bench(&self, ctx: &BenchCtx, progress: &mut dyn FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
        let (k, c) = (128usize, 256usize);
        // (vertices of each mesh, dtypes)
        let single: Vec<usize> = match (ctx.device, ctx.quick) {
            (Device::Cpu, _) => vec![4096],
            // 2M in quick runs too: v8's store-path rows are read at V = 2M.
            (_, true) => vec![4096, 131072, 524288, 2097152],
            (_, false) => vec![4096, 32768, 131072, 524288, 2097152],
        };
        let mut problems: Vec<(Vec<usize>, DType)> = Vec::new();
        // EMBER_DIFFUSION_BENCH_V="131072,524288": only those single meshes (for profiling runs and
        // A/Bs), bf16 or the dtype EMBER_DIFFUSION_BENCH_DTYPE=f32|f16|bf16 names; "batch" is the batch of
        // 16 meshes below.
        if let Ok(only) = std::env::var("EMBER_DIFFUSION_BENCH_V") {
            // f64 is the CPU reference's dtype, not a CUDA one: bf16 then, as for an unknown name.
            let dtype = std::env::var("EMBER_DIFFUSION_BENCH_DTYPE").ok().and_then(|d| d.parse::<DType>().ok()).filter(|&d| d != DType::F64).unwrap_or(DType::BF16);
            for item in only.split(',').map(str::trim) {
                match item {
                    "batch" => problems.push((gpu_batch_sizes(), dtype)),
                    v => problems.extend(v.parse::<usize>().ok().map(|v| (vec![v], dtype))),
                }
            }
            let mut rows = Vec::new();
            for (sizes, dtype) in problems {
                rows.extend(bench_one(ctx, &sizes, k, c, dtype, progress)?);
            }
            return Ok(rows);
        }
        for &v in &single {
            problems.push((vec![v], DType::BF16));
        }
        let f32_sizes: Vec<usize> = if ctx.device == Device::Cpu { vec![4096] } else { vec![4096, 131072, 524288] };
        for &v in &f32_sizes {
            problems.push((vec![v], DType::F32));
        }
        // A batch of 16 meshes of 5k–20k vertices (fixed sizes, shared with the PyTorch reference).
        let batch: Vec<usize> = if ctx.device == Device::Cpu { vec![500, 1200, 800, 2000] } else { gpu_batch_sizes() };
        problems.push((batch.clone(), DType::BF16));
        if ctx.device.is_cuda() {
            problems.push((batch, DType::F32));
        }
        let mut rows = Vec::new();
        for (sizes, dtype) in problems {
            rows.extend(bench_one(ctx, &sizes, k, c, dtype, progress)?);
        }
        Ok(rows)
    }

    fn kernels(&self) -> Vec<KernelBuild> {
        let mut v: Vec<KernelBuild> = DType::ACTIVATIONS.iter().map(|&d| KernelBuild { source: cuda::SOURCE, options: cuda::options_with(d, cuda::DEFAULT_STAGES) }).collect();
        if cuda::stages() != cuda::DEFAULT_STAGES {
            v.extend(DType::ACTIVATIONS.iter().map(|&d| KernelBuild { source: cuda::SOURCE, options: cuda::options(d) }));
        }
        v.push(KernelBuild { source: cuda::LAYER_SOURCE, options: vec![] });
        v
    }
}

struct BenchSet {
    x: Tensor,
    basis: Tensor,
    mass: Tensor,
    evals: Tensor,
    d_out: Tensor,
}

fn bench_one(ctx: &BenchCtx, sizes: &[usize], k: usize, c: usize, dtype: DType, progress: &mut dyn FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
    let v: usize = sizes.iter().sum();
    let es = dtype.size() as f64;
    let (vf, kf, cf) = (v as f64, k as f64, c as f64);
    let fwd_bytes = es * (2.0 * vf * cf + 2.0 * vf * kf + vf);
    let fwd_flops = 4.0 * vf * kf * cf;
    let sets = ctx.rotation(fwd_bytes);
    let d = ctx.device;
    let pd = param_dtype(dtype);
    let sk = 1.0 / (k as f32).sqrt();
    let sm = (k as f32 / v as f32 * sizes.len() as f32).sqrt();
    let mk = |i: usize| -> Result<BenchSet> {
        let s = 1000 * i as u64;
        Ok(BenchSet {
            x: Tensor::rand(&[v, c], -1.0, 1.0, dtype, d, s + 1)?,
            basis: Tensor::rand(&[v, k], -sk, sk, dtype, d, s + 2)?,
            mass: Tensor::rand(&[v], 0.5 * sm, 1.5 * sm, dtype, d, s + 3)?,
            evals: Tensor::rand(&[sizes.len(), k], 0.0, 20.0, pd, d, s + 4)?,
            d_out: Tensor::rand(&[v, c], -1.0, 1.0, dtype, d, s + 5)?,
        })
    };
    let inputs: Vec<BenchSet> = (0..sets).map(mk).collect::<Result<_>>()?;
    let times = Tensor::rand(&[c], 0.01, 0.2, pd, d, 7)?;
    let single = sizes.len() == 1;
    let batches: Vec<MeshBatch> = if single { Vec::new() } else { inputs.iter().map(|s| MeshBatch::from_vertex_counts(&s.basis, &s.mass, &s.evals, sizes)).collect::<Result<_>>()? };
    let p = if single { params(&[("V", json!(v)), ("K", json!(k)), ("C", json!(c))]) } else { params(&[("V", json!(sizes)), ("K", json!(k)), ("C", json!(c))]) };
    let rate = if dtype == DType::F32 { ctx.gemm_tflops(DType::F32, true)? } else { ctx.gemm_tflops(dtype, false)? };
    let evals1: Vec<Tensor> = if single { inputs.iter().map(|s| s.evals.try_clone()?.reshape(&[k])).collect::<Result<_>>()? } else { Vec::new() };
    let fwd = |i: usize| -> Result<Forward> {
        let s = &inputs[i % sets];
        if single {
            super::forward(&s.x, &s.basis, &s.mass, &evals1[i % sets], &times)
        } else {
            forward_batch(&batches[i % sets], &s.x, &times)
        }
    };
    let bwd = |i: usize, f: &Forward| -> Result<Grads> {
        let s = &inputs[i % sets];
        if single {
            super::backward(&s.basis, &s.mass, &evals1[i % sets], &times, f, &s.d_out, None)
        } else {
            backward_batch(&batches[i % sets], &times, f, &s.d_out, None)
        }
    };
    let note = if single { String::new() } else { format!("{} meshes, one launch sequence", sizes.len()) };
    let mut rows = Vec::new();
    let ms = ctx.time(300.0, |i| fwd(i).map(drop))?;
    let mut row = ctx.row_with_rate("diffusion", "fwd", dtype, p.clone(), ms, fwd_bytes, fwd_flops, rate);
    row.note = note.clone();
    progress(&row);
    rows.push(row);
    let ms = ctx.time(300.0, |i| {
        let f = fwd(i)?;
        bwd(i, &f).map(drop)
    })?;
    let mut row = ctx.row_with_rate("diffusion", "fwd+bwd", dtype, p.clone(), ms, 2.0 * fwd_bytes, 2.0 * fwd_flops, rate);
    row.note = note;
    progress(&row);
    rows.push(row);
    // Variant rows for single meshes of V ≥ 131072, each variant forced, the rest as by default:
    // v6, both reduce variants where the wgmma reduce can run ("fwd reduce=mma.sync",
    // "fwd reduce=wgmma", the same for "fwd+bwd"); v8, the wgmma expand with each store path where
    // both can run ("fwd store=direct", "fwd store=bulk", the same for "fwd+bwd").
    if single && d.is_cuda() && v >= 131072 {
        let cdev = inputs[0].x.cuda_device()?.clone();
        let mut variants: Vec<(String, Tuning, &str)> = Vec::new();
        if cuda::reduce_wg_available(&cdev, dtype, c) {
            for (mode, name) in [(WgmmaMode::Never, "mma.sync"), (WgmmaMode::Always, "wgmma")] {
                variants.push((format!("reduce={name}"), Tuning { reduce_wg: Some(mode), ..Tuning::default() }, "reduce variant forced, expand as by default"));
            }
            if k.is_multiple_of(8) && c.is_multiple_of(8) {
                for (load, name) in [(cuda::ReduceLoad::CpAsync, "cp.async"), (cuda::ReduceLoad::Tma, "tma")] {
                    let t = Tuning { reduce_wg: Some(WgmmaMode::Always), reduce_load: Some(load), ..Tuning::default() };
                    variants.push((format!("reduce=wgmma rload={name}"), t, "wgmma reduce forced with this load path, expand as by default"));
                }
            }
        }
        if cuda::expand_wg_available(&cdev, dtype, k, c, false) && cuda::expand_wg_available(&cdev, dtype, k, c, true) {
            for (store, name) in [(ExpandStore::Direct, "direct"), (ExpandStore::Bulk, "bulk")] {
                let t = Tuning { expand_wg: Some(true), expand_store: Some(store), ..Tuning::default() };
                variants.push((format!("store={name}"), t, "wgmma expand forced with this store path, reduce as by default"));
            }
        }
        // v9: the wgmma expand with each load path (store path as by default).
        if cuda::expand_wg_available(&cdev, dtype, k, c, false) && cuda::expand_tma_available(&cdev, dtype, k, c, false) {
            for (load, name) in [(ExpandLoad::CpAsync, "cp.async"), (ExpandLoad::Tma, "tma")] {
                let t = Tuning { expand_wg: Some(true), expand_load: Some(load), ..Tuning::default() };
                variants.push((format!("load={name}"), t, "wgmma expand forced with this load path, store path and reduce as by default"));
            }
        }
        let offsets = [0, v];
        for (name, t, what) in &variants {
            let mesh = |i: usize| {
                let s = &inputs[i % sets];
                Meshes { basis: &s.basis, mass: &s.mass, evals: &evals1[i % sets], offsets: &offsets, plan: None, batched: false }
            };
            let fwd_v = |i: usize| cuda::forward_tuned(&mesh(i), &inputs[i % sets].x, &times, t);
            let ms = ctx.time(300.0, |i| fwd_v(i).map(drop))?;
            let mut row = ctx.row_with_rate("diffusion", &format!("fwd {name}"), dtype, p.clone(), ms, fwd_bytes, fwd_flops, rate);
            row.note = (*what).into();
            progress(&row);
            rows.push(row);
            let ms = ctx.time(300.0, |i| {
                let f = fwd_v(i)?;
                cuda::backward_tuned(&mesh(i), &times, &f, &inputs[i % sets].d_out, None, t).map(drop)
            })?;
            let mut row = ctx.row_with_rate("diffusion", &format!("fwd+bwd {name}"), dtype, p.clone(), ms, 2.0 * fwd_bytes, 2.0 * fwd_flops, rate);
            row.note = (*what).into();
            progress(&row);
            rows.push(row);
        }
    }
    // Small single meshes: is the time above the GPU's or the host's? (1) CPU time to enqueue one
    // call (median, GPU running behind); (2) GPU time of one call captured into a CUDA graph and
    // replayed back to back, which takes the host out of the loop. The rows above stay the
    // reference (event-timed calls, as a training loop issues them).
    if single && d.is_cuda() && v <= 131072 {
        let dev = inputs[0].x.cuda_device()?.clone();
        let host = |f: &mut dyn FnMut(usize) -> Result<()>| -> Result<f64> { Ok(ctx.host_ms(f)?.expect("a CUDA bench context")) };
        let mut fwd_only = |i: usize| fwd(i).map(drop);
        let mut both = |i: usize| {
            let f = fwd(i)?;
            bwd(i, &f).map(drop)
        };
        let cases: [(&str, f64, &str); 4] = [
            ("fwd host", 1.0, "CPU time per call (enqueue only, median)"),
            ("fwd+bwd host", 2.0, "CPU time per call (enqueue only, median)"),
            ("fwd graph", 1.0, "GPU time: one call as a CUDA graph, replayed back to back"),
            ("fwd+bwd graph", 2.0, "GPU time: one call as a CUDA graph, replayed back to back"),
        ];
        for (j, (name, mult, what)) in cases.into_iter().enumerate() {
            let f: &mut dyn FnMut(usize) -> Result<()> = if j % 2 == 0 { &mut fwd_only } else { &mut both };
            let ms = if j < 2 { host(f)? } else { ember_core::cuda::timing::time_graph(&dev, 3, 200, |i| f(i % sets))? };
            let mut row = ctx.row_with_rate("diffusion", name, dtype, p.clone(), ms, mult * fwd_bytes, mult * fwd_flops, rate);
            row.note = what.into();
            progress(&row);
            rows.push(row);
        }
    }
    // Optional: each launch timed alone (EMBER_DIFFUSION_PHASES=1), to see where the time goes.
    if single && d.is_cuda() && std::env::var("EMBER_DIFFUSION_PHASES").is_ok_and(|v| v == "1") {
        let s = &inputs[0];
        let offsets = [0, v];
        let m = Meshes { basis: &s.basis, mass: &s.mass, evals: &evals1[0], offsets: &offsets, plan: None, batched: false };
        let mut time = |f: &mut dyn FnMut() -> Result<()>| ctx.time(100.0, |_| f());
        for (name, ms, bytes, flops) in cuda::phase_times(&mut time, &m, &s.x, &times, &s.d_out)? {
            let mut row = ctx.row_with_rate("diffusion", name, dtype, p.clone(), ms, bytes, flops, rate);
            row.note = "one launch alone (diagnostic)".into();
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}
