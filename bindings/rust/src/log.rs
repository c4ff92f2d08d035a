//! Where memra's warnings go: stderr by default, or a closure of the caller
//! (a server's own logger).

use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::error::{Error, Result, Status};
use crate::{check, ffi};

/// How grave a message from the library is (`memra_log_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogLevel {
    Error,
    /// Every message the library sends today.
    Warning,
    Info,
    Debug,
}

impl LogLevel {
    pub(crate) fn from_code(code: c_int) -> LogLevel {
        match code {
            ffi::abi::MEMRA_LOG_ERROR => LogLevel::Error,
            ffi::abi::MEMRA_LOG_INFO => LogLevel::Info,
            ffi::abi::MEMRA_LOG_DEBUG => LogLevel::Debug,
            _ => LogLevel::Warning,
        }
    }
}

type Logger = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

/// The installed closure. Swaps are serialised here; the C call returns only
/// when no thread is still inside the closure it replaced, so the old one is
/// dropped after it.
static INSTALLED: Mutex<Option<Box<Logger>>> = Mutex::new(None);

thread_local! {
    /// How deep this thread is inside the closure: a swap from there would
    /// wait for itself, on `INSTALLED` before the library could say so.
    static IN_CLOSURE: Cell<u32> = const { Cell::new(0) };
}

struct Inside;

impl Inside {
    fn enter() -> Inside {
        IN_CLOSURE.with(|d| d.set(d.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        IN_CLOSURE.with(|d| d.set(d.get() - 1));
    }
}

unsafe extern "C" fn trampoline(level: c_int, message: *const c_char, user: *mut c_void) {
    let f = &*(user as *const Logger);
    let message = if message.is_null() {
        std::borrow::Cow::Borrowed("")
    } else {
        CStr::from_ptr(message).to_string_lossy()
    };
    let _inside = Inside::enter();
    // A panic must not unwind into C, and neither may its payload's Drop
    // (which may panic in turn): the payload is dropped inside a catch of its
    // own, and only a payload whose drop panicked too is forgotten (leaked).
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(LogLevel::from_code(level), &message)))
    {
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
}

fn install(new: Option<Box<Logger>>) -> Result<()> {
    // Before the lock: a swap running on another thread holds it while it
    // waits for this very closure to return.
    if IN_CLOSURE.with(|d| d.get()) > 0 {
        return Err(Error::arg(
            Status::InvalidArg,
            "set_log_callback: called from inside the log closure (the swap would wait for \
             the closure it runs in)"
                .into(),
        ));
    }
    let lib = ffi::lib()?;
    let set = lib.memra_set_log_callback;
    let mut slot = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let (cb, user) = match &new {
        Some(b) => (
            Some(trampoline as ffi::LogFn),
            &**b as *const Logger as *mut c_void,
        ),
        None => (None, std::ptr::null_mut()),
    };
    match check(unsafe { set(cb, user) }) {
        Ok(()) => {
            *slot = new;
            Ok(())
        }
        // The library swapped, but a call into the old closure was still
        // running when its bounded wait ended (a closure that waits for
        // this thread): the old closure must outlive that call, so it is
        // never dropped.
        Err(e) if e.status() == Some(Status::InvalidArg) => {
            if let Some(old) = slot.take() {
                Box::leak(old);
            }
            *slot = new;
            Err(e)
        }
        Err(e) => Err(e), // nothing changed (out of memory)
    }
}

/// Sends memra's warnings to `f` (level and one line of text, without the
/// "memra: warning:" prefix) instead of stderr. `f` may be called from any
/// thread, several at once, never with a lock of the library held: it may
/// call memra. It must not call `set_log_callback` or `clear_log_callback`
/// itself (that is an error, not a deadlock), nor wait for a thread that
/// does: that swap gives up after 5 s with `Status::InvalidArg`, the new
/// closure installed and the old one kept alive for good.
///
/// ```no_run
/// memra::set_log_callback(|level, message| eprintln!("[memra {level:?}] {message}")).unwrap();
/// ```
pub fn set_log_callback<F>(f: F) -> Result<()>
where
    F: Fn(LogLevel, &str) + Send + Sync + 'static,
{
    install(Some(Box::new(Box::new(f))))
}

/// Warnings go to stderr again; the closure set before is dropped.
pub fn clear_log_callback() -> Result<()> {
    install(None)
}
