//! Fully connected product, backward v1 (`fcb.cu`): the path terms materialized, then plain cuBLAS
//! GEMMs per output grade. Per grade G (blades j0..j0+C, P_G paths into G), with T_G the terms as
//! a row-major (C·B × P_G·N_in) matrix (rows (blade, batch row), columns (path, input channel)) and
//! W_G the grade's weights as a (P_G·N_in × N_out) matrix:
//!
//! - dT_G = dO_G · W_Gᵀ (K = N_out), dW_G = T_Gᵀ · dO_G (K = C·B): two GEMMs per grade;
//! - d_x, d_y: the generated terms' VJP (through the GELU) of every element (b, n) from its dT of
//!   all grades at once — the reason T and dT go through memory: no GEMM tile holds all of them.
//!
//! The weights are copied into grade order first (paths are ordered by (gx, go, gy), so one grade's
//! paths are not contiguous), rounded to the activation type (cuBLAS multiplies operands of one
//! type); dW comes back from grade order into path order. See NOTES.md, "FC backward v1".
//!
//! f32: the GEMMs' operands (terms, weights, the product's gradient) are written as bf16 hi and lo
//! halves and each GEMM computes lo·hi + hi·lo + hi·hi in f32 (~5e-6 relative, held to the 3e-4 of f32
//! on tensor cores), where one f32 GEMM ran on CUDA cores (`EMBER_CLIFFORD_FCB_F32=f32` keeps that):
//! dT as one bf16 GEMM of depth 3·N_out (the parts side by side along K: its f32 C, the largest buffer
//! of the backward, written once), dW as three accumulating GEMMs. See NOTES.md, "FC product v8".

use super::blas;
use super::cuda::{blocks, dtype_opt, launch, prefix, source, SUMS};
use super::gen::Tables;
use super::layer::{Layer, Prog};
use super::plan::{Arg, Gemm, Launch, Plan};
use super::reference::Dims;
use crate::KernelBuild;
use ember_core::cuda::blas::GemmDesc;
use ember_core::cuda::KernelSource;
use ember_core::{DType, Error, Result};

const FCB_CU: &str = include_str!("fcb.cu");
const THREADS: usize = 256;
/// Grid-stride kernels: at most this many CTAs (several waves on any current GPU).
const MAX_GRID: usize = 65536;

/// Backward kernel of the fully connected product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FcBwdVariant {
    /// The mma.sync tile engine of `tile.cu` (data and weight gradients with the terms generated in
    /// the tiles), or the CUDA-core fallback where no tile fits.
    Tile,
    /// `fcb.cu` + cuBLAS: terms and their gradients through memory, two GEMMs per grade.
    Gemm,
}

impl FcBwdVariant {
    pub const ALL: [FcBwdVariant; 2] = [FcBwdVariant::Tile, FcBwdVariant::Gemm];
    /// `EMBER_CLIFFORD_FCBWD=tile|gemm`; otherwise the GEMM variant, measured 4.4× (f32) to 23× (bf16)
    /// faster than the tile engine on an H200 (Cl(3,0) B = 4096, N = 512, bf16 0.68 against 15.46 ms;
    /// NOTES.md).
    /// Where cuBLAS does not load, or the algebra has more than 16 blades, the tile engine runs.
    pub fn selected() -> FcBwdVariant {
        Self::from_setting(ember_core::knob("EMBER_CLIFFORD_FCBWD"))
    }
    /// The variant a value of `EMBER_CLIFFORD_FCBWD` names (unset or unknown: the default).
    pub fn from_setting(v: Option<&str>) -> FcBwdVariant {
        match v {
            Some("tile") => FcBwdVariant::Tile,
            _ => FcBwdVariant::Gemm,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FcBwdVariant::Tile => "tile",
            FcBwdVariant::Gemm => "gemm",
        }
    }
}

/// Whether the GEMM backward applies to `layer`: up to 16 blades (the generated term programs of
/// larger algebras hold hundreds of values per thread).
pub fn applies(layer: &Layer) -> bool {
    layer.blades() <= 16
}

/// One output grade's matrices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradeMat {
    /// First blade and blade count C.
    pub j0: usize,
    pub c: usize,
    /// Paths into the grade, in path order; their first grade-ordered weight slice.
    pub paths: Vec<usize>,
    pub q0: usize,
    /// Slots (blade, path) of the grades before this one: T_G starts at s0·B·N.
    pub s0: usize,
}

/// The workspace layout of an algebra: grades in order, and the path of each grade-ordered weight
/// slice.
#[derive(Clone, Debug)]
pub struct Layout {
    pub grades: Vec<GradeMat>,
    pub path_of: Vec<usize>,
    /// Slots of all grades (≥ pairs: a grade's (blade, path) slots without a term hold zeros).
    pub slots: usize,
}

pub fn layout(t: &Tables) -> Result<Layout> {
    let (mut grades, mut path_of, mut s0) = (Vec::new(), Vec::new(), 0);
    for g in 0..t.ng() {
        let range = t.alg.grade_range(g);
        if range.start != grades.last().map_or(0, |m: &GradeMat| m.j0 + m.c) {
            return Err(Error::invalid("layer", format!("{}: blades are not grade-ordered", t.alg)));
        }
        let paths: Vec<usize> = (0..t.p()).filter(|&p| t.paths[p].go == g).collect();
        // Every grade is reached (at least by scalar · grade g), so no GEMM is empty.
        if paths.is_empty() {
            return Err(Error::invalid("layer", format!("{}: no path reaches grade {g}", t.alg)));
        }
        let m = GradeMat { j0: range.start, c: range.len(), q0: path_of.len(), s0, paths: paths.clone() };
        s0 += m.c * paths.len();
        path_of.extend(paths);
        grades.push(m);
    }
    if path_of.len() != t.p() || grades.last().map(|m| m.j0 + m.c) != Some(t.m()) {
        return Err(Error::invalid("layer", format!("{}: paths or blades do not cover the algebra", t.alg)));
    }
    Ok(Layout { grades, path_of, slots: s0 })
}

fn fcb_source(layer: &Layer, kind: u8) -> Result<KernelSource> {
    let progs: &[Prog] = match kind {
        3 => &[Prog::Terms],
        4 => &[Prog::TermsVjp],
        _ => &[],
    };
    source(layer, &format!("fcb{kind}"), || {
        let t = layer.tables();
        let lay = layout(t)?;
        let mut s = prefix(layer, progs)?;
        s.push_str(&format!("#define FB_P {}\n", t.p()));
        let list: Vec<String> = lay.path_of.iter().map(|p| p.to_string()).collect();
        s.push_str(&format!("__constant__ int fb_path[{}] = {{{}}};\n", t.p(), list.join(", ")));
        let (mut slots, mut zeros) = (String::from("#define FB_SLOTS(X)"), String::from("#define FB_ZEROS(X)"));
        for g in &lay.grades {
            let pg = g.paths.len();
            for jj in 0..g.c {
                for (pp, &p) in g.paths.iter().enumerate() {
                    let c1 = g.s0 + jj * pg;
                    match t.pairs.iter().position(|pr| pr.blade == g.j0 + jj && pr.path == p) {
                        Some(q) => slots.push_str(&format!(" X({q}, {c1}, {pg}, {pp})")),
                        None => zeros.push_str(&format!(" X({c1}, {pg}, {pp})")),
                    }
                }
            }
        }
        s.push_str(&slots);
        s.push('\n');
        s.push_str(&zeros);
        s.push('\n');
        Ok(s + FCB_CU)
    })
}

fn opts(dt: DType, kind: u8) -> Vec<String> {
    vec![dtype_opt(dt), format!("-DFB_KIND={kind}")]
}

/// The f32 builds of kinds 1 and 3 that write bf16 halves (`FB_X3`).
fn opts_x3(kind: u8) -> Vec<String> {
    let mut o = opts(DType::F32, kind);
    o.push("-DFB_X3=1".into());
    o
}

/// Whether f32 runs its GEMMs on bf16 halves (the default) rather than in f32 on CUDA cores.
pub fn f32_halves() -> bool {
    ember_core::knob("EMBER_CLIFFORD_FCB_F32") != Some("f32")
}

fn grid(arg: &str, items: usize) -> Result<(u32, u32, u32)> {
    Ok((blocks(arg, items, THREADS)?.min(MAX_GRID as u32), 1, 1))
}

fn elems(dims: &[usize], what: &str) -> Result<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&v| v.checked_mul(4).is_some()).ok_or_else(|| Error::TooLarge { arg: "x".into(), what: format!("{what} of {dims:?} elements") })
}

/// The workspace layout of `layer` and the workspace's element count, after the checks both plans
/// need: at most 16 blades, and every GEMM dimension within cuBLAS's i32 (rows C·B, columns P_G·N,
/// K = N_out).
fn checked_layout(layer: &Layer, dims: Dims, n_out: usize, what: &str) -> Result<(Layout, usize)> {
    if !applies(layer) {
        return Err(Error::Unsupported(format!("{what} of the fully connected product in {} (more than 16 blades)", layer.name())));
    }
    let t = layer.tables();
    let lay = layout(t)?;
    let (b, n) = (dims.b, dims.n);
    let widest = lay.grades.iter().map(|m| (m.c * b).max(m.paths.len() * n)).max().unwrap_or(0).max(n_out);
    if widest > i32::MAX as usize {
        return Err(Error::TooLarge { arg: "x".into(), what: format!("a GEMM dimension of {widest} (blades·B or paths·N_in) exceeds cuBLAS's i32") });
    }
    let ws = elems(&[lay.slots, b, n], "the path-term workspace")?;
    elems(&[t.p(), n, n_out], "the weights")?;
    Ok((lay, ws))
}

/// The product's gradient as [`plan_backward`] takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradIn {
    /// A buffer in the activation type.
    Plain(usize),
    /// f32 already split into bf16 halves (buffers from [`split_buffers`], as the norm's backward
    /// writes them): `cat` its rows [lo | hi | hi] (3·N_out values, for dT), `halves` hi then lo.
    Split { cat: usize, halves: usize },
}

/// The buffers of an f32 gradient's bf16 halves for the three-product GEMMs: (`cat`, `halves`).
pub fn split_buffers(plan: &mut Plan, dims: Dims, n_out: usize) -> (usize, usize) {
    let cat = plan.alloc(&[dims.m * dims.b, 3 * n_out], DType::BF16);
    let halves = plan.alloc(&[2, dims.m, dims.b, n_out], DType::BF16);
    (cat, halves)
}

/// The GEMM backward into plan buffers d_x, d_y (activation type), d_w (f32) from x = 0, y = 1,
/// w = 2 and the product's gradient `g`.
pub fn plan_backward(plan: &mut Plan, layer: &Layer, dims: Dims, n_out: usize, dt: DType, g: GradIn, (dx, dy, dw): (usize, usize, usize)) -> Result<()> {
    let (lay, ws) = checked_layout(layer, dims, n_out, "the GEMM backward")?;
    let (b, n, p) = (dims.b, dims.n, layer.tables().p());
    let x3 = dt == DType::F32 && f32_halves();
    let g_len = dims.m * b * n_out;
    // The product's gradient in the GEMMs' operand type. f32: its rows [lo | hi | hi] (3·N_out values,
    // for dT) and its plain halves (hi, then lo g_len further, for dW), from one pass.
    let (go, g_cat) = match g {
        GradIn::Split { cat, halves } if x3 => (halves, cat),
        GradIn::Split { .. } => return Err(Error::invalid("g", "bf16 halves for the f32 three-product GEMMs, got them for another path")),
        GradIn::Plain(g) if x3 => {
            let (cat, h) = split_buffers(plan, dims, n_out);
            let args = vec![Arg::Buf(g), Arg::Buf(cat), Arg::Buf(h), Arg::I64((dims.m * b) as i64), Arg::I64(n_out as i64), Arg::I32(0b001)];
            plan.launch(Launch { src: SUMS, opts: vec![], entry: "cl_split3_bf16".into(), grid: grid("x", g_len)?, block: THREADS as u32, smem: 0, args, name: "clifford_fcb_split_g", dependent: false });
            (h, cat)
        }
        GradIn::Plain(g) => (g, g),
    };
    let nm = n * n_out;
    let (op_t, halves) = if x3 { (DType::BF16, 2) } else { (dt, 1) };
    // f32: the weights' rows as [hi | lo | hi] (3·N_out values), against d_out's [lo | hi | hi].
    let wg = plan.alloc(&[if x3 { 3 } else { 1 }, p, n, n_out], op_t);
    let mut wargs = vec![Arg::Buf(2), Arg::Buf(wg), Arg::I64(nm as i64)];
    if x3 {
        wargs.push(Arg::I64(n_out as i64));
    }
    let wopts = if x3 { opts_x3(1) } else { opts(dt, 1) };
    plan.launch(launch(fcb_source(layer, 1)?, wopts, grid("w", p * nm)?, 0, wargs, "clifford_fcb_weights"));
    let tt = plan.alloc(&[halves * ws], op_t);
    // dT stays f32: the VJP sums up to 44 (path, blade) products per element, and with few
    // channels those sums cancel enough that dT rounded to bf16 put d_x 3.6e-2 off the reference
    // (Cl(2,0), B = N_in = N_out = 1, measured on the GPU).
    let dtt = plan.alloc(&[ws], DType::F32);
    let sizes = [Arg::I64(b as i64), Arg::I64(n as i64)];
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(tt)];
    args.extend(sizes);
    if x3 {
        args.push(Arg::I64(ws as i64));
    }
    let topts = if x3 { opts_x3(3) } else { opts(dt, 3) };
    plan.launch(launch(fcb_source(layer, 3)?, topts, grid("x", b * n)?, 0, args, "clifford_fcb_terms"));
    let dwg = plan.alloc(&[p, n, n_out], DType::F32);
    // dW with f32: three accumulating GEMMs of the halves (`blas::gemm3`), the lo halves ws (terms) and
    // g_len (d_out) elements after the hi ones; else one.
    let depth = if x3 { 3 } else { 1 };
    for m in &lay.grades {
        let (rows, cols) = (m.c * b, m.paths.len() * n);
        let (t_off, g_off, w_off) = (m.s0 * b * n, m.j0 * b * n_out, m.q0 * nm);
        let data = GemmDesc { ab: op_t, c: DType::F32, ta: false, tb: true, m: rows, n: cols, k: depth * n_out, beta: 0.0 };
        plan.gemm(Gemm { desc: data, a: (g_cat, depth * g_off), b: (wg, depth * w_off), c: (dtt, t_off) });
        let weight = GemmDesc { ab: op_t, c: DType::F32, ta: true, tb: false, m: cols, n: n_out, k: rows, beta: 0.0 };
        blas::gemm3(plan, weight, (tt, t_off), (go, g_off), (dwg, w_off), x3.then_some((ws, g_len)));
    }
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(dtt), Arg::Buf(dx), Arg::Buf(dy)];
    args.extend(sizes);
    plan.launch(launch(fcb_source(layer, 4)?, opts(dt, 4), grid("x", b * n)?, 0, args, "clifford_fcb_vjp"));
    plan.launch(launch(fcb_source(layer, 2)?, opts(DType::F32, 2), grid("w", p * nm)?, 0, vec![Arg::Buf(dwg), Arg::Buf(dw), Arg::I64(nm as i64)], "clifford_fcb_dw"));
    Ok(())
}

/// The forward product through the same materialized terms (`EMBER_CLIFFORD_FC=blas`, for
/// comparison with fc2, which keeps them on chip): o = T_G · W_G per grade (K = P_G·N_in) into `dst`
/// (M × B × N_out; f32 when `d_f32`, else the activation type) from x = 0, y = 1, w = 2.
#[allow(clippy::too_many_arguments)]
pub fn plan_forward(plan: &mut Plan, layer: &Layer, dims: Dims, n_out: usize, dt: DType, dst: usize, d_f32: bool) -> Result<()> {
    let (lay, ws) = checked_layout(layer, dims, n_out, "the cuBLAS forward")?;
    let (b, n, p) = (dims.b, dims.n, layer.tables().p());
    let nm = n * n_out;
    let wg = plan.alloc(&[p, n, n_out], dt);
    plan.launch(launch(fcb_source(layer, 1)?, opts(dt, 1), grid("w", p * nm)?, 0, vec![Arg::Buf(2), Arg::Buf(wg), Arg::I64(nm as i64)], "clifford_fcb_weights"));
    let tt = plan.alloc(&[ws], dt);
    plan.launch(launch(fcb_source(layer, 3)?, opts(dt, 3), grid("x", b * n)?, 0, vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(tt), Arg::I64(b as i64), Arg::I64(n as i64)], "clifford_fcb_terms"));
    let c = if d_f32 { DType::F32 } else { dt };
    for m in &lay.grades {
        let (rows, k) = (m.c * b, m.paths.len() * n);
        let desc = GemmDesc { ab: dt, c, ta: false, tb: false, m: rows, n: n_out, k, beta: 0.0 };
        plan.gemm(Gemm { desc, a: (tt, m.s0 * b * n), b: (wg, m.q0 * nm), c: (dst, m.j0 * b * n_out) });
    }
    Ok(())
}

/// Every specialization for `layer` (none where the variant does not apply).
pub fn kernels(layer: &Layer) -> Result<Vec<KernelBuild>> {
    if !applies(layer) {
        return Ok(Vec::new());
    }
    let mut out = vec![KernelBuild { source: fcb_source(layer, 2)?, options: opts(DType::F32, 2) }];
    for dt in DType::ACTIVATIONS {
        for kind in [1, 3, 4] {
            out.push(KernelBuild { source: fcb_source(layer, kind)?, options: opts(dt, kind) });
        }
    }
    // f32 on bf16 halves: the weights and the terms split (the product's gradient: SUMS).
    for kind in [1, 3] {
        out.push(KernelBuild { source: fcb_source(layer, kind)?, options: opts_x3(kind) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_groups_paths_by_output_grade_and_covers_every_pair() {
        for (spec, slots) in [("2,0", 14), ("3,0", 44), ("3,0,1", 0), ("1,3", 0)] {
            let layer = Layer::new(spec).unwrap();
            let t = layer.tables();
            let lay = layout(t).unwrap();
            // A permutation of the paths, grade by grade, each grade's paths in path order.
            let mut seen = lay.path_of.clone();
            seen.sort();
            assert_eq!(seen, (0..t.p()).collect::<Vec<_>>(), "{spec}");
            for (g, m) in lay.grades.iter().enumerate() {
                assert_eq!(&lay.path_of[m.q0..m.q0 + m.paths.len()], &m.paths[..], "{spec} grade {g}");
                assert!(m.paths.iter().all(|&p| t.paths[p].go == g), "{spec} grade {g}");
                assert_eq!(t.alg.grade_range(g), m.j0..m.j0 + m.c, "{spec} grade {g}");
            }
            // Every pair has a slot in its blade's grade; slots cover at least the pairs.
            assert!(lay.slots >= t.nt(), "{spec}");
            if slots > 0 {
                assert_eq!(lay.slots, slots, "{spec}");
            }
            for pr in &t.pairs {
                let m = &lay.grades[t.grade_of[pr.blade]];
                assert!(m.paths.contains(&pr.path), "{spec}: pair {pr:?}");
            }
        }
    }

    #[test]
    fn gemm_is_the_default_backward_and_tile_stays_selectable() {
        assert_eq!(FcBwdVariant::from_setting(None), FcBwdVariant::Gemm);
        assert_eq!(FcBwdVariant::from_setting(Some("gemm")), FcBwdVariant::Gemm);
        assert_eq!(FcBwdVariant::from_setting(Some("tile")), FcBwdVariant::Tile);
        assert_eq!(FcBwdVariant::from_setting(Some("")), FcBwdVariant::Gemm);
    }

    #[test]
    fn plan_runs_gemms_between_the_terms_and_their_vjp() {
        let layer = Layer::new("3,0").unwrap();
        let dims = Dims { m: 8, b: 5, n: 7 };
        for (dt, norm) in [(DType::BF16, true), (DType::BF16, false), (DType::F32, false), (DType::F32, true)] {
            let plan = super::super::cuda::plan_fc_backward_variant(&layer, dims, 9, dt, norm, FcBwdVariant::Gemm).unwrap();
            let names: Vec<&str> = plan.launches.iter().map(|l| l.name).collect();
            let terms = names.iter().position(|&n| n == "clifford_fcb_terms").unwrap();
            let vjp = names.iter().position(|&n| n == "clifford_fcb_vjp").unwrap();
            // Two GEMMs per grade, all after the terms and before their VJP.
            // f32: dT as one GEMM three times as deep, dW as three bf16 GEMMs (lo·hi, hi·lo, hi·hi).
            let per = if dt == DType::F32 && f32_halves() { 4 } else { 2 };
            assert_eq!(plan.gemms.len(), per * layer.grades());
            assert!(plan.gemm_at.iter().all(|&at| at == terms + 1 && at == vjp), "{names:?} {:?}", plan.gemm_at);
            // With the norm, its backward writes the gradient as the GEMMs' operands: no pass between.
            // Without it, f32 splits d_out into bf16 halves first.
            assert_eq!(names.iter().filter(|&&n| n == "clifford_rows").count(), usize::from(norm));
            assert_eq!(names.contains(&"clifford_fcb_split_g"), !norm && dt == DType::F32 && f32_halves());
            assert_eq!(plan.outputs.len(), 3);
        }
    }

    #[test]
    fn too_large_problems_are_errors_naming_the_argument() {
        let layer = Layer::new("3,0").unwrap();
        let mut plan = Plan::new(4);
        let dims = Dims { m: 8, b: 1 << 29, n: 1 << 20 };
        let e = plan_backward(&mut plan, &layer, dims, 4, DType::BF16, GradIn::Plain(3), (4, 5, 6)).unwrap_err();
        assert!(e.to_string().contains("`x`"), "{e}");
        assert!(!applies(&Layer::new("2,2,1").unwrap()));
    }
}
