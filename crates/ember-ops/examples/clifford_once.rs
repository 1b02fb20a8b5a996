//! One Clifford layer call on `cuda:0` after a warm-up, for a profiler (`ncu`, `nsys`) to catch the
//! kernels of exactly that call: `clifford_once fused|fusedbwd|fc|fcbwd|linear|linearbwd [bf16|f32] [B]
//! [N]` (Cl(3,0), with the norm; the `…bwd` kinds are the forward then its backward; defaults: f32
//! fused and linear, bf16 fc, B = 4096, N = 512).

use ember_core::{DType, DeviceRequest, Tensor};
use ember_ops::clifford::{fc, fused, linear, Layer};

fn main() -> ember_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layer_kind = args.first().map_or("fused", String::as_str);
    let dtype = match args.get(1).map(String::as_str) {
        Some("bf16") => DType::BF16,
        Some("f32") => DType::F32,
        _ if layer_kind.starts_with("fc") => DType::BF16,
        _ => DType::F32,
    };
    let nb: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(512);
    let device = DeviceRequest::Cuda(0).resolve()?.device;
    let layer = Layer::new("3,0")?;
    let m = layer.blades();
    let x = Tensor::rand(&[m, nb, n], -2.0, 2.0, dtype, device, 1)?;
    let y = Tensor::rand(&[m, nb, n], -2.0, 2.0, dtype, device, 2)?;
    let run = || -> ember_core::Result<()> {
        match layer_kind {
            "fc" => {
                let w = Tensor::rand(&[layer.paths(), n, n], -0.05, 0.05, DType::F32, device, 3)?;
                fc::forward(&layer, &x, &y, &w, true)?.out.to_vec_f64().map(drop)
            }
            "linear" | "linearbwd" => {
                let w = Tensor::rand(&[layer.grades(), n, n], -0.05, 0.05, DType::F32, device, 3)?;
                let bias = Tensor::rand(&[n], -1.0, 1.0, DType::F32, device, 5)?;
                let out = linear::forward(&layer, &x, &w, Some(&bias))?;
                if layer_kind == "linear" {
                    return out.to_vec_f64().map(drop);
                }
                let d_out = Tensor::rand(&[m, nb, n], -1.0, 1.0, dtype, device, 4)?;
                linear::backward(&layer, &x, &w, &d_out)?.d_w.to_vec_f64().map(drop)
            }
            "fcbwd" => {
                let w = Tensor::rand(&[layer.paths(), n, n], -0.05, 0.05, DType::F32, device, 3)?;
                let fwd = fc::forward(&layer, &x, &y, &w, true)?;
                let d_out = Tensor::rand(&[m, nb, n], -1.0, 1.0, dtype, device, 4)?;
                fc::backward(&layer, &x, &y, &w, &fwd, &d_out)?.d_w.to_vec_f64().map(drop)
            }
            "fusedbwd" => {
                let w = Tensor::rand(&[n, layer.paths()], -0.5, 0.5, DType::F32, device, 3)?;
                let fwd = fused::forward(&layer, &x, &y, &w, true)?;
                let d_out = Tensor::rand(&[m, nb, n], -1.0, 1.0, dtype, device, 4)?;
                fused::backward(&layer, &x, &y, &w, &fwd, &d_out)?.d_w.to_vec_f64().map(drop)
            }
            _ => {
                let w = Tensor::rand(&[n, layer.paths()], -0.5, 0.5, DType::F32, device, 3)?;
                fused::forward(&layer, &x, &y, &w, true)?.out.to_vec_f64().map(drop)
            }
        }
    };
    run()?;
    run()?;
    eprintln!("clifford_once: {layer_kind} {} B = {nb} N = {n}: two calls done (profile the second)", dtype.name());
    Ok(())
}
