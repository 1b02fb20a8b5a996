//! CUDA back end: the printer ([`crate::print_cuda`]) and the corpus of
//! everything it can emit, for the NVRTC compile test.

pub use crate::print_cuda::*;

use crate::algebra::Algebra;
use crate::emit::{function_name, program, EXPRS};
use crate::ir::{Builder, Ir, UnaryOp, Val};
use crate::layout::{DType, Layout, OutLayout};

/// Algebras covered by [`compile_corpus`].
pub const CORPUS_ALGEBRAS: [&str; 5] = ["2,0,0", "3,0,0", "3,0,1", "1,3,0", "4,1,1"];

/// A kernel that loads one element of every input group from a flat buffer,
/// calls the device function on register arrays and stores the outputs, so that
/// the device function is really compiled.
pub fn device_function_caller(ir: &Ir) -> String {
    let mut s = format!("extern \"C\" __global__ void {}_call(const float* ember_in, float* ember_out) {{\n", ir.name);
    let mut off = 0usize;
    for g in &ir.inputs {
        s.push_str(&format!("    float {}[{}];\n", g.name, g.len().max(1)));
        s.push_str(&format!("    for (int k = 0; k < {}; ++k) {}[k] = ember_in[{off} + k];\n", g.len(), g.name));
        off += g.len();
    }
    for g in &ir.outputs {
        s.push_str(&format!("    float {}[{}];\n", g.name, g.len().max(1)));
    }
    let args: Vec<&str> = ir.inputs.iter().chain(&ir.outputs).map(|g| g.name.as_str()).collect();
    s.push_str(&format!("    {}({});\n", ir.name, args.join(", ")));
    let mut off = 0usize;
    for g in &ir.outputs {
        s.push_str(&format!("    for (int k = 0; k < {}; ++k) ember_out[{off} + k] = {}[k];\n", g.len(), g.name));
        off += g.len();
    }
    s.push_str("}\n");
    s
}

/// A program that uses every kind of IR instruction (every unary function,
/// division, negation, special constants), for the compile corpus.
pub fn feature_program() -> Ir {
    let mut b = Builder::new();
    let a = b.input_group("a", vec!["a0".into(), "a1".into(), "a2".into()]).expect("valid group");
    let c = b.input_group("c", vec!["c0".into(), "c1".into()]).expect("valid group");
    let u = b.input_group("u", vec!["u0".into(), "u1".into()]).expect("valid group");
    let mut vals: Vec<Val> = Vec::new();
    for (k, op) in UnaryOp::ALL.iter().enumerate() {
        // apply to a negated operand so that non-odd functions need an explicit negation
        let x = b.mul(a[k % 3], c[k % 2]);
        vals.push(b.unary(*op, x.negate()));
    }
    let q = b.div(a[0], u[0]);
    let inf = b.constant(f64::INFINITY);
    let tiny = b.constant(1.0e-30);
    let r = b.mul(q, tiny);
    let lim = b.div(r, inf);
    let s = b.sum(&vals);
    let t = b.add(s, lim);
    let m = b.mul(t, u[1]);
    b.output_group("o", vec!["o0".into(), "o1".into()], vec![m, q.negate()]).expect("valid group");
    b.output_group("oc", vec!["oc0".into()], vec![t]).expect("valid group");
    b.output_group("ou", vec!["ou0".into(), "ou1".into()], vec![s, Val::Zero]).expect("valid group");
    b.finish("ga_features").expect("valid name")
}

/// Kernel spec of [`feature_program`] exercising every layout.
pub fn feature_spec(dtype: DType) -> KernelSpec {
    KernelSpec {
        name: format!("ga_features_{}", dtype.name()),
        inputs: vec![
            InSpec { layout: Layout::PerElement, dtype },
            InSpec { layout: Layout::PerChannel, dtype },
            InSpec { layout: Layout::Uniform, dtype },
        ],
        outputs: vec![
            OutSpec { layout: OutLayout::PerElement, dtype },
            OutSpec { layout: OutLayout::PerChannelSum, dtype: DType::F32 },
            OutSpec { layout: OutLayout::UniformSum, dtype: DType::F32 },
        ],
    }
}

/// Expressions whose elementwise kernels are included for the n = 6 algebra (the
/// device functions of every expression are included for all algebras; the
/// kernels of the others differ only in the loads and stores).
pub const CORPUS_N6_KERNEL_EXPRS: [&str; 4] = ["gp", "wgp", "sandwich", "norm2"];

/// Everything the CUDA printer emits, as complete self-contained CUDA C sources
/// `(name, source)`: one source with [`feature_program`] (every instruction kind
/// and layout, every storage type), and for each algebra of [`CORPUS_ALGEBRAS`], one source with
/// the device functions of every expression (forward and gradient) plus callers,
/// and one source per storage type (f32, f16, bf16) with the elementwise kernels
/// of every expression (forward and gradient; for the n = 6 algebra the
/// expressions of [`CORPUS_N6_KERNEL_EXPRS`]). The n = 6 sources are split per
/// expression (forward and gradient together) so a test can compile them in
/// parallel; with NVRTC 13 the whole corpus takes about 100 s of one core
/// per target architecture, most of it in the n = 6 sources.
pub fn compile_corpus() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let features = feature_program();
    let mut src = String::from(HELPERS);
    src.push_str(&device_function(&features));
    src.push_str(&device_function_caller(&features));
    for dtype in DType::ALL {
        src.push_str(&kernel(&features, &feature_spec(dtype)).expect("feature kernel"));
    }
    out.push(("features".to_string(), src));
    for spec in CORPUS_ALGEBRAS {
        let alg = Algebra::parse(spec).expect("corpus algebra");
        let mut irs = Vec::new();
        for (expr, _) in EXPRS {
            for grad in [false, true] {
                let prog = program(&alg, expr, grad).expect("corpus expression");
                irs.push((*expr, prog.lower(&function_name(&alg, expr, grad)).expect("corpus lowering")));
            }
        }
        let tag = spec.replace(',', "");
        // n = 6 sources are large: split them per expression so they compile in parallel
        let split = alg.n() == 6;
        let mut dev = String::from(HELPERS);
        for (k, (expr, ir)) in irs.iter().enumerate() {
            dev.push_str(&device_function(ir));
            dev.push_str(&device_function_caller(ir));
            if split && k % 2 == 1 {
                out.push((format!("cl{tag}_device_functions_{expr}"), std::mem::replace(&mut dev, String::from(HELPERS))));
            }
        }
        if !split {
            out.push((format!("cl{tag}_device_functions"), dev));
        }
        for dtype in DType::ALL {
            let mut src = String::new();
            for (k, (expr, ir)) in irs.iter().enumerate() {
                if split && !CORPUS_N6_KERNEL_EXPRS.contains(expr) {
                    continue;
                }
                let ks = KernelSpec::elementwise(ir, &format!("{}_{}", ir.name, dtype.name()), dtype);
                src.push_str(&kernel(ir, &ks).expect("corpus kernel"));
                if split && k % 2 == 1 {
                    out.push((format!("cl{tag}_kernels_{expr}_{}", dtype.name()), std::mem::take(&mut src)));
                }
            }
            if !split {
                out.push((format!("cl{tag}_kernels_{}", dtype.name()), src));
            }
        }
    }
    out
}
