//! CPU tests (run in CI): the host arm against a plain 128-bit model of the
//! arithmetic, bit for bit, and the error paths. Needs libmemra
//! (`MEMRA_LIB`), no GPU.

mod common;

use common::Rng;
use memra::{vrows_tables_host, Engine, Error, Status};

fn reference(
    sel: &[i32],
    selw: &[f32],
    n_expert: u32,
    macros: Option<(&[f32], &[f32], &[f32])>,
    bases: (u64, u64, u64),
    strides: (usize, usize, usize),
) -> (Vec<u64>, Vec<u32>) {
    let n = sel.len();
    let (b, s) = ([bases.0, bases.1, bases.2], [strides.0, strides.1, strides.2]);
    let mut ptrs = vec![0u64; 3 * n];
    let mut scl = vec![0u32; 3 * n];
    for p in 0..n {
        let ok = sel[p] >= 0 && (sel[p] as u32) < n_expert;
        let ex = if ok { sel[p] as u128 } else { 0 };
        for k in 0..3 {
            let a = b[k] as u128 + ex * s[k] as u128;
            assert!(a < 1u128 << 64);
            ptrs[k * n + p] = a as u64;
        }
        if !ok {
            continue;
        }
        let e = ex as usize;
        let (g, u, d) = match macros {
            Some((g, u, d)) => (g[e], u[e], d[e]),
            None => (1.0, 1.0, 1.0),
        };
        // The product of two binary32 values is exact in binary64: one
        // rounding back gives the correctly rounded binary32 product.
        let canon = |x: f32| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() };
        scl[p] = canon(g);
        scl[n + p] = canon(u);
        scl[2 * n + p] = canon((selw[p] as f64 * d as f64) as f32);
    }
    (ptrs, scl)
}

impl Rng {
    fn special(&mut self) -> f32 {
        let r = self.next();
        let sign = ((r >> 63) as u32) << 31;
        f32::from_bits(match r % 8 {
            0 => sign | ((r >> 8) as u32 % 0x7f_ffff + 1),
            1 => sign,
            2 => sign | 0x7f80_0000,
            3 => sign | 0x7f80_0000 | ((r >> 9) as u32 % 0x7f_ffff + 1),
            _ => sign | (0x3a00_0000 + (r >> 11) as u32 % 0x0a00_0000),
        })
    }
}

#[test]
fn host_arm_matches_the_reference_bit_for_bit() {
    common::need_library();
    let mut rng = Rng(42);
    for &(n, n_expert) in &[(1usize, 1u32), (8, 256), (257, 64), (4099, 300)] {
        let sel: Vec<i32> = (0..n)
            .map(|_| match rng.next() % 50 {
                0 => -1,
                1 => n_expert as i32 + 3,
                _ => (rng.next() % n_expert as u64) as i32,
            })
            .collect();
        let selw: Vec<f32> = (0..n).map(|_| rng.special()).collect();
        let planes: Vec<Vec<f32>> = (0..3)
            .map(|_| (0..n_expert).map(|_| rng.special()).collect())
            .collect();
        let bases = (0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000);
        let strides = (24 << 20, 24 << 20, 48 << 20);
        for with in [false, true] {
            let mac = with.then_some((&planes[0][..], &planes[1][..], &planes[2][..]));
            let got = vrows_tables_host(&sel, &selw, n_expert, mac, bases, strides).unwrap();
            let (want_p, want_s) = reference(&sel, &selw, n_expert, mac, bases, strides);
            assert_eq!(got.ptrs, want_p);
            let got_s: Vec<u32> = got.scl.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got_s, want_s, "n={n} macros={with}");
            let bad = sel.iter().filter(|&&e| e < 0 || e as u32 >= n_expert).count();
            assert_eq!(got.faults.bad_expert as usize, bad);
        }
    }
}

#[test]
fn strides_past_4_and_8_gib_do_not_wrap() {
    common::need_library();
    let sel = [0, 255, 128];
    let selw = [1.0f32, 0.5, 0.25];
    let bases = (0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000);
    let strides = (24 << 20, 24 << 20, 48 << 20);
    let t = vrows_tables_host(&sel, &selw, 256, None, bases, strides).unwrap();
    assert_eq!(t.ptrs[1], 0x7f00_0000_0000 + 255 * (24u64 << 20));
    assert_eq!(t.ptrs[2 * 3 + 1], 0x7f80_0000_0000 + 255 * (48u64 << 20)); // 12 GiB in
}

#[test]
fn bad_input_is_a_clear_error() {
    common::need_library();
    let ok = (0u64, 0u64, 0u64);
    let st = |r: Result<memra::HostTables, Error>| r.unwrap_err();
    let e = st(vrows_tables_host(&[], &[], 4, None, ok, (1, 1, 1)));
    assert_eq!(e.status(), Some(Status::InvalidArg));
    assert!(e.to_string().contains("n_pairs"), "{e}");
    let e = st(vrows_tables_host(&[0], &[1.0], 0, None, ok, (1, 1, 1)));
    assert_eq!(e.status(), Some(Status::InvalidArg));
    assert!(e.to_string().contains("n_expert"), "{e}");
    let e = st(vrows_tables_host(&[0], &[1.0], 2, None, (u64::MAX, 0, 0), (1, 1, 1)));
    assert_eq!(e.status(), Some(Status::SlabOverflow));
    assert!(e.to_string().contains("slabs->base[0]"), "{e}");
    let e = st(vrows_tables_host(&[0, 1], &[1.0], 2, None, ok, (1, 1, 1)));
    assert!(e.to_string().contains("selw"), "{e}");
    let short = [1.0f32];
    let e = st(vrows_tables_host(&[0], &[1.0], 4, Some((&short, &short, &short)), ok, (1, 1, 1)));
    assert!(e.to_string().contains("macros"), "{e}");
    match e {
        Error::Call { status, message, .. } => {
            assert_eq!(status, Status::InvalidArg);
            assert!(!message.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let _: &dyn std::error::Error = &e_dyn();
}

fn e_dyn() -> Error {
    Error::Library("x".into())
}

#[test]
fn no_gpu_is_an_error_not_a_crash() {
    common::need_library();
    if memra::device_count().unwrap_or(0) > 0 {
        return; // a machine with a GPU: the gate test covers it
    }
    match Engine::new(0) {
        Err(e) => {
            let s = e.status().unwrap();
            assert!(matches!(s, Status::NoDriver | Status::NoDevice), "{e}");
            assert!(e.to_string().len() > 20, "{e}");
        }
        Ok(_) => panic!("an engine without a GPU"),
    }
    assert!(Engine::new(1 << 40).is_err());
}

#[test]
fn version_is_the_one_written_for() {
    common::need_library();
    let v = memra::version().unwrap();
    assert_eq!(v / 10000, 0);
    assert!(v / 100 % 100 >= 2, "{v}");
}
