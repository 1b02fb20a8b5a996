//! Fully connected product v3 (`fc3.cu`): the forward of half types on Hopper's warpgroup MMA
//! (sm_90a). Rows (blade, batch row), K = (path into the blade's grade, input channel), columns the
//! output channels, as in v2; a CTA of three warpgroups owns 64 batch rows × 192 output channels of
//! up to three blades whose grades have the same number of paths, generates their path terms per
//! chunk of 16 channels into a 3-stage ring and runs m64n192k16 products on them while the next
//! chunk is generated. See NOTES.md, "FC product v3".
//!
//! f32 activations run the same kernel built with `F3_X3`: every term and weight split into bf16 hi
//! and lo halves, three bf16 products per path and chunk (lo·hi + hi·lo + hi·hi), ~5e-6 relative per
//! sum (held to the 3e-4 of f32 on tensor cores); 96-column tiles so that two stages of hi and lo
//! tiles fit. See NOTES.md, "FC product v8".

use super::cuda::{blocks, dtype_opt, prefix, source};
use super::fc2::chain;
use super::gen::Tables;
use super::layer::{Layer, Prog};
use super::plan::{Arg, Launch, Plan};
use super::reference::Dims;
use crate::KernelBuild;
use ember_core::cuda::KernelSource;
use ember_core::{DType, Error, Result};
use std::collections::BTreeMap;

const FC3_CU: &str = include_str!("fc3.cu");
/// Output channels per CTA (the wgmma N), batch rows per CTA (the wgmma M), threads per CTA.
const COLS: usize = 192;
/// Output channels per CTA of the f32 build (`F3_X3`: hi and lo tiles of A and B in each stage).
const COLS_X3: usize = 96;
/// Stages of the f32 build.
const STAGES_X3: usize = 2;
const ROWS: usize = 64;
const THREADS: u32 = 384;
/// Threads per CTA of the warp-specialised product: the three consumer warpgroups and the producer.
const WS_THREADS: u32 = THREADS + 128;
const STAGES: usize = 3;
/// Bytes of one A tile (64 × 16) and one B tile (192 × 16) of 16-bit values.
const A_TILE: usize = ROWS * 32;
const B_TILE: usize = COLS * 32;
/// Dynamic shared memory a CTA may use on sm_90 (227 KB).
const SMEM_MAX: usize = 232_448;

/// One warpgroup's rows: a blade, the term of each of its grade's paths (`None`: the pair has no
/// term) and the B tile of the type holding that path's weights.
#[derive(Clone, Debug)]
pub struct RowBlock {
    pub blade: usize,
    pub terms: Vec<Option<usize>>,
    pub btiles: Vec<usize>,
}

/// A CTA type: up to three row blocks with `pr` paths each, and the distinct paths of their grades.
#[derive(Clone, Debug)]
pub struct TypeCfg {
    pub rbs: Vec<RowBlock>,
    pub pr: usize,
    pub bpaths: Vec<usize>,
}

impl TypeCfg {
    fn stage_bytes(&self) -> usize {
        self.rbs.len() * self.pr * A_TILE + self.bpaths.len() * B_TILE
    }
    /// A stage of the f32 build: a hi and a lo tile per A slot and per B path, B tiles COLS_X3 wide.
    fn stage_bytes_x3(&self) -> usize {
        2 * (self.rbs.len() * self.pr * A_TILE + self.bpaths.len() * COLS_X3 * 32)
    }
}

#[derive(Clone, Debug)]
pub struct Fc3Cfg {
    pub types: Vec<TypeCfg>,
    /// Shared memory of the direct-load kernels (three stages of A and B tiles).
    pub smem: usize,
    /// Shared memory of the staged kernel (two stages of tiles, two raw stages of x, y and the
    /// gates), `None` where it does not fit.
    pub smem_staged: Option<usize>,
    /// Shared memory of the f32 build (two stages of hi and lo tiles), `None` where it does not fit.
    pub smem_x3: Option<usize>,
}

/// Bytes of one raw stage (`F3_RAW_BYTES`): x and y of 64 rows × 16 channels per blade, the gates.
fn raw_bytes(m: usize) -> usize {
    2 * m * ROWS * 32 + ROWS * 64
}

/// How x, y and the gates reach the term generation (`F3_LOAD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Channel by channel, any N.
    Scalar = 0,
    /// Quads of channels straight from global memory (N a multiple of 4).
    Quads = 1,
    /// cp.async into a raw ring one chunk ahead (N a multiple of 8).
    Staged = 2,
}

/// The v3 configuration of an algebra: blades grouped by the number of paths into their grade (in
/// grade order, three per type), so one CTA generates the terms of a whole grade where it can
/// (Cl(3,0): {e1, e2, e3}, {e12, e13, e23}, {1, e123}). `None` where a grade has no path into it or
/// a type's three stages exceed the shared memory.
pub fn config(t: &Tables) -> Option<Fc3Cfg> {
    let mut by_paths: BTreeMap<usize, Vec<(usize, Vec<usize>)>> = BTreeMap::new();
    for g in 0..t.ng() {
        let paths: Vec<usize> = (0..t.p()).filter(|&p| t.paths[p].go == g).collect();
        if paths.is_empty() {
            return None;
        }
        for j in t.alg.grade_range(g) {
            by_paths.entry(paths.len()).or_default().push((j, paths.clone()));
        }
    }
    let mut types = Vec::new();
    for (&pr, blades) in by_paths.iter().rev() {
        for group in blades.chunks(3) {
            let mut bpaths: Vec<usize> = Vec::new();
            for (_, paths) in group {
                for &p in paths {
                    if !bpaths.contains(&p) {
                        bpaths.push(p);
                    }
                }
            }
            let rbs = group
                .iter()
                .map(|(j, paths)| RowBlock {
                    blade: *j,
                    terms: paths.iter().map(|&p| t.pairs.iter().position(|pr| pr.blade == *j && pr.path == p)).collect(),
                    btiles: paths.iter().map(|p| bpaths.iter().position(|q| q == p).expect("path of the type")).collect(),
                })
                .collect();
            types.push(TypeCfg { rbs, pr, bpaths });
        }
    }
    let stage = types.iter().map(TypeCfg::stage_bytes).max()?;
    let smem = STAGES * stage;
    let staged = 2 * stage + 2 * raw_bytes(t.m());
    let x3 = STAGES_X3 * types.iter().map(TypeCfg::stage_bytes_x3).max()?;
    (smem <= SMEM_MAX).then_some(Fc3Cfg { types, smem, smem_staged: (staged <= SMEM_MAX).then_some(staged), smem_x3: (x3 <= SMEM_MAX).then_some(x3) })
}

/// Whether v3 can run the forward of `layer` in `dt` (the caller also needs an sm_90a device).
pub fn applies(layer: &Layer, dt: DType) -> bool {
    config(layer.tables()).is_some_and(|c| dt != DType::F32 || c.smem_x3.is_some())
}

/// Output channels per CTA in `dt` (the f32 build's tiles are narrower).
fn cols_of(dt: DType) -> usize {
    if dt == DType::F32 {
        COLS_X3
    } else {
        COLS
    }
}

/// The column tiles of `n_out` output channels: (CW, CN, NW, NCT) — NCT tiles of at most COLS, the
/// first NW of CW channels and the rest of CN, multiples of 8 as even as they go (N_out = 512: 176,
/// 168, 168), so that no tile is mostly padding.
pub fn col_tiles(n_out: usize) -> (usize, usize, usize, usize) {
    col_tiles_of(n_out, COLS)
}

/// [`col_tiles`] for tiles of at most `cols` channels.
fn col_tiles_of(n_out: usize, cols: usize) -> (usize, usize, usize, usize) {
    let nct = n_out.div_ceil(cols).max(1);
    let groups = n_out.div_ceil(8).max(1);
    let (cn, nw) = (8 * (groups / nct), groups % nct);
    let cw = if nw == 0 { cn } else { cn + 8 };
    (cw, cn, nw, nct)
}

/// `f3_wgmma<NC>`: wgmma.m64nNCk16 (f32 += A · Bᵀ, both from shared memory) for every tile width NC,
/// a multiple of 8 up to COLS (the instruction names its N, and the asm its NC / 2 accumulators).
fn wgmma_fns() -> String {
    let mut s = String::from(
        "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(EMBER_HOST_EMU)\n#if F3_BF16\n#define F3_WG_TY \"bf16\"\n#else\n#define F3_WG_TY \"f16\"\n#endif\n\
         template <int NC> __device__ __forceinline__ void f3_wgmma(float (&d)[NC / 2], u64 da, u64 db);\n",
    );
    for nc in (8..=COLS).step_by(8) {
        let (r, r1) = (nc / 2, nc / 2 + 1);
        let regs = (0..r).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ");
        let outs = (0..r).map(|i| format!("\"+f\"(d[{i}])")).collect::<Vec<_>>().join(", ");
        s.push_str(&format!(
            "template <> __device__ __forceinline__ void f3_wgmma<{nc}>(float (&d)[{r}], u64 da, u64 db) {{\n    asm volatile(\"wgmma.mma_async.sync.aligned.m64n{nc}k16.f32.\" F3_WG_TY \".\" F3_WG_TY \" {{{regs}}}, %{r}, %{r1}, 1, 1, 1, 0, 0;\\n\"\n                 : {outs}\n                 : \"l\"(da), \"l\"(db));\n}}\n"
        ));
    }
    s.push_str("#endif\n");
    s
}

/// Whether `arch` (NVRTC target) has warpgroup MMA.
pub fn arch_has_wgmma(arch: &str) -> bool {
    arch == "sm_90a"
}

fn fc3_source(layer: &Layer) -> Result<KernelSource> {
    let cfg = config(layer.tables()).ok_or_else(|| Error::Unsupported(format!("fc v3 for {}", layer.name())))?;
    source(layer, "fc3", || {
        let mut s = prefix(layer, &[Prog::TermsRaw, Prog::FcGate])?;
        s.push_str(&format!("#define F3_TYPES {}\ntemplate <int T> struct f3t;\n", cfg.types.len()));
        let mut sw = String::from("#define F3_SWITCH(t, CALL) switch (t) {");
        for (i, ty) in cfg.types.iter().enumerate() {
            let ns = ty.rbs.len() * ty.pr;
            s.push_str(&format!(
                "template <> struct f3t<{i}> {{\n    static constexpr int RB = {}, PR = {}, NB = {}, NS = {ns};\n",
                ty.rbs.len(),
                ty.pr,
                ty.bpaths.len()
            ));
            let blades: Vec<usize> = ty.rbs.iter().map(|r| r.blade).collect();
            let btiles: Vec<usize> = ty.rbs.iter().flat_map(|r| r.btiles.iter().copied()).collect();
            s.push_str(&format!("    __device__ static __forceinline__ int blade(int rb) {{ return {}; }}\n", chain(&blades, "rb")));
            s.push_str(&format!("    __device__ static __forceinline__ int bpath(int i) {{ return {}; }}\n", chain(&ty.bpaths, "i")));
            // constexpr: fc3.cu folds btile of a compile-time slot to a constant (f3_btile).
            s.push_str(&format!("    __device__ static constexpr int btile(int s) {{ return {}; }}\n", chain(&btiles, "s")));
            s.push_str(&format!("    __device__ static __forceinline__ void pick(const float (&t)[CL_NT], float (&a)[{ns}]) {{\n"));
            for (k, q) in ty.rbs.iter().flat_map(|r| r.terms.iter()).enumerate() {
                match q {
                    Some(q) => s.push_str(&format!("        a[{k}] = t[{q}];\n")),
                    None => s.push_str(&format!("        a[{k}] = 0.0f;\n")),
                }
            }
            s.push_str("    }\n};\n");
            sw.push_str(&format!(" case {i}: CALL({i}); break;"));
        }
        sw.push_str(" default: break; }\n");
        s.push_str(&sw);
        s.push_str(&wgmma_fns());
        Ok(s + FC3_CU)
    })
}

/// Which kernel of fc3.cu a build is: the product or the prep pass (weights and gates).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Product = 0,
    /// The weights arranged into tiles and the gates of every element, in one launch.
    Prep = 1,
}

/// How the staged product's CTAs are organised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crew {
    /// 384 threads that all load, generate and (three warpgroups) multiply, meeting at CTA barriers.
    Cta,
    /// The types of a row block in one thread block cluster sharing the staged loads (`F3_CLUSTER`).
    Cluster,
    /// A producer warpgroup (weight copies and term generation) beside three consumer warpgroups
    /// (raw copies and products), meeting at mbarriers (`F3_WS`; 512 threads; opt-in, measured
    /// slower: NOTES.md "FC product v9").
    Specialised,
}

/// Build options; `cols` = (CW, CN), the product's two tile widths (the passes take none);
/// `crew`: how the staged product's CTA is organised (Cta for every other build).
/// f32 builds are `F3_X3` (bf16 products, f32 output, 96-column tiles).
fn opts(dt: DType, pass: Pass, load: Load, d_f32: bool, cols: Option<(usize, usize)>, crew: Crew) -> Vec<String> {
    let x3 = dt == DType::F32;
    let mut o = vec![
        dtype_opt(dt),
        format!("-DF3_BF16={}", u8::from(dt == DType::BF16 || x3)),
        format!("-DF3_PREP={}", pass as u8),
        format!("-DF3_LOAD={}", load as u8),
        format!("-DF3_D_F32={}", u8::from(d_f32 || x3)),
    ];
    if x3 {
        o.push("-DF3_X3=1".into());
        o.push(format!("-DF3_COLS={COLS_X3}"));
    }
    match crew {
        Crew::Cta => {}
        Crew::Cluster => o.push("-DF3_CLUSTER=1".into()),
        Crew::Specialised => o.push("-DF3_WS=1".into()),
    }
    if let Some((cw, cn)) = cols {
        o.push(format!("-DF3_CW={cw}"));
        o.push(format!("-DF3_CN={cn}"));
    }
    o
}

/// Whether the staged product of `cfg` can run its types as one thread block cluster: two types at
/// least (one shares nothing) and at most 8 (the portable cluster size).
fn cluster_fits(cfg: &Fc3Cfg) -> bool {
    (2..=8).contains(&cfg.types.len()) && cfg.smem_staged.is_some()
}

/// The forward product into `dst` (M × B × N_out, f32 when `d_f32`, else `dt`) from plan buffers
/// x = 0, y = 1, w = 2. `aligned`: x and y start 16-byte aligned (ember's own allocations), so N
/// a multiple of 8 can stage them by cp.async and a multiple of 4 read them as quads. `crew`: the
/// staged product's organisation where the loads are staged (Cluster where it fits), else Cta.
#[allow(clippy::too_many_arguments)]
pub fn plan_forward(plan: &mut Plan, layer: &Layer, dims: Dims, n_out: usize, dt: DType, dst: usize, d_f32: bool, aligned: bool, crew: Crew) -> Result<()> {
    let cfg = config(layer.tables()).ok_or_else(|| Error::Unsupported(format!("fc v3 for {}", layer.name())))?;
    let src = fc3_source(layer)?;
    let nch = dims.n.div_ceil(16);
    let x3 = dt == DType::F32;
    let cols = cols_of(dt);
    let (cw, cn, nw, nct) = col_tiles_of(n_out, cols);
    let p = layer.paths();
    // The arranged weights: in the activation type, or (f32) bf16 hi tiles followed by the lo tiles.
    let wt = if x3 { plan.alloc(&[2, p, nct, nch, cols * 16], DType::BF16) } else { plan.alloc(&[p, nct, nch, cols * 16], dt) };
    // The prep pass: one thread per 16-byte unit of the arranged weights (8 values) in the first
    // blocks, the GELU gates Φ(x₀)·Φ(y₀) of every element (B × N f32) in the rest.
    let gates = plan.alloc(&[dims.b, dims.n], DType::F32);
    let weight_blocks = blocks("w", p * nct * nch * cols * 2, 256)?.min(8192);
    let gate_blocks = blocks("x", dims.b * dims.n, 256)?.min(8192);
    let mut args = vec![Arg::Buf(2), Arg::Buf(wt)];
    args.extend([p, dims.n, n_out, nch, nct, cw, cn, nw].map(|v| Arg::I64(v as i64)));
    args.extend([Arg::Buf(0), Arg::Buf(1), Arg::Buf(gates), Arg::I64((dims.b * dims.n) as i64), Arg::I64(weight_blocks as i64)]);
    let prep_grid = (weight_blocks + gate_blocks, 1, 1);
    plan.launch(Launch { src, opts: opts(dt, Pass::Prep, Load::Scalar, false, None, Crew::Cta), entry: "cl_kernel".into(), grid: prep_grid, block: 256, smem: 0, args, name: "clifford_fc3_prep", dependent: false });
    let gy = u32::try_from(dims.b.div_ceil(ROWS) * cfg.types.len())
        .ok()
        .filter(|&v| v <= 65535)
        .ok_or_else(|| Error::TooLarge { arg: "x".into(), what: format!("{} batch rows", dims.b) })?;
    let gx = u32::try_from(nct).ok().filter(|&v| v <= i32::MAX as u32).ok_or_else(|| Error::TooLarge { arg: "w".into(), what: format!("{n_out} output channels") })?;
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(wt), Arg::Buf(gates), Arg::Buf(dst)];
    args.extend([dims.b, dims.n, n_out, nch, nct, nw].map(|v| Arg::I64(v as i64)));
    let (load, smem) = match (x3, cfg.smem_staged) {
        (true, _) => {
            let sm = cfg.smem_x3.ok_or_else(|| Error::Unsupported(format!("fc v3 in f32 for {}", layer.name())))?;
            (if aligned && dims.n.is_multiple_of(4) { Load::Quads } else { Load::Scalar }, sm)
        }
        (false, Some(sm)) if aligned && dims.n.is_multiple_of(8) => (Load::Staged, sm),
        _ if aligned && dims.n.is_multiple_of(4) => (Load::Quads, cfg.smem),
        _ => (Load::Scalar, cfg.smem),
    };
    let crew = match crew {
        _ if load != Load::Staged => Crew::Cta,
        Crew::Cluster if !cluster_fits(&cfg) => Crew::Cta,
        c => c,
    };
    let (name, block) = match crew {
        Crew::Cta => ("clifford_fc3", THREADS),
        Crew::Cluster => ("clifford_fc3_cluster", THREADS),
        Crew::Specialised => ("clifford_fc3_ws", WS_THREADS),
    };
    plan.launch(Launch { src, opts: opts(dt, Pass::Product, load, d_f32, Some((cw, cn)), crew), entry: "cl_kernel".into(), grid: (gx, gy, 1), block, smem, args, name, dependent: false });
    Ok(())
}

/// Every specialization of v3 for `layer` in `dt` (none where it does not apply).
pub fn kernels(layer: &Layer, dt: DType) -> Result<Vec<KernelBuild>> {
    if !applies(layer, dt) {
        return Ok(Vec::new());
    }
    let src = fc3_source(layer)?;
    let mut out = vec![KernelBuild { source: src, options: opts(dt, Pass::Prep, Load::Scalar, false, None, Crew::Cta) }];
    let x3 = dt == DType::F32;
    let staged = !x3 && config(layer.tables()).is_some_and(|c| c.smem_staged.is_some());
    let clustered = config(layer.tables()).is_some_and(|c| cluster_fits(&c));
    // Tile widths of N_out = 512 (176 and 168, f32: 88 and 80: two instantiations per type) and of a
    // multiple of the tile width.
    let full = cols_of(dt);
    let (cw, cn, _, _) = col_tiles_of(512, full);
    // f32 output only in f32 (one build per load and widths).
    let outs: &[bool] = if x3 { &[true] } else { &[false, true] };
    for load in [Load::Scalar, Load::Quads, Load::Staged].into_iter().filter(|&l| l != Load::Staged || staged) {
        for &d_f32 in outs {
            for cols in [(cw, cn), (full, full)] {
                out.push(KernelBuild { source: src, options: opts(dt, Pass::Product, load, d_f32, Some(cols), Crew::Cta) });
                if load == Load::Staged {
                    out.push(KernelBuild { source: src, options: opts(dt, Pass::Product, load, d_f32, Some(cols), Crew::Specialised) });
                }
                if load == Load::Staged && clustered {
                    out.push(KernelBuild { source: src, options: opts(dt, Pass::Product, load, d_f32, Some(cols), Crew::Cluster) });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column tiles: multiples of 8 of at most COLS, widths within 8 of each other, covering N_out
    /// with less than 8 columns of padding.
    #[test]
    fn column_tiles_split_n_out_evenly() {
        assert_eq!(col_tiles(512), (176, 168, 1, 3));
        assert_eq!(col_tiles(384), (192, 192, 0, 2));
        assert_eq!(col_tiles(200), (104, 96, 1, 2));
        for n_out in 1..2000 {
            let (cw, cn, nw, nct) = col_tiles(n_out);
            assert!(cw % 8 == 0 && cn % 8 == 0 && cn > 0 && cw <= COLS && (cw == cn || cw == cn + 8), "{n_out}");
            assert!(nw < nct && nct == n_out.div_ceil(COLS), "{n_out}");
            let total = nw * cw + (nct - nw) * cn;
            assert!(total >= n_out && total < n_out + 8, "{n_out}: {total}");
        }
    }

    /// Cl(3,0) groups its blades by grade; every blade is in exactly one row block and the stages fit.
    #[test]
    fn cl30_types_cover_every_blade_once() {
        let layer = Layer::new("3,0").unwrap();
        let cfg = config(layer.tables()).expect("Cl(3,0) fits");
        let mut blades: Vec<usize> = cfg.types.iter().flat_map(|t| t.rbs.iter().map(|r| r.blade)).collect();
        blades.sort_unstable();
        assert_eq!(blades, (0..8).collect::<Vec<_>>());
        assert_eq!(cfg.types.len(), 3);
        assert!(cfg.types.iter().all(|t| t.rbs.iter().all(|r| r.terms.len() == t.pr && r.btiles.len() == t.pr)));
        assert!(cfg.smem <= SMEM_MAX, "{} bytes", cfg.smem);
        // Each row block's slots name terms of its own blade only.
        let t = layer.tables();
        for ty in &cfg.types {
            for rb in &ty.rbs {
                for q in rb.terms.iter().flatten() {
                    assert_eq!(t.pairs[*q].blade, rb.blade);
                }
            }
        }
    }
}
