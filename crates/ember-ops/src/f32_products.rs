//! f32 inputs on tensor cores. Each value splits into a head and a tail, and three products of the
//! halves (hi·hi + hi·lo + lo·hi, small terms first) stand in for one f32 product. Two splits exist:
//! - bf16 halves, three m16n8k16 products per 16 deep (the default): ~5e-6 relative per product sum,
//!   inside the 3e-4 the standard holds f32 on tensor cores to;
//! - TF32 halves, three m16n8k8 per 8 deep (an op's knob set to `tf32x3`): ~1e-7, at twice the
//!   tensor-core time (a bf16 m16n8k16 takes as long as a TF32 m16n8k8).
//!
//! The kernels take the same f32 tiles either way: a k16 product sums its k in any order, so the TF32
//! fragments of two consecutive 8-deep steps pack pairwise into one bf16 fragment
//! (`ember_split_bf16x2` in common.cuh).

use ember_core::DType;

/// Whether the environment variable `knob` leaves an op's f32 GEMMs on bf16 halves (anything but
/// `tf32x3`).
pub fn bf16x3(knob: &'static str) -> bool {
    ember_core::knob(knob) != Some("tf32x3")
}

/// ‖out − ref‖/‖ref‖ a CUDA result of `dtype` is held to when its f32 GEMMs run on bf16 halves
/// (`bf16x3`): 3e-4 for f32, else the dtype's own bound.
pub fn cuda_tolerance(dtype: DType, bf16x3: bool) -> f64 {
    if dtype == DType::F32 && bf16x3 {
        3e-4
    } else {
        dtype.tolerance()
    }
}
