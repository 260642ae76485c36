//! The raw declarations against the C compiler's view of the headers: the
//! size and alignment of every struct, the offset and size of every field,
//! the value of every enum constant (printed by the probe build.rs
//! compiles), and the set of functions the headers declare.
use std::collections::BTreeMap;
use std::mem::{align_of, size_of, MaybeUninit};

use tokitai_jit::sys::*;

const LAYOUT: &str = include_str!(concat!(env!("OUT_DIR"), "/layout.txt"));
const INCLUDE_DIR: &str = include_str!(concat!(env!("OUT_DIR"), "/include_dir.txt"));

fn c_side() -> BTreeMap<String, Vec<i64>> {
    assert!(!LAYOUT.starts_with("error"), "the C layout probe did not run: {}", LAYOUT);
    let mut m = BTreeMap::new();
    for line in LAYOUT.lines() {
        let mut it = line.split_whitespace();
        let kind = it.next().unwrap();
        let name = it.next().unwrap();
        let vals: Vec<i64> = it.map(|v| v.parse().unwrap()).collect();
        m.insert(format!("{} {}", kind, name), vals);
    }
    m
}

macro_rules! rust_layout {
    ($out:ident; $($t:ident { $($f:ident),* })*) => {$(
        $out.insert(format!("S {}", stringify!($t)), vec![size_of::<$t>() as i64, align_of::<$t>() as i64]);
        $(
            {
                let u = MaybeUninit::<$t>::uninit();
                let base = u.as_ptr();
                // SAFETY: address arithmetic only.
                let p = unsafe { std::ptr::addr_of!((*base).$f) };
                let off = p as usize - base as usize;
                fn size_of_pointee<T>(_: *const T) -> usize { size_of::<T>() }
                $out.insert(format!("F {}.{}", stringify!($t), stringify!($f)),
                            vec![off as i64, size_of_pointee(p) as i64]);
            }
        )*
    )*};
}

macro_rules! rust_consts {
    ($out:ident; $($c:ident),*) => {$(
        $out.insert(format!("C {}", stringify!($c)), vec![$c as i64]);
    )*};
}

fn rust_side() -> BTreeMap<String, Vec<i64>> {
    let mut m = BTreeMap::new();
    rust_layout!(m;
        tk_resource_usage { registers, sgprs, agprs, shared_bytes, local_bytes, spill_count, wavefront_size,
                            kernarg_bytes, max_threads }
        tk_cache_entry_info { struct_size, key_hex, path, kernel, source, backend, arch, compiler, options,
                              payload_size, file_size, created, last_used, resources, read_only_tier }
        tk_cache_stats { struct_size, entries, bytes, max_bytes, temp_files, bad_files }
        tk_context_stats { struct_size, memory_hits, disk_hits, compiles, compile_failures, loads, load_failures,
                           cache_errors, compile_seconds, fallback_calls, builds_queued, builds_done,
                           builds_pending, waits, wait_seconds, sync_compiles, builds_failed, builds_dropped,
                           remote_hits, remote_misses, remote_errors, remote_rejected, remote_publishes,
                           workspace_bytes, workspace_peak, workspace_allocs }
        tk_define { name, value }
        tk_header { name, text }
        tk_kernel_desc { source_name, source, entry, defines, n_defines, options, n_options, source_label,
                         headers, n_headers }
        tk_kernel_info { struct_size, key_hex, entry, origin, compile_seconds, resources }
        tk_tune_timing { config, us }
        tk_tune_report { struct_size, record, chosen, heuristic, chosen_us, heuristic_us, timed_m, candidates,
                         compiled, rejected, timed, stored }
        tk_check_report { struct_size, op, dims, n_dims, seed, max_abs_error, max_rel_error, tolerance_abs,
                          tolerance_rel, passed, bad_indices, kernel_ms, origin, compile_ms, source_fingerprint,
                          compiler, cache_key, device, arch, policy, fallback_calls, builds_done, builds_pending,
                          wait_ms }
    );
    rust_consts!(m;
        TK_VERSION_NUMBER, TK_ABI_VERSION, TK_LOG_DEBUG, TK_LOG_INFO, TK_LOG_WARN, TK_LOG_ERROR,
        TK_BACKEND_AUTO, TK_BACKEND_CUDA, TK_BACKEND_HIP, TK_BACKEND_STUB, TK_POLICY_EXACT, TK_POLICY_GENERIC,
        TK_POLICY_STABLE, TK_BUILD_ASYNC, TK_BUILD_SYNC, TK_ORIGIN_MEMORY, TK_ORIGIN_DISK, TK_ORIGIN_COMPILED,
        TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B, TK_OP_SOFTMAX_F16_FWD,
        TK_OP_SOFTMAX_XENT_F16_BWD, TK_OP_EMBEDDING_F16_FWD, TK_OP_EMBEDDING_F16_BWD, TK_OP_COUNT,
        TK_EMBEDDING_DETERMINISTIC,
        TK_OK, TK_INVALID_ARGUMENT, TK_OUT_OF_MEMORY, TK_IO_ERROR, TK_NOT_FOUND, TK_CORRUPT,
        TK_BACKEND_UNAVAILABLE, TK_NO_DEVICE, TK_UNSUPPORTED, TK_COMPILE_FAILED, TK_LOAD_FAILED,
        TK_LAUNCH_FAILED, TK_DEVICE_ERROR, TK_MISALIGNED, TK_OVERFLOW, TK_OUT_OF_TOLERANCE, TK_INTERNAL,
        TK_TIMEOUT
    );
    m
}

#[test]
fn structs_and_constants_match_the_c_compiler() {
    let c = c_side();
    let r = rust_side();
    let mut problems = Vec::new();
    for (k, cv) in &c {
        match r.get(k) {
            None => problems.push(format!("{}: in the C headers, not in sys.rs", k)),
            Some(rv) if k.starts_with("S ") || k.starts_with("F ") || k.starts_with("C ") => {
                if rv != cv {
                    problems.push(format!("{}: C {:?}, Rust {:?}", k, cv, rv));
                }
            }
            Some(_) => {}
        }
    }
    for k in r.keys() {
        if !c.contains_key(k) {
            problems.push(format!("{}: in sys.rs, not probed on the C side", k));
        }
    }
    assert!(c.len() > 150, "the probe printed only {} lines", c.len());
    assert!(problems.is_empty(), "layout mismatches:\n{}", problems.join("\n"));
}

#[test]
fn sized_structs_start_with_their_size() {
    assert_eq!(<tk_context_stats as SizedStruct>::init().struct_size, size_of::<tk_context_stats>());
    assert_eq!(<tk_cache_stats as SizedStruct>::init().struct_size, size_of::<tk_cache_stats>());
    assert_eq!(<tk_kernel_info as SizedStruct>::init().struct_size, size_of::<tk_kernel_info>());
    assert_eq!(<tk_tune_report as SizedStruct>::init().struct_size, size_of::<tk_tune_report>());
    assert_eq!(<tk_check_report as SizedStruct>::init().struct_size, size_of::<tk_check_report>());
}

/// Every function the headers declare (TK_API ... tk_name(...)) is declared
/// in sys.rs, and sys.rs declares none the headers lack.
#[test]
fn every_header_function_is_declared() {
    let dir = std::path::Path::new(INCLUDE_DIR.trim());
    let mut header_fns = std::collections::BTreeSet::new();
    for h in ["tokitai/tokitai.h", "tokitai/ops.h"] {
        let text = std::fs::read_to_string(dir.join(h)).unwrap_or_else(|e| panic!("{}: {}", h, e));
        // Declarations can span lines: look at the text after each "TK_API ".
        for part in text.split("TK_API ").skip(1) {
            let head = &part[..part.find('(').unwrap_or(0)];
            if let Some(name) = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).rfind(|w| w.starts_with("tk_")) {
                header_fns.insert(name.to_string());
            }
        }
    }
    let sys_src = include_str!("../src/sys.rs");
    let mut sys_fns = std::collections::BTreeSet::new();
    for line in sys_src.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("pub fn ") {
            let name = &rest[..rest.find('(').unwrap()];
            if name.starts_with("tk_") {
                sys_fns.insert(name.to_string());
            }
        }
    }
    let missing: Vec<_> = header_fns.difference(&sys_fns).collect();
    let extra: Vec<_> = sys_fns.difference(&header_fns).collect();
    assert!(header_fns.len() > 80, "found only {} functions in the headers", header_fns.len());
    assert!(missing.is_empty() && extra.is_empty(), "missing in sys.rs: {:?}; not in the headers: {:?}", missing, extra);
}
