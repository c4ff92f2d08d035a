//! A log closure that calls `set_log_callback` while another thread swaps
//! the closure out: the swapping thread holds the crate's lock while the
//! library waits for the closure to return, and the closure's call waited
//! for that lock for ever. It is refused at once now (an error, as from
//! the closure's own thread alone), and both threads finish. Its own test
//! binary: warnings and discovery are once per process. Bounded: a hang
//! fails the test, not the suite.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memra::Status;

mod common;

#[test]
fn a_closure_swapping_while_another_thread_swaps_is_refused_not_hung() {
    common::need_library();
    std::env::set_var("MEMRA_NVRTC_PATH", "rel/libnvrtc.so.13");
    let entered = Arc::new(AtomicBool::new(false));
    let swapping = Arc::new(AtomicBool::new(false));
    let inner_result: Arc<Mutex<Option<memra::Result<()>>>> = Arc::default();
    {
        let (entered, swapping, inner_result) = (
            Arc::clone(&entered),
            Arc::clone(&swapping),
            Arc::clone(&inner_result),
        );
        memra::set_log_callback(move |_, _| {
            entered.store(true, Ordering::SeqCst);
            // Until the other thread is inside its swap (bounded).
            let t0 = Instant::now();
            while !swapping.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(200));
            let r = memra::set_log_callback(|_, _| {});
            *inner_result.lock().unwrap() = Some(r);
        })
        .unwrap();
    }
    let (warned_tx, warned) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = warned_tx.send(memra::nvrtc_available());
    });
    let t0 = Instant::now();
    while !entered.load(Ordering::SeqCst) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no warning reached the closure"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (swapped_tx, swapped) = mpsc::channel();
    let flag = Arc::clone(&swapping);
    std::thread::spawn(move || {
        flag.store(true, Ordering::SeqCst);
        let _ = swapped_tx.send(memra::clear_log_callback());
    });
    let swap = swapped
        .recv_timeout(Duration::from_secs(60))
        .expect("the swap hung: the closure waited for the crate's lock, held by the swap");
    let warn = warned
        .recv_timeout(Duration::from_secs(60))
        .expect("the warning's call hung");
    assert!(swap.is_ok(), "{swap:?}");
    assert!(warn.is_ok(), "{warn:?}");
    let inner = inner_result
        .lock()
        .unwrap()
        .take()
        .expect("the closure ran to its end");
    let e = inner.expect_err("set_log_callback from inside the closure");
    assert_eq!(e.status(), Some(Status::InvalidArg), "{e}");
    assert!(e.to_string().contains("inside the log closure"), "{e}");
}
