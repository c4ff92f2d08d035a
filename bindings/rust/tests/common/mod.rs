//! What the test binaries share. For those that need libmemra: when it
//! cannot be opened, the binary stops at its first test with one line
//! saying why and how to point at it (`MEMRA_LIB`), instead of every test
//! failing on its own. Then the helpers several of them use: a seeded
//! generator, the slabs of a model's shape, bit patterns to compare, and
//! device memory known only by its raw address.

// Each test binary compiles the whole module and uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;

use memra::{DevSlice, DevSliceMut, DeviceBuffer, Engine, Pod, Stream};

/// Exits the test process (status 1) with one line on stderr, past the
/// test harness's capture, when libmemra cannot be opened.
pub fn need_library() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = memra::library_path() {
            let _ = writeln!(std::io::stderr(), "memra tests cannot run: {e}");
            std::process::exit(1);
        }
    });
}

pub type R<T> = Result<T, Box<dyn std::error::Error>>;

/// Slab bases and strides (bytes per expert slot) of a large model: 256
/// experts' rows reach past 4 GiB, the down plane's past 8 GiB.
pub const BASES: (u64, u64, u64) = (0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000);
pub const STRIDES: (usize, usize, usize) = (24 << 20, 24 << 20, 48 << 20);

/// splitmix64: the same numbers on every run. A test adds what it draws
/// (`impl Rng` in its own file).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The values' bits: equal only when bit for bit the same (NaNs included).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// An engine on device 0 and its own stream.
pub fn engine() -> R<(Engine, Stream)> {
    need_library();
    let e = Engine::new(0)?;
    let s = e.stream()?;
    Ok((e, s))
}

/// A device copy of `data` in memory from memra_alloc, known to the rest
/// of the test only by its raw address.
pub struct Raw<T> {
    _buf: DeviceBuffer<T>,
    ptr: u64,
    len: usize,
}

impl<T: Pod> Raw<T> {
    pub fn new(e: &Engine, s: &Stream, data: &[T]) -> R<Raw<T>> {
        let buf = e.alloc::<T>(data.len())?;
        let (ptr, len) = (buf.device_ptr(), data.len());
        e.upload_on(s, unsafe { DevSliceMut::from_raw(ptr, len) }, data)?;
        Ok(Raw {
            _buf: buf,
            ptr,
            len,
        })
    }
    pub fn filled(e: &Engine, s: &Stream, len: usize, v: T) -> R<Raw<T>> {
        Raw::new(e, s, &vec![v; len])
    }
    pub fn zeroed(e: &Engine, s: &Stream, len: usize) -> R<Raw<T>> {
        Raw::filled(e, s, len, T::default())
    }
    pub fn r(&self) -> DevSlice<'_, T> {
        unsafe { DevSlice::from_raw(self.ptr, self.len) }
    }
    pub fn w(&self) -> DevSliceMut<'_, T> {
        unsafe { DevSliceMut::from_raw(self.ptr, self.len) }
    }
    pub fn get(&self, e: &Engine, s: &Stream) -> R<Vec<T>> {
        Ok(e.download_vec_on(s, self.r())?)
    }
}
