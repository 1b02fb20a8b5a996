use super::reference::{self, Method, Problem};
use super::suite::{quick_cases, Case};
use super::*;
use crate::harness::check::{CheckCtx, Tier};
use crate::OpFamily;
use ember_core::rng;

fn randv(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    (0..n).map(|i| scale * rng::normal(seed, i as u64)).collect()
}

/// Owned f64 inputs of a reference problem.
struct Owned {
    dims: Dims,
    u: Vec<f64>,
    k: Vec<f64>,
    d: Option<Vec<f64>>,
    k_rev: Option<Vec<f64>>,
    mask: Option<Vec<f64>>,
    pre: Option<Vec<f64>>,
    post: Option<Vec<f64>>,
    gelu: bool,
}

impl Owned {
    fn new(c: &Case, seed: u64) -> Self {
        let dims = Dims { b: c.b, h: c.h, l: c.l, lk: c.lk, lk_rev: c.lkr, hd: c.hd };
        let n = dims.numel();
        let heads = dims.heads();
        let on = |b: bool, v: Vec<f64>| if b { Some(v) } else { None };
        Owned {
            dims,
            u: randv(n, seed, 1.0),
            k: randv(heads * c.lk, seed + 1, 1.0 / (c.lk as f64).sqrt()),
            d: on(c.d, randv(heads, seed + 2, 1.0)),
            k_rev: on(c.lkr > 0, randv(heads * c.lkr, seed + 3, 1.0 / (c.lkr.max(1) as f64).sqrt())),
            mask: on(c.mask, (0..c.b * c.h).map(|i| 0.5 + rng::uniform(seed + 4, i as u64, 0.0, 1.0) as f64).collect()),
            pre: on(c.pre, randv(n, seed + 5, 1.0)),
            post: on(c.post, randv(n, seed + 6, 1.0)),
            gelu: c.gelu,
        }
    }
    fn problem(&self) -> Problem<'_> {
        Problem {
            dims: self.dims,
            u: &self.u,
            k: &self.k,
            d: self.d.as_deref(),
            k_rev: self.k_rev.as_deref(),
            mask: self.mask.as_deref(),
            pregate: self.pre.as_deref(),
            postgate: self.post.as_deref(),
            gelu: self.gelu,
        }
    }
}

fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Every gradient of the reference against central finite differences of L = Σ out·r.
fn check_gradients(c: &Case, seed: u64) {
    let base = Owned::new(c, seed);
    let r = randv(base.dims.numel(), seed + 99, 1.0);
    let loss = |o: &Owned| -> f64 { reference::forward(&o.problem()).iter().zip(&r).map(|(a, b)| a * b).sum() };
    let g = reference::backward(&base.problem(), &r);
    let eps = 1e-5;
    type Field = fn(&mut Owned) -> Option<&mut Vec<f64>>;
    let fields: [(&str, Field, Option<&Vec<f64>>); 6] = [
        ("u", |o| Some(&mut o.u), Some(&g.d_u)),
        ("k", |o| Some(&mut o.k), Some(&g.d_k)),
        ("k_rev", |o| o.k_rev.as_mut(), g.d_k_rev.as_ref()),
        ("d", |o| o.d.as_mut(), if c.d { Some(&g.d_d) } else { None }),
        ("pregate", |o| o.pre.as_mut(), g.d_pregate.as_ref()),
        ("postgate", |o| o.post.as_mut(), g.d_postgate.as_ref()),
    ];
    for (name, field, grad) in fields {
        let mut probe = Owned::new(c, seed);
        let Some(len) = field(&mut probe).map(|v| v.len()) else {
            assert!(grad.is_none(), "{name}: gradient returned for an absent input");
            continue;
        };
        let grad = grad.unwrap_or_else(|| panic!("{name}: no gradient"));
        assert_eq!(grad.len(), len, "{name}");
        // A spread of indices, first and last included.
        let picks: Vec<usize> = (0..len.min(12)).map(|i| if i == 0 { 0 } else if i == 1 { len - 1 } else { (i * 7919 + 13) % len }).collect();
        for &i in &picks {
            let mut plus = Owned::new(c, seed);
            field(&mut plus).unwrap()[i] += eps;
            let mut minus = Owned::new(c, seed);
            field(&mut minus).unwrap()[i] -= eps;
            let fd = (loss(&plus) - loss(&minus)) / (2.0 * eps);
            assert!((fd - grad[i]).abs() <= 1e-6 * (1.0 + fd.abs()), "{c:?} {name}[{i}]: finite difference {fd} vs gradient {}", grad[i]);
        }
    }
}

#[test]
fn reference_gradients_match_finite_differences() {
    check_gradients(&Case::all(2, 3, 9), 1);
    check_gradients(&Case::all(2, 3, 9).lk(4), 2);
    check_gradients(&Case::plain(1, 2, 7), 3);
    check_gradients(&Case { gelu: true, ..Case::plain(2, 1, 5) }, 4);
    check_gradients(&Case::all(1, 8, 6).hd(8), 5);
    check_gradients(&Case { pre: true, post: true, ..Case::plain(2, 8, 5) }.hd(8), 6);
    check_gradients(&Case::all(1, 1, 1), 7);
}

#[test]
fn reference_direct_and_fft_agree() {
    for c in [Case::all(2, 3, 300), Case::all(1, 3, 257).lk(31), Case::all(1, 8, 40).hd(8)] {
        let o = Owned::new(&c, 11);
        let p = o.problem();
        let fd = reference::forward_with(&p, Method::Direct);
        let ff = reference::forward_with(&p, Method::Fft);
        assert!(max_rel(&ff, &fd) < 1e-12, "{c:?}: forward {}", max_rel(&ff, &fd));
        let r = randv(o.dims.numel(), 12, 1.0);
        let gd = reference::backward_with(&p, &r, Method::Direct);
        let gf = reference::backward_with(&p, &r, Method::Fft);
        for (name, a, b) in [("d_u", &gf.d_u, &gd.d_u), ("d_k", &gf.d_k, &gd.d_k), ("d_d", &gf.d_d, &gd.d_d)] {
            assert!(max_rel(a, b) < 1e-12, "{c:?} {name}: {}", max_rel(a, b));
        }
        for (name, a, b) in [("d_k_rev", &gf.d_k_rev, &gd.d_k_rev), ("d_pre", &gf.d_pregate, &gd.d_pregate), ("d_post", &gf.d_postgate, &gd.d_postgate)] {
            let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
            assert!(max_rel(a, b) < 1e-12, "{c:?} {name}: {}", max_rel(a, b));
        }
    }
}

#[test]
fn reference_matches_a_hand_computed_example() {
    // u = [1, 2, 3], k = [1, 10], D = 100, k_rev = [1000]:
    // y = [1, 12, 23] + 1000·u = [1001, 2012, 3023]; z = y + 100·u = [1101, 2212, 3323].
    let dims = Dims { b: 1, h: 1, l: 3, lk: 2, lk_rev: 1, hd: 1 };
    let p = Problem { dims, u: &[1.0, 2.0, 3.0], k: &[1.0, 10.0], d: Some(&[100.0]), k_rev: Some(&[1000.0]), mask: Some(&[0.5]), pregate: None, postgate: None, gelu: false };
    assert_eq!(reference::forward(&p), vec![550.5, 1106.0, 1661.5]);
}

#[test]
fn hd1_is_the_single_head_formula_with_gates() {
    // out = mask · post ⊙ gelu(conv(u ⊙ pre) + D·u ⊙ pre), written out by hand.
    let c = Case::all(2, 3, 11).lk(5);
    let o = Owned::new(&c, 21);
    let got = reference::forward(&o.problem());
    let (l, lk, lkr) = (11, 5, c.lkr);
    for b in 0..2 {
        for h in 0..3 {
            let r = (b * 3 + h) * l;
            let v: Vec<f64> = (0..l).map(|t| o.u[r + t] * o.pre.as_ref().unwrap()[r + t]).collect();
            for t in 0..l {
                let mut y = 0.0;
                for s in 0..lk.min(t + 1) {
                    y += o.k[h * lk + s] * v[t - s];
                }
                for m in 0..lkr.min(l - t) {
                    y += o.k_rev.as_ref().unwrap()[h * lkr + m] * v[t + m];
                }
                let z = y + o.d.as_ref().unwrap()[h] * v[t];
                let want = reference::gelu(z) * o.post.as_ref().unwrap()[r + t] * o.mask.as_ref().unwrap()[b * 3 + h];
                assert!((got[r + t] - want).abs() < 1e-12 * (1.0 + want.abs()), "b={b} h={h} t={t}");
            }
        }
    }
}

#[test]
fn cpu_fast_path_matches_reference_in_every_dtype() {
    ember_core::set_poison_outputs(true);
    let rows = Family.check(&CheckCtx::new(Device::Cpu, Tier::Quick)).unwrap();
    assert!(rows.len() >= quick_cases().len() * 3 * 3, "{}", rows.len());
    for r in &rows {
        assert!(r.pass(), "{r:?}");
    }
}

#[test]
fn cpu_fast_path_at_large_and_awkward_lengths() {
    ember_core::set_poison_outputs(true);
    let ctx = CheckCtx::new(Device::Cpu, Tier::Full);
    for (c, dtypes) in [
        (Case::all(1, 2, 8191), &[DType::F32, DType::BF16][..]),
        (Case::all(1, 1, 16384).lk(16384), &[DType::F32][..]),
        (Case::all(1, 1, 65539).lk(65539), &[DType::F32, DType::F16][..]),
        (Case::all(2, 8, 1134).hd(8).lk(200), &[DType::BF16][..]),
    ] {
        for &dt in dtypes {
            for r in super::suite::check_case_for_tests(&ctx, &c, dt).unwrap() {
                assert!(r.pass(), "{r:?}");
            }
        }
    }
}

#[test]
fn f64_runs_the_reference() {
    let u = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[1, 1, 3]).unwrap();
    let k = Tensor::from_vec(vec![1.0f64, 10.0], &[1, 2]).unwrap();
    let f = forward(&u, &k, None, &Options::new()).unwrap();
    assert_eq!(f.out.to_vec_f64().unwrap(), vec![1.0, 12.0, 23.0]);
    let g = backward(&f, &Tensor::from_vec(vec![1.0f64, 0.0, 0.0], &[1, 1, 3]).unwrap()).unwrap();
    // ∂out[0]/∂u = [k0, 0, 0]; ∂out[0]/∂k = [u0, 0].
    assert_eq!(g.d_u.to_vec_f64().unwrap(), vec![1.0, 0.0, 0.0]);
    assert_eq!(g.d_k.to_vec_f64().unwrap(), vec![1.0, 0.0]);
}

#[test]
fn bad_input_is_a_clear_error() {
    let z = |s: &[usize], dt| Tensor::zeros(s, dt, Device::Cpu).unwrap();
    let u = z(&[2, 8, 16], DType::BF16);
    let k = z(&[8, 16], DType::F32);
    let err = |r: Result<Forward>| r.err().expect("expected an error").to_string();
    let e = err(forward(&u, &z(&[8, 17], DType::F32), None, &Options::new()));
    assert!(e.contains("argument `k`: expected shape (H/head_dim, k_len) = (8, n) with 1 ≤ n ≤ L = 16, got [8, 17]"), "{e}");
    let e = err(forward(&u, &z(&[7, 16], DType::F32), None, &Options::new()));
    assert!(e.contains("argument `k`") && e.contains("got [7, 16]"), "{e}");
    let m = z(&[8, 2], DType::F32);
    let e = err(forward(&u, &k, None, &Options::new().dropout_mask(&m)));
    assert!(e.contains("argument `dropout_mask`: expected shape (B, H) = [2, 8], got [8, 2]"), "{e}");
    let e = err(forward(&z(&[2, 12, 16], DType::BF16), &z(&[1, 16], DType::F32), None, &Options::new().head_dim(8)));
    assert!(e.contains("argument `head_dim`: expected a divisor of H = 12, got 8"), "{e}");
    let e = err(forward(&u, &k, None, &Options::new().head_dim(3)));
    assert!(e.contains("argument `head_dim`: expected 1 or 8, got 3"), "{e}");
    let e = err(forward(&u, &z(&[8, 16], DType::BF16), None, &Options::new()));
    assert!(e.contains("argument `k`: expected dtype f32, got bf16"), "{e}");
    let e = err(forward(&u, &k, Some(&z(&[7], DType::F32)), &Options::new()));
    assert!(e.contains("argument `d`: expected shape (H/head_dim) = [8], got [7]"), "{e}");
    let g = z(&[2, 8, 16], DType::F32);
    let e = err(forward(&u, &k, None, &Options::new().pregate(&g)));
    assert!(e.contains("argument `pregate`: expected dtype bf16, got f32"), "{e}");
    let e = err(forward(&u, &k, None, &Options::new().k_rev(&z(&[8, 0], DType::F32))));
    assert!(e.contains("argument `k_rev`"), "{e}");
    let e = err(forward(&z(&[2, 8, 0], DType::BF16), &k, None, &Options::new()));
    assert!(e.contains("argument `u` is empty"), "{e}");
    let e = err(forward(&z(&[2, 8], DType::BF16), &k, None, &Options::new()));
    assert!(e.contains("argument `u`: expected shape 3 dimensions (B, H, L)"), "{e}");
    // d_out must match the output's dtype: bf16 here, f32 with out_f32.
    let f = forward(&u, &k, None, &Options::new()).unwrap();
    let e = backward(&f, &z(&[2, 8, 16], DType::F32)).err().unwrap().to_string();
    assert!(e.contains("argument `d_out`: expected dtype bf16, got f32"), "{e}");
    let f = forward(&u, &k, None, &Options::new().out_f32(true)).unwrap();
    assert_eq!(f.out.dtype(), DType::F32);
    assert!(backward(&f, &z(&[2, 8, 16], DType::F32)).is_ok());
}

#[test]
fn fft_size_never_wraps_into_the_output() {
    let d = |l, lk, lkr| Dims { b: 1, h: 1, l, lk, lk_rev: lkr, hd: 1 }.fft_size();
    assert_eq!(d(1, 1, 0), 32);
    assert_eq!(d(16, 16, 0), 32);
    assert_eq!(d(17, 17, 0), 64);
    assert_eq!(d(4096, 4096, 0), 8192);
    assert_eq!(d(4096, 1, 0), 4096);
    assert_eq!(d(4096, 2, 0), 8192);
    assert_eq!(d(1000, 10, 600), 2048);
    assert_eq!(d(1 << 22, 1 << 22, 0), 1 << 23);
}

// ---- host model of the tensor-core FFT (fft_tc.cuh) -----------------------------------------------

type C64 = (f64, f64);

fn cmul(a: C64, b: C64) -> C64 {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// exp(dir·2πi·num/den)
fn cis(dir: f64, num: usize, den: usize) -> C64 {
    let a = dir * 2.0 * std::f64::consts::PI * num as f64 / den as f64;
    (a.cos(), a.sin())
}

fn f16r(v: f64) -> f64 {
    half::f16::from_f64(v).to_f64()
}

/// tc_fft256 as the kernel computes it: power-of-two scale, f16 operands (data and DFT-16 matrix),
/// exact accumulation (f32 in the kernel), twiddle between the products.
fn model_fft256(x: &mut [C64], dir: f64) {
    let m = x.iter().fold(0.0f64, |m, v| m.max(v.0.abs()).max(v.1.abs()));
    let ex = if m > 0.0 { m.log2().floor() as i32 + 1 } else { 0 };
    let s = 2f64.powi(-ex);
    let f = |e: usize| {
        let w = cis(dir, e % 16, 16);
        (f16r(w.0), f16r(w.1))
    };
    let xs: Vec<C64> = x.iter().map(|v| (f16r(v.0 * s), f16r(v.1 * s))).collect();
    // C[a'][b] = Σ_a F[a'][a]·X[a][b], then × W_256^(a'·b), rounded to f16.
    let mut c = [(0.0, 0.0); 256];
    for ap in 0..16 {
        for b in 0..16 {
            let mut acc = (0.0, 0.0);
            for a in 0..16 {
                let p = cmul(f(ap * a), xs[16 * a + b]);
                acc = (acc.0 + p.0, acc.1 + p.1);
            }
            let t = cmul(acc, cis(dir, ap * b, 256));
            c[16 * ap + b] = (f16r(t.0), f16r(t.1));
        }
    }
    // out[a' + 16·b'] = Σ_b C[a'][b]·F[b][b'].
    for ap in 0..16 {
        for bp in 0..16 {
            let mut acc = (0.0, 0.0);
            for b in 0..16 {
                let p = cmul(c[16 * ap + b], f(b * bp));
                acc = (acc.0 + p.0, acc.1 + p.1);
            }
            x[ap + 16 * bp] = (acc.0 / s, acc.1 / s);
        }
    }
}

/// tc_fft of one row of M = 256·P points: forward natural → TC order, inverse TC order → natural.
fn model_tc_fft(x: &mut [C64], dir: f64) {
    let mm = x.len();
    let p = mm / 256;
    let pass_a = |x: &mut [C64]| {
        for n2 in 0..256 {
            let col: Vec<C64> = (0..p).map(|r| x[256 * r + n2]).collect();
            for k1 in 0..p {
                let mut acc = (0.0, 0.0);
                for (r, v) in col.iter().enumerate() {
                    // Forward: DFT then twiddle; inverse: twiddle then DFT (as the kernel).
                    let w = if dir < 0.0 { cis(dir, r * k1, p) } else { cmul(cis(dir, r * k1, p), cis(dir, r * n2, mm)) };
                    let t = cmul(*v, w);
                    acc = (acc.0 + t.0, acc.1 + t.1);
                }
                x[256 * k1 + n2] = if dir < 0.0 { cmul(acc, cis(dir, k1 * n2, mm)) } else { acc };
            }
        }
    };
    if dir < 0.0 && p > 1 {
        pass_a(x);
    }
    for seg in x.chunks_mut(256) {
        model_fft256(seg, dir);
    }
    if dir > 0.0 && p > 1 {
        pass_a(x);
    }
}

fn tc_pos(k: usize, logm: u32) -> usize {
    let logp = logm - 8;
    ((k & ((1 << logp) - 1)) << 8) | (k >> logp)
}

#[test]
fn tensor_core_fft_model_matches_the_dft_within_f16_rounding() {
    for logm in 8..=12u32 {
        let mm = 1usize << logm;
        let x: Vec<C64> = (0..mm).map(|i| (rng::normal(7 + logm as u64, 2 * i as u64), rng::normal(7 + logm as u64, 2 * i as u64 + 1))).collect();
        let mut y = x.clone();
        model_tc_fft(&mut y, -1.0);
        // Bin k in TC order against the exact DFT.
        let (mut num, mut den) = (0.0, 0.0);
        for k in 0..mm {
            let mut acc = (0.0, 0.0);
            for (n, v) in x.iter().enumerate() {
                let t = cmul(*v, cis(-1.0, (n * k) % mm, mm));
                acc = (acc.0 + t.0, acc.1 + t.1);
            }
            let got = y[tc_pos(k, logm)];
            num += (got.0 - acc.0).powi(2) + (got.1 - acc.1).powi(2);
            den += acc.0 * acc.0 + acc.1 * acc.1;
        }
        let fwd_err = (num / den).sqrt();
        assert!(fwd_err < 1e-3, "M = {mm}: forward error {fwd_err}");
        // The inverse from TC order gives M·x in natural order.
        model_tc_fft(&mut y, 1.0);
        let (mut num, mut den) = (0.0, 0.0);
        for (g, v) in y.iter().zip(&x) {
            num += (g.0 / mm as f64 - v.0).powi(2) + (g.1 / mm as f64 - v.1).powi(2);
            den += v.0 * v.0 + v.1 * v.1;
        }
        let rt_err = (num / den).sqrt();
        assert!(rt_err < 1.5e-3, "M = {mm}: round-trip error {rt_err}");
        eprintln!("M = {mm}: forward {fwd_err:.2e}, round trip {rt_err:.2e}");
    }
}

#[test]
fn pair_backward_chunks_follow_the_wave_model() {
    use super::cuda::pair_bwd_chunk;
    // B = 16, H = 768 on 132 SMs (8 pairs per head), the measured best at L = 256 and 1024:
    // L = 256 (16 slots per CTA): single pairs, 384 CTAs (one full wave and one of one CTA per SM).
    assert_eq!(pair_bwd_chunk(768, 8, 16, 2, 132, 512), 1);
    // L = 1024 (4 slots per CTA): chunks of 2 pairs, 768 CTAs in 3 waves (chunks of 3: 576 CTAs,
    // 2 waves and a sliver, 8.25 iterations against 6).
    assert_eq!(pair_bwd_chunk(768, 8, 4, 2, 132, 2048), 2);
    // L = 4096 (1 slot per CTA): equal waves for c = 2, 3, 4, 8; c = 4 balances the fold of its
    // two partials against the uneven finish of whole-head CTAs (measured 1.65 ms vs 1.68 for 8).
    assert_eq!(pair_bwd_chunk(768, 8, 1, 2, 132, 8192), 4);
    // One pair per head; a single head with many pairs is split until the SMs have work.
    assert_eq!(pair_bwd_chunk(7, 1, 8, 2, 132, 2048), 1);
    let c = pair_bwd_chunk(1, 5000, 1, 2, 132, 8192);
    assert!(5000usize.div_ceil(c) >= 132 && 5000usize.div_ceil(c) <= 4 * 132, "chunk {c}");
    // P = 64 (one slot per CTA, one CTA per SM), L = 5000 or 8192 at B = 16, H = 768: whole heads
    // of 8 pairs (768 CTAs, 5.8 waves) beat single pairs (47 waves and 8 partials of 128 KB per
    // head to fold); measured at L = 5000: 4.19 ms fwd+bwd against 4.69 for single pairs.
    assert_eq!(pair_bwd_chunk(768, 8, 1, 1, 132, 16384), 8);
}

/// The narrow groups the host launches at small P (v10) are compiled: every (P, R) that
/// `spec_group` and `bwd_slot_group` pick other than the wide 32/P has its entry macro in the
/// kernel source, and the groups hold whole segments (R·P ≤ 32).
#[test]
fn narrow_pair_groups_have_kernels() {
    use super::cuda::{bwd_slot_group, spec_group, SOURCE};
    for logp in 1..=5u32 {
        for (r, entry) in [(spec_group(logp), "FC_SPEC_PAIR_NARROW"), (bwd_slot_group(logp), "FC_BWD_PAIR_NARROW")] {
            assert!(r >= 1 && r << logp <= 32, "P = {}: {r} per CTA", 1 << logp);
            if r != 32 >> logp {
                let call = format!("{entry}({logp}, {r})");
                assert!(SOURCE.body.contains(&call), "{call} missing from the kernel source");
            }
        }
    }
    // The measured rule (NOTES.md v10): spectrum 4 / 2 / 2 heads at P = 2 / 4 / 8, backward 8 / 4 slots
    // at P = 2 / 4.
    assert_eq!((1..=5).map(spec_group).collect::<Vec<_>>(), [4, 2, 2, 2, 1]);
    assert_eq!((1..=5).map(bwd_slot_group).collect::<Vec<_>>(), [8, 4, 4, 2, 1]);
}

#[test]
fn pair_backward_chunk_search_equals_the_exhaustive_one() {
    use super::cuda::{pair_bwd_chunk, pair_bwd_cost};
    // The model minimised over every c (ties to the larger c).
    let brute = |heads: usize, pph: usize, slots: usize, per_sm: usize, sms: usize, n: usize| {
        let cost = |c: usize| pair_bwd_cost(c, heads, pph, slots, per_sm, sms, n);
        (1..=pph).rev().fold((1, f64::INFINITY), |(bc, bv), c| if cost(c) < bv { (c, cost(c)) } else { (bc, bv) }).0
    };
    for heads in [1, 3, 7, 64, 300, 768] {
        for pph in [1, 2, 5, 8, 17, 64, 500, 5000] {
            for (slots, per_sm, n) in [(16, 2, 512), (4, 2, 2048), (1, 2, 8192), (1, 1, 16384)] {
                assert_eq!(pair_bwd_chunk(heads, pph, slots, per_sm, 132, n), brute(heads, pph, slots, per_sm, 132, n), "heads {heads} pph {pph} slots {slots}");
            }
        }
    }
}

/// On the CPU a training forward is the plain one (nothing saved) and gives the same output and
/// gradients, bit for bit.
#[test]
fn training_forward_on_the_cpu_is_the_plain_one() {
    let dev = ember_core::Device::Cpu;
    let u = ember_core::Tensor::randn(&[2, 3, 300], DType::BF16, dev, 11).unwrap();
    let k = ember_core::Tensor::randn(&[3, 300], DType::F32, dev, 12).unwrap();
    let d = ember_core::Tensor::randn(&[3], DType::F32, dev, 13).unwrap();
    let dy = ember_core::Tensor::randn(&[2, 3, 300], DType::BF16, dev, 14).unwrap();
    let bits = |t: &ember_core::Tensor| t.to_vec_f64().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let plain = Options::new().gelu(true);
    let train = plain.training(true);
    let (fp, ft) = (forward(&u, &k, Some(&d), &plain).unwrap(), forward(&u, &k, Some(&d), &train).unwrap());
    assert!(!ft.saved_z());
    assert_eq!(bits(&fp.out), bits(&ft.out));
    let (gp, gt) = (backward(&fp, &dy).unwrap(), backward(&ft, &dy).unwrap());
    assert_eq!(bits(&gp.d_u), bits(&gt.d_u));
    assert_eq!(bits(&gp.d_k), bits(&gt.d_k));
    assert_eq!(bits(gp.d_d.as_ref().unwrap()), bits(gt.d_d.as_ref().unwrap()));
}

/// Stage 1 of the P ≥ 64 kernels as index arithmetic (pair_tc.cuh: fp64_stage1 at T = 2,
/// fp128_stage1 at T = 4 on two CTAs; T = 8, 16 for clusters of 4 and 8 CTAs):
/// P = 32·T points over n1 (only n1 < P/2 nonzero), T lanes per column, lane j holding n1 = T·m + j
/// (m < 16). A 32-point DFT per lane, then t = log2 T radix-2 steps across lanes (bit t − s of j at
/// step s, twiddle W_(32·2^s)^k · W_(2^s)^ρ with ρ the bits combined so far, reversed); lane j ends
/// with bins k + 32·bitrev_t(j). The inverse mirrors it and returns P·x at n1 = T·m + j.
#[test]
fn cluster_stage1_model_matches_the_dft() {
    let add = |a: C64, b: C64| (a.0 + b.0, a.1 + b.1);
    let sub = |a: C64, b: C64| (a.0 - b.0, a.1 - b.1);
    // R = 32 (P = 64·CS), and the mixed-radix lanes R = 20, 24, 28 at T = 4, 8 (P = 2R·CS, CS = 2, 4).
    for (rp, t) in [(32usize, 1..=4u32), (20, 2..=3), (24, 2..=3), (28, 2..=3)].into_iter().flat_map(|(rp, ts)| ts.map(move |t| (rp, t))) {
        let tt = 1usize << t;
        let p = rp * tt;
        let x: Vec<C64> = (0..p).map(|i| if i < p / 2 { (rng::normal(31 + t as u64 + rp as u64, 2 * i as u64), rng::normal(31 + t as u64 + rp as u64, 2 * i as u64 + 1)) } else { (0.0, 0.0) }).collect();
        // Lane j: the R-point DFT of x[T·m + j].
        let mut lanes: Vec<Vec<C64>> = (0..tt)
            .map(|j| (0..rp).map(|k| (0..rp / 2).fold((0.0, 0.0), |acc, m| add(acc, cmul(x[tt * m + j], cis(-1.0, (m * k) % rp, rp))))).collect())
            .collect();
        let mut rho = vec![0usize; tt];
        for s in 1..=t {
            let b = t - s;
            let size = rp << s;
            let prev = lanes.clone();
            for j in 0..tt {
                let jb = (j >> b) & 1;
                let (lo, hi) = if jb == 0 { (j, j ^ (1 << b)) } else { (j ^ (1 << b), j) };
                for k in 0..rp {
                    let w = cmul(cis(-1.0, k, size), cis(-1.0, rho[j] % (1 << s), 1 << s));
                    let tw = cmul(prev[hi][k], w);
                    lanes[j][k] = if jb == 0 { add(prev[lo][k], tw) } else { sub(prev[lo][k], tw) };
                }
            }
            for (j, r) in rho.iter_mut().enumerate() {
                *r += ((j >> b) & 1) << (s - 1);
            }
        }
        let mut worst: f64 = 0.0;
        for j in 0..tt {
            let r = (0..t).fold(0, |acc, i| acc | (((j >> i) & 1) << (t - 1 - i)));
            assert_eq!(rho[j], r, "R = {rp}, T = {tt}: lane {j} holds bins k + R·{}, expected bitrev {r}", rho[j]);
            for (k, &got) in lanes[j].iter().enumerate() {
                let bin = k + rp * r;
                let want = x.iter().enumerate().fold((0.0, 0.0), |acc, (n, v)| add(acc, cmul(*v, cis(-1.0, (n * bin) % p, p))));
                worst = worst.max(((got.0 - want.0).powi(2) + (got.1 - want.1).powi(2)).sqrt());
            }
        }
        assert!(worst < 1e-9, "R = {rp}, T = {tt}: forward error {worst}");
        // Inverse: steps s = t … 1, lane j_b = 0 takes F[κ] + F[κ + h], lane j_b = 1
        // (F[κ] − F[κ + h])·conj(W_(32·2^s)^k·W_(2^s)^ρ) with ρ the lower combined bits.
        for s in (1..=t).rev() {
            let b = t - s;
            for (j, r) in rho.iter_mut().enumerate() {
                *r -= ((j >> b) & 1) << (s - 1);
            }
            let size = rp << s;
            let prev = lanes.clone();
            for j in 0..tt {
                let jb = (j >> b) & 1;
                let other = j ^ (1 << b);
                for k in 0..rp {
                    lanes[j][k] = if jb == 0 {
                        add(prev[j][k], prev[other][k])
                    } else {
                        let w = cmul(cis(1.0, k, size), cis(1.0, rho[j] % (1 << s), 1 << s));
                        cmul(sub(prev[other][k], prev[j][k]), w)
                    };
                }
            }
        }
        let mut worst: f64 = 0.0;
        for (j, lane) in lanes.iter().enumerate() {
            for m in 0..rp / 2 {
                let got = lane.iter().enumerate().fold((0.0, 0.0), |acc, (k, v)| add(acc, cmul(*v, cis(1.0, (m * k) % rp, rp))));
                let want = x[tt * m + j];
                worst = worst.max(((got.0 / p as f64 - want.0).powi(2) + (got.1 / p as f64 - want.1).powi(2)).sqrt());
            }
        }
        assert!(worst < 1e-9, "R = {rp}, T = {tt}: round-trip error {worst}");
    }
}

/// A small DFT as pair_mixed.cuh's fq_dft computes it: powers of two and 3, 5, 7 directly, R = A·B
/// (A odd, B a power of two) by one Cooley–Tukey split n = B·n1 + n2, k = k1 + A·k2 with the
/// twiddle W_R^(n2·k1) between the A-point and the B-point DFTs.
fn mixed_small_dft(a: &[C64], dir: f64) -> Vec<C64> {
    let r = a.len();
    let direct = |a: &[C64]| -> Vec<C64> { (0..a.len()).map(|k| a.iter().enumerate().fold((0.0, 0.0), |s, (n, v)| { let t = cmul(*v, cis(dir, (n * k) % a.len(), a.len())); (s.0 + t.0, s.1 + t.1) })).collect() };
    if r.is_power_of_two() || [3, 5, 7].contains(&r) {
        return direct(a);
    }
    let f = if r.is_multiple_of(3) { 3 } else if r.is_multiple_of(5) { 5 } else { 7 };
    let b = r / f;
    assert!(f * b == r && b.is_power_of_two(), "R = {r}");
    let u: Vec<Vec<C64>> = (0..b)
        .map(|n2| {
            let col: Vec<C64> = (0..f).map(|n1| a[b * n1 + n2]).collect();
            mixed_small_dft(&col, dir).into_iter().enumerate().map(|(k1, v)| if n2 > 0 && k1 > 0 { cmul(v, cis(dir, n2 * k1, r)) } else { v }).collect()
        })
        .collect();
    let mut out = vec![(0.0, 0.0); r];
    for k1 in 0..f {
        let row: Vec<C64> = (0..b).map(|n2| u[n2][k1]).collect();
        for (k2, v) in mixed_small_dft(&row, dir).into_iter().enumerate() {
            out[k1 + f * k2] = v;
        }
    }
    out
}

/// The mixed-radix pair engine (pair_mixed.cuh) as index arithmetic, N = 256·P, P = 2Q ∈ {40, 48, 56},
/// input nonzero for n < N/2: per column n2 two threads h, thread h the half Q-point DFT of
/// x[(2m + h)·256 + n2] (m < Q/2) by two Q/2-point DFTs, the radix-2 step across the threads with
/// W_P^k, the twiddle W_N^(n2·k1); then a DFT-256 over n2 per segment k1 gives bin k1 + P·k2. The
/// inverse (per segment the inverse DFT-256, then fq_stage1_inv) returns N·x.
#[test]
fn mixed_stage1_model_matches_the_dft() {
    let add = |a: C64, b: C64| (a.0 + b.0, a.1 + b.1);
    let sub = |a: C64, b: C64| (a.0 - b.0, a.1 - b.1);
    for q in [20usize, 24, 28] {
        let p = 2 * q;
        let n = 256 * p;
        let x: Vec<C64> = (0..n).map(|i| if i < n / 2 { (rng::normal(71 + q as u64, 2 * i as u64), rng::normal(71 + q as u64, 2 * i as u64 + 1)) } else { (0.0, 0.0) }).collect();
        // Stage 1: seg[k1][n2].
        let mut seg = vec![vec![(0.0, 0.0); 256]; p];
        for n2 in 0..256 {
            let half = |h: usize| -> Vec<C64> {
                let y: Vec<C64> = (0..q / 2).map(|m| x[(2 * m + h) * 256 + n2]).collect();
                let ev = mixed_small_dft(&y, -1.0);
                let od = mixed_small_dft(&y.iter().enumerate().map(|(m, v)| cmul(*v, cis(-1.0, m, q))).collect::<Vec<_>>(), -1.0);
                (0..q).map(|k| if k % 2 == 0 { ev[k / 2] } else { od[k / 2] }).collect()
            };
            let (a0, a1) = (half(0), half(1));
            for k in 0..q {
                let t = cmul(a1[k], cis(-1.0, k, p));
                for (k1, v) in [(k, add(a0[k], t)), (k + q, sub(a0[k], t))] {
                    seg[k1][n2] = cmul(v, cis(-1.0, (n2 * k1) % n, n));
                }
            }
        }
        // Segments: bin k1 + P·k2 = DFT_256 over n2; compared with the DFT of x on a sample of bins.
        let spec: Vec<Vec<C64>> = seg.iter().map(|s| (0..256).map(|k2| s.iter().enumerate().fold((0.0, 0.0), |acc, (n2, v)| add(acc, cmul(*v, cis(-1.0, (n2 * k2) % 256, 256))))).collect()).collect();
        let scale = (n as f64).sqrt();
        let mut worst: f64 = 0.0;
        for i in 0..400 {
            let bin = (i * 7919 + 13) % n;
            let want = x.iter().enumerate().fold((0.0, 0.0), |acc, (t, v)| add(acc, cmul(*v, cis(-1.0, (t * bin) % n, n))));
            let got = spec[bin % p][bin / p];
            worst = worst.max(((got.0 - want.0).powi(2) + (got.1 - want.1).powi(2)).sqrt() / scale);
        }
        assert!(worst < 1e-9, "P = {p}: forward error {worst}");
        // Inverse: per segment the inverse DFT-256, then per column the threads' step and the first
        // Q/2 outputs of the inverse Q-point DFT: output n1 = 2m + h.
        let back: Vec<Vec<C64>> = spec.iter().map(|s| (0..256).map(|n2| s.iter().enumerate().fold((0.0, 0.0), |acc, (k2, v)| add(acc, cmul(*v, cis(1.0, (n2 * k2) % 256, 256))))).collect()).collect();
        let mut worst: f64 = 0.0;
        for n2 in 0..256 {
            let c: Vec<C64> = (0..p).map(|k1| cmul(back[k1][n2], cis(1.0, (n2 * k1) % n, n))).collect();
            for h in 0..2 {
                let d: Vec<C64> = (0..q).map(|k| if h == 0 { add(c[k], c[k + q]) } else { cmul(sub(c[k], c[k + q]), cis(1.0, k, p)) }).collect();
                let ev = mixed_small_dft(&(0..q / 2).map(|j| d[2 * j]).collect::<Vec<_>>(), 1.0);
                let od = mixed_small_dft(&(0..q / 2).map(|j| d[2 * j + 1]).collect::<Vec<_>>(), 1.0);
                for m in 0..q / 2 {
                    let got = add(ev[m], cmul(od[m], cis(1.0, m, q)));
                    let want = x[(2 * m + h) * 256 + n2];
                    worst = worst.max(((got.0 / n as f64 - want.0).powi(2) + (got.1 / n as f64 - want.1).powi(2)).sqrt());
                }
            }
        }
        assert!(worst < 1e-9, "P = {p}: round-trip error {worst}");
    }
}

/// mixed_p takes N = 256·P only where it is below the power-of-two size and holds L ≤ N/2.
#[test]
fn mixed_radix_sizes_replace_16384_only() {
    use super::cuda::mixed_p_for_test as mp;
    let dims = |l: usize, lk: usize| Dims { b: 2, h: 4, l, lk, lk_rev: 0, hd: 1 };
    assert_eq!(mp(&dims(5000, 5000)), Some(40));
    assert_eq!(mp(&dims(5120, 5120)), Some(40));
    assert_eq!(mp(&dims(5121, 5121)), Some(48));
    assert_eq!(mp(&dims(6144, 6144)), Some(48));
    assert_eq!(mp(&dims(7000, 7000)), Some(56));
    assert_eq!(mp(&dims(7169, 7169)), None);
    assert_eq!(mp(&dims(4096, 4096)), None);  // N = 8192
    assert_eq!(mp(&dims(6000, 2000)), None);  // N = 8192 (L + Lk − 1 = 7999)
    assert_eq!(mp(&dims(5000, 4000)), Some(40));
    assert_eq!(mp(&dims(6500, 300)), None);  // N = 8192 (the P = 32 kernel without the half split)
    assert_eq!(mp(&dims(7000, 2000)), Some(56));  // L + Lk − 1 = 8999 → 16384; L ≤ N/2 needs 14000
}

/// The mixed-radix cluster sizes hold N ≥ L + Lk − 1 and L ≤ N/2, and replace a larger power of two only.
#[test]
fn mixed_cluster_sizes_are_below_the_power_of_two() {
    use super::cuda::mixed_cluster_size as mc;
    let dims = |l: usize, lk: usize| Dims { b: 2, h: 4, l, lk, lk_rev: 0, hd: 1 };
    assert_eq!(mc(&dims(9000, 9000)), Some(80));  // 17999 ≤ 20480
    assert_eq!(mc(&dims(10240, 10240)), Some(80));
    assert_eq!(mc(&dims(10241, 10241)), Some(96));
    assert_eq!(mc(&dims(14336, 14336)), Some(112));
    assert_eq!(mc(&dims(14337, 14337)), None);  // P = 128
    assert_eq!(mc(&dims(16384, 16384)), None);
    assert_eq!(mc(&dims(20000, 20000)), Some(160));  // 39999 ≤ 40960
    assert_eq!(mc(&dims(24000, 24000)), Some(192));
    assert_eq!(mc(&dims(28672, 28672)), Some(224));
    assert_eq!(mc(&dims(30000, 30000)), None);  // P = 256
    assert_eq!(mc(&dims(12000, 3000)), Some(96));  // L + Lk − 1 = 14999, but L ≤ N/2 needs 24000
    assert_eq!(mc(&dims(20000, 100)), Some(160));  // 40000
    assert_eq!(mc(&dims(15000, 100)), None);  // 30000: P = 128 (32768) is the smallest
    assert_eq!(mc(&dims(40000, 40000)), None);  // N = 131072
    assert_eq!(mc(&dims(7000, 7000)), None);  // N = 16384 (pair_mixed.cuh's sizes)
    assert_eq!(mc(&dims(8192, 8192)), None);  // 16383 ≤ 16384: P = 64
}

/// The cluster backward and its filter gradient (fc_bwd_pairc, fc_dk_pairc) are compiled for every size
/// the host launches them at: each mixed-radix cluster size (FPC_MIXED_SIZES, whose list is the host's)
/// and P = 256. And fc_dk_pairc's fold: CTA `rank` of a cluster of CS visits i < SEG·256, bin
/// k = (i / SEG)·P + rank·SEG + i mod SEG, so the cluster's CTAs take every bin k < N once, each in
/// its own segments k mod P ∈ [rank·SEG, (rank + 1)·SEG).
#[test]
fn cluster_backward_has_kernels_and_its_fold_takes_every_bin_once() {
    use super::cuda::SOURCE;
    for call in ["FPC_MIXED_SIZES(FPC_BWD_ENTRIES)", "FPC_BWD_ENTRIES(256, 4, 32)", "FPC_MIXED_SIZES(FPC_DK_ENTRY)", "FPC_DK_ENTRY(256, 4, 32)"] {
        assert!(SOURCE.body.contains(call), "{call} missing from the kernel source");
    }
    assert!(SOURCE.body.contains("#define FPC_MIXED_SIZES(X) X(80, 2, 20) X(96, 2, 24) X(112, 2, 28) X(160, 4, 20) X(192, 4, 24) X(224, 4, 28)"));
    for (p, cs, r) in [(80usize, 2usize, 20usize), (96, 2, 24), (112, 2, 28), (160, 4, 20), (192, 4, 24), (224, 4, 28), (256, 4, 32)] {
        assert_eq!(p, 2 * cs * r);
        let (n, seg) = (256 * p, 2 * r);
        let mut seen = vec![0u8; n];
        for rank in 0..cs {
            for i in 0..seg * 256 {
                let k = (i / seg) * p + rank * seg + i % seg;
                assert!(k < n && (rank * seg..(rank + 1) * seg).contains(&(k % p)), "P = {p}: bin {k} at CTA {rank}");
                seen[k] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "P = {p}: some bin folded twice or never");
    }
}
