//! Raw declarations of `tokitai/tokitai.h` and `tokitai/ops.h`, one for one.
//!
//! Everything here is `unsafe` to call and follows the C header's rules
//! (the header is the manual). Enums are plain integers, so a value the
//! library adds later never becomes undefined behaviour on the Rust side.
//! Struct layouts are checked against the C compiler's by the `layout` test.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

pub type tk_status = c_int;
pub const TK_OK: tk_status = 0;
pub const TK_INVALID_ARGUMENT: tk_status = 1;
pub const TK_OUT_OF_MEMORY: tk_status = 2;
pub const TK_IO_ERROR: tk_status = 3;
pub const TK_NOT_FOUND: tk_status = 4;
pub const TK_CORRUPT: tk_status = 5;
pub const TK_BACKEND_UNAVAILABLE: tk_status = 6;
pub const TK_NO_DEVICE: tk_status = 7;
pub const TK_UNSUPPORTED: tk_status = 8;
pub const TK_COMPILE_FAILED: tk_status = 9;
pub const TK_LOAD_FAILED: tk_status = 10;
pub const TK_LAUNCH_FAILED: tk_status = 11;
pub const TK_DEVICE_ERROR: tk_status = 12;
pub const TK_MISALIGNED: tk_status = 13;
pub const TK_OVERFLOW: tk_status = 14;
pub const TK_OUT_OF_TOLERANCE: tk_status = 15;
pub const TK_INTERNAL: tk_status = 16;
pub const TK_TIMEOUT: tk_status = 17;

pub const TK_VERSION_MAJOR: u32 = 0;
pub const TK_VERSION_MINOR: u32 = 2;
pub const TK_VERSION_PATCH: u32 = 0;
pub const TK_VERSION_NUMBER: u32 = TK_VERSION_MAJOR * 10000 + TK_VERSION_MINOR * 100 + TK_VERSION_PATCH;
pub const TK_ABI_VERSION: u32 = 1;

pub type tk_log_level = c_int;
pub const TK_LOG_DEBUG: tk_log_level = 0;
pub const TK_LOG_INFO: tk_log_level = 1;
pub const TK_LOG_WARN: tk_log_level = 2;
pub const TK_LOG_ERROR: tk_log_level = 3;

pub type tk_backend_kind = c_int;
pub const TK_BACKEND_AUTO: tk_backend_kind = 0;
pub const TK_BACKEND_CUDA: tk_backend_kind = 1;
pub const TK_BACKEND_HIP: tk_backend_kind = 2;
pub const TK_BACKEND_STUB: tk_backend_kind = 3;

pub type tk_policy = c_int;
pub const TK_POLICY_EXACT: tk_policy = 0;
pub const TK_POLICY_GENERIC: tk_policy = 1;
pub const TK_POLICY_STABLE: tk_policy = 2;

pub type tk_build_mode = c_int;
pub const TK_BUILD_ASYNC: tk_build_mode = 0;
pub const TK_BUILD_SYNC: tk_build_mode = 1;

pub type tk_origin = c_int;
pub const TK_ORIGIN_MEMORY: tk_origin = 0;
pub const TK_ORIGIN_DISK: tk_origin = 1;
pub const TK_ORIGIN_COMPILED: tk_origin = 2;

pub type tk_op = c_int;
pub const TK_OP_GEMM_F16_FWD: tk_op = 0;
pub const TK_OP_GEMM_F16_GRAD_A: tk_op = 1;
pub const TK_OP_GEMM_F16_GRAD_B: tk_op = 2;
pub const TK_OP_SOFTMAX_F16_FWD: tk_op = 3;
pub const TK_OP_SOFTMAX_XENT_F16_BWD: tk_op = 4;
pub const TK_OP_EMBEDDING_F16_FWD: tk_op = 5;
pub const TK_OP_EMBEDDING_F16_BWD: tk_op = 6;
pub const TK_OP_COUNT: tk_op = 7;

pub const TK_EMBEDDING_DETERMINISTIC: c_uint = 1;

#[repr(C)]
pub struct tk_config {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct tk_context {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct tk_cache {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct tk_kernel {
    _opaque: [u8; 0],
}

pub type tk_log_fn = Option<unsafe extern "C" fn(user: *mut c_void, level: tk_log_level, msg: *const c_char)>;
pub type tk_cache_visit_fn = Option<unsafe extern "C" fn(user: *mut c_void, info: *const tk_cache_entry_info) -> c_int>;
pub type tk_cache_select_fn = tk_cache_visit_fn;
pub type tk_cache_bad_fn = Option<unsafe extern "C" fn(user: *mut c_void, path: *const c_char, why: *const c_char)>;
pub type tk_cache_source_fn = Option<unsafe extern "C" fn(user: *mut c_void, info: *const tk_cache_entry_info,
                                                         source: *const c_char, len: usize)>;
pub type tk_timed_fn = Option<unsafe extern "C" fn(user: *mut c_void) -> tk_status>;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tk_resource_usage {
    pub registers: i32,
    pub sgprs: i32,
    pub agprs: i32,
    pub shared_bytes: i32,
    pub local_bytes: i32,
    pub spill_count: i32,
    pub wavefront_size: i32,
    pub kernarg_bytes: i32,
    pub max_threads: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_cache_entry_info {
    pub struct_size: usize,
    pub key_hex: *const c_char,
    pub path: *const c_char,
    pub kernel: *const c_char,
    pub source: *const c_char,
    pub backend: *const c_char,
    pub arch: *const c_char,
    pub compiler: *const c_char,
    pub options: *const c_char,
    pub payload_size: u64,
    pub file_size: u64,
    pub created: i64,
    pub last_used: i64,
    pub resources: tk_resource_usage,
    pub read_only_tier: c_int,
    pub source_hash: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tk_cache_stats {
    pub struct_size: usize,
    pub entries: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub temp_files: u64,
    pub bad_files: u64,
    pub hits: u64,
    pub misses: u64,
    pub compiles: u64,
    pub compile_seconds: f64,
    pub fallback_calls: u64,
    pub errors: u64,
    pub stats_since: i64,
    pub source_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tk_cache_push_counts {
    pub struct_size: usize,
    pub pushed: u64,
    pub present: u64,
    pub replaced: u64,
    pub rejected: u64,
}

pub type tk_param_kind = c_int;
pub const TK_PARAM_UNKNOWN: tk_param_kind = 0;
pub const TK_PARAM_POINTER: tk_param_kind = 1;
pub const TK_PARAM_INT: tk_param_kind = 2;
pub const TK_PARAM_UINT: tk_param_kind = 3;
pub const TK_PARAM_FLOAT: tk_param_kind = 4;
pub const TK_PARAM_STRUCT: tk_param_kind = 5;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tk_kernel_param {
    pub offset: u32,
    pub size: u32,
    pub kind: i32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_kernel_params {
    pub struct_size: usize,
    pub n_params: usize,
    pub params: *const tk_kernel_param,
}

pub type tk_env_problem_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, name: *const c_char, value: *const c_char, why: *const c_char, fatal: c_int),
>;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tk_context_stats {
    pub struct_size: usize,
    pub memory_hits: u64,
    pub disk_hits: u64,
    pub compiles: u64,
    pub compile_failures: u64,
    pub loads: u64,
    pub load_failures: u64,
    pub cache_errors: u64,
    pub compile_seconds: f64,
    pub fallback_calls: u64,
    pub builds_queued: u64,
    pub builds_done: u64,
    pub builds_pending: u64,
    pub waits: u64,
    pub wait_seconds: f64,
    pub sync_compiles: u64,
    pub builds_failed: u64,
    pub builds_dropped: u64,
    pub remote_hits: u64,
    pub remote_misses: u64,
    pub remote_errors: u64,
    pub remote_rejected: u64,
    pub remote_publishes: u64,
    pub workspace_bytes: u64,
    pub workspace_peak: u64,
    pub workspace_allocs: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_define {
    pub name: *const c_char,
    pub value: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_header {
    pub name: *const c_char,
    pub text: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_kernel_desc {
    pub source_name: *const c_char,
    pub source: *const c_char,
    pub entry: *const c_char,
    pub defines: *const tk_define,
    pub n_defines: usize,
    pub options: *const *const c_char,
    pub n_options: usize,
    pub source_label: *const c_char,
    pub headers: *const tk_header,
    pub n_headers: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_kernel_info {
    pub struct_size: usize,
    pub key_hex: *const c_char,
    pub entry: *const c_char,
    pub origin: tk_origin,
    pub compile_seconds: f64,
    pub resources: tk_resource_usage,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct tk_tune_timing {
    pub config: [c_char; 64],
    pub us: f64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct tk_tune_report {
    pub struct_size: usize,
    pub record: [c_char; 128],
    pub chosen: [c_char; 64],
    pub heuristic: [c_char; 64],
    pub chosen_us: f64,
    pub heuristic_us: f64,
    pub timed_m: i64,
    pub candidates: c_uint,
    pub compiled: c_uint,
    pub rejected: c_uint,
    pub timed: [tk_tune_timing; 128],
    pub stored: c_int,
    pub mid_m: i64,
    pub chosen_mid_us: f64,
    pub heuristic_mid_us: f64,
    pub timed_mid_us: [f64; 128],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tk_check_report {
    pub struct_size: usize,
    pub op: tk_op,
    pub dims: [i64; 4],
    pub n_dims: c_int,
    pub seed: u64,
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    pub tolerance_abs: f64,
    pub tolerance_rel: f64,
    pub passed: c_int,
    pub bad_indices: u64,
    pub kernel_ms: f64,
    pub origin: tk_origin,
    pub compile_ms: f64,
    pub source_fingerprint: *mut c_char,
    pub compiler: *mut c_char,
    pub cache_key: *mut c_char,
    pub device: *mut c_char,
    pub arch: *mut c_char,
    pub policy: *mut c_char,
    pub fallback_calls: u64,
    pub builds_done: u64,
    pub builds_pending: u64,
    pub wait_ms: f64,
}

/// The sized-struct initialiser (`TK_STRUCT_INIT`): zeroed, with
/// `struct_size` set to the struct's size as Rust lays it out.
pub trait SizedStruct: Sized {
    fn init() -> Self;
}

macro_rules! sized_struct {
    ($($t:ty),*) => {$(
        impl SizedStruct for $t {
            fn init() -> Self {
                // SAFETY: every field is an integer, a float, a raw pointer or an
                // array of those: all-zero bytes are a valid value.
                let mut v: Self = unsafe { std::mem::zeroed() };
                v.struct_size = std::mem::size_of::<Self>();
                v
            }
        }
    )*};
}
sized_struct!(tk_cache_stats, tk_cache_push_counts, tk_context_stats, tk_kernel_info, tk_kernel_params,
              tk_tune_report, tk_check_report);

extern "C" {
    pub fn tk_version_number() -> c_uint;
    pub fn tk_version_string() -> *const c_char;
    pub fn tk_abi_version() -> c_uint;
    pub fn tk_status_str(status: tk_status) -> *const c_char;

    pub fn tk_config_create(out: *mut *mut tk_config) -> tk_status;
    pub fn tk_config_destroy(cfg: *mut tk_config);
    pub fn tk_config_set_cache_dir(cfg: *mut tk_config, dir: *const c_char) -> tk_status;
    pub fn tk_config_set_cache_lower(cfg: *mut tk_config, paths: *const c_char) -> tk_status;
    pub fn tk_config_set_cache_max_size(cfg: *mut tk_config, bytes: u64) -> tk_status;
    pub fn tk_config_set_cache_read_only(cfg: *mut tk_config, read_only: c_int) -> tk_status;
    pub fn tk_config_set_cache_disabled(cfg: *mut tk_config, disabled: c_int) -> tk_status;
    pub fn tk_config_set_backend(cfg: *mut tk_config, kind: tk_backend_kind) -> tk_status;
    pub fn tk_config_set_device(cfg: *mut tk_config, ordinal: c_int) -> tk_status;
    pub fn tk_config_set_target(cfg: *mut tk_config, target: *const c_char) -> tk_status;
    pub fn tk_config_set_policy(cfg: *mut tk_config, policy: tk_policy) -> tk_status;
    pub fn tk_config_set_build_mode(cfg: *mut tk_config, mode: tk_build_mode) -> tk_status;
    pub fn tk_config_set_build_limits(cfg: *mut tk_config, workers: c_uint, queue: c_uint) -> tk_status;
    pub fn tk_config_set_log(cfg: *mut tk_config, f: tk_log_fn, user: *mut c_void) -> tk_status;
    pub fn tk_config_set_log_level(cfg: *mut tk_config, level: tk_log_level) -> tk_status;
    pub fn tk_config_set_remote(cfg: *mut tk_config, url: *const c_char) -> tk_status;
    pub fn tk_config_set_remote_key(cfg: *mut tk_config, key: *const c_void, len: usize) -> tk_status;
    pub fn tk_config_set_remote_timeouts(cfg: *mut tk_config, connect_ms: c_uint, io_ms: c_uint) -> tk_status;
    pub fn tk_config_set_remote_lease(cfg: *mut tk_config, lease_ms: c_uint, wait_ms: c_uint) -> tk_status;

    pub fn tk_cache_open(cfg: *const tk_config, out: *mut *mut tk_cache) -> tk_status;
    pub fn tk_cache_close(cache: *mut tk_cache);
    pub fn tk_cache_root(cache: *const tk_cache) -> *const c_char;
    pub fn tk_cache_lower_tiers(cache: *const tk_cache) -> *const c_char;
    pub fn tk_cache_shipped_tier() -> *const c_char;
    pub fn tk_cache_last_error(cache: *const tk_cache) -> *const c_char;
    pub fn tk_cache_list(cache: *mut tk_cache, visit: tk_cache_visit_fn, user: *mut c_void) -> tk_status;
    pub fn tk_cache_get_stats(cache: *mut tk_cache, out: *mut tk_cache_stats) -> tk_status;
    pub fn tk_cache_verify(cache: *mut tk_cache, bad: tk_cache_bad_fn, user: *mut c_void, n_bad: *mut u64) -> tk_status;
    pub fn tk_cache_prune(cache: *mut tk_cache, max_bytes: u64, n_removed: *mut u64) -> tk_status;
    pub fn tk_cache_clear(cache: *mut tk_cache, n_removed: *mut u64) -> tk_status;
    pub fn tk_cache_remove(cache: *mut tk_cache, select: tk_cache_select_fn, user: *mut c_void,
                           n_removed: *mut u64) -> tk_status;
    pub fn tk_cache_export(cache: *mut tk_cache, path: *const c_char, select: tk_cache_select_fn,
                           user: *mut c_void, n_exported: *mut u64) -> tk_status;
    pub fn tk_cache_import(cache: *mut tk_cache, path: *const c_char, bad: tk_cache_bad_fn, user: *mut c_void,
                           n_imported: *mut u64, n_rejected: *mut u64) -> tk_status;
    pub fn tk_cache_entry_source(cache: *mut tk_cache, key: *const c_char, f: tk_cache_source_fn,
                                 user: *mut c_void) -> tk_status;
    pub fn tk_parse_size(text: *const c_char, out: *mut u64) -> tk_status;
    pub fn tk_cache_remote_describe(cache: *mut tk_cache, buf: *mut c_char, size: usize) -> tk_status;
    pub fn tk_cache_remote_list(cache: *mut tk_cache, visit: tk_cache_visit_fn, user: *mut c_void) -> tk_status;
    pub fn tk_cache_remote_get_stats(cache: *mut tk_cache, out: *mut tk_cache_stats) -> tk_status;
    pub fn tk_cache_remote_list_counted(cache: *mut tk_cache, visit: tk_cache_visit_fn, user: *mut c_void,
                                        n_skipped: *mut u64) -> tk_status;
    pub fn tk_cache_remote_push_report(cache: *mut tk_cache, bundle: *const c_char, bad: tk_cache_bad_fn,
                                       user: *mut c_void, out: *mut tk_cache_push_counts) -> tk_status;
    pub fn tk_cache_zero_stats(cache: *mut tk_cache) -> tk_status;
    pub fn tk_cache_set_max_size(cache: *mut tk_cache, max_bytes: u64) -> tk_status;
    pub fn tk_env_check(f: tk_env_problem_fn, user: *mut c_void) -> c_uint;
    pub fn tk_kernel_get_params(kernel: *const tk_kernel, out: *mut tk_kernel_params) -> tk_status;
    pub fn tk_cache_remote_push(cache: *mut tk_cache, bundle: *const c_char, bad: tk_cache_bad_fn, user: *mut c_void,
                                n_pushed: *mut u64, n_present: *mut u64, n_rejected: *mut u64) -> tk_status;

    pub fn tk_context_create(cfg: *const tk_config, out: *mut *mut tk_context, err: *mut c_char,
                             err_size: usize) -> tk_status;
    pub fn tk_context_destroy(ctx: *mut tk_context);
    pub fn tk_context_last_error(ctx: *const tk_context) -> *const c_char;
    pub fn tk_context_backend_name(ctx: *const tk_context) -> *const c_char;
    pub fn tk_context_target(ctx: *const tk_context) -> *const c_char;
    pub fn tk_context_compiler(ctx: *const tk_context) -> *const c_char;
    pub fn tk_context_policy(ctx: *const tk_context) -> tk_policy;
    pub fn tk_context_get_stats(ctx: *const tk_context, out: *mut tk_context_stats) -> tk_status;
    pub fn tk_context_reset_stats(ctx: *mut tk_context);
    pub fn tk_context_wait_builds(ctx: *mut tk_context, timeout_ms: c_int) -> tk_status;

    pub fn tk_kernel_get(ctx: *mut tk_context, desc: *const tk_kernel_desc, out: *mut *mut tk_kernel) -> tk_status;
    pub fn tk_kernel_get_info(kernel: *const tk_kernel, out: *mut tk_kernel_info) -> tk_status;
    pub fn tk_kernel_launch(ctx: *mut tk_context, kernel: *const tk_kernel, grid: *const c_uint,
                            block: *const c_uint, shared_bytes: c_uint, stream: *mut c_void,
                            args: *mut *mut c_void) -> tk_status;
    pub fn tk_kernel_precompile(ctx: *mut tk_context, desc: *const tk_kernel_desc, origin: *mut tk_origin) -> tk_status;
    pub fn tk_backend_describe(kind: tk_backend_kind, buf: *mut c_char, size: usize) -> tk_status;
    pub fn tk_embedded_sources() -> *const *const c_char;

    pub fn tk_mem_alloc(ctx: *mut tk_context, bytes: usize, out: *mut *mut c_void) -> tk_status;
    pub fn tk_mem_free(ctx: *mut tk_context, ptr: *mut c_void) -> tk_status;
    pub fn tk_mem_upload(ctx: *mut tk_context, dst: *mut c_void, src: *const c_void, bytes: usize) -> tk_status;
    pub fn tk_mem_download(ctx: *mut tk_context, dst: *mut c_void, src: *const c_void, bytes: usize) -> tk_status;
    pub fn tk_mem_set(ctx: *mut tk_context, dst: *mut c_void, byte: u8, bytes: usize) -> tk_status;
    pub fn tk_stream_sync(ctx: *mut tk_context, stream: *mut c_void) -> tk_status;
    pub fn tk_time_on_stream(ctx: *mut tk_context, stream: *mut c_void, run: tk_timed_fn, user: *mut c_void,
                             out_ms: *mut f32) -> tk_status;

    pub fn tk_gemm_f16_fwd(ctx: *mut tk_context, m: i64, n: i64, k: i64, d_a: *const c_void, lda: i64,
                           d_b: *const c_void, ldb: i64, d_c: *mut f32, ldc: i64, stream: *mut c_void) -> tk_status;
    pub fn tk_gemm_f16_grad_a(ctx: *mut tk_context, m: i64, n: i64, k: i64, d_grad_c: *const c_void, ldgc: i64,
                              d_b: *const c_void, ldb: i64, d_grad_a: *mut c_void, ldga: i64,
                              stream: *mut c_void) -> tk_status;
    pub fn tk_gemm_f16_grad_b(ctx: *mut tk_context, m: i64, n: i64, k: i64, d_a: *const c_void, lda: i64,
                              d_grad_c: *const c_void, ldgc: i64, d_grad_b: *mut c_void, ldgb: i64,
                              stream: *mut c_void) -> tk_status;
    pub fn tk_softmax_f16_fwd(ctx: *mut tk_context, rows: i64, cols: i64, d_in: *const c_void, ld_in: i64,
                              d_out: *mut c_void, ld_out: i64, stream: *mut c_void) -> tk_status;
    pub fn tk_softmax_xent_f16_bwd(ctx: *mut tk_context, rows: i64, cols: i64, d_s: *const c_void, ld_s: i64,
                                   d_g: *const c_void, ld_g: i64, d_grad_in: *mut c_void, ld_grad_in: i64,
                                   stream: *mut c_void) -> tk_status;
    pub fn tk_embedding_f16_fwd(ctx: *mut tk_context, v: i64, d: i64, d_weight: *const c_void, q: i64,
                                d_idx: *const i32, d_out: *mut c_void, d_bad_count: *mut u32,
                                stream: *mut c_void) -> tk_status;
    pub fn tk_embedding_f16_bwd(ctx: *mut tk_context, v: i64, d: i64, d_grad_weight: *mut c_void, q: i64,
                                d_idx: *const i32, d_grad_out: *const c_void, flags: c_uint,
                                d_bad_count: *mut u32, stream: *mut c_void) -> tk_status;

    pub fn tk_op_name(op: tk_op) -> *const c_char;
    pub fn tk_op_from_name(name: *const c_char, out: *mut tk_op) -> tk_status;
    pub fn tk_op_dims(op: tk_op, n_dims: *mut c_int) -> *const c_char;
    pub fn tk_op_precompile(ctx: *mut tk_context, op: tk_op, dims: *const i64, n_dims: c_int,
                            n_compiled: *mut c_uint, n_cached: *mut c_uint) -> tk_status;
    pub fn tk_op_precompile_fallbacks(ctx: *mut tk_context, op: tk_op, n_compiled: *mut c_uint,
                                      n_cached: *mut c_uint) -> tk_status;
    pub fn tk_op_tune(ctx: *mut tk_context, op: tk_op, dims: *const i64, n_dims: c_int,
                      out: *mut tk_tune_report) -> tk_status;

    pub fn tk_f16_to_f32(h: u16) -> f32;
    pub fn tk_f32_to_f16(f: f32) -> u16;
    pub fn tk_ref_gemm_f16_fwd(m: i64, n: i64, k: i64, a: *const u16, b: *const u16, c: *mut f32) -> tk_status;
    pub fn tk_ref_gemm_f16_grad_a(m: i64, n: i64, k: i64, grad_c: *const u16, b: *const u16,
                                  grad_a: *mut u16) -> tk_status;
    pub fn tk_ref_gemm_f16_grad_b(m: i64, n: i64, k: i64, a: *const u16, grad_c: *const u16,
                                  grad_b: *mut u16) -> tk_status;
    pub fn tk_ref_softmax_f16_fwd(rows: i64, cols: i64, input: *const u16, out: *mut u16) -> tk_status;
    pub fn tk_ref_softmax_xent_f16_bwd(rows: i64, cols: i64, s: *const u16, g: *const u16,
                                       grad_in: *mut u16) -> tk_status;
    pub fn tk_ref_embedding_f16_fwd(v: i64, d: i64, weight: *const u16, q: i64, idx: *const i32, out: *mut u16,
                                    n_bad: *mut u64) -> tk_status;
    pub fn tk_ref_embedding_f16_bwd(v: i64, d: i64, grad_weight: *mut u16, q: i64, idx: *const i32,
                                    grad_out: *const u16, n_bad: *mut u64) -> tk_status;

    pub fn tk_check_report_free(report: *mut tk_check_report);
    pub fn tk_check_run(ctx: *mut tk_context, op: tk_op, dims: *const i64, n_dims: c_int, seed: u64,
                        out: *mut tk_check_report) -> tk_status;
    pub fn tk_check_run_host(ctx: *mut tk_context, op: tk_op, dims: *const i64, n_dims: c_int,
                             in0: *const c_void, in1: *const c_void, idx: *const i32, out: *mut c_void,
                             report: *mut tk_check_report) -> tk_status;
    pub fn tk_check_report_markdown(report: *const tk_check_report) -> *mut c_char;
    pub fn tk_check_report_json(report: *const tk_check_report) -> *mut c_char;
}

extern "C" {
    /// The C library's `free`, for the strings `tk_check_report_markdown` /
    /// `tk_check_report_json` return.
    pub fn free(ptr: *mut c_void);
}
