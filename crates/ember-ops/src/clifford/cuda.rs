//! CUDA launch code of the Clifford layers.
//!
//! Each kernel module is one translation unit: ember's common header, a prefix generated for the
//! algebra (sizes, ember-ga's device functions, tables) and one hand-written template (`rows.cu`,
//! `cols.cu`, `tile.cu`, `fc_simt.cu`) whose options pick the kernel, the dtype and the variant. A
//! module is built once per (algebra, kernel, dtype, variant) by NVRTC and cached in memory and on
//! disk; its only entry point is `cl_kernel`. Each op is planned first ([`super::plan`]): buffers and
//! launches, run by [`run_cuda`] here and by the host emulation in the unit tests.

use super::fc2::{self, FcVariant};
use super::fc3;
use super::fcb::{self, FcBwdVariant};
use super::fused::Stages;
use super::gen::Tables;
use super::layer::{Layer, Prog};
use super::linear::LinearGrads;
use super::plan::{run_cuda, Arg, Launch, Plan};
use super::reference::Dims;
use super::{Forward, Grads};
use crate::KernelBuild;
use ember_core::cuda::KernelSource;
use ember_core::{DType, Error, Result, Tensor};
use ember_ga::cuda::{device_function, kernel, KernelSpec};

const ROWS_CU: &str = include_str!("rows.cu");
const COLS_CU: &str = include_str!("cols.cu");
const ROWWISE_CU: &str = include_str!("rowwise.cu");
const WHOLE_CU: &str = include_str!("whole.cu");
/// The dynamic shared memory accessor, put before the row and backward kernels.
const SMEM_CU: &str = include_str!("smem.cu");
/// Pieces shared by the backward kernels (cols.cu, rowwise.cu, whole.cu), put before each.
const BWD_COMMON_CU: &str = include_str!("bwd_common.cu");
/// Before `BWD_COMMON_CU` in kernels that take the row statistics themselves (rowwise, whole).
const BWD_STATS: &str = "#define CL_BWD_STATS 1\n";
const TILE_CU: &str = include_str!("tile.cu");
const SIMT_CU: &str = include_str!("fc_simt.cu");
/// Algebra-independent reductions.
pub const SUMS: KernelSource = KernelSource::new("clifford_sums", include_str!("sums.cu"));
const THREADS: u32 = 256;

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The module `key` of `layer`'s algebra, generated on first use.
pub(super) fn source(layer: &Layer, key: &str, make: impl FnOnce() -> Result<String>) -> Result<KernelSource> {
    let mut map = layer.inner.sources.lock().unwrap();
    if let Some(s) = map.get(key) {
        return Ok(*s);
    }
    let src = KernelSource::new(leak(format!("clifford_{}_{}", layer.tag(), key)), leak(make()?));
    map.insert(key.to_string(), src);
    Ok(src)
}

/// Sizes of the algebra and the device functions of `progs`.
pub(super) fn prefix(layer: &Layer, progs: &[Prog]) -> Result<String> {
    let t = layer.tables();
    let mut s = format!("#define CL_M {}\n#define CL_P {}\n#define CL_NG {}\n#define CL_NT {}\n", t.m(), t.p(), t.ng(), t.nt());
    for &p in progs {
        s.push_str(&device_function(&*layer.ir(p)?));
    }
    Ok(s)
}

pub(super) fn dtype_opt(d: DType) -> String {
    format!("-DEMBER_T={}", d.cuda_type())
}

fn ga_dtype(d: DType) -> Result<ember_ga::layout::DType> {
    match d {
        DType::F32 => Ok(ember_ga::layout::DType::F32),
        DType::F16 => Ok(ember_ga::layout::DType::F16),
        DType::BF16 => Ok(ember_ga::layout::DType::BF16),
        DType::F64 => Err(Error::dtype("x", "f32, f16 or bf16 on CUDA", d)),
    }
}

/// Channels per thread and step of the row kernels: 16-byte f32 vectors up to 8 blades, fewer for
/// larger algebras (registers), 1 when N is not a multiple.
fn vec_width(m: usize, n: usize) -> usize {
    let vmax = vec_max(m);
    if n.is_multiple_of(vmax) {
        vmax
    } else {
        1
    }
}

fn vec_max(m: usize) -> usize {
    match m {
        0..=8 => 4,
        9..=16 => 2,
        _ => 1,
    }
}

/// Threads per row: the groups of a row rounded up to a power of two in 32..=256.
fn team(groups: usize) -> u32 {
    groups.next_power_of_two().clamp(32, THREADS as usize) as u32
}

pub(super) fn blocks(arg: &str, items: usize, per_block: usize) -> Result<u32> {
    u32::try_from(items.div_ceil(per_block).max(1))
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| Error::TooLarge { arg: arg.into(), what: format!("{items} work items exceed one launch's grid") })
}

// ---- fused layer ---------------------------------------------------------------------------------

fn fwd_source(layer: &Layer, gelu: bool) -> Result<KernelSource> {
    source(layer, &format!("fwd{}", u8::from(gelu)), || Ok(prefix(layer, &[Prog::Fwd { gelu }, Prog::Scale])? + SMEM_CU + ROWS_CU))
}

/// The row kernels' shorter norm tail (rows.cu CL_FAST_NORM) for the half types, where it was measured
/// faster on an H200 (staged forward −19 to −25 %), and for f32 where the caller asks (`f32_fast`: the
/// staged forward up to [`F32_FAST_NORM_MAX_ELEMENTS`]); elsewhere f32 keeps the IEEE sqrt and division.
/// `EMBER_CLIFFORD_FAST_NORM=1|0` sets it for every dtype and size (measurements of the f32 case, NOTES
/// "v18", "v22"). The variable is read once per process: the options are built on every call's plan.
fn fast_norm_opt(dt: DType, f32_fast: bool, o: &mut Vec<String>) {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| match ember_core::knob("EMBER_CLIFFORD_FAST_NORM") {
        Some("1") => Some(true),
        Some("0") => Some(false),
        _ => None,
    });
    if forced.unwrap_or(dt != DType::F32 || f32_fast) {
        o.push("-DCL_FAST_NORM=1".into());
    }
}

/// Elements (B·N) up to which the f32 staged forward takes the short norm tail. Measured on an H200
/// (NOTES "v18", "v22"): faster at B·N ≤ 2^21 (1024 × 512, 4096 × 256, 4096 × 512, 16384 × 128), but
/// 4–8 % slower at N = 1024 and from 2^22 up when calls run back to back, for reasons not found.
pub const F32_FAST_NORM_MAX_ELEMENTS: usize = 1 << 21;

fn fwd_opts(dt: DType, v: usize, norm: bool, hold: bool, staged: bool) -> Vec<String> {
    fwd_opts_tail(dt, v, norm, hold, staged, false)
}

/// `fwd_opts` with the f32 short norm tail chosen by the caller (`f32_fast`; the half types always
/// take it).
fn fwd_opts_tail(dt: DType, v: usize, norm: bool, hold: bool, staged: bool, f32_fast: bool) -> Vec<String> {
    let mut o = vec![dtype_opt(dt), "-DCL_KIND=1".into(), format!("-DCL_V={v}"), format!("-DCL_NORM={}", u8::from(norm)), format!("-DCL_K={}", u8::from(hold))];
    fast_norm_opt(dt, f32_fast, &mut o);
    if staged {
        o.extend(staged_opts());
    }
    o
}

/// Steps per SM from which the staged forward (fixed order) copies its first two steps in the
/// prologue (rows.cu CL_PRE2, v16b). Measured on an H200 (Cl(3,0) f32, two runs, against one step):
/// 1–2 % faster at 7.75 and 15.5 steps per SM (4096 × 256, 4096 × 512, 16384 × 128), level at 31 and
/// more, 5 % slower at 3.9 (1024 × 512), where the second step's copies delay the first step's.
pub const PREFETCH2_MIN_STEPS_PER_SM: usize = 6;

/// Whether the staged forward's prologue copies two steps: `EMBER_CLIFFORD_FWD_PREFETCH=1|2`
/// forces one or two; by default two from [`PREFETCH2_MIN_STEPS_PER_SM`] steps per SM.
fn prefetch_two(steps: usize, sms: usize) -> bool {
    match ember_core::knob("EMBER_CLIFFORD_FWD_PREFETCH") {
        Some("1") => false,
        Some("2") => true,
        _ => steps >= PREFETCH2_MIN_STEPS_PER_SM * sms,
    }
}

/// The staged forward's run-time step order (rows.cu, CL_DYN; `RowVariant::Dynamic`).
const DYNAMIC_OPT: &str = "-DCL_DYN=1";
/// Steps per SM from which `RowVariant::Dynamic` takes steps at run time; below, its fixed order.
/// Measured on an H100 (Cl(3,0) f32, the bench grid): 1.6–6 % faster from 15.5 steps per SM up
/// (4096 × 512 and larger), 2–10 % slower at 7.75 and fewer (1024 × N, 4096 × 128 and 256), where a
/// step is too short to hide the ticket's round trip to L2.
pub const DYNAMIC_MIN_STEPS_PER_SM: usize = 12;
/// Peak DRAM bandwidth (GB/s) from which the default staged forward keeps its fixed step order.
/// Measured, Cl(3,0) f32, dynamic against fixed order in the same run: H100 SXM (3.35 TB/s peak)
/// 1–4 % faster at 2^21 … 2^26; H200 (4.8 TB/s) 5–14 % slower (4096 × 512 65.7 / 60.4 µs,
/// 16384 × 128 61.0 / 58.3 µs, 65536 × 1024 1.755 / 1.542 ms). Not understood yet (NOTES "v11").
pub const DYNAMIC_MAX_DRAM_GBPS: f64 = 4000.0;

/// Layout of the staged row kernels' weights in shared memory (rows.cu, CL_WGROUP):
/// `EMBER_CLIFFORD_WSTAGE=transposed` keeps v3's sw[p][n] staged by 4-byte cp.async, `=ldg` v2's
/// __ldg loop into the same layout, for comparison; by default w's own order in groups of CL_V
/// channels, copied by 16-byte cp.async (v16).
fn weights_grouped() -> bool {
    !matches!(ember_core::knob("EMBER_CLIFFORD_WSTAGE"), Some("transposed" | "ldg"))
}

fn staged_opts() -> Vec<String> {
    let mut o = vec!["-DCL_WS=1".to_string()];
    match ember_core::knob("EMBER_CLIFFORD_WSTAGE") {
        Some("transposed") => o.push("-DCL_WGROUP=0".into()),
        Some("ldg") => o.extend(["-DCL_WGROUP=0".into(), "-DCL_WCP=0".into()]),
        _ => {}
    }
    o
}

/// Shared memory of the staged weights (rows.cu, CL_WWORDS): P·N words transposed; grouped (where
/// v·P is a multiple of 4, else transposed), N / v groups of v·P words at a stride whose quarter is
/// odd.
fn staged_weight_bytes(layer: &Layer, n: usize, v: usize) -> usize {
    let p = layer.paths();
    if weights_grouped() && (v * p).is_multiple_of(4) {
        let gw = v * p;
        let gs = gw + if (gw / 4).is_multiple_of(2) { 4 } else { 0 };
        n / v * gs * 4
    } else {
        p * n * 4
    }
}

/// Variant of the fused layer's row kernels that read the weights (rows.cu): the forward, and the
/// backward's row statistics where they recompute o (half types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowVariant {
    /// v1: 256-thread CTAs, one per group of rows; weights read per thread from global memory at a
    /// stride of P words; the forward runs its phases one after the other (load, compute, reduce,
    /// store).
    Rows,
    /// CL_WS = 1: persistent CTAs with the weights staged in shared memory; the forward also copies
    /// the next rows' x and y by cp.async while the current rows compute (rows that fit one step
    /// per thread, N ≤ 256·V). Steps in a fixed grid-stride order. Where the shared memory of the
    /// device is too small: `Rows`.
    Staged,
    /// v9: `Staged` whose forward takes its steps at run time (CL_DYN = 1: a ticket per step from
    /// the device's work counters) where there are at least [`DYNAMIC_MIN_STEPS_PER_SM`] steps per
    /// SM, so faster SMs move more rows; the same bits as `Staged`. The backward's staged row
    /// statistics are `Staged`'s.
    Dynamic,
}

impl RowVariant {
    pub const ALL: [RowVariant; 3] = [RowVariant::Rows, RowVariant::Staged, RowVariant::Dynamic];
    /// `EMBER_CLIFFORD_ROWS=rows|staged|dynamic`; otherwise the default for `layer` on `gpu`: up to
    /// 8 blades the staged kernels (measured faster than rows on an H200: Cl(3,0) forward 40–48% →
    /// 66–99% of copy bandwidth), with the run-time step order only where the DRAM is slower than
    /// [`DYNAMIC_MAX_DRAM_GBPS`]; rows for 16 blades (staged measured slower there: one CTA per SM
    /// is too few warps for their arithmetic).
    pub fn selected(layer: &Layer, gpu: Gpu) -> RowVariant {
        match ember_core::knob("EMBER_CLIFFORD_ROWS") {
            Some("rows") => RowVariant::Rows,
            Some("staged") => RowVariant::Staged,
            Some("dynamic") => RowVariant::Dynamic,
            _ => RowVariant::default_for(layer, gpu),
        }
    }
    /// The default of [`RowVariant::selected`] (no environment override).
    pub fn default_for(layer: &Layer, gpu: Gpu) -> RowVariant {
        match layer.blades() {
            ..=8 if gpu.dram_gbps > 0.0 && gpu.dram_gbps < DYNAMIC_MAX_DRAM_GBPS => RowVariant::Dynamic,
            ..=8 => RowVariant::Staged,
            _ => RowVariant::Rows,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            RowVariant::Rows => "rows",
            RowVariant::Staged => "staged",
            RowVariant::Dynamic => "dynamic",
        }
    }
    /// Weights staged in shared memory by persistent CTAs (CL_WS = 1).
    pub fn staged(self) -> bool {
        self != RowVariant::Rows
    }
}

/// What a plan may depend on of the device: multiprocessors (persistent grids) and the shared
/// memory one CTA may opt in to.
#[derive(Clone, Copy, Debug)]
pub struct Gpu {
    pub sms: usize,
    pub smem_optin: usize,
    /// Peak DRAM bandwidth in GB/s; 0 when unknown.
    pub dram_gbps: f64,
}

impl Gpu {
    pub fn of(t: &Tensor) -> Result<Gpu> {
        let info = t.cuda_device()?.info();
        Ok(Gpu { sms: info.multiprocessors.max(1) as usize, smem_optin: info.shared_memory_per_block_optin.max(0) as usize, dram_gbps: info.dram_peak_gbps })
    }
}

/// Dynamic shared memory of the staged forward: the weights ([`staged_weight_bytes`]) and two buffers
/// of x and y.
fn staged_smem(layer: &Layer, n: usize, v: usize, dt: DType) -> usize {
    staged_weight_bytes(layer, n, v) + 2 * 2 * layer.blades() * THREADS as usize * v * dt.size()
}

fn rows_source(layer: &Layer, kind: &str) -> Result<KernelSource> {
    let progs: &[Prog] = match kind {
        "dot" => &[Prog::Fwd { gelu: true }, Prog::Dot],
        "normfwd" => &[Prog::Dot, Prog::Scale],
        _ => &[Prog::Dot, Prog::NormBwd],
    };
    source(layer, kind, || Ok(prefix(layer, progs)? + SMEM_CU + ROWS_CU))
}

fn rows_opts(dt: DType, kind: &str, v: usize, staged: bool) -> Vec<String> {
    let k = match kind {
        "dot" => 2,
        "normfwd" => 3,
        _ => 4,
    };
    let mut o = vec![dtype_opt(dt), format!("-DCL_KIND={k}"), format!("-DCL_V={v}")];
    fast_norm_opt(dt, false, &mut o);
    if kind == "dot" {
        // Half types recompute o in f32 rather than read their rounded `out`.
        o.push(format!("-DCL_DOT_O={}", u8::from(dt != DType::F32)));
        if staged {
            o.extend(staged_opts());
        }
    }
    o
}

fn bwd_source(layer: &Layer, gelu: bool, norm: bool) -> Result<KernelSource> {
    source(layer, &format!("bwd{}{}", u8::from(gelu), u8::from(norm)), || Ok(prefix(layer, &[Prog::Bwd { gelu, norm }])? + SMEM_CU + BWD_COMMON_CU + COLS_CU))
}

fn bwd_opts(dt: DType, norm: bool) -> Vec<String> {
    vec![dtype_opt(dt), format!("-DCL_NORM={}", u8::from(norm))]
}

/// A row kernel over `rows` rows of `n` channels: (grid, team).
fn row_launch(rows: usize, n: usize, v: usize) -> Result<(u32, u32)> {
    let t = team(n / v);
    Ok((blocks("x", rows, (THREADS / t) as usize)?, t))
}

pub(super) fn launch(src: KernelSource, opts: Vec<String>, grid: (u32, u32, u32), smem: usize, args: Vec<Arg>, name: &'static str) -> Launch {
    Launch { src, opts, entry: "cl_kernel".into(), grid, block: THREADS, smem, args, name, dependent: false }
}

fn sizes2(b: usize, n: usize) -> [Arg; 2] {
    [Arg::I64(b as i64), Arg::I64(n as i64)]
}

/// Fused forward: inputs [x, y, w]; outputs [out] or, with the norm, [out, rms].
pub fn plan_fused_forward(layer: &Layer, dims: Dims, dt: DType, st: Stages, var: RowVariant, gpu: Gpu) -> Result<Plan> {
    let mut plan = Plan::new(3);
    let v = vec_width(dims.m, dims.n);
    let groups = dims.n / v;
    let out = plan.output(&[dims.m, dims.b, dims.n], dt);
    let src = fwd_source(layer, st.gelu)?;
    let smem = staged_smem(layer, dims.n, v, dt);
    if var.staged() && v > 1 && groups <= THREADS as usize && smem + 1024 <= gpu.smem_optin {
        let t = team(groups);
        let steps = dims.b.div_ceil((THREADS / t) as usize);
        let grid = u32::try_from(steps.min(gpu.sms).max(1)).map_err(|_| Error::invalid("clifford", "grid overflows u32"))?;
        let rms = if st.norm { Arg::Buf(plan.output(&[dims.b, layer.grades()], DType::F32)) } else { Arg::Null };
        let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(out), rms];
        args.extend(sizes2(dims.b, dims.n));
        args.push(Arg::I32(t as i32));
        let f32_fast = st.norm && dims.b * dims.n <= F32_FAST_NORM_MAX_ELEMENTS;
        let mut opts = fwd_opts_tail(dt, v, st.norm, true, true, f32_fast);
        if var == RowVariant::Dynamic && steps >= DYNAMIC_MIN_STEPS_PER_SM * gpu.sms {
            opts.push(DYNAMIC_OPT.into());
            args.push(Arg::Counters(0));
        } else if !prefetch_two(steps, gpu.sms) {
            opts.push("-DCL_PRE2=0".into());
        }
        let name = if st.norm { "clifford_fwd_norm_staged" } else { "clifford_fwd_staged" };
        // One CTA per SM, as the grid assumes: the launch asks for more than half of an SM's shared
        // memory, else two CTAs can share an SM and leave another idle (half types at N = 512 with
        // v16's 112 registers: bf16 4096 × 512 53.2 µs against 48.6 under ncu).
        let smem_launch = smem.max(gpu.smem_optin / 2 + 1024);
        plan.launch(Launch { dependent: entry_pdl(), ..launch(src, opts, (grid, 1, 1), smem_launch, args, name) });
        return Ok(plan);
    }
    if !st.norm {
        let grid = blocks("x", dims.b * groups, THREADS as usize)?;
        let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(out), Arg::Null];
        args.extend(sizes2(dims.b, dims.n));
        args.push(Arg::I32(0));
        plan.launch(launch(src, fwd_opts(dt, v, false, false, false), (grid, 1, 1), 0, args, "clifford_fwd"));
        return Ok(plan);
    }
    // Hold o in registers across the row reduction when one step per thread covers the row.
    let hold = v > 1 && groups <= THREADS as usize;
    let rms = plan.output(&[dims.b, layer.grades()], DType::F32);
    let (grid, t) = row_launch(dims.b, dims.n, v)?;
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(out), Arg::Buf(rms)];
    args.extend(sizes2(dims.b, dims.n));
    args.push(Arg::I32(t as i32));
    plan.launch(launch(src, fwd_opts(dt, v, true, hold, false), (grid, 1, 1), 0, args, "clifford_fwd_norm"));
    Ok(plan)
}

pub fn fused_forward(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages) -> Result<Forward> {
    fused_forward_variant(layer, dims, x, y, w, st, RowVariant::selected(layer, Gpu::of(x)?))
}

/// [`fused_forward`] with an explicit kernel variant (the GPU checks run every one).
pub fn fused_forward_variant(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages, var: RowVariant) -> Result<Forward> {
    let mut outs = run_cuda(plan_fused_forward(layer, dims, x.dtype(), st, var, Gpu::of(x)?)?, &[x, y, w])?.into_iter();
    Ok(Forward { out: outs.next().expect("out"), rms: outs.next(), o: None })
}

/// Channels per CTA of the column kernel and row chunks: (ct, chunks, rows per chunk).
fn column_plan(b: usize, n: usize) -> (usize, usize, usize) {
    let ct = n.next_power_of_two().clamp(32, 128);
    let rt = THREADS as usize / ct;
    let col_tiles = n.div_ceil(ct);
    // About 256 CTAs in all (one wave of two per SM on a 132-SM GPU), independent of the device,
    // so the d_w summation order is too. H200, Cl(3,0) f32 fwd+bwd over the bench grid with targets
    // of 256 / 512 / 1024 / 2048 CTAs (`bench/results/nvidia-h200/clifford-v13/col-ctas/`): the
    // column kernel's variants got faster with fewer, longer chunks up to 2^23 (default cols at
    // 4096 × 1024: 396.1 µs at 1024, 389.7 at 512, 382.8 at 256; pipe at 1024 × 1024: 142.1,
    // 134.3, 131.4), level from 2^24 (±0.3 %), slower at 2048 everywhere; hence 256.
    // `EMBER_CLIFFORD_COL_CTAS=n` (measurements) aims at n instead.
    static CTAS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let ctas = *CTAS.get_or_init(|| ember_core::knob("EMBER_CLIFFORD_COL_CTAS").and_then(|v| v.parse().ok()).filter(|&n: &usize| (1..=1 << 20).contains(&n)).unwrap_or(256));
    let chunks = ctas.div_ceil(col_tiles).clamp(1, b.div_ceil(rt).max(1));
    let rows = b.div_ceil(chunks);
    (ct, b.div_ceil(rows), rows)
}

/// Variant of the fused layer's column backward and d_w chunk sums (`EMBER_CLIFFORD_BWD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwdVariant {
    /// Default (v5): v1's column kernel (one CTA per (column tile, row chunk), a thread's next row
    /// loaded after its gradient program), chunks summed in a fixed tree of groups of 16.
    Cols,
    /// v4: persistent column kernel with the next rows copied by cp.async into a shared-memory ring
    /// (f32 up to 8 blades where the ring fits; otherwise v1's column kernel), tree chunk sums.
    /// Measured no faster than v1's column kernel on an H200 (121.9 vs 118.2 µs at 2^21).
    Pipe,
    /// v1 as it was: v1's column kernel, chunks summed serially by one thread per value (kept to
    /// time the tree against it in the same run).
    Serial,
    /// v6: row-oriented backward, one persistent kernel for the row statistics and the gradient
    /// program (`rowwise.cu`: x, y, g and the forward's out read once, no dot pass), per-chunk d_w
    /// partials summed by the tree. f32 up to 16 blades where whole rows fit (see
    /// `rowwise_geom`); elsewhere the default (`Cols`).
    Rowwise,
    /// v7: v1's column kernel with the chunk sums folded into it (`cols.cu`, CL_FOLD = 1): the CTA
    /// that finishes a group of 16 chunks last sums the group, level after level, in the tree's
    /// order, so no sum launch follows and d_w is bitwise the default's. The dot pass zeroes the
    /// counters, so with the norm only (and more than one chunk); elsewhere the default.
    Fold,
    /// v10: whole-row backward, one persistent kernel (`whole.cu`) whose CTAs own chunks of whole
    /// rows: the row statistics from d_out and out (d_out kept in shared memory), then the column
    /// program per channel with x and y from global memory; d_w accumulated per CTA in shared
    /// memory and written as one partial per fixed slot (at most 256, from (B, N) only), summed by
    /// the tree. f32 up to 8 blades where a CTA's shared memory fits (see `whole_geom`); elsewhere
    /// the default (`Cols`).
    Whole,
}

impl BwdVariant {
    pub const ALL: [BwdVariant; 6] = [BwdVariant::Cols, BwdVariant::Pipe, BwdVariant::Serial, BwdVariant::Rowwise, BwdVariant::Fold, BwdVariant::Whole];
    /// `EMBER_CLIFFORD_BWD=cols|pipe|serial|rowwise|fold|whole`, if set.
    pub fn from_env() -> Option<BwdVariant> {
        match ember_core::knob("EMBER_CLIFFORD_BWD") {
            Some("cols") => Some(BwdVariant::Cols),
            Some("pipe") => Some(BwdVariant::Pipe),
            Some("serial") => Some(BwdVariant::Serial),
            Some("rowwise") => Some(BwdVariant::Rowwise),
            Some("fold") => Some(BwdVariant::Fold),
            Some("whole") => Some(BwdVariant::Whole),
            _ => None,
        }
    }
    /// The backward of `dims`: `EMBER_CLIFFORD_BWD` when set; otherwise, for the normed layer up
    /// to 8 blades:
    /// - whole at 128 ≤ N ≤ 256 (every B) and at 256 < N ≤ 512 up to B·N = 2^21. H200 full grid of
    ///   Cl(3,0) f32 fwd+bwd, every variant in the same run (`bench/results/nvidia-h200/clifford.md`
    ///   of 8a88547), whole against the rule before: 1024 × 128 45.6 / 46.6 µs (rowwise),
    ///   1024 × 256 46.4 / 63.0, 4096 × 128 61.4 / 77.4, 4096 × 256 108.2 / 144.1, 16384 × 256
    ///   347.9 / 462.1, 65536 × 128 668 / 733 (cols), 65536 × 256 1302 / 1416, 1024 × 512 73.1 / 88.3
    ///   (pipe); at N = 512 from 2^23 up it is 1–2 % slower than cols (16384 × 512 733 / 727,
    ///   65536 × 512 2814 / 2754), at N = 1024 level or slower (first measured on an H100, 512c425:
    ///   4096 × 512 and 16384 × 128, 9–14 % faster than pipe / rowwise). Cl(2,0) (four blades):
    ///   whole at every N ≥ 128 (same H200 grid in Cl(2,0), `clifford-v13/`: 3–10 % faster than
    ///   the old rule's cols/pipe at N = 512 and 1024 from B = 1024 to 65536, e.g. 65536 × 512
    ///   1442 / 1542 µs, 1024 × 1024 73.8 / 81.8);
    /// - otherwise (H100, Cl(3,0) f32 fwd+bwd over the bench grid, run of ed96cd0) rowwise at
    ///   N < 128 and B·N ≤ 2^22, where it saves the dot pass's second read of d_out and out;
    /// - pipe at N > 512 and B·N ≤ 2^21: 1–11 % faster than cols there (1024 × 1024), slower from
    ///   2^22 up;
    /// - cols (v1 column kernel, tree sums) elsewhere and without the norm.
    ///
    /// Whole, rowwise and pipe run f32 only; other dtypes fall back to cols.
    pub fn default_for(layer: &Layer, dims: Dims, norm: bool) -> BwdVariant {
        Self::from_env().unwrap_or_else(|| Self::measured_default(layer, dims, norm))
    }
    /// [`BwdVariant::default_for`] without the environment override.
    pub fn measured_default(layer: &Layer, dims: Dims, norm: bool) -> BwdVariant {
        let elems = dims.b.saturating_mul(dims.n);
        let normed = norm && layer.blades() <= 8;
        let whole = match dims.n {
            128..=256 => true,
            // Four blades (Cl(2,0)): whole won at every measured size up to N = 1024.
            257.. if layer.blades() <= 4 => true,
            257..=512 => elems <= 1 << 21,
            _ => false,
        };
        if normed && whole {
            return BwdVariant::Whole;
        }
        match (normed, dims.n) {
            (true, 0..=127) if elems <= 1 << 22 => BwdVariant::Rowwise,
            (true, 513..) if elems <= 1 << 21 => BwdVariant::Pipe,
            _ => BwdVariant::Cols,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            BwdVariant::Cols => "cols",
            BwdVariant::Pipe => "pipe",
            BwdVariant::Serial => "serial",
            BwdVariant::Rowwise => "rowwise",
            BwdVariant::Fold => "fold",
            BwdVariant::Whole => "whole",
        }
    }
}

/// Sizes of the folded chunk sums (CL_FOLD = 1) over `chunks` partials of `len` words and
/// `tiles` column tiles: (words of the intermediate levels, counters), level by level as
/// `sum_tree` would launch them.
pub(super) fn fold_sizes(chunks: usize, len: usize, tiles: usize) -> (usize, usize) {
    let (mut n, mut lvl, mut cnt) = (chunks, 0, 0);
    while n > 1 {
        let groups = n.div_ceil(SUM_GROUP);
        if groups > 1 {
            lvl += groups * len;
        }
        cnt += groups * tiles;
        n = groups;
    }
    (lvl, cnt)
}

// ---- row-oriented backward (rowwise.cu) -----------------------------------------------------------

/// Row chunks the row-oriented backward aims at (one d_w partial each): about one wave of CTAs on
/// a 132-SM GPU, chosen from (B, N) only so that d_w's summation order is device-independent.
const ROWWISE_CHUNKS: usize = 256;

/// Geometry of the row-oriented backward for one problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RowwiseGeom {
    /// Rows side by side per step (S·N ≤ threads).
    pub rows: usize,
    /// Threads per CTA: S·N rounded up to a warp, at least one statistics team.
    pub threads: usize,
    /// Team and vector width of the row statistics (those of the row kernel CL_KIND_DOT).
    pub team: usize,
    pub v: usize,
    /// Words per cp.async (4 where N is a multiple of 4).
    pub vec: usize,
    /// Stride of one (array, blade) plane of a ring stage, in words.
    pub lp: usize,
    pub rows_per_chunk: usize,
    pub chunks: usize,
    /// Dynamic shared memory in bytes.
    pub smem: usize,
}

/// Where the row-oriented backward runs: f32, up to 16 blades, N ≤ 512 (≤ 8 blades; 256 with 16
/// blades: one channel per thread, a whole row per CTA step), and the ring of two steps plus the
/// reduction buffers in the shared memory one CTA may opt in to. `None`: the default runs instead.
pub(super) fn rowwise_geom(layer: &Layer, dims: Dims, norm: bool, dt: DType, gpu: Gpu) -> Option<RowwiseGeom> {
    let (m, n, b) = (layer.blades(), dims.n, dims.b);
    let tmax = match m {
        0..=8 => 512,
        9..=16 => 256,
        _ => return None,
    };
    if dt != DType::F32 || n == 0 || b == 0 || n > tmax || b >= 1 << 40 {
        return None;
    }
    let rows = if n <= THREADS as usize { THREADS as usize / n } else { 1 };
    let v = vec_width(m, n);
    let team = team(n / v) as usize;
    // At least one team of the row statistics (N = 129 in scalars: a team of 256).
    let threads = (rows * n).next_multiple_of(32).max(team);
    let vec = if n.is_multiple_of(4) { 4 } else { 1 };
    let lp = (rows * n).next_multiple_of(4);
    let rows_per_chunk = b.div_ceil(ROWWISE_CHUNKS).next_multiple_of(rows);
    let chunks = b.div_ceil(rows_per_chunk);
    let arrays = if norm { 4 } else { 3 };
    let stats = if norm { rows * layer.grades() * (2 + team / 32) } else { 0 };
    let wred = if rows > 1 { layer.paths() * threads } else { 0 };
    let smem = (2 * arrays * m * lp + stats + wred) * 4;
    (smem + 1024 <= gpu.smem_optin).then_some(RowwiseGeom { rows, threads, team, v, vec, lp, rows_per_chunk, chunks, smem })
}

fn rowwise_source(layer: &Layer, gelu: bool, norm: bool) -> Result<KernelSource> {
    source(layer, &format!("rw{}{}", u8::from(gelu), u8::from(norm)), || Ok(stats_prefix(layer, gelu, norm)? + ROWWISE_CU))
}

/// The prefix of a backward kernel that takes the row statistics itself: the algebra, cl_dot with
/// the norm, the gradient program, `BWD_COMMON_CU` with its statistics.
fn stats_prefix(layer: &Layer, gelu: bool, norm: bool) -> Result<String> {
    let bwd = Prog::Bwd { gelu, norm };
    let progs: Vec<Prog> = if norm { vec![Prog::Dot, bwd] } else { vec![bwd] };
    Ok(prefix(layer, &progs)? + BWD_STATS + SMEM_CU + BWD_COMMON_CU)
}

/// Options of the row-oriented backward; the statistics' vector width only matters with the norm.
fn rowwise_opts(norm: bool, v: usize, vec: usize) -> Vec<String> {
    let v = if norm { v } else { 1 };
    vec![dtype_opt(DType::F32), format!("-DCL_NORM={}", u8::from(norm)), format!("-DCL_RW_V={v}"), format!("-DCL_RW_VEC={vec}")]
}

/// The buffer of `parts` d_w partials (d_w itself where 1) and the leading arguments of a backward
/// kernel whose CTAs own whole rows (rowwise.cu, whole.cu): x, y, w, g, out, rms, d_x, d_y, the
/// partials, B, N.
fn row_bwd_args(plan: &mut Plan, layer: &Layer, dims: Dims, st: Stages, parts: usize, [dx, dy, dw]: [usize; 3]) -> (usize, Vec<Arg>) {
    let part = if parts > 1 { plan.alloc(&[parts, dims.n, layer.paths()], DType::F32) } else { dw };
    let (out, rms) = if st.norm { (Arg::Buf(4), Arg::Buf(5)) } else { (Arg::Null, Arg::Null) };
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), out, rms, Arg::Buf(dx), Arg::Buf(dy), Arg::Buf(part)];
    args.extend(sizes2(dims.b, dims.n));
    (part, args)
}

/// The row-oriented backward's launch and the tree of its chunk sums into `dw`.
fn plan_rowwise(plan: &mut Plan, layer: &Layer, dims: Dims, st: Stages, geo: RowwiseGeom, gpu: Gpu, [dx, dy, dw]: [usize; 3]) -> Result<()> {
    let (part, mut args) = row_bwd_args(plan, layer, dims, st, geo.chunks, [dx, dy, dw]);
    args.extend([Arg::I64(geo.rows_per_chunk as i64), Arg::I32(geo.rows as i32), Arg::I32(geo.team as i32), Arg::I64(geo.chunks as i64), Arg::I32(geo.lp as i32)]);
    // Persistent: as many CTAs as fit at once (128 registers per thread up to 8 blades; one CTA
    // per SM with 16); the chunks, and so the partials, are the same whatever the grid.
    let by_regs = if layer.blades() <= 8 { (65536 / (128 * geo.threads)).max(1) } else { 1 };
    let by_smem = ((gpu.smem_optin + 1024) / (geo.smem + 1024)).max(1);
    let grid = u32::try_from(geo.chunks.min(by_regs.min(by_smem) * gpu.sms).max(1)).map_err(|_| Error::invalid("clifford", "grid overflows u32"))?;
    let src = rowwise_source(layer, st.gelu, st.norm)?;
    plan.launch(Launch {
        src,
        opts: rowwise_opts(st.norm, geo.v, geo.vec),
        entry: "cl_kernel".into(),
        grid: (grid, 1, 1),
        block: geo.threads as u32,
        smem: geo.smem,
        args,
        name: "clifford_bwd_rowwise",
        dependent: false,
    });
    if geo.chunks > 1 {
        sum_tree(plan, part, dw, geo.chunks, dims.n * layer.paths())?;
    }
    Ok(())
}

// ---- whole-row backward (whole.cu) ---------------------------------------------------------------

/// At most this many d_w partials (slots) in the whole-row backward: about one wave of two CTAs per
/// SM on a 132-SM GPU, chosen from (B, N) only so that d_w's summation order is device-independent.
const WHOLE_SLOTS: usize = 256;
/// Threads per CTA of the whole-row backward (CL_WH_T in whole.cu; `launch`'s block).
const WHOLE_THREADS: usize = THREADS as usize;
/// Shared memory (f32 words) that sizes a chunk: d_out of R rows beside the slot's d_w, 112 KB, so
/// that two CTAs fit an SM of 228 KB (H100, H200) at N = 512 (R = 4) and N = 1024 (R = 1). Not the
/// device's value: R decides where the row sums of d_w are cut, and so their order.
const WHOLE_WORDS: usize = 28 * 1024;
/// Rows per chunk at most.
const WHOLE_ROWS_MAX: usize = 16;

/// Geometry of the whole-row backward for one problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct WholeGeom {
    /// Rows per chunk (R).
    pub rows: usize,
    /// Channels side by side in phase 2 (ct; 256 / ct row lanes).
    pub ct: usize,
    /// Team and vector width of the row statistics (those of the row kernel CL_KIND_DOT).
    pub team: usize,
    pub v: usize,
    pub chunks: usize,
    /// Partials of d_w, and the consecutive chunks of each.
    pub slots: usize,
    pub chunks_per_slot: usize,
    /// Dynamic shared memory in bytes.
    pub smem: usize,
    /// CTAs per SM that the shared memory allows (2 or 1).
    pub per_sm: usize,
}

/// Where the whole-row backward runs: f32, up to 8 blades, and one CTA's shared memory (d_out of
/// a chunk, the slot's d_w per row lane, the row statistics) within what a CTA may opt in to.
/// `None`: the default runs instead. Everything but `per_sm` depends on (B, N) and the algebra only.
pub(super) fn whole_geom(layer: &Layer, dims: Dims, dt: DType, gpu: Gpu) -> Option<WholeGeom> {
    let (m, n, b, p, ng) = (layer.blades(), dims.n, dims.b, layer.paths(), layer.grades());
    if dt != DType::F32 || m > 8 || n == 0 || b == 0 || n >= 1 << 24 || b >= 1 << 40 {
        return None;
    }
    let ct = n.next_power_of_two().min(WHOLE_THREADS);
    let lanes = WHOLE_THREADS / ct;
    let v = vec_width(m, n);
    let team = team(n / v) as usize;
    let dws = lanes * p * (n + 1);
    let stats = |r: usize| r * ng * (2 + team / 32);
    let fit = WHOLE_WORDS.saturating_sub(dws) / (m * n + stats(1));
    let rows = if fit >= 2 { 1 << fit.min(WHOLE_ROWS_MAX).ilog2() } else { 1 };
    let chunks = b.div_ceil(rows);
    let chunks_per_slot = chunks.div_ceil(WHOLE_SLOTS);
    let slots = chunks.div_ceil(chunks_per_slot);
    let smem = (m * rows * n + dws + stats(rows)) * 4;
    let per_sm = if 2 * (smem + 1024) <= gpu.smem_optin + 1024 {
        2
    } else if smem + 1024 <= gpu.smem_optin {
        1
    } else {
        return None;
    };
    Some(WholeGeom { rows, ct, team, v, chunks, slots, chunks_per_slot, smem, per_sm })
}

fn whole_source(layer: &Layer, gelu: bool, norm: bool) -> Result<KernelSource> {
    source(layer, &format!("wh{}{}", u8::from(gelu), u8::from(norm)), || Ok(stats_prefix(layer, gelu, norm)? + WHOLE_CU))
}

/// Options of the whole-row backward; the statistics' vector width only matters with the norm.
/// The weights are loaded as vectors (`CL_WH_WV`, v15; same values); `EMBER_CLIFFORD_WH_WV=0`
/// returns to one word per load, for measurements.
fn whole_opts(norm: bool, v: usize) -> Vec<String> {
    let v = if norm { v } else { 1 };
    static WV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let wv = *WV.get_or_init(|| ember_core::knob("EMBER_CLIFFORD_WH_WV") != Some("0"));
    vec![dtype_opt(DType::F32), format!("-DCL_NORM={}", u8::from(norm)), format!("-DCL_WH_V={v}"), format!("-DCL_WH_WV={}", u8::from(wv))]
}

/// The whole-row backward's launch and the tree of its slot sums into `dw`.
fn plan_whole(plan: &mut Plan, layer: &Layer, dims: Dims, st: Stages, geo: WholeGeom, gpu: Gpu, [dx, dy, dw]: [usize; 3]) -> Result<()> {
    let (part, mut args) = row_bwd_args(plan, layer, dims, st, geo.slots, [dx, dy, dw]);
    args.extend([Arg::I32(geo.rows as i32), Arg::I32(geo.ct as i32), Arg::I32(geo.team as i32), Arg::I64(geo.slots as i64), Arg::I64(geo.chunks_per_slot as i64)]);
    // Persistent: as many CTAs as fit at once (at most one per slot); the slots, and so the
    // partials, are the same whatever the grid.
    let grid = u32::try_from(geo.slots.min(geo.per_sm * gpu.sms).max(1)).map_err(|_| Error::invalid("clifford", "grid overflows u32"))?;
    plan.launch(Launch { dependent: entry_pdl(), ..launch(whole_source(layer, st.gelu, st.norm)?, whole_opts(st.norm, geo.v), (grid, 1, 1), geo.smem, args, "clifford_bwd_whole") });
    if geo.slots > 1 {
        sum_tree(plan, part, dw, geo.slots, dims.n * layer.paths())?;
    }
    Ok(())
}

/// Stages of the pipelined column kernel's ring (CL_ST in cols.cu).
const PIPE_STAGES: usize = 3;

/// Dynamic shared memory of the pipelined column kernel: the ring (stages × 3M words × 256 threads)
/// and the d_w reduction buffer (P × 256), f32.
fn pipe_smem(layer: &Layer) -> usize {
    (PIPE_STAGES * 3 * layer.blades() + layer.paths()) * THREADS as usize * 4
}

/// Fused backward: inputs [x, y, w, d_out] or, with the norm, [x, y, w, d_out, out, rms];
/// outputs [d_x, d_y, d_w].
pub fn plan_fused_backward(layer: &Layer, dims: Dims, dt: DType, st: Stages, var: RowVariant, gpu: Gpu) -> Result<Plan> {
    plan_fused_backward_with(layer, dims, dt, st, var, BwdVariant::default_for(layer, dims, st.norm), gpu)
}

/// [`plan_fused_backward`] with an explicit column/sum variant.
pub fn plan_fused_backward_with(layer: &Layer, dims: Dims, dt: DType, st: Stages, var: RowVariant, bwd: BwdVariant, gpu: Gpu) -> Result<Plan> {
    let mut plan = Plan::new(if st.norm { 6 } else { 4 });
    let dx = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dy = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dw = plan.output(&[dims.n, layer.paths()], DType::F32);
    if bwd == BwdVariant::Rowwise {
        if let Some(geo) = rowwise_geom(layer, dims, st.norm, dt, gpu) {
            plan_rowwise(&mut plan, layer, dims, st, geo, gpu, [dx, dy, dw])?;
            return Ok(plan);
        }
    }
    if bwd == BwdVariant::Whole {
        if let Some(geo) = whole_geom(layer, dims, dt, gpu) {
            plan_whole(&mut plan, layer, dims, st, geo, gpu, [dx, dy, dw])?;
            return Ok(plan);
        }
    }
    let (ct, chunks, rows) = column_plan(dims.b, dims.n);
    let col_tiles = blocks("x", dims.n, ct)?;
    let len = dims.n * layer.paths();
    // The folded sums: counters zeroed by the dot pass (so the norm is needed), several chunks.
    let fold = (bwd == BwdVariant::Fold && st.norm && chunks > 1).then(|| {
        let (lvl, cnt) = fold_sizes(chunks, len, col_tiles as usize);
        let lvl = if lvl > 0 { Arg::Buf(plan.alloc(&[lvl], DType::F32)) } else { Arg::Null };
        // u32 counters in a 4-byte buffer.
        (lvl, plan.alloc(&[cnt], DType::F32), cnt)
    });
    let coef = if st.norm {
        let v = vec_width(dims.m, dims.n);
        let coef = plan.alloc(&[dims.b, layer.grades(), 2], DType::F32);
        let (mut grid, t) = row_launch(dims.b, dims.n, v)?;
        // Staged: half types only (f32 reads the forward's out, no weights); two CTAs per SM.
        let smem = staged_weight_bytes(layer, dims.n, v);
        let staged = var.staged() && dt != DType::F32 && 2 * (smem + 1024) <= gpu.smem_optin;
        if staged {
            grid = grid.min(u32::try_from(2 * gpu.sms).unwrap_or(u32::MAX)).max(1);
        }
        let mut args: Vec<Arg> = [0, 1, 2, 3, 4, 5, coef].iter().map(|&i| Arg::Buf(i)).collect();
        args.extend(sizes2(dims.b, dims.n));
        args.push(Arg::I32(t as i32));
        // Two CTAs per SM, as the grid assumes: the launch asks for more than a third of an SM's
        // shared memory, else the V = 1 builds (48–76 registers, 10–42 KB) can put three or four
        // on one SM and leave others idle (the forward's v16c, NOTES "v16d").
        let (smem, name) = if staged { (smem.max(gpu.smem_optin / 3 + 1024), "clifford_bwd_dot_staged") } else { (0, "clifford_bwd_dot") };
        let mut opts = rows_opts(dt, "dot", v, staged);
        if let Some((_, cnt, n)) = fold {
            args.extend([Arg::Buf(cnt), Arg::I64(n as i64)]);
            opts.push("-DCL_ZERO=1".into());
        }
        plan.launch(launch(rows_source(layer, "dot")?, opts, (grid, 1, 1), smem, args, name));
        Arg::Buf(coef)
    } else {
        Arg::Null
    };
    let part = if chunks > 1 { plan.alloc(&[chunks, dims.n, layer.paths()], DType::F32) } else { dw };
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), coef, Arg::Buf(dx), Arg::Buf(dy), Arg::Buf(part)];
    args.extend(sizes2(dims.b, dims.n));
    args.extend([Arg::I64(rows as i64), Arg::I32(ct as i32)]);
    let src = bwd_source(layer, st.gelu, st.norm)?;
    if let Some((lvl, cnt, _)) = fold {
        args.extend([Arg::Buf(dw), lvl, Arg::Buf(cnt), Arg::I64(chunks as i64)]);
        plan.launch(launch(src, fold_opts(dt), (col_tiles, chunks as u32, 1), 0, args, "clifford_bwd_fold"));
        return Ok(plan);
    }
    let smem = pipe_smem(layer);
    // The pipelined kernel counts items, rows and steps in 32 bits.
    let fits32 = (col_tiles as usize * chunks).checked_mul(rows.div_ceil(THREADS as usize / ct)).is_some_and(|k| k <= i32::MAX as usize) && dims.b < 1 << 30 && dims.n < 1 << 30;
    if bwd == BwdVariant::Pipe && dt == DType::F32 && layer.blades() <= 8 && smem + 1024 <= gpu.smem_optin && fits32 {
        // Persistent: two CTAs per SM where two rings fit, else one; the items (and so the d_w
        // partials and their order) are v1's whatever the grid.
        let items = col_tiles as usize * chunks;
        let per_sm = if 2 * (smem + 1024) <= gpu.smem_optin + 1024 { 2 } else { 1 };
        let grid = u32::try_from(items.min(per_sm * gpu.sms).max(1)).map_err(|_| Error::invalid("clifford", "grid overflows u32"))?;
        args.extend([Arg::I64(col_tiles as i64), Arg::I64(items as i64)]);
        plan.launch(launch(src, pipe_opts(st.norm), (grid, 1, 1), smem, args, "clifford_bwd_pipe"));
    } else {
        plan.launch(launch(src, bwd_opts(dt, st.norm), (col_tiles, chunks as u32, 1), 0, args, "clifford_bwd"));
    }
    if chunks > 1 {
        match bwd {
            BwdVariant::Serial => sum_chunks(&mut plan, part, dw, chunks, len),
            BwdVariant::Cols | BwdVariant::Pipe | BwdVariant::Rowwise | BwdVariant::Fold | BwdVariant::Whole => sum_tree(&mut plan, part, dw, chunks, len)?,
        }
    }
    Ok(plan)
}

/// Options of the column kernel with the folded chunk sums (norm only).
fn fold_opts(dt: DType) -> Vec<String> {
    let mut o = bwd_opts(dt, true);
    o.push("-DCL_FOLD=1".into());
    o
}

fn pipe_opts(norm: bool) -> Vec<String> {
    let mut o = bwd_opts(DType::F32, norm);
    o.push("-DCL_PIPE=1".into());
    o
}

#[allow(clippy::too_many_arguments)]
pub fn fused_backward(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, st: Stages) -> Result<Grads> {
    fused_backward_variant(layer, dims, x, y, w, normed, d_out, st, RowVariant::selected(layer, Gpu::of(x)?))
}

/// [`fused_backward`] with an explicit row-kernel variant (the GPU checks run every one).
#[allow(clippy::too_many_arguments)]
pub fn fused_backward_variant(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, st: Stages, var: RowVariant) -> Result<Grads> {
    fused_backward_with(layer, dims, x, y, w, normed, d_out, st, var, BwdVariant::default_for(layer, dims, st.norm))
}

/// [`fused_backward_variant`] with an explicit column/sum variant too.
#[allow(clippy::too_many_arguments)]
pub fn fused_backward_with(layer: &Layer, dims: Dims, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, st: Stages, var: RowVariant, bwd: BwdVariant) -> Result<Grads> {
    let plan = plan_fused_backward_with(layer, dims, x.dtype(), st, var, bwd, Gpu::of(x)?)?;
    let outs = match normed {
        Some((out, rms)) => run_cuda(plan, &[x, y, w, d_out, out, rms])?,
        None => run_cuda(plan, &[x, y, w, d_out])?,
    };
    let mut it = outs.into_iter();
    Ok(Grads { d_x: it.next().expect("d_x"), d_y: it.next().expect("d_y"), d_w: it.next().expect("d_w") })
}

/// out[i] = Σ_c part[c][i], in order.
fn sum_chunks(plan: &mut Plan, part: usize, out: usize, chunks: usize, len: usize) {
    let grid = len.div_ceil(THREADS as usize).clamp(1, 4096) as u32;
    let args = vec![Arg::Buf(part), Arg::Buf(out), Arg::I64(chunks as i64), Arg::I64(len as i64)];
    plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_sum_chunks".into(), grid: (grid, 1, 1), block: THREADS, smem: 0, args, name: "clifford_sum_chunks", dependent: false });
}

/// Chunks summed per group at each level of [`sum_tree`] (CL_SUM_G in sums.cu).
const SUM_GROUP: usize = 16;

/// Levels of additions in a plan's chunk sums: one per `clifford_sum_tree` launch, two per
/// `clifford_sum_tree2`.
#[cfg(test)]
pub(super) fn tree_levels(plan: &Plan) -> usize {
    plan.launches.iter().map(|l| match l.name {
        "clifford_sum_tree" => 1,
        "clifford_sum_tree2" => 2,
        _ => 0,
    }).sum()
}

/// out[i] = Σ_c part[c][i] in a fixed tree: groups of 16 consecutive chunks summed in order, then
/// the groups' sums the same way, until one is left. The order depends only on `chunks`. Two levels
/// (16 < chunks ≤ 256) run as one launch (`cl_sum_tree2`, the same additions in the same order):
/// one launch gap and one latency-bound second level less per backward. `EMBER_CLIFFORD_SUM_TREE2=0`
/// launches each level (same bits; for measurements).
pub(super) fn sum_tree(plan: &mut Plan, part: usize, out: usize, chunks: usize, len: usize) -> Result<()> {
    static TREE2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let tree2 = *TREE2.get_or_init(|| ember_core::knob("EMBER_CLIFFORD_SUM_TREE2") != Some("0"));
    if tree2 && chunks > SUM_GROUP && chunks <= SUM_GROUP * SUM_GROUP {
        let args = vec![Arg::Buf(part), Arg::Buf(out), Arg::I64(chunks as i64), Arg::I64(len as i64)];
        let grid = blocks("w", len, SUM_GROUP)?;
        plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_sum_tree2".into(), grid: (grid, 1, 1), block: (SUM_GROUP * SUM_GROUP) as u32, smem: 0, args, name: "clifford_sum_tree2", dependent: sum_pdl() });
        return Ok(());
    }
    sum_tree_by_level(plan, part, out, chunks, len)
}

/// Whether the staged forward and the whole-row backward (each the first kernel of its pass) are
/// programmatic dependent launches: they wait for the kernel before them on the stream (whatever it
/// is) first thing, so only the launch itself overlaps that kernel's end. On by default,
/// `EMBER_CLIFFORD_ENTRY_PDL=0` (or `EMBER_PDL=0`) launches them in order.
fn entry_pdl() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| ember_core::knob("EMBER_CLIFFORD_ENTRY_PDL") != Some("0"))
}

/// Whether the one-launch chunk sums are a programmatic dependent launch of the kernel that wrote
/// the partials (their CTAs take SMs as that kernel's CTAs exit, and wait for it to complete before
/// reading): on by default, `EMBER_CLIFFORD_SUM_PDL=0` (or `EMBER_PDL=0`) launches them in order.
fn sum_pdl() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| ember_core::knob("EMBER_CLIFFORD_SUM_PDL") != Some("0"))
}

/// [`sum_tree`] one launch per level.
pub(super) fn sum_tree_by_level(plan: &mut Plan, part: usize, out: usize, chunks: usize, len: usize) -> Result<()> {
    let (mut src, mut n) = (part, chunks);
    while n > 1 {
        let groups = n.div_ceil(SUM_GROUP);
        let dst = if groups == 1 { out } else { plan.alloc(&[groups, len], DType::F32) };
        let gy = u32::try_from(groups).ok().filter(|&g| g <= 65535).ok_or_else(|| Error::TooLarge { arg: "x".into(), what: format!("{groups} groups of d_w partials") })?;
        let args = vec![Arg::Buf(src), Arg::Buf(dst), Arg::I64(n as i64), Arg::I64(len as i64)];
        plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_sum_tree".into(), grid: (blocks("w", len, THREADS as usize)?, gy, 1), block: THREADS, smem: 0, args, name: "clifford_sum_tree", dependent: false });
        (src, n) = (dst, groups);
    }
    Ok(())
}

// ---- multivector GELU ----------------------------------------------------------------------------

fn gelu_source(layer: &Layer, prog: Prog, dt: DType) -> Result<KernelSource> {
    let ga_dt = ga_dtype(dt)?;
    source(layer, &format!("{}_{}", prog.tag(), dt.name()), || {
        let ir = layer.ir(prog)?;
        let spec = KernelSpec::elementwise(&ir, "cl_kernel", ga_dt);
        kernel(&ir, &spec).map_err(|e| Error::invalid("algebra", e.to_string()))
    })
}

/// Multivector GELU (`prog` = GeluFwd: inputs [x]) or its VJP (GeluBwd: inputs [x, d_out]);
/// output [out].
pub fn plan_gelu(layer: &Layer, prog: Prog, dims: Dims, dt: DType) -> Result<Plan> {
    let n_in = if prog == Prog::GeluFwd { 1 } else { 2 };
    let mut plan = Plan::new(n_in);
    let out = plan.output(&[dims.m, dims.b, dims.n], dt);
    let mut args: Vec<Arg> = (0..n_in).map(Arg::Buf).collect();
    args.push(Arg::Buf(out));
    args.extend(sizes2(dims.b, dims.n));
    let grid = (dims.b * dims.n).div_ceil(THREADS as usize).clamp(1, 65536) as u32;
    plan.launch(launch(gelu_source(layer, prog, dt)?, vec![], (grid, 1, 1), 0, args, "clifford_mvgelu"));
    Ok(plan)
}

pub fn mvgelu_forward(layer: &Layer, dims: Dims, x: &Tensor) -> Result<Tensor> {
    Ok(run_cuda(plan_gelu(layer, Prog::GeluFwd, dims, x.dtype())?, &[x])?.remove(0))
}

pub fn mvgelu_backward(layer: &Layer, dims: Dims, x: &Tensor, d_out: &Tensor) -> Result<Tensor> {
    Ok(run_cuda(plan_gelu(layer, Prog::GeluBwd, dims, x.dtype())?, &[x, d_out])?.remove(0))
}

// ---- tensor-core tiles ---------------------------------------------------------------------------

/// The GEMMs of the fully connected product and MVLinear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileKind {
    /// o_j = Σ_p T_(j,p) · W_p (rows b, columns m, K = n).
    FcFwd,
    /// dT_(j,p) = dO_j · W_pᵀ (rows b, columns n, K = m), then the terms' VJP.
    FcBwdData,
    /// dW_p = Σ_j T_(j,p)ᵀ · dO_j (rows n, columns m, K = b).
    FcBwdWeight,
    /// O_j = X_j · W_grade(j).
    LinFwd,
    /// dX_j = dO_j · W_grade(j)ᵀ.
    LinBwdData,
    /// dW_k = Σ_{grade j = k} X_jᵀ · dO_j.
    LinBwdWeight,
}

impl TileKind {
    pub const ALL: [TileKind; 6] = [TileKind::FcFwd, TileKind::FcBwdData, TileKind::FcBwdWeight, TileKind::LinFwd, TileKind::LinBwdData, TileKind::LinBwdWeight];
    fn tag(self) -> &'static str {
        match self {
            TileKind::FcFwd => "fcfwd",
            TileKind::FcBwdData => "fcbwdd",
            TileKind::FcBwdWeight => "fcbwdw",
            TileKind::LinFwd => "linfwd",
            TileKind::LinBwdData => "linbwdd",
            TileKind::LinBwdWeight => "linbwdw",
        }
    }
    /// (A operand: 1 terms with rows b, 2 terms with rows n, 3 plain; epilogue: 1 store, 2 terms' VJP).
    fn modes(self) -> (u8, u8) {
        match self {
            TileKind::FcFwd => (1, 1),
            TileKind::FcBwdData => (3, 2),
            TileKind::FcBwdWeight => (2, 1),
            TileKind::LinFwd | TileKind::LinBwdData | TileKind::LinBwdWeight => (3, 1),
        }
    }
    /// (A slots, B slots, accumulators, triples (acc, a, b)).
    fn structure(self, t: &Tables) -> (usize, usize, usize, Vec<(usize, usize, usize)>) {
        let (m, p, ng, nt) = (t.m(), t.p(), t.ng(), t.nt());
        let mut tri = Vec::new();
        match self {
            TileKind::FcFwd => {
                tri.extend(t.pairs.iter().enumerate().map(|(q, pr)| (pr.blade, q, pr.path)));
                (nt, p, m, sorted(tri))
            }
            TileKind::FcBwdData => {
                tri.extend(t.pairs.iter().enumerate().map(|(q, pr)| (q, pr.blade, pr.path)));
                (m, p, nt, sorted(tri))
            }
            TileKind::FcBwdWeight => {
                tri.extend(t.pairs.iter().enumerate().map(|(q, pr)| (pr.path, q, pr.blade)));
                (nt, m, p, sorted(tri))
            }
            TileKind::LinFwd | TileKind::LinBwdData => {
                tri.extend((0..m).map(|j| (j, j, t.grade_of[j])));
                (m, ng, m, tri)
            }
            TileKind::LinBwdWeight => {
                tri.extend((0..m).map(|j| (t.grade_of[j], j, j)));
                (m, m, ng, sorted(tri))
            }
        }
    }
}

fn sorted(mut v: Vec<(usize, usize, usize)>) -> Vec<(usize, usize, usize)> {
    v.sort();
    v
}

/// Tile shape of one tile kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileCfg {
    pub rows: usize,
    pub cols: usize,
    /// n8 column tiles per warp unit.
    pub cb: usize,
    pub units: usize,
    pub upw: usize,
    pub smem: usize,
}

/// Largest tile whose accumulators fit 64 registers per thread, whose operand tiles fit in shared
/// memory, and whose producers hold at most 48 values per thread; `None` when no tile fits (the
/// fully connected product then runs the CUDA-core fallback).
pub fn tile_cfg(kind: TileKind, t: &Tables, half: bool) -> Option<TileCfg> {
    let (na, nb, nacc, _) = kind.structure(t);
    let kc = if half { 16 } else { 8 };
    let (a_mode, epi) = kind.modes();
    let a_plain = a_mode == 3;
    const SMEM_MAX: usize = 200 * 1024;
    for strict in [true, false] {
        for (rows, cols) in [(32, 64), (32, 32), (16, 64), (16, 32), (32, 16), (16, 16), (16, 8)] {
            let mut smem = (na * rows + nb * cols) * 48;
            if epi == 2 {
                smem = smem.max(nacc * rows * cols * 4);
            }
            // Registers of the next chunk's operands: whole lines of kc values.
            let epb = (nb * cols).div_ceil(THREADS as usize) * kc;
            let epa = if a_plain { (na * rows).div_ceil(THREADS as usize) * kc } else { 0 };
            if smem > SMEM_MAX || epb > 48 || epa > 48 {
                continue;
            }
            for cb in [8, 4, 2, 1] {
                if cols % (8 * cb) != 0 {
                    continue;
                }
                let units = nacc * (cols / (8 * cb));
                let upw = units.div_ceil(8);
                let regs = upw * (rows / 16) * cb * 4;
                // Strict: at most a quarter of the warps' unit slots idle.
                if regs <= 64 && (!strict || (upw * 8 - units) * 4 <= upw * 8) {
                    return Some(TileCfg { rows, cols, cb, units, upw, smem });
                }
            }
        }
    }
    None
}

/// Operand and output storage of a tile kernel: whether A, B, the output are f32 (else the
/// activation dtype), and whether a bias is added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileIo {
    pub a_f32: bool,
    pub b_f32: bool,
    pub d_f32: bool,
    pub bias: bool,
}

fn tile_source(layer: &Layer, kind: TileKind, dt: DType, io: TileIo) -> Result<(KernelSource, TileCfg)> {
    let t = layer.tables();
    let half = dt != DType::F32;
    let cfg = tile_cfg(kind, t, half).ok_or_else(|| Error::Unsupported(format!("tensor-core tiles of {:?} in {}", kind, layer.name())))?;
    let key = format!("{}_{}_{}{}{}{}", kind.tag(), dt.name(), u8::from(io.a_f32), u8::from(io.b_f32), u8::from(io.d_f32), u8::from(io.bias));
    let src = source(layer, &key, || {
        let (na, nb, nacc, tri) = kind.structure(t);
        let (a_mode, epi) = kind.modes();
        let mut s = String::new();
        let mut def = |k: &str, v: usize| s.push_str(&format!("#define {k} {v}\n"));
        def("TE_ROWS", cfg.rows);
        def("TE_COLS", cfg.cols);
        def("TE_RB", cfg.rows / 16);
        def("TE_CB", cfg.cb);
        def("TE_COLUNITS", cfg.cols / (8 * cfg.cb));
        def("TE_NA", na);
        def("TE_NB", nb);
        def("TE_NACC", nacc);
        def("TE_NUNITS", cfg.units);
        def("TE_UPW", cfg.upw);
        def("TE_A_MODE", a_mode as usize);
        def("TE_EPI", epi as usize);
        def("TE_A_F32", usize::from(io.a_f32));
        def("TE_B_F32", usize::from(io.b_f32));
        def("TE_D_F32", usize::from(io.d_f32));
        def("TE_BIAS", usize::from(io.bias));
        let mut start = vec![0usize; nacc + 1];
        for &(acc, _, _) in &tri {
            start[acc + 1] += 1;
        }
        for i in 0..nacc {
            start[i + 1] += start[i];
        }
        let list = |v: &mut dyn Iterator<Item = usize>| v.map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
        s.push_str(&format!("__constant__ unsigned short te_tri_start[{}] = {{{}}};\n", nacc + 1, list(&mut start.iter().copied())));
        s.push_str(&format!("__constant__ unsigned short te_tri_a[{}] = {{{}}};\n", tri.len(), list(&mut tri.iter().map(|t| t.1))));
        s.push_str(&format!("__constant__ unsigned short te_tri_b[{}] = {{{}}};\n", tri.len(), list(&mut tri.iter().map(|t| t.2))));
        let progs: &[Prog] = match kind {
            TileKind::FcFwd | TileKind::FcBwdWeight => &[Prog::Terms],
            TileKind::FcBwdData => &[Prog::TermsVjp],
            _ => &[],
        };
        Ok(prefix(layer, progs)? + &s + TILE_CU)
    })?;
    Ok((src, cfg))
}

fn tile_opts(dt: DType) -> Vec<String> {
    vec![dtype_opt(dt), format!("-DTE_HALF={}", u8::from(dt != DType::F32)), format!("-DTE_BF16={}", u8::from(dt == DType::BF16))]
}

/// One tile GEMM (see tile.cu): operands, output and sizes, by plan buffer.
struct TileCall {
    a: Arg,
    b: Arg,
    x: Arg,
    y: Arg,
    dst: usize,
    dst2: Arg,
    bias: Arg,
    rows: usize,
    cols: usize,
    k: usize,
    a_strides: [usize; 3],
    b_strides: [usize; 3],
    d_strides: [usize; 3],
    x_dims: (usize, usize),
    /// Accumulators × rows × columns of the output, for split-K partials.
    out_len: usize,
}

/// Split K into this many parts when the output tiles alone leave the GPU idle; the choice depends
/// only on the problem, so the summation order (and the result) does too.
fn k_splits(tiles: usize, k: usize, kc: usize) -> usize {
    let want = 256usize.div_ceil(tiles.max(1));
    // At least 8 chunks of K per split.
    want.clamp(1, (k / (8 * kc)).max(1))
}

fn plan_tile(plan: &mut Plan, layer: &Layer, kind: TileKind, dt: DType, io: TileIo, c: TileCall) -> Result<()> {
    let (src, cfg) = tile_source(layer, kind, dt, io)?;
    let row_tiles = blocks("x", c.rows, cfg.rows)?;
    let col_tiles = u32::try_from(c.cols.div_ceil(cfg.cols)).ok().filter(|&v| v <= 65535).ok_or_else(|| Error::TooLarge { arg: "w".into(), what: format!("{} output channels", c.cols) })?;
    let kc = if dt == DType::F32 { 8 } else { 16 };
    let weight_grad = kind == TileKind::FcBwdWeight || kind == TileKind::LinBwdWeight;
    let splits = if weight_grad { k_splits(row_tiles as usize * col_tiles as usize, c.k, kc) } else { 1 };
    let k_split = c.k.div_ceil(splits).div_ceil(kc) * kc;
    let splits = c.k.div_ceil(k_split);
    let dst = if splits > 1 { plan.alloc(&[splits, c.out_len], DType::F32) } else { c.dst };
    let mut args = vec![c.a, c.b, c.x, c.y, Arg::Buf(dst), c.dst2, c.bias];
    let scalars = [c.rows, c.cols, c.k, k_split].into_iter().chain(c.a_strides).chain(c.b_strides).chain(c.d_strides).chain([c.out_len, c.x_dims.0, c.x_dims.1]);
    args.extend(scalars.map(|v| Arg::I64(v as i64)));
    plan.launch(launch(src, tile_opts(dt), (row_tiles, col_tiles, splits as u32), cfg.smem, args, "clifford_tile"));
    if splits > 1 {
        sum_chunks(plan, dst, c.dst, splits, c.out_len);
    }
    Ok(())
}

// ---- fully connected product ---------------------------------------------------------------------

fn fc_tensor_cores(layer: &Layer, dt: DType) -> bool {
    let half = dt != DType::F32;
    [TileKind::FcFwd, TileKind::FcBwdData, TileKind::FcBwdWeight].iter().all(|&k| tile_cfg(k, layer.tables(), half).is_some())
}

/// The norm of a product computed elsewhere ("normfwd") or its gradient ("normbwd") over `rows` rows
/// of `n` channels.
/// `d_out`: where the backward (`normbwd`) puts its gradient (one buffer, two for `Split3`).
#[allow(clippy::too_many_arguments)]
fn plan_norm_rows(plan: &mut Plan, layer: &Layer, kind: &str, dt: DType, rows: usize, n: usize, bufs: &[usize], d_out: NormGrad) -> Result<()> {
    let v = vec_width(layer.blades(), n);
    let (grid, t) = row_launch(rows, n, v)?;
    let mut args: Vec<Arg> = bufs.iter().map(|&b| Arg::Buf(b)).collect();
    args.extend(sizes2(rows, n));
    args.push(Arg::I32(t as i32));
    let mut opts = norm_opts(dt, kind, v, holds_row(n, v));
    opts.extend(d_out.opt().map(String::from));
    plan.launch(launch(rows_source(layer, kind)?, opts, (grid, 1, 1), 0, args, "clifford_rows"));
    Ok(())
}

/// The form of the norm backward's gradient (rows.cu `CL_DO_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NormGrad {
    /// f32 (what the forward's norm ignores; the tile engine's operand).
    F32,
    /// The activation type (the half types' GEMM backward).
    Act,
    /// bf16 halves in the f32 GEMM backward's layouts (fcb.rs `GradIn::Split`).
    Split3,
}

impl NormGrad {
    fn opt(self) -> Option<&'static str> {
        match self {
            NormGrad::F32 => None,
            NormGrad::Act => Some("-DCL_DO_ACT=1"),
            NormGrad::Split3 => Some("-DCL_DO_SPLIT3=1"),
        }
    }
}

/// Whether a team of row threads covers a row of `n` channels with one group of `v` each, so a row
/// kernel can hold its words in registers across the row reduction (`CL_K = 1`).
fn holds_row(n: usize, v: usize) -> bool {
    n / v <= THREADS as usize
}

/// Options of the norm row kernels: `hold` reads each word once (rows.cu `CL_K`).
fn norm_opts(dt: DType, kind: &str, v: usize, hold: bool) -> Vec<String> {
    let mut o = rows_opts(dt, kind, v, false);
    o.push(format!("-DCL_K={}", u8::from(hold)));
    o
}

/// Fully connected forward: inputs [x, y, w]; outputs [out] or, with the norm, [out, rms, o].
pub fn plan_fc_forward(layer: &Layer, dims: Dims, n_out: usize, dt: DType, st: Stages) -> Result<Plan> {
    plan_fc_forward_variant(layer, dims, n_out, dt, st, FcVariant::selected(), true)
}

/// [`plan_fc_forward`] with the forward kernel `var` (v2 where it applies to the algebra and dtype,
/// the cuBLAS forward up to 16 blades, else the tile engine); `aligned`: x and y start at 16-byte
/// boundaries (wider loads where N allows).
pub fn plan_fc_forward_variant(layer: &Layer, dims: Dims, n_out: usize, dt: DType, st: Stages, var: FcVariant, aligned: bool) -> Result<Plan> {
    let mut plan = Plan::new(3);
    let out_shape = [dims.m, dims.b, n_out];
    let out = plan.output(&out_shape, dt);
    // Without the norm the product lands in `out`; with it, in an f32 buffer the row kernel reads.
    let (rms, o) = if st.norm {
        let rms = plan.output(&[dims.b, layer.grades()], DType::F32);
        (Some(rms), plan.output(&out_shape, DType::F32))
    } else {
        (None, out)
    };
    if var == FcVariant::Blas && fcb::applies(layer) {
        fcb::plan_forward(&mut plan, layer, dims, n_out, dt, o, st.norm)?;
    } else if matches!(var, FcVariant::Wgmma | FcVariant::Cluster | FcVariant::Ws) && fc3::applies(layer, dt) {
        let crew = match var {
            FcVariant::Cluster => fc3::Crew::Cluster,
            FcVariant::Ws => fc3::Crew::Specialised,
            _ => fc3::Crew::Cta,
        };
        fc3::plan_forward(&mut plan, layer, dims, n_out, dt, o, st.norm, aligned, crew)?;
    } else if matches!(var, FcVariant::Gemm | FcVariant::Wgmma | FcVariant::Cluster | FcVariant::Ws) && fc2::applies(layer, dt) {
        fc2::plan_forward(&mut plan, layer, dims, n_out, dt, o, st.norm, aligned && dims.n.is_multiple_of(2))?;
    } else if fc_tensor_cores(layer, dt) {
        let call = TileCall {
            a: Arg::Null,
            b: Arg::Buf(2),
            x: Arg::Buf(0),
            y: Arg::Buf(1),
            dst: o,
            dst2: Arg::Null,
            bias: Arg::Null,
            rows: dims.b,
            cols: n_out,
            k: dims.n,
            a_strides: [0, 0, 0],
            b_strides: [dims.n * n_out, 1, n_out],
            d_strides: [dims.b * n_out, n_out, 1],
            x_dims: (dims.b, dims.n),
            out_len: dims.m * dims.b * n_out,
        };
        plan_tile(&mut plan, layer, TileKind::FcFwd, dt, TileIo { a_f32: false, b_f32: true, d_f32: st.norm, bias: false }, call)?;
    } else {
        plan_simt(&mut plan, layer, 1, dt, st.norm, dims.m * dims.b * n_out, &[0, 1, 2, o], dims, n_out)?;
    }
    if let Some(rms) = rms {
        plan_norm_rows(&mut plan, layer, "normfwd", dt, dims.b, n_out, &[o, out, rms], NormGrad::F32)?;
    }
    Ok(plan)
}

#[allow(clippy::too_many_arguments)]
pub fn fc_forward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages) -> Result<Forward> {
    fc_forward_variant(layer, dims, n_out, x, y, w, st, FcVariant::selected())
}

#[allow(clippy::too_many_arguments)]
pub fn fc_forward_variant(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, st: Stages, var: FcVariant) -> Result<Forward> {
    let aligned = x.cuda_ptr()? % 16 == 0 && y.cuda_ptr()? % 16 == 0;
    let var = match var {
        FcVariant::Blas if !super::blas::available(x) => FcVariant::Gemm,
        FcVariant::Wgmma | FcVariant::Cluster | FcVariant::Ws if !fc3::arch_has_wgmma(&x.cuda_device()?.info().arch) => FcVariant::Gemm,
        v => v,
    };
    let mut outs = run_cuda(plan_fc_forward_variant(layer, dims, n_out, x.dtype(), st, var, aligned)?, &[x, y, w])?.into_iter();
    Ok(Forward { out: outs.next().expect("out"), rms: outs.next(), o: outs.next() })
}

/// Fully connected backward: inputs [x, y, w, d_out] or, with the norm, [x, y, w, d_out, o, rms];
/// outputs [d_x, d_y, d_w].
pub fn plan_fc_backward(layer: &Layer, dims: Dims, n_out: usize, dt: DType, norm: bool) -> Result<Plan> {
    plan_fc_backward_variant(layer, dims, n_out, dt, norm, FcBwdVariant::selected())
}

/// [`plan_fc_backward`] with the backward `var` (the GEMM variant where it applies to the algebra,
/// else the tile engine).
pub fn plan_fc_backward_variant(layer: &Layer, dims: Dims, n_out: usize, dt: DType, norm: bool, var: FcBwdVariant) -> Result<Plan> {
    let mut plan = Plan::new(if norm { 6 } else { 4 });
    let dx = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dy = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dw = plan.output(&[layer.paths(), dims.n, n_out], DType::F32);
    // The gradient of the product: d_out itself, or the norm's backward of it. For the GEMM
    // backward the norm writes it as the GEMMs' operands (the activation type, or f32's bf16 halves),
    // each value rounded where it is computed, which a pass over an f32 copy did before (Cl(3,0),
    // B = 4096, N_out = 512: 134 MB less traffic and a launch fewer); for the tile engine in f32.
    if var == FcBwdVariant::Gemm && fcb::applies(layer) {
        let g = match (norm, dt == DType::F32 && fcb::f32_halves()) {
            (false, _) => fcb::GradIn::Plain(3),
            (true, false) => {
                let d = plan.alloc(&[dims.m, dims.b, n_out], dt);
                plan_norm_rows(&mut plan, layer, "normbwd", dt, dims.b, n_out, &[3, 4, 5, d], if dt == DType::F32 { NormGrad::F32 } else { NormGrad::Act })?;
                fcb::GradIn::Plain(d)
            }
            (true, true) => {
                let (cat, halves) = fcb::split_buffers(&mut plan, dims, n_out);
                plan_norm_rows(&mut plan, layer, "normbwd", dt, dims.b, n_out, &[3, 4, 5, cat, halves], NormGrad::Split3)?;
                fcb::GradIn::Split { cat, halves }
            }
        };
        fcb::plan_backward(&mut plan, layer, dims, n_out, dt, g, (dx, dy, dw))?;
        return Ok(plan);
    }
    let g = if norm {
        let d = plan.alloc(&[dims.m, dims.b, n_out], DType::F32);
        plan_norm_rows(&mut plan, layer, "normbwd", dt, dims.b, n_out, &[3, 4, 5, d], NormGrad::F32)?;
        d
    } else {
        3
    };
    if fc_tensor_cores(layer, dt) {
        let data = TileCall {
            a: Arg::Buf(g),
            b: Arg::Buf(2),
            x: Arg::Buf(0),
            y: Arg::Buf(1),
            dst: dx,
            dst2: Arg::Buf(dy),
            bias: Arg::Null,
            rows: dims.b,
            cols: dims.n,
            k: n_out,
            a_strides: [dims.b * n_out, n_out, 1],
            b_strides: [dims.n * n_out, n_out, 1],
            d_strides: [0, 0, 0],
            x_dims: (dims.b, dims.n),
            out_len: dims.m * dims.b * dims.n,
        };
        plan_tile(&mut plan, layer, TileKind::FcBwdData, dt, TileIo { a_f32: norm, b_f32: true, d_f32: false, bias: false }, data)?;
        let weight = TileCall {
            a: Arg::Null,
            b: Arg::Buf(g),
            x: Arg::Buf(0),
            y: Arg::Buf(1),
            dst: dw,
            dst2: Arg::Null,
            bias: Arg::Null,
            rows: dims.n,
            cols: n_out,
            k: dims.b,
            a_strides: [0, 0, 0],
            b_strides: [dims.b * n_out, 1, n_out],
            d_strides: [dims.n * n_out, n_out, 1],
            x_dims: (dims.b, dims.n),
            out_len: layer.paths() * dims.n * n_out,
        };
        plan_tile(&mut plan, layer, TileKind::FcBwdWeight, dt, TileIo { a_f32: false, b_f32: norm, d_f32: true, bias: false }, weight)?;
    } else {
        plan_simt(&mut plan, layer, 2, dt, norm, dims.b * dims.n, &[0, 1, 2, g, dx, dy], dims, n_out)?;
        plan_simt(&mut plan, layer, 3, dt, norm, layer.paths() * dims.n * n_out, &[0, 1, g, dw], dims, n_out)?;
    }
    Ok(plan)
}

#[allow(clippy::too_many_arguments)]
pub fn fc_backward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor) -> Result<Grads> {
    fc_backward_variant(layer, dims, n_out, x, y, w, normed, d_out, FcBwdVariant::selected())
}

/// [`fc_backward`] with an explicit backward (the GPU checks and the bench run both); the GEMM
/// variant runs the tile engine where cuBLAS does not load.
#[allow(clippy::too_many_arguments)]
pub fn fc_backward_variant(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, y: &Tensor, w: &Tensor, normed: Option<(&Tensor, &Tensor)>, d_out: &Tensor, var: FcBwdVariant) -> Result<Grads> {
    let var = if var == FcBwdVariant::Gemm && !super::blas::available(x) { FcBwdVariant::Tile } else { var };
    let plan = plan_fc_backward_variant(layer, dims, n_out, x.dtype(), normed.is_some(), var)?;
    let outs = match normed {
        Some((o, rms)) => run_cuda(plan, &[x, y, w, d_out, o, rms])?,
        None => run_cuda(plan, &[x, y, w, d_out])?,
    };
    let mut it = outs.into_iter();
    Ok(Grads { d_x: it.next().expect("d_x"), d_y: it.next().expect("d_y"), d_w: it.next().expect("d_w") })
}

fn simt_source(layer: &Layer) -> Result<KernelSource> {
    source(layer, "simt", || {
        let t = layer.tables();
        let alg = &t.alg;
        let mut prods: Vec<Vec<u32>> = vec![Vec::new(); t.nt()];
        let index: std::collections::HashMap<(usize, usize), usize> = t.pairs.iter().enumerate().map(|(q, p)| ((p.blade, p.path), q)).collect();
        for i in 0..t.m() {
            for l in 0..t.m() {
                let (s, k) = alg.product(i, l);
                if s != 0 {
                    let p = t.table.index(t.grade_of[i], t.grade_of[l], t.grade_of[k]).expect("nonzero product has a path");
                    prods[index[&(k, p)]].push(i as u32 | (l as u32) << 8 | u32::from(s < 0) << 16);
                }
            }
        }
        let list = |v: &mut dyn Iterator<Item = usize>| v.map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
        let mut start = vec![0usize];
        for p in &prods {
            start.push(start.last().unwrap() + p.len());
        }
        let mut bstart = vec![0usize; t.m() + 1];
        for p in &t.pairs {
            bstart[p.blade + 1] += 1;
        }
        for j in 0..t.m() {
            bstart[j + 1] += bstart[j];
        }
        let all: Vec<u32> = prods.concat();
        let mut s = format!("#define CL_M {}\n#define CL_P {}\n#define CL_NT {}\n#define CL_NPROD {}\n", t.m(), t.p(), t.nt(), all.len());
        s += &format!("__constant__ unsigned short fs_pair_blade[{}] = {{{}}};\n", t.nt(), list(&mut t.pairs.iter().map(|p| p.blade)));
        s += &format!("__constant__ unsigned short fs_pair_path[{}] = {{{}}};\n", t.nt(), list(&mut t.pairs.iter().map(|p| p.path)));
        s += &format!("__constant__ unsigned short fs_pair_start[{}] = {{{}}};\n", t.nt() + 1, list(&mut start.iter().copied()));
        s += &format!("__constant__ unsigned short fs_blade_start[{}] = {{{}}};\n", t.m() + 1, list(&mut bstart.iter().copied()));
        s += &format!("__constant__ unsigned int fs_prod[{}] = {{{}}};\n", all.len(), list(&mut all.iter().map(|&v| v as usize)));
        Ok(s + SIMT_CU)
    })
}

fn simt_opts(dt: DType, kind: u8, f32_io: bool) -> Vec<String> {
    vec![dtype_opt(dt), format!("-DFS_KIND={kind}"), format!("-DFS_F32={}", u8::from(f32_io))]
}

#[allow(clippy::too_many_arguments)]
fn plan_simt(plan: &mut Plan, layer: &Layer, kind: u8, dt: DType, f32_io: bool, threads: usize, bufs: &[usize], dims: Dims, n_out: usize) -> Result<()> {
    let mut args: Vec<Arg> = bufs.iter().map(|&b| Arg::Buf(b)).collect();
    args.extend([dims.b, dims.n, n_out].map(|v| Arg::I64(v as i64)));
    let grid = blocks("x", threads, THREADS as usize)?;
    plan.launch(launch(simt_source(layer)?, simt_opts(dt, kind, f32_io), (grid, 1, 1), 0, args, "clifford_fc_simt"));
    Ok(())
}

// ---- MVLinear ------------------------------------------------------------------------------------

/// How MVLinear runs on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearVariant {
    /// The tensor-core tile engine of `tile.cu` (f32 as 3×TF32).
    Tiles,
    /// One cuBLAS GEMM per grade and pass (`blas.rs`), f32 compute without TF32.
    Blas,
}

impl LinearVariant {
    pub const ALL: [LinearVariant; 2] = [LinearVariant::Tiles, LinearVariant::Blas];
    /// `EMBER_CLIFFORD_LINEAR=tiles|blas`; otherwise cuBLAS where it loads, the tiles where not.
    pub fn selected(x: &Tensor) -> LinearVariant {
        match ember_core::knob("EMBER_CLIFFORD_LINEAR") {
            Some("tiles") => LinearVariant::Tiles,
            Some("blas") => LinearVariant::Blas,
            _ if super::blas::available(x) => LinearVariant::Blas,
            _ => LinearVariant::Tiles,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LinearVariant::Tiles => "tiles",
            LinearVariant::Blas => "blas",
        }
    }
}

/// MVLinear forward: inputs [x, w] or [x, w, bias]; output [out].
pub fn plan_linear_forward(layer: &Layer, dims: Dims, n_out: usize, dt: DType, bias: bool) -> Result<Plan> {
    let mut plan = Plan::new(if bias { 3 } else { 2 });
    let out = plan.output(&[dims.m, dims.b, n_out], dt);
    let call = TileCall {
        a: Arg::Buf(0),
        b: Arg::Buf(1),
        x: Arg::Null,
        y: Arg::Null,
        dst: out,
        dst2: Arg::Null,
        bias: if bias { Arg::Buf(2) } else { Arg::Null },
        rows: dims.b,
        cols: n_out,
        k: dims.n,
        a_strides: [dims.b * dims.n, dims.n, 1],
        b_strides: [dims.n * n_out, 1, n_out],
        d_strides: [dims.b * n_out, n_out, 1],
        x_dims: (dims.b, dims.n),
        out_len: dims.m * dims.b * n_out,
    };
    plan_tile(&mut plan, layer, TileKind::LinFwd, dt, TileIo { a_f32: false, b_f32: true, d_f32: false, bias }, call)?;
    Ok(plan)
}

pub fn linear_forward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_forward_variant(layer, dims, n_out, x, w, bias, LinearVariant::selected(x))
}

/// [`linear_forward`] with an explicit variant (the GPU checks run every one).
#[allow(clippy::too_many_arguments)]
pub fn linear_forward_variant(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, var: LinearVariant) -> Result<Tensor> {
    let plan = match var {
        LinearVariant::Blas => super::blas::plan_forward(layer, dims, n_out, x.dtype(), bias.is_some())?,
        LinearVariant::Tiles => plan_linear_forward(layer, dims, n_out, x.dtype(), bias.is_some())?,
    };
    let outs = match bias {
        Some(b) => run_cuda(plan, &[x, w, b])?,
        None => run_cuda(plan, &[x, w])?,
    };
    Ok(outs.into_iter().next().expect("out"))
}

/// MVLinear backward: inputs [x, w, d_out]; outputs [d_x, d_w, d_bias].
pub fn plan_linear_backward(layer: &Layer, dims: Dims, n_out: usize, dt: DType) -> Result<Plan> {
    let mut plan = Plan::new(3);
    let dx = plan.output(&[dims.m, dims.b, dims.n], dt);
    let dw = plan.output(&[layer.grades(), dims.n, n_out], DType::F32);
    let db = plan.output(&[n_out], DType::F32);
    let data = TileCall {
        a: Arg::Buf(2),
        b: Arg::Buf(1),
        x: Arg::Null,
        y: Arg::Null,
        dst: dx,
        dst2: Arg::Null,
        bias: Arg::Null,
        rows: dims.b,
        cols: dims.n,
        k: n_out,
        a_strides: [dims.b * n_out, n_out, 1],
        b_strides: [dims.n * n_out, n_out, 1],
        d_strides: [dims.b * dims.n, dims.n, 1],
        x_dims: (dims.b, dims.n),
        out_len: dims.m * dims.b * dims.n,
    };
    plan_tile(&mut plan, layer, TileKind::LinBwdData, dt, TileIo { a_f32: false, b_f32: true, d_f32: false, bias: false }, data)?;
    let weight = TileCall {
        a: Arg::Buf(0),
        b: Arg::Buf(2),
        x: Arg::Null,
        y: Arg::Null,
        dst: dw,
        dst2: Arg::Null,
        bias: Arg::Null,
        rows: dims.n,
        cols: n_out,
        k: dims.b,
        a_strides: [dims.b * dims.n, 1, dims.n],
        b_strides: [dims.b * n_out, 1, n_out],
        d_strides: [dims.n * n_out, n_out, 1],
        x_dims: (dims.b, dims.n),
        out_len: layer.grades() * dims.n * n_out,
    };
    plan_tile(&mut plan, layer, TileKind::LinBwdWeight, dt, TileIo { a_f32: false, b_f32: false, d_f32: true, bias: false }, weight)?;
    plan_bias_grad(&mut plan, dims, n_out, dt, 2, db)?;
    Ok(plan)
}

/// d_bias (buffer `db`): column sums of the scalar blade's gradient (the first B × N_out of buffer
/// `g`), in row chunks, in order.
pub(super) fn plan_bias_grad(plan: &mut Plan, dims: Dims, n_out: usize, dt: DType, g: usize, db: usize) -> Result<()> {
    let chunks = dims.b.div_ceil(256).clamp(1, 64);
    let rpc = dims.b.div_ceil(chunks);
    let chunks = dims.b.div_ceil(rpc);
    let part = plan.alloc(&[chunks, n_out], DType::F32);
    let args = vec![Arg::Buf(g), Arg::Buf(part), Arg::I64(dims.b as i64), Arg::I64(n_out as i64), Arg::I64(rpc as i64)];
    let grid = (blocks("w", n_out, THREADS as usize)?, chunks as u32, 1);
    plan.launch(Launch { src: SUMS, opts: vec![], entry: format!("cl_col_sums_{}", dt.name()), grid, block: THREADS, smem: 0, args, name: "clifford_col_sums", dependent: false });
    sum_chunks(plan, part, db, chunks, n_out);
    Ok(())
}

pub fn linear_backward(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, d_out: &Tensor) -> Result<LinearGrads> {
    linear_backward_variant(layer, dims, n_out, x, w, d_out, LinearVariant::selected(x))
}

/// [`linear_backward`] with an explicit variant (the GPU checks run every one).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward_variant(layer: &Layer, dims: Dims, n_out: usize, x: &Tensor, w: &Tensor, d_out: &Tensor, var: LinearVariant) -> Result<LinearGrads> {
    let plan = match var {
        LinearVariant::Blas => super::blas::plan_backward(layer, dims, n_out, x.dtype())?,
        LinearVariant::Tiles => plan_linear_backward(layer, dims, n_out, x.dtype())?,
    };
    let mut it = run_cuda(plan, &[x, w, d_out])?.into_iter();
    Ok(LinearGrads { d_x: it.next().expect("d_x"), d_w: it.next().expect("d_w"), d_bias: it.next().expect("d_bias") })
}

// ---- every specialization, for the NVRTC compile test --------------------------------------------

/// Every (source, options) the launch code can request for `layer`'s algebra.
pub fn kernels_of(layer: &Layer) -> Result<Vec<KernelBuild>> {
    let mut out = Vec::new();
    let m = layer.blades();
    let vs: Vec<usize> = if vec_max(m) > 1 { vec![vec_max(m), 1] } else { vec![1] };
    for dt in DType::ACTIVATIONS {
        for gelu in [false, true] {
            let src = fwd_source(layer, gelu)?;
            for &v in &vs {
                out.push(KernelBuild { source: src, options: fwd_opts(dt, v, false, false, false) });
                let staged_fwd = |norm: bool, f32_fast: bool| {
                    let fixed = fwd_opts_tail(dt, v, norm, true, true, f32_fast);
                    let mut dynamic = fixed.clone();
                    dynamic.push(DYNAMIC_OPT.into());
                    let mut one_step = fixed.clone();
                    one_step.push("-DCL_PRE2=0".into());
                    [fixed, dynamic, one_step].map(|options| KernelBuild { source: src, options })
                };
                if v > 1 {
                    out.extend(staged_fwd(false, false));
                }
                if gelu {
                    out.push(KernelBuild { source: src, options: fwd_opts(dt, v, true, false, false) });
                    if v > 1 {
                        out.push(KernelBuild { source: src, options: fwd_opts(dt, v, true, true, false) });
                        out.extend(staged_fwd(true, false));
                        if dt == DType::F32 {
                            out.extend(staged_fwd(true, true));
                        }
                    }
                }
            }
        }
        for kind in ["normfwd", "normbwd"] {
            let src = rows_source(layer, kind)?;
            for &v in &vs {
                for hold in [false, true] {
                    out.push(KernelBuild { source: src, options: norm_opts(dt, kind, v, hold) });
                    // The gradient as the fully connected GEMM backward's operands.
                    if kind == "normbwd" && fcb::applies(layer) {
                        let form = if dt == DType::F32 { NormGrad::Split3 } else { NormGrad::Act };
                        let mut options = norm_opts(dt, kind, v, hold);
                        options.extend(form.opt().map(String::from));
                        out.push(KernelBuild { source: src, options });
                    }
                }
            }
        }
        let src = rows_source(layer, "dot")?;
        for &v in &vs {
            // Plain and (half types) staged, each also as the pass that zeroes the folded sums'
            // counters (BwdVariant::Fold).
            let stagings: &[bool] = if dt != DType::F32 { &[false, true] } else { &[false] };
            for &staged in stagings {
                let plain = rows_opts(dt, "dot", v, staged);
                let mut zeroing = plain.clone();
                zeroing.push("-DCL_ZERO=1".into());
                out.extend([plain, zeroing].map(|options| KernelBuild { source: src, options }));
            }
        }
        for (gelu, norm) in [(false, false), (true, false), (true, true)] {
            out.push(KernelBuild { source: bwd_source(layer, gelu, norm)?, options: bwd_opts(dt, norm) });
            if norm {
                out.push(KernelBuild { source: bwd_source(layer, gelu, norm)?, options: fold_opts(dt) });
            }
            if dt == DType::F32 && m <= 8 {
                out.push(KernelBuild { source: bwd_source(layer, gelu, norm)?, options: pipe_opts(norm) });
            }
            if dt == DType::F32 && m <= 8 {
                let v_opts: &[usize] = if norm { &vs } else { &[1] };
                for &v in v_opts {
                    out.push(KernelBuild { source: whole_source(layer, gelu, norm)?, options: whole_opts(norm, v) });
                }
            }
            if dt == DType::F32 && m <= 16 {
                let v_opts: &[usize] = if norm { &vs } else { &[1] };
                for &v in v_opts {
                    for vec in [4, 1] {
                        out.push(KernelBuild { source: rowwise_source(layer, gelu, norm)?, options: rowwise_opts(norm, v, vec) });
                    }
                }
            }
        }
        for prog in [Prog::GeluFwd, Prog::GeluBwd] {
            out.push(KernelBuild { source: gelu_source(layer, prog, dt)?, options: vec![] });
        }
        let fc_tc = fc_tensor_cores(layer, dt);
        for kind in TileKind::ALL {
            let ios: Vec<TileIo> = match kind {
                TileKind::FcFwd if fc_tc => [false, true].iter().map(|&d| TileIo { a_f32: false, b_f32: true, d_f32: d, bias: false }).collect(),
                TileKind::FcBwdData if fc_tc => [false, true].iter().map(|&a| TileIo { a_f32: a, b_f32: true, d_f32: false, bias: false }).collect(),
                TileKind::FcBwdWeight if fc_tc => [false, true].iter().map(|&b| TileIo { a_f32: false, b_f32: b, d_f32: true, bias: false }).collect(),
                TileKind::LinFwd => [false, true].iter().map(|&bias| TileIo { a_f32: false, b_f32: true, d_f32: false, bias }).collect(),
                TileKind::LinBwdData => vec![TileIo { a_f32: false, b_f32: true, d_f32: false, bias: false }],
                TileKind::LinBwdWeight => vec![TileIo { a_f32: false, b_f32: false, d_f32: true, bias: false }],
                _ => vec![],
            };
            for io in ios {
                out.push(KernelBuild { source: tile_source(layer, kind, dt, io)?.0, options: tile_opts(dt) });
            }
        }
        out.extend(fc2::kernels(layer, dt)?);
        out.extend(fc3::kernels(layer, dt)?);
        if !fc_tc {
            for (kind, f) in [(1, false), (1, true), (2, false), (2, true), (3, false), (3, true)] {
                out.push(KernelBuild { source: simt_source(layer)?, options: simt_opts(dt, kind, f) });
            }
        }
    }
    out.extend(fcb::kernels(layer)?);
    // The staged kernels with either weight staging (EMBER_CLIFFORD_WSTAGE).
    let ws = "-DCL_WS=1".to_string();
    let mut other: Vec<KernelBuild> = Vec::new();
    for b in out.iter().filter(|b| b.options.contains(&ws)) {
        let mut o: Vec<String> = b.options.iter().filter(|s| !s.starts_with("-DCL_WCP")).cloned().collect();
        if o.len() == b.options.len() {
            o.push("-DCL_WCP=0".into());
        }
        other.push(KernelBuild { source: b.source, options: o });
    }
    out.extend(other);
    Ok(out)
}
