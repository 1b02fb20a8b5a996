//! cuBLAS, for baselines and the GEMM ceiling that `ember bench` measures in the same run.

use super::CudaDevice;
use crate::{DType, Error, Result};
use cudarc::cublas::{result, sys};
use std::ffi::c_void;

/// A cuBLAS handle bound to a device's stream.
pub struct Blas {
    handle: sys::cublasHandle_t,
}

impl Blas {
    pub fn new(dev: &CudaDevice) -> Result<Self> {
        super::libs::ensure_cublas().map_err(|e| Error::Unsupported(format!("cuBLAS ({e})")))?;
        dev.context().bind_to_thread().map_err(|e| Error::cuda("binding context", e))?;
        let handle = result::create_handle().map_err(|e| Error::cuda("cublasCreate", e))?;
        unsafe { result::set_stream(handle, dev.stream().cu_stream() as sys::cudaStream_t) }
            .map_err(|e| Error::cuda("cublasSetStream", e))?;
        Ok(Blas { handle })
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
