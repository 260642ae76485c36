"""The seven operators on the stub backend: argument checks raise
TypeError/ValueError before anything reaches the library (the context's
counters stay at zero), valid calls compile and launch, outputs are
allocated, library statuses become exceptions."""

from __future__ import annotations

import pytest

import tokitai_jit as tj

from arrays import CaiArray, DlpackArray

ZERO = dict(memory_hits=0, disk_hits=0, compiles=0)


def untouched(ctx):
    s = ctx.stats()
    return dict(memory_hits=s.memory_hits, disk_hits=s.disk_hits, compiles=s.compiles) == ZERO


def used(ctx):
    s = ctx.stats()
    return s.compiles + s.memory_hits + s.disk_hits


# ------------------------------------------------------------- valid calls


def test_gemm_fwd_allocates_fp32_output(ctx):
    a, b = ctx.empty((4, 8)), ctx.empty((8, 16))
    c = ctx.gemm_f16_fwd(a, b)
    assert isinstance(c, tj.DeviceBuffer)
    assert (c.shape, c.dtype) == ((4, 16), "float32")
    assert ctx.stats().compiles >= 1
    ctx.wait_builds()  # the specialised kernel builds in the background
    compiles = ctx.stats().compiles
    ctx.gemm_f16_fwd(a, b, out=c)
    s = ctx.stats()
    assert s.compiles == compiles and s.memory_hits >= 1


def test_gemm_grads_shapes(ctx):
    M, N, K = 4, 16, 8
    a, b, gc = ctx.empty((M, K)), ctx.empty((K, N)), ctx.empty((M, N))
    ga = ctx.gemm_f16_grad_a(gc, b)
    gb = ctx.gemm_f16_grad_b(a, gc)
    assert (ga.shape, ga.dtype) == ((M, K), "float16")
    assert (gb.shape, gb.dtype) == ((K, N), "float16")


def test_softmax_and_xent(ctx):
    x = ctx.empty((3, 40))
    y = ctx.softmax_f16_fwd(x)
    assert y.shape == (3, 40)
    g = ctx.softmax_xent_f16_bwd(y, x)
    assert g.shape == (3, 40)
    # async build mode: each op's generic kernel is compiled by the call (a
    # wait), the one with cols baked in the background
    ctx.wait_builds()
    s = ctx.stats()
    assert (s.compiles, s.waits, s.fallback_calls, s.builds_done) == (4, 2, 2, 2)


def test_sync_build_mode(cache_dir):
    with tj.Context(backend="stub", cache_dir=cache_dir, build_mode="sync") as c:
        x = c.empty((3, 40))
        c.softmax_f16_fwd(x)
        s = c.stats()
        assert (s.compiles, s.waits, s.fallback_calls, s.builds_queued) == (1, 1, 0, 0)


def test_embedding_fwd_and_bwd(ctx):
    w = ctx.empty((10, 8))
    idx = ctx.array([0, 3, 9, 1, 2, 2], (2, 3), "int32")
    out = ctx.embedding_f16_fwd(w, idx)
    assert out.shape == (2, 3, 8)
    bad = ctx.array([0], dtype="uint32")
    out2 = ctx.embedding_f16_fwd(w, idx, ctx.empty((6, 8)), bad_count=bad)
    assert out2.shape == (6, 8)
    assert ctx.embedding_f16_bwd(w, idx, out, deterministic=True, bad_count=bad) is w
    assert ctx.embedding_f16_bwd(w, idx, out2) is w


def test_padded_rows_are_accepted(ctx):
    x = CaiArray((3, 40), strides=(48, 1))
    out = CaiArray((3, 40), strides=(64, 1))
    assert ctx.softmax_f16_fwd(x, out) is out


def test_dlpack_inputs(ctx):
    a = DlpackArray((4, 8), "float16")
    b = DlpackArray((8, 16), "float16")
    assert ctx.gemm_f16_fwd(a, b).shape == (4, 16)


def test_streams_accepted(ctx):
    class TorchLikeStream:
        cuda_stream = 0
        device_index = 0

    x = ctx.empty((2, 8))
    ctx.softmax_f16_fwd(x, stream=0)
    ctx.softmax_f16_fwd(x, stream=TorchLikeStream())
    ctx.synchronize()
    ctx.synchronize(TorchLikeStream())


# ---------------------------------------------------- rejected in Python


def call(ctx, op, *args, **kw):
    return getattr(ctx, op)(*args, **kw)


BAD = [
    # (operator, args builder, exception, message fragment)
    ("gemm_f16_fwd", lambda c: (c.empty((4, 8), "float32"), c.empty((8, 16))), TypeError, "a must be float16"),
    ("gemm_f16_fwd", lambda c: (c.empty((4, 8)), c.empty((9, 16))), ValueError, "K = 8"),
    ("gemm_f16_fwd", lambda c: (c.empty((4, 8, 1)), c.empty((8, 16))), ValueError, "2-D"),
    ("gemm_f16_fwd", lambda c: (c.empty((4, 8)), c.empty((8, 16)), c.empty((4, 16))), TypeError, "out must be float32"),
    ("gemm_f16_fwd", lambda c: (c.empty((4, 8)), c.empty((8, 16)), c.empty((4, 15), "float32")), ValueError, "cols = 16"),
    ("gemm_f16_fwd", lambda c: (CaiArray((4, 8), strides=(1, 4)), c.empty((8, 16))), ValueError, "column stride"),
    ("gemm_f16_fwd", lambda c: (CaiArray((4, 8), strides=(4, 1)), c.empty((8, 16))), ValueError, "row stride"),
    ("gemm_f16_fwd", lambda c: (c.empty((0, 8)), c.empty((8, 16))), ValueError, "empty"),
    ("gemm_f16_fwd", lambda c: ([[1.0]], c.empty((8, 16))), TypeError, "__cuda_array_interface__"),
    ("gemm_f16_grad_a", lambda c: (c.empty((4, 16)), c.empty((8, 15))), ValueError, "N = 16"),
    ("gemm_f16_grad_b", lambda c: (c.empty((4, 8)), c.empty((5, 16))), ValueError, "M = 4"),
    ("softmax_f16_fwd", lambda c: (c.empty((3, 4)), CaiArray((3, 4), readonly=True)), ValueError, "read-only"),
    ("softmax_f16_fwd", lambda c: (c.empty((3, 4), "int32"),), TypeError, "x must be float16"),
    ("softmax_xent_f16_bwd", lambda c: (c.empty((3, 4)), c.empty((3, 5))), ValueError, "g must have cols = 4"),
    ("embedding_f16_fwd", lambda c: (c.empty((10, 8)), c.empty((4,), "int64")), TypeError, "torch.int32"),
    ("embedding_f16_fwd", lambda c: (CaiArray((10, 8), strides=(16, 1)), c.empty((4,), "int32")), ValueError, "contiguous"),
    ("embedding_f16_fwd", lambda c: (c.empty((10, 8)), c.empty((4,), "int32"), c.empty((4, 7))), ValueError, "out must have shape"),
    ("embedding_f16_bwd", lambda c: (c.empty((10, 8)), c.empty((4,), "int32"), c.empty((4, 9))), ValueError, "grad_out must have shape"),
    ("embedding_f16_bwd", lambda c: (CaiArray((10, 8), readonly=True), c.empty((4,), "int32"), c.empty((4, 8))), ValueError, "read-only"),
]


@pytest.mark.parametrize("op,args,exc,frag", BAD, ids=["%s-%d" % (b[0], i) for i, b in enumerate(BAD)])
def test_bad_arguments_raise_before_the_library(ctx, op, args, exc, frag):
    with pytest.raises(exc, match=frag):
        call(ctx, op, *args(ctx))
    assert untouched(ctx)


def test_bad_count_must_be_uint32_or_int32(ctx):
    w, idx = ctx.empty((10, 8)), ctx.empty((4,), "int32")
    with pytest.raises(TypeError, match="bad_count must be uint32 or int32, got float32"):
        ctx.embedding_f16_fwd(w, idx, bad_count=ctx.empty((1,), "float32"))
    for dtype in ("int32", "uint32"):  # PyTorch has no practical uint32 tensors
        bad = ctx.array([0], dtype=dtype)
        assert ctx.embedding_f16_fwd(w, idx, bad_count=bad).shape == (4, 8)
        assert ctx.embedding_f16_bwd(w, idx, ctx.empty((4, 8)), bad_count=bad) is w


def test_bad_streams(ctx):
    x = ctx.empty((2, 8))
    with pytest.raises(TypeError, match="stream"):
        ctx.softmax_f16_fwd(x, stream="default")
    with pytest.raises(ValueError, match="stream"):
        ctx.softmax_f16_fwd(x, stream=-5)
    assert untouched(ctx)


def test_device_checks(ctx, monkeypatch):
    # The stub accepts any memory; pretend to be a CUDA context on device 0
    # to exercise the check that runs there.
    monkeypatch.setattr(ctx, "_backend_name", "cuda")
    a, b = CaiArray((4, 8), device=(1, 0)), CaiArray((8, 16), device=(2, 0))
    with pytest.raises(ValueError, match="a is on cpu:0; this context runs on cuda device 0"):
        ctx.gemm_f16_fwd(a, b)
    with pytest.raises(ValueError, match="b is on cuda:1"):
        ctx.gemm_f16_fwd(CaiArray((4, 8), device=(2, 0)), CaiArray((8, 16), device=(2, 1)))

    class OtherDeviceStream:
        cuda_stream = 0
        device_index = 1

    with pytest.raises(ValueError, match="stream belongs to device 1"):
        ctx.gemm_f16_fwd(CaiArray((4, 8), device=(2, 0)), b, stream=OtherDeviceStream())
    assert untouched(ctx)


# --------------------------------------------------- statuses from the library


def test_misaligned_pointer_is_a_library_status(ctx):
    x = CaiArray((2, 8), offset=1)
    with pytest.raises(tj.MisalignedError) as e:
        ctx.softmax_f16_fwd(x, ctx.empty((2, 8)))
    assert e.value.status == tj.Status.MISALIGNED
    assert "aligned to 2 bytes" in e.value.message
    assert isinstance(e.value, ValueError)


def test_offline_context_cannot_run(offline):
    with pytest.raises(tj.NoDeviceError, match="offline target"):
        offline.empty((2, 8))
    with pytest.raises(tj.NoDeviceError, match="no device") as e:
        offline.softmax_f16_fwd(CaiArray((2, 8)), CaiArray((2, 8)))
    assert e.value.call == "tk_softmax_f16_fwd"


def test_closed_context(cache_dir):
    c = tj.Context(backend="stub", cache_dir=cache_dir)
    buf = c.empty((2, 8))
    c.close()
    assert c.closed
    with pytest.raises(ValueError, match="freed"):
        buf.ptr
    with pytest.raises(ValueError, match="closed"):
        c.empty(4)
    c.close()  # idempotent


# ---------------------------------------------------------- buffers


def test_buffer_roundtrip(ctx):
    b = ctx.array([1.5, -2.0, 0.25, 65504.0], (2, 2), "float16")
    assert b.tolist() == [1.5, -2.0, 0.25, 65504.0]
    assert b.nbytes == 8
    assert b.__cuda_array_interface__["typestr"] == "<f2"
    b.fill_bytes(0)
    assert b.tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="bytes given"):
        b.upload(b"\0" * 3)
    with pytest.raises(ValueError, match="do not fill"):
        ctx.array([1, 2, 3], (2, 2))
    b.free()
    b.free()


def test_precompile_and_check_run(ctx, offline):
    r = offline.precompile("softmax_f16_fwd", (64, 1024))
    assert r.compiled >= 1 and r.cached == 0
    again = offline.precompile(tj.Op.SOFTMAX_F16_FWD, [64, 1024])
    assert again.compiled == 0 and again.cached == r.compiled
    with pytest.raises(ValueError, match="op must be one of"):
        offline.precompile("softmax", (1, 2))
    with pytest.raises(tj.InvalidArgumentError, match="takes 2 dims"):
        offline.precompile("softmax_f16_fwd", (1, 2, 3))
    rep = ctx.check_run("softmax_f16_fwd", (4, 64), seed=3)
    assert (rep.op, rep.dims, rep.seed, rep.policy) == ("softmax_f16_fwd", (4, 64), 3, "stable")
    assert rep.arch == "stub"


# ------------------------------------------------------------------ tuning


def test_tune_stores_a_record(ctx, cache_dir):
    # the stub runs nothing: its times are host times; only the plumbing counts
    r = ctx.tune("gemm_f16_fwd", (100, 2816, 1024))
    assert isinstance(r, tj.TuneReport)
    assert r.record == "gemm_f16_fwd N=2816 K=1024 M<=112"
    assert r.timed_m == 112
    assert r.candidates >= 2 and len(r.timed) == r.candidates
    # a configuration, or "heuristics" where none gains 3% over them
    assert r.chosen in [c for c, _ in r.timed] + ["heuristics"] and r.heuristic == r.timed[0][0]
    # the class's middle, timed too
    assert r.mid_m == 104 and len(r.timed_mid) == r.candidates and r.heuristic_mid_us > 0
    assert r.stored
    listed = [e for e in tj.cache.list(cache_dir) if e.source == "tune:gemm_f16_fwd"]
    assert [(e.kernel, e.options) for e in listed] == [("N=2816 K=1024", "M<=112 %s\n" % r.chosen)]


def test_tune_errors(ctx, offline):
    with pytest.raises(tj.UnsupportedError):
        ctx.tune("softmax_f16_fwd", (4, 100))
    with pytest.raises(ValueError):
        ctx.tune("gemm_f16_fwd", (100, 2816))
    with pytest.raises(tj.NoDeviceError):
        offline.tune("gemm_f16_fwd", (64, 64, 64))
