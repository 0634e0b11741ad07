//! `cpu`, `cuda`, `cuda:N` → a candle device. CUDA is behind the `cuda` cargo feature; asking
//! for it in a CPU-only build is an error that says how to get it, never a silent CPU run.

use anyhow::{bail, Result};
use candle_core::Device;

/// Which device a string names (checked without touching the hardware).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

pub fn parse(s: &str) -> Result<DeviceSpec> {
    match s {
        "cpu" => Ok(DeviceSpec::Cpu),
        "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
            _ => bail!("unknown device `{s}` (valid: cpu, cuda, cuda:N)"),
        },
    }
}

pub fn open(s: &str) -> Result<Device> {
    match parse(s)? {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(n) => cuda(n),
    }
}

#[cfg(feature = "cuda")]
fn cuda(n: usize) -> Result<Device> {
    Device::new_cuda(n).map_err(|e| anyhow::anyhow!("could not open CUDA device {n}: {e}"))
}

#[cfg(not(feature = "cuda"))]
fn cuda(_n: usize) -> Result<Device> {
    bail!("this bertpipe was built without CUDA; rebuild with `cargo build --release --features cuda` (needs the CUDA toolkit), or use `device: cpu`")
}

/// Whether this build can use CUDA at all.
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

/// Human name of a device, for summaries.
pub fn describe(d: &Device) -> String {
    match d {
        Device::Cpu => format!("cpu ({} threads)", candle_core::utils::get_num_threads()),
        Device::Cuda(_) => "cuda".to_string(),
        _ => format!("{d:?}"),
    }
}
