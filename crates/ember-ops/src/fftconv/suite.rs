//! FFT convolution's `ember check` cases and `ember bench` rows.

use super::{backward, cuda, forward, Dims, Options};
use crate::harness::bench::{params, BenchCtx, BenchRow};
use crate::harness::check::{compare, property, CheckCtx, CheckRow, Tier};
use crate::KernelBuild;
use ember_core::{DType, Device, Error, Result, Tensor};
use serde_json::json;

pub struct Family;

/// One check case: sizes and which options are on.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub b: usize,
    pub h: usize,
    pub l: usize,
    pub lk: usize,
    /// Length of k_rev, 0 for none.
    pub lkr: usize,
    pub hd: usize,
    pub d: bool,
    pub gelu: bool,
    pub mask: bool,
    pub pre: bool,
    pub post: bool,
    pub out_f32: bool,
    pub four_step: bool,
    /// Four-step rounds of one byte: one row (one head with hd = 8) per round of launches.
    pub rounds1: bool,
    /// Ask for the tensor-core forward (used where it applies: bf16 u, 256 ≤ M ≤ 4096).
    pub tc: bool,
    /// A training forward (`Options::training`): z saved for the backward where it applies.
    pub train: bool,
}

impl Case {
    /// No options, full-length filter.
    pub fn plain(b: usize, h: usize, l: usize) -> Self {
        Case { b, h, l, lk: l, lkr: 0, hd: 1, d: false, gelu: false, mask: false, pre: false, post: false, out_f32: false, four_step: false, rounds1: false, tc: false, train: false }
    }
    /// Every option on (output in u's dtype), anticausal filter of half length.
    pub fn all(b: usize, h: usize, l: usize) -> Self {
        Case { lkr: l.div_ceil(2), d: true, gelu: true, mask: true, pre: true, post: true, ..Case::plain(b, h, l) }
    }
    pub fn lk(self, lk: usize) -> Self {
        Case { lk, ..self }
    }
    pub fn hd(self, hd: usize) -> Self {
        Case { hd, ..self }
    }
    pub fn four_step(self) -> Self {
        Case { four_step: true, ..self }
    }
    pub fn rounds1(self) -> Self {
        Case { rounds1: true, ..self }
    }
    pub fn tc(self) -> Self {
        Case { tc: true, ..self }
    }
    pub fn train(self) -> Self {
        Case { train: true, ..self }
    }
    fn name(&self) -> String {
        let mut s = format!("B={} H={} L={} Lk={}", self.b, self.h, self.l, self.lk);
        if self.lkr > 0 {
            s += &format!(" Lkr={}", self.lkr);
        }
        if self.hd > 1 {
            s += &format!(" hd={}", self.hd);
        }
        let flags = [(self.d, "D"), (self.gelu, "gelu"), (self.mask, "mask"), (self.pre, "pre"), (self.post, "post"), (self.out_f32, "outf32"), (self.four_step, "4step"), (self.rounds1, "rounds1"), (self.tc, "tc"), (self.train, "train")];
        for (on, n) in flags {
            if on {
                s += " ";
                s += n;
            }
        }
        s
    }
}

/// Each option alone at one size.
fn each_option_alone(b: usize, h: usize, l: usize) -> Vec<Case> {
    let p = Case::plain(b, h, l);
    vec![
        Case { d: true, ..p },
        Case { gelu: true, ..p },
        Case { mask: true, ..p },
        Case { pre: true, ..p },
        Case { post: true, ..p },
        Case { out_f32: true, ..p },
        Case { lkr: l.div_ceil(3), ..p },
    ]
}

/// The direct forward and backward (bf16, hd = 1, no pregate; by default the forward at L ≤ 1024 and the
/// backward at L ≤ 512, so the L = 1000 and 1024 cases pair the direct forward with the FFT backward; with
/// EMBER_FFTCONV_DIRECT=1 both directions are direct in every case): every other option, k_rev,
/// Lk < L, L = 1, primes and L % 8 ≠ 0 (element loads and stores), tile ± 1, batches of 16 ± 1 rows
/// (a CTA's last row block with one row), exactly 16 rows, f32 output, the longest default L.
fn direct_cases() -> Vec<Case> {
    let no_pre = |c: Case| Case { pre: false, ..c };
    vec![
        no_pre(Case::all(1, 1, 1)),
        no_pre(Case::all(17, 3, 37)),
        no_pre(Case::all(3, 2, 256).lk(100)),
        no_pre(Case { out_f32: true, ..Case::all(16, 2, 1000) }),
        Case { gelu: true, d: true, post: true, ..Case::plain(5, 3, 1024) },
        Case { lkr: 5, ..Case::plain(2, 2, 129) },
        Case { mask: true, ..Case::plain(33, 1, 512) },
        Case { lkr: 12, d: true, ..Case::plain(15, 2, 15) }.lk(3),
        // The direct backward: two CTAs per head (their filter gradients summed by fc_dk_direct) with
        // an f32 d_out and the postgate; one tile exactly; a prime length with a last CTA of 2 rows.
        Case { gelu: true, d: true, post: true, out_f32: true, ..Case::plain(32, 2, 512) },
        Case { lkr: 16, gelu: true, ..Case::plain(16, 3, 16) },
        Case { mask: true, lkr: 40, d: true, ..Case::plain(18, 2, 241) }.lk(200),
    ]
}

fn cases(tier: Tier) -> Vec<Case> {
    match tier {
        // A few seconds on two cores: every option, hd 1 and 8, Lk < L, tiny and awkward lengths.
        Tier::Quick => {
            let mut v = vec![Case::all(1, 1, 1), Case { gelu: true, d: true, ..Case::plain(4, 1, 2) }, Case { lkr: 2, ..Case::plain(1, 7, 3) }];
            v.extend(each_option_alone(4, 7, 17));
            v.push(Case::all(1, 7, 256).lk(100));
            v.push(Case::all(1, 8, 372).hd(8));
            v.push(Case::plain(2, 8, 17).hd(8));
            v
        }
        // For compute-sanitizer: tiny sizes, but every kernel path (each on-chip block size, the
        // four-step passes, hd = 8, every option).
        Tier::Small => [direct_cases(), vec![
            Case::all(1, 1, 1),
            Case::all(2, 3, 17),
            Case::plain(1, 2, 300),
            Case::all(1, 1, 4100),
            Case::all(1, 1, 8193).lk(8193),
            Case::all(2, 3, 17).four_step(),
            Case::all(1, 2, 300).four_step(),
            // The training forward's z and row spectra on the four-step path: every option, and GELU
            // alone; the spectra alone (no GELU, no postgate: z is not needed), with Lk < L; one row
            // per forward round against one head per backward round.
            Case::all(2, 3, 300).four_step().train(),
            Case { gelu: true, ..Case::plain(3, 2, 40) }.four_step().train(),
            Case { d: true, pre: true, mask: true, ..Case::plain(2, 3, 1000) }.lk(300).four_step().train(),
            Case::all(3, 2, 300).four_step().rounds1().train(),
            // z from the cluster forward (bf16; N = 65536) for the four-step backward.
            Case { gelu: true, d: true, ..Case::plain(2, 3, 20000) }.train(),
            Case::all(1, 8, 40).hd(8),
            Case::all(1, 8, 40).hd(8).four_step(),
            // Many four-step rounds: one row (one head at hd = 8) per round.
            Case::all(2, 3, 17).four_step().rounds1(),
            Case::all(1, 16, 40).hd(8).four_step().rounds1(),
            // Tensor-core forward: M = 256 (no pass A), 512 (P = 2), 4096 (P = 16), hd = 8.
            Case::all(2, 3, 200).tc(),
            Case::all(1, 2, 300).tc(),
            Case::all(1, 1, 3000).tc(),
            Case::all(1, 8, 300).hd(8).tc(),
            // Pair forward (bf16 default, N = 512 … 8192): an odd row count per head (a row paired
            // with zeros), L > N/2 (full DFT in stage 1), P = 32.
            Case::all(3, 2, 300),
            Case::all(1, 3, 700).lk(50),
            Case::all(2, 2, 3000),
            Case::all(3, 1, 5000),
            // Staged pair forward (P = 32, no pregate, L % 8 = 0): 280 groups, more than the
            // persistent grid of 2 CTAs per SM on a 132-SM GPU, so CTAs take several groups.
            Case { gelu: true, d: true, post: true, ..Case::plain(4, 140, 3000) },
            // Training forward (z saved in bf16 from P = 32, read by the pair backward): P = 32
            // (L > N/2 with a short filter), the staged forward, P = 64; GELU alone, postgate
            // alone; below P = 32 nothing saved (L = 1500: P = 16, L = 300: P = 2).
            Case::all(3, 2, 1500).train(),
            Case::all(1, 4, 3000).lk(2000).train(),
            Case { gelu: true, d: true, post: true, ..Case::plain(4, 140, 3000) }.train(),
            Case::all(3, 1, 5000).train(),
            Case { gelu: true, ..Case::plain(3, 2, 3000) }.train(),
            Case { post: true, ..Case::plain(3, 2, 3000) }.train(),
            Case::all(3, 2, 300).train(),
            // P = 128 (N = 32768, a cluster of two CTAs per row pair): an odd row count (a pair
            // half empty), every option, plain and training; 5 × 30 rows so that backward slots
            // take two pairs each.
            Case::all(3, 1, 9000),
            Case::all(3, 1, 9000).train(),
            Case { gelu: true, d: true, ..Case::plain(5, 30, 16384) },
            // P = 128 without a pregate and with L % 8 = 0: the backward reads u from a staged copy
            // (fc_bwd_pair_staged7*), the forward runs the mixed-radix P = 80 at L = 9000 (fc_fwd_pairm80,
            // staged; the staged P = 128 forward at L = 16384 above); an odd row count, f32 output
            // in one, training in one; L = 9001 (% 8 ≠ 0) keeps the direct loads (the forward's at P = 80,
            // fc_fwd_pairmd80; L = 16383 below at P = 128).
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 1, 9000) },
            Case { gelu: true, d: true, post: true, out_f32: true, ..Case::plain(3, 2, 9000) }.train(),
            Case { gelu: true, d: true, ..Case::plain(3, 1, 9001) },
            // The staged backward at P = 64 (fc_bwd_pair_staged6*): training with every epilogue
            // option, an odd row count and f32 output; L = 5001 keeps the direct loads.
            Case { gelu: true, d: true, mask: true, post: true, out_f32: true, ..Case::plain(3, 1, 5000) }.train(),
            Case { gelu: true, d: true, ..Case::plain(3, 1, 5001) },
            // The mixed-radix forward (pair_mixed.cuh, no k_rev) and, at P = 40 and 48 with hd = 1, its
            // backward (at P = 56 and hd = 8 the backward recomputes the spectrum at its own N): P = 40
            // (above: L = 5000, 5001, training), 48 and 56 with every other option, an odd row count,
            // Lk < L (L + Lk − 1 = 8999, L ≤ N/2 takes P = 56), hd = 8, f32 output and training at
            // the largest L it takes (7168).
            Case { lkr: 0, ..Case::all(3, 2, 6000) },
            Case { lkr: 0, ..Case::all(1, 3, 7000).lk(2000) },
            Case { lkr: 0, ..Case::all(1, 8, 5000).hd(8) },
            Case { gelu: true, d: true, out_f32: true, ..Case::plain(3, 2, 7168) }.train(),
            // P = 64 (N = 16384 above the mixed sizes: 7168 < L ≤ 8192), several rows per head: the
            // pair forward's row balance there.
            Case { gelu: true, d: true, ..Case::plain(3, 2, 8000) },
            // The pair spectrum kernels (no k_rev): P = 8, 64 (one head per CTA of 512), 128.
            Case { d: true, ..Case::plain(2, 5, 1000) },
            // The narrow spectrum and backward groups (P = 2: 4 heads / 8 slots per CTA; P = 4: 2 /
            // 4): 13 and 5 heads (a partial last CTA), an odd row count (a pair half empty), every
            // epilogue option, a pregate in one.
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 13, 256) },
            Case { gelu: true, d: true, pre: true, ..Case::plain(4, 5, 500) },
            Case { gelu: true, d: true, ..Case::plain(3, 2, 5000) },
            // N = 65536 and 131072 without k_rev (an odd row count: a pair half empty; pregate,
            // postgate, mask, GELU, D): the forward on clusters of 4 CTAs at N = 65536 and (with a
            // pregate) the four-step path at 131072; EMBER_FFTCONV_PAIR_BIG=1 clusters at both, =0
            // at neither.
            Case { lkr: 0, ..Case::all(3, 1, 20000) },
            Case { lkr: 0, ..Case::all(3, 2, 40000) },
            // Without a pregate and with L % 8 = 0 the cluster forwards at P = 256, 512 read u from a
            // staged copy (fc_fwd_pair_staged8/9; at P = 512 the default then, with the bf16 output
            // staged too); L = 20004 and 40004 (% 8 ≠ 0) keep the direct loads (and 131072
            // four-step). An odd row count again, f32 output in two. (Since v23 L = 20000, 20004 and 24576
            // run the mixed-radix P = 160 / 192 forwards; L = 30000 and 30004 below keep P = 256.)
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 1, 20000) },
            Case { gelu: true, d: true, out_f32: true, ..Case::plain(1, 3, 24576) },
            Case { gelu: true, d: true, ..Case::plain(3, 1, 20004) },
            Case { gelu: true, d: true, ..Case::plain(3, 1, 40000) },
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 2, 40000) },
            Case { gelu: true, d: true, out_f32: true, ..Case::plain(1, 3, 49152) },
            Case { gelu: true, d: true, ..Case::plain(3, 1, 40004) },
            // The mixed-radix cluster forwards (pair_fwd.cuh, u staged: no pregate, L % 8 = 0; NOTES.md "v23"),
            // which the cases at L = 9000, 20000 and 24576 above take as well (P = 80, 160, 192): P = 96
            // (also with Lk < L, where L ≤ N/2 decides), 112 and 224 with an odd row count, every
            // epilogue option, training (z staged at CS = 4) and f32 output; L = 20000 with Lk = 100
            // (L + Lk − 1 plans N = 32768, L ≤ N/2 takes P = 160). L = 30000 keeps the staged P = 256
            // power-of-two forward (above the mixed sizes), plain and training. Direct loads (a pregate or
            // L % 8 ≠ 0: fc_fwd_pairmd{P}) at P = 160 above (L = 20000 with every option but k_rev, L = 20004)
            // and P = 96 with a pregate here; the power-of-two direct forwards at L = 16383 (P = 128) and
            // 30004 (P = 256).
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 2, 12000) },
            Case { gelu: true, d: true, ..Case::plain(2, 2, 12000) }.lk(3000).train(),
            Case { gelu: true, d: true, post: true, out_f32: true, ..Case::plain(3, 1, 14336) }.train(),
            Case { gelu: true, d: true, post: true, ..Case::plain(3, 2, 24000) }.train(),
            Case { gelu: true, d: true, mask: true, ..Case::plain(3, 1, 28672) },
            Case { gelu: true, d: true, ..Case::plain(2, 3, 20000) }.lk(100),
            Case { gelu: true, d: true, mask: true, post: true, ..Case::plain(3, 1, 30000) },
            Case { gelu: true, d: true, ..Case::plain(3, 1, 30000) }.train(),
            Case { lkr: 0, ..Case::all(1, 3, 12000) },
            Case { gelu: true, d: true, mask: true, ..Case::plain(3, 1, 16383) },
            Case { gelu: true, d: true, post: true, ..Case::plain(3, 1, 30004) },
        ]]
        .concat(),
        // Every size the issue names, large ones included.
        Tier::Full => {
            let mut v = direct_cases();
            for l in [1, 2, 3, 17, 256, 372, 784, 1134, 4096, 8191, 16384, 65539] {
                v.push(Case::all(4, 7, l));
            }
            for l in [17, 1134, 16384] {
                v.push(Case::plain(1, 1, l));
                v.push(Case::all(1, 1, l).lk(l / 3 + 1));
            }
            v.push(Case { gelu: true, d: true, mask: true, ..Case::plain(4, 256, 784) });
            v.push(Case::all(1, 256, 4096).lk(1000));
            v.extend(each_option_alone(4, 7, 1134));
            v.push(Case::all(1, 8, 17).hd(8));
            v.push(Case::all(4, 16, 1134).hd(8));
            v.push(Case::all(1, 8, 8191).hd(8).lk(500));
            v.push(Case::all(4, 7, 17).four_step());
            v.push(Case::all(4, 7, 1134).four_step());
            v.push(Case::all(1, 7, 8191).four_step());
            v.push(Case::all(1, 8, 372).hd(8).four_step());
            v.push(Case::all(4, 7, 1134).four_step().rounds1());
            v.push(Case::all(2, 7, 65539).lk(70).rounds1());
            v.push(Case::all(1, 7, 65539).lk(70));
            // The long rows of the bench (four-step with M1 = 256 and 1024 columns): an odd length
            // past 2^20 with every option, and 2^22 itself.
            v.push(Case::all(1, 2, (1 << 20) + 7));
            v.push(Case { gelu: true, d: true, ..Case::plain(1, 2, 1 << 22) });
            v.push(Case { gelu: true, d: true, post: true, ..Case::plain(1, 3, (1 << 20) + 7) }.train());
            v.push(Case { d: true, ..Case::plain(2, 2, (1 << 20) + 7) }.lk(5000).train());
            // The cluster forward's z (N = 65536, 131072 staged) for the four-step backward, every option but k_rev.
            v.push(Case { gelu: true, d: true, mask: true, pre: true, post: true, ..Case::plain(3, 5, 30000) }.train());
            v.push(Case { gelu: true, d: true, post: true, ..Case::plain(2, 3, 65536) }.train());
            v.push(Case::all(1, 8, 16500).hd(8).lk(300));
            // Tensor-core forward at every P (M = 256 … 4096), awkward lengths, Lk < L, hd = 8.
            for l in [129, 256, 372, 784, 1134, 2000, 4096] {
                v.push(Case::all(4, 7, l).tc());
            }
            v.push(Case::plain(3, 5, 1500).tc());
            v.push(Case { gelu: true, d: true, ..Case::plain(4, 64, 4096) }.tc());
            v.push(Case::all(1, 7, 256).lk(100).tc());
            v.push(Case::all(2, 16, 1134).hd(8).tc());
            v.push(Case { out_f32: true, ..Case::all(2, 5, 784) }.tc());
            // Pair forward (bf16 default): odd rows per head, L > N/2, every P, hd = 8, out_f32.
            for (b, l) in [(3, 129), (5, 256), (1, 1000), (3, 2047), (5, 4096), (3, 5000), (2, 8192)] {
                v.push(Case::all(b, 3, l));
            }
            v.push(Case::all(2, 3, 700).lk(50));
            v.push(Case::all(1, 4, 3000).lk(2000));
            v.push(Case::all(3, 16, 1000).hd(8));
            v.push(Case { out_f32: true, ..Case::all(3, 5, 1500) });
            // Pair backward with several pairs per slot (the filter-gradient partial accumulated
            // over pairs): enough row pairs in all that a slot takes 2-3 of a head's pairs on a
            // 132-SM GPU, an odd row count (the last pair half empty), a partial last chunk.
            v.push(Case::all(33, 300, 1000));
            v.push(Case { gelu: true, d: true, ..Case::plain(40, 64, 2000) });
            // The same at P = 2 and 4 (narrow slot groups, and the narrow spectrum without k_rev).
            v.push(Case { gelu: true, d: true, mask: true, ..Case::plain(41, 64, 256) });
            v.push(Case { gelu: true, d: true, post: true, ..Case::plain(33, 30, 500) });
            v.push(Case { gelu: true, d: true, ..Case::plain(16, 97, 1000) });
            // Pair backward at P = 64 (N = 16384, one pair per CTA of 512 threads): each option
            // alone (z recomputed only for GELU or the postgate), and 15 × 150 rows so that a
            // slot takes 2 of a head's 8 pairs on a 132-SM GPU, the last pair half empty.
            v.extend(each_option_alone(3, 5, 6000));
            v.push(Case { gelu: true, d: true, ..Case::plain(15, 150, 5000) });
            // The cluster backward at the mixed sizes (v24) with several pairs per slot, the last pair
            // half empty: P = 80 (clusters of 2; 75 heads of 8 pairs), P = 160 (clusters of 4; 9 rows,
            // 40 heads), plain and training, and P = 96 with a pregate (direct loads).
            v.push(Case { gelu: true, d: true, ..Case::plain(15, 75, 9000) });
            v.push(Case { gelu: true, d: true, post: true, ..Case::plain(15, 75, 9000) }.train());
            v.push(Case { gelu: true, d: true, mask: true, ..Case::plain(9, 40, 20000) });
            v.push(Case { gelu: true, d: true, ..Case::plain(9, 40, 20000) }.train());
            v.push(Case { gelu: true, d: true, pre: true, ..Case::plain(7, 20, 12000) });
            // Staged pair forward (P = 32, no pregate, L % 8 = 0), persistent CTAs taking several
            // groups (320 > 2 per SM): L ≤ N/2 and, with Lk = 2000, L = 6000 > N/2 (the full
            // stage 1), an odd row count, mask and postgate.
            v.push(Case { gelu: true, d: true, mask: true, ..Case::plain(16, 40, 3000) });
            v.push(Case { gelu: true, d: true, post: true, ..Case::plain(15, 40, 6000).lk(2000) });
            // Training forward: every P (z saved from P = 32), odd rows per head, several pairs
            // per slot, each option alone at P = 32 and 64, the staged forward, out_f32.
            for (b, l) in [(3, 129), (5, 256), (1, 1000), (3, 2047), (5, 4096), (3, 5000), (2, 8192)] {
                v.push(Case::all(b, 3, l).train());
            }
            v.extend(each_option_alone(3, 5, 2100).into_iter().map(Case::train));
            v.extend(each_option_alone(3, 5, 6000).into_iter().map(Case::train));
            v.push(Case { gelu: true, d: true, ..Case::plain(40, 64, 2100) }.train());
            v.push(Case { gelu: true, d: true, mask: true, ..Case::plain(16, 40, 3000) }.train());
            v.push(Case { out_f32: true, ..Case::all(3, 5, 2500) }.train());
            // P = 128 (N = 32768, clusters of two CTAs): each option alone, plain and training;
            // a slot taking two or three of a head's pairs, the last half empty (15 × 150 rows).
            v.extend(each_option_alone(3, 5, 12000));
            v.extend(each_option_alone(3, 5, 12000).into_iter().map(Case::train));
            v.push(Case { gelu: true, d: true, ..Case::plain(15, 150, 10000) });
            v.push(Case { gelu: true, d: true, ..Case::plain(15, 150, 10000) }.train());
            v
        }
    }
}

/// The random inputs of a case in one dtype, on the CPU.
struct CaseInputs {
    u: Tensor,
    k: Tensor,
    d: Option<Tensor>,
    k_rev: Option<Tensor>,
    mask: Option<Tensor>,
    pre: Option<Tensor>,
    post: Option<Tensor>,
    d_out: Tensor,
}

fn make_inputs(c: &Case, dtype: DType, pd: DType, seed: u64) -> Result<CaseInputs> {
    let shape = [c.b, c.h, c.l];
    let heads = c.h / c.hd;
    let rand_scaled = |shape: &[usize], scale: f64, dt: DType, s: u64| -> Result<Tensor> {
        let v: Vec<f64> = Tensor::randn(shape, DType::F64, Device::Cpu, s)?.to_vec_f64()?.iter().map(|x| x * scale).collect();
        Tensor::from_f64(&v, shape, dt, Device::Cpu)
    };
    // Filters scaled so that z stays O(1), where GELU is curved.
    let opt = |on: bool, f: &dyn Fn() -> Result<Tensor>| if on { f().map(Some) } else { Ok(None) };
    let out_dt = if c.out_f32 && dtype != DType::F64 { DType::F32 } else { dtype };
    Ok(CaseInputs {
        u: Tensor::randn(&shape, dtype, Device::Cpu, seed)?,
        k: rand_scaled(&[heads, c.lk], 1.0 / (c.lk as f64).sqrt(), pd, seed + 1)?,
        d: opt(c.d, &|| rand_scaled(&[heads], 1.0, pd, seed + 2))?,
        k_rev: opt(c.lkr > 0, &|| rand_scaled(&[heads, c.lkr.max(1)], 1.0 / (c.lkr.max(1) as f64).sqrt(), pd, seed + 3))?,
        mask: opt(c.mask, &|| Tensor::rand(&[c.b, c.h], 0.0, 2.0, pd, Device::Cpu, seed + 4))?,
        pre: opt(c.pre, &|| Tensor::rand(&shape, -1.5, 1.5, dtype, Device::Cpu, seed + 5))?,
        post: opt(c.post, &|| Tensor::rand(&shape, -1.5, 1.5, dtype, Device::Cpu, seed + 6))?,
        d_out: Tensor::randn(&shape, out_dt, Device::Cpu, seed + 7)?,
    })
}

impl CaseInputs {
    fn to(&self, device: Device) -> Result<CaseInputs> {
        let o = |t: &Option<Tensor>| t.as_ref().map(|t| t.to_device(device)).transpose();
        Ok(CaseInputs {
            u: self.u.to_device(device)?,
            k: self.k.to_device(device)?,
            d: o(&self.d)?,
            k_rev: o(&self.k_rev)?,
            mask: o(&self.mask)?,
            pre: o(&self.pre)?,
            post: o(&self.post)?,
            d_out: self.d_out.to_device(device)?,
        })
    }
    fn to_f64(&self) -> Result<CaseInputs> {
        let o = |t: &Option<Tensor>| t.as_ref().map(|t| t.to_dtype(DType::F64)).transpose();
        Ok(CaseInputs {
            u: self.u.to_dtype(DType::F64)?,
            k: self.k.to_dtype(DType::F64)?,
            d: o(&self.d)?,
            k_rev: o(&self.k_rev)?,
            mask: o(&self.mask)?,
            pre: o(&self.pre)?,
            post: o(&self.post)?,
            d_out: self.d_out.to_dtype(DType::F64)?,
        })
    }
    fn options(&self, c: &Case) -> Options<'_> {
        Options {
            gelu: c.gelu,
            dropout_mask: self.mask.as_ref(),
            k_rev: self.k_rev.as_ref(),
            pregate: self.pre.as_ref(),
            postgate: self.post.as_ref(),
            out_f32: c.out_f32,
            head_dim: c.hd,
            force_four_step: c.four_step,
            four_step_round_bytes: c.rounds1.then_some(1),
            tensor_cores: c.tc,
            training: c.train,
        }
    }
}

/// Output and every gradient, as f64 vectors in a fixed order with their names.
fn run_all(x: &CaseInputs, c: &Case) -> Result<Vec<(&'static str, Tensor)>> {
    let opts = x.options(c);
    let f = forward(&x.u, &x.k, x.d.as_ref(), &opts)?;
    let g = backward(&f, &x.d_out)?;
    let mut v = vec![("out", f.out), ("d_u", g.d_u), ("d_k", g.d_k)];
    let named = [("d_k_rev", g.d_k_rev), ("d_D", g.d_d), ("d_pregate", g.d_pregate), ("d_postgate", g.d_postgate)];
    v.extend(named.into_iter().filter_map(|(n, t)| t.map(|t| (n, t))));
    Ok(v)
}

/// The f64 reference's outputs for a case (run through the public API on f64 CPU tensors).
fn reference_all(x: &CaseInputs, c: &Case) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let r = x.to_f64()?;
    let c64 = Case { out_f32: false, ..*c };
    run_all(&r, &c64)?.into_iter().map(|(n, t)| Ok((n, t.to_vec_f64()?))).collect()
}

fn check_case(ctx: &CheckCtx, c: &Case, dtype: DType) -> Result<Vec<CheckRow>> {
    let case = c.name();
    let seed = ctx.seed_for(&format!("{case}{dtype}"));
    let x = make_inputs(c, dtype, DType::F32, seed)?;
    let refs = reference_all(&x, c)?;
    let dev_inputs = x.to(ctx.device)?;
    let got = run_all(&dev_inputs, c)?;
    let mut rows = Vec::new();
    for ((name, t), (rname, r)) in got.iter().zip(&refs) {
        debug_assert_eq!(name, rname);
        // Each result is rounded to its own dtype once; f32 results (filter gradients, f32 output)
        // meet the f32 tolerance only when the inputs were f32, since half inputs make z itself
        // carry the inputs' rounding through GELU — the reference sees the same rounded inputs,
        // so the tolerance of the inputs' dtype applies.
        rows.push(compare("fftconv", &case, name, t, r, dtype.tolerance())?);
    }
    if matches!(ctx.device, Device::Cuda(_)) {
        rows.extend(cuda_properties(ctx, c, dtype, &case, &x, &dev_inputs, &got, &refs)?);
    }
    Ok(rows)
}

/// On CUDA: bitwise determinism (a second run gives the same bits), and in half dtypes the
/// output's error at most twice that of the same math in f32 on the same rounded inputs (the
/// CPU fast path, PyTorch's bf16-input reference in kind).
#[allow(clippy::too_many_arguments)]
fn cuda_properties(
    ctx: &CheckCtx,
    c: &Case,
    dtype: DType,
    case: &str,
    x: &CaseInputs,
    dev_inputs: &CaseInputs,
    got: &[(&'static str, Tensor)],
    refs: &[(&'static str, Vec<f64>)],
) -> Result<Vec<CheckRow>> {
    let mut rows = Vec::new();
    if c.train {
        // A training forward's out is the plain forward's, bit for bit; in bf16 (the pair kernels at
        // these sizes) z was saved, so the backward above read it.
        let opts = dev_inputs.options(c);
        let f = forward(&dev_inputs.u, &dev_inputs.k, dev_inputs.d.as_ref(), &opts)?;
        let plain = forward(&dev_inputs.u, &dev_inputs.k, dev_inputs.d.as_ref(), &Options { training: false, ..opts })?;
        let (a, b) = (f.out.to_vec_f64()?, plain.out.to_vec_f64()?);
        rows.push(property("fftconv", case, "train out = plain out", dtype, ctx.device, a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())));
        // Saved where the pair backward runs at P ≥ 32 (bf16, hd = 1, N ≥ 8192: at these cases'
        // on-chip sizes, L + max(Lk, Lkr) − 1 > 4096; from N = 16384 only with L ≤ N/2, else the v2
        // backward runs, e.g. L = 12000 with Lk = 3000 at N = 16384) and for the four-step one (N ≥ 65536).
        if dtype == DType::BF16 && c.hd == 1 && !c.four_step && (c.gelu || c.post) {
            let n = (c.l + c.lk.max(c.lkr) - 1).next_power_of_two();
            let want = n > 4096 && (n <= 8192 || 2 * c.l <= n || n >= 1 << 16);
            rows.push(property("fftconv", case, if want { "train z saved" } else { "train z not saved (small P)" }, dtype, ctx.device, f.saved_z() == want));
        }
        // For the four-step backward (N ≥ 65536, or forced) it is kept in every dtype (hd = 1), whether
        // the forward ran four-step or, in bf16 at N = 65536 and 131072, on clusters.
        let four_step_bwd = c.four_step || c.l + c.lk.max(c.lkr) - 1 > 1 << 15;
        if four_step_bwd && c.hd == 1 && (c.gelu || c.post) && ember_core::knob("EMBER_FFTCONV_FOUR_STEP_Z") != Some("0") {
            rows.push(property("fftconv", case, "train z saved (four-step)", dtype, ctx.device, f.saved_z()));
        }
        // And every row's spectrum, where z is saved or not needed.
        let z_ok = !(c.gelu || c.post) || ember_core::knob("EMBER_FFTCONV_FOUR_STEP_Z") != Some("0");
        if (c.four_step || c.l > 1 << 17) && c.hd == 1 && z_ok && ember_core::knob("EMBER_FFTCONV_FOUR_STEP_W") != Some("0") {
            rows.push(property("fftconv", case, "train row spectra saved (four-step)", dtype, ctx.device, f.saved_row_spectra()));
        }
    }
    let again = run_all(dev_inputs, c)?;
    let same = got.iter().zip(&again).all(|((_, a), (_, b))| matches!((a.to_vec_f64(), b.to_vec_f64()), (Ok(a), Ok(b)) if a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())));
    rows.push(property("fftconv", case, "bitwise-rerun", dtype, ctx.device, same));
    if dtype != DType::F32 && !c.out_f32 {
        let cpu_out = run_all(x, c)?.remove(0).1.to_vec_f64()?;
        let f32_err = ember_core::compare::rel_err(&cpu_out, &refs[0].1);
        let mut row = compare("fftconv", case, "out≤2×f32math", &got[0].1, &refs[0].1, 2.0 * f32_err.max(1e-7))?;
        row.tol = 2.0 * f32_err.max(1e-7);
        rows.push(row);
    }
    // Rows of very different magnitude side by side, where the forward treats each row's range on its
    // own — the direct forward (a power-of-two scale per row) and the P = 64 and mixed-radix pair
    // forwards (fp_balance rebalances the two rows of a complex signal; pair_tc.cuh; the other pair
    // kernels do not: NOTES "Missing / weak"): batch entry 0 of u scaled by 2^-30
    // (exact), that entry's output against the f64 reference of the same inputs, the error over that
    // entry alone; and batch entry 0 of u all zeros, whose output must be exactly zero (0 + D·0,
    // GELU(0) = 0), not the other rows' rounding. The same for d_out and d_u where the direct
    // backward runs (d_z per row by its own power of two; the pair backward does not rebalance its
    // rows: NOTES "Missing / weak").
    let opts = dev_inputs.options(c);
    let dims = super::validate(&dev_inputs.u, &dev_inputs.k, dev_inputs.d.as_ref(), &opts)?;
    if dtype == DType::BF16 && c.b > 1 {
        let fwd_rows = cuda::forward_keeps_row_range(&dev_inputs.u, &opts, &dims)?;
        let bwd_rows = cuda::use_direct(dtype, &opts, &dims) && cuda::use_direct_bwd(dev_inputs.u.cuda_device()?, dtype, &opts, &dims);
        let first = c.h * c.l;
        // (u or d_out, factor, the output of batch entry 0 it scales or zeroes)
        for (on_u, factor, output) in [(true, 2f64.powi(-30), "out"), (true, 0.0, "out"), (false, 2f64.powi(-30), "d_u")] {
            if !(if on_u { fwd_rows } else { bwd_rows }) {
                continue;
            }
            let mut xm = x.to(Device::Cpu)?;
            let t = if on_u { &x.u } else { &x.d_out };
            let mut v = t.to_vec_f64()?;
            v[..first].iter_mut().for_each(|e| *e *= factor);
            let m = Tensor::from_f64(&v, t.shape(), t.dtype(), Device::Cpu)?;
            if on_u { xm.u = m } else { xm.d_out = m }
            let got = run_all(&xm.to(ctx.device)?, c)?;
            let g = got.iter().find(|(n, _)| *n == output).map(|(_, t)| t.to_vec_f64()).transpose()?.unwrap_or_default();
            let input = if on_u { "u" } else { "d_out" };
            if factor == 0.0 {
                rows.push(property("fftconv", case, &format!("{output}, batch 0 {input} zero: exactly 0"), dtype, ctx.device, g.len() >= first && g[..first].iter().all(|v| *v == 0.0)));
                continue;
            }
            let want = reference_all(&xm, c)?;
            let r = want.iter().find(|(n, _)| *n == output).map(|(_, v)| v.clone()).unwrap_or_default();
            rows.push(CheckRow {
                op: "fftconv".into(),
                case: case.into(),
                quantity: format!("{output}, batch 0 {input} at 2^-30"),
                dtype,
                device: ctx.device.to_string(),
                rel_err: ember_core::compare::rel_err(&g[..first.min(g.len())], &r[..first.min(r.len())]),
                tol: dtype.tolerance(),
            });
        }
    }
    Ok(rows)
}

/// Bad input on this device: each is a clear `Err` naming the argument, and nothing is launched.
fn bad_input_rows(ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
    let dev = ctx.device;
    let f = |shape: &[usize], dt: DType| Tensor::zeros(shape, dt, dev);
    let u = f(&[2, 8, 16], DType::BF16)?;
    let k = f(&[8, 16], DType::F32)?;
    let mut rows = Vec::new();
    let mut expect = |what: &str, r: Result<Dims>, needle: &str| {
        let ok = matches!(&r, Err(e) if e.to_string().contains(needle));
        rows.push(property("fftconv", &format!("bad input: {what}"), "clear Err", DType::BF16, dev, ok));
    };
    expect("Lk > L", super::validate(&u, &f(&[8, 17], DType::F32)?, None, &Options::new()), "argument `k`");
    expect("H mismatch", super::validate(&u, &f(&[7, 16], DType::F32)?, None, &Options::new()), "(H/head_dim, k_len) = (8, n)");
    let m = f(&[8, 2], DType::F32)?;
    expect("mask shape", super::validate(&u, &k, None, &Options::new().dropout_mask(&m)), "argument `dropout_mask`: expected shape (B, H) = [2, 8]");
    let u6 = f(&[2, 12, 16], DType::BF16)?;
    expect("hd ∤ H", super::validate(&u6, &f(&[1, 16], DType::F32)?, None, &Options::new().head_dim(8)), "expected a divisor of H = 12, got 8");
    expect("k dtype", super::validate(&u, &f(&[8, 16], DType::BF16)?, None, &Options::new()), "argument `k`: expected dtype f32, got bf16");
    // After the errors, a valid call still works on this device (no sticky error).
    let ok = forward(&Tensor::randn(&[2, 8, 16], DType::BF16, dev, 3)?, &Tensor::randn(&[8, 16], DType::F32, dev, 4)?, None, &Options::new()).and_then(|f| f.out.to_vec_f64());
    rows.push(property("fftconv", "valid call after bad input", "works", DType::BF16, dev, ok.is_ok_and(|v| v.iter().all(|x| x.is_finite()))));
    Ok(rows)
}

/// Hyena's benchmark configuration: bf16 u, f32 k of full length, with D and GELU.
#[derive(Clone, Copy)]
struct BenchShape {
    b: usize,
    h: usize,
    l: usize,
}

fn bench_shapes(ctx: &BenchCtx) -> Vec<BenchShape> {
    let s = |b, h, l| BenchShape { b, h, l };
    let shapes = match (ctx.device, ctx.quick) {
        (Device::Cpu, _) => vec![s(2, 16, 1024), s(2, 16, 4096)],
        (_, true) => vec![s(16, 768, 1024), s(16, 768, 4096), s(1, 64, 1 << 20)],
        (_, false) => {
            let mut v: Vec<_> = [256, 1000, 1024, 2048, 4096, 5000, 16384].iter().map(|&l| s(16, 768, l)).collect();
            v.push(s(4, 256, 65536));
            v.push(s(1, 64, 1 << 20));
            v.push(s(1, 64, 1 << 22));
            v
        }
    };
    // For profiling one shape: EMBER_FFTCONV_BENCH_L=4096,1024 keeps only those lengths; a length
    // the list lacks is added (B = 16, H = 768 up to 16384, else B = 4, H = 256 as L = 65536).
    match std::env::var("EMBER_FFTCONV_BENCH_L") {
        Ok(ls) => {
            let keep: Vec<usize> = ls.split(',').filter_map(|v| v.trim().parse().ok()).filter(|&l| l > 0).collect();
            let mut v: Vec<_> = shapes.iter().copied().filter(|s| keep.contains(&s.l)).collect();
            for &l in &keep {
                if !shapes.iter().any(|s| s.l == l) {
                    v.push(if l <= 16384 { s(16, 768, l) } else { s(4, 256, l) });
                }
            }
            v
        }
        Err(_) => shapes,
    }
}

/// FLOPs of a real FFT of n points (half a complex one, 5·n·log2 n / 2).
fn rfft_flops(n: usize) -> f64 {
    2.5 * n as f64 * (n as f64).log2()
}

impl crate::OpFamily for Family {
    fn name(&self) -> &'static str {
        "fftconv"
    }
    fn summary(&self) -> &'static str {
        "FFT long convolution (Hyena/H3): causal + anticausal filters, D skip, GELU, gates, mask, multi-head; fwd and bwd, any L"
    }

    fn check(&self, ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
        let mut rows = Vec::new();
        // For a sanitizer run over a few kernels: EMBER_FFTCONV_CHECK_L=9000,16384 keeps the cases
        // of those lengths.
        let only: Option<Vec<usize>> = std::env::var("EMBER_FFTCONV_CHECK_L").ok().map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect());
        // EMBER_FFTCONV_CHECK_SHARD=i/n keeps every n-th case from the i-th, so n processes can share
        // a tier (its f64 references are most of its time); the bad-input rows run in shard 0.
        let (shard, shards) = check_shard()?;
        let kept = cases(ctx.tier).into_iter().filter(|c| only.as_ref().is_none_or(|ls| ls.contains(&c.l)));
        for c in kept.enumerate().filter(|(i, _)| i % shards == shard).map(|(_, c)| c) {
            for dtype in DType::ACTIVATIONS {
                rows.extend(check_case(ctx, &c, dtype).map_err(|e| Error::invalid("case", format!("{} {dtype}: {e}", c.name())))?);
            }
        }
        if shard == 0 {
            rows.extend(bad_input_rows(ctx)?);
        }
        Ok(rows)
    }

    fn bench(&self, ctx: &BenchCtx, progress: &mut dyn FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
        let mut rows = Vec::new();
        // Hyena's configuration is bf16 u; EMBER_FFTCONV_BENCH_DTYPE=f32|f16 times another u dtype
        // (the f32 and f16 rows run the CUDA-core FFT kernels where bf16 runs the tensor-core ones).
        let dtype = match std::env::var("EMBER_FFTCONV_BENCH_DTYPE") {
            Ok(v) => v.parse::<DType>()?,
            Err(_) => DType::BF16,
        };
        let es = dtype.size() as f64;
        for s in bench_shapes(ctx) {
            let (b, h, l) = (s.b, s.h, s.l);
            let elems = (b * h * l) as f64;
            let filt = (h * l) as f64;
            let fwd_bytes = es * 2.0 * elems + 4.0 * filt;
            let bwd_bytes = fwd_bytes + es * 3.0 * elems + 4.0 * filt;
            let n = Dims { b, h, l, lk: l, lk_rev: 0, hd: 1 }.fft_size();
            let fwd_flops = (2 * b * h + h) as f64 * rfft_flops(n);
            let bwd_flops = fwd_flops + (4 * b * h + h) as f64 * rfft_flops(n);
            let sets = ctx.rotation(fwd_bytes);
            let mk = |i: usize| -> Result<(Tensor, Tensor, Tensor, Tensor)> {
                let seed = 1000 + 10 * i as u64;
                let u = Tensor::rand(&[b, h, l], -1.0, 1.0, dtype, ctx.device, seed)?;
                let k = Tensor::rand(&[h, l], -1.0 / (l as f32).sqrt(), 1.0 / (l as f32).sqrt(), DType::F32, ctx.device, seed + 1)?;
                let d = Tensor::rand(&[h], -1.0, 1.0, DType::F32, ctx.device, seed + 2)?;
                let dy = Tensor::rand(&[b, h, l], -1.0, 1.0, dtype, ctx.device, seed + 3)?;
                Ok((u, k, d, dy))
            };
            let sets_v: Vec<_> = (0..sets).map(mk).collect::<Result<_>>()?;
            let opts = Options::new().gelu(true);
            let p = params(&[("b", json!(b)), ("h", json!(h)), ("l", json!(l)), ("gelu", json!(true)), ("d", json!(true))]);
            // The fwd and fwd+bwd rows of one set of options.
            let mut time_both = |opts: &Options, p: serde_json::Map<String, serde_json::Value>| -> Result<()> {
                let ms = ctx.time(300.0, |i| {
                    let (u, k, d, _) = &sets_v[i % sets];
                    forward(u, k, Some(d), opts).map(drop)
                })?;
                let row = ctx.row("fftconv", "fwd", dtype, p.clone(), ms, fwd_bytes, fwd_flops);
                progress(&row);
                rows.push(row);
                let ms = ctx.time(300.0, |i| {
                    let (u, k, d, dy) = &sets_v[i % sets];
                    let f = forward(u, k, Some(d), opts)?;
                    backward(&f, dy).map(drop)
                })?;
                let row = ctx.row("fftconv", "fwd+bwd", dtype, p, ms, bwd_bytes, bwd_flops);
                progress(&row);
                rows.push(row);
                Ok(())
            };
            time_both(&opts, p.clone())?;
            // The training forward (z, and on the four-step path the rows' spectra, kept for the
            // backward) where it applies, beside the rows above.
            let topts = opts.training(true);
            let (u0, k0, d0, _) = &sets_v[0];
            let f0 = forward(u0, k0, Some(d0), &topts)?;
            if f0.saved_z() || f0.saved_row_spectra() {
                drop(f0);
                let mut pt = p;
                pt.insert("train".into(), json!(true));
                time_both(&topts, pt)?;
            }
        }
        Ok(rows)
    }

    fn kernels(&self) -> Vec<KernelBuild> {
        cuda::kernel_builds()
    }
}

#[cfg(test)]
pub(super) fn quick_cases() -> Vec<Case> {
    cases(Tier::Quick)
}

#[cfg(test)]
pub(super) fn check_case_for_tests(ctx: &CheckCtx, c: &Case, dtype: DType) -> Result<Vec<CheckRow>> {
    check_case(ctx, c, dtype)
}

/// `EMBER_FFTCONV_CHECK_SHARD=i/n` as (i, n); (0, 1) when unset.
fn check_shard() -> Result<(usize, usize)> {
    match std::env::var("EMBER_FFTCONV_CHECK_SHARD") {
        Ok(v) => parse_shard(&v),
        Err(_) => Ok((0, 1)),
    }
}

/// "i/n" with i < n as (i, n).
fn parse_shard(v: &str) -> Result<(usize, usize)> {
    let bad = || Error::invalid("EMBER_FFTCONV_CHECK_SHARD", format!("expected i/n with i < n, got {v:?}"));
    let (i, n) = v.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

#[cfg(test)]
mod shard_tests {
    use super::parse_shard;

    #[test]
    fn shards_parse_and_bad_ones_are_errors() {
        assert_eq!(parse_shard("0/6").unwrap(), (0, 6));
        assert_eq!(parse_shard(" 5 / 6 ").unwrap(), (5, 6));
        for bad in ["6/6", "1", "a/2", "1/0", "-1/3", ""] {
            let e = parse_shard(bad).unwrap_err().to_string();
            assert!(e.contains("EMBER_FFTCONV_CHECK_SHARD") && e.contains("i/n"), "{bad:?}: {e}");
        }
    }
}
