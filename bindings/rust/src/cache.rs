use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr;

use crate::config::Config;
use crate::error::{cstr, Error, Result};
use crate::sys;

/// A handle on an on-disk cache, for tools (`tk_cache`). Thread-safe, so
/// `Send + Sync`. Closed on drop.
pub struct Cache {
    raw: *mut sys::tk_cache,
    // The config's log callback, should the cache log through it.
    _log: Option<std::sync::Arc<crate::config::LogHolder>>,
}

unsafe impl Send for Cache {}
unsafe impl Sync for Cache {}

/// One cache entry's metadata (`tk_cache_entry_info`, strings copied).
#[derive(Clone, Debug)]
pub struct CacheEntry {
    pub key_hex: String,
    pub path: PathBuf,
    pub kernel: String,
    pub source: String,
    pub backend: String,
    pub arch: String,
    pub compiler: String,
    pub options: String,
    pub payload_size: u64,
    pub file_size: u64,
    pub created: i64,
    pub last_used: i64,
    pub resources: sys::tk_resource_usage,
    pub read_only_tier: bool,
}

/// `tk_cache_stats`.
pub type CacheStats = sys::tk_cache_stats;

/// A file `verify` or `import` found bad, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFile {
    pub path: String,
    pub why: String,
}

unsafe fn entry_from(info: *const sys::tk_cache_entry_info) -> CacheEntry {
    let i = &*info;
    // The library sets struct_size; read_only_tier is the last field this
    // crate knows, so an older library that wrote less leaves it false.
    let covers = |end: usize| i.struct_size >= end;
    let ro_end = memoffset_read_only_tier() + std::mem::size_of::<c_int>();
    CacheEntry {
        key_hex: cstr(i.key_hex),
        path: PathBuf::from(cstr(i.path)),
        kernel: cstr(i.kernel),
        source: cstr(i.source),
        backend: cstr(i.backend),
        arch: cstr(i.arch),
        compiler: cstr(i.compiler),
        options: cstr(i.options),
        payload_size: i.payload_size,
        file_size: i.file_size,
        created: i.created,
        last_used: i.last_used,
        resources: i.resources,
        read_only_tier: covers(ro_end) && i.read_only_tier != 0,
    }
}

fn memoffset_read_only_tier() -> usize {
    let u = std::mem::MaybeUninit::<sys::tk_cache_entry_info>::uninit();
    let base = u.as_ptr();
    // SAFETY: address arithmetic only, nothing is read.
    unsafe { ptr::addr_of!((*base).read_only_tier) as usize - base as usize }
}

unsafe extern "C" fn visit_push(user: *mut c_void, info: *const sys::tk_cache_entry_info) -> c_int {
    let v = &mut *(user as *mut Vec<CacheEntry>);
    v.push(entry_from(info));
    0
}

unsafe extern "C" fn bad_push(user: *mut c_void, path: *const c_char, why: *const c_char) {
    let v = &mut *(user as *mut Vec<BadFile>);
    v.push(BadFile { path: cstr(path), why: cstr(why) });
}

fn path_c(p: &Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::invalid("a path holds a NUL byte"))
}

impl Cache {
    /// Opens the cache the config names (None: the defaults).
    pub fn open(cfg: Option<&Config>) -> Result<Cache> {
        let mut raw = ptr::null_mut();
        let st = unsafe { sys::tk_cache_open(cfg.map_or(ptr::null(), |c| c.as_raw()), &mut raw) };
        if st != sys::TK_OK {
            return Err(Error::from_status(st, "tk_cache_open failed".into()));
        }
        Ok(Cache { raw, _log: cfg.and_then(|c| c.log.clone()) })
    }

    pub fn as_raw(&self) -> *mut sys::tk_cache {
        self.raw
    }

    fn check(&self, st: sys::tk_status) -> Result<()> {
        if st == sys::TK_OK {
            Ok(())
        } else {
            Err(Error::from_status(st, self.last_error()))
        }
    }

    pub fn last_error(&self) -> String {
        unsafe { cstr(sys::tk_cache_last_error(self.raw)) }
    }

    /// The root folder in use.
    pub fn root(&self) -> PathBuf {
        PathBuf::from(unsafe { cstr(sys::tk_cache_root(self.raw)) })
    }

    /// Every readable entry (metadata only).
    pub fn list(&self) -> Result<Vec<CacheEntry>> {
        let mut v: Vec<CacheEntry> = Vec::new();
        let st = unsafe { sys::tk_cache_list(self.raw, Some(visit_push), &mut v as *mut Vec<CacheEntry> as *mut c_void) };
        self.check(st)?;
        Ok(v)
    }

    pub fn stats(&self) -> Result<CacheStats> {
        let mut s = <CacheStats as sys::SizedStruct>::init();
        let st = unsafe { sys::tk_cache_get_stats(self.raw, &mut s) };
        self.check(st)?;
        Ok(s)
    }

    /// Sets the cache's persistent counters (hits, misses, compiles, ...:
    /// the fields of `stats()` counted across processes) to zero for every
    /// process, and `stats_since` to now (`tk_cache_zero_stats`).
    /// `Error::Io` when the cache is not writable.
    pub fn zero_stats(&self) -> Result<()> {
        let st = unsafe { sys::tk_cache_zero_stats(self.raw) };
        self.check(st)
    }

    /// Reads every entry in full; the bad ones (nothing is removed).
    pub fn verify(&self) -> Result<Vec<BadFile>> {
        let mut v: Vec<BadFile> = Vec::new();
        let mut n = 0u64;
        let st = unsafe { sys::tk_cache_verify(self.raw, Some(bad_push), &mut v as *mut Vec<BadFile> as *mut c_void, &mut n) };
        self.check(st)?;
        Ok(v)
    }

    /// Evicts least-recently-used entries down to `max_bytes` (0: the
    /// configured limit) and leftovers; the number removed.
    pub fn prune(&self, max_bytes: u64) -> Result<u64> {
        let mut n = 0u64;
        let st = unsafe { sys::tk_cache_prune(self.raw, max_bytes, &mut n) };
        self.check(st)?;
        Ok(n)
    }

    /// Removes every entry of the user cache; the number removed.
    pub fn clear(&self) -> Result<u64> {
        let mut n = 0u64;
        let st = unsafe { sys::tk_cache_clear(self.raw, &mut n) };
        self.check(st)?;
        Ok(n)
    }

    /// Packs every entry into a bundle file; the number exported.
    pub fn export(&self, path: &Path) -> Result<u64> {
        let p = path_c(path)?;
        let mut n = 0u64;
        let st = unsafe { sys::tk_cache_export(self.raw, p.as_ptr(), None, ptr::null_mut(), &mut n) };
        self.check(st)?;
        Ok(n)
    }

    /// Adds a bundle's good entries; (imported, the bad ones).
    pub fn import(&self, path: &Path) -> Result<(u64, Vec<BadFile>)> {
        let p = path_c(path)?;
        let mut bad: Vec<BadFile> = Vec::new();
        let (mut n, mut rejected) = (0u64, 0u64);
        let st = unsafe {
            sys::tk_cache_import(self.raw, p.as_ptr(), Some(bad_push), &mut bad as *mut Vec<BadFile> as *mut c_void,
                                 &mut n, &mut rejected)
        };
        self.check(st)?;
        Ok((n, bad))
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        unsafe { sys::tk_cache_close(self.raw) }
    }
}

/// `tk_parse_size`: "500M", "2G" (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64> {
    let c = crate::config::cstring(text)?;
    let mut out = 0u64;
    let st = unsafe { sys::tk_parse_size(c.as_ptr(), &mut out) };
    if st != sys::TK_OK {
        return Err(Error::from_status(st, format!("not a size: '{}'", text)));
    }
    Ok(out)
}
