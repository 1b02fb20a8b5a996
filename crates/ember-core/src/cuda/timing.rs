//! GPU timing with CUDA events: warm up, then time each repetition between two events and report the
//! median. The closure gets the repetition index so callers can rotate among input sets that
//! together exceed the L2 cache.

use super::CudaDevice;
use crate::{Error, Result};
use cudarc::driver::sys::CUevent_flags;

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
}

/// Time `f` `reps` times after `warmup` untimed calls.
pub fn time_events(dev: &CudaDevice, warmup: usize, reps: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<Timing> {
    let reps = reps.max(1);
    for i in 0..warmup {
        f(i)?;
    }
    let ctx = dev.context();
    let ev = |_| ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| Error::cuda("cuEventCreate", e));
    let starts: Vec<_> = (0..reps).map(ev).collect::<Result<_>>()?;
    let ends: Vec<_> = (0..reps).map(ev).collect::<Result<_>>()?;
    for i in 0..reps {
        starts[i].record(dev.stream()).map_err(|e| Error::cuda("cuEventRecord", e))?;
        f(warmup + i)?;
        ends[i].record(dev.stream()).map_err(|e| Error::cuda("cuEventRecord", e))?;
    }
    dev.synchronize()?;
    let mut ms: Vec<f64> = (0..reps)
        .map(|i| starts[i].elapsed_ms(&ends[i]).map(|v| v as f64).map_err(|e| Error::cuda("cuEventElapsedTime", e)))
        .collect::<Result<_>>()?;
    ms.sort_by(|a, b| a.total_cmp(b));
    Ok(Timing { median_ms: ms[ms.len() / 2], min_ms: ms[0], max_ms: ms[ms.len() - 1], reps })
}

/// Time `f` with a repetition count chosen so that the timed part lasts about `budget_ms`
/// (at least 5 and at most 2000 repetitions).
pub fn time_adaptive(dev: &CudaDevice, budget_ms: f64, mut f: impl FnMut(usize) -> Result<()>) -> Result<Timing> {
    let probe = time_events(dev, 2, 3, &mut f)?;
    let per = probe.median_ms.max(1e-3);
    let reps = ((budget_ms / per) as usize).clamp(5, 2000);
    time_events(dev, 3, reps, &mut f)
}
