use std::marker::PhantomData;
use std::mem::size_of;
use std::os::raw::c_void;
use std::ptr;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::sys;

/// Plain element types that may be copied to and from the device bit for
/// bit. fp16 data is `u16` (IEEE binary16 bit patterns).
///
/// # Safety
/// Every bit pattern of the type's size must be a valid value.
pub unsafe trait Element: Copy + Send + Sync + 'static {}
unsafe impl Element for u8 {}
unsafe impl Element for i8 {}
unsafe impl Element for u16 {}
unsafe impl Element for i16 {}
unsafe impl Element for u32 {}
unsafe impl Element for i32 {}
unsafe impl Element for u64 {}
unsafe impl Element for i64 {}
unsafe impl Element for f32 {}
unsafe impl Element for f64 {}

/// Device memory holding `len()` elements of `T`, read by an operator.
///
/// # Safety
/// `device_ptr` must point to at least `len()` elements of the context's
/// device that stay allocated while the value is borrowed.
pub unsafe trait DeviceSlice<T: Element> {
    fn device_ptr(&self) -> *const c_void;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Leading dimension in elements as the operators take it: 0 is packed
    /// (the row length); `Strided` / `StridedMut` give another.
    fn ld(&self) -> usize {
        0
    }
}

/// Device memory an operator writes.
///
/// # Safety
/// As `DeviceSlice`, and the memory may be written.
pub unsafe trait DeviceSliceMut<T: Element>: DeviceSlice<T> {
    fn device_ptr_mut(&mut self) -> *mut c_void;
}

/// Device memory allocated with `tk_mem_alloc`; freed on drop. Borrows the
/// context, so it cannot outlive it.
///
/// Work is enqueued asynchronously: a buffer dropped while a kernel of
/// another stream still uses it is freed under that kernel, as with
/// cudaFree. Synchronise (`Context::sync`) before dropping buffers a stream
/// still works on.
pub struct DeviceBuffer<'ctx, T: Element> {
    ctx: &'ctx Context,
    ptr: *mut c_void,
    len: usize,
    _t: PhantomData<T>,
}

// SAFETY: device memory has no thread affinity; the context is Sync.
unsafe impl<'ctx, T: Element> Send for DeviceBuffer<'ctx, T> {}
unsafe impl<'ctx, T: Element> Sync for DeviceBuffer<'ctx, T> {}

fn bytes_of<T>(len: usize) -> Result<usize> {
    len.checked_mul(size_of::<T>())
        .ok_or_else(|| Error::Overflow(format!("{} elements of {} bytes overflow", len, size_of::<T>())))
}

impl Context {
    /// `tk_mem_alloc` of `len` elements (contents undefined; at least one
    /// byte is allocated for `len == 0`).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<'_, T>> {
        let bytes = bytes_of::<T>(len)?.max(1);
        let mut p = ptr::null_mut();
        let st = unsafe { sys::tk_mem_alloc(self.as_raw(), bytes, &mut p) };
        self.check(st)?;
        Ok(DeviceBuffer { ctx: self, ptr: p, len, _t: PhantomData })
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<'_, T>> {
        let mut b = self.alloc::<T>(data.len())?;
        b.copy_from(data)?;
        Ok(b)
    }

    /// A zero-filled buffer.
    pub fn zeros<T: Element>(&self, len: usize) -> Result<DeviceBuffer<'_, T>> {
        let mut b = self.alloc::<T>(len)?;
        b.fill_bytes(0)?;
        Ok(b)
    }
}

impl<'ctx, T: Element> DeviceBuffer<'ctx, T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.ptr
    }
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// `tk_mem_upload` of exactly `len()` elements.
    pub fn copy_from(&mut self, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::invalid(format!("copy_from: {} elements into a buffer of {}", src.len(), self.len)));
        }
        if src.is_empty() {
            return Ok(());
        }
        let st = unsafe { sys::tk_mem_upload(self.ctx.as_raw(), self.ptr, src.as_ptr() as *const c_void, bytes_of::<T>(self.len)?) };
        self.ctx.check(st)
    }

    /// `tk_mem_download` of exactly `len()` elements.
    pub fn copy_to(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(format!("copy_to: a buffer of {} into {} elements", self.len, dst.len())));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let st = unsafe { sys::tk_mem_download(self.ctx.as_raw(), dst.as_mut_ptr() as *mut c_void, self.ptr, bytes_of::<T>(self.len)?) };
        self.ctx.check(st)
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // SAFETY: T is an Element: all-zero bytes are a valid value.
        let mut v = vec![unsafe { std::mem::zeroed::<T>() }; self.len];
        self.copy_to(&mut v)?;
        Ok(v)
    }

    /// `tk_mem_set`: every byte set to `byte`.
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        let st = unsafe { sys::tk_mem_set(self.ctx.as_raw(), self.ptr, byte, bytes_of::<T>(self.len)?.max(1)) };
        self.ctx.check(st)
    }
}

impl<'ctx, T: Element> Drop for DeviceBuffer<'ctx, T> {
    fn drop(&mut self) {
        // SAFETY: allocated by tk_mem_alloc on this context, freed once.
        unsafe {
            sys::tk_mem_free(self.ctx.as_raw(), self.ptr);
        }
    }
}

unsafe impl<'ctx, T: Element> DeviceSlice<T> for DeviceBuffer<'ctx, T> {
    fn device_ptr(&self) -> *const c_void {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}
unsafe impl<'ctx, T: Element> DeviceSliceMut<T> for DeviceBuffer<'ctx, T> {
    fn device_ptr_mut(&mut self) -> *mut c_void {
        self.ptr
    }
}

/// Device memory owned by someone else (cudaMalloc, hipMalloc, PyTorch).
#[derive(Debug)]
pub struct DeviceView<'a, T: Element> {
    ptr: *mut c_void,
    len: usize,
    _t: PhantomData<&'a mut T>,
}

unsafe impl<'a, T: Element> Send for DeviceView<'a, T> {}
unsafe impl<'a, T: Element> Sync for DeviceView<'a, T> {}

impl<'a, T: Element> DeviceView<'a, T> {
    /// # Safety
    /// `ptr` must point to `len` elements of device memory of the context's
    /// device, allocated (and, when written through this view, not read or
    /// written by anyone else) for `'a`.
    pub unsafe fn from_raw(ptr: *mut c_void, len: usize) -> DeviceView<'a, T> {
        DeviceView { ptr, len, _t: PhantomData }
    }
}

unsafe impl<'a, T: Element> DeviceSlice<T> for DeviceView<'a, T> {
    fn device_ptr(&self) -> *const c_void {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}
unsafe impl<'a, T: Element> DeviceSliceMut<T> for DeviceView<'a, T> {
    fn device_ptr_mut(&mut self) -> *mut c_void {
        self.ptr
    }
}

/// A matrix operand with a leading dimension (row stride, in elements)
/// other than its row length: `Strided::new(&buf, ld)`. The operators check
/// that the buffer holds (rows - 1) x ld + cols elements.
pub struct Strided<'a, T: Element, S: DeviceSlice<T> + ?Sized> {
    inner: &'a S,
    ld: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Element, S: DeviceSlice<T> + ?Sized> Strided<'a, T, S> {
    pub fn new(inner: &'a S, ld: usize) -> Self {
        Strided { inner, ld, _t: PhantomData }
    }
}

unsafe impl<'a, T: Element, S: DeviceSlice<T> + ?Sized> DeviceSlice<T> for Strided<'a, T, S> {
    fn device_ptr(&self) -> *const c_void {
        self.inner.device_ptr()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn ld(&self) -> usize {
        self.ld
    }
}

/// The written counterpart of `Strided`.
pub struct StridedMut<'a, T: Element, S: DeviceSliceMut<T> + ?Sized> {
    inner: &'a mut S,
    ld: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Element, S: DeviceSliceMut<T> + ?Sized> StridedMut<'a, T, S> {
    pub fn new(inner: &'a mut S, ld: usize) -> Self {
        StridedMut { inner, ld, _t: PhantomData }
    }
}

unsafe impl<'a, T: Element, S: DeviceSliceMut<T> + ?Sized> DeviceSlice<T> for StridedMut<'a, T, S> {
    fn device_ptr(&self) -> *const c_void {
        self.inner.device_ptr()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn ld(&self) -> usize {
        self.ld
    }
}

unsafe impl<'a, T: Element, S: DeviceSliceMut<T> + ?Sized> DeviceSliceMut<T> for StridedMut<'a, T, S> {
    fn device_ptr_mut(&mut self) -> *mut c_void {
        self.inner.device_ptr_mut()
    }
}
