//! The one place that touches C: dlopen of libmemra and its entry points.
//! `MEMRA_LIB` names the file; otherwise the soname `libmemra.so.0` is looked
//! up on the loader path. Opened once per process, never closed.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Mutex, Once};

use crate::error::Error;

pub type Status = c_int;
pub type EnginePtr = *mut c_void;
pub type Stream = *mut c_void;
pub type DevPtr = u64;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Slabs {
    pub base: [u64; 3],
    pub stride: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Macros {
    pub plane: [*const f32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Faults {
    pub bad_expert: u32,
    pub nonfinite: u32,
    pub first_pair: u32,
    /// Pairs whose expert lives on another rank (expert parallelism): not a fault.
    pub not_local: u32,
}

#[repr(C)]
pub struct EngineInfo {
    pub ordinal: c_int,
    pub name: [c_char; 256],
    pub sm: c_int,
    pub driver_version: c_int,
    pub nvrtc_version: c_int,
    pub kernel_ready: c_int,
    pub kernel_is_ptx: c_int,
    pub kernel_from_cache: c_int,
}

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

/// The version of the C API this crate was written against: memra 0.2.
pub const WRITTEN_FOR_MAJOR: u32 = 0;
pub const WRITTEN_FOR_MINOR: u32 = 2;

macro_rules! entry_points {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)*) => {
        #[allow(non_snake_case)]
        pub struct Lib {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        unsafe fn resolve(h: *mut c_void) -> Result<Lib, String> {
            Ok(Lib {
                $($name: {
                    let name = concat!(stringify!($name), "\0");
                    let sym = dlsym(h, name.as_ptr() as *const c_char);
                    if sym.is_null() {
                        return Err(format!("libmemra lacks {} (older than 0.2?)", stringify!($name)));
                    }
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(sym)
                },)*
            })
        }
    };
}

entry_points! {
    memra_version: fn() -> u32;
    memra_status_string: fn(Status) -> *const c_char;
    memra_last_error: fn() -> *const c_char;
    memra_device_count: fn(*mut c_int) -> Status;
    memra_engine_create: fn(c_int, *mut EnginePtr) -> Status;
    memra_engine_destroy: fn(EnginePtr) -> ();
    memra_engine_get_info: fn(EnginePtr, *mut EngineInfo) -> Status;
    memra_engine_stream: fn(EnginePtr, *mut Stream) -> Status;
    memra_engine_warmup: fn(EnginePtr) -> Status;
    memra_engine_faults: fn(EnginePtr, Stream, *mut Faults, c_int) -> Status;
    memra_alloc: fn(EnginePtr, usize, *mut DevPtr) -> Status;
    memra_free: fn(EnginePtr, DevPtr) -> Status;
    memra_sync: fn(EnginePtr, Stream) -> Status;
    memra_copy_htod: fn(EnginePtr, DevPtr, *const c_void, usize) -> Status;
    memra_copy_dtoh: fn(EnginePtr, *mut c_void, DevPtr, usize) -> Status;
    memra_vrows_prepare_layer: fn(EnginePtr, c_int, u32, *const Macros, Stream) -> Status;
    memra_moe_vrows_tables_from_sel: fn(EnginePtr, DevPtr, DevPtr, u32, u32, c_int,
                                        *const Macros, *const Slabs, DevPtr, DevPtr, Stream)
                                        -> Status;
    memra_vrows_tables_host: fn(*const i32, *const f32, u32, u32, *const Macros, *const Slabs,
                                *mut u64, *mut f32, *mut Faults) -> Status;
}

// Safety: the table holds plain function pointers into a library that is
// never unloaded, and every memra call is thread-safe.
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

static ONCE: Once = Once::new();
static LIB: Mutex<Option<Result<&'static Lib, String>>> = Mutex::new(None);

fn open() -> Result<&'static Lib, String> {
    let path = std::env::var("MEMRA_LIB").unwrap_or_else(|_| "libmemra.so.0".to_string());
    let c = CString::new(path.clone()).map_err(|_| format!("MEMRA_LIB={path:?} holds a NUL"))?;
    unsafe {
        let h = dlopen(c.as_ptr(), RTLD_NOW | RTLD_LOCAL);
        if h.is_null() {
            let why = dlerror();
            let why = if why.is_null() {
                "unknown reason".to_string()
            } else {
                CStr::from_ptr(why).to_string_lossy().into_owned()
            };
            return Err(format!(
                "{path} could not be loaded ({why}); set MEMRA_LIB to libmemra.so.0's path"
            ));
        }
        let lib = resolve(h)?;
        let v = (lib.memra_version)();
        let (major, minor) = (v / 10000, v / 100 % 100);
        if major != WRITTEN_FOR_MAJOR || minor < WRITTEN_FOR_MINOR {
            return Err(format!(
                "{path} is memra {major}.{minor}.{}, this crate needs {WRITTEN_FOR_MAJOR}.{WRITTEN_FOR_MINOR} or a later {WRITTEN_FOR_MAJOR}.x",
                v % 100
            ));
        }
        Ok(Box::leak(Box::new(lib)))
    }
}

/// The library, opened on first use.
pub fn lib() -> Result<&'static Lib, Error> {
    ONCE.call_once(|| *LIB.lock().unwrap() = Some(open()));
    match LIB.lock().unwrap().as_ref().unwrap() {
        Ok(l) => Ok(*l),
        Err(e) => Err(Error::Library(e.clone())),
    }
}

pub fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p).to_string_lossy().into_owned() }
    }
}
