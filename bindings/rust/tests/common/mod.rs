//! For the test binaries that need libmemra: when it cannot be opened, the
//! binary stops at its first test with one line saying why and how to
//! point at it (`MEMRA_LIB`), instead of every test failing on its own.

use std::io::Write;
use std::sync::Once;

/// Exits the test process (status 1) with one line on stderr, past the
/// test harness's capture, when libmemra cannot be opened.
pub fn need_library() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = memra::library_path() {
            let _ = writeln!(std::io::stderr(), "memra tests cannot run: {e}");
            std::process::exit(1);
        }
    });
}
