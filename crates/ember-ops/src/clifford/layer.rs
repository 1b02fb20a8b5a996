//! [`Layer`]: an algebra with its generated programs, built once per algebra and shared.

use super::gen::{self, Tables};
use ember_core::{Error, Result};
use ember_ga::eval::Compiled;
use ember_ga::{Algebra, Ir};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The generated per-element programs (see [`gen`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prog {
    Fwd { gelu: bool },
    Bwd { gelu: bool, norm: bool },
    Dot,
    Scale,
    NormBwd,
    GeluFwd,
    GeluBwd,
    Terms,
    TermsVjp,
    TermsRaw,
    FcGate,
}

impl Prog {
    /// A short tag for kernel and cache names.
    pub fn tag(self) -> String {
        match self {
            Prog::Fwd { gelu } => format!("fwd{}", u8::from(gelu)),
            Prog::Bwd { gelu, norm } => format!("bwd{}{}", u8::from(gelu), u8::from(norm)),
            Prog::Dot => "dot".into(),
            Prog::Scale => "scale".into(),
            Prog::NormBwd => "normbwd".into(),
            Prog::GeluFwd => "gelu".into(),
            Prog::GeluBwd => "gelubwd".into(),
            Prog::Terms => "terms".into(),
            Prog::TermsVjp => "termsvjp".into(),
            Prog::TermsRaw => "termsraw".into(),
            Prog::FcGate => "fcgate".into(),
        }
    }
}

pub(crate) struct Inner {
    pub t: Tables,
    irs: Mutex<HashMap<Prog, Arc<Ir>>>,
    cpu: Mutex<HashMap<Prog, Arc<Compiled>>>,
    /// Generated CUDA translation units by key, leaked once per algebra (kernel sources are `'static`).
    pub(crate) sources: Mutex<HashMap<String, ember_core::cuda::KernelSource>>,
}

/// A Clifford algebra Cl(p,q,r) (n = p+q+r ≤ 6) and the generated programs of its layers. Cheap to
/// clone; every `Layer` of the same signature shares one set of programs and compiled kernels.
#[derive(Clone)]
pub struct Layer {
    pub(crate) inner: Arc<Inner>,
}

/// Every algebra's programs, by signature (p, q, r).
type Registry = Mutex<HashMap<(usize, usize, usize), Arc<Inner>>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Layer {
    /// The layer of the algebra `spec`: `"3,0"`, `"3,0,1"`, `"1,3"` or `"Cl(3,0,1)"`.
    pub fn new(spec: &str) -> Result<Layer> {
        let alg = Algebra::parse(spec).map_err(|e| Error::invalid("algebra", e.to_string()))?;
        Ok(Layer::from_algebra(&alg))
    }

    /// The layer of an existing algebra.
    pub fn from_algebra(alg: &Arc<Algebra>) -> Layer {
        let mut reg = registry().lock().unwrap();
        let inner = reg
            .entry(alg.signature())
            .or_insert_with(|| {
                Arc::new(Inner { t: Tables::new(alg), irs: Mutex::new(HashMap::new()), cpu: Mutex::new(HashMap::new()), sources: Mutex::new(HashMap::new()) })
            })
            .clone();
        Layer { inner }
    }

    pub fn algebra(&self) -> &Arc<Algebra> {
        &self.inner.t.alg
    }
    /// Number of blades M = 2^n (the first dimension of every activation).
    pub fn blades(&self) -> usize {
        self.inner.t.m()
    }
    /// Number of weighted-product paths P (weights per channel).
    pub fn paths(&self) -> usize {
        self.inner.t.p()
    }
    /// Number of grades n + 1.
    pub fn grades(&self) -> usize {
        self.inner.t.ng()
    }
    /// Number of (output blade, path) pairs: the K multiplier of the fully connected product.
    pub fn pairs(&self) -> usize {
        self.inner.t.nt()
    }
    /// `Cl(p,q,r)`.
    pub fn name(&self) -> String {
        self.algebra().to_string()
    }
    /// `cl300` — used in kernel names.
    pub fn tag(&self) -> String {
        let (p, q, r) = self.algebra().signature();
        format!("cl{p}{q}{r}")
    }
    pub(crate) fn tables(&self) -> &Tables {
        &self.inner.t
    }

    /// The generated program `prog` (built on first use).
    pub fn ir(&self, prog: Prog) -> Result<Arc<Ir>> {
        if let Some(ir) = self.inner.irs.lock().unwrap().get(&prog) {
            return Ok(ir.clone());
        }
        let t = &self.inner.t;
        let ir = Arc::new(match prog {
            Prog::Fwd { gelu } => gen::fwd(t, gelu)?,
            Prog::Bwd { gelu, norm } => gen::bwd(t, gelu, norm)?,
            Prog::Dot => gen::dot(t)?,
            Prog::Scale => gen::scale(t)?,
            Prog::NormBwd => gen::normbwd(t)?,
            Prog::GeluFwd => gen::gelu_fwd(t)?,
            Prog::GeluBwd => gen::gelu_bwd(t)?,
            Prog::Terms => gen::terms(t)?,
            Prog::TermsVjp => gen::terms_vjp(t)?,
            Prog::TermsRaw => gen::terms_raw(t)?,
            Prog::FcGate => gen::fc_gate()?,
        });
        self.inner.irs.lock().unwrap().insert(prog, ir.clone());
        Ok(ir)
    }

    /// The program compiled for ember-ga's CPU evaluator.
    pub(crate) fn cpu(&self, prog: Prog) -> Result<Arc<Compiled>> {
        if let Some(c) = self.inner.cpu.lock().unwrap().get(&prog) {
            return Ok(c.clone());
        }
        let c = Arc::new(Compiled::new(&*self.ir(prog)?));
        self.inner.cpu.lock().unwrap().insert(prog, c.clone());
        Ok(c)
    }
}

impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Layer({})", self.algebra())
    }
}
