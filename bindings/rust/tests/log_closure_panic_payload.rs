//! A log closure that panics with a payload whose own Drop panics: the
//! payload must not be dropped inside the `extern "C"` trampoline, where
//! the second panic would unwind into C (undefined behaviour before Rust
//! 1.81, an abort of the whole process since). Its own test binary: the
//! callback and the warning are once per process.

use std::sync::atomic::{AtomicUsize, Ordering};

mod common;

static CALLS: AtomicUsize = AtomicUsize::new(0);

struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

#[test]
fn a_panicking_payload_never_unwinds_into_c() {
    common::need_library();
    std::env::set_var("MEMRA_NVRTC_PATH", "relative/libnvrtc.so.13");
    memra::set_log_callback(|_, _| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        std::panic::panic_any(Bomb)
    })
    .unwrap();
    // The relative path is warned about: the closure runs and panics; the
    // call returns (the process would have aborted here).
    memra::nvrtc_available().unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    memra::clear_log_callback().unwrap();
}
