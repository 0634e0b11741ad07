//! ONNX Runtime, loaded at run time: finding `libonnxruntime`, checking its version, sessions
//! on CPU or CUDA (never a silent fallback), and running a BERT classifier.
//!
//! The library is looked for, in order: `--ort-lib`, `ORT_DYLIB_PATH`, Python environments
//! (the `onnxruntime` / `onnxruntime-gpu` wheel's `onnxruntime/capi/libonnxruntime.so.*`),
//! bertpipe's cache folder (where `bertpipe doctor --install` puts the pinned wheel), and the
//! system's library folders.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use ort::session::Session;
use ort::value::TensorRef;

use crate::device::DeviceSpec;

/// The version the tests use and `doctor --install` fetches.
pub const PINNED_VERSION: &str = "1.31.1";
/// The oldest ONNX Runtime this build can drive (ort's `api-17`).
pub const MIN_MINOR: u32 = 17;

/// Where a library was found.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    /// How: `--ort-lib`, `ORT_DYLIB_PATH`, `python environment`, `bertpipe cache`, `system`.
    pub how: &'static str,
}

/// The loaded runtime.
#[derive(Debug)]
pub struct Runtime {
    pub found: Found,
    pub version: String,
    env: ort::environment::Environment,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The folder `doctor --install` installs the pinned wheel into.
pub fn cache_install_dir(gpu: bool) -> PathBuf {
    let pkg = if gpu { "onnxruntime-gpu" } else { "onnxruntime" };
    crate::contract::cache_dir().join(format!("{pkg}-{PINNED_VERSION}"))
}

/// `libonnxruntime.so.X.Y.Z` (highest version first) or `libonnxruntime.so` in `dir`.
pub fn libs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut libs: Vec<(Vec<u32>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix("libonnxruntime.so")?;
            let version = match rest.strip_prefix('.') {
                Some(v) => v.split('.').map(|p| p.parse().unwrap_or(0)).collect(),
                None if rest.is_empty() => Vec::new(),
                None => return None,
            };
            Some((version, e.path()))
        })
        .collect();
    libs.sort_by(|a, b| b.0.cmp(&a.0));
    libs.into_iter().map(|(_, p)| p).collect()
}

/// `site-packages` folders of the Python environments in reach: the active virtualenv or
/// conda env, then `python3`'s own `sys.path`.
fn python_site_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            if let Ok(entries) = std::fs::read_dir(Path::new(&prefix).join("lib")) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with("python") {
                        dirs.push(e.path().join("site-packages"));
                    }
                }
            }
        }
    }
    let python = std::env::var("BERTPIPE_PYTHON").unwrap_or_else(|_| "python3".to_string());
    if let Ok(out) = Command::new(python).args(["-c", "import sys; print('\\n'.join(sys.path))"]).output() {
        if out.status.success() {
            dirs.extend(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(PathBuf::from));
        }
    }
    dirs
}

/// System library folders: `BERTPIPE_ORT_SYSTEM_DIRS` (colon-separated) when set, else
/// `LD_LIBRARY_PATH` and the usual folders.
fn system_dirs() -> Vec<PathBuf> {
    let split = |s: &str| s.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect::<Vec<_>>();
    if let Ok(dirs) = std::env::var("BERTPIPE_ORT_SYSTEM_DIRS") {
        return split(&dirs);
    }
    let mut dirs = split(&std::env::var("LD_LIBRARY_PATH").unwrap_or_default());
    dirs.extend(
        ["/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]
            .map(PathBuf::from),
    );
    dirs
}

/// Every place looked in, in order, with what was found there.
pub fn search(flag: Option<&Path>) -> Result<(Option<Found>, Vec<String>)> {
    let mut looked = Vec::new();
    if let Some(p) = flag {
        if !p.is_file() {
            bail!("--ort-lib '{}' does not exist (or is not a file)", p.display());
        }
        return Ok((Some(Found { path: p.to_path_buf(), how: "--ort-lib" }), looked));
    }
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("ORT_DYLIB_PATH is set to '{}', which does not exist (or is not a file)", p.display());
        }
        return Ok((Some(Found { path: p, how: "ORT_DYLIB_PATH" }), looked));
    }
    for site in python_site_dirs().into_iter().filter(|d| d.is_dir()) {
        let capi = site.join("onnxruntime").join("capi");
        looked.push(capi.display().to_string());
        if let Some(lib) = libs_in(&capi).into_iter().next() {
            return Ok((Some(Found { path: lib, how: "python environment" }), looked));
        }
    }
    for gpu in [true, false] {
        let capi = cache_install_dir(gpu).join("onnxruntime").join("capi");
        looked.push(capi.display().to_string());
        if let Some(lib) = libs_in(&capi).into_iter().next() {
            return Ok((Some(Found { path: lib, how: "bertpipe cache" }), looked));
        }
    }
    for dir in system_dirs() {
        looked.push(dir.display().to_string());
        if let Some(lib) = libs_in(&dir).into_iter().next() {
            return Ok((Some(Found { path: lib, how: "system" }), looked));
        }
    }
    Ok((None, looked))
}

/// `pip install`s the pinned wheel into the cache folder ([`cache_install_dir`]; `gpu`:
/// `onnxruntime-gpu[cuda,cudnn]`, with its CUDA libraries) with `BERTPIPE_PYTHON` or
/// `python3`. Returns the library's path.
pub fn install_pinned(gpu: bool) -> Result<PathBuf> {
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

/// What to do when no usable runtime is found.
pub fn install_hint() -> String {
    format!(
        "bertpipe loads ONNX Runtime ({}.{MIN_MINOR} or newer) at run time; any one of these provides it:\n  \
         bertpipe doctor --install              # pip installs onnxruntime=={PINNED_VERSION} into {}\n  \
         pip install onnxruntime=={PINNED_VERSION}         # into the active Python environment (CUDA: onnxruntime-gpu[cuda,cudnn])\n  \
         --ort-lib PATH or ORT_DYLIB_PATH=PATH  # an existing libonnxruntime.so",
        1,
        cache_install_dir(false).display()
    )
}

/// Reads the version string straight from the library (`OrtGetApiBase()->GetVersionString`).
pub fn library_version(path: &Path) -> Result<String> {
    // SAFETY: loading a shared library runs its initialisers; this is the library the user
    // asked for (or a wheel's), which ort would load next anyway.
    let lib = unsafe { libloading::Library::new(path) }
        .with_context(|| format!("could not load ONNX Runtime from '{}'", path.display()))?;
    let get: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> =
        unsafe { lib.get(b"OrtGetApiBase") }
            .map_err(|_| anyhow!("'{}' is not ONNX Runtime (no OrtGetApiBase)", path.display()))?;
    // SAFETY: OrtGetApiBase returns a pointer to a static struct; GetVersionString a static
    // NUL-terminated string.
    let version = unsafe {
        let base = get();
        if base.is_null() {
            bail!("'{}': OrtGetApiBase returned null", path.display());
        }
        std::ffi::CStr::from_ptr(((*base).GetVersionString)()).to_string_lossy().into_owned()
    };
    // Keep the library loaded: ort loads the same file next, and unloading ONNX Runtime is
    // not safe once its threads exist.
    std::mem::forget(lib);
    Ok(version)
}

fn minor(version: &str) -> u32 {
    version.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0)
}

/// Finds, checks and loads ONNX Runtime (once per process).
pub fn init(flag: Option<&Path>) -> Result<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let (found, looked) = search(flag)?;
    let Some(found) = found else {
        bail!("ONNX Runtime was not found (looked in: {}).\n{}", looked.join(", "), install_hint());
    };
    let version = library_version(&found.path)?;
    if minor(&version) < MIN_MINOR {
        bail!(
            "ONNX Runtime {version} at '{}' (found via {}) is too old: bertpipe needs 1.{MIN_MINOR} or newer.\n{}",
            found.path.display(),
            found.how,
            install_hint()
        );
    }
    if let Some(capi) = found.path.parent() {
        preload_cuda_libraries(capi);
    }
    let env = ort::init_from(&found.path)
        .map_err(|e| anyhow!("could not load ONNX Runtime from '{}': {e}", found.path.display()))?
        .with_name("bertpipe")
        .build()
        .map_err(|e| anyhow!("could not start ONNX Runtime {version}: {e}"))?;
    Ok(RUNTIME.get_or_init(|| Runtime { found, version, env }))
}

/// The `onnxruntime-gpu[cuda,cudnn]` wheel leaves the CUDA libraries in `nvidia/*/lib` beside
/// `onnxruntime/`; Python preloads them, so do we (best effort: the CUDA provider then says
/// what is missing when it is registered).
fn preload_cuda_libraries(capi: &Path) {
    if !capi.join("libonnxruntime_providers_cuda.so").exists() {
        return;
    }
    let Some(site) = capi.parent().and_then(|p| p.parent()) else { return };
    let order = ["cuda_runtime", "cublas", "cufft", "curand", "cudnn", "cuda_nvrtc", "nvjitlink"];
    for pkg in order {
        let dir = site.join("nvidia").join(pkg).join("lib");
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut libs: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().contains(".so")).collect();
        libs.sort();
        for lib in libs {
            // SAFETY: CUDA's own libraries, loaded as Python's onnxruntime does; failures are
            // reported later by the provider.
            if let Ok(l) =
                unsafe { libloading::os::unix::Library::open(Some(&lib), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
            {
                std::mem::forget(l);
            }
        }
    }
}

/// Where a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Cpu,
    Cuda(i32),
}

impl Provider {
    /// `cpu`, `cuda`, `cuda:N` ([`DeviceSpec`]).
    pub fn parse(s: &str) -> Result<Provider> {
        Ok(match DeviceSpec::parse(s)? {
            DeviceSpec::Cpu => Provider::Cpu,
            DeviceSpec::Cuda(n) => {
                Provider::Cuda(i32::try_from(n).with_context(|| format!("device `{s}`: no CUDA device {n}"))?)
            }
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Provider::Cpu => "CPUExecutionProvider".into(),
            Provider::Cuda(n) => format!("CUDAExecutionProvider (device {n})"),
        }
    }
}

/// Whether this runtime was built with the CUDA provider.
pub fn cuda_available() -> bool {
    use ort::ep::ExecutionProvider;
    ort::ep::CUDA::is_available().unwrap_or(false)
}

fn ort_err<R>(e: ort::Error<R>) -> anyhow::Error {
    anyhow!("{e}")
}

/// A classifier session: `input_ids`, `attention_mask` and, where the model has token types,
/// `token_type_ids` → `logits`.
pub struct Model {
    session: Session,
    pub provider: Provider,
    /// The model's metadata props.
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Whether the model takes `token_type_ids` (BERT) or not (RoBERTa).
    token_types: bool,
}

impl Runtime {
    /// Opens `model` on `provider` with `threads` intra-op threads (0: ONNX Runtime's default).
    /// CUDA is registered with error-on-failure: no silent fallback to the CPU.
    pub fn open(&self, model: &Path, provider: Provider, threads: usize) -> Result<Model> {
        let mut builder = Session::builder(&self.env).map_err(ort_err)?;
        if threads > 0 {
            builder = builder.with_intra_threads(threads).map_err(ort_err)?;
        }
        if let Provider::Cuda(id) = provider {
            if !cuda_available() {
                bail!(
                    "ONNX Runtime {} at '{}' has no CUDA provider; install the GPU build: pip install onnxruntime-gpu[cuda,cudnn] (or bertpipe doctor --install --gpu)",
                    self.version,
                    self.found.path.display()
                );
            }
            let cuda = ort::ep::CUDA::default().with_device_id(id).build().error_on_failure();
            builder = builder
                .with_execution_providers([cuda])
                .map_err(|e| anyhow!("the CUDA provider could not be registered (device {id}): {e}"))?;
        }
        // ONNX Runtime opens the model and its external data itself: they are noted as read
        // (a chain stage's key covers every one of them).
        if crate::contract::reads::recording() {
            for f in super::proto::model_files(model)? {
                crate::contract::reads::note_file(&f);
            }
        }
        let session = builder
            .commit_from_file(model)
            .map_err(|e| anyhow!("ONNX Runtime could not load '{}': {e}", model.display()))?;
        let names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
        // `token_type_ids` only where the model has token types (not RoBERTa's).
        let token_types = names.contains(&"token_type_ids");
        for want in ["input_ids", "attention_mask"] {
            if !names.contains(&want) {
                bail!(
                    "'{}' has no `{want}` input (it has: {}); is it a bertpipe / HF BERT export?",
                    model.display(),
                    names.join(", ")
                );
            }
        }
        if !session.outputs().iter().any(|o| o.name() == "logits") {
            bail!("'{}' has no `logits` output", model.display());
        }
        let mut metadata = std::collections::BTreeMap::new();
        {
            let meta = session.metadata().map_err(ort_err)?;
            for key in meta.custom_keys().map_err(ort_err)? {
                if let Some(v) = meta.custom(&key) {
                    metadata.insert(key, v);
                }
            }
        }
        Ok(Model { session, provider, metadata, token_types })
    }
}

impl Model {
    /// The vocabulary the model was exported with (`vocab_sha256`, `vocab_id` metadata).
    pub fn vocab(&self) -> crate::contract::manifest::VocabRef {
        crate::contract::manifest::VocabRef {
            sha256: self.metadata.get("vocab_sha256").cloned().unwrap_or_default(),
            id: self.metadata.get("vocab_id").cloned(),
        }
    }

    /// Class names in label order, from the `id2label` metadata (`LABEL_i` where one is
    /// missing); empty when the model records none.
    pub fn label_names(&self) -> Vec<String> {
        let map: serde_json::Map<String, serde_json::Value> =
            self.metadata.get("id2label").and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        (0..map.len())
            .map(|i| map.get(&i.to_string()).and_then(|v| v.as_str()).map(String::from).unwrap_or(format!("LABEL_{i}")))
            .collect()
    }

    /// Logits `[batch × num_labels]` for row-major `[batch, seq]` inputs.
    pub fn logits(
        &mut self,
        input_ids: &[i64],
        attention_mask: &[i64],
        token_type_ids: &[i64],
        batch: usize,
        seq: usize,
    ) -> Result<(Vec<f32>, usize)> {
        let shape = [batch, seq];
        let ids = TensorRef::from_array_view((shape, input_ids)).map_err(ort_err)?;
        let mask = TensorRef::from_array_view((shape, attention_mask)).map_err(ort_err)?;
        let outputs = if self.token_types {
            let types = TensorRef::from_array_view((shape, token_type_ids)).map_err(ort_err)?;
            self.session.run(ort::inputs!["input_ids" => ids, "attention_mask" => mask, "token_type_ids" => types])
        } else {
            self.session.run(ort::inputs!["input_ids" => ids, "attention_mask" => mask])
        }
        .map_err(|e| anyhow!("ONNX Runtime failed on a batch of {batch} × {seq}: {e}"))?;
        let (out_shape, values) = outputs["logits"].try_extract_tensor::<f32>().map_err(ort_err)?;
        let labels = out_shape.get(1).copied().unwrap_or(0) as usize;
        if out_shape.len() != 2 || out_shape[0] as usize != batch {
            bail!("the model returned logits of shape {:?} for a batch of {batch}", &out_shape[..]);
        }
        Ok((values.to_vec(), labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_library_in_a_folder_comes_first_and_providers_are_not_libraries() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "libonnxruntime.so.1.9.0",
            "libonnxruntime.so.1.31.1",
            "libonnxruntime.so.1.17.3",
            "libonnxruntime_providers_shared.so",
            "libonnxruntime.so",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let names: Vec<String> =
            libs_in(dir.path()).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            ["libonnxruntime.so.1.31.1", "libonnxruntime.so.1.17.3", "libonnxruntime.so.1.9.0", "libonnxruntime.so"]
        );
    }

    #[test]
    fn devices_parse_and_versions_compare_by_minor() {
        assert_eq!(Provider::parse("cpu").unwrap(), Provider::Cpu);
        assert_eq!(Provider::parse("cuda").unwrap(), Provider::Cuda(0));
        assert_eq!(Provider::parse("cuda:3").unwrap(), Provider::Cuda(3));
        assert!(Provider::parse("tpu").unwrap_err().to_string().contains("cpu, cuda or cuda:N"));
        assert_eq!(minor("1.31.1"), 31);
        assert!(minor("1.9.0") < MIN_MINOR && minor("1.17.0") >= MIN_MINOR);
    }

    #[test]
    fn the_library_flag_must_name_a_file() {
        let e = search(Some(Path::new("/nonexistent/libonnxruntime.so"))).unwrap_err();
        assert!(e.to_string().contains("--ort-lib '/nonexistent/libonnxruntime.so' does not exist"), "{e}");
        let e = library_version(Path::new("Cargo.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("could not load ONNX Runtime"), "{e:#}");
    }
}
