//! Which libmemra file to open, in order:
//!  1. `MEMRA_LIB`, when set: that file and nothing else (a wrong setting
//!     is an error, never quietly passed over);
//!  2. the repository's own build, `<repo>/build/src/libmemra.so.2`
//!     (`$MEMRA_BUILDDIR` instead of `build` when set at build time), for a
//!     crate built inside a memra checkout (build.rs bakes the path in);
//!  3. `<libdir>/libmemra.so.2` for the libdir `pkg-config memra` named
//!     when the crate was built (an installed memra);
//!  4. the soname `libmemra.so.2` on the loader path.
//!
//! 2 and 3 are paths the crate derives itself, so it holds them to the
//! rule memra holds the NVRTC it derives to: the file must be a regular
//! file, and it, the folder holding the name and the folder the name links
//! into must be owned by root or the effective uid and writable by nobody
//! else. A candidate that cannot be opened, or is not a 0.x with x >= 2,
//! is passed over; when none serves, the error is one line listing each
//! with its reason and saying how to point at the library.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::ffi::{self, Lib, WRITTEN_FOR_MAJOR, WRITTEN_FOR_MINOR};

extern "C" {
    fn geteuid() -> u32;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> i32;
}

/// glibc's `Dl_info`.
#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

/// The file a library opened by soname was loaded from, or `name` itself.
fn file_of(lib: &Lib, name: String) -> String {
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    let addr = lib.memra_version as *const c_void;
    if unsafe { dladdr(addr, &mut info) } != 0 && !info.fname.is_null() {
        let f = unsafe { CStr::from_ptr(info.fname) }.to_string_lossy();
        if f.starts_with('/') {
            return f.into_owned();
        }
    }
    name
}

const SONAME: &str = "libmemra.so.2";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub path: String,
    pub origin: &'static str,
    /// A path the crate derived: held to the ownership rule before dlopen.
    pub derived: bool,
}

/// The candidates for this process, given `MEMRA_LIB` (None: unset or
/// empty) and the paths baked in at build time.
pub(crate) fn candidates(
    env: Option<String>,
    build_tree: Option<&str>,
    pkg_libdir: Option<&str>,
) -> Vec<Candidate> {
    if let Some(p) = env {
        return vec![Candidate {
            path: p,
            origin: "MEMRA_LIB",
            derived: false,
        }];
    }
    let mut v = Vec::new();
    if let Some(p) = build_tree {
        v.push(Candidate {
            path: p.to_string(),
            origin: "the repository's build",
            derived: true,
        });
    }
    if let Some(d) = pkg_libdir.filter(|d| !d.is_empty()) {
        v.push(Candidate {
            path: format!("{}/{SONAME}", d.trim_end_matches('/')),
            origin: "pkg-config memra",
            derived: true,
        });
    }
    v.push(Candidate {
        path: SONAME.to_string(),
        origin: "the loader path",
        derived: false,
    });
    v
}

fn owned_and_private(path: &Path, what: &str, follow: bool) -> Result<(), String> {
    let m = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    }
    .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let euid = unsafe { geteuid() };
    if m.uid() != 0 && m.uid() != euid {
        return Err(format!(
            "{what} {} is owned by uid {}, not root or this process's uid {euid}",
            path.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{what} {} is writable by group or others (mode {:o})",
            path.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The file to dlopen for a derived path, once it passes the rule.
pub(crate) fn trusted(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if std::fs::symlink_metadata(p).is_err() {
        return Err("no such file".to_string());
    }
    let real = std::fs::canonicalize(p).map_err(|e| format!("{e}"))?;
    let meta = std::fs::metadata(&real).map_err(|e| format!("{e}"))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", real.display()));
    }
    owned_and_private(&real, "the file", true)?;
    let here = p.parent().unwrap_or_else(|| Path::new("/"));
    owned_and_private(here, "its folder", true)?;
    if let Some(there) = real.parent() {
        owned_and_private(there, "the folder it links into", true)?;
    }
    Ok(real)
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn dl_error() -> String {
    let why = unsafe { ffi::dlerror() };
    if why.is_null() {
        "unknown reason".to_string()
    } else {
        one_line(&unsafe { CStr::from_ptr(why) }.to_string_lossy())
    }
}

/// dlopen + resolve + version check of one file; on refusal the handle is
/// closed again (nothing of it was used but memra_version).
fn try_open(path: &str) -> Result<Lib, String> {
    let c = CString::new(path).map_err(|_| "the path holds a NUL byte".to_string())?;
    let h = unsafe { ffi::dlopen(c.as_ptr() as *const c_char, ffi::RTLD_NOW | ffi::RTLD_LOCAL) };
    if h.is_null() {
        return Err(dl_error());
    }
    let close = |h: *mut c_void, why: String| {
        unsafe { ffi::dlclose(h) };
        Err(why)
    };
    let lib = match unsafe { ffi::resolve(h) } {
        Ok(l) => l,
        Err(e) => return close(h, e),
    };
    let v = unsafe { (lib.memra_version)() };
    match version_refusal(v) {
        Some(why) => close(h, why),
        None => Ok(lib),
    }
}

/// Why a library of version `v` (memra_version()'s number) cannot serve, or
/// None. Before 1.0 a minor version may change public structs (0.3 and 0.4
/// both grew memra_route_spec), and the crate's copies of them are this
/// minor's: a later one would read past them, an earlier one lacks calls.
/// So only this major.minor serves, any patch.
fn version_refusal(v: u32) -> Option<String> {
    let (major, minor) = (v / 10000, v / 100 % 100);
    if major == WRITTEN_FOR_MAJOR && minor == WRITTEN_FOR_MINOR {
        return None;
    }
    Some(format!(
        "it is memra {major}.{minor}.{}, this crate needs {WRITTEN_FOR_MAJOR}.{WRITTEN_FOR_MINOR}.x \
         (its structs are that version's)",
        v % 100
    ))
}

/// Opens the first candidate that serves: the library and the path it was
/// opened by, or one line saying what was tried and how to point at it.
pub(crate) fn open_from(cands: &[Candidate]) -> Result<(Lib, String), String> {
    let mut tried = Vec::new();
    for c in cands {
        let path = if c.derived {
            match trusted(&c.path) {
                Ok(real) => real.to_string_lossy().into_owned(),
                Err(why) => {
                    tried.push(format!("{} ({}): {why}", c.path, c.origin));
                    continue;
                }
            }
        } else {
            c.path.clone()
        };
        match try_open(&path) {
            Ok(lib) => {
                let file = file_of(&lib, path);
                return Ok((lib, file));
            }
            Err(why) => tried.push(format!("{path} ({}): {why}", c.origin)),
        }
    }
    if cands.len() == 1 && cands[0].origin == "MEMRA_LIB" {
        return Err(format!(
            "MEMRA_LIB={} could not be loaded: {}; set MEMRA_LIB to libmemra.so.2's path",
            cands[0].path,
            tried.join("; ")
        ));
    }
    Err(format!(
        "libmemra.so.2 not found: {}; build it (meson setup build && meson compile -C build), \
         install it where pkg-config or the loader finds it, or set MEMRA_LIB to its path",
        tried.join("; ")
    ))
}

/// The library for this process (see the module's comment).
pub(crate) fn open() -> Result<(Lib, String), String> {
    let env = std::env::var("MEMRA_LIB").ok().filter(|s| !s.is_empty());
    open_from(&candidates(
        env,
        option_env!("MEMRA_BUILD_TREE_LIB"),
        option_env!("MEMRA_PKGCONFIG_LIBDIR"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_this_minor_serves() {
        let this = WRITTEN_FOR_MAJOR * 10000 + WRITTEN_FOR_MINOR * 100;
        assert_eq!(version_refusal(this), None);
        assert_eq!(version_refusal(this + 7), None); // a patch release
        for other in [this + 100, this - 100, this + 10000] {
            let why = version_refusal(other).expect("another minor or major is refused");
            assert!(why.contains("this crate needs"), "{why}");
        }
    }

    #[test]
    fn memra_lib_is_the_only_candidate_when_set() {
        let c = candidates(
            Some("/x/libmemra.so.2".into()),
            Some("/r/build/src/l"),
            Some("/usr/lib"),
        );
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].path.as_str(), c[0].derived),
            ("/x/libmemra.so.2", false)
        );
    }

    #[test]
    fn order_is_build_tree_pkg_config_loader_path() {
        let c = candidates(
            None,
            Some("/r/build/src/libmemra.so.2"),
            Some("/usr/local/lib/"),
        );
        let got: Vec<(&str, bool)> = c.iter().map(|c| (c.path.as_str(), c.derived)).collect();
        assert_eq!(
            got,
            [
                ("/r/build/src/libmemra.so.2", true),
                ("/usr/local/lib/libmemra.so.2", true),
                ("libmemra.so.2", false)
            ]
        );
        assert_eq!(candidates(None, None, Some("")).len(), 1);
    }

    /// A new folder of this test's own (never one that was there before).
    fn scratch(name: &str) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        loop {
            let d = std::env::temp_dir().join(format!(
                "memra-find-{}-{name}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::create_dir(&d) {
                Ok(()) => {
                    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
                    return d;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("{}: {e}", d.display()),
            }
        }
    }

    #[test]
    fn none_serving_is_one_line_naming_each_and_the_fix() {
        let d = scratch("none");
        let not_lib = d.join("libmemra.so.2");
        std::fs::write(&not_lib, b"not an ELF file\n").unwrap();
        std::fs::set_permissions(&not_lib, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open_dir = scratch("open");
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let in_open = open_dir.join("libmemra.so.2");
        std::fs::copy(&not_lib, &in_open).unwrap();
        let cands = [
            Candidate {
                path: d.join("missing.so").to_string_lossy().into_owned(),
                origin: "the repository's build",
                derived: true,
            },
            Candidate {
                path: in_open.to_string_lossy().into_owned(),
                origin: "pkg-config memra",
                derived: true,
            },
            Candidate {
                path: not_lib.to_string_lossy().into_owned(),
                origin: "the loader path",
                derived: false,
            },
        ];
        let e = open_from(&cands).err().unwrap();
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.contains("missing.so (the repository's build): no such file"),
            "{e}"
        );
        assert!(e.contains("writable by group or others (mode 777)"), "{e}");
        assert!(
            e.contains(&format!("{} (the loader path): ", not_lib.display())),
            "{e}"
        );
        assert!(e.contains("set MEMRA_LIB"), "{e}");
        let e = open_from(&candidates(
            Some(not_lib.to_string_lossy().into()),
            None,
            None,
        ))
        .err()
        .unwrap();
        assert!(e.starts_with(&format!(
            "MEMRA_LIB={} could not be loaded: ",
            not_lib.display()
        )));
        assert!(!e.contains('\n'), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&open_dir).unwrap();
    }

    #[test]
    fn a_derived_path_must_be_a_private_regular_file() {
        let d = scratch("rule");
        let fifo = d.join("fifo");
        let c = CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
        extern "C" {
            fn mkfifo(path: *const c_char, mode: u32) -> i32;
        }
        assert_eq!(unsafe { mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = trusted(&fifo.to_string_lossy()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let f = d.join("lib.so");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = trusted(&f.to_string_lossy()).unwrap_err();
        assert!(e.starts_with("the file "), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            trusted(&f.to_string_lossy()).unwrap(),
            std::fs::canonicalize(&f).unwrap()
        );
        // A name in a private folder that links into a writable one.
        let open_dir = scratch("linked");
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let target = open_dir.join("libmemra.so.2.3.0");
        std::fs::write(&target, b"x").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = d.join("libmemra.so.2");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = trusted(&link.to_string_lossy()).unwrap_err();
        assert!(e.starts_with("the folder it links into "), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&open_dir).unwrap();
    }
}
