//! Straight-line program IR.
//!
//! A [`Builder`] holds a hash-consed graph of scalar nodes (so equal
//! subexpressions are built once), signed values ([`Val`], negation is carried
//! on edges and folded into subtractions), n-ary sums, and declared input and
//! output groups. Polynomials are lowered into it by [`crate::lower`];
//! callers can also add raw nodes (constants, divisions, square roots, ...)
//! to build fused computations around the polynomial parts. [`Builder::finish`]
//! removes dead nodes, shares common pairs of summands between sums, turns sums
//! into chains of binary adds and subtracts, and returns an [`Ir`]: a flat SSA
//! instruction list that every back end (CUDA, Rust, CPU evaluator) reads.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::error::{GaError, Result};

/// Index of a node in a [`Builder`].
pub type NodeId = u32;

/// Elementwise unary functions available in the IR.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `sqrt(x)`
    Sqrt,
    /// `1/sqrt(x)`
    Rsqrt,
    /// `1/x`
    Recip,
    /// `exp(x)`
    Exp,
    /// `ln(x)`
    Log,
    /// `tanh(x)`
    Tanh,
    /// `erf(x)`
    Erf,
    /// `|x|`
    Abs,
}

impl UnaryOp {
    /// All unary functions.
    pub const ALL: [UnaryOp; 8] =
        [UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Recip, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Erf, UnaryOp::Abs];
    /// Whether `f(-x) = -f(x)`, so a sign can be moved outside.
    pub fn is_odd(self) -> bool {
        matches!(self, UnaryOp::Recip | UnaryOp::Tanh | UnaryOp::Erf)
    }
    /// Whether `f(-x) = f(x)`.
    pub fn is_even(self) -> bool {
        matches!(self, UnaryOp::Abs)
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Recip => "recip",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Erf => "erf",
            UnaryOp::Abs => "abs",
        }
    }
    /// Evaluates in `f64`.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Erf => erf(x),
            UnaryOp::Abs => x.abs(),
        }
    }
}

/// Error function (Abramowitz–Stegun 7.1.26 refined by one Newton-free series
/// switch); absolute error below 1e-12 over the real line.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    let r = if ax < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = ax * ax;
        let mut term = ax;
        let mut sum = ax;
        let mut n = 0.0f64;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // Continued fraction for erfc, evaluated backwards (Lentz-free, fixed depth).
        let mut f = 0.0f64;
        for k in (1..=60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        1.0 - (-ax * ax).exp() / (ax + f) / std::f64::consts::PI.sqrt()
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

/// A signed reference to a node, or zero.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Val {
    /// The constant zero.
    Zero,
    /// `±node`.
    Ref {
        /// The node.
        id: NodeId,
        /// Whether the value is the node's negation.
        neg: bool,
    },
}

impl Val {
    fn flip(self, neg: bool) -> Val {
        match self {
            Val::Zero => Val::Zero,
            Val::Ref { id, neg: n } => Val::Ref { id, neg: n ^ neg },
        }
    }
    /// `-self`.
    pub fn negate(self) -> Val {
        self.flip(true)
    }
}

/// A node of the builder graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    Input { group: u32, index: u32 },
    /// A positive constant, stored as `f64` bits.
    Const(u64),
    Mul(NodeId, NodeId),
    Div(NodeId, NodeId),
    /// Signed n-ary sum, sorted by node id, first term positive.
    Sum(Vec<(NodeId, bool)>),
    Unary(UnaryOp, NodeId),
    Neg(NodeId),
}

impl Node {
    pub(crate) fn children(&self) -> Vec<NodeId> {
        match self {
            Node::Input { .. } | Node::Const(_) => vec![],
            Node::Mul(a, b) | Node::Div(a, b) => vec![*a, *b],
            Node::Sum(t) => t.iter().map(|(i, _)| *i).collect(),
            Node::Unary(_, a) | Node::Neg(a) => vec![*a],
        }
    }
    /// Operation count of the node: (muls, adds, other).
    pub(crate) fn cost(&self) -> (usize, usize, usize) {
        match self {
            Node::Input { .. } | Node::Const(_) => (0, 0, 0),
            Node::Mul(..) => (1, 0, 0),
            Node::Sum(t) => (0, t.len().saturating_sub(1), 0),
            Node::Div(..) | Node::Unary(..) | Node::Neg(_) => (0, 0, 1),
        }
    }
}

/// Declaration of an input or output group: a named array of scalars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDecl {
    /// Identifier (valid in C and Rust).
    pub name: String,
    /// One label per element (blade names for multivectors, `w0..` for weights).
    pub labels: Vec<String>,
}

impl GroupDecl {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// Whether the group has no elements.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

pub(crate) fn check_ident(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    const RESERVED: &[&str] = &[
        // Rust keywords (strict and reserved)
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
        "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self",
        "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract", "become",
        "box", "do", "final", "gen", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield", "union",
        "f32", "f64", "usize", "u16", "i64",
        // C/C++/CUDA keywords and names the printed code relies on
        "auto", "bool", "case", "char", "class", "default", "delete", "double", "float", "goto", "half", "inline", "int",
        "long", "namespace", "new", "private", "protected", "public", "register", "short", "signed", "sizeof", "switch",
        "template", "this", "typedef", "typename", "unsigned", "void", "volatile", "and", "or", "not", "xor", "bitand",
        "bitor", "compl", "and_eq", "or_eq", "xor_eq", "not_eq", "operator", "friend", "explicit", "mutable", "throw",
        "catch", "typeid", "nullptr", "constexpr", "decltype", "static_assert", "thread_local", "alignas", "alignof",
        "noexcept", "export", "concept", "requires", "asm", "using", "const_cast", "dynamic_cast", "reinterpret_cast",
        "static_cast", "wchar_t", "char16_t", "char32_t", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
        "atomicAdd", "sqrtf", "rsqrtf", "expf", "logf", "tanhf", "erff", "fabsf", "main",
    ];
    if !ok || RESERVED.contains(&name) || name.starts_with("ember_") || name.starts_with("t_") {
        return Err(GaError::Invalid(format!(
            "group name {name:?}: expected an identifier [A-Za-z_][A-Za-z0-9_]* of at most 64 characters that is not a C/Rust keyword and does not start with ember_ or t_"
        )));
    }
    Ok(())
}

pub(crate) type BuilderParts = (Vec<Node>, Vec<GroupDecl>, Vec<(GroupDecl, Vec<Val>)>);

/// Hash-consed graph builder.
#[derive(Clone, Debug, Default)]
pub struct Builder {
    pub(crate) nodes: Vec<Node>,
    dedup: HashMap<Node, NodeId>,
    inputs: Vec<GroupDecl>,
    input_vals: Vec<Vec<Val>>,
    outputs: Vec<(GroupDecl, Vec<Val>)>,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Builder {
        Builder::default()
    }

    pub(crate) fn intern(&mut self, node: Node) -> NodeId {
        if let Some(&id) = self.dedup.get(&node) {
            return id;
        }
        let id = self.nodes.len() as NodeId;
        self.nodes.push(node.clone());
        self.dedup.insert(node, id);
        id
    }

    /// Number of nodes created so far (dead ones included).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Declares an input group with one element per label; returns its values.
    pub fn input_group(&mut self, name: &str, labels: Vec<String>) -> Result<Vec<Val>> {
        check_ident(name)?;
        if self.inputs.iter().any(|g| g.name == name) || self.outputs.iter().any(|(g, _)| g.name == name) {
            return Err(GaError::Invalid(format!("group name {name:?} is declared twice; expected unique names")));
        }
        let group = self.inputs.len() as u32;
        let vals: Vec<Val> = (0..labels.len())
            .map(|i| Val::Ref { id: self.intern(Node::Input { group, index: i as u32 }), neg: false })
            .collect();
        self.inputs.push(GroupDecl { name: name.to_string(), labels });
        self.input_vals.push(vals.clone());
        Ok(vals)
    }

    /// Values of a declared input group.
    pub fn input_values(&self, name: &str) -> Option<&[Val]> {
        self.inputs.iter().position(|g| g.name == name).map(|i| self.input_vals[i].as_slice())
    }

    /// Declares an output group.
    pub fn output_group(&mut self, name: &str, labels: Vec<String>, vals: Vec<Val>) -> Result<()> {
        check_ident(name)?;
        if labels.len() != vals.len() {
            return Err(GaError::shape(format!("values of output group {name:?}"), labels.len(), vals.len()));
        }
        if self.inputs.iter().any(|g| g.name == name) || self.outputs.iter().any(|(g, _)| g.name == name) {
            return Err(GaError::Invalid(format!("group name {name:?} is declared twice; expected unique names")));
        }
        self.outputs.push((GroupDecl { name: name.to_string(), labels }, vals));
        Ok(())
    }

    /// A constant.
    pub fn constant(&mut self, x: f64) -> Val {
        if x == 0.0 {
            return Val::Zero;
        }
        let id = self.intern(Node::Const(x.abs().to_bits()));
        Val::Ref { id, neg: x < 0.0 }
    }

    fn const_of(&self, v: Val) -> Option<f64> {
        match v {
            Val::Zero => Some(0.0),
            Val::Ref { id, neg } => match self.nodes[id as usize] {
                Node::Const(bits) => Some(if neg { -f64::from_bits(bits) } else { f64::from_bits(bits) }),
                _ => None,
            },
        }
    }

    /// `a * b`.
    pub fn mul(&mut self, a: Val, b: Val) -> Val {
        let (Val::Ref { id: x, neg: nx }, Val::Ref { id: y, neg: ny }) = (a, b) else {
            return Val::Zero;
        };
        if let (Some(ca), Some(cb)) = (self.const_of(a), self.const_of(b)) {
            return self.constant(ca * cb);
        }
        if self.const_of(Val::Ref { id: x, neg: false }) == Some(1.0) {
            return Val::Ref { id: y, neg: nx ^ ny };
        }
        if self.const_of(Val::Ref { id: y, neg: false }) == Some(1.0) {
            return Val::Ref { id: x, neg: nx ^ ny };
        }
        let id = self.intern(Node::Mul(x.min(y), x.max(y)));
        Val::Ref { id, neg: nx ^ ny }
    }

    /// `c * a` for an integer `c`.
    pub fn scale(&mut self, a: Val, c: i64) -> Val {
        match c {
            0 => Val::Zero,
            1 => a,
            -1 => a.negate(),
            _ => {
                let k = self.constant(c as f64);
                self.mul(a, k)
            }
        }
    }

    /// `a / b`.
    pub fn div(&mut self, a: Val, b: Val) -> Val {
        let Val::Ref { id: x, neg: nx } = a else {
            return Val::Zero;
        };
        let (y, ny) = match b {
            Val::Zero => (self.intern(Node::Const(0f64.to_bits())), false),
            Val::Ref { id, neg } => (id, neg),
        };
        let id = self.intern(Node::Div(x, y));
        Val::Ref { id, neg: nx ^ ny }
    }

    /// `-a`.
    pub fn neg(&mut self, a: Val) -> Val {
        a.negate()
    }

    /// `a + b`.
    pub fn add(&mut self, a: Val, b: Val) -> Val {
        self.sum(&[a, b])
    }

    /// `a - b`.
    pub fn sub(&mut self, a: Val, b: Val) -> Val {
        self.sum(&[a, b.negate()])
    }

    /// `Σ terms`.
    pub fn sum(&mut self, terms: &[Val]) -> Val {
        let mut t: Vec<(NodeId, bool)> = terms
            .iter()
            .filter_map(|v| match v {
                Val::Zero => None,
                Val::Ref { id, neg } => Some((*id, *neg)),
            })
            .collect();
        match t.len() {
            0 => return Val::Zero,
            1 => return Val::Ref { id: t[0].0, neg: t[0].1 },
            _ => {}
        }
        t.sort_unstable();
        let flip = t[0].1;
        if flip {
            for x in &mut t {
                x.1 = !x.1;
            }
        }
        let id = self.intern(Node::Sum(t));
        Val::Ref { id, neg: flip }
    }

    /// `f(a)`.
    pub fn unary(&mut self, op: UnaryOp, a: Val) -> Val {
        if let Some(c) = self.const_of(a) {
            return self.constant(op.apply(c));
        }
        let Val::Ref { id, neg } = a else { unreachable!("zero is a constant") };
        if !neg {
            return Val::Ref { id: self.intern(Node::Unary(op, id)), neg: false };
        }
        if op.is_odd() {
            return Val::Ref { id: self.intern(Node::Unary(op, id)), neg: true };
        }
        if op.is_even() {
            return Val::Ref { id: self.intern(Node::Unary(op, id)), neg: false };
        }
        let n = self.intern(Node::Neg(id));
        Val::Ref { id: self.intern(Node::Unary(op, n)), neg: false }
    }

    /// Counts `(muls, adds, other)` of the nodes reachable from `roots` whose id is at least `from`.
    pub(crate) fn live_cost(&self, roots: &[Val], from: usize) -> (usize, usize, usize) {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<NodeId> = roots
            .iter()
            .filter_map(|v| match v {
                Val::Ref { id, .. } => Some(*id),
                Val::Zero => None,
            })
            .collect();
        let mut c = (0, 0, 0);
        while let Some(id) = stack.pop() {
            let i = id as usize;
            if i < from || seen[i] {
                continue;
            }
            seen[i] = true;
            let node = &self.nodes[i];
            let (m, a, o) = node.cost();
            c.0 += m;
            c.1 += a;
            c.2 += o;
            stack.extend(node.children());
        }
        c
    }

    /// Finalizes into an [`Ir`] named `name`.
    pub fn finish(self, name: &str) -> Result<Ir> {
        check_ident(name)?;
        crate::finish::finish(self, name)
    }

    pub(crate) fn parts(self) -> BuilderParts {
        (self.nodes, self.inputs, self.outputs)
    }
}

/// One SSA instruction; operands are indices of earlier instructions.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Instr {
    /// Element `index` of input group `group`.
    Input {
        /// Input group.
        group: u32,
        /// Element in the group.
        index: u32,
    },
    /// A constant.
    Const(f64),
    /// `a + b`
    Add(u32, u32),
    /// `a - b`
    Sub(u32, u32),
    /// `a * b`
    Mul(u32, u32),
    /// `a / b`
    Div(u32, u32),
    /// `-a`
    Neg(u32),
    /// `f(a)`
    Unary(UnaryOp, u32),
}

/// An output element: zero or a signed instruction result.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Constant zero.
    Zero,
    /// `±value`.
    Val {
        /// Instruction index.
        id: u32,
        /// Whether the output is the negation of the value.
        neg: bool,
    },
}

/// Operation counts of an [`Ir`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Binary multiplications (including by constants).
    pub muls: usize,
    /// Binary additions and subtractions.
    pub adds: usize,
    /// Divisions and unary functions.
    pub other: usize,
    /// Sign flips of outputs that could not be folded into a subtraction.
    pub negs: usize,
}

/// A finished straight-line program.
#[derive(Clone, Debug, PartialEq)]
pub struct Ir {
    /// Identifier of the program (used as function name by the printers).
    pub name: String,
    /// Input groups, in argument order.
    pub inputs: Vec<GroupDecl>,
    /// Output groups, in argument order after the inputs.
    pub outputs: Vec<GroupDecl>,
    /// Instructions in evaluation order.
    pub instrs: Vec<Instr>,
    /// For each output group, one [`Out`] per element.
    pub results: Vec<Vec<Out>>,
}

impl Ir {
    /// Operation counts.
    pub fn counts(&self) -> OpCounts {
        let mut c = OpCounts::default();
        for ins in &self.instrs {
            match ins {
                Instr::Add(..) | Instr::Sub(..) => c.adds += 1,
                Instr::Mul(..) => c.muls += 1,
                Instr::Div(..) | Instr::Unary(..) | Instr::Neg(_) => c.other += 1,
                Instr::Input { .. } | Instr::Const(_) => {}
            }
        }
        c.negs = self.results.iter().flatten().filter(|o| matches!(o, Out::Val { neg: true, .. })).count();
        c
    }

    /// Index of the input group called `name`.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|g| g.name == name)
    }

    /// Index of the output group called `name`.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|g| g.name == name)
    }

    /// Human-readable listing.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let c = self.counts();
        let _ = writeln!(s, "# {}: {} muls / {} adds", self.name, c.muls, c.adds);
        for g in &self.inputs {
            let _ = writeln!(s, "input {}[{}]: {}", g.name, g.len(), g.labels.join(" "));
        }
        for g in &self.outputs {
            let _ = writeln!(s, "output {}[{}]: {}", g.name, g.len(), g.labels.join(" "));
        }
        let v = |i: &u32| format!("%{i}");
        for (i, ins) in self.instrs.iter().enumerate() {
            let rhs = match ins {
                Instr::Input { group, index } => {
                    let g = &self.inputs[*group as usize];
                    format!("{}[{}]  ; {}", g.name, index, g.labels[*index as usize])
                }
                Instr::Const(c) => format!("{c:?}"),
                Instr::Add(a, b) => format!("{} + {}", v(a), v(b)),
                Instr::Sub(a, b) => format!("{} - {}", v(a), v(b)),
                Instr::Mul(a, b) => format!("{} * {}", v(a), v(b)),
                Instr::Div(a, b) => format!("{} / {}", v(a), v(b)),
                Instr::Neg(a) => format!("-{}", v(a)),
                Instr::Unary(op, a) => format!("{}({})", op.name(), v(a)),
            };
            let _ = writeln!(s, "%{i} = {rhs}");
        }
        for (g, outs) in self.outputs.iter().zip(&self.results) {
            for (k, o) in outs.iter().enumerate() {
                let rhs = match o {
                    Out::Zero => "0".to_string(),
                    Out::Val { id, neg } => format!("{}%{id}", if *neg { "-" } else { "" }),
                };
                let _ = writeln!(s, "{}[{}] = {rhs}  ; {}", g.name, k, g.labels[k]);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_reference_values() {
        let cases = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (5.0, 0.9999999999984626),
            (-1.5, -0.9661051464753108),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 1e-13, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn builder_folds_signs_and_shares_nodes() {
        let mut b = Builder::new();
        let v = b.input_group("x", vec!["a".into(), "b".into()]).unwrap();
        let p1 = b.mul(v[0], v[1].negate());
        let p2 = b.mul(v[1], v[0]);
        assert_eq!(p1, p2.negate());
        let s = b.sub(v[0], v[1]);
        let s2 = b.sum(&[v[1].negate(), v[0]]);
        assert_eq!(s, s2);
        let z = b.sub(Val::Zero, Val::Zero);
        assert_eq!(z, Val::Zero);
        b.output_group("o", vec!["p".into(), "s".into()], vec![p1, s.negate()]).unwrap();
        let ir = b.finish("k").unwrap();
        let c = ir.counts();
        assert_eq!((c.muls, c.adds), (1, 1));
        assert_eq!(c.negs, 2);
        assert!(Builder::new().finish("bad name").is_err());
    }
}
