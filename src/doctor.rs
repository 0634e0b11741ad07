//! `bertpipe doctor`: what this machine can run — ONNX Runtime (found where, which version,
//! which providers), CUDA devices, candle's CUDA build — each with the fix for what is
//! missing; and `doctor --install`, which puts the pinned ONNX Runtime wheel in the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::onnx::runtime::{cache_install_dir, cuda_available, init, libs_in, PINNED_VERSION};

/// `pip install`s the pinned wheel into the cache folder (`gpu`: `onnxruntime-gpu[cuda,cudnn]`,
/// with its CUDA libraries). Returns the library's path.
pub fn install(gpu: bool) -> Result<PathBuf> {
    let dir = cache_install_dir(gpu);
    let python = std::env::var("BERTPIPE_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let spec = if gpu {
        format!("onnxruntime-gpu[cuda,cudnn]=={PINNED_VERSION}")
    } else {
        format!("onnxruntime=={PINNED_VERSION}")
    };
    let mut cmd = Command::new(&python);
    cmd.env("PIP_ROOT_USER_ACTION", "ignore");
    cmd.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade", "--target"]);
    cmd.arg(&dir).arg(&spec);
    if !gpu {
        // The library is all bertpipe needs; numpy and friends are for Python.
        cmd.arg("--no-deps");
    }
    eprintln!("installing {spec} into {} with {python} -m pip", dir.display());
    let status = cmd.status().with_context(|| {
        format!("could not run `{python} -m pip` (install Python 3 with pip, or set BERTPIPE_PYTHON)")
    })?;
    if !status.success() {
        bail!("`{python} -m pip install --target {} {spec}` failed ({status})", dir.display());
    }
    libs_in(&dir.join("onnxruntime").join("capi"))
        .into_iter()
        .next()
        .with_context(|| format!("pip finished, but no libonnxruntime.so is in '{}'", dir.display()))
}

/// `bertpipe doctor`: one line per thing checked, with the fix for anything missing.
pub fn doctor(flag: Option<&Path>) -> Vec<(bool, String)> {
    let mut lines = Vec::new();
    lines.push((true, format!("bertpipe {}", env!("CARGO_PKG_VERSION"))));
    match init(flag) {
        Ok(rt) => {
            lines.push((
                true,
                format!("ONNX Runtime {} at {} (found via {})", rt.version, rt.found.path.display(), rt.found.how),
            ));
            let mut providers = vec!["CPUExecutionProvider"];
            if cuda_available() {
                providers.push("CUDAExecutionProvider");
            }
            lines.push((true, format!("ONNX Runtime providers: {}", providers.join(", "))));
            if !cuda_available() {
                lines.push((
                    false,
                    "ONNX Runtime CUDA provider: not in this build; for GPU eval: pip install onnxruntime-gpu[cuda,cudnn] (or bertpipe doctor --install --gpu)".into(),
                ));
            }
        }
        Err(e) => lines.push((false, format!("ONNX Runtime: {e:#}"))),
    }
    let gpus = cuda_devices();
    if gpus.is_empty() {
        lines.push((false, "CUDA devices: none found (no NVIDIA driver, or no GPU on this machine)".into()));
    } else {
        lines.push((true, format!("CUDA devices: {}", gpus.join("; "))));
    }
    if crate::train::device::CUDA_BUILT {
        let missing = crate::train::device::missing_cuda_libraries();
        if missing.is_empty() {
            lines.push((true, "candle CUDA (train on GPU): built in; driver, cuBLAS and cuRAND load".into()));
        } else {
            lines.push((
                false,
                format!(
                    "candle CUDA (train on GPU): built in, but {} not found (the NVIDIA driver; cuBLAS / cuRAND from the CUDA toolkit or `pip install nvidia-cublas nvidia-curand`, on LD_LIBRARY_PATH)",
                    missing.join(", ")
                ),
            ));
        }
    } else {
        lines.push((
            false,
            "candle CUDA (train on GPU): not built; rebuild with `cargo install --path . --features cuda` (needs nvcc)"
                .into(),
        ));
    }
    lines
}

/// NVIDIA GPUs the driver reports (`nvidia-smi`, else `/proc/driver/nvidia/gpus`).
pub fn cuda_devices() -> Vec<String> {
    if let Ok(out) = Command::new("nvidia-smi")
        .args(["--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"])
        .output()
    {
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).collect();
        }
    }
    std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}
