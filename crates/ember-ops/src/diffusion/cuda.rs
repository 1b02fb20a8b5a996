//! CUDA launch code for `diffusion.cu`: three launches per pass.
//!
//! forward:  reduce (basisᵀ·diag(mass)·x per chunk) → finalize_fwd (chunk sums, decay: spectral)
//!           → expand (out = basis·spectral)
//! backward: reduce (basisᵀ·d_out per chunk) → finalize_bwd (+ d_spectral, e⊙s_grad, d_times
//!           block sums) → expand (d_x = mass ⊙ basis·(e⊙s_grad), and d_times)
//!
//! Every size is validated and every buffer sized on the host before the first launch; the
//! workspace (partials, the GEMM operand, d_times block sums) is one per-device buffer kept between calls.

use super::{Forward, Grads, Meshes};
use ember_core::cuda::{CudaDevice, CudaFunction, KernelSource, LaunchConfig};
use ember_core::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub const SOURCE: KernelSource = KernelSource::new("diffusion", include_str!("diffusion.cu"));
pub const LAYER_SOURCE: KernelSource = KernelSource::new("diffusion_layer", include_str!("layer.cu"));

// Tile constants shared with diffusion.cu.
const NTHREADS: u32 = 256;
const RBM: usize = 128; // eigenvectors per reduce tile
const EBM: usize = 128; // vertices per expand tile
/// Fewest vertices per reduce chunk: below this the partials cost more than the split gains.
const MIN_CHUNK_ROWS: usize = 128;

/// Pipeline shape, a compile-time option of the module: vertices per reduce stage and stages in
/// flight, eigenvectors per expand stage and stages in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stages {
    pub rbv: usize,
    pub rnst: usize,
    pub ebk: usize,
    pub enst: usize,
}

/// Measured on an H200 (bf16, K = 128, C = 256, V = 524288): 64-row stages cut the barriers per
/// tensor-core instruction in half; 32/4/32/4 was 17% slower, 64/4/64/3 equal.
pub const DEFAULT_STAGES: Stages = Stages { rbv: 64, rnst: 3, ebk: 64, enst: 3 };

/// The stages in use: the default, or `EMBER_DIFFUSION_STAGES=rbv,rnst,ebk,enst` (for tuning runs;
/// each value a multiple of 16 for rbv/ebk, 2..=4 stages).
pub fn stages() -> Stages {
    static S: OnceLock<Stages> = OnceLock::new();
    *S.get_or_init(|| {
        let parsed = ember_core::knob("EMBER_DIFFUSION_STAGES").and_then(|v| {
            let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            match n[..] {
                [rbv, rnst, ebk, enst] if rbv % 16 == 0 && ebk % 16 == 0 && (16..=128).contains(&rbv) && (16..=128).contains(&ebk) && (2..=4).contains(&rnst) && (2..=4).contains(&enst) => {
                    Some(Stages { rbv, rnst, ebk, enst })
                }
                _ => None,
            }
        });
        parsed.unwrap_or(DEFAULT_STAGES)
    })
}

/// Build options of the module for activation dtype `dtype` and pipeline `st`.
pub fn options_with(dtype: DType, st: Stages) -> Vec<String> {
    let code = match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F64 => unreachable!("f64 never reaches CUDA (validated)"),
    };
    // Always explicit: the host sizes shared memory and padding from the same values (and picks
    // the finalize's layers by FIN_SPLIT_MIN).
    vec![
        format!("-DDIFF_DTYPE={code}"),
        format!("-DRBV={}", st.rbv),
        format!("-DRNST={}", st.rnst),
        format!("-DEBK={}", st.ebk),
        format!("-DENST={}", st.enst),
        format!("-DFIN_SPLIT_MIN={}", fin_split_min()),
        format!("-DDIFF_F32_BF16X3={}", u8::from(dtype == DType::F32 && f32_bf16x3())),
    ]
}

/// ‖out − ref‖/‖ref‖ that the CUDA path is held to for `dtype`: f32 on the three bf16 products gets
/// the 3e-4 of f32 on tensor cores (measured on an H200 over the Small tier: ~6e-6 typical, 1.4e-5
/// at most, at V = 7 where few products meet in each output; one bf16 split keeps ~16 of f32's 24
/// bits, so a lone product can be off by ~5e-5); the TF32 passes keep f32's 1e-5.
pub fn tolerance(dtype: DType) -> f64 {
    crate::f32_products::cuda_tolerance(dtype, f32_bf16x3())
}

/// How f32 inputs reach the tensor cores: three bf16 m16n8k16 products per 16 deep (hi·hi + hi·lo +
/// lo·hi of bf16 halves; default) or three TF32 m16n8k8 passes per 8 deep (`EMBER_DIFFUSION_F32=tf32x3`,
/// the path before: ~1e-7 relative instead of ~5e-6, twice the tensor-core time).
pub fn f32_bf16x3() -> bool {
    crate::f32_products::bf16x3("EMBER_DIFFUSION_F32")
}

/// v18b: the four-layer finalize built for one 1024-thread block per SM (`diffusion_finalize_*_1cta`:
/// 64 registers, no spills, instead of 32 with 64–76 bytes of spills on its critical chain) wherever
/// its grid fits one block per SM. Measured on an H200 (bf16, K = 128, C = 256): V = 4096 fwd+bwd
/// 30.5 → 27.0 µs of GPU time, V = 16384 53.9 → 49.1, V = 131072 170.9 → 167.4. Same code as the
/// two-block build, same bits. Default; `EMBER_DIFFUSION_FIN_1CTA=0` builds the two-block launch.
fn finalize_1cta(g: &Geometry, n_sm: usize) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_FIN_1CTA") != Some("0"));
    on && g.finalize_layers == 4 && (g.finalize_grid.0 as usize) * (g.finalize_grid.1 as usize) <= n_sm
}

/// Whether the reduce (each pass's first kernel) is a programmatic dependent launch (v18, default):
/// it waits for the previous kernel on the stream at its top, so its launch and set-up overlap that
/// kernel's tail. Measured on an H200: event-timed fwd+bwd −1.8 µs at V = 4096 (35.0 → 33.2 µs),
/// −1.4 µs at V = 16384 and 131072; graph replay level. `EMBER_DIFFUSION_REDUCE_PDL=0` turns it off.
fn reduce_pdl() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_REDUCE_PDL") != Some("0"))
}

/// Chunks from which a mesh's partials are summed in FIN_PARTS parts (diffusion.cu), default 16;
/// `EMBER_DIFFUSION_FIN_SPLIT_MIN=n` (measurements: e.g. 33 sums V = 4096's 32 chunks as one range,
/// as before v16) changes the summation order, so the bits too.
pub fn fin_split_min() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_FIN_SPLIT_MIN").and_then(|v| v.parse::<usize>().ok()).filter(|&n| (1..=1 << 20).contains(&n)).unwrap_or(16))
}

/// Build options of the module for activation dtype `dtype` with the stages in use.
pub fn options(dtype: DType) -> Vec<String> {
    options_with(dtype, stages())
}

/// Reduce tile widths (8·WN channels per warp, BN = 32·WN per CTA) compiled for `dtype`: f32 keeps a
/// second set of accumulators per stage, so it stops at 2.
pub fn reduce_wn_choices(dtype: DType) -> &'static [usize] {
    if dtype == DType::F32 {
        &[2]
    } else {
        &[8, 4, 2]
    }
}

/// Expand tile widths: f32 stops at 4 (its split hi/lo fragments need twice the registers).
pub fn expand_wn_choices(dtype: DType) -> &'static [usize] {
    if dtype == DType::F32 {
        &[4, 2]
    } else {
        &[8, 4, 2]
    }
}

/// Launch choices the heuristics make; tests force each of them to cover every kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tuning {
    pub reduce_wn: Option<usize>,
    pub expand_wn: Option<usize>,
    /// Vertices per reduce chunk for one mesh (batches fix theirs in `Plan`).
    pub chunk_rows: Option<usize>,
    /// One cooperative launch per pass (`Some(true)`, where the tiles are 2 wide) or three
    /// (`Some(false)`); `None`: [`fused_mode`] decides.
    pub fused: Option<bool>,
    /// The expand GEMM on Hopper warpgroup MMA (`diffusion_expand_wg*`, sm_90a, 16-bit) when
    /// `Some(true)` (an error where it cannot run), mma.sync when `Some(false)`; `None`:
    /// [`wgmma_mode`] decides.
    pub expand_wg: Option<bool>,
    /// The reduce GEMM on wgmma (`diffusion_reduce_wg*`): `Some(Always)` forces it (an error where
    /// it cannot run), `Some(Never)` keeps mma.sync, `Some(Auto)` applies [`WgmmaMode::Auto`]'s rule
    /// for the reduce whatever the environment says; `None`: [`wgmma_reduce_mode`] decides.
    pub reduce_wg: Option<WgmmaMode>,
    /// How the wgmma expand writes its tiles: `Some(ExpandStore::Bulk)` forces the wgmma expand
    /// with bulk stores (an error where it cannot run, or together with `expand_wg: Some(false)`),
    /// `Some(ExpandStore::Direct)` keeps the direct epilogue wherever the wgmma expand runs; `None`:
    /// [`expand_store_mode`] decides.
    pub expand_store: Option<ExpandStore>,
    /// How the wgmma expand loads its basis tiles: `Some(ExpandLoad::Tma)` forces the wgmma expand
    /// fed by TMA (an error where it cannot run, or together with `expand_wg: Some(false)`),
    /// `Some(ExpandLoad::CpAsync)` keeps cp.async wherever the wgmma expand runs; `None`:
    /// [`expand_load_mode`] decides.
    pub expand_load: Option<ExpandLoad>,
    /// At most this many persistent expand CTAs per channel tile (`None`: as many as fit at once).
    /// Tests use it to give each CTA many tiles at small V, so that pipelines wrap (the TMA slot
    /// ring's parities flip) in cases small enough for compute-sanitizer.
    pub expand_ctas: Option<usize>,
    /// How the wgmma reduce fills its stages (v12b): `Some(ReduceLoad::Tma)` forces the TMA-fed
    /// reduce (an error where it cannot run: not the wgmma reduce, K or C not a multiple of 8);
    /// `Some(ReduceLoad::CpAsync)` keeps cp.async; `None`: [`reduce_load_mode`] decides.
    pub reduce_load: Option<ReduceLoad>,
}

/// How the wgmma reduce fills its shared-memory stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceLoad {
    /// Every thread copies 16-byte chunks (cp.async), zero-filling rows outside the chunk.
    CpAsync,
    /// v12b (`diffusion_reduce_wgt{NH}`): thread 0 issues 2 + 2·NH TMA boxes per stage into a ring
    /// of mbarrier-signalled slots; rows outside the chunk are zeroed in shared memory.
    Tma,
}

/// `EMBER_DIFFUSION_REDUCE_LOAD=cp.async|tma`: the wgmma reduce's load path wherever it runs and
/// TMA can (K, C multiples of 8); default [`DEFAULT_REDUCE_LOAD`].
pub fn reduce_load_mode() -> ReduceLoad {
    static M: OnceLock<ReduceLoad> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_REDUCE_LOAD", &[("tma", ReduceLoad::Tma), ("cp.async", ReduceLoad::CpAsync)], DEFAULT_REDUCE_LOAD)
}

/// TMA since v12b's checks passed on the H200 (ring-wrapping chunks, the Full tier with it as the
/// default); measured 5–17 % faster per reduce than cp.async (NOTES v12b).
pub const DEFAULT_REDUCE_LOAD: ReduceLoad = ReduceLoad::Tma;

/// A mode chosen by environment variable `var`, read once into `cell`: the entry of `table` whose
/// spelling the variable holds, else `default` (unset or unrecognised).
fn env_mode<T: Copy + Send + Sync>(cell: &'static OnceLock<T>, var: &str, table: &[(&str, T)], default: T) -> T {
    *cell.get_or_init(|| std::env::var(var).ok().and_then(|v| table.iter().find(|(k, _)| *k == v).map(|&(_, m)| m)).unwrap_or(default))
}

/// How the wgmma expand fills its basis tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpandLoad {
    /// v5: every thread issues 16-byte cp.async copies of each tile, a CTA barrier per tile.
    CpAsync,
    /// v9 (`diffusion_expand_wgt*`): one thread issues TMA box copies into a ring of 16 KB slots
    /// signalled by mbarriers; no CTA barrier per tile.
    Tma,
}

/// `EMBER_DIFFUSION_EXPAND_LOAD=cp.async|tma`: the wgmma expand's load path wherever it runs (TMA
/// where it can run with the chosen store path, else cp.async, silently); default
/// [`DEFAULT_EXPAND_LOAD`].
pub fn expand_load_mode() -> ExpandLoad {
    static M: OnceLock<ExpandLoad> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_EXPAND_LOAD", &[("tma", ExpandLoad::Tma), ("cp.async", ExpandLoad::CpAsync)], DEFAULT_EXPAND_LOAD)
}

/// TMA. The TMA-fed expand (v9) measured faster on an H100 (bf16, K = 128, C = 256, same run:
/// fwd −6.4 % at V = 2M, −5.0 % at 524288, −2.1 % at 131072) and gives the cp.async path's bits.
/// It replaces cp.async only where the cp.async wgmma expand was chosen, so shapes where only the
/// TMA ring fits (K = 256, C = 256) keep their default.
pub const DEFAULT_EXPAND_LOAD: ExpandLoad = ExpandLoad::Tma;

/// How the wgmma expand writes its output tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpandStore {
    /// v5: each warp's 16 × 64 slices through shared memory into 16-byte stores, after the products.
    Direct,
    /// v8 (`diffusion_expand_wgb*`): the tile into a shared-memory staging buffer, then one bulk
    /// copy (cp.async.bulk) per row, drained while the warps run the next tile's products.
    Bulk,
    /// The TMA-fed expand: bulk (tensor stores, v14) wherever it fits with 16-byte rows; the
    /// cp.async-fed one: bulk where every persistent CTA gets at least [`BULK_MIN_TILES_PER_SM`]
    /// tiles; else direct.
    Auto,
}

/// Tiles per SM from which `ExpandStore::Auto` takes the bulk stores of the cp.async-fed expand (the
/// TMA-fed one takes them wherever they fit, v14). Measured (H100, bf16,
/// K = 128, C = 256, two runs): bulk ahead at V = 524288 (31 tiles per SM: fwd −1.2 %) and 2M
/// (124: fwd −2.3 %, fwd+bwd −0.6 %), behind at V = 131072 (7.8: +1.3 %).
pub const BULK_MIN_TILES_PER_SM: usize = 16;

/// `EMBER_DIFFUSION_EXPAND_STORE=direct|bulk|auto`: the wgmma expand's store path wherever it runs
/// (bulk where its shared memory fits, else direct); default [`DEFAULT_EXPAND_STORE`].
pub fn expand_store_mode() -> ExpandStore {
    static M: OnceLock<ExpandStore> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_EXPAND_STORE", &[("bulk", ExpandStore::Bulk), ("direct", ExpandStore::Direct), ("auto", ExpandStore::Auto)], DEFAULT_EXPAND_STORE)
}

/// Bulk stores for large problems (v8, measured: see [`BULK_MIN_TILES_PER_SM`]).
pub const DEFAULT_EXPAND_STORE: ExpandStore = ExpandStore::Auto;

/// How the two warpgroups of the TMA-fed expand schedule their products (v15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpandOrder {
    /// Both warpgroups issue their products as soon as the tile's boxes have landed (v9–v14).
    Together,
    /// The warpgroups take turns (named barriers): one's products run while the other converts
    /// and stores its half of the previous tile. Same products and roundings: the same bits.
    PingPong,
    /// Ping-pong where a persistent CTA has at most [`PINGPONG_MAX_TILES_PER_CTA`] tiles, else together.
    Auto,
}

/// Tiles per CTA up to which `ExpandOrder::Auto` takes the ping-pong order. Measured on two H200s
/// (bf16, K = 128, C = 256, together / ping-pong interleaved in one binary): ping-pong faster at
/// V = 131072 (8 tiles per CTA: fwd −2 to −3 %) and 524288 (31: fwd+bwd −1.7 to −2 %); at V = 2M
/// (124 tiles per CTA) each expand alone gains 2–4 % but the whole forward lost 2.5 % on one GPU
/// (0.927 → 0.951 ms) and was level on the other, so large meshes keep the together order.
pub const PINGPONG_MAX_TILES_PER_CTA: usize = 64;

/// `EMBER_DIFFUSION_EXPAND_ORDER=together|pingpong|auto`: the TMA-fed expand's product order; default
/// [`DEFAULT_EXPAND_ORDER`].
pub fn expand_order_mode() -> ExpandOrder {
    static M: OnceLock<ExpandOrder> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_EXPAND_ORDER", &[("together", ExpandOrder::Together), ("pingpong", ExpandOrder::PingPong), ("auto", ExpandOrder::Auto)], DEFAULT_EXPAND_ORDER)
}

/// Auto (see [`PINGPONG_MAX_TILES_PER_CTA`]).
pub const DEFAULT_EXPAND_ORDER: ExpandOrder = ExpandOrder::Auto;

/// When the expand GEMM runs on wgmma (where it can: sm_90a, f16/bf16, the tile fits in shared
/// memory) instead of mma.sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WgmmaMode {
    Never,
    /// Where every persistent CTA gets at least [`WG_MIN_TILES_PER_SM`] tiles to pipeline (measured
    /// faster at V ≥ 131072 and the batch of 16 meshes; slower at V = 4096, where 32 CTAs of 128
    /// channels leave most SMs idle).
    Auto,
    Always,
}

/// `EMBER_DIFFUSION_WGMMA=0|auto|1`; default [`DEFAULT_WGMMA`].
pub fn wgmma_mode() -> WgmmaMode {
    static M: OnceLock<WgmmaMode> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_WGMMA", &[("1", WgmmaMode::Always), ("0", WgmmaMode::Never), ("auto", WgmmaMode::Auto)], DEFAULT_WGMMA)
}

/// Measured on an H200 (v5): expand 201 → 156 µs at V = 524288, fwd 354 → 307 µs.
pub const DEFAULT_WGMMA: WgmmaMode = WgmmaMode::Auto;
pub const WG_MIN_TILES_PER_SM: usize = 4;

/// `EMBER_DIFFUSION_WGMMA_REDUCE=0|auto|1`: the reduce GEMM on wgmma never / where the chunks
/// (their nominal size) have at least [`RWG_MIN_CHUNK_ROWS`] rows / wherever it can run (sm_90a, f16/bf16); default
/// [`DEFAULT_WGMMA_REDUCE`]. Separate from `EMBER_DIFFUSION_WGMMA` (the expand), so each GEMM's
/// variant can be measured with the other held fixed.
pub fn wgmma_reduce_mode() -> WgmmaMode {
    static M: OnceLock<WgmmaMode> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_WGMMA_REDUCE", &[("1", WgmmaMode::Always), ("0", WgmmaMode::Never), ("auto", WgmmaMode::Auto)], DEFAULT_WGMMA_REDUCE)
}

/// Auto: v6 of the wgmma reduce measured slower (H200, V = 524288: 207.6 against 151.1 µs per
/// pass); v7 (swizzled stages, whole-line loads), same H200 run of 33a7f39 against mma.sync, bf16
/// K = 128 C = 256: fwd / fwd+bwd V = 131072 0.105 / 0.208 vs 0.102 / 0.205 ms (slower),
/// V = 524288 0.307 / 0.623 vs 0.335 / 0.636 ms, V = 2M 1.128 / 2.265 vs 1.219 / 2.440 ms (faster).
pub const DEFAULT_WGMMA_REDUCE: WgmmaMode = WgmmaMode::Auto;
/// Auto rule of the wgmma reduce: chunks of at least 2048 rows (V ≳ 270k on 132 SMs with the
/// default chunking): measured faster at V = 524288 (~3970-row chunks) and 2M, slower at V = 131072
/// (~990-row chunks).
pub const RWG_MIN_CHUNK_ROWS: usize = 2048;
/// The same threshold where the wgmma reduce is fed by TMA (v12b): at V = 131072 (~990-row chunks)
/// the TMA-fed wgmma reduce measured faster than mma.sync (H200 fwd 0.0951 against 0.0996 ms).
pub const RWG_MIN_CHUNK_ROWS_TMA: usize = 768;
/// Vertices per stage and stages of `diffusion_reduce_wg*` (RGV, RGNST in diffusion.cu).
pub(crate) const RWG_ROWS: usize = 64;
pub(crate) const RWG_STAGES: usize = 4;

/// Shared memory of `diffusion_reduce_wg{NH}`: RGNST stages of basis (64 × 128) and y (64 × 128·NH),
/// 16-bit, each stage with 1 KB for the mass (64 elements) so that every stage starts on the
/// 128-byte swizzle's 1024-byte period, plus 1 KB the kernel may skip to align its base.
pub(crate) fn reduce_wg_smem(nh: usize) -> usize {
    RWG_STAGES * (2 * (RWG_ROWS * RBM + RWG_ROWS * 128 * nh) + 1024) + 1024
}

/// (NH, shared memory) of the wgmma reduce for C channels, or None where it does not apply
/// (f32, not sm_90a, or the stages do not fit in shared memory).
fn reduce_wg_shape(dev: &Arc<CudaDevice>, dtype: DType, c: usize) -> Option<(usize, usize)> {
    if dtype == DType::F32 || dev.info().compute_capability != (9, 0) {
        return None;
    }
    let optin = dev.info().shared_memory_per_block_optin as usize;
    // EMBER_DIFFUSION_REDUCE_NH=1 (measurements): 128-channel tiles at any C, so each chunk's
    // partial is split over C/128 CTAs (which each read the chunk's basis).
    static FORCED_NH: OnceLock<Option<usize>> = OnceLock::new();
    let forced = *FORCED_NH.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_REDUCE_NH").and_then(|v| v.parse::<usize>().ok()).filter(|&n| n == 1));
    let nh = forced.unwrap_or(if c <= 128 { 1 } else { 2 });
    [nh, 1].into_iter().map(|nh| (nh, reduce_wg_smem(nh))).find(|&(_, smem)| smem <= optin)
}

/// Whether the wgmma reduce can run for `dtype` and C channels on `dev` (the bench's variant rows).
pub fn reduce_wg_available(dev: &Arc<CudaDevice>, dtype: DType, c: usize) -> bool {
    reduce_wg_shape(dev, dtype, c).is_some()
}

/// Shared memory of `diffusion_expand_wg*`: S (KP × 128·NH), NST stages of 128 × KP, the epilogue.
fn expand_wg_smem(kp: usize, nh: usize, nst: usize) -> usize {
    2 * (kp * 128 * nh + nst * EBM * kp + 8 * 16 * 72)
}

/// Bytes after each staged row of the bulk-store expand (EWG_STG_PAD in diffusion.cu).
pub(crate) const EWG_STG_PAD: usize = 16;

/// Shared memory of `diffusion_expand_wgb*` (v8): S and NST stages as `diffusion_expand_wg*`, then a
/// 128-row staging buffer of 2·128·NH + [`EWG_STG_PAD`] bytes per row in place of the epilogue slices.
pub(crate) fn expand_wgb_smem(kp: usize, nh: usize, nst: usize) -> usize {
    2 * (kp * 128 * nh + nst * EBM * kp) + EBM * (256 * nh + EWG_STG_PAD)
}

/// Stage counts compiled for the bulk-store expand, most first: at K = 128 a 128-channel tile keeps
/// 4 stages (194 KB), a 256-channel one 3 (226 KB of the 227 KB an sm_90 block may opt into).
pub(crate) fn expand_wgb_stages(nh: usize) -> &'static [usize] {
    if nh == 1 {
        &[4, 2]
    } else {
        &[3, 2]
    }
}

/// (NH, NST, KP, shared memory, bulk) of the wgmma expand for K, C, with bulk stores or not, or
/// None where it does not apply (f32, not sm_90a, or no stage count fits in shared memory).
fn expand_wg_shape(dev: &Arc<CudaDevice>, dtype: DType, k: usize, c: usize, bulk: bool) -> Option<(usize, usize, usize, usize, bool)> {
    if dtype == DType::F32 || dev.info().compute_capability != (9, 0) {
        return None;
    }
    let optin = dev.info().shared_memory_per_block_optin as usize;
    let nh = if c <= 128 { 1 } else { 2 };
    let kp = k.next_multiple_of(16);
    if bulk {
        expand_wgb_stages(nh).iter().map(|&nst| (nh, nst, kp, expand_wgb_smem(kp, nh, nst), true)).find(|s| s.3 <= optin)
    } else {
        [4, 2].into_iter().map(|nst| (nh, nst, kp, expand_wg_smem(kp, nh, nst), false)).find(|s| s.3 <= optin)
    }
}

/// Eigenvectors per TMA box of the TMA-fed expand (ETM_BOX_K: 128 bytes per row, the swizzle span),
/// bytes per box (one ring slot), and the most slots the kernel has barriers for (ETM_MAX_SLOTS).
pub(crate) const ETM_BOX_K: usize = 64;
pub(crate) const ETM_BOX_BYTES: usize = EBM * ETM_BOX_K * 2;
pub(crate) const ETM_MAX_SLOTS: usize = 16;

/// Shared memory of `diffusion_expand_wgt{NH}` (`bulk`: `wgtb`) with `slots` ring slots: up to 1 KB
/// to align the slots on the swizzle's 1024-byte period, the slots, S (KP × 128·NH), the epilogue
/// slices (direct) or the 128-row staging buffer (bulk), then full and empty barriers.
pub(crate) fn expand_tma_smem(kp: usize, nh: usize, slots: usize, bulk: bool) -> usize {
    let epi = if bulk { EBM * (256 * nh + EWG_STG_PAD) } else { 2 * 8 * 16 * 72 };
    1024 + slots * ETM_BOX_BYTES + 2 * kp * 128 * nh + epi + 2 * 8 * ETM_MAX_SLOTS
}

/// The most ring slots (up to [`ETM_MAX_SLOTS`]) that fit in `optin` bytes, if at least one tile's
/// boxes (⌈KP/64⌉, which the ring must hold at once) do.
pub(crate) fn expand_tma_slots(optin: usize, kp: usize, nh: usize, bulk: bool) -> Option<usize> {
    let nb = kp.div_ceil(ETM_BOX_K);
    (nb..=ETM_MAX_SLOTS).rev().find(|&n| expand_tma_smem(kp, nh, n, bulk) <= optin)
}

/// (NH, slots, KP, shared memory, bulk) of the TMA-fed expand with bulk stores (where `bulk` and
/// they fit; `force_bulk`: only with them) or the direct epilogue, or why it cannot run.
#[allow(clippy::too_many_arguments)]
fn expand_tma_shape(dev: &Arc<CudaDevice>, dtype: DType, v: usize, k: usize, c: usize, basis: u64, bulk: bool, force_bulk: bool) -> std::result::Result<(usize, usize, usize, usize, bool), String> {
    if dtype == DType::F32 {
        return Err("needs 16-bit activations".into());
    }
    if dev.info().compute_capability != (9, 0) {
        return Err(format!("needs sm_90a (TMA and wgmma), not {}", dev.info().arch));
    }
    if !(k * dtype.size()).is_multiple_of(16) {
        return Err(format!("basis rows of K·2 = {} bytes: TMA needs a row stride that is a multiple of 16 bytes (K a multiple of 8)", k * dtype.size()));
    }
    if !basis.is_multiple_of(16) {
        return Err(format!("the basis at {basis:#x}: TMA needs a 16-byte aligned global address"));
    }
    if v > i32::MAX as usize {
        return Err(format!("V = {v}: TMA row coordinates are 32-bit"));
    }
    let optin = dev.info().shared_memory_per_block_optin as usize;
    let nh = if c <= 128 { 1 } else { 2 };
    let kp = k.next_multiple_of(16);
    let pick = |b: bool| expand_tma_slots(optin, kp, nh, b).map(|n| (nh, n, kp, expand_tma_smem(kp, nh, n, b), b));
    let shape = match (bulk && (c * dtype.size()).is_multiple_of(16), force_bulk) {
        (_, true) => pick(true),
        (true, false) => pick(true).or_else(|| pick(false)),
        (false, false) => pick(false),
    };
    shape.ok_or_else(|| {
        format!(
            "S ({} KB), the {} and {} TMA boxes of 16 KB (one tile) exceed the {optin} bytes of shared memory a block may use",
            2 * kp * 128 * nh / 1024,
            if force_bulk { "staging buffer" } else { "epilogue" },
            kp.div_ceil(ETM_BOX_K)
        )
    })
}

/// Whether the TMA-fed wgmma expand can run for `dtype`, K and C on `dev` (the bench's variant rows).
pub fn expand_tma_available(dev: &Arc<CudaDevice>, dtype: DType, k: usize, c: usize, bulk: bool) -> bool {
    expand_tma_shape(dev, dtype, 1, k, c, 0, bulk, bulk).is_ok()
}

/// Whether the wgmma expand (with bulk stores or not) can run for `dtype`, K and C on `dev` (the
/// bench's variant rows).
pub fn expand_wg_available(dev: &Arc<CudaDevice>, dtype: DType, k: usize, c: usize, bulk: bool) -> bool {
    expand_wg_shape(dev, dtype, k, c, bulk).is_some()
}

/// When a pass runs as one cooperative launch (`diffusion_fused_{fwd,bwd}`) instead of three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedMode {
    /// Always three launches.
    Never,
    /// Small problems: both GEMMs at 2-wide tiles and each GEMM phase one wave of blocks.
    Auto,
    /// Whenever both tile widths are 2 (any size; for tests and tuning).
    Always,
}

/// `EMBER_DIFFUSION_FUSED=0|auto|1`; default [`DEFAULT_FUSED`].
pub fn fused_mode() -> FusedMode {
    static M: OnceLock<FusedMode> = OnceLock::new();
    env_mode(&M, "EMBER_DIFFUSION_FUSED", &[("0", FusedMode::Never), ("1", FusedMode::Always), ("auto", FusedMode::Auto)], DEFAULT_FUSED)
}

pub const DEFAULT_FUSED: FusedMode = FusedMode::Never;

/// Vertices per reduce chunk, a multiple of 8 (the stage alignment): about one chunk per SM, but
/// on small meshes about one per two SMs up to [`SMALL_MESH_CHUNK_ROWS`] rows, since each chunk
/// writes a K × C f32 partial (128 KB at K = 128, C = 256) that the finalize reads back: at
/// V = 32768 one chunk per SM moves 17 MB of partials beside 25 MB of input. Sweep (H200, bf16,
/// K = 128, C = 256, fwd / fwd+bwd; `bench/results/nvidia-h200/diffusion-v15/chunk-sweep/`): V = 16384
/// 0.0372 / 0.0720 ms at one chunk per SM → 0.0305 / 0.0600 at 256 rows; V = 32768 0.0487 / 0.0938 →
/// 0.0429 / 0.0836 at 512; V = 65536 0.0705 / 0.1391 → 0.0660 / 0.1252 at 1024; V = 131072 level
/// at 1024 (0.0898 / 0.1778 vs 0.0896 / 0.1787); larger meshes keep one chunk per SM.
/// `EMBER_DIFFUSION_CHUNK_ROWS=n` (measurements) sets it for every call.
pub fn default_chunk_rows(v_total: usize, n_sm: usize) -> usize {
    static FORCED: OnceLock<Option<usize>> = OnceLock::new();
    if let Some(rows) = *FORCED.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_CHUNK_ROWS").and_then(|v| v.parse::<usize>().ok()).filter(|&r| r > 0 && r <= 1 << 30)) {
        return rows.next_multiple_of(8);
    }
    let per_sm = v_total.div_ceil(n_sm.max(1)).next_multiple_of(8);
    // Whole 64-row stages: at V = 32768, 504-row chunks (66, the last of 8 rows) ran the forward's
    // reduce in 25.3 µs, 512-row chunks (64) in 18.2 µs (same GPU, same run).
    let per_two_sms = v_total.div_ceil((n_sm / 2).max(1)).next_multiple_of(64).min(SMALL_MESH_CHUNK_ROWS);
    per_sm.max(per_two_sms).max(MIN_CHUNK_ROWS)
}

/// The largest chunk the small-mesh rule of [`default_chunk_rows`] makes (about where one chunk per
/// SM takes over: V ≈ 135k on 132 SMs).
pub const SMALL_MESH_CHUNK_ROWS: usize = 1024;

/// `struct Seg` of diffusion.cu: vertex rows [begin, end) of `mesh`; `run_end` is one past the last
/// entry of the same mesh.
#[derive(Clone, Copy, Debug)]
struct Seg {
    begin: i64,
    end: i64,
    mesh: i64,
    run_end: i64,
}

/// Device tables of a batch: the reduce chunks, the expand tiles, and each mesh's first chunk.
/// Chunks and tiles never straddle meshes.
pub struct Plan {
    chunk_rows: usize,
    n_chunks: usize,
    n_tiles: usize,
    tables: Tensor,
    chunk_off: u64,
    tile_off: u64,
    prefix_off: u64,
}

fn segments(offsets: &[usize], rows: usize) -> (Vec<Seg>, Vec<i64>) {
    let mut segs = Vec::new();
    let mut prefix = vec![0i64];
    for m in 0..offsets.len() - 1 {
        let first = segs.len();
        let mut b = offsets[m];
        while b < offsets[m + 1] {
            let e = (b + rows).min(offsets[m + 1]);
            segs.push(Seg { begin: b as i64, end: e as i64, mesh: m as i64, run_end: 0 });
            b = e;
        }
        let run_end = segs.len() as i64;
        segs[first..].iter_mut().for_each(|s| s.run_end = run_end);
        prefix.push(run_end);
    }
    (segs, prefix)
}

impl Plan {
    pub fn new(basis: &Tensor, offsets: &[usize]) -> Result<Plan> {
        let n_sm = basis.cuda_device()?.info().multiprocessors as usize;
        Plan::with_chunk_rows(basis, offsets, default_chunk_rows(*offsets.last().unwrap(), n_sm))
    }

    pub fn with_chunk_rows(basis: &Tensor, offsets: &[usize], chunk_rows: usize) -> Result<Plan> {
        let (chunks, prefix) = segments(offsets, chunk_rows);
        let (tiles, _) = segments(offsets, EBM);
        // i64 words, stored as the bits of an f32 tensor (little-endian on both sides).
        let mut words: Vec<i64> = Vec::with_capacity(4 * (chunks.len() + tiles.len()) + prefix.len());
        for s in chunks.iter().chain(&tiles) {
            words.extend([s.begin, s.end, s.mesh, s.run_end]);
        }
        words.extend(&prefix);
        let bits: Vec<f32> = words.iter().flat_map(|&w| [f32::from_bits(w as u64 as u32), f32::from_bits((w as u64 >> 32) as u32)]).collect();
        let n = bits.len();
        let tables = Tensor::from_vec(bits, &[n])?.to_device(basis.device())?;
        let base = tables.cuda_ptr()?;
        Ok(Plan {
            chunk_rows,
            n_chunks: chunks.len(),
            n_tiles: tiles.len(),
            chunk_off: base,
            tile_off: base + 32 * chunks.len() as u64,
            prefix_off: base + 32 * (chunks.len() + tiles.len()) as u64,
            tables,
        })
    }

    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }
    /// Keeps the tables alive while their raw addresses are in use.
    fn device(&self) -> Device {
        self.tables.device()
    }
}

/// Kernels, with the dynamic shared memory limit raised once and the occupancy at a given shared
/// memory size cached (both are driver calls we keep off the per-call path).
fn kernel(dev: &Arc<CudaDevice>, source: &KernelSource, dtype: DType, entry: &'static str, smem: usize) -> Result<(CudaFunction, u32)> {
    type Key = (usize, DType, &'static str, usize);
    static CACHE: OnceLock<Mutex<HashMap<Key, (CudaFunction, u32)>>> = OnceLock::new();
    let key = (dev.info().ordinal, dtype, entry, smem);
    if let Some(hit) = CACHE.get_or_init(Default::default).lock().unwrap().get(&key) {
        return Ok(hit.clone());
    }
    let opts = if source.name == SOURCE.name { options(dtype) } else { Vec::new() };
    let f = dev.function(source, &opts, entry)?;
    let optin = dev.info().shared_memory_per_block_optin as usize;
    if smem > optin {
        return Err(Error::Unsupported(format!("{entry} with {smem} bytes of shared memory (the device allows {optin})")));
    }
    if smem > 48 * 1024 {
        dev.set_max_dynamic_smem(&f, optin)?;
    }
    let occ = f.occupancy_max_active_blocks_per_multiprocessor(NTHREADS, smem, None).map_err(|e| Error::cuda("occupancy query", e))?;
    if occ == 0 {
        return Err(Error::Unsupported(format!("{entry} with {smem} bytes of shared memory: no block fits on an SM")));
    }
    CACHE.get_or_init(Default::default).lock().unwrap().insert(key, (f.clone(), occ));
    Ok((f, occ))
}

fn reduce_smem(dtype: DType, wn: usize, st: Stages) -> usize {
    let bn = 32 * wn;
    st.rnst * (st.rbv * (RBM + 8) + st.rbv * (bn + 8) + st.rbv) * dtype.size()
}

fn expand_smem(dtype: DType, wn: usize, kp: usize, st: Stages) -> usize {
    let bn = 32 * wn;
    let half = dtype != DType::F32;
    let lda = st.ebk + if half { 8 } else { 4 };
    let epi = if half { 8 * 64 * (wn.min(4) * 8 + 8) } else { 0 };
    (kp * (bn + 8) + st.enst * EBM * lda + epi) * dtype.size()
}

fn too_large(what: String) -> Error {
    Error::TooLarge { arg: "x".into(), what }
}

fn to_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| too_large(format!("{what} = {v} exceeds the kernels' 32-bit size parameters")))
}

fn to_u32_grid(v: usize, limit: usize, what: &str) -> Result<u32> {
    if v == 0 || v > limit {
        return Err(too_large(format!("{what} = {v} exceeds one launch's grid ({limit})")));
    }
    Ok(v as u32)
}

/// Everything both passes launch with: chunking, tile widths, padded sizes, grids.
struct Geometry {
    dtype: DType,
    k: usize,
    c: usize,
    meshes: usize,
    n_rows: i64,
    // reduce
    chunk_rows: i64,
    n_chunks: usize,
    chunk_table: u64,
    chunk_prefix: u64,
    rwn: usize,
    /// Some(NH): the reduce runs on wgmma (`diffusion_reduce_wg{NH}`, 128·NH channels per tile).
    rwg: Option<usize>,
    /// v12b: the wgmma reduce is fed by TMA (`diffusion_reduce_wgt{NH}`).
    rtma: bool,
    kpr: usize,
    cpr: usize,
    reduce_grid: (u32, u32),
    reduce_smem: usize,
    // expand
    n_tiles: usize,
    tile_table: u64,
    ewn: usize,
    /// Some((NH, NST, bulk)): the expand runs on wgmma (`diffusion_expand_wg{NH}_s{NST}`, or
    /// `diffusion_expand_wgb{NH}_s{NST}` with bulk stores).
    ewg: Option<(usize, usize, bool)>,
    /// Some(slots): the wgmma expand is fed by TMA (`diffusion_expand_wgt{NH}` / `wgtb{NH}`) with
    /// this many 16 KB ring slots; `ewg`'s NST is then unused.
    etma: Option<usize>,
    kpe: usize,
    cpe: usize,
    expand_grid: (u32, u32),
    expand_smem: usize,
    /// [`Tuning::expand_ctas`].
    expand_ctas: Option<usize>,
    // finalize
    finalize_grid: (u32, u32),
    /// Threads per output of the standalone finalize (its blockDim.z; see [`finalize_layers`]).
    finalize_layers: u32,
    vec: bool,
}

impl Geometry {
    fn new(dev: &Arc<CudaDevice>, m: &Meshes, c: usize, tune: &Tuning) -> Result<Geometry> {
        let dtype = m.dtype();
        let (v, k, meshes) = (m.v(), m.k(), m.meshes());
        let n_sm = dev.info().multiprocessors.max(1) as usize;
        let optin = dev.info().shared_memory_per_block_optin as usize;
        let st = stages();
        let forced = |wn: Option<usize>, choices: &[usize], what: &str| -> Result<Option<usize>> {
            match wn {
                Some(w) if !choices.contains(&w) => Err(Error::invalid(what, format!("expected one of {choices:?} for {dtype}, got {w}"))),
                other => Ok(other),
            }
        };
        let (chunk_rows, n_chunks, chunk_table, chunk_prefix, n_tiles, tile_table) = match m.plan {
            Some(p) => {
                debug_assert_eq!(p.device(), m.device());
                (p.chunk_rows, p.n_chunks, p.chunk_off, p.prefix_off, p.n_tiles, p.tile_off)
            }
            None => {
                let rows = tune.chunk_rows.unwrap_or_else(|| default_chunk_rows(v, n_sm)).max(1);
                (rows, v.div_ceil(rows), 0, 0, v.div_ceil(EBM), 0)
            }
        };
        let n_mt = k.div_ceil(RBM);
        // Tile width: the narrowest that still covers C in one tile, then narrower while the grid
        // would leave most SMs idle (small meshes).
        let shrink = |mut wn: usize, choices: &[usize], ctas: &dyn Fn(usize) -> usize, goal: usize| {
            let smallest = *choices.last().unwrap();
            while wn > smallest && 16 * wn >= c {
                wn /= 2;
            }
            while wn > smallest && ctas(wn) < goal {
                wn /= 2;
            }
            wn
        };
        let (rc, ec) = (reduce_wn_choices(dtype), expand_wn_choices(dtype));
        let rwn = match forced(tune.reduce_wn, rc, "reduce_wn")? {
            Some(w) => w,
            None => shrink(rc[0], rc, &|wn| n_chunks * n_mt * c.div_ceil(32 * wn), n_sm / 2),
        };
        let kpe = k.next_multiple_of(st.ebk);
        let ewn = match forced(tune.expand_wn, ec, "expand_wn")? {
            Some(w) => w,
            None => {
                let mut wn = ec[0];
                while wn > *ec.last().unwrap() && expand_smem(dtype, wn, kpe, st) > optin {
                    wn /= 2;
                }
                shrink(wn, ec, &|wn| n_tiles * c.div_ceil(32 * wn), n_sm)
            }
        };
        // The store path where the wgmma expand runs: bulk where asked for and its shared memory
        // fits, else direct; forced bulk (a test or bench variant) is an error where it cannot run.
        let store_mode = tune.expand_store.unwrap_or_else(expand_store_mode);
        let basis_ptr = m.basis.cuda_ptr()?;
        // v14: the TMA-fed expand's bulk epilogue writes by tensor stores and measured at least as
        // fast as direct stores at every size and in both passes (H200, V = 131072 … 2M), so Auto
        // takes it wherever the TMA expand would run with it; the cp.async-fed expand keeps the
        // per-row bulk copies and the tile rule.
        let tma_bulk_fits = tune.expand_load.unwrap_or_else(expand_load_mode) == ExpandLoad::Tma
            && tune.expand_wg != Some(false)
            && (c * dtype.size()).is_multiple_of(16)
            && expand_tma_shape(dev, dtype, v, k, c, basis_ptr, true, true).is_ok();
        let bulk = match store_mode {
            ExpandStore::Bulk => true,
            ExpandStore::Direct => false,
            ExpandStore::Auto => tma_bulk_fits || n_tiles >= BULK_MIN_TILES_PER_SM * n_sm,
        };
        let wg_shape = || match bulk {
            true => expand_wg_shape(dev, dtype, k, c, true).or_else(|| expand_wg_shape(dev, dtype, k, c, false)),
            false => expand_wg_shape(dev, dtype, k, c, false),
        };
        // v9: forced TMA loads imply the wgmma expand and take their own shape (a ring of 16 KB
        // slots instead of whole-tile stages, so it fits where the cp.async stages may not); from
        // the environment they replace cp.async wherever the wgmma expand runs and they fit with
        // its store path.
        let forced_bulk = tune.expand_store == Some(ExpandStore::Bulk);
        let tma_forced = match (tune.expand_load, tune.expand_wg) {
            (Some(ExpandLoad::Tma), Some(false)) => return Err(Error::invalid("expand_load", "TMA loads are a variant of the wgmma expand, which expand_wg = Some(false) excludes")),
            (Some(ExpandLoad::Tma), _) => Some(expand_tma_shape(dev, dtype, v, k, c, basis_ptr, bulk, forced_bulk).map_err(|why| {
                Error::Unsupported(format!("the TMA-fed wgmma expand for {dtype}, K = {k}, C = {c}{}: {why}", if forced_bulk { " with bulk stores" } else { "" }))
            })?),
            _ => None,
        };
        let wg = match (tune.expand_store, tune.expand_wg) {
            _ if tma_forced.is_some() => tma_forced,
            (Some(ExpandStore::Bulk), Some(false)) => return Err(Error::invalid("expand_store", "bulk stores are a variant of the wgmma expand, which expand_wg = Some(false) excludes")),
            (Some(ExpandStore::Bulk), _) => Some(expand_wg_shape(dev, dtype, k, c, true).ok_or_else(|| {
                Error::Unsupported(format!(
                    "the wgmma expand with bulk stores for {dtype}, K = {k}, C = {c} on {} (needs sm_90a, 16-bit activations, and S, two stages and the 128-row staging buffer in shared memory)",
                    dev.info().arch
                ))
            })?),
            (_, Some(true)) => Some(wg_shape().ok_or_else(|| {
                Error::Unsupported(format!("the wgmma expand for {dtype}, K = {k}, C = {c} on {} (needs sm_90a, 16-bit activations, the tile in shared memory)", dev.info().arch))
            })?),
            (_, Some(false)) => None,
            (_, None) => match wgmma_mode() {
                WgmmaMode::Never => None,
                WgmmaMode::Always => wg_shape(),
                WgmmaMode::Auto => wg_shape().filter(|&(nh, ..)| n_tiles * c.div_ceil(128 * nh) >= WG_MIN_TILES_PER_SM * n_sm),
            },
        };
        // (slots, shared memory) of the TMA-fed expand, with the store path `wg` has.
        let etma = match (tma_forced, wg) {
            (Some((_, slots, _, smem, _)), _) => Some((slots, smem)),
            (None, Some((_, _, _, _, b))) if tune.expand_load.unwrap_or_else(expand_load_mode) == ExpandLoad::Tma => {
                expand_tma_shape(dev, dtype, v, k, c, basis_ptr, b, b).ok().map(|(_, slots, _, smem, _)| (slots, smem))
            }
            _ => None,
        };
        let (kpe, ebn) = match wg {
            Some((nh, _, kp, ..)) => (kp, 128 * nh),
            None => (kpe, 32 * ewn),
        };
        let rmode = tune.reduce_wg.unwrap_or_else(wgmma_reduce_mode);
        // Whether the wgmma reduce, where it runs, would be fed by TMA: the Auto rule's threshold
        // depends on it (the TMA-fed reduce pays off on shorter chunks).
        let rtma_wanted = tune.reduce_load.unwrap_or_else(reduce_load_mode) == ReduceLoad::Tma && k.is_multiple_of(8) && c.is_multiple_of(8);
        let rwg_min_rows = if rtma_wanted { RWG_MIN_CHUNK_ROWS_TMA } else { RWG_MIN_CHUNK_ROWS };
        let rwg = match rmode {
            WgmmaMode::Never => None,
            WgmmaMode::Always => Some(reduce_wg_shape(dev, dtype, c).ok_or_else(|| {
                Error::Unsupported(format!("the wgmma reduce for {dtype}, C = {c} on {} (needs sm_90a and 16-bit activations)", dev.info().arch))
            })?),
            WgmmaMode::Auto => reduce_wg_shape(dev, dtype, c).filter(|_| chunk_rows >= rwg_min_rows),
        };
        let rtma = match (tune.reduce_load, rwg) {
            (Some(ReduceLoad::Tma), None) => return Err(Error::invalid("reduce_load", "TMA loads are a variant of the wgmma reduce, which does not run here")),
            (Some(ReduceLoad::Tma), Some(_)) if !(k.is_multiple_of(8) && c.is_multiple_of(8)) => {
                return Err(Error::Unsupported(format!("the TMA-fed wgmma reduce for K = {k}, C = {c} (needs multiples of 8: 16-byte rows)")))
            }
            (Some(ReduceLoad::Tma), Some(_)) => true,
            (Some(ReduceLoad::CpAsync), _) | (None, None) => false,
            (None, Some(_)) => rtma_wanted,
        };
        let rbn = match rwg {
            Some((nh, _)) => 128 * nh,
            None => 32 * rwn,
        };
        let (kpr, cpr, cpe) = (n_mt * RBM, c.next_multiple_of(rbn), c.next_multiple_of(ebn));
        let (n_ntr, n_nte) = (cpr / rbn, cpe / ebn);
        to_i32(cpr.max(cpe), "C padded to the tile width")?;
        let es = dtype.size();
        let vec = (k * es).is_multiple_of(16) && (c * es).is_multiple_of(16);
        let reduce_grid = (to_u32_grid(n_chunks, i32::MAX as usize, "reduce chunks")?, to_u32_grid(n_mt * n_ntr, 65535, "reduce tiles per chunk")?);
        let expand_smem = match (etma, wg) {
            (Some((_, smem)), _) => smem,
            (None, Some((_, _, _, smem, _))) => smem,
            (None, None) => expand_smem(dtype, ewn, kpe, st),
        };
        let finalize_grid = (to_u32_grid(meshes * (cpe / 32), i32::MAX as usize, "meshes × channel blocks")?, (kpe / 8) as u32);
        let finalize_layers = finalize_layers(n_sm, finalize_grid.0 as usize * finalize_grid.1 as usize, n_chunks / meshes.max(1));
        let n_persist_goal = n_sm; // refined by occupancy at launch
        let expand_grid = (to_u32_grid(n_tiles.min(n_persist_goal).max(1), i32::MAX as usize, "expand tiles")?, to_u32_grid(n_nte, 65535, "expand channel tiles")?);
        Ok(Geometry {
            dtype,
            k,
            c,
            meshes,
            n_rows: v as i64,
            chunk_rows: chunk_rows as i64,
            n_chunks,
            chunk_table,
            chunk_prefix,
            rwn,
            kpr,
            cpr,
            reduce_grid,
            reduce_smem: match rwg {
                Some((_, smem)) => smem,
                None => reduce_smem(dtype, rwn, st),
            },
            rwg: rwg.map(|(nh, _)| nh),
            rtma,
            n_tiles,
            tile_table,
            ewn,
            ewg: wg.map(|(nh, nst, _, _, bulk)| (nh, nst, bulk)),
            etma: etma.map(|(slots, _)| slots),
            kpe,
            cpe,
            expand_grid,
            expand_smem,
            expand_ctas: tune.expand_ctas.map(|n| n.max(1)),
            finalize_grid,
            finalize_layers,
            vec,
        })
    }

    fn partial_bytes(&self) -> Result<usize> {
        self.n_chunks
            .checked_mul(self.kpr)
            .and_then(|n| n.checked_mul(self.cpr))
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| too_large("the reduce workspace overflows usize".into()))
    }
    fn operand_bytes(&self) -> usize {
        self.meshes * self.kpe * self.cpe * self.dtype.size()
    }
    fn dt_rows(&self) -> usize {
        self.meshes * self.finalize_grid.1 as usize
    }
}

/// Byte offsets of `sizes` carved out of one buffer in 256-byte-aligned parts, and the total.
fn carve(sizes: &[usize]) -> Result<(Vec<usize>, usize)> {
    let mut offs = Vec::with_capacity(sizes.len());
    let mut total = 0usize;
    for &s in sizes {
        offs.push(total);
        total = total.checked_add(s.next_multiple_of(256)).ok_or_else(|| too_large("the workspace overflows usize".into()))?;
    }
    Ok((offs, total))
}

/// The workspace of one pass (partials, GEMM operand, d_times rows): a per-device buffer kept
/// between calls and grown when a pass needs more, instead of one stream-ordered allocation and
/// free per pass (v5: two driver calls fewer per pass). Every launch of a pass goes to the device's
/// one stream, so a pass that reuses the buffer is ordered after the kernels of the previous pass
/// that read it. The returned guard keeps other host threads off the buffer until the pass has
/// enqueued its last launch; the parts are only valid while it is held.
struct Workspace {
    guard: std::sync::MutexGuard<'static, Option<Tensor>>,
    parts: Vec<u64>,
}

fn workspace(device: Device, sizes: &[usize]) -> Result<Workspace> {
    type Slot = &'static Mutex<Option<Tensor>>;
    static CACHE: OnceLock<Mutex<HashMap<usize, Slot>>> = OnceLock::new();
    let Device::Cuda(ordinal) = device else { return Err(Error::Unsupported("the CUDA workspace on a CPU device".into())) };
    let (offs, total) = carve(sizes)?;
    // One slot per device, leaked on purpose: it lives as long as the process (like the device).
    let slot: Slot = CACHE.get_or_init(Default::default).lock().unwrap().entry(ordinal).or_insert_with(|| Box::leak(Box::new(Mutex::new(None))));
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    let have = guard.as_ref().map_or(0, |t| t.numel() * 4);
    if have < total.max(256) {
        // Grow by at least an eighth, so that a sequence of growing sizes reallocates rarely.
        let bytes = total.max(256).max(have + have / 8).next_multiple_of(1 << 16);
        *guard = None; // stream-ordered free of the old buffer, after the kernels that used it
        *guard = Some(Tensor::output(&[bytes / 4], DType::F32, device)?);
    } else if ember_core::tensor::poison_outputs() {
        // Tests: stale values of an earlier pass must not hide an element a kernel fails to write.
        guard.as_mut().unwrap().poison()?;
    }
    let base = guard.as_ref().unwrap().cuda_ptr()?;
    Ok(Workspace { guard, parts: offs.into_iter().map(|o| base + o as u64).collect() })
}

impl Workspace {
    fn part(&self, i: usize) -> u64 {
        debug_assert!(self.guard.is_some());
        self.parts[i]
    }
}

fn launch_reduce(dev: &Arc<CudaDevice>, g: &Geometry, basis: u64, y: u64, mass: u64, ws: u64) -> Result<()> {
    // v12b: TMA needs 16-byte aligned operands; an unaligned basis or y (a view) takes cp.async.
    if let (Some(nh), true) = (g.rwg, g.rtma && basis.is_multiple_of(16) && y.is_multiple_of(16)) {
        return launch_reduce_tma(dev, g, nh, basis, y, mass, ws);
    }
    let entry = match (g.rwg, g.rwn) {
        (Some(1), _) => "diffusion_reduce_wg1",
        (Some(_), _) => "diffusion_reduce_wg2",
        (None, 8) => "diffusion_reduce_w8",
        (None, 4) => "diffusion_reduce_w4",
        (None, _) => "diffusion_reduce_w2",
    };
    let (f, _) = kernel(dev, &SOURCE, g.dtype, entry, g.reduce_smem)?;
    let cfg = LaunchConfig { grid_dim: (g.reduce_grid.0, g.reduce_grid.1, 1), block_dim: (NTHREADS, 1, 1), shared_mem_bytes: g.reduce_smem as u32 };
    let (rows, n_rows, n_chunks) = (g.chunk_rows, g.n_rows, g.n_chunks as i64);
    let (k, c, kp, cp, vec) = (g.k as i32, g.c as i32, g.kpr as i32, g.cpr as i32, i32::from(g.vec));
    dev.launch(&f, cfg)
        .arg(&basis)
        .arg(&y)
        .arg(&mass)
        .arg(&ws)
        .arg(&g.chunk_table)
        .arg(&rows)
        .arg(&n_rows)
        .arg(&n_chunks)
        .arg(&k)
        .arg(&c)
        .arg(&kp)
        .arg(&cp)
        .arg(&vec)
        .dependent_if(reduce_pdl())
        .named("diffusion_reduce")
        .run()
}

/// v12b: the TMA-fed wgmma reduce. Tensor maps of the basis (V × K) and of y (V × C), boxes of
/// 64 vertices × 64 columns in the 128-byte swizzle, zeros outside; encoded per launch on the host.
fn launch_reduce_tma(dev: &Arc<CudaDevice>, g: &Geometry, nh: usize, basis: u64, y: u64, mass: u64, ws: u64) -> Result<()> {
    let entry = if nh == 1 { "diffusion_reduce_wgt1" } else { "diffusion_reduce_wgt2" };
    let es = g.dtype.size() as u64;
    let rows = g.n_rows as u64;
    let map_b = ember_core::cuda::tensor_map_2d_sw128(g.dtype, basis, rows, g.k as u64, g.k as u64 * es, RWG_ROWS as u32, 64)?;
    let map_y = ember_core::cuda::tensor_map_2d_sw128(g.dtype, y, rows, g.c as u64, g.c as u64 * es, RWG_ROWS as u32, 64)?;
    let (f, _) = kernel(dev, &SOURCE, g.dtype, entry, g.reduce_smem)?;
    let cfg = LaunchConfig { grid_dim: (g.reduce_grid.0, g.reduce_grid.1, 1), block_dim: (NTHREADS, 1, 1), shared_mem_bytes: g.reduce_smem as u32 };
    let (rows_per_chunk, n_rows, n_chunks) = (g.chunk_rows, g.n_rows, g.n_chunks as i64);
    let (kp, cp) = (g.kpr as i32, g.cpr as i32);
    dev.launch(&f, cfg)
        .arg(&mass)
        .arg(&ws)
        .arg(&g.chunk_table)
        .arg(&rows_per_chunk)
        .arg(&n_rows)
        .arg(&n_chunks)
        .arg(&kp)
        .arg(&cp)
        .arg(&map_b)
        .arg(&map_y)
        .dependent_if(reduce_pdl())
        .named("diffusion_reduce")
        .run()
}

#[allow(clippy::too_many_arguments)]
fn launch_expand(dev: &Arc<CudaDevice>, g: &Geometry, basis: u64, s_op: u64, mass: u64, out: u64, dt_part: u64, d_times: u64) -> Result<()> {
    if let (Some((nh, _, bulk)), Some(slots)) = (g.ewg, g.etma) {
        return launch_expand_tma(dev, g, (nh, bulk, slots, g.expand_smem), basis, s_op, mass, out, dt_part, d_times);
    }
    let entry = match (g.ewg, g.ewn) {
        (Some((1, 2, false)), _) => "diffusion_expand_wg1_s2",
        (Some((1, _, false)), _) => "diffusion_expand_wg1_s4",
        (Some((_, 2, false)), _) => "diffusion_expand_wg2_s2",
        (Some((_, _, false)), _) => "diffusion_expand_wg2_s4",
        (Some((1, 2, true)), _) => "diffusion_expand_wgb1_s2",
        (Some((1, _, true)), _) => "diffusion_expand_wgb1_s4",
        (Some((_, 2, true)), _) => "diffusion_expand_wgb2_s2",
        (Some((_, _, true)), _) => "diffusion_expand_wgb2_s3",
        (None, 8) => "diffusion_expand_w8",
        (None, 4) => "diffusion_expand_w4",
        (None, _) => "diffusion_expand_w2",
    };
    let (f, occ) = kernel(dev, &SOURCE, g.dtype, entry, g.expand_smem)?;
    let cfg = expand_cfg(dev, g, occ, g.expand_smem);
    let (n_rows, n_tiles) = (g.n_rows, g.n_tiles as i64);
    let (k, c, kp, cp, vec, dt_rows) = (g.k as i32, g.c as i32, g.kpe as i32, g.cpe as i32, i32::from(g.vec), to_i32(g.dt_rows(), "meshes × eigenvector blocks")?);
    dev.launch(&f, cfg)
        .arg(&basis)
        .arg(&s_op)
        .arg(&mass)
        .arg(&out)
        .arg(&g.tile_table)
        .arg(&n_rows)
        .arg(&n_tiles)
        .arg(&k)
        .arg(&c)
        .arg(&kp)
        .arg(&cp)
        .arg(&vec)
        .arg(&dt_part)
        .arg(&dt_rows)
        .arg(&d_times)
        .dependent()
        .named("diffusion_expand")
        .run()
}

/// Persistent grid of the expand: as many CTAs as fit at once (per channel tile), never more than
/// there are tiles.
fn expand_cfg(dev: &Arc<CudaDevice>, g: &Geometry, occ: u32, smem: usize) -> LaunchConfig {
    let n_sm = dev.info().multiprocessors.max(1) as usize;
    let per_nt = (n_sm * occ as usize / g.expand_grid.1 as usize).max(1).min(g.expand_ctas.unwrap_or(usize::MAX));
    let grid_x = g.n_tiles.min(per_nt).max(1) as u32;
    LaunchConfig { grid_dim: (grid_x, g.expand_grid.1, 1), block_dim: (NTHREADS, 1, 1), shared_mem_bytes: smem as u32 }
}

/// v9: the TMA-fed wgmma expand (`diffusion_expand_wgt{NH}`, `wgtb{NH}` with bulk stores). The tensor
/// map (basis as V × K, boxes of 128 rows × 64 eigenvectors, 128-byte swizzle, zeros outside) is
/// encoded per launch on the host (no device call) and passed by value.
#[allow(clippy::too_many_arguments)]
fn launch_expand_tma(dev: &Arc<CudaDevice>, g: &Geometry, (nh, bulk, slots, smem): (usize, bool, usize, usize), basis: u64, s_op: u64, mass: u64, out: u64, dt_part: u64, d_times: u64) -> Result<()> {
    // v15: the ping-pong order is built for the bulk epilogue only (the default wherever the TMA
    // expand runs with 16-byte rows).
    let ctas_per_column_tile = (dev.info().multiprocessors.max(1) as usize / g.expand_grid.1.max(1) as usize).max(1);
    let pingpong = bulk
        && match expand_order_mode() {
            ExpandOrder::PingPong => true,
            ExpandOrder::Together => false,
            ExpandOrder::Auto => g.n_tiles.div_ceil(ctas_per_column_tile) <= PINGPONG_MAX_TILES_PER_CTA,
        };
    let entry = match (nh, bulk, pingpong) {
        (1, false, _) => "diffusion_expand_wgt1",
        (_, false, _) => "diffusion_expand_wgt2",
        (1, true, false) => "diffusion_expand_wgtb1",
        (_, true, false) => "diffusion_expand_wgtb2",
        (1, true, true) => "diffusion_expand_wgtb1_pp",
        (_, true, true) => "diffusion_expand_wgtb2_pp",
    };
    let es = g.dtype.size() as u64;
    let map = ember_core::cuda::tensor_map_2d_sw128(g.dtype, basis, g.n_rows as u64, g.k as u64, g.k as u64 * es, EBM as u32, ETM_BOX_K as u32)?;
    // v14: the bulk epilogue with 16-byte rows writes the output by tensor stores (boxes of 16 rows ×
    // 64 columns, 128-byte swizzle); elsewhere the kernel does not read `map_out` (the basis map fills it).
    let map_out = if bulk && g.vec {
        ember_core::cuda::tensor_map_2d_sw128(g.dtype, out, g.n_rows as u64, g.c as u64, g.c as u64 * es, 16, 64)?
    } else {
        map
    };
    let (f, occ) = kernel(dev, &SOURCE, g.dtype, entry, smem)?;
    let (n_rows, n_tiles, slots) = (g.n_rows, g.n_tiles as i64, slots as i32);
    let (c, kp, cp, vec, dt_rows) = (g.c as i32, g.kpe as i32, g.cpe as i32, i32::from(g.vec), to_i32(g.dt_rows(), "meshes × eigenvector blocks")?);
    dev.launch(&f, expand_cfg(dev, g, occ, smem))
        .arg(&s_op)
        .arg(&mass)
        .arg(&out)
        .arg(&g.tile_table)
        .arg(&n_rows)
        .arg(&n_tiles)
        .arg(&c)
        .arg(&kp)
        .arg(&cp)
        .arg(&vec)
        .arg(&dt_part)
        .arg(&dt_rows)
        .arg(&d_times)
        .arg(&slots)
        .arg(&map)
        .arg(&map_out)
        .dependent()
        .named("diffusion_expand")
        .run()
}

/// Threads per output in the finalize (blockDim.z): each sums a quarter (or half, or all) of the
/// mesh's chunk sub-sums (diffusion.cu's FIN_PARTS = 4 parts, combined in a fixed tree, so the bits
/// do not depend on this). The finalize is bound by L2 latency: one thread per output held 8 loads
/// in flight over ~130 partials at 8 warps per SM (V = 131072, one mesh); 4 layers put 32 warps
/// per SM on it (fwd −4.7 % there, V = 16384 −9 %). Only where the one-layer grid leaves the GPU
/// room for the others (a batch of 16 meshes already has 2048 blocks, which 4 layers made 15 waves
/// of 1024-thread blocks: fwd+bwd 0.258 → 0.304 ms) and the meshes have chunks enough to share
/// (16: below, a mesh's chunks are one part).
/// `EMBER_DIFFUSION_FINALIZE_LAYERS=1|2|4` (measurements) forces it.
fn finalize_layers(n_sm: usize, blocks: usize, chunks_per_mesh: usize) -> u32 {
    static FORCED: OnceLock<Option<u32>> = OnceLock::new();
    if let Some(l) = *FORCED.get_or_init(|| ember_core::knob("EMBER_DIFFUSION_FINALIZE_LAYERS").and_then(|v| v.parse::<u32>().ok()).filter(|l| [1, 2, 4].contains(l))) {
        return l;
    }
    // Threads the GPU holds at once (2048 per SM) against one layer's; meshes of fewer than
    // fin_split_min() chunks (FIN_SPLIT_MIN in diffusion.cu) are summed as one part, which one
    // layer does.
    let room = (n_sm * 2048) / (blocks * 256).max(1);
    if room >= 4 && chunks_per_mesh >= fin_split_min() {
        4
    } else {
        1
    }
}

/// The finalize build for geometry `g` (see [`finalize_1cta`]).
fn finalize_entry(dev: &Arc<CudaDevice>, g: &Geometry, bwd: bool) -> &'static str {
    match (bwd, finalize_1cta(g, dev.info().multiprocessors.max(1) as usize)) {
        (false, false) => "diffusion_finalize_fwd",
        (false, true) => "diffusion_finalize_fwd_1cta",
        (true, false) => "diffusion_finalize_bwd",
        (true, true) => "diffusion_finalize_bwd_1cta",
    }
}

fn finalize_cfg(g: &Geometry) -> LaunchConfig {
    LaunchConfig { grid_dim: (g.finalize_grid.0, g.finalize_grid.1, 1), block_dim: (32, 8, g.finalize_layers), shared_mem_bytes: 0 }
}

#[allow(clippy::too_many_arguments)]
fn launch_finalize_fwd(dev: &Arc<CudaDevice>, g: &Geometry, partials: u64, evals: u64, times: u64, spectral: u64, saved: u64, s_op: u64) -> Result<()> {
    let (f, _) = kernel(dev, &SOURCE, g.dtype, finalize_entry(dev, g, false), 0)?;
    let (n_chunks, k, c, kpr, cpr, kpe, cpe) = (g.n_chunks as i64, g.k as i32, g.c as i32, g.kpr as i32, g.cpr as i32, g.kpe as i32, g.cpe as i32);
    dev.launch(&f, finalize_cfg(g))
        .arg(&partials)
        .arg(&g.chunk_prefix)
        .arg(&n_chunks)
        .arg(&evals)
        .arg(&times)
        .arg(&k)
        .arg(&c)
        .arg(&kpr)
        .arg(&cpr)
        .arg(&spectral)
        .arg(&saved)
        .arg(&s_op)
        .arg(&kpe)
        .arg(&cpe)
        .dependent()
        .named("diffusion_finalize_fwd")
        .run()
}

#[allow(clippy::too_many_arguments)]
fn launch_finalize_bwd(dev: &Arc<CudaDevice>, g: &Geometry, partials: u64, evals: u64, times: u64, saved: u64, d_spectral: u64, g_op: u64, dt_part: u64) -> Result<()> {
    let (f, _) = kernel(dev, &SOURCE, g.dtype, finalize_entry(dev, g, true), 0)?;
    let (n_chunks, k, c, kpr, cpr, kpe, cpe) = (g.n_chunks as i64, g.k as i32, g.c as i32, g.kpr as i32, g.cpr as i32, g.kpe as i32, g.cpe as i32);
    dev.launch(&f, finalize_cfg(g))
        .arg(&partials)
        .arg(&g.chunk_prefix)
        .arg(&n_chunks)
        .arg(&evals)
        .arg(&times)
        .arg(&saved)
        .arg(&d_spectral)
        .arg(&k)
        .arg(&c)
        .arg(&kpr)
        .arg(&cpr)
        .arg(&g_op)
        .arg(&kpe)
        .arg(&cpe)
        .arg(&dt_part)
        .dependent()
        .named("diffusion_finalize_bwd")
        .run()
}

/// The two barrier words of `grid_sync` on each device: zeroed once, and every launch leaves them
/// at {0, generation}, so they are never reset.
fn barrier(dev: &Arc<CudaDevice>) -> Result<u64> {
    static BARS: OnceLock<Mutex<HashMap<usize, Tensor>>> = OnceLock::new();
    let ordinal = dev.info().ordinal;
    let mut map = BARS.get_or_init(Default::default).lock().unwrap();
    if let Some(t) = map.get(&ordinal) {
        return t.cuda_ptr();
    }
    let t = Tensor::zeros(&[64], DType::F32, Device::Cuda(ordinal))?;
    let p = t.cuda_ptr()?;
    map.insert(ordinal, t);
    Ok(p)
}

/// Shared memory of the fused kernels: the larger of their reduce and expand phases.
fn fused_smem(g: &Geometry) -> usize {
    reduce_smem(g.dtype, 2, stages()).max(expand_smem(g.dtype, 2, g.kpe, stages()))
}

/// The grid of a fused pass on geometry `g`, or None where the pass runs as three launches.
fn fused_grid(dev: &Arc<CudaDevice>, g: &Geometry, tune: &Tuning) -> Result<Option<u32>> {
    let mode = match tune.fused {
        Some(true) => FusedMode::Always,
        Some(false) => FusedMode::Never,
        None => fused_mode(),
    };
    if mode == FusedMode::Never || g.rwn != 2 || g.ewn != 2 || g.ewg.is_some() || g.rwg.is_some() {
        return Ok(None);
    }
    // The same grid must fit both passes (their register counts may differ).
    let (_, occ_f) = kernel(dev, &SOURCE, g.dtype, "diffusion_fused_fwd", fused_smem(g))?;
    let (_, occ_b) = kernel(dev, &SOURCE, g.dtype, "diffusion_fused_bwd", fused_smem(g))?;
    let cap = dev.info().multiprocessors.max(1) as usize * occ_f.min(occ_b) as usize;
    let n_reduce = g.reduce_grid.0 as usize * g.reduce_grid.1 as usize;
    let n_nt = g.expand_grid.1 as usize;
    let n_expand = g.n_tiles * n_nt;
    let n_fin = g.finalize_grid.0 as usize * g.finalize_grid.1 as usize;
    if n_nt > cap || (mode == FusedMode::Auto && (n_reduce > cap || n_expand > cap)) {
        return Ok(None);
    }
    Ok(Some(n_reduce.max(n_expand).max(n_fin).min(cap).max(n_nt) as u32))
}

/// Pointers of one fused pass (null where the pass has none).
struct FusedArgs {
    y: u64,
    saved_in: u64,
    d_spectral: u64,
    spectral: u64,
    saved_out: u64,
    partials: u64,
    op: u64,
    out: u64,
    dt_part: u64,
    d_times: u64,
}

fn launch_fused(dev: &Arc<CudaDevice>, g: &Geometry, m: &Meshes, times: &Tensor, grid: u32, bwd: bool, a: &FusedArgs) -> Result<()> {
    let entry = if bwd { "diffusion_fused_bwd" } else { "diffusion_fused_fwd" };
    let smem = fused_smem(g);
    let (f, _) = kernel(dev, &SOURCE, g.dtype, entry, smem)?;
    let bar = barrier(dev)?;
    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (NTHREADS, 1, 1), shared_mem_bytes: smem as u32 };
    let (basis, mass, evals, tp) = (m.basis.cuda_ptr()?, m.mass.cuda_ptr()?, m.evals.cuda_ptr()?, times.cuda_ptr()?);
    let (rows, n_rows, n_chunks, n_tiles, meshes) = (g.chunk_rows, g.n_rows, g.n_chunks as i64, g.n_tiles as i64, g.meshes as i64);
    let (k, c, kpr, cpr, kpe, cpe, vec) = (g.k as i32, g.c as i32, g.kpr as i32, g.cpr as i32, g.kpe as i32, g.cpe as i32, i32::from(g.vec));
    dev.launch(&f, cfg)
        .arg(&basis)
        .arg(&a.y)
        .arg(&mass)
        .arg(&evals)
        .arg(&tp)
        .arg(&a.saved_in)
        .arg(&a.d_spectral)
        .arg(&a.spectral)
        .arg(&a.saved_out)
        .arg(&a.partials)
        .arg(&a.op)
        .arg(&a.out)
        .arg(&a.dt_part)
        .arg(&a.d_times)
        .arg(&g.chunk_table)
        .arg(&g.tile_table)
        .arg(&g.chunk_prefix)
        .arg(&rows)
        .arg(&n_rows)
        .arg(&n_chunks)
        .arg(&n_tiles)
        .arg(&k)
        .arg(&c)
        .arg(&kpr)
        .arg(&cpr)
        .arg(&kpe)
        .arg(&cpe)
        .arg(&vec)
        .arg(&meshes)
        .arg(&bar)
        .named(entry)
        .run_cooperative()
}

pub(crate) fn forward(m: &Meshes, x: &Tensor, times: &Tensor) -> Result<Forward> {
    forward_tuned(m, x, times, &Tuning::default())
}

pub(crate) fn forward_tuned(m: &Meshes, x: &Tensor, times: &Tensor, tune: &Tuning) -> Result<Forward> {
    let dev = x.cuda_device()?.clone();
    let (c, dtype, device) = (x.dim(1), m.dtype(), m.device());
    let g = Geometry::new(&dev, m, c, tune)?;
    let out = Tensor::output(x.shape(), dtype, device)?;
    let spectral = Tensor::output(&m.spectral_shape(c), dtype, device)?;
    let saved = Tensor::output(&[g.meshes, g.k, c], DType::F32, device)?;
    let ws = workspace(device, &[g.partial_bytes()?, g.operand_bytes()])?;
    let (partials, s_op) = (ws.part(0), ws.part(1));
    if let Some(grid) = fused_grid(&dev, &g, tune)? {
        let a = FusedArgs {
            y: x.cuda_ptr()?,
            saved_in: 0,
            d_spectral: 0,
            spectral: spectral.cuda_ptr()?,
            saved_out: saved.cuda_ptr()?,
            partials,
            op: s_op,
            out: out.cuda_ptr()?,
            dt_part: 0,
            d_times: 0,
        };
        launch_fused(&dev, &g, m, times, grid, false, &a)?;
        return Ok(Forward { out, spectral, saved });
    }
    let (basis, mass) = (m.basis.cuda_ptr()?, m.mass.cuda_ptr()?);

    launch_reduce(&dev, &g, basis, x.cuda_ptr()?, mass, partials)?;

    launch_finalize_fwd(&dev, &g, partials, m.evals.cuda_ptr()?, times.cuda_ptr()?, spectral.cuda_ptr()?, saved.cuda_ptr()?, s_op)?;

    launch_expand(&dev, &g, basis, s_op, 0, out.cuda_ptr()?, 0, 0)?;
    Ok(Forward { out, spectral, saved })
}

pub(crate) fn backward(m: &Meshes, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>) -> Result<Grads> {
    backward_tuned(m, times, fwd, d_out, d_spectral, &Tuning::default())
}

pub(crate) fn backward_tuned(m: &Meshes, times: &Tensor, fwd: &Forward, d_out: &Tensor, d_spectral: Option<&Tensor>, tune: &Tuning) -> Result<Grads> {
    let dev = d_out.cuda_device()?.clone();
    let (c, dtype, device) = (d_out.dim(1), m.dtype(), m.device());
    let g = Geometry::new(&dev, m, c, tune)?;
    let d_x = Tensor::output(d_out.shape(), dtype, device)?;
    let d_times = Tensor::output(&[c], DType::F32, device)?;
    let ws = workspace(device, &[g.partial_bytes()?, g.operand_bytes(), g.dt_rows() * g.cpe * 4])?;
    let (partials, g_op, dt_part) = (ws.part(0), ws.part(1), ws.part(2));
    let basis = m.basis.cuda_ptr()?;
    let dsp = match d_spectral {
        Some(t) => t.cuda_ptr()?,
        None => 0u64,
    };
    if let Some(grid) = fused_grid(&dev, &g, tune)? {
        let a = FusedArgs {
            y: d_out.cuda_ptr()?,
            saved_in: fwd.saved.cuda_ptr()?,
            d_spectral: dsp,
            spectral: 0,
            saved_out: 0,
            partials,
            op: g_op,
            out: d_x.cuda_ptr()?,
            dt_part,
            d_times: d_times.cuda_ptr()?,
        };
        launch_fused(&dev, &g, m, times, grid, true, &a)?;
        return Ok(Grads { d_x, d_times });
    }

    launch_reduce(&dev, &g, basis, d_out.cuda_ptr()?, 0, partials)?;

    launch_finalize_bwd(&dev, &g, partials, m.evals.cuda_ptr()?, times.cuda_ptr()?, fwd.saved.cuda_ptr()?, dsp, g_op, dt_part)?;

    launch_expand(&dev, &g, basis, g_op, m.mass.cuda_ptr()?, d_x.cuda_ptr()?, dt_part, d_times.cuda_ptr()?)?;
    Ok(Grads { d_x, d_times })
}

/// One launch of forward or backward timed alone: (name, ms, fewest bytes, flops).
pub(crate) type Phase = (&'static str, f64, f64, f64);
/// Times one launch closure (the bench's timer).
pub(crate) type Timer<'a> = dyn FnMut(&mut dyn FnMut() -> Result<()>) -> Result<f64> + 'a;

/// Times each of the six launches of forward and backward separately (the bench's optional phase
/// rows), on buffers allocated once.
pub(crate) fn phase_times(time: &mut Timer, m: &Meshes, x: &Tensor, times: &Tensor, d_out: &Tensor) -> Result<Vec<Phase>> {
    let dev = x.cuda_device()?.clone();
    let (c, dtype, device) = (x.dim(1), m.dtype(), m.device());
    let g = Geometry::new(&dev, m, c, &Tuning::default())?;
    // v6: both reduce variants timed in the same run where the wgmma one can run.
    let variants: Vec<(&'static str, &'static str, Geometry)> = if reduce_wg_available(&dev, dtype, c) {
        let mut v = Vec::new();
        for (mode, f, b) in [(WgmmaMode::Never, "fwd:reduce mma.sync", "bwd:reduce mma.sync"), (WgmmaMode::Always, "fwd:reduce wgmma", "bwd:reduce wgmma")] {
            v.push((f, b, Geometry::new(&dev, m, c, &Tuning { reduce_wg: Some(mode), reduce_load: Some(ReduceLoad::CpAsync), ..Tuning::default() })?));
        }
        // v12b: the TMA-fed wgmma reduce beside the cp.async one.
        if m.k().is_multiple_of(8) && c.is_multiple_of(8) {
            let t = Tuning { reduce_wg: Some(WgmmaMode::Always), reduce_load: Some(ReduceLoad::Tma), ..Tuning::default() };
            v.push(("fwd:reduce wgmma tma", "bwd:reduce wgmma tma", Geometry::new(&dev, m, c, &t)?));
        }
        v
    } else {
        Vec::new()
    };
    // v8: the wgmma expand with each store path, timed in the same run where both can run.
    let k = g.k;
    // v9: the same two store paths with TMA loads where they can run ("load=tma" rows beside the
    // cp.async ones above).
    let mut expand_variants: Vec<(&'static str, &'static str, Geometry)> = Vec::new();
    if expand_wg_available(&dev, dtype, k, c, false) && expand_wg_available(&dev, dtype, k, c, true) {
        for (store, f, b) in [(ExpandStore::Direct, "fwd:expand store=direct", "bwd:expand store=direct"), (ExpandStore::Bulk, "fwd:expand store=bulk", "bwd:expand store=bulk")] {
            let t = Tuning { expand_wg: Some(true), expand_store: Some(store), expand_load: Some(ExpandLoad::CpAsync), ..Tuning::default() };
            expand_variants.push((f, b, Geometry::new(&dev, m, c, &t)?));
        }
    }
    if expand_tma_available(&dev, dtype, k, c, false) && expand_tma_available(&dev, dtype, k, c, true) {
        for (store, f, b) in [
            (ExpandStore::Direct, "fwd:expand load=tma store=direct", "bwd:expand load=tma store=direct"),
            (ExpandStore::Bulk, "fwd:expand load=tma store=bulk", "bwd:expand load=tma store=bulk"),
        ] {
            let t = Tuning { expand_wg: Some(true), expand_store: Some(store), expand_load: Some(ExpandLoad::Tma), ..Tuning::default() };
            expand_variants.push((f, b, Geometry::new(&dev, m, c, &t)?));
        }
    }
    let out = Tensor::output(x.shape(), dtype, device)?;
    let spectral = Tensor::output(&m.spectral_shape(c), dtype, device)?;
    let saved = Tensor::output(&[g.meshes, g.k, c], DType::F32, device)?;
    let d_x = Tensor::output(x.shape(), dtype, device)?;
    let d_times = Tensor::output(&[c], DType::F32, device)?;
    let mut partial_bytes = g.partial_bytes()?;
    for (_, _, gv) in &variants {
        partial_bytes = partial_bytes.max(gv.partial_bytes()?);
    }
    // The expand variants read the operand and d_times rows of their own finalize (below): sized
    // for the largest padding.
    let (mut op_bytes, mut dt_bytes) = (g.operand_bytes(), g.dt_rows() * g.cpe * 4);
    for (_, _, gv) in &expand_variants {
        op_bytes = op_bytes.max(gv.operand_bytes());
        dt_bytes = dt_bytes.max(gv.dt_rows() * gv.cpe * 4);
    }
    let ws = workspace(device, &[partial_bytes, op_bytes, dt_bytes])?;
    let (partials, s_op, dt_part) = (ws.part(0), ws.part(1), ws.part(2));
    let (basis, mass, evals, tp) = (m.basis.cuda_ptr()?, m.mass.cuda_ptr()?, m.evals.cuda_ptr()?, times.cuda_ptr()?);
    let (es, v, k) = (dtype.size() as f64, g.n_rows as f64, g.k as f64);
    let cf = c as f64;
    let gemm = 2.0 * v * k * cf;
    let fin = (g.n_chunks * g.k * c * 4) as f64 + g.meshes as f64 * k * cf * (2.0 * es + 4.0);
    let mut rows = vec![("fwd:reduce", time(&mut || launch_reduce(&dev, &g, basis, x.cuda_ptr()?, mass, partials))?, es * v * (cf + k + 1.0), gemm)];
    rows.push(("fwd:finalize", time(&mut || launch_finalize_fwd(&dev, &g, partials, evals, tp, spectral.cuda_ptr()?, saved.cuda_ptr()?, s_op))?, fin, 0.0));
    rows.push(("fwd:expand", time(&mut || launch_expand(&dev, &g, basis, s_op, 0, out.cuda_ptr()?, 0, 0))?, es * v * (k + cf), gemm));
    rows.push(("bwd:reduce", time(&mut || launch_reduce(&dev, &g, basis, d_out.cuda_ptr()?, 0, partials))?, es * v * (cf + k), gemm));
    rows.push(("bwd:finalize", time(&mut || launch_finalize_bwd(&dev, &g, partials, evals, tp, saved.cuda_ptr()?, 0, s_op, dt_part))?, fin, 0.0));
    rows.push((
        "bwd:expand",
        time(&mut || launch_expand(&dev, &g, basis, s_op, mass, d_x.cuda_ptr()?, dt_part, d_times.cuda_ptr()?))?,
        es * v * (k + cf + 1.0),
        gemm,
    ));
    for (f, b, gv) in &variants {
        rows.push((f, time(&mut || launch_reduce(&dev, gv, basis, x.cuda_ptr()?, mass, partials))?, es * v * (cf + k + 1.0), gemm));
        rows.push((b, time(&mut || launch_reduce(&dev, gv, basis, d_out.cuda_ptr()?, 0, partials))?, es * v * (cf + k), gemm));
    }
    for (f, b, gv) in &expand_variants {
        // The variant's own reduce and finalize first, so the operand it reads has its padding.
        launch_reduce(&dev, gv, basis, x.cuda_ptr()?, mass, partials)?;
        launch_finalize_fwd(&dev, gv, partials, evals, tp, spectral.cuda_ptr()?, saved.cuda_ptr()?, s_op)?;
        rows.push((f, time(&mut || launch_expand(&dev, gv, basis, s_op, 0, out.cuda_ptr()?, 0, 0))?, es * v * (k + cf), gemm));
        rows.push((b, time(&mut || launch_expand(&dev, gv, basis, s_op, mass, d_x.cuda_ptr()?, dt_part, d_times.cuda_ptr()?))?, es * v * (k + cf + 1.0), gemm));
    }
    Ok(rows)
}

/// times ← max(times, lo) in place (the layer's clamp); times is f32 on a CUDA device.
pub fn clamp_min(times: &Tensor, lo: f32) -> Result<()> {
    let dev = times.cuda_device()?.clone();
    let f = dev.function(&LAYER_SOURCE, &[], "diffusion_clamp_min_f32")?;
    let (p, n) = (times.cuda_ptr()?, times.numel() as i64);
    let grid = to_u32_grid(times.numel().div_ceil(256), i32::MAX as usize, "times")?;
    dev.launch(&f, ember_core::cuda::cfg_1d(grid, 256, 0)).arg(&p).arg(&n).arg(&lo).named("diffusion_clamp").run()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four threads per output only where the one-layer finalize grid leaves three quarters of the
    /// GPU's threads free and meshes have 16 chunks or more (fewer are summed as one part).
    #[test]
    fn finalize_layers_follow_the_grid_and_the_chunks() {
        // One mesh, K = 128, C = 256: 8 × 16 blocks of 256 threads on 132 SMs.
        assert_eq!(finalize_layers(132, 128, 128), 4);
        assert_eq!(finalize_layers(132, 128, 64), 4);
        // Meshes of 15 chunks or fewer: one part per output, one layer.
        assert_eq!(finalize_layers(132, 128, 15), 1);
        // A batch of 16 meshes: 2048 blocks already fill the GPU.
        assert_eq!(finalize_layers(132, 2048, 32), 1);
        // Exactly a quarter of the threads: 4 layers fill the GPU once.
        assert_eq!(finalize_layers(132, 264, 16), 4);
        assert_eq!(finalize_layers(132, 265, 16), 1);
    }
}
