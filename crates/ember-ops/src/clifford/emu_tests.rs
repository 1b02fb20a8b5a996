//! The CUDA kernels under host emulation ([`super::emu`]) against the f64 reference: the same
//! launch plans, sources, grids and arguments as on a GPU, with poisoned outputs. Without a C++
//! compiler these tests fail (they are the CUDA code's only check on machines without a GPU).
//!
//! The set covers every kernel template and variant (vector widths, held and recomputed rows, norm
//! on and off, every tile kind in every dtype, split-K, the CUDA-core fallback) on small algebras,
//! and every named algebra (Cl(3,0), Cl(3,0,1), Cl(1,3)) in every dtype; `EMBER_EMU_FULL=0` leaves
//! the latter out (99 s against 63 s on 2 cores since the emulation runs on fibers).

use super::emu::{cxx, run_host};
use super::fc2::FcVariant;
use super::fused::Stages;
use super::reference::{self, Dims};
use super::{blas, cuda, Layer};
use ember_core::{DType, Device, Tensor};

fn input(shape: &[usize], dtype: DType, seed: u64, scale: f64) -> (Tensor, Vec<f64>) {
    let v: Vec<f64> = Tensor::randn(shape, DType::F64, Device::Cpu, seed).unwrap().to_vec_f64().unwrap().iter().map(|x| x * scale).collect();
    let t = Tensor::from_f64(&v, shape, dtype, Device::Cpu).unwrap();
    let v = t.to_vec_f64().unwrap();
    (t, v)
}

fn close(what: &str, got: &Tensor, want: &[f64], tol: f64) {
    let err = ember_core::compare::rel_err(&got.to_vec_f64().unwrap(), want);
    assert!(err.is_finite() && err <= tol, "{what}: relative error {err:e} (tolerance {tol:e})");
}

/// Every named algebra in every dtype, unless `EMBER_EMU_FULL=0`.
fn full() -> bool {
    std::env::var("EMBER_EMU_FULL").as_deref() != Ok("0")
}

fn emu_fused(spec: &str, (nb, n): (usize, usize), dtype: DType) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n };
    let shape = [dims.m, nb, n];
    let seed = 1000 + (nb * 31 + n) as u64;
    let (x, xv) = input(&shape, dtype, seed, 1.0);
    let (y, yv) = input(&shape, dtype, seed + 1, 1.0);
    let (w, wv) = input(&[n, layer.paths()], DType::F32, seed + 2, 0.5);
    let (g, gv) = input(&shape, dtype, seed + 3, 1.0);
    let tol = dtype.tolerance();
    for (gelu, norm) in [(true, false), (true, true), (false, false)] {
        let st = Stages { gelu, norm };
        let tag = format!("{spec} B={nb} N={n} {dtype} gelu={gelu} norm={norm}");
        let (ro, rr) = reference::fused_forward(&alg, dims, &xv, &yv, &wv, gelu, norm);
        // Three multiprocessors: the staged variant's persistent CTAs walk several steps.
        let gpu = cuda::Gpu { sms: 3, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
        let mut f = Vec::new();
        let mut fixed_order = Vec::new();
        for var in cuda::RowVariant::ALL {
            let plan = cuda::plan_fused_forward(&layer, dims, dtype, st, var, gpu).unwrap();
            let vmax = match dims.m {
                0..=8 => 4,
                9..=16 => 2,
                _ => 1,
            };
            let staged = var.staged() && vmax > 1 && n % vmax == 0 && n / vmax <= 256;
            assert_eq!(plan.launches[0].name.contains("staged"), staged, "{tag}: {} plan", var.name());
            f = run_host(&plan, &[&x, &y, &w]);
            close(&format!("{tag} {} out", var.name()), &f[0], &ro, tol);
            if let Some(rr) = &rr {
                close(&format!("{tag} {} rms", var.name()), &f[1], rr, tol);
            }
            // The run-time step order computes every row as the fixed order does: the same bits.
            match var {
                cuda::RowVariant::Staged => fixed_order = f.iter().map(bits).collect::<Vec<_>>(),
                cuda::RowVariant::Dynamic => {
                    for (a, b) in f.iter().zip(&fixed_order) {
                        assert!(bits(a) == *b, "{tag}: dynamic bits = staged bits");
                    }
                }
                cuda::RowVariant::Rows => {}
            }
        }
        let (dx, dy, dw) = reference::fused_backward(&alg, dims, &xv, &yv, &wv, &gv, gelu, norm);
        // The backward of `Dynamic` is `Staged`'s plan.
        for var in [cuda::RowVariant::Rows, cuda::RowVariant::Staged] {
            for bv in cuda::BwdVariant::ALL {
                let bwd = cuda::plan_fused_backward_with(&layer, dims, dtype, st, var, bv, gpu).unwrap();
                let staged = var.staged() && norm && dtype != DType::F32;
                assert_eq!(bwd.launches[0].name.contains("staged"), staged, "{tag}: {} backward plan", var.name());
                let pipe = bv == cuda::BwdVariant::Pipe && dtype == DType::F32 && dims.m <= 8;
                assert_eq!(bwd.launches.iter().any(|l| l.name == "clifford_bwd_pipe"), pipe, "{tag}: {} backward plan", bv.name());
                let gr = if norm { run_host(&bwd, &[&x, &y, &w, &g, &f[0], &f[1]]) } else { run_host(&bwd, &[&x, &y, &w, &g]) };
                let tag = format!("{tag} {} {}", var.name(), bv.name());
                close(&format!("{tag} d_x"), &gr[0], &dx, tol);
                close(&format!("{tag} d_y"), &gr[1], &dy, tol);
                close(&format!("{tag} d_w"), &gr[2], &dw, tol);
            }
        }
    }
    let o = run_host(&cuda::plan_gelu(&layer, super::Prog::GeluFwd, dims, dtype).unwrap(), &[&x]);
    close(&format!("{spec} {dtype} mvgelu"), &o[0], &reference::mvgelu(dims, &xv), tol);
    let d = run_host(&cuda::plan_gelu(&layer, super::Prog::GeluBwd, dims, dtype).unwrap(), &[&x, &g]);
    close(&format!("{spec} {dtype} mvgelu d_x"), &d[0], &reference::mvgelu_bwd(dims, &xv, &gv), tol);
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// The f32 inputs of a fused backward case, x, y, w and d_out (seeds `seed` ..= `seed + 3`), as
/// tensors and as the reference's values.
fn bwd_inputs(spec: &str, (nb, n): (usize, usize), seed: u64) -> (Layer, Dims, [Tensor; 4], [Vec<f64>; 4]) {
    let layer = Layer::new(spec).unwrap();
    let dims = Dims { m: layer.blades(), b: nb, n };
    let shape = [dims.m, nb, n];
    let (x, xv) = input(&shape, DType::F32, seed, 1.0);
    let (y, yv) = input(&shape, DType::F32, seed + 1, 1.0);
    let (w, wv) = input(&[n, layer.paths()], DType::F32, seed + 2, 0.5);
    let (g, gv) = input(&shape, DType::F32, seed + 3, 1.0);
    (layer, dims, [x, y, w, g], [xv, yv, wv, gv])
}

/// The fused backward's three column/sum variants (default: v1 column kernel + tree chunk sums;
/// pipe: pipelined column kernel + tree; serial: v1 as it was) against the f64 reference and each
/// other: several row steps per item (the last item's rows partial), items past
/// the persistent grid, a column tile past N, three levels of chunk sums. The column kernels run the
/// same gradient program per element on the same words, so d_x and d_y must be bitwise v1's; d_w
/// differs from v1 only by the order of the chunk sums.
fn emu_bwd_pipe(spec: &str, (nb, n): (usize, usize)) {
    let (layer, dims, [x, y, w, g], [xv, yv, wv, gv]) = bwd_inputs(spec, (nb, n), 4000 + (nb * 31 + n) as u64);
    let alg = layer.algebra().clone();
    let dtype = DType::F32;
    let gpu = cuda::Gpu { sms: 3, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    for (gelu, norm) in [(true, true), (false, false)] {
        let st = Stages { gelu, norm };
        let tag = format!("{spec} B={nb} N={n} gelu={gelu} norm={norm}");
        let f = run_host(&cuda::plan_fused_forward(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, gpu).unwrap(), &[&x, &y, &w]);
        let (dx, dy, dw) = reference::fused_backward(&alg, dims, &xv, &yv, &wv, &gv, gelu, norm);
        let mut got = Vec::new();
        for bv in [cuda::BwdVariant::Cols, cuda::BwdVariant::Pipe, cuda::BwdVariant::Serial] {
            let plan = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, bv, gpu).unwrap();
            let trees = cuda::tree_levels(&plan);
            let serial = plan.launches.iter().filter(|l| l.name == "clifford_sum_chunks").count();
            if bv == cuda::BwdVariant::Serial {
                assert_eq!((trees, serial), (0, 1), "{tag}: serial chunk sums");
            } else {
                assert!(trees >= 2 && serial == 0, "{tag}: {trees} tree levels");
            }
            if bv == cuda::BwdVariant::Pipe {
                let col = plan.launches.iter().find(|l| l.name == "clifford_bwd_pipe").expect("pipelined column launch");
                assert_eq!(col.grid, (6, 1, 1), "{tag}: persistent grid");
            }
            let gr = if norm { run_host(&plan, &[&x, &y, &w, &g, &f[0], &f[1]]) } else { run_host(&plan, &[&x, &y, &w, &g]) };
            let tag = format!("{tag} {}", bv.name());
            close(&format!("{tag} d_x"), &gr[0], &dx, 1e-5);
            close(&format!("{tag} d_y"), &gr[1], &dy, 1e-5);
            close(&format!("{tag} d_w"), &gr[2], &dw, 1e-5);
            got.push(gr);
        }
        // got: [cols (default), pipe, serial]. Every variant runs the same gradient program on the
        // same words: d_x and d_y bitwise equal. The pipe's d_w partials are v1's, summed by the same
        // tree: bitwise the default's d_w.
        for (i, name) in [(1, "pipe"), (2, "serial")] {
            assert!(bits(&got[0][0]) == bits(&got[i][0]) && bits(&got[0][1]) == bits(&got[i][1]), "{tag}: {name} d_x/d_y not bitwise the default's");
        }
        assert!(bits(&got[0][2]) == bits(&got[1][2]), "{tag}: pipe d_w not bitwise the default's");
        // The tree order is fixed: a second run gives the same bits.
        for (i, bv) in [(0, cuda::BwdVariant::Cols), (1, cuda::BwdVariant::Pipe)] {
            let plan = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, bv, gpu).unwrap();
            let again = if norm { run_host(&plan, &[&x, &y, &w, &g, &f[0], &f[1]]) } else { run_host(&plan, &[&x, &y, &w, &g]) };
            assert!(bits(&again[2]) == bits(&got[i][2]), "{tag}: {} tree d_w not repeatable", bv.name());
        }
    }
}

/// A backward variant whose CTAs own whole rows (rowwise, whole) on `inputs`: its plan is its kernel
/// and the tree over `parts` partials (none where 1), its outputs within 1e-5 of the reference
/// (`want`), bitwise the same on a second run, d_x and d_y bitwise the default's. Returns them.
#[allow(clippy::too_many_arguments)]
fn row_backward_matches(tag: &str, layer: &Layer, dims: Dims, st: Stages, bv: cuda::BwdVariant, gpu: cuda::Gpu, inputs: &[&Tensor], want: (&[f64], &[f64], &[f64]), parts: usize) -> Vec<Tensor> {
    let plan = cuda::plan_fused_backward_with(layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, bv, gpu).unwrap();
    let names: Vec<&str> = plan.launches.iter().map(|l| l.name).collect();
    assert_eq!(names[0], format!("clifford_bwd_{}", bv.name()), "{tag}: plan {names:?}");
    assert!(names[1..].iter().all(|&l| l == "clifford_sum_tree" || l == "clifford_sum_tree2") && (parts == 1) == (names.len() == 1), "{tag}: plan {names:?}");
    let got = run_host(&plan, inputs);
    for (i, (what, want)) in [("d_x", want.0), ("d_y", want.1), ("d_w", want.2)].into_iter().enumerate() {
        close(&format!("{tag} {what}"), &got[i], want, 1e-5);
    }
    let again = run_host(&plan, inputs);
    assert!((0..3).all(|i| bits(&again[i]) == bits(&got[i])), "{tag}: not repeatable");
    let cols = run_host(&cuda::plan_fused_backward_with(layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Cols, gpu).unwrap(), inputs);
    assert!(bits(&cols[0]) == bits(&got[0]) && bits(&cols[1]) == bits(&got[1]), "{tag}: d_x/d_y not bitwise the default's");
    let diff = got[2].to_vec_f64().unwrap().iter().zip(cols[2].to_vec_f64().unwrap()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    eprintln!("{tag}: ok (d_w vs cols max |diff| {diff:e})");
    got
}

/// The row-oriented backward (`BwdVariant::Rowwise`, rowwise.cu) against the f64 reference (1e-5),
/// with gelu+norm and plain: its d_x and d_y bitwise the default's (same row statistics in the same
/// order, same gradient program on the same words), its d_w repeatable bit for bit. `geo`: the
/// expected (rows per step, threads, chunks). Three multiprocessors: the persistent CTAs walk several
/// chunks, the ring runs across chunk boundaries.
fn emu_bwd_rowwise(spec: &str, (nb, n): (usize, usize), geo: (usize, usize, usize)) {
    emu_row_backward(spec, (nb, n), cuda::BwdVariant::Rowwise, |tag, layer, dims, norm, gpu| {
        let g0 = cuda::rowwise_geom(layer, dims, norm, DType::F32, gpu).expect("rowwise applies");
        assert_eq!((g0.rows, g0.threads, g0.chunks), geo, "{tag}: geometry");
        (g0.chunks, None)
    });
}

/// The whole-row backward (`BwdVariant::Whole`, whole.cu) against the f64 reference (1e-5), with
/// gelu+norm and plain: its d_x and d_y bitwise the default's (the dot pass's row statistics in the
/// same order, the column program on the same words), all three outputs bitwise equal over two
/// runs. `geo`: the expected (rows per chunk, channels side by side, chunks, slots). Three
/// multiprocessors: the persistent CTAs walk several slots, a slot several chunks.
fn emu_bwd_whole(spec: &str, (nb, n): (usize, usize), geo: (usize, usize, usize, usize)) {
    emu_row_backward(spec, (nb, n), cuda::BwdVariant::Whole, |tag, layer, dims, _, gpu| {
        let g0 = cuda::whole_geom(layer, dims, DType::F32, gpu).expect("whole applies");
        assert_eq!((g0.rows, g0.ct, g0.chunks, g0.slots), geo, "{tag}: geometry");
        assert_eq!(g0.per_sm, 2, "{tag}: two CTAs per SM");
        (g0.slots, Some(g0.slots.min(6)))
    });
}

/// `emu_bwd_rowwise` and `emu_bwd_whole`, gelu+norm and plain: `geo(tag, layer, dims, norm, gpu)`
/// checks the geometry and gives the partials (and the CTAs, where checked). On another device (one SM, other shared memory)
/// the partials, and so the bits, are the same.
fn emu_row_backward(spec: &str, (nb, n): (usize, usize), bv: cuda::BwdVariant, geo: impl Fn(&str, &Layer, Dims, bool, cuda::Gpu) -> (usize, Option<usize>)) {
    let seed = if bv == cuda::BwdVariant::Rowwise { 5000 } else { 7000 };
    let (layer, dims, [x, y, w, g], [xv, yv, wv, gv]) = bwd_inputs(spec, (nb, n), seed + (nb * 31 + n) as u64);
    let gpu = cuda::Gpu { sms: 3, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    for (gelu, norm) in [(true, true), (false, false)] {
        let st = Stages { gelu, norm };
        let tag = format!("{spec} B={nb} N={n} gelu={gelu} norm={norm} {}", bv.name());
        let (parts, grid) = geo(&tag, &layer, dims, norm, gpu);
        let f = run_host(&cuda::plan_fused_forward(&layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, gpu).unwrap(), &[&x, &y, &w]);
        let inputs: Vec<&Tensor> = if norm { vec![&x, &y, &w, &g, &f[0], &f[1]] } else { vec![&x, &y, &w, &g] };
        let (dx, dy, dw) = reference::fused_backward(layer.algebra(), dims, &xv, &yv, &wv, &gv, gelu, norm);
        let got = row_backward_matches(&tag, &layer, dims, st, bv, gpu, &inputs, (&dx, &dy, &dw), parts);
        let plan = |gpu| cuda::plan_fused_backward_with(&layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, bv, gpu).unwrap();
        if let Some(grid) = grid {
            assert_eq!(plan(gpu).launches[0].grid, (grid as u32, 1, 1), "{tag}: persistent grid");
        }
        let one = run_host(&plan(cuda::Gpu { sms: 1, smem_optin: 160 * 1024, dram_gbps: 3350.0 }), &inputs);
        assert!((0..3).all(|i| bits(&one[i]) == bits(&got[i])), "{tag}: depends on the device");
    }
}

/// Where the whole-row backward does not apply, the plan is the default's; its geometry at the
/// bench sizes.
#[test]
fn whole_falls_back_to_the_default() {
    let gpu = cuda::Gpu { sms: 132, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    for (spec, n, dtype) in [("3,0", 512, DType::BF16), ("3,0", 128, DType::F16), ("1,3", 64, DType::F32), ("2,2,1", 8, DType::F32), ("3,0", 4096, DType::F32)] {
        let layer = Layer::new(spec).unwrap();
        let dims = Dims { m: layer.blades(), b: 64, n };
        assert!(cuda::whole_geom(&layer, dims, dtype, gpu).is_none(), "{spec} N={n} {dtype}");
        for norm in [false, true] {
            let st = Stages { gelu: true, norm };
            let a = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Whole, gpu).unwrap();
            let b = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Cols, gpu).unwrap();
            let names = |p: &super::plan::Plan| p.launches.iter().map(|l| (l.name, l.grid, l.opts.clone())).collect::<Vec<_>>();
            assert_eq!(names(&a), names(&b), "{spec} N={n} {dtype} norm={norm}");
        }
    }
    // (B, N) → (rows per chunk, chunks, slots, CTAs per SM): two CTAs per SM at every bench size.
    for (spec, (b, n), want) in [
        ("3,0", (4096, 512), (4, 1024, 256, 2)),
        ("3,0", (16384, 128), (16, 1024, 256, 2)),
        ("3,0", (65536, 1024), (1, 65536, 256, 2)),
        ("2,0", (4096, 512), (8, 512, 256, 2)),
    ] {
        let layer = Layer::new(spec).unwrap();
        let dims = Dims { m: layer.blades(), b, n };
        let g = cuda::whole_geom(&layer, dims, DType::F32, gpu).expect("applies");
        assert_eq!((g.rows, g.chunks, g.slots, g.per_sm), want, "{spec} B={b} N={n}");
        assert!(2 * (g.smem + 1024) <= 228 * 1024, "{spec} B={b} N={n}: {} bytes", g.smem);
    }
}

/// The column kernel with the chunk sums folded into it (`BwdVariant::Fold`, cols.cu CL_FOLD = 1)
/// against the f64 reference (1e-5) and the default: the same partials summed by the same tree in
/// the same order, so d_x, d_y and d_w are bitwise the default's; no sum launch in its plan.
/// `levels`: the tree levels the kernel climbs. Without the norm the plan is the default's.
fn emu_bwd_fold(spec: &str, (nb, n): (usize, usize), levels: usize) {
    let (layer, dims, [x, y, w, g], [xv, yv, wv, gv]) = bwd_inputs(spec, (nb, n), 6000 + (nb * 31 + n) as u64);
    let alg = layer.algebra().clone();
    let dtype = DType::F32;
    let gpu = cuda::Gpu { sms: 3, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    for (gelu, norm) in [(true, true), (false, false)] {
        let st = Stages { gelu, norm };
        let tag = format!("{spec} B={nb} N={n} gelu={gelu} norm={norm} fold");
        let f = run_host(&cuda::plan_fused_forward(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, gpu).unwrap(), &[&x, &y, &w]);
        let inputs: Vec<&Tensor> = if norm { vec![&x, &y, &w, &g, &f[0], &f[1]] } else { vec![&x, &y, &w, &g] };
        let plan = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Fold, gpu).unwrap();
        let cols_plan = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Cols, gpu).unwrap();
        let names = |p: &super::plan::Plan| p.launches.iter().map(|l| l.name).collect::<Vec<_>>();
        let trees = cuda::tree_levels(&cols_plan);
        if !norm {
            assert_eq!(names(&plan), names(&cols_plan), "{tag}: the default's plan");
            continue;
        }
        assert_eq!(names(&plan), ["clifford_bwd_dot", "clifford_bwd_fold"], "{tag}: plan");
        assert_eq!(trees, levels, "{tag}: the default's tree levels");
        let (dx, dy, dw) = reference::fused_backward(&alg, dims, &xv, &yv, &wv, &gv, gelu, norm);
        let fo = run_host(&plan, &inputs);
        close(&format!("{tag} d_x"), &fo[0], &dx, 1e-5);
        close(&format!("{tag} d_y"), &fo[1], &dy, 1e-5);
        close(&format!("{tag} d_w"), &fo[2], &dw, 1e-5);
        let cols = run_host(&cols_plan, &inputs);
        for (i, what) in ["d_x", "d_y", "d_w"].into_iter().enumerate() {
            assert!(bits(&cols[i]) == bits(&fo[i]), "{tag}: {what} not bitwise the default's");
        }
    }
}

/// The folded sums' buffers at the bench sizes (Cl(3,0)): intermediate level words and counters,
/// level by level as the tree sums them; two launches (dot, column) instead of three (the default's
/// two tree levels are one launch, `cl_sum_tree2`, at up to 256 chunks).
#[test]
fn fold_sizes_at_the_bench_sizes() {
    let gpu = cuda::Gpu { sms: 132, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    let layer = Layer::new("3,0").unwrap();
    // (B, N) → (chunks, column tiles, sum launches of the default)
    for ((b, n), (chunks, tiles, trees)) in [((4096, 512), (64usize, 4usize, 1usize)), ((16384, 128), (256, 1, 1)), ((65536, 1024), (32, 8, 1))] {
        let dims = Dims { m: 8, b, n };
        let st = Stages { gelu: true, norm: true };
        let len = n * 20;
        let mut lvl = 0;
        let mut cnt = 0;
        let mut c = chunks;
        while c > 1 {
            c = c.div_ceil(16);
            lvl += if c > 1 { c * len } else { 0 };
            cnt += c * tiles;
        }
        assert_eq!(cuda::fold_sizes(chunks, len, tiles), (lvl, cnt), "B={b} N={n}");
        let fold = cuda::plan_fused_backward_with(&layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Fold, gpu).unwrap();
        let cols = cuda::plan_fused_backward_with(&layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Cols, gpu).unwrap();
        assert_eq!(fold.launches.len(), 2, "B={b} N={n}");
        assert_eq!(cols.launches.len(), 2 + trees, "B={b} N={n}");
        assert_eq!(fold.launches[1].grid, (tiles as u32, chunks as u32, 1), "B={b} N={n}");
        assert_eq!(fold.launches[1].grid, cols.launches[1].grid, "B={b} N={n}");
    }
}

/// Where the row-oriented backward does not apply, the plan is the default's.
#[test]
fn rowwise_falls_back_to_the_default() {
    let gpu = cuda::Gpu { sms: 132, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    for (spec, n, dtype) in [("3,0", 513, DType::F32), ("3,0", 1024, DType::F32), ("3,0", 512, DType::BF16), ("3,0", 128, DType::F16), ("1,3", 257, DType::F32), ("2,2,1", 8, DType::F32)] {
        let layer = Layer::new(spec).unwrap();
        let dims = Dims { m: layer.blades(), b: 64, n };
        for norm in [false, true] {
            let st = Stages { gelu: true, norm };
            assert!(cuda::rowwise_geom(&layer, dims, norm, dtype, gpu).is_none(), "{spec} N={n} {dtype}");
            let a = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Rowwise, gpu).unwrap();
            let b = cuda::plan_fused_backward_with(&layer, dims, dtype, st, cuda::RowVariant::Dynamic, cuda::BwdVariant::Cols, gpu).unwrap();
            let names = |p: &super::plan::Plan| p.launches.iter().map(|l| (l.name, l.grid, l.opts.clone())).collect::<Vec<_>>();
            assert_eq!(names(&a), names(&b), "{spec} N={n} {dtype} norm={norm}");
        }
    }
    // The sizes the bench reads: 2^21 as one row per step of 512 threads, 16384 × 128 as two rows of
    // 128 per step, both 256 chunks.
    let layer = Layer::new("3,0").unwrap();
    for ((b, n), want) in [((4096, 512), (1, 512, 256)), ((16384, 128), (2, 256, 256)), ((65536, 1024), (0, 0, 0))] {
        let dims = Dims { m: 8, b, n };
        let g = cuda::rowwise_geom(&layer, dims, true, DType::F32, gpu).map(|g| (g.rows, g.threads, g.chunks)).unwrap_or((0, 0, 0));
        assert_eq!(g, want, "B={b} N={n}");
    }
}

/// The forward's run-time step order (CL_DYN) where it applies: two multiprocessors and 30 steps of
/// 8 rows (Cl(2,0), N = 128: a team of 32), the last partial, so one CTA takes 26 tickets and every
/// CTA one past the end; out and rms within tolerance of the reference and bitwise the fixed
/// order's, with and without the norm; `run_host` checks that the counter is zero after the launch.
#[test]
fn emulated_dynamic_forward_takes_its_steps_at_run_time() {
    let layer = Layer::new("2,0").unwrap();
    let (nb, n) = (237, 128);
    let dims = Dims { m: 4, b: nb, n };
    let gpu = cuda::Gpu { sms: 2, smem_optin: 227 * 1024, dram_gbps: 3350.0 };
    assert!(nb.div_ceil(8) >= cuda::DYNAMIC_MIN_STEPS_PER_SM * gpu.sms);
    let (x, xv) = input(&[4, nb, n], DType::F32, 71, 1.0);
    let (y, yv) = input(&[4, nb, n], DType::F32, 72, 1.0);
    let (w, wv) = input(&[n, layer.paths()], DType::F32, 73, 0.5);
    for norm in [true, false] {
        let st = Stages { gelu: true, norm };
        let dynamic = cuda::plan_fused_forward(&layer, dims, DType::F32, st, cuda::RowVariant::Dynamic, gpu).unwrap();
        assert!(dynamic.launches[0].opts.iter().any(|o| o == "-DCL_DYN=1"), "norm={norm}: the dynamic order applies");
        let fixed = cuda::plan_fused_forward(&layer, dims, DType::F32, st, cuda::RowVariant::Staged, gpu).unwrap();
        let (a, b) = (run_host(&dynamic, &[&x, &y, &w]), run_host(&fixed, &[&x, &y, &w]));
        let (ro, rr) = reference::fused_forward(layer.algebra(), dims, &xv, &yv, &wv, true, norm);
        close(&format!("dynamic out norm={norm}"), &a[0], &ro, 1e-5);
        if let Some(rr) = rr {
            close("dynamic rms", &a[1], &rr, 1e-5);
        }
        for (p, q) in a.iter().zip(&b) {
            assert!(bits(p) == bits(q), "norm={norm}: dynamic bits = staged bits");
        }
    }
}

#[test]
fn forward_prologue_copies_two_steps_where_it_was_measured_faster() {
    let layer = Layer::new("3,0").unwrap();
    let gpu = cuda::Gpu { sms: 132, smem_optin: 227 * 1024, dram_gbps: 4800.0 };
    let st = Stages { gelu: true, norm: true };
    let one_step = |b: usize, n: usize| {
        let plan = cuda::plan_fused_forward(&layer, Dims { m: 8, b, n }, DType::F32, st, cuda::RowVariant::Staged, gpu).unwrap();
        assert_eq!(plan.launches.len(), 1, "{b} x {n}: one staged launch");
        plan.launches[0].opts.iter().any(|o| o == "-DCL_PRE2=0")
    };
    // Steps of 2 rows at N = 512: 15.5 per SM at B = 4096, 3.9 at B = 1024.
    assert!(!one_step(4096, 512) && !one_step(16384, 128) && !one_step(4096, 256));
    assert!(one_step(1024, 512) && one_step(1024, 128));
}

#[test]
fn backward_defaults_follow_the_measured_rule() {
    let cl3 = Layer::new("3,0").unwrap();
    use cuda::BwdVariant::{Cols, Pipe, Rowwise, Whole};
    let whole = [(16384, 128), (8192, 256), (4096, 512), (1024, 512), (1024, 128), (16384, 256), (65536, 256), (300, 300), (4096, 300)].map(|d| (d, Whole));
    let rest = [((32768, 64), Rowwise), ((65536, 64), Rowwise), ((131072, 64), Cols), ((6000, 512), Cols), ((16384, 512), Cols), ((1024, 1024), Pipe), ((2048, 1024), Pipe)];
    let want = whole.into_iter().chain(rest).chain([((4096, 1024), Cols), ((300, 100), Rowwise)]);
    for ((b, n), v) in want {
        let dims = Dims { m: 8, b, n };
        assert_eq!(cuda::BwdVariant::measured_default(&cl3, dims, true), v, "Cl(3,0) B={b} N={n}");
        assert_eq!(cuda::BwdVariant::measured_default(&cl3, dims, false), cuda::BwdVariant::Cols, "no norm: no dot pass to save");
    }
    let cl2 = Layer::new("2,0").unwrap();
    for (b, n) in [(4096, 512), (65536, 512), (1024, 1024), (65536, 1024), (1024, 128)] {
        assert_eq!(cuda::BwdVariant::measured_default(&cl2, Dims { m: 4, b, n }, true), Whole, "Cl(2,0) B={b} N={n}: measured");
    }
    assert_eq!(cuda::BwdVariant::measured_default(&cl2, Dims { m: 4, b: 4096, n: 64 }, true), Rowwise, "Cl(2,0) N < 128");
    let sta = Layer::new("1,3").unwrap();
    assert_eq!(cuda::BwdVariant::measured_default(&sta, Dims { m: 16, b: 1024, n: 128 }, true), cuda::BwdVariant::Cols, "16 blades: not measured");
}

fn emu_fc(spec: &str, dims: (usize, usize, usize), dtype: DType) {
    // The cluster build of fc3 runs in its own test (it emulates three blocks at once); the
    // warp-specialised build (mbarriers, bulk copies) is checked on the GPU only.
    let vars: Vec<FcVariant> = FcVariant::ALL.into_iter().filter(|&v| !matches!(v, FcVariant::Cluster | FcVariant::Ws)).collect();
    emu_fc_variants(spec, dims, dtype, &vars);
}

/// The fully connected forward through each of `variants` (and the tile backward) against the f64
/// reference, with and without the norm.
fn emu_fc_variants(spec: &str, (nb, nin, nout): (usize, usize, usize), dtype: DType, variants: &[FcVariant]) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n: nin };
    let seed = 2000 + (nb * 131 + nin * 7 + nout) as u64;
    let (x, xv) = input(&[dims.m, nb, nin], dtype, seed, 1.0);
    let (y, yv) = input(&[dims.m, nb, nin], dtype, seed + 1, 1.0);
    let (w, wv) = input(&[layer.paths(), nin, nout], DType::F32, seed + 2, 1.0 / ((nin * layer.paths()) as f64).sqrt());
    let (g, gv) = input(&[dims.m, nb, nout], dtype, seed + 3, 1.0);
    let tol = dtype.tolerance();
    // f32 forwards on fc3 run bf16 halves (3e-4, as on the GPU); the normed backward reads their o, rms.
    let tol_fwd = crate::f32_products::cuda_tolerance(dtype, true);
    for norm in [false, true] {
        let tol_bwd = if norm { tol_fwd } else { tol };
        let tag = format!("{spec} fc B={nb} N={nin}->{nout} {dtype} norm={norm}");
        let (ro, rr) = reference::fc_forward(&alg, dims, nout, &xv, &yv, &wv, norm);
        // Both forward kernels (v2 applies to half types up to 3 blades per grade), x and y read as
        // pairs of channels or one by one.
        let mut f = Vec::new();
        for &var in variants {
            for aligned in [true, false] {
                f = run_host(&cuda::plan_fc_forward_variant(&layer, dims, nout, dtype, Stages { gelu: true, norm }, var, aligned).unwrap(), &[&x, &y, &w]);
                close(&format!("{tag} {} aligned={aligned} out", var.name()), &f[0], &ro, tol_fwd);
                if let Some(rr) = &rr {
                    close(&format!("{tag} {} aligned={aligned} rms", var.name()), &f[1], rr, tol_fwd);
                }
            }
        }
        // The tile engine explicitly (the GEMM backward, the default, has its own emulated test).
        let bwd = cuda::plan_fc_backward_variant(&layer, dims, nout, dtype, norm, super::fcb::FcBwdVariant::Tile).unwrap();
        let gr = if let Some(rr) = rr {
            close(&format!("{tag} rms"), &f[1], &rr, tol_fwd);
            run_host(&bwd, &[&x, &y, &w, &g, &f[2], &f[1]])
        } else {
            run_host(&bwd, &[&x, &y, &w, &g])
        };
        let (dx, dy, dw) = reference::fc_backward(&alg, dims, nout, &xv, &yv, &wv, &gv, norm);
        close(&format!("{tag} d_x"), &gr[0], &dx, tol_bwd);
        close(&format!("{tag} d_y"), &gr[1], &dy, tol_bwd);
        close(&format!("{tag} d_w"), &gr[2], &dw, tol_bwd);
    }
}

fn emu_linear(spec: &str, (nb, nin, nout): (usize, usize, usize), dtype: DType) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n: nin };
    let seed = 3000 + (nb * 131 + nin * 7 + nout) as u64;
    let (x, xv) = input(&[dims.m, nb, nin], dtype, seed, 1.0);
    let (w, wv) = input(&[layer.grades(), nin, nout], DType::F32, seed + 1, 1.0 / (nin as f64).sqrt());
    let (bias, bv) = input(&[nout], DType::F32, seed + 2, 1.0);
    let (g, gv) = input(&[dims.m, nb, nout], dtype, seed + 3, 1.0);
    let tol = dtype.tolerance();
    let tag = format!("{spec} linear B={nb} N={nin}->{nout} {dtype}");
    for var in cuda::LinearVariant::ALL {
        let tag = format!("{tag} ({})", var.name());
        // f32 through cuBLAS: three bf16 GEMMs per f32 one (3e-4 allowed on tensor cores); under 3e-5
        // here, which a lost lo half (~1e-3) would exceed.
        let tol = if dtype == DType::F32 && var == cuda::LinearVariant::Blas && blas::f32_halves() { 3e-5 } else { tol };
        let fwd = |bias: bool| match var {
            cuda::LinearVariant::Tiles => cuda::plan_linear_forward(&layer, dims, nout, dtype, bias).unwrap(),
            cuda::LinearVariant::Blas => blas::plan_forward(&layer, dims, nout, dtype, bias).unwrap(),
        };
        let bwd = match var {
            cuda::LinearVariant::Tiles => cuda::plan_linear_backward(&layer, dims, nout, dtype).unwrap(),
            cuda::LinearVariant::Blas => blas::plan_backward(&layer, dims, nout, dtype).unwrap(),
        };
        let o = run_host(&fwd(true), &[&x, &w, &bias]);
        close(&format!("{tag} out"), &o[0], &reference::linear_forward(&alg, dims, nout, &xv, &wv, Some(&bv)), tol);
        let o = run_host(&fwd(false), &[&x, &w]);
        close(&format!("{tag} out without bias"), &o[0], &reference::linear_forward(&alg, dims, nout, &xv, &wv, None), tol);
        let gr = run_host(&bwd, &[&x, &w, &g]);
        let (dx, dw, db) = reference::linear_backward(&alg, dims, nout, &xv, &wv, &gv);
        close(&format!("{tag} d_x"), &gr[0], &dx, tol);
        close(&format!("{tag} d_w"), &gr[1], &dw, tol);
        close(&format!("{tag} d_bias"), &gr[2], &db, tol);
    }
}

/// Run cases on two threads (the machine's cores; each emulated launch runs 256 threads itself).
fn run_cases(cases: Vec<Box<dyn Fn() + Send + Sync>>) {
    assert!(cxx().is_some(), "the host emulation of the CUDA kernels needs a C++ compiler (c++, g++ or clang++)");
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let t0 = std::time::Instant::now();
                case();
                eprintln!("emulated case {i}: {:.1} s", t0.elapsed().as_secs_f64());
            });
        }
    });
}

#[test]
fn emulated_fused_kernels_match_the_reference() {
    let mut cases: Vec<Box<dyn Fn() + Send + Sync>> = Vec::new();
    // N = 8: 4-wide vectors with rows held in registers; N = 7: scalar path, rows recomputed.
    for dtype in DType::ACTIVATIONS {
        cases.push(Box::new(move || emu_fused("2,0", (3, 8), dtype)));
        cases.push(Box::new(move || emu_fused("2,0", (2, 7), dtype)));
    }
    // 2-wide vectors (16 blades); a row longer than one step per thread (N > 256·4).
    cases.push(Box::new(|| emu_fused("3,0", (2, 1028), DType::F32)));
    cases.push(Box::new(|| emu_fused("1,3", (2, 6), DType::BF16)));
    // Staged forward: persistent CTAs over several steps (the last one partial), both buffers;
    // threads of a team past the row's end (N = 200: 50 groups in a team of 64).
    cases.push(Box::new(|| emu_fused("3,0", (70, 64), DType::F32)));
    // 19 steps on three SMs: the fixed order's prologue copies two steps (CL_PRE2).
    cases.push(Box::new(|| emu_fused("3,0", (150, 64), DType::F32)));
    cases.push(Box::new(|| emu_fused("2,0", (29, 200), DType::BF16)));
    // Pipelined column backward: N = 300 (three column tiles of 128, the last 44 wide), B = 1499
    // (300 chunks of 5 rows, the last of 4: three row steps per item; chunk sums 300 → 19 → 2 → 1).
    cases.push(Box::new(|| emu_bwd_pipe("3,0", (1499, 300))));
    if full() {
        for spec in ["3,0", "3,0,1", "1,3"] {
            for dtype in DType::ACTIVATIONS {
                cases.push(Box::new(move || emu_fused(spec, (5, 12), dtype)));
                cases.push(Box::new(move || emu_fused(spec, (3, 129), dtype)));
            }
        }
    }
    run_cases(cases);
}

#[test]
fn emulated_rowwise_backward_matches_the_reference() {
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        // One row per step of 320 threads (300 channels, 4-wide statistics, two teams of 128), 250
        // chunks of 6 rows (the last 1) on 3 CTAs, chunk sums 250 → 16 → 1.
        Box::new(|| emu_bwd_rowwise("3,0", (1499, 300), (1, 320, 250))),
        // Small N: 7 rows of 33 side by side (scalar statistics, teams of 64, two rounds), the last
        // step of the last chunk partial; N = 1: 256 rows per step, 32 rounds of 8 teams; B = 1.
        Box::new(|| emu_bwd_rowwise("3,0", (1006, 33), (7, 256, 144))),
        Box::new(|| emu_bwd_rowwise("3,0", (1000, 1), (256, 256, 4))),
        Box::new(|| emu_bwd_rowwise("3,0", (1, 100), (2, 224, 1))),
        // 512 threads (one row of 512 per step); Cl(2,0): one row of 129 per step, 256 threads (the
        // scalar statistics' team of 256 is wider than the row).
        Box::new(|| emu_bwd_rowwise("3,0", (37, 512), (1, 512, 37))),
        Box::new(|| emu_bwd_rowwise("2,0", (521, 129), (1, 256, 174))),
    ];
    run_cases(cases);
}

#[test]
fn emulated_whole_backward_matches_the_reference() {
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        // B = 1: one chunk, one slot (d_w written directly); 100 channels in a tile of 128.
        Box::new(|| emu_bwd_whole("3,0", (1, 100), (16, 128, 1, 1))),
        // Chunks of 8 rows of 300 channels (two channel rounds of 256 threads, the second 44 wide;
        // 4-wide statistics in teams of 128), 188 chunks (the last 3 rows) on 6 CTAs.
        Box::new(|| emu_bwd_whole("3,0", (1499, 300), (8, 256, 188, 188))),
        // More chunks than slots: 313 chunks of 16 rows (the last 11) in 157 slots of 2 (the last
        // of 1); N = 37 prime (scalar statistics, teams of 64, 4 row lanes of 64 channels).
        Box::new(|| emu_bwd_whole("3,0", (5003, 37), (16, 64, 313, 157))),
        // Whole rows of 512: 4 per chunk, 10 chunks (the last 1 row).
        Box::new(|| emu_bwd_whole("3,0", (37, 512), (4, 256, 10, 10))),
        // Cl(2,0): N = 129 (scalar statistics in one team of 256, wider than the row); N = 8 (32 row
        // lanes, 13 rows in one chunk of 16).
        Box::new(|| emu_bwd_whole("2,0", (521, 129), (16, 256, 33, 33))),
        Box::new(|| emu_bwd_whole("2,0", (13, 8), (16, 8, 1, 1))),
    ];
    run_cases(cases);
}

#[test]
fn emulated_folded_chunk_sums_match_the_default() {
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        // Three column tiles (the last 44 channels wide), 300 chunks of 5 rows: the kernel climbs
        // 300 → 19 → 2 → 1 (the last group of each level partial), 4-wide loads.
        Box::new(|| emu_bwd_fold("3,0", (1499, 300), 2)),
        // 10 chunks of 2 rows: one level straight into d_w (no intermediate buffer).
        Box::new(|| emu_bwd_fold("3,0", (20, 512), 1)),
        // Cl(2,0), P = 10, N = 129: 1290 words per partial, scalar loads; the second tile 1 wide;
        // 261 chunks of 2 rows, 261 → 17 → 2 → 1.
        Box::new(|| emu_bwd_fold("2,0", (521, 129), 2)),
    ];
    run_cases(cases);
}

#[test]
fn emulated_tensor_core_tiles_match_the_reference() {
    let mut cases: Vec<Box<dyn Fn() + Send + Sync>> = Vec::new();
    for dtype in DType::ACTIVATIONS {
        // Edges of the 16-row, 8-column tiles.
        cases.push(Box::new(move || emu_fc("2,0", (17, 9, 11), dtype)));
        cases.push(Box::new(move || emu_linear("2,0", (17, 9, 11), dtype)));
    }
    // Split K in the weight gradients (a long batch), Cl(3,0) tiles.
    cases.push(Box::new(|| emu_fc("2,0", (130, 3, 5), DType::F32)));
    cases.push(Box::new(|| emu_linear("2,0", (300, 3, 5), DType::BF16)));
    cases.push(Box::new(|| emu_fc("3,0", (33, 17, 9), DType::F32)));
    // FC v2: two groups of 128 rows (the second partial), even N (pairs), two column tiles.
    cases.push(Box::new(|| emu_fc("3,0", (130, 18, 133), DType::BF16)));
    cases.push(Box::new(|| emu_fc("3,0", (7, 33, 5), DType::F16)));
    // n = 5: the fully connected product's CUDA-core fallback.
    cases.push(Box::new(|| emu_fc("2,2,1", (3, 2, 3), DType::F32)));
    cases.push(Box::new(|| emu_linear("2,2,1", (3, 5, 4), DType::F16)));
    if full() {
        for spec in ["3,0", "3,0,1", "1,3"] {
            for dtype in DType::ACTIVATIONS {
                cases.push(Box::new(move || emu_fc(spec, (19, 20, 33), dtype)));
                cases.push(Box::new(move || emu_linear(spec, (19, 20, 33), dtype)));
            }
        }
    }
    run_cases(cases);
}

/// FC forward v3 (warpgroup MMA, `fc3.cu`; the emulation computes each wgmma at issue from shared
/// memory): three row blocks of 64 with a partial last one (B = 130), the 3-stage ring wrapping
/// (N = 37: three chunks, the last partial; N = 50: four), one chunk only (N = 2: the prologue's
/// second stage empty), two column tiles of 192 with a partial second (N_out = 200), N not a
/// multiple of 4 (channels one by one), multiples of 4 (quads) and of 8 (the staged raw ring), Cl(2,0)'s
/// types of two row blocks.
#[test]
fn emulated_fc_v3_matches_the_reference() {
    let v3 = [FcVariant::Wgmma];
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        Box::new(move || emu_fc_variants("3,0", (130, 37, 200), DType::BF16, &v3)),
        Box::new(move || emu_fc_variants("3,0", (65, 50, 7), DType::F16, &v3)),
        Box::new(move || emu_fc_variants("3,0", (3, 2, 5), DType::BF16, &v3)),
        Box::new(move || emu_fc_variants("2,0", (70, 33, 193), DType::F16, &v3)),
        // N a multiple of 4 (not 8): quads of channels from global memory, the last chunk a single
        // quad (N = 36), and N = 4.
        Box::new(move || emu_fc_variants("3,0", (130, 36, 200), DType::BF16, &v3)),
        Box::new(move || emu_fc_variants("3,0", (9, 4, 3), DType::F16, &v3)),
        Box::new(move || emu_fc_variants("2,0", (70, 20, 193), DType::F16, &v3)),
        // N a multiple of 8: the staged path (raw ring); one chunk (N = 8, zero-filled upper half),
        // two (N = 24: the raw ring's prologue only), five with a partial last (N = 72, B = 130).
        Box::new(move || emu_fc_variants("3,0", (130, 72, 200), DType::BF16, &v3)),
        Box::new(move || emu_fc_variants("3,0", (5, 8, 9), DType::F16, &v3)),
        Box::new(move || emu_fc_variants("2,0", (70, 24, 193), DType::BF16, &v3)),
    ];
    run_cases(cases);
}

/// FC forward v7, f32 on fc3 (`F3_X3`: terms and weights as bf16 hi and lo tiles, three products per
/// path and chunk, two stages of 96-column tiles): against the f64 reference at the 3e-4 of f32 on
/// tensor cores, and under 3e-5, which a single bf16 product (~3e-3) or a lost lo term (~1e-3) would
/// exceed. Rows past B (130), the two stages wrapping (N = 37, 50: three and four chunks), one chunk
/// (N = 5, 4), quads (N a multiple of 4) and channels one by one (aligned = false or odd N), two column
/// tiles (N_out = 97: 56 + 48), Cl(2,0)'s types.
#[test]
fn emulated_fc_f32_on_bf16_halves_matches_the_reference() {
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        Box::new(|| emu_fc_x3("3,0", (130, 37, 97))),
        Box::new(|| emu_fc_x3("3,0", (65, 36, 200))),
        Box::new(|| emu_fc_x3("3,0", (3, 5, 9))),
        Box::new(|| emu_fc_x3("2,0", (70, 4, 193))),
        Box::new(|| emu_fc_x3("2,0", (9, 50, 16))),
    ];
    run_cases(cases);
}

fn emu_fc_x3(spec: &str, (nb, nin, nout): (usize, usize, usize)) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n: nin };
    let seed = 2700 + (nb * 131 + nin * 7 + nout) as u64;
    let (x, xv) = input(&[dims.m, nb, nin], DType::F32, seed, 1.0);
    let (y, yv) = input(&[dims.m, nb, nin], DType::F32, seed + 1, 1.0);
    let (w, wv) = input(&[layer.paths(), nin, nout], DType::F32, seed + 2, 1.0 / ((nin * layer.paths()) as f64).sqrt());
    for norm in [false, true] {
        let (ro, rr) = reference::fc_forward(&alg, dims, nout, &xv, &yv, &wv, norm);
        for aligned in [true, false] {
            let tag = format!("{spec} fc f32 B={nb} N={nin}->{nout} norm={norm} aligned={aligned}");
            let plan = cuda::plan_fc_forward_variant(&layer, dims, nout, DType::F32, Stages { gelu: true, norm }, FcVariant::Wgmma, aligned).unwrap();
            let product = plan.launches.iter().find(|l| l.name == "clifford_fc3").unwrap_or_else(|| panic!("{tag}: fc3 is planned"));
            assert!(product.opts.iter().any(|o| o == "-DF3_X3=1"), "{tag}: the f32 build");
            let f = run_host(&plan, &[&x, &y, &w]);
            let err = ember_core::compare::rel_err(&f[0].to_vec_f64().unwrap(), &ro);
            eprintln!("{tag}: out {err:e}");
            close(&format!("{tag} out"), &f[0], &ro, 3e-5);
            if let Some(rr) = &rr {
                close(&format!("{tag} rms"), &f[1], rr, 3e-5);
            }
        }
    }
}

/// FC forward v6 (`F3_CLUSTER`: the types of a row block in one cluster, each CTA copying its share
/// of the staged x, y and gates and reading the rest from the others' shared memory): against the
/// f64 reference, and bit for bit the plain staged product (same products, same order). Cl(3,0)'s
/// three types (planes split 6/6/5 by owner), Cl(2,0)'s two; one chunk, two (the raw ring's
/// prologue only) and five with a partial last, rows past B.
#[test]
fn emulated_fc_cluster_matches_the_reference_and_fc3() {
    let cases: Vec<Box<dyn Fn() + Send + Sync>> = vec![
        Box::new(|| emu_fc_cluster("3,0", (130, 72, 200), DType::BF16)),
        Box::new(|| emu_fc_cluster("3,0", (5, 8, 9), DType::F16)),
        Box::new(|| emu_fc_cluster("2,0", (70, 24, 193), DType::BF16)),
    ];
    run_cases(cases);
}

fn emu_fc_cluster(spec: &str, (nb, nin, nout): (usize, usize, usize), dtype: DType) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n: nin };
    let seed = 2500 + (nb * 131 + nin * 7 + nout) as u64;
    let (x, xv) = input(&[dims.m, nb, nin], dtype, seed, 1.0);
    let (y, yv) = input(&[dims.m, nb, nin], dtype, seed + 1, 1.0);
    let (w, wv) = input(&[layer.paths(), nin, nout], DType::F32, seed + 2, 1.0 / ((nin * layer.paths()) as f64).sqrt());
    for norm in [false, true] {
        let tag = format!("{spec} fc cluster B={nb} N={nin}->{nout} {dtype} norm={norm}");
        let st = Stages { gelu: true, norm };
        let plan = cuda::plan_fc_forward_variant(&layer, dims, nout, dtype, st, FcVariant::Cluster, true).unwrap();
        assert!(plan.launches.iter().any(|l| l.name == "clifford_fc3_cluster"), "{tag}: the cluster product is planned");
        let f = run_host(&plan, &[&x, &y, &w]);
        let plain = run_host(&cuda::plan_fc_forward_variant(&layer, dims, nout, dtype, st, FcVariant::Wgmma, true).unwrap(), &[&x, &y, &w]);
        let (ro, rr) = reference::fc_forward(&alg, dims, nout, &xv, &yv, &wv, norm);
        close(&format!("{tag} out"), &f[0], &ro, dtype.tolerance());
        if let Some(rr) = &rr {
            close(&format!("{tag} rms"), &f[1], rr, dtype.tolerance());
        }
        for (i, (a, b)) in f.iter().zip(&plain).enumerate() {
            assert!(a.to_vec_f64().unwrap() == b.to_vec_f64().unwrap(), "{tag}: output {i} differs from the plain staged product");
        }
    }
}

/// FC backward v1 (terms through memory, per-grade GEMMs run by the host GEMM) against the f64
/// reference, with and without the norm (its o and r from the reference, as the forward hands them
/// over in f32).
fn emu_fc_gemm_bwd(spec: &str, (nb, nin, nout): (usize, usize, usize), dtype: DType) {
    let layer = Layer::new(spec).unwrap();
    let alg = layer.algebra().clone();
    let dims = Dims { m: layer.blades(), b: nb, n: nin };
    let seed = 4000 + (nb * 131 + nin * 7 + nout) as u64;
    let (x, xv) = input(&[dims.m, nb, nin], dtype, seed, 1.0);
    let (y, yv) = input(&[dims.m, nb, nin], dtype, seed + 1, 1.0);
    let (w, wv) = input(&[layer.paths(), nin, nout], DType::F32, seed + 2, 1.0 / ((nin * layer.paths()) as f64).sqrt());
    let (g, gv) = input(&[dims.m, nb, nout], dtype, seed + 3, 1.0);
    let tol = dtype.tolerance();
    // The norm from N_out = 7, as in the GPU suite's `check_fc` (below that it is ill-conditioned).
    for norm in [false, true].into_iter().filter(|&nm| !nm || nout >= 7) {
        let tag = format!("{spec} fc gemm backward B={nb} N={nin}->{nout} {dtype} norm={norm}");
        // The forward through the same terms and per-grade GEMMs (EMBER_CLIFFORD_FC=blas).
        let fplan = cuda::plan_fc_forward_variant(&layer, dims, nout, dtype, Stages { gelu: true, norm }, FcVariant::Blas, true).unwrap();
        assert_eq!(fplan.gemms.len(), layer.grades(), "{tag}: the cuBLAS forward plan");
        let f = run_host(&fplan, &[&x, &y, &w]);
        let (ro, rr) = reference::fc_forward(&alg, dims, nout, &xv, &yv, &wv, norm);
        close(&format!("{tag} blas forward out"), &f[0], &ro, tol);
        if let Some(rr) = &rr {
            close(&format!("{tag} blas forward rms"), &f[1], rr, tol);
        }
        let plan = cuda::plan_fc_backward_variant(&layer, dims, nout, dtype, norm, super::fcb::FcBwdVariant::Gemm).unwrap();
        assert!(!plan.gemms.is_empty(), "{tag}: the GEMM plan");
        let gr = if norm {
            let o = reference::fc_layer(&alg, dims, nout, &xv, &yv, &wv);
            let (_, r) = reference::fc_forward(&alg, dims, nout, &xv, &yv, &wv, true);
            let o = Tensor::from_f64(&o, &[dims.m, nb, nout], DType::F32, Device::Cpu).unwrap();
            let r = Tensor::from_f64(&r.unwrap(), &[nb, layer.grades()], DType::F32, Device::Cpu).unwrap();
            run_host(&plan, &[&x, &y, &w, &g, &o, &r])
        } else {
            run_host(&plan, &[&x, &y, &w, &g])
        };
        let (dx, dy, dw) = reference::fc_backward(&alg, dims, nout, &xv, &yv, &wv, &gv, norm);
        // f32: three bf16 GEMMs per f32 one (3e-4 allowed on tensor cores); under 3e-5 here, which a
        // lost lo half (~1e-3) or single bf16 GEMMs (~3e-3) would exceed.
        let tol_b = if dtype == DType::F32 { 3e-5 } else { tol };
        close(&format!("{tag} d_x"), &gr[0], &dx, tol_b);
        close(&format!("{tag} d_y"), &gr[1], &dy, tol_b);
        close(&format!("{tag} d_w"), &gr[2], &dw, tol_b);
        if dtype == DType::F32 {
            eprintln!("{tag}: d_x {:e} d_w {:e}", ember_core::compare::rel_err(&gr[0].to_vec_f64().unwrap(), &dx), ember_core::compare::rel_err(&gr[2].to_vec_f64().unwrap(), &dw));
        }
    }
}

#[test]
fn emulated_fc_gemm_backward_matches_the_reference() {
    let mut cases: Vec<Box<dyn Fn() + Send + Sync>> = Vec::new();
    for dtype in DType::ACTIVATIONS {
        cases.push(Box::new(move || emu_fc_gemm_bwd("2,0", (5, 7, 9), dtype)));
        cases.push(Box::new(move || emu_fc_gemm_bwd("3,0", (17, 9, 11), dtype)));
    }
    // A single row and channel; 16 blades (Cl(1,3): 128 pairs).
    cases.push(Box::new(|| emu_fc_gemm_bwd("3,0", (1, 1, 3), DType::BF16)));
    cases.push(Box::new(|| emu_fc_gemm_bwd("1,3", (3, 5, 4), DType::F16)));
    // The GPU checks' normed size with 3 output channels (the norm's conditioning, see suite.rs).
    cases.push(Box::new(|| emu_fc_gemm_bwd("3,0", (127, 129, 9), DType::BF16)));
    if full() {
        for spec in ["3,0,1", "1,3"] {
            for dtype in DType::ACTIVATIONS {
                cases.push(Box::new(move || emu_fc_gemm_bwd(spec, (19, 20, 33), dtype)));
            }
        }
    }
    run_cases(cases);
}

/// The default row kernels: staged up to 8 blades, with the run-time step order only on devices whose
/// DRAM peak is below `DYNAMIC_MAX_DRAM_GBPS` (or unknown: fixed order); rows for 16 blades.
#[test]
fn default_row_order_follows_the_dram_rate() {
    let gpu = |dram_gbps| cuda::Gpu { sms: 132, smem_optin: 227 * 1024, dram_gbps };
    let cl3 = Layer::new("3,0").unwrap();
    assert_eq!(cuda::RowVariant::default_for(&cl3, gpu(3350.0)), cuda::RowVariant::Dynamic, "H100-class DRAM");
    assert_eq!(cuda::RowVariant::default_for(&cl3, gpu(4800.0)), cuda::RowVariant::Staged, "H200-class DRAM");
    assert_eq!(cuda::RowVariant::default_for(&cl3, gpu(0.0)), cuda::RowVariant::Staged, "DRAM rate unknown");
    assert_eq!(cuda::RowVariant::default_for(&Layer::new("1,3").unwrap(), gpu(3350.0)), cuda::RowVariant::Rows, "16 blades");
}

/// The two tree levels in one launch (`cl_sum_tree2`, 16 < chunks ≤ 256) give the bits of the two
/// launches, on partials of mixed sign and magnitude (so that the order of the additions shows),
/// with a word count that is not a multiple of the CTA's 16 words.
#[test]
fn emulated_two_level_sum_is_the_two_launches_bitwise() {
    for (chunks, len) in [(17usize, 37usize), (100, 1000), (256, 16)] {
        let noise = Tensor::randn(&[chunks, len], DType::F32, Device::Cpu, 900 + chunks as u64).unwrap().to_vec_f64().unwrap();
        // Magnitudes from 1e-3 to 1e3 by position, so rounding depends on the order of the additions.
        let vals: Vec<f32> = noise.iter().enumerate().map(|(k, v)| (v * 10f64.powi((k % 7) as i32 - 3)) as f32).collect();
        let part = Tensor::from_vec(vals, &[chunks, len]).unwrap();
        let run = |by_level: bool| {
            let mut plan = super::plan::Plan::new(1);
            let out = plan.output(&[len], DType::F32);
            if by_level {
                cuda::sum_tree_by_level(&mut plan, 0, out, chunks, len).unwrap();
            } else {
                cuda::sum_tree(&mut plan, 0, out, chunks, len).unwrap();
            }
            let names: Vec<&str> = plan.launches.iter().map(|l| l.name).collect();
            (names, run_host(&plan, &[&part]).remove(0))
        };
        let (one, a) = run(false);
        let (two, b) = run(true);
        assert_eq!(one, ["clifford_sum_tree2"], "chunks={chunks}");
        assert_eq!(two, ["clifford_sum_tree", "clifford_sum_tree"], "chunks={chunks}");
        assert!(bits(&a) == bits(&b), "chunks={chunks} len={len}: not the two launches' bits");
        // And the sums themselves, against f64.
        let p = part.to_vec_f64().unwrap();
        let got = a.to_vec_f64().unwrap();
        for i in 0..len {
            let want: f64 = (0..chunks).map(|c| p[c * len + i]).sum();
            assert!((got[i] - want).abs() <= 1e-4 * (1.0 + want.abs()) * chunks as f64, "chunks={chunks} word {i}: {} vs {want}", got[i]);
        }
    }
}
