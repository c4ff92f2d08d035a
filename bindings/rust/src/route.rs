//! Routing: router logits to `sel`, `selw` and the tables, on the host
//! (`memra_route_tables_host`) or in one launch on the device
//! (`memra_route_tables`), bit for bit the same.

use std::os::raw::{c_int, c_void};

use crate::dev::{need, DevSlice, DevSliceMut};
use crate::error::{Error, Result, Status};
use crate::spec::{Arm, LogitsElem, RouteSpec};
use crate::tables::{opt_ptr, planes, u32_of, Layer};
use crate::{check, ffi, Engine, Faults, Macros, Slabs, Stream, MAX_PAIRS};

/// What the host arm wrote for `n_tokens` tokens of `K = top_k + n_shared`
/// pairs each (pair `t * K + j`).
#[derive(Clone, Debug, PartialEq)]
pub struct HostRoute {
    /// Pairs per token.
    pub k: usize,
    /// The experts (global ids), best first, then the shared experts.
    pub sel: Vec<i32>,
    /// Their weights.
    pub selw: Vec<f32>,
    /// 3 * n_tokens * K pointers, plane-major (gate, up, down).
    pub ptrs: Vec<u64>,
    /// 3 * n_tokens * K scales, plane-major.
    pub scl: Vec<f32>,
    /// Non-finite tokens and out-of-range map values seen, and the pairs
    /// other ranks hold (`not_local`); the outputs are written in full
    /// either way.
    pub faults: Faults,
}

/// Where a device routing call writes: `sel` and `selw` of at least
/// `n_tokens * K` elements, `ptrs` and `scl` of at least `3 * n_tokens * K`
/// (plane-major: the plane stride is `n_tokens * K`).
pub struct RouteOut<'a> {
    pub sel: DevSliceMut<'a, i32>,
    pub selw: DevSliceMut<'a, f32>,
    pub ptrs: DevSliceMut<'a, u64>,
    pub scl: DevSliceMut<'a, f32>,
}

impl<'a> RouteOut<'a> {
    pub fn new(
        sel: impl Into<DevSliceMut<'a, i32>>,
        selw: impl Into<DevSliceMut<'a, f32>>,
        ptrs: impl Into<DevSliceMut<'a, u64>>,
        scl: impl Into<DevSliceMut<'a, f32>>,
    ) -> RouteOut<'a> {
        RouteOut {
            sel: sel.into(),
            selw: selw.into(),
            ptrs: ptrs.into(),
            scl: scl.into(),
        }
    }
}

/// The pair count of `n_tokens` tokens, refused (before anything is
/// allocated) past what one call takes.
fn pairs(n_tokens: usize, k: u32) -> Result<usize> {
    match n_tokens.checked_mul(k as usize) {
        Some(n) if n <= MAX_PAIRS => Ok(n),
        _ => Err(Error::arg(
            Status::InvalidArg,
            format!(
                "n_tokens = {n_tokens}: n_tokens * (top_k + n_shared) must be at most {MAX_PAIRS}"
            ),
        )),
    }
}

/// The routing rules on host slices (docs/routing.md): `logits` is
/// `[n_tokens, n_expert]` row-major, `f32`, [`Bf16`](crate::Bf16) or
/// [`F16`](crate::F16); `n_tokens` is its length over `n_expert` (empty
/// logits are a valid no-op). The macro planes hold one scale per slot
/// (`spec.n_slots()`). Addresses in the spec must be host memory (`bias`,
/// `bias_host`, `expert_map`). Argument errors are `Err` with nothing
/// computed; a non-finite token is not (see `HostRoute::faults`).
pub fn route_tables_host<L: LogitsElem>(
    logits: &[L],
    spec: &RouteSpec<'_>,
    macros: Macros<'_>,
    slabs: Slabs,
) -> Result<HostRoute> {
    let lib = ffi::lib()?;
    // A library without the _ex calls reads 0.2's shorter spec.
    ffi::need(lib.memra_vrows_tables_host_ex, "memra_vrows_tables_host_ex")?;
    let f = ffi::need(lib.memra_route_tables_host, "memra_route_tables_host")?;
    let raw = spec.raw(Arm::Host, L::DTYPE)?;
    let m = planes(macros, spec.n_slots())?;
    // The spec first, with no tokens (nothing read or written), so a bad
    // one is the library's error before anything is allocated for it.
    let mut faults = Faults::default();
    let null = std::ptr::null_mut();
    check(unsafe {
        f(
            std::ptr::null(),
            0,
            &raw,
            opt_ptr(&m),
            &slabs,
            null as _,
            null as _,
            null as _,
            null as _,
            &mut faults,
        )
    })?;
    let n_expert = spec.n_expert() as usize;
    if logits.len() % n_expert != 0 {
        return Err(Error::arg(
            Status::InvalidArg,
            format!(
                "logits hold {} values, not a multiple of n_expert = {n_expert}",
                logits.len()
            ),
        ));
    }
    let n_tokens = logits.len() / n_expert;
    let k = spec.pairs_per_token();
    let n = pairs(n_tokens, k)?;
    let mut out = HostRoute {
        k: k as usize,
        sel: vec![0; n],
        selw: vec![0.0; n],
        ptrs: vec![0; 3 * n],
        scl: vec![0.0; 3 * n],
        faults,
    };
    if n_tokens == 0 {
        return Ok(out);
    }
    let st = unsafe {
        f(
            logits.as_ptr() as *const c_void,
            n_tokens as u32,
            &raw,
            opt_ptr(&m),
            &slabs,
            out.sel.as_mut_ptr(),
            out.selw.as_mut_ptr(),
            out.ptrs.as_mut_ptr(),
            out.scl.as_mut_ptr(),
            &mut out.faults,
        )
    };
    match Status::from_code(st) {
        _ if st == 0 => Ok(out),
        Status::ExpertRange | Status::NonfiniteScale => Ok(out),
        _ => check(st).map(|_| out),
    }
}

impl Engine {
    /// Routing on the device in one launch on `stream` (capturable, never
    /// synchronises): `logits` hold at least `n_tokens * n_expert` values
    /// of the element type; the outputs are in `out`. Any device memory: a
    /// memra buffer's `.slice()`, or `DevSlice::from_raw` of a pointer from
    /// cudarc or the engine's own allocator. The layer's macro planes and a
    /// host `bias` are mirrored for `layer.il` (call `route_prepare_layer`
    /// before capturing a graph); `bias_device` and `expert_map_device` are
    /// read in place. Faults go to `faults()`. `n_tokens = 0` is a valid
    /// no-op.
    pub fn route_tables<'a, L: LogitsElem>(
        &self,
        stream: &Stream,
        logits: impl Into<DevSlice<'a, L>>,
        n_tokens: usize,
        spec: &RouteSpec<'_>,
        layer: &Layer<'_>,
        out: RouteOut<'_>,
    ) -> Result<()> {
        let lib = ffi::lib()?;
        ffi::need(lib.memra_vrows_tables_host_ex, "memra_vrows_tables_host_ex")?;
        let f = ffi::need(lib.memra_route_tables, "memra_route_tables")?;
        let stream = self.raw_stream(stream)?;
        let logits = logits.into();
        self.check_home("logits", logits.home())?;
        self.check_home("out.sel", out.sel.home())?;
        self.check_home("out.selw", out.selw.home())?;
        self.check_home("out.ptrs", out.ptrs.home())?;
        self.check_home("out.scl", out.scl.home())?;
        for (what, home) in spec.homes() {
            self.check_home(what, home)?;
        }
        let raw = spec.raw(Arm::Device, L::DTYPE)?;
        let m = planes(layer.macros, spec.n_slots())?;
        let nt = u32_of(n_tokens, "n_tokens", u32::MAX as usize)?;
        let n = pairs(n_tokens, spec.pairs_per_token())?;
        let values = n_tokens.saturating_mul(spec.n_expert() as usize);
        let why = format!("n_tokens = {n_tokens}");
        need("logits", logits.len(), values, &why)?;
        need("out.sel", out.sel.len(), n, &why)?;
        need("out.selw", out.selw.len(), n, &why)?;
        need("out.ptrs", out.ptrs.len(), 3 * n, &why)?;
        need("out.scl", out.scl.len(), 3 * n, &why)?;
        check(unsafe {
            f(
                self.inner.ptr,
                logits.device_ptr(),
                nt,
                &raw,
                layer.il as c_int,
                opt_ptr(&m),
                &layer.slabs,
                out.sel.device_ptr(),
                out.selw.device_ptr(),
                out.ptrs.device_ptr(),
                out.scl.device_ptr(),
                stream,
            )
        })
    }

    /// Mirrors layer `il`'s macro planes and host `bias` for routing, and
    /// loads the routing kernels, now (upload ordered on `stream`): call it
    /// before capturing a graph. The logits' element type does not matter
    /// here.
    pub fn route_prepare_layer(
        &self,
        il: u16,
        spec: &RouteSpec<'_>,
        macros: Macros<'_>,
        stream: &Stream,
    ) -> Result<()> {
        let stream = self.raw_stream(stream)?;
        for (what, home) in spec.homes() {
            self.check_home(what, home)?;
        }
        let lib = ffi::lib()?;
        ffi::need(lib.memra_vrows_tables_host_ex, "memra_vrows_tables_host_ex")?;
        let f = ffi::need(lib.memra_route_prepare_layer, "memra_route_prepare_layer")?;
        let raw = spec.raw_any_logits(Arm::Device)?;
        let m = planes(macros, spec.n_slots())?;
        check(unsafe { f(self.inner.ptr, il as c_int, &raw, opt_ptr(&m), stream) })
    }
}
