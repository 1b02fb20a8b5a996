//! Storage layouts of kernel arguments, shared by the CUDA printer and the CPU evaluator.
//!
//! Elementwise kernels run over a batch of `B × N` elements (`b` in `0..B`,
//! channel `n` in `0..N`); one thread (or CPU lane) handles one `(b, n)`.
//! A group of `M` scalars is stored in one of these layouts.

use std::fmt;
use std::str::FromStr;

use crate::error::{GaError, Result};

/// Layout of an input group of `M` scalars.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// One value per element: `(j, b, n)` at `j*B*N + b*N + n` (`M × B × N`).
    PerElement,
    /// One vector per channel: `(n, j)` at `n*M + j` (`N × M`, e.g. weights `w[n, p]`).
    PerChannel,
    /// One vector shared by all elements: `j` (`M`).
    Uniform,
}

/// Layout of an output group of `M` scalars.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum OutLayout {
    /// One value per element, written: `(j, b, n)` at `j*B*N + b*N + n`.
    PerElement,
    /// Summed over `b` and added into `(n, j)` at `n*M + j` (gradients of per-channel
    /// inputs). The destination must be initialized (usually zeroed) by the caller.
    PerChannelSum,
    /// Summed over all elements and added into `j`. The destination must be initialized.
    UniformSum,
}

impl Layout {
    /// Number of stored scalars for `m` values per element.
    pub fn len(self, m: usize, b: usize, n: usize) -> Option<usize> {
        match self {
            Layout::PerElement => m.checked_mul(b)?.checked_mul(n),
            Layout::PerChannel => m.checked_mul(n),
            Layout::Uniform => Some(m),
        }
    }
}

impl OutLayout {
    /// Number of stored scalars for `m` values per element.
    pub fn len(self, m: usize, b: usize, n: usize) -> Option<usize> {
        match self {
            OutLayout::PerElement => m.checked_mul(b)?.checked_mul(n),
            OutLayout::PerChannelSum => m.checked_mul(n),
            OutLayout::UniformSum => Some(m),
        }
    }
}

/// Storage type of a kernel argument. Arithmetic is always `f32`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `float`
    F32,
    /// IEEE half, stored as `unsigned short`.
    F16,
    /// bfloat16, stored as `unsigned short`.
    BF16,
}

impl DType {
    /// All storage types.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = GaError;
    fn from_str(s: &str) -> Result<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" => Ok(DType::F32),
            "f16" | "half" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            _ => Err(GaError::unknown("dtype", s, &["f32", "f16", "bf16"])),
        }
    }
}
