//! The raw declarations against the C compiler's view of the headers: the
//! size and alignment of every struct sys.rs declares, the offset and size
//! of each of its fields, the value of each constant and status (build.rs
//! reads the list from sys.rs and prints the C side with a probe it
//! compiles); that sys.rs declares every struct, constant and function the
//! headers do; and that every sized struct the header names implements
//! SizedStruct.
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

// generated_rust_side, GENERATED_STRUCTS, GENERATED_CONSTANTS and
// generated_sized_structs: build.rs writes them from src/sys.rs (and the
// header's list of sized structs), the same list the C probe is built from.
include!(concat!(env!("OUT_DIR"), "/layout_rust.rs"));

fn rust_side() -> BTreeMap<String, Vec<i64>> {
    let mut m = BTreeMap::new();
    generated_rust_side(&mut m);
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
    let sized = generated_sized_structs();
    assert!(sized.len() >= 7, "read only {:?} from the header's list of sized structs", sized);
    for (name, size, init) in sized {
        assert_eq!(init, size, "{}: SizedStruct::init() sets struct_size {}, the struct is {} bytes", name, init, size);
    }
}

fn header_texts() -> Vec<(String, String)> {
    let dir = std::path::Path::new(INCLUDE_DIR.trim());
    ["tokitai/tokitai.h", "tokitai/ops.h"]
        .iter()
        .map(|h| (h.to_string(), std::fs::read_to_string(dir.join(h)).unwrap_or_else(|e| panic!("{}: {}", h, e))))
        .collect()
}

/// The check covers everything sys.rs declares (build.rs reads the list from
/// it), and sys.rs declares everything the headers lay out: each struct
/// defined with a body, each enum constant, each numeric TK_ macro.
#[test]
fn every_header_struct_and_constant_is_checked() {
    let sys_src = include_str!("../src/sys.rs");
    let mut sys_structs = std::collections::BTreeMap::new();
    let mut in_struct: Option<String> = None;
    for line in sys_src.lines() {
        let t = line.trim();
        if let Some(name) = in_struct.clone() {
            if t.starts_with('}') {
                in_struct = None;
            } else if t.starts_with("pub ") && t.contains(':') {
                *sys_structs.entry(name).or_insert(0usize) += 1;
            }
        } else if let Some(rest) = t.strip_prefix("pub struct ") {
            if rest.ends_with('{') {
                in_struct = Some(rest.trim_end_matches('{').trim().to_string());
            }
        }
    }
    let generated: std::collections::BTreeMap<&str, usize> =
        GENERATED_STRUCTS.iter().map(|(n, f)| (*n, f.len())).collect();
    for (name, n_fields) in &sys_structs {
        assert_eq!(generated.get(name.as_str()), Some(n_fields), "{}: sys.rs declares {} fields", name, n_fields);
    }
    assert_eq!(generated.len(), sys_structs.len());

    let consts: std::collections::BTreeSet<&str> = GENERATED_CONSTANTS.iter().copied().collect();
    let mut missing = Vec::new();
    let mut n_header_consts = 0;
    for (h, text) in header_texts() {
        for line in text.lines() {
            let t = line.trim();
            if let Some(rest) = t.strip_prefix("typedef struct ") {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if rest[name.len()..].trim_start().starts_with('{') && !generated.contains_key(name.as_str()) {
                    missing.push(format!("{}: struct {} is not laid out in sys.rs", h, name));
                }
            }
            let name: String = t.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let after = t[name.len()..].trim_start();
            let numeric_define = t
                .strip_prefix("#define ")
                .map(|r| {
                    let n: String = r.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    let v = &r[n.len()..];
                    (n, v.starts_with(' ') && v.trim_start().starts_with(|c: char| c.is_ascii_digit() || c == '('))
                });
            let constant = match numeric_define {
                Some((n, true)) => Some(n),
                Some(_) => None,
                None if name.starts_with("TK_") && after.starts_with('=') => Some(name),
                None => None,
            };
            if let Some(c) = constant {
                if c.starts_with("TK__") {
                    continue;
                }
                n_header_consts += 1;
                if !consts.contains(c.as_str()) {
                    missing.push(format!("{}: {} is not declared in sys.rs", h, c));
                }
            }
        }
    }
    assert!(n_header_consts > 30, "found only {} constants in the headers", n_header_consts);
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every function the headers declare (TK_API ... tk_name(...)) is declared
/// in sys.rs, and sys.rs declares none the headers lack.
#[test]
fn every_header_function_is_declared() {
    let mut header_fns = std::collections::BTreeSet::new();
    for (_, text) in header_texts() {
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
