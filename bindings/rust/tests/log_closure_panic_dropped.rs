//! A log closure's panic payload is dropped, not leaked (a closure that
//! panics on every message would leak one allocation a message): its
//! Drop runs once, inside the trampoline's own catch. Its own test binary:
//! the callback and the warning are once per process.

use std::sync::atomic::{AtomicUsize, Ordering};

mod common;

static DROPPED: AtomicUsize = AtomicUsize::new(0);

struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_panic_payload_is_dropped_once() {
    common::need_library();
    std::env::set_var("MEMRA_NVRTC_PATH", "relative/libnvrtc.so.13");
    memra::set_log_callback(|_, _| std::panic::panic_any(Counted)).unwrap();
    memra::nvrtc_available().unwrap(); // the relative path is warned about
    assert_eq!(DROPPED.load(Ordering::SeqCst), 1);
    memra::clear_log_callback().unwrap();
}
