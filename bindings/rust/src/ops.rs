//! The seven operators on device memory, and the operator tools
//! (precompile, checked runs, tuning).
use std::os::raw::{c_uint, c_void};
use std::ptr;

use crate::context::{dims_arg, Context, Origin, Stream};
use crate::error::{cstr, Error, Result};
use crate::mem::{DeviceSlice, DeviceSliceMut};
use crate::sys;

/// An operator of the library (`tk_op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    GemmF16Fwd,
    GemmF16GradA,
    GemmF16GradB,
    SoftmaxF16Fwd,
    SoftmaxXentF16Bwd,
    EmbeddingF16Fwd,
    EmbeddingF16Bwd,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::GemmF16Fwd,
        Op::GemmF16GradA,
        Op::GemmF16GradB,
        Op::SoftmaxF16Fwd,
        Op::SoftmaxXentF16Bwd,
        Op::EmbeddingF16Fwd,
        Op::EmbeddingF16Bwd,
    ];
    pub fn raw(self) -> sys::tk_op {
        match self {
            Op::GemmF16Fwd => sys::TK_OP_GEMM_F16_FWD,
            Op::GemmF16GradA => sys::TK_OP_GEMM_F16_GRAD_A,
            Op::GemmF16GradB => sys::TK_OP_GEMM_F16_GRAD_B,
            Op::SoftmaxF16Fwd => sys::TK_OP_SOFTMAX_F16_FWD,
            Op::SoftmaxXentF16Bwd => sys::TK_OP_SOFTMAX_XENT_F16_BWD,
            Op::EmbeddingF16Fwd => sys::TK_OP_EMBEDDING_F16_FWD,
            Op::EmbeddingF16Bwd => sys::TK_OP_EMBEDDING_F16_BWD,
        }
    }
    pub fn from_raw(op: sys::tk_op) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| o.raw() == op)
    }
    /// "gemm_f16_fwd", ... (`tk_op_name`).
    pub fn name(self) -> String {
        unsafe { cstr(sys::tk_op_name(self.raw())) }
    }
    /// `tk_op_from_name`.
    pub fn from_name(name: &str) -> Result<Op> {
        let c = crate::config::cstring(name)?;
        let mut raw = 0;
        let st = unsafe { sys::tk_op_from_name(c.as_ptr(), &mut raw) };
        if st != sys::TK_OK {
            return Err(Error::from_status(st, format!("unknown operator '{}'", name)));
        }
        Op::from_raw(raw).ok_or_else(|| Error::NotFound(format!("operator '{}' is newer than this crate", name)))
    }
    /// The names of the op's dimensions, in order ("M", "N", "K").
    pub fn dims(self) -> Vec<String> {
        let mut n = 0;
        let s = unsafe { cstr(sys::tk_op_dims(self.raw(), &mut n)) };
        s.split(',').map(|d| d.trim().to_string()).filter(|d| !d.is_empty()).collect()
    }
}

fn ld<T: crate::Element, S: DeviceSlice<T> + ?Sized>(s: &S) -> Result<i64> {
    dim("leading dimension", s.ld())
}

fn dim(name: &str, v: usize) -> Result<i64> {
    if v > i64::MAX as usize {
        return Err(Error::Overflow(format!("{} = {} does not fit int64", name, v)));
    }
    Ok(v as i64)
}

/// The buffer holds a rows x cols matrix with its leading dimension
/// (packed: rows x cols elements; else (rows - 1) x ld + cols). A leading
/// dimension below cols is left to the library, which names it.
fn need<T: crate::Element, S: DeviceSlice<T> + ?Sized>(what: &str, s: &S, rows: usize, cols: usize) -> Result<()> {
    let ld = s.ld();
    let over = || Error::Overflow(format!("{}: {} x {} elements (ld {}) overflow", what, rows, cols, ld));
    let n = if ld == 0 {
        rows.checked_mul(cols).ok_or_else(over)?
    } else if ld < cols || rows == 0 || cols == 0 {
        return Ok(());
    } else {
        (rows - 1).checked_mul(ld).and_then(|x| x.checked_add(cols)).ok_or_else(over)?
    };
    if s.len() < n {
        return Err(Error::invalid(format!("{}: {} elements needed, the buffer holds {}", what, n, s.len())));
    }
    Ok(())
}

/// The operators take row-major device arrays of fp16 bit patterns (`u16`),
/// packed, or with a leading dimension through `Strided::new(&buf, ld)` /
/// `StridedMut::new(&mut buf, ld)`; their lengths are checked before
/// anything is enqueued. Work goes on `stream` and the call returns without
/// waiting.
impl Context {
    /// `C[M,N] = A[M,K] x B[K,N]`, C in fp32.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f16_fwd(&self, m: usize, n: usize, k: usize, a: &impl DeviceSlice<u16>, b: &impl DeviceSlice<u16>,
                        c: &mut impl DeviceSliceMut<f32>, stream: Stream) -> Result<()> {
        need("gemm_f16_fwd A", a, m, k)?;
        need("gemm_f16_fwd B", b, k, n)?;
        need("gemm_f16_fwd C", c, m, n)?;
        let st = unsafe {
            sys::tk_gemm_f16_fwd(self.as_raw(), dim("M", m)?, dim("N", n)?, dim("K", k)?, a.device_ptr(), ld(a)?,
                                 b.device_ptr(), ld(b)?, c.device_ptr_mut() as *mut f32, ld(c)?, stream.as_raw())
        };
        self.check(st)
    }

    /// `grad_A[M,K] = grad_C[M,N] x B^T`, B stored `[K,N]`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f16_grad_a(&self, m: usize, n: usize, k: usize, grad_c: &impl DeviceSlice<u16>,
                           b: &impl DeviceSlice<u16>, grad_a: &mut impl DeviceSliceMut<u16>, stream: Stream) -> Result<()> {
        need("gemm_f16_grad_a grad_C", grad_c, m, n)?;
        need("gemm_f16_grad_a B", b, k, n)?;
        need("gemm_f16_grad_a grad_A", grad_a, m, k)?;
        let st = unsafe {
            sys::tk_gemm_f16_grad_a(self.as_raw(), dim("M", m)?, dim("N", n)?, dim("K", k)?, grad_c.device_ptr(), ld(grad_c)?,
                                    b.device_ptr(), ld(b)?, grad_a.device_ptr_mut(), ld(grad_a)?, stream.as_raw())
        };
        self.check(st)
    }

    /// `grad_B[K,N] = A^T x grad_C`, A stored `[M,K]`, grad_C `[M,N]`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f16_grad_b(&self, m: usize, n: usize, k: usize, a: &impl DeviceSlice<u16>,
                           grad_c: &impl DeviceSlice<u16>, grad_b: &mut impl DeviceSliceMut<u16>, stream: Stream) -> Result<()> {
        need("gemm_f16_grad_b A", a, m, k)?;
        need("gemm_f16_grad_b grad_C", grad_c, m, n)?;
        need("gemm_f16_grad_b grad_B", grad_b, k, n)?;
        let st = unsafe {
            sys::tk_gemm_f16_grad_b(self.as_raw(), dim("M", m)?, dim("N", n)?, dim("K", k)?, a.device_ptr(), ld(a)?,
                                    grad_c.device_ptr(), ld(grad_c)?, grad_b.device_ptr_mut(), ld(grad_b)?, stream.as_raw())
        };
        self.check(st)
    }

    /// `out[r,:] = softmax(in[r,:])`.
    pub fn softmax_f16_fwd(&self, rows: usize, cols: usize, input: &impl DeviceSlice<u16>,
                           out: &mut impl DeviceSliceMut<u16>, stream: Stream) -> Result<()> {
        need("softmax_f16_fwd in", input, rows, cols)?;
        need("softmax_f16_fwd out", out, rows, cols)?;
        let st = unsafe {
            sys::tk_softmax_f16_fwd(self.as_raw(), dim("rows", rows)?, dim("cols", cols)?, input.device_ptr(), ld(input)?,
                                    out.device_ptr_mut(), ld(out)?, stream.as_raw())
        };
        self.check(st)
    }

    /// grad_in = s * (g - sum_j g_j s_j), row by row.
    pub fn softmax_xent_f16_bwd(&self, rows: usize, cols: usize, s: &impl DeviceSlice<u16>, g: &impl DeviceSlice<u16>,
                                grad_in: &mut impl DeviceSliceMut<u16>, stream: Stream) -> Result<()> {
        need("softmax_xent_f16_bwd s", s, rows, cols)?;
        need("softmax_xent_f16_bwd g", g, rows, cols)?;
        need("softmax_xent_f16_bwd grad_in", grad_in, rows, cols)?;
        let st = unsafe {
            sys::tk_softmax_xent_f16_bwd(self.as_raw(), dim("rows", rows)?, dim("cols", cols)?, s.device_ptr(), ld(s)?,
                                         g.device_ptr(), ld(g)?, grad_in.device_ptr_mut(), ld(grad_in)?, stream.as_raw())
        };
        self.check(st)
    }

    /// `out[q,:] = weight[idx[q],:]`; rows of out-of-range indices are zeros,
    /// counted into `bad_count[0]` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn embedding_f16_fwd(&self, v: usize, d: usize, weight: &impl DeviceSlice<u16>, q: usize,
                             idx: &impl DeviceSlice<i32>, out: &mut impl DeviceSliceMut<u16>,
                             bad_count: Option<&mut dyn DeviceSliceMut<u32>>, stream: Stream) -> Result<()> {
        need("embedding_f16_fwd weight", weight, v, d)?;
        need("embedding_f16_fwd idx", idx, q, 1)?;
        need("embedding_f16_fwd out", out, q, d)?;
        let bad = bad_ptr(bad_count)?;
        let st = unsafe {
            sys::tk_embedding_f16_fwd(self.as_raw(), dim("V", v)?, dim("D", d)?, weight.device_ptr(), dim("Q", q)?,
                                      idx.device_ptr() as *const i32, out.device_ptr_mut(), bad, stream.as_raw())
        };
        self.check(st)
    }

    /// `grad_weight[idx[q],:] += grad_out[q,:]`; `deterministic` fixes the
    /// summation order (TK_EMBEDDING_DETERMINISTIC).
    #[allow(clippy::too_many_arguments)]
    pub fn embedding_f16_bwd(&self, v: usize, d: usize, grad_weight: &mut impl DeviceSliceMut<u16>, q: usize,
                             idx: &impl DeviceSlice<i32>, grad_out: &impl DeviceSlice<u16>, deterministic: bool,
                             bad_count: Option<&mut dyn DeviceSliceMut<u32>>, stream: Stream) -> Result<()> {
        need("embedding_f16_bwd grad_weight", grad_weight, v, d)?;
        need("embedding_f16_bwd idx", idx, q, 1)?;
        need("embedding_f16_bwd grad_out", grad_out, q, d)?;
        let bad = bad_ptr(bad_count)?;
        let flags: c_uint = if deterministic { sys::TK_EMBEDDING_DETERMINISTIC } else { 0 };
        let st = unsafe {
            sys::tk_embedding_f16_bwd(self.as_raw(), dim("V", v)?, dim("D", d)?, grad_weight.device_ptr_mut(),
                                      dim("Q", q)?, idx.device_ptr() as *const i32, grad_out.device_ptr(), flags,
                                      bad, stream.as_raw())
        };
        self.check(st)
    }

    /// `tk_op_precompile`: compiles (or finds cached) every kernel `op`
    /// would use for `dims` under the context's policy. Returns
    /// (compiled, cached).
    pub fn op_precompile(&self, op: Op, dims: &[i64]) -> Result<(u32, u32)> {
        let (p, n) = dims_arg(dims)?;
        let (mut compiled, mut cached) = (0, 0);
        let st = unsafe { sys::tk_op_precompile(self.as_raw(), op.raw(), p, n, &mut compiled, &mut cached) };
        self.check(st)?;
        Ok((compiled, cached))
    }

    /// `tk_op_tune` (GEMM ops on a device): what was timed and kept.
    pub fn op_tune(&self, op: Op, dims: &[i64]) -> Result<TuneReport> {
        let (p, n) = dims_arg(dims)?;
        let mut r = Box::new(<sys::tk_tune_report as sys::SizedStruct>::init());
        let st = unsafe { sys::tk_op_tune(self.as_raw(), op.raw(), p, n, &mut *r) };
        self.check(st)?;
        Ok(TuneReport::from_raw(&r))
    }

    /// `tk_check_run`: random inputs from `seed`, the op on the device, the
    /// result compared with the CPU reference.
    pub fn check_run(&self, op: Op, dims: &[i64], seed: u64) -> Result<CheckReport> {
        let (p, n) = dims_arg(dims)?;
        let mut r = <sys::tk_check_report as sys::SizedStruct>::init();
        let st = unsafe { sys::tk_check_run(self.as_raw(), op.raw(), p, n, seed, &mut r) };
        self.check(st)?;
        Ok(CheckReport::take(r))
    }
}

fn bad_ptr(bad: Option<&mut dyn DeviceSliceMut<u32>>) -> Result<*mut u32> {
    match bad {
        None => Ok(ptr::null_mut()),
        Some(b) => {
            if b.len() < 1 {
                return Err(Error::invalid("bad_count: an empty buffer"));
            }
            Ok(b.device_ptr_mut() as *mut u32)
        }
    }
}

fn chars(a: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What `op_tune` measured and kept.
#[derive(Clone, Debug)]
pub struct TuneReport {
    pub record: String,
    pub chosen: String,
    pub heuristic: String,
    pub chosen_us: f64,
    pub heuristic_us: f64,
    pub timed_m: i64,
    pub compiled: u32,
    pub rejected: u32,
    /// Every candidate timed: (configuration, microseconds).
    pub timed: Vec<(String, f64)>,
    pub stored: bool,
    /// The class's middle M, where every candidate is timed too (0: not);
    /// `chosen` is "heuristics" where no configuration gains 3% over them
    /// across both points.
    pub mid_m: i64,
    pub chosen_mid_us: f64,
    pub heuristic_mid_us: f64,
    /// Each candidate's time at `mid_m`, in `timed`'s order (< 0: does not fit).
    pub timed_mid: Vec<f64>,
}

impl TuneReport {
    fn from_raw(r: &sys::tk_tune_report) -> TuneReport {
        let n = (r.candidates as usize).min(r.timed.len());
        TuneReport {
            record: chars(&r.record),
            chosen: chars(&r.chosen),
            heuristic: chars(&r.heuristic),
            chosen_us: r.chosen_us,
            heuristic_us: r.heuristic_us,
            timed_m: r.timed_m,
            compiled: r.compiled,
            rejected: r.rejected,
            timed: r.timed[..n].iter().map(|t| (chars(&t.config), t.us)).collect(),
            stored: r.stored != 0,
            mid_m: r.mid_m,
            chosen_mid_us: r.chosen_mid_us,
            heuristic_mid_us: r.heuristic_mid_us,
            timed_mid: if r.mid_m > 0 { r.timed_mid_us[..n].to_vec() } else { Vec::new() },
        }
    }
}

/// The report of a checked run (`tk_check_report`, strings copied).
#[derive(Clone, Debug)]
pub struct CheckReport {
    pub op: Option<Op>,
    pub dims: Vec<i64>,
    pub seed: u64,
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    pub tolerance_abs: f64,
    pub tolerance_rel: f64,
    pub passed: bool,
    pub bad_indices: u64,
    pub kernel_ms: f64,
    pub origin: Origin,
    pub compile_ms: f64,
    pub source_fingerprint: String,
    pub compiler: String,
    pub cache_key: String,
    pub device: String,
    pub arch: String,
    pub policy: String,
    pub fallback_calls: u64,
    pub builds_done: u64,
    pub builds_pending: u64,
    pub wait_ms: f64,
    /// The library's Markdown rendering.
    pub markdown: String,
    /// The library's JSON rendering.
    pub json: String,
}

impl CheckReport {
    fn take(mut r: sys::tk_check_report) -> CheckReport {
        let render = |p: *mut std::os::raw::c_char| -> String {
            let s = unsafe { cstr(p) };
            unsafe { sys::free(p as *mut c_void) };
            s
        };
        let markdown = render(unsafe { sys::tk_check_report_markdown(&r) });
        let json = render(unsafe { sys::tk_check_report_json(&r) });
        let n = (r.n_dims.max(0) as usize).min(4);
        let out = unsafe {
            CheckReport {
                op: Op::from_raw(r.op),
                dims: r.dims[..n].to_vec(),
                seed: r.seed,
                max_abs_error: r.max_abs_error,
                max_rel_error: r.max_rel_error,
                tolerance_abs: r.tolerance_abs,
                tolerance_rel: r.tolerance_rel,
                passed: r.passed != 0,
                bad_indices: r.bad_indices,
                kernel_ms: r.kernel_ms,
                origin: Origin::from_raw(r.origin),
                compile_ms: r.compile_ms,
                source_fingerprint: cstr(r.source_fingerprint),
                compiler: cstr(r.compiler),
                cache_key: cstr(r.cache_key),
                device: cstr(r.device),
                arch: cstr(r.arch),
                policy: cstr(r.policy),
                fallback_calls: r.fallback_calls,
                builds_done: r.builds_done,
                builds_pending: r.builds_pending,
                wait_ms: r.wait_ms,
                markdown,
                json,
            }
        };
        unsafe { sys::tk_check_report_free(&mut r) };
        out
    }
}
