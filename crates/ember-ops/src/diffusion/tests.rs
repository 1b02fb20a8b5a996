use super::suite::Problem;
use super::*;
use crate::harness::check::{CheckCtx, Tier};
use crate::OpFamily;
use ember_core::Error;

/// A two-mesh problem small enough for finite differences over every input.
fn small_problem() -> Problem {
    Problem::new(&[4, 3], 3, 5, DType::F64, true, 42).unwrap()
}

/// L = Σ out ⊙ d_out + Σ spectral ⊙ d_spectral, so dL/dx and dL/dtimes are backward's outputs.
fn loss(p: &Problem, x: &[f64], times: &[f64]) -> f64 {
    let r = &p.r;
    let d = reference::Dims { k: p.k, c: p.c, offsets: &p.offsets };
    let (out, spectral) = reference::forward(x, &r.basis, &r.mass, &r.evals, times, d);
    let a: f64 = out.iter().zip(&r.d_out).map(|(o, w)| o * w).sum();
    let b: f64 = spectral.iter().zip(r.d_spectral.as_ref().unwrap()).map(|(s, w)| s * w).sum();
    a + b
}

#[test]
fn reference_gradients_match_finite_differences() {
    let p = small_problem();
    let r = &p.r;
    let d = reference::Dims { k: p.k, c: p.c, offsets: &p.offsets };
    let (_, spectral) = reference::forward(&r.x, &r.basis, &r.mass, &r.evals, &r.times, d);
    let (d_x, d_times) = reference::backward(&r.basis, &r.mass, &r.evals, &r.times, &spectral, &r.d_out, r.d_spectral.as_deref(), d);
    let h = 1e-6;
    for i in 0..r.x.len() {
        let (mut xp, mut xm) = (r.x.clone(), r.x.clone());
        xp[i] += h;
        xm[i] -= h;
        let fd = (loss(&p, &xp, &r.times) - loss(&p, &xm, &r.times)) / (2.0 * h);
        assert!((fd - d_x[i]).abs() <= 1e-7 * (1.0 + fd.abs()), "d_x[{i}]: fd {fd} vs {}", d_x[i]);
    }
    for c in 0..p.c {
        let (mut tp, mut tm) = (r.times.clone(), r.times.clone());
        tp[c] += h;
        tm[c] -= h;
        let fd = (loss(&p, &r.x, &tp) - loss(&p, &r.x, &tm)) / (2.0 * h);
        assert!((fd - d_times[c]).abs() <= 1e-7 * (1.0 + fd.abs()), "d_times[{c}]: fd {fd} vs {}", d_times[c]);
    }
    // The gradients are not trivially zero.
    assert!(d_x.iter().any(|v| v.abs() > 1e-3) && d_times.iter().any(|v| v.abs() > 1e-3));
}

#[test]
fn reference_known_values() {
    // basis = identity, mass = 1: spectral = e ⊙ x and out = spectral.
    let (v, c) = (3, 2);
    let x = vec![1.0, -2.0, 0.5, 4.0, -1.5, 3.0];
    let basis = vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    let mass = vec![1.0; v];
    let evals = vec![0.0, 1.0, 2.0];
    let times = vec![0.5, 0.25];
    let d = reference::Dims { k: 3, c, offsets: &[0, v] };
    let (out, spectral) = reference::forward(&x, &basis, &mass, &evals, &times, d);
    for k in 0..3 {
        for cc in 0..c {
            let want = (-evals[k] * times[cc]).exp() * x[k * c + cc];
            assert!((spectral[k * c + cc] - want).abs() < 1e-15 && (out[k * c + cc] - want).abs() < 1e-15);
        }
    }
    // Mass scales the projection: mass = 2 doubles spectral and out.
    let (out2, _) = reference::forward(&x, &basis, &[2.0; 3], &evals, &times, d);
    assert!(out2.iter().zip(&out).all(|(a, b)| (a - 2.0 * b).abs() < 1e-15));
}

#[test]
fn cpu_fast_path_matches_reference_in_every_dtype() {
    ember_core::set_poison_outputs(true);
    let rows = Family.check(&CheckCtx::new(Device::Cpu, Tier::Quick)).unwrap();
    // 3 single-mesh cases × 4 quantities + 1 batch × 8 (vs reference, vs per-mesh), per dtype, + determinism.
    assert_eq!(rows.len(), 3 * (3 * 4 + 8) + 3);
    for r in &rows {
        assert!(r.pass(), "{r:?}");
    }
}

#[test]
fn f64_runs_the_reference_and_one_mesh_equals_a_batch_of_one() {
    let p = Problem::new(&[9], 4, 3, DType::F64, true, 7).unwrap();
    let evals = p.evals.try_clone().unwrap().reshape(&[4]).unwrap();
    let ds = p.d_spectral.as_ref().unwrap().try_clone().unwrap().reshape(&[4, 3]).unwrap();
    let f = forward(&p.x, &p.basis, &p.mass, &evals, &p.times).unwrap();
    assert_eq!(f.spectral.shape(), &[4, 3]);
    let g = backward(&p.basis, &p.mass, &evals, &p.times, &f, &p.d_out, Some(&ds)).unwrap();
    let [out, spectral, d_x, d_times] = p.reference();
    assert_eq!(f.out.to_vec_f64().unwrap(), out);
    assert_eq!(f.spectral.to_vec_f64().unwrap(), spectral);
    assert_eq!(g.d_x.to_vec_f64().unwrap(), d_x);
    assert_eq!(g.d_times.to_vec_f64().unwrap(), d_times);
    let batch = MeshBatch::new(&p.basis, &p.mass, &p.evals, &[0, 9]).unwrap();
    let fb = forward_batch(&batch, &p.x, &p.times).unwrap();
    assert_eq!(fb.spectral.shape(), &[1, 4, 3]);
    assert_eq!(fb.out.to_vec_f64().unwrap(), out);
}

#[test]
fn cpu_batch_is_bitwise_the_per_mesh_results_and_deterministic() {
    for dtype in DType::ACTIVATIONS {
        let p = Problem::new(&[33, 1, 70], 6, 10, dtype, true, 3).unwrap();
        let dev = p.on(Device::Cpu).unwrap();
        let (f, g) = dev.run(&p.offsets, None).unwrap();
        let (f2, g2) = dev.run(&p.offsets, None).unwrap();
        assert_eq!(f.out.to_vec_f64().unwrap(), f2.out.to_vec_f64().unwrap());
        assert_eq!(g.d_x.to_vec_f64().unwrap(), g2.d_x.to_vec_f64().unwrap());
        assert_eq!(g.d_times.to_vec_f64().unwrap(), g2.d_times.to_vec_f64().unwrap());
        let mut out = Vec::new();
        let mut d_x = Vec::new();
        let mut spectral = Vec::new();
        for m in 0..p.meshes() {
            let (f1, g1) = p.mesh(m).unwrap().on(Device::Cpu).unwrap().run_single(None).unwrap();
            out.extend(f1.out.to_vec_f64().unwrap());
            spectral.extend(f1.spectral.to_vec_f64().unwrap());
            d_x.extend(g1.d_x.to_vec_f64().unwrap());
        }
        assert_eq!(f.out.to_vec_f64().unwrap(), out, "{dtype}");
        assert_eq!(f.spectral.to_vec_f64().unwrap(), spectral, "{dtype}");
        assert_eq!(g.d_x.to_vec_f64().unwrap(), d_x, "{dtype}");
    }
}

#[test]
fn layer_clamps_times_before_use() {
    let p = Problem::new(&[20], 4, 3, DType::F32, false, 11).unwrap();
    let evals = p.evals.try_clone().unwrap().reshape(&[4]).unwrap();
    let raw = Tensor::from_vec(vec![-0.5f32, 0.0, 0.1], &[3]).unwrap();
    let mut layer = LearnedTimeDiffusion::new(raw).unwrap();
    let f = layer.forward(&p.x, &p.basis, &p.mass, &evals).unwrap();
    assert_eq!(layer.times.as_slice::<f32>().unwrap(), &[1e-8f32, 1e-8, 0.1]);
    let clamped = Tensor::from_vec(vec![1e-8f32, 1e-8, 0.1], &[3]).unwrap();
    let want = forward(&p.x, &p.basis, &p.mass, &evals, &clamped).unwrap();
    assert_eq!(f.out.to_vec_f64().unwrap(), want.out.to_vec_f64().unwrap());
    let g = layer.backward(&p.basis, &p.mass, &evals, &f, &p.d_out, None).unwrap();
    assert_eq!(g.d_times.shape(), &[3]);
    let e = LearnedTimeDiffusion::new(Tensor::zeros(&[3], DType::BF16, Device::Cpu).unwrap()).unwrap_err();
    assert!(e.to_string().contains("argument `times`: expected dtype f32"), "{e}");
}

fn msg(r: Result<impl Sized>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let p = Problem::new(&[6, 4], 3, 5, DType::F32, true, 5).unwrap();
    let evals = p.evals.try_clone().unwrap().reshape(&[2 * 3]).unwrap();
    let z = |shape: &[usize], dt: DType| Tensor::zeros(shape, dt, Device::Cpu).unwrap();
    let k3 = z(&[3], DType::F32);
    // V mismatch between x, basis and mass.
    let e = msg(forward(&z(&[9, 5], DType::F32), &p.basis, &p.mass, &k3, &p.times));
    assert!(e.contains("argument `x`: expected shape (V, C) with V = rows of basis = 10, got [9, 5]"), "{e}");
    let e = msg(forward(&p.x, &p.basis, &z(&[9], DType::F32), &k3, &p.times));
    assert!(e.contains("argument `mass`: expected shape (V) with V = rows of basis = [10], got [9]"), "{e}");
    // K mismatch between basis and evals.
    let e = msg(forward(&p.x, &p.basis, &p.mass, &z(&[4], DType::F32), &p.times));
    assert!(e.contains("argument `evals`: expected shape (K) with K = columns of basis = [3], got [4]"), "{e}");
    let e = msg(MeshBatch::new(&p.basis, &p.mass, &evals, &p.offsets));
    assert!(e.contains("argument `evals`: expected shape (meshes, K) = [2, 3], got [6]"), "{e}");
    // C mismatch with times.
    let e = msg(forward(&p.x, &p.basis, &p.mass, &k3, &z(&[4], DType::F32)));
    assert!(e.contains("argument `times`: expected shape (C) with C = channels = [5], got [4]"), "{e}");
    // Wrong dtypes.
    let e = msg(forward(&p.x.to_dtype(DType::BF16).unwrap(), &p.basis, &p.mass, &k3, &p.times));
    assert!(e.contains("argument `x`: expected dtype f32, got bf16"), "{e}");
    let e = msg(forward(&p.x, &p.basis, &p.mass, &k3, &z(&[5], DType::BF16)));
    assert!(e.contains("argument `times`: expected dtype f32, got bf16"), "{e}");
    let e = msg(forward(&p.x, &p.basis, &p.mass.to_dtype(DType::F16).unwrap(), &k3, &p.times));
    assert!(e.contains("argument `mass`: expected dtype f32, got f16"), "{e}");
    // Empty inputs and empty batches.
    let e = msg(forward(&z(&[10, 0], DType::F32), &p.basis, &p.mass, &k3, &z(&[0], DType::F32)));
    assert!(e.contains("argument `x` is empty"), "{e}");
    let e = msg(forward(&p.x, &z(&[10, 0], DType::F32), &p.mass, &z(&[0], DType::F32), &p.times));
    assert!(e.contains("argument `basis` is empty"), "{e}");
    let e = msg(MeshBatch::new(&p.basis, &p.mass, &p.evals, &[0]));
    assert!(e.contains("argument `offsets` is empty"), "{e}");
    let e = msg(MeshBatch::from_vertex_counts(&p.basis, &p.mass, &p.evals, &[]));
    assert!(e.contains("argument `offsets` is empty"), "{e}");
    let e = msg(MeshBatch::new(&p.basis, &p.mass, &p.evals, &[0, 6, 6, 10]));
    assert!(e.contains("argument `offsets`: expected strictly increasing"), "{e}");
    let e = msg(MeshBatch::new(&p.basis, &p.mass, &p.evals, &[0, 6, 9]));
    assert!(e.contains("expected the last offset to be V = rows of basis = 10, got 9"), "{e}");
    // Backward: d_out and d_spectral shapes, a forward from other inputs.
    let batch = MeshBatch::new(&p.basis, &p.mass, &p.evals, &p.offsets).unwrap();
    let f = forward_batch(&batch, &p.x, &p.times).unwrap();
    let e = msg(backward_batch(&batch, &p.times, &f, &z(&[10, 4], DType::F32), None));
    assert!(e.contains("argument `times`: expected shape (C) with C = channels = [4], got [5]"), "{e}");
    let e = msg(backward_batch(&batch, &p.times, &f, &p.d_out, Some(&z(&[3, 5], DType::F32))));
    assert!(e.contains("argument `d_spectral`: expected shape the shape of spectral = [2, 3, 5], got [3, 5]"), "{e}");
    let e = msg(backward(&p.basis, &p.mass, &k3, &p.times, &f, &p.d_out, None));
    assert!(e.contains("argument `fwd.spectral`"), "{e}");
    // Nothing above panicked, and valid input still works.
    assert!(backward_batch(&batch, &p.times, &f, &p.d_out, p.d_spectral.as_ref()).is_ok());
    assert!(matches!(MeshBatch::new(&p.basis, &p.mass, &p.evals, &[1, 10]), Err(Error::Invalid { .. })));
}

/// The wgmma reduce's stage shape is compiled into diffusion.cu and sized on the host: both sides
/// must agree, and both entries must fit the shared memory of an sm_90 block (227 KB opt-in).
#[test]
fn wgmma_reduce_host_and_kernel_agree() {
    let src = cuda::SOURCE.body;
    let define = |name: &str| -> usize {
        let line = src.lines().find(|l| l.starts_with(&format!("#define {name} "))).unwrap_or_else(|| panic!("#define {name} in diffusion.cu"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert_eq!(define("RGV"), cuda::RWG_ROWS);
    assert_eq!(define("RGNST"), cuda::RWG_STAGES);
    assert_eq!(define("RBM"), 128);
    // Stage = basis 64 × 128 + y 64 × 128·NH (16-bit) + 1 KB holding the mass; a multiple of
    // 1024 bytes (the 128-byte swizzle's period: the descriptors assume atoms on that boundary),
    // and 1 KB more for the kernel to align its base.
    assert!(src.contains("static constexpr int STAGE = M_OFF + 1024;"));
    for nh in [1, 2] {
        let stage = 2 * (64 * 128 + 64 * 128 * nh) + 1024;
        assert_eq!(cuda::reduce_wg_smem(nh), 4 * stage + 1024);
        assert_eq!(stage % 1024, 0);
        assert!(cuda::reduce_wg_smem(nh) <= 232_448, "NH = {nh}: {} bytes", cuda::reduce_wg_smem(nh));
    }
    // Both entries exist in the 16-bit modules.
    assert!(src.contains("DIFF_REDUCE_WG(1)") && src.contains("DIFF_REDUCE_WG(2)"));
}

/// v7's swizzled stage layout (`rwg_off` in diffusion.cu, mirrored here): (1) it is the layout a
/// wgmma descriptor with the 128-byte swizzle reads (element (m, k) of an MN-major operand at
/// (m/64)·LBO + (k/8)·SBO + the 128B swizzle of (k%8)·128 + (m%64)·2, LBO = 64·128, SBO = 1024);
/// (2) a bijection onto the operand's bytes; (3) every warp store of the cp.async fill (lane =
/// consecutive 16-byte chunk of a vertex row) covers whole 128-byte bank rows: 4 wavefronts.
#[test]
fn wgmma_reduce_swizzled_layout() {
    const RGV: usize = 64;
    // The mirror below must stay the kernel's formula.
    assert!(cuda::SOURCE.body.contains("return (u32)((col >> 6) * (RGV * 128) + v * 128 + ((((col >> 3) & 7) ^ (v & 7)) << 4) + (col & 7) * 2);"));
    assert!(cuda::SOURCE.body.contains("return ewg_desc(addr, RGV * 128, 1024) | (1ull << 62);"));
    let rwg_off = |v: usize, col: usize| (col >> 6) * (RGV * 128) + v * 128 + ((((col >> 3) & 7) ^ (v & 7)) << 4) + (col & 7) * 2;
    let sw128 = |a: usize| a ^ (((a >> 7) & 7) << 4);
    for cols in [128usize, 256] {
        let mut seen = vec![false; RGV * cols]; // per 2-byte element
        for v in 0..RGV {
            for col in 0..cols {
                let o = rwg_off(v, col);
                let desc = (col / 64) * (RGV * 128) + (v / 8) * 1024 + sw128((v % 8) * 128 + (col % 64) * 2);
                assert_eq!(o, desc, "v = {v}, col = {col}");
                assert!(!seen[o / 2], "v = {v}, col = {col}: offset {o} twice");
                seen[o / 2] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        let nj = cols / 8;
        for w in 0..RGV * nj / 32 {
            // 16-byte chunk i = 32w + lane: vertex i / nj, chunk i % nj; a wavefront serves 128
            // bytes with each 4-byte bank once, so the count is the most chunks on one bank group.
            let mut per_group = [0usize; 8];
            let mut rows = std::collections::BTreeSet::new();
            for lane in 0..32 {
                let i = 32 * w + lane;
                let o = rwg_off(i / nj, (i % nj) * 8);
                per_group[(o >> 4) & 7] += 1;
                rows.insert(o >> 7);
            }
            assert_eq!(*per_group.iter().max().unwrap(), 4, "warp {w}, {cols} columns");
            assert_eq!(rows.len(), 4, "warp {w}, {cols} columns");
        }
    }
}

/// v8's bulk-store expand: (1) the staging pitch and entries compiled into diffusion.cu are the ones
/// the host sizes; (2) every compiled shape the host can pick fits the 227 KB an sm_90 block may opt
/// into, and the shapes the NOTES count on are the ones picked (K = 128: 4 stages at C ≤ 128, 3 at
/// C = 256; K = 256, C ≤ 128 and K = 136, C = 256: 2); (3) the accumulator-layout b32 stores into
/// the staging rows are conflict-free (lane (g, t) of a warp: row g, bytes 4t + 16j + 256h).
#[test]
fn bulk_store_expand_host_and_kernel_agree() {
    let src = cuda::SOURCE.body;
    let line = src.lines().find(|l| l.starts_with("#define EWG_STG_PAD ")).expect("#define EWG_STG_PAD in diffusion.cu");
    assert_eq!(line.split_whitespace().nth(2).unwrap().parse::<usize>().unwrap(), cuda::EWG_STG_PAD);
    assert!(src.contains("constexpr int P = 256 * NH + EWG_STG_PAD;"));
    const OPTIN: usize = 232_448;
    let pick = |kp: usize, nh: usize| cuda::expand_wgb_stages(nh).iter().copied().find(|&n| cuda::expand_wgb_smem(kp, nh, n) <= OPTIN);
    for nh in [1, 2] {
        for &nst in cuda::expand_wgb_stages(nh) {
            let name = format!("DIFF_EXPAND_WG(diffusion_expand_wgb{nh}_s{nst}, {nh}, {nst}, true)");
            assert!(src.contains(&name), "{name}");
        }
    }
    assert_eq!(pick(128, 1), Some(4));
    assert_eq!(pick(128, 2), Some(3));
    assert_eq!(cuda::expand_wgb_smem(128, 2, 3), 231_424);
    assert_eq!(pick(256, 1), Some(2));
    assert_eq!(pick(144, 2), Some(2));
    assert_eq!(pick(176, 2), None); // K > 160 with C > 128: no room (an Unsupported error when forced)
    // The direct epilogue's slices (the fallback where rows are not 16-byte multiples) fit in the
    // staging buffer of either width.
    const { assert!(8 * 16 * 72 * 2 <= 128 * (256 + cuda::EWG_STG_PAD)) };
    for nh in [1usize, 2] {
        let pitch = 256 * nh + cuda::EWG_STG_PAD;
        assert_eq!(pitch % 16, 0, "bulk copies need 16-byte aligned rows");
        for h in 0..nh {
            for j in 0..16 {
                for half in 0..2 {
                    let mut banks = std::collections::HashSet::new();
                    for lane in 0..32 {
                        let (g, t) = (lane / 4, lane % 4);
                        banks.insert(((g + 8 * half) * pitch + (h * 128 + j * 8 + 2 * t) * 2) / 4 % 32);
                    }
                    assert_eq!(banks.len(), 32, "NH = {nh}, h = {h}, j = {j}");
                }
            }
        }
    }
}

/// v9's TMA-fed expand: (1) the box, slot and barrier constants and the compiled entries are the
/// ones the host sizes and launches; (2) the ring sizes the host picks (the most 16 KB slots that
/// fit 227 KB, at least one tile's boxes) for the shapes the NOTES count on; (3) the layout the TMA
/// unit writes with the 128-byte swizzle (row r of a box at r·128, its 16-byte chunk j at j ^ (r % 8))
/// is the one the K-major swizzled wgmma descriptor reads: element (m, kk) of warpgroup wg's
/// 64 × 16 A tile at step ks sits at start + (m / 8)·SBO + swizzle((m % 8)·128 + 2·kk), start =
/// slot + wg·8192 + (ks % 4)·32 on a 1024-aligned atom, SBO = 1024 (and a bijection onto the box).
#[test]
fn tma_expand_host_and_kernel_agree() {
    let src = cuda::SOURCE.body;
    let define = |name: &str| -> usize {
        let line = src.lines().find(|l| l.starts_with(&format!("#define {name} "))).unwrap_or_else(|| panic!("#define {name} in diffusion.cu"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert_eq!(define("ETM_BOX_K"), cuda::ETM_BOX_K);
    assert_eq!(define("ETM_MAX_SLOTS"), cuda::ETM_MAX_SLOTS);
    assert!(src.contains("#define ETM_BOX_BYTES (EBM * ETM_BOX_K * 2)"));
    assert_eq!(cuda::ETM_BOX_BYTES, 128 * 64 * 2);
    // The kernel's epilogue region and barrier block, as the host counts them.
    assert!(src.contains("constexpr int EPI_BYTES = BULK ? EBM * (2 * BN + EWG_STG_PAD) : 8 * 16 * EWG_EPI_LD * 2;"));
    assert!(src.contains("empty0 = full0 + 8 * ETM_MAX_SLOTS;"));
    for (nh, bulk, pingpong) in [(1, false, false), (2, false, false), (1, true, false), (2, true, false), (1, true, true), (2, true, true)] {
        let name = format!("DIFF_EXPAND_TMA(diffusion_expand_wgt{}{nh}{}, {nh}, {bulk}, {pingpong})", if bulk { "b" } else { "" }, if pingpong { "_pp" } else { "" });
        assert!(src.contains(&name), "{name}");
    }
    const OPTIN: usize = 232_448;
    let slots = |kp: usize, nh: usize, bulk: bool| cuda::expand_tma_slots(OPTIN, kp, nh, bulk);
    assert_eq!(slots(128, 2, false), Some(8));
    assert_eq!(slots(128, 2, true), Some(5));
    assert_eq!(slots(128, 1, false), Some(10));
    assert_eq!(slots(128, 1, true), Some(9));
    assert_eq!(slots(144, 2, true), Some(5));
    assert_eq!(slots(256, 2, false), Some(4)); // exactly one tile: runs, without look-ahead
    assert_eq!(slots(256, 2, true), None); // an Unsupported error when forced
    assert_eq!(slots(256, 1, true), Some(7));
    assert_eq!(slots(16, 1, false), Some(12)); // 192 KB of boxes in flight; the barriers allow 16
    assert_eq!(cuda::expand_tma_smem(128, 2, 8, false), 216_320);
    for kp in (16..=256).step_by(16) {
        for nh in [1, 2] {
            for bulk in [false, true] {
                if let Some(n) = slots(kp, nh, bulk) {
                    assert!(n >= kp.div_ceil(64) && n <= cuda::ETM_MAX_SLOTS && cuda::expand_tma_smem(kp, nh, n, bulk) <= OPTIN);
                }
            }
        }
    }
    // (3) The descriptor and its step advance, as compiled.
    assert!(src.contains("__device__ __forceinline__ u64 etm_desc(u32 addr) { return ewg_desc(addr, 16, 1024) | (1ull << 62); }"));
    assert!(src.contains("const u32 a = slot0 + (u32)s * ETM_BOX_BYTES + (u32)(wg * 64 * 128) + (u32)((ks & 3) * 32);"));
    let tma_off = |r: usize, col: usize| r * 128 + ((((col % 64) / 8) ^ (r % 8)) << 4) + (col % 8) * 2; // within box col / 64
    let sw128 = |a: usize| a ^ (((a >> 7) & 7) << 4);
    let mut seen = vec![false; 128 * 64];
    for wg in 0..2 {
        for ks in 0..4 {
            let start = wg * 8192 + (ks % 4) * 32;
            for m in 0..64 {
                for kk in 0..16 {
                    let (r, col) = (wg * 64 + m, ks * 16 + kk);
                    // start's low 10 bits are the in-atom offset the swizzle applies to (atoms start
                    // 1024-aligned), the rest selects the atom.
                    let desc = (start & !1023) + (m / 8) * 1024 + sw128((start & 1023) + (m % 8) * 128 + 2 * kk);
                    assert_eq!(tma_off(r, col), desc, "wg {wg}, ks {ks}, m {m}, kk {kk}");
                    assert!(!seen[desc / 2]);
                    seen[desc / 2] = true;
                }
            }
        }
    }
    assert!(seen.iter().all(|&s| s));
}
