//! `bertpipe doctor`: what this machine can run — ONNX Runtime (found where, which version,
//! which providers), CUDA devices, candle's CUDA build — each with the fix for what is
//! missing; and `doctor --install`, which puts the pinned ONNX Runtime wheel in the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::onnx::runtime::{cache_install_dir, cuda_available, init, PINNED_VERSION};

/// `pip install`s the pinned wheel into the cache folder, saying so
/// ([`crate::onnx::runtime::install_pinned`]). Returns the library's path.
pub fn install(gpu: bool) -> Result<PathBuf> {
    let python = std::env::var("BERTPIPE_PYTHON").unwrap_or_else(|_| "python3".to_string());
    eprintln!(
        "installing onnxruntime{}=={PINNED_VERSION} into {} with {python} -m pip",
        if gpu { "-gpu[cuda,cudnn]" } else { "" },
        cache_install_dir(gpu).display()
    );
    crate::onnx::runtime::install_pinned(gpu)
}

/// What this CPU does with int8 exports.
pub fn cpu_int8() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512vnni") || std::arch::is_x86_feature_detected!("avxvnni") {
            return "CPU int8: VNNI dot products (int8 exports run at full speed, no saturation)".into();
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return "CPU int8: AVX2 without VNNI (uint8×int8 pairs through vpmaddubsw; bertpipe's 7-bit int8 weights cannot saturate it)".into();
        }
        "CPU int8: no AVX2 (int8 exports run, slowly)".into()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        format!("CPU int8: {} (int8 dot products where the CPU has them)", std::env::consts::ARCH)
    }
}

/// `bertpipe doctor --model FILE`: what the model is, as its metadata says, and whether it opens.
pub fn describe_model(flag: Option<&Path>, model: &Path) -> Vec<(bool, String)> {
    let rt = match init(flag) {
        Ok(rt) => rt,
        Err(e) => return vec![(false, format!("model {}: no runtime to open it ({e:#})", model.display()))],
    };
    match rt.open(model, crate::onnx::runtime::Provider::Cpu, 1) {
        Ok(m) => {
            let get = |k: &str| m.metadata.get(k).cloned().unwrap_or_else(|| "-".into());
            vec![
                (
                    true,
                    format!(
                        "model {}: {} ({}), graph {}, labels {}, max_len {}",
                        model.display(),
                        crate::onnx::eval::precision_of(&m),
                        m.metadata.get("quantization").map(String::as_str).unwrap_or("float32 weights and arithmetic"),
                        get("graph"),
                        m.label_names().join(", "),
                        get("max_len")
                    ),
                ),
                (true, format!("model vocabulary: vocab_id {}, vocab_sha256 {}", get("vocab_id"), get("vocab_sha256"))),
            ]
        }
        Err(e) => vec![(false, format!("model {}: {e:#}", model.display()))],
    }
}

/// `bertpipe doctor`: one line per thing checked, with the fix for anything missing.
pub fn doctor(flag: Option<&Path>) -> Vec<(bool, String)> {
    let mut lines = Vec::new();
    lines.push((true, format!("bertpipe {}", env!("CARGO_PKG_VERSION"))));
    lines.push((true, cpu_int8()));
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
