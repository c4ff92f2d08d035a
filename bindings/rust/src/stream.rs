//! The streams calls are queued on. The driver dereferences a stream
//! handle, so safe code may only name streams that exist: a raw integer
//! becomes a [`Stream`] in `unsafe` code only.

use std::fmt;
use std::os::raw::c_void;
use std::sync::Arc;

use crate::error::{Error, Result, Status};
use crate::Inner;

/// A raw `CUstream` (cudarc's `CUstream`, PyTorch's `cuda_stream`, cast to
/// `*mut c_void`), for [`Stream::from_raw`]. Null is the legacy default
/// stream.
pub type CuStream = *mut c_void;

/// A CUDA stream a call is queued on, with CUDA's meaning (docs/streams.md).
/// Safe code gets one only from
///
/// - [`Stream::legacy`]: the legacy default stream (null; PyTorch's default
///   stream is this one), or [`STREAM_LEGACY`](crate::STREAM_LEGACY)
///   (`CU_STREAM_LEGACY`, the same stream named explicitly);
/// - [`Stream::per_thread`]: `CU_STREAM_PER_THREAD`, the calling thread's
///   default stream;
/// - [`Engine::stream`](crate::Engine::stream): the engine's own
///   non-blocking stream, which keeps its engine alive as long as it lives.
///
/// A stream of your own (cudarc's, PyTorch's `cuda_stream`) comes in
/// through the `unsafe` [`Stream::from_raw`], where you vouch for it. An
/// integer never becomes a stream in safe code (`e.sync(0x1000 as
/// CuStream)` compiled, and the driver dereferenced the address):
///
/// ```compile_fail
/// #![forbid(unsafe_code)]
/// fn sync_on_an_address(e: &memra::Engine) -> memra::Result<()> {
///     e.sync(0x1000 as memra::CuStream) // a raw handle is not a stream
/// }
/// ```
///
/// ```compile_fail
/// #![forbid(unsafe_code)]
/// fn sync_on_an_address(e: &memra::Engine) -> memra::Result<()> {
///     e.sync(&(0x1000 as memra::CuStream).into()) // nor converts into one
/// }
/// ```
///
/// ```compile_fail
/// #![forbid(unsafe_code)]
/// fn sync_on_an_address(e: &memra::Engine) -> memra::Result<()> {
///     // from_raw is an unsafe fn: safe code cannot call it
///     e.sync(&memra::Stream::from_raw(0x1000 as memra::CuStream))
/// }
/// ```
///
/// The streams safe code can name:
///
/// ```no_run
/// # fn main() -> memra::Result<()> {
/// let e = memra::Engine::new(0)?;
/// e.sync(&memra::Stream::legacy())?;
/// e.sync(&memra::Stream::per_thread())?;
/// e.sync(&e.stream()?)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Stream {
    raw: CuStream,
    /// The engine whose own stream this is: kept alive with the stream, and
    /// refused by another device's engine.
    engine: Option<Arc<Inner>>,
}

// Safety: a CUDA stream handle may be used from any thread (the driver's
// calls on it are thread-safe), and an engine is Send and Sync.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The legacy default stream (null), as PyTorch's default stream.
    pub fn legacy() -> Stream {
        Stream {
            raw: std::ptr::null_mut(),
            engine: None,
        }
    }

    /// `CU_STREAM_PER_THREAD`: the calling thread's default stream. Other
    /// code on this thread may be capturing it into a CUDA graph; a call
    /// made then is captured too, and that graph's rules are those of
    /// [`Stream::from_raw`].
    pub fn per_thread() -> Stream {
        Stream {
            raw: 0x2 as CuStream,
            engine: None,
        }
    }

    /// A stream memra cannot check.
    ///
    /// # Safety
    /// `raw` must be null, `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`, or a
    /// live stream of the context the engine uses (the device's primary
    /// context, which PyTorch and cudarc share), not destroyed while any
    /// call made with it may still run or queue work on it. If it is
    /// capturing a CUDA graph, the graph records the addresses of the
    /// buffers, the engine's kernels, mirrored planes and fault word: every
    /// instance of it must be destroyed (never launched again) before the
    /// last clone of the [`Engine`](crate::Engine) or any buffer its calls
    /// used is dropped, since a replay would write freed memory.
    pub unsafe fn from_raw(raw: CuStream) -> Stream {
        Stream { raw, engine: None }
    }

    /// An engine's own stream.
    pub(crate) fn of_engine(raw: CuStream, engine: Arc<Inner>) -> Stream {
        Stream {
            raw,
            engine: Some(engine),
        }
    }

    /// The raw handle (for cudarc or a kernel launch of your own).
    pub fn as_raw(&self) -> CuStream {
        self.raw
    }

    /// The handle for a call of the engine `on` (device ordinal `ordinal`):
    /// an engine's own stream is refused by an engine of another device,
    /// whose context it is not in.
    pub(crate) fn raw_for(&self, ordinal: i32) -> Result<CuStream> {
        match &self.engine {
            Some(e) if e.ordinal != ordinal => Err(Error::arg(
                Status::InvalidArg,
                format!(
                    "stream: the own stream of the engine on device {}, not of this engine's \
                     device {ordinal}",
                    e.ordinal
                ),
            )),
            _ => Ok(self.raw),
        }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.engine {
            Some(e) => write!(f, "Stream({:p}, engine on device {})", self.raw, e.ordinal),
            None => write!(f, "Stream({:p})", self.raw),
        }
    }
}

/// `CU_STREAM_LEGACY`: the legacy default stream, named explicitly.
pub const STREAM_LEGACY: Stream = Stream {
    raw: 0x1 as CuStream,
    engine: None,
};
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream.
pub const STREAM_PER_THREAD: Stream = Stream {
    raw: 0x2 as CuStream,
    engine: None,
};
