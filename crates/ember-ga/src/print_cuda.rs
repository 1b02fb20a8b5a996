//! CUDA C printer: device functions over register arrays and whole elementwise
//! kernels with typed, strided loads and stores.
//!
//! Everything printed here is self-contained CUDA C without any `#include`, so
//! it compiles under NVRTC with no CUDA headers. Storage types f16 and bf16 are
//! `unsigned short` with helper conversions (bit shifts for bf16, inline PTX
//! `cvt` for f16); all arithmetic is `f32`. Helpers are guarded by
//! `EMBER_GA_HELPERS`, so several printed snippets can share one translation
//! unit. Kernel entry points are `extern "C" __global__` and index with 64-bit
//! integers.

use std::fmt::Write as _;

use crate::error::{GaError, Result};
use crate::ir::{Instr, Ir, Out, UnaryOp};
use crate::layout::{DType, Layout, OutLayout};

/// Helper functions (loads, stores, atomics), guarded by `EMBER_GA_HELPERS`.
pub const HELPERS: &str = r#"#ifndef EMBER_GA_HELPERS
#define EMBER_GA_HELPERS
__device__ __forceinline__ float ember_ld_f32(const float* p) { return *p; }
__device__ __forceinline__ void ember_st_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ float ember_ld_bf16(const unsigned short* p) {
    return __uint_as_float(((unsigned int)(*p)) << 16);
}
__device__ __forceinline__ void ember_st_bf16(unsigned short* p, float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { *p = (unsigned short)((u >> 16) | 0x0040u); return; }
    u += 0x7fffu + ((u >> 16) & 1u);
    *p = (unsigned short)(u >> 16);
}
__device__ __forceinline__ float ember_ld_f16(const unsigned short* p) {
    float f;
    unsigned short h = *p;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ void ember_st_f16(unsigned short* p, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    *p = h;
}
__device__ __forceinline__ void ember_atomic_add_f32(float* p, float v) { atomicAdd(p, v); }
#endif
"#;

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 | DType::BF16 => "unsigned short",
    }
}

/// A float literal in CUDA C.
pub fn float_literal(x: f64) -> String {
    let f = x as f32;
    if f.is_nan() {
        "__uint_as_float(0x7fc00000u)".into()
    } else if f.is_infinite() {
        if f > 0.0 { "__uint_as_float(0x7f800000u)".into() } else { "__uint_as_float(0xff800000u)".into() }
    } else {
        format!("{f:?}f")
    }
}

fn unary(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Sqrt => format!("sqrtf({a})"),
        UnaryOp::Rsqrt => format!("rsqrtf({a})"),
        UnaryOp::Recip => format!("(1.0f / {a})"),
        UnaryOp::Exp => format!("expf({a})"),
        UnaryOp::Log => format!("logf({a})"),
        UnaryOp::Tanh => format!("tanhf({a})"),
        UnaryOp::Erf => format!("erff({a})"),
        UnaryOp::Abs => format!("fabsf({a})"),
    }
}

/// How an input element appears in printed code.
enum Load {
    /// Referenced in place (`x[3]`).
    Inline(String),
    /// Loaded once into `const float t_<group>_<index>` with this initializer.
    Decl(String),
}

/// Prints the instruction list as `const float t_i = ...;` statements, then the
/// output statements made by `store(group, index, value)`.
fn body(ir: &Ir, indent: &str, load: &dyn Fn(u32, u32) -> Load, store: &dyn Fn(usize, usize, &str) -> String) -> String {
    let mut s = String::new();
    let mut name: Vec<String> = Vec::with_capacity(ir.instrs.len());
    for (i, ins) in ir.instrs.iter().enumerate() {
        let v = |j: &u32| name[*j as usize].as_str();
        let rhs = match ins {
            Instr::Input { group, index } => match load(*group, *index) {
                Load::Inline(e) => {
                    name.push(e);
                    continue;
                }
                Load::Decl(init) => {
                    let n = format!("t_{}_{}", ir.inputs[*group as usize].name, index);
                    let _ = writeln!(s, "{indent}const float {n} = {init};");
                    name.push(n);
                    continue;
                }
            },
            Instr::Const(c) => {
                name.push(float_literal(*c));
                continue;
            }
            Instr::Add(a, b) => format!("{} + {}", v(a), v(b)),
            Instr::Sub(a, b) => format!("{} - {}", v(a), v(b)),
            Instr::Mul(a, b) => format!("{} * {}", v(a), v(b)),
            Instr::Div(a, b) => format!("{} / {}", v(a), v(b)),
            Instr::Neg(a) => format!("-{}", v(a)),
            Instr::Unary(op, a) => unary(*op, v(a)),
        };
        let _ = writeln!(s, "{indent}const float t_{i} = {rhs};");
        name.push(format!("t_{i}"));
    }
    for (g, outs) in ir.results.iter().enumerate() {
        for (k, o) in outs.iter().enumerate() {
            let val = match o {
                Out::Zero => "0.0f".to_string(),
                Out::Val { id, neg: false } => name[*id as usize].clone(),
                Out::Val { id, neg: true } => format!("-{}", name[*id as usize]),
            };
            let _ = writeln!(s, "{indent}{}", store(g, k, &val));
        }
    }
    s
}

fn header(ir: &Ir) -> String {
    let c = ir.counts();
    let mut s = format!("// {}: {} muls / {} adds", ir.name, c.muls, c.adds);
    if c.other > 0 {
        let _ = write!(s, " / {} other", c.other);
    }
    s.push('\n');
    for g in &ir.inputs {
        let _ = writeln!(s, "//   in  {}[{}]: {}", g.name, g.len(), g.labels.join(" "));
    }
    for g in &ir.outputs {
        let _ = writeln!(s, "//   out {}[{}]: {}", g.name, g.len(), g.labels.join(" "));
    }
    s
}

/// A `__device__ __forceinline__ void name(const float* x, ..., float* out, ...)`
/// function over register arrays: inputs first, then outputs, in group order.
pub fn device_function(ir: &Ir) -> String {
    let mut s = header(ir);
    let mut params: Vec<String> = ir.inputs.iter().map(|g| format!("const float* __restrict__ {}", g.name)).collect();
    params.extend(ir.outputs.iter().map(|g| format!("float* __restrict__ {}", g.name)));
    let _ = writeln!(s, "__device__ __forceinline__ void {}({}) {{", ir.name, params.join(", "));
    let load = |g: u32, k: u32| Load::Inline(format!("{}[{}]", ir.inputs[g as usize].name, k));
    let store = |g: usize, k: usize, v: &str| format!("{}[{}] = {};", ir.outputs[g].name, k, v);
    s.push_str(&body(ir, "    ", &load, &store));
    s.push_str("}\n");
    s
}

/// Storage of one kernel input.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InSpec {
    /// Layout.
    pub layout: Layout,
    /// Storage type.
    pub dtype: DType,
}

/// Storage of one kernel output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OutSpec {
    /// Layout.
    pub layout: OutLayout,
    /// Storage type (sums need `F32`: they use `atomicAdd`).
    pub dtype: DType,
}

/// Layouts and storage types of a kernel's arguments, in group order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    /// Kernel name (`extern "C"` symbol).
    pub name: String,
    /// One per input group.
    pub inputs: Vec<InSpec>,
    /// One per output group.
    pub outputs: Vec<OutSpec>,
}

impl KernelSpec {
    /// Every multivector argument per element in `dtype`; scalar groups (weights)
    /// per channel in `f32`, and their gradients summed per channel in `f32`.
    /// Groups are told apart by the program convention: input groups called `w`
    /// and outputs called `d_w` are per channel.
    pub fn elementwise(ir: &Ir, name: &str, dtype: DType) -> KernelSpec {
        let inputs = ir
            .inputs
            .iter()
            .map(|g| {
                if g.name == "w" {
                    InSpec { layout: Layout::PerChannel, dtype: DType::F32 }
                } else {
                    InSpec { layout: Layout::PerElement, dtype }
                }
            })
            .collect();
        let outputs = ir
            .outputs
            .iter()
            .map(|g| {
                if g.name == "d_w" {
                    OutSpec { layout: OutLayout::PerChannelSum, dtype: DType::F32 }
                } else {
                    OutSpec { layout: OutLayout::PerElement, dtype }
                }
            })
            .collect();
        KernelSpec { name: name.to_string(), inputs, outputs }
    }
}

/// A whole elementwise kernel `extern "C" __global__ void name(inputs..., outputs...,
/// long long B, long long N)` over the `B × N` batch (see [`crate::layout`]): a
/// grid-stride loop where each thread handles one `(b, n)`. Helpers are included.
pub fn kernel(ir: &Ir, spec: &KernelSpec) -> Result<String> {
    crate::ir::check_ident(&spec.name)?;
    if spec.inputs.len() != ir.inputs.len() {
        return Err(GaError::shape(format!("input specs of kernel {}", spec.name), ir.inputs.len(), spec.inputs.len()));
    }
    if spec.outputs.len() != ir.outputs.len() {
        return Err(GaError::shape(format!("output specs of kernel {}", spec.name), ir.outputs.len(), spec.outputs.len()));
    }
    for (g, o) in ir.outputs.iter().zip(&spec.outputs) {
        if o.layout != OutLayout::PerElement && o.dtype != DType::F32 {
            return Err(GaError::Invalid(format!(
                "output {} is a sum ({:?}) stored as {}; expected f32 storage (sums use atomicAdd)",
                g.name, o.layout, o.dtype
            )));
        }
    }
    let mut s = String::from(HELPERS);
    s.push_str(&header(ir));
    let mut params: Vec<String> = ir
        .inputs
        .iter()
        .zip(&spec.inputs)
        .map(|(g, a)| format!("const {}* __restrict__ {}", c_type(a.dtype), g.name))
        .collect();
    params.extend(ir.outputs.iter().zip(&spec.outputs).map(|(g, a)| format!("{}* __restrict__ {}", c_type(a.dtype), g.name)));
    params.push("long long ember_B".into());
    params.push("long long ember_N".into());
    let _ = writeln!(s, "extern \"C\" __global__ void {}({}) {{", spec.name, params.join(", "));
    s.push_str("    const long long ember_BN = ember_B * ember_N;\n");
    s.push_str("    const long long ember_stride = (long long)blockDim.x * (long long)gridDim.x;\n");
    s.push_str(
        "    for (long long ember_i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x; ember_i < ember_BN; ember_i += ember_stride) {\n",
    );
    let needs_n = spec.inputs.iter().any(|a| a.layout == Layout::PerChannel)
        || spec.outputs.iter().any(|a| a.layout == OutLayout::PerChannelSum);
    if needs_n {
        s.push_str("        const long long ember_n = ember_i % ember_N;\n");
    }
    let load = |g: u32, k: u32| {
        let grp = &ir.inputs[g as usize];
        let a = spec.inputs[g as usize];
        let at = match a.layout {
            Layout::PerElement => format!("{} + {}LL * ember_BN + ember_i", grp.name, k),
            Layout::PerChannel => format!("{} + ember_n * {}LL + {}", grp.name, grp.len(), k),
            Layout::Uniform => format!("{} + {}", grp.name, k),
        };
        Load::Decl(format!("ember_ld_{}({at})", a.dtype.name()))
    };
    let store = |g: usize, k: usize, v: &str| {
        let grp = &ir.outputs[g];
        let a = spec.outputs[g];
        match a.layout {
            OutLayout::PerElement => {
                format!("ember_st_{}({} + {}LL * ember_BN + ember_i, {v});", a.dtype.name(), grp.name, k)
            }
            OutLayout::PerChannelSum => {
                format!("ember_atomic_add_f32({} + ember_n * {}LL + {}, {v});", grp.name, grp.len(), k)
            }
            OutLayout::UniformSum => format!("ember_atomic_add_f32({} + {}, {v});", grp.name, k),
        }
    };
    s.push_str(&body(ir, "        ", &load, &store));
    s.push_str("    }\n}\n");
    Ok(s)
}
