//! The device names every command takes (`--device`, `device:`): `cpu`, `cuda` (or `gpu`),
//! `cuda:N`. Parsed here once for training (candle) and evaluation (ONNX Runtime), without
//! touching the hardware.

use anyhow::{bail, Result};

/// Which device a name means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

impl DeviceSpec {
    pub fn parse(s: &str) -> Result<DeviceSpec> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
                _ => bail!("unknown device `{s}`: use cpu, cuda or cuda:N"),
            },
        }
    }
}
