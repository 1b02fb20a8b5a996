//! Shape of the NVRTC compile corpus (the compile itself runs in the CUDA CI test).

use std::collections::HashSet;

use ember_ga::cuda::{compile_corpus, HELPERS};
use ember_ga::emit::{emit, Lang, EXPRS};

#[test]
fn corpus_is_self_contained_and_covers_everything() {
    let corpus = compile_corpus();
    let names: HashSet<&str> = corpus.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), corpus.len(), "source names are unique");
    let all: String = corpus.iter().map(|(_, s)| s.as_str()).collect();
    for (name, src) in &corpus {
        assert!(!src.contains("#include"), "{name} must not include headers");
        assert!(src.contains("extern \"C\" __global__ void"), "{name} has kernels");
        assert!(src.contains("#ifndef EMBER_GA_HELPERS"), "{name} carries guarded helpers");
    }
    for spec in ["200", "300", "301", "130", "411"] {
        for (expr, _) in EXPRS {
            for grad in ["", "_grad"] {
                let f = format!("void ga_cl{spec}_{expr}{grad}(");
                assert!(all.contains(&f), "device function {f}");
                let caller = format!("void ga_cl{spec}_{expr}{grad}_call(");
                assert!(all.contains(&caller), "caller {caller}");
            }
        }
        for dtype in ["f32", "f16", "bf16"] {
            for grad in ["", "_grad"] {
                let k = format!("void ga_cl{spec}_wgp{grad}_{dtype}(");
                assert!(all.contains(&k), "kernel {k}");
            }
        }
    }
    for dtype in ["f32", "f16", "bf16"] {
        assert!(all.contains(&format!("void ga_features_{dtype}(")));
        assert!(all.contains(&format!("ember_ld_{dtype}(")));
    }
    assert!(all.contains("ember_st_f16(") && all.contains("ember_st_bf16(") && all.contains("ember_atomic_add_f32("));
    // two snippets concatenate: helpers are defined once under the guard
    assert_eq!(HELPERS.matches("#define EMBER_GA_HELPERS").count(), 1);
}

#[test]
fn emit_reports_counts_in_every_language() {
    for lang in Lang::ALL {
        let e = emit("3,0", "wgp", false, lang).unwrap();
        assert_eq!((e.muls, e.adds), (92, 56));
        assert!(e.code.contains("92 muls / 56 adds"), "{lang}");
        assert_eq!(e.name, "ga_cl300_wgp");
    }
    let e = emit("3,0,1", "sandwich", true, Lang::Cuda).unwrap();
    assert!(e.code.contains("__device__ __forceinline__ void ga_cl301_sandwich_grad("));
    assert!(e.code.contains("extern \"C\" __global__ void ga_cl301_sandwich_grad_kernel("));
    assert_eq!("CUDA".parse::<Lang>().unwrap(), Lang::Cuda);
    assert_eq!("rs".parse::<Lang>().unwrap(), Lang::Rust);
    let err = "python".parse::<Lang>().unwrap_err();
    assert_eq!(err.to_string(), "unknown language \"python\"; expected one of: cuda, rust, ir");
    let err = emit("3,0", "sandwhich", false, Lang::Ir).unwrap_err();
    assert!(err.to_string().starts_with("unknown expression \"sandwhich\""));
    let err = emit("7", "gp", false, Lang::Ir).unwrap_err();
    assert!(err.to_string().contains("expected n <= 6"));
}
