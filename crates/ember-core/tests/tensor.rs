use ember_core::{DType, Device, DeviceRequest, Error, Tensor};

#[test]
fn npy_roundtrip_every_dtype() {
    let dir = std::env::temp_dir().join(format!("ember-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        let t = Tensor::rand(&[3, 5, 2], -2.0, 2.0, dtype, Device::Cpu, 7).unwrap();
        let p = dir.join(format!("t_{dtype}.npy"));
        t.write_npy(&p).unwrap();
        let back = Tensor::read_npy(&p).unwrap();
        assert_eq!(back.shape(), &[3, 5, 2]);
        assert_eq!(back.to_vec_f64().unwrap(), t.to_vec_f64().unwrap(), "{dtype}");
        let expected = if dtype == DType::BF16 { DType::F32 } else { dtype };
        assert_eq!(back.dtype(), expected);
    }
    let scalar = Tensor::from_vec(vec![1.5f32], &[]).unwrap();
    scalar.write_npy(dir.join("s.npy")).unwrap();
    assert_eq!(Tensor::read_npy(dir.join("s.npy")).unwrap().to_vec_f64().unwrap(), vec![1.5]);
    std::fs::write(dir.join("bad.npy"), b"not numpy").unwrap();
    assert!(matches!(Tensor::read_npy(dir.join("bad.npy")), Err(Error::Npy { .. })));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rand_is_seeded_and_in_range() {
    let a = Tensor::rand(&[1000], -1.0, 1.0, DType::F32, Device::Cpu, 42).unwrap().to_vec_f64().unwrap();
    let b = Tensor::rand(&[1000], -1.0, 1.0, DType::F32, Device::Cpu, 42).unwrap().to_vec_f64().unwrap();
    let c = Tensor::rand(&[1000], -1.0, 1.0, DType::F32, Device::Cpu, 43).unwrap().to_vec_f64().unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.iter().all(|&v| (-1.0..1.0).contains(&v)));
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    assert!(mean.abs() < 0.1, "mean {mean}");
    let n = Tensor::randn(&[20000], DType::F64, Device::Cpu, 1).unwrap().to_vec_f64().unwrap();
    let m = n.iter().sum::<f64>() / n.len() as f64;
    let var = n.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n.len() as f64;
    assert!(m.abs() < 0.05 && (var - 1.0).abs() < 0.05, "mean {m} var {var}");
}

#[test]
fn dtype_conversion_rounds_to_nearest() {
    let t = Tensor::from_vec(vec![1.0f32, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, 65504.0, 1e-3], &[5]).unwrap();
    let b = t.to_dtype(DType::BF16).unwrap().to_vec_f64().unwrap();
    // bf16 has 8 significant bits: 1 + 1/256 is a tie and rounds to even (1.0); 1 + 3/256 rounds up.
    assert_eq!(b[0], 1.0);
    assert_eq!(b[1], 1.0);
    assert_eq!(b[2], 1.0 + 4.0 / 256.0);
    let h = t.to_dtype(DType::F16).unwrap().to_vec_f64().unwrap();
    assert_eq!(h[3], 65504.0);
    assert!((h[4] - 1e-3).abs() < 1e-6);
}

#[test]
fn shapes_that_overflow_are_errors() {
    let e = Tensor::zeros(&[usize::MAX, 2], DType::F32, Device::Cpu).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    let e = Tensor::zeros(&[1 << 62, 4], DType::F32, Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
    let e = Tensor::from_vec(vec![1.0f32; 5], &[2, 3]).unwrap_err();
    assert!(e.to_string().contains("needs 6 elements, got 5"), "{e}");
    let empty = Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap();
    assert_eq!(empty.numel(), 0);
}

#[test]
fn device_requests_parse_and_resolve() {
    assert_eq!("auto".parse::<DeviceRequest>().unwrap(), DeviceRequest::Auto);
    assert_eq!("cuda:3".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cuda(3));
    assert_eq!("CPU".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cpu);
    assert!("tpu".parse::<DeviceRequest>().unwrap_err().to_string().contains("expected auto, cpu, cuda or cuda:N"));
    // Auto always resolves (to the CPU when CUDA is unusable, with the reason in the note).
    let r = DeviceRequest::Auto.resolve().unwrap();
    if r.device == Device::Cpu {
        assert!(r.note.starts_with("cpu (auto: "), "{}", r.note);
        // An explicit CUDA request on such a machine is a clear error, not a panic.
        let e = DeviceRequest::Cuda(0).resolve().unwrap_err();
        assert!(matches!(e, Error::CudaUnavailable(_)), "{e}");
        let e = Tensor::zeros(&[4], DType::F32, Device::Cuda(0)).unwrap_err();
        assert!(matches!(e, Error::CudaUnavailable(_)), "{e}");
    }
}

#[test]
fn typed_access_checks_dtype_and_device() {
    let t = Tensor::zeros(&[4], DType::F16, Device::Cpu).unwrap();
    assert!(t.as_slice::<ember_core::f16>().is_ok());
    let e = t.as_slice::<f32>().unwrap_err();
    assert!(e.to_string().contains("expected dtype f32, got f16"), "{e}");
    assert!(t.cuda_ptr().is_err());
}
