//! The library's judge of a call (`memra_route_check(_ex)`,
//! `memra_vrows_check`, `memra_layout_check`): what the call would refuse,
//! and its message, without making it. The crate asks it before it
//! allocates an output or checks what only it knows (slice lengths, which
//! memory an address is in, whose engine a buffer is), so every rule of the
//! library's is refused by the library, in its words, and the crate states
//! none of them again. Addresses the crate has not allocated yet are
//! `abi::STAND_IN`: only their presence and alignment are judged.

use std::os::raw::c_int;

use crate::error::Result;
use crate::ffi::{self, Layout, LayoutSpec, Macros, RouteSpec, Slabs, VrowsOptions};
use crate::tables::opt_ptr;
use crate::{check, route::RouteAddrs};

/// A routing call (`kind`: a `MEMRA_CALL_ROUTE_*`), with a layout for the
/// fused kinds.
#[allow(clippy::too_many_arguments)] // allow: the C judge's arguments, as the call's
pub(crate) fn route(
    kind: c_int,
    n_tokens: u32,
    spec: &RouteSpec,
    il: c_int,
    macros: &Option<Macros>,
    slabs: &Slabs,
    at: RouteAddrs,
    layout: Option<(&LayoutSpec, &Layout)>,
) -> Result<()> {
    let lib = ffi::lib()?;
    // The _ex judge without a layout is memra_route_check, kind for kind.
    let (ls, lo) = match layout {
        Some((ls, lo)) => (ls as *const LayoutSpec, lo as *const Layout),
        None => (std::ptr::null(), std::ptr::null()),
    };
    check(unsafe {
        (lib.memra_route_check_ex)(
            kind,
            at.logits,
            n_tokens,
            spec,
            il,
            opt_ptr(macros),
            slabs,
            at.sel,
            at.selw,
            at.ptrs,
            at.scl,
            ls,
            lo,
        )
    })
}

/// A table call (`kind`: a `MEMRA_CALL_VROWS_*`).
#[allow(clippy::too_many_arguments)] // allow: the C judge's arguments, as the call's
pub(crate) fn vrows(
    kind: c_int,
    sel: u64,
    selw: u64,
    n_pairs: u32,
    n_expert: u32,
    il: c_int,
    macros: &Option<Macros>,
    slabs: &Slabs,
    options: Option<&VrowsOptions>,
    ptrs: u64,
    scl: u64,
) -> Result<()> {
    let lib = ffi::lib()?;
    let o = options.map_or(std::ptr::null(), |o| o as *const VrowsOptions);
    check(unsafe {
        (lib.memra_vrows_check)(
            kind,
            sel,
            selw,
            n_pairs,
            n_expert,
            il,
            opt_ptr(macros),
            slabs,
            o,
            ptrs,
            scl,
        )
    })
}

/// A layout call (`kind`: a `MEMRA_CALL_LAYOUT_*`).
pub(crate) fn layout(
    kind: c_int,
    ids: u64,
    n_pairs: u32,
    spec: &LayoutSpec,
    out: &Layout,
) -> Result<()> {
    let f = ffi::lib()?.memra_layout_check;
    check(unsafe { f(kind, ids, n_pairs, spec, out) })
}
