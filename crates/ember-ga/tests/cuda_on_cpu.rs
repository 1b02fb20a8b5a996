//! Runs generated CUDA kernels on the CPU: the kernel source is compiled as C++
//! with host stand-ins for the CUDA built-ins and helpers, launched over a full
//! grid sequentially, and compared with the IR evaluator. This checks the
//! printer's indexing, layouts, typed loads/stores and per-channel sums.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use ember_ga::cuda::{kernel, InSpec, KernelSpec, OutSpec};
use ember_ga::emit::program;
use ember_ga::eval::{Compiled, InputArg, OutputArg};
use ember_ga::layout::{DType, Layout, OutLayout};
use ember_ga::Algebra;

const PRELUDE: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cmath>
struct ember_dim3 { unsigned int x, y, z; };
static ember_dim3 blockIdx, blockDim, threadIdx, gridDim;
#define __device__
#define __forceinline__ inline
#define __global__
#define __restrict__
#define EMBER_GA_HELPERS
static inline float ember_bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t ember_f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float ember_ld_f32(const float* p) { return *p; }
static inline void ember_st_f32(float* p, float v) { *p = v; }
static inline float ember_ld_bf16(const unsigned short* p) { return ember_bits_f(((uint32_t)*p) << 16); }
static inline void ember_st_bf16(unsigned short* p, float v) {
    uint32_t u = ember_f_bits(v);
    u += 0x7fffu + ((u >> 16) & 1u);
    *p = (unsigned short)(u >> 16);
}
static inline float ember_ld_f16(const unsigned short* p) { _Float16 h; std::memcpy(&h, p, 2); return (float)h; }
static inline void ember_st_f16(unsigned short* p, float v) { _Float16 h = (_Float16)v; std::memcpy(p, &h, 2); }
static inline void ember_atomic_add_f32(float* p, float v) { *p += v; }
"#;

fn cxx() -> Option<String> {
    for c in ["c++", "g++", "clang++"] {
        if Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(c.to_string());
        }
    }
    None
}

fn bf16_round(x: f32) -> f32 {
    let mut u = x.to_bits();
    u = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    f32::from_bits(u & 0xffff_0000)
}

fn to_bf16_bits(x: f32) -> u16 {
    (bf16_round(x).to_bits() >> 16) as u16
}

/// f32 -> IEEE half bits, round to nearest even (normal range only).
fn f32_to_f16(x: f32) -> u16 {
    let u = x.to_bits();
    let sign = ((u >> 16) & 0x8000) as u16;
    let exp = ((u >> 23) & 0xff) as i32 - 127 + 15;
    let mant = u & 0x7f_ffff;
    assert!((1..31).contains(&exp), "value {x} outside the normal f16 range");
    let mut h = ((exp as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    sign | h as u16
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    assert!(exp != 0 && exp != 31);
    f32::from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13))
}

#[test]
fn generated_kernels_match_the_evaluator() {
    // A C++ compiler is part of the toolchain this crate is tested with (cc builds need one too).
    let cxx = cxx().expect("a C++ compiler (c++, g++ or clang++; or $CXX) to run generated kernels on the host");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_on_cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng::new(21);
    let cases = [
        ("3,0,1", "wgp", true, DType::F32),
        ("3,0,0", "sandwich", true, DType::BF16),
        ("1,3,0", "gp", false, DType::F16),
        ("2,0,0", "wgp", true, DType::BF16),
    ];
    for (spec, expr, grad, dtype) in cases {
        let alg = Algebra::parse(spec).unwrap();
        let prog = program(&alg, expr, grad).unwrap();
        let ir = prog.lower("k").unwrap();
        // weights per channel, a uniform upstream gradient when present, the rest per element
        let ins: Vec<InSpec> = ir
            .inputs
            .iter()
            .map(|g| match g.name.as_str() {
                "w" => InSpec { layout: Layout::PerChannel, dtype: DType::F32 },
                _ => InSpec { layout: Layout::PerElement, dtype },
            })
            .collect();
        let outs: Vec<OutSpec> = ir
            .outputs
            .iter()
            .map(|g| match g.name.as_str() {
                "d_w" => OutSpec { layout: OutLayout::PerChannelSum, dtype: DType::F32 },
                "d_x" if grad => OutSpec { layout: OutLayout::UniformSum, dtype: DType::F32 },
                _ => OutSpec { layout: OutLayout::PerElement, dtype },
            })
            .collect();
        let ks = KernelSpec { name: "k_entry".to_string(), inputs: ins.clone(), outputs: outs.clone() };
        let src = kernel(&ir, &ks).unwrap();
        let (b, n) = (5usize, 7usize);
        // input data (already representable in the storage type)
        let data: Vec<Vec<f32>> = ir
            .inputs
            .iter()
            .zip(&ins)
            .map(|(g, a)| {
                let len = a.layout.len(g.len(), b, n).unwrap();
                (0..len)
                    .map(|_| {
                        let mut x = rng.uniform() as f32;
                        if x.abs() < 1e-3 {
                            x = 0.5; // keep f16 values normal
                        }
                        match a.dtype {
                            DType::BF16 => bf16_round(x),
                            DType::F16 => f16_to_f32(f32_to_f16(x)),
                            DType::F32 => x,
                        }
                    })
                    .collect()
            })
            .collect();
        // harness
        let mut main = String::from("int main() {\n");
        for (k, (a, d)) in ins.iter().zip(&data).enumerate() {
            let ty = if a.dtype == DType::F32 { "float" } else { "unsigned short" };
            let vals: Vec<String> = d
                .iter()
                .map(|&x| match a.dtype {
                    DType::F32 => format!("{:e}f", x),
                    DType::BF16 => format!("{}", to_bf16_bits(x)),
                    DType::F16 => format!("{}", f32_to_f16(x)),
                })
                .collect();
            main.push_str(&format!("    static {ty} in{k}[] = {{{}}};\n", vals.join(",")));
        }
        for (k, (g, a)) in ir.outputs.iter().zip(&outs).enumerate() {
            let ty = if a.dtype == DType::F32 { "float" } else { "unsigned short" };
            let len = a.layout.len(g.len(), b, n).unwrap();
            main.push_str(&format!("    static {ty} out{k}[{len}] = {{0}};\n"));
        }
        let mut args: Vec<String> = (0..ir.inputs.len()).map(|k| format!("in{k}")).collect();
        args.extend((0..ir.outputs.len()).map(|k| format!("out{k}")));
        main.push_str("    blockDim.x = 4; gridDim.x = 3;\n");
        main.push_str(&format!(
            "    for (unsigned bx = 0; bx < gridDim.x; ++bx) for (unsigned tx = 0; tx < blockDim.x; ++tx) {{ blockIdx.x = bx; threadIdx.x = tx; {}({}, {b}LL, {n}LL); }}\n",
            ks.name,
            args.join(", ")
        ));
        for (k, (g, a)) in ir.outputs.iter().zip(&outs).enumerate() {
            let len = a.layout.len(g.len(), b, n).unwrap();
            let conv = match a.dtype {
                DType::F32 => format!("out{k}[i]"),
                DType::BF16 => format!("ember_ld_bf16(&out{k}[i])"),
                DType::F16 => format!("ember_ld_f16(&out{k}[i])"),
            };
            main.push_str(&format!("    for (int i = 0; i < {len}; ++i) printf(\"%.9e\\n\", (double){conv});\n"));
        }
        main.push_str("    return 0;\n}\n");
        let file = dir.join(format!("{}_{}.cpp", spec.replace(',', ""), expr));
        std::fs::write(&file, format!("{PRELUDE}\n{src}\n{main}")).unwrap();
        let exe = file.with_extension("bin");
        let st = Command::new(&cxx).arg("-O1").arg("-o").arg(&exe).arg(&file).output().unwrap();
        assert!(st.status.success(), "C++ build failed: {}", String::from_utf8_lossy(&st.stderr));
        let run = Command::new(&exe).output().unwrap();
        assert!(run.status.success());
        let got: Vec<f64> = String::from_utf8(run.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
        // reference: evaluator in f64 with the same layouts
        let c = Compiled::new(&ir);
        let data64: Vec<Vec<f64>> = data.iter().map(|v| v.iter().map(|&x| f64::from(x)).collect()).collect();
        let iargs: Vec<InputArg<f64>> = data64.iter().zip(&ins).map(|(d, a)| InputArg { data: d, layout: a.layout }).collect();
        let mut ref_outs: Vec<Vec<f64>> =
            ir.outputs.iter().zip(&outs).map(|(g, a)| vec![0.0; a.layout.len(g.len(), b, n).unwrap()]).collect();
        {
            let mut oargs: Vec<OutputArg<f64>> =
                ref_outs.iter_mut().zip(&outs).map(|(d, a)| OutputArg { data: d, layout: a.layout }).collect();
            c.run(b, n, &iargs, &mut oargs).unwrap();
        }
        let want: Vec<f64> = ref_outs.iter().flatten().copied().collect();
        assert_eq!(got.len(), want.len());
        let tol = match dtype {
            DType::BF16 => 2e-2,
            DType::F16 => 4e-3,
            DType::F32 => 1e-5,
        };
        assert_close(&got, &want, tol, &format!("{spec} {expr} grad={grad} {dtype}"));
    }
}
