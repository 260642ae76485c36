//! The seven operators on a real device against the crate's CPU references
//! (the library's tk_ref_*), with the tolerances of tk_check_run. Without a
//! device every test prints "tokitai-jit-rust: SKIPPED ..." and returns;
//! with TK_RUST_REQUIRE_GPU=1 (gpu-test.sh sets it) a missing device fails
//! instead. Each shape runs twice: the first call may be served by a
//! fallback kernel while the specialised one builds; after wait_builds the
//! second call uses the specialised kernel. Both outputs are checked.
//! The cache is a fresh folder unless TOKITAI_JIT_CACHE_DIR is set.
mod common;

use std::sync::Mutex;

use common::{random_f16, TempDir};
use tokitai_jit::{f16_to_f32, reference, Backend, Config, Context, Error, Stream};

/// One device test at a time: they share the device and print timings.
static SERIAL: Mutex<()> = Mutex::new(());

fn device() -> Option<(Context, TempDir)> {
    // A fresh cache unless TOKITAI_JIT_CACHE_DIR names one (to reuse a warm cache).
    let dir = TempDir::new("gpu");
    let mut cfg = Config::new().unwrap().backend(Backend::Auto).unwrap();
    if std::env::var_os("TOKITAI_JIT_CACHE_DIR").is_none() {
        cfg = cfg.cache_dir(dir.path()).unwrap();
    }
    let reason = match Context::with_config(&cfg) {
        Ok(ctx) if ctx.backend_name() != "stub" => {
            eprintln!("tokitai-jit-rust: device {} ({}, {})", ctx.target(), ctx.backend_name(), ctx.compiler());
            return Some((ctx, dir));
        }
        Ok(_) => "TOKITAI_JIT_BACKEND selects the stub backend".to_string(),
        Err(e @ (Error::NoDevice(_) | Error::BackendUnavailable(_))) => e.to_string(),
        Err(e) => panic!("creating a device context failed: {}", e),
    };
    if std::env::var("TK_RUST_REQUIRE_GPU").map_or(false, |v| v == "1") {
        panic!("TK_RUST_REQUIRE_GPU=1 and no device: {}", reason);
    }
    eprintln!("tokitai-jit-rust: SKIPPED (no device: {})", reason.lines().next().unwrap_or(""));
    None
}

fn compare(what: &str, got: &[f32], want: &[f32], abs: f64, rel: f64) {
    assert_eq!(got.len(), want.len());
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g as f64 - w as f64).abs();
        assert!(
            e <= abs + rel * (w as f64).abs(),
            "{}: element {}: got {} want {} (|err| {} > {} + {} x |want|)",
            what, i, g, w, e, abs, rel
        );
        if e > worst.0 {
            worst = (e, i);
        }
    }
    eprintln!("tokitai-jit-rust: {}: {} elements, max |err| {:.3e} (tolerance {} + {} x |want|)", what, got.len(), worst.0, abs, rel);
}

fn f16s(v: &[u16]) -> Vec<f32> {
    v.iter().map(|&h| f16_to_f32(h)).collect()
}

fn gemm_tol(r: usize) -> (f64, f64) {
    let r = r as f64;
    (1e-2 * if r > 64.0 { (r / 64.0).sqrt() } else { 1.0 }, 1e-2)
}

const GEMM_SHAPES: &[(usize, usize, usize)] = &[(128, 256, 64), (100, 72, 40), (1000, 1024, 512), (1024, 2816, 1024)];

#[test]
fn gemm_f16_fwd_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = match device() {
        Some(d) => d,
        None => return,
    };
    for &(m, n, k) in GEMM_SHAPES {
        let a = random_f16(m * k, 1);
        let b = random_f16(k * n, 2);
        let want = reference::gemm_f16_fwd(m, n, k, &a, &b).unwrap();
        let (da, db) = (ctx.upload(&a).unwrap(), ctx.upload(&b).unwrap());
        let mut dc = ctx.zeros::<f32>(m * n).unwrap();
        let (abs, rel) = gemm_tol(k);
        for pass in 0..2 {
            dc.fill_bytes(0xFF).unwrap();
            ctx.gemm_f16_fwd(m, n, k, &da, &db, &mut dc, Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("gemm_f16_fwd {}x{}x{} pass {}", m, n, k, pass), &dc.to_vec().unwrap(), &want, abs, rel);
            ctx.wait_builds(None).unwrap();
        }
    }
}

macro_rules! device_or_skip {
    () => {
        match device() {
            Some(d) => d,
            None => return,
        }
    };
}

#[test]
fn gemm_f16_grad_a_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(m, n, k) in GEMM_SHAPES {
        let gc = random_f16(m * n, 3);
        let b = random_f16(k * n, 4);
        let want = f16s(&reference::gemm_f16_grad_a(m, n, k, &gc, &b).unwrap());
        let (dgc, db) = (ctx.upload(&gc).unwrap(), ctx.upload(&b).unwrap());
        let mut dga = ctx.zeros::<u16>(m * k).unwrap();
        let (abs, rel) = gemm_tol(n);
        for pass in 0..2 {
            dga.fill_bytes(0xFF).unwrap();
            ctx.gemm_f16_grad_a(m, n, k, &dgc, &db, &mut dga, Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("gemm_f16_grad_a {}x{}x{} pass {}", m, n, k, pass), &f16s(&dga.to_vec().unwrap()), &want, abs, rel);
            ctx.wait_builds(None).unwrap();
        }
    }
}

#[test]
fn gemm_f16_grad_b_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(m, n, k) in GEMM_SHAPES {
        let a = random_f16(m * k, 5);
        let gc = random_f16(m * n, 6);
        let want = f16s(&reference::gemm_f16_grad_b(m, n, k, &a, &gc).unwrap());
        let (da, dgc) = (ctx.upload(&a).unwrap(), ctx.upload(&gc).unwrap());
        let mut dgb = ctx.zeros::<u16>(k * n).unwrap();
        let (abs, rel) = gemm_tol(m);
        for pass in 0..2 {
            dgb.fill_bytes(0xFF).unwrap();
            ctx.gemm_f16_grad_b(m, n, k, &da, &dgc, &mut dgb, Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("gemm_f16_grad_b {}x{}x{} pass {}", m, n, k, pass), &f16s(&dgb.to_vec().unwrap()), &want, abs, rel);
            ctx.wait_builds(None).unwrap();
        }
    }
}

const SOFTMAX_SHAPES: &[(usize, usize)] = &[(64, 100), (1000, 1024), (37, 32000), (8, 50304)];

/// Softmax inputs: logits spread over [-8, 8).
fn logits(n: usize, seed: u64) -> Vec<u16> {
    random_f16(n, seed).iter().map(|&h| tokitai_jit::f32_to_f16(f16_to_f32(h) * 8.0)).collect()
}

#[test]
fn softmax_f16_fwd_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(rows, cols) in SOFTMAX_SHAPES {
        let x = logits(rows * cols, 7);
        let want = f16s(&reference::softmax_f16_fwd(rows, cols, &x).unwrap());
        let dx = ctx.upload(&x).unwrap();
        let mut dy = ctx.zeros::<u16>(rows * cols).unwrap();
        for pass in 0..2 {
            dy.fill_bytes(0xFF).unwrap();
            ctx.softmax_f16_fwd(rows, cols, &dx, &mut dy, Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("softmax_f16_fwd {}x{} pass {}", rows, cols, pass), &f16s(&dy.to_vec().unwrap()), &want, 1e-3, 1e-2);
            ctx.wait_builds(None).unwrap();
        }
    }
}

#[test]
fn softmax_xent_f16_bwd_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(rows, cols) in SOFTMAX_SHAPES {
        let s = reference::softmax_f16_fwd(rows, cols, &logits(rows * cols, 8)).unwrap();
        let g = random_f16(rows * cols, 9);
        let want = f16s(&reference::softmax_xent_f16_bwd(rows, cols, &s, &g).unwrap());
        let (ds, dg) = (ctx.upload(&s).unwrap(), ctx.upload(&g).unwrap());
        let mut dgi = ctx.zeros::<u16>(rows * cols).unwrap();
        for pass in 0..2 {
            dgi.fill_bytes(0xFF).unwrap();
            ctx.softmax_xent_f16_bwd(rows, cols, &ds, &dg, &mut dgi, Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("softmax_xent_f16_bwd {}x{} pass {}", rows, cols, pass), &f16s(&dgi.to_vec().unwrap()), &want, 1e-3, 1e-2);
            ctx.wait_builds(None).unwrap();
        }
    }
}

const EMBEDDING_SHAPES: &[(usize, usize, usize)] = &[(100, 64, 50), (32000, 1024, 4096), (50304, 72, 1000)];

/// Indices in [-2, V + 2): a few out of range on both sides.
fn indices(v: usize, q: usize, seed: u64) -> Vec<i32> {
    let mut s = seed;
    (0..q)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) % (v as u64 + 4)) as i32 - 2
        })
        .collect()
}

#[test]
fn embedding_f16_fwd_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(v, d, q) in EMBEDDING_SHAPES {
        let w = random_f16(v * d, 10);
        let idx = indices(v, q, 11);
        let (want, want_bad) = reference::embedding_f16_fwd(v, d, &w, &idx).unwrap();
        let (dw, didx) = (ctx.upload(&w).unwrap(), ctx.upload(&idx).unwrap());
        let mut dout = ctx.zeros::<u16>(q * d).unwrap();
        for pass in 0..2 {
            dout.fill_bytes(0xFF).unwrap();
            let mut bad = ctx.zeros::<u32>(1).unwrap();
            ctx.embedding_f16_fwd(v, d, &dw, q, &didx, &mut dout, Some(&mut bad), Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            assert_eq!(dout.to_vec().unwrap(), want, "embedding_f16_fwd {}x{} Q={} pass {}: not a bit-exact copy", v, d, q, pass);
            assert_eq!(bad.to_vec().unwrap()[0] as u64, want_bad);
            eprintln!("tokitai-jit-rust: embedding_f16_fwd {}x{} Q={} pass {}: bit-exact, {} out of range", v, d, q, pass, want_bad);
            ctx.wait_builds(None).unwrap();
        }
    }
}

#[test]
fn embedding_f16_bwd_matches_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    for &(v, d, q) in EMBEDDING_SHAPES {
        let gw0 = random_f16(v * d, 12);
        let idx = indices(v, q, 13);
        let go = random_f16(q * d, 14);
        let mut want = gw0.clone();
        let want_bad = reference::embedding_f16_bwd(v, d, &mut want, &idx, &go).unwrap();
        let want = f16s(&want);
        let (didx, dgo) = (ctx.upload(&idx).unwrap(), ctx.upload(&go).unwrap());
        for (pass, deterministic) in [(0, true), (1, false), (2, true)] {
            let mut dgw = ctx.upload(&gw0).unwrap();
            let mut bad = ctx.zeros::<u32>(1).unwrap();
            ctx.embedding_f16_bwd(v, d, &mut dgw, q, &didx, &dgo, deterministic, Some(&mut bad), Stream::DEFAULT).unwrap();
            ctx.sync(Stream::DEFAULT).unwrap();
            compare(&format!("embedding_f16_bwd {}x{} Q={} deterministic={} pass {}", v, d, q, deterministic, pass),
                    &f16s(&dgw.to_vec().unwrap()), &want, 1e-3, 2e-3);
            assert_eq!(bad.to_vec().unwrap()[0] as u64, want_bad);
            ctx.wait_builds(None).unwrap();
        }
    }
}

#[test]
fn user_kernel_runs_with_typed_arguments() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    let src = "extern \"C\" __global__ void axpy(float *y, const float *x, float a, int n) {\n\
               int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) y[i] += a * x[i] + BIAS;\n}\n";
    let k = ctx.kernel(&tokitai_jit::KernelDesc::source(src, "axpy").define("BIAS", "1.0f")).unwrap();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let dx = ctx.upload(&x).unwrap();
    let mut dy = ctx.upload(&vec![2.0f32; n]).unwrap();
    unsafe {
        k.launch([((n + 255) / 256) as u32, 1, 1], [256, 1, 1], 0, Stream::DEFAULT,
                 &mut [tokitai_jit::KernelArg::output(&mut dy), tokitai_jit::KernelArg::input(&dx), 0.5f32.into(), (n as i32).into()])
            .unwrap();
    }
    ctx.sync(Stream::DEFAULT).unwrap();
    let y = dy.to_vec().unwrap();
    for (i, &yi) in y.iter().enumerate() {
        assert_eq!(yi, 2.0 + 0.5 * i as f32 + 1.0, "y[{}]", i);
    }
    eprintln!("tokitai-jit-rust: user kernel axpy: {} elements exact", n);
}

#[test]
fn strided_gemm_and_softmax_match_reference() {
    use tokitai_jit::{Strided, StridedMut};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ctx, _dir) = device_or_skip!();
    // A [M,K] inside rows of lda; C [M,N] inside rows of ldc.
    let (m, n, k, lda, ldc) = (300, 256, 128, 136, 264);
    let a = random_f16(m * k, 21);
    let b = random_f16(k * n, 22);
    let want = reference::gemm_f16_fwd(m, n, k, &a, &b).unwrap();
    let mut a_pad = vec![0u16; (m - 1) * lda + k];
    for r in 0..m {
        a_pad[r * lda..r * lda + k].copy_from_slice(&a[r * k..(r + 1) * k]);
    }
    let (da, db) = (ctx.upload(&a_pad).unwrap(), ctx.upload(&b).unwrap());
    let mut dc = ctx.upload(&vec![f32::NAN; (m - 1) * ldc + n]).unwrap();
    ctx.gemm_f16_fwd(m, n, k, &Strided::new(&da, lda), &db, &mut StridedMut::new(&mut dc, ldc), Stream::DEFAULT).unwrap();
    ctx.sync(Stream::DEFAULT).unwrap();
    let c = dc.to_vec().unwrap();
    let got: Vec<f32> = (0..m).flat_map(|r| c[r * ldc..r * ldc + n].to_vec()).collect();
    let (abs, rel) = gemm_tol(k);
    compare(&format!("gemm_f16_fwd {}x{}x{} lda={} ldc={}", m, n, k, lda, ldc), &got, &want, abs, rel);
    assert!(c[n..ldc].iter().all(|x| x.is_nan()), "gemm_f16_fwd wrote between rows");

    let (rows, cols, ld) = (50, 1000, 1024);
    let x = logits(rows * cols, 23);
    let want = f16s(&reference::softmax_f16_fwd(rows, cols, &x).unwrap());
    let mut x_pad = vec![0u16; (rows - 1) * ld + cols];
    for r in 0..rows {
        x_pad[r * ld..r * ld + cols].copy_from_slice(&x[r * cols..(r + 1) * cols]);
    }
    let dx = ctx.upload(&x_pad).unwrap();
    let mut dy = ctx.zeros::<u16>(rows * cols).unwrap();
    ctx.softmax_f16_fwd(rows, cols, &Strided::new(&dx, ld), &mut dy, Stream::DEFAULT).unwrap();
    ctx.sync(Stream::DEFAULT).unwrap();
    compare(&format!("softmax_f16_fwd {}x{} ld_in={}", rows, cols, ld), &f16s(&dy.to_vec().unwrap()), &want, 1e-3, 1e-2);
}
