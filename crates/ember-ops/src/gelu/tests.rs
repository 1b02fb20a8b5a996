use super::*;
use crate::harness::check::{CheckCtx, Tier};
use crate::OpFamily;
use ember_core::Error;

#[test]
fn reference_derivative_matches_finite_differences() {
    for &x in &[-4.0, -1.3, -0.2, 0.0, 0.4, 1.0, 2.5, 6.0] {
        let h = 1e-6;
        let fd = (reference::gelu(x + h) - reference::gelu(x - h)) / (2.0 * h);
        assert!((fd - reference::gelu_grad(x)).abs() < 1e-8, "x={x}: fd {fd} vs {}", reference::gelu_grad(x));
    }
    // Known values: gelu(1) = Φ(1) = 0.841344746..., gelu(-1) = -0.158655254...
    assert!((reference::gelu(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
    assert!((reference::gelu(-1.0) + 0.158_655_253_931_457_05).abs() < 1e-15);
}

#[test]
fn cpu_fast_path_matches_reference_in_every_dtype() {
    ember_core::set_poison_outputs(true);
    let rows = Family.check(&CheckCtx::new(Device::Cpu, Tier::Quick)).unwrap();
    assert_eq!(rows.len(), 4 * 3 * 2);
    for r in &rows {
        assert!(r.pass(), "{r:?}");
    }
}

#[test]
fn f64_runs_the_reference() {
    let x = Tensor::from_vec(vec![-1.0f64, 0.0, 1.0], &[3]).unwrap();
    let y = forward(&x).unwrap().to_vec_f64().unwrap();
    assert_eq!(y, reference::forward(&[-1.0, 0.0, 1.0]));
}

#[test]
fn bad_input_is_a_clear_error() {
    let x = Tensor::zeros(&[4, 3], DType::F32, Device::Cpu).unwrap();
    let e = backward(&x, &Tensor::zeros(&[4, 2], DType::F32, Device::Cpu).unwrap()).unwrap_err();
    assert!(e.to_string().contains("argument `dy`: expected shape the shape of x = [4, 3], got [4, 2]"), "{e}");
    let e = backward(&x, &Tensor::zeros(&[4, 3], DType::BF16, Device::Cpu).unwrap()).unwrap_err();
    assert!(e.to_string().contains("argument `dy`: expected dtype f32, got bf16"), "{e}");
    let e = forward(&Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Empty { .. }) && e.to_string().contains("`x`"), "{e}");
}
