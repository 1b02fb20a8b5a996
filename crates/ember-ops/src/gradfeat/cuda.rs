//! CUDA launch code for `gradfeat.cu`: tile heights and shared memory of the fused kernels, mesh
//! tiles for batches, split-K plans for the reductions over vertices.

use super::{Grads, Input, InputGrads, Problem, WeightGrads, Weights};
use crate::KernelBuild;
use ember_core::cuda::{cfg_1d, CudaDevice, KernelSource, LaunchConfig};
use ember_core::{DType, Device, Error, Result, Tensor};
use std::sync::Arc;

pub const SOURCE: KernelSource = KernelSource::new("gradfeat", include_str!("gradfeat.cu"));

const FUSED_THREADS: u32 = 256;
const SPLITK_THREADS: u32 = 128;
/// Fewest rows one split of a reduction sums (keeps tiny problems from many near-empty splits).
const MIN_ROWS_PER_SPLIT: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fwd = 0,
    Bwd = 1,
    SplitK = 2,
}

fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F64 => unreachable!("validated: no f64 on CUDA"),
    }
}

/// One tile shape of a fused kernel: `bm` vertices per CTA, `nt` n8 tiles per warp (warp blocks of
/// 32×8·nt per plane), `stages` deep stage ring; `wgmma`: the forward's channel map on Hopper's
/// warpgroup MMA (sm_90a only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tile {
    bm: usize,
    nt: usize,
    stages: usize,
    wgmma: bool,
}

const fn tile(bm: usize, nt: usize, stages: usize) -> Tile {
    Tile { bm, nt, stages, wgmma: false }
}

/// The sm_90a forward: 128 rows, its g stage with 32×64 warp blocks.
const WGMMA_FWD: Tile = Tile { bm: 128, nt: 8, stages: 3, wgmma: true };

fn options(dtype: DType, kind: Kind, t: Tile) -> Vec<String> {
    let mut v = vec![
        format!("-DGF_DTYPE={}", dtype_code(dtype)),
        format!("-DGF_KIND={}", kind as u32),
        format!("-DGF_BM={}", t.bm),
        format!("-DGF_NT={}", t.nt),
        format!("-DGF_STAGES={}", t.stages),
    ];
    if t.wgmma {
        v.push("-DGF_WGMMA=1".into());
    }
    if dtype == DType::F32 && f32_bf16x3() {
        v.push("-DGF_F32_BF16X3=1".into());
    }
    v
}

/// How f32 inputs reach the tensor cores (`crate::f32_products`): three bf16 m16n8k16 products per 16
/// deep (the default) or three TF32 m16n8k8 passes per 8 deep (`EMBER_GRADFEAT_F32=tf32x3`, the path
/// before: ~1e-7 relative instead of ~5e-6, twice the tensor-core time).
pub fn f32_bf16x3() -> bool {
    crate::f32_products::bf16x3("EMBER_GRADFEAT_F32")
}

/// ‖out − ref‖/‖ref‖ that the CUDA path is held to for `dtype` (3e-4 for f32 on the bf16 products).
pub fn tolerance(dtype: DType) -> f64 {
    crate::f32_products::cuda_tolerance(dtype, f32_bf16x3())
}

/// Tile families of the 16-bit fused kernels, chosen by `EMBER_GRADFEAT_TILES`:
/// - "wgmma" (the default): on sm_90a the forward's channel map on wgmma (its g stage and other
///   GPUs' forward as "wide"); the backward as "narrow";
/// - "wide": mma.sync with 32×64 warp blocks per plane (5.3 products per 16-byte fragment row
///   read from shared memory, half the barriers per product of "narrow"), forward and backward;
/// - "narrow": mma.sync with 32×32 warp blocks, forward and backward: the first version.
///
/// Every family is tested on the GPU; NOTES.md gives their measured times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family16 {
    Wgmma,
    Wide,
    Narrow,
}

fn family16() -> Family16 {
    match ember_core::knob("EMBER_GRADFEAT_TILES") {
        Some("narrow") => Family16::Narrow,
        Some("wide") => Family16::Wide,
        _ => Family16::Wgmma,
    }
}

/// How the CUDA backward runs, chosen by `EMBER_GRADFEAT_BWD` (every variant is tested on the GPU;
/// NOTES.md gives their measured times):
/// - "staged-mma": on sm_90a with 16-bit inputs and C ≤ 256, the staged map kernel of `staged.cu`
///   (wgmma) with the mma.sync split-K reductions of the fused backward (elsewhere the fused
///   backward); the default of v4;
/// - "fused": one fused mma.sync kernel (g, b, ds, P, Q, d_g) and split-K reductions on mma.sync;
/// - "staged": the staged map kernel and the reductions of `staged.cu` on wgmma;
/// - "packed": as "staged-mma", with the map kernel's packed build (k-tile images of xᵀ and the
///   weights, descriptors advanced by constants); the default of v5, and of v6 where "packed-img"
///   does not apply;
/// - "packed-img" (the default since v6; measured 1.16–1.21x faster than "packed" at the issue's
///   sizes, NOTES.md v6): as "packed", the map kernel writing g, P, Q and (v11) d_g as tile images,
///   d_A and d_x on the wgmma image reductions (only where the packed `_sv` map kernel runs: the
///   spectral form, K and C multiples of 8; elsewhere it runs as "packed");
/// - "packed-img-defer": as "packed-img" with the map kernel's deferred-store build (NOTES.md v7);
///   since v11 d_g leaves from registers, so only the forward of that build defers a store and the
///   backward equals "packed-img"'s.
///
/// The image variants take d_A one of two ways (NOTES.md v14): from the images of g, P and Q (v6), or
/// factored through x (d_A = Rᵀ·x, R = gradsᵀ·[P Q] summed with d_x in one reduction, no g images).
/// "packed-img" and "packed-img-defer" factor where [`super::staged::factored_pays`];
/// "packed-img-gimages" and "packed-img-factored" always take the one they name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwdVariant {
    Fused,
    Staged,
    StagedMma,
    Packed,
    PackedImg,
    PackedImgDefer,
    PackedImgGImages,
    PackedImgFactored,
}

impl BwdVariant {
    pub const ALL: [BwdVariant; 8] = [
        BwdVariant::Fused,
        BwdVariant::Staged,
        BwdVariant::StagedMma,
        BwdVariant::Packed,
        BwdVariant::PackedImg,
        BwdVariant::PackedImgDefer,
        BwdVariant::PackedImgGImages,
        BwdVariant::PackedImgFactored,
    ];

    /// Whether the variant runs the image build of the map kernel (where it applies).
    pub fn image(self) -> bool {
        matches!(self, BwdVariant::PackedImg | BwdVariant::PackedImgDefer | BwdVariant::PackedImgGImages | BwdVariant::PackedImgFactored)
    }

    /// Whether the variant factors d_A through x for `p` (on the image path).
    pub fn factors(self, p: &Problem) -> bool {
        match self {
            BwdVariant::PackedImgFactored => true,
            BwdVariant::PackedImg | BwdVariant::PackedImgDefer => super::staged::factored_pays(p),
            _ => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BwdVariant::Fused => "fused",
            BwdVariant::Staged => "staged",
            BwdVariant::StagedMma => "staged-mma",
            BwdVariant::Packed => "packed",
            BwdVariant::PackedImg => "packed-img",
            BwdVariant::PackedImgDefer => "packed-img-defer",
            BwdVariant::PackedImgGImages => "packed-img-gimages",
            BwdVariant::PackedImgFactored => "packed-img-factored",
        }
    }

    /// `EMBER_GRADFEAT_BWD`, "packed-img" when unset or unknown (it runs as "packed" where the
    /// image build does not apply).
    pub fn from_env() -> BwdVariant {
        let v = ember_core::knob("EMBER_GRADFEAT_BWD").unwrap_or_default();
        BwdVariant::ALL.into_iter().find(|b| b.name() == v).unwrap_or(BwdVariant::PackedImg)
    }

    /// The variant that runs when `self` is asked for among `offered` (those that run a problem as
    /// themselves): itself if offered, else the image variants fall back to "packed" (what the
    /// launch code runs then), and anything else to "fused".
    pub fn effective(self, offered: &[BwdVariant]) -> BwdVariant {
        if offered.contains(&self) {
            self
        } else if self.image() && offered.contains(&BwdVariant::Packed) {
            BwdVariant::Packed
        } else {
            BwdVariant::Fused
        }
    }
}

/// How the CUDA forward runs, chosen by `EMBER_GRADFEAT_FWD` (both tested on the GPU; NOTES.md):
/// - "fused": the fused forward kernel of `gradfeat.cu` (its tiles chosen by
///   `EMBER_GRADFEAT_TILES`);
/// - "staged": on sm_90a with 16-bit inputs and C ≤ 256, stages 1 and 2 of the staged map kernel,
///   every product on wgmma (elsewhere the fused forward);
/// - "packed" (the default; measured fastest at every issue size, NOTES.md v5): as "staged", with the
///   map kernel's packed build (elsewhere the fused forward);
/// - "fused-sv": the fused forward's `_sv` entries on wgmma (the spectral form with K and C
///   multiples of 8 as compile-time facts; NOTES.md v5), elsewhere as "fused";
/// - "packed-defer": as "packed", the map kernel writing each row tile's out while the next row
///   tile's first products run (NOTES.md v7; the spectral form with K and C multiples of 8, where
///   the packed `_sv` entries run; elsewhere as "packed");
/// - "packed-pp": as "packed", one warpgroup per CTA and two CTAs per multiprocessor, so that one
///   CTA's epilogues run under the other's products (NOTES.md v9; where the packed `_sv` entries
///   run and K ≥ 8; elsewhere as "packed"). The same bits as "packed".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwdVariant {
    Fused,
    Staged,
    Packed,
    FusedSv,
    PackedDefer,
    PackedPp,
}

impl FwdVariant {
    pub const ALL: [FwdVariant; 6] = [FwdVariant::Fused, FwdVariant::Staged, FwdVariant::Packed, FwdVariant::FusedSv, FwdVariant::PackedDefer, FwdVariant::PackedPp];

    pub fn name(self) -> &'static str {
        match self {
            FwdVariant::Fused => "fused",
            FwdVariant::Staged => "staged",
            FwdVariant::Packed => "packed",
            FwdVariant::FusedSv => "fused-sv",
            FwdVariant::PackedDefer => "packed-defer",
            FwdVariant::PackedPp => "packed-pp",
        }
    }

    /// `EMBER_GRADFEAT_FWD`, "packed" when unset or unknown.
    pub fn from_env() -> FwdVariant {
        let v = ember_core::knob("EMBER_GRADFEAT_FWD").unwrap_or_default();
        FwdVariant::ALL.into_iter().find(|f| f.name() == v).unwrap_or(FwdVariant::Packed)
    }
}

/// The forward variants that run `p` as themselves.
pub fn fwd_variants(p: &Problem) -> Result<Vec<FwdVariant>> {
    let Device::Cuda(i) = p.device else { return Ok(vec![FwdVariant::Fused]) };
    let dev = CudaDevice::get(i)?;
    if !super::staged::applies(&dev, p) {
        return Ok(vec![FwdVariant::Fused]);
    }
    let sv = super::staged::spectral_vec(p);
    Ok(FwdVariant::ALL
        .into_iter()
        .filter(|f| match f {
            FwdVariant::FusedSv => fused_sv_applies(p),
            FwdVariant::PackedDefer => sv,
            FwdVariant::PackedPp => super::staged::pp_applies(&dev, p),
            _ => true,
        })
        .collect())
}

/// Whether `forward_train` keeps b for `p` (CUDA, where the staged kernels' saved path applies).
pub fn saves_b(p: &Problem) -> Result<bool> {
    let Device::Cuda(i) = p.device else { return Ok(false) };
    let dev = CudaDevice::get(i)?;
    Ok(super::staged::saved_applies(&dev, p))
}

/// Whether the fused forward's `_sv` entries take `p`: the spectral form, K and C multiples of 8 (on
/// sm_90a, where the forward runs on wgmma).
fn fused_sv_applies(p: &Problem) -> bool {
    p.spectral && p.k.is_multiple_of(8) && p.c.is_multiple_of(8)
}

/// The backward variants that run `p` as themselves (the staged ones need sm_90a, 16-bit inputs and
/// C ≤ 256; elsewhere they would run the fused backward again).
pub fn bwd_variants(p: &Problem) -> Result<Vec<BwdVariant>> {
    let Device::Cuda(i) = p.device else { return Ok(vec![BwdVariant::Fused]) };
    let dev = CudaDevice::get(i)?;
    if !super::staged::applies(&dev, p) {
        return Ok(vec![BwdVariant::Fused]);
    }
    let img = super::staged::img_applies(&dev, p);
    Ok(BwdVariant::ALL.into_iter().filter(|b| !b.image() || img).collect())
}

/// Tile shapes of a fused kernel, preferred first (the launch takes the first that fits in shared
/// memory; the later ones serve larger C). The backward keeps twice the tiles of the forward on chip;
/// f32 tiles take twice the bytes.
fn fused_tiles(dtype: DType, kind: Kind, family: Family16) -> &'static [Tile] {
    const FWD16_WGMMA: [Tile; 3] = [WGMMA_FWD, tile(128, 8, 3), tile(64, 4, 3)];
    const FWD16_WIDE: [Tile; 2] = [tile(128, 8, 3), tile(64, 4, 3)];
    const FWD16_NARROW: [Tile; 2] = [tile(128, 4, 3), tile(64, 4, 3)];
    const BWD16_WIDE: [Tile; 2] = [tile(64, 8, 2), tile(32, 4, 3)];
    const BWD16_NARROW: [Tile; 2] = [tile(64, 4, 3), tile(32, 4, 3)];
    const FWD32: [Tile; 2] = [tile(64, 4, 3), tile(32, 4, 3)];
    const BWD32: [Tile; 2] = [tile(32, 4, 3), tile(16, 4, 3)];
    match (dtype.size(), kind, family) {
        (2, Kind::Fwd, Family16::Wgmma) => &FWD16_WGMMA,
        (2, Kind::Fwd, Family16::Wide) => &FWD16_WIDE,
        (2, Kind::Fwd, Family16::Narrow) => &FWD16_NARROW,
        // The wide backward measured slower (NOTES.md, v2): the default keeps the narrow one.
        (2, _, Family16::Wide) => &BWD16_WIDE,
        (2, _, _) => &BWD16_NARROW,
        (_, Kind::Fwd, _) => &FWD32,
        (_, _, _) => &BWD32,
    }
}

fn warps_m(bm: usize) -> usize {
    match bm {
        128 => 4,
        64 | 32 => 2,
        _ => 1,
    }
}

/// Bytes of dynamic shared memory of a fused kernel: the g tiles (and P, Q in the backward), rows of
/// `cpad` channels plus 16 bytes of padding, then the stage ring. Mirrors `gf_fused` in the source.
fn fused_smem_bytes(es: usize, t: Tile, rot: bool, bwd: bool, cpad: usize) -> usize {
    if t.wgmma {
        // g tiles without padding (canonical layout); the ring holds the g stage's tiles or a
        // 128×64 weight tile per plane. Mirrors `gf_fused_wg`.
        let s1 = 2 * 128 * (32 * 2 + 16) + 32 * (128 * 2 + 16);
        let s2 = if rot { 2 } else { 1 } * 128 * 64 * 2;
        return 2 * 128 * cpad * 2 + t.stages * s1.max(s2);
    }
    let bk = if es == 4 { 16 } else { 32 };
    let bn = 8 * t.nt * (8 / warps_m(t.bm));
    let (p_nt, p_t) = (bk * es + 16, bn * es + if es == 4 { 32 } else { 16 });
    let w = if rot { 2 } else { 1 };
    let s1 = 2 * t.bm * p_nt + bk * p_t;
    let s2 = w * bn * p_nt;
    let s3 = if bwd { w * bk * p_t } else { 0 };
    let stage = s1.max(s2).max(s3).div_ceil(16) * 16;
    let planes = if bwd { 4 } else { 2 };
    planes * t.bm * (cpad * es + 16) + t.stages * stage
}

const SPLITK: Tile = tile(0, 4, 3);

fn splitk_smem_bytes(es: usize) -> usize {
    let bk = if es == 4 { 16 } else { 32 };
    SPLITK.stages * 4 * bk * (64 * es + if es == 4 { 32 } else { 16 })
}

/// Every specialisation the launch code can request.
pub fn all_builds() -> Vec<KernelBuild> {
    let mut v: Vec<KernelBuild> = Vec::new();
    for dtype in DType::ACTIVATIONS {
        for kind in [Kind::Fwd, Kind::Bwd] {
            for family in [Family16::Wgmma, Family16::Wide, Family16::Narrow] {
                for &t in fused_tiles(dtype, kind, family) {
                    let options = options(dtype, kind, t);
                    if !v.iter().any(|b| b.options == options) {
                        v.push(KernelBuild { source: SOURCE, options });
                    }
                }
            }
        }
        v.push(KernelBuild { source: SOURCE, options: options(dtype, Kind::SplitK, SPLITK) });
    }
    // The f32 builds of the other product split too (`EMBER_GRADFEAT_F32`).
    let other_split: Vec<KernelBuild> = v
        .iter()
        .filter(|b| b.options[0] == format!("-DGF_DTYPE={}", dtype_code(DType::F32)))
        .map(|b| {
            let mut options = b.options.clone();
            match options.iter().position(|o| o == "-DGF_F32_BF16X3=1") {
                Some(i) => {
                    options.remove(i);
                }
                None => options.push("-DGF_F32_BF16X3=1".into()),
            }
            KernelBuild { source: SOURCE, options }
        })
        .collect();
    v.extend(other_split);
    v
}

/// The tile shape for `p` on `dev`, and its shared memory.
fn pick_tile(dev: &CudaDevice, p: &Problem, kind: Kind) -> Result<(Tile, usize)> {
    let cpad = p.c.div_ceil(64) * 64;
    let limit = dev.info().shared_memory_per_block_optin.max(0) as usize;
    let tiles = fused_tiles(p.dtype, kind, family16());
    for &t in tiles {
        if t.wgmma && dev.info().arch != "sm_90a" {
            continue;
        }
        let bytes = fused_smem_bytes(p.dtype.size(), t, p.rotation, kind == Kind::Bwd, cpad);
        if bytes <= limit {
            return Ok((t, bytes));
        }
    }
    let last = *tiles.last().unwrap();
    let smallest = fused_smem_bytes(p.dtype.size(), last, p.rotation, kind == Kind::Bwd, cpad);
    Err(Error::Unsupported(format!(
        "C = {} with {} on {}: the fused {} kernel keeps {} rows of all C channels on chip, {smallest} bytes of shared memory where the device allows {limit}",
        p.c,
        p.dtype,
        dev.info().name,
        if kind == Kind::Bwd { "backward" } else { "forward" },
        last.bm
    )))
}

/// The row tiles of a kernel that owns `bm` rows per tile, and their count: batches get one tile per
/// `bm` rows of each mesh (a table of (first row, end of the mesh's rows, mesh) per tile), so no tile
/// straddles two meshes.
pub(super) fn row_tiles(p: &Problem, bm: usize) -> Result<(Option<Tensor>, u32)> {
    let entries = row_tile_entries(p, bm);
    let blocks = match &entries {
        Some(t) => t.len() / 3,
        None => p.v.div_ceil(bm),
    };
    let table = match entries {
        Some(t) => Some(device_table(&t, p.device)?),
        None => None,
    };
    Ok((table, grid_u32("grads_re", blocks)?))
}

/// The table of `row_tiles`, on the host (None for one mesh).
pub(super) fn row_tile_entries(p: &Problem, bm: usize) -> Option<Vec<i64>> {
    if !(p.spectral && p.meshes() > 1) {
        return None;
    }
    let mut t = Vec::new();
    for (m, w) in p.offsets.windows(2).enumerate() {
        for r in (w[0]..w[1]).step_by(bm) {
            t.extend([r as i64, w[1] as i64, m as i64]);
        }
    }
    Some(t)
}

/// A small i64 table on the device. ember tensors hold floating-point values, so the table travels
/// as the raw words of an f32 tensor (copied, never converted); the kernels read them as i64.
pub(super) fn device_table(values: &[i64], device: Device) -> Result<Tensor> {
    let words: Vec<f32> = values
        .iter()
        .flat_map(|&v| {
            let u = v as u64;
            [f32::from_bits(u as u32), f32::from_bits((u >> 32) as u32)]
        })
        .collect();
    let n = words.len();
    Tensor::from_vec(words, &[n])?.to_device(device)
}

pub(super) fn grid_u32(arg: &str, n: usize) -> Result<u32> {
    u32::try_from(n).ok().filter(|&g| g <= i32::MAX as u32 && g > 0).ok_or_else(|| Error::TooLarge { arg: arg.into(), what: format!("{n} blocks exceed one launch's grid") })
}

pub(super) fn ptr(t: Option<&Tensor>) -> Result<u64> {
    t.map_or(Ok(0), |t| t.cuda_ptr())
}

/// The backward's extra tensors.
struct BwdBuffers<'a> {
    d_out: &'a Tensor,
    gws: Option<(&'a Tensor, &'a Tensor)>,
    db: (&'a Tensor, &'a Tensor),
    dg: (&'a Tensor, &'a Tensor),
}

/// `sv`: the `_sv` entries where they apply (the wgmma forward, `fused_sv_applies`).
fn launch_fused(dev: &Arc<CudaDevice>, p: &Problem, input: &Input, weights: &Weights, out: Option<&Tensor>, bwd: Option<&BwdBuffers>, sv: bool) -> Result<()> {
    let kind = if bwd.is_some() { Kind::Bwd } else { Kind::Fwd };
    let (t, smem) = pick_tile(dev, p, kind)?;
    let sv = sv && t.wgmma && kind == Kind::Fwd && fused_sv_applies(p);
    let vec = 16 / p.dtype.size();
    let (table, grid) = row_tiles(p, t.bm)?;
    let (x, grads_re, grads_im, g_re, g_im) = match *input {
        Input::Spectral { x, grads_re, grads_im, .. } => (ptr(Some(x))?, ptr(Some(grads_re))?, ptr(Some(grads_im))?, 0, 0),
        Input::Vertex { g_re, g_im } => (0, 0, 0, ptr(Some(g_re))?, ptr(Some(g_im))?),
    };
    let (w_re, w_im, entry) = match *weights {
        Weights::Rotation { a_re, a_im } => (ptr(Some(a_re))?, ptr(Some(a_im))?, if sv { "gf_fused_rot_sv" } else { "gf_fused_rot" }),
        Weights::Plain { a } => (ptr(Some(a))?, 0, if sv { "gf_fused_plain_sv" } else { "gf_fused_plain" }),
    };
    let out = ptr(out)?;
    let (d_out, gws_re, gws_im, db_re, db_im, dg_re, dg_im) = match bwd {
        Some(b) => (
            ptr(Some(b.d_out))?,
            ptr(b.gws.map(|g| g.0))?,
            ptr(b.gws.map(|g| g.1))?,
            ptr(Some(b.db.0))?,
            ptr(Some(b.db.1))?,
            ptr(Some(b.dg.0))?,
            ptr(Some(b.dg.1))?,
        ),
        None => (0, 0, 0, 0, 0, 0, 0),
    };
    let tiles = ptr(table.as_ref())?;
    let (v, k, c, cpad) = (p.v as i64, p.k as i32, p.c as i32, (p.c.div_ceil(64) * 64) as i32);
    let (spectral, vec_k, vec_c) = (p.spectral as i32, p.k.is_multiple_of(vec) as i32, p.c.is_multiple_of(vec) as i32);
    let f = dev.function(&SOURCE, &options(p.dtype, kind, t), entry)?;
    dev.set_max_dynamic_smem(&f, smem)?;
    dev.launch(&f, cfg_1d(grid, FUSED_THREADS, smem as u32))
        .arg(&grads_re)
        .arg(&grads_im)
        .arg(&x)
        .arg(&g_re)
        .arg(&g_im)
        .arg(&w_re)
        .arg(&w_im)
        .arg(&out)
        .arg(&d_out)
        .arg(&gws_re)
        .arg(&gws_im)
        .arg(&db_re)
        .arg(&db_im)
        .arg(&dg_re)
        .arg(&dg_im)
        .arg(&tiles)
        .arg(&v)
        .arg(&k)
        .arg(&c)
        .arg(&cpad)
        .arg(&spectral)
        .arg(&vec_k)
        .arg(&vec_c)
        .named(if kind == Kind::Bwd { "gradfeat fused backward" } else { "gradfeat fused forward" })
        .run()
}

pub fn forward(p: &Problem, input: &Input, weights: &Weights, variant: FwdVariant) -> Result<Tensor> {
    let dev = super::first_tensor(input).1.cuda_device()?.clone();
    if matches!(variant, FwdVariant::Staged | FwdVariant::Packed | FwdVariant::PackedDefer | FwdVariant::PackedPp) && super::staged::applies(&dev, p) {
        let (defer, pp) = (variant == FwdVariant::PackedDefer, variant == FwdVariant::PackedPp);
        return super::staged::forward(&dev, p, input, weights, variant == FwdVariant::Packed || defer || pp, defer, pp);
    }
    // Check the tile fits before allocating anything.
    pick_tile(&dev, p, Kind::Fwd)?;
    let out = Tensor::output(&[p.v, p.c], p.dtype, p.device)?;
    launch_fused(&dev, p, input, weights, Some(&out), None, variant == FwdVariant::FusedSv)?;
    Ok(out)
}

/// A reduction over vertices: rows of each group (all rows, or one mesh's) cut into splits.
pub(super) struct SplitPlan {
    /// (first row, end row) per split, when the splits are not uniform (else empty).
    pub splits: Vec<i64>,
    /// (first split, end split) per group, when there are several groups (else empty).
    pub groups: Vec<i64>,
    pub nsplits: usize,
    pub rows_per_split: usize,
}

impl SplitPlan {
    /// The split and group tables on `device` (None where empty).
    pub fn device_tables(&self, device: Device) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let t = |v: &[i64]| if v.is_empty() { Ok(None) } else { device_table(v, device).map(Some) };
        Ok((t(&self.splits)?, t(&self.groups)?))
    }
}

/// CTAs of the mma.sync reductions: about eight waves of three CTAs per multiprocessor, so the last,
/// partial wave costs little.
pub(super) fn splitk_ctas(dev: &CudaDevice) -> usize {
    24 * dev.info().multiprocessors.max(1) as usize
}

/// Rows per split for about `ctas` CTAs over the output tiles.
fn rows_per_split(rows: usize, tiles: usize, ctas: usize) -> usize {
    rows.div_ceil(ctas.div_ceil(tiles).max(1)).max(MIN_ROWS_PER_SPLIT)
}

pub(super) fn uniform_plan(rows: usize, tiles: usize, ctas: usize) -> SplitPlan {
    let per = rows_per_split(rows, tiles, ctas);
    SplitPlan { splits: vec![], groups: vec![], nsplits: rows.div_ceil(per), rows_per_split: per }
}

pub(super) fn mesh_plan(p: &Problem, tiles: usize, ctas: usize) -> SplitPlan {
    if p.meshes() == 1 {
        return uniform_plan(p.v, tiles, ctas);
    }
    let per = rows_per_split(p.v, tiles, ctas);
    let (mut splits, mut groups) = (Vec::new(), Vec::new());
    for w in p.offsets.windows(2) {
        let first = splits.len() / 2;
        for r in (w[0]..w[1]).step_by(per) {
            splits.extend([r as i64, (r + per).min(w[1]) as i64]);
        }
        groups.extend([first as i64, (splits.len() / 2) as i64]);
    }
    let nsplits = splits.len() / 2;
    // A batch of empty meshes still needs one (empty) split slice to launch over.
    if nsplits == 0 {
        splits.extend([0, 0]);
    }
    SplitPlan { splits, groups, nsplits: nsplits.max(1), rows_per_split: per }
}

/// out[g] = Σ over the rows of group g of a_reᵀ·b_re ⊕ a_imᵀ·b_im (see gf_splitk), for an (m × n)
/// result per group, through an f32 workspace summed in split order.
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_rows(dev: &Arc<CudaDevice>, p: &Problem, rot: bool, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor), m: usize, n: usize, plan: &SplitPlan, out: (&Tensor, Option<&Tensor>), ngroups: usize) -> Result<()> {
    let es = p.dtype.size();
    let vec = 16 / es;
    let planes = if rot { 2 } else { 1 };
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    let ws = Tensor::output(&[plan.nsplits * planes * m * n], DType::F32, p.device)?;
    let opts = options(p.dtype, Kind::SplitK, SPLITK);
    let f = dev.function(&SOURCE, &opts, if rot { "gf_splitk_rot" } else { "gf_splitk_sum" })?;
    let smem = splitk_smem_bytes(es);
    dev.set_max_dynamic_smem(&f, smem)?;
    let blocks = plan.nsplits.checked_mul(tiles).ok_or_else(|| Error::TooLarge { arg: "rows".into(), what: "split count overflows".into() })?;
    let cfg = LaunchConfig { grid_dim: (grid_u32("rows", blocks)?, 1, 1), block_dim: (SPLITK_THREADS, 1, 1), shared_mem_bytes: smem as u32 };
    let (table, groups) = plan.device_tables(p.device)?;
    let (a_re, a_im, b_re, b_im, wsp, tablep) = (a.0.cuda_ptr()?, a.1.cuda_ptr()?, b.0.cuda_ptr()?, b.1.cuda_ptr()?, ws.cuda_ptr()?, ptr(table.as_ref())?);
    let (r, mi, ni, per) = (p.v as i64, m as i32, n as i32, plan.rows_per_split as i64);
    let (vec_m, vec_n) = (m.is_multiple_of(vec) as i32, n.is_multiple_of(vec) as i32);
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
        .named("gradfeat split-K reduction")
        .run()?;
    sum_splits(dev, p, &ws, planes, m * n, plan.nsplits, groups.as_ref(), out, ngroups)
}

/// out_p[g] = Σ over the splits of group g, in split order, of the f32 slices ws[split][p] (m·n
/// elements each), rounded to the op's dtype.
#[allow(clippy::too_many_arguments)]
pub(super) fn sum_splits(dev: &Arc<CudaDevice>, p: &Problem, ws: &Tensor, planes: usize, elems: usize, nsplits: usize, groups: Option<&Tensor>, out: (&Tensor, Option<&Tensor>), ngroups: usize) -> Result<()> {
    let opts = options(p.dtype, Kind::SplitK, SPLITK);
    let wsp = ws.cuda_ptr()?;
    let f = dev.function(&SOURCE, &opts, "gf_reduce")?;
    let threads = ngroups * planes * elems;
    let (o0, o1, groups) = (out.0.cuda_ptr()?, ptr(out.1)?, ptr(groups)?);
    let (ng, pl, el, ns) = (ngroups as i32, planes as i32, elems as i64, nsplits as i64);
    dev.launch(&f, cfg_1d(dev.grid_for(threads, 256), 256, 0))
        .arg(&wsp)
        .arg(&o0)
        .arg(&o1)
        .arg(&groups)
        .arg(&ng)
        .arg(&pl)
        .arg(&el)
        .arg(&ns)
        .named("gradfeat split-K sum")
        .run()
}

pub fn backward(p: &Problem, input: &Input, weights: &Weights, d_out: &Tensor, variant: BwdVariant) -> Result<Grads> {
    let dev = d_out.cuda_device()?.clone();
    if variant != BwdVariant::Fused && super::staged::applies(&dev, p) {
        let reductions = if variant == BwdVariant::Staged { super::staged::Reductions::Wgmma } else { super::staged::Reductions::MmaSync };
        let (img, defer) = (variant.image(), variant == BwdVariant::PackedImgDefer);
        let packed = variant == BwdVariant::Packed || img;
        return super::staged::backward(&dev, p, input, weights, d_out, reductions, packed, img, defer, None, variant.factors(p));
    }
    pick_tile(&dev, p, Kind::Bwd)?;
    let (v, c) = (p.v, p.c);
    let vc = || Tensor::output(&[v, c], p.dtype, p.device);
    let (db_re, db_im, dg_re, dg_im) = (vc()?, vc()?, vc()?, vc()?);
    let gws = if p.spectral { Some((vc()?, vc()?)) } else { None };
    let bufs = BwdBuffers { d_out, gws: gws.as_ref().map(|g| (&g.0, &g.1)), db: (&db_re, &db_im), dg: (&dg_re, &dg_im) };
    launch_fused(&dev, p, input, weights, None, Some(&bufs), false)?;

    // d_A from P, Q and g, summed over every vertex of every mesh.
    let (g_re, g_im) = match (*input, &gws) {
        (Input::Vertex { g_re, g_im }, _) => (g_re, g_im),
        (_, Some((a, b))) => (a, b),
        _ => unreachable!("the spectral form has its g workspace"),
    };
    let plan = uniform_plan(v, c.div_ceil(64) * c.div_ceil(64), splitk_ctas(&dev));
    let cc = || Tensor::output(&[c, c], p.dtype, p.device);
    let weight_grads = if p.rotation {
        let (d_a_re, d_a_im) = (cc()?, cc()?);
        reduce_rows(&dev, p, true, (&db_re, &db_im), (g_re, g_im), c, c, &plan, (&d_a_re, Some(&d_a_im)), 1)?;
        WeightGrads::Rotation { d_a_re, d_a_im }
    } else {
        let d_a = cc()?;
        reduce_rows(&dev, p, false, (&db_re, &db_im), (g_re, g_im), c, c, &plan, (&d_a, None), 1)?;
        WeightGrads::Plain { d_a }
    };

    let input_grads = match *input {
        Input::Spectral { grads_re, grads_im, .. } => {
            let plan = mesh_plan(p, p.k.div_ceil(64) * c.div_ceil(64), splitk_ctas(&dev));
            let d_x = Tensor::output(&p.x_shape(), p.dtype, p.device)?;
            reduce_rows(&dev, p, false, (grads_re, grads_im), (&dg_re, &dg_im), p.k, c, &plan, (&d_x, None), p.meshes())?;
            InputGrads::Spectral { d_x }
        }
        Input::Vertex { .. } => InputGrads::Vertex { d_g_re: dg_re, d_g_im: dg_im },
    };
    Ok(Grads { input: input_grads, weights: weight_grads })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_plans_fit_hopper_at_the_issue_sizes() {
        // sm_90's opt-in limit per block.
        let limit = 232_448;
        for rot in [false, true] {
            for family in [Family16::Wgmma, Family16::Wide, Family16::Narrow] {
                // 16-bit: the preferred tiles up to C = 256, the last ones at C = 257 (Cpad 320).
                for kind in [Kind::Fwd, Kind::Bwd] {
                    let t = fused_tiles(DType::BF16, kind, family);
                    assert!(fused_smem_bytes(2, t[0], rot, kind == Kind::Bwd, 256) <= limit, "{kind:?} {t:?}");
                    assert!(fused_smem_bytes(2, *t.last().unwrap(), rot, kind == Kind::Bwd, 320) <= limit, "{kind:?} {t:?}");
                }
            }
            assert!(fused_smem_bytes(2, WGMMA_FWD, rot, false, 320) > limit);
            assert!(fused_smem_bytes(2, tile(128, 4, 3), rot, false, 320) > limit);
            // f32: forward 64 rows and backward 32 rows up to C = 257.
            assert!(fused_smem_bytes(4, tile(64, 4, 3), rot, false, 320) <= limit);
            assert!(fused_smem_bytes(4, tile(32, 4, 3), rot, true, 320) <= limit);
        }
        // The worked numbers of NOTES.md: bf16 forward, 128 rows, C = 256, rotations.
        assert_eq!(fused_smem_bytes(2, tile(128, 4, 3), true, false, 256), 210_432);
        assert_eq!(fused_smem_bytes(2, tile(128, 8, 3), true, false, 256), 222_720);
        assert_eq!(fused_smem_bytes(2, WGMMA_FWD, true, false, 256), 229_376);
        assert_eq!(splitk_smem_bytes(2), 55_296);
        assert_eq!(splitk_smem_bytes(4), 55_296);
    }

    #[test]
    fn every_launch_option_is_listed_for_the_compile_test() {
        let builds = all_builds();
        for dtype in DType::ACTIVATIONS {
            for kind in [Kind::Fwd, Kind::Bwd] {
                for family in [Family16::Wgmma, Family16::Wide, Family16::Narrow] {
                    for &t in fused_tiles(dtype, kind, family) {
                        assert!(builds.iter().any(|b| b.options == options(dtype, kind, t)), "{dtype} {kind:?} {t:?}");
                    }
                }
            }
            assert!(builds.iter().any(|b| b.options == options(dtype, Kind::SplitK, SPLITK)));
        }
        // 16-bit: 4 forward (wgmma, wide, narrow, and the C > 256 fallback) and 3 backward shapes;
        // f32: 2 + 2, each (and the split-K) for both product splits (EMBER_GRADFEAT_F32).
        assert_eq!(builds.len(), 2 * (4 + 3 + 1) + 2 * (2 + 2 + 1));
        let f32_builds = builds.iter().filter(|b| b.options[0] == "-DGF_DTYPE=0");
        assert_eq!(f32_builds.filter(|b| b.options.iter().any(|o| o == "-DGF_F32_BF16X3=1")).count(), 2 + 2 + 1);
    }
}
