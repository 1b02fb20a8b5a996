//! CUDA launch code for `fft.cuh` + `fftconv.cu`: plans (on-chip or four-step), workspaces, and the
//! launch sequences of the forward, the backward and the filter spectrum.

use super::{Dims, Grads, Options};
use crate::harness::validate;
use crate::KernelBuild;
use ember_core::cuda::{CudaDevice, KernelSource, LaunchConfig};
use ember_core::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub const SOURCE: KernelSource = KernelSource::new("fftconv", concat!(include_str!("fft.cuh"), "\n", include_str!("fft_tc.cuh"), "\n", include_str!("fftconv.cu"), "\n", include_str!("pair_tc.cuh"), "\n", include_str!("pair_fwd.cuh"), "\n", include_str!("pair_bwd.cuh"), "\n", include_str!("pair_spec.cuh"), "\n", include_str!("pair_mixed.cuh"), "\n", include_str!("direct.cuh"), "\n", include_str!("direct_bwd.cuh")));

/// Thread-block sizes the module is built for: 256/512/1024 for the on-chip sizes and the real
/// four-step passes, 32 for the four-step passes at the small sizes the tests force.
const BLOCKS: [u32; 4] = [32, 256, 512, 1024];
/// Complex values per thread in an FFT pass (FC_E).
const PER_THREAD: usize = 16;
/// Largest complex size transformed on chip (one CTA of 1024 threads).
const ONCHIP_MAX_M: usize = 16 * 1024;
/// Longest row of the four-step row pass (a pair of rows per CTA of 1024 threads).
const FOUR_STEP_M2_MAX: usize = 8192;
/// The four-step row length and row-pass CTA size by default: rows of 4096 on 512 threads (two CTAs
/// per SM, one radix pass fewer per row FFT than 8192 on 1024 threads; NOTES.md, "v18").
const FOUR_STEP_M2: usize = 4096;
const FOUR_STEP_ROW_BLOCK: u32 = 512;
/// Bytes any one workspace buffer may take; larger problems run in chunks of rows or heads.
const WORKSPACE_BUDGET: usize = 1 << 31;

fn options(block: u32) -> Vec<String> {
    let mut o = vec![format!("-DFC_BLOCK={block}")];
    // Tuning knob for measurements: CTAs per SM the register cap aims at (see FC_MINB).
    if let Some(v) = ember_core::knob("EMBER_FFTCONV_MINB").and_then(|v| v.parse::<u32>().ok()) {
        o.push(format!("-DFC_MINB={v}"));
    }
    // Measurement knobs of the four-step passes (their modules only: 512 and 1024 threads): loads of the
    // intermediate issued together per thread (FC_IO_BATCH, default 16) and row-pass pairs whose Ks
    // entries load together (FC_ROW_AHEAD, default 3).
    if block >= 512 {
        if let Some(v) = ember_core::knob("EMBER_FFTCONV_IO_BATCH").and_then(|v| v.parse::<u32>().ok()) {
            o.push(format!("-DFC_IO_BATCH={v}"));
        }
        if let Some(v) = ember_core::knob("EMBER_FFTCONV_ROW_AHEAD").and_then(|v| v.parse::<u32>().ok()) {
            o.push(format!("-DFC_ROW_AHEAD={v}"));
        }
        // `direct`: the column passes' twiddles from fc_twiddle per element, as before the chains
        // (fftconv.cu, FC_TW_DIRECT).
        if ember_core::knob("EMBER_FFTCONV_TWIDDLE") == Some("direct") {
            o.push("-DFC_TW_DIRECT=1".into());
        }
    }
    // `0`: full transforms of the zero-padded rows in the CUDA-core FFT kernels (fftconv.cu, FC_PRUNE).
    if ember_core::knob("EMBER_FFTCONV_PRUNE") == Some("0") {
        o.push("-DFC_PRUNE=0".into());
    }
    if let Some(v) = ember_core::knob("EMBER_FFTCONV_PAIR_BWD_MINB").and_then(|v| v.parse::<u32>().ok()) {
        o.push(format!("-DFC_PAIR_BWD_MINB={v}"));
    }
    if let Some(v) = ember_core::knob("EMBER_FFTCONV_DIRECT_BWD_MINB").and_then(|v| v.parse::<u32>().ok()) {
        o.push(format!("-DFD_BWD_MINB={v}"));
    }
    if let Some(v) = ember_core::knob("EMBER_FFTCONV_DIRECT_FWD_MINB").and_then(|v| v.parse::<u32>().ok()) {
        o.push(format!("-DFD_FWD_MINB={v}"));
    }
    o
}

pub fn kernel_builds() -> Vec<KernelBuild> {
    BLOCKS.iter().map(|&b| KernelBuild { source: SOURCE, options: options(b) }).collect()
}

/// Kernel parameters, one struct for every entry point (fields a kernel does not use are 0).
/// Mirrors `FcParams` in fftconv.cu field by field.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct FcParams {
    u: u64,
    pre: u64,
    post: u64,
    mask: u64,
    out: u64,
    dout: u64,
    du: u64,
    dpre: u64,
    dpost: u64,
    k: u64,
    krev: u64,
    dd: u64,
    dk: u64,
    dkrev: u64,
    ddd: u64,
    spec: u64,
    tw: u64,
    tbuf: u64,
    vbuf: u64,
    sbuf: u64,
    wsa: u64,
    wsb: u64,
    b: i64,
    h: i64,
    l: i64,
    row0: i64,
    nrows: i64,
    hd: i32,
    heads: i32,
    lk: i32,
    lkr: i32,
    logm: i32,
    logm1: i32,
    logm2: i32,
    gelu: i32,
    need_z: i32,
    has_pre: i32,
    has_post: i32,
    has_mask: i32,
    parts: i32,
    head0: i32,
    nheads: i32,
    tc: i32,
    zs: u64,
    zstage: i32,
}

// SAFETY: plain-old-data with the C layout of the kernel's parameter struct.
unsafe impl ember_core::cuda::DeviceRepr for FcParams {}

/// How one call is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Whole rows in shared memory: complex size M = 2^logm, `block` threads per CTA; `tc`: the
    /// forward's transforms on tensor cores (fft_tc.cuh; the filter spectrum then in TC order);
    /// `pair`: the v4 forward (pair_fwd.cuh: two rows as one complex signal, tensor-core segments;
    /// the filter spectrum then all N bins in fragment order).
    OnChip { logm: u32, block: u32, tc: bool, pair: bool },
    /// M = M1·M2 = 2^(logm1 + logm2); column passes with `col_block` threads, row passes with
    /// `row_block`.
    FourStep { logm1: u32, logm2: u32, col_block: u32, row_block: u32 },
    /// The pair forward at a mixed-radix size N = 256·`p`: P = 40, 48, 56 in place of the power-of-two
    /// N = 16384 (pair_mixed.cuh; see [`mixed_p`]), P = 80, 96, 112 on clusters of two CTAs in place of
    /// 32768 and P = 160, 192, 224 on clusters of four in place of 65536 (pair_fwd.cuh; see
    /// [`mixed_cluster_p`]).
    PairMixed { p: u32 },
}

impl Path {
    fn logm(&self) -> u32 {
        match *self {
            Path::OnChip { logm, .. } => logm,
            Path::FourStep { logm1, logm2, .. } => logm1 + logm2,
            // The power-of-two size it replaces (N = 16384, 32768, 65536); the mixed kernels do not
            // read it.
            Path::PairMixed { p } => match p {
                0..=56 => 13,
                57..=112 => 14,
                _ => 15,
            },
        }
    }
}

/// The plan for `dims`: on chip when the complex size fits one CTA, else four-step.
pub fn plan(dims: &Dims, force_four_step: bool) -> Path {
    let n = if force_four_step { dims.fft_size().max(1024) } else { dims.fft_size() };
    let m = n / 2;
    let logm = m.trailing_zeros();
    if !force_four_step && m <= ONCHIP_MAX_M {
        let block = (m / PER_THREAD).max(256) as u32;
        return Path::OnChip { logm, block, tc: false, pair: false };
    }
    if force_four_step && m <= (1 << 17) {
        // Small transforms through the four-step kernels, for tests: 32-thread CTAs.
        let m2 = (m / 16).min(256);
        let logm2 = m2.trailing_zeros();
        return Path::FourStep { logm1: logm - logm2, logm2, col_block: 32, row_block: 32 };
    }
    let (m2_max, row_block) = four_step_rows();
    let m2 = m2_max.min(m / 4);
    let logm2 = m2.trailing_zeros();
    Path::FourStep { logm1: logm - logm2, logm2, col_block: 512, row_block }
}

/// The four-step row length M2 and row-pass CTA size: FOUR_STEP_M2 on FOUR_STEP_ROW_BLOCK threads,
/// or for measurements `EMBER_FFTCONV_M2` (a power of two from 1024 to 8192) and
/// `EMBER_FFTCONV_ROW_BLOCK` (256, 512 or 1024; a CTA holds 16 values per thread, so 2·M2 ≤
/// 16·block; the smallest block that holds a row pair where the knob is absent or does not fit).
fn four_step_rows() -> (usize, u32) {
    let m2 = ember_core::knob("EMBER_FFTCONV_M2").and_then(|v| v.parse::<usize>().ok()).filter(|v| v.is_power_of_two() && (1024..=FOUR_STEP_M2_MAX).contains(v)).unwrap_or(FOUR_STEP_M2);
    let fits = |b: u32| 2 * m2 <= PER_THREAD * b as usize;
    let fallback = [FOUR_STEP_ROW_BLOCK, 1024].into_iter().find(|&b| fits(b)).unwrap_or(1024);
    let block = ember_core::knob("EMBER_FFTCONV_ROW_BLOCK").and_then(|v| v.parse::<u32>().ok()).filter(|&b| matches!(b, 256 | 512 | 1024) && fits(b)).unwrap_or(fallback);
    (m2, block)
}

/// Complex sizes the tensor-core forward handles: M = 256·P, P ≤ 16 (one CTA of 256 threads).
const TC_LOGM: std::ops::RangeInclusive<u32> = 8..=12;

/// Whether the forward of a call runs its transforms on tensor cores: bf16 u only (f16 operands
/// with f32 accumulation hold bf16's accuracy target, not f16's or f32's), on-chip sizes with
/// 256 ≤ M ≤ 4096; asked for by `Options::tensor_cores` or `EMBER_FFTCONV_TC=1`.
fn use_tc(u: DType, opts: &Options, path: Path) -> bool {
    let asked = opts.tensor_cores || ember_core::knob("EMBER_FFTCONV_TC") == Some("1");
    asked && u == DType::BF16 && matches!(path, Path::OnChip { logm, .. } if TC_LOGM.contains(&logm))
}

/// Complex sizes of the pair forward: M = N/2 with N = 256·P, P = 2 … 128 (L + Lk − 1 ≤ 32768); at
/// P = 64 (fc_fwd_pair64) and P = 128 (fc_fwd_pair128, a cluster of two CTAs) only for L ≤ N/2.
const PAIR_LOGM: std::ops::RangeInclusive<u32> = 8..=14;

/// Whether the forward runs the v4 pair kernels (pair_fwd.cuh): bf16 u on the on-chip sizes they
/// cover (P = 128 runs on thread-block clusters: `clusters`, sm_90 and later), unless the v3
/// tensor-core forward is asked for or `EMBER_FFTCONV_PAIR=0`.
fn use_pair(u: DType, opts: &Options, path: Path, dims: &Dims, clusters: bool) -> bool {
    let off = ember_core::knob("EMBER_FFTCONV_PAIR") == Some("0");
    let fits = matches!(path, Path::OnChip { logm, tc: false, .. } if PAIR_LOGM.contains(&logm) && (logm < 13 || dims.l <= 1 << logm) && (logm < 14 || clusters));
    !off && u == DType::BF16 && fits && !opts.tensor_cores
}

/// Mixed-radix sizes of the pair forward: N = 256·P (pair_mixed.cuh).
const MIXED_P: [usize; 3] = [40, 48, 56];

/// P of the mixed-radix pair forward for `dims`, where it replaces N = 16384 (P = 64): the smallest
/// N = 256·P ≥ L + Lk − 1 that also holds L ≤ N/2 (4096 < L ≤ 7168 with a full-length filter; L = 5000
/// transforms 10240 points instead of 16384). bf16 u, the pair engine's spectrum (no k_rev), not the
/// tensor-core or four-step forwards asked for; `EMBER_FFTCONV_MIXED=0` keeps N = 16384 (both ways).
/// The backward takes it too where it runs the pair kernels (hd = 1) and P ≤ [`MIXED_BWD_MAX_P`], and
/// then reuses the forward's spectrum.
fn mixed_p(u: DType, opts: &Options, dims: &Dims) -> Option<u32> {
    let off = ember_core::knob("EMBER_FFTCONV_MIXED") == Some("0") || ember_core::knob("EMBER_FFTCONV_PAIR") == Some("0");
    if off || u != DType::BF16 || opts.tensor_cores || opts.force_four_step || !use_pair_spectrum(opts) || dims.fft_size() != 1 << 14 {
        return None;
    }
    mixed_size(&MIXED_P, dims)
}

/// Mixed-radix sizes of the cluster forward: P = 2R·CS with R = 20, 24, 28 on clusters of CS = 2
/// (N = 20480, 24576, 28672) and 4 (N = 40960, 49152, 57344) CTAs (pair_fwd.cuh).
const MIXED_CLUSTER_P: [usize; 6] = [80, 96, 112, 160, 192, 224];

/// P of the mixed-radix cluster forward for `dims` (NOTES.md "v23"): the smallest N = 256·P that holds
/// L + Lk − 1 and L ≤ N/2 where it is below the power-of-two size the pair forwards would take for the
/// same rule (8192 < L ≤ 14336 and 16384 < L ≤ 28672 with a full-length filter; L = 20000 transforms
/// 40960 points instead of 65536). The cluster forward's conditions (sm_90 clusters, bf16 u, hd = 1,
/// the pair spectrum); u is read staged where the power-of-two cluster forward's is (no pregate,
/// L % 8 = 0, a 16-byte aligned u: fc_fwd_pairm{P}), else directly (fc_fwd_pairmd{P}). The backward
/// runs on clusters at the same P ([`cluster_bwd`]; `EMBER_FFTCONV_CLUSTER_BWD=0`: its power-of-two path,
/// recomputing the spectrum at its own N). `EMBER_FFTCONV_MIXED_CLUSTER=0` (or `EMBER_FFTCONV_MIXED=0`) keeps the power-of-two
/// sizes; where the size replaced is 65536, `EMBER_FFTCONV_PAIR_BIG=0` (four-step) does too.
fn mixed_cluster_p(u: &Tensor, opts: &Options, dims: &Dims, clusters: bool) -> Result<Option<u32>> {
    let knob_off = |k: &'static str| ember_core::knob(k) == Some("0");
    let off = knob_off("EMBER_FFTCONV_MIXED_CLUSTER") || knob_off("EMBER_FFTCONV_MIXED") || knob_off("EMBER_FFTCONV_PAIR");
    let Some(p) = mixed_cluster_size(dims) else { return Ok(None) };
    if off || (p > 112 && knob_off("EMBER_FFTCONV_PAIR_BIG")) {
        return Ok(None);
    }
    let ok = clusters && u.dtype() == DType::BF16 && dims.hd == 1 && use_pair_spectrum(opts) && !opts.tensor_cores && !opts.force_four_step;
    Ok(ok.then_some(p))
}

/// The pair forwards' size rule: N ≥ L + max(Lk, Lkr) − 1 and L ≤ N/2.
fn pair_need(dims: &Dims) -> usize {
    (dims.l + dims.lk.max(dims.lk_rev) - 1).max(2 * dims.l)
}

/// The smallest of `sizes` (P, N = 256·P) that holds [`pair_need`].
fn mixed_size(sizes: &[usize], dims: &Dims) -> Option<u32> {
    let need = pair_need(dims);
    sizes.iter().find(|&&p| 256 * p >= need).map(|&p| p as u32)
}

/// [`mixed_cluster_p`]'s size rule alone: the smallest cluster size that holds [`pair_need`], where it
/// is below the power of two that does.
pub(super) fn mixed_cluster_size(dims: &Dims) -> Option<u32> {
    let need = pair_need(dims);
    mixed_size(&MIXED_CLUSTER_P, dims).filter(|&p| 256 * (p as usize) < need.next_power_of_two() && need > 1 << 14)
}

/// [`mixed_p`] for a bf16 u with the default options (tests).
#[cfg(test)]
pub(super) fn mixed_p_for_test(dims: &Dims) -> Option<u32> {
    mixed_p(DType::BF16, &Options::default(), dims)
}

/// CTAs per cluster of the mixed-radix cluster kernels at P (80 … 112: 2, 160 … 224: 4), and of the
/// cluster backward at P = 256 (4).
fn mixed_cluster_ctas(p: u32) -> usize {
    if p <= 112 { 2 } else { 4 }
}

/// Shared memory of the mixed-radix forward and spectrum: P segments of 256 float2, the per-lane table
/// (40 words × 32 lanes), two row descriptors and three ints (the forward's pair max and row maxima; the
/// spectrum and the filter gradient use two).
fn smem_bytes_mixed(p: u32) -> usize {
    p as usize * 256 * 8 + 40 * 32 * 4 + 2 * 48 + 12
}

/// Whether the mixed-radix forward at P = 40, 48 runs 256-thread CTAs, two per SM (fc_fwd_pairq{Q}n);
/// `EMBER_FFTCONV_MIXED_NARROW=0` runs the 512-thread kernel (one CTA per SM) there too.
fn mixed_narrow() -> bool {
    ember_core::knob("EMBER_FFTCONV_MIXED_NARROW") != Some("0")
}

/// Shared memory of the mixed-radix backward: P segments of 256 float2, their W as f16 pairs (1 KB
/// each), the per-lane table, two row descriptors and two ints.
fn smem_bytes_mixed_bwd(p: u32) -> usize {
    p as usize * (256 * 8 + 1024) + 40 * 32 * 4 + 2 * 48 + 8
}

/// Largest P of the mixed-radix backward. H200, B = 16, H = 768, GELU + D, fwd+bwd against the
/// power-of-two backward after the mixed forward (same run): P = 40 (L = 5000) 3.14 → 2.44 ms, P = 48
/// (L = 6000) 3.22 → 2.69, but P = 56 (L = 7000) 3.51 → 4.03: 56 segments take as many rounds of the
/// 16 warps as 64, and its build spills 140–308 bytes at the 128-register cap.
const MIXED_BWD_MAX_P: u32 = 48;

/// Whether the backward takes the mixed-radix pair kernels where the forward does (`mixed_p`, P ≤
/// [`MIXED_BWD_MAX_P`]);
/// `EMBER_FFTCONV_MIXED_BWD=0` keeps the power-of-two pair backward (measurements).
fn mixed_bwd() -> bool {
    ember_core::knob("EMBER_FFTCONV_MIXED_BWD") != Some("0")
}

/// Whether the device launches thread-block clusters (compute capability 9.0 and later).
fn has_clusters(dev: &CudaDevice) -> bool {
    dev.info().compute_capability.0 >= 9
}

/// The FFT forward's path for `dims` (not the direct one): the plan, or the cluster or mixed-radix
/// pair path in its place, with `tc` and `pair` set; the mixed P; whether the pair kernels run.
fn forward_path(u: &Tensor, opts: &Options, dims: &Dims, clusters: bool) -> Result<(Path, Option<u32>, bool)> {
    let mixed = match mixed_p(u.dtype(), opts, dims) {
        Some(p) => Some(p),
        None => mixed_cluster_p(u, opts, dims, clusters)?,
    };
    let big = if mixed.is_some() { None } else { pair_big(u, opts, dims, clusters)? };
    let mut path = big.or(mixed.map(|p| Path::PairMixed { p })).unwrap_or_else(|| plan(dims, opts.force_four_step));
    let want_tc = big.is_none() && mixed.is_none() && use_tc(u.dtype(), opts, path);
    // pair_big's and mixed_p's paths are pair forwards by construction (use_pair covers the
    // power-of-two N <= 32768 only).
    let want_pair = big.is_some() || mixed.is_some() || (!want_tc && use_pair(u.dtype(), opts, path, dims, clusters));
    if let Path::OnChip { ref mut tc, ref mut pair, .. } = path {
        *tc = want_tc;
        *pair = want_pair;
    }
    Ok((path, mixed, want_pair))
}

/// Whether the forward for these inputs treats each row's range on its own: the direct forward (a
/// power-of-two scale per row), and the P = 64 and mixed-radix pair forwards (fp_balance,
/// pair_tc.cuh). Checks (suite.rs).
pub(crate) fn forward_keeps_row_range(u: &Tensor, opts: &Options, dims: &Dims) -> Result<bool> {
    if use_direct(u.dtype(), opts, dims) {
        return Ok(true);
    }
    Ok(match forward_path(u, opts, dims, has_clusters(u.cuda_device()?))? {
        // The cluster sizes (P ≥ 80) share one pair scale as the power-of-two cluster forwards do.
        (Path::PairMixed { p }, _, _) => p <= 56,
        (Path::OnChip { logm, pair: true, .. }, _, _) => logm == 13,
        _ => false,
    })
}

/// The forward on clusters of 4 or 8 CTAs (P = 256, 512: N = 65536, 131072, L ≤ N/2) instead of the
/// four-step path: bf16 u, hd = 1, the pair engine's spectrum (no k_rev); the backward stays
/// four-step (recomputing the spectrum in its own layout). By default at N = 65536, where it is
/// faster both ways (H200, B = 4, H = 256, L = 32768: fwd 1.43 → 1.07 ms, fwd+bwd 4.32 → 4.15), and
/// at N = 131072 where u and the output are staged (fc_fwd_pair_staged9: L = 65536 fwd 2.68 → 2.23,
/// fwd+bwd 8.40 → 8.35 against four-step; unstaged, v9c: fwd 2.79 → 2.72 but fwd+bwd 8.63 → 8.90).
/// `EMBER_FFTCONV_PAIR_BIG=1` takes it at both sizes, `=0` at neither.
fn pair_big(u: &Tensor, opts: &Options, dims: &Dims, clusters: bool) -> Result<Option<Path>> {
    let n = dims.fft_size();
    let asked = match ember_core::knob("EMBER_FFTCONV_PAIR_BIG") {
        Some("1") => true,
        Some("0") => false,
        _ => n == 1 << 16 || (n == 1 << 17 && use_pair_stage_u(9, true, u, opts, dims)?),
    };
    let fits = (n == 1 << 17 || n == 1 << 16) && dims.l <= n / 2;
    let ok = asked && clusters && fits && u.dtype() == DType::BF16 && dims.hd == 1 && use_pair_spectrum(opts) && !opts.tensor_cores && !opts.force_four_step;
    Ok(ok.then(|| Path::OnChip { logm: n.trailing_zeros() - 1, block: 1024, tc: false, pair: true }))
}

/// Whether the backward runs the pair kernels (fc_bwd_pair*, pair_bwd.cuh): wherever the pair
/// forward runs with hd = 1 (N ≤ 32768, at N ≥ 16384 only L ≤ N/2), unless
/// `EMBER_FFTCONV_PAIR_BWD=0` (the v2 backward, to compare).
fn use_pair_bwd(u: DType, opts: &Options, path: Path, dims: &Dims, clusters: bool) -> bool {
    let off = ember_core::knob("EMBER_FFTCONV_PAIR_BWD") == Some("0");
    !off && dims.hd == 1 && use_pair(u, opts, path, dims, clusters)
}

/// The backward on clusters (fc_bwd_pairc, pair_bwd.cuh; filter gradient fc_dk_pairm{P}, pair_mixed.cuh)
/// after a forward on clusters: by default at the mixed-radix sizes of 20- and 24-point lanes
/// ([`CLUSTER_BWD_P`], reusing the forward's spectrum, where the backward took N = 32768 or 65536 before).
/// With `EMBER_FFTCONV_CLUSTER_BWD=1` also at P = 112, 224 (28-point lanes) and at P = 256 after
/// [`pair_big`]'s forward (N = 65536, in place of the four-step backward); `=0` keeps the power-of-two
/// backwards everywhere. The forward's path (which keys its saved spectrum) and P.
fn cluster_bwd(u: &Tensor, opts: &Options, dims: &Dims, clusters: bool) -> Result<Option<(Path, u32)>> {
    let knob = ember_core::knob("EMBER_FFTCONV_CLUSTER_BWD");
    if knob == Some("0") {
        return Ok(None);
    }
    if let Some(pm) = mixed_cluster_p(u, opts, dims, clusters)? {
        return Ok((knob == Some("1") || CLUSTER_BWD_P.contains(&pm)).then_some((Path::PairMixed { p: pm }, pm)));
    }
    if knob == Some("1") {
        if let Some(path @ Path::OnChip { logm: 15, .. }) = pair_big(u, opts, dims, clusters)? {
            return Ok(Some((path, 256)));
        }
    }
    Ok(None)
}

/// P of the cluster backward by default. H200, same run against the power-of-two backwards (B = 16,
/// H = 768 at CS = 2, B = 4, H = 256 at CS = 4; GELU + D), fwd+bwd / training fwd+bwd: P = 80 (L = 9000)
/// −24 % / −20 %, P = 96 (L = 12000) −19 % / −11 %, P = 160 (L = 20000) −32 % / −35 %, P = 192 (L = 24000)
/// −14 % / −25 %; but P = 112 (L = 14336) −4.9 % / +4.1 % and P = 224 (L = 28672) +3.6 % / −1.9 % (its
/// builds spill up to 1 KB at the 128-register cap), and P = 256 (L = 30000) +2.6 % / +1.0 % against the
/// four-step backward (NOTES.md "v24").
const CLUSTER_BWD_P: [u32; 4] = [80, 96, 160, 192];

/// The cluster backward's launches ([`cluster_bwd`]): one row-pair slot per cluster of CS CTAs of 512
/// threads (u staged as the forward's where [`use_pair_stage_u`] says so), each a chunk of ppc of one
/// head's row pairs (every chunk nonempty), its filter-gradient partial one N-bin slot of tbuf; then
/// fc_dk_pairm{P}, one head per cluster (the fold, the inverse transform, d_k and d_D).
#[allow(clippy::too_many_arguments)]
fn backward_cluster(dev: &Arc<CudaDevice>, p: &mut FcParams, pc: u32, u: &Tensor, opts: &Options, dims: &Dims, z: Option<&Tensor>, sfx: &str) -> Result<()> {
    let devc = u.device();
    if let Some(z) = z {
        validate::like("z", z, devc, u.dtype(), u.shape(), "the shape of u")?;
        p.zs = z.cuda_ptr()?;
        p.need_z = 0;
    }
    let cs = mixed_cluster_ctas(pc);
    let seg = pc / cs as u32;
    let n = 256 * pc as usize;
    let heads = dims.heads();
    let sms = dev.info().multiprocessors.max(1) as usize / cs;
    // A whole head per cluster where the heads alone fill two waves of clusters: H200, B = 16, H = 768,
    // L = 9000 (P = 80, 8 pairs per head), fwd+bwd / training fwd+bwd 7.17 / 5.99 ms at the model's 2
    // pairs per slot, 6.90 / 5.65 at 4 and 6.94 / 5.55 at 8 (NOTES.md "v24"): per cluster the setup and
    // the filter-gradient partial cost more than the wave model (fitted at P ≤ 32) counts.
    let whole_heads = heads >= 2 * sms;
    let (parts, chunk, _tbuf) = one_slot_partials(devc, p, heads, dims.b.div_ceil(2), sms, n, whole_heads)?;
    let staged = if use_pair_stage_u(7, false, u, opts, dims)? { "s" } else { "" };
    let zsfx = if p.zs != 0 { "z" } else { "" };
    for h0 in (0..heads).step_by(chunk) {
        let nh = chunk.min(heads - h0);
        p.set_head_round(h0, nh, dims.b);
        p.parts = parts as i32;
        launch_smem_threads(dev, 256, 512, &format!("fc_bwd_pairm{staged}{pc}{zsfx}_{sfx}"), (grid_u32(nh * parts * cs, "backward")?, 1), p, "fc_bwd_pairm", smem_bytes_mixed_bwd(seg))?;
        launch_smem_threads(dev, 256, 512, &format!("fc_dk_pairm{pc}"), (grid_u32(nh * cs, "backward")?, 1), p, "fc_dk_pairm", smem_bytes_mixed(seg))?;
    }
    Ok(())
}

/// The partials of a pair backward with one slot per CTA or cluster (fc_bwd_pairq, fc_bwd_pairc):
/// each slot a chunk of ppc of one head's `pph` row pairs (all of them with `whole_heads`, else
/// [`pair_bwd_chunk`] over `sms` slots at once; `EMBER_FFTCONV_PAIR_BWD_PPC` before either), its
/// filter-gradient partial one N-bin slot of the workspace (p.tbuf, kept alive by the returned tensor).
/// Partials per head, heads per launch round, workspace.
fn one_slot_partials(devc: Device, p: &mut FcParams, heads: usize, pph: usize, sms: usize, n: usize, whole_heads: bool) -> Result<(usize, usize, Tensor)> {
    let ppc = match ember_core::knob("EMBER_FFTCONV_PAIR_BWD_PPC").and_then(|v| v.parse::<usize>().ok()) {
        Some(c) => c.clamp(1, pph),
        None if whole_heads => pph,
        None => pair_bwd_chunk(heads, pph, 1, 1, sms, n),
    };
    let parts = pph.div_ceil(ppc);
    let chunk = heads_per_chunk(heads, parts * n * 8);
    let tbuf = workspace(devc, 2 * chunk * parts * n)?;
    p.tbuf = tbuf.cuda_ptr()?;
    Ok((parts, chunk, tbuf))
}

/// Row pairs per slot of the pair backward (1 ≤ c ≤ pph, the head's pair count), by a model of
/// its time in units of one CTA iteration at two CTAs per SM (the backward's 128 registers and
/// ~103 KB of shared memory per CTA): a CTA runs ⌈pph/c⌉-way split heads' chunks of c pairs in
/// lockstep, CTAs = ⌈heads·⌈pph/c⌉ / slots⌉; full waves (2 CTAs per SM) cost c each, a last
/// partial wave c if some SM holds two of its CTAs, else 0.75·c (one CTA per SM runs an
/// iteration in ~35 µs against ~47 µs for two); each filter-gradient partial costs 5e-8 per bin
/// and head (fc_dk_pair's reads) plus 1e-3 for its serial sum over a head's partials (~50 ns of
/// L2 latency each: it matters only for few heads with many pairs); and 0.1·c for the uneven
/// finish of long CTAs (SMs do not run in step, so the last CTAs lag by a share of their
/// length). Fitted to an H200 sweep
/// of B = 16, H = 768 (NOTES.md, v6), whose order of c it reproduces at L = 256, 1024 and 4096:
/// c = 1, 2 and 4 there (the former "about two waves" rule took 1, 3 and 8: L = 1024 0.430 →
/// 0.391 ms fwd+bwd, L = 4096 1.68 → 1.65 ms).
pub(super) fn pair_bwd_chunk(heads: usize, pph: usize, slots_per_cta: usize, ctas_per_sm: usize, sms: usize, n: usize) -> usize {
    let cost = |c: usize| pair_bwd_cost(c, heads, pph, slots_per_cta, ctas_per_sm, sms, n);
    // Only the smallest c of each partial count ⌈pph/c⌉ can win (at equal parts and CTAs the cost
    // grows with c), so visit those: O(√pph) candidates per call instead of pph on this per-call
    // path. Descending c with a strict comparison: ties go to the larger c (fewer partials).
    let pph = pph.max(1);
    let (mut best, mut best_cost) = (pph, f64::INFINITY);
    let mut c = pph;
    while c >= 1 {
        let smallest = pph.div_ceil(pph.div_ceil(c));
        let v = cost(smallest);
        if v < best_cost {
            (best, best_cost) = (smallest, v);
        }
        c = smallest - 1;
    }
    best
}

/// The model's time of chunks of c pairs (see `pair_bwd_chunk`). `ctas_per_sm`: 2 for P ≤ 32;
/// 1 for P = 64 (one CTA of 512 threads per SM), where a partial last wave costs a full one; at
/// P = 128 a slot is a cluster of two such CTAs, counted as one CTA on half the SMs.
pub(super) fn pair_bwd_cost(c: usize, heads: usize, pph: usize, slots_per_cta: usize, ctas_per_sm: usize, sms: usize, n: usize) -> f64 {
    let (sms, per_sm) = (sms.max(1), ctas_per_sm.max(1));
    let parts = pph.div_ceil(c);
    let ctas = (heads * parts).div_ceil(slots_per_cta);
    let (full, last) = (ctas / (per_sm * sms), ctas % (per_sm * sms));
    let partial = if last == 0 { 0.0 } else if last > (per_sm - 1) * sms { 1.0 } else { 0.75 };
    c as f64 * (full as f64 + partial + 0.1) + 5e-8 * (parts * heads * n) as f64 + 1e-3 * parts as f64
}

/// Shared memory of the pair backward: the forward's segments (32; 64 at P = 64 and per CTA at
/// P = 128), every segment's saved spectrum as f16 pairs (1 KB each), the per-lane table, and per
/// pair slot two row descriptors and two scales.
fn smem_bytes_pair_bwd(logp: u32) -> usize {
    let (segments, pairs) = if logp >= 6 { (64, 1) } else { (32, 32 >> logp) };
    segments * (256 * 8 + 1024) + 40 * 32 * 4 + pairs * (2 * 48 + 8)
}

/// Shared memory of the pair forward: 32 segments of 256 float2 (64 at P = 64 and per CTA at
/// P = 128), the per-lane
/// table (40 words × 32 lanes), the CTA's row descriptors (2 per pair, 48 bytes each) and one int
/// per pair (three at P ≥ 64: its rows' largest inputs too, fp_rows_max_commit); with `staged_elems`
/// (fc_fwd_pair_staged, P = 32) the rows and ints twice, then the staged u (bf16) at a 16-byte
/// boundary (FP_STG_OFF in pair_tc.cuh, used by pair_fwd.cuh).
fn smem_bytes_pair(logp: u32, staged_elems: usize) -> usize {
    let (segments, pairs) = if logp >= 6 { (64, 1) } else { (32, 32 >> logp) };
    let head = segments * 256 * 8 + 40 * 32 * 4;
    let per_pair = 2 * 48 + if logp >= 6 { 12 } else { 4 };
    if staged_elems == 0 { head + pairs * per_pair } else { (head + 2 * pairs * per_pair).next_multiple_of(16) + 2 * staged_elems }
}

/// Whether the pair forward runs staged (fc_fwd_pair_staged: a persistent grid that copies the
/// next group's u by cp.async while the current one is transformed): P = 32, where it keeps the
/// plain kernel's 2 CTAs per SM (at P ≤ 16 its 16 KB of staging would cost the third), bf16 u
/// without a pregate (the staged copy holds u alone), rows of 16-byte multiples (L % 8 = 0) from
/// a 16-byte-aligned u; unless `EMBER_FFTCONV_PAIR_PREFETCH=0`.
fn use_pair_prefetch(logp: u32, u: &Tensor, opts: &Options, dims: &Dims) -> Result<bool> {
    let off = ember_core::knob("EMBER_FFTCONV_PAIR_PREFETCH") == Some("0");
    Ok(!off && logp == 5 && opts.pregate.is_none() && dims.l.is_multiple_of(8) && u.cuda_ptr()?.is_multiple_of(16))
}

/// Whether the pair kernels read u from a copy in shared memory made by 16-byte loads (pair_fwd.cuh's
/// fpc_stage_u): the cluster forwards (P = 128 … 512: fc_fwd_pair_staged7/8/9, which at P = 512
/// also stage the output) and the backwards at P = 64, 128 (fc_bwd_pair_staged6/7*); not the P = 64
/// forward, which measured no faster so. bf16 u without a pregate, rows of 16-byte multiples
/// (L % 8 = 0) from a 16-byte-aligned u; unless `EMBER_FFTCONV_PAIR_STAGE_U=0`. H200, same run
/// (`bench/results/nvidia-h200/fftconv-stage-u/`): L = 16384 fwd −15 %, fwd+bwd −15 %; L = 5000
/// fwd+bwd −7.6 %; L = 65536 on clusters of 8 fwd −16 %.
fn use_pair_stage_u(logp: u32, forward: bool, u: &Tensor, opts: &Options, dims: &Dims) -> Result<bool> {
    let off = ember_core::knob("EMBER_FFTCONV_PAIR_STAGE_U") == Some("0");
    let kernel = if forward { logp >= 7 } else { logp == 6 || logp == 7 };
    Ok(!off && kernel && opts.pregate.is_none() && dims.l.is_multiple_of(8) && u.cuda_ptr()?.is_multiple_of(16))
}

/// bf16 elements of fpc_stage_u's copy (both rows, P/2 rows of n1 each padded to 256/CS + 16/CS
/// bf16): 2 · 32·CS · (256 + 16)/CS = 17408 at every CS (FpcStg::BYTES / 2).
const PAIR_STAGE_U_ELEMS: usize = 2 * 32 * (256 + 16);

/// Bytes of fb_stage_dout's half copy at P = 128: half of fpc_stage_u's rows, i.e. half its bytes
/// (2 per element): 17408 (FpcStg::BYTES / 2).
const PAIR_STAGE_DOUT_BYTES: usize = PAIR_STAGE_U_ELEMS * 2 / 2;

/// The filter spectrum of one call (kept by the forward for the backward).
pub struct Spectrum {
    spec: Tensor,
    path: Path,
}

/// What a training forward keeps for its backward besides the filter spectrum: z where [`saves_z`],
/// and on the four-step path the spectrum of every row where [`saves_w`].
#[derive(Default)]
pub struct Kept {
    z: Option<Tensor>,
    w: Option<RowSpectra>,
}

/// 2W, the four-step forward's spectrum of every row of v = u ⊙ pregate (f32 complex, M + 1 bins per
/// row in fc_row_pass's order, rows head-major as the rounds number them): what the backward's
/// saving row pass would write to its vbuf.
struct RowSpectra {
    w: Tensor,
    path: Path,
}

impl Kept {
    pub fn z(&self) -> bool {
        self.z.is_some()
    }
    pub fn w(&self) -> bool {
        self.w.is_some()
    }
}

/// The vbuf pointer of a round whose first row is `row0`: row `row0` of the saved spectra.
fn row_spectra_at(w: &RowSpectra, row0: i64, m: usize) -> Result<u64> {
    Ok(w.w.cuda_ptr()? + row0 as u64 * (m as u64 + 1) * 8)
}

fn smem_bytes(block: u32) -> usize {
    let slots = PER_THREAD * block as usize;
    (slots + slots / 32) * 8
}

fn too_large(what: String) -> Error {
    Error::TooLarge { arg: "u".into(), what }
}

fn grid_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n.max(1)).ok().filter(|&g| g <= i32::MAX as u32).ok_or_else(|| too_large(format!("{what}: {n} blocks exceed one launch's grid")))
}

/// Shared memory of the tensor-core forward (fft_tc.cuh): data padded by 4 per 32, and the
/// per-lane table of 40 words × 32 lanes.
fn smem_bytes_tc(block: u32) -> usize {
    let slots = PER_THREAD * block as usize;
    (slots + slots / 8) * 8 + 40 * 32 * 4
}

fn launch(dev: &Arc<CudaDevice>, block: u32, entry: &str, grid: (u32, u32), p: &FcParams, name: &'static str) -> Result<()> {
    launch_smem(dev, block, entry, grid, p, name, smem_bytes(block))
}

fn launch_smem(dev: &Arc<CudaDevice>, block: u32, entry: &str, grid: (u32, u32), p: &FcParams, name: &'static str, smem: usize) -> Result<()> {
    launch_smem_threads(dev, block, block, entry, grid, p, name, smem)
}

/// As `launch_smem` with a CTA of `threads` threads for a kernel of the module built for `block`.
#[allow(clippy::too_many_arguments)]
fn launch_smem_threads(dev: &Arc<CudaDevice>, block: u32, threads: u32, entry: &str, grid: (u32, u32), p: &FcParams, name: &'static str, smem: usize) -> Result<()> {
    if grid.1 > 65535 {
        return Err(too_large(format!("{entry}: {} heads in one launch", grid.1)));
    }
    let f = dev.function(&SOURCE, &options(block), entry)?;
    if smem > 48 * 1024 {
        dev.set_max_dynamic_smem(&f, smem)?;
    }
    let cfg = LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 };
    dev.launch(&f, cfg).arg(p).named(name).dependent_if(launch_pdl()).run()
}

/// Whether the op's kernels are programmatic dependent launches: each waits for the kernel before
/// it on the stream as its first statement (`ember_grid_dependency_wait` at the top of every
/// `FcParams` kernel) and none lets its dependents start early, so only a launch overlaps the end of
/// the kernel before it. (Triggering dependents at the top of every kernel, tried before, measured
/// up to 6.5 % slower: NOTES "Programmatic dependent launch".) On by default;
/// `EMBER_FFTCONV_PDL=0` (or `EMBER_PDL=0`) launches in order.
fn launch_pdl() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| ember_core::knob("EMBER_FFTCONV_PDL") != Some("0"))
}

/// The twiddle tables (see fft.cuh), once per device.
fn twiddles(dev: &Arc<CudaDevice>) -> Result<u64> {
    static TABLES: OnceLock<Mutex<HashMap<usize, Tensor>>> = OnceLock::new();
    let ord = dev.info().ordinal;
    let mut tables = TABLES.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap();
    if let Some(t) = tables.get(&ord) {
        return t.cuda_ptr();
    }
    // FC_TW_TOTAL complex values (the flat table, the per-pass tables, the pair kernels' N = 8192
    // … 131072 and the mixed-radix N = 10240 … 57344), then the tensor-core kernels'
    // per-lane table (40 words × 32 lanes).
    const TOTAL: usize = (2 << 15) + 8192 + 16384 + 32768 + 65536 + 131072 + 10240 + 12288 + 14336 + 20480 + 24576 + 28672 + 40960 + 49152 + 57344;
    let t = Tensor::zeros(&[2 * TOTAL + 40 * 32], DType::F32, Device::Cuda(ord))?;
    let f = dev.function(&SOURCE, &options(256), "fc_twiddles")?;
    let ptr = t.cuda_ptr()?;
    dev.launch(&f, ember_core::cuda::cfg_1d(TOTAL.div_ceil(256) as u32, 256, 0)).arg(&ptr).named("fc_twiddles").run()?;
    let f = dev.function(&SOURCE, &options(256), "fc_tc_table")?;
    dev.launch(&f, ember_core::cuda::cfg_1d(1, 32, 0)).arg(&ptr).named("fc_tc_table").run()?;
    tables.insert(ord, t);
    Ok(ptr)
}

fn ptr(t: Option<&Tensor>) -> Result<u64> {
    t.map(|t| t.cuda_ptr()).transpose().map(|p| p.unwrap_or(0))
}

fn type_suffix(u: DType, out: DType) -> Result<&'static str> {
    Ok(match (u, out) {
        (DType::F32, DType::F32) => "f32_f32",
        (DType::F16, DType::F16) => "f16_f16",
        (DType::F16, DType::F32) => "f16_f32",
        (DType::BF16, DType::BF16) => "bf16_bf16",
        (DType::BF16, DType::F32) => "bf16_f32",
        (u, o) => return Err(Error::Unsupported(format!("fftconv with u in {u} and output in {o}"))),
    })
}

/// Parameters common to every launch of a call.
fn base_params(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, path: Path, tw: u64) -> Result<FcParams> {
    let i32_of = |v: usize, what: &str| i32::try_from(v).map_err(|_| too_large(format!("{what} = {v} exceeds 2^31 − 1")));
    let (logm1, logm2) = match path {
        Path::OnChip { .. } | Path::PairMixed { .. } => (0, 0),
        Path::FourStep { logm1, logm2, .. } => (logm1 as i32, logm2 as i32),
    };
    Ok(FcParams {
        u: u.cuda_ptr()?,
        pre: ptr(opts.pregate)?,
        post: ptr(opts.postgate)?,
        mask: ptr(opts.dropout_mask)?,
        k: k.cuda_ptr()?,
        krev: ptr(opts.k_rev)?,
        dd: ptr(d)?,
        tw,
        b: dims.b as i64,
        h: dims.h as i64,
        l: dims.l as i64,
        hd: dims.hd as i32,
        heads: i32_of(dims.heads(), "H")?,
        lk: i32_of(dims.lk, "Lk")?,
        lkr: i32_of(dims.lk_rev, "Lkr")?,
        logm: path.logm() as i32,
        logm1,
        logm2,
        gelu: opts.gelu as i32,
        need_z: (opts.gelu || opts.postgate.is_some()) as i32,
        has_pre: opts.pregate.is_some() as i32,
        has_post: opts.postgate.is_some() as i32,
        has_mask: opts.dropout_mask.is_some() as i32,
        ..FcParams::default()
    })
}

impl FcParams {
    /// A round of launches over heads h0 .. h0 + nh (rows per head `rph`).
    fn set_head_round(&mut self, h0: usize, nh: usize, rph: usize) {
        self.head0 = h0 as i32;
        self.nheads = nh as i32;
        self.row0 = (h0 * rph) as i64;
        self.nrows = (nh * rph) as i64;
    }
}

/// An f32 workspace of `elems` values. Its contents are unspecified (NaN when output poisoning is
/// on, so a kernel that reads a value no kernel wrote fails the tests).
fn workspace(dev: Device, elems: usize) -> Result<Tensor> {
    Tensor::output(&[elems.max(1)], DType::F32, dev)
}

/// Heads per chunk so that `bytes_per_head` × heads stays within the budget.
fn heads_per_chunk(heads: usize, bytes_per_head: usize) -> usize {
    (WORKSPACE_BUDGET / bytes_per_head.max(1)).clamp(1, heads).min(65535)
}

/// Bytes of four-step intermediates one round of launches may keep live: 512 MiB
/// (`EMBER_FFTCONV_CHUNK_MB` overrides, for measurements). Rounds used to be sized to half the L2
/// so that pass 2 and 3 would read pass 1's output from L2, but such rounds hold a few rows only
/// (L = 2^20: 3 rows, a row pass of 192 one-per-SM CTAs, 1.45 waves) and the backward's rounds a few
/// heads, so every launch ran part-empty: on an H200, L = 65536 (B = 4, H = 256) fwd+bwd took
/// 15.6 ms with L2-sized rounds and 8.8 ms with 480 MB ones (2000 MB: 8.5 ms); L = 2^20 fwd+bwd
/// 17.3 → 10.9 ms. The passes are bound by their arithmetic and latency, not by the intermediates'
/// HBM traffic, so a full GPU beats an L2-resident round. 2 GiB bounds a call's four-step
/// workspaces to about that much (512 MiB before: rounds of 2048 instead of 512 MiB took fwd+bwd at
/// L = 65536 and 2^20 −1.5 %, L = 2^22 −3 % on an H200, NOTES.md "Four-step rounds"); on devices
/// with less than 64 GiB the bound is 1/32 of the memory (never under half the L2), so a call never
/// takes a large share of a small GPU.
/// `Options::four_step_round_bytes` overrides both.
fn round_bytes(dev: &CudaDevice, opts: &Options) -> usize {
    if let Some(bytes) = opts.four_step_round_bytes {
        return bytes.max(1);
    }
    match ember_core::knob("EMBER_FFTCONV_CHUNK_MB").and_then(|v| v.parse::<usize>().ok()) {
        Some(mb) => mb << 20,
        None => {
            let info = dev.info();
            let half_l2 = (info.l2_bytes.max(1 << 20) as usize) / 2;
            (info.total_memory / 32).min(2048 << 20).max(half_l2)
        }
    }
}

// ---- filter spectrum -----------------------------------------------------------------------------

fn spectrum(dev: &Arc<CudaDevice>, base: &FcParams, opts: &Options, dims: Dims, path: Path) -> Result<Spectrum> {
    let heads = dims.heads();
    if let Path::PairMixed { p: pm } = path {
        // The pair layout at N = 256·P: all N bins per head in fragment order, then one scale per
        // head; fc_spec_pairq{P/2}: one head per CTA of 512 threads, every bin and scale written;
        // fc_spec_pairm{P} (P ≥ 80): one head per cluster of 2 or 4 such CTAs.
        let n = 256 * pm as usize;
        let spec = Tensor::output(&[heads * (2 * n + 1)], DType::F32, Device::Cuda(dev.info().ordinal))?;
        let mut p = *base;
        p.spec = spec.cuda_ptr()?;
        if pm > 56 {
            let grid = grid_u32(heads * mixed_cluster_ctas(pm), "spectrum")?;
            launch_smem_threads(dev, 256, 512, &format!("fc_spec_pairm{pm}"), (grid, 1), &p, "fc_spec_pairm", smem_bytes_pair(7, 0))?;
        } else {
            launch_smem_threads(dev, 256, 512, &format!("fc_spec_pairq{}", pm / 2), (grid_u32(heads, "spectrum")?, 1), &p, "fc_spec_pairq", smem_bytes_mixed(pm))?;
        }
        return Ok(Spectrum { spec, path });
    }
    let m = 1usize << path.logm();
    // Per head: bins 0..=M (natural or TC order), or all 2M bins then one scale per head (pair
    // forward).
    let pair = matches!(path, Path::OnChip { pair: true, .. });
    let floats = if pair { heads * (4 * m + 1) } else { heads * 2 * (m + 1) };
    // Every layout is written whole by the kernels below: the pair layout every bin and scale of every
    // head, the others bins 0..=M of every head (fc_spectrum: k and M − k for every k ≤ M/2 in natural
    // or TC order; fc_row_spectrum the same pairs). So no zero fill first, which at L = 2^20 (H = 64)
    // was a 512 MB memset in every forward (NOTES.md, "v21c").
    let spec = Tensor::output(&[floats], DType::F32, Device::Cuda(dev.info().ordinal))?;
    let mut p = *base;
    p.spec = spec.cuda_ptr()?;
    match path {
        Path::OnChip { logm, pair: true, .. } if use_pair_spectrum(opts) => {
            // fc_spec_pair*: 32/P heads per CTA of 256 threads; P = 64 one per CTA of 512; P = 128
            // one per cluster of two CTAs of 512.
            let logp = logm - 7;
            let (grid, threads) = match logp {
                6 => (heads, 512),
                7.. => (heads << (logp - 6), 512),  // clusters of 2, 4, 8 CTAs
                _ => (heads.div_ceil(spec_group(logp)), 256),
            };
            let entry = format!("fc_spec_pair{logp}{}", group_suffix(logp, spec_group(logp)));
            launch_smem_threads(dev, 256, threads, &entry, (grid_u32(grid, "spectrum")?, 1), &p, "fc_spec_pair", smem_bytes_pair(logp, 0))?;
        }
        Path::OnChip { logm, block, tc, pair } => {
            let lanes = (PER_THREAD * block as usize) >> logm;
            p.nheads = heads as i32;
            p.tc = if pair { 2 } else { tc as i32 };
            launch(dev, block, "fc_spectrum", (grid_u32(heads.div_ceil(lanes), "spectrum")?, 1), &p, "fc_spectrum")?;
        }
        Path::PairMixed { .. } => unreachable!("handled above"),
        Path::FourStep { logm1, logm2, col_block, row_block } => {
            let chunk = heads_per_chunk(heads, m * 8).min((round_bytes(dev, opts) / (m * 8)).max(1));
            let tbuf = workspace(Device::Cuda(dev.info().ordinal), 2 * chunk * m)?;
            p.tbuf = tbuf.cuda_ptr()?;
            for h0 in (0..heads).step_by(chunk) {
                let nh = chunk.min(heads - h0);
                p.head0 = h0 as i32;
                p.nheads = nh as i32;
                p.nrows = nh as i64;
                let tiles = four_step_tiles(logm1, logm2, col_block);
                launch(dev, col_block, "fc_col_filter_k", (grid_u32(nh * tiles, "spectrum")?, 1), &p, "fc_col_filter")?;
                let jobs = nh << (logm1 - 1);
                launch(dev, row_block, "fc_row_spectrum", (grid_u32(jobs.div_ceil(pairs_per_cta(logm2, row_block)), "spectrum")?, 1), &p, "fc_row_spectrum")?;
            }
        }
    }
    Ok(Spectrum { spec, path })
}

/// Whether the small-P spectrum and backward take their narrow groups (`spec_group`,
/// `bwd_slot_group`); `EMBER_FFTCONV_NARROW=0` returns to 32 segments per CTA (measurements).
fn narrow_groups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| ember_core::knob("EMBER_FFTCONV_NARROW") != Some("0"))
}

/// Heads per CTA of 256 threads of the pair spectrum (fc_spec_pair*) at P = 2^logp ≤ 32. The
/// spectrum has only H heads: at 32/P heads per CTA (32 DFT-256 segments) small P leaves most SMs
/// idle (L = 256: 48 CTAs for 768 heads, 15–17 µs). Measured on an H200 (B = 16, H = 768, NOTES.md
/// v10): 8 segments per CTA at P ≤ 4 (L = 256 fwd −18 %, L = 512 −9 %), 16 at P = 8 (−3.5 %),
/// 32 from P = 16 (one head per CTA there measured 1 % slower).
pub(super) fn spec_group(logp: u32) -> usize {
    match logp {
        1 if narrow_groups() => 4,
        2 | 3 if narrow_groups() => 2,
        _ => (32usize >> logp.min(5)).max(1),
    }
}

/// Pair slots per CTA of 256 threads of the pair backward at P = 2^logp ≤ 32: 16 segments per CTA
/// at P ≤ 4 (L = 256 fwd+bwd −5 %, the backward alone ~8 %: 768 instead of 384 CTAs at two per SM,
/// 2.9 waves instead of 1.45), 32 above (narrow groups measured 4–7 % slower from P = 8). The
/// slot's partial is tbuf's entry blockIdx.x·R + r whatever R is, so at equal pairs per slot the
/// bits are the wide kernel's; `pair_bwd_chunk` sees the group size, though, and may pick another
/// chunk (B = 16, H = 768, L = 500: 2 pairs per slot instead of 1), which sums d_k in another (still
/// fixed) order.
pub(super) fn bwd_slot_group(logp: u32) -> usize {
    match logp {
        1 if narrow_groups() => 8,
        2 if narrow_groups() => 4,
        _ => (32usize >> logp.min(5)).max(1),
    }
}

/// The entry-name suffix of a pair kernel taking `r` heads or slots per CTA at P = 2^logp: none for
/// the wide group (32/P, and every P ≥ 64), `g{r}` for the narrow ones (FC_SPEC_PAIR_NARROW,
/// FC_BWD_PAIR_NARROW).
fn group_suffix(logp: u32, r: usize) -> String {
    if logp <= 5 && r != 32 >> logp { format!("g{r}") } else { String::new() }
}

/// Whether the pair kernels' filter spectrum runs on their own engine (fc_spec_pair*, pair_spec.cuh):
/// without k_rev (its lags N − m would need the full-length stage 1), unless
/// `EMBER_FFTCONV_PAIR_SPEC=0` (fc_spectrum's v2 transform, to compare).
fn use_pair_spectrum(opts: &Options) -> bool {
    let off = ember_core::knob("EMBER_FFTCONV_PAIR_SPEC") == Some("0");
    !off && opts.k_rev.is_none()
}

/// Column tiles per row of the four-step column passes.
fn four_step_tiles(logm1: u32, logm2: u32, col_block: u32) -> usize {
    let cols_per_tile = (PER_THREAD * col_block as usize) >> logm1;
    (1usize << logm2) / cols_per_tile
}

/// Row-pair jobs per CTA of the row pass.
fn pairs_per_cta(logm2: u32, row_block: u32) -> usize {
    (PER_THREAD * row_block as usize) >> (logm2 + 1)
}

// ---- forward -------------------------------------------------------------------------------------

/// Whether a training forward keeps z for the backward (`path`: the backward's), where the backward
/// needs z at all (GELU or a postgate) and reads it instead of recomputing it: the pair kernels
/// (bf16, hd = 1, on chip) from P = 2^[`SAVE_Z_MIN_LOGP`], and the four-step path at hd = 1 in
/// every dtype (its backward then skips one inverse row FFT and one inverse column FFT of every
/// row; NOTES.md, "v20"; `EMBER_FFTCONV_FOUR_STEP_Z=0` recomputes there). The forward writes z
/// only on these paths: the caller checks that its own path is the pair or the four-step one.
fn saves_z(u: DType, opts: &Options, path: Path, dims: &Dims, clusters: bool) -> bool {
    let needed = opts.training && (opts.gelu || opts.postgate.is_some());
    let pair = path.logm() >= SAVE_Z_MIN_LOGP + 7 && use_pair_bwd(u, opts, path, dims, clusters);
    let four = matches!(path, Path::FourStep { .. }) && dims.hd == 1 && ember_core::knob("EMBER_FFTCONV_FOUR_STEP_Z") != Some("0");
    needed && (pair || four)
}

/// Whether a training forward on the four-step path (both passes four-step, hd = 1) keeps 2W, the
/// spectrum of every row of v, for the backward (`path`: the backward's): 8 bytes per bin, M + 1
/// bins per row — for L a power of two 8·(L + 1) bytes per row, what PyTorch's autograd keeps of
/// rfft(u, 2L) for the same layer. The backward then skips its first column pass and its saving
/// row pass (a column FFT and a row FFT of every row, and the intermediate's round trip; NOTES.md,
/// "v21"). Where the backward needs z it must have the forward's z too (else its saving pass
/// recomputes z from its own transform anyway). `EMBER_FFTCONV_FOUR_STEP_W=0` recomputes.
fn saves_w(u: DType, opts: &Options, path: Path, dims: &Dims, clusters: bool) -> bool {
    let z_ok = !(opts.gelu || opts.postgate.is_some()) || saves_z(u, opts, path, dims, clusters);
    let four = matches!(path, Path::FourStep { .. }) && dims.hd == 1 && ember_core::knob("EMBER_FFTCONV_FOUR_STEP_W") != Some("0");
    opts.training && four && z_ok
}

/// log2 P from which the training forward saves z (the pair kernels' complex length P·256 = the
/// real FFT size N: N ≥ 8192). Measured on an H200 (B = 16, H = 768, GELU and D, fwd+bwd, saved z
/// against recomputed, same runs): L = 4096 (P = 32) 1.645 → 1.368 ms, L = 5000 (P = 64) 4.14 →
/// 3.64 ms, but L = 2048 (P = 16) 0.695 → 0.739, L = 1024 (P = 8) 0.390 → 0.396 and L = 256
/// (P = 2) 0.163 → 0.166: at small P the transforms are cheap and the backward's extra read of z
/// and the forward's extra write cost more than they save.
const SAVE_Z_MIN_LOGP: u32 = 5;

// ---- direct forward (direct.cuh) -------------------------------------------------------------------

/// Longest L the direct forward takes by default. H200, B = 16, H = 768, GELU and D, same binary
/// with the FFT path (`bench/results/nvidia-h200/fftconv-direct/`), forward: v2 (one f16 product)
/// L = 256 44.1 → 21.9 µs, L = 512 60.9 → 40.7; v13 (two output tiles per warp) L = 512 35.2,
/// L = 1024 102.8 → 77.9 (fwd+bwd with the FFT backward 365 → 348), but L = 2048 191 → 212.
const DIRECT_MAX_L: usize = 1024;
/// Longest L the direct backward takes by default: at L = 1024 its shared memory (~195 KB) leaves one
/// CTA per SM, and direct both ways took 387 µs fwd+bwd against 348 with the FFT backward (v13).
const DIRECT_BWD_MAX_L: usize = 512;
/// Longest L it takes at all (`EMBER_FFTCONV_DIRECT=1`): its shared memory at Lk = Lkr = L.
const DIRECT_LIMIT_L: usize = 4096;
/// Warps per CTA of the direct forward (FD_WARPS), and its staging buffer (FD_ROWS × FD_WS f32 per warp).
const DIRECT_WARPS: usize = 8;
const DIRECT_STAGE_WORDS: usize = 16 * 20;

/// Whether the forward runs as a direct convolution on tensor cores (direct.cuh): bf16 u, hd = 1,
/// no pregate (v = u exactly in bf16), L ≤ [`DIRECT_MAX_L`]. `EMBER_FFTCONV_DIRECT=0` turns it
/// off, `=1` takes it wherever it can run, for measurements: up to [`DIRECT_LIMIT_L`] and below the
/// FFT sizes where a training forward saves z for the pair backward (N < 8192), so that a training
/// forward and a plain one take the same path and give the same bits.
pub(super) fn use_direct(u: DType, opts: &Options, dims: &Dims) -> bool {
    let no_saved_z = dims.fft_size() < 2 << (SAVE_Z_MIN_LOGP + 7);
    let able = u == DType::BF16 && dims.hd == 1 && opts.pregate.is_none() && !opts.force_four_step && !opts.tensor_cores && dims.l <= DIRECT_LIMIT_L && no_saved_z;
    match direct_knob() {
        Some(false) => false,
        Some(true) => able,
        None => able && dims.l <= DIRECT_MAX_L,
    }
}

/// `EMBER_FFTCONV_DIRECT`, read once per process (the rules run on every call).
fn direct_knob() -> Option<bool> {
    static KNOB: OnceLock<Option<bool>> = OnceLock::new();
    *KNOB.get_or_init(|| match ember_core::knob("EMBER_FFTCONV_DIRECT") {
        Some("0") => Some(false),
        Some("1") => Some(true),
        _ => None,
    })
}

/// Dynamic shared memory of the direct forward: 16 rows of u (16·⌈L/16⌉ + 8 halves each), the
/// filter's 64-bit pair table over [dmin − 32, dmax + 32] and its taps (one more), and each warp's
/// staging tile.
fn direct_smem(dims: &Dims) -> usize {
    let vstride = 16 * dims.l.div_ceil(16) + 8;
    let npw = (dims.lk - 1) + dims.lk_rev.saturating_sub(1) + 65;
    16 * vstride * 2 + npw * 8 + (npw + 1) * 4 + DIRECT_WARPS * DIRECT_STAGE_WORDS * 4
}

fn forward_direct(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims) -> Result<Tensor> {
    let dev = u.cuda_device()?.clone();
    let path = plan(&dims, false);
    let mut p = base_params(u, k, d, opts, dims, path, 0)?;
    let out_dt = super::out_dtype(u.dtype(), opts);
    let out = Tensor::output(u.shape(), out_dt, u.device())?;
    p.out = out.cuda_ptr()?;
    let ctas = dims.heads() * dims.b.div_ceil(16);
    let entry = format!("fc_fwd_direct_{}", type_suffix(u.dtype(), out_dt)?);
    launch_smem_threads(&dev, 256, (DIRECT_WARPS * 32) as u32, &entry, (grid_u32(ctas, "forward")?, 1), &p, "fc_fwd_direct", direct_smem(&dims))?;
    Ok(out)
}

/// Whether the backward of a direct-forward case runs direct too (direct_bwd.cuh): up to
/// [`DIRECT_BWD_MAX_L`] (with `EMBER_FFTCONV_DIRECT=1`, wherever its shared memory fits one CTA);
/// beyond, the FFT backward computes the filter spectrum itself. `EMBER_FFTCONV_DIRECT_BWD=0` keeps
/// the FFT backward, for measurements.
pub(super) fn use_direct_bwd(dev: &CudaDevice, u: DType, opts: &Options, dims: &Dims) -> bool {
    static KNOB: OnceLock<bool> = OnceLock::new();
    let on = *KNOB.get_or_init(|| ember_core::knob("EMBER_FFTCONV_DIRECT_BWD") != Some("0"));
    let short = dims.l <= DIRECT_BWD_MAX_L || direct_knob() == Some(true);
    on && short && use_direct(u, opts, dims) && direct_bwd_smem(dims) <= dev.info().shared_memory_per_block_optin.max(0) as usize
}

/// Dynamic shared memory of the direct backward (`FdbGeom` in direct_bwd.cuh): v, d_z for d_u and
/// d_z for the filter gradient (16 rows of 16·⌈L/16⌉ + 8 halves each), the filter's pair words both
/// ways, the f32 d_z / d_u staging (the taps first) (16 rows of 16·⌈L/16⌉ + 4), the filter-gradient
/// tiles' diagonal sums (32 per tile offset) and each warp's 16 × 17 staging tile.
fn direct_bwd_smem(dims: &Dims) -> usize {
    let tt = dims.l.div_ceil(16) as i64;
    let vstride = 16 * tt + 8;
    let dmin = -(dims.lk_rev.saturating_sub(1) as i64);
    let dmax = dims.lk as i64 - 1;
    let npw = dmax - dmin + 65;
    // The taps live in the d_z staging's space (read before it is written).
    let dzf_off = (3 * 16 * vstride * 2 + 2 * npw * 4 + 15) & !15;
    let acc_off = dzf_off + 16 * (16 * tt + 4) * 4;
    // Tile offsets P from ⌈(dmin − 15)/16⌉ to ⌊(dmax + 15)/16⌋.
    let np = (dmax + 15).div_euclid(16) + (15 - dmin).div_euclid(16) + 1;
    (acc_off + np * 32 * 4 + DIRECT_WARPS as i64 * 16 * 17 * 4) as usize
}

/// The direct backward: one launch of 16-row CTAs, plus the filter gradients' sum over CTAs where a
/// head has more than 16 rows.
fn backward_direct(dev: &Arc<CudaDevice>, u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, d_out: &Tensor) -> Result<Grads> {
    let path = plan(&dims, false);
    let mut p = base_params(u, k, d, opts, dims, path, 0)?;
    let devc = u.device();
    let dt = u.dtype();
    let heads = dims.heads();
    let grads = grad_outputs(u, d, opts, dims, d_out, &mut p)?;
    let parts = dims.b.div_ceil(16);
    let ndiag = dims.lk + dims.lk_rev.max(1) - 1;
    let partials = if parts > 1 { Some(workspace(devc, heads * parts * ndiag)?) } else { None };
    p.sbuf = ptr(partials.as_ref())?;
    let entry = format!("fc_bwd_direct{}{}_{}", opts.gelu as u8, opts.postgate.is_some() as u8, type_suffix(dt, d_out.dtype())?);
    launch_smem_threads(dev, 256, (DIRECT_WARPS * 32) as u32, &entry, (grid_u32(heads * parts, "backward")?, 1), &p, "fc_bwd_direct", direct_bwd_smem(&dims))?;
    if parts > 1 {
        launch_smem(dev, 256, "fc_dk_direct", (grid_u32((heads * ndiag).div_ceil(256), "backward")?, 1), &p, "fc_dk_direct", 0)?;
    }
    Ok(grads)
}

/// The backward's outputs (d_u and the gate gradients in u's dtype, the filter gradients in f32),
/// their pointers and d_out's set in `p`.
fn grad_outputs(u: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, d_out: &Tensor, p: &mut FcParams) -> Result<Grads> {
    let devc = u.device();
    let dt = u.dtype();
    let heads = dims.heads();
    let like_u = || Tensor::output(u.shape(), dt, devc);
    let g = Grads {
        d_u: like_u()?,
        d_pregate: opts.pregate.map(|_| like_u()).transpose()?,
        d_postgate: opts.postgate.map(|_| like_u()).transpose()?,
        d_k: Tensor::output(&[heads, dims.lk], DType::F32, devc)?,
        d_k_rev: opts.k_rev.map(|_| Tensor::output(&[heads, dims.lk_rev], DType::F32, devc)).transpose()?,
        d_d: d.map(|_| Tensor::output(&[heads], DType::F32, devc)).transpose()?,
    };
    p.dout = d_out.cuda_ptr()?;
    p.du = g.d_u.cuda_ptr()?;
    p.dpre = ptr(g.d_pregate.as_ref())?;
    p.dpost = ptr(g.d_postgate.as_ref())?;
    p.dk = g.d_k.cuda_ptr()?;
    p.dkrev = ptr(g.d_k_rev.as_ref())?;
    p.ddd = ptr(g.d_d.as_ref())?;
    Ok(g)
}

/// The output, the filter spectrum (reused by the backward; none from the direct forward) and, for
/// a training forward, what [`Kept`] says: z where [`saves_z`] (u's dtype, u's shape), the rows'
/// spectra where [`saves_w`].
pub fn forward(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims) -> Result<(Tensor, Option<Spectrum>, Kept)> {
    let dev = u.cuda_device()?.clone();
    let clusters = has_clusters(&dev);
    if use_direct(u.dtype(), opts, &dims) {
        return Ok((forward_direct(u, k, d, opts, dims)?, None, Kept::default()));
    }
    let (path, mixed, want_pair) = forward_path(u, opts, &dims, clusters)?;
    let tw = twiddles(&dev)?;
    let mut p = base_params(u, k, d, opts, dims, path, tw)?;
    let spec = spectrum(&dev, &p, opts, dims, path)?;
    p.spec = spec.spec.cuda_ptr()?;
    let out_dt = super::out_dtype(u.dtype(), opts);
    let out = Tensor::output(u.shape(), out_dt, u.device())?;
    p.out = out.cuda_ptr()?;
    // z is kept for the backward's path: after a mixed-radix forward, and after the cluster forward
    // (pair_big) the power-of-two plan's — the four-step one from N = 65536 on (the cluster forward's
    // epilogue writes z as the on-chip pair forward's does). The cluster backward (cluster_bwd), which
    // runs in place of the planned pair or four-step backward, reads the z they keep.
    let planned = plan(&dims, opts.force_four_step);
    let z_path = if mixed.is_some() || matches!(planned, Path::FourStep { .. }) { planned } else { path };
    // The pair forward writes z for the pair backward, the four-step forward for the four-step one.
    let writes_z = want_pair || matches!(path, Path::FourStep { .. });
    let z = if writes_z && saves_z(u.dtype(), opts, z_path, &dims, clusters) { Some(Tensor::output(u.shape(), u.dtype(), u.device())?) } else { None };
    p.zs = ptr(z.as_ref())?;
    // z through the output's staging copy in the cluster forwards with staged u (P = 80, 96, 112,
    // 160 … 256) as at 512 (NOTES.md "v22b", "v24c"); `EMBER_FFTCONV_STAGE_Z=0` stores it directly there
    // (measurements).
    p.zstage = (ember_core::knob("EMBER_FFTCONV_STAGE_Z") != Some("0")) as i32;
    let sfx = type_suffix(u.dtype(), out_dt)?;
    let m = 1usize << path.logm();
    let heads = dims.heads();
    let rph = dims.b * dims.hd * dims.hd;
    // The four-step forward's row pass stores 2W where the backward will read it (its path is this one).
    let w = if matches!(path, Path::FourStep { .. }) && saves_w(u.dtype(), opts, z_path, &dims, clusters) {
        Some(RowSpectra { w: workspace(u.device(), heads * rph * (m + 1) * 2)?, path })
    } else {
        None
    };
    let devc = u.device();
    let four = matches!(path, Path::FourStep { .. });
    // Rounds of launches: with hd = 1 any range of rows; with hd > 1 whole heads (the mixing
    // kernel sums a head's rows). Four-step rounds are bounded by `round_bytes`.
    let (unit, per_unit) = if dims.hd == 1 { (1, 1) } else { (rph, rph) };
    let units = heads * rph / unit;
    let mut chunk = heads_per_chunk(units, per_unit * (if dims.hd > 1 { dims.l * 4 } else { 0 } + if four { m * 8 } else { 0 }));
    if four {
        chunk = chunk.min((round_bytes(&dev, opts) / (per_unit * m * 8)).max(1));
    }
    if dims.hd == 1 && !four {
        chunk = units;  // one launch, no workspace
    }
    let wsa = if dims.hd > 1 { Some(workspace(devc, chunk * per_unit * dims.l)?) } else { None };
    let tbuf = if four { Some(workspace(devc, 2 * chunk * per_unit * m)?) } else { None };
    p.wsa = ptr(wsa.as_ref())?;
    p.tbuf = ptr(tbuf.as_ref())?;
    for c0 in (0..units).step_by(chunk) {
        let nu = chunk.min(units - c0);
        let nrows = nu * unit;
        p.row0 = (c0 * unit) as i64;
        p.nrows = nrows as i64;
        if let Some(w) = &w {
            p.vbuf = row_spectra_at(w, p.row0, m)?;
        }
        // Heads of this round (used by the mixing kernel; exact when hd > 1).
        p.head0 = (c0 * unit / rph) as i32;
        p.nheads = nrows.div_ceil(rph) as i32;
        match path {
            Path::OnChip { logm, pair: true, .. } => {
                // Row pairs per head ⌈rph/2⌉ (nrows is whole heads here), 32/P pairs per CTA.
                let logp = logm - 7;
                let pairs = (nrows / rph) * rph.div_ceil(2);
                // P ≤ 32: 32/P pairs per CTA of 256 threads; P = 64: one pair per CTA of 512;
                // P = 64·CS ≥ 128: one pair per cluster of CS CTAs of 512 (consecutive CTAs).
                let (per_cta, threads) = if logp >= 6 { (1, 512) } else { (32 >> logp, 256) };
                let groups = pairs.div_ceil(per_cta) << logp.saturating_sub(6);
                let prefetch = use_pair_prefetch(logp, u, opts, &dims)?;
                let stage_u = use_pair_stage_u(logp, true, u, opts, &dims)?;
                let entry = if prefetch || stage_u { format!("fc_fwd_pair_staged{logp}_{sfx}") } else { format!("fc_fwd_pair{logp}_{sfx}") };
                // Staged u (P = 32): 2 rows per pair, the first P/2·256 elements of each (P·256
                // where L > N/2), 32/P pairs: 8192 or 16384 bf16.
                let p_len = 1usize << logp;
                let nin = if dims.l <= p_len << 7 { p_len / 2 } else { p_len };
                let smem = smem_bytes_pair(logp, if prefetch { 2 * per_cta * nin * 256 } else if stage_u { PAIR_STAGE_U_ELEMS } else { 0 });
                // Persistent with the prefetch: as many CTAs as fit at once, never more than groups.
                let grid_x = if prefetch {
                    let f = dev.function(&SOURCE, &options(256), &entry)?;
                    dev.set_max_dynamic_smem(&f, smem)?;
                    let occ = f.occupancy_max_active_blocks_per_multiprocessor(threads, smem, None).map_err(|e| Error::cuda("occupancy query", e))?;
                    let sms = dev.info().multiprocessors.max(1) as usize;
                    groups.min(sms * (occ as usize).max(1))
                } else {
                    groups
                };
                launch_smem_threads(&dev, 256, threads, &entry, (grid_u32(grid_x, "forward")?, 1), &p, "fc_fwd_pair", smem)?;
            }
            Path::PairMixed { p: pm } if pm > 56 => {
                // One row pair per cluster of 2 or 4 CTAs of 512 threads (fc_fwd_pairm{P} with u staged,
                // fc_fwd_pairmd{P} with direct loads), ⌈rph/2⌉ pairs per head; the shared memory of the
                // power-of-two cluster forward.
                let pairs = (nrows / rph) * rph.div_ceil(2);
                let grid = grid_u32(pairs * mixed_cluster_ctas(pm), "forward")?;
                let staged = use_pair_stage_u(7, true, u, opts, &dims)?;
                let (entry, smem) = if staged { (format!("fc_fwd_pairm{pm}_{sfx}"), smem_bytes_pair(7, PAIR_STAGE_U_ELEMS)) } else { (format!("fc_fwd_pairmd{pm}_{sfx}"), smem_bytes_pair(7, 0)) };
                launch_smem_threads(&dev, 256, 512, &entry, (grid, 1), &p, "fc_fwd_pairm", smem)?;
            }
            Path::PairMixed { p: pm } => {
                // One row pair per CTA of 512 threads (pair_mixed.cuh), ⌈rph/2⌉ pairs per head.
                let pairs = (nrows / rph) * rph.div_ceil(2);
                // P = 40, 48: 256 threads, two columns per thread pair, two CTAs per SM
                // (fc_fwd_pairq{Q}n, `mixed_narrow`); else 512 threads.
                let narrow = pm <= 48 && mixed_narrow();
                let entry = format!("fc_fwd_pairq{}{}_{sfx}", pm / 2, if narrow { "n" } else { "" });
                launch_smem_threads(&dev, 256, if narrow { 256 } else { 512 }, &entry, (grid_u32(pairs, "forward")?, 1), &p, "fc_fwd_pairq", smem_bytes_mixed(pm))?;
            }
            Path::OnChip { logm, block, tc, .. } => {
                let lanes = (PER_THREAD * block as usize) >> logm;
                let grid = (grid_u32(nrows.div_ceil(lanes), "forward")?, 1);
                if tc {
                    launch_smem(&dev, block, &format!("fc_fwd_tc_{sfx}"), grid, &p, "fc_fwd_tc", smem_bytes_tc(block))?;
                } else {
                    launch(&dev, block, &format!("fc_fwd_{sfx}"), grid, &p, "fc_fwd")?;
                }
            }
            Path::FourStep { logm1, logm2, col_block, row_block } => {
                let tiles = four_step_tiles(logm1, logm2, col_block);
                let cols = grid_u32(nrows * tiles, "forward")?;
                launch(&dev, col_block, &format!("fc_col_data_{sfx}"), (cols, 1), &p, "fc_col_data")?;
                let jobs = nrows << (logm1 - 1);
                launch(&dev, row_block, "fc_row_conv", (grid_u32(jobs.div_ceil(pairs_per_cta(logm2, row_block)), "forward")?, 1), &p, "fc_row_conv")?;
                launch(&dev, col_block, &format!("fc_col_out_{sfx}"), (cols, 1), &p, "fc_col_out")?;
            }
        }
        if dims.hd > 1 {
            let total = dims.b * p.nheads as usize * dims.hd * dims.l;
            launch(&dev, 256, &format!("fc_mix_fwd_{sfx}"), (dev.grid_for(total, 256), 1), &p, "fc_mix_fwd")?;
        }
    }
    Ok((out, Some(spec), Kept { z, w }))
}

// ---- backward ------------------------------------------------------------------------------------

/// `kept`: what the training forward kept (see [`Kept`]); the pair and four-step backwards read z
/// instead of recomputing it (one of their four transforms), the four-step one the rows' spectra.
#[allow(clippy::too_many_arguments)]
pub fn backward(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options, dims: Dims, saved: Option<&Spectrum>, kept: &Kept, d_out: &Tensor) -> Result<Grads> {
    let z = kept.z.as_ref();
    let dev = u.cuda_device()?.clone();
    if use_direct_bwd(&dev, u.dtype(), opts, &dims) {
        return backward_direct(&dev, u, k, d, opts, dims, d_out);
    }
    let clusters = has_clusters(&dev);
    let mut path = plan(&dims, opts.force_four_step);
    if use_pair_bwd(u.dtype(), opts, path, &dims, clusters) {
        if let Path::OnChip { ref mut pair, .. } = path {
            *pair = true;
        }
        // The mixed-radix pair backward where the forward takes it (hd = 1 here).
        if let Some(pm) = mixed_p(u.dtype(), opts, &dims).filter(|&pm| pm <= MIXED_BWD_MAX_P && mixed_bwd()) {
            path = Path::PairMixed { p: pm };
        }
    }
    let cluster = cluster_bwd(u, opts, &dims, clusters)?;
    if let Some((forward_path, _)) = cluster {
        path = forward_path;
    }
    let tw = twiddles(&dev)?;
    let mut p = base_params(u, k, d, opts, dims, path, tw)?;
    let fresh;
    let spec = match saved {
        Some(s) if s.path == path => s,
        _ => {
            fresh = spectrum(&dev, &p, opts, dims, path)?;
            &fresh
        }
    };
    p.spec = spec.spec.cuda_ptr()?;
    let devc = u.device();
    let dt = u.dtype();
    let heads = dims.heads();
    let grads = grad_outputs(u, d, opts, dims, d_out, &mut p)?;
    let sfx = type_suffix(dt, d_out.dtype())?;
    let m = 1usize << path.logm();
    let rph = dims.b * dims.hd * dims.hd;
    let mix = dims.hd > 1;

    if let Some((_, pc)) = cluster {
        backward_cluster(&dev, &mut p, pc, u, opts, &dims, z, sfx)?;
        return Ok(grads);
    }
    match path {
        Path::PairMixed { p: pm } => {
            if let Some(z) = z {
                validate::like("z", z, devc, dt, u.shape(), "the shape of u")?;
                p.zs = z.cuda_ptr()?;
                p.need_z = 0;
            }
            // One pair slot per CTA of 512 threads (fc_bwd_pairq*), each a chunk of ppc of one head's
            // row pairs (every chunk nonempty), its partial one N-bin slot of tbuf; then the filter
            // gradient per head (fc_dk_pairq*: the fold, the inverse transform, d_k and d_D).
            let n = 256 * pm as usize;
            let sms = dev.info().multiprocessors.max(1) as usize;
            // A whole head per CTA where the heads alone fill two waves, as on the clusters: H200,
            // B = 16, H = 768, L = 5000 (P = 40, 8 pairs per head), fwd+bwd 1.93 ms at the model's 4
            // pairs per slot, 1.85 at 8 (NOTES.md "v24b"); at P = 48, 56 the model takes 8 already.
            let whole_heads = heads >= 2 * sms;
            let (parts, chunk, _tbuf) = one_slot_partials(devc, &mut p, heads, rph.div_ceil(2), sms, n, whole_heads)?;
            let q = pm / 2;
            let zsfx = if p.zs != 0 { "z" } else { "" };
            for h0 in (0..heads).step_by(chunk) {
                let nh = chunk.min(heads - h0);
                p.set_head_round(h0, nh, rph);
                p.parts = parts as i32;
                launch_smem_threads(&dev, 256, 512, &format!("fc_bwd_pairq{q}{zsfx}_{sfx}"), (grid_u32(nh * parts, "backward")?, 1), &p, "fc_bwd_pairq", smem_bytes_mixed_bwd(pm))?;
                launch_smem_threads(&dev, 256, 512, &format!("fc_dk_pairq{q}"), (grid_u32(nh, "backward")?, 1), &p, "fc_dk_pairq", smem_bytes_mixed(pm))?;
            }
        }
        Path::OnChip { logm, block, pair: true, .. } => {
            if let Some(z) = z {
                validate::like("z", z, devc, dt, u.shape(), "the shape of u")?;
                p.zs = z.cuda_ptr()?;
                p.need_z = 0;
            }
            // Pair slots (32/P per CTA of 256 threads; at P = 64 one per CTA of 512, at P = 128
            // one per cluster of two such CTAs), each a chunk of ppc of one head's row pairs
            // (every chunk nonempty).
            let logp = logm - 7;
            let n = 2 * m;
            let (slots_per_cta, ctas_per_sm, threads) = if logp >= 6 { (1, 1, 512) } else { (bwd_slot_group(logp), 2, 256) };
            let ctas_per_slot = if logp == 7 { 2 } else { 1 };
            let pph = rph.div_ceil(2);
            let sms = dev.info().multiprocessors.max(1) as usize / ctas_per_slot;
            let ppc = match ember_core::knob("EMBER_FFTCONV_PAIR_BWD_PPC").and_then(|v| v.parse::<usize>().ok()) {
                Some(c) => c.clamp(1, pph),
                None => pair_bwd_chunk(heads, pph, slots_per_cta, ctas_per_sm, sms, n),
            };
            let parts = pph.div_ceil(ppc);
            let chunk = heads_per_chunk(heads, parts * n * 8 + (m + 1) * 8);
            let tbuf = workspace(devc, 2 * chunk * parts * n)?;
            let sbuf = workspace(devc, 2 * chunk * (m + 1))?;
            p.tbuf = tbuf.cuda_ptr()?;
            p.sbuf = sbuf.cuda_ptr()?;
            let lanes = (PER_THREAD * block as usize) >> logm;
            for h0 in (0..heads).step_by(chunk) {
                let nh = chunk.min(heads - h0);
                p.set_head_round(h0, nh, rph);
                p.parts = parts as i32;
                let grid = grid_u32((nh * parts).div_ceil(slots_per_cta) * ctas_per_slot, "backward")?;
                // The `z` entries read the training forward's z (compiled without the recompute).
                let zsfx = if p.zs != 0 { "z" } else { "" };
                // P = 64, 128 with u staged by 16-byte loads (fc_bwd_pair_staged6/7*); at P = 128 a
                // bf16 d_out too, in two halves after the rest (FB_STG_OFF in pair_bwd.cuh; those
                // entries always stage it, so its rows must be 16-byte aligned as well).
                let dout_bf16 = logp == 7 && d_out.dtype() == DType::BF16;
                let staged = use_pair_stage_u(logp, false, u, opts, &dims)? && (!dout_bf16 || d_out.cuda_ptr()?.is_multiple_of(16));
                let stg = if staged { "_staged" } else { "" };
                let smem = if staged && dout_bf16 { smem_bytes_pair_bwd(logp).next_multiple_of(16) + PAIR_STAGE_DOUT_BYTES } else { smem_bytes_pair_bwd(logp) };
                let group = group_suffix(logp, slots_per_cta);
                launch_smem_threads(&dev, 256, threads, &format!("fc_bwd_pair{stg}{logp}{group}{zsfx}_{sfx}"), (grid, 1), &p, "fc_bwd_pair", smem)?;
                launch_smem(&dev, 256, "fc_dk_pair", (grid_u32((nh * (m + 1)).div_ceil(256), "backward")?, 1), &p, "fc_dk_pair", 0)?;
                // fc_dk reads the folded spectrum as a single partial per head.
                p.parts = 1;
                launch(&dev, block, "fc_dk", (grid_u32(nh.div_ceil(lanes), "backward")?, 1), &p, "fc_dk")?;
            }
        }
        Path::OnChip { logm, block, .. } => {
            let lanes = (PER_THREAD * block as usize) >> logm;
            // CTAs per head: enough CTAs in all to fill the device a few times over, no more
            // than the head has rows for.
            let sms = dev.info().multiprocessors.max(1) as usize;
            let per_sm = (2048 / block as usize).max(1);
            let target = 2 * sms * per_sm;
            let gx = target.div_ceil(heads).clamp(1, rph.div_ceil(lanes));
            let parts = gx * lanes;
            let per_head = 2 * parts * (m + 1) * 8 + if mix { 2 * rph * dims.l * 4 } else { 0 };
            let chunk = heads_per_chunk(heads, per_head);
            let sbuf = workspace(devc, 2 * chunk * parts * (m + 1))?;
            let vbuf = workspace(devc, 2 * chunk * parts * (m + 1))?;
            let wsa = if mix { Some(workspace(devc, chunk * rph * dims.l)?) } else { None };
            let wsb = if mix && opts.postgate.is_some() { Some(workspace(devc, chunk * rph * dims.l)?) } else { None };
            p.sbuf = sbuf.cuda_ptr()?;
            p.vbuf = vbuf.cuda_ptr()?;
            p.wsa = ptr(wsa.as_ref())?;
            p.wsb = ptr(wsb.as_ref())?;
            p.parts = parts as i32;
            for h0 in (0..heads).step_by(chunk) {
                let nh = chunk.min(heads - h0);
                p.set_head_round(h0, nh, rph);
                launch(&dev, block, &format!("fc_bwd_{sfx}"), (grid_u32(gx, "backward")?, nh as u32), &p, "fc_bwd")?;
                launch(&dev, block, "fc_dk", (grid_u32(nh.div_ceil(lanes), "backward")?, 1), &p, "fc_dk")?;
                if mix {
                    let total = dims.b * nh * dims.hd * dims.l;
                    launch(&dev, 256, &format!("fc_mix_bwd_{sfx}"), (dev.grid_for(total, 256), 1), &p, "fc_mix_bwd")?;
                }
            }
        }
        Path::FourStep { logm1, logm2, col_block, row_block } => {
            if let Some(z) = z {
                // The training forward's z: the saving pass and fc_col_dz skip its recomputation.
                validate::like("z", z, devc, dt, u.shape(), "the shape of u")?;
                p.zs = z.cuda_ptr()?;
                p.need_z = 0;
            }
            // The training forward's row spectra: with z not needed or read, the first column pass
            // and the saving row pass (which only write 2W then) have nothing left to do.
            let kept_w = kept.w.as_ref().filter(|w| w.path == path && p.need_z == 0);
            // T and the saved spectra per row; S per head; hd > 1 workspaces per row.
            let per_head = rph * (m * 8 + (m + 1) * 8) + (m + 1) * 8 + if mix { 2 * rph * dims.l * 4 } else { 0 };
            let chunk = heads_per_chunk(heads, per_head).min((round_bytes(&dev, opts) / (rph * m * 16)).max(1));
            let tbuf = workspace(devc, 2 * chunk * rph * m)?;
            let vbuf = if kept_w.is_none() { Some(workspace(devc, 2 * chunk * rph * (m + 1))?) } else { None };
            let sbuf = workspace(devc, 2 * chunk * (m + 1))?;
            let wsa = if mix { Some(workspace(devc, chunk * rph * dims.l)?) } else { None };
            let wsb = if mix && opts.postgate.is_some() { Some(workspace(devc, chunk * rph * dims.l)?) } else { None };
            p.tbuf = tbuf.cuda_ptr()?;
            p.vbuf = ptr(vbuf.as_ref())?;
            p.sbuf = sbuf.cuda_ptr()?;
            p.wsa = ptr(wsa.as_ref())?;
            p.wsb = ptr(wsb.as_ref())?;
            let tiles = four_step_tiles(logm1, logm2, col_block);
            let ppc = pairs_per_cta(logm2, row_block);
            for h0 in (0..heads).step_by(chunk) {
                let nh = chunk.min(heads - h0);
                let nrows = nh * rph;
                p.set_head_round(h0, nh, rph);
                let cols = grid_u32(nrows * tiles, "backward")?;
                let jobs_row = 1usize << (logm1 - 1);
                if let Some(w) = kept_w {
                    p.vbuf = row_spectra_at(w, p.row0, m)?;
                } else {
                    launch(&dev, col_block, &format!("fc_col_data_{sfx}"), (cols, 1), &p, "fc_col_data")?;
                    launch(&dev, row_block, "fc_row_save", (grid_u32((nrows * jobs_row).div_ceil(ppc), "backward")?, 1), &p, "fc_row_save")?;
                }
                launch(&dev, col_block, &format!("fc_col_dz_{sfx}"), (cols, 1), &p, "fc_col_dz")?;
                launch(&dev, row_block, "fc_row_corr", (grid_u32(jobs_row.div_ceil(ppc), "backward")?, nh as u32), &p, "fc_row_corr")?;
                launch(&dev, col_block, &format!("fc_col_dw_{sfx}"), (cols, 1), &p, "fc_col_dw")?;
                // Filter gradients: S → inverse four-step into T (one row per head).
                launch(&dev, row_block, "fc_row_dk", (grid_u32(jobs_row.div_ceil(ppc), "backward")?, nh as u32), &p, "fc_row_dk")?;
                launch(&dev, col_block, "fc_col_dk_k", (grid_u32(nh * tiles, "backward")?, 1), &p, "fc_col_dk")?;
                if mix {
                    let total = dims.b * nh * dims.hd * dims.l;
                    launch(&dev, 256, &format!("fc_mix_bwd_{sfx}"), (dev.grid_for(total, 256), 1), &p, "fc_mix_bwd")?;
                }
            }
        }
    }
    Ok(grads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct backward's shared memory: at L = 256 four CTAs fit an SM of 228 KB (with each
    /// CTA's static 388 B and the 1 KB the driver reserves), and the longest default length with a
    /// full-length anticausal filter fits one CTA's 227 KB.
    #[test]
    fn direct_backward_shared_memory_fits() {
        let dims = |l: usize, lk_rev: usize| Dims { b: 16, h: 768, l, lk: l, lk_rev, hd: 1 };
        assert_eq!(direct_bwd_smem(&dims(256, 0)), 55424);
        assert!(4 * (direct_bwd_smem(&dims(256, 0)) + 388 + 1024) <= 228 * 1024);
        assert!(direct_bwd_smem(&dims(DIRECT_MAX_L, DIRECT_MAX_L)) <= 227 * 1024);
    }

    /// The training forward keeps z for the bf16 pair backward with GELU or a postgate, from
    /// N = 8192 (P = 32), as measured, and for the four-step backward at hd = 1; elsewhere (small P,
    /// other dtypes on chip, hd = 8, no GELU and no postgate, inference) it keeps nothing.
    #[test]
    fn training_forward_keeps_z_where_the_pair_backward_reads_it() {
        let dims = |b: usize, h: usize, l: usize, hd: usize| Dims { b, h, l, lk: l, lk_rev: 0, hd };
        let keeps_on = |dt: DType, opts: &Options, d: Dims, clusters: bool| {
            let mut path = plan(&d, false);
            let want_pair = use_pair(dt, opts, path, &d, clusters);
            if let Path::OnChip { ref mut pair, .. } = path {
                *pair = want_pair;
            }
            saves_z(dt, opts, path, &d, clusters)
        };
        let keeps = |dt: DType, opts: &Options, d: Dims| keeps_on(dt, opts, d, true);
        let train = Options::new().gelu(true).training(true);
        assert!(keeps(DType::BF16, &train, dims(16, 768, 4096, 1)), "L = 4096: P = 32");
        assert!(keeps(DType::BF16, &train, dims(2, 8, 5000, 1)), "L = 5000: P = 64");
        assert!(keeps(DType::BF16, &train, dims(2, 8, 16384, 1)), "L = 16384: P = 128 on clusters");
        assert!(!keeps_on(DType::BF16, &train, dims(2, 8, 16384, 1), false), "L = 16384 without clusters (before sm_90): v2");
        assert!(!keeps(DType::BF16, &train, dims(16, 768, 2048, 1)), "L = 2048: P = 16, recomputing was faster");
        assert!(!keeps(DType::BF16, &train, dims(16, 768, 256, 1)), "L = 256: P = 2");
        assert!(!keeps(DType::F16, &train, dims(16, 768, 4096, 1)), "f16 runs the v2 backward");
        assert!(!keeps(DType::BF16, &train, dims(2, 16, 4096, 8)), "hd = 8 runs the v2 backward");
        assert!(keeps(DType::BF16, &train, dims(4, 256, 32768, 1)), "L = 32768: the four-step backward (the forward on clusters writes z)");
        assert!(keeps(DType::BF16, &train, dims(1, 4, 1 << 20, 1)), "four-step both ways: L = 2^20");
        assert!(keeps(DType::F32, &train, dims(1, 4, 1 << 20, 1)), "four-step in every dtype");
        assert!(!keeps(DType::BF16, &train, dims(1, 2, 1 << 20, 8)), "four-step at hd = 8 recomputes");
        assert!(!keeps(DType::BF16, &Options::new().training(true), dims(16, 768, 4096, 1)), "no GELU, no postgate: z is not needed");
        assert!(!keeps(DType::BF16, &Options::new().gelu(true), dims(16, 768, 4096, 1)), "inference forward");
    }

    /// The four-step training forward keeps the rows' spectra at hd = 1 with or without GELU (where
    /// z is needed, beside z); nowhere else.
    #[test]
    fn training_forward_keeps_row_spectra_on_the_four_step_path() {
        let dims = |b: usize, h: usize, l: usize, hd: usize| Dims { b, h, l, lk: l, lk_rev: 0, hd };
        let keeps = |dt: DType, opts: &Options, d: Dims| saves_w(dt, opts, plan(&d, opts.force_four_step), &d, true);
        let train = Options::new().training(true);
        assert!(keeps(DType::BF16, &train.gelu(true), dims(1, 4, 1 << 20, 1)), "L = 2^20 with GELU");
        assert!(keeps(DType::F32, &train, dims(2, 4, 1 << 20, 1)), "L = 2^20, z not needed");
        assert!(keeps(DType::F16, &Options { force_four_step: true, ..train }, dims(2, 3, 300, 1)), "forced four-step");
        assert!(!keeps(DType::BF16, &train, dims(1, 2, 1 << 20, 8)), "hd = 8");
        assert!(!keeps(DType::BF16, &train, dims(16, 768, 4096, 1)), "on chip");
        assert!(!keeps(DType::BF16, &Options::new().gelu(true), dims(1, 4, 1 << 20, 1)), "inference forward");
    }
}
