//! ember-core: the ground every ember op stands on.
//!
//! - [`Tensor`]: shape, dtype ([`DType`]: f32, f16, bf16; f64 on the CPU for references), device
//!   ([`Device`]: `Cpu` or `Cuda(ordinal)`), contiguous storage; host↔device copies, dtype
//!   conversion, seeded random init, `.npy` exchange.
//! - [`cuda`]: the CUDA runtime — dynamic loading of the driver, NVRTC compilation for the device's
//!   exact architecture with memory and disk caches, launches, event timing, cuBLAS baselines.
//! - [`Error`]: the one error type; ops name the argument, the expectation and what they got.

pub mod compare;
pub mod cuda;
pub mod device;
pub mod dtype;
pub mod error;
pub mod knob;
pub mod npy;
pub mod rng;
pub mod tensor;

pub use device::{Device, DeviceRequest, Resolved};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use knob::knob;
pub use half::{bf16, f16};
pub use tensor::{checked_numel, poison_outputs, set_poison_outputs, CpuStorage, Tensor};
