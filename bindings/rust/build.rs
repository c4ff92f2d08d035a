//! Bakes in where libmemra may be when MEMRA_LIB is not set (src/find.rs
//! says in which order and under which rule): the repository's own build
//! when the crate is built inside a memra checkout, and the libdir
//! `pkg-config memra` names. Nothing is linked: the library is opened with
//! dlopen at run time, so a machine with neither builds the crate as well.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `pkg-config --variable=libdir memra`, waited for at most 10 s.
fn pkg_config_libdir() -> Option<String> {
    let mut child =
        Command::new(std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
            .args(["--variable=libdir", "memra"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && dir.starts_with('/') && !dir.contains('\n')).then_some(dir)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for v in [
        "MEMRA_BUILDDIR",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let repo = Path::new(&manifest).join("../..");
    if repo.join("meson.build").is_file() && repo.join("include/memra/memra.h").is_file() {
        let repo = repo.canonicalize().expect("the repository's path");
        let build = std::env::var("MEMRA_BUILDDIR").unwrap_or_else(|_| "build".into());
        let build = repo.join(build);
        for (var, rel) in [
            ("MEMRA_BUILD_TREE_LIB", "src/libmemra.so.2"),
            ("MEMRA_BUILD_TREE_ABI_LAYOUT", "tests/abi_layout.txt"),
            ("MEMRA_BUILD_TREE_ABI_CONSTANTS", "tests/abi_constants.txt"),
        ] {
            if let Some(p) = build.join(rel).to_str() {
                println!("cargo:rustc-env={var}={p}");
            }
        }
    }
    if let Some(dir) = pkg_config_libdir() {
        println!("cargo:rustc-env=MEMRA_PKGCONFIG_LIBDIR={dir}");
    }
}
