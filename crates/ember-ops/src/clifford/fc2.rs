//! Fully connected product v2 (`fc2.cu`): the forward of half types as one tensor-core GEMM per
//! output grade, rows (blade, batch row), K = (path into the grade, input channel), columns the
//! output channels; the path terms are generated per chunk in shared memory, double buffered, the
//! weights (pre-converted once per call) copied by cp.async. See NOTES.md, "FC product v2".

use super::cuda::{blocks, dtype_opt, launch, prefix, source};
use super::gen::Tables;
use super::layer::{Layer, Prog};
use super::plan::{Arg, Plan};
use super::reference::Dims;
use crate::KernelBuild;
use ember_core::cuda::KernelSource;
use ember_core::{DType, Error, Result};

const FC2_CU: &str = include_str!("fc2.cu");
/// Batch rows per group of sub-tiles (the largest CTA row tile).
const GROUP: usize = 128;
/// Output channels per CTA.
const COLS: usize = 128;
const SMEM_MAX: usize = 200 * 1024;

/// Forward kernel of the fully connected product for half types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcVariant {
    /// The mma.sync tile engine of `tile.cu` (all grades in one CTA, single-buffered staging).
    Tile,
    /// `fc2.cu`: one GEMM per output grade, double-buffered term generation, cp.async weights.
    Gemm,
    /// For comparison only: the path terms written to memory (`fcb.cu`), then one cuBLAS GEMM per
    /// output grade (f32 without TF32); fc2 where cuBLAS does not load.
    Blas,
    /// `fc3.cu`, the default: v2's GEMMs on warpgroup MMA (sm_90a; elsewhere fc2, and for f32 the tile
    /// engine), term generation overlapped with the products of the previous chunk through a 3-stage
    /// ring; f32 as three bf16 products of hi and lo halves per 16 deep (two stages).
    Wgmma,
    /// fc3 with the CTAs of a row block's types in one thread block cluster that shares the staged
    /// x, y and gates (`F3_CLUSTER`); plain fc3 where the loads are not staged.
    Cluster,
    /// fc3 warp-specialised (`F3_WS`): a producer warpgroup has the weights copied and generates the
    /// terms, three consumer warpgroups copy x and y in and multiply, meeting at mbarriers; plain fc3
    /// where the loads are not staged.
    Ws,
}

impl FcVariant {
    pub const ALL: [FcVariant; 6] = [FcVariant::Tile, FcVariant::Gemm, FcVariant::Blas, FcVariant::Wgmma, FcVariant::Cluster, FcVariant::Ws];
    /// `EMBER_CLIFFORD_FC=tile|gemm|blas|wgmma|cluster|ws`; otherwise the default.
    pub fn selected() -> FcVariant {
        match ember_core::knob("EMBER_CLIFFORD_FC") {
            Some("tile") => FcVariant::Tile,
            Some("gemm") => FcVariant::Gemm,
            Some("blas") => FcVariant::Blas,
            Some("wgmma") => FcVariant::Wgmma,
            Some("cluster") => FcVariant::Cluster,
            Some("ws") => FcVariant::Ws,
            _ => FcVariant::Wgmma,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FcVariant::Tile => "tile",
            FcVariant::Gemm => "gemm",
            FcVariant::Blas => "blas",
            FcVariant::Wgmma => "wgmma",
            FcVariant::Cluster => "cluster",
            FcVariant::Ws => "ws",
        }
    }
}

/// One output grade's GEMM.
#[derive(Clone, Debug)]
pub struct GradeCfg {
    pub grade: usize,
    /// Blades of the grade (rows per batch row), the first one, paths into the grade.
    pub c: usize,
    pub j0: usize,
    pub paths: Vec<usize>,
    /// 16-row blocks per warp and blade: batch rows per CTA 64·bw.
    pub bw: usize,
    /// Term index (in `Tables::pairs`) of slot jj·P + pp, `None` where the pair has no term.
    pub slots: Vec<Option<usize>>,
}

impl GradeCfg {
    fn bt(&self) -> usize {
        64 * self.bw
    }
    /// Shared memory of one stage: A slots (rows of 48 B) and B rows (272 B).
    fn stage_bytes(&self) -> usize {
        self.c * self.paths.len() * self.bt() * 48 + self.paths.len() * 16 * (COLS + 8) * 2
    }
}

#[derive(Clone, Debug)]
pub struct Fc2Cfg {
    pub grades: Vec<GradeCfg>,
    /// Sub-tiles of a group of 128 batch rows: (grade, first row within the group).
    pub subs: Vec<(usize, usize)>,
    pub smem: usize,
}

/// The v2 configuration of an algebra; `None` where it does not apply (a grade of more than 3
/// blades, a grade no path reaches, or stages over the shared-memory budget).
pub fn config(t: &Tables) -> Option<Fc2Cfg> {
    let mut grades = Vec::new();
    for g in 0..t.ng() {
        let range = t.alg.grade_range(g);
        let c = range.len();
        let paths: Vec<usize> = (0..t.p()).filter(|&p| t.paths[p].go == g).collect();
        if !(1..=3).contains(&c) || paths.is_empty() {
            return None;
        }
        let mut slots = Vec::new();
        for j in range.clone() {
            for &p in &paths {
                slots.push(t.pairs.iter().position(|pr| pr.blade == j && pr.path == p));
            }
        }
        grades.push(GradeCfg { grade: g, c, j0: range.start, paths, bw: if c == 1 { 2 } else { 1 }, slots });
    }
    let smem = 2 * grades.iter().map(GradeCfg::stage_bytes).max()?;
    if smem > SMEM_MAX {
        return None;
    }
    // Heavier grades first within a group.
    let mut order: Vec<&GradeCfg> = grades.iter().collect();
    order.sort_by_key(|g| std::cmp::Reverse(g.c * g.paths.len()));
    let subs = order.iter().flat_map(|g| (0..GROUP / g.bt()).map(move |i| (g.grade, i * g.bt()))).collect();
    Some(Fc2Cfg { grades, subs, smem })
}

/// Whether v2 runs the forward of `layer` in `dt`.
pub fn applies(layer: &Layer, dt: DType) -> bool {
    dt != DType::F32 && config(layer.tables()).is_some()
}

pub(super) fn chain(vals: &[usize], var: &str) -> String {
    let mut s = String::new();
    for (i, v) in vals.iter().enumerate() {
        if i + 1 < vals.len() {
            s.push_str(&format!("{var} == {i} ? {v} : "));
        } else {
            s.push_str(&v.to_string());
        }
    }
    s
}

fn fc2_source(layer: &Layer) -> Result<KernelSource> {
    let cfg = config(layer.tables()).ok_or_else(|| Error::Unsupported(format!("fc v2 for {}", layer.name())))?;
    source(layer, "fc2", || {
        let mut s = prefix(layer, &[Prog::Terms])?;
        s.push_str(&format!("#define F2_SUBS {}\n", cfg.subs.len()));
        let sg: Vec<usize> = cfg.subs.iter().map(|s| s.0).collect();
        let so: Vec<usize> = cfg.subs.iter().map(|s| s.1).collect();
        s.push_str(&format!("__device__ __forceinline__ int f2_sub_grade(int s) {{ return {}; }}\n", chain(&sg, "s")));
        s.push_str(&format!("__device__ __forceinline__ int f2_sub_off(int s) {{ return {}; }}\n", chain(&so, "s")));
        s.push_str("template <int G> struct f2g;\n");
        let mut sw = String::from("#define F2_SWITCH(g, CALL) switch (g) {");
        for g in &cfg.grades {
            let p = g.paths.len();
            s.push_str(&format!("template <> struct f2g<{}> {{\n    static constexpr int C = {}, P = {p}, J0 = {}, BW = {};\n", g.grade, g.c, g.j0, g.bw));
            s.push_str(&format!("    __device__ static __forceinline__ int path(int pp) {{ return {}; }}\n", chain(&g.paths, "pp")));
            s.push_str(&format!("    __device__ static __forceinline__ void pick(const float (&t)[CL_NT], float (&a)[{}]) {{\n", g.slots.len()));
            for (i, q) in g.slots.iter().enumerate() {
                match q {
                    Some(q) => s.push_str(&format!("        a[{i}] = t[{q}];\n")),
                    None => s.push_str(&format!("        a[{i}] = 0.0f;\n")),
                }
            }
            s.push_str("    }\n};\n");
            sw.push_str(&format!(" case {0}: CALL({0}); break;", g.grade));
        }
        sw.push_str(" default: break; }\n");
        s.push_str(&sw);
        Ok(s + FC2_CU)
    })
}

fn opts(dt: DType, prep: bool, vec: bool, d_f32: bool) -> Vec<String> {
    vec![
        dtype_opt(dt),
        format!("-DF2_BF16={}", u8::from(dt == DType::BF16)),
        format!("-DF2_PREP={}", u8::from(prep)),
        format!("-DF2_VEC={}", u8::from(vec)),
        format!("-DF2_D_F32={}", u8::from(d_f32)),
    ]
}

/// The forward product into `dst` (M × B × N_out, f32 when `d_f32`, else `dt`) from plan buffers
/// x = 0, y = 1, w = 2. `vec`: x and y may be read as pairs of channels (N even, 4-byte aligned).
#[allow(clippy::too_many_arguments)]
pub fn plan_forward(plan: &mut Plan, layer: &Layer, dims: Dims, n_out: usize, dt: DType, dst: usize, d_f32: bool, vec: bool) -> Result<()> {
    let cfg = config(layer.tables()).ok_or_else(|| Error::Unsupported(format!("fc v2 for {}", layer.name())))?;
    let src = fc2_source(layer)?;
    let (npad, mpad) = (dims.n.div_ceil(16) * 16, n_out.div_ceil(COLS) * COLS);
    let p = layer.paths();
    let wt = plan.alloc(&[p, npad, mpad], dt);
    let total = p * npad * mpad;
    let prep_grid = blocks("w", total, 256)?.min(8192);
    let sizes = [p, dims.n, n_out, npad, mpad].map(|v| Arg::I64(v as i64));
    let mut args = vec![Arg::Buf(2), Arg::Buf(wt)];
    args.extend(sizes);
    plan.launch(launch(src, opts(dt, true, false, false), (prep_grid, 1, 1), 0, args, "clifford_fc2_prep"));
    let groups = dims.b.div_ceil(GROUP);
    let gy = u32::try_from(groups * cfg.subs.len()).ok().filter(|&v| v <= 65535).ok_or_else(|| Error::TooLarge { arg: "x".into(), what: format!("{} batch rows", dims.b) })?;
    let gx = u32::try_from(mpad / COLS).ok().filter(|&v| v <= i32::MAX as u32).ok_or_else(|| Error::TooLarge { arg: "w".into(), what: format!("{n_out} output channels") })?;
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(wt), Arg::Buf(dst)];
    args.extend([dims.b, dims.n, n_out, npad, mpad].map(|v| Arg::I64(v as i64)));
    plan.launch(launch(src, opts(dt, false, vec, d_f32), (gx, gy, 1), cfg.smem, args, "clifford_fc2"));
    Ok(())
}

/// Every specialization of v2 for `layer` in `dt` (none where it does not apply).
pub fn kernels(layer: &Layer, dt: DType) -> Result<Vec<KernelBuild>> {
    if !applies(layer, dt) {
        return Ok(Vec::new());
    }
    let src = fc2_source(layer)?;
    let mut out = vec![KernelBuild { source: src, options: opts(dt, true, false, false) }];
    for vec in [false, true] {
        for d_f32 in [false, true] {
            out.push(KernelBuild { source: src, options: opts(dt, false, vec, d_f32) });
        }
    }
    Ok(out)
}
