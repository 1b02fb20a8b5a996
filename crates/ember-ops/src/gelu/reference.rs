//! The f64 reference: plain loops, the test oracle.

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * FRAC_1_SQRT_2))
}

pub fn gelu_grad(x: f64) -> f64 {
    0.5 * (1.0 + libm::erf(x * FRAC_1_SQRT_2)) + x * FRAC_1_SQRT_2PI * (-0.5 * x * x).exp()
}

pub fn forward(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| gelu(v)).collect()
}

pub fn backward(x: &[f64], dy: &[f64]) -> Vec<f64> {
    x.iter().zip(dy).map(|(&v, &g)| g * gelu_grad(v)).collect()
}
