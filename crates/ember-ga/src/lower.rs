//! Lowering systems of exact polynomials into the IR with few operations.
//!
//! Every polynomial is split into `content * primitive` (integer content, sign
//! included) and primitives are memoized, so `2(ab + cd)` and `-(ab + cd)` share
//! `ab + cd`. A primitive with several terms is lowered by greedy Horner
//! factoring by groups: repeatedly pull out the symbol that occurs in most terms
//! (`w*(x1*y1 + x2*y2)`), preferring a symbol whose cofactor is already
//! available. Leftover monomials are multiplied pairwise, starting with the
//! pair of symbols that occurs most often across the whole system, so products
//! such as `w*x0` are shared between outputs. Summands with equal coefficient
//! magnitude are added first and scaled once.
//!
//! An output may come with several equivalent candidate polynomials (for
//! example fully expanded, and staged through temporaries that stand for
//! intermediate multivectors). The system is lowered with each uniform choice,
//! the cheaper one is kept, and then each output is retried with its other
//! candidates, keeping a change whenever the count of live operations drops.

use std::collections::HashMap;

use crate::error::{GaError, Result};
use crate::ir::{Builder, Val};
use crate::poly::{Mono, Poly, Sym};

/// Symbol bindings for lowering: leaf values and staged temporaries.
#[derive(Clone, Debug, Default)]
pub struct PolyEnv {
    /// Values of leaf symbols (inputs, or any node the caller binds).
    pub leaves: HashMap<Sym, Val>,
    /// Temporaries: symbol -> (definition over leaves and earlier temporaries,
    /// full expansion over leaves).
    pub temps: HashMap<Sym, (Poly, Poly)>,
}

#[derive(Clone)]
struct Lowerer<'e> {
    b: Builder,
    env: &'e PolyEnv,
    memo: HashMap<Poly, Val>,
    mono_memo: HashMap<Mono, Val>,
    temp_vals: HashMap<Sym, Val>,
    pair_freq: HashMap<(Sym, Sym), u32>,
}

impl<'e> Lowerer<'e> {
    fn leaf(&mut self, s: Sym) -> Val {
        if let Some(v) = self.env.leaves.get(&s) {
            return *v;
        }
        if let Some(v) = self.temp_vals.get(&s) {
            return *v;
        }
        let (def, expanded) = self.env.temps.get(&s).cloned().unwrap_or_default();
        let v = self.lower(&def);
        // make the value findable from its expansion too (exact when the content is ±1)
        let (c, prim) = expanded.normalize();
        if c == 1 || c == -1 {
            self.memo.entry(prim).or_insert(v.flip_by(c < 0));
        }
        self.temp_vals.insert(s, v);
        v
    }

    fn lower(&mut self, p: &Poly) -> Val {
        let (c, prim) = p.normalize();
        if c == 0 {
            return Val::Zero;
        }
        let v = self.lower_prim(&prim);
        self.b.scale(v, c)
    }

    fn lower_prim(&mut self, prim: &Poly) -> Val {
        if let Some(v) = self.memo.get(prim) {
            return *v;
        }
        let v = if prim.len() == 1 {
            let (m, c) = &prim.terms()[0];
            let v = self.lower_mono(m);
            self.b.scale(v, *c)
        } else {
            self.horner(prim)
        };
        self.memo.insert(prim.clone(), v);
        v
    }

    fn horner(&mut self, p: &Poly) -> Val {
        let mut summands: Vec<(i64, Val)> = Vec::new();
        let mut rem: Vec<(Mono, i64)> = p.terms().to_vec();
        while rem.len() >= 2 {
            let mut counts: HashMap<Sym, usize> = HashMap::new();
            for (m, _) in &rem {
                let syms = m.syms();
                for (i, s) in syms.iter().enumerate() {
                    if i == 0 || syms[i - 1] != *s {
                        *counts.entry(*s).or_insert(0) += 1;
                    }
                }
            }
            let mut cands: Vec<(Sym, usize)> = counts.into_iter().filter(|&(_, c)| c >= 2).collect();
            if cands.is_empty() {
                break;
            }
            cands.sort_unstable();
            let mut best: Option<(u64, Sym, Poly)> = None;
            for &(s, c) in &cands {
                let q = Poly::from_terms(rem.iter().filter_map(|(m, k)| m.without(s).map(|m2| (m2, *k))));
                let (_, prim) = q.normalize();
                let hit = self.memo.contains_key(&prim);
                let score = (if hit { 1u64 << 40 } else { 0 }) + (c as u64) * 1024;
                if best.as_ref().is_none_or(|(bs, _, _)| score > *bs) {
                    best = Some((score, s, q));
                }
            }
            let (_, s, q) = best.expect("nonempty candidates");
            rem.retain(|(m, _)| !m.contains(s));
            let (c, prim) = q.normalize();
            let qv = self.lower_prim(&prim);
            let sv = self.leaf(s);
            let v = self.b.mul(qv, sv);
            summands.push((c, v));
        }
        for (m, c) in rem {
            let v = self.lower_mono(&m);
            summands.push((c, v));
        }
        self.sum_scaled(summands)
    }

    /// `Σ c_i v_i`, adding terms of equal |c| first and scaling each group once.
    fn sum_scaled(&mut self, summands: Vec<(i64, Val)>) -> Val {
        let mut groups: Vec<(u64, Vec<Val>)> = Vec::new();
        for (c, v) in summands {
            let v = if c < 0 { v.negate() } else { v };
            let a = c.unsigned_abs();
            match groups.iter_mut().find(|(k, _)| *k == a) {
                Some((_, g)) => g.push(v),
                None => groups.push((a, vec![v])),
            }
        }
        groups.sort_by_key(|(k, _)| *k);
        let mut parts = Vec::new();
        for (k, g) in groups {
            let s = self.b.sum(&g);
            parts.push(self.b.scale(s, k as i64));
        }
        self.b.sum(&parts)
    }

    fn lower_mono(&mut self, m: &Mono) -> Val {
        let syms = m.syms();
        match syms.len() {
            0 => return self.b.constant(1.0),
            1 => return self.leaf(syms[0]),
            _ => {}
        }
        if let Some(v) = self.mono_memo.get(m) {
            return *v;
        }
        // reuse an existing product of all factors but one
        let mut prev: Option<Sym> = None;
        for &s in syms {
            if prev == Some(s) {
                continue;
            }
            prev = Some(s);
            let rest = m.without(s).expect("factor occurs");
            if rest.degree() >= 2 && self.mono_memo.contains_key(&rest) {
                let rv = self.mono_memo[&rest];
                let sv = self.leaf(s);
                let v = self.b.mul(rv, sv);
                self.mono_memo.insert(m.clone(), v);
                return v;
            }
        }
        // start from the most frequent pair of the system
        let mut best = (0u32, syms[0], syms[1]);
        let mut found = false;
        for i in 0..syms.len() {
            for j in i + 1..syms.len() {
                let f = self.pair_freq.get(&(syms[i], syms[j])).copied().unwrap_or(0);
                if !found || f > best.0 {
                    best = (f, syms[i], syms[j]);
                    found = true;
                }
            }
        }
        let pair = Mono::from_syms(vec![best.1, best.2]);
        let pv = if syms.len() == 2 {
            let a = self.leaf(best.1);
            let b = self.leaf(best.2);
            self.b.mul(a, b)
        } else {
            self.lower_mono(&pair)
        };
        let v = if syms.len() == 2 {
            pv
        } else {
            let rest = m.divide(&pair).expect("pair divides");
            let rv = self.lower_mono(&rest);
            self.b.mul(pv, rv)
        };
        self.mono_memo.insert(m.clone(), v);
        v
    }
}

trait FlipBy {
    fn flip_by(self, neg: bool) -> Self;
}
impl FlipBy for Val {
    fn flip_by(self, neg: bool) -> Val {
        if neg {
            self.negate()
        } else {
            self
        }
    }
}

fn cost_of(c: (usize, usize, usize)) -> usize {
    c.0 + c.1 + c.2
}

/// Lowers a system of outputs into `b`. `candidates[i]` lists equivalent
/// polynomials for output `i` (at least one; the first should be the fully
/// expanded one). Returns one value per output. Fails when a polynomial uses a
/// symbol that is neither a leaf nor a temporary of `env`.
pub fn lower_system(b: &mut Builder, candidates: &[Vec<Poly>], env: &PolyEnv) -> Result<Vec<Val>> {
    lower_system_tiered(b, candidates, &vec![0; candidates.len()], env)
}

/// Like [`lower_system`], with a tier per output (for example forward outputs
/// in tier 0 and gradients in tier 1). Besides the per-output search, every
/// combination of "first candidate" / "last candidate" per tier is tried when
/// there are at most three tiers, so that, say, staged forward outputs can be
/// combined with expanded gradients even where no single output switch pays off.
pub fn lower_system_tiered(b: &mut Builder, candidates: &[Vec<Poly>], tiers: &[usize], env: &PolyEnv) -> Result<Vec<Val>> {
    if tiers.len() != candidates.len() {
        return Err(GaError::shape("tiers of lower_system_tiered (one per output)", candidates.len(), tiers.len()));
    }
    let bound = |s: &Sym| env.leaves.contains_key(s) || env.temps.contains_key(s);
    let polys = candidates.iter().flatten().chain(env.temps.values().map(|(d, _)| d));
    for p in polys {
        if let Some(s) = p.symbols().into_iter().find(|s| !bound(s)) {
            return Err(GaError::Invalid(format!(
                "polynomial uses symbol #{s}, which is neither bound to a value nor a staged temporary; expected only bound symbols"
            )));
        }
    }
    let start = b.node_count();
    let mut pair_freq: HashMap<(Sym, Sym), u32> = HashMap::new();
    for cands in candidates {
        for p in cands.iter().take(1) {
            for (m, _) in p.terms() {
                let s = m.syms();
                for i in 0..s.len() {
                    for j in i + 1..s.len() {
                        *pair_freq.entry((s[i], s[j])).or_insert(0) += 1;
                    }
                }
            }
        }
    }
    let base = Lowerer {
        b: std::mem::take(b),
        env,
        memo: HashMap::new(),
        mono_memo: HashMap::new(),
        temp_vals: HashMap::new(),
        pair_freq,
    };
    fn run<'e>(mut l: Lowerer<'e>, candidates: &[Vec<Poly>], pick: &dyn Fn(usize, &[Poly]) -> usize) -> (Lowerer<'e>, Vec<Val>, Vec<usize>) {
        let mut choice = Vec::new();
        let vals: Vec<Val> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let k = if c.is_empty() { 0 } else { pick(i, c) };
                choice.push(k);
                c.get(k).map(|p| l.lower(p)).unwrap_or(Val::Zero)
            })
            .collect();
        (l, vals, choice)
    }
    let multi = candidates.iter().any(|c| c.len() > 1);
    if !multi {
        let (l, vals, _) = run(base, candidates, &|_, _| 0);
        *b = l.b;
        return Ok(vals);
    }
    let ntiers = tiers.iter().max().map_or(1, |m| m + 1);
    // tier masks to try: bit t set = tier t takes its last candidate
    let masks: Vec<u32> = if ntiers <= 3 { (0..1u32 << ntiers).collect() } else { vec![0, u32::MAX] };
    let mut runs: Vec<(usize, Lowerer<'_>, Vec<Val>, Vec<usize>)> = Vec::new();
    for mask in masks {
        let pick = |i: usize, c: &[Poly]| if mask >> tiers[i].min(31) & 1 == 1 { c.len() - 1 } else { 0 };
        let (l, v, ch) = run(base.clone(), candidates, &pick);
        let c = cost_of(l.b.live_cost(&v, start));
        runs.push((c, l, v, ch));
    }
    let floor = runs.iter().map(|r| r.0).min().expect("at least one mask");
    let mut best: Option<(usize, Lowerer<'_>, Vec<Val>)> = None;
    for (mut cost, mut l, mut vals, mut choice) in runs {
        // the local search below can recover much of the cost, but not this much
        if cost > 3 * floor {
            continue;
        }
        // local improvement, one output at a time
        for (i, cands) in candidates.iter().enumerate() {
            for (k, cand) in cands.iter().enumerate() {
                if k == choice[i] {
                    continue;
                }
                let v = l.lower(cand);
                let old = vals[i];
                vals[i] = v;
                let c = cost_of(l.b.live_cost(&vals, start));
                if c < cost {
                    cost = c;
                    choice[i] = k;
                } else {
                    vals[i] = old;
                }
            }
        }
        // compare runs by what the finished program will cost
        let final_cost = cost_of(crate::finish::shared_cost(&l.b.nodes, &vals, start));
        if best.as_ref().is_none_or(|(bc, ..)| final_cost < *bc) {
            best = Some((final_cost, l, vals));
        }
    }
    let (_, best, vals) = best.expect("the cheapest run is kept");
    *b = best.b;
    Ok(vals)
}
