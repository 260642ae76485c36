//! tokitai-jit from Rust: compile GPU kernels at run time (NVRTC / hipRTC),
//! cache them on disk, launch them; the fp16 operator library.
//!
//! [`sys`] holds the raw C declarations; the rest is a safe layer:
//! [`Config`] and [`Context`] own their C objects (dropped = destroyed),
//! [`DeviceBuffer`] owns device memory, [`Kernel`] borrows its context,
//! every failing call returns an [`Error`] carrying the library's message.
//! docs/rust.md shows how to build and link.
pub mod sys;

mod cache;
mod config;
mod context;
mod error;
mod kernel;
pub mod manifest;
mod mem;
mod ops;
pub mod reference;

pub use cache::{parse_size, BadFile, Cache, CacheEntry, CacheStats};
pub use config::{Backend, BuildMode, Config, LogLevel, Policy};
pub use context::{backend_describe, embedded_sources, Context, ContextStats, Origin, Stream};
pub use error::{status_str, Error, Result};
pub use kernel::{Kernel, KernelArg, KernelDesc, KernelInfo, KernelParam, ParamKind};
pub use mem::{DeviceBuffer, DeviceSlice, DeviceSliceMut, DeviceView, Element, Strided, StridedMut};
pub use ops::{CheckReport, Op, TuneReport};
pub use reference::{f16_to_f32, f32_to_f16};

/// The linked library's version ("0.2.0").
pub fn version() -> String {
    unsafe { error_cstr(sys::tk_version_string()) }
}

/// The linked library's binary interface number (the soname's number).
pub fn abi_version() -> u32 {
    unsafe { sys::tk_abi_version() }
}

/// Checks that the linked library has the binary interface these bindings
/// were written for (`sys::TK_ABI_VERSION`) and is at least their version.
pub fn check_version() -> Result<()> {
    let abi = abi_version();
    let num = unsafe { sys::tk_version_number() };
    if abi != sys::TK_ABI_VERSION || num < sys::TK_VERSION_NUMBER {
        return Err(Error::Unsupported(format!(
            "linked libtokitai_jit {} (interface {}), these bindings need interface {} and version >= {}",
            version(),
            abi,
            sys::TK_ABI_VERSION,
            sys::TK_VERSION_NUMBER
        )));
    }
    Ok(())
}

unsafe fn error_cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
