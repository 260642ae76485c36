// Finds libtokitai_jit and checks the C side's struct layouts.
//
// Where the library comes from, first match wins:
//   1. TOKITAI_JIT_LIB_DIR: the folder holding libtokitai_jit.so (a build
//      tree, or <prefix>/lib). Headers: TOKITAI_JIT_INCLUDE_DIR, else the
//      source tree this crate sits in, else LIB_DIR/../include.
//   2. pkg-config tokitai_jit (the .pc file `cmake --install` writes; set
//      PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for a non-system prefix).
//   3. Neither: link -ltokitai_jit from the linker's default folders.
// The folder found is also written into the binaries' run path
// (DT_RUNPATH, so LD_LIBRARY_PATH still overrides it) unless
// TOKITAI_JIT_NO_RPATH is set.
//
// The layout probe: a small C program compiled with $CC (default cc)
// against the headers prints sizeof / offsetof of every struct and the value
// of every enum constant; tests/layout.rs compares them with src/sys.rs.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let prog = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(prog).args(args).arg("tokitai_jit").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

const STRUCTS: &[(&str, &[&str])] = &[
    ("tk_resource_usage", &["registers", "sgprs", "agprs", "shared_bytes", "local_bytes", "spill_count",
                            "wavefront_size", "kernarg_bytes", "max_threads"]),
    ("tk_cache_entry_info", &["struct_size", "key_hex", "path", "kernel", "source", "backend", "arch",
                              "compiler", "options", "payload_size", "file_size", "created", "last_used",
                              "resources", "read_only_tier"]),
    ("tk_cache_stats", &["struct_size", "entries", "bytes", "max_bytes", "temp_files", "bad_files"]),
    ("tk_context_stats", &["struct_size", "memory_hits", "disk_hits", "compiles", "compile_failures", "loads",
                           "load_failures", "cache_errors", "compile_seconds", "fallback_calls",
                           "builds_queued", "builds_done", "builds_pending", "waits", "wait_seconds",
                           "sync_compiles", "builds_failed", "builds_dropped", "remote_hits", "remote_misses",
                           "remote_errors", "remote_rejected", "remote_publishes", "workspace_bytes",
                           "workspace_peak", "workspace_allocs"]),
    ("tk_define", &["name", "value"]),
    ("tk_header", &["name", "text"]),
    ("tk_kernel_desc", &["source_name", "source", "entry", "defines", "n_defines", "options", "n_options",
                         "source_label", "headers", "n_headers"]),
    ("tk_kernel_info", &["struct_size", "key_hex", "entry", "origin", "compile_seconds", "resources"]),
    ("tk_tune_timing", &["config", "us"]),
    ("tk_tune_report", &["struct_size", "record", "chosen", "heuristic", "chosen_us", "heuristic_us", "timed_m",
                         "candidates", "compiled", "rejected", "timed", "stored"]),
    ("tk_check_report", &["struct_size", "op", "dims", "n_dims", "seed", "max_abs_error", "max_rel_error",
                          "tolerance_abs", "tolerance_rel", "passed", "bad_indices", "kernel_ms", "origin",
                          "compile_ms", "source_fingerprint", "compiler", "cache_key", "device", "arch",
                          "policy", "fallback_calls", "builds_done", "builds_pending", "wait_ms"]),
];

const CONSTANTS: &[&str] = &[
    "TK_VERSION_NUMBER", "TK_ABI_VERSION", "TK_LOG_DEBUG", "TK_LOG_INFO", "TK_LOG_WARN", "TK_LOG_ERROR",
    "TK_BACKEND_AUTO", "TK_BACKEND_CUDA", "TK_BACKEND_HIP", "TK_BACKEND_STUB", "TK_POLICY_EXACT",
    "TK_POLICY_GENERIC", "TK_POLICY_STABLE", "TK_BUILD_ASYNC", "TK_BUILD_SYNC", "TK_ORIGIN_MEMORY",
    "TK_ORIGIN_DISK", "TK_ORIGIN_COMPILED", "TK_OP_GEMM_F16_FWD", "TK_OP_GEMM_F16_GRAD_A",
    "TK_OP_GEMM_F16_GRAD_B", "TK_OP_SOFTMAX_F16_FWD", "TK_OP_SOFTMAX_XENT_F16_BWD", "TK_OP_EMBEDDING_F16_FWD",
    "TK_OP_EMBEDDING_F16_BWD", "TK_OP_COUNT", "TK_EMBEDDING_DETERMINISTIC",
];

fn probe_source() -> String {
    let mut s = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"tokitai/tokitai.h\"\n#include \"tokitai/ops.h\"\n\
         #define ST(t) printf(\"S %s %zu %zu\\n\", #t, sizeof(t), _Alignof(t));\n\
         #define FL(t, f) printf(\"F %s.%s %zu %zu\\n\", #t, #f, offsetof(t, f), sizeof(((t *)0)->f));\n\
         #define CO(c) printf(\"C %s %lld\\n\", #c, (long long)(c));\n\
         #define STATUS(name, value, text) printf(\"C TK_%s %d\\n\", #name, (int)TK_##name);\n\
         int main(void) {\n",
    );
    for (name, fields) in STRUCTS {
        s.push_str(&format!("ST({})\n", name));
        for f in fields.iter() {
            s.push_str(&format!("FL({}, {})\n", name, f));
        }
    }
    for c in CONSTANTS {
        s.push_str(&format!("CO({})\n", c));
    }
    s.push_str("TK_STATUS_LIST(STATUS)\nreturn 0;\n}\n");
    s
}

fn probe(include: &Path, out_dir: &Path) -> String {
    let src = out_dir.join("layout_probe.c");
    let exe = out_dir.join("layout_probe");
    if fs::write(&src, probe_source()).is_err() {
        return "error: cannot write the probe source".to_string();
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let compiled = Command::new(&cc)
        .arg("-std=c11")
        .arg("-I")
        .arg(include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    match compiled {
        Err(e) => return format!("error: cannot run the C compiler '{}': {}", cc, e),
        Ok(o) if !o.status.success() => {
            return format!("error: the C compiler failed on the probe:\n{}", String::from_utf8_lossy(&o.stderr))
        }
        Ok(_) => {}
    }
    match Command::new(&exe).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => format!("error: the probe failed: {:?}", o.status),
        Err(e) => format!("error: cannot run the probe: {}", e),
    }
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    for v in ["TOKITAI_JIT_LIB_DIR", "TOKITAI_JIT_INCLUDE_DIR", "TOKITAI_JIT_NO_RPATH", "PKG_CONFIG_PATH",
              "PKG_CONFIG", "CC"] {
        println!("cargo:rerun-if-env-changed={}", v);
    }
    println!("cargo:rerun-if-changed=build.rs");

    let in_tree = manifest_dir.join("../../include");
    let in_tree = if in_tree.join("tokitai/tokitai.h").exists() { Some(in_tree) } else { None };

    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    let mut include: Option<PathBuf> = env::var_os("TOKITAI_JIT_INCLUDE_DIR").map(PathBuf::from);
    let source;
    if let Some(dir) = env::var_os("TOKITAI_JIT_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if include.is_none() {
            include = in_tree.clone().or_else(|| Some(dir.join("../include")));
        }
        lib_dirs.push(dir);
        source = "TOKITAI_JIT_LIB_DIR";
    } else if let Some(libs) = pkg_config(&["--libs-only-L"]) {
        for tok in libs.split_whitespace() {
            if let Some(d) = tok.strip_prefix("-L") {
                lib_dirs.push(PathBuf::from(d));
            }
        }
        if include.is_none() {
            if let Some(cflags) = pkg_config(&["--cflags-only-I"]) {
                include = cflags.split_whitespace().find_map(|t| t.strip_prefix("-I").map(PathBuf::from));
            }
        }
        source = "pkg-config";
    } else {
        println!("cargo:warning=tokitai-jit: neither TOKITAI_JIT_LIB_DIR nor pkg-config tokitai_jit found the library; linking -ltokitai_jit from the default folders");
        source = "default";
    }
    if include.is_none() {
        include = in_tree.clone().or_else(|| Some(PathBuf::from("/usr/include")));
    }
    for d in &lib_dirs {
        println!("cargo:rustc-link-search=native={}", d.display());
        if env::var_os("TOKITAI_JIT_NO_RPATH").is_none() {
            println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags,-rpath,{}", d.display());
        }
    }
    println!("cargo:rustc-link-lib=dylib=tokitai_jit");

    let include = include.unwrap();
    for h in ["tokitai/tokitai.h", "tokitai/ops.h"] {
        println!("cargo:rerun-if-changed={}", include.join(h).display());
    }
    let layout = probe(&include, &out_dir);
    fs::write(out_dir.join("layout.txt"), layout).expect("write layout.txt");
    fs::write(out_dir.join("include_dir.txt"), include.display().to_string()).expect("write include_dir.txt");
    println!("cargo:rustc-env=TOKITAI_JIT_FOUND_BY={}", source);
    println!("cargo:include={}", include.display());
}
