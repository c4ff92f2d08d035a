//! The table calls with options (`memra_vrows_tables_host_ex`,
//! `memra_vrows_tables_ex`): expert parallelism and fused shared
//! experts, on any device memory.

use std::os::raw::c_int;

use crate::dev::{need, DevSlice, DevSliceMut};
use crate::error::{Error, Result, Status};
use crate::ffi::{self, abi};
use crate::spec::{Arm, VrowsOptions};
use crate::{check, host_checked, judge, Engine, HostTables, Macros, Slabs, Stream};

impl Slabs {
    /// Bases (device addresses) and strides (bytes per expert slot) of the
    /// gate, up and down slabs. Safe for any values: neither the host arm
    /// nor a kernel reads through them; they are only the arithmetic of the
    /// pointers written into the tables (refused where it would wrap past
    /// 2^64), which the expert GEMM you hand them to reads.
    pub fn new(bases: (u64, u64, u64), strides: (usize, usize, usize)) -> Slabs {
        Slabs {
            base: [bases.0, bases.1, bases.2],
            stride: [strides.0 as u64, strides.1 as u64, strides.2 as u64],
        }
    }
}

/// What a call needs of one MoE layer: its index `il` (the key of the
/// engine's mirror of its planes; one engine per model), its macro planes
/// (host slices of one scale per slot, or none) and its slabs.
#[derive(Clone, Copy, Debug)]
pub struct Layer<'a> {
    pub il: u16,
    pub macros: Macros<'a>,
    pub slabs: Slabs,
}

impl<'a> Layer<'a> {
    pub fn new(il: u16, slabs: Slabs) -> Layer<'a> {
        Layer {
            il,
            macros: None,
            slabs,
        }
    }

    /// The gate, up and down macro planes (each at least one scale per slot).
    pub fn macros(mut self, gate: &'a [f32], up: &'a [f32], down: &'a [f32]) -> Self {
        self.macros = Some((gate, up, down));
        self
    }
}

/// The C planes of `m`, as they are.
pub(crate) fn macros_of(m: Macros<'_>) -> Option<ffi::Macros> {
    m.map(|(g, u, d)| ffi::Macros {
        plane: [g.as_ptr(), u.as_ptr(), d.as_ptr()],
    })
}

/// The C planes, once each holds at least `n_slots` scales.
pub(crate) fn planes(m: Macros<'_>, n_slots: u64) -> Result<Option<ffi::Macros>> {
    if let Some((g, u, d)) = m {
        for (name, p) in [("gate", g), ("up", u), ("down", d)] {
            if (p.len() as u64) < n_slots {
                return Err(Error::arg(
                    Status::InvalidArg,
                    format!(
                        "macros: the {name} plane holds {} scales; the slabs hold {n_slots} slots",
                        p.len()
                    ),
                ));
            }
        }
    }
    Ok(macros_of(m))
}

pub(crate) fn opt_ptr<T>(o: &Option<T>) -> *const T {
    o.as_ref().map_or(std::ptr::null(), |m| m as *const T)
}

pub(crate) fn u32_of(n: usize, what: &str, max: usize) -> Result<u32> {
    if n > max {
        return Err(Error::arg(
            Status::InvalidArg,
            format!("{what} = {n} is above {max}"),
        ));
    }
    Ok(n as u32)
}

/// A host table call (`kind`: a `MEMRA_CALL_VROWS_TABLES_HOST*`) judged:
/// the library's rules first (the count, n_expert or the options, the
/// slabs), at stand-in table addresses, before 36 bytes a pair are
/// allocated; then what only the crate knows, one weight per id (the C call
/// takes one count for both).
#[allow(clippy::too_many_arguments)] // allow: the C judge's arguments, as the call's
pub(crate) fn judge_host_tables(
    kind: c_int,
    sel: &[i32],
    selw: &[f32],
    n_pairs: u32,
    n_expert: u32,
    macros: &Option<ffi::Macros>,
    slabs: &Slabs,
    options: Option<&ffi::VrowsOptions>,
) -> Result<()> {
    judge::vrows(
        kind,
        sel.as_ptr() as u64,
        selw.as_ptr() as u64,
        n_pairs,
        n_expert,
        0,
        macros,
        slabs,
        options,
        abi::STAND_IN,
        abi::STAND_IN,
    )?;
    if selw.len() != sel.len() {
        return Err(Error::arg(
            Status::InvalidArg,
            format!("selw holds {} weights for {} ids", selw.len(), sel.len()),
        ));
    }
    Ok(())
}

/// The host arm with options: the tables for `sel`/`selw` with an expert
/// map (a host slice) and shared experts. Empty `sel` is a valid no-op.
/// The macro planes hold one scale per slot (`options.n_slots(n_expert)`).
/// Argument errors are `Err` (nothing computed); faulting pairs are not
/// (see `HostTables::faults`, where `not_local` counts the pairs another
/// rank holds).
pub fn vrows_tables_host_ex(
    sel: &[i32],
    selw: &[f32],
    n_expert: u32,
    macros: Macros<'_>,
    slabs: Slabs,
    options: &VrowsOptions<'_>,
) -> Result<HostTables> {
    let lib = ffi::lib()?;
    let f = lib.memra_vrows_tables_host_ex;
    let n = sel.len();
    let n32 = u32_of(n, "n_pairs (sel.len())", u32::MAX as usize)?;
    let o = options.raw(Arm::Host, n_expert)?;
    let m = planes(macros, options.n_slots(n_expert))?;
    judge_host_tables(
        abi::MEMRA_CALL_VROWS_TABLES_HOST_EX,
        sel,
        selw,
        n32,
        n_expert,
        &m,
        &slabs,
        Some(&o),
    )?;
    let mut out = HostTables::zeroed(n);
    let st = unsafe {
        f(
            sel.as_ptr(),
            selw.as_ptr(),
            n32,
            n_expert,
            opt_ptr(&m),
            &slabs,
            &o,
            out.ptrs.as_mut_ptr(),
            out.scl.as_mut_ptr(),
            &mut out.faults,
        )
    };
    host_checked(st, out)
}

impl Engine {
    /// The tables on the device with options, in one launch on `stream`
    /// (never synchronises): `sel`, `selw` hold at least `n_pairs`
    /// elements, `ptrs` and `scl` at least `3 * n_pairs`; any device memory
    /// (a memra buffer's `.slice()`, or `DevSlice::from_raw` of an address
    /// from elsewhere). The map, if any, is a device array. Out-of-range
    /// ids and non-finite scales go to `faults()`. `n_pairs = 0` is a valid
    /// no-op.
    #[allow(clippy::too_many_arguments)] // allow: the C call's arguments, grouped where they belong together
    pub fn vrows_tables_ex<'a>(
        &self,
        stream: &Stream,
        sel: impl Into<DevSlice<'a, i32>>,
        selw: impl Into<DevSlice<'a, f32>>,
        n_pairs: usize,
        n_expert: u32,
        layer: &Layer<'_>,
        options: &VrowsOptions<'_>,
        ptrs: impl Into<DevSliceMut<'a, u64>>,
        scl: impl Into<DevSliceMut<'a, f32>>,
    ) -> Result<()> {
        let lib = ffi::lib()?;
        let f = lib.memra_vrows_tables_ex;
        let stream = self.raw_stream(stream)?;
        let (sel, selw, ptrs, scl) = (sel.into(), selw.into(), ptrs.into(), scl.into());
        let n = u32_of(n_pairs, "n_pairs", u32::MAX as usize)?;
        let o = options.raw(Arm::Device, n_expert)?;
        let m = planes(layer.macros, options.n_slots(n_expert))?;
        judge::vrows(
            abi::MEMRA_CALL_VROWS_TABLES_EX,
            sel.device_ptr(),
            selw.device_ptr(),
            n,
            n_expert,
            layer.il as c_int,
            &m,
            &layer.slabs,
            Some(&o),
            ptrs.device_ptr(),
            scl.device_ptr(),
        )?;
        self.check_home("sel", sel.home())?;
        self.check_home("selw", selw.home())?;
        self.check_home("ptrs", ptrs.home())?;
        self.check_home("scl", scl.home())?;
        self.check_home("options: expert_map", options.home())?;
        // Judged: n_pairs is at most MAX_PAIRS.
        let why = format!("n_pairs = {n_pairs}");
        need("sel", sel.len(), n_pairs, &why)?;
        need("selw", selw.len(), n_pairs, &why)?;
        need("ptrs", ptrs.len(), 3 * n_pairs, &why)?;
        need("scl", scl.len(), 3 * n_pairs, &why)?;
        check(unsafe {
            f(
                self.inner.ptr,
                sel.device_ptr(),
                selw.device_ptr(),
                n,
                n_expert,
                layer.il as c_int,
                opt_ptr(&m),
                &layer.slabs,
                &o,
                ptrs.device_ptr(),
                scl.device_ptr(),
                stream,
            )
        })
    }
}
