//! `.npy` read/write, for exchanging tensors with NumPy and PyTorch.
//!
//! Supports little-endian f64 (`<f8`), f32 (`<f4`) and f16 (`<f2`), C order. NumPy has no bf16, so a
//! bf16 tensor is written as f32 (exactly: every bf16 is an f32) and read back as f32.

use crate::tensor::CpuStorage;
use crate::{DType, Error, Result, Tensor};
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";

fn npy_err(path: &Path, msg: impl Into<String>) -> Error {
    Error::Npy { path: path.display().to_string(), msg: msg.into() }
}

impl Tensor {
    /// Write as `.npy` (the tensor is copied to the host first).
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let host = if self.dtype() == DType::BF16 { self.to_cpu()?.to_dtype(DType::F32)? } else { self.to_cpu()? };
        let (descr, bytes): (&str, &[u8]) = match host.cpu_storage()? {
            CpuStorage::F64(v) => ("<f8", bytemuck::cast_slice(v)),
            CpuStorage::F32(v) => ("<f4", bytemuck::cast_slice(v)),
            CpuStorage::F16(v) => ("<f2", bytemuck::cast_slice(v)),
            CpuStorage::BF16(_) => unreachable!("converted to f32 above"),
        };
        let shape = match self.shape() {
            [] => "()".to_string(),
            [d] => format!("({d},)"),
            s => format!("({})", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
        let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + bytes.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(bytes);
        std::fs::write(path, out).map_err(|source| Error::Io { path: path.display().to_string(), source })
    }

    /// Read a `.npy` file into a CPU tensor.
    pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
        if data.len() < 10 || &data[..6] != MAGIC {
            return Err(npy_err(path, "not an .npy file (bad magic)"));
        }
        let (hlen, hstart) = match data[6] {
            1 => (u16::from_le_bytes([data[8], data[9]]) as usize, 10),
            2 | 3 => {
                if data.len() < 12 {
                    return Err(npy_err(path, "truncated header"));
                }
                (u32::from_le_bytes([data[8], data[9], data[10], data[11]]) as usize, 12)
            }
            v => return Err(npy_err(path, format!("unsupported format version {v}"))),
        };
        let header = data.get(hstart..hstart + hlen).ok_or_else(|| npy_err(path, "truncated header"))?;
        let header = std::str::from_utf8(header).map_err(|_| npy_err(path, "header is not UTF-8"))?;
        let field = |key: &str| -> Result<&str> {
            let at = header.find(&format!("'{key}'")).ok_or_else(|| npy_err(path, format!("header lacks '{key}'")))?;
            let rest = &header[at + key.len() + 2..];
            let colon = rest.find(':').ok_or_else(|| npy_err(path, format!("malformed '{key}'")))?;
            Ok(rest[colon + 1..].trim_start())
        };
        let descr_raw = field("descr")?;
        let descr = descr_raw.trim_start_matches('\'').split('\'').next().unwrap_or("");
        if field("fortran_order")?.starts_with("True") {
            return Err(npy_err(path, "Fortran-order arrays are not supported (save with C order)"));
        }
        let shape_raw = field("shape")?;
        let close = shape_raw.find(')').ok_or_else(|| npy_err(path, "malformed shape"))?;
        let shape: Vec<usize> = shape_raw[1..close]
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>().map_err(|_| npy_err(path, format!("bad dimension `{s}`"))))
            .collect::<Result<_>>()?;
        let dtype = match descr {
            "<f8" => DType::F64,
            "<f4" => DType::F32,
            "<f2" => DType::F16,
            other => return Err(npy_err(path, format!("dtype `{other}` is not supported (expected <f8, <f4 or <f2)"))),
        };
        let n = crate::tensor::checked_numel("shape", &shape, dtype)?;
        let body = &data[hstart + hlen..];
        if body.len() != n * dtype.size() {
            return Err(npy_err(path, format!("expected {} data bytes for shape {shape:?}, found {}", n * dtype.size(), body.len())));
        }
        let storage = match dtype {
            DType::F64 => CpuStorage::F64(bytemuck::pod_collect_to_vec(body)),
            DType::F32 => CpuStorage::F32(bytemuck::pod_collect_to_vec(body)),
            DType::F16 => CpuStorage::F16(bytemuck::pod_collect_to_vec(body)),
            DType::BF16 => unreachable!(),
        };
        Tensor::from_cpu_storage(storage, &shape)
    }
}
