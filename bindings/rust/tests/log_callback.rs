//! memra's warnings reach a closure (its own test binary: the library and
//! its warnings are once per process). A relative MEMRA_NVRTC_PATH with a
//! newline is the warning: it is sent once, at level Warning, escaped into
//! one line; after `clear_log_callback` nothing more reaches the closure.

use std::sync::{Arc, Mutex};

mod common;

use memra::{clear_log_callback, set_log_callback, LogLevel};

#[test]
fn warnings_reach_the_closure() {
    common::need_library();
    std::env::set_var(
        "MEMRA_NVRTC_PATH",
        "rel/libnvrtc.so.13\nmemra: warning: forged",
    );
    let got: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = Arc::clone(&got);
    set_log_callback(move |level, message| sink.lock().unwrap().push((level, message.to_string())))
        .unwrap();
    memra::nvrtc_available().unwrap();
    memra::nvrtc_available().unwrap();
    {
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, LogLevel::Warning);
        assert!(
            got[0].1.contains(
                "MEMRA_NVRTC_PATH=rel/libnvrtc.so.13\\nmemra: warning: forged is not an absolute path"
            ),
            "{}",
            got[0].1
        );
    }
    clear_log_callback().unwrap();
    // The closure was dropped with the swap: only this test's Arc is left.
    assert_eq!(Arc::strong_count(&got), 1);
}
