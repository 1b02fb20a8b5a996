//! Launch code of the staged kernels (`staged.cu`, sm_90a, 16-bit inputs, C ≤ 256). Backward:
//! transposes of x and the weights, the map kernel (g, b, ds, P, Q, d_g on wgmma), and the reductions
//! over vertices for d_A and d_x — on wgmma, or on the mma.sync split-K kernels of the fused backward.
//! Forward: stages 1 and 2 of the map kernel. Chosen by `EMBER_GRADFEAT_BWD` and `EMBER_GRADFEAT_FWD`
//! (see [`super::cuda::BwdVariant`], [`super::cuda::FwdVariant`]); NOTES.md (v3) has the design.

use super::cuda::{self, grid_u32, ptr, row_tiles, SplitPlan};
use super::{Grads, Input, InputGrads, Problem, WeightGrads, Weights};
use crate::KernelBuild;
use ember_core::cuda::{cfg_1d, CudaDevice, KernelSource, LaunchConfig};
use ember_core::{DType, Error, Result, Tensor};
use std::sync::Arc;

pub const SOURCE: KernelSource = KernelSource::new("gradfeat_staged", include_str!("staged.cu"));

const THREADS: u32 = 256;
/// Largest C the map kernel keeps on chip (two 128-channel chunks).
pub const MAX_C: usize = 256;

/// 128-channel chunks the map kernel holds for `c` channels.
pub(super) fn chunks(c: usize) -> usize {
    if c <= 128 {
        1
    } else {
        2
    }
}

/// Shared memory of the map kernel: the tile G (two planes of rows × padded channels), the d_out
/// tile, and a 4-slot ring of 32-deep k-tiles (grads_re, grads_im and xᵀ, or two weight planes).
/// Mirrors the shared-memory layout of gs_map in `staged.cu` (G, d_out, ring).
pub(super) fn map_smem_bytes(nch: usize) -> usize {
    let (bm, cpad, bk) = (128 / nch, 128 * nch, 32);
    let plane = bm * cpad * 2;
    let stage = (2 * bm * bk * 2 + cpad * bk * 2).max(2 * cpad * bk * 2);
    3 * plane + 4 * stage
}

/// Shared memory of the backward's map kernel on saved b: as [`map_smem_bytes`], with each ring slot
/// large enough for one plane of b's tile image (GS_BM × padded channels; with one chunk the plane
/// is larger than a k-tile). Mirrors STAGE in gs_map.
pub(super) fn map_smem_bytes_saved(nch: usize) -> usize {
    let plane = (128 / nch) * 128 * nch * 2;
    let slot = (map_smem_bytes(nch) - 3 * plane) / 4;
    3 * plane + 4 * slot.max(plane)
}

/// Shared memory of the forward's `packed-pp` build (one warpgroup per CTA, two CTAs per
/// multiprocessor): G (two planes of 64 rows × padded channels) and a 3-slot ring of 16 KB k-tiles.
/// Mirrors GP_SMEM in `staged.cu`.
pub(super) fn pp_smem_bytes(nch: usize) -> usize {
    2 * 64 * 128 * nch * 2 + 3 * 16384
}

/// Threads of a `packed-pp` CTA: one warpgroup.
const PP_THREADS: u32 = 128;

/// Shared memory of a wgmma reduction: 6 slots of four 32 × 128 16-bit tiles. Mirrors GR_SMEM.
pub(super) const REDUCE_SMEM: usize = 6 * 4 * 32 * 128 * 2;

/// CTAs of a wgmma reduction (one per multiprocessor fits): four full waves.
fn reduce_ctas(dev: &CudaDevice) -> usize {
    4 * dev.info().multiprocessors.max(1) as usize
}

/// CTAs of d_A's image reduction: one full wave, or `EMBER_GRADFEAT_DA_WAVES` (1..=16). Its splits are
/// uniform whole k-tiles, so one wave balances; more waves mean more splits and more f32 partial
/// slices to write and sum (4 waves: 132 splits of 2·C² f32, 67 MB at C = 256 whatever V; 1 wave:
/// 17 MB). One wave measured 1–7 % faster per fwd+bwd than four (NOTES.md, v13).
fn img_reduce_ctas(dev: &CudaDevice) -> usize {
    let waves = ember_core::knob("EMBER_GRADFEAT_DA_WAVES").and_then(|v| v.parse::<usize>().ok()).filter(|w| (1..=16).contains(w)).unwrap_or(1);
    waves * dev.info().multiprocessors.max(1) as usize
}

fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => unreachable!("the staged backward takes 16-bit inputs"),
    }
}

/// `img` (only with `packed`): the build whose `_sv` map kernels write g, P, Q as tile images.
/// `defer` (only with `packed`): the build whose `_sv` map kernels write a row tile's out or d_g
/// while the next row tile's first products run (NOTES.md, v7).
fn map_options(dtype: DType, nch: usize, packed: bool, img: bool, defer: bool) -> Vec<String> {
    let mut v = vec![format!("-DGS_DTYPE={}", dtype_code(dtype)), "-DGS_KIND=0".into(), format!("-DGS_NCH={nch}")];
    if packed {
        v.push("-DGS_PACK=1".into());
    }
    if img {
        v.push("-DGS_IMG=1".into());
    }
    if defer {
        v.push("-DGS_DEFER=1".into());
    }
    v
}

/// (packed, img, defer) of every map kernel build the launch code requests: the defer builds are
/// the forward's packed one and the backward's image one.
const MAP_BUILDS: [(bool, bool, bool); 5] = [(false, false, false), (true, false, false), (true, true, false), (true, false, true), (true, true, true)];

/// The forward's `packed-pp` build (GS_PP; NOTES.md, v9): only its entries gs_fwd_*_pp.
fn pp_options(dtype: DType, nch: usize) -> Vec<String> {
    let mut v = map_options(dtype, nch, true, false, false);
    v.push("-DGS_PP=1".into());
    v
}

fn reduce_options(dtype: DType) -> Vec<String> {
    vec![format!("-DGS_DTYPE={}", dtype_code(dtype)), "-DGS_KIND=1".into()]
}

/// Every specialisation the launch code can request.
pub fn all_builds() -> Vec<KernelBuild> {
    let mut v = Vec::new();
    for dtype in [DType::F16, DType::BF16] {
        for nch in [1, 2] {
            for (packed, img, defer) in MAP_BUILDS {
                v.push(KernelBuild { source: SOURCE, options: map_options(dtype, nch, packed, img, defer) });
            }
            v.push(KernelBuild { source: SOURCE, options: pp_options(dtype, nch) });
        }
        v.push(KernelBuild { source: SOURCE, options: reduce_options(dtype) });
    }
    v
}

/// CTAs of the map kernel over `ntiles` row tiles: in the spectral form a persistent grid of one CTA
/// per multiprocessor (each CTA's ring runs on from one row tile into the next), kept small enough
/// that a CTA's ring counts fit in 31 bits; in the vertex form one CTA per row tile (its ring loads
/// G, which may not be refilled while the previous tile uses it).
pub(super) fn map_grid(p: &Problem, ntiles: usize, forward: bool, multiprocessors: usize) -> usize {
    if !p.spectral {
        return ntiles;
    }
    // Ring tiles per row tile: stage 1, then stage 2 (or saved b's two planes) and stage 3.
    let nk2 = p.c.div_ceil(32);
    let per = p.k.div_ceil(32) + if forward { nk2 } else { (2 * nk2).max(nk2 + 2) };
    ntiles.min(multiprocessors.max(1)).max(ntiles.div_ceil(i32::MAX as usize / per))
}

/// CTAs of the `packed-pp` forward over `ntiles` 64-row tiles: a persistent grid of two CTAs per
/// multiprocessor, kept small enough that a CTA's ring count fits in 31 bits.
pub(super) fn pp_grid(p: &Problem, ntiles: usize, multiprocessors: usize) -> usize {
    let per = chunks(p.c) * (p.k.div_ceil(32) + p.c.div_ceil(32));
    ntiles.min(2 * multiprocessors.max(1)).max(ntiles.div_ceil(i32::MAX as usize / per))
}

/// Whether `fwd=packed-pp` runs `p` as itself: where the packed `_sv` forward does, with K ≥ 8 (its
/// stage 1 has a k-tile, whose barrier orders a row tile's G against the previous one's).
pub fn pp_applies(dev: &CudaDevice, p: &Problem) -> bool {
    let limit = dev.info().shared_memory_per_block_optin.max(0) as usize;
    applies(dev, p) && spectral_vec(p) && p.k >= 8 && pp_smem_bytes(chunks(p.c)) <= limit
}

/// Whether the staged backward runs `p` on `dev`: Hopper's wgmma, 16-bit inputs, C ≤ 256, and the
/// kernels' shared memory.
pub fn applies(dev: &CudaDevice, p: &Problem) -> bool {
    let limit = dev.info().shared_memory_per_block_optin.max(0) as usize;
    dev.info().arch == "sm_90a" && p.dtype.size() == 2 && p.c <= MAX_C && map_smem_bytes(chunks(p.c)) <= limit && REDUCE_SMEM.max(DX_SMEM) <= limit
}

/// Whether the `_sv` map kernels take `p` (the spectral form, K and C multiples of 8), unless
/// `EMBER_GRADFEAT_MAP=general` forces the general ones.
pub(super) fn spectral_vec(p: &Problem) -> bool {
    p.spectral && p.k.is_multiple_of(8) && p.c.is_multiple_of(8) && !general_map_forced()
}

/// Whether `bwd=packed-img` runs `p` as itself: where the packed `_sv` map kernel does (it writes the
/// tile images).
pub fn img_applies(dev: &CudaDevice, p: &Problem) -> bool {
    applies(dev, p) && spectral_vec(p)
}

/// Whether the training forward keeps b for the backward (`saved` of [`forward_save`] and
/// [`backward`]): where `bwd=packed-img` runs its `_sv` map kernel with two 128-channel chunks
/// (128 < C ≤ 256) and the larger ring slots fit. At C ≤ 128 b's GEMM is cheap beside its 2·C·2
/// bytes per vertex written and read back: at C = 128 the training pair measured 4 % slower than
/// recomputing (NOTES.md, v13), so it recomputes there. The kernels take both chunk counts (the
/// host model runs them).
pub fn saved_applies(dev: &CudaDevice, p: &Problem) -> bool {
    let limit = dev.info().shared_memory_per_block_optin.max(0) as usize;
    img_applies(dev, p) && chunks(p.c) == 2 && map_smem_bytes_saved(chunks(p.c)) <= limit
}

/// Which kernels reduce over the vertices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reductions {
    /// `gs_reduce_*` (wgmma with transposed shared-memory operands).
    Wgmma,
    /// The fused backward's split-K kernels (mma.sync).
    MmaSync,
}

/// dst[b] = ±src[b]ᵀ for `batches` blocks of rows × cols, as a (batches, cols, rows) tensor.
#[allow(clippy::too_many_arguments)]
fn transpose(dev: &Arc<CudaDevice>, p: &Problem, src: &Tensor, batches: usize, rows: usize, cols: usize, negate: bool) -> Result<Tensor> {
    let dst = Tensor::output(&[batches, cols, rows], p.dtype, p.device)?;
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), "gs_transpose")?;
    let (s, d, b, r, c, neg) = (src.cuda_ptr()?, dst.cuda_ptr()?, batches as i64, rows as i32, cols as i32, negate as i32);
    dev.launch(&f, cfg_1d(dev.grid_for(batches * rows * cols, 256), 256, 0))
        .arg(&s)
        .arg(&d)
        .arg(&b)
        .arg(&r)
        .arg(&c)
        .arg(&neg)
        .named("gradfeat transpose")
        .run()?;
    Ok(dst)
}

/// Packed k-tile images of `batches` matrices M (rows × cols; M = src, or srcᵀ when `trans`, src then
/// cols × rows): one or two planes, plane i from `srcs[i]` (negated where its flag says), each image
/// (b, kt) holding the planes' 32-column k-tiles of `rpad` rows in the ring slot's byte order (see
/// gs_pack), zero outside M. The map kernel's packed build copies each as one block.
struct PackJob<'a> {
    srcs: Vec<(&'a Tensor, bool)>,
    batches: usize,
    rows: usize,
    cols: usize,
    rpad: usize,
    trans: bool,
}

/// gs_pack's parameters: one job (mirrors GsPackJob).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GsPackJob {
    src0: u64,
    src1: u64,
    dst: u64,
    batches: i64,
    rows: i32,
    cols: i32,
    rpad: i32,
    nkt: i32,
    planes: i32,
    trans: i32,
    negate: i32,
}

/// Up to three jobs of one launch (mirrors GsPackJobs, passed by value).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GsPackJobs {
    job: [GsPackJob; 3],
    njobs: i32,
}
// SAFETY: plain-old-data with the C layout of GsPackJobs, passed by value as a kernel parameter.
unsafe impl ember_core::cuda::DeviceRepr for GsPackJobs {}

/// The images of up to three pack jobs, in one launch (each launch costs a few µs at the sizes where
/// the packs matter: NOTES.md, v14).
fn pack_all(dev: &Arc<CudaDevice>, p: &Problem, jobs: &[PackJob]) -> Result<Vec<Tensor>> {
    assert!(jobs.len() <= 3, "gs_pack takes up to three jobs");
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut params = GsPackJobs { njobs: jobs.len() as i32, ..Default::default() };
    let (mut outs, mut total) = (Vec::new(), 0usize);
    for (slot, j) in params.job.iter_mut().zip(jobs) {
        let (nkt, planes) = (j.cols.div_ceil(32), j.srcs.len());
        debug_assert!((1..=2).contains(&planes), "a pack job takes one or two planes");
        let elems = planes * j.batches * nkt * j.rpad * 32;
        let dst = Tensor::output(&[elems], p.dtype, p.device)?;
        let negate = j.srcs.iter().enumerate().fold(0i32, |m, (i, (_, neg))| m | ((*neg as i32) << i));
        *slot = GsPackJob {
            src0: j.srcs[0].0.cuda_ptr()?,
            src1: j.srcs[planes - 1].0.cuda_ptr()?,
            dst: dst.cuda_ptr()?,
            batches: j.batches as i64,
            rows: j.rows as i32,
            cols: j.cols as i32,
            rpad: j.rpad as i32,
            nkt: nkt as i32,
            planes: planes as i32,
            trans: j.trans as i32,
            negate,
        };
        total += elems;
        outs.push(dst);
    }
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), "gs_pack")?;
    dev.launch(&f, cfg_1d(dev.grid_for(total, 256), 256, 0)).arg(&params).named("gradfeat pack").run()?;
    Ok(outs)
}

/// out[g] = Σ over the `rows` rows of group g of a_reᵀ·b_re ⊕ a_imᵀ·b_im (see gs_reduce), (m × n) per
/// group: f32 slices per split, then summed in split order. Without rotations and with two outputs,
/// the (m × n) result is split by rows: its first m/2 rows go to out.0, the rest to out.1.
#[allow(clippy::too_many_arguments)]
fn reduce_rows_wgmma(dev: &Arc<CudaDevice>, p: &Problem, rot: bool, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor), rows: usize, m: usize, n: usize, plan: &SplitPlan, out: (&Tensor, Option<&Tensor>), ngroups: usize) -> Result<()> {
    let planes = if rot { 2 } else { 1 };
    let out_planes = if out.1.is_some() { 2 } else { 1 };
    let tiles = m.div_ceil(128) * n.div_ceil(128);
    let ws = Tensor::output(&[plan.nsplits * planes * m * n], DType::F32, p.device)?;
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), if rot { "gs_reduce_rot" } else { "gs_reduce_sum" })?;
    dev.set_max_dynamic_smem(&f, REDUCE_SMEM)?;
    let blocks = plan.nsplits.checked_mul(tiles).ok_or_else(|| Error::TooLarge { arg: "rows".into(), what: "split count overflows".into() })?;
    let cfg = LaunchConfig { grid_dim: (grid_u32("rows", blocks)?, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: REDUCE_SMEM as u32 };
    let (table, groups) = plan.device_tables(p.device)?;
    let (a_re, a_im, b_re, b_im, wsp, tablep) = (a.0.cuda_ptr()?, a.1.cuda_ptr()?, b.0.cuda_ptr()?, b.1.cuda_ptr()?, ws.cuda_ptr()?, ptr(table.as_ref())?);
    let (r, mi, ni, per) = (rows as i64, m as i32, n as i32, plan.rows_per_split as i64);
    let (vec_m, vec_n) = (m.is_multiple_of(8) as i32, n.is_multiple_of(8) as i32);
    dev.launch(&f, cfg)
        .arg(&a_re)
        .arg(&a_im)
        .arg(&b_re)
        .arg(&b_im)
        .arg(&wsp)
        .arg(&tablep)
        .arg(&r)
        .arg(&mi)
        .arg(&ni)
        .arg(&per)
        .arg(&vec_m)
        .arg(&vec_n)
        .named("gradfeat wgmma split-K reduction")
        .run()?;
    cuda::sum_splits(dev, p, &ws, out_planes, planes * m * n / out_planes, plan.nsplits, groups.as_ref(), out, ngroups)
}

/// The splits of a reduction of (m × n) results over the vertices (of each mesh when `per_mesh`),
/// for about `ctas` CTAs; and its number of groups.
pub(super) fn plan(p: &Problem, how: Reductions, m: usize, n: usize, per_mesh: bool, ctas: usize) -> (SplitPlan, usize) {
    let tiles = match how {
        Reductions::Wgmma => m.div_ceil(128) * n.div_ceil(128),
        Reductions::MmaSync => m.div_ceil(64) * n.div_ceil(64),
    };
    if per_mesh {
        (cuda::mesh_plan(p, tiles, ctas), p.meshes())
    } else {
        (cuda::uniform_plan(p.v, tiles, ctas), 1)
    }
}

/// A reduction over vertices through the chosen kernels.
#[allow(clippy::too_many_arguments)]
fn reduce(dev: &Arc<CudaDevice>, p: &Problem, how: Reductions, rot: bool, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor), m: usize, n: usize, per_mesh: bool, out: (&Tensor, Option<&Tensor>)) -> Result<()> {
    let ctas = match how {
        Reductions::Wgmma => reduce_ctas(dev),
        Reductions::MmaSync => cuda::splitk_ctas(dev),
    };
    let (plan, ngroups) = plan(p, how, m, n, per_mesh, ctas);
    match how {
        Reductions::Wgmma => reduce_rows_wgmma(dev, p, rot, a, b, p.v, m, n, &plan, out, ngroups),
        Reductions::MmaSync => cuda::reduce_rows(dev, p, rot, a, b, m, n, &plan, out, ngroups),
    }
}

/// The splits of an image reduction over `rows` image rows for about `ctas` CTAs of `tiles` output
/// tiles: uniform, each a whole number of 32-row k-tiles (gs_reduce's IMG loads have no row bounds).
pub(super) fn img_plan(rows: usize, tiles: usize, ctas: usize) -> SplitPlan {
    let per = cuda::uniform_plan(rows, tiles, ctas).rows_per_split.next_multiple_of(32);
    SplitPlan { splits: vec![], groups: vec![], nsplits: rows.div_ceil(per).max(1), rows_per_split: per }
}

/// d_A (m = n = C) from the map kernel's tile images of P, Q, g (`rows` image rows of `ldi` padded
/// channels each) by gs_reduce_*_img, f32 slices per split summed in split order.
#[allow(clippy::too_many_arguments)]
fn reduce_img(dev: &Arc<CudaDevice>, p: &Problem, rot: bool, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor), rows: usize, ldi: usize, out: (&Tensor, Option<&Tensor>)) -> Result<()> {
    let (m, n) = (p.c, p.c);
    let planes = if rot { 2 } else { 1 };
    let tiles = m.div_ceil(128) * n.div_ceil(128);
    let plan = img_plan(rows, tiles, img_reduce_ctas(dev));
    let ws = Tensor::output(&[plan.nsplits * planes * m * n], DType::F32, p.device)?;
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), if rot { "gs_reduce_rot_img" } else { "gs_reduce_sum_img" })?;
    dev.set_max_dynamic_smem(&f, REDUCE_SMEM)?;
    let blocks = plan.nsplits.checked_mul(tiles).ok_or_else(|| Error::TooLarge { arg: "grads_re".into(), what: "split count overflows".into() })?;
    let cfg = LaunchConfig { grid_dim: (grid_u32("grads_re", blocks)?, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: REDUCE_SMEM as u32 };
    let (a_re, a_im, b_re, b_im, wsp) = (a.0.cuda_ptr()?, a.1.cuda_ptr()?, b.0.cuda_ptr()?, b.1.cuda_ptr()?, ws.cuda_ptr()?);
    let (r, mi, ni, per, ld) = (rows as i64, m as i32, n as i32, plan.rows_per_split as i64, ldi as i32);
    dev.launch(&f, cfg)
        .arg(&a_re)
        .arg(&a_im)
        .arg(&b_re)
        .arg(&b_im)
        .arg(&wsp)
        .arg(&r)
        .arg(&mi)
        .arg(&ni)
        .arg(&per)
        .arg(&ld)
        .named("gradfeat wgmma image reduction")
        .run()?;
    cuda::sum_splits(dev, p, &ws, planes, m * n, plan.nsplits, None, out, 1)
}

/// Shared memory of gs_reduce_dxa: 4 slots of a 32-row k-tile of grads_re, grads_im (128 columns)
/// and of up to four 128-channel image tiles (d_g_re, d_g_im, P, Q). Mirrors DX_SMEM.
pub(super) const DX_SMEM: usize = 4 * (2 * 32 * 128 * 2 + 4 * 32 * 128 * 2);

/// The splits of gs_reduce_dxa: per mesh, its row tiles' image rows (`entries`: the map kernel's row
/// tiles, `None` for one mesh of `ntiles` tiles of `bm` rows) in runs of whole 32-row k-tiles, about
/// `ctas` CTAs in all for `tiles_m` CTAs per split; one group of splits per mesh.
pub(super) fn dx_img_plan(p: &Problem, entries: Option<&[i64]>, ntiles: usize, bm: usize, tiles_m: usize, ctas: usize) -> SplitPlan {
    let per = (ntiles * bm).div_ceil(ctas.div_ceil(tiles_m.max(1)).max(1)).next_multiple_of(32).max(32);
    // Each mesh's run of row tiles, [first, end), in tile order.
    let mut runs = vec![(0usize, 0usize); p.meshes()];
    match entries {
        Some(t) => {
            for (i, e) in t.chunks(3).enumerate() {
                let m = e[2] as usize;
                if runs[m].1 == 0 {
                    runs[m].0 = i;
                }
                runs[m].1 = i + 1;
            }
        }
        None => runs[0] = (0, ntiles),
    }
    let (mut splits, mut groups) = (Vec::new(), Vec::new());
    for (first, end) in runs {
        let g0 = splits.len() / 2;
        for r in (first * bm..end * bm).step_by(per) {
            splits.extend([r as i64, (r + per).min(end * bm) as i64]);
        }
        groups.extend([g0 as i64, (splits.len() / 2) as i64]);
    }
    let nsplits = splits.len() / 2;
    // Only empty meshes: one empty split to launch over.
    if nsplits == 0 {
        splits.extend([0, 0]);
    }
    if p.meshes() == 1 {
        groups.clear();
    }
    SplitPlan { splits, groups, nsplits: nsplits.max(1), rows_per_split: per }
}

/// d_x (per mesh, K × C) from grads and the map kernel's tile images of d_g by gs_reduce_dxa's d_x-only
/// entries, f32 slices per split summed in split order.
fn reduce_dx_img(dev: &Arc<CudaDevice>, p: &Problem, grads: (&Tensor, &Tensor), dg: (&Tensor, &Tensor), d_x: &Tensor) -> Result<()> {
    let (plan, _) = dxa_plans(p, dev.info().multiprocessors.max(1) as usize);
    let ws = launch_dxa(dev, p, 1, grads, dg, None, &plan)?;
    let (_, groups) = plan.device_tables(p.device)?;
    cuda::sum_splits(dev, p, &ws, 1, p.k * p.c, plan.nsplits, groups.as_ref(), (d_x, None), p.meshes())
}

/// Whether factoring d_A through x (NOTES.md, v14; possible wherever the image reductions run, which
/// implies the spectral form, g = grads·x per mesh) pays for `p` (the default backward's choice):
/// its sums over the vertices are K-deep instead of C-deep (so K ≤ C), and its last product, Σ over
/// meshes of Rᵀ·x as hi + lo rows, is 2·K·meshes deep, which stays small beside the V vertices only
/// when meshes are large (at least 8·K vertices each on average).
pub fn factored_pays(p: &Problem) -> bool {
    p.k <= p.c && 8 * p.k * p.meshes() <= p.v
}

/// gs_reduce_dxa over grads and the map kernel's images of d_g (and of P, Q with `pq`): `outs` planes
/// of f32 slices per split of `plan` (d_x; R_re; −R_im), returned as one workspace.
fn launch_dxa(dev: &Arc<CudaDevice>, p: &Problem, outs: usize, grads: (&Tensor, &Tensor), dg: (&Tensor, &Tensor), pq: Option<(&Tensor, &Tensor)>, plan: &SplitPlan) -> Result<Tensor> {
    let nch = chunks(p.c);
    let bm = 128 / nch;
    let entry = match (nch, outs) {
        (1, 1) => "gs_reduce_dxa1_dx",
        (1, 2) => "gs_reduce_dxa1_plain",
        (1, _) => "gs_reduce_dxa1_rot",
        (_, 1) => "gs_reduce_dxa2_dx",
        (_, 2) => "gs_reduce_dxa2_plain",
        (_, _) => "gs_reduce_dxa2_rot",
    };
    let ws = Tensor::output(&[plan.nsplits * outs * p.k * p.c], DType::F32, p.device)?;
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), entry)?;
    dev.set_max_dynamic_smem(&f, DX_SMEM)?;
    let blocks = plan.nsplits.checked_mul(p.k.div_ceil(128) * nch).ok_or_else(|| Error::TooLarge { arg: "grads_re".into(), what: "split count overflows".into() })?;
    let cfg = LaunchConfig { grid_dim: (grid_u32("grads_re", blocks)?, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: DX_SMEM as u32 };
    let (splits, _) = plan.device_tables(p.device)?;
    let tiles = match cuda::row_tile_entries(p, bm) {
        Some(t) => Some(cuda::device_table(&t, p.device)?),
        None => None,
    };
    let (gr, gi, dr, di) = (grads.0.cuda_ptr()?, grads.1.cuda_ptr()?, dg.0.cuda_ptr()?, dg.1.cuda_ptr()?);
    let (pp, qp) = (ptr(pq.map(|t| t.0))?, ptr(pq.map(|t| t.1))?);
    let (wsp, sp, tp) = (ws.cuda_ptr()?, ptr(splits.as_ref())?, ptr(tiles.as_ref())?);
    let (v, k, c, bmi) = (p.v as i64, p.k as i32, p.c as i32, bm as i32);
    dev.launch(&f, cfg)
        .arg(&gr)
        .arg(&gi)
        .arg(&dr)
        .arg(&di)
        .arg(&pp)
        .arg(&qp)
        .arg(&wsp)
        .arg(&sp)
        .arg(&tp)
        .arg(&v)
        .arg(&k)
        .arg(&c)
        .arg(&bmi)
        .named("gradfeat image reduction of d_x (and R)")
        .run()?;
    Ok(ws)
}

/// d_x and the factored d_A (NOTES.md, v14): gs_reduce_dxa sums d_x and R (K × C per mesh, R_re and
/// −R_im with rotations) over grads and the map kernel's images of d_g, P and Q; gs_sum_dxa adds the
/// split slices per mesh into d_x and R's hi + lo rows; d_A = Σ_meshes Rᵀ·x is then the wgmma split-K
/// reduction over those meshes·K rows (B = x, whose rows are the same meshes·K), each output summed
/// in a fixed order.
#[allow(clippy::too_many_arguments)]
fn reduce_dxa_img(dev: &Arc<CudaDevice>, p: &Problem, rot: bool, grads: (&Tensor, &Tensor), dg: (&Tensor, &Tensor), pq: (&Tensor, &Tensor), x: &Tensor, d_x: &Tensor, d_a: (&Tensor, Option<&Tensor>)) -> Result<()> {
    let (plan, fin) = dxa_plans(p, dev.info().multiprocessors.max(1) as usize);
    let planes = if rot { 3 } else { 2 };
    let ws = launch_dxa(dev, p, planes, grads, dg, Some(pq), &plan)?;
    // Split sums: d_x per mesh, R as hi + lo rows (ld = C per R plane).
    let (ld, rows) = ((planes - 1) * p.c, p.meshes() * p.k);
    let (a_hi, a_lo) = (Tensor::output(&[rows, ld], p.dtype, p.device)?, Tensor::output(&[rows, ld], p.dtype, p.device)?);
    let f = dev.function(&SOURCE, &reduce_options(p.dtype), "gs_sum_dxa")?;
    let (_, groups) = plan.device_tables(p.device)?;
    let (wsp, dxp, hp, lp, gp) = (ws.cuda_ptr()?, d_x.cuda_ptr()?, a_hi.cuda_ptr()?, a_lo.cuda_ptr()?, ptr(groups.as_ref())?);
    let (ng, pl, k, c, ns) = (p.meshes() as i32, planes as i32, p.k as i32, p.c as i32, plan.nsplits as i64);
    dev.launch(&f, cfg_1d(dev.grid_for(p.meshes() * planes * p.k * p.c, 256), 256, 0))
        .arg(&wsp)
        .arg(&dxp)
        .arg(&hp)
        .arg(&lp)
        .arg(&gp)
        .arg(&ng)
        .arg(&pl)
        .arg(&k)
        .arg(&c)
        .arg(&ns)
        .named("gradfeat d_x and R split sums")
        .run()?;
    // d_A = Σ_rows (hi + lo)ᵀ·x: with rotations the rows hold [R_re | R_im], and the (2C × C) result
    // is d_A_re over d_A_im.
    reduce_rows_wgmma(dev, p, false, (&a_hi, &a_lo), (x, x), rows, ld, p.c, &fin, d_a, 1)
}

/// The splits of [`reduce_dx_img`] and [`reduce_dxa_img`] on a GPU of `multiprocessors`: gs_reduce_dxa's
/// (per mesh, whole k-tiles of image rows, one wave of CTAs of K/128 × chunks per split) and those of
/// d_A's last product over the meshes·K rows of R (uniform, four waves as the other wgmma reductions).
pub(super) fn dxa_plans(p: &Problem, multiprocessors: usize) -> (SplitPlan, SplitPlan) {
    let nch = chunks(p.c);
    let bm = 128 / nch;
    let entries = cuda::row_tile_entries(p, bm);
    let ntiles = entries.as_ref().map_or(p.v.div_ceil(bm), |t| t.len() / 3);
    let sums = dx_img_plan(p, entries.as_deref(), ntiles, bm, p.k.div_ceil(128) * nch, multiprocessors);
    let ld = if p.rotation { 2 * p.c } else { p.c };
    let fin = cuda::uniform_plan(p.meshes() * p.k, ld.div_ceil(128) * p.c.div_ceil(128), 4 * multiprocessors);
    (sums, fin)
}

/// What the map kernel writes: the forward's output (and, when `save` is given, b's tile images),
/// or the backward's P, Q, d_g (and g in the spectral form), with the backward's extra inputs (and
/// b's images when `saved` is given).
enum MapOut<'a> {
    Forward {
        out: &'a Tensor,
        save: Option<(&'a Tensor, &'a Tensor)>,
    },
    Backward {
        d_out: &'a Tensor,
        // Stage 3's weights A_reᵀ, −A_imᵀ, transposed by the caller; None on the packed path, where
        // launch_map packs their image with the others.
        t: Option<(&'a Tensor, Option<&'a Tensor>)>,
        p: &'a Tensor,
        q: &'a Tensor,
        dg: (&'a Tensor, &'a Tensor),
        gws: Option<(&'a Tensor, &'a Tensor)>,
        saved: Option<(&'a Tensor, &'a Tensor)>,
    },
}

/// `EMBER_GRADFEAT_MAP=general`: the general map kernel even where an `_sv` build applies (to compare
/// the two; NOTES.md, v4).
fn general_map_forced() -> bool {
    ember_core::knob("EMBER_GRADFEAT_MAP") == Some("general")
}

/// The map kernel's entry point: the `_sv` builds take only the spectral form with K and C multiples
/// of 8 (every copy 16-byte, no loads of G; a third of the general kernel's code, which overflowed the
/// instruction cache).
pub(super) fn map_entry(forward: bool, rot: bool, spectral_vec: bool) -> &'static str {
    match (forward, rot, spectral_vec) {
        (true, true, false) => "gs_fwd_rot",
        (true, false, false) => "gs_fwd_plain",
        (false, true, false) => "gs_map_rot",
        (false, false, false) => "gs_map_plain",
        (true, true, true) => "gs_fwd_rot_sv",
        (true, false, true) => "gs_fwd_plain_sv",
        (false, true, true) => "gs_map_rot_sv",
        (false, false, true) => "gs_map_plain_sv",
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_map(dev: &Arc<CudaDevice>, p: &Problem, input: &Input, weights: &Weights, outs: &MapOut, packed: bool, img: bool, defer: bool, pp: bool) -> Result<()> {
    let nch = chunks(p.c);
    let forward = matches!(outs, MapOut::Forward { .. });
    // Saved b: the image build's `_save` (forward) or `_saved` (backward) entries; the caller checked
    // saved_applies.
    let b_images = match outs {
        MapOut::Forward { save, .. } => *save,
        MapOut::Backward { saved, .. } => *saved,
    };
    // The packed-pp build only for the packed forward where its entries run (elsewhere the packed one).
    let pp = pp && packed && forward && pp_applies(dev, p) && b_images.is_none();
    let smem = if pp {
        pp_smem_bytes(nch)
    } else if b_images.is_some() && !forward {
        map_smem_bytes_saved(nch)
    } else {
        map_smem_bytes(nch)
    };
    let threads = if pp { PP_THREADS } else { THREADS };
    let (w_re0, w_im0, rot) = match *weights {
        Weights::Rotation { a_re, a_im } => (a_re, Some(a_im), true),
        Weights::Plain { a } => (a, None, false),
    };
    // The packed build takes its weights as images, all packed in one launch: stage 2's (A_re | A_im
    // per k-tile) in w_re, x's (below) and in the backward stage 3's (A_reᵀ | −A_imᵀ) in t_re.
    let mut jobs = Vec::new();
    if packed {
        let mut w_srcs = vec![(w_re0, false)];
        w_srcs.extend(w_im0.map(|w| (w, false)));
        jobs.push(PackJob { srcs: w_srcs, batches: 1, rows: p.c, cols: p.c, rpad: 128 * nch, trans: false });
        // x goes in transposed (xᵀ per mesh), so that every operand of the map kernel is K-major: as
        // k-tile images of xᵀ (C padded to the tile's rows).
        if let Input::Spectral { x, .. } = *input {
            jobs.push(PackJob { srcs: vec![(x, false)], batches: p.meshes(), rows: p.c, cols: p.k, rpad: 128 * nch, trans: true });
        }
        if matches!(outs, MapOut::Backward { t: None, .. }) {
            let mut t_srcs = vec![(w_re0, false)];
            t_srcs.extend(w_im0.map(|w| (w, true)));
            jobs.push(PackJob { srcs: t_srcs, batches: 1, rows: p.c, cols: p.c, rpad: 128 * nch, trans: true });
        }
    }
    let mut images = pack_all(dev, p, &jobs)?.into_iter();
    let w_packed = if packed { images.next() } else { None };
    let (w_re, w_im) = match &w_packed {
        Some(img) => (img, None),
        None => (w_re0, w_im0),
    };
    let (xt, grads, g_in) = match *input {
        Input::Spectral { x, grads_re, grads_im, .. } => {
            let xt = if packed { images.next().expect("x's image") } else { transpose(dev, p, x, p.meshes(), p.k, p.c, false)? };
            (Some(xt), Some((grads_re, grads_im)), None)
        }
        Input::Vertex { g_re, g_im } => (None, None, Some((g_re, g_im))),
    };
    let t_packed = images.next();
    let (table, ntiles) = row_tiles(p, if pp { 64 } else { 128 / nch })?;
    let mps = dev.info().multiprocessors.max(1) as usize;
    let grid = grid_u32("grads_re", if pp { pp_grid(p, ntiles as usize, mps) } else { map_grid(p, ntiles as usize, forward, mps) })?;
    let spectral_vec = spectral_vec(p);
    // The image build only where its `_sv` entries run (the only ones that write images).
    let img = img && packed && spectral_vec && !forward;
    // The defer build likewise only where its `_sv` entries run (elsewhere it is the packed one).
    let defer = defer && packed && spectral_vec;
    let (entry, options) = if pp {
        (if rot { "gs_fwd_rot_pp" } else { "gs_fwd_plain_pp" }, pp_options(p.dtype, nch))
    } else if b_images.is_some() {
        let entry = match (forward, rot) {
            (true, true) => "gs_fwd_rot_sv_save",
            (true, false) => "gs_fwd_plain_sv_save",
            (false, true) => "gs_map_rot_sv_saved",
            (false, false) => "gs_map_plain_sv_saved",
        };
        (entry, map_options(p.dtype, nch, true, true, false))
    } else {
        (map_entry(forward, rot, spectral_vec), map_options(p.dtype, nch, packed, img, defer))
    };
    let f = dev.function(&SOURCE, &options, entry)?;
    dev.set_max_dynamic_smem(&f, smem)?;
    let (grads_re, grads_im) = (ptr(grads.map(|g| g.0))?, ptr(grads.map(|g| g.1))?);
    let (g_re, g_im) = (ptr(g_in.map(|g| g.0))?, ptr(g_in.map(|g| g.1))?);
    let (xtp, wre, wim) = (ptr(xt.as_ref())?, w_re.cuda_ptr()?, ptr(w_im)?);
    let (out, tre, tim, dout, gws_re, gws_im, pp, qp, dgr, dgi) = match outs {
        MapOut::Forward { out, .. } => (out.cuda_ptr()?, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        MapOut::Backward { d_out, t, p: pw, q: qw, dg, gws, .. } => {
            let (t_re, t_im) = t.or(t_packed.as_ref().map(|i| (i, None))).expect("stage 3's weights");
            let (gr, gi) = match gws {
                Some((a, b)) => (a.cuda_ptr()?, b.cuda_ptr()?),
                None => (0, 0),
            };
            (0, t_re.cuda_ptr()?, ptr(t_im)?, d_out.cuda_ptr()?, gr, gi, pw.cuda_ptr()?, qw.cuda_ptr()?, dg.0.cuda_ptr()?, dg.1.cuda_ptr()?)
        }
    };
    let (tiles, nt) = (ptr(table.as_ref())?, ntiles as i64);
    let (vi, ki, ci) = (p.v as i64, p.k as i32, p.c as i32);
    let (spectral, vec_k, vec_c) = (p.spectral as i32, p.k.is_multiple_of(8) as i32, p.c.is_multiple_of(8) as i32);
    let (b_re, b_im) = match b_images {
        Some((r, i)) => (r.cuda_ptr()?, i.cuda_ptr()?),
        None => (0, 0),
    };
    let mut launch = dev.launch(&f, cfg_1d(grid, threads, smem as u32));
    launch = launch
        .arg(&grads_re)
        .arg(&grads_im)
        .arg(&xtp)
        .arg(&g_re)
        .arg(&g_im)
        .arg(&wre)
        .arg(&wim)
        .arg(&tre)
        .arg(&tim)
        .arg(&dout)
        .arg(&gws_re)
        .arg(&gws_im)
        .arg(&pp)
        .arg(&qp)
        .arg(&dgr)
        .arg(&dgi)
        .arg(&out)
        .arg(&tiles)
        .arg(&nt)
        .arg(&vi)
        .arg(&ki)
        .arg(&ci)
        .arg(&spectral)
        .arg(&vec_k)
        .arg(&vec_c);
    if b_images.is_some() {
        launch = launch.arg(&b_re).arg(&b_im);
    }
    launch.named(if forward { "gradfeat staged forward" } else { "gradfeat staged map" }).run()
}

/// out = tanh(g_re ⊙ b_re + g_im ⊙ b_im) by stages 1 and 2 of the map kernel.
/// `packed`: the map kernel's GS_PACK build on packed k-tile images of xᵀ and the weights; `defer`
/// (with `packed`, where [`spectral_vec`]): its GS_DEFER build (NOTES.md, v7); `pp` (with `packed`,
/// where [`pp_applies`]): the GS_PP build, one warpgroup per CTA and two CTAs per multiprocessor (v9).
pub fn forward(dev: &Arc<CudaDevice>, p: &Problem, input: &Input, weights: &Weights, packed: bool, defer: bool, pp: bool) -> Result<Tensor> {
    let out = Tensor::output(&[p.v, p.c], p.dtype, p.device)?;
    launch_map(dev, p, input, weights, &MapOut::Forward { out: &out, save: None }, packed, false, defer, pp)?;
    Ok(out)
}

/// Rows of the map kernel's tile images (GS_BM rows per row tile) and their padded channels.
fn image_shape(p: &Problem) -> (usize, usize) {
    let nch = chunks(p.c);
    let ntiles = cuda::row_tile_entries(p, 128 / nch).map_or(p.v.div_ceil(128 / nch), |t| t.len() / 3);
    (ntiles * (128 / nch), 128 * nch)
}

/// The training forward where [`saved_applies`]: the packed forward's out (the same bits), and b_re,
/// b_im as tile images for [`backward`]'s `saved` (NOTES.md, v13).
pub fn forward_save(dev: &Arc<CudaDevice>, p: &Problem, input: &Input, weights: &Weights) -> Result<(Tensor, Tensor, Tensor)> {
    let out = Tensor::output(&[p.v, p.c], p.dtype, p.device)?;
    let (rows, ldi) = image_shape(p);
    let (b_re, b_im) = (Tensor::output(&[rows, ldi], p.dtype, p.device)?, Tensor::output(&[rows, ldi], p.dtype, p.device)?);
    launch_map(dev, p, input, weights, &MapOut::Forward { out: &out, save: Some((&b_re, &b_im)) }, true, false, false, false)?;
    Ok((out, b_re, b_im))
}

/// `img` (with `packed`, where [`img_applies`]): g, P and Q as tile images and d_A by the image
/// reductions (NOTES.md, v6); `defer` (with `img`): the map kernel's image build with GS_DEFER (v7).
/// `saved`: b's tile images from [`forward_save`] of the same inputs, read instead of recomputing b
/// (the image path; the caller checked [`saved_applies`]). `factored` (on the image path): d_A
/// through x with d_x in one reduction, and no g images (v14).
#[allow(clippy::too_many_arguments)]
pub fn backward(dev: &Arc<CudaDevice>, p: &Problem, input: &Input, weights: &Weights, d_out: &Tensor, how: Reductions, packed: bool, img: bool, defer: bool, saved: Option<(&Tensor, &Tensor)>, factored: bool) -> Result<Grads> {
    let (v, c, k) = (p.v, p.c, p.k);
    let img = saved.is_some() || (img && packed && img_applies(dev, p));
    let factored = factored && img;
    let packed = packed || saved.is_some();
    let defer = defer && saved.is_none();
    // Stage 3's weights go in transposed, A_im negated: d_g's products then take the signs of b's
    // (see gs_map). Packed: one image, A_reᵀ | −A_imᵀ per k-tile, made by launch_map's pack launch.
    let (w_re, w_im, rot) = match *weights {
        Weights::Rotation { a_re, a_im } => (a_re, Some(a_im), true),
        Weights::Plain { a } => (a, None, false),
    };
    let t_plain = match (packed, w_im) {
        (true, _) => None,
        (false, Some(w)) => Some((transpose(dev, p, w_re, 1, c, c, false)?, Some(transpose(dev, p, w, 1, c, c, true)?))),
        (false, None) => Some((transpose(dev, p, w_re, 1, c, c, false)?, None)),
    };
    let grads = match *input {
        Input::Spectral { grads_re, grads_im, .. } => Some((grads_re, grads_im)),
        Input::Vertex { .. } => None,
    };
    let g_in = match *input {
        Input::Vertex { g_re, g_im } => Some((g_re, g_im)),
        Input::Spectral { .. } => None,
    };
    let vc = || Tensor::output(&[v, c], p.dtype, p.device);
    // Images: one GS_BM × Cpad block per row tile of the map kernel (rows past a mesh, channels past
    // C written as zeros by the kernel).
    let (img_rows, ldi) = image_shape(p);
    let ws = || if img { Tensor::output(&[img_rows * ldi], p.dtype, p.device) } else { vc() };
    // d_g: an image too where the image build runs (d_x's image reduction reads it; the spectral
    // form only, where d_g is not an output).
    let (pw, qw, dg_re, dg_im) = (ws()?, ws()?, ws()?, ws()?);
    let gws = if p.spectral && !factored { Some((ws()?, ws()?)) } else { None };
    let outs = MapOut::Backward { d_out, t: t_plain.as_ref().map(|(r, i)| (r, i.as_ref())), p: &pw, q: &qw, dg: (&dg_re, &dg_im), gws: gws.as_ref().map(|g| (&g.0, &g.1)), saved };
    launch_map(dev, p, input, weights, &outs, packed, img, img && defer, false)?;

    if factored {
        let Input::Spectral { x, grads_re, grads_im, .. } = *input else { unreachable!("the image path takes the spectral form") };
        let d_x = Tensor::output(&p.x_shape(), p.dtype, p.device)?;
        let weight_grads = if rot {
            let (d_a_re, d_a_im) = (Tensor::output(&[c, c], p.dtype, p.device)?, Tensor::output(&[c, c], p.dtype, p.device)?);
            reduce_dxa_img(dev, p, true, (grads_re, grads_im), (&dg_re, &dg_im), (&pw, &qw), x, &d_x, (&d_a_re, Some(&d_a_im)))?;
            WeightGrads::Rotation { d_a_re, d_a_im }
        } else {
            let d_a = Tensor::output(&[c, c], p.dtype, p.device)?;
            reduce_dxa_img(dev, p, false, (grads_re, grads_im), (&dg_re, &dg_im), (&pw, &qw), x, &d_x, (&d_a, None))?;
            WeightGrads::Plain { d_a }
        };
        return Ok(Grads { input: InputGrads::Spectral { d_x }, weights: weight_grads });
    }

    // d_A from P, Q and g, summed over every vertex of every mesh.
    let (gr, gi) = match (g_in, &gws) {
        (Some(g), _) => g,
        (None, Some((a, b))) => (a, b),
        _ => unreachable!("the spectral form has its g workspace"),
    };
    let cc = || Tensor::output(&[c, c], p.dtype, p.device);
    let weight_grads = if rot {
        let (d_a_re, d_a_im) = (cc()?, cc()?);
        if img {
            reduce_img(dev, p, true, (&pw, &qw), (gr, gi), img_rows, ldi, (&d_a_re, Some(&d_a_im)))?;
        } else {
            reduce(dev, p, how, true, (&pw, &qw), (gr, gi), c, c, false, (&d_a_re, Some(&d_a_im)))?;
        }
        WeightGrads::Rotation { d_a_re, d_a_im }
    } else {
        let d_a = cc()?;
        if img {
            reduce_img(dev, p, false, (&pw, &qw), (gr, gi), img_rows, ldi, (&d_a, None))?;
        } else {
            reduce(dev, p, how, false, (&pw, &qw), (gr, gi), c, c, false, (&d_a, None))?;
        }
        WeightGrads::Plain { d_a }
    };
    let input_grads = match grads {
        Some((grads_re, grads_im)) => {
            let d_x = Tensor::output(&p.x_shape(), p.dtype, p.device)?;
            if img {
                reduce_dx_img(dev, p, (grads_re, grads_im), (&dg_re, &dg_im), &d_x)?;
            } else {
                reduce(dev, p, how, false, (grads_re, grads_im), (&dg_re, &dg_im), k, c, true, (&d_x, None))?;
            }
            InputGrads::Spectral { d_x }
        }
        None => InputGrads::Vertex { d_g_re: dg_re, d_g_im: dg_im },
    };
    Ok(Grads { input: input_grads, weights: weight_grads })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_hopper() {
        // sm_90's opt-in limit per block; the worked numbers of NOTES.md (v3).
        let limit = 232_448;
        assert_eq!(map_smem_bytes(2), 229_376);
        assert_eq!(map_smem_bytes(1), 196_608);
        // packed-pp: two CTAs per multiprocessor (228 KB, 1 KB of it reserved per CTA).
        assert_eq!((pp_smem_bytes(2), pp_smem_bytes(1)), (114_688, 81_920));
        assert!(2 * (pp_smem_bytes(2) + 1024) <= 233_472);
        assert_eq!((REDUCE_SMEM, DX_SMEM), (196_608, 196_608));
        assert!(map_smem_bytes(2) <= limit && REDUCE_SMEM <= limit && DX_SMEM <= limit);
        assert_eq!((chunks(1), chunks(128), chunks(129), chunks(256)), (1, 1, 2, 2));
    }

    #[test]
    fn every_launch_option_is_listed_for_the_compile_test() {
        let builds = all_builds();
        for dtype in [DType::F16, DType::BF16] {
            for c in [1, 128, 129, 256] {
                for (packed, img, defer) in MAP_BUILDS {
                    assert!(builds.iter().any(|b| b.options == map_options(dtype, chunks(c), packed, img, defer)), "{dtype} C={c} packed={packed} img={img} defer={defer}");
                }
            }
            assert!(builds.iter().any(|b| b.options == reduce_options(dtype)));
            for c in [1, 128, 129, 256] {
                assert!(builds.iter().any(|b| b.options == pp_options(dtype, chunks(c))), "{dtype} C={c} pp");
            }
        }
        assert_eq!(builds.len(), 26);
    }

    #[test]
    fn image_splits_are_whole_k_tiles() {
        for rows in [64, 128, 192, 4096, 131_136, 524_288, 2_097_152] {
            for tiles in [1, 4] {
                let plan = img_plan(rows, tiles, 4 * 132);
                assert_eq!(plan.rows_per_split % 32, 0, "rows {rows} tiles {tiles}");
                assert!(plan.nsplits * plan.rows_per_split >= rows && (plan.nsplits - 1) * plan.rows_per_split < rows, "rows {rows} tiles {tiles}: {} × {}", plan.nsplits, plan.rows_per_split);
                assert!(plan.splits.is_empty() && plan.groups.is_empty());
            }
        }
    }
}
