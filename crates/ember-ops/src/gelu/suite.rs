//! GELU's `ember check` cases and `ember bench` rows.

use super::{backward, cuda, forward, reference};
use crate::harness::bench::{params, BenchCtx, BenchRow};
use crate::harness::check::{compare, CheckCtx, CheckRow, Tier};
use crate::KernelBuild;
use ember_core::{DType, Device, Result, Tensor};
use serde_json::json;

pub struct Family;

fn sizes(tier: Tier) -> Vec<usize> {
    match tier {
        Tier::Quick => vec![1, 7, 1000, 4099],
        Tier::Small => vec![1, 7, 33, 1000],
        // 1, primes, vector width ± 1, one block's tile ± 1, large.
        Tier::Full => vec![1, 2, 3, 7, 8, 9, 8191, 8192, 8193, 65537, (1 << 20) + 3, 10_000_019],
    }
}

fn check_one(ctx: &CheckCtx, n: usize, dtype: DType) -> Result<Vec<CheckRow>> {
    let case = format!("n={n}");
    let seed = ctx.seed_for(&format!("{case}{dtype}"));
    // Inputs are drawn in the op's dtype, so the reference sees exactly the values the op sees.
    let x_cpu = Tensor::randn(&[n], dtype, Device::Cpu, seed)?;
    let dy_cpu = Tensor::randn(&[n], dtype, Device::Cpu, seed + 1)?;
    let (xr, dyr) = (x_cpu.to_vec_f64()?, dy_cpu.to_vec_f64()?);
    let x = x_cpu.to_device(ctx.device)?;
    let dy = dy_cpu.to_device(ctx.device)?;
    let tol = dtype.tolerance();
    Ok(vec![
        compare("gelu", &case, "y", &forward(&x)?, &reference::forward(&xr), tol)?,
        compare("gelu", &case, "dx", &backward(&x, &dy)?, &reference::backward(&xr, &dyr), tol)?,
    ])
}

impl crate::OpFamily for Family {
    fn name(&self) -> &'static str {
        "gelu"
    }
    fn summary(&self) -> &'static str {
        "exact GELU x·Φ(x) and its derivative, elementwise"
    }

    fn check(&self, ctx: &CheckCtx) -> Result<Vec<CheckRow>> {
        let mut rows = Vec::new();
        for n in sizes(ctx.tier) {
            for dtype in DType::ACTIVATIONS {
                rows.extend(check_one(ctx, n, dtype)?);
            }
        }
        Ok(rows)
    }

    fn bench(&self, ctx: &BenchCtx, progress: &mut dyn FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
        let ns: Vec<usize> = match (ctx.device, ctx.quick) {
            (Device::Cpu, _) => vec![1 << 20],
            (_, true) => vec![1 << 24],
            (_, false) => vec![1 << 24, 1 << 27],
        };
        let mut rows = Vec::new();
        for n in ns {
            for dtype in [DType::BF16, DType::F32] {
                let es = dtype.size() as f64;
                let sets = ctx.rotation(2.0 * es * n as f64);
                let xs: Vec<Tensor> = (0..sets).map(|i| Tensor::rand(&[n], -3.0, 3.0, dtype, ctx.device, 100 + i as u64)).collect::<Result<_>>()?;
                let dys: Vec<Tensor> = (0..sets).map(|i| Tensor::rand(&[n], -1.0, 1.0, dtype, ctx.device, 200 + i as u64)).collect::<Result<_>>()?;
                let p = params(&[("n", json!(n))]);
                let ms = ctx.time(300.0, |i| forward(&xs[i % sets]).map(drop))?;
                let row = ctx.row("gelu", "fwd", dtype, p.clone(), ms, 2.0 * es * n as f64, 0.0);
                progress(&row);
                rows.push(row);
                let ms = ctx.time(300.0, |i| {
                    let x = &xs[i % sets];
                    let _y = forward(x)?;
                    backward(x, &dys[i % sets]).map(drop)
                })?;
                let row = ctx.row("gelu", "fwd+bwd", dtype, p, ms, 5.0 * es * n as f64, 0.0);
                progress(&row);
                rows.push(row);
            }
        }
        Ok(rows)
    }

    fn kernels(&self) -> Vec<KernelBuild> {
        vec![KernelBuild { source: cuda::SOURCE, options: vec![] }]
    }
}
