//! The origin's fp16 GEMM pilot, in-process through tokitai-jit.
//!
//! The origin wrote the GEMM as a whole hipcc program, compiled it, ran it
//! as a child process and fed it A and B as decimal text. Here: random fp16
//! A[M,K] and B[K,N], C = A x B (fp32) by tk_gemm_f16_fwd on the device,
//! checked against the CPU reference with the origin's tolerance (every
//! |C - C_ref| < 1e-2), and the time to the first result:
//!
//!   - cold: a new process, an empty cache folder (context creation, the
//!     compile, upload, GEMM, download);
//!   - warm: a new process on the cache the cold run filled;
//!   - the same two through the C tool (`tokitai-jit --run gemm_f16_fwd`,
//!     a checked run with the library's own tolerance), as processes timed
//!     from start to exit.
//!
//! Both processes compute the same CPU reference (the library's
//! tk_ref_gemm_f16_fwd, one thread) after the device result: the process
//! wall times include it on both sides, the in-process first-result time
//! does not; the Rust side prints the reference's time.
//!
//! Usage: gemm_pilot [M N K] [--cli PATH] [--seed S]
//!   M N K default 1024 1024 1024 (the origin required M and N multiples of
//!   16; the library does not). The C tool: --cli, else $TOKITAI_JIT_CLI,
//!   else `tokitai-jit` on PATH. The backend: $TOKITAI_JIT_BACKEND, else the
//!   first with a device. On the stub backend kernels do not run: the
//!   example says so and skips the numeric check.
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use tokitai_jit::{reference, Config, Context, Stream};

const ORIGIN_TOLERANCE: f32 = 1e-2;

fn random_f16(n: usize, seed: u64) -> Vec<u16> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            tokitai_jit::f32_to_f16(x)
        })
        .collect()
}

/// One pilot run in this process: prints a RESULT line for the parent.
fn child(cache: &Path, m: usize, n: usize, k: usize, seed: u64) -> Result<(), tokitai_jit::Error> {
    let t0 = Instant::now();
    let a = random_f16(m * k, seed);
    let b = random_f16(k * n, seed + 1);
    let t_start = Instant::now();
    let ctx = Context::with_config(&Config::new()?.cache_dir(cache)?)?;
    let t_ctx = t_start.elapsed();
    let da = ctx.upload(&a)?;
    let db = ctx.upload(&b)?;
    let mut dc = ctx.alloc::<f32>(m * n)?;
    dc.fill_bytes(0xFF)?; // NaN: a result the kernel did not write shows
    ctx.gemm_f16_fwd(m, n, k, &da, &db, &mut dc, Stream::DEFAULT)?;
    ctx.sync(Stream::DEFAULT)?;
    let c = dc.to_vec()?;
    let first = t_start.elapsed();
    // The same call again: the kernel is in memory now.
    let t_again = Instant::now();
    ctx.gemm_f16_fwd(m, n, k, &da, &db, &mut dc, Stream::DEFAULT)?;
    ctx.sync(Stream::DEFAULT)?;
    let again = t_again.elapsed();
    let stats = ctx.stats()?;
    let t_ref = Instant::now();
    let (check, err) = if ctx.backend_name() == "stub" {
        ("skipped-stub".to_string(), f32::NAN)
    } else {
        let want = reference::gemm_f16_fwd(m, n, k, &a, &b)?;
        let e = c.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, |x, y| if y.is_nan() || x.is_nan() { f32::NAN } else { x.max(y) });
        ((if e < ORIGIN_TOLERANCE { "pass" } else { "FAIL" }).to_string(), e)
    };
    let ref_ms = t_ref.elapsed().as_secs_f64() * 1e3;
    println!(
        "RESULT backend={} target={} ctx_ms={:.1} first_ms={:.1} again_ms={:.3} compiles={} disk_hits={} fallback_calls={} check={} max_abs_error={} ref_ms={:.1} total_ms={:.1}",
        ctx.backend_name(),
        ctx.target(),
        t_ctx.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        again.as_secs_f64() * 1e3,
        stats.compiles,
        stats.disk_hits,
        stats.fallback_calls,
        check,
        err,
        ref_ms,
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace().find_map(|f| f.strip_prefix(key).and_then(|r| r.strip_prefix('='))).unwrap_or("?")
}

struct Run {
    wall_ms: f64,
    ok: bool,
    line: String,
}

fn run_child(exe: &Path, cache: &Path, m: usize, n: usize, k: usize, seed: u64) -> Run {
    let t = Instant::now();
    let out = Command::new(exe)
        .arg("--child")
        .arg(cache)
        .args([m.to_string(), n.to_string(), k.to_string(), seed.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("run the pilot's child process");
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("RESULT ")).unwrap_or("").to_string();
    Run { wall_ms, ok: out.status.success() && !line.is_empty(), line }
}

fn run_cli(cli: &Path, cache: &Path, m: usize, n: usize, k: usize, seed: u64) -> Option<(f64, i32, String)> {
    let t = Instant::now();
    let out = Command::new(cli)
        .args(["--run", "gemm_f16_fwd", "--shape"])
        .arg(format!("{}x{}x{}", m, n, k))
        .arg("--cache-dir")
        .arg(cache)
        .args(["--seed", &seed.to_string(), "--json"])
        .output()
        .ok()?;
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    let passed = if json.contains("\"passed\":true") { "pass" } else { "FAIL" };
    let origin = json.split("\"origin\":\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?").to_string();
    Some((wall_ms, out.status.code().unwrap_or(-1), format!("{} (first kernel: {})", passed, origin)))
}

fn main() {
    let args: Vec<String> = env::args().collect();
    if args.len() >= 7 && args[1] == "--child" {
        let num = |i: usize| args[i].parse::<usize>().expect("a number");
        if let Err(e) = child(Path::new(&args[2]), num(3), num(4), num(5), args[6].parse().unwrap()) {
            eprintln!("gemm_pilot: {}", e);
            std::process::exit(1);
        }
        return;
    }
    let mut dims = Vec::new();
    let mut cli: Option<PathBuf> = env::var_os("TOKITAI_JIT_CLI").map(PathBuf::from);
    let mut seed = 1u64;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--cli" => {
                i += 1;
                cli = Some(PathBuf::from(&args[i]));
            }
            "--seed" => {
                i += 1;
                seed = args[i].parse().expect("--seed N");
            }
            a => dims.push(a.parse::<usize>().unwrap_or_else(|_| panic!("usage: gemm_pilot [M N K] [--cli PATH] [--seed S]; got '{}'", a))),
        }
        i += 1;
    }
    let (m, n, k) = match dims.as_slice() {
        [] => (1024, 1024, 1024),
        [m, n, k] => (*m, *n, *k),
        _ => panic!("usage: gemm_pilot [M N K] [--cli PATH] [--seed S]"),
    };
    let cli = cli.unwrap_or_else(|| PathBuf::from("tokitai-jit"));
    let exe = env::current_exe().unwrap();
    let base = env::temp_dir().join(format!("tk-gemm-pilot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (rust_cache, cli_cache) = (base.join("rust"), base.join("cli"));

    println!("fp16 GEMM pilot M={} N={} K={} seed={} (origin tolerance: every |C - C_ref| < {})", m, n, k, seed, ORIGIN_TOLERANCE);
    let cold = run_child(&exe, &rust_cache, m, n, k, seed);
    let warm = run_child(&exe, &rust_cache, m, n, k, seed);
    let mut stub = false;
    println!();
    println!("| path | cache | process wall ms | first result ms (in process) | same call again ms | compiles | CPU reference ms | check |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, r) in [("Rust crate", &cold), ("Rust crate", &warm)] {
        if !r.ok {
            println!("| {} | - | {:.1} | failed (see above) | | | | |", name, r.wall_ms);
            continue;
        }
        stub |= field(&r.line, "backend") == "stub";
        let which = if std::ptr::eq(r, &cold) { "cold (empty)" } else { "warm" };
        println!(
            "| {} | {} | {:.1} | {} (context {}) | {} | {} | {} | {} (max abs error {}) |",
            name, which, r.wall_ms, field(&r.line, "first_ms"), field(&r.line, "ctx_ms"), field(&r.line, "again_ms"),
            field(&r.line, "compiles"), field(&r.line, "ref_ms"), field(&r.line, "check"), field(&r.line, "max_abs_error")
        );
    }
    for which in ["cold (empty)", "warm"] {
        match run_cli(&cli, &cli_cache, m, n, k, seed) {
            Some((ms, rc, check)) => println!("| C tool --run | {} | {:.1} | - | - | - | (included) | {}, exit {} |", which, ms, check, rc),
            None => println!("| C tool --run | {} | - | - | - | - | - | not run: cannot start {} (--cli PATH) |", which, cli.display()),
        }
    }
    println!();
    if cold.ok {
        println!("backend {} target {}", field(&cold.line, "backend"), field(&cold.line, "target"));
    }
    if stub {
        println!("stub backend: kernels are not executed, so the numeric check is SKIPPED (the C tool's --run reports FAIL for the same reason); the times measure the library's host path only.");
    }
    let _ = std::fs::remove_dir_all(&base);
    let failed = !cold.ok || !warm.ok || (!stub && [&cold, &warm].iter().any(|r| field(&r.line, "check") != "pass"));
    std::process::exit(if failed { 1 } else { 0 });
}
