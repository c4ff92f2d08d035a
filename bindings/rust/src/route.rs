//! Routing: router logits to `sel`, `selw` and the tables (and, asked, the
//! expert-sorted layout of `sel`), on the host (`memra_route_tables_host`,
//! `_host_ex`) or in one launch on the device (`memra_route_tables`,
//! `_ex`), bit for bit the same.

use std::os::raw::{c_int, c_void};

use crate::dev::{need, DevSlice, DevSliceMut};
use crate::error::{Error, Result, Status};
use crate::ffi::{self, abi};
use crate::layout::{HostLayout, HostLayoutBufs, LayoutOut, LayoutSpec};
use crate::spec::{Arm, LogitsElem, RouteSpec};
use crate::tables::{opt_ptr, planes, u32_of, Layer};
use crate::{check, host_checked, judge, Engine, Faults, Macros, Slabs, Stream};

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
/// (plane-major: the plane stride is `n_tokens * K`); with a layout (see
/// [`RouteOut::with_layout`]) the same call lays its `sel` out too.
pub struct RouteOut<'a> {
    pub sel: DevSliceMut<'a, i32>,
    pub selw: DevSliceMut<'a, f32>,
    pub ptrs: DevSliceMut<'a, u64>,
    pub scl: DevSliceMut<'a, f32>,
    /// The expert-sorted layout of `sel`, written by the same call.
    pub layout: Option<(LayoutSpec<'a>, LayoutOut<'a>)>,
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
            layout: None,
        }
    }

    /// Also the expert-sorted layout of the call's `sel`
    /// (`memra_route_tables_ex`): in the routing launch itself up to
    /// `LAYOUT_ONE_LAUNCH` pairs, in three launches after it above (give
    /// `out` a workspace). `spec`'s experts are the routing's `n_expert +
    /// n_shared` (`RouteSpec::layout_experts()`); it has no map of its own:
    /// the routing spec's labels the blocks, as the tables place the pairs
    /// (a shared expert's label is its slot `n_local + i`). Padding rows
    /// are in no run. A layer's calls with a layout must not overlap in
    /// time (the engine keeps a count per layer that the launch's blocks
    /// share); `Engine::layout_prepare` before capturing a graph.
    pub fn with_layout(mut self, spec: &LayoutSpec<'a>, out: LayoutOut<'a>) -> Self {
        self.layout = Some((*spec, out));
        self
    }
}

/// A routing call's addresses, as its judge takes them.
#[derive(Clone, Copy)]
pub(crate) struct RouteAddrs {
    pub logits: u64,
    pub sel: u64,
    pub selw: u64,
    pub ptrs: u64,
    pub scl: u64,
}

impl RouteAddrs {
    /// Logits at `logits`, the outputs not allocated yet.
    fn stand_in(logits: u64) -> RouteAddrs {
        let s = abi::STAND_IN;
        RouteAddrs {
            logits,
            sel: s,
            selw: s,
            ptrs: s,
            scl: s,
        }
    }
}

/// What the host arm gets before it allocates: the library's judgement of
/// the spec and macros (no tokens), then of the whole call (the token
/// count, the slabs) at stand-in output addresses; between them, what
/// only the crate knows (the logits' length a multiple of n_expert).
/// Returns n_tokens.
fn host_judged<L: LogitsElem>(
    logits: &[L],
    raw: &ffi::RouteSpec,
    m: &Option<ffi::Macros>,
    slabs: &Slabs,
    kind: c_int,
    layout: Option<(&ffi::LayoutSpec, &ffi::Layout)>,
) -> Result<u32> {
    let no = RouteAddrs::stand_in(0);
    judge::route(kind, 0, raw, 0, m, slabs, no, layout)?;
    let n_expert = raw.n_expert as usize;
    if logits.len() % n_expert != 0 {
        return Err(Error::arg(
            Status::InvalidArg,
            format!(
                "logits hold {} values, not a multiple of n_expert = {n_expert}",
                logits.len()
            ),
        ));
    }
    let nt = u32_of(
        logits.len() / n_expert,
        "n_tokens (logits.len() / n_expert)",
        u32::MAX as usize,
    )?;
    let at = RouteAddrs::stand_in(logits.as_ptr() as u64);
    judge::route(kind, nt, raw, 0, m, slabs, at, layout)?;
    Ok(nt)
}

fn host_out(k: u32, n: usize, faults: Faults) -> HostRoute {
    HostRoute {
        k: k as usize,
        sel: vec![0; n],
        selw: vec![0.0; n],
        ptrs: vec![0; 3 * n],
        scl: vec![0.0; 3 * n],
        faults,
    }
}

/// The routing rules on host slices (docs/routing.md): `logits` is
/// `[n_tokens, n_expert]` row-major, `f32`, [`Bf16`](crate::Bf16) or
/// [`F16`](crate::F16); `n_tokens` is its length over `n_expert` (empty
/// logits are a valid no-op). The macro planes hold one scale per slot
/// (`spec.n_slots()`). Addresses in the spec must be host memory (`bias`,
/// `bias_host`, `expert_map`, `n_real_host`). Argument errors are `Err`
/// with nothing computed; a non-finite token is not (see
/// `HostRoute::faults`).
pub fn route_tables_host<L: LogitsElem>(
    logits: &[L],
    spec: &RouteSpec<'_>,
    macros: Macros<'_>,
    slabs: Slabs,
) -> Result<HostRoute> {
    let lib = ffi::lib()?;
    let f = lib.memra_route_tables_host;
    let raw = spec.raw(Arm::Host, L::DTYPE)?;
    let m = planes(macros, spec.n_slots())?;
    let nt = host_judged(
        logits,
        &raw,
        &m,
        &slabs,
        abi::MEMRA_CALL_ROUTE_TABLES_HOST,
        None,
    )?;
    let k = spec.pairs_per_token();
    let n = nt as usize * k as usize; // judged: at most MAX_PAIRS
    let mut out = host_out(k, n, Faults::default());
    if nt == 0 {
        return Ok(out);
    }
    let st = unsafe {
        f(
            logits.as_ptr() as *const c_void,
            nt,
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
    host_checked(st, out)
}

/// The host arm of routing fused with its layout
/// (`memra_route_tables_host_ex`): `route_tables_host`, then the
/// expert-sorted layout of its `sel` over `layout.n_expert()` (the
/// routing's `n_expert + n_shared`) experts, labelled through the routing
/// spec's map; the same bytes as the device's `RouteOut::with_layout`.
pub fn route_tables_host_layout<L: LogitsElem>(
    logits: &[L],
    spec: &RouteSpec<'_>,
    macros: Macros<'_>,
    slabs: Slabs,
    layout: &LayoutSpec<'_>,
) -> Result<(HostRoute, HostLayout)> {
    let lib = ffi::lib()?;
    let f = lib.memra_route_tables_host_ex;
    let raw = spec.raw(Arm::Host, L::DTYPE)?;
    let m = planes(macros, spec.n_slots())?;
    let lraw = layout.raw(Arm::Host, abi::MEMRA_COUNT_I32)?;
    let stand_in = HostLayoutBufs::stand_in();
    let nt = host_judged(
        logits,
        &raw,
        &m,
        &slabs,
        abi::MEMRA_CALL_ROUTE_TABLES_HOST_EX,
        Some((&lraw, &stand_in)),
    )?;
    let k = spec.pairs_per_token();
    let n = nt as usize * k as usize;
    let mut out = host_out(k, n, Faults::default());
    let mut lay = HostLayoutBufs::new(&lraw, n)?;
    let lo = lay.raw();
    let st = unsafe {
        f(
            logits.as_ptr() as *const c_void,
            nt,
            &raw,
            opt_ptr(&m),
            &slabs,
            out.sel.as_mut_ptr(),
            out.selw.as_mut_ptr(),
            out.ptrs.as_mut_ptr(),
            out.scl.as_mut_ptr(),
            &mut out.faults,
            &lraw,
            &lo,
        )
    };
    host_checked(st, (out, lay.out))
}

impl Engine {
    /// Routing on the device in one launch on `stream` (capturable, never
    /// synchronises): `logits` hold at least `n_tokens * n_expert` values
    /// of the element type; the outputs are in `out` (with its layout, if
    /// it has one: `RouteOut::with_layout`). Any device memory: a memra
    /// buffer's `.slice()`, or `DevSlice::from_raw` of a pointer from
    /// cudarc or the engine's own allocator. The layer's macro planes and a
    /// host `bias` are mirrored for `layer.il` (call `route_prepare_layer`
    /// before capturing a graph); `bias_device`, `expert_map_device` and
    /// `n_real_device` are read in place. Faults go to `faults()`.
    /// `n_tokens = 0` is a valid no-op (with a layout: the empty layout).
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
        let stream = self.raw_stream(stream)?;
        let logits = logits.into();
        let raw = spec.raw(Arm::Device, L::DTYPE)?;
        let m = planes(layer.macros, spec.n_slots())?;
        let nt = u32_of(n_tokens, "n_tokens", u32::MAX as usize)?;
        let at = RouteAddrs {
            logits: logits.device_ptr(),
            sel: out.sel.device_ptr(),
            selw: out.selw.device_ptr(),
            ptrs: out.ptrs.device_ptr(),
            scl: out.scl.device_ptr(),
        };
        let il = layer.il as c_int;
        let laid = match &out.layout {
            Some((ls, lo)) => Some((ls.raw(Arm::Device, lo.load_dtype())?, lo.raw(), ls.home())),
            None => None,
        };
        let (kind, judged_layout) = match &laid {
            Some((ls, lo, _)) => (abi::MEMRA_CALL_ROUTE_TABLES_EX, Some((ls, lo))),
            None => (abi::MEMRA_CALL_ROUTE_TABLES, None),
        };
        judge::route(kind, nt, &raw, il, &m, &layer.slabs, at, judged_layout)?;
        // Judged: n_tokens * K is at most MAX_PAIRS.
        let n = n_tokens * spec.pairs_per_token() as usize;
        self.check_home("logits", logits.home())?;
        self.check_home("out.sel", out.sel.home())?;
        self.check_home("out.selw", out.selw.home())?;
        self.check_home("out.ptrs", out.ptrs.home())?;
        self.check_home("out.scl", out.scl.home())?;
        for (what, home) in spec.homes() {
            self.check_home(what, home)?;
        }
        let values = n_tokens * spec.n_expert() as usize;
        let why = format!("n_tokens = {n_tokens}");
        need("logits", logits.len(), values, &why)?;
        need("out.sel", out.sel.len(), n, &why)?;
        need("out.selw", out.selw.len(), n, &why)?;
        need("out.ptrs", out.ptrs.len(), 3 * n, &why)?;
        need("out.scl", out.scl.len(), 3 * n, &why)?;
        match (&out.layout, &laid) {
            (Some((_, lo)), Some((ls, lay, home))) => {
                self.check_home("layout spec: expert_map", *home)?;
                lo.check_for(self, ls, n)?;
                let f = lib.memra_route_tables_ex;
                check(unsafe {
                    f(
                        self.inner.ptr,
                        at.logits,
                        nt,
                        &raw,
                        il,
                        opt_ptr(&m),
                        &layer.slabs,
                        at.sel,
                        at.selw,
                        at.ptrs,
                        at.scl,
                        ls,
                        lay,
                        stream,
                    )
                })
            }
            _ => {
                let f = lib.memra_route_tables;
                check(unsafe {
                    f(
                        self.inner.ptr,
                        at.logits,
                        nt,
                        &raw,
                        il,
                        opt_ptr(&m),
                        &layer.slabs,
                        at.sel,
                        at.selw,
                        at.ptrs,
                        at.scl,
                        stream,
                    )
                })
            }
        }
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
        let f = lib.memra_route_prepare_layer;
        let raw = spec.raw_any_logits(Arm::Device)?;
        let m = planes(macros, spec.n_slots())?;
        check(unsafe { f(self.inner.ptr, il as c_int, &raw, opt_ptr(&m), stream) })
    }
}
