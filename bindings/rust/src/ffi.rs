//! The one place that touches C: libmemra's structs and entry points. Which
//! file is opened is find.rs's business; it is opened once per process and
//! never closed.

use std::ffi::CStr;
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
    /// `memra_vrows_slabs`: device base address and bytes per expert slot
    /// of the gate, up and down slabs (`Slabs::new`).
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    pub struct Slabs {
        pub base: [u64; 3],
        pub stride: [u64; 3],
    }
}

c_struct! {
    #[derive(Clone, Copy, Debug)]
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
        /// Pairs of padding tokens (`RouteSpec`'s real-token count): not a fault.
        pub padded: u32,
    }
}

c_struct! {
    /// `memra_vrows_options`: expert parallelism and fused shared experts.
    #[derive(Clone, Copy, Default, Debug)]
    pub struct VrowsOptions {
        pub expert_map: u64,
        pub n_local: u32,
        pub n_shared: u32,
    }
}

c_struct! {
    /// `memra_route_spec` (the enums are C `int`s).
    #[derive(Clone, Copy, Debug)]
    pub struct RouteSpec {
        pub n_expert: u32,
        pub top_k: u32,
        pub n_group: u32,
        pub topk_group: u32,
        pub scoring: c_int,
        pub logits_dtype: c_int,
        pub renormalize: c_int,
        pub routed_scaling_factor: f32,
        pub bias: *const f32,
        pub group_scoring: c_int,
        pub bias_dtype: c_int,
        pub bias_ptr: u64,
        pub expert_map: u64,
        pub n_local: u32,
        pub n_shared: u32,
        pub shared_weight: f32,
        pub shared_rule: c_int,
        pub shared_divisor: f32,
        pub n_real_dtype: c_int,
        pub n_real: u64,
    }
}

c_struct! {
    /// `memra_layout_spec` (the enum is a C `int`).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct LayoutSpec {
        pub n_expert: u32,
        pub block_size: u32,
        pub pad_sorted_ids: c_int,
        pub load_dtype: c_int,
        pub expert_map: u64,
    }
}

c_struct! {
    /// `memra_layout`: where a layout goes (addresses; 0 for an optional
    /// output left out).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Layout {
        pub sorted_ids: u64,
        pub expert_ids: u64,
        pub n_post_pad: u64,
        pub offsets: u64,
        pub padded_offsets: u64,
        pub counts: u64,
        pub expert_load: u64,
        pub workspace: u64,
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
    pub fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub fn dlerror() -> *const c_char;
    pub fn dlclose(handle: *mut c_void) -> c_int;
}

pub const RTLD_NOW: c_int = 2;
pub const RTLD_LOCAL: c_int = 0;

/// The version of the C API this crate was written against (its major and
/// minor must match: find.rs's version_refusal).
pub const WRITTEN_FOR_MAJOR: u32 = 0;
pub const WRITTEN_FOR_MINOR: u32 = 4;

/// What `memra_set_log_callback` takes: level, message, user pointer.
pub type LogFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void);

/// The first of `names` (NUL-terminated) that the library exports.
/// Each entry point of the library the crate calls, resolved when it is
/// opened. The crate asks the library's judge of a call (memra_vrows_check,
/// 0.4) before every call, so 0.4 is its floor and every entry is required:
/// an older library is refused at once, naming what it lacks.
macro_rules! entry_points {
    ($($name:ident : fn($($arg:ty),*) -> $ret:ty;)*) => {
        #[allow(non_snake_case)]
        pub struct Lib {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        pub unsafe fn resolve(h: *mut c_void) -> Result<Lib, String> {
            Ok(Lib {
                $($name: {
                    let sym = dlsym(h, concat!(stringify!($name), "\0").as_ptr() as *const c_char);
                    if sym.is_null() {
                        return Err(format!(
                            "libmemra lacks {} (older than 0.4?); load a newer one (MEMRA_LIB)",
                            stringify!($name)
                        ));
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
    memra_upload_on:
        fn(EnginePtr, DevPtr, *const c_void, usize, Stream) -> Status;
    memra_download_on:
        fn(EnginePtr, *mut c_void, DevPtr, usize, Stream) -> Status;
    memra_vrows_prepare_layer: fn(EnginePtr, c_int, u32, *const Macros, Stream) -> Status;
    memra_vrows_tables:
        fn(EnginePtr, DevPtr, DevPtr, u32, u32, c_int, *const Macros, *const Slabs, DevPtr,
           DevPtr, Stream) -> Status;
    memra_vrows_tables_host: fn(*const i32, *const f32, u32, u32, *const Macros, *const Slabs,
                                *mut u64, *mut f32, *mut Faults) -> Status;
    memra_nvrtc_available: fn(*mut c_int) -> Status;
    // 0.4: the library's judge of a call, which the crate asks instead
    // of restating its rules (routing's is memra_route_check_ex, below).
    memra_vrows_check: fn(c_int, u64, u64, u32, u32, c_int, *const Macros, *const Slabs,
                          *const VrowsOptions, u64, u64) -> Status;
    memra_set_log_callback: fn(Option<LogFn>, *mut c_void) -> Status;
    // 0.3: the spec's new fields, the options, and the cuMemcpy-ordered
    // copies. memra_vrows_tables_host_ex marks a 0.3 library: a 0.2 one
    // has memra_route_tables_host too, but reads a shorter spec.
    memra_vrows_tables_host_ex: fn(*const i32, *const f32, u32, u32, *const Macros,
                                   *const Slabs, *const VrowsOptions, *mut u64, *mut f32,
                                   *mut Faults) -> Status;
    memra_vrows_tables_ex:
        fn(EnginePtr, DevPtr, DevPtr, u32, u32, c_int, *const Macros, *const Slabs,
           *const VrowsOptions, DevPtr, DevPtr, Stream) -> Status;
    memra_route_tables_host: fn(*const c_void, u32, *const RouteSpec, *const Macros,
                                *const Slabs, *mut i32, *mut f32, *mut u64, *mut f32,
                                *mut Faults) -> Status;
    memra_route_tables:
        fn(EnginePtr, DevPtr, u32, *const RouteSpec, c_int, *const Macros, *const Slabs,
           DevPtr, DevPtr, DevPtr, DevPtr, Stream) -> Status;
    memra_route_prepare_layer: fn(EnginePtr, c_int, *const RouteSpec, *const Macros, Stream)
                                  -> Status;
    memra_engine_set_pdl: fn(EnginePtr, c_int, *mut c_int) -> Status;
    memra_upload: fn(EnginePtr, DevPtr, *const c_void, usize) -> Status;
    memra_download: fn(EnginePtr, *mut c_void, DevPtr, usize) -> Status;
    // 0.4: the expert-sorted layout, fused with routing or on its own,
    // and its judge.
    memra_layout_sizes: fn(u32, *const LayoutSpec, *mut u64, *mut u64) -> Status;
    memra_layout_workspace_bytes: fn(u32, *const LayoutSpec, *mut u64) -> Status;
    memra_layout_prepare: fn(EnginePtr) -> Status;
    memra_layout_tables_host: fn(*const i32, u32, *const LayoutSpec, *const Layout) -> Status;
    memra_layout_tables: fn(EnginePtr, DevPtr, u32, *const LayoutSpec, *const Layout, Stream)
                            -> Status;
    memra_route_tables_ex:
        fn(EnginePtr, DevPtr, u32, *const RouteSpec, c_int, *const Macros, *const Slabs,
           DevPtr, DevPtr, DevPtr, DevPtr, *const LayoutSpec, *const Layout, Stream) -> Status;
    memra_route_tables_host_ex:
        fn(*const c_void, u32, *const RouteSpec, *const Macros, *const Slabs, *mut i32,
           *mut f32, *mut u64, *mut f32, *mut Faults, *const LayoutSpec, *const Layout)
           -> Status;
    memra_route_check_ex: fn(c_int, u64, u32, *const RouteSpec, c_int, *const Macros,
                             *const Slabs, u64, u64, u64, u64, *const LayoutSpec,
                             *const Layout) -> Status;
    memra_layout_check: fn(c_int, u64, u32, *const LayoutSpec, *const Layout) -> Status;
}

/// memra.h's numbers the crate passes: each member of the enums it uses, by
/// the C name (`mod constants` holds them, and the crate's limits and
/// statuses, to the header through tests/abi_constants.txt).
#[allow(dead_code)] // (the whole of each enum, so the test sees any addition)
pub mod abi {
    use std::os::raw::c_int;

    pub const MEMRA_ROUTE_SOFTMAX: c_int = 0;
    pub const MEMRA_ROUTE_SIGMOID: c_int = 1;
    pub const MEMRA_LOGITS_F32: c_int = 0;
    pub const MEMRA_LOGITS_BF16: c_int = 1;
    pub const MEMRA_LOGITS_F16: c_int = 2;
    pub const MEMRA_GROUP_AUTO: c_int = 0;
    pub const MEMRA_GROUP_TOP2_SUM: c_int = 1;
    pub const MEMRA_GROUP_MAX: c_int = 2;
    pub const MEMRA_SHARED_CONSTANT: c_int = 0;
    pub const MEMRA_SHARED_ROUTED_SUM: c_int = 1;
    pub const MEMRA_COUNT_I32: c_int = 0;
    pub const MEMRA_COUNT_I64: c_int = 1;
    pub const MEMRA_BIAS_F32: c_int = 0;
    pub const MEMRA_BIAS_BF16: c_int = 1;
    pub const MEMRA_CALL_ROUTE_TABLES: c_int = 0;
    pub const MEMRA_CALL_ROUTE_TABLES_HOST: c_int = 1;
    pub const MEMRA_CALL_ROUTE_PREPARE_LAYER: c_int = 2;
    pub const MEMRA_CALL_VROWS_TABLES: c_int = 3;
    pub const MEMRA_CALL_VROWS_TABLES_EX: c_int = 4;
    pub const MEMRA_CALL_VROWS_TABLES_HOST: c_int = 5;
    pub const MEMRA_CALL_VROWS_TABLES_HOST_EX: c_int = 6;
    pub const MEMRA_CALL_VROWS_PREPARE_LAYER: c_int = 7;
    pub const MEMRA_CALL_LAYOUT_TABLES: c_int = 8;
    pub const MEMRA_CALL_LAYOUT_TABLES_HOST: c_int = 9;
    pub const MEMRA_CALL_ROUTE_TABLES_EX: c_int = 10;
    pub const MEMRA_CALL_ROUTE_TABLES_HOST_EX: c_int = 11;
    pub const MEMRA_LOG_ERROR: c_int = 0;
    pub const MEMRA_LOG_WARNING: c_int = 1;
    pub const MEMRA_LOG_INFO: c_int = 2;
    pub const MEMRA_LOG_DEBUG: c_int = 3;

    /// Where a judge needs an address the call does not have yet (an
    /// output the crate allocates after asking): non-zero and aligned for
    /// every element; only presence and alignment are judged, nothing is
    /// read.
    pub const STAND_IN: u64 = 1 << 16;
}

// Safety: the table holds plain function pointers into a library that is
// never unloaded, and every memra call is thread-safe.
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

static ONCE: Once = Once::new();
static LIB: Mutex<Option<Result<(&'static Lib, String), String>>> = Mutex::new(None);

/// The library and the file it was opened from, opened on first use.
pub fn lib_and_path() -> Result<(&'static Lib, String), Error> {
    ONCE.call_once(|| {
        let opened = crate::find::open().map(|(l, p)| (&*Box::leak(Box::new(l)), p));
        *LIB.lock().unwrap_or_else(|e| e.into_inner()) = Some(opened);
    });
    match LIB.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(Ok((l, p))) => Ok((*l, p.clone())),
        Some(Err(e)) => Err(Error::Library(e.clone())),
        None => Err(Error::Library("libmemra: opening it failed earlier".into())),
    }
}

/// The library, opened on first use.
pub fn lib() -> Result<&'static Lib, Error> {
    lib_and_path().map(|(l, _)| l)
}

/// A C string's copy ("" for NULL).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string alive for the call.
pub unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The copies above against the C layout: the abi_layout program (built from
/// memra.h by meson) writes it to the file MEMRA_ABI_LAYOUT names.
#[cfg(test)]
mod layout {
    use super::*;
    use std::collections::HashMap;

    type Shape = (usize, Vec<(&'static str, usize)>);

    #[test]
    fn structs_match_the_c_header() {
        // tools/test.sh names the file; a crate built inside the repository
        // finds its build's copy (build.rs says where) by itself.
        let path = match std::env::var("MEMRA_ABI_LAYOUT") {
            Ok(p) => p,
            Err(_) => match option_env!("MEMRA_BUILD_TREE_ABI_LAYOUT") {
                Some(p) if std::path::Path::new(p).exists() => p.to_string(),
                _ => {
                    eprintln!(
                        "SKIPPED: MEMRA_ABI_LAYOUT is not set and the repository's build has no \
                         tests/abi_layout.txt (tools/test.sh sets it)"
                    );
                    return;
                }
            },
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
        let ours: [(&str, Shape); 8] = [
            ("memra_vrows_slabs", Slabs::c_layout()),
            ("memra_vrows_macros", Macros::c_layout()),
            ("memra_faults", Faults::c_layout()),
            ("memra_engine_info", EngineInfo::c_layout()),
            ("memra_vrows_options", VrowsOptions::c_layout()),
            ("memra_route_spec", RouteSpec::c_layout()),
            ("memra_layout_spec", LayoutSpec::c_layout()),
            ("memra_layout", Layout::c_layout()),
        ];
        for (c, (size, offsets)) in ours {
            assert_eq!(Some(&size), sizes.get(c), "{c}: size");
            let ours: Vec<(String, usize)> =
                offsets.iter().map(|(f, o)| (f.to_string(), *o)).collect();
            assert_eq!(Some(&ours), fields.get(c), "{c}: fields and offsets");
        }
    }
}

/// The crate's numbers against memra.h's: the abi_constants program (built
/// from memra.h by meson) prints every enum member and numeric macro of the
/// header as the compiler sees it; MEMRA_ABI_CONSTANTS names the file (or
/// the repository build's tests/abi_constants.txt). Each limit, each member
/// of the enums the crate passes, each status the crate names and each log
/// level, value for value, and no member of those enums in the header that
/// the crate lacks.
#[cfg(test)]
mod constants {
    use super::abi::*;
    use super::*;
    use crate::error::Status;
    use crate::log::LogLevel;
    use crate::spec::Arm;
    use std::collections::HashMap;

    /// Every member and macro by name -> value; each enum's members.
    type Header = (HashMap<String, i64>, HashMap<String, Vec<String>>);

    fn header() -> Option<Header> {
        let path = match std::env::var("MEMRA_ABI_CONSTANTS") {
            Ok(p) => p,
            Err(_) => match option_env!("MEMRA_BUILD_TREE_ABI_CONSTANTS") {
                Some(p) if std::path::Path::new(p).exists() => p.to_string(),
                _ => {
                    eprintln!(
                        "SKIPPED: MEMRA_ABI_CONSTANTS is not set and the repository's build has \
                         no tests/abi_constants.txt (tools/test.sh sets it)"
                    );
                    return None;
                }
            },
        };
        let text = std::fs::read_to_string(&path).expect("MEMRA_ABI_CONSTANTS is readable");
        let (mut flat, mut enums) = (HashMap::new(), HashMap::<String, Vec<String>>::new());
        for line in text.lines() {
            let (name, value) = line.split_once(' ').expect("name value");
            let value: i64 = value.trim().parse().expect("a number");
            let member = match name.split_once('.') {
                Some((e, m)) => {
                    enums.entry(e.into()).or_default().push(m.into());
                    m
                }
                None => name,
            };
            flat.insert(member.to_string(), value);
        }
        Some((flat, enums))
    }

    #[test]
    fn numbers_match_the_c_header() {
        let (flat, enums) = match header() {
            Some(h) => h,
            None => return,
        };
        let limits: [(&str, i64); 8] = [
            ("MEMRA_MAX_PAIRS", crate::MAX_PAIRS as i64),
            ("MEMRA_MAX_LAYERS", crate::MAX_LAYERS as i64),
            ("MEMRA_NO_FAULT", crate::NO_FAULT as i64),
            ("MEMRA_ROUTE_MAX_EXPERT", crate::ROUTE_MAX_EXPERT as i64),
            ("MEMRA_ROUTE_MAX_TOP_K", crate::ROUTE_MAX_TOP_K as i64),
            ("MEMRA_ROUTE_MAX_GROUPS", crate::ROUTE_MAX_GROUPS as i64),
            ("MEMRA_LAYOUT_MAX_EXPERT", crate::LAYOUT_MAX_EXPERT as i64),
            ("MEMRA_LAYOUT_ONE_LAUNCH", crate::LAYOUT_ONE_LAUNCH as i64),
        ];
        for (c, ours) in limits {
            assert_eq!(flat.get(c), Some(&ours), "{c}");
        }
        let bound: [(&str, &[(&str, c_int)]); 8] = [
            (
                "memra_route_scoring",
                &[
                    ("MEMRA_ROUTE_SOFTMAX", MEMRA_ROUTE_SOFTMAX),
                    ("MEMRA_ROUTE_SIGMOID", MEMRA_ROUTE_SIGMOID),
                ],
            ),
            (
                "memra_logits_dtype",
                &[
                    ("MEMRA_LOGITS_F32", MEMRA_LOGITS_F32),
                    ("MEMRA_LOGITS_BF16", MEMRA_LOGITS_BF16),
                    ("MEMRA_LOGITS_F16", MEMRA_LOGITS_F16),
                ],
            ),
            (
                "memra_group_scoring",
                &[
                    ("MEMRA_GROUP_AUTO", MEMRA_GROUP_AUTO),
                    ("MEMRA_GROUP_TOP2_SUM", MEMRA_GROUP_TOP2_SUM),
                    ("MEMRA_GROUP_MAX", MEMRA_GROUP_MAX),
                ],
            ),
            (
                "memra_shared_rule",
                &[
                    ("MEMRA_SHARED_CONSTANT", MEMRA_SHARED_CONSTANT),
                    ("MEMRA_SHARED_ROUTED_SUM", MEMRA_SHARED_ROUTED_SUM),
                ],
            ),
            (
                "memra_count_dtype",
                &[
                    ("MEMRA_COUNT_I32", MEMRA_COUNT_I32),
                    ("MEMRA_COUNT_I64", MEMRA_COUNT_I64),
                ],
            ),
            (
                "memra_bias_dtype",
                &[
                    ("MEMRA_BIAS_F32", MEMRA_BIAS_F32),
                    ("MEMRA_BIAS_BF16", MEMRA_BIAS_BF16),
                ],
            ),
            (
                "memra_checked_call",
                &[
                    ("MEMRA_CALL_ROUTE_TABLES", MEMRA_CALL_ROUTE_TABLES),
                    ("MEMRA_CALL_ROUTE_TABLES_HOST", MEMRA_CALL_ROUTE_TABLES_HOST),
                    (
                        "MEMRA_CALL_ROUTE_PREPARE_LAYER",
                        MEMRA_CALL_ROUTE_PREPARE_LAYER,
                    ),
                    ("MEMRA_CALL_VROWS_TABLES", MEMRA_CALL_VROWS_TABLES),
                    ("MEMRA_CALL_VROWS_TABLES_EX", MEMRA_CALL_VROWS_TABLES_EX),
                    ("MEMRA_CALL_VROWS_TABLES_HOST", MEMRA_CALL_VROWS_TABLES_HOST),
                    (
                        "MEMRA_CALL_VROWS_TABLES_HOST_EX",
                        MEMRA_CALL_VROWS_TABLES_HOST_EX,
                    ),
                    (
                        "MEMRA_CALL_VROWS_PREPARE_LAYER",
                        MEMRA_CALL_VROWS_PREPARE_LAYER,
                    ),
                    ("MEMRA_CALL_LAYOUT_TABLES", MEMRA_CALL_LAYOUT_TABLES),
                    (
                        "MEMRA_CALL_LAYOUT_TABLES_HOST",
                        MEMRA_CALL_LAYOUT_TABLES_HOST,
                    ),
                    ("MEMRA_CALL_ROUTE_TABLES_EX", MEMRA_CALL_ROUTE_TABLES_EX),
                    (
                        "MEMRA_CALL_ROUTE_TABLES_HOST_EX",
                        MEMRA_CALL_ROUTE_TABLES_HOST_EX,
                    ),
                ],
            ),
            (
                "memra_log_level",
                &[
                    ("MEMRA_LOG_ERROR", MEMRA_LOG_ERROR),
                    ("MEMRA_LOG_WARNING", MEMRA_LOG_WARNING),
                    ("MEMRA_LOG_INFO", MEMRA_LOG_INFO),
                    ("MEMRA_LOG_DEBUG", MEMRA_LOG_DEBUG),
                ],
            ),
        ];
        for (e, members) in bound {
            for (m, ours) in members {
                assert_eq!(flat.get(*m), Some(&(*ours as i64)), "{e}.{m}");
            }
            let mut theirs = enums.get(e).cloned().unwrap_or_default();
            theirs.sort();
            let mut ours: Vec<String> = members.iter().map(|(m, _)| m.to_string()).collect();
            ours.sort();
            assert_eq!(theirs, ours, "{e}: the header's members and the crate's");
        }
        // The public enums reach C as those members.
        let spec = |s: crate::RouteSpec<'_>, d| s.raw(Arm::Host, d).unwrap();
        let base = crate::RouteSpec::new(8, 2);
        let v = |m: &str| flat[m] as c_int;
        assert_eq!(
            spec(base, crate::LogitsDtype::F32).scoring,
            v("MEMRA_ROUTE_SOFTMAX")
        );
        let sig = spec(
            base.scoring(crate::Scoring::Sigmoid),
            crate::LogitsDtype::F16,
        );
        assert_eq!(
            (sig.scoring, sig.logits_dtype),
            (v("MEMRA_ROUTE_SIGMOID"), v("MEMRA_LOGITS_F16"))
        );
        assert_eq!(
            spec(base, crate::LogitsDtype::Bf16).logits_dtype,
            v("MEMRA_LOGITS_BF16")
        );
        for (g, m) in [
            (None, "MEMRA_GROUP_AUTO"),
            (Some(crate::GroupScoring::Top2Sum), "MEMRA_GROUP_TOP2_SUM"),
            (Some(crate::GroupScoring::Max), "MEMRA_GROUP_MAX"),
        ] {
            let s = match g {
                Some(g) => base.group_scoring(g),
                None => base,
            };
            assert_eq!(spec(s, crate::LogitsDtype::F32).group_scoring, v(m), "{m}");
        }
        let b16 = [crate::Bf16(0); 8];
        let n64 = [3i64];
        let s = spec(
            base.bias_host(&b16)
                .shared_experts_routed_sum(1, 2.5)
                .n_real_host(&n64),
            crate::LogitsDtype::F32,
        );
        assert_eq!(
            (s.bias_dtype, s.shared_rule, s.n_real_dtype),
            (
                v("MEMRA_BIAS_BF16"),
                v("MEMRA_SHARED_ROUTED_SUM"),
                v("MEMRA_COUNT_I64")
            )
        );
        let s = spec(base.shared_experts(1, 1.0), crate::LogitsDtype::F32);
        assert_eq!(
            (s.bias_dtype, s.shared_rule, s.n_real_dtype),
            (
                v("MEMRA_BIAS_F32"),
                v("MEMRA_SHARED_CONSTANT"),
                v("MEMRA_COUNT_I32")
            )
        );
        // Every status: the variant of that name, both ways.
        let screaming = |name: String| {
            let mut out = String::new();
            for (i, ch) in name.chars().enumerate() {
                if ch.is_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        };
        let mut named = 0;
        for m in &enums["memra_status"] {
            let code = flat[m] as i32;
            let s = Status::from_code(code);
            match m.as_str() {
                "MEMRA_OK" => assert_eq!(code, 0),
                "MEMRA_STATUS_COUNT" => assert_eq!(s, Status::Other(code), "{m}"),
                _ => {
                    assert_eq!(format!("MEMRA_ERR_{}", screaming(format!("{s:?}"))), *m);
                    assert_eq!(s.code(), code, "{m}");
                    named += 1;
                }
            }
        }
        assert_eq!(named, 15, "every MEMRA_ERR_* has its Status");
        for (m, want) in [
            ("MEMRA_LOG_ERROR", LogLevel::Error),
            ("MEMRA_LOG_WARNING", LogLevel::Warning),
            ("MEMRA_LOG_INFO", LogLevel::Info),
            ("MEMRA_LOG_DEBUG", LogLevel::Debug),
        ] {
            assert_eq!(LogLevel::from_code(v(m)), want, "{m}");
        }
    }
}

#[cfg(test)]
mod floor {
    use super::*;

    #[test]
    fn a_library_without_an_entry_point_is_refused_by_name() {
        // The test process itself (the crate opens libmemra RTLD_LOCAL): an
        // object with no memra_* at all, as a library older than an entry
        // point has none of that name.
        let h = unsafe { dlopen(std::ptr::null(), RTLD_NOW) };
        assert!(!h.is_null());
        let err = match unsafe { resolve(h) } {
            Ok(_) => panic!("resolved a library with no memra_* symbols"),
            Err(e) => e,
        };
        assert!(
            err.contains("lacks memra_version") && err.contains("0.4"),
            "{err}"
        );
    }
}
