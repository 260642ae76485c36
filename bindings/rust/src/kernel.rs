use std::ffi::CString;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_uint, c_void};
use std::ptr;

use crate::config::cstring;
use crate::context::{Context, Origin, Stream};
use crate::error::{cstr, Error, Result};
use crate::mem::{DeviceSlice, DeviceSliceMut, Element};
use crate::sys;

/// What to compile (`tk_kernel_desc`): a user source or an embedded one, an
/// entry point, defines, compiler options and in-memory headers.
#[derive(Clone, Debug, Default)]
pub struct KernelDesc {
    source_name: Option<CString>,
    source: Option<CString>,
    entry: Option<CString>,
    defines: Vec<(CString, Option<CString>)>,
    options: Vec<CString>,
    label: Option<CString>,
    headers: Vec<(CString, CString)>,
    error: Option<String>,
}

impl KernelDesc {
    /// User source code; `entry` is an `extern "C"` name or a C++ name
    /// expression ("fill<4, float>").
    pub fn source(source: &str, entry: &str) -> KernelDesc {
        let mut d = KernelDesc::default();
        d.source = d.c(source);
        d.entry = d.c(entry);
        d
    }
    /// A source embedded in the library (`embedded_sources()`).
    pub fn embedded(source_name: &str, entry: &str) -> KernelDesc {
        let mut d = KernelDesc::default();
        d.source_name = d.c(source_name);
        d.entry = d.c(entry);
        d
    }
    fn c(&mut self, s: &str) -> Option<CString> {
        match cstring(s) {
            Ok(c) => Some(c),
            Err(e) => {
                self.error.get_or_insert_with(|| e.message().to_string());
                None
            }
        }
    }
    /// `-Dname=value`.
    pub fn define(mut self, name: &str, value: impl ToString) -> KernelDesc {
        let n = self.c(name);
        let v = self.c(&value.to_string());
        if let (Some(n), Some(v)) = (n, v) {
            self.defines.push((n, Some(v)));
        }
        self
    }
    /// `-Dname`.
    pub fn define_flag(mut self, name: &str) -> KernelDesc {
        if let Some(n) = self.c(name) {
            self.defines.push((n, None));
        }
        self
    }
    /// An extra compiler option ("-Iinclude", "--use_fast_math").
    pub fn option(mut self, option: &str) -> KernelDesc {
        if let Some(o) = self.c(option) {
            self.options.push(o);
        }
        self
    }
    /// A header held in memory, found by `#include "name"` before any -I folder.
    pub fn header(mut self, name: &str, text: &str) -> KernelDesc {
        let n = self.c(name);
        let t = self.c(text);
        if let (Some(n), Some(t)) = (n, t) {
            self.headers.push((n, t));
        }
        self
    }
    /// The name used in compiler messages and in cache listings.
    pub fn label(mut self, label: &str) -> KernelDesc {
        self.label = self.c(label);
        self
    }

    /// Calls f with the C descriptor, whose pointers live for the call.
    fn with_raw<R>(&self, f: impl FnOnce(&sys::tk_kernel_desc) -> R) -> Result<R> {
        if let Some(e) = &self.error {
            return Err(Error::invalid(e.clone()));
        }
        let defines: Vec<sys::tk_define> = self
            .defines
            .iter()
            .map(|(n, v)| sys::tk_define { name: n.as_ptr(), value: v.as_ref().map_or(ptr::null(), |v| v.as_ptr()) })
            .collect();
        let options: Vec<*const c_char> = self.options.iter().map(|o| o.as_ptr()).collect();
        let headers: Vec<sys::tk_header> =
            self.headers.iter().map(|(n, t)| sys::tk_header { name: n.as_ptr(), text: t.as_ptr() }).collect();
        let opt = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let raw = sys::tk_kernel_desc {
            source_name: opt(&self.source_name),
            source: opt(&self.source),
            entry: opt(&self.entry),
            defines: if defines.is_empty() { ptr::null() } else { defines.as_ptr() },
            n_defines: defines.len(),
            options: if options.is_empty() { ptr::null() } else { options.as_ptr() },
            n_options: options.len(),
            source_label: opt(&self.label),
            headers: if headers.is_empty() { ptr::null() } else { headers.as_ptr() },
            n_headers: headers.len(),
        };
        Ok(f(&raw))
    }
}

/// A loaded kernel (`tk_kernel`), owned by its context: it borrows the
/// context and cannot outlive it. Thread-safe as the context is.
pub struct Kernel<'ctx> {
    ctx: &'ctx Context,
    raw: *mut sys::tk_kernel,
}

unsafe impl<'ctx> Send for Kernel<'ctx> {}
unsafe impl<'ctx> Sync for Kernel<'ctx> {}

/// `tk_kernel_info`, strings copied.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    pub key_hex: String,
    pub entry: String,
    pub origin: Origin,
    pub compile_seconds: f64,
    pub resources: sys::tk_resource_usage,
}

/// What a kernel parameter is (`tk_param_kind`), as far as the code object,
/// the mangled name or the declaration in the source tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// Only the size and offset are known.
    Unknown,
    Pointer,
    /// A signed integer.
    Int,
    /// An unsigned integer or a bool.
    Uint,
    /// float, double or __half.
    Float,
    /// Another type passed by value (a struct, a vector type).
    Struct,
}

impl ParamKind {
    fn from_raw(k: i32) -> ParamKind {
        match k {
            sys::TK_PARAM_POINTER => ParamKind::Pointer,
            sys::TK_PARAM_INT => ParamKind::Int,
            sys::TK_PARAM_UINT => ParamKind::Uint,
            sys::TK_PARAM_FLOAT => ParamKind::Float,
            sys::TK_PARAM_STRUCT => ParamKind::Struct,
            // A kind added by a later library is, to this crate, unknown.
            _ => ParamKind::Unknown,
        }
    }
}

/// One kernel parameter as recorded for the kernel (`tk_kernel_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelParam {
    /// Bytes from the start of the argument block.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    pub kind: ParamKind,
}

impl Context {
    /// `tk_kernel_get`: memory table, then disk cache, then compile.
    /// `Error::CompileFailed` carries the compiler's log.
    pub fn kernel(&self, desc: &KernelDesc) -> Result<Kernel<'_>> {
        let mut raw = ptr::null_mut();
        let st = desc.with_raw(|d| unsafe { sys::tk_kernel_get(self.as_raw(), d, &mut raw) })?;
        self.check(st)?;
        Ok(Kernel { ctx: self, raw })
    }

    /// `tk_kernel_precompile`: compile and store without loading.
    pub fn precompile_kernel(&self, desc: &KernelDesc) -> Result<Origin> {
        let mut origin = 0;
        let st = desc.with_raw(|d| unsafe { sys::tk_kernel_precompile(self.as_raw(), d, &mut origin) })?;
        self.check(st)?;
        Ok(Origin::from_raw(origin))
    }
}

/// One kernel argument, passed by value as `cuLaunchKernel` expects.
pub struct KernelArg<'a> {
    value: ArgValue,
    _borrow: PhantomData<&'a ()>,
}

enum ArgValue {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Ptr(*mut c_void),
}

impl<'a> KernelArg<'a> {
    fn slot(&mut self) -> *mut c_void {
        match &mut self.value {
            ArgValue::I32(v) => v as *mut i32 as *mut c_void,
            ArgValue::U32(v) => v as *mut u32 as *mut c_void,
            ArgValue::I64(v) => v as *mut i64 as *mut c_void,
            ArgValue::U64(v) => v as *mut u64 as *mut c_void,
            ArgValue::F32(v) => v as *mut f32 as *mut c_void,
            ArgValue::F64(v) => v as *mut f64 as *mut c_void,
            ArgValue::Ptr(v) => v as *mut *mut c_void as *mut c_void,
        }
    }
    /// A device pointer the kernel reads (`const T*`).
    pub fn input<T: Element>(s: &'a impl DeviceSlice<T>) -> KernelArg<'a> {
        KernelArg { value: ArgValue::Ptr(s.device_ptr() as *mut c_void), _borrow: PhantomData }
    }
    /// A device pointer the kernel writes (`T*`).
    pub fn output<T: Element>(s: &'a mut impl DeviceSliceMut<T>) -> KernelArg<'a> {
        KernelArg { value: ArgValue::Ptr(s.device_ptr_mut()), _borrow: PhantomData }
    }
    /// A raw pointer value.
    pub fn ptr(p: *mut c_void) -> KernelArg<'a> {
        KernelArg { value: ArgValue::Ptr(p), _borrow: PhantomData }
    }
}

macro_rules! arg_from {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> From<$t> for KernelArg<'a> {
            fn from(x: $t) -> KernelArg<'a> {
                KernelArg { value: ArgValue::$v(x), _borrow: PhantomData }
            }
        }
    )*};
}
arg_from!(i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

impl<'ctx> Kernel<'ctx> {
    pub fn as_raw(&self) -> *mut sys::tk_kernel {
        self.raw
    }

    pub fn info(&self) -> Result<KernelInfo> {
        let mut i = <sys::tk_kernel_info as sys::SizedStruct>::init();
        let st = unsafe { sys::tk_kernel_get_info(self.raw, &mut i) };
        self.ctx.check(st)?;
        Ok(KernelInfo {
            key_hex: unsafe { cstr(i.key_hex) },
            entry: unsafe { cstr(i.entry) },
            origin: Origin::from_raw(i.origin),
            compile_seconds: i.compile_seconds,
            resources: i.resources,
        })
    }

    /// The parameter layout recorded for the kernel (`tk_kernel_get_params`),
    /// in order; read from the code object, so it works on a kernel from the
    /// disk cache and on an offline context. `Error::NotFound` when the code
    /// object records none.
    pub fn params(&self) -> Result<Vec<KernelParam>> {
        let mut p = <sys::tk_kernel_params as sys::SizedStruct>::init();
        let st = unsafe { sys::tk_kernel_get_params(self.raw, &mut p) };
        if st != sys::TK_OK {
            // The call leaves the context's last error alone: say it here.
            let why = if st == sys::TK_NOT_FOUND {
                "the code object records no parameter layout for this kernel".to_string()
            } else {
                format!("tk_kernel_get_params: {}", crate::error::status_str(st))
            };
            return Err(Error::from_status(st, why));
        }
        if p.n_params == 0 || p.params.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the library's array of n_params entries lives as long as the
        // kernel, which borrows its context.
        let raw = unsafe { std::slice::from_raw_parts(p.params, p.n_params) };
        Ok(raw.iter().map(|r| KernelParam { offset: r.offset, size: r.size, kind: ParamKind::from_raw(r.kind) }).collect())
    }

    /// Enqueues the kernel on `stream` (`tk_kernel_launch`).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and
    /// type, and the kernel must stay within the memory it is given: the
    /// library cannot check either.
    pub unsafe fn launch(&self, grid: [u32; 3], block: [u32; 3], shared_bytes: u32, stream: Stream,
                         args: &mut [KernelArg<'_>]) -> Result<()> {
        let mut slots: Vec<*mut c_void> = args.iter_mut().map(|a| a.slot()).collect();
        let g: [c_uint; 3] = [grid[0], grid[1], grid[2]];
        let b: [c_uint; 3] = [block[0], block[1], block[2]];
        let argv = if slots.is_empty() { ptr::null_mut() } else { slots.as_mut_ptr() };
        let st = sys::tk_kernel_launch(self.ctx.as_raw(), self.raw, g.as_ptr(), b.as_ptr(), shared_bytes,
                                       stream.as_raw(), argv);
        self.ctx.check(st)
    }
}
