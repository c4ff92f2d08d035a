//! CPU tests (run in CI) of routing and the option tables through the
//! crate: the host arm's choices where they can be known without memra's
//! arithmetic, its agreement with itself across dtypes, bias forms and the
//! table call it is defined by, expert parallelism, shared experts, and the
//! errors. Needs libmemra, no GPU.

mod common;

use common::{bits, Rng, BASES, STRIDES};
use memra::{
    route_tables_host, vrows_tables_host_ex, Bf16, GroupScoring, HostRoute, RouteSpec, Scoring,
    Slabs, Status, VrowsOptions, F16,
};

fn slabs() -> Slabs {
    Slabs::new(BASES, STRIDES)
}

impl Rng {
    /// k / 64 for k in [-255, 255]: exact in binary16 and in bfloat16.
    fn small(&mut self) -> f32 {
        (self.next() % 511) as f32 / 64.0 - 255.0 / 64.0
    }
}

/// x (a normal binary16 value, or zero) as binary16 bits.
fn f16_of(x: f32) -> F16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    if x == 0.0 {
        return F16(sign);
    }
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    assert!(
        (1..31).contains(&exp) && b & 0x1fff == 0,
        "{x} is not a normal binary16"
    );
    let h = F16(sign | ((exp as u16) << 10) | ((b >> 13) & 0x3ff) as u16);
    assert_eq!(h.to_f32().to_bits(), b);
    h
}

fn same(a: &HostRoute, b: &HostRoute, what: &str) {
    assert_eq!(a.k, b.k, "{what}: K");
    assert_eq!(a.sel, b.sel, "{what}: sel");
    assert_eq!(bits(&a.selw), bits(&b.selw), "{what}: selw");
    assert_eq!(a.ptrs, b.ptrs, "{what}: ptrs");
    assert_eq!(bits(&a.scl), bits(&b.scl), "{what}: scl");
    assert_eq!(a.faults, b.faults, "{what}: faults");
}

fn planes(rng: &mut Rng, n: usize) -> Vec<Vec<f32>> {
    (0..3)
        .map(|_| {
            (0..n)
                .map(|_| 0.5 + (rng.next() % 1024) as f32 / 512.0)
                .collect()
        })
        .collect()
}

#[test]
fn group_scoring_is_explicit_and_defaults_as_vllm() {
    common::need_library();
    // Four groups of two. Group 0 has the best expert (3.0) and a poor one;
    // group 1 two good ones (2.0, 2.0): by its best, group 0 wins (expert
    // 0); by the sum of its two best, group 1 (expert 2, the lower of a tie).
    let mut logits = vec![-8.0f32; 8];
    logits[0] = 3.0;
    logits[2] = 2.0;
    logits[3] = 2.0;
    let base = RouteSpec::new(8, 1).scoring(Scoring::Sigmoid).groups(4, 1);
    let zero = [0.0f32; 8];
    let zero16 = [Bf16(0); 8];
    let cases = [
        ("explicit max", base.group_scoring(GroupScoring::Max), 0),
        (
            "explicit top-2 sum",
            base.group_scoring(GroupScoring::Top2Sum),
            2,
        ),
        ("no bias: max", base, 0),
        ("a bias: top-2 sum", base.bias(&zero), 2),
        (
            "a bias read in place: top-2 sum",
            base.bias_host(&zero16),
            2,
        ),
        (
            "a bias, max asked for",
            base.bias(&zero).group_scoring(GroupScoring::Max),
            0,
        ),
    ];
    for (what, spec, want) in cases {
        let r = route_tables_host(&logits, &spec, None, slabs()).unwrap();
        assert_eq!(r.sel, [want], "{what}");
        // Unset, the library applies vLLM's rule (MEMRA_GROUP_AUTO): the
        // crate's accessor says what it chose.
        let said = if want == 0 {
            GroupScoring::Max
        } else {
            GroupScoring::Top2Sum
        };
        assert_eq!(spec.resolved_group_scoring(), said, "{what}");
        assert_eq!(
            r.faults,
            memra::Faults {
                first_pair: u32::MAX,
                ..Default::default()
            }
        );
    }
}

#[test]
fn top_k_follows_the_logits_when_scores_are_distinct() {
    common::need_library();
    // Logits a quarter apart: softmax and sigmoid are increasing, and
    // scores of logits that far apart never round together.
    let mut rng = Rng(7);
    let n_expert = 64usize;
    let mut logits = Vec::new();
    let mut want = Vec::new();
    for _ in 0..32 {
        let mut row: Vec<usize> = (0..n_expert).collect();
        for i in (1..n_expert).rev() {
            row.swap(i, rng.next() as usize % (i + 1));
        }
        let vals: Vec<f32> = row.iter().map(|&r| r as f32 / 4.0 - 8.0).collect();
        let mut order: Vec<usize> = (0..n_expert).collect();
        order.sort_by(|&a, &b| vals[b].partial_cmp(&vals[a]).unwrap());
        want.extend(order[..6].iter().map(|&e| e as i32));
        logits.extend(vals);
    }
    for scoring in [Scoring::Softmax, Scoring::Sigmoid] {
        let spec = RouteSpec::new(64, 6).scoring(scoring).renormalize(true);
        let r = route_tables_host(&logits, &spec, None, slabs()).unwrap();
        assert_eq!(r.sel, want, "{scoring:?}");
        for t in r.selw.chunks(6) {
            assert!(t.windows(2).all(|w| w[0] > w[1]), "{scoring:?}: {t:?}");
        }
    }
}

#[test]
fn bf16_and_f16_logits_route_as_their_binary32_values() {
    common::need_library();
    let mut rng = Rng(11);
    let (n_expert, n_tokens) = (256usize, 48usize);
    let f32s: Vec<f32> = (0..n_expert * n_tokens).map(|_| rng.small()).collect();
    let b16: Vec<Bf16> = f32s
        .iter()
        .map(|&x| Bf16::from_f32_exact(x).unwrap())
        .collect();
    let h16: Vec<F16> = f32s.iter().map(|&x| f16_of(x)).collect();
    let bias: Vec<f32> = (0..n_expert).map(|_| rng.small() / 64.0).collect();
    let p = planes(&mut rng, n_expert);
    let m = Some((&p[0][..], &p[1][..], &p[2][..]));
    let spec = RouteSpec::new(256, 8)
        .scoring(Scoring::Sigmoid)
        .groups(8, 4)
        .bias(&bias)
        .renormalize(true)
        .routed_scaling_factor(2.5);
    let a = route_tables_host(&f32s, &spec, m, slabs()).unwrap();
    assert_eq!(
        (a.k, a.sel.len(), a.ptrs.len()),
        (8, 8 * n_tokens, 24 * n_tokens)
    );
    same(
        &a,
        &route_tables_host(&b16, &spec, m, slabs()).unwrap(),
        "bf16",
    );
    same(
        &a,
        &route_tables_host(&h16, &spec, m, slabs()).unwrap(),
        "f16",
    );
}

#[test]
fn a_bias_routes_alike_in_every_form() {
    common::need_library();
    let mut rng = Rng(13);
    let n_expert = 64usize;
    let logits: Vec<f32> = (0..n_expert * 40).map(|_| rng.small()).collect();
    let bias: Vec<f32> = (0..n_expert).map(|_| rng.small() / 16.0).collect();
    let b16: Vec<Bf16> = bias
        .iter()
        .map(|&x| Bf16::from_f32_exact(x).unwrap())
        .collect();
    let spec = RouteSpec::new(64, 4)
        .scoring(Scoring::Sigmoid)
        .groups(8, 2)
        .renormalize(true);
    let checked = route_tables_host(&logits, &spec.bias(&bias), None, slabs()).unwrap();
    let in_place = route_tables_host(&logits, &spec.bias_host(&bias), None, slabs()).unwrap();
    let in_place16 = route_tables_host(&logits, &spec.bias_host(&b16), None, slabs()).unwrap();
    same(&checked, &in_place, "f32 in place");
    same(&checked, &in_place16, "bf16 in place");
    let none = route_tables_host(
        &logits,
        &spec.group_scoring(GroupScoring::Top2Sum),
        None,
        slabs(),
    );
    assert_ne!(
        none.unwrap().sel,
        checked.sel,
        "the bias changes some choices"
    );
}

#[test]
fn tables_are_the_option_tables_of_sel_and_selw() {
    common::need_library();
    let mut rng = Rng(17);
    let n_expert = 32u32;
    let logits: Vec<f32> = (0..n_expert as usize * 50).map(|_| rng.small()).collect();
    // This rank holds experts 8..24 in slots 0..16, then 2 shared experts.
    let map: Vec<i32> = (0..32)
        .map(|e| if (8..24).contains(&e) { e - 8 } else { -1 })
        .collect();
    let p = planes(&mut rng, 18);
    let m = Some((&p[0][..], &p[1][..], &p[2][..]));
    let spec = RouteSpec::new(n_expert, 4)
        .renormalize(true)
        .expert_map(&map, 16)
        .shared_experts(2, 0.75);
    assert_eq!((spec.pairs_per_token(), spec.n_slots()), (6, 18));
    let r = route_tables_host(&logits, &spec, m, slabs()).unwrap();
    let o = VrowsOptions::default()
        .expert_map(&map, 16)
        .shared_experts(2);
    let t = vrows_tables_host_ex(&r.sel, &r.selw, n_expert, m, slabs(), &o).unwrap();
    assert_eq!(r.ptrs, t.ptrs);
    assert_eq!(bits(&r.scl), bits(&t.scl));
    assert_eq!(r.faults, t.faults);
}

#[test]
fn expert_parallelism_leaves_other_ranks_pairs_null_and_counts_them() {
    common::need_library();
    let mut rng = Rng(19);
    let (n_expert, n_tokens, top_k) = (16usize, 30usize, 4usize);
    let logits: Vec<f32> = (0..n_expert * n_tokens).map(|_| rng.small()).collect();
    let map: Vec<i32> = (0..16)
        .map(|e| if e % 4 == 1 { e / 4 } else { -1 })
        .collect();
    let spec = RouteSpec::new(16, top_k as u32).renormalize(true);
    let all = route_tables_host(&logits, &spec, None, slabs()).unwrap();
    let ep = route_tables_host(&logits, &spec.expert_map(&map, 4), None, slabs()).unwrap();
    assert_eq!(
        ep.sel, all.sel,
        "routing ranks every expert; sel keeps global ids"
    );
    assert_eq!(bits(&ep.selw), bits(&all.selw));
    let n = n_tokens * top_k;
    let s = slabs();
    let mut remote = 0;
    for (p, &e) in ep.sel.iter().enumerate() {
        let slot = map[e as usize];
        for k in 0..3 {
            let want = if slot < 0 {
                0
            } else {
                s.base[k] + slot as u64 * s.stride[k]
            };
            assert_eq!(ep.ptrs[k * n + p], want, "pair {p} plane {k}");
        }
        if slot < 0 {
            remote += 1;
            assert_eq!(
                bits(&[ep.scl[p], ep.scl[n + p], ep.scl[2 * n + p]]),
                [0, 0, 0]
            );
        } else {
            assert_eq!(ep.scl[2 * n + p].to_bits(), ep.selw[p].to_bits());
        }
    }
    assert!(remote > 0 && remote < n);
    assert_eq!(ep.faults.not_local as usize, remote);
    assert_eq!((ep.faults.bad_expert, ep.faults.nonfinite), (0, 0));
    assert_eq!(ep.faults.first_pair, u32::MAX, "not a fault");
}

#[test]
fn shared_experts_follow_every_token() {
    common::need_library();
    let mut rng = Rng(23);
    let logits: Vec<f32> = (0..64 * 10).map(|_| rng.small()).collect();
    let routed = RouteSpec::new(64, 6)
        .scoring(Scoring::Sigmoid)
        .renormalize(true)
        .routed_scaling_factor(2.5);
    let plain = route_tables_host(&logits, &routed, None, slabs()).unwrap();
    let r = route_tables_host(&logits, &routed.shared_experts(2, 1.0), None, slabs()).unwrap();
    assert_eq!(r.k, 8);
    let n = r.sel.len();
    for t in 0..10 {
        assert_eq!(r.sel[t * 8..t * 8 + 6], plain.sel[t * 6..t * 6 + 6]);
        assert_eq!(
            bits(&r.selw[t * 8..t * 8 + 6]),
            bits(&plain.selw[t * 6..t * 6 + 6])
        );
        for i in 0..2 {
            let p = t * 8 + 6 + i;
            assert_eq!(r.sel[p], 64 + i as i32);
            assert_eq!(r.selw[p].to_bits(), 1.0f32.to_bits(), "written as given");
            assert_eq!(
                r.ptrs[2 * n + p],
                BASES.2 + (64 + i as u64) * STRIDES.2 as u64
            );
        }
    }
}

#[test]
fn a_nonfinite_token_is_counted_not_an_error() {
    common::need_library();
    let mut logits = vec![0.5f32; 8 * 4];
    logits[8 + 5] = f32::NAN;
    logits[16 + 2] = f32::NEG_INFINITY; // a masked expert: scores +0, the token is routed
    logits[24..32].fill(f32::NEG_INFINITY); // every expert masked: no softmax
    let spec = RouteSpec::new(8, 2).shared_experts(1, 0.5);
    let r = route_tables_host(&logits, &spec, None, slabs()).unwrap();
    assert_eq!(r.sel, [0, 1, 8, 0, 1, 8, 0, 1, 8, 0, 1, 8]);
    assert_eq!(bits(&r.selw[3..6]), [0, 0, 0]);
    assert_eq!(bits(&r.selw[9..12]), [0, 0, 0]);
    let seventh = 1.0f32 / 7.0; // the other seven experts share the softmax
    assert!((r.selw[6] - seventh).abs() < 1e-6 && r.selw[7] == r.selw[6]);
    assert_eq!(r.faults.nonfinite, 6, "all K pairs of tokens 1 and 3");
    assert_eq!(r.faults.first_pair, 3);
}

#[test]
fn zero_tokens_is_an_empty_result() {
    common::need_library();
    let none: [f32; 0] = [];
    let r = route_tables_host(&none, &RouteSpec::new(8, 2), None, slabs()).unwrap();
    assert!(r.sel.is_empty() && r.selw.is_empty() && r.ptrs.is_empty() && r.scl.is_empty());
    let t = vrows_tables_host_ex(&[], &[], 8, None, slabs(), &VrowsOptions::default()).unwrap();
    assert!(t.ptrs.is_empty() && t.scl.is_empty());
}

#[test]
fn bad_input_is_a_clear_error_never_a_panic() {
    common::need_library();
    let logits = vec![0.25f32; 64];
    let mut nan_bias = vec![0.0f32; 16];
    nan_bias[3] = f32::NAN;
    let short = [1.0f32; 3];
    let map = [0i32; 16];
    let dev = unsafe { memra::DevSlice::<f32>::from_raw(0x7000_0000, 16) };
    let m = Some((&short[..], &short[..], &short[..]));
    let cases: Vec<(&str, memra::Result<HostRoute>, Status, &str)> = vec![
        (
            "top_k 0",
            route_tables_host(&logits, &RouteSpec::new(16, 0), None, slabs()),
            Status::InvalidArg,
            "top_k",
        ),
        (
            "top_k huge",
            route_tables_host(&logits, &RouteSpec::new(16, u32::MAX), None, slabs()),
            Status::InvalidArg,
            "top_k",
        ),
        (
            "n_expert 0",
            route_tables_host(&logits, &RouteSpec::new(0, 1), None, slabs()),
            Status::InvalidArg,
            "n_expert",
        ),
        (
            "groups",
            route_tables_host(&logits, &RouteSpec::new(16, 2).groups(3, 1), None, slabs()),
            Status::InvalidArg,
            "n_group",
        ),
        (
            "NaN bias",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).bias(&nan_bias),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "bias[3]",
        ),
        (
            "short bias",
            route_tables_host(&logits, &RouteSpec::new(16, 2).bias(&short), None, slabs()),
            Status::InvalidArg,
            "bias holds 3",
        ),
        (
            "scale 0",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).routed_scaling_factor(0.0),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "routed_scaling_factor",
        ),
        (
            "shared past 32",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).shared_experts(u32::MAX, 1.0),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "n_shared",
        ),
        (
            "ragged logits",
            route_tables_host(&logits[..60], &RouteSpec::new(16, 2), None, slabs()),
            Status::InvalidArg,
            "multiple of n_expert",
        ),
        (
            "short planes",
            route_tables_host(&logits, &RouteSpec::new(16, 2), m, slabs()),
            Status::InvalidArg,
            "macros",
        ),
        (
            "device bias",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).bias_device(dev),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "device memory",
        ),
        (
            "dtype",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).logits_dtype(memra::LogitsDtype::Bf16),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "spec says Bf16",
        ),
        (
            "map without slots",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2).expert_map(&map, 0),
                None,
                slabs(),
            ),
            Status::InvalidArg,
            "n_local is 0",
        ),
        (
            "slab overflow",
            route_tables_host(
                &logits,
                &RouteSpec::new(16, 2),
                None,
                Slabs::new((u64::MAX, 0, 0), (1, 1, 1)),
            ),
            Status::SlabOverflow,
            "slabs->base[0]",
        ),
    ];
    for (what, r, status, needle) in cases {
        let e = r.expect_err(what);
        assert_eq!(e.status(), Some(status), "{what}: {e}");
        assert!(e.to_string().contains(needle), "{what}: {e}");
    }
    let o = VrowsOptions::default();
    let e = vrows_tables_host_ex(&[0, 1], &[1.0], 4, None, slabs(), &o).unwrap_err();
    assert!(e.to_string().contains("selw"), "{e}");
    let e = vrows_tables_host_ex(&[0], &[1.0], 4, None, slabs(), &o.expert_map(&map[..3], 1))
        .unwrap_err();
    assert!(e.to_string().contains("expert_map holds 3 elements"), "{e}");
    let e = vrows_tables_host_ex(&[0], &[1.0], 4, m, slabs(), &o.shared_experts(1)).unwrap_err();
    assert!(e.to_string().contains("5 slots"), "{e}");
}
