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
// The layout check: build.rs reads the structs, fields and constants
// src/sys.rs declares and writes two programs from that one list: a small C
// probe, compiled with $CC (default cc) against the headers, that prints
// sizeof / _Alignof of each struct, offsetof / sizeof of each field and the
// value of each constant (and of every status), and the Rust half
// (layout_rust.rs) that tests/layout.rs includes to compute the same on the
// Rust side and compare.
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

/// The structs (with their public fields, in order) and the constants
/// src/sys.rs declares, read from its text so that whatever it declares is
/// what gets checked: nothing to keep in step by hand.
struct SysDecls {
    structs: Vec<(String, Vec<String>)>,
    constants: Vec<String>,
}

fn sys_decls(text: &str) -> SysDecls {
    let mut d = SysDecls { structs: Vec::new(), constants: Vec::new() };
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some((name, fields)) = current.as_mut() {
            if t.starts_with('}') {
                // Opaque handles have no public field: nothing to lay out.
                if !fields.is_empty() {
                    d.structs.push((name.clone(), fields.clone()));
                }
                current = None;
            } else if let Some(rest) = t.strip_prefix("pub ") {
                if let Some(colon) = rest.find(':') {
                    fields.push(rest[..colon].trim().to_string());
                }
            }
        } else if let Some(rest) = t.strip_prefix("pub struct ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if rest[name.len()..].trim_start().starts_with('{') {
                current = Some((name, Vec::new()));
            }
        } else if let Some(rest) = t.strip_prefix("pub const ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if name.starts_with("TK_") {
                d.constants.push(name);
            }
        }
    }
    d
}

/// The Rust half of the check, as source the layout test includes: the
/// same structs, fields and constants as the C probe.
fn rust_side_source(d: &SysDecls, sized: &[String]) -> String {
    let mut s = String::from("fn generated_rust_side(m: &mut BTreeMap<String, Vec<i64>>) {\n    rust_layout!(m;\n");
    for (name, fields) in &d.structs {
        s.push_str(&format!("        {} {{ {} }}\n", name, fields.join(", ")));
    }
    s.push_str("    );\n    rust_consts!(m; ");
    s.push_str(&d.constants.join(", "));
    s.push_str(");\n}\n\n");
    s.push_str("/// What the generated check covers: (struct, fields) and constants.\n");
    s.push_str("const GENERATED_STRUCTS: &[(&str, &[&str])] = &[\n");
    for (name, fields) in &d.structs {
        let quoted: Vec<String> = fields.iter().map(|f| format!("\"{}\"", f)).collect();
        s.push_str(&format!("    (\"{}\", &[{}]),\n", name, quoted.join(", ")));
    }
    s.push_str("];\nconst GENERATED_CONSTANTS: &[&str] = &[");
    let quoted: Vec<String> = d.constants.iter().map(|c| format!("\"{}\"", c)).collect();
    s.push_str(&quoted.join(", "));
    s.push_str("];\n\n");
    // A sized struct the header names without a SizedStruct impl in sys.rs
    // fails to compile here.
    s.push_str("/// The header's sized structs: (name, Rust size, init().struct_size).\n");
    s.push_str("fn generated_sized_structs() -> Vec<(&'static str, usize, usize)> {\n    vec![\n");
    for name in sized {
        s.push_str(&format!("        (\"{0}\", size_of::<{0}>(), <{0} as SizedStruct>::init().struct_size),\n", name));
    }
    s.push_str("    ]\n}\n");
    s
}

/// The structs the header's "sized structs" paragraph names ("Every struct
/// the library fills for the caller (a, b, ...)").
fn header_sized_structs(header: &str) -> Vec<String> {
    let flat: String = header.split_whitespace().collect::<Vec<_>>().join(" ").replace(" * ", " ");
    let lead = "Every struct the library fills for the caller (";
    let rest = match flat.find(lead) {
        Some(start) => &flat[start + lead.len()..],
        None => return Vec::new(),
    };
    let end = match rest.find(')') {
        Some(end) => end,
        None => return Vec::new(),
    };
    rest[..end].split(',').map(|n| n.trim().to_string()).filter(|n| n.starts_with("tk_")).collect()
}

fn probe_source(d: &SysDecls) -> String {
    let mut s = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"tokitai/tokitai.h\"\n#include \"tokitai/ops.h\"\n\
         #define ST(t) printf(\"S %s %zu %zu\\n\", #t, sizeof(t), _Alignof(t));\n\
         #define FL(t, f) printf(\"F %s.%s %zu %zu\\n\", #t, #f, offsetof(t, f), sizeof(((t *)0)->f));\n\
         #define CO(c) printf(\"C %s %lld\\n\", #c, (long long)(c));\n\
         #define STATUS(name, value, text) printf(\"C TK_%s %d\\n\", #name, (int)TK_##name);\n\
         int main(void) {\n",
    );
    for (name, fields) in &d.structs {
        s.push_str(&format!("ST({})\n", name));
        for f in fields {
            s.push_str(&format!("FL({}, {})\n", name, f));
        }
    }
    for c in &d.constants {
        s.push_str(&format!("CO({})\n", c));
    }
    s.push_str("TK_STATUS_LIST(STATUS)\nreturn 0;\n}\n");
    s
}

fn probe(d: &SysDecls, include: &Path, out_dir: &Path) -> String {
    let src = out_dir.join("layout_probe.c");
    let exe = out_dir.join("layout_probe");
    if fs::write(&src, probe_source(d)).is_err() {
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
    let sys_rs = manifest_dir.join("src/sys.rs");
    println!("cargo:rerun-if-changed={}", sys_rs.display());
    let decls = sys_decls(&fs::read_to_string(&sys_rs).expect("read src/sys.rs"));
    let header = fs::read_to_string(include.join("tokitai/tokitai.h")).unwrap_or_default();
    let sized = header_sized_structs(&header);
    fs::write(out_dir.join("layout_rust.rs"), rust_side_source(&decls, &sized)).expect("write layout_rust.rs");
    let layout = probe(&decls, &include, &out_dir);
    fs::write(out_dir.join("layout.txt"), layout).expect("write layout.txt");
    fs::write(out_dir.join("include_dir.txt"), include.display().to_string()).expect("write include_dir.txt");
    println!("cargo:rustc-env=TOKITAI_JIT_FOUND_BY={}", source);
    println!("cargo:include={}", include.display());
}
