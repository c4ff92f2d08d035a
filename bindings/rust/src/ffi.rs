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

/// A `#[repr(C)]` copy of a public C struct, which also reports its layout
/// (size and each field's offset) so a test can hold it against memra.h.
macro_rules! c_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
        #[cfg(test)]
        impl $name {
            pub fn c_layout() -> (usize, Vec<(&'static str, usize)>) {
                (std::mem::size_of::<$name>(),
                 vec![$((stringify!($f), std::mem::offset_of!($name, $f)),)*])
            }
        }
    };
}

c_struct! {
    #[derive(Clone, Copy, Default)]
    pub struct Slabs {
        pub base: [u64; 3],
        pub stride: [u64; 3],
    }
}

c_struct! {
    #[derive(Clone, Copy)]
    pub struct Macros {
        pub plane: [*const f32; 3],
    }
}

c_struct! {
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct Faults {
        pub bad_expert: u32,
        pub nonfinite: u32,
        pub first_pair: u32,
        /// Pairs whose expert lives on another rank (expert parallelism): not a fault.
        pub not_local: u32,
    }
}

c_struct! {
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

/// What `memra_set_log_callback` takes: level, message, user pointer.
pub type LogFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void);

macro_rules! entry_points {
    (required { $($name:ident : fn($($arg:ty),*) -> $ret:ty;)* }
     optional { $($oname:ident : fn($($oarg:ty),*) -> $oret:ty;)* }) => {
        #[allow(non_snake_case)]
        pub struct Lib {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
            /// Newer entry points: `None` in a library that predates them.
            $(pub $oname: Option<unsafe extern "C" fn($($oarg),*) -> $oret>,)*
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
                $($oname: {
                    let name = concat!(stringify!($oname), "\0");
                    let sym = dlsym(h, name.as_ptr() as *const c_char);
                    if sym.is_null() {
                        None
                    } else {
                        Some(std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oarg),*) -> $oret>(sym))
                    }
                },)*
            })
        }
    };
}

entry_points! {
    required {
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
        memra_copy_htod_on: fn(EnginePtr, DevPtr, *const c_void, usize, Stream) -> Status;
        memra_copy_dtoh_on: fn(EnginePtr, *mut c_void, DevPtr, usize, Stream) -> Status;
        memra_vrows_prepare_layer: fn(EnginePtr, c_int, u32, *const Macros, Stream) -> Status;
        memra_moe_vrows_tables_from_sel: fn(EnginePtr, DevPtr, DevPtr, u32, u32, c_int,
                                            *const Macros, *const Slabs, DevPtr, DevPtr, Stream)
                                            -> Status;
        memra_vrows_tables_host: fn(*const i32, *const f32, u32, u32, *const Macros, *const Slabs,
                                    *mut u64, *mut f32, *mut Faults) -> Status;
        memra_nvrtc_available: fn(*mut c_int) -> Status;
    }
    optional {
        memra_set_log_callback: fn(Option<LogFn>, *mut c_void) -> Status;
    }
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

/// The copies above against the C layout: the abi_layout program (built from
/// memra.h by meson) writes it to the file MEMRA_ABI_LAYOUT names.
#[cfg(test)]
mod layout {
    use super::*;
    use std::collections::HashMap;

    type Layout = (usize, Vec<(&'static str, usize)>);

    #[test]
    fn structs_match_the_c_header() {
        let Ok(path) = std::env::var("MEMRA_ABI_LAYOUT") else {
            eprintln!("SKIPPED: MEMRA_ABI_LAYOUT is not set (tools/test.sh sets it to the \
                       build's tests/abi_layout.txt)");
            return;
        };
        let text = std::fs::read_to_string(&path).expect("MEMRA_ABI_LAYOUT is readable");
        let mut sizes: HashMap<String, usize> = HashMap::new();
        let mut fields: HashMap<String, Vec<(String, usize)>> = HashMap::new();
        for line in text.lines() {
            let (name, value) = line.split_once(' ').expect("name value");
            let value: usize = value.trim().parse().expect("a number");
            match name.split_once('.') {
                Some((s, f)) => fields.entry(s.into()).or_default().push((f.into(), value)),
                None => {
                    sizes.insert(name.into(), value);
                }
            }
        }
        let ours: [(&str, Layout); 4] = [
            ("memra_vrows_slabs", Slabs::c_layout()),
            ("memra_vrows_macros", Macros::c_layout()),
            ("memra_faults", Faults::c_layout()),
            ("memra_engine_info", EngineInfo::c_layout()),
        ];
        for (c, (size, offsets)) in ours {
            assert_eq!(Some(&size), sizes.get(c), "{c}: size");
            let ours: Vec<(String, usize)> =
                offsets.iter().map(|(f, o)| (f.to_string(), *o)).collect();
            assert_eq!(Some(&ours), fields.get(c), "{c}: fields and offsets");
        }
    }
}
