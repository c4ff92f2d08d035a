//! The expert-sorted layout (docs/layout-sorted.md): a batch's (token,
//! expert) pairs grouped by expert, each expert's run padded to the GEMM's
//! block size, as vLLM's and SGLang's `moe_align_block_size` define it, but
//! with each expert's pairs in ascending index (the same bytes every run,
//! on the device and the host). From ids made elsewhere
//! (`memra_layout_tables`, `_host`), or inside the routing launch
//! (`RouteOut::with_layout`, `memra_route_tables_ex`).

use std::os::raw::c_int;

use crate::dev::{need, DevSlice, DevSliceMut, Mem};
use crate::error::Result;
use crate::ffi::{self, abi};
use crate::spec::{Arm, CountElem, InPlace};
use crate::tables::u32_of;
use crate::{check, judge, Engine, Stream};

/// What a layout is of (`memra_layout_spec`): `n_expert` experts (ids
/// `0 .. n_expert`; any other id, a padding row's -1, is in no run), runs
/// padded to `block_size`, vLLM's `pad_sorted_ids`, and an optional map
/// labelling each block with its expert's local id (-1: another rank's).
///
/// ```
/// # use memra::LayoutSpec;
/// // vLLM's fused_moe with BLOCK_SIZE_M = 64 over 256 experts, rank 0 of 2.
/// let map: Vec<i32> = (0..256).map(|e| if e < 128 { e } else { -1 }).collect();
/// let spec = LayoutSpec::new(256, 64).expert_map(&map);
/// assert_eq!((spec.n_expert(), spec.block_size()), (256, 64));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LayoutSpec<'a> {
    n_expert: u32,
    block_size: u32,
    pad_sorted_ids: bool,
    map: Option<InPlace<'a>>,
}

/// vLLM's sizes of a layout (`memra_layout_sizes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutSizes {
    /// `sorted_ids`' length: `n_pairs + n_expert * (block_size - 1)`,
    /// rounded up to `block_size` with `pad_sorted_ids`, at most `n_pairs *
    /// block_size` when `n_pairs < n_expert`.
    pub sorted_len: usize,
    /// `expert_ids`' length: `sorted_len / block_size`, rounded up.
    pub n_blocks: usize,
}

impl<'a> LayoutSpec<'a> {
    /// `n_expert` experts, runs padded to `block_size` (the GEMM's
    /// `BLOCK_SIZE_M`). The library judges both (1 ..= 1056 and
    /// 1 ..= 65536).
    pub fn new(n_expert: u32, block_size: u32) -> LayoutSpec<'a> {
        LayoutSpec {
            n_expert,
            block_size,
            pad_sorted_ids: false,
            map: None,
        }
    }

    /// vLLM's `pad_sorted_ids`: `sorted_ids`' length rounded up to
    /// `block_size`.
    pub fn pad_sorted_ids(mut self, on: bool) -> Self {
        self.pad_sorted_ids = on;
        self
    }

    /// vLLM's `expert_map` (`n_expert` ids: global expert -> local id or
    /// -1), labelling each block; host memory, for the host arm. Not for
    /// the fused call, whose routing spec's map labels the blocks.
    pub fn expert_map(mut self, map: &'a [i32]) -> Self {
        self.map = Some(InPlace::host(map));
        self
    }

    /// The map in device memory (at least `n_expert` ids), read in place.
    pub fn expert_map_device(mut self, map: DevSlice<'a, i32>) -> Self {
        self.map = Some(InPlace::device(map));
        self
    }

    pub fn n_expert(&self) -> u32 {
        self.n_expert
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The sizes of the layout of `n_pairs` pairs (`memra_layout_sizes`).
    pub fn sizes(&self, n_pairs: usize) -> Result<LayoutSizes> {
        let raw = self.raw_unchecked(abi::MEMRA_COUNT_I32, 0);
        sizes(&raw, n_pairs)
    }

    /// The device workspace the device calls need for `n_pairs` pairs, in
    /// bytes (`memra_layout_workspace_bytes`): 0 up to
    /// `LAYOUT_ONE_LAUNCH` pairs.
    pub fn workspace_bytes(&self, n_pairs: usize) -> Result<usize> {
        let raw = self.raw_unchecked(abi::MEMRA_COUNT_I32, 0);
        workspace_bytes(&raw, n_pairs)
    }

    /// The device of the engine whose buffer the map is.
    pub(crate) fn home(&self) -> Option<i32> {
        self.map.and_then(|m| m.home())
    }

    fn raw_unchecked(&self, load_dtype: c_int, map: u64) -> ffi::LayoutSpec {
        ffi::LayoutSpec {
            n_expert: self.n_expert,
            block_size: self.block_size,
            pad_sorted_ids: self.pad_sorted_ids as c_int,
            load_dtype,
            expert_map: map,
        }
    }

    /// The C spec for a call in `arm` (the map in that arm's memory, of
    /// `n_expert` ids).
    pub(crate) fn raw(&self, arm: Arm, load_dtype: c_int) -> Result<ffi::LayoutSpec> {
        let map = match &self.map {
            Some(m) => m.check("layout spec: expert_map", arm, self.n_expert as usize)?,
            None => 0,
        };
        Ok(self.raw_unchecked(load_dtype, map))
    }
}

fn sizes(raw: &ffi::LayoutSpec, n_pairs: usize) -> Result<LayoutSizes> {
    let f = ffi::lib()?.memra_layout_sizes;
    let n = u32_of(n_pairs, "n_pairs", u32::MAX as usize)?;
    let (mut len, mut blocks) = (0u64, 0u64);
    check(unsafe { f(n, raw, &mut len, &mut blocks) })?;
    Ok(LayoutSizes {
        sorted_len: len as usize,
        n_blocks: blocks as usize,
    })
}

fn workspace_bytes(raw: &ffi::LayoutSpec, n_pairs: usize) -> Result<usize> {
    let f = ffi::lib()?.memra_layout_workspace_bytes;
    let n = u32_of(n_pairs, "n_pairs", u32::MAX as usize)?;
    let mut bytes = 0u64;
    check(unsafe { f(n, raw, &mut bytes) })?;
    Ok(bytes as usize)
}

/// What the host arm wrote: every output of the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLayout {
    /// `sizes().sorted_len` pair indices: each expert's pairs, ascending,
    /// then the sentinel `n_pairs` to the next multiple of `block_size`;
    /// the sentinel after the last run.
    pub sorted_ids: Vec<i32>,
    /// `sizes().n_blocks` labels: each block's expert (through the map, if
    /// any), -1 after the last run.
    pub expert_ids: Vec<i32>,
    /// The padded total: the part of `sorted_ids` a GEMM reads.
    pub n_post_pad: i32,
    /// `n_expert + 1`: the exclusive prefix sum of each expert's pairs.
    pub offsets: Vec<i32>,
    /// `n_expert + 1`: the same of the padded runs.
    pub padded_offsets: Vec<i32>,
    /// `n_expert`: each expert's pairs.
    pub counts: Vec<i32>,
}

/// The layout of host `ids` on the host (`memra_layout_tables_host`): the
/// reference the device arm equals byte for byte. A device map in `spec`
/// is an `InvalidArg` naming it.
pub fn layout_tables_host(ids: &[i32], spec: &LayoutSpec<'_>) -> Result<HostLayout> {
    layout_host(ids, spec, None::<&mut [i32]>)
}

/// As [`layout_tables_host`], each expert's pair count also ADDED into
/// `expert_load` (at least `n_expert` counts, `i32` or `i64`): the
/// expert-parallel load balancers' statistic, accumulated call after call.
pub fn layout_tables_host_load<L: CountElem>(
    ids: &[i32],
    spec: &LayoutSpec<'_>,
    expert_load: &mut [L],
) -> Result<HostLayout> {
    layout_host(ids, spec, Some(expert_load))
}

fn layout_host<L: CountElem>(
    ids: &[i32],
    spec: &LayoutSpec<'_>,
    load: Option<&mut [L]>,
) -> Result<HostLayout> {
    let lib = ffi::lib()?;
    let f = lib.memra_layout_tables_host;
    let n = u32_of(ids.len(), "n_pairs (ids.len())", u32::MAX as usize)?;
    let raw = spec.raw(Arm::Host, L::DTYPE)?;
    let stand_in = ffi::Layout {
        expert_load: if load.is_some() { abi::STAND_IN } else { 0 },
        ..HostLayoutBufs::stand_in()
    };
    judge::layout(
        abi::MEMRA_CALL_LAYOUT_TABLES_HOST,
        ids.as_ptr() as u64,
        n,
        &raw,
        &stand_in,
    )?;
    let e = spec.n_expert as usize;
    let load_ptr = match load {
        Some(l) => {
            need("expert_load", l.len(), e, &format!("n_expert = {e}"))?;
            l.as_mut_ptr() as u64
        }
        None => 0,
    };
    let mut bufs = HostLayoutBufs::new(&raw, ids.len())?;
    let lay = ffi::Layout {
        expert_load: load_ptr,
        ..bufs.raw()
    };
    check(unsafe { f(ids.as_ptr(), n, &raw, &lay) })?;
    Ok(bufs.out)
}

/// Where a device layout goes: `sorted_ids`, `expert_ids` and one
/// `n_post_pad` (int32 each, at least `sizes()` long), and the optional
/// outputs, each set by its builder method. Any device memory: a memra
/// buffer's `.slice_mut()`, or `DevSliceMut::from_raw`.
pub struct LayoutOut<'a> {
    sorted_ids: Mem,
    expert_ids: Mem,
    n_post_pad: Mem,
    offsets: Option<Mem>,
    padded_offsets: Option<Mem>,
    counts: Option<Mem>,
    expert_load: Option<(Mem, c_int)>,
    workspace: Option<Mem>,
    _a: std::marker::PhantomData<DevSliceMut<'a, i32>>,
}

impl<'a> LayoutOut<'a> {
    pub fn new(
        sorted_ids: impl Into<DevSliceMut<'a, i32>>,
        expert_ids: impl Into<DevSliceMut<'a, i32>>,
        n_post_pad: impl Into<DevSliceMut<'a, i32>>,
    ) -> LayoutOut<'a> {
        LayoutOut {
            sorted_ids: Mem::of(sorted_ids.into()),
            expert_ids: Mem::of(expert_ids.into()),
            n_post_pad: Mem::of(n_post_pad.into()),
            offsets: None,
            padded_offsets: None,
            counts: None,
            expert_load: None,
            workspace: None,
            _a: std::marker::PhantomData,
        }
    }

    /// `n_expert + 1` int32: the exclusive prefix sum of each expert's pairs.
    pub fn offsets(mut self, o: impl Into<DevSliceMut<'a, i32>>) -> Self {
        self.offsets = Some(Mem::of(o.into()));
        self
    }

    /// `n_expert + 1` int32: the same of the padded runs.
    pub fn padded_offsets(mut self, o: impl Into<DevSliceMut<'a, i32>>) -> Self {
        self.padded_offsets = Some(Mem::of(o.into()));
        self
    }

    /// `n_expert` int32: each expert's pairs.
    pub fn counts(mut self, c: impl Into<DevSliceMut<'a, i32>>) -> Self {
        self.counts = Some(Mem::of(c.into()));
        self
    }

    /// `n_expert` counts (`i32` or `i64`) that each call ADDS its pairs
    /// per expert into: the EPLB statistic.
    pub fn expert_load<L: CountElem>(mut self, l: impl Into<DevSliceMut<'a, L>>) -> Self {
        self.expert_load = Some((Mem::of(l.into()), L::DTYPE));
        self
    }

    /// Device workspace of at least `LayoutSpec::workspace_bytes(n_pairs)`
    /// bytes (needed past `LAYOUT_ONE_LAUNCH` pairs), contents unused
    /// between calls.
    pub fn workspace(mut self, w: impl Into<DevSliceMut<'a, u8>>) -> Self {
        self.workspace = Some(Mem::of(w.into()));
        self
    }

    pub(crate) fn load_dtype(&self) -> c_int {
        self.expert_load.map_or(abi::MEMRA_COUNT_I32, |(_, d)| d)
    }

    pub(crate) fn raw(&self) -> ffi::Layout {
        let a = |d: Option<Mem>| d.map_or(0, |d| d.ptr);
        ffi::Layout {
            sorted_ids: self.sorted_ids.ptr,
            expert_ids: self.expert_ids.ptr,
            n_post_pad: self.n_post_pad.ptr,
            offsets: a(self.offsets),
            padded_offsets: a(self.padded_offsets),
            counts: a(self.counts),
            expert_load: a(self.expert_load.map(|(d, _)| d)),
            workspace: a(self.workspace),
        }
    }

    /// What only the crate knows of the outputs, once the library has
    /// judged the call: each in this engine's device's memory and as long
    /// as `n_pairs`' layout of `n_expert` experts needs.
    pub(crate) fn check_for(
        &self,
        e: &Engine,
        spec: &ffi::LayoutSpec,
        n_pairs: usize,
    ) -> Result<()> {
        let z = sizes(spec, n_pairs)?;
        let ws = workspace_bytes(spec, n_pairs)?;
        let experts = spec.n_expert as usize;
        let why = format!("n_pairs = {n_pairs} with n_expert = {experts}");
        let outs = [
            ("layout: sorted_ids", Some(self.sorted_ids), z.sorted_len),
            ("layout: expert_ids", Some(self.expert_ids), z.n_blocks),
            ("layout: n_post_pad", Some(self.n_post_pad), 1),
            ("layout: offsets", self.offsets, experts + 1),
            ("layout: padded_offsets", self.padded_offsets, experts + 1),
            ("layout: counts", self.counts, experts),
            (
                "layout: expert_load",
                self.expert_load.map(|(d, _)| d),
                experts,
            ),
            ("layout: workspace (bytes)", self.workspace, ws),
        ];
        for (what, d, n) in outs {
            if let Some(d) = d {
                e.check_home(what, d.home)?;
                need(what, d.len, n, &why)?;
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Loads the layout kernels and the engine's per-layer counts for the
    /// fused call (`memra_layout_prepare`): call it before capturing a graph
    /// with layouts, whose first use would load them, which a capture
    /// refuses.
    pub fn layout_prepare(&self) -> Result<()> {
        let f = ffi::lib()?.memra_layout_prepare;
        check(unsafe { f(self.inner.ptr) })
    }

    /// The layout of `n_pairs` device ids on the device
    /// (`memra_layout_tables`): one launch up to `LAYOUT_ONE_LAUNCH` pairs,
    /// three above (give `out` a workspace), on `stream`, capturable, never
    /// synchronising. `n_pairs = 0` writes the empty layout.
    pub fn layout_tables<'a>(
        &self,
        stream: &Stream,
        ids: impl Into<DevSlice<'a, i32>>,
        n_pairs: usize,
        spec: &LayoutSpec<'_>,
        out: LayoutOut<'_>,
    ) -> Result<()> {
        let f = ffi::lib()?.memra_layout_tables;
        let stream = self.raw_stream(stream)?;
        let ids = ids.into();
        let n = u32_of(n_pairs, "n_pairs", u32::MAX as usize)?;
        let raw = spec.raw(Arm::Device, out.load_dtype())?;
        let lay = out.raw();
        judge::layout(
            abi::MEMRA_CALL_LAYOUT_TABLES,
            ids.device_ptr(),
            n,
            &raw,
            &lay,
        )?;
        self.check_home("ids", ids.home())?;
        self.check_home("layout spec: expert_map", spec.home())?;
        need("ids", ids.len(), n_pairs, &format!("n_pairs = {n_pairs}"))?;
        out.check_for(self, &raw, n_pairs)?;
        check(unsafe { f(self.inner.ptr, ids.device_ptr(), n, &raw, &lay, stream) })
    }
}

/// Host buffers of a layout the crate allocates (the fused host arm).
pub(crate) struct HostLayoutBufs {
    pub out: HostLayout,
}

impl HostLayoutBufs {
    pub fn new(spec: &ffi::LayoutSpec, n_pairs: usize) -> Result<HostLayoutBufs> {
        let z = sizes(spec, n_pairs)?;
        let e = spec.n_expert as usize;
        Ok(HostLayoutBufs {
            out: HostLayout {
                sorted_ids: vec![0; z.sorted_len],
                expert_ids: vec![0; z.n_blocks],
                n_post_pad: 0,
                offsets: vec![0; e + 1],
                padded_offsets: vec![0; e + 1],
                counts: vec![0; e],
            },
        })
    }

    pub fn raw(&mut self) -> ffi::Layout {
        let o = &mut self.out;
        ffi::Layout {
            sorted_ids: o.sorted_ids.as_mut_ptr() as u64,
            expert_ids: o.expert_ids.as_mut_ptr() as u64,
            n_post_pad: &mut o.n_post_pad as *mut i32 as u64,
            offsets: o.offsets.as_mut_ptr() as u64,
            padded_offsets: o.padded_offsets.as_mut_ptr() as u64,
            counts: o.counts.as_mut_ptr() as u64,
            expert_load: 0,
            workspace: 0,
        }
    }

    /// Every output present, at stand-in addresses, for the judge.
    pub fn stand_in() -> ffi::Layout {
        let s = abi::STAND_IN;
        ffi::Layout {
            sorted_ids: s,
            expert_ids: s,
            n_post_pad: s,
            offsets: s,
            padded_offsets: s,
            counts: s,
            expert_load: 0,
            workspace: 0,
        }
    }
}
