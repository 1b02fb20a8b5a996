//! Element types. Activations are f32, f16 or bf16 on every backend; f64 exists on the CPU only, for
//! the reference implementations that serve as test oracles.

use half::{bf16, f16};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
}

impl DType {
    /// The activation dtypes every backend supports (f64 is CPU-only, for references).
    pub const ACTIVATIONS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn size(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The storage type name used in ember's CUDA sources (see `cuda/common.cuh`).
    pub fn cuda_type(self) -> &'static str {
        match self {
            DType::F64 => "double",
            DType::F32 => "float",
            DType::F16 => "ember_f16",
            DType::BF16 => "ember_bf16",
        }
    }

    /// Relative-error tolerance of a result computed from inputs of this dtype against the f64
    /// reference, with f32 accumulation (the project's standard).
    pub fn tolerance(self) -> f64 {
        match self {
            DType::F64 => 1e-12,
            DType::F32 => 1e-5,
            DType::F16 => 2e-3,
            DType::BF16 => 1e-2,
        }
    }

    /// Machine epsilon of the dtype, for error models.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F64 => f64::EPSILON,
            DType::F32 => f32::EPSILON as f64,
            DType::F16 => 9.765625e-4,
            DType::BF16 => 7.8125e-3,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f64" | "float64" | "double" => Ok(DType::F64),
            "f32" | "float32" | "float" => Ok(DType::F32),
            "f16" | "float16" | "half" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            _ => Err(crate::Error::invalid("dtype", format!("expected one of f64, f32, f16, bf16, got `{s}`"))),
        }
    }
}

/// A Rust scalar type that can live in a tensor.
pub trait Element: Copy + Send + Sync + Default + PartialEq + fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
