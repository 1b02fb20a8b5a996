//! CPU evaluator: runs an [`Ir`] over a batch in `f64` or `f32`.
//!
//! The IR is compiled once into a flat list of register operations (registers
//! are reused after their last use, outputs are stored as soon as they are
//! computed). Evaluation proceeds in chunks of [`LANES`] consecutive elements:
//! each operation runs as a tight loop over the chunk, which the compiler
//! vectorizes. Large batches are split over threads.

use crate::error::{GaError, Result};
use crate::ir::{Instr, Ir, Out, UnaryOp};
use crate::layout::{Layout, OutLayout};

/// Elements per evaluation chunk.
pub const LANES: usize = 64;

/// Floating-point types the evaluator runs in.
pub trait Real: Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static {
    /// Conversion from `f64`.
    fn from_f64(x: f64) -> Self;
    /// Conversion to `f64`.
    fn to_f64(self) -> f64;
    /// `a + b`
    fn add(a: Self, b: Self) -> Self;
    /// `a - b`
    fn sub(a: Self, b: Self) -> Self;
    /// `a * b`
    fn mul(a: Self, b: Self) -> Self;
    /// `a / b`
    fn div(a: Self, b: Self) -> Self;
    /// `-a`
    fn neg(a: Self) -> Self;
    /// `f(a)`
    fn unary(op: UnaryOp, a: Self) -> Self;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn sub(a: Self, b: Self) -> Self {
                a - b
            }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self {
                a * b
            }
            #[inline(always)]
            fn div(a: Self, b: Self) -> Self {
                a / b
            }
            #[inline(always)]
            fn neg(a: Self) -> Self {
                -a
            }
            fn unary(op: UnaryOp, a: Self) -> Self {
                match op {
                    UnaryOp::Sqrt => a.sqrt(),
                    UnaryOp::Rsqrt => 1.0 / a.sqrt(),
                    UnaryOp::Recip => 1.0 / a,
                    UnaryOp::Exp => a.exp(),
                    UnaryOp::Log => a.ln(),
                    UnaryOp::Tanh => a.tanh(),
                    UnaryOp::Erf => crate::ir::erf(a as f64) as $t,
                    UnaryOp::Abs => a.abs(),
                }
            }
        }
    };
}
real!(f32);
real!(f64);

#[derive(Copy, Clone, Debug)]
enum Op {
    Load { dst: u32, group: u32, index: u32 },
    Const { dst: u32, value: f64 },
    Add { dst: u32, a: u32, b: u32 },
    Sub { dst: u32, a: u32, b: u32 },
    Mul { dst: u32, a: u32, b: u32 },
    Div { dst: u32, a: u32, b: u32 },
    Neg { dst: u32, a: u32 },
    Unary { dst: u32, op: UnaryOp, a: u32 },
    Store { src: u32, group: u32, index: u32, neg: bool },
}

/// An [`Ir`] compiled for the CPU.
#[derive(Clone, Debug)]
pub struct Compiled {
    ops: Vec<Op>,
    regs: usize,
    in_lens: Vec<usize>,
    out_lens: Vec<usize>,
    /// Outputs that are identically zero: (group, index).
    zeros: Vec<(u32, u32)>,
}

/// An input argument of [`Compiled::run`].
#[derive(Copy, Clone, Debug)]
pub struct InputArg<'a, T> {
    /// Data in `layout`.
    pub data: &'a [T],
    /// Layout.
    pub layout: Layout,
}

/// An output argument of [`Compiled::run`].
#[derive(Debug)]
pub struct OutputArg<'a, T> {
    /// Data in `layout`.
    pub data: &'a mut [T],
    /// Layout.
    pub layout: OutLayout,
}

impl Compiled {
    /// Compiles `ir`.
    pub fn new(ir: &Ir) -> Compiled {
        let n = ir.instrs.len();
        // stores attached to the instruction that produces the value
        let mut stores: Vec<Vec<(u32, u32, bool)>> = vec![Vec::new(); n];
        let mut zeros = Vec::new();
        for (g, outs) in ir.results.iter().enumerate() {
            for (k, o) in outs.iter().enumerate() {
                match o {
                    Out::Zero => zeros.push((g as u32, k as u32)),
                    Out::Val { id, neg } => stores[*id as usize].push((g as u32, k as u32, *neg)),
                }
            }
        }
        let operands = |ins: &Instr| -> Vec<u32> {
            match *ins {
                Instr::Input { .. } | Instr::Const(_) => vec![],
                Instr::Add(a, b) | Instr::Sub(a, b) | Instr::Mul(a, b) | Instr::Div(a, b) => vec![a, b],
                Instr::Neg(a) | Instr::Unary(_, a) => vec![a],
            }
        };
        let mut last_use = vec![0usize; n];
        for (i, ins) in ir.instrs.iter().enumerate() {
            last_use[i] = i;
            for a in operands(ins) {
                last_use[a as usize] = i;
            }
        }
        let mut reg_of = vec![0u32; n];
        let mut free: Vec<u32> = Vec::new();
        let mut regs = 0u32;
        let mut ops = Vec::with_capacity(n + 16);
        for (i, ins) in ir.instrs.iter().enumerate() {
            let ops_in = operands(ins);
            // the result never shares a register with an operand, so the
            // evaluation loops can borrow them separately
            let dst = free.pop().unwrap_or_else(|| {
                regs += 1;
                regs - 1
            });
            let mut released = Vec::new();
            for &a in &ops_in {
                if last_use[a as usize] == i && !released.contains(&reg_of[a as usize]) {
                    released.push(reg_of[a as usize]);
                }
            }
            free.extend(released);
            reg_of[i] = dst;
            let r = |a: u32| reg_of[a as usize];
            ops.push(match *ins {
                Instr::Input { group, index } => Op::Load { dst, group, index },
                Instr::Const(value) => Op::Const { dst, value },
                Instr::Add(a, b) => Op::Add { dst, a: r(a), b: r(b) },
                Instr::Sub(a, b) => Op::Sub { dst, a: r(a), b: r(b) },
                Instr::Mul(a, b) => Op::Mul { dst, a: r(a), b: r(b) },
                Instr::Div(a, b) => Op::Div { dst, a: r(a), b: r(b) },
                Instr::Neg(a) => Op::Neg { dst, a: r(a) },
                Instr::Unary(op, a) => Op::Unary { dst, op, a: r(a) },
            });
            for &(group, index, neg) in &stores[i] {
                ops.push(Op::Store { src: dst, group, index, neg });
            }
            if last_use[i] == i {
                // value without later users: its register is free again
                free.push(dst);
            }
        }
        Compiled {
            ops,
            regs: regs as usize,
            in_lens: ir.inputs.iter().map(|g| g.len()).collect(),
            out_lens: ir.outputs.iter().map(|g| g.len()).collect(),
            zeros,
        }
    }

    /// Number of registers (per lane).
    pub fn registers(&self) -> usize {
        self.regs
    }

    /// Evaluates one element: `inputs[g]` holds the scalars of input group `g`.
    pub fn eval(&self, inputs: &[&[f64]]) -> Result<Vec<Vec<f64>>> {
        let args: Vec<InputArg<f64>> = inputs.iter().map(|d| InputArg { data: d, layout: Layout::Uniform }).collect();
        let mut outs: Vec<Vec<f64>> = self.out_lens.iter().map(|&m| vec![0.0; m]).collect();
        {
            let mut oargs: Vec<OutputArg<f64>> =
                outs.iter_mut().map(|d| OutputArg { data: d.as_mut_slice(), layout: OutLayout::PerElement }).collect();
            self.run(1, 1, &args, &mut oargs)?;
        }
        Ok(outs)
    }

    fn check(&self, b: usize, n: usize, inputs: &[InputArg<'_, impl Real>], outputs: &[OutputArg<'_, impl Real>]) -> Result<()> {
        if inputs.len() != self.in_lens.len() {
            return Err(GaError::shape("number of input arguments", self.in_lens.len(), inputs.len()));
        }
        if outputs.len() != self.out_lens.len() {
            return Err(GaError::shape("number of output arguments", self.out_lens.len(), outputs.len()));
        }
        for (g, (a, &m)) in inputs.iter().zip(&self.in_lens).enumerate() {
            let want = a.layout.len(m, b, n).ok_or_else(|| GaError::Invalid("batch size overflows usize".into()))?;
            if a.data.len() != want {
                return Err(GaError::shape(format!("length of input {g} ({:?}, {m} values, B={b}, N={n})", a.layout), want, a.data.len()));
            }
        }
        for (g, (a, &m)) in outputs.iter().zip(&self.out_lens).enumerate() {
            let want = a.layout.len(m, b, n).ok_or_else(|| GaError::Invalid("batch size overflows usize".into()))?;
            if a.data.len() != want {
                return Err(GaError::shape(format!("length of output {g} ({:?}, {m} values, B={b}, N={n})", a.layout), want, a.data.len()));
            }
        }
        Ok(())
    }

    /// Runs over a batch of `b × n` elements (see [`crate::layout`]).
    pub fn run<T: Real>(&self, b: usize, n: usize, inputs: &[InputArg<'_, T>], outputs: &mut [OutputArg<'_, T>]) -> Result<()> {
        self.check(b, n, inputs, outputs)?;
        let total = b * n;
        if total == 0 {
            return Ok(());
        }
        let threads = std::thread::available_parallelism().map(|x| x.get()).unwrap_or(1);
        let work = total.saturating_mul(self.ops.len().max(1));
        let threads = if work < (1 << 18) { 1 } else { threads.min(total.div_ceil(LANES)).max(1) };
        // split lanes into contiguous per-thread ranges (multiples of LANES)
        let per = total.div_ceil(threads).div_ceil(LANES) * LANES;
        let ranges: Vec<(usize, usize)> =
            (0..threads).map(|t| (t * per, ((t + 1) * per).min(total))).filter(|(s, e)| s < e).collect();
        let out_layouts: Vec<OutLayout> = outputs.iter().map(|o| o.layout).collect();
        // per-thread views of per-element outputs, and private accumulators for sums
        let mut views: Vec<Vec<Dest<'_, T>>> = ranges.iter().map(|_| Vec::new()).collect();
        let mut accs: Vec<Vec<Vec<T>>> = ranges.iter().map(|_| Vec::new()).collect();
        for (g, out) in outputs.iter_mut().enumerate() {
            let m = self.out_lens[g];
            match out.layout {
                OutLayout::PerElement => {
                    let mut rows: Vec<Vec<&mut [T]>> = ranges.iter().map(|_| Vec::new()).collect();
                    for row in out.data.chunks_mut(total) {
                        let mut rest = row;
                        let mut offset = 0;
                        for (t, &(_, e)) in ranges.iter().enumerate() {
                            let (head, tail) = rest.split_at_mut(e - offset);
                            rows[t].push(head);
                            rest = tail;
                            offset = e;
                        }
                    }
                    for (t, r) in rows.into_iter().enumerate() {
                        views[t].push(Dest::Rows(r));
                    }
                }
                OutLayout::PerChannelSum => {
                    for (t, v) in views.iter_mut().enumerate() {
                        accs[t].push(vec![T::default(); m * n]);
                        v.push(Dest::Acc(accs[t].len() - 1, m));
                    }
                }
                OutLayout::UniformSum => {
                    for (t, v) in views.iter_mut().enumerate() {
                        accs[t].push(vec![T::default(); m]);
                        v.push(Dest::Acc(accs[t].len() - 1, m));
                    }
                }
            }
        }
        let ctx = RunCtx { c: self, n, total, inputs, out_layouts: &out_layouts };
        if ranges.len() == 1 {
            let v = views.pop().expect("one range");
            let a = &mut accs[0];
            ctx.run_range(ranges[0], v, a);
        } else {
            std::thread::scope(|s| {
                for ((range, v), a) in ranges.iter().zip(views).zip(accs.iter_mut()) {
                    let ctx = &ctx;
                    s.spawn(move || ctx.run_range(*range, v, a));
                }
            });
        }
        // fold the private sums into the destinations
        for (g, out) in outputs.iter_mut().enumerate() {
            if out.layout == OutLayout::PerElement {
                continue;
            }
            let slot = out_layouts[..g].iter().filter(|l| **l != OutLayout::PerElement).count();
            for acc in &accs {
                for (d, &v) in out.data.iter_mut().zip(&acc[slot]) {
                    *d = T::add(*d, v);
                }
            }
        }
        Ok(())
    }
}

enum Dest<'a, T> {
    /// One mutable slice per output row, covering this thread's lanes.
    Rows(Vec<&'a mut [T]>),
    /// Index into the thread's accumulators, and `M`.
    Acc(usize, usize),
}

struct RunCtx<'c, 'a, T> {
    c: &'c Compiled,
    n: usize,
    total: usize,
    inputs: &'c [InputArg<'a, T>],
    out_layouts: &'c [OutLayout],
}

impl<T: Real> RunCtx<'_, '_, T> {
    fn run_range(&self, (start, end): (usize, usize), mut dest: Vec<Dest<'_, T>>, accs: &mut [Vec<T>]) {
        let c = self.c;
        let mut regs = vec![T::default(); c.regs.max(1) * LANES];
        // identically-zero per-element outputs
        for &(g, k) in &c.zeros {
            if let Dest::Rows(rows) = &mut dest[g as usize] {
                rows[k as usize].fill(T::default());
            }
        }
        let mut chan = [0usize; LANES];
        let mut i0 = start;
        while i0 < end {
            let len = LANES.min(end - i0);
            let mut ch = i0 % self.n;
            for c in chan.iter_mut().take(len) {
                *c = ch;
                ch += 1;
                if ch == self.n {
                    ch = 0;
                }
            }
            for op in &c.ops {
                match *op {
                    Op::Load { dst, group, index } => {
                        let arg = &self.inputs[group as usize];
                        let m = c.in_lens[group as usize];
                        let d = &mut regs[dst as usize * LANES..][..len];
                        match arg.layout {
                            Layout::PerElement => {
                                d.copy_from_slice(&arg.data[index as usize * self.total + i0..][..len]);
                            }
                            Layout::PerChannel => {
                                for (x, &ch) in d.iter_mut().zip(&chan[..len]) {
                                    *x = arg.data[ch * m + index as usize];
                                }
                            }
                            Layout::Uniform => d.fill(arg.data[index as usize]),
                        }
                    }
                    Op::Const { dst, value } => regs[dst as usize * LANES..][..len].fill(T::from_f64(value)),
                    Op::Add { dst, a, b } => bin(&mut regs, dst, a, b, len, T::add),
                    Op::Sub { dst, a, b } => bin(&mut regs, dst, a, b, len, T::sub),
                    Op::Mul { dst, a, b } => bin(&mut regs, dst, a, b, len, T::mul),
                    Op::Div { dst, a, b } => bin(&mut regs, dst, a, b, len, T::div),
                    Op::Neg { dst, a } => un(&mut regs, dst, a, len, T::neg),
                    Op::Unary { dst, op, a } => un(&mut regs, dst, a, len, |x| T::unary(op, x)),
                    Op::Store { src, group, index, neg } => {
                        let s = &regs[src as usize * LANES..][..len];
                        match &mut dest[group as usize] {
                            Dest::Rows(rows) => {
                                let d = &mut rows[index as usize][i0 - start..][..len];
                                if neg {
                                    for (x, &y) in d.iter_mut().zip(s) {
                                        *x = T::neg(y);
                                    }
                                } else {
                                    d.copy_from_slice(s);
                                }
                            }
                            Dest::Acc(slot, m) => {
                                let acc = &mut accs[*slot];
                                let m = *m;
                                let per_channel = self.out_layouts[group as usize] == OutLayout::PerChannelSum;
                                for (&y, &ch) in s.iter().zip(&chan[..len]) {
                                    let y = if neg { T::neg(y) } else { y };
                                    let at = if per_channel { ch * m + index as usize } else { index as usize };
                                    acc[at] = T::add(acc[at], y);
                                }
                            }
                        }
                    }
                }
            }
            i0 += len;
        }
    }
}

/// Splits the register file into the destination register (mutable) and the rest.
#[inline(always)]
fn split<'r, T>(regs: &'r mut [T], dst: u32) -> (&'r mut [T], impl Fn(u32) -> &'r [T]) {
    let d = dst as usize;
    let (lo, hi) = regs.split_at_mut(d * LANES);
    let (dst, hi) = hi.split_at_mut(LANES);
    let lo: &'r [T] = lo;
    let hi: &'r [T] = hi;
    let get = move |r: u32| {
        let r = r as usize;
        debug_assert!(r != d, "operand shares the destination register");
        if r < d {
            &lo[r * LANES..][..LANES]
        } else {
            &hi[(r - d - 1) * LANES..][..LANES]
        }
    };
    (dst, get)
}

#[inline(always)]
fn bin<T: Real>(regs: &mut [T], dst: u32, a: u32, b: u32, len: usize, f: impl Fn(T, T) -> T) {
    let (d, get) = split(regs, dst);
    let (a, b) = (get(a), get(b));
    for ((x, &p), &q) in d[..len].iter_mut().zip(&a[..len]).zip(&b[..len]) {
        *x = f(p, q);
    }
}

#[inline(always)]
fn un<T: Real>(regs: &mut [T], dst: u32, a: u32, len: usize, f: impl Fn(T) -> T) {
    let (d, get) = split(regs, dst);
    let a = get(a);
    for (x, &p) in d[..len].iter_mut().zip(&a[..len]) {
        *x = f(p);
    }
}
