//! Symbolic programs: declared inputs, expressions, outputs and their VJPs.
//!
//! A [`Program`] is the symbol context of an expression. It hands out input
//! multivectors and scalar groups (each element a fresh symbol), can stage
//! intermediate multivectors into temporaries, records outputs, adds
//! vector–Jacobian products, and lowers everything into an [`Ir`] in one
//! pass so forward and gradient code share subexpressions.
//!
//! ```
//! use ember_ga::{Algebra, Program};
//! let alg = Algebra::new(3, 0, 0)?;
//! let mut prog = Program::new();
//! let x = prog.input_full("x", &alg)?;
//! let y = prog.input_full("y", &alg)?;
//! let out = (&x * &y)?;
//! prog.output("out", &out)?;
//! prog.vjp(&["x", "y"])?;
//! let ir = prog.lower("gp3")?;
//! assert_eq!(ir.counts().muls, 64 + 2 * 64);
//! # Ok::<(), ember_ga::GaError>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::algebra::Algebra;
use crate::error::{GaError, Result};
use crate::ir::{check_ident, Builder, Ir, Val};
use crate::lower::{lower_system_tiered, PolyEnv};
use crate::multivector::Multivector;
use crate::poly::{Mono, Poly, PolyAcc, Sym};

static NEXT_CTX: AtomicU64 = AtomicU64::new(1);

/// Shape of an input or output group.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A multivector stored as the coefficients of `blades` (canonical indices, in order).
    Multivector {
        /// The algebra.
        alg: Arc<Algebra>,
        /// Stored blades.
        blades: Vec<usize>,
    },
    /// `len` plain scalars.
    Scalars(usize),
}

impl Shape {
    /// Number of scalars.
    pub fn len(&self) -> usize {
        match self {
            Shape::Multivector { blades, .. } => blades.len(),
            Shape::Scalars(n) => *n,
        }
    }
    /// Whether the group is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// One label per element: blade names, or `name0, name1, ...` for scalars.
    pub fn labels(&self, name: &str) -> Vec<String> {
        match self {
            Shape::Multivector { alg, blades } => blades.iter().map(|&b| alg.blade_name(b).to_string()).collect(),
            Shape::Scalars(n) => (0..*n).map(|i| format!("{name}{i}")).collect(),
        }
    }
}

#[derive(Clone, Debug)]
enum SymDef {
    Input { group: usize, index: usize },
    Temp { def: Poly, expanded: Poly },
}

/// A declared group of a program.
#[derive(Clone, Debug)]
pub struct Group {
    /// Identifier.
    pub name: String,
    /// Shape.
    pub shape: Shape,
}

#[derive(Clone, Debug)]
struct InGroup {
    group: Group,
    first: Sym,
}

#[derive(Clone, Debug)]
struct OutGroup {
    group: Group,
    /// Whether this group was added by [`Program::vjp`].
    gradient: bool,
    /// Possibly over temporaries.
    staged: Vec<Poly>,
    /// Over inputs only.
    expanded: Vec<Poly>,
}

/// Symbol context, outputs and gradients of a generated computation.
#[derive(Clone, Debug)]
pub struct Program {
    ctx: u64,
    syms: Vec<SymDef>,
    inputs: Vec<InGroup>,
    outputs: Vec<OutGroup>,
}

impl Default for Program {
    fn default() -> Self {
        Program::new()
    }
}

impl Program {
    /// An empty program with a fresh symbol context.
    pub fn new() -> Program {
        Program { ctx: NEXT_CTX.fetch_add(1, Ordering::Relaxed), syms: Vec::new(), inputs: Vec::new(), outputs: Vec::new() }
    }

    /// The symbol context id carried by this program's multivectors.
    pub fn context(&self) -> u64 {
        self.ctx
    }

    fn check_new_name(&self, name: &str) -> Result<()> {
        check_ident(name)?;
        if self.inputs.iter().any(|g| g.group.name == name) || self.outputs.iter().any(|g| g.group.name == name) {
            return Err(GaError::Invalid(format!("group name {name:?} is declared twice; expected unique names")));
        }
        Ok(())
    }

    fn new_input(&mut self, name: &str, shape: Shape) -> Result<Vec<Sym>> {
        self.check_new_name(name)?;
        let group = self.inputs.len();
        let first = self.syms.len() as Sym;
        let n = shape.len();
        for index in 0..n {
            self.syms.push(SymDef::Input { group, index });
        }
        self.inputs.push(InGroup { group: Group { name: name.to_string(), shape }, first });
        Ok((0..n as Sym).map(|i| first + i).collect())
    }

    /// A multivector input with one symbol per blade in `blades` (canonical indices).
    pub fn input(&mut self, name: &str, alg: &Arc<Algebra>, blades: &[usize]) -> Result<Multivector> {
        let mut sorted = blades.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != blades.len() || sorted.last().is_some_and(|&b| b >= alg.dim()) {
            return Err(GaError::shape(
                format!("blades of input {name:?}"),
                format!("distinct indices below {} of {alg}", alg.dim()),
                format!("{blades:?}"),
            ));
        }
        let syms = self.new_input(name, Shape::Multivector { alg: alg.clone(), blades: blades.to_vec() })?;
        let terms = blades.iter().zip(syms).map(|(&b, s)| (b, Poly::sym(s)));
        Ok(Multivector::from_terms(alg, self.ctx, terms))
    }

    /// A full multivector input (all `2^n` blades).
    pub fn input_full(&mut self, name: &str, alg: &Arc<Algebra>) -> Result<Multivector> {
        let blades: Vec<usize> = (0..alg.dim()).collect();
        self.input(name, alg, &blades)
    }

    /// An input with all blades of the given grades.
    pub fn input_grades(&mut self, name: &str, alg: &Arc<Algebra>, grades: &[usize]) -> Result<Multivector> {
        if let Some(&g) = grades.iter().find(|&&g| g > alg.n()) {
            return Err(GaError::shape(format!("grade of input {name:?} in {alg}"), format!("<= {}", alg.n()), g));
        }
        self.input(name, alg, &alg.blades_of_grades(grades))
    }

    /// An even multivector input (grades 0, 2, 4, ...).
    pub fn input_even(&mut self, name: &str, alg: &Arc<Algebra>) -> Result<Multivector> {
        self.input(name, alg, &alg.even_blades())
    }

    /// `len` scalar inputs (e.g. weights).
    pub fn input_scalars(&mut self, name: &str, len: usize) -> Result<Vec<Poly>> {
        Ok(self.new_input(name, Shape::Scalars(len))?.into_iter().map(Poly::sym).collect())
    }

    /// Declared input groups, in argument order.
    pub fn inputs(&self) -> Vec<Group> {
        self.inputs.iter().map(|g| g.group.clone()).collect()
    }

    /// Declared output groups, in argument order.
    pub fn outputs(&self) -> Vec<Group> {
        self.outputs.iter().map(|g| g.group.clone()).collect()
    }

    /// Name of a symbol: `x[3]` for inputs, `t5` for temporaries.
    pub fn sym_name(&self, s: Sym) -> String {
        match self.syms.get(s as usize) {
            Some(SymDef::Input { group, index }) => format!("{}[{}]", self.inputs[*group].group.name, index),
            Some(SymDef::Temp { .. }) => format!("t{s}"),
            None => format!("?{s}"),
        }
    }

    /// Formats a multivector of this program with symbol names (`x[3]`, `t12`).
    pub fn display(&self, mv: &Multivector) -> String {
        mv.display_with(&|s| self.sym_name(s))
    }

    fn check_ctx(&self, mv: &Multivector) -> Result<()> {
        match mv.context() {
            0 => Ok(()),
            c if c == self.ctx => Ok(()),
            c => Err(GaError::ContextMismatch { expected: self.ctx, got: c }),
        }
    }

    fn check_syms(&self, p: &Poly) -> Result<()> {
        if let Some(&s) = p.symbols().last() {
            if s as usize >= self.syms.len() {
                return Err(GaError::Invalid(format!(
                    "polynomial uses symbol #{s}, but this program has only {} symbols; expected symbols of this program",
                    self.syms.len()
                )));
            }
        }
        Ok(())
    }

    /// Full expansion of `p` over input symbols.
    pub fn expand(&self, p: &Poly) -> Poly {
        if p.symbols().iter().all(|&s| matches!(self.syms.get(s as usize), Some(SymDef::Input { .. }) | None)) {
            return p.clone();
        }
        p.substitute(&mut |s| match self.syms.get(s as usize) {
            Some(SymDef::Temp { expanded, .. }) => Some(expanded.clone()),
            _ => None,
        })
    }

    /// Replaces `p` by a temporary symbol (unless it is already a symbol or a constant).
    pub fn stage_poly(&mut self, p: &Poly) -> Result<Poly> {
        self.check_syms(p)?;
        if p.len() <= 1 && p.degree() <= 1 && p.terms().first().is_none_or(|(_, c)| c.abs() == 1) {
            return Ok(p.clone());
        }
        let expanded = self.expand(p);
        let s = self.syms.len() as Sym;
        self.syms.push(SymDef::Temp { def: p.clone(), expanded });
        Ok(Poly::sym(s))
    }

    /// Replaces every coefficient of `mv` by a temporary: later expressions use
    /// the temporaries, and lowering may compute them once and reuse them.
    pub fn stage(&mut self, mv: &Multivector) -> Result<Multivector> {
        self.check_ctx(mv)?;
        let mut terms = Vec::new();
        for (b, p) in mv.terms() {
            terms.push((*b, self.stage_poly(p)?));
        }
        Ok(Multivector::from_terms(mv.algebra(), self.ctx, terms))
    }

    /// Sandwich `x y x̃` computed through the staged product `x y`; components
    /// that vanish identically (after expansion) are dropped.
    pub fn sandwich(&mut self, x: &Multivector, y: &Multivector) -> Result<Multivector> {
        self.check_ctx(x)?;
        self.check_ctx(y)?;
        let xy = self.stage(&x.gp(y)?)?;
        let r = xy.gp(&x.rev())?;
        let terms: Vec<(usize, Poly)> = r.terms().iter().filter(|(_, p)| !self.expand(p).is_zero()).cloned().collect();
        Ok(Multivector::from_terms(x.algebra(), self.ctx, terms))
    }

    /// Records a multivector output stored as its structurally nonzero blades.
    pub fn output(&mut self, name: &str, mv: &Multivector) -> Result<()> {
        self.check_ctx(mv)?;
        let blades: Vec<usize> =
            mv.terms().iter().filter(|(_, p)| !self.expand(p).is_zero()).map(|(b, _)| *b).collect();
        self.output_blades(name, mv, &blades)
    }

    /// Records a multivector output stored as the coefficients of `blades`.
    /// Fails if `mv` has a nonzero coefficient outside `blades`.
    pub fn output_blades(&mut self, name: &str, mv: &Multivector, blades: &[usize]) -> Result<()> {
        self.check_ctx(mv)?;
        self.check_new_name(name)?;
        let alg = mv.algebra();
        if let Some(&b) = blades.iter().find(|&&b| b >= alg.dim()) {
            return Err(GaError::shape(format!("blade of output {name:?} in {alg}"), format!("< {}", alg.dim()), b));
        }
        for (_, p) in mv.terms() {
            self.check_syms(p)?;
        }
        for (b, p) in mv.terms() {
            if !blades.contains(b) && !self.expand(p).is_zero() {
                return Err(GaError::shape(
                    format!("blades of output {name:?}"),
                    format!("a list containing every nonzero blade ({})", alg.blade_name(*b)),
                    format!("{:?}", blades.iter().map(|&i| alg.blade_name(i)).collect::<Vec<_>>()),
                ));
            }
        }
        let staged: Vec<Poly> = blades.iter().map(|&b| mv.coeff(b)).collect();
        let expanded = staged.iter().map(|p| self.expand(p)).collect();
        self.outputs.push(OutGroup {
            group: Group { name: name.to_string(), shape: Shape::Multivector { alg: alg.clone(), blades: blades.to_vec() } },
            staged,
            expanded,
            gradient: false,
        });
        Ok(())
    }

    /// Records scalar outputs.
    pub fn output_scalars(&mut self, name: &str, values: &[Poly]) -> Result<()> {
        self.check_new_name(name)?;
        for p in values {
            self.check_syms(p)?;
        }
        let expanded = values.iter().map(|p| self.expand(p)).collect();
        self.outputs.push(OutGroup {
            group: Group { name: name.to_string(), shape: Shape::Scalars(values.len()) },
            staged: values.to_vec(),
            expanded,
            gradient: false,
        });
        Ok(())
    }

    /// Adds vector–Jacobian products of all outputs recorded so far.
    ///
    /// For every output group `o` an input group `g_o` of the same shape (the
    /// upstream gradient) is declared, and for every input group `s` named in
    /// `wrt` an output group `d_s` of the shape of `s` receives
    /// `Σ_i g_o[i] · ∂o[i]/∂s[k]` (the componentwise dot of coefficients, which is
    /// right for every metric).
    pub fn vjp(&mut self, wrt: &[&str]) -> Result<()> {
        let mut targets = Vec::new();
        for &w in wrt {
            let g = self.inputs.iter().position(|g| g.group.name == w).ok_or_else(|| {
                let names: Vec<&str> = self.inputs.iter().map(|g| g.group.name.as_str()).collect();
                GaError::unknown("input group", w, &names)
            })?;
            targets.push(g);
        }
        if self.outputs.is_empty() {
            return Err(GaError::Invalid("vjp: expected at least one recorded output, got none".into()));
        }
        let fwd: Vec<(String, Shape, Vec<Poly>)> =
            self.outputs.iter().map(|o| (o.group.name.clone(), o.group.shape.clone(), o.expanded.clone())).collect();
        let staged_outs: Vec<Vec<Poly>> = self.outputs.iter().map(|o| o.staged.clone()).collect();
        // upstream symbols
        let mut ups: Vec<Vec<Sym>> = Vec::new();
        for (name, shape, _) in &fwd {
            ups.push(self.new_input(&format!("g_{name}"), shape.clone())?);
        }
        let nsyms = self.syms.len();
        let mut grads: Vec<Option<PolyAcc>> = (0..nsyms).map(|_| None).collect();
        let mut wanted = vec![false; nsyms];
        for &g in &targets {
            let ig = &self.inputs[g];
            for k in 0..ig.group.shape.len() {
                wanted[ig.first as usize + k] = true;
            }
        }
        for ((_, _, polys), up) in fwd.iter().zip(&ups) {
            for (p, &u) in polys.iter().zip(up) {
                for (m, c) in p.terms() {
                    let syms = m.syms();
                    for (i, &s) in syms.iter().enumerate() {
                        if (i > 0 && syms[i - 1] == s) || !wanted[s as usize] {
                            continue;
                        }
                        let e = m.exponent(s) as i64;
                        let rest = m.without(s).expect("factor occurs");
                        let t = rest.mul(&Mono::sym(u));
                        grads[s as usize].get_or_insert_with(PolyAcc::default).add_term(t, c * e);
                    }
                }
            }
        }
        let mut grads: Vec<Poly> = grads.into_iter().map(|a| a.map(PolyAcc::finish).unwrap_or_default()).collect();
        let mut staged = self.staged_vjp(&staged_outs, &ups)?;
        for &g in &targets {
            let ig = self.inputs[g].clone();
            let name = format!("d_{}", ig.group.name);
            self.check_new_name(&name)?;
            let syms = (0..ig.group.shape.len()).map(|k| ig.first as usize + k);
            let expanded: Vec<Poly> = syms.clone().map(|s| std::mem::take(&mut grads[s])).collect();
            let st: Vec<Poly> = match staged.as_mut() {
                Some(m) => syms.zip(&expanded).map(|(s, e)| m.remove(&(s as Sym)).unwrap_or_else(|| e.clone())).collect(),
                None => expanded.clone(),
            };
            self.outputs.push(OutGroup {
                group: Group { name, shape: ig.group.shape.clone() },
                staged: st,
                expanded,
                gradient: true,
            });
        }
        Ok(())
    }

    /// Reverse mode through staged temporaries: the adjoint of every temporary
    /// becomes a temporary itself, so gradients can reuse the staged forward
    /// values. Returns the gradient of every symbol the staged outputs depend on,
    /// or `None` when no output uses temporaries.
    fn staged_vjp(&mut self, outs: &[Vec<Poly>], ups: &[Vec<Sym>]) -> Result<Option<HashMap<Sym, Poly>>> {
        let uses_temp = |p: &Poly, syms: &[SymDef]| {
            p.symbols().iter().any(|&s| matches!(syms.get(s as usize), Some(SymDef::Temp { .. })))
        };
        if !outs.iter().flatten().any(|p| uses_temp(p, &self.syms)) {
            return Ok(None);
        }
        fn push_partials(direct: &mut HashMap<Sym, PolyAcc>, p: &Poly, factor: &Mono, scale: i64) {
            for (m, c) in p.terms() {
                let syms = m.syms();
                for (i, &s) in syms.iter().enumerate() {
                    if i > 0 && syms[i - 1] == s {
                        continue;
                    }
                    let e = m.exponent(s) as i64;
                    let rest = m.without(s).expect("factor occurs").mul(factor);
                    direct.entry(s).or_default().add_term(rest, c * e * scale);
                }
            }
        }
        let mut direct: HashMap<Sym, PolyAcc> = HashMap::new();
        for (polys, up) in outs.iter().zip(ups) {
            for (p, &u) in polys.iter().zip(up) {
                push_partials(&mut direct, p, &Mono::sym(u), 1);
            }
        }
        let temps: Vec<Sym> =
            (0..self.syms.len() as Sym).rev().filter(|&s| matches!(self.syms[s as usize], SymDef::Temp { .. })).collect();
        for t in temps {
            let Some(acc) = direct.remove(&t) else { continue };
            let adj = acc.finish();
            if adj.is_zero() {
                continue;
            }
            let def = match &self.syms[t as usize] {
                SymDef::Temp { def, .. } => def.clone(),
                SymDef::Input { .. } => unreachable!("filtered to temporaries"),
            };
            // ā_t (staged) times ∂def_t/∂s flows into every symbol s of the definition
            let a = self.stage_poly(&adj)?;
            for (m, c) in a.terms() {
                push_partials(&mut direct, &def, m, *c);
            }
        }
        Ok(Some(direct.into_iter().map(|(s, acc)| (s, acc.finish())).collect()))
    }

    /// Expanded polynomials of an output group, by name.
    pub fn output_polys(&self, name: &str) -> Option<Vec<Poly>> {
        self.outputs.iter().find(|o| o.group.name == name).map(|o| o.expanded.clone())
    }

    /// Symbols of an input group, by name.
    pub fn input_syms(&self, name: &str) -> Option<Vec<Sym>> {
        self.inputs
            .iter()
            .find(|g| g.group.name == name)
            .map(|g| (0..g.group.shape.len() as Sym).map(|i| g.first + i).collect())
    }

    fn env_and_candidates(&self, leaves: HashMap<Sym, Val>) -> (PolyEnv, Vec<Vec<Poly>>, Vec<usize>) {
        let mut temps = HashMap::new();
        for (s, d) in self.syms.iter().enumerate() {
            if let SymDef::Temp { def, expanded } = d {
                temps.insert(s as Sym, (def.clone(), expanded.clone()));
            }
        }
        let mut cands = Vec::new();
        let mut tiers = Vec::new();
        for o in &self.outputs {
            tiers.extend(std::iter::repeat_n(usize::from(o.gradient), o.staged.len()));
            for (st, ex) in o.staged.iter().zip(&o.expanded) {
                if st == ex {
                    cands.push(vec![ex.clone()]);
                } else {
                    cands.push(vec![ex.clone(), st.clone()]);
                }
            }
        }
        (PolyEnv { leaves, temps }, cands, tiers)
    }

    /// Lowers the program into `b`. Input groups found in `bind` (by name) use
    /// the given values; the others are declared as inputs of `b`. Returns the
    /// values of every output group by name, without declaring them, so callers
    /// can post-process them (normalization, activations) before declaring outputs.
    pub fn lower_into(&self, b: &mut Builder, bind: &HashMap<String, Vec<Val>>) -> Result<HashMap<String, Vec<Val>>> {
        let mut leaves = HashMap::new();
        for ig in &self.inputs {
            let name = &ig.group.name;
            let vals = match bind.get(name) {
                Some(v) => {
                    if v.len() != ig.group.shape.len() {
                        return Err(GaError::shape(format!("bound values of input {name:?}"), ig.group.shape.len(), v.len()));
                    }
                    v.clone()
                }
                None => b.input_group(name, ig.group.shape.labels(name))?,
            };
            for (k, v) in vals.into_iter().enumerate() {
                leaves.insert(ig.first + k as Sym, v);
            }
        }
        let (env, cands, tiers) = self.env_and_candidates(leaves);
        let vals = lower_system_tiered(b, &cands, &tiers, &env)?;
        let mut out = HashMap::new();
        let mut it = vals.into_iter();
        for o in &self.outputs {
            let v: Vec<Val> = it.by_ref().take(o.group.shape.len()).collect();
            out.insert(o.group.name.clone(), v);
        }
        Ok(out)
    }

    /// Lowers the whole program into a finished [`Ir`] called `name`.
    pub fn lower(&self, name: &str) -> Result<Ir> {
        check_ident(name)?;
        let mut b = Builder::new();
        let vals = self.lower_into(&mut b, &HashMap::new())?;
        for o in &self.outputs {
            let n = &o.group.name;
            b.output_group(n, o.group.shape.labels(n), vals[n].clone())?;
        }
        b.finish(name)
    }
}
