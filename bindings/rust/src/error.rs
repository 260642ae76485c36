use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use crate::sys;

/// A failing status of the C library with the message that explains it
/// (`tk_context_last_error`, `tk_cache_last_error`, or the reason
/// `tk_context_create` wrote; for checks done on the Rust side, the reason
/// in words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    InvalidArgument(String),
    OutOfMemory(String),
    Io(String),
    NotFound(String),
    Corrupt(String),
    BackendUnavailable(String),
    NoDevice(String),
    Unsupported(String),
    CompileFailed(String),
    LoadFailed(String),
    LaunchFailed(String),
    DeviceError(String),
    Misaligned(String),
    Overflow(String),
    OutOfTolerance(String),
    Internal(String),
    Timeout(String),
    /// A status this crate does not know (a newer library).
    Other(i32, String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error for a C status and its message.
    pub fn from_status(status: sys::tk_status, message: String) -> Error {
        match status {
            sys::TK_INVALID_ARGUMENT => Error::InvalidArgument(message),
            sys::TK_OUT_OF_MEMORY => Error::OutOfMemory(message),
            sys::TK_IO_ERROR => Error::Io(message),
            sys::TK_NOT_FOUND => Error::NotFound(message),
            sys::TK_CORRUPT => Error::Corrupt(message),
            sys::TK_BACKEND_UNAVAILABLE => Error::BackendUnavailable(message),
            sys::TK_NO_DEVICE => Error::NoDevice(message),
            sys::TK_UNSUPPORTED => Error::Unsupported(message),
            sys::TK_COMPILE_FAILED => Error::CompileFailed(message),
            sys::TK_LOAD_FAILED => Error::LoadFailed(message),
            sys::TK_LAUNCH_FAILED => Error::LaunchFailed(message),
            sys::TK_DEVICE_ERROR => Error::DeviceError(message),
            sys::TK_MISALIGNED => Error::Misaligned(message),
            sys::TK_OVERFLOW => Error::Overflow(message),
            sys::TK_OUT_OF_TOLERANCE => Error::OutOfTolerance(message),
            sys::TK_INTERNAL => Error::Internal(message),
            sys::TK_TIMEOUT => Error::Timeout(message),
            other => Error::Other(other, message),
        }
    }

    /// The C status (`tk_status`) this error stands for.
    pub fn status(&self) -> sys::tk_status {
        match self {
            Error::InvalidArgument(_) => sys::TK_INVALID_ARGUMENT,
            Error::OutOfMemory(_) => sys::TK_OUT_OF_MEMORY,
            Error::Io(_) => sys::TK_IO_ERROR,
            Error::NotFound(_) => sys::TK_NOT_FOUND,
            Error::Corrupt(_) => sys::TK_CORRUPT,
            Error::BackendUnavailable(_) => sys::TK_BACKEND_UNAVAILABLE,
            Error::NoDevice(_) => sys::TK_NO_DEVICE,
            Error::Unsupported(_) => sys::TK_UNSUPPORTED,
            Error::CompileFailed(_) => sys::TK_COMPILE_FAILED,
            Error::LoadFailed(_) => sys::TK_LOAD_FAILED,
            Error::LaunchFailed(_) => sys::TK_LAUNCH_FAILED,
            Error::DeviceError(_) => sys::TK_DEVICE_ERROR,
            Error::Misaligned(_) => sys::TK_MISALIGNED,
            Error::Overflow(_) => sys::TK_OVERFLOW,
            Error::OutOfTolerance(_) => sys::TK_OUT_OF_TOLERANCE,
            Error::Internal(_) => sys::TK_INTERNAL,
            Error::Timeout(_) => sys::TK_TIMEOUT,
            Error::Other(s, _) => *s,
        }
    }

    /// The message (a compiler's whole log for `CompileFailed`).
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::OutOfMemory(m)
            | Error::Io(m)
            | Error::NotFound(m)
            | Error::Corrupt(m)
            | Error::BackendUnavailable(m)
            | Error::NoDevice(m)
            | Error::Unsupported(m)
            | Error::CompileFailed(m)
            | Error::LoadFailed(m)
            | Error::LaunchFailed(m)
            | Error::DeviceError(m)
            | Error::Misaligned(m)
            | Error::Overflow(m)
            | Error::OutOfTolerance(m)
            | Error::Internal(m)
            | Error::Timeout(m)
            | Error::Other(_, m) => m,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument(message.into())
    }
}

/// `tk_status_str`: the library's short text for a status.
pub fn status_str(status: sys::tk_status) -> String {
    // SAFETY: tk_status_str never returns NULL and returns a static string.
    unsafe { cstr(sys::tk_status_str(status)) }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message().is_empty() {
            write!(f, "{}", status_str(self.status()))
        } else {
            write!(f, "{}: {}", status_str(self.status()), self.message())
        }
    }
}

impl std::error::Error for Error {}

/// A borrowed C string as an owned String ("" for NULL).
pub(crate) unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
