//! A device name → a candle device. CUDA is behind the `cuda` cargo feature; asking for it in
//! a CPU-only build is an error that says how to get it, never a silent CPU run.

use anyhow::{bail, Result};
use candle_core::Device;

use crate::device::DeviceSpec;

pub fn open(s: &str) -> Result<Device> {
    match DeviceSpec::parse(s)? {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(n) => cuda(n),
    }
}

/// The device of one data-parallel rank: with more than one rank, `cuda` is the GPU of the
/// rank's local rank (one GPU per rank); one rank opens what it is asked.
pub fn open_for_rank(s: &str, world: &super::dist::World) -> Result<Device> {
    match DeviceSpec::parse(s)? {
        DeviceSpec::Cuda(_) if world.size > 1 => cuda(world.local_rank),
        _ => open(s),
    }
}

#[cfg(feature = "cuda")]
fn cuda(n: usize) -> Result<Device> {
    // cudarc loads these when the device opens and panics if one is missing: say so instead.
    let missing = missing_cuda_libraries();
    if !missing.is_empty() {
        bail!(
            "could not open CUDA device {n}: {} not found. The driver's libcuda comes with the NVIDIA driver (none on this machine?); cuBLAS and cuRAND with the CUDA toolkit, or `pip install nvidia-cublas nvidia-curand` with their `nvidia/cu13/lib` folder on LD_LIBRARY_PATH",
            missing.join(", ")
        );
    }
    match std::panic::catch_unwind(|| Device::new_cuda(n)) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => bail!("could not open CUDA device {n}: {e}"),
        Err(_) => {
            bail!("could not open CUDA device {n}: the CUDA runtime failed while starting (see the message above)")
        }
    }
}

/// The CUDA libraries candle loads when a device opens (driver, cuBLAS, cuBLASLt, cuRAND) that
/// cannot be loaded here, by the names cudarc looks for.
#[cfg(feature = "cuda")]
pub fn missing_cuda_libraries() -> Vec<String> {
    use candle_core::cuda_backend::cudarc::get_lib_name_candidates;
    ["cuda", "cublas", "cublasLt", "curand"]
        .into_iter()
        .filter(|lib| {
            // SAFETY: loading a CUDA library runs only its initialisers, as cudarc does itself.
            !get_lib_name_candidates(lib).iter().any(|name| unsafe { libloading::Library::new(name) }.is_ok())
        })
        .map(|lib| format!("lib{lib}"))
        .collect()
}

#[cfg(not(feature = "cuda"))]
pub fn missing_cuda_libraries() -> Vec<String> {
    Vec::new()
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
