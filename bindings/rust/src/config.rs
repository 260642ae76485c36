use std::ffi::{CString, OsStr};
use std::os::raw::{c_char, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use crate::error::{cstr, Error, Result};
use crate::sys;

/// Which vendor runtime a context uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The first backend with a device: CUDA, then HIP
    /// (`TOKITAI_JIT_BACKEND=cuda|hip|stub` overrides it).
    Auto,
    Cuda,
    Hip,
    /// Testing: compiles nothing real, launches nothing, memory is host memory.
    Stub,
}

impl Backend {
    pub(crate) fn raw(self) -> sys::tk_backend_kind {
        match self {
            Backend::Auto => sys::TK_BACKEND_AUTO,
            Backend::Cuda => sys::TK_BACKEND_CUDA,
            Backend::Hip => sys::TK_BACKEND_HIP,
            Backend::Stub => sys::TK_BACKEND_STUB,
        }
    }
}

/// Operator specialisation policy (see `tokitai/ops.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Exact,
    Generic,
    Stable,
}

impl Policy {
    pub(crate) fn raw(self) -> sys::tk_policy {
        match self {
            Policy::Exact => sys::TK_POLICY_EXACT,
            Policy::Generic => sys::TK_POLICY_GENERIC,
            Policy::Stable => sys::TK_POLICY_STABLE,
        }
    }
    pub(crate) fn from_raw(p: sys::tk_policy) -> Policy {
        match p {
            sys::TK_POLICY_EXACT => Policy::Exact,
            sys::TK_POLICY_GENERIC => Policy::Generic,
            _ => Policy::Stable,
        }
    }
    /// "exact", "generic" or "stable".
    pub fn name(self) -> &'static str {
        match self {
            Policy::Exact => "exact",
            Policy::Generic => "generic",
            Policy::Stable => "stable",
        }
    }
    pub fn from_name(s: &str) -> Option<Policy> {
        match s {
            "exact" => Some(Policy::Exact),
            "generic" => Some(Policy::Generic),
            "stable" => Some(Policy::Stable),
            _ => None,
        }
    }
}

/// How an operator call gets a kernel that is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildMode {
    /// A generic kernel serves while the specialised one builds in the background.
    Async,
    /// Every call compiles (and waits for) the kernel it prefers.
    Sync,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn raw(self) -> sys::tk_log_level {
        match self {
            LogLevel::Debug => sys::TK_LOG_DEBUG,
            LogLevel::Info => sys::TK_LOG_INFO,
            LogLevel::Warn => sys::TK_LOG_WARN,
            LogLevel::Error => sys::TK_LOG_ERROR,
        }
    }
    fn from_raw(l: sys::tk_log_level) -> LogLevel {
        match l {
            sys::TK_LOG_DEBUG => LogLevel::Debug,
            sys::TK_LOG_INFO => LogLevel::Info,
            sys::TK_LOG_WARN => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }
}

/// A log callback: called from whichever thread produced the message, so it
/// must be `Send + Sync`.
pub type LogFn = dyn Fn(LogLevel, &str) + Send + Sync;

pub(crate) struct LogHolder(pub(crate) Box<LogFn>);

unsafe extern "C" fn log_trampoline(user: *mut c_void, level: sys::tk_log_level, msg: *const c_char) {
    let holder = &*(user as *const LogHolder);
    let text = cstr(msg);
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (holder.0)(LogLevel::from_raw(level), &text)));
}

#[derive(Clone)]
enum Setting {
    CacheDir(Option<CString>),
    CacheLower(Option<CString>),
    CacheMaxSize(u64),
    CacheReadOnly(bool),
    CacheDisabled(bool),
    Backend(Backend),
    Device(i32),
    Target(Option<CString>),
    Policy(Policy),
    BuildMode(BuildMode),
    BuildLimits(u32, u32),
    LogLevel(LogLevel),
    Remote(Option<CString>),
    RemoteKey(Option<Vec<u8>>),
    RemoteTimeouts(u32, u32),
    RemoteLease(u32, u32),
}

/// Options for a context or a cache (`tk_config`). Every setter returns the
/// config, so settings chain:
///
/// ```no_run
/// # use tokitai_jit::{Config, Backend};
/// let cfg = Config::new()?.backend(Backend::Stub)?.cache_dir("/tmp/tk-cache")?;
/// # Ok::<(), tokitai_jit::Error>(())
/// ```
///
/// The C object is not thread-safe: a `Config` may move to another thread
/// (`Send`) but is not shared between threads (not `Sync`). Contexts and
/// caches copy what they need; the config may be dropped after creating them.
pub struct Config {
    raw: *mut sys::tk_config,
    settings: Vec<Setting>,
    pub(crate) log: Option<Arc<LogHolder>>,
}

// SAFETY: a tk_config has no thread affinity; it only must not be used from
// two threads at once, which the missing Sync rules out.
unsafe impl Send for Config {}

fn path_cstring(p: &Path) -> Result<CString> {
    os_cstring(p.as_os_str())
}

fn os_cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| Error::invalid("a string holds a NUL byte"))
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("a string holds a NUL byte: {:?}", s)))
}

fn opt_ptr(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(ptr::null(), |c| c.as_ptr())
}

impl Config {
    /// A config with every default (`tk_config_create`).
    pub fn new() -> Result<Config> {
        let mut raw = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let st = unsafe { sys::tk_config_create(&mut raw) };
        if st != sys::TK_OK {
            return Err(Error::from_status(st, "tk_config_create failed".into()));
        }
        Ok(Config { raw, settings: Vec::new(), log: None })
    }

    pub fn as_raw(&self) -> *const sys::tk_config {
        self.raw
    }

    fn apply(&mut self, s: Setting) -> Result<()> {
        let cfg = self.raw;
        // SAFETY: cfg is live; every pointer passed lives for the call (the
        // library copies strings).
        let st = unsafe {
            match &s {
                Setting::CacheDir(d) => sys::tk_config_set_cache_dir(cfg, opt_ptr(d)),
                Setting::CacheLower(d) => sys::tk_config_set_cache_lower(cfg, opt_ptr(d)),
                Setting::CacheMaxSize(b) => sys::tk_config_set_cache_max_size(cfg, *b),
                Setting::CacheReadOnly(v) => sys::tk_config_set_cache_read_only(cfg, *v as i32),
                Setting::CacheDisabled(v) => sys::tk_config_set_cache_disabled(cfg, *v as i32),
                Setting::Backend(b) => sys::tk_config_set_backend(cfg, b.raw()),
                Setting::Device(d) => sys::tk_config_set_device(cfg, *d),
                Setting::Target(t) => sys::tk_config_set_target(cfg, opt_ptr(t)),
                Setting::Policy(p) => sys::tk_config_set_policy(cfg, p.raw()),
                Setting::BuildMode(m) => sys::tk_config_set_build_mode(
                    cfg,
                    match m {
                        BuildMode::Async => sys::TK_BUILD_ASYNC,
                        BuildMode::Sync => sys::TK_BUILD_SYNC,
                    },
                ),
                Setting::BuildLimits(w, q) => sys::tk_config_set_build_limits(cfg, *w, *q),
                Setting::LogLevel(l) => sys::tk_config_set_log_level(cfg, l.raw()),
                Setting::Remote(u) => sys::tk_config_set_remote(cfg, opt_ptr(u)),
                Setting::RemoteKey(k) => match k {
                    None => sys::tk_config_set_remote_key(cfg, ptr::null(), 0),
                    Some(k) => sys::tk_config_set_remote_key(cfg, k.as_ptr() as *const c_void, k.len()),
                },
                Setting::RemoteTimeouts(c, i) => sys::tk_config_set_remote_timeouts(cfg, *c, *i),
                Setting::RemoteLease(l, w) => sys::tk_config_set_remote_lease(cfg, *l, *w),
            }
        };
        if st != sys::TK_OK {
            return Err(Error::from_status(st, "the library refused this config setting".into()));
        }
        self.settings.push(s);
        Ok(())
    }

    fn set(mut self, s: Setting) -> Result<Config> {
        self.apply(s)?;
        Ok(self)
    }

    /// A new C config with the same settings (and the same log callback).
    pub fn try_clone(&self) -> Result<Config> {
        let mut c = Config::new()?;
        for s in &self.settings {
            c.apply(s.clone())?;
        }
        if let Some(log) = &self.log {
            c.install_log(log.clone())?;
        }
        Ok(c)
    }

    /// Cache root (default: `$TOKITAI_JIT_CACHE_DIR`, else the XDG cache folder).
    pub fn cache_dir(self, dir: impl AsRef<Path>) -> Result<Config> {
        let d = path_cstring(dir.as_ref())?;
        self.set(Setting::CacheDir(Some(d)))
    }
    /// Read-only lower tiers, searched after the user cache.
    pub fn cache_lower(self, roots: &[&Path]) -> Result<Config> {
        let joined: Vec<&OsStr> = roots.iter().map(|p| p.as_os_str()).collect();
        let mut s = std::ffi::OsString::new();
        for (i, r) in joined.iter().enumerate() {
            if i > 0 {
                s.push(":");
            }
            s.push(r);
        }
        let c = os_cstring(&s)?;
        self.set(Setting::CacheLower(Some(c)))
    }
    /// Size limit of the user cache in bytes (0: the default).
    pub fn cache_max_size(self, bytes: u64) -> Result<Config> {
        self.set(Setting::CacheMaxSize(bytes))
    }
    pub fn cache_read_only(self, read_only: bool) -> Result<Config> {
        self.set(Setting::CacheReadOnly(read_only))
    }
    pub fn cache_disabled(self, disabled: bool) -> Result<Config> {
        self.set(Setting::CacheDisabled(disabled))
    }
    pub fn backend(self, backend: Backend) -> Result<Config> {
        self.set(Setting::Backend(backend))
    }
    pub fn device(self, ordinal: i32) -> Result<Config> {
        self.set(Setting::Device(ordinal))
    }
    /// Offline target ("sm_90", "gfx90a"): compile without a device, never launch.
    pub fn target(self, target: &str) -> Result<Config> {
        let t = cstring(target)?;
        self.set(Setting::Target(Some(t)))
    }
    pub fn policy(self, policy: Policy) -> Result<Config> {
        self.set(Setting::Policy(policy))
    }
    pub fn build_mode(self, mode: BuildMode) -> Result<Config> {
        self.set(Setting::BuildMode(mode))
    }
    pub fn build_limits(self, workers: u32, queue: u32) -> Result<Config> {
        self.set(Setting::BuildLimits(workers, queue))
    }
    pub fn log_level(self, level: LogLevel) -> Result<Config> {
        self.set(Setting::LogLevel(level))
    }
    /// Remote tier URL (`redis://...`, `unix://...`; "" turns it off).
    pub fn remote(self, url: &str) -> Result<Config> {
        let u = cstring(url)?;
        self.set(Setting::Remote(Some(u)))
    }
    pub fn remote_key(self, key: Option<&[u8]>) -> Result<Config> {
        self.set(Setting::RemoteKey(key.map(|k| k.to_vec())))
    }
    pub fn remote_timeouts(self, connect_ms: u32, io_ms: u32) -> Result<Config> {
        self.set(Setting::RemoteTimeouts(connect_ms, io_ms))
    }
    pub fn remote_lease(self, lease_ms: u32, wait_ms: u32) -> Result<Config> {
        self.set(Setting::RemoteLease(lease_ms, wait_ms))
    }

    /// Log callback. Contexts created from this config keep the callback
    /// alive for as long as they live.
    pub fn log<F>(mut self, f: F) -> Result<Config>
    where
        F: Fn(LogLevel, &str) + Send + Sync + 'static,
    {
        self.install_log(Arc::new(LogHolder(Box::new(f))))?;
        Ok(self)
    }

    fn install_log(&mut self, holder: Arc<LogHolder>) -> Result<()> {
        let user = Arc::as_ptr(&holder) as *mut c_void;
        // SAFETY: the holder is kept alive by this config and by every
        // context created from it (they clone the Arc).
        let st = unsafe { sys::tk_config_set_log(self.raw, Some(log_trampoline), user) };
        if st != sys::TK_OK {
            return Err(Error::from_status(st, "tk_config_set_log failed".into()));
        }
        self.log = Some(holder);
        Ok(())
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: raw came from tk_config_create and is destroyed once.
        unsafe { sys::tk_config_destroy(self.raw) }
    }
}
