//! memra's statuses as a Rust error.

use std::fmt;

/// The `MEMRA_ERR_*` a call failed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    NullArg,
    InvalidArg,
    Misaligned,
    SlabOverflow,
    ExpertRange,
    NonfiniteScale,
    NoDriver,
    NoDevice,
    Nvrtc,
    ModuleLoad,
    OutOfMemory,
    Capture,
    Driver,
    ContextReset,
    SelfCheck,
    /// A status newer than this crate.
    Other(i32),
}

impl Status {
    /// The `MEMRA_ERR_*` value (`Other`'s own).
    pub fn code(self) -> i32 {
        use Status::*;
        match self {
            NullArg => 1,
            InvalidArg => 2,
            Misaligned => 3,
            SlabOverflow => 4,
            ExpertRange => 5,
            NonfiniteScale => 6,
            NoDriver => 7,
            NoDevice => 8,
            Nvrtc => 9,
            ModuleLoad => 10,
            OutOfMemory => 11,
            Capture => 12,
            Driver => 13,
            ContextReset => 14,
            SelfCheck => 15,
            Other(c) => c,
        }
    }

    pub(crate) fn from_code(code: i32) -> Status {
        use Status::*;
        match code {
            1 => NullArg,
            2 => InvalidArg,
            3 => Misaligned,
            4 => SlabOverflow,
            5 => ExpertRange,
            6 => NonfiniteScale,
            7 => NoDriver,
            8 => NoDevice,
            9 => Nvrtc,
            10 => ModuleLoad,
            11 => OutOfMemory,
            12 => Capture,
            13 => Driver,
            14 => ContextReset,
            15 => SelfCheck,
            c => Other(c),
        }
    }
}

/// A failed memra call, or a library that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// libmemra could not be opened, lacks an entry point, or is the wrong
    /// version.
    Library(String),
    /// A call returned `status`; `message` is `memra_last_error()` (it names
    /// the argument or the driver call), `code` the raw value.
    Call {
        status: Status,
        code: i32,
        message: String,
    },
}

impl Error {
    /// The status, for `Call` errors.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Call { status, .. } => Some(*status),
            Error::Library(_) => None,
        }
    }

    pub(crate) fn arg(status: Status, message: String) -> Error {
        Error::Call {
            status,
            code: status.code(),
            message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Library(m) => write!(f, "memra: {m}"),
            Error::Call {
                status, message, ..
            } => write!(f, "memra: {status:?}: {message}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
