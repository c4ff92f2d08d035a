//! Routing and the option tables on the device, on CALLER-OWNED device
//! pointers, against the host arm bit for bit: every chosen expert, weight,
//! pointer, scale and fault count, for the routers of Mixtral, Qwen3-MoE,
//! DeepSeek-V2 and V3, Kimi-K2, GLM-4.5 and Llama-4, in f32, bf16 and f16,
//! with the bias mirrored or read in place, an expert-parallel map and
//! fused shared experts, through both routing kernels (up to 512 tokens
//! block per token, past it warp per token).
//!
//! The buffers come from `memra_alloc` (the crate's `Engine::alloc`), but
//! every call is handed their raw `u64` addresses through
//! `DevSlice::from_raw`, as a serving engine hands addresses from cudarc or
//! its own allocator. Self-contained: no files at run time.
//!
//! Needs a CUDA device: `cargo test --offline --test route_device --
//! --ignored --test-threads=1`. CI runs it on the mock driver (a
//! libcuda.so.1 that runs the kernel source on the host, tools/test.sh).

mod common;

use common::{bits, Raw, Rng, BASES, R, STRIDES};
use memra::{
    route_tables_host, vrows_tables_host_ex, Bf16, DevSlice, DevSliceMut, Engine, Faults,
    GroupScoring, HostRoute, Layer, LogitsElem, RouteOut, RouteSpec, Scoring, Slabs, Status,
    Stream, VrowsOptions, F16,
};

impl Rng {
    /// A router logit in about [-8, 8], with many near-ties (few values).
    fn logit(&mut self) -> f32 {
        ((self.next() % 4096) as f32 - 2048.0) / 256.0
    }
}

/// Logits of each dtype, with a NaN and an infinity in two tokens.
trait Gen: LogitsElem {
    fn gen(rng: &mut Rng) -> Self;
    fn nan() -> Self;
    fn inf() -> Self;
}
impl Gen for f32 {
    fn gen(rng: &mut Rng) -> f32 {
        rng.logit() + (rng.next() % 97) as f32 * 1e-5
    }
    fn nan() -> f32 {
        f32::NAN
    }
    fn inf() -> f32 {
        f32::INFINITY
    }
}
impl Gen for Bf16 {
    fn gen(rng: &mut Rng) -> Bf16 {
        Bf16((rng.logit().to_bits() >> 16) as u16)
    }
    fn nan() -> Bf16 {
        Bf16(0x7fc0)
    }
    fn inf() -> Bf16 {
        Bf16(0xff80)
    }
}
impl Gen for F16 {
    fn gen(rng: &mut Rng) -> F16 {
        // sign, exponent 8..18 (about 2^-7 .. 2^3), any mantissa
        let r = rng.next();
        F16(((r & 1) << 15) as u16 | ((8 + (r >> 1) % 11) << 10) as u16 | ((r >> 8) & 0x3ff) as u16)
    }
    fn nan() -> F16 {
        F16(0x7e00)
    }
    fn inf() -> F16 {
        F16(0x7c00)
    }
}

fn logits<L: Gen>(rng: &mut Rng, n_tokens: usize, n_expert: usize) -> Vec<L> {
    let mut v: Vec<L> = (0..n_tokens * n_expert).map(|_| L::gen(rng)).collect();
    if n_tokens > 5 {
        v[3 * n_expert + 1] = L::nan();
        v[5 * n_expert + n_expert - 1] = L::inf();
    }
    v
}

/// How many of `a` and `b` differ, and the first few, for the message.
fn diff<T: PartialEq + std::fmt::Debug>(what: &str, a: &[T], b: &[T]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{what}: {} vs {} entries", a.len(), b.len()));
    }
    let bad: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
    if bad.is_empty() {
        return None;
    }
    let first: Vec<String> = bad
        .iter()
        .take(4)
        .map(|&i| format!("[{i}] dev {:?} host {:?}", a[i], b[i]))
        .collect();
    Some(format!(
        "{what}: {} of {} differ: {}",
        bad.len(),
        a.len(),
        first.join(", ")
    ))
}

struct Dev {
    e: Engine,
    s: Stream,
}

impl Dev {
    /// Routes `logits` on the device through raw pointers and compares
    /// everything with the host arm's `host`.
    fn route<L: Gen>(
        &self,
        name: &str,
        logits: &[L],
        n_tokens: usize,
        spec: &RouteSpec<'_>,
        layer: &Layer<'_>,
        host: &HostRoute,
    ) -> R<()> {
        let (e, s) = (&self.e, &self.s);
        let n = n_tokens * spec.pairs_per_token() as usize;
        let x = Raw::new(e, s, logits)?;
        // Poisoned outputs: a pair the kernel skipped cannot pass.
        let sel = Raw::new(e, s, &vec![-7i32; n])?;
        let selw = Raw::new(e, s, &vec![f32::from_bits(0x7fbf_0000); n])?;
        let ptrs = Raw::new(e, s, &vec![0xdead_beef_u64; 3 * n])?;
        let scl = Raw::new(e, s, &vec![f32::from_bits(0x7fbf_0000); 3 * n])?;
        e.faults(s, true)?;
        e.route_prepare_layer(layer.il, spec, layer.macros, s)?;
        let out = RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w());
        e.route_tables(s, x.r(), n_tokens, spec, layer, out)?;
        let f = e.faults(s, true)?;
        let mut bad = Vec::new();
        bad.extend(diff("sel", &sel.get(e, s)?, &host.sel));
        bad.extend(diff("selw", &bits(&selw.get(e, s)?), &bits(&host.selw)));
        bad.extend(diff("ptrs", &ptrs.get(e, s)?, &host.ptrs));
        bad.extend(diff("scl", &bits(&scl.get(e, s)?), &bits(&host.scl)));
        bad.extend(diff("faults", &[f], &[host.faults]));
        if !bad.is_empty() {
            return Err(format!("{name}: {}", bad.join("; ")).into());
        }
        println!(
            "  [{name}] OK: {n_tokens} tokens, {n} pairs, {} pointers and {} scales exact, faults {:?}",
            3 * n,
            3 * n,
            f
        );
        Ok(())
    }
}

fn engine() -> R<Dev> {
    let (e, s) = common::engine()?;
    println!(
        "[route-device] GPU0: {} (sm_{})",
        e.ctx().name()?,
        e.ctx().sm()?
    );
    Ok(Dev { e, s })
}

fn planes(rng: &mut Rng, n: usize) -> Vec<Vec<f32>> {
    (0..3)
        .map(|_| {
            (0..n)
                .map(|_| 0.25 + (rng.next() % 4096) as f32 / 1024.0)
                .collect()
        })
        .collect()
}

/// One model's router on the device against the host arm, for each token
/// count (both kernels) and dtype.
fn model(d: &Dev, rng: &mut Rng, name: &str, il: u16, spec: RouteSpec<'_>, macros: bool) -> R<()> {
    let n_expert = spec.n_expert() as usize;
    let p = planes(rng, spec.n_slots() as usize);
    let m = macros.then(|| (&p[0][..], &p[1][..], &p[2][..]));
    let slabs = Slabs::new(BASES, STRIDES);
    let layer = Layer {
        il,
        macros: m,
        slabs,
    };
    for &n_tokens in &[1usize, 64, 700] {
        macro_rules! one {
            ($t:ty, $tag:expr) => {{
                let x: Vec<$t> = logits(rng, n_tokens, n_expert);
                let host = route_tables_host(&x, &spec, m, slabs)?;
                d.route(
                    &format!("{name} {} x{n_tokens}", $tag),
                    &x,
                    n_tokens,
                    &spec,
                    &layer,
                    &host,
                )?;
            }};
        }
        one!(f32, "f32");
        one!(Bf16, "bf16");
        one!(F16, "f16");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn routers_of_the_models_match_the_host_arm_on_raw_pointers() -> R<()> {
    let d = engine()?;
    let mut rng = Rng(2024);
    let bias: Vec<f32> = (0..384)
        .map(|_| (rng.next() % 512) as f32 / 4096.0 - 0.0625)
        .collect();
    let sig = Scoring::Sigmoid;
    model(
        &d,
        &mut rng,
        "Mixtral",
        1,
        RouteSpec::new(8, 2).renormalize(true),
        false,
    )?;
    model(
        &d,
        &mut rng,
        "Qwen3-MoE",
        2,
        RouteSpec::new(128, 8).renormalize(true),
        true,
    )?;
    let v2 = RouteSpec::new(160, 6)
        .groups(8, 3)
        .routed_scaling_factor(16.0);
    model(&d, &mut rng, "DeepSeek-V2 (group max)", 3, v2, true)?;
    let v3 = RouteSpec::new(256, 8)
        .scoring(sig)
        .groups(8, 4)
        .bias(&bias[..256])
        .renormalize(true)
        .routed_scaling_factor(2.5);
    assert_eq!(v3.resolved_group_scoring(), GroupScoring::Top2Sum);
    model(&d, &mut rng, "DeepSeek-V3 (bias, top-2 sum)", 4, v3, true)?;
    let kimi = RouteSpec::new(384, 8)
        .scoring(sig)
        .bias(&bias)
        .renormalize(true)
        .routed_scaling_factor(2.827);
    model(&d, &mut rng, "Kimi-K2", 5, kimi, false)?;
    let glm = RouteSpec::new(160, 8)
        .scoring(sig)
        .bias(&bias[..160])
        .renormalize(true)
        .routed_scaling_factor(2.5);
    model(&d, &mut rng, "GLM-4.5", 6, glm, true)?;
    model(
        &d,
        &mut rng,
        "Llama-4 (top-1 sigmoid)",
        7,
        RouteSpec::new(16, 1).scoring(sig),
        false,
    )?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn a_bias_in_device_memory_is_read_in_place() -> R<()> {
    // On the legacy default stream (null), as PyTorch's default stream is.
    let d = Dev {
        s: Stream::legacy(),
        ..engine()?
    };
    let (e, s) = (&d.e, &d.s);
    let mut rng = Rng(77);
    let n_expert = 256usize;
    let bias: Vec<f32> = (0..n_expert)
        .map(|_| (rng.next() % 256) as f32 / 4096.0)
        .collect();
    let b16: Vec<Bf16> = bias
        .iter()
        .map(|&x| Bf16::from_f32_exact(x).unwrap())
        .collect();
    let dev32 = Raw::new(e, s, &bias)?;
    let dev16 = Raw::new(e, s, &b16)?;
    let base = RouteSpec::new(256, 8)
        .scoring(Scoring::Sigmoid)
        .groups(8, 4)
        .renormalize(true)
        .routed_scaling_factor(2.5);
    let layer = Layer::new(20, Slabs::new(BASES, STRIDES));
    for &n_tokens in &[64usize, 700] {
        let x: Vec<Bf16> = logits(&mut rng, n_tokens, n_expert);
        let host = route_tables_host(&x, &base.bias_host(&bias), None, layer.slabs)?;
        d.route(
            "bias f32 in place",
            &x,
            n_tokens,
            &base.bias_device(dev32.r()),
            &layer,
            &host,
        )?;
        let host16 = route_tables_host(&x, &base.bias_host(&b16), None, layer.slabs)?;
        d.route(
            "bias bf16 in place",
            &x,
            n_tokens,
            &base.bias_device(dev16.r()),
            &layer,
            &host16,
        )?;
        // Held in a host array, the same values route the same.
        let mirrored = route_tables_host(&x, &base.bias(&bias), None, layer.slabs)?;
        assert_eq!(mirrored.sel, host.sel);
    }
    // A NaN in the bias reaches every token: counted, not an error, alike.
    let mut poisoned = bias.clone();
    poisoned[17] = f32::NAN;
    let dev_nan = Raw::new(e, s, &poisoned)?;
    let x: Vec<f32> = logits(&mut rng, 64, n_expert);
    let host = route_tables_host(&x, &base.bias_host(&poisoned), None, layer.slabs)?;
    assert_eq!(host.faults.nonfinite, 64 * 8);
    d.route(
        "a NaN in the bias",
        &x,
        64,
        &base.bias_device(dev_nan.r()),
        &layer,
        &host,
    )?;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn expert_parallelism_and_shared_experts_match_the_host_arm() -> R<()> {
    let d = engine()?;
    let (e, s) = (&d.e, &d.s);
    let mut rng = Rng(99);
    let n_expert = 256usize;
    let bias: Vec<f32> = (0..n_expert)
        .map(|_| (rng.next() % 512) as f32 / 4096.0)
        .collect();
    let slabs = Slabs::new(BASES, STRIDES);
    // Rank 2 of 4 holds experts 128..192 in slots 0..64, then one shared
    // expert in slot 64; two entries are out of range (faults).
    let mut map: Vec<i32> = (0..n_expert as i32)
        .map(|g| if g / 64 == 2 { g - 128 } else { -1 })
        .collect();
    map[130] = 64; // past n_local
    map[7] = -2;
    let dmap = Raw::new(e, s, &map)?;
    let p = planes(&mut rng, 65);
    let m = Some((&p[0][..], &p[1][..], &p[2][..]));
    let layer = Layer {
        il: 30,
        macros: m,
        slabs,
    };
    let spec = |map_host: bool| {
        let s = RouteSpec::new(256, 8)
            .scoring(Scoring::Sigmoid)
            .groups(8, 4)
            .bias(&bias)
            .renormalize(true)
            .routed_scaling_factor(2.5)
            .shared_experts(1, 1.0);
        if map_host {
            s.expert_map(&map, 64)
        } else {
            s.expert_map_device(dmap.r(), 64)
        }
    };
    for &n_tokens in &[1usize, 200, 600] {
        let x: Vec<f32> = logits(&mut rng, n_tokens, n_expert);
        let host = route_tables_host(&x, &spec(true), m, slabs)?;
        assert!(host.faults.not_local > 0);
        d.route(
            "EP rank 2 of 4 + 1 shared",
            &x,
            n_tokens,
            &spec(false),
            &layer,
            &host,
        )?;
    }

    // The option tables from a sel produced elsewhere, on raw pointers.
    let n_pairs = 3000usize;
    let sel: Vec<i32> = (0..n_pairs)
        .map(|_| match rng.next() % 40 {
            0 => 256, // the shared expert
            1 => 300, // out of range
            _ => (rng.next() % 256) as i32,
        })
        .collect();
    let selw: Vec<f32> = (0..n_pairs)
        .map(|_| (rng.next() % 1000) as f32 / 997.0)
        .collect();
    let o_host = VrowsOptions::default()
        .expert_map(&map, 64)
        .shared_experts(1);
    let o_dev = VrowsOptions::default()
        .expert_map_device(dmap.r(), 64)
        .shared_experts(1);
    let want = vrows_tables_host_ex(&sel, &selw, 256, m, slabs, &o_host)?;
    let (dsel, dselw) = (Raw::new(e, s, &sel)?, Raw::new(e, s, &selw)?);
    let ptrs = Raw::<u64>::zeroed(e, s, 3 * n_pairs)?;
    let scl = Raw::<f32>::zeroed(e, s, 3 * n_pairs)?;
    e.faults(s, true)?;
    e.prepare_layer(31, m, s)?;
    let l31 = Layer { il: 31, ..layer };
    e.vrows_tables_ex(
        s,
        dsel.r(),
        dselw.r(),
        n_pairs,
        256,
        &l31,
        &o_dev,
        ptrs.w(),
        scl.w(),
    )?;
    let f = e.faults(s, true)?;
    let mut bad = Vec::new();
    bad.extend(diff("ptrs", &ptrs.get(e, s)?, &want.ptrs));
    bad.extend(diff("scl", &bits(&scl.get(e, s)?), &bits(&want.scl)));
    bad.extend(diff("faults", &[f], &[want.faults]));
    assert!(bad.is_empty(), "vrows_tables_ex: {}", bad.join("; "));
    assert!(
        want.faults.not_local > 0 && want.faults.bad_expert > 0,
        "{:?}",
        want.faults
    );
    println!("  [vrows_tables_ex, EP + shared] OK: {n_pairs} pairs exact, faults {f:?}");
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device (or the mock driver, as tools/test.sh runs it)"]
fn zero_tokens_and_bad_input_launch_nothing() -> R<()> {
    let d = engine()?;
    let (e, s) = (&d.e, &d.s);
    let layer = Layer::new(40, Slabs::new(BASES, STRIDES));
    let spec = RouteSpec::new(64, 4);
    // Zero tokens: valid with null (empty) buffers, and nothing launched.
    let out = unsafe {
        RouteOut::new(
            DevSliceMut::<i32>::from_raw(0, 0),
            DevSliceMut::<f32>::from_raw(0, 0),
            DevSliceMut::<u64>::from_raw(0, 0),
            DevSliceMut::<f32>::from_raw(0, 0),
        )
    };
    e.faults(s, true)?;
    e.route_tables(
        s,
        unsafe { DevSlice::<f32>::from_raw(0, 0) },
        0,
        &spec,
        &layer,
        out,
    )?;

    let x = Raw::<f32>::zeroed(e, s, 64 * 4)?;
    let sel = Raw::new(e, s, &[-7i32; 16])?;
    let selw = Raw::<f32>::zeroed(e, s, 16)?;
    let ptrs = Raw::<u64>::zeroed(e, s, 48)?;
    let scl = Raw::<f32>::zeroed(e, s, 47)?; // one short
    let r = e.route_tables(
        s,
        x.r(),
        4,
        &spec,
        &layer,
        RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w()),
    );
    let err = r.unwrap_err();
    assert_eq!(err.status(), Some(Status::InvalidArg));
    assert!(
        err.to_string().contains("out.scl holds 47 elements"),
        "{err}"
    );
    let scl = Raw::<f32>::zeroed(e, s, 48)?;
    let host_map = [0i32; 64];
    let bad = spec.expert_map(&host_map, 1);
    let r = e.route_tables(
        s,
        x.r(),
        4,
        &bad,
        &layer,
        RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w()),
    );
    let err = r.unwrap_err();
    assert!(
        err.to_string().contains("expert_map is in host memory"),
        "{err}"
    );
    let r = e.route_tables(
        s,
        x.r(),
        5,
        &spec,
        &layer,
        RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w()),
    );
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("logits holds 256 elements"));
    let r = e.route_tables(
        s,
        x.r(),
        4,
        &spec.groups(3, 1),
        &layer,
        RouteOut::new(sel.w(), selw.w(), ptrs.w(), scl.w()),
    );
    assert!(r.unwrap_err().to_string().contains("n_group"));
    // Nothing of the above launched: sel is as written, no faults counted.
    assert_eq!(sel.get(e, s)?, vec![-7; 16]);
    assert_eq!(
        e.faults(s, true)?,
        Faults {
            first_pair: u32::MAX,
            ..Default::default()
        }
    );
    Ok(())
}
