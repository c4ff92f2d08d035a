//! Device memory as the calls see it: a borrowed address and a length,
//! whoever allocated it (memra's `DeviceBuffer`, cudarc, the engine's own
//! allocator), and the element types a device array may hold.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use crate::error::{Error, Result, Status};

mod sealed {
    pub trait Sealed {}
}

/// A plain element type of device arrays: any bit pattern is a valid value,
/// so copying device bytes into it is sound. Sealed: memra's element types
/// only.
pub trait Pod: Copy + Default + Send + Sync + 'static + sealed::Sealed {}

macro_rules! pod {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Pod for $t {})* };
}
pod!(i32, u32, f32, u64, i64, u16, u8);

/// A bfloat16 value by its bits: the top half of a binary32, as PyTorch's
/// `torch.bfloat16` stores it.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

/// An IEEE binary16 (`torch.float16`) value by its bits.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

impl sealed::Sealed for Bf16 {}
impl Pod for Bf16 {}
impl sealed::Sealed for F16 {}
impl Pod for F16 {}

impl Bf16 {
    /// The exact binary32 value (every bfloat16 is one).
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// `x` when its low 16 bits are zero (it is then exactly a bfloat16),
    /// else `None`: memra never rounds a value behind the caller's back.
    pub fn from_f32_exact(x: f32) -> Option<Bf16> {
        let b = x.to_bits();
        if b & 0xffff == 0 {
            Some(Bf16((b >> 16) as u16))
        } else {
            None
        }
    }
}

impl F16 {
    /// The exact binary32 value (every binary16 is one; a NaN stays a NaN
    /// of the same sign).
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x3ff;
        let bits = match (exp, man) {
            (0, 0) => sign,
            (0, m) => {
                // Subnormal: m * 2^-24, normalised into binary32.
                let shift = m.leading_zeros() - 21; // bring the top bit to bit 10
                let m = (m << shift) & 0x3ff;
                sign | ((127 - 15 + 1 - shift) << 23) | (m << 13)
            }
            (0x1f, 0) => sign | 0x7f80_0000,
            (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
            (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
        };
        f32::from_bits(bits)
    }
}

impl fmt::Debug for Bf16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bf16({:#06x} = {})", self.0, self.to_f32())
    }
}

impl fmt::Debug for F16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "F16({:#06x} = {})", self.0, self.to_f32())
    }
}

fn range_of(r: impl RangeBounds<usize>, len: usize, what: &str) -> Result<(usize, usize)> {
    let start = match r.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match r.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(Error::arg(
            Status::InvalidArg,
            format!("{what}: the range is outside the {len} elements it holds"),
        )),
    }
}

/// Where a device view's elements are: an address, a length and, for a
/// memra buffer's memory, the device of the engine that allocated it. The
/// same for a view that reads and one that writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mem {
    pub ptr: u64,
    pub len: usize,
    pub home: Option<i32>,
}

impl Mem {
    /// What a writable view holds, kept past its type (a call's outputs
    /// gathered in one struct).
    pub(crate) fn of<T>(s: DevSliceMut<'_, T>) -> Mem {
        s.mem
    }

    /// The elements of `T` in `range` (`what` names the call in the error).
    fn sub<T>(self, range: impl RangeBounds<usize>, what: &str) -> Result<Mem> {
        let (start, len) = range_of(range, self.len, what)?;
        Ok(Mem {
            ptr: self
                .ptr
                .wrapping_add((start as u64).wrapping_mul(std::mem::size_of::<T>() as u64)),
            len,
            home: self.home,
        })
    }
}

/// `len` elements of `T` in device memory at `ptr` (a `CUdeviceptr`),
/// borrowed for `'a`: what a call reads. From a memra buffer
/// (`buf.slice()`, `(&buf).into()`) or, for memory allocated elsewhere,
/// with the `unsafe` [`DevSlice::from_raw`].
///
/// A view of a memra buffer knows the device of the engine that allocated
/// it: another device's engine refuses it (`InvalidArg`) instead of
/// launching on memory it cannot reach. A view from `from_raw` is the
/// caller's promise, as in C.
#[derive(Clone, Copy)]
pub struct DevSlice<'a, T> {
    mem: Mem,
    _t: PhantomData<&'a [T]>,
}

/// `len` elements of `T` in device memory that a call writes: the device
/// counterpart of `&'a mut [T]` (not `Copy`; reborrow with `.reborrow()`).
pub struct DevSliceMut<'a, T> {
    mem: Mem,
    _t: PhantomData<&'a mut [T]>,
}

/// What the two views share: the same memory, read or written.
macro_rules! device_view {
    ($view:ident) => {
        impl<'a, T> $view<'a, T> {
            fn at(mem: Mem) -> $view<'a, T> {
                $view {
                    mem,
                    _t: PhantomData,
                }
            }

            /// A memra buffer's memory, on the device of ordinal `home`.
            pub(crate) fn of_buffer(ptr: u64, len: usize, home: i32) -> $view<'a, T> {
                $view::at(Mem {
                    ptr,
                    len,
                    home: Some(home),
                })
            }

            /// The device of the engine whose buffer this is (None: from
            /// `from_raw`).
            pub(crate) fn home(&self) -> Option<i32> {
                self.mem.home
            }

            /// The device address (a `CUdeviceptr`).
            pub fn device_ptr(&self) -> u64 {
                self.mem.ptr
            }

            pub fn len(&self) -> usize {
                self.mem.len
            }

            pub fn is_empty(&self) -> bool {
                self.mem.len == 0
            }
        }

        impl<T> fmt::Debug for $view<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    concat!(stringify!($view), "({:#x}, {} x {})"),
                    self.mem.ptr,
                    self.mem.len,
                    std::any::type_name::<T>()
                )
            }
        }
    };
}

device_view!(DevSlice);
device_view!(DevSliceMut);

impl<'a, T> DevSlice<'a, T> {
    /// A view of memory memra cannot check.
    ///
    /// # Safety
    /// `ptr .. ptr + len * size_of::<T>()` must be device memory of the
    /// context the engine uses (the device's primary context, which PyTorch
    /// and cudarc share), allocated and holding `T`s for as long as any work
    /// queued with this view may run (launches are asynchronous: keep the
    /// allocation alive until the stream has passed them), and not written
    /// by anything else while that work reads it. A null `ptr` is accepted
    /// with `len == 0` only.
    pub unsafe fn from_raw(ptr: u64, len: usize) -> DevSlice<'a, T> {
        DevSlice::at(Mem {
            ptr,
            len,
            home: None,
        })
    }

    /// The elements in `range`; an error (not a panic) when it does not
    /// lie inside the slice.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DevSlice<'a, T>> {
        Ok(DevSlice::at(self.mem.sub::<T>(range, "DevSlice::slice")?))
    }
}

impl<'a, T> DevSliceMut<'a, T> {
    /// A writable view of memory memra cannot check.
    ///
    /// # Safety
    /// As [`DevSlice::from_raw`], and nothing else may read or write the
    /// range while work queued with this view may run.
    pub unsafe fn from_raw(ptr: u64, len: usize) -> DevSliceMut<'a, T> {
        DevSliceMut::at(Mem {
            ptr,
            len,
            home: None,
        })
    }

    /// A shorter-lived writable view of the same memory.
    pub fn reborrow(&mut self) -> DevSliceMut<'_, T> {
        DevSliceMut::at(self.mem)
    }

    /// The same memory, read-only.
    pub fn as_slice(&self) -> DevSlice<'_, T> {
        DevSlice::at(self.mem)
    }

    /// The elements in `range`, writable.
    pub fn slice_mut(self, range: impl RangeBounds<usize>) -> Result<DevSliceMut<'a, T>> {
        Ok(DevSliceMut::at(
            self.mem.sub::<T>(range, "DevSliceMut::slice_mut")?,
        ))
    }
}

impl<'a, T> From<DevSliceMut<'a, T>> for DevSlice<'a, T> {
    fn from(s: DevSliceMut<'a, T>) -> DevSlice<'a, T> {
        DevSlice::at(s.mem)
    }
}

/// `slice` must hold at least `need` elements.
pub(crate) fn need(what: &str, len: usize, need: usize, why: &str) -> Result<()> {
    if len < need {
        return Err(Error::arg(
            Status::InvalidArg,
            format!("{what} holds {len} elements; {why} needs {need}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_converts_exactly() {
        // Every binary16 against the value its fields say, computed in f64.
        for h in 0..=u16::MAX {
            let got = F16(h).to_f32();
            let (s, e, m) = (
                (h >> 15) as i32,
                ((h >> 10) & 0x1f) as i32,
                (h & 0x3ff) as f64,
            );
            let sign: f64 = if s == 1 { -1.0 } else { 1.0 };
            if e == 0x1f {
                if m == 0.0 {
                    assert_eq!(got, (sign * f64::INFINITY) as f32, "{h:#x}");
                } else {
                    assert!(got.is_nan(), "{h:#x}");
                    assert_eq!(got.to_bits() >> 31, s as u32);
                }
                continue;
            }
            let want = if e == 0 {
                sign * m * 2f64.powi(-24)
            } else {
                sign * (1.0 + m / 1024.0) * 2f64.powi(e - 15)
            };
            assert_eq!(got.to_bits(), (want as f32).to_bits(), "{h:#x}");
        }
    }

    #[test]
    fn bf16_is_the_top_half() {
        assert_eq!(Bf16(0x3f80).to_f32(), 1.0);
        assert_eq!(Bf16::from_f32_exact(-2.5), Some(Bf16(0xc020)));
        assert_eq!(Bf16::from_f32_exact(1.0 + f32::EPSILON), None);
    }

    #[test]
    fn slices_stay_inside() {
        let s: DevSlice<'_, f32> = unsafe { DevSlice::from_raw(0x1000, 8) };
        let t = s.slice(2..6).unwrap();
        assert_eq!((t.device_ptr(), t.len()), (0x1008, 4));
        assert_eq!(s.slice(..).unwrap().len(), 8);
        assert_eq!(s.slice(8..).unwrap().len(), 0);
        for bad in [s.slice(3..9), s.slice(9..), s.slice(..=8)] {
            let e = bad.unwrap_err();
            assert_eq!(e.status(), Some(Status::InvalidArg));
            assert!(e.to_string().contains("8 elements"), "{e}");
        }
        #[allow(clippy::reversed_empty_ranges)]
        let e = s.slice(5..2).unwrap_err();
        assert_eq!(e.status(), Some(Status::InvalidArg));
        let m: DevSliceMut<'_, u64> = unsafe { DevSliceMut::from_raw(0x2000, 4) };
        let m = m.slice_mut(1..).unwrap();
        assert_eq!((m.device_ptr(), m.len()), (0x2008, 3));
    }
}
