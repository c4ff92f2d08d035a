//! Finding libmemra without MEMRA_LIB, and failing in one line when it
//! cannot be found. Each case runs this binary again as a child (the
//! library is opened once per process) with the environment it needs; the
//! child's half is the ignored test `child`, which does nothing unless
//! MEMRA_FIND_CHILD says what to do.

mod common;

use std::path::Path;
use std::process::Command;

fn run_child(mode: &str, memra_lib: Option<&str>) -> (i32, String, String) {
    run_child_in(mode, memra_lib, None)
}

fn run_child_in(
    mode: &str,
    memra_lib: Option<&str>,
    ld_path: Option<&str>,
) -> (i32, String, String) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("MEMRA_FIND_CHILD", mode)
    .env_remove("MEMRA_LIB")
    .env_remove("LD_LIBRARY_PATH");
    if let Some(l) = memra_lib {
        c.env("MEMRA_LIB", l);
    }
    if let Some(p) = ld_path {
        c.env("LD_LIBRARY_PATH", p);
    }
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
#[ignore = "the child half of the tests below: does nothing when run by itself"]
fn child() {
    match std::env::var("MEMRA_FIND_CHILD").as_deref() {
        Ok("find") => match memra::library_path() {
            Ok(p) => println!("FOUND {p}"),
            Err(e) => println!("ERROR {e}"),
        },
        Ok("tests") => {
            // What a test binary does first.
            common::need_library();
            println!("LOADED");
        }
        _ => {}
    }
}

#[test]
fn without_memra_lib_the_repository_build_is_found() {
    let Some(built) = option_env!("MEMRA_BUILD_TREE_LIB") else {
        eprintln!("SKIPPED: the crate was not built inside a memra checkout");
        return;
    };
    let (code, out, err) = run_child("find", None);
    assert_eq!(code, 0, "{out}{err}");
    // libtest's own "test child ... " may lead the child's line.
    let at = out.find("FOUND ").or_else(|| out.find("ERROR "));
    let at = at.unwrap_or_else(|| panic!("no answer: {out}{err}"));
    let line = out[at..].lines().next().unwrap();
    match std::fs::canonicalize(built) {
        // Built: found there, unless the folder fails the ownership rule,
        // which the one line then says.
        Ok(real) if line.starts_with("FOUND ") => {
            assert_eq!(line, format!("FOUND {}", real.display()), "{out}");
        }
        Ok(_) => assert!(
            line.contains("writable by") || line.contains("owned by"),
            "{line}"
        ),
        // Not built: pkg-config's libdir or the loader path, or one line.
        Err(_) => {
            if line.starts_with("ERROR ") {
                assert!(
                    line.contains(built) && line.contains("set MEMRA_LIB"),
                    "{line}"
                );
            }
        }
    }
}

#[test]
fn a_missing_library_stops_a_test_binary_with_one_line() {
    let (code, out, err) = run_child("tests", Some("/nonexistent/libmemra.so.2"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(!out.contains("LOADED"), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(
            "memra tests cannot run: memra: MEMRA_LIB=/nonexistent/libmemra.so.2 could not be loaded: "
        ),
        "{err}"
    );
    assert!(
        lines[0].ends_with("set MEMRA_LIB to libmemra.so.2's path"),
        "{err}"
    );
}

#[test]
fn a_library_opened_by_soname_is_named_by_its_file() {
    let Some(built) = option_env!("MEMRA_BUILD_TREE_LIB").filter(|p| Path::new(p).exists()) else {
        eprintln!("SKIPPED: no build of the repository's library to put on the loader path");
        return;
    };
    let dir = Path::new(built).parent().unwrap().to_str().unwrap();
    let (code, out, err) = run_child_in("find", Some("libmemra.so.2"), Some(dir));
    assert_eq!(code, 0, "{out}{err}");
    let real = std::fs::canonicalize(built).unwrap();
    let want = format!("FOUND {}/", dir);
    assert!(
        out.contains(&want) || out.contains(&format!("FOUND {}", real.display())),
        "{out}"
    );
}
