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

/// GPU time of one call of `f` without host pacing: after `warmup` plain calls, one call is
/// captured into a CUDA graph, and the graph is replayed `reps` times back to back between two
/// events; returns the milliseconds per replay. `f` must enqueue only stream-ordered work on the
/// device's stream (kernels, stream-ordered allocations and frees, each allocation freed within the
/// call) and must not allocate anything it keeps (a buffer first allocated during the capture
/// would belong to the graph).
pub fn time_graph(dev: &CudaDevice, warmup: usize, reps: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let reps = reps.max(1);
    for i in 0..warmup {
        f(i)?;
    }
    dev.synchronize()?;
    let stream = dev.stream();
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).map_err(|e| Error::cuda("cuStreamBeginCapture", e))?;
    let captured = f(warmup);
    // End the capture whatever the call returned, so the stream leaves capture mode.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(|e| Error::cuda("cuStreamEndCapture", e));
    captured?;
    let graph = graph?.ok_or_else(|| Error::cuda("cuStreamEndCapture", "empty graph"))?;
    graph.upload().map_err(|e| Error::cuda("cuGraphUpload", e))?;
    graph.launch().map_err(|e| Error::cuda("cuGraphLaunch", e))?;
    dev.synchronize()?;
    let ctx = dev.context();
    let ev = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| Error::cuda("cuEventCreate", e));
    let (start, end) = (ev()?, ev()?);
    start.record(stream).map_err(|e| Error::cuda("cuEventRecord", e))?;
    for _ in 0..reps {
        graph.launch().map_err(|e| Error::cuda("cuGraphLaunch", e))?;
    }
    end.record(stream).map_err(|e| Error::cuda("cuEventRecord", e))?;
    dev.synchronize()?;
    let ms = start.elapsed_ms(&end).map_err(|e| Error::cuda("cuEventElapsedTime", e))? as f64;
    Ok(ms / reps as f64)
}
