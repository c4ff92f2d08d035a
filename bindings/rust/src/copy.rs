//! Device memory from memra and copies to and from any device memory, in
//! CUDA's orders (docs/streams.md), under the library's names:
//! `upload`/`download` like `cuMemcpy` (after the work queued on the legacy
//! default stream), `upload_on`/`download_on` ordered on the caller's
//! stream; both complete on return.

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

use crate::dev::{DevSlice, DevSliceMut, Pod};
use crate::error::{Error, Result, Status};
use crate::{check, ffi, DeviceBuffer, Engine, Stream};

fn bytes_of<T>(len: usize, what: &str) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::arg(
            Status::InvalidArg,
            format!("{what}: {len} elements pass the address space"),
        )
    })
}

fn fits(dst: usize, src: usize, what: &str) -> Result<()> {
    if dst < src {
        return Err(Error::arg(
            Status::InvalidArg,
            format!("{what}: {src} elements do not fit the {dst} of the destination"),
        ));
    }
    Ok(())
}

impl Engine {
    /// `len` elements of device memory on the engine's device, freed on
    /// drop. The contents are whatever the memory held (write before
    /// reading). Its address (`device_ptr()`) may be handed around raw.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = bytes_of::<T>(len, "alloc")?.max(1);
        let mut ptr: ffi::DevPtr = 0;
        check(unsafe { (ffi::lib()?.memra_alloc)(self.inner.ptr, bytes, &mut ptr) })?;
        Ok(DeviceBuffer {
            engine: self.inner.clone(),
            ptr,
            len,
            _t: PhantomData,
        })
    }

    /// Copies `src` to the start of `dst`, ordered like `cuMemcpy`: after
    /// everything queued on the legacy default stream (and so on blocking
    /// streams); complete on return. `MEMRA_ERR_CAPTURE` (the capture
    /// intact) where that would join a stream capture.
    pub fn upload<'a, T: Pod>(&self, dst: impl Into<DevSliceMut<'a, T>>, src: &[T]) -> Result<()> {
        let dst = dst.into();
        self.check_home("upload: dst", dst.home())?;
        fits(dst.len(), src.len(), "upload")?;
        if src.is_empty() {
            return Ok(());
        }
        let f = ffi::lib()?.memra_upload;
        check(unsafe {
            f(
                self.inner.ptr,
                dst.device_ptr(),
                src.as_ptr() as *const c_void,
                std::mem::size_of_val(src),
            )
        })
    }

    /// As `upload`, ordered on `stream` (for engines on non-blocking
    /// streams); complete on return.
    pub fn upload_on<'a, T: Pod>(
        &self,
        stream: &Stream,
        dst: impl Into<DevSliceMut<'a, T>>,
        src: &[T],
    ) -> Result<()> {
        let stream = self.raw_stream(stream)?;
        let dst = dst.into();
        self.check_home("upload_on: dst", dst.home())?;
        fits(dst.len(), src.len(), "upload_on")?;
        if src.is_empty() {
            return Ok(());
        }
        check(unsafe {
            (ffi::lib()?.memra_upload_on)(
                self.inner.ptr,
                dst.device_ptr(),
                src.as_ptr() as *const c_void,
                std::mem::size_of_val(src),
                stream,
            )
        })
    }

    /// Fills `dst` from the start of `src`, ordered like `cuMemcpy`;
    /// complete on return.
    pub fn download<'a, T: Pod>(
        &self,
        dst: &mut [T],
        src: impl Into<DevSlice<'a, T>>,
    ) -> Result<()> {
        let src = src.into();
        self.check_home("download: src", src.home())?;
        fits(src.len(), dst.len(), "download (the source)")?;
        if dst.is_empty() {
            return Ok(());
        }
        let f = ffi::lib()?.memra_download;
        check(unsafe {
            f(
                self.inner.ptr,
                dst.as_mut_ptr() as *mut c_void,
                src.device_ptr(),
                std::mem::size_of_val(dst),
            )
        })
    }

    /// As `download`, ordered on `stream`; complete on return.
    pub fn download_on<'a, T: Pod>(
        &self,
        stream: &Stream,
        dst: &mut [T],
        src: impl Into<DevSlice<'a, T>>,
    ) -> Result<()> {
        let stream = self.raw_stream(stream)?;
        let src = src.into();
        self.check_home("download_on: src", src.home())?;
        fits(src.len(), dst.len(), "download_on (the source)")?;
        if dst.is_empty() {
            return Ok(());
        }
        check(unsafe {
            (ffi::lib()?.memra_download_on)(
                self.inner.ptr,
                dst.as_mut_ptr() as *mut c_void,
                src.device_ptr(),
                std::mem::size_of_val(dst),
                stream,
            )
        })
    }

    /// A new vector of `src`'s elements, ordered on `stream`.
    pub fn download_vec_on<'a, T: Pod>(
        &self,
        stream: &Stream,
        src: impl Into<DevSlice<'a, T>>,
    ) -> Result<Vec<T>> {
        let src = src.into();
        let mut v = vec![T::default(); src.len()];
        self.download_on(stream, &mut v, src)?;
        Ok(v)
    }

    /// Programmatic dependent launch for this engine's later table and
    /// routing launches (see `memra_engine_set_pdl`): whether it is in
    /// effect (sm_90 and newer, a CUDA 12.3+ driver).
    pub fn set_pdl(&self, enable: bool) -> Result<bool> {
        let f = ffi::lib()?.memra_engine_set_pdl;
        let mut active: c_int = 0;
        check(unsafe { f(self.inner.ptr, enable as c_int, &mut active) })?;
        Ok(active != 0)
    }
}
