//! CPU tests (run in CI) of the expert-sorted layout through the crate: the
//! host arm against the layout's definition (docs/layout-sorted.md: a
//! stable sort by expert, runs padded with the sentinel, vLLM's sizes) and
//! vLLM's docstring example, the optional outputs and the load added call
//! after call, routing fused with its layout against routing then the
//! layout, and the refusals: the library's in its words, the crate's only
//! where it alone knows (slice lengths, which memory an address is in).
//! Needs libmemra, no GPU.

mod common;

use common::Rng;
use memra::{
    layout_tables_host, layout_tables_host_load, route_tables_host, route_tables_host_layout,
    HostLayout, LayoutSizes, LayoutSpec, RouteSpec, Scoring, Slabs, Status,
};

/// The layout by its definition, written plainly: each expert's pairs in
/// ascending index, the sentinel n to the next multiple of block_size,
/// vLLM's sizes, the map's labels, -1 after the last run.
fn reference(ids: &[i32], e: usize, bs: usize, pad: bool, map: Option<&[i32]>) -> HostLayout {
    let n = ids.len();
    let mut len = n + e * (bs - 1);
    if pad {
        len = (len + bs - 1) / bs * bs;
    }
    if n < e {
        len = len.min(n * bs);
    }
    let mut r = HostLayout {
        sorted_ids: vec![n as i32; len],
        expert_ids: vec![-1; (len + bs - 1) / bs],
        n_post_pad: 0,
        offsets: vec![0; e + 1],
        padded_offsets: vec![0; e + 1],
        counts: vec![0; e],
    };
    let (mut at, mut off) = (0usize, 0usize);
    for x in 0..e {
        r.offsets[x] = off as i32;
        r.padded_offsets[x] = at as i32;
        let pairs: Vec<usize> = (0..n).filter(|&p| ids[p] == x as i32).collect();
        for (i, &p) in pairs.iter().enumerate() {
            r.sorted_ids[at + i] = p as i32;
        }
        let runs = (pairs.len() + bs - 1) / bs;
        for b in 0..runs {
            r.expert_ids[at / bs + b] = map.map_or(x as i32, |m| m[x]);
        }
        r.counts[x] = pairs.len() as i32;
        at += runs * bs;
        off += pairs.len();
    }
    r.offsets[e] = off as i32;
    r.padded_offsets[e] = at as i32;
    r.n_post_pad = at as i32;
    r
}

fn ids(rng: &mut Rng, n: usize, e: usize) -> Vec<i32> {
    // Some ids in no expert: a padding row's -1, one past the last.
    (0..n)
        .map(|_| match rng.next() % 50 {
            0 => -1,
            1 => e as i32,
            _ => (rng.next() % e as u64) as i32,
        })
        .collect()
}

#[test]
fn vllms_docstring_example() {
    common::need_library();
    let ids = [2, 3, 4, 1, 2, 4, 1, 3, 4, 1, 2, 3];
    let l = layout_tables_host(&ids, &LayoutSpec::new(5, 4)).unwrap();
    assert_eq!(
        l.sorted_ids[..16],
        [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    );
    assert_eq!(l.expert_ids, [1, 2, 3, 4, -1, -1, -1]);
    assert_eq!(l.n_post_pad, 16);
    assert_eq!(
        LayoutSpec::new(5, 4).sizes(12).unwrap(),
        LayoutSizes {
            sorted_len: 27,
            n_blocks: 7
        }
    );
}

#[test]
fn the_host_arm_is_the_definition() {
    common::need_library();
    let mut rng = Rng(7);
    for (n, e, bs) in [
        (0, 8, 4),
        (5, 64, 16),
        (512, 8, 16),
        (3000, 257, 64),
        (100, 1056, 1),
    ] {
        let ids = ids(&mut rng, n, e);
        let map: Vec<i32> = (0..e as i32)
            .map(|x| if x % 3 == 0 { -1 } else { x / 3 })
            .collect();
        for pad in [false, true] {
            let got = layout_tables_host(&ids, &LayoutSpec::new(e as u32, bs).pad_sorted_ids(pad));
            assert_eq!(
                got.unwrap(),
                reference(&ids, e, bs as usize, pad, None),
                "{n} {e}"
            );
            let spec = LayoutSpec::new(e as u32, bs)
                .pad_sorted_ids(pad)
                .expert_map(&map);
            let got = layout_tables_host(&ids, &spec).unwrap();
            assert_eq!(got, reference(&ids, e, bs as usize, pad, Some(&map)));
            let z = spec.sizes(n).unwrap();
            assert_eq!(
                (z.sorted_len, z.n_blocks),
                (got.sorted_ids.len(), got.expert_ids.len())
            );
        }
    }
}

#[test]
fn the_load_is_added_call_after_call() {
    common::need_library();
    let ids = [0, 3, 3, -1, 2, 3];
    let spec = LayoutSpec::new(4, 2);
    let mut l64 = [10i64, 0, 0, 5];
    let mut l32 = [0i32; 6]; // longer than n_expert: fine
    for _ in 0..2 {
        layout_tables_host_load(&ids, &spec, &mut l64).unwrap();
        layout_tables_host_load(&ids, &spec, &mut l32).unwrap();
    }
    assert_eq!(l64, [12, 0, 2, 11]);
    assert_eq!(l32, [2, 0, 2, 6, 0, 0]);
    let e = layout_tables_host_load(&ids, &spec, &mut [0i32; 3]).unwrap_err();
    assert_eq!(e.status(), Some(Status::InvalidArg));
    assert!(
        e.to_string().contains("expert_load holds 3 elements"),
        "{e}"
    );
}

#[test]
fn routing_fused_with_its_layout_is_routing_then_the_layout() {
    common::need_library();
    let mut rng = Rng(3);
    let (t, e) = (97usize, 64usize);
    let logits: Vec<f32> = (0..t * e)
        .map(|_| (rng.next() % 4096) as f32 / 256.0 - 8.0)
        .collect();
    let map: Vec<i32> = (0..e as i32).map(|x| if x < 32 { x } else { -1 }).collect();
    let count = [90i32];
    let slabs = Slabs::new((1 << 40, 2 << 40, 3 << 40), (1 << 20, 1 << 20, 1 << 21));
    for spec in [
        RouteSpec::new(e as u32, 6),
        RouteSpec::new(e as u32, 6)
            .scoring(Scoring::Sigmoid)
            .groups(8, 4)
            .expert_map(&map, 32)
            .shared_experts_routed_sum(2, 2.5)
            .renormalize(true)
            .n_real_host(&count),
    ] {
        let layout = LayoutSpec::new(spec.layout_experts(), 16).pad_sorted_ids(true);
        let (r, l) = route_tables_host_layout(&logits, &spec, None, slabs, &layout).unwrap();
        assert_eq!(r, route_tables_host(&logits, &spec, None, slabs).unwrap());
        // The blocks are labelled as the tables place the pairs: through the
        // routing's map, a shared expert's its slot n_local + i.
        let labels: Option<Vec<i32>> = (spec.n_slots() != spec.layout_experts() as u64)
            .then(|| map.iter().copied().chain([32, 33]).collect());
        let want = LayoutSpec::new(spec.layout_experts(), 16).pad_sorted_ids(true);
        let want = match &labels {
            Some(m) => layout_tables_host(&r.sel, &want.expert_map(m)),
            None => layout_tables_host(&r.sel, &want),
        };
        assert_eq!(l, want.unwrap());
    }
}

#[test]
fn refusals_are_the_librarys_but_for_what_only_the_crate_knows() {
    common::need_library();
    let ids = [0i32, 1, 2, 3];
    let map = [0i32; 3];
    let dmap = unsafe { memra::DevSlice::<i32>::from_raw(0x7000_0000, 8) };
    let cases: Vec<(&str, memra::Result<HostLayout>, Status, &str)> = vec![
        // the library's words, whole
        (
            "block 0",
            layout_tables_host(&ids, &LayoutSpec::new(8, 0)),
            Status::InvalidArg,
            "memra_layout_tables_host: layout_spec->block_size = 0 is outside [1, 65536]",
        ),
        (
            "too many experts",
            layout_tables_host(&ids, &LayoutSpec::new(memra::LAYOUT_MAX_EXPERT + 1, 4)),
            Status::InvalidArg,
            "memra_layout_tables_host: layout_spec->n_expert = 1057 is outside [1, 1056]",
        ),
        // what only the crate knows
        (
            "short map",
            layout_tables_host(&ids, &LayoutSpec::new(8, 4).expert_map(&map)),
            Status::InvalidArg,
            "layout spec: expert_map holds 3 elements; n_expert = 8",
        ),
        (
            "device map on the host",
            layout_tables_host(&ids, &LayoutSpec::new(8, 4).expert_map_device(dmap)),
            Status::InvalidArg,
            "layout spec: expert_map is in device memory; the host arm reads a host slice",
        ),
    ];
    for (what, r, status, message) in cases {
        let e = r.expect_err(what);
        assert_eq!(e.status(), Some(status), "{what}: {e}");
        assert_eq!(
            e.to_string(),
            format!("memra: {status:?}: {message}"),
            "{what}"
        );
    }
    // The fused call: the routing's refusal first, as the call judges it;
    // then the layout's (its experts the routing's with the shared ones,
    // no map of its own).
    let logits = vec![0.5f32; 64];
    let slabs = Slabs::new((0, 0, 0), (0, 0, 0));
    let lay = LayoutSpec::new(16, 0);
    let e =
        route_tables_host_layout(&logits, &RouteSpec::new(16, 40), None, slabs, &lay).unwrap_err();
    assert!(
        e.to_string()
            .contains("memra_route_tables_host_ex: spec->top_k = 40"),
        "{e}"
    );
    let e =
        route_tables_host_layout(&logits, &RouteSpec::new(16, 2), None, slabs, &lay).unwrap_err();
    assert!(
        e.to_string()
            .contains("memra_route_tables_host_ex: layout_spec->block_size = 0"),
        "{e}"
    );
    let spec = RouteSpec::new(16, 2).shared_experts(1, 1.0);
    let e =
        route_tables_host_layout(&logits, &spec, None, slabs, &LayoutSpec::new(16, 4)).unwrap_err();
    assert!(
        e.to_string()
            .contains("layout_spec->n_expert = 16 must be the routing's n_expert + n_shared = 17"),
        "{e}"
    );
    let map = [0i32; 17];
    let lay = LayoutSpec::new(17, 4).expert_map(&map);
    let e = route_tables_host_layout(&logits, &spec, None, slabs, &lay).unwrap_err();
    assert!(
        e.to_string().contains("layout_spec->expert_map must be 0"),
        "{e}"
    );
    // A count past what one call takes: the library's, before anything is
    // allocated for it.
    let e = LayoutSpec::new(8, 4)
        .sizes(memra::MAX_PAIRS + 1)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("n_pairs = 268435457 is above 268435456"),
        "{e}"
    );
}
