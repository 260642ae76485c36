"""tokitai_jit.torch without a GPU: the registered operators, their values
and gradients on CPU tensors (the library's CPU references) against
PyTorch, meta and fake tensors, argument errors, the stub device path, and
torch.compile where the installed PyTorch has custom_op (2.4 and later;
skipped, with the reason, on older ones)."""

from __future__ import annotations

import os

import pytest

if os.environ.get("TK_TEST_SANITIZED") == "1":
    # PyTorch's own native code under the preloaded ASan runtime crashes
    # (seen in test_clear_errors); the normal build runs this file.
    pytest.skip("sanitizer build: PyTorch under a preloaded ASan runtime", allow_module_level=True)

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import tokitai_jit as tj  # noqa: E402
import tokitai_jit.torch as tt  # noqa: E402

OPS = ["gemm_f16_fwd", "gemm_f16_grad_a", "gemm_f16_grad_b", "softmax_f16_fwd",
       "softmax_xent_f16_bwd", "embedding_f16_fwd", "embedding_f16_bwd"]
NEEDS_24 = pytest.mark.skipif(not tt.HAS_CUSTOM_OP, reason="torch.library.custom_op and torch.compile of custom "
                              "ops need PyTorch >= 2.4 (installed: %s)" % torch.__version__)


def rnd(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(*shape, generator=g) * scale).half()


def close(x, ref, atol, rtol=2e-2):
    x, ref = x.float(), ref.float()
    err = (x - ref).abs().max().item()
    lim = atol + rtol * ref.abs().max().item()
    assert err <= lim, "max |err| %.4g > %.4g" % (err, lim)


def test_the_seven_operators_are_registered():
    for name in OPS:
        assert hasattr(torch.ops.tokitai, name), name


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (5, 7, 3), (33, 17, 64), (64, 40, 24)])
def test_gemm_ops_match_torch(M, N, K):
    a, b, gc = rnd(M, K), rnd(K, N, seed=1), rnd(M, N, seed=2)
    c = torch.ops.tokitai.gemm_f16_fwd(a, b)
    assert (c.dtype, tuple(c.shape)) == (torch.float32, (M, N))
    close(c, a.float() @ b.float(), 1e-4, 1e-4)
    close(torch.ops.tokitai.gemm_f16_grad_a(gc, b), gc.float() @ b.float().t(), 1e-2)
    close(torch.ops.tokitai.gemm_f16_grad_b(a, gc), a.float().t() @ gc.float(), 1e-2)


def test_gemm_strided_inputs():
    a = rnd(8, 20)[:, 4:16]  # padded rows
    b = rnd(6, 12).t()  # transposed: copied
    close(tt.gemm(a, b), a.float() @ b.float(), 1e-4, 1e-4)


def test_gemm_empty_dimensions():
    assert tt.gemm(rnd(0, 4), rnd(4, 3)).shape == (0, 3)
    assert torch.equal(tt.gemm(torch.empty(2, 0).half(), torch.empty(0, 3).half()), torch.zeros(2, 3))


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 40), (17, 257)])
def test_softmax_ops_match_torch(rows, cols):
    x = rnd(rows, cols, scale=3)
    s = torch.ops.tokitai.softmax_f16_fwd(x)
    assert s.dtype == torch.float16
    close(s, torch.softmax(x.float(), -1), 2e-3)
    g = rnd(rows, cols, seed=5)
    ref = s.float() * (g.float() - (g.float() * s.float()).sum(-1, keepdim=True))
    close(torch.ops.tokitai.softmax_xent_f16_bwd(s, g), ref, 2e-3)


def test_embedding_ops_match_torch():
    V, D = 50, 12
    w = rnd(V, D)
    idx = torch.randint(0, V, (3, 7), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    out = torch.ops.tokitai.embedding_f16_fwd(w, idx)
    assert out.shape == (3, 7, D) and torch.equal(out, w[idx.long()])
    bad = torch.tensor([0, V, -1], dtype=torch.int32)
    assert torch.equal(tt.embedding(w, bad)[1:], torch.zeros(2, D).half())  # zero rows, no error
    go = rnd(3, 7, D, seed=3)
    gw = torch.ops.tokitai.embedding_f16_bwd(go, idx, V, False)
    ref = torch.zeros(V, D).index_add_(0, idx.view(-1).long(), go.view(-1, D).float())
    close(gw, ref, 1e-2)


# ------------------------------------------------------------- gradients


def grads(fn, *inputs, seed=7):
    ins = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*ins)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    out.backward(g)
    return out.detach(), [t.grad for t in ins]


@pytest.mark.parametrize("M,N,K", [(4, 6, 5), (31, 9, 17), (50, 64, 33)])
def test_gemm_gradients_match_torch(M, N, K):
    a, b = rnd(M, K), rnd(K, N, seed=1)
    out, (ga, gb) = grads(tt.gemm, a, b)
    ref, (ra, rb) = grads(lambda x, y: x.float() @ y.float(), a, b)
    close(out, ref, 1e-4, 1e-4)
    assert ga.dtype == torch.float16 and gb.dtype == torch.float16
    close(ga, ra, 2e-2)
    close(gb, rb, 2e-2)


def test_linear_only_weight_grad():
    x, w = rnd(8, 16), rnd(16, 4, seed=1).requires_grad_()
    tt.linear(x, w).sum().backward()
    close(w.grad, x.float().t() @ torch.ones(8, 4), 2e-2)


@pytest.mark.parametrize("shape", [(9, 33), (2, 3, 70)])
def test_softmax_gradient_matches_torch(shape):
    x = rnd(*shape, scale=2)
    out, (gx,) = grads(tt.softmax, x)
    ref, (rx,) = grads(lambda t: torch.softmax(t.float(), -1).half(), x)
    close(out, ref, 2e-3)
    close(gx, rx, 4e-3)


def test_softmax_cross_entropy_gradient():
    x = rnd(16, 40).requires_grad_()  # no p[y] so small that -1/p[y] overflows fp16
    y = torch.randint(0, 40, (16,), generator=torch.Generator().manual_seed(2))
    (-tt.softmax(x).gather(1, y.view(-1, 1)).float().log().sum()).backward()
    ref = torch.softmax(x.detach().float(), -1)
    ref[torch.arange(16), y] -= 1
    close(x.grad, ref, 5e-3)


@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_gradient_matches_torch(deterministic):
    V, D = 30, 8
    w = rnd(V, D)
    idx = torch.randint(0, V, (5, 11), generator=torch.Generator().manual_seed(3))
    out, (gw,) = grads(lambda t: tt.embedding(t, idx.to(torch.int32), deterministic), w)
    ref, (rw,) = grads(lambda t: torch.nn.functional.embedding(idx, t.float()).half(), w)
    assert torch.equal(out, ref)
    close(gw, rw, 1e-2)


def test_modules_match_torch():
    lin = torch.nn.Linear(24, 10)
    tl = tt.Linear.from_torch(lin)
    assert tuple(tl.weight.shape) == (24, 10) and tl.weight.dtype == torch.float16
    x = rnd(2, 3, 24)
    y = tl(x)
    assert y.shape == (2, 3, 10) and y.dtype == torch.float32
    close(y, lin(x.float()), 1e-2)
    assert tt.Linear(24, 10, out_dtype=torch.float16)(x).dtype == torch.float16
    master = tt.Linear.from_torch(lin, dtype=torch.float32)
    master(x).sum().backward()
    assert master.weight.grad.dtype == torch.float32 and master.bias.grad is not None
    emb = tt.Embedding(20, 6)
    assert torch.equal(emb(torch.tensor([[3, 19]])), emb.weight[[3, 19]].unsqueeze(0))
    close(tt.Softmax()(x), torch.softmax(x.float(), -1), 2e-3)


def test_linear_state_dict_keeps_its_layout():
    tl = tt.Linear(6, 6)
    tl2 = tt.Linear(6, 6)
    tl2.load_state_dict(tl.state_dict())  # its own: loads
    assert torch.equal(tl2.weight, tl.weight)
    # a torch.nn.Linear's (weight [out, in]): refused even where the shapes agree
    with pytest.raises(RuntimeError, match="weight layout"):
        tl2.load_state_dict(torch.nn.Linear(6, 6).half().state_dict())
    with pytest.raises(RuntimeError, match="weight layout"):
        tl2.load_state_dict({"weight": tl.weight, "bias": tl.bias, "_extra_state": {"weight_layout": "out_in"}})


def test_example_moe_tracks_pytorch_on_cpu():
    # examples/moe_train.py at a small size on the CPU references: the same
    # model (router, top-2 experts of tokitai Linear layers) against PyTorch
    # from the same seed. The 200-step runs are the GPU test's.
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    try:
        import moe_train
    finally:
        sys.path.pop(0)
    a = moe_train.train("tokitai", "eager", 12, 7, "cpu", tokens=512)
    b = moe_train.train("torch", "eager", 12, 7, "cpu", tokens=512)
    c = moe_train.compare(a["losses"], b["losses"])
    assert c["first_gap"] < 1e-3 and c["max_rel_gap"] < 0.01, c
    assert a["losses"][-1] < 0.8 * a["losses"][0], a["losses"]


# ----------------------------------------------------------------- errors


def test_clear_errors():
    a, b = rnd(4, 8), rnd(8, 3)
    with pytest.raises(TypeError, match="a must be torch.float16, got torch.float32"):
        tt.gemm(a.float(), b)
    with pytest.raises(ValueError, match="disagree on K"):
        tt.gemm(a, rnd(7, 3))
    with pytest.raises(ValueError, match="must be 2-D"):
        torch.ops.tokitai.gemm_f16_fwd(rnd(2, 4, 8), b)
    with pytest.raises(TypeError, match="idx must be torch.int32, got torch.int64"):
        tt.embedding(rnd(10, 4), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="dim=-1"):
        tt.softmax(a, dim=0)
    with pytest.raises(ValueError, match="dim=-1"):
        tt.Softmax(dim=0)
    with pytest.raises(TypeError, match="input must be torch.float16"):
        tt.Linear(8, 3)(a.float())
    with pytest.raises(ValueError, match="has 7 features, the layer takes 8"):
        tt.Linear(8, 3)(rnd(2, 7))


# ------------------------------------------------------ meta and fake tensors


def _meta_cases(dev):
    h = dict(dtype=torch.float16, device=dev)
    i = dict(dtype=torch.int32, device=dev)
    return [
        ("gemm_f16_fwd", (torch.empty(5, 7, **h), torch.empty(7, 3, **h)), (5, 3), torch.float32),
        ("gemm_f16_grad_a", (torch.empty(5, 3, **h), torch.empty(7, 3, **h)), (5, 7), torch.float16),
        ("gemm_f16_grad_b", (torch.empty(5, 7, **h), torch.empty(5, 3, **h)), (7, 3), torch.float16),
        ("softmax_f16_fwd", (torch.empty(4, 9, **h),), (4, 9), torch.float16),
        ("softmax_xent_f16_bwd", (torch.empty(4, 9, **h), torch.empty(4, 9, **h)), (4, 9), torch.float16),
        ("embedding_f16_fwd", (torch.empty(10, 6, **h), torch.empty(2, 3, **i)), (2, 3, 6), torch.float16),
        ("embedding_f16_bwd", (torch.empty(2, 3, 6, **h), torch.empty(2, 3, **i), 10, True), (10, 6), torch.float16),
    ]


@pytest.mark.parametrize("case", range(7), ids=OPS)
def test_meta_tensors(case):
    name, args, shape, dtype = _meta_cases("meta")[case]
    out = getattr(torch.ops.tokitai, name)(*args)
    assert (out.device.type, tuple(out.shape), out.dtype) == ("meta", shape, dtype)


def test_fake_tensors():
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        for name, args, shape, dtype in _meta_cases("cpu"):
            out = getattr(torch.ops.tokitai, name)(*args)
            assert (tuple(out.shape), out.dtype) == (shape, dtype), name
            assert type(out).__name__ == "FakeTensor"


def test_meta_checks_shapes():
    with pytest.raises(ValueError, match="disagree on K"):
        torch.ops.tokitai.gemm_f16_fwd(torch.empty(2, 3, dtype=torch.float16, device="meta"),
                                       torch.empty(4, 5, dtype=torch.float16, device="meta"))


# --------------------------------------------------------- the device path


@pytest.mark.parametrize("fast", [True, False], ids=["C extension", "ctypes"])
def test_stub_device_path_reaches_the_library(cache_dir, fast):
    if fast and tt._fast is None:
        pytest.skip("tokitai_jit._fast is not built in this tree (pip install builds it; "
                    "the test python_pip_venv runs this path)")
    prev = tt.set_fast_path(fast)
    try:
        with tj.Context(backend="stub", cache_dir=cache_dir, build_mode="sync") as ctx, tt.use_context(ctx):
            a, b = rnd(4, 8), rnd(8, 16)
            assert tt.gemm(a, b).shape == (4, 16)
            assert torch.ops.tokitai.gemm_f16_grad_a(rnd(4, 16), b).shape == (4, 8)
            tt.softmax(rnd(3, 40))
            torch.ops.tokitai.softmax_xent_f16_bwd(rnd(3, 40), rnd(3, 40))
            idx = torch.tensor([1, 2, 3], dtype=torch.int32)
            tt.embedding(rnd(10, 8), idx)
            torch.ops.tokitai.embedding_f16_bwd(rnd(3, 8), idx, 10, True)
            assert ctx.stats().compiles >= 5
    finally:
        tt.set_fast_path(prev)


def test_backward_on_another_thread_uses_the_forward_context(cache_dir, monkeypatch):
    # PyTorch runs a CUDA backward on its own threads; use_context's setting
    # must reach the backward operators there too (else they would run on
    # the default context, here: the CPU references).
    import threading

    calls = []
    launch = tt._launch
    monkeypatch.setattr(tt, "_launch", lambda op, h, *a: (calls.append((op, h)), launch(op, h, *a)))
    with tj.Context(backend="stub", cache_dir=cache_dir, build_mode="sync") as ctx:
        a = rnd(4, 8).requires_grad_()
        b = rnd(8, 16).requires_grad_()
        x = rnd(3, 40).requires_grad_()
        with tt.use_context(ctx):
            c = tt.gemm(a, b)
            s = tt.softmax(x)
        del calls[:]
        errors = []

        def backward():
            try:
                (c.sum() + s.float().sum()).backward()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t = threading.Thread(target=backward)
        t.start()
        t.join()
        assert not errors, errors
        # grad_a, grad_b and the softmax backward, all on the stub context
        assert sorted(calls) == sorted([("gemm_f16_grad_a", ctx._handle()), ("gemm_f16_grad_b", ctx._handle()),
                                        ("softmax_xent_f16_bwd", ctx._handle())]), calls


# ------------------------------------------------------------- torch.compile


@NEEDS_24
def test_compile_fullgraph_cpu():
    lin, emb = tt.Linear(16, 32, dtype=torch.float32), tt.Embedding(40, 16, dtype=torch.float32)

    def f(idx):
        return tt.softmax(lin(emb(idx)).half()).float().sum()

    idx = torch.randint(0, 40, (3, 5), dtype=torch.int32)
    ref = f(idx)
    ref.backward()
    g0 = lin.weight.grad.clone()
    lin.weight.grad = None
    got = torch.compile(f, fullgraph=True)(idx)
    got.backward()
    assert abs(got.item() - ref.item()) < 1e-2
    close(lin.weight.grad, g0, 1e-3)



@pytest.mark.parametrize("fast", [False, True], ids=["ctypes", "extension"])
def test_device_path_arguments(cache_dir, monkeypatch, fast):
    # What reaches the library on the device path: dimensions, leading
    # dimensions (padded rows passed as they are, other layouts copied),
    # output strides, the embedding's count and flags; through ctypes and
    # through the C extension (whose common case is inlined in the ops).
    if fast and tt._fast is None:
        pytest.skip("the C extension tokitai_jit._fast is not built")
    calls = []
    if fast:
        real, names = tt._fast, {v: k for k, v in tt._KIND.items()}

        class Recorder:
            @staticmethod
            def call(kind, addr, ctx, *a):
                calls.append((names[kind], a))
                return real.call(kind, addr, ctx, *a)

        monkeypatch.setattr(tt, "_fast", Recorder)
    else:
        launch = tt._launch
        monkeypatch.setattr(tt, "_launch", lambda op, ctx, *a: (calls.append((op, a)), launch(op, ctx, *a)))
    monkeypatch.setattr(tt, "_USE_FAST", fast)
    with tj.Context(backend="stub", cache_dir=cache_dir) as ctx, tt.use_context(ctx):
        a = rnd(4, 16)[:, :8]  # row stride 16
        tt.gemm(a, rnd(8, 5))
        tt.gemm(a, rnd(5, 8).t())  # transposed: copied, ldb = 5
        tt.softmax(rnd(3, 40))
        torch.ops.tokitai.gemm_f16_grad_b(a, rnd(4, 5))
        idx = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
        tt.embedding(rnd(10, 8), idx)
        torch.ops.tokitai.embedding_f16_bwd(rnd(2, 3, 8), idx, 10, True)
    pick = {"gemm_f16_fwd": (0, 1, 2, 4, 6, 8), "gemm_f16_grad_b": (0, 1, 2, 4, 6, 8),
            "softmax_f16_fwd": (0, 1, 3, 5), "embedding_f16_fwd": (0, 1, 3), "embedding_f16_bwd": (0, 1, 3, 6)}
    got = [(op, tuple(a[i] for i in pick[op])) for op, a in calls]
    assert got == [
        ("gemm_f16_fwd", (4, 5, 8, 16, 5, 5)),  # M, N, K, lda, ldb, ldc
        ("gemm_f16_fwd", (4, 5, 8, 16, 5, 5)),
        ("softmax_f16_fwd", (3, 40, 40, 40)),  # rows, cols, ld_in, ld_out
        ("gemm_f16_grad_b", (4, 5, 8, 16, 5, 5)),
        ("embedding_f16_fwd", (10, 8, 6)),  # V, D, Q
        ("embedding_f16_bwd", (10, 8, 6, 1)),  # V, D, Q, flags
    ]
