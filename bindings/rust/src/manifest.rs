//! Precompile manifests (docs/manifests.md, "Format") through the C API.
//!
//! The C library has no manifest call: the parser and the parallel
//! precompile live in the command-line tool (`tokitai-jit --precompile`).
//! This module parses the same format and precompiles it in-process, one
//! job after another, with `tk_op_precompile` and `tk_kernel_precompile`:
//! a context per (target, policy), every operator line expanded to its
//! shapes, every `kernel` line read from disk. Without an `arch` line the
//! caller's config decides the target (its device or its offline target);
//! the tool would fall back to sm_80 sm_90 gfx90a gfx1030 when no GPU is
//! present.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::config::{Config, Policy};
use crate::context::{Context, Origin};
use crate::error::{Error, Result};
use crate::kernel::KernelDesc;
use crate::ops::Op;

/// A user kernel line: `kernel FILE ENTRY [-DNAME[=VALUE]]... [OPTION]...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestKernel {
    /// Resolved against the manifest's folder.
    pub path: PathBuf,
    pub entry: String,
    pub defines: Vec<(String, Option<String>)>,
    /// Compiler options; -I folders resolved against the manifest's folder,
    /// the kernel file's own folder first.
    pub options: Vec<String>,
    pub line: usize,
}

/// One job: an operator shape or a user kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Job {
    Op { op: Op, dims: Vec<i64>, policies: Vec<Policy>, line: usize },
    Kernel(ManifestKernel),
}

/// A parsed manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub archs: Vec<String>,
    pub policies: Vec<Policy>,
    pub jobs: Vec<Job>,
}

/// What `Manifest::precompile` did.
#[derive(Clone, Debug, Default)]
pub struct PrecompileSummary {
    /// Jobs run (one per target, policy and shape or kernel).
    pub jobs: usize,
    /// Kernels compiled.
    pub compiled: u64,
    /// Kernels that were already cached.
    pub cached: u64,
    /// Jobs that failed: (description, error).
    pub failed: Vec<(String, Error)>,
}

fn fail(name: &str, line: usize, field: &str, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{}:{}: {}: {}", name, line, field, what))
}

/// Fields separated by blanks; a double-quoted field may hold blanks and
/// '#'; '#' outside quotes starts a comment.
fn split_fields(line: &str, name: &str, no: usize) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(c) if c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => break,
            Some('"') => {
                chars.next();
                let mut f = String::new();
                loop {
                    match chars.next() {
                        None => return Err(fail(name, no, "\"", "a quoted field without its closing quote")),
                        Some('"') => break,
                        Some(c) => f.push(c),
                    }
                }
                if matches!(chars.peek(), Some(c) if !c.is_whitespace() && *c != '#') {
                    return Err(fail(name, no, &f, "a closing quote must end the field"));
                }
                out.push(f);
            }
            Some(_) => {
                let mut f = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || c == '#' {
                        break;
                    }
                    if c == '"' {
                        return Err(fail(name, no, &f, "a quote inside a field"));
                    }
                    f.push(c);
                    chars.next();
                }
                out.push(f);
            }
        }
    }
    Ok(out)
}

fn parse_int(s: &str, name: &str, no: usize, field: &str) -> Result<i64> {
    match s.parse::<i64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(fail(name, no, field, format!("'{}' is not a positive integer", s))),
    }
}

/// "512,1024", "512..16384:x2", "512..2048:+512".
fn parse_values(text: &str, name: &str, no: usize, field: &str) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for item in text.split(',') {
        if let Some((a, rest)) = item.split_once("..") {
            let (b, step) = rest
                .split_once(':')
                .ok_or_else(|| fail(name, no, field, format!("range '{}' needs a step (:xF or :+S)", item)))?;
            let a = parse_int(a, name, no, field)?;
            let b = parse_int(b, name, no, field)?;
            if b < a {
                return Err(fail(name, no, field, format!("range '{}' ends before it starts", item)));
            }
            let mut v = a;
            if let Some(f) = step.strip_prefix('x') {
                let f = parse_int(f, name, no, field)?;
                if f < 2 {
                    return Err(fail(name, no, field, "a factor must be at least 2"));
                }
                while v <= b {
                    out.push(v);
                    v = match v.checked_mul(f) {
                        Some(n) => n,
                        None => break,
                    };
                }
            } else if let Some(s) = step.strip_prefix('+') {
                let s = parse_int(s, name, no, field)?;
                while v <= b {
                    out.push(v);
                    v = match v.checked_add(s) {
                        Some(n) => n,
                        None => break,
                    };
                }
            } else {
                return Err(fail(name, no, field, format!("step '{}': expected xF or +S", step)));
            }
        } else {
            out.push(parse_int(item, name, no, field)?);
        }
    }
    Ok(out)
}

fn parse_policies<'a>(items: impl Iterator<Item = &'a str>, name: &str, no: usize) -> Result<Vec<Policy>> {
    let mut out = Vec::new();
    for p in items {
        let pol = Policy::from_name(p).ok_or_else(|| fail(name, no, p, "expected exact, stable or generic"))?;
        if !out.contains(&pol) {
            out.push(pol);
        }
    }
    Ok(out)
}

fn resolve(base: Option<&Path>, p: &str) -> PathBuf {
    match base {
        Some(b) if !p.starts_with('/') => b.join(p),
        _ => PathBuf::from(p),
    }
}

impl Manifest {
    /// Reads and parses a manifest file (kernel paths relative to its folder).
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {}", path.display(), e)))?;
        Manifest::parse(&text, &path.display().to_string(), path.parent())
    }

    /// Parses text; `name` names it in messages ("<name>:<line>: <field>:
    /// <what>"), `base_dir` resolves kernel files and -I folders (None: the
    /// working folder). Everything is checked before anything compiles.
    pub fn parse(text: &str, name: &str, base_dir: Option<&Path>) -> Result<Manifest> {
        let base_dir = base_dir.filter(|b| !b.as_os_str().is_empty());
        let mut m = Manifest::default();
        for (i, line) in text.lines().enumerate() {
            let no = i + 1;
            let tok = split_fields(line, name, no)?;
            if tok.is_empty() {
                continue;
            }
            match tok[0].as_str() {
                "arch" => {
                    if tok.len() < 2 {
                        return Err(fail(name, no, "arch", "no target named"));
                    }
                    for t in &tok[1..] {
                        if !m.archs.contains(t) {
                            m.archs.push(t.clone());
                        }
                    }
                }
                "policy" => {
                    if tok.len() < 2 {
                        return Err(fail(name, no, "policy", "no policy named"));
                    }
                    m.policies = parse_policies(tok[1..].iter().map(|s| s.as_str()), name, no)?;
                }
                "kernel" => m.jobs.push(Job::Kernel(parse_kernel(&tok, name, no, base_dir)?)),
                opname => {
                    let op = Op::from_name(opname).map_err(|_| fail(name, no, opname, "unknown operator or directive"))?;
                    let dim_names = op.dims();
                    let mut values: Vec<Option<Vec<i64>>> = vec![None; dim_names.len()];
                    let mut policies = Vec::new();
                    for f in &tok[1..] {
                        let (k, v) = f.split_once('=').ok_or_else(|| fail(name, no, f, "expected NAME=VALUES"))?;
                        if k == "policy" {
                            policies = parse_policies(v.split(','), name, no)?;
                            continue;
                        }
                        let pos = dim_names
                            .iter()
                            .position(|d| d == k)
                            .ok_or_else(|| fail(name, no, f, format!("{} has no dimension '{}' ({})", opname, k, dim_names.join(" "))))?;
                        if values[pos].is_some() {
                            return Err(fail(name, no, f, format!("dimension {} given twice", k)));
                        }
                        values[pos] = Some(parse_values(v, name, no, f)?);
                    }
                    let mut lists = Vec::new();
                    for (d, v) in dim_names.iter().zip(values) {
                        lists.push(v.ok_or_else(|| fail(name, no, opname, format!("dimension {} missing", d)))?);
                    }
                    // Every combination, first dimension slowest.
                    let mut combos: Vec<Vec<i64>> = vec![Vec::new()];
                    for l in &lists {
                        combos = combos
                            .into_iter()
                            .flat_map(|c| l.iter().map(move |&v| {
                                let mut c2 = c.clone();
                                c2.push(v);
                                c2
                            }))
                            .collect();
                    }
                    for dims in combos {
                        m.jobs.push(Job::Op { op, dims, policies: policies.clone(), line: no });
                    }
                }
            }
        }
        Ok(m)
    }

    /// Precompiles every job for every target (the `arch` lines, else
    /// `base`'s own) and policy (the line's, else the manifest's, else
    /// `base`'s), into the cache `base` names. Repeated jobs run once. A
    /// failing job is recorded in the summary and the others go on; a
    /// context that cannot be created is an error.
    pub fn precompile(&self, base: &Config) -> Result<PrecompileSummary> {
        let targets: Vec<Option<&str>> =
            if self.archs.is_empty() { vec![None] } else { self.archs.iter().map(|a| Some(a.as_str())).collect() };
        let mut summary = PrecompileSummary::default();
        let mut seen = BTreeSet::new();
        for target in targets {
            let mut contexts: Vec<(Option<Policy>, Context)> = Vec::new();
            for job in &self.jobs {
                let pols: Vec<Option<Policy>> = match job {
                    Job::Op { policies, .. } if !policies.is_empty() => policies.iter().map(|p| Some(*p)).collect(),
                    Job::Kernel(_) => vec![None],
                    _ if !self.policies.is_empty() => self.policies.iter().map(|p| Some(*p)).collect(),
                    _ => vec![None],
                };
                for pol in pols {
                    let what = describe(job, target, pol);
                    if !seen.insert(what.clone()) {
                        continue;
                    }
                    let ctx = match contexts.iter().position(|(p, _)| *p == pol) {
                        Some(i) => &contexts[i].1,
                        None => {
                            let mut cfg = base.try_clone()?;
                            if let Some(t) = target {
                                cfg = cfg.target(t)?;
                            }
                            if let Some(p) = pol {
                                cfg = cfg.policy(p)?;
                            }
                            contexts.push((pol, Context::with_config(&cfg)?));
                            &contexts.last().unwrap().1
                        }
                    };
                    summary.jobs += 1;
                    let r = match job {
                        Job::Op { op, dims, .. } => ctx.op_precompile(*op, dims).map(|(c, h)| (c as u64, h as u64)),
                        Job::Kernel(k) => kernel_desc(k).and_then(|d| ctx.precompile_kernel(&d)).map(|o| {
                            if o == Origin::Compiled {
                                (1, 0)
                            } else {
                                (0, 1)
                            }
                        }),
                    };
                    match r {
                        Ok((c, h)) => {
                            summary.compiled += c;
                            summary.cached += h;
                        }
                        Err(e) => summary.failed.push((what, e)),
                    }
                }
            }
        }
        Ok(summary)
    }
}

fn describe(job: &Job, target: Option<&str>, pol: Option<Policy>) -> String {
    let t = target.unwrap_or("(config)");
    let p = pol.map_or("(config)", |p| p.name());
    match job {
        Job::Op { op, dims, .. } => {
            let names = op.dims();
            let d: Vec<String> = names.iter().zip(dims).map(|(n, v)| format!("{}={}", n, v)).collect();
            format!("{} {} [{} {}]", op.name(), d.join(" "), t, p)
        }
        Job::Kernel(k) => format!("kernel {} ({}) {:?} {:?} [{}]", k.entry, k.path.display(), k.defines, k.options, t),
    }
}

fn kernel_desc(k: &ManifestKernel) -> Result<KernelDesc> {
    let src = fs::read_to_string(&k.path).map_err(|e| Error::Io(format!("{}: {}", k.path.display(), e)))?;
    let mut d = KernelDesc::source(&src, &k.entry).label(&k.path.display().to_string());
    for (n, v) in &k.defines {
        d = match v {
            Some(v) => d.define(n, v),
            None => d.define_flag(n),
        };
    }
    for o in &k.options {
        d = d.option(o);
    }
    Ok(d)
}

fn parse_kernel(tok: &[String], name: &str, no: usize, base: Option<&Path>) -> Result<ManifestKernel> {
    if tok.len() < 3 {
        return Err(fail(name, no, "kernel", "expected: kernel FILE ENTRY [-DNAME[=VALUE]]... [OPTION]..."));
    }
    let path = resolve(base, &tok[1]);
    let text = fs::read_to_string(&path).map_err(|e| fail(name, no, &tok[1], format!("cannot read {}: {}", path.display(), e)))?;
    if text.is_empty() {
        return Err(fail(name, no, &tok[1], format!("{} is empty", path.display())));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    let mut k = ManifestKernel { path: path.clone(), entry: tok[2].clone(), defines: Vec::new(),
                                 options: vec![format!("-I{}", dir.display())], line: no };
    let mut t = 3;
    while t < tok.len() {
        let f = &tok[t];
        if let Some(d) = f.strip_prefix("-D") {
            if d.is_empty() || d.starts_with('=') {
                return Err(fail(name, no, f, "define without a name"));
            }
            match d.split_once('=') {
                Some((n, v)) => k.defines.push((n.to_string(), Some(v.to_string()))),
                None => k.defines.push((d.to_string(), None)),
            }
        } else if f.starts_with("-I") || f.starts_with("--include-path=") {
            let dir = if let Some(d) = f.strip_prefix("--include-path=") {
                d.to_string()
            } else if f.len() > 2 {
                f[2..].to_string()
            } else {
                t += 1;
                tok.get(t).cloned().unwrap_or_default()
            };
            if dir.is_empty() {
                return Err(fail(name, no, f, "-I without a folder"));
            }
            let full = resolve(base, &dir);
            if !full.is_dir() {
                return Err(fail(name, no, &dir, format!("include folder {}: not a folder", full.display())));
            }
            k.options.push(format!("-I{}", full.display()));
        } else {
            k.options.push(f.clone());
        }
        t += 1;
    }
    Ok(k)
}
