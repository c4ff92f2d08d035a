//! memra from Rust: device-built MoE "verify rows" pointer and scale tables,
//! routing (router logits to experts, weights and tables in one launch) and
//! the expert-sorted layout the expert GEMMs of larger batches read
//! ([`LayoutSpec`], in the routing launch itself with
//! [`RouteOut::with_layout`]), bit-identical to the host arithmetic, on a
//! serving engine's own device buffers.
//!
//! A thin, safe client of the C library (`libmemra.so.2`, opened with
//! `dlopen` at first use: `MEMRA_LIB`, else the repository's build, the
//! libdir `pkg-config memra` named at build time, then the loader path; see
//! [`library_path`]). The C library is the one implementation and the one
//! judge of a call (the crate asks it what a call would refuse before it
//! allocates or checks anything of its own); this crate adds ownership
//! (device buffers free themselves, an engine lives as long as its
//! buffers), checked lengths and `Result`s.
//!
//! ```no_run
//! use memra::Engine;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let e = Engine::new(0)?;
//! let sel = e.htod_i32(&[0, 3, 7, 1])?;
//! let selw = e.htod(&[0.5, 0.25, 1.0, 0.125])?;
//! let mut ptrs = e.htod_u64(&[0; 12])?;
//! let mut scl = e.htod(&[0.0; 12])?;
//! let bases = (0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000);
//! let strides = (24 << 20, 24 << 20, 48 << 20);
//! e.moe_vrows_tables_from_sel(&sel, &selw, 0, None, bases, strides, 4, &mut ptrs, &mut scl)?;
//! let (ptrs, scl) = (e.dtoh_u64(&ptrs)?, e.dtoh(&scl)?);
//! # Ok(()) }
//! ```
//!
//! Routing on device memory the engine owns (addresses from cudarc or its
//! own allocator), and the same on the host:
//!
//! ```no_run
//! use memra::{Bf16, DevSlice, DevSliceMut, Engine, Layer, RouteOut, RouteSpec, Scoring, Slabs};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let (logits_ptr, bias_ptr, sel_ptr, selw_ptr, ptrs_ptr, scl_ptr) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
//! # let stream = &memra::Stream::legacy();
//! # let n_tokens = 4;
//! let e = Engine::new(0)?;
//! let n = n_tokens * 8; // pairs: tokens * top_k
//! // Safety: each address is live device memory of this length, ours
//! // until the stream has passed the launch.
//! let (logits, bias, out) = unsafe {
//!     (
//!         DevSlice::<Bf16>::from_raw(logits_ptr, n_tokens * 256),
//!         DevSlice::<f32>::from_raw(bias_ptr, 256),
//!         RouteOut::new(
//!             DevSliceMut::<i32>::from_raw(sel_ptr, n),
//!             DevSliceMut::<f32>::from_raw(selw_ptr, n),
//!             DevSliceMut::<u64>::from_raw(ptrs_ptr, 3 * n),
//!             DevSliceMut::<f32>::from_raw(scl_ptr, 3 * n),
//!         ),
//!     )
//! };
//! // DeepSeek-V3: sigmoid, 8 groups (4 kept, scored by their top two, as
//! // vLLM does with a bias), top 8, the bias read in place.
//! let spec = RouteSpec::new(256, 8)
//!     .scoring(Scoring::Sigmoid)
//!     .groups(8, 4)
//!     .bias_device(bias)
//!     .renormalize(true)
//!     .routed_scaling_factor(2.5);
//! let layer = Layer::new(3, Slabs::new((0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000),
//!                                      (24 << 20, 24 << 20, 48 << 20)));
//! e.route_prepare_layer(layer.il, &spec, layer.macros, stream)?; // before capturing
//! e.route_tables(stream, logits, n_tokens, &spec, &layer, out)?; // one launch
//! let faults = e.faults(stream, true)?;
//! # Ok(()) }
//! ```

mod copy;
mod dev;
mod error;
mod ffi;
mod find;
mod judge;
mod layout;
mod log;
mod route;
mod spec;
mod stream;
mod tables;

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use crate::error::Status as St;

pub use dev::{Bf16, DevSlice, DevSliceMut, Pod, F16};
pub use error::{Error, Result, Status};
pub use ffi::{Faults, Slabs};
pub use layout::{
    layout_tables_host, layout_tables_host_load, HostLayout, LayoutOut, LayoutSizes, LayoutSpec,
};
pub use log::{clear_log_callback, set_log_callback, LogLevel};
pub use route::{route_tables_host, route_tables_host_layout, HostRoute, RouteOut};
pub use spec::{
    BiasDtype, BiasElem, CountElem, GroupScoring, LogitsDtype, LogitsElem, RouteSpec, Scoring,
    VrowsOptions,
};
pub use stream::{CuStream, Stream, STREAM_LEGACY, STREAM_PER_THREAD};
pub use tables::{vrows_tables_host_ex, Layer};

// memra.h's limits (tests hold each to the header). The library judges
// them; they are here for sizing buffers.
/// `MEMRA_MAX_PAIRS`: the most (token, expert) pairs one call takes.
pub const MAX_PAIRS: usize = 1 << 28;
/// `MEMRA_MAX_LAYERS`: layer indices are `0..MAX_LAYERS`.
pub const MAX_LAYERS: u32 = 65536;
/// `MEMRA_NO_FAULT`: `Faults::first_pair` when no fault was seen.
pub const NO_FAULT: u32 = u32::MAX;
/// `MEMRA_ROUTE_MAX_EXPERT`: routed experts a routing spec may have.
pub const ROUTE_MAX_EXPERT: u32 = 1024;
/// `MEMRA_ROUTE_MAX_TOP_K`: a token's pairs (`top_k + n_shared`) at most.
pub const ROUTE_MAX_TOP_K: u32 = 32;
/// `MEMRA_ROUTE_MAX_GROUPS`: expert groups at most.
pub const ROUTE_MAX_GROUPS: u32 = 32;
/// `MEMRA_LAYOUT_MAX_EXPERT`: a layout's experts at most (the routed ones
/// and the shared ones).
pub const LAYOUT_MAX_EXPERT: u32 = ROUTE_MAX_EXPERT + ROUTE_MAX_TOP_K;
/// `MEMRA_LAYOUT_ONE_LAUNCH`: pairs a device layout lays out in one launch
/// (with no workspace); above, three launches and a workspace.
pub const LAYOUT_ONE_LAUNCH: usize = 16384;

/// Per-expert macro scales, one plane each for gate, up and down.
pub type Macros<'a> = Option<(&'a [f32], &'a [f32], &'a [f32])>;

fn check(status: c_int) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    let lib = ffi::lib()?;
    let mut message = unsafe { ffi::cstr((lib.memra_last_error)()) };
    if message.is_empty() {
        message = unsafe { ffi::cstr((lib.memra_status_string)(status)) };
    }
    Err(Error::Call {
        status: Status::from_code(status),
        code: status,
        message,
    })
}

/// A host arm's status: the faults it counts (ids out of range, non-finite
/// scales) are in `out`, which it writes in full either way, so they are not
/// errors; any other status is.
fn host_checked<T>(status: c_int, out: T) -> Result<T> {
    match Status::from_code(status) {
        _ if status == 0 => Ok(out),
        Status::ExpertRange | Status::NonfiniteScale => Ok(out),
        _ => check(status).map(|_| out),
    }
}

/// The library's version, `major * 10000 + minor * 100 + patch`.
pub fn version() -> Result<u32> {
    Ok(unsafe { (ffi::lib()?.memra_version)() })
}

/// The file libmemra was opened from: `MEMRA_LIB` when set, else the first
/// of the repository's build, pkg-config's libdir and the loader path that
/// holds a usable one (the crate's README says under which rule). An
/// error, one line long, names each place tried and why it failed.
pub fn library_path() -> Result<String> {
    ffi::lib_and_path().map(|(_, p)| p)
}

/// How many usable NVRTC libraries memra has loaded (finding them on the
/// first call, loading candidates in order until one is usable).
pub fn nvrtc_available() -> Result<usize> {
    let mut n: c_int = 0;
    check(unsafe { (ffi::lib()?.memra_nvrtc_available)(&mut n) })?;
    Ok(n as usize)
}

/// Number of CUDA devices (0 where none is visible).
pub fn device_count() -> Result<usize> {
    let mut n: c_int = 0;
    check(unsafe { (ffi::lib()?.memra_device_count)(&mut n) })?;
    Ok(n as usize)
}

struct Inner {
    ptr: ffi::EnginePtr,
    /// The device: an engine's buffers and stream are refused by the
    /// engines of other devices (engines of one device share its primary
    /// context, and so its memory).
    ordinal: i32,
    /// Expert count for calls without macro planes (see `set_expert_count`).
    experts: std::sync::atomic::AtomicU32,
}

// Safety: every memra call is thread-safe; the handle is destroyed once, by
// the last owner (the engine or one of its buffers).
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::lib() {
            unsafe { (lib.memra_engine_destroy)(self.ptr) }
        }
    }
}

/// One GPU. Retains the device's primary context (shared with the rest of
/// the process). Cheap to clone (shared); freed when the engine and all its
/// buffers are gone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// The engine's device, for `e.ctx().name()` (the seed engine's call, which
/// its gate makes verbatim).
pub struct Ctx<'a> {
    engine: &'a Engine,
}

impl Ctx<'_> {
    /// The device's name, e.g. "NVIDIA H200".
    pub fn name(&self) -> Result<String> {
        let info = self.engine.info()?;
        // (the library writes a NUL-terminated name into the array)
        Ok(unsafe { ffi::cstr(info.name.as_ptr()) })
    }

    /// The SM, `10 * major + minor` (90 on an H200).
    pub fn sm(&self) -> Result<u32> {
        Ok(self.engine.info()?.sm as u32)
    }
}

/// A device buffer of `len` elements of `T`, freed on drop. It knows its
/// engine: a call of an engine on another device refuses it
/// (`Status::InvalidArg`), where C would launch on memory that device
/// cannot reach.
///
/// A launch borrows the buffer only until it returns, while the kernel may
/// still be queued: the drop frees it with `cuMemFree`, which for memory
/// from `cuMemAlloc` waits for the device's outstanding work (CUDA: "may
/// perform implicit synchronization"; every driver memra runs on does).
/// Where you would rather not lean on that, `sync` the stream you launched
/// on before the buffer goes. A CUDA graph captured with a call that used
/// the buffer keeps its address: destroy the graph before the buffer drops
/// (see [`Stream::from_raw`]).
pub struct DeviceBuffer<T> {
    engine: Arc<Inner>,
    ptr: ffi::DevPtr,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> DeviceBuffer<T> {
    /// The device address (a `CUdeviceptr`).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> DeviceBuffer<T> {
    /// The buffer, read by a call.
    pub fn slice(&self) -> DevSlice<'_, T> {
        // memra allocated it; it lives (and so does its engine) as long as
        // the borrow.
        DevSlice::of_buffer(self.ptr, self.len, self.engine.ordinal)
    }

    /// The buffer, written by a call.
    pub fn slice_mut(&mut self) -> DevSliceMut<'_, T> {
        DevSliceMut::of_buffer(self.ptr, self.len, self.engine.ordinal)
    }
}

impl<'a, T> From<&'a DeviceBuffer<T>> for DevSlice<'a, T> {
    fn from(b: &'a DeviceBuffer<T>) -> DevSlice<'a, T> {
        b.slice()
    }
}

impl<'a, T> From<&'a mut DeviceBuffer<T>> for DevSliceMut<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> DevSliceMut<'a, T> {
        b.slice_mut()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if let Ok(lib) = ffi::lib() {
            unsafe { (lib.memra_free)(self.engine.ptr, self.ptr) };
        }
    }
}

/// The expert count a call implies: the planes' length (all three equal),
/// else `fallback`.
fn experts_of(m: Macros<'_>, fallback: u32) -> Result<u32> {
    match m {
        Some((g, u, d)) => {
            if g.len() != u.len() || g.len() != d.len() {
                return Err(Error::arg(
                    Status::InvalidArg,
                    format!(
                        "macros: the planes hold {}, {} and {} experts; they must be equal",
                        g.len(),
                        u.len(),
                        d.len()
                    ),
                ));
            }
            u32::try_from(g.len())
                .map_err(|_| Error::arg(Status::InvalidArg, format!("macros: {} experts", g.len())))
        }
        None => Ok(fallback),
    }
}

/// Without macro planes and without `set_expert_count`, the largest count
/// whose rows are all addressable: every id is then checked to be
/// non-negative and its pointers never wrap past 2^64.
fn addressable_experts(slabs: &ffi::Slabs) -> u32 {
    let mut n = i32::MAX as u64 + 1;
    for k in 0..3 {
        if slabs.stride[k] > 0 {
            // (base 0, stride 1: every row fits, and the count is 2^64,
            // which no u64 holds: saturated, then capped by n)
            n = n.min(((u64::MAX - slabs.base[k]) / slabs.stride[k]).saturating_add(1));
        }
    }
    n.max(1) as u32
}

impl Engine {
    /// An engine on device `ordinal`.
    pub fn new(ordinal: usize) -> Result<Engine> {
        let lib = ffi::lib()?;
        let ordinal = c_int::try_from(ordinal)
            .map_err(|_| Error::arg(Status::InvalidArg, format!("ordinal {ordinal}")))?;
        let mut ptr: ffi::EnginePtr = std::ptr::null_mut();
        check(unsafe { (lib.memra_engine_create)(ordinal, &mut ptr) })?;
        Ok(Engine {
            inner: Arc::new(Inner {
                ptr,
                ordinal,
                experts: std::sync::atomic::AtomicU32::new(0),
            }),
        })
    }

    /// Refuses memory of another device's engine (`what` names it).
    pub(crate) fn check_home(&self, what: &str, home: Option<i32>) -> Result<()> {
        match home {
            Some(h) if h != self.inner.ordinal => Err(Error::arg(
                St::InvalidArg,
                format!(
                    "{what} is a buffer of the engine on device {h}, not of this engine's device {}",
                    self.inner.ordinal
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The raw handle of `stream` for this engine's calls.
    pub(crate) fn raw_stream(&self, stream: &Stream) -> Result<CuStream> {
        stream.raw_for(self.inner.ordinal)
    }

    fn own_stream(&self) -> Result<CuStream> {
        let mut s: ffi::Stream = std::ptr::null_mut();
        check(unsafe { (ffi::lib()?.memra_engine_stream)(self.inner.ptr, &mut s) })?;
        Ok(s)
    }

    fn info(&self) -> Result<ffi::EngineInfo> {
        let lib = ffi::lib()?;
        let mut info: ffi::EngineInfo = unsafe { std::mem::zeroed() };
        check(unsafe { (lib.memra_engine_get_info)(self.inner.ptr, &mut info) })?;
        Ok(info)
    }

    /// The device this engine runs on.
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx { engine: self }
    }

    /// The engine's own non-blocking stream, on which `htod`, `dtoh` and
    /// `moe_vrows_tables_from_sel` are ordered. It keeps the engine alive.
    pub fn stream(&self) -> Result<Stream> {
        Ok(Stream::of_engine(self.own_stream()?, self.inner.clone()))
    }

    /// Waits for the work queued on `stream`.
    pub fn sync(&self, stream: &Stream) -> Result<()> {
        let s = self.raw_stream(stream)?;
        check(unsafe { (ffi::lib()?.memra_sync)(self.inner.ptr, s) })
    }

    /// Compiles (or loads from the kernel cache) the table kernel now.
    pub fn warmup(&self) -> Result<()> {
        check(unsafe { (ffi::lib()?.memra_engine_warmup)(self.inner.ptr) })
    }

    /// The expert count that calls without macro planes check ids against.
    pub fn set_expert_count(&self, n_expert: u32) {
        self.inner
            .experts
            .store(n_expert, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads the fault word after the work queued on `stream` (where the
    /// launches went; `self.stream()` is the engine's own), returning when
    /// it has; `reset` clears it in the same step on the device.
    pub fn faults(&self, stream: &Stream, reset: bool) -> Result<Faults> {
        let s = self.raw_stream(stream)?;
        let mut f = Faults::default();
        check(unsafe {
            (ffi::lib()?.memra_engine_faults)(self.inner.ptr, s, &mut f, reset as c_int)
        })?;
        Ok(f)
    }

    fn buffer_of<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let lib = ffi::lib()?;
        let buf = self.alloc::<T>(data.len())?;
        // Ordered on the engine's stream, where the stream-less calls run.
        check(unsafe {
            (lib.memra_upload_on)(
                self.inner.ptr,
                buf.ptr,
                data.as_ptr() as *const c_void,
                std::mem::size_of_val(data),
                self.own_stream()?,
            )
        })?;
        Ok(buf)
    }

    fn vec_of<T: Copy + Default>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
        self.check_home("buf", Some(buf.engine.ordinal))?;
        let mut out = vec![T::default(); buf.len];
        check(unsafe {
            (ffi::lib()?.memra_download_on)(
                self.inner.ptr,
                out.as_mut_ptr() as *mut c_void,
                buf.ptr,
                std::mem::size_of_val(out.as_slice()),
                self.own_stream()?,
            )
        })?;
        Ok(out)
    }

    // The seed engine's API: its own gate (tests/vrows_dev_tables.rs) calls
    // these names and must run verbatim, so they stay, built on the 0.3
    // calls (memra_upload_on, memra_download_on, memra_vrows_tables).
    /// A new device buffer holding `data` (complete on return).
    pub fn htod(&self, data: &[f32]) -> Result<DeviceBuffer<f32>> {
        self.buffer_of(data)
    }
    pub fn htod_i32(&self, data: &[i32]) -> Result<DeviceBuffer<i32>> {
        self.buffer_of(data)
    }
    pub fn htod_u64(&self, data: &[u64]) -> Result<DeviceBuffer<u64>> {
        self.buffer_of(data)
    }

    /// The buffer's contents (after everything queued on the engine's stream).
    pub fn dtoh(&self, buf: &DeviceBuffer<f32>) -> Result<Vec<f32>> {
        self.vec_of(buf)
    }
    pub fn dtoh_i32(&self, buf: &DeviceBuffer<i32>) -> Result<Vec<i32>> {
        self.vec_of(buf)
    }
    pub fn dtoh_u64(&self, buf: &DeviceBuffer<u64>) -> Result<Vec<u64>> {
        self.vec_of(buf)
    }

    /// Mirrors layer `il`'s macro planes now (call before capturing a graph).
    pub fn prepare_layer(&self, il: u16, macros: Macros<'_>, stream: &Stream) -> Result<()> {
        let stream = self.raw_stream(stream)?;
        let n = experts_of(macros, 0)?;
        let m = tables::macros_of(macros);
        check(unsafe {
            (ffi::lib()?.memra_vrows_prepare_layer)(
                self.inner.ptr,
                il as c_int,
                n,
                tables::opt_ptr(&m),
                stream,
            )
        })
    }

    // The seed engine's call (its gate calls it verbatim), on memra_vrows_tables.
    /// The verify-rows tables for `n_pairs` pairs, built on the device in
    /// one launch on the engine's own stream (so `dtoh` after it sees them).
    /// `ptrs` holds 3 * n_pairs pointers and `scl` 3 * n_pairs scales,
    /// plane-major (gate, up, down). The expert count is the macro planes'
    /// length; without planes, `set_expert_count`'s, else the largest count
    /// whose rows all lie below 2^64 in every slab (at most 2^31): an id
    /// then counts as out of range only when negative or past that, so set
    /// the count to have ids past your experts counted. Out-of-range ids
    /// and non-finite scales are counted in `faults()`, not returned.
    #[allow(clippy::too_many_arguments)] // allow: the seed's call shape, one knob per axis
    pub fn moe_vrows_tables_from_sel(
        &self,
        sel: &DeviceBuffer<i32>,
        selw: &DeviceBuffer<f32>,
        il: u16,
        macros: Macros<'_>,
        bases: (u64, u64, u64),
        strides: (usize, usize, usize),
        n_pairs: usize,
        ptrs: &mut DeviceBuffer<u64>,
        scl: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        let s = self.stream()?;
        self.moe_vrows_tables_from_sel_on(
            &s, sel, selw, il, macros, bases, strides, n_pairs, ptrs, scl,
        )
    }

    /// As `moe_vrows_tables_from_sel`, on a stream of the caller's. Never
    /// synchronises.
    #[allow(clippy::too_many_arguments)] // allow: the seed's call shape plus the stream
    pub fn moe_vrows_tables_from_sel_on(
        &self,
        stream: &Stream,
        sel: &DeviceBuffer<i32>,
        selw: &DeviceBuffer<f32>,
        il: u16,
        macros: Macros<'_>,
        bases: (u64, u64, u64),
        strides: (usize, usize, usize),
        n_pairs: usize,
        ptrs: &mut DeviceBuffer<u64>,
        scl: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        let stream = self.raw_stream(stream)?;
        let n = tables::u32_of(n_pairs, "n_pairs", u32::MAX as usize)?;
        let slabs = Slabs::new(bases, strides);
        let set = self
            .inner
            .experts
            .load(std::sync::atomic::Ordering::Relaxed);
        let fallback = if set > 0 {
            set
        } else {
            addressable_experts(&slabs)
        };
        let n_expert = experts_of(macros, fallback)?;
        let m = tables::macros_of(macros);
        judge::vrows(
            ffi::abi::MEMRA_CALL_VROWS_TABLES,
            sel.ptr,
            selw.ptr,
            n,
            n_expert,
            il as c_int,
            &m,
            &slabs,
            None,
            ptrs.ptr,
            scl.ptr,
        )?;
        // Judged: n_pairs is in [1, MAX_PAIRS].
        let why = format!("n_pairs = {n_pairs}");
        for (what, len, need, home) in [
            ("sel", sel.len, n_pairs, sel.engine.ordinal),
            ("selw", selw.len, n_pairs, selw.engine.ordinal),
            ("ptrs", ptrs.len, 3 * n_pairs, ptrs.engine.ordinal),
            ("scl", scl.len, 3 * n_pairs, scl.engine.ordinal),
        ] {
            self.check_home(what, Some(home))?;
            dev::need(what, len, need, &why)?;
        }
        check(unsafe {
            (ffi::lib()?.memra_vrows_tables)(
                self.inner.ptr,
                sel.ptr,
                selw.ptr,
                n,
                n_expert,
                il as c_int,
                tables::opt_ptr(&m),
                &slabs,
                ptrs.ptr,
                scl.ptr,
                stream,
            )
        })
    }
}

/// What the host arm wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTables {
    /// 3 * n_pairs pointers, plane-major.
    pub ptrs: Vec<u64>,
    /// 3 * n_pairs scales, plane-major.
    pub scl: Vec<f32>,
    /// Out-of-range ids and non-finite scales seen (the tables are written
    /// in full either way).
    pub faults: Faults,
}

impl HostTables {
    /// The tables of `n_pairs` pairs, for a host arm to write.
    fn zeroed(n_pairs: usize) -> HostTables {
        HostTables {
            ptrs: vec![0; 3 * n_pairs],
            scl: vec![0.0; 3 * n_pairs],
            faults: Faults::default(),
        }
    }
}

/// The reference arithmetic on host slices: the same tables the device arm
/// builds, bit for bit. Argument errors are `Err`; faulting pairs are not
/// (see `HostTables::faults`).
pub fn vrows_tables_host(
    sel: &[i32],
    selw: &[f32],
    n_expert: u32,
    macros: Macros<'_>,
    bases: (u64, u64, u64),
    strides: (usize, usize, usize),
) -> Result<HostTables> {
    let n = sel.len();
    let n32 = tables::u32_of(n, "n_pairs (sel.len())", u32::MAX as usize)?;
    let slabs = Slabs::new(bases, strides);
    let m = tables::macros_of(macros);
    tables::judge_host_tables(
        ffi::abi::MEMRA_CALL_VROWS_TABLES_HOST,
        sel,
        selw,
        n32,
        n_expert,
        &m,
        &slabs,
        None,
    )?;
    if let Some((g, u, d)) = macros {
        let short = [g.len(), u.len(), d.len()].into_iter().min().unwrap_or(0);
        if (short as u64) < n_expert as u64 {
            return Err(Error::arg(
                Status::InvalidArg,
                format!("macros: a plane holds {short} scales, n_expert is {n_expert}"),
            ));
        }
    }
    let mut out = HostTables::zeroed(n);
    let st = unsafe {
        (ffi::lib()?.memra_vrows_tables_host)(
            sel.as_ptr(),
            selw.as_ptr(),
            n32,
            n_expert,
            tables::opt_ptr(&m),
            &slabs,
            out.ptrs.as_mut_ptr(),
            out.scl.as_mut_ptr(),
            &mut out.faults,
        )
    };
    host_checked(st, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addressable_experts_never_overflows() {
        // base 0, stride 1: 2^64 rows fit, a count no u64 holds (it
        // panicked in a debug build, and wrapped to 1 in a release one)
        let whole = ffi::Slabs {
            base: [0; 3],
            stride: [1, 0, 0],
        };
        assert_eq!(addressable_experts(&whole), 1 << 31);
        let near_top = ffi::Slabs {
            base: [u64::MAX - 9, 0, 0],
            stride: [5, 0, 0],
        };
        assert_eq!(addressable_experts(&near_top), 2); // rows at +0 and +5
    }
}
