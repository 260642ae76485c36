//! The crate on the stub backend (no GPU): what it compiles, caches, loads
//! and reports. The stub "compiles" by packaging the source, launches
//! nothing and keeps device memory in host memory.
mod common;

use std::sync::{Arc, Mutex};

use common::{random_f16, stub_config, stub_context, TempDir};
use tokitai_jit::manifest::{Job, Manifest};
use tokitai_jit::{
    f16_to_f32, f32_to_f16, reference, Backend, Cache, Config, Context, DeviceView, Error, KernelArg, KernelDesc,
    KernelParam, LogLevel, Op, Origin, ParamKind, Policy, Stream,
};

const SCALE_SRC: &str = r#"
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"#;

#[test]
fn version_and_interface_match_the_bindings() {
    tokitai_jit::check_version().unwrap();
    assert_eq!(tokitai_jit::abi_version(), tokitai_jit::sys::TK_ABI_VERSION);
    assert!(tokitai_jit::version().starts_with("0."), "{}", tokitai_jit::version());
}

#[test]
fn stub_context_reports_its_backend_and_target() {
    let dir = TempDir::new("ctx");
    let ctx = stub_context(dir.path());
    assert_eq!(ctx.backend_name(), "stub");
    assert_eq!(ctx.target(), "stub");
    assert_eq!(ctx.compiler(), "stub-1");
    assert_eq!(ctx.policy(), Policy::Stable);
    let ctx2 = Context::with_config(&stub_config(dir.path()).policy(Policy::Exact).unwrap()).unwrap();
    assert_eq!(ctx2.policy(), Policy::Exact);
}

#[test]
fn context_creation_failure_carries_the_reason() {
    let dir = TempDir::new("target");
    let cfg = stub_config(dir.path()).target("sm_90").unwrap();
    match Context::with_config(&cfg) {
        Err(e @ Error::Unsupported(_)) => assert!(e.message().contains("sm_90"), "{}", e),
        Err(e) => panic!("expected Unsupported, got {:?}", e),
        Ok(_) => panic!("a stub context for sm_90 was created"),
    }
}

#[test]
fn kernel_compiles_once_then_comes_from_disk() {
    let dir = TempDir::new("kernel");
    let desc = KernelDesc::source(SCALE_SRC, "scale").define("TILE", 64).option("-DEXTRA=1");
    let key;
    {
        let ctx = stub_context(dir.path());
        let k = ctx.kernel(&desc).unwrap();
        let info = k.info().unwrap();
        assert_eq!(info.origin, Origin::Compiled);
        assert_eq!(info.entry, "scale");
        assert_eq!(info.key_hex.len(), 32);
        key = info.key_hex;
        // The same kernel again: the memory table.
        let again = ctx.kernel(&desc).unwrap();
        assert_eq!(again.as_raw(), k.as_raw());
        let s = ctx.stats().unwrap();
        assert_eq!((s.compiles, s.memory_hits, s.disk_hits), (1, 1, 0));
    }
    let ctx = stub_context(dir.path());
    let k = ctx.kernel(&desc).unwrap();
    let info = k.info().unwrap();
    assert_eq!(info.origin, Origin::Disk);
    assert_eq!(info.key_hex, key);
    let s = ctx.stats().unwrap();
    assert_eq!((s.compiles, s.disk_hits), (0, 1));
    // Another define is another kernel.
    let other = ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale").define("TILE", 32)).unwrap();
    assert_ne!(other.info().unwrap().key_hex, key);
}

#[test]
fn launch_with_typed_arguments() {
    let dir = TempDir::new("launch");
    let ctx = stub_context(dir.path());
    let k = ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap();
    let mut x = ctx.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    let n = x.len() as i32;
    unsafe {
        k.launch([1, 1, 1], [32, 1, 1], 0, Stream::DEFAULT, &mut [KernelArg::output(&mut x), 2.0f32.into(), n.into()])
            .unwrap();
    }
    ctx.sync(Stream::DEFAULT).unwrap();
    // The stub launches nothing: the buffer is as uploaded.
    assert_eq!(x.to_vec().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn kernel_params_come_from_the_code_object() {
    let dir = TempDir::new("params");
    let src = "struct Pair { float a, b; };\n\
               __global__ void every(signed char c, unsigned u, long long l, double d, const float *p, Pair q) {}\n";
    let p = |offset, size, kind| KernelParam { offset, size, kind };
    let want_scale = vec![p(0, 8, ParamKind::Pointer), p(8, 4, ParamKind::Float), p(12, 4, ParamKind::Int)];
    // The stub reads the source's signature; it lays out no struct (size 0).
    let want_every = vec![
        p(0, 1, ParamKind::Int),
        p(4, 4, ParamKind::Uint),
        p(8, 8, ParamKind::Int),
        p(16, 8, ParamKind::Float),
        p(24, 8, ParamKind::Pointer),
        p(32, 0, ParamKind::Struct),
    ];
    {
        let ctx = stub_context(dir.path());
        assert_eq!(ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap().params().unwrap(), want_scale);
        assert_eq!(ctx.kernel(&KernelDesc::source(src, "every")).unwrap().params().unwrap(), want_every);
    }
    // From disk, no compile: the same layout.
    let ctx = stub_context(dir.path());
    let k = ctx.kernel(&KernelDesc::source(src, "every")).unwrap();
    assert_eq!(k.info().unwrap().origin, Origin::Disk);
    assert_eq!(k.params().unwrap(), want_every);
    assert_eq!(ctx.stats().unwrap().compiles, 0);
}

#[test]
fn cache_zero_stats_resets_the_persistent_counters() {
    let dir = TempDir::new("zero");
    {
        let ctx = stub_context(dir.path());
        ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap();
    }
    {
        let ctx = stub_context(dir.path());
        ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap();
    }
    let cache = Cache::open(Some(&stub_config(dir.path()))).unwrap();
    let s = cache.stats().unwrap();
    assert_eq!((s.hits, s.misses, s.compiles, s.stats_since), (1, 1, 1, 0), "{:?}", s);
    cache.zero_stats().unwrap();
    let s = cache.stats().unwrap();
    assert_eq!((s.hits, s.misses, s.compiles, s.entries), (0, 0, 0, 1), "{:?}", s);
    assert!(s.stats_since > 0, "{:?}", s);
    // Not writable: an error, the counters as they were.
    let ro = Cache::open(Some(&stub_config(dir.path()).cache_read_only(true).unwrap())).unwrap();
    match ro.zero_stats() {
        Err(e @ Error::Io(_)) => assert!(!e.message().is_empty()),
        other => panic!("expected Io on a read-only cache, got {:?}", other),
    }
}

#[test]
fn compile_failure_carries_the_compiler_log() {
    let dir = TempDir::new("fail");
    let ctx = stub_context(dir.path());
    let src = "extern \"C\" __global__ void k() {}\n#error tile size unsupported\n";
    let err = ctx.kernel(&KernelDesc::source(src, "k").label("tiles.cu")).err().expect("compile should fail");
    match &err {
        Error::CompileFailed(log) => {
            assert!(log.contains("tile size unsupported"), "{}", log);
            assert!(log.contains("tiles.cu(2)"), "{}", log);
        }
        other => panic!("expected CompileFailed, got {:?}", other),
    }
    assert_eq!(err.status(), tokitai_jit::sys::TK_COMPILE_FAILED);
    assert!(err.to_string().starts_with("kernel compilation failed: "), "{}", err);
    assert_eq!(ctx.stats().unwrap().compile_failures, 1);
}

#[test]
fn in_memory_headers_and_name_expressions() {
    let dir = TempDir::new("headers");
    let ctx = stub_context(dir.path());
    let src = "#include \"tiles.cuh\"\ntemplate <int N> __global__ void fill(float *p) { p[0] = N * TILE; }\n";
    let d = KernelDesc::source(src, "fill<4>").header("tiles.cuh", "#define TILE 8\n");
    let k = ctx.kernel(&d).unwrap();
    let info = k.info().unwrap();
    assert_eq!(info.origin, Origin::Compiled);
    // An edited header is another kernel.
    let d2 = KernelDesc::source(src, "fill<4>").header("tiles.cuh", "#define TILE 16\n");
    assert_ne!(ctx.kernel(&d2).unwrap().info().unwrap().key_hex, info.key_hex);
    // A header that fails names its own file.
    let bad = KernelDesc::source(src, "fill<4>").header("tiles.cuh", "#error no tiles\n");
    match ctx.kernel(&bad) {
        Err(Error::CompileFailed(log)) => assert!(log.contains("no tiles"), "{}", log),
        other => panic!("expected CompileFailed, got {:?}", other.err()),
    }
    // A NUL byte is refused before the library is called.
    assert!(matches!(ctx.kernel(&KernelDesc::source("a\0b", "k")), Err(Error::InvalidArgument(_))));
}

#[test]
fn embedded_sources_are_listed_and_precompile() {
    let names = tokitai_jit::embedded_sources();
    assert!(names.iter().any(|n| n.starts_with("gemm")), "{:?}", names);
    let dir = TempDir::new("precompile-kernel");
    let ctx = stub_context(dir.path());
    let d = KernelDesc::source(SCALE_SRC, "scale");
    assert_eq!(ctx.precompile_kernel(&d).unwrap(), Origin::Compiled);
    assert_eq!(ctx.precompile_kernel(&d).unwrap(), Origin::Disk);
}

#[test]
fn device_memory_round_trip() {
    let dir = TempDir::new("mem");
    let ctx = stub_context(dir.path());
    let data: Vec<u16> = (0..1000).map(|i| i as u16 * 7).collect();
    let mut b = ctx.upload(&data).unwrap();
    assert_eq!(b.to_vec().unwrap(), data);
    b.fill_bytes(0xAB).unwrap();
    assert!(b.to_vec().unwrap().iter().all(|&v| v == 0xABAB));
    let z = ctx.zeros::<f32>(17).unwrap();
    assert_eq!(z.to_vec().unwrap(), vec![0.0; 17]);
    let mut short = vec![0u16; 10];
    assert!(matches!(b.copy_to(&mut short), Err(Error::InvalidArgument(_))));
}

#[test]
fn operators_validate_and_enqueue() {
    let dir = TempDir::new("ops");
    let ctx = stub_context(dir.path());
    let (m, n, k) = (64, 128, 32);
    let a = ctx.upload(&random_f16(m * k, 1)).unwrap();
    let b = ctx.upload(&random_f16(k * n, 2)).unwrap();
    let mut c = ctx.zeros::<f32>(m * n).unwrap();
    let s = Stream::DEFAULT;
    ctx.gemm_f16_fwd(m, n, k, &a, &b, &mut c, s).unwrap();
    let mut ga = ctx.zeros::<u16>(m * k).unwrap();
    let gc = ctx.upload(&random_f16(m * n, 3)).unwrap();
    ctx.gemm_f16_grad_a(m, n, k, &gc, &b, &mut ga, s).unwrap();
    let mut gb = ctx.zeros::<u16>(k * n).unwrap();
    ctx.gemm_f16_grad_b(m, n, k, &a, &gc, &mut gb, s).unwrap();
    let mut out = ctx.zeros::<u16>(m * n).unwrap();
    ctx.softmax_f16_fwd(m, n, &gc, &mut out, s).unwrap();
    let mut gi = ctx.zeros::<u16>(m * n).unwrap();
    ctx.softmax_xent_f16_bwd(m, n, &out, &gc, &mut gi, s).unwrap();
    let (v, d, q) = (100, 64, 50);
    let w = ctx.upload(&random_f16(v * d, 4)).unwrap();
    let idx = ctx.upload(&(0..q as i32).map(|i| (i * 7) % v as i32).collect::<Vec<_>>()).unwrap();
    let mut eo = ctx.zeros::<u16>(q * d).unwrap();
    let mut bad = ctx.zeros::<u32>(1).unwrap();
    ctx.embedding_f16_fwd(v, d, &w, q, &idx, &mut eo, Some(&mut bad), s).unwrap();
    let mut gw = ctx.zeros::<u16>(v * d).unwrap();
    ctx.embedding_f16_bwd(v, d, &mut gw, q, &idx, &eo, true, None, s).unwrap();
    ctx.sync(s).unwrap();
    assert!(ctx.stats().unwrap().compiles > 0);
}

#[test]
fn operator_errors_name_the_argument() {
    let dir = TempDir::new("op-errors");
    let ctx = stub_context(dir.path());
    let a = ctx.zeros::<u16>(64).unwrap();
    let b = ctx.zeros::<u16>(64).unwrap();
    let mut c = ctx.zeros::<f32>(64).unwrap();
    // The library's own check and message: M must be > 0.
    match ctx.gemm_f16_fwd(0, 8, 8, &a, &b, &mut c, Stream::DEFAULT) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("M must be > 0"), "{}", msg);
            assert_eq!(msg, ctx.last_error());
        }
        other => panic!("expected InvalidArgument, got {:?}", other),
    }
    // The crate's length check, before the library is called.
    match ctx.gemm_f16_fwd(16, 8, 8, &a, &b, &mut c, Stream::DEFAULT) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("gemm_f16_fwd A: 128 elements needed"), "{}", msg),
        other => panic!("expected InvalidArgument, got {:?}", other),
    }
    // A misaligned fp16 pointer: the library's TK_MISALIGNED.
    let odd = unsafe { DeviceView::<u16>::from_raw((a.as_ptr() as *mut u8).add(1) as *mut _, 32) };
    match ctx.gemm_f16_fwd(4, 8, 8, &odd, &b, &mut c, Stream::DEFAULT) {
        Err(Error::Misaligned(msg)) => assert!(msg.contains("aligned"), "{}", msg),
        other => panic!("expected Misaligned, got {:?}", other),
    }
}

#[test]
fn op_precompile_compiles_then_finds_cached() {
    let dir = TempDir::new("op-precompile");
    let ctx = stub_context(dir.path());
    let (compiled, cached) = ctx.op_precompile(Op::GemmF16Fwd, &[512, 1024, 1024]).unwrap();
    assert!(compiled > 0 && cached == 0, "compiled {} cached {}", compiled, cached);
    let ctx2 = stub_context(dir.path());
    let (c2, h2) = ctx2.op_precompile(Op::GemmF16Fwd, &[512, 1024, 1024]).unwrap();
    assert_eq!((c2, h2), (0, compiled));
    assert!(matches!(ctx.op_precompile(Op::SoftmaxF16Fwd, &[1, 2, 3, 4, 5]), Err(Error::InvalidArgument(_))));
}

#[test]
fn op_names_and_dims() {
    for op in Op::ALL {
        assert_eq!(Op::from_name(&op.name()).unwrap(), op);
    }
    assert_eq!(Op::GemmF16GradA.dims(), vec!["M", "N", "K"]);
    assert_eq!(Op::SoftmaxF16Fwd.dims(), vec!["rows", "cols"]);
    assert_eq!(Op::EmbeddingF16Bwd.dims(), vec!["V", "D", "Q"]);
    assert!(matches!(Op::from_name("conv2d"), Err(Error::NotFound(_))));
}

#[test]
fn cache_tools_list_stats_verify_prune_clear() {
    let dir = TempDir::new("cache");
    {
        let ctx = stub_context(dir.path());
        ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap();
        ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale").define("V", 2)).unwrap();
    }
    let cfg = stub_config(dir.path());
    let cache = Cache::open(Some(&cfg)).unwrap();
    assert!(cache.root().starts_with(dir.path()), "{}", cache.root().display());
    let entries = cache.list().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e.kernel == "scale" && e.backend == "stub" && e.arch == "stub"));
    assert!(entries.iter().any(|e| e.options.contains("-DV=2")), "{:?}", entries);
    let stats = cache.stats().unwrap();
    assert_eq!(stats.entries, 2);
    assert!(stats.bytes > 0);
    assert!(cache.verify().unwrap().is_empty());

    // A corrupt entry is named by verify.
    let victim = &entries[0].path;
    let mut bytes = std::fs::read(victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xFF;
    std::fs::write(victim, &bytes).unwrap();
    let bad = cache.verify().unwrap();
    assert_eq!(bad.len(), 1, "{:?}", bad);
    assert_eq!(std::path::Path::new(&bad[0].path), victim.as_path());

    // Export, clear, import.
    let bundle = dir.path().join("b.tkb");
    let exported = cache.export(&bundle).unwrap();
    assert!(exported >= 1);
    assert!(cache.clear().unwrap() >= 1);
    assert_eq!(cache.stats().unwrap().entries, 0);
    let (imported, rejected) = cache.import(&bundle).unwrap();
    assert_eq!(imported, exported);
    assert!(rejected.is_empty());
    assert!(cache.prune(1).unwrap() >= 1);
    assert_eq!(cache.stats().unwrap().entries, 0);
    assert_eq!(tokitai_jit::parse_size("2G").unwrap(), 2 << 30);
    assert!(tokitai_jit::parse_size("lots").is_err());
}

#[test]
fn one_context_many_threads_compile_once() {
    let dir = TempDir::new("threads");
    let ctx = Arc::new(stub_context(dir.path()));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let ctx = Arc::clone(&ctx);
            std::thread::spawn(move || {
                let k = ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale").define("T", 1)).unwrap();
                k.info().unwrap().key_hex
            })
        })
        .collect();
    let keys: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(ctx.stats().unwrap().compiles, 1);
}

#[test]
fn log_callback_receives_messages() {
    let dir = TempDir::new("log");
    let seen: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    let cfg = stub_config(dir.path())
        .log_level(LogLevel::Debug)
        .unwrap()
        .log(move |l, m| s2.lock().unwrap().push((l, m.to_string())))
        .unwrap();
    let ctx = Context::with_config(&cfg).unwrap();
    drop(cfg); // the context keeps the callback alive
    ctx.kernel(&KernelDesc::source(SCALE_SRC, "scale")).unwrap();
    let msgs = seen.lock().unwrap();
    assert!(!msgs.is_empty(), "no log message at debug level");
}

#[test]
fn config_clones_keep_their_settings() {
    let dir = TempDir::new("clone");
    let cfg = stub_config(dir.path()).policy(Policy::Generic).unwrap();
    let c2 = cfg.try_clone().unwrap();
    drop(cfg);
    let ctx = Context::with_config(&c2).unwrap();
    assert_eq!(ctx.backend_name(), "stub");
    assert_eq!(ctx.policy(), Policy::Generic);
    assert!(matches!(Config::new().unwrap().backend(Backend::Stub).unwrap().target("a\0b"), Err(Error::InvalidArgument(_))));
}

#[test]
fn references_match_a_naive_computation() {
    let (m, n, k) = (5, 7, 9);
    let a = random_f16(m * k, 11);
    let b = random_f16(k * n, 12);
    let c = reference::gemm_f16_fwd(m, n, k, &a, &b).unwrap();
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| f16_to_f32(a[i * k + p]) as f64 * f16_to_f32(b[p * n + j]) as f64).sum();
            assert!((c[i * n + j] as f64 - want).abs() < 1e-5, "C[{},{}] {} vs {}", i, j, c[i * n + j], want);
        }
    }
    let sm = reference::softmax_f16_fwd(3, 50, &random_f16(150, 13)).unwrap();
    for r in 0..3 {
        let sum: f32 = sm[r * 50..(r + 1) * 50].iter().map(|&h| f16_to_f32(h)).sum();
        assert!((sum - 1.0).abs() < 0.02, "row {} sums to {}", r, sum);
    }
    let w = random_f16(4 * 3, 14);
    let (out, bad) = reference::embedding_f16_fwd(4, 3, &w, &[2, 9, 0]).unwrap();
    assert_eq!(bad, 1);
    assert_eq!(&out[0..3], &w[6..9]);
    assert_eq!(&out[3..6], &[0, 0, 0]);
    let mut gw = vec![0u16; 12];
    let go: Vec<u16> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().map(|&x| f32_to_f16(x)).collect();
    assert_eq!(reference::embedding_f16_bwd(4, 3, &mut gw, &[1, 1], &go).unwrap(), 0);
    assert_eq!(f16_to_f32(gw[3]), 5.0);
    assert!(matches!(reference::gemm_f16_fwd(2, 2, 2, &a[..3], &b[..4]), Err(Error::InvalidArgument(_))));
    assert_eq!(f16_to_f32(f32_to_f16(0.5)), 0.5);
    assert_eq!(f32_to_f16(1.0), 0x3C00);
}

#[test]
fn manifest_parses_ranges_and_names_bad_lines() {
    let text = "arch stub\npolicy stable exact\n\
                gemm_f16_fwd M=512..2048:x2 N=1024,3072 K=1024  # comment\n\
                softmax_f16_fwd rows=1..3:+1 cols=100 policy=generic\n";
    let m = Manifest::parse(text, "t.tkm", None).unwrap();
    assert_eq!(m.archs, vec!["stub"]);
    assert_eq!(m.policies, vec![Policy::Stable, Policy::Exact]);
    let gemms: Vec<_> = m.jobs.iter().filter(|j| matches!(j, Job::Op { op: Op::GemmF16Fwd, .. })).collect();
    assert_eq!(gemms.len(), 6);
    assert!(m.jobs.contains(&Job::Op { op: Op::SoftmaxF16Fwd, dims: vec![3, 100], policies: vec![Policy::Generic], line: 4 }));
    let e = Manifest::parse("gemm_f16_fwd M=1 N=2\n", "x.tkm", None).unwrap_err();
    assert!(e.message().starts_with("x.tkm:1: gemm_f16_fwd: dimension K missing"), "{}", e);
    let e = Manifest::parse("\n\nsoftmax_f16_fwd rows=1..8 cols=3\n", "x.tkm", None).unwrap_err();
    assert!(e.message().starts_with("x.tkm:3: rows=1..8: range '1..8' needs a step"), "{}", e);
    let e = Manifest::parse("conv2d X=1\n", "x.tkm", None).unwrap_err();
    assert!(e.message().contains("x.tkm:1: conv2d: unknown operator"), "{}", e);
}

#[test]
fn manifest_precompiles_then_everything_is_cached() {
    let dir = TempDir::new("manifest");
    let kdir = dir.path().join("k");
    std::fs::create_dir_all(kdir.join("inc")).unwrap();
    std::fs::write(kdir.join("my.cu"), "#include \"t.h\"\nextern \"C\" __global__ void my(float *p) { p[0] = T; }\n").unwrap();
    std::fs::write(kdir.join("inc/t.h"), "#define T 3\n").unwrap();
    std::fs::write(
        kdir.join("m.tkm"),
        "gemm_f16_fwd M=128 N=256 K=64\nsoftmax_f16_fwd rows=8 cols=1000\nkernel my.cu my -DX=1 -Iinc\n",
    )
    .unwrap();
    let m = Manifest::load(&kdir.join("m.tkm")).unwrap();
    let cache = dir.path().join("cache");
    let cfg = stub_config(&cache);
    let first = m.precompile(&cfg).unwrap();
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    assert_eq!(first.jobs, 3);
    assert!(first.compiled >= 3 && first.cached == 0, "{:?}", first);
    let second = m.precompile(&cfg).unwrap();
    assert_eq!((second.compiled, second.cached), (0, first.compiled), "{:?}", second);
    // A context then finds the user kernel on disk.
    let ctx = stub_context(&cache);
    let src = std::fs::read_to_string(kdir.join("my.cu")).unwrap();
    let d = KernelDesc::source(&src, "my")
        .label(&kdir.join("my.cu").display().to_string())
        .define("X", 1)
        .option(&format!("-I{}", kdir.display()))
        .option(&format!("-I{}", kdir.join("inc").display()));
    assert_eq!(ctx.kernel(&d).unwrap().info().unwrap().origin, Origin::Disk);
}

#[test]
fn check_run_reports_on_the_stub() {
    let dir = TempDir::new("check");
    let ctx = stub_context(dir.path());
    // The run happens (inputs uploaded, the op launched, output compared);
    // the stub computes nothing, so the comparison fails.
    let r = ctx.check_run(Op::GemmF16Fwd, &[64, 64, 64], 1).unwrap();
    assert_eq!(r.op, Some(Op::GemmF16Fwd));
    assert_eq!(r.dims, vec![64, 64, 64]);
    assert_eq!((r.device.as_str(), r.arch.as_str(), r.policy.as_str()), ("stub", "stub", "stable"));
    assert_eq!(r.cache_key.len(), 32);
    assert!(!r.passed);
    assert!(r.markdown.contains("| result | FAIL |"), "{}", r.markdown);
    assert!(r.json.contains("\"op\":\"gemm_f16_fwd\""), "{}", r.json);
}

#[test]
fn docs_show_the_quickstart_example_verbatim() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/rust.md");
    let text = match std::fs::read_to_string(&docs) {
        Ok(t) => t,
        Err(_) => {
            eprintln!("tokitai-jit-rust: SKIPPED (no {}: the crate is outside its source tree)", docs.display());
            return;
        }
    };
    let example = include_str!("../examples/quickstart.rs");
    assert!(text.contains(example), "docs/rust.md does not hold examples/quickstart.rs as it is");
    assert!(example.lines().count() <= 16);
}

#[test]
fn time_on_stream_and_wait_builds() {
    let dir = TempDir::new("timing");
    let ctx = stub_context(dir.path());
    let (m, n, k) = (128, 256, 64);
    let a = ctx.zeros::<u16>(m * k).unwrap();
    let b = ctx.zeros::<u16>(k * n).unwrap();
    let mut c = ctx.zeros::<f32>(m * n).unwrap();
    let mut calls = 0;
    let ms = ctx
        .time_on_stream(Stream::DEFAULT, || {
            calls += 1;
            ctx.gemm_f16_fwd(m, n, k, &a, &b, &mut c, Stream::DEFAULT)
        })
        .unwrap();
    assert_eq!(calls, 1);
    assert!(ms >= 0.0);
    ctx.wait_builds(Some(std::time::Duration::from_secs(60))).unwrap();
    let s = ctx.stats().unwrap();
    assert_eq!(s.builds_pending, 0);
    // An error from the closure comes back as it is.
    let e = ctx.time_on_stream(Stream::DEFAULT, || Err(Error::Timeout("mine".into()))).unwrap_err();
    assert_eq!(e, Error::Timeout("mine".into()));
}

#[test]
fn thread_safety_follows_the_header() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    // tk_context and tk_cache: thread-safe; tk_config: not (moved, not shared).
    send_sync::<Context>();
    send_sync::<Cache>();
    send_sync::<tokitai_jit::Kernel<'static>>();
    send_sync::<tokitai_jit::DeviceBuffer<'static, u16>>();
    send_sync::<Stream>();
    send::<Config>();
}

#[test]
fn strided_operands_are_checked_with_their_leading_dimension() {
    use tokitai_jit::{Strided, StridedMut};
    let dir = TempDir::new("strided");
    let ctx = stub_context(dir.path());
    let (m, n, k, lda, ldc) = (16, 32, 24, 40, 48);
    let a = ctx.zeros::<u16>((m - 1) * lda + k).unwrap();
    let b = ctx.zeros::<u16>(k * n).unwrap();
    let mut c = ctx.zeros::<f32>((m - 1) * ldc + n).unwrap();
    ctx.gemm_f16_fwd(m, n, k, &Strided::new(&a, lda), &b, &mut StridedMut::new(&mut c, ldc), Stream::DEFAULT).unwrap();
    // One element short of (M - 1) x lda + K.
    let short = ctx.zeros::<u16>((m - 1) * lda + k - 1).unwrap();
    match ctx.gemm_f16_fwd(m, n, k, &Strided::new(&short, lda), &b, &mut StridedMut::new(&mut c, ldc), Stream::DEFAULT) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("gemm_f16_fwd A: 624 elements needed, the buffer holds 623"), "{}", msg),
        other => panic!("expected InvalidArgument, got {:?}", other),
    }
    // A leading dimension below the row length: the library's message.
    match ctx.gemm_f16_fwd(m, n, k, &Strided::new(&a, k - 1), &b, &mut c, Stream::DEFAULT) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("lda must be 0 (packed) or >= 24 (got 23)"), "{}", msg),
        other => panic!("expected InvalidArgument, got {:?}", other),
    }
    let x = ctx.zeros::<u16>(3 * 130).unwrap();
    let mut y = ctx.zeros::<u16>(3 * 100).unwrap();
    ctx.softmax_f16_fwd(3, 100, &Strided::new(&x, 130), &mut y, Stream::DEFAULT).unwrap();
}
