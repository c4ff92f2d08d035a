//! A log closure may call memra: the warning (a relative MEMRA_NVRTC_PATH)
//! is raised while the library's discovery lock is held, and a closure
//! calling `nvrtc_available()` waited for that lock for ever. Its own test
//! binary: warnings and discovery are once per process. Bounded: a hang
//! fails the test, not the suite.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

/// Each message, and what the closure's own call into memra returned.
type Seen = Arc<Mutex<Vec<(String, memra::Result<usize>)>>>;

#[test]
fn a_log_closure_may_call_memra() {
    common::need_library();
    std::env::set_var("MEMRA_NVRTC_PATH", "rel/libnvrtc.so.13");
    let got: Seen = Arc::default();
    let sink = Arc::clone(&got);
    memra::set_log_callback(move |_, message| {
        let inner = memra::nvrtc_available();
        sink.lock().unwrap().push((message.to_string(), inner));
    })
    .unwrap();
    let (done, wait) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(memra::nvrtc_available());
    });
    let outer = wait
        .recv_timeout(Duration::from_secs(60))
        .expect("memra::nvrtc_available() hung: the closure's own call waited on the lock");
    assert!(outer.is_ok(), "{outer:?}");
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].0.contains("is not an absolute path"), "{}", got[0].0);
    assert!(got[0].1.is_ok(), "{:?}", got[0].1);
}
