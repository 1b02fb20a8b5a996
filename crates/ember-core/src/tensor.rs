//! A contiguous, row-major tensor on the CPU or a CUDA device.
//!
//! ember is not an autograd framework: a tensor is a shape, a dtype and storage. Ops take tensors,
//! validate them, and dispatch on the device; each op exposes explicit `forward` and `backward`.

use crate::cuda::{self, CudaDevice};
use crate::{rng, DType, Device, Element, Error, Result};
use half::{bf16, f16};
use rayon::prelude::*;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Host storage, one variant per dtype.
#[derive(Clone, Debug)]
pub enum CpuStorage {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// Device storage: raw bytes plus the device they live on. The buffer may be larger than the
/// tensor (its allocation's size class); on drop it goes back to the device's cache when it came
/// from there (`cached`), else it is freed.
pub struct CudaStorage {
    buf: ManuallyDrop<cudarc::driver::CudaSlice<u8>>,
    ptr: u64,
    dev: Arc<CudaDevice>,
    cached: bool,
}

impl CudaStorage {
    fn new(dev: &Arc<CudaDevice>, (buf, cached): (cudarc::driver::CudaSlice<u8>, bool)) -> CudaStorage {
        let ptr = raw_ptr(&buf, dev);
        CudaStorage { buf: ManuallyDrop::new(buf), ptr, dev: dev.clone(), cached }
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        // SAFETY: `buf` is taken once, here, and not used after.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        if self.cached {
            self.dev.recycle(buf);
        }
    }
}

pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

pub struct Tensor {
    shape: Vec<usize>,
    dtype: DType,
    storage: Storage,
}

static POISON_OUTPUTS: AtomicBool = AtomicBool::new(false);

/// When on, every op output is filled with NaN before the op writes it, so an element the op fails
/// to write shows up as NaN in tests. Also switched on by `EMBER_POISON=1`.
pub fn set_poison_outputs(on: bool) {
    POISON_OUTPUTS.store(on, Ordering::Relaxed);
}
pub fn poison_outputs() -> bool {
    POISON_OUTPUTS.load(Ordering::Relaxed) || crate::knob("EMBER_POISON") == Some("1")
}

/// Number of elements of `shape`, or an error naming `arg` if the count or its byte size overflows.
pub fn checked_numel(arg: &str, shape: &[usize], dtype: DType) -> Result<usize> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let n = n.ok_or_else(|| Error::TooLarge { arg: arg.into(), what: format!("shape {shape:?} has more elements than fit in usize") })?;
    match n.checked_mul(dtype.size()) {
        Some(b) if b <= isize::MAX as usize => Ok(n),
        _ => Err(Error::TooLarge { arg: arg.into(), what: format!("shape {shape:?} of {dtype} needs more bytes than can be addressed") }),
    }
}

macro_rules! cpu_dispatch {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            CpuStorage::F64($v) => $e,
            CpuStorage::F32($v) => $e,
            CpuStorage::F16($v) => $e,
            CpuStorage::BF16($v) => $e,
        }
    };
}

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
        }
    }
    fn len(&self) -> usize {
        cpu_dispatch!(self, v => v.len())
    }
    fn bytes(&self) -> &[u8] {
        cpu_dispatch!(self, v => bytemuck::cast_slice(v.as_slice()))
    }
    /// Build storage of `dtype` from f64 values (rounding to nearest).
    pub fn from_f64(values: &[f64], dtype: DType) -> CpuStorage {
        fn conv<T: Element>(v: &[f64]) -> Vec<T> {
            v.par_iter().with_min_len(4096).map(|&x| T::from_f64(x)).collect()
        }
        match dtype {
            DType::F64 => CpuStorage::F64(values.to_vec()),
            DType::F32 => CpuStorage::F32(conv(values)),
            DType::F16 => CpuStorage::F16(conv(values)),
            DType::BF16 => CpuStorage::BF16(conv(values)),
        }
    }
    /// Build storage of `dtype` from f32 values (rounding to nearest for half types).
    pub fn from_f32(values: &[f32], dtype: DType) -> CpuStorage {
        fn conv<T: Element>(v: &[f32]) -> Vec<T> {
            v.par_iter().with_min_len(4096).map(|&x| T::from_f32(x)).collect()
        }
        match dtype {
            DType::F64 => CpuStorage::F64(conv(values)),
            DType::F32 => CpuStorage::F32(values.to_vec()),
            DType::F16 => CpuStorage::F16(conv(values)),
            DType::BF16 => CpuStorage::BF16(conv(values)),
        }
    }
    fn to_f64_vec(&self) -> Vec<f64> {
        cpu_dispatch!(self, v => v.par_iter().with_min_len(4096).map(|x| x.to_f64()).collect())
    }
    fn zeros(n: usize, dtype: DType) -> CpuStorage {
        match dtype {
            DType::F64 => CpuStorage::F64(vec![0.0; n]),
            DType::F32 => CpuStorage::F32(vec![0.0; n]),
            DType::F16 => CpuStorage::F16(vec![f16::ZERO; n]),
            DType::BF16 => CpuStorage::BF16(vec![bf16::ZERO; n]),
        }
    }
    fn from_bytes(bytes: &[u8], dtype: DType) -> CpuStorage {
        fn cast<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
            bytemuck::pod_collect_to_vec(b)
        }
        match dtype {
            DType::F64 => CpuStorage::F64(cast(bytes)),
            DType::F32 => CpuStorage::F32(cast(bytes)),
            DType::F16 => CpuStorage::F16(cast(bytes)),
            DType::BF16 => CpuStorage::BF16(cast(bytes)),
        }
    }
}

impl Tensor {
    // ---- construction -------------------------------------------------------------------------

    /// A CPU tensor owning `data`.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let n = checked_numel("shape", shape, T::DTYPE)?;
        if n != data.len() {
            return Err(Error::invalid("data", format!("shape {shape:?} needs {n} elements, got {}", data.len())));
        }
        let any: Box<dyn std::any::Any> = Box::new(data);
        let storage = match T::DTYPE {
            DType::F64 => CpuStorage::F64(*any.downcast::<Vec<f64>>().unwrap()),
            DType::F32 => CpuStorage::F32(*any.downcast::<Vec<f32>>().unwrap()),
            DType::F16 => CpuStorage::F16(*any.downcast::<Vec<f16>>().unwrap()),
            DType::BF16 => CpuStorage::BF16(*any.downcast::<Vec<bf16>>().unwrap()),
        };
        Ok(Tensor { shape: shape.to_vec(), dtype: T::DTYPE, storage: Storage::Cpu(storage) })
    }

    /// A tensor of `dtype` on `device` holding `values` (rounded to the dtype).
    pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let n = checked_numel("shape", shape, dtype)?;
        if n != values.len() {
            return Err(Error::invalid("values", format!("shape {shape:?} needs {n} elements, got {}", values.len())));
        }
        Tensor::from_cpu_storage(CpuStorage::from_f64(values, dtype), shape)?.to_device(device)
    }

    /// Wrap host storage. The storage's length must match the shape.
    pub fn from_cpu_storage(storage: CpuStorage, shape: &[usize]) -> Result<Tensor> {
        let dtype = storage.dtype();
        let n = checked_numel("shape", shape, dtype)?;
        if n != storage.len() {
            return Err(Error::invalid("storage", format!("shape {shape:?} needs {n} elements, got {}", storage.len())));
        }
        Ok(Tensor { shape: shape.to_vec(), dtype, storage: Storage::Cpu(storage) })
    }

    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype, device)
    }

    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let n = checked_numel("shape", shape, dtype)?;
        match device {
            Device::Cpu => {
                let s = if value == 0.0 { CpuStorage::zeros(n, dtype) } else { CpuStorage::from_f64(&vec![value; n], dtype) };
                Ok(Tensor { shape: shape.to_vec(), dtype, storage: Storage::Cpu(s) })
            }
            Device::Cuda(_) => {
                let mut t = Tensor::uninit(shape, dtype, device)?;
                t.fill(value)?;
                Ok(t)
            }
        }
    }

    /// Uniform values in [lo, hi) from a counter-based generator: the same seed gives the same
    /// values on every device.
    pub fn rand(shape: &[usize], lo: f32, hi: f32, dtype: DType, device: Device, seed: u64) -> Result<Tensor> {
        let n = checked_numel("shape", shape, dtype)?;
        match device {
            Device::Cpu => {
                let v: Vec<f32> = (0..n).into_par_iter().with_min_len(4096).map(|i| rng::uniform(seed, i as u64, lo, hi)).collect();
                Tensor::from_cpu_storage(CpuStorage::from_f32(&v, dtype), shape)
            }
            Device::Cuda(_) => {
                if dtype == DType::F64 {
                    return Err(f64_on_cuda());
                }
                let t = Tensor::uninit(shape, dtype, device)?;
                let dev = t.cuda_device()?.clone();
                let f = dev.function(&cuda::TENSOR_SOURCE, &[], &format!("uniform_{}", dtype.name()))?;
                let (ptr, n64) = (t.cuda_ptr()?, n as i64);
                dev.launch(&f, cuda::cfg_1d(dev.grid_for(n, 256), 256, 0)).arg(&ptr).arg(&n64).arg(&seed).arg(&lo).arg(&hi).named("uniform").run()?;
                Ok(t)
            }
        }
    }

    /// Standard-normal values (generated on the CPU, then moved to `device`).
    pub fn randn(shape: &[usize], dtype: DType, device: Device, seed: u64) -> Result<Tensor> {
        let n = checked_numel("shape", shape, dtype)?;
        let v: Vec<f64> = (0..n).into_par_iter().with_min_len(4096).map(|i| rng::normal(seed, i as u64)).collect();
        Tensor::from_f64(&v, shape, dtype, device)
    }

    /// Memory for an op's output. Its contents are unspecified, or NaN when output poisoning is on.
    pub fn output(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let mut t = Tensor::uninit(shape, dtype, device)?;
        if poison_outputs() {
            t.poison()?;
        }
        Ok(t)
    }

    fn uninit(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let n = checked_numel("shape", shape, dtype)?;
        let storage = match device {
            Device::Cpu => Storage::Cpu(CpuStorage::zeros(n, dtype)),
            Device::Cuda(i) => {
                if dtype == DType::F64 {
                    return Err(f64_on_cuda());
                }
                let dev = CudaDevice::get(i)?;
                Storage::Cuda(CudaStorage::new(&dev, dev.alloc_bytes(n * dtype.size())?))
            }
        };
        Ok(Tensor { shape: shape.to_vec(), dtype, storage })
    }

    // ---- inspection ---------------------------------------------------------------------------

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dims(&self) -> usize {
        self.shape.len()
    }
    pub fn dim(&self, i: usize) -> usize {
        self.shape[i]
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
    pub fn device(&self) -> Device {
        match &self.storage {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Cuda(c) => Device::Cuda(c.dev.info().ordinal),
        }
    }
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The same data under another shape with the same element count.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Tensor> {
        let n = checked_numel("shape", shape, self.dtype)?;
        if n != self.numel() {
            return Err(Error::shape("shape", format!("a shape with {} elements", self.numel()), shape));
        }
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Host slice of a CPU tensor of dtype `T`.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        let Storage::Cpu(s) = &self.storage else {
            return Err(Error::Device { arg: "tensor".into(), expected: Device::Cpu, got: self.device() });
        };
        if T::DTYPE != self.dtype {
            return Err(Error::dtype("tensor", T::DTYPE.name(), self.dtype));
        }
        Ok(cpu_dispatch!(s, v => {
            let any: &dyn std::any::Any = v;
            any.downcast_ref::<Vec<T>>().expect("dtype matched").as_slice()
        }))
    }

    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        let device = self.device();
        let dtype = self.dtype;
        let Storage::Cpu(s) = &mut self.storage else {
            return Err(Error::Device { arg: "tensor".into(), expected: Device::Cpu, got: device });
        };
        if T::DTYPE != dtype {
            return Err(Error::dtype("tensor", T::DTYPE.name(), dtype));
        }
        Ok(cpu_dispatch!(s, v => {
            let any: &mut dyn std::any::Any = v;
            any.downcast_mut::<Vec<T>>().expect("dtype matched").as_mut_slice()
        }))
    }

    pub fn cpu_storage(&self) -> Result<&CpuStorage> {
        match &self.storage {
            Storage::Cpu(s) => Ok(s),
            Storage::Cuda(_) => Err(Error::Device { arg: "tensor".into(), expected: Device::Cpu, got: self.device() }),
        }
    }

    /// Raw device address of a CUDA tensor, for kernel arguments.
    pub fn cuda_ptr(&self) -> Result<u64> {
        match &self.storage {
            Storage::Cuda(c) => Ok(c.ptr),
            Storage::Cpu(_) => Err(Error::Device { arg: "tensor".into(), expected: Device::Cuda(0), got: Device::Cpu }),
        }
    }

    pub fn cuda_device(&self) -> Result<&Arc<CudaDevice>> {
        match &self.storage {
            Storage::Cuda(c) => Ok(&c.dev),
            Storage::Cpu(_) => Err(Error::Device { arg: "tensor".into(), expected: Device::Cuda(0), got: Device::Cpu }),
        }
    }

    // ---- movement and conversion --------------------------------------------------------------

    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        match (&self.storage, device) {
            (Storage::Cpu(s), Device::Cpu) => Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Cpu(s.clone()) }),
            (Storage::Cpu(s), Device::Cuda(i)) => {
                if self.dtype == DType::F64 {
                    return Err(f64_on_cuda());
                }
                let dev = CudaDevice::get(i)?;
                let mut c = CudaStorage::new(&dev, dev.alloc_bytes(self.size_bytes())?);
                if self.numel() > 0 {
                    let mut dst = c.buf.slice_mut(0..self.size_bytes());
                    dev.stream().memcpy_htod(s.bytes(), &mut dst).map_err(|e| Error::cuda("host-to-device copy", e))?;
                }
                Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Cuda(c) })
            }
            (Storage::Cuda(c), Device::Cpu) => {
                let mut bytes = vec![0u8; self.size_bytes()];
                if !bytes.is_empty() {
                    let view = c.buf.slice(0..bytes.len());
                    c.dev.stream().memcpy_dtoh(&view, &mut bytes).map_err(|e| Error::cuda("device-to-host copy", e))?;
                    c.dev.synchronize()?;
                }
                Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Cpu(CpuStorage::from_bytes(&bytes, self.dtype)) })
            }
            (Storage::Cuda(c), Device::Cuda(i)) if c.dev.info().ordinal == i => self.try_clone(),
            (Storage::Cuda(_), Device::Cuda(_)) => self.to_device(Device::Cpu)?.to_device(device),
        }
    }

    pub fn to_cpu(&self) -> Result<Tensor> {
        self.to_device(Device::Cpu)
    }

    /// A copy in the same place.
    pub fn try_clone(&self) -> Result<Tensor> {
        match &self.storage {
            Storage::Cpu(s) => Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Cpu(s.clone()) }),
            Storage::Cuda(c) => {
                let mut copy = CudaStorage::new(&c.dev, c.dev.alloc_bytes(self.size_bytes())?);
                if self.size_bytes() > 0 {
                    let src = c.buf.slice(0..self.size_bytes());
                    let mut dst = copy.buf.slice_mut(0..self.size_bytes());
                    c.dev.stream().memcpy_dtod(&src, &mut dst).map_err(|e| Error::cuda("device-to-device copy", e))?;
                }
                Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Cuda(copy) })
            }
        }
    }

    /// Convert to another dtype, on the same device (rounding to nearest even).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return self.try_clone();
        }
        match &self.storage {
            Storage::Cpu(s) => {
                let storage = match s {
                    CpuStorage::F64(v) => CpuStorage::from_f64(v, dtype),
                    other => CpuStorage::from_f32(&cpu_dispatch!(other, v => v.par_iter().with_min_len(4096).map(|x| x.to_f32()).collect::<Vec<f32>>()), dtype),
                };
                Ok(Tensor { shape: self.shape.clone(), dtype, storage: Storage::Cpu(storage) })
            }
            Storage::Cuda(c) => {
                if dtype == DType::F64 {
                    return Err(f64_on_cuda());
                }
                let out = Tensor::uninit(&self.shape, dtype, self.device())?;
                let n = self.numel();
                let f = c.dev.function(&cuda::TENSOR_SOURCE, &[], &format!("cast_{}_{}", self.dtype.name(), dtype.name()))?;
                let (src, dst, n64) = (c.ptr, out.cuda_ptr()?, n as i64);
                c.dev.launch(&f, cuda::cfg_1d(c.dev.grid_for(n, 256), 256, 0)).arg(&src).arg(&dst).arg(&n64).named("cast").run()?;
                Ok(out)
            }
        }
    }

    /// All values as f64, wherever the tensor lives.
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        match &self.storage {
            Storage::Cpu(s) => Ok(s.to_f64_vec()),
            Storage::Cuda(_) => self.to_cpu()?.to_vec_f64(),
        }
    }

    /// Fill with one value.
    pub fn fill(&mut self, value: f64) -> Result<()> {
        let dtype = self.dtype;
        match &mut self.storage {
            Storage::Cpu(s) => {
                *s = CpuStorage::from_f64(&vec![value; s.len()], dtype);
                Ok(())
            }
            Storage::Cuda(c) => {
                let n = self.shape.iter().product::<usize>();
                let f = c.dev.function(&cuda::TENSOR_SOURCE, &[], &format!("fill_{}", dtype.name()))?;
                let (ptr, n64, v) = (c.ptr, n as i64, value as f32);
                c.dev.launch(&f, cuda::cfg_1d(c.dev.grid_for(n, 256), 256, 0)).arg(&ptr).arg(&n64).arg(&v).named("fill").run()
            }
        }
    }

    /// Fill with NaN, so that elements an op fails to write are caught by comparisons.
    pub fn poison(&mut self) -> Result<()> {
        self.fill(f64::NAN)
    }
}

fn f64_on_cuda() -> Error {
    Error::Unsupported("f64 tensors on CUDA (f64 is the CPU reference dtype; use f32, f16 or bf16)".into())
}

fn raw_ptr(buf: &cudarc::driver::CudaSlice<u8>, dev: &CudaDevice) -> u64 {
    use cudarc::driver::DevicePtr;
    let (p, _sync) = buf.device_ptr(dev.stream());
    p
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {}, {})", self.shape, self.dtype, self.device())
    }
}
