//! Counter-based random numbers: value `i` of a stream depends only on (seed, i), so tensors are
//! generated in parallel and a CUDA tensor made with the same seed holds the same values
//! (the device side is `ember_uniform` in `cuda/common.cuh`).

#[inline]
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Uniform in [lo, hi), in steps of (hi - lo)·2⁻²⁴, bit-identical to the CUDA helper.
#[inline]
pub fn uniform(seed: u64, i: u64, lo: f32, hi: f32) -> f32 {
    let h = splitmix64(splitmix64(seed) ^ i);
    let u = ((h >> 40) as u32) as f32 * 5.960_464_5e-8;
    lo + (hi - lo) * u
}

/// Standard normal by Box–Muller from two uniform draws (CPU only).
#[inline]
pub fn normal(seed: u64, i: u64) -> f64 {
    let h1 = splitmix64(splitmix64(seed ^ 0x5EED_0001) ^ i);
    let h2 = splitmix64(splitmix64(seed ^ 0x5EED_0002) ^ i);
    let u1 = ((h1 >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
    let u2 = (h2 >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
