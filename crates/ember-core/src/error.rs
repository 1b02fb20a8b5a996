//! The one error type of ember.
//!
//! Every op validates its inputs before touching a device, so bad input becomes an `Err` that names
//! the argument, what was expected and what was got — never a panic, undefined behaviour or a sticky
//! CUDA error.

use crate::{DType, Device};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("argument `{arg}`: expected shape {expected}, got {got:?}")]
    Shape { arg: String, expected: String, got: Vec<usize> },

    #[error("argument `{arg}`: expected dtype {expected}, got {got}")]
    DType { arg: String, expected: String, got: DType },

    #[error("argument `{arg}`: expected a tensor on {expected}, got one on {got}")]
    Device { arg: String, expected: Device, got: Device },

    #[error("argument `{arg}`: {msg}")]
    Invalid { arg: String, msg: String },

    #[error("argument `{arg}` is empty ({what}); ember needs at least one element there")]
    Empty { arg: String, what: String },

    #[error("argument `{arg}` is too large: {what}")]
    TooLarge { arg: String, what: String },

    #[error("CUDA is not usable: {0}")]
    CudaUnavailable(String),

    #[error("NVRTC is not usable: {0}")]
    NvrtcUnavailable(String),

    #[error("NVRTC failed to compile kernel `{kernel}` for {arch}:\n{log}")]
    Compile { kernel: String, arch: String, log: String },

    #[error("CUDA error in {context}: {msg}")]
    Cuda { context: String, msg: String },

    #[error("{0} is not supported")]
    Unsupported(String),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("bad .npy file {path}: {msg}")]
    Npy { path: String, msg: String },
}

impl Error {
    pub fn shape(arg: &str, expected: impl Into<String>, got: &[usize]) -> Self {
        Error::Shape { arg: arg.into(), expected: expected.into(), got: got.to_vec() }
    }
    pub fn dtype(arg: &str, expected: impl Into<String>, got: DType) -> Self {
        Error::DType { arg: arg.into(), expected: expected.into(), got }
    }
    pub fn invalid(arg: &str, msg: impl Into<String>) -> Self {
        Error::Invalid { arg: arg.into(), msg: msg.into() }
    }
    pub fn cuda(context: &str, err: impl std::fmt::Display) -> Self {
        Error::Cuda { context: context.into(), msg: err.to_string() }
    }
}
