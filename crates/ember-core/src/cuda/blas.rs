//! cuBLAS, for baselines and the GEMM ceiling that `ember bench` measures in the same run.

use super::CudaDevice;
use crate::{DType, Error, Result};
use cudarc::cublas::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// A cuBLAS handle bound to a device's stream.
pub struct Blas {
    handle: sys::cublasHandle_t,
    ctx: Arc<cudarc::driver::CudaContext>,
}

// cuBLAS handles may be used from several host threads; the configuration of a shared handle
// (stream, math mode) is set once at creation and never changed afterwards.
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

/// One row-major GEMM C (m×n) = α·op(A) (m×k) · op(B) (k×n) + β·C through `cublasGemmEx`: A and B
/// of `ab`, C of `c`, f32 accumulation (CUBLAS_COMPUTE_32F: no TF32, f32 inputs keep f32 accuracy).
/// `ta`/`tb`: the operand is stored transposed (A as k×m, B as n×k). Pointers are raw device
/// addresses of contiguous row-major matrices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmDesc {
    pub ab: DType,
    pub c: DType,
    pub ta: bool,
    pub tb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub beta: f32,
}

fn data_type(d: DType) -> Result<sys::cudaDataType> {
    match d {
        DType::BF16 => Ok(sys::cudaDataType::CUDA_R_16BF),
        DType::F16 => Ok(sys::cudaDataType::CUDA_R_16F),
        DType::F32 => Ok(sys::cudaDataType::CUDA_R_32F),
        DType::F64 => Err(Error::Unsupported("f64 cuBLAS GEMM".into())),
    }
}

impl Blas {
    pub fn new(dev: &CudaDevice) -> Result<Self> {
        super::libs::ensure_cublas().map_err(|e| Error::Unsupported(format!("cuBLAS ({e})")))?;
        dev.context().bind_to_thread().map_err(|e| Error::cuda("binding context", e))?;
        let handle = result::create_handle().map_err(|e| Error::cuda("cublasCreate", e))?;
        unsafe { result::set_stream(handle, dev.stream().cu_stream() as sys::cudaStream_t) }
            .map_err(|e| Error::cuda("cublasSetStream", e))?;
        Ok(Blas { handle, ctx: dev.context().clone() })
    }

    /// The handle of `dev`, created on first use and kept for the life of the process (devices
    /// are never dropped either).
    pub fn shared(dev: &CudaDevice) -> Result<Arc<Blas>> {
        static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Blas>>>> = OnceLock::new();
        let key = Arc::as_ptr(dev.context()) as usize;
        let mut map = HANDLES.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap();
        if let Some(b) = map.get(&key) {
            return Ok(b.clone());
        }
        let b = Arc::new(Blas::new(dev)?);
        map.insert(key, b.clone());
        Ok(b)
    }

    /// Run `g` (see [`GemmDesc`]) on the handle's stream.
    pub fn gemm(&self, g: &GemmDesc, a: u64, b: u64, c: u64) -> Result<()> {
        let dim = |v: usize, what: &str| i32::try_from(v).map_err(|_| Error::TooLarge { arg: what.into(), what: format!("GEMM dimension {v} exceeds i32") });
        let (m, n, k) = (dim(g.m, "m")?, dim(g.n, "n")?, dim(g.k, "k")?);
        let (ab, cty) = (data_type(g.ab)?, data_type(g.c)?);
        let op = |t: bool| if t { sys::cublasOperation_t::CUBLAS_OP_T } else { sys::cublasOperation_t::CUBLAS_OP_N };
        // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B goes first. A row-major
        // matrix read column-major is its transpose, so the flags carry over unchanged; leading
        // dimensions are the stored row lengths.
        let lda = if g.ta { m } else { k };
        let ldb = if g.tb { k } else { n };
        self.ctx.bind_to_thread().map_err(|e| Error::cuda("binding context", e))?;
        let alpha = 1.0f32;
        unsafe {
            result::gemm_ex(
                self.handle,
                op(g.tb),
                op(g.ta),
                n,
                m,
                k,
                &alpha as *const f32 as *const c_void,
                b as *const c_void,
                ab,
                ldb.max(1),
                a as *const c_void,
                ab,
                lda.max(1),
                &g.beta as *const f32 as *const c_void,
                c as *mut c_void,
                cty,
                n.max(1),
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::cuda("cublasGemmEx", e))
    }

    /// Row-major C (m×n) = A (m×k) · B (k×n), all of `dtype`, f32 accumulation (TF32 tensor cores
    /// for f32 when `tf32`). Pointers are raw device addresses of contiguous row-major buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_rowmajor(&self, dtype: DType, tf32: bool, m: usize, n: usize, k: usize, a: u64, b: u64, c: u64) -> Result<()> {
        let ty = match dtype {
            DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
            DType::F16 => sys::cudaDataType::CUDA_R_16F,
            DType::F32 => sys::cudaDataType::CUDA_R_32F,
            DType::F64 => return Err(Error::Unsupported("f64 GEMM baseline".into())),
        };
        let compute = if dtype == DType::F32 && tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands.
        let (alpha, beta) = (1.0f32, 0.0f32);
        unsafe {
            result::gemm_ex(
                self.handle,
                sys::cublasOperation_t::CUBLAS_OP_N,
                sys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const c_void,
                b as *const c_void,
                ty,
                n as i32,
                a as *const c_void,
                ty,
                k as i32,
                &beta as *const f32 as *const c_void,
                c as *mut c_void,
                ty,
                n as i32,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::cuda("cublasGemmEx", e))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        unsafe {
            let _ = result::destroy_handle(self.handle);
        }
    }
}
