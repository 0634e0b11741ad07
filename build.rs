//! The build identity (`BERTPIPE_BUILD_ID`): a digest of the sources this binary is built
//! from — `src/`, the patched crates in `vendor/`, `Cargo.toml`, `Cargo.lock` and this file —
//! so a chain's stage keys change whenever the code that wrote a stage's output may have
//! (the package version, 0.1.0, does not change between commits). Two builds of the same
//! sources share it, whatever folder or machine they are built on.

use std::path::{Path, PathBuf};

/// Every file under `dir`, recursively, in path order.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => files(&p, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

/// FNV-1a, 64 bits, from `state`.
fn fnv(mut state: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        state ^= b as u64;
        state = state.wrapping_mul(0x0000_0100_0000_01b3);
    }
    state
}

/// `--features mpi` binds the system's MPI with bindgen, which needs libclang: without it the
/// build dies deep in `mpi-sys` ("Unable to find libclang"). Said here first, with the packages
/// `.ci/run` installs, before that build script gets to it.
fn check_mpi_build_needs() {
    if std::env::var_os("CARGO_FEATURE_MPI").is_none()
        || std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var_os("LIBCLANG_PATH").is_some()
    {
        return;
    }
    let mut dirs: Vec<PathBuf> =
        ["/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"]
            .iter()
            .map(PathBuf::from)
            .collect();
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("llvm"))
                .map(|e| e.path().join("lib")),
        );
    }
    if let Ok(out) = std::process::Command::new("llvm-config").arg("--libdir").output() {
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    for var in ["LD_LIBRARY_PATH"] {
        if let Ok(v) = std::env::var(var) {
            dirs.extend(v.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
        }
    }
    let found = dirs.iter().any(|d| {
        std::fs::read_dir(d)
            .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("libclang")))
    });
    if !found {
        eprintln!(
            "error: `--features mpi` needs libclang (bindgen binds the system's MPI with it) and none was found.\n\
             Install what CI installs: apt-get install libopenmpi-dev openmpi-bin libclang-dev pkg-config\n\
             (README, \"Data-parallel training\"; or set LIBCLANG_PATH to the folder holding libclang.so)"
        );
        std::process::exit(1);
    }
}

fn main() {
    check_mpi_build_needs();
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for dir in ["src", "vendor"] {
        files(&root.join(dir), &mut all);
        println!("cargo:rerun-if-changed={dir}");
    }
    for file in ["Cargo.toml", "Cargo.lock", "build.rs"] {
        all.push(root.join(file));
        println!("cargo:rerun-if-changed={file}");
    }
    all.sort();
    // Two FNV-1a lanes from different offsets: 128 bits, enough that two different trees of
    // sources do not share an identity by chance.
    let (mut a, mut b) = (0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142u64);
    for path in &all {
        let rel = path.strip_prefix(&root).unwrap_or(path).to_string_lossy().replace('\\', "/");
        let bytes = std::fs::read(path).unwrap_or_default();
        for part in [rel.as_bytes(), &(bytes.len() as u64).to_le_bytes(), &bytes] {
            a = fnv(a, part);
            b = fnv(b, part);
        }
    }
    println!("cargo:rustc-env=BERTPIPE_BUILD_ID={a:016x}{b:016x}");
}
