//! The expert-sorted layout on the device, on CALLER-OWNED device pointers,
//! against the host arm byte for byte: from ids made elsewhere
//! (`Engine::layout_tables`: one launch, and three past `LAYOUT_ONE_LAUNCH`
//! pairs with their workspace; an expert map in device memory; every
//! optional output; the load added call after call; no pairs), and inside
//! routing (`RouteOut::with_layout`: decode and past one launch, a map,
//! shared experts by SGLang's rule, a padded batch's count read in place),
//! the same bytes call after call, and refusals that launch nothing.
//!
//! Needs a CUDA device: `cargo test --offline --test layout_device --
//! --ignored --test-threads=1`. CI runs it on the mock driver (a
//! libcuda.so.1 that runs the kernel source on the host, tools/test.sh).

mod common;

use common::{engine, Raw, Rng, R};
use memra::{
    layout_tables_host_load, route_tables_host_layout, Engine, Layer, LayoutOut, LayoutSpec,
    RouteOut, RouteSpec, Scoring, Slabs, Status, Stream,
};

fn ids(rng: &mut Rng, n: usize, e: usize) -> Vec<i32> {
    (0..n)
        .map(|_| match rng.next() % 64 {
            0 => -1,
            _ => (rng.next() % e as u64) as i32,
        })
        .collect()
}

/// A device layout's buffers (poisoned: an entry the kernels skipped
/// cannot pass), every optional output and a workspace where needed.
struct DevLayout {
    sorted: Raw<i32>,
    eids: Raw<i32>,
    post: Raw<i32>,
    offsets: Raw<i32>,
    padded: Raw<i32>,
    counts: Raw<i32>,
    load: Raw<i64>,
    ws: Option<Raw<u8>>,
}

impl DevLayout {
    fn new(e: &Engine, s: &Stream, spec: &LayoutSpec<'_>, n: usize) -> R<DevLayout> {
        let z = spec.sizes(n)?;
        let x = spec.n_expert() as usize;
        let ws = spec.workspace_bytes(n)?;
        Ok(DevLayout {
            sorted: Raw::filled(e, s, z.sorted_len, -9)?,
            eids: Raw::filled(e, s, z.n_blocks, -9)?,
            post: Raw::filled(e, s, 1, -9)?,
            offsets: Raw::filled(e, s, x + 1, -9)?,
            padded: Raw::filled(e, s, x + 1, -9)?,
            counts: Raw::filled(e, s, x, -9)?,
            load: Raw::filled(e, s, x, 100)?,
            ws: if ws > 0 {
                Some(Raw::filled(e, s, ws, 0xa5)?)
            } else {
                None
            },
        })
    }

    fn out(&self) -> LayoutOut<'_> {
        let o = LayoutOut::new(self.sorted.w(), self.eids.w(), self.post.w())
            .offsets(self.offsets.w())
            .padded_offsets(self.padded.w())
            .counts(self.counts.w())
            .expert_load(self.load.w());
        match &self.ws {
            Some(w) => o.workspace(w.w()),
            None => o,
        }
    }

    /// Everything the device wrote against the host arm's layout and load.
    fn same_as(
        &self,
        e: &Engine,
        s: &Stream,
        host: &memra::HostLayout,
        load: &[i64],
        what: &str,
    ) -> R<()> {
        let got = memra::HostLayout {
            sorted_ids: self.sorted.get(e, s)?,
            expert_ids: self.eids.get(e, s)?,
            n_post_pad: self.post.get(e, s)?[0],
            offsets: self.offsets.get(e, s)?,
            padded_offsets: self.padded.get(e, s)?,
            counts: self.counts.get(e, s)?,
        };
        if got != *host {
            return Err(format!("{what}: the device layout differs from the host arm's").into());
        }
        if self.load.get(e, s)? != load {
            return Err(format!("{what}: the device load differs from the host arm's").into());
        }
        println!(
            "  [{what}] OK: {} sorted entries, {} blocks, n_post_pad {}",
            host.sorted_ids.len(),
            host.expert_ids.len(),
            host.n_post_pad
        );
        Ok(())
    }
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn layouts_of_ids_match_the_host_arm_on_raw_pointers() -> R<()> {
    let (e, s) = engine()?;
    e.layout_prepare()?;
    let mut rng = Rng(11);
    for (n, x, bs, pad, mapped) in [
        (0usize, 64usize, 16u32, false, false),
        (8 * 64, 256, 16, false, true),
        (8 * 256, 256, 64, true, false),
        (memra::LAYOUT_ONE_LAUNCH, 64, 64, false, false),
        (memra::LAYOUT_ONE_LAUNCH + 700, 257, 64, true, true),
        (3 * 4096 + 9000, 1056, 128, false, false),
    ] {
        let host_ids = ids(&mut rng, n, x);
        let map: Vec<i32> = (0..x as i32)
            .map(|i| if i % 2 == 1 { i / 2 } else { -1 })
            .collect();
        let d_ids = Raw::new(&e, &s, &host_ids)?;
        let d_map = Raw::new(&e, &s, &map)?;
        let (hspec, dspec) = if mapped {
            (
                LayoutSpec::new(x as u32, bs)
                    .pad_sorted_ids(pad)
                    .expert_map(&map),
                LayoutSpec::new(x as u32, bs)
                    .pad_sorted_ids(pad)
                    .expert_map_device(d_map.r()),
            )
        } else {
            let l = LayoutSpec::new(x as u32, bs).pad_sorted_ids(pad);
            (l, l)
        };
        let d = DevLayout::new(&e, &s, &dspec, n)?;
        let mut load = vec![100i64; x];
        let mut host = None;
        // Twice: the same bytes each time, the load added each time.
        for _ in 0..2 {
            e.layout_tables(&s, d_ids.r(), n, &dspec, d.out())?;
            host = Some(layout_tables_host_load(&host_ids, &hspec, &mut load)?);
        }
        d.same_as(
            &e,
            &s,
            host.as_ref().unwrap(),
            &load,
            &format!("{n} ids, {x} experts"),
        )?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn routing_with_its_layout_matches_the_host_arm_on_raw_pointers() -> R<()> {
    let (e, s) = engine()?;
    e.layout_prepare()?;
    let mut rng = Rng(5);
    let slabs = Slabs::new((1 << 40, 2 << 40, 3 << 40), (24 << 20, 24 << 20, 48 << 20));
    let layer = Layer::new(7, slabs);
    // Mixtral's router past one launch; DeepSeek-V3's shape, smaller, with
    // a rank's map, SGLang's shared expert and a padded batch, at decode.
    for (t, x, k, deep) in [
        (33usize, 8usize, 2u32, false),
        (memra::LAYOUT_ONE_LAUNCH / 2 + 11, 8, 2, false),
        (40, 64, 6, true),
    ] {
        let logits: Vec<f32> = (0..t * x)
            .map(|_| (rng.next() % 4096) as f32 / 256.0 - 8.0)
            .collect();
        let map: Vec<i32> = (0..x as i32).map(|i| if i < 32 { i } else { -1 }).collect();
        let count = [t as i64 - 5];
        let d_map = Raw::new(&e, &s, &map)?;
        let d_count = Raw::new(&e, &s, &count)?;
        let (hspec, dspec) = if deep {
            let deep = |s: RouteSpec<'static>| {
                s.scoring(Scoring::Sigmoid)
                    .groups(8, 4)
                    .renormalize(true)
                    .routed_scaling_factor(2.5)
                    .shared_experts_routed_sum(1, 2.5)
            };
            (
                deep(RouteSpec::new(x as u32, k))
                    .expert_map(&map, 32)
                    .n_real_host(&count),
                deep(RouteSpec::new(x as u32, k))
                    .expert_map_device(d_map.r(), 32)
                    .n_real_device(d_count.r()),
            )
        } else {
            (RouteSpec::new(x as u32, k), RouteSpec::new(x as u32, k))
        };
        let lspec = LayoutSpec::new(dspec.layout_experts(), 16);
        let (hr, hl) = route_tables_host_layout(&logits, &hspec, None, slabs, &lspec)?;
        let n = t * dspec.pairs_per_token() as usize;
        let d_logits = Raw::new(&e, &s, &logits)?;
        let sel = Raw::filled(&e, &s, n, -7i32)?;
        let selw = Raw::filled(&e, &s, n, 0f32)?;
        let ptrs = Raw::filled(&e, &s, 3 * n, 0u64)?;
        let scl = Raw::filled(&e, &s, 3 * n, 0f32)?;
        let d = DevLayout::new(&e, &s, &lspec, n)?;
        e.route_prepare_layer(layer.il, &dspec, None, &s)?;
        for _ in 0..2 {
            let out =
                RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w()).with_layout(&lspec, d.out());
            e.route_tables(&s, d_logits.r(), t, &dspec, &layer, out)?;
        }
        if sel.get(&e, &s)? != hr.sel || ptrs.get(&e, &s)? != hr.ptrs {
            return Err(format!("{t} tokens: the routing differs from the host arm's").into());
        }
        // The load: each call's counts added to 100.
        let load: Vec<i64> = hl.counts.iter().map(|&c| 100 + 2 * c as i64).collect();
        d.same_as(
            &e,
            &s,
            &hl,
            &load,
            &format!("{t} tokens routed and laid out"),
        )?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn refusals_launch_nothing() -> R<()> {
    let (e, s) = engine()?;
    let n = memra::LAYOUT_ONE_LAUNCH + 1;
    let d_ids = Raw::filled(&e, &s, n, 3i32)?;
    let spec = LayoutSpec::new(8, 16);
    let z = spec.sizes(n)?;
    let sorted = Raw::filled(&e, &s, z.sorted_len, -9i32)?;
    let eids = Raw::filled(&e, &s, z.n_blocks, -9i32)?;
    let post = Raw::filled(&e, &s, 1, -9i32)?;
    // Past one launch without a workspace: the library's refusal.
    let err = e
        .layout_tables(
            &s,
            d_ids.r(),
            n,
            &spec,
            LayoutOut::new(sorted.w(), eids.w(), post.w()),
        )
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::NullArg), "{err}");
    assert!(
        err.to_string()
            .contains("memra_layout_tables: layout->workspace is 0"),
        "{err}"
    );
    // A workspace too small: the crate's (only it knows the length).
    let ws = Raw::filled(&e, &s, 8, 0u8)?;
    let err = e
        .layout_tables(
            &s,
            d_ids.r(),
            n,
            &spec,
            LayoutOut::new(sorted.w(), eids.w(), post.w()).workspace(ws.w()),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("layout: workspace (bytes) holds 8 elements"),
        "{err}"
    );
    // Ids shorter than n_pairs (a workspace given, so the library passes).
    let err = e
        .layout_tables(
            &s,
            d_ids.r(),
            n + 1,
            &spec,
            LayoutOut::new(sorted.w(), eids.w(), post.w()).workspace(ws.w()),
        )
        .unwrap_err();
    assert!(err.to_string().contains("ids holds"), "{err}");
    // The host map handed to a device call.
    let map = [0i32; 8];
    let err = e
        .layout_tables(
            &s,
            d_ids.r(),
            8,
            &spec.expert_map(&map),
            LayoutOut::new(sorted.w(), eids.w(), post.w()),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("expert_map is in host memory"),
        "{err}"
    );
    // Nothing was written by any of them.
    assert_eq!(post.get(&e, &s)?, [-9]);
    // An output shorter than n_pairs' sizes (the library's refusals
    // passed: a workspace given), but long enough for fewer pairs.
    let ws = Raw::filled(&e, &s, spec.workspace_bytes(n)?, 0u8)?;
    let short = Raw::filled(&e, &s, z.sorted_len - 1, 0i32)?;
    let err = e
        .layout_tables(
            &s,
            d_ids.r(),
            n,
            &spec,
            LayoutOut::new(short.w(), eids.w(), post.w()).workspace(ws.w()),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("layout: sorted_ids holds"),
        "{err}"
    );
    e.layout_tables(
        &s,
        d_ids.r(),
        100,
        &spec,
        LayoutOut::new(short.w(), eids.w(), post.w()),
    )?;
    assert_eq!(post.get(&e, &s)?, [112]); // 100 pairs of expert 3, padded to 16
    Ok(())
}
