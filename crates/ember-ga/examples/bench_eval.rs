//! Throughput of the CPU evaluator and generation times:
//! `cargo run --release -p ember-ga --example bench_eval`.
use std::time::Instant;

use ember_ga::emit::lower;
use ember_ga::eval::{Compiled, InputArg, OutputArg};
use ember_ga::layout::{Layout, OutLayout};

fn main() {
    for (spec, expr, grad) in [("3,0,0", "wgp", true), ("6,0,0", "gp", true), ("4,1,1", "wgp", true), ("4,1,1", "sandwich", true)] {
        let t = Instant::now();
        let ir = lower(spec, expr, grad).unwrap();
        println!("generate {expr}{} Cl({spec}): {:?}, {} instructions", if grad { "+grad" } else { "" }, t.elapsed(), ir.instrs.len());
    }
    let ir = lower("3,0,0", "wgp", true).unwrap();
    let c = Compiled::new(&ir);
    let (b, n) = (8192usize, 128usize);
    let lens: Vec<usize> = ir.inputs.iter().map(|g| g.len()).collect();
    let layouts: Vec<Layout> = ir.inputs.iter().map(|g| if g.name == "w" { Layout::PerChannel } else { Layout::PerElement }).collect();
    let olayouts: Vec<OutLayout> =
        ir.outputs.iter().map(|g| if g.name == "d_w" { OutLayout::PerChannelSum } else { OutLayout::PerElement }).collect();
    for threads_note in ["f32", "f64"] {
        let t = Instant::now();
        if threads_note == "f32" {
            let data: Vec<Vec<f32>> = lens.iter().zip(&layouts).map(|(&m, l)| vec![0.5f32; l.len(m, b, n).unwrap()]).collect();
            let mut outs: Vec<Vec<f32>> =
                ir.outputs.iter().zip(&olayouts).map(|(g, l)| vec![0f32; l.len(g.len(), b, n).unwrap()]).collect();
            let ins: Vec<InputArg<f32>> = data.iter().zip(&layouts).map(|(d, &l)| InputArg { data: d, layout: l }).collect();
            let mut os: Vec<OutputArg<f32>> = outs.iter_mut().zip(&olayouts).map(|(d, &l)| OutputArg { data: d, layout: l }).collect();
            let t0 = Instant::now();
            c.run(b, n, &ins, &mut os).unwrap();
            let dt = t0.elapsed();
            println!(
                "eval Cl(3,0) wgp+grad f32 over {} elements: {dt:?} ({:.1} M elements/s, {:.2} Gop/s)",
                b * n,
                (b * n) as f64 / dt.as_secs_f64() / 1e6,
                (b * n * ir.instrs.len()) as f64 / dt.as_secs_f64() / 1e9
            );
        } else {
            let data: Vec<Vec<f64>> = lens.iter().zip(&layouts).map(|(&m, l)| vec![0.5f64; l.len(m, b, n).unwrap()]).collect();
            let mut outs: Vec<Vec<f64>> =
                ir.outputs.iter().zip(&olayouts).map(|(g, l)| vec![0f64; l.len(g.len(), b, n).unwrap()]).collect();
            let ins: Vec<InputArg<f64>> = data.iter().zip(&layouts).map(|(d, &l)| InputArg { data: d, layout: l }).collect();
            let mut os: Vec<OutputArg<f64>> = outs.iter_mut().zip(&olayouts).map(|(d, &l)| OutputArg { data: d, layout: l }).collect();
            let t0 = Instant::now();
            c.run(b, n, &ins, &mut os).unwrap();
            let dt = t0.elapsed();
            println!("eval Cl(3,0) wgp+grad f64 over {} elements: {dt:?} ({:.1} M elements/s)", b * n, (b * n) as f64 / dt.as_secs_f64() / 1e6);
        }
        let _ = t;
    }
    println!("registers per lane: {}", c.registers());
}
