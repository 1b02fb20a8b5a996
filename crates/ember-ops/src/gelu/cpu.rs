//! CPU fast path: f32 arithmetic over rayon chunks, converting half types on the fly.

use ember_core::{bf16, f16, CpuStorage, Result, Tensor};
use rayon::prelude::*;

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
const CHUNK: usize = 1 << 14;

#[inline]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * FRAC_1_SQRT_2))
}

#[inline]
pub fn gelu_grad(x: f32) -> f32 {
    0.5 * (1.0 + libm::erff(x * FRAC_1_SQRT_2)) + x * FRAC_1_SQRT_2PI * (-0.5 * x * x).exp()
}

fn map1<T: ember_core::Element>(x: &[T], f: impl Fn(f32) -> f32 + Sync) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(o, i)| {
        for (o, &i) in o.iter_mut().zip(i) {
            *o = T::from_f32(f(i.to_f32()));
        }
    });
    out
}

fn map2<T: ember_core::Element>(x: &[T], y: &[T], f: impl Fn(f32, f32) -> f32 + Sync) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK))).for_each(|(o, (a, b))| {
        for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
            *o = T::from_f32(f(a.to_f32(), b.to_f32()));
        }
    });
    out
}

pub fn forward(x: &Tensor) -> Result<Tensor> {
    let s = match x.cpu_storage()? {
        CpuStorage::F32(v) => CpuStorage::F32(map1(v, gelu)),
        CpuStorage::F16(v) => CpuStorage::F16(map1::<f16>(v, gelu)),
        CpuStorage::BF16(v) => CpuStorage::BF16(map1::<bf16>(v, gelu)),
        CpuStorage::F64(_) => unreachable!("f64 runs the reference"),
    };
    Tensor::from_cpu_storage(s, x.shape())
}

pub fn backward(x: &Tensor, dy: &Tensor) -> Result<Tensor> {
    let grad = |a: f32, g: f32| g * gelu_grad(a);
    let s = match (x.cpu_storage()?, dy.cpu_storage()?) {
        (CpuStorage::F32(a), CpuStorage::F32(g)) => CpuStorage::F32(map2(a, g, grad)),
        (CpuStorage::F16(a), CpuStorage::F16(g)) => CpuStorage::F16(map2(a, g, grad)),
        (CpuStorage::BF16(a), CpuStorage::BF16(g)) => CpuStorage::BF16(map2(a, g, grad)),
        _ => unreachable!("validated: same dtype, not f64"),
    };
    Tensor::from_cpu_storage(s, x.shape())
}
