//! Where a tensor lives, and how a user asks for a device (`auto | cpu | cuda[:N]`).

use crate::{cuda, Error, Result};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// A device as a user names it. `Auto` picks CUDA device 0 when it is usable, else the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceRequest {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceRequest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(0)),
            _ => {
                if let Some(n) = s.strip_prefix("cuda:") {
                    n.parse::<usize>().map(DeviceRequest::Cuda).map_err(|_| {
                        Error::invalid("device", format!("expected auto, cpu, cuda or cuda:N, got `{s}`"))
                    })
                } else {
                    Err(Error::invalid("device", format!("expected auto, cpu, cuda or cuda:N, got `{s}`")))
                }
            }
        }
    }
}

/// The device a request resolved to, with a human-readable note on how it was chosen.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub device: Device,
    pub note: String,
}

impl DeviceRequest {
    /// Resolve to a concrete device. An explicit `cuda[:N]` that cannot be used is an error; `auto`
    /// falls back to the CPU and says why.
    pub fn resolve(self) -> Result<Resolved> {
        match self {
            DeviceRequest::Cpu => Ok(Resolved { device: Device::Cpu, note: "cpu (requested)".into() }),
            DeviceRequest::Cuda(i) => {
                let dev = cuda::CudaDevice::get(i)?;
                Ok(Resolved { device: Device::Cuda(i), note: format!("cuda:{i} {} (requested)", dev.info().name) })
            }
            DeviceRequest::Auto => match cuda::CudaDevice::get(0) {
                Ok(dev) => Ok(Resolved {
                    device: Device::Cuda(0),
                    note: format!("cuda:0 {} (auto: CUDA is usable)", dev.info().name),
                }),
                Err(e) => Ok(Resolved { device: Device::Cpu, note: format!("cpu (auto: {e})") }),
            },
        }
    }
}
