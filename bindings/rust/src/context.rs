use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, LogHolder, Policy};
use crate::error::{cstr, Error, Result};
use crate::sys;

/// A caller's stream (`hipStream_t` / `CUstream` / `cudaStream_t`), or the
/// default stream. The crate never creates or destroys streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(*mut c_void);

// SAFETY: a stream handle is an opaque token the vendor runtimes accept from
// any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The default (NULL) stream.
    pub const DEFAULT: Stream = Stream(ptr::null_mut());

    /// # Safety
    /// `raw` must be a stream of the context's device that stays valid for
    /// every call it is passed to.
    pub unsafe fn from_raw(raw: *mut c_void) -> Stream {
        Stream(raw)
    }
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::DEFAULT
    }
}

/// Where a kernel came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Memory,
    Disk,
    Compiled,
}

impl Origin {
    pub(crate) fn from_raw(o: sys::tk_origin) -> Origin {
        match o {
            sys::TK_ORIGIN_MEMORY => Origin::Memory,
            sys::TK_ORIGIN_DISK => Origin::Disk,
            _ => Origin::Compiled,
        }
    }
}

/// Counters of a context (`tk_context_stats`); the C struct as the library
/// filled it.
pub type ContextStats = sys::tk_context_stats;

/// A context (`tk_context`): one backend, one device (or offline target),
/// an in-memory kernel table, the disk cache and the last error. The C
/// object is thread-safe, so a `Context` is `Send + Sync`; share it with
/// `Arc`. `last_error()` then names whichever call failed last: errors
/// returned by this crate already carry their own message, read at the
/// failing call (another thread failing at the same moment can still
/// overwrite it: use one context per thread where messages must not mix).
/// Dropping it destroys the context, its kernels and its workspaces.
pub struct Context {
    raw: *mut sys::tk_context,
    _log: Option<Arc<LogHolder>>,
}

// SAFETY: the header states a tk_context may be used from several threads
// at once.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// A context with the default config (`TOKITAI_JIT_BACKEND` and the other
    /// environment variables apply).
    pub fn new() -> Result<Context> {
        Context::create(None)
    }

    pub fn with_config(cfg: &Config) -> Result<Context> {
        Context::create(Some(cfg))
    }

    fn create(cfg: Option<&Config>) -> Result<Context> {
        let mut raw = ptr::null_mut();
        let mut err = vec![0 as c_char; 1024];
        let craw = cfg.map_or(ptr::null(), |c| c.as_raw());
        // SAFETY: cfg is live for the call; err has err.len() bytes.
        let st = unsafe { sys::tk_context_create(craw, &mut raw, err.as_mut_ptr(), err.len()) };
        if st != sys::TK_OK {
            // SAFETY: the library NUL-terminates err.
            return Err(Error::from_status(st, unsafe { cstr(err.as_ptr()) }));
        }
        Ok(Context { raw, _log: cfg.and_then(|c| c.log.clone()) })
    }

    pub fn as_raw(&self) -> *mut sys::tk_context {
        self.raw
    }

    /// The error of a failed call on this context, with the context's message.
    pub(crate) fn error(&self, st: sys::tk_status) -> Error {
        Error::from_status(st, self.last_error())
    }

    pub(crate) fn check(&self, st: sys::tk_status) -> Result<()> {
        if st == sys::TK_OK {
            Ok(())
        } else {
            Err(self.error(st))
        }
    }

    /// `tk_context_last_error`: the message of the last failure.
    pub fn last_error(&self) -> String {
        // SAFETY: never NULL; copied before any other call.
        unsafe { cstr(sys::tk_context_last_error(self.raw)) }
    }
    /// "cuda", "hip" or "stub".
    pub fn backend_name(&self) -> String {
        unsafe { cstr(sys::tk_context_backend_name(self.raw)) }
    }
    /// Full target id ("sm_90", "gfx90a:sramecc+:xnack-", "stub").
    pub fn target(&self) -> String {
        unsafe { cstr(sys::tk_context_target(self.raw)) }
    }
    /// The compiler identity used in cache keys.
    pub fn compiler(&self) -> String {
        unsafe { cstr(sys::tk_context_compiler(self.raw)) }
    }
    pub fn policy(&self) -> Policy {
        Policy::from_raw(unsafe { sys::tk_context_policy(self.raw) })
    }

    pub fn stats(&self) -> Result<ContextStats> {
        let mut s = <ContextStats as sys::SizedStruct>::init();
        // SAFETY: s is a sized struct with struct_size set.
        let st = unsafe { sys::tk_context_get_stats(self.raw, &mut s) };
        self.check(st)?;
        Ok(s)
    }
    pub fn reset_stats(&self) {
        unsafe { sys::tk_context_reset_stats(self.raw) }
    }
    /// Waits for background builds (None: no limit). `Error::Timeout` when
    /// the limit passed first.
    pub fn wait_builds(&self, timeout: Option<Duration>) -> Result<()> {
        let ms: c_int = match timeout {
            None => -1,
            Some(d) => d.as_millis().min(c_int::MAX as u128) as c_int,
        };
        let st = unsafe { sys::tk_context_wait_builds(self.raw, ms) };
        if st == sys::TK_TIMEOUT {
            return Err(Error::Timeout("background builds still pending".into()));
        }
        self.check(st)
    }

    /// Waits for the work enqueued on stream.
    pub fn sync(&self, stream: Stream) -> Result<()> {
        let st = unsafe { sys::tk_stream_sync(self.raw, stream.0) };
        self.check(st)
    }

    /// Milliseconds the work `run` enqueues on `stream` takes on the device
    /// (device events). An error returned by `run` is returned as is.
    pub fn time_on_stream<F>(&self, stream: Stream, run: F) -> Result<f32>
    where
        F: FnMut() -> Result<()>,
    {
        struct State<F> {
            run: F,
            err: Option<Error>,
        }
        unsafe extern "C" fn tramp<F: FnMut() -> Result<()>>(user: *mut c_void) -> sys::tk_status {
            let state = &mut *(user as *mut State<F>);
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (state.run)())) {
                Ok(Ok(())) => sys::TK_OK,
                Ok(Err(e)) => {
                    let s = e.status();
                    state.err = Some(e);
                    s
                }
                Err(_) => {
                    state.err = Some(Error::Internal("the timed closure panicked".into()));
                    sys::TK_INTERNAL
                }
            }
        }
        let mut state = State { run, err: None };
        let mut ms = 0f32;
        let st = unsafe {
            sys::tk_time_on_stream(self.raw, stream.0, Some(tramp::<F>), &mut state as *mut State<F> as *mut c_void, &mut ms)
        };
        if let Some(e) = state.err {
            return Err(e);
        }
        self.check(st)?;
        Ok(ms)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: raw came from tk_context_create; kernels and buffers borrow
        // the context, so none outlives it.
        unsafe { sys::tk_context_destroy(self.raw) }
    }
}

/// `tk_backend_describe`: library paths, versions and devices of a backend,
/// or why it is unusable (the error carries the same text).
pub fn backend_describe(backend: crate::Backend) -> Result<String> {
    let mut buf = vec![0 as c_char; 8192];
    let st = unsafe { sys::tk_backend_describe(backend.raw(), buf.as_mut_ptr(), buf.len()) };
    let text = unsafe { cstr(buf.as_ptr()) };
    if st == sys::TK_OK {
        Ok(text)
    } else {
        Err(Error::from_status(st, text))
    }
}

/// Names of the kernel sources embedded in the library.
pub fn embedded_sources() -> Vec<String> {
    let mut out = Vec::new();
    unsafe {
        let mut p = sys::tk_embedded_sources();
        while !p.is_null() && !(*p).is_null() {
            out.push(cstr(*p));
            p = p.add(1);
        }
    }
    out
}

pub(crate) fn dims_arg(dims: &[i64]) -> Result<(*const i64, c_int)> {
    if dims.len() > 4 {
        return Err(Error::invalid(format!("{} dims given, at most 4", dims.len())));
    }
    Ok((dims.as_ptr(), dims.len() as c_int))
}
