"""tokitai_jit.torch on a CUDA device: operator values against PyTorch,
gradients against PyTorch's own, torch.compile(fullgraph=True) with and
without CUDA graphs, manual graph capture, int32 bad_count, and the MoE
training example (200 steps, against plain PyTorch from the same seed)."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to PyTorch", allow_module_level=True)

import tokitai_jit.torch as tt  # noqa: E402

pytestmark = pytest.mark.gpu
DEV = "cuda"
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def close(x, ref, atol, rtol=2e-2):
    x, ref = x.float(), ref.float()
    err = (x - ref).abs().max().item()
    lim = atol + rtol * ref.abs().max().item()
    assert err <= lim, "max |err| %.4g > %.4g" % (err, lim)


SHAPES = [(1, 8, 8), (37, 64, 96), (256, 512, 128), (1153, 1024, 256), (100, 200, 72)]


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemm_ops_match_torch(M, N, K):
    g = torch.Generator(device=DEV).manual_seed(M * 7 + N)
    a = torch.randn(M, K, device=DEV, generator=g).half()
    b = torch.randn(K, N, device=DEV, generator=g).half()
    gc = torch.randn(M, N, device=DEV, generator=g).half()
    c = torch.ops.tokitai.gemm_f16_fwd(a, b)
    assert c.dtype == torch.float32 and c.shape == (M, N)
    close(c, a.float() @ b.float(), 1e-2, 1e-3)
    close(torch.ops.tokitai.gemm_f16_grad_a(gc, b), gc.float() @ b.float().t(), 2e-2)
    close(torch.ops.tokitai.gemm_f16_grad_b(a, gc), a.float().t() @ gc.float(), 2e-2)


def test_gemm_takes_padded_rows_and_copies_transposed():
    a = torch.randn(64, 80, device=DEV).half()[:, :48]  # row stride 80
    b = torch.randn(32, 48, device=DEV).half().t()  # column stride 48: copied
    close(tt.gemm(a, b), a.float() @ b.float(), 1e-2, 1e-3)


@pytest.mark.parametrize("rows,cols", [(1, 7), (33, 128), (512, 1000), (4096, 1024)])
def test_softmax_ops_match_torch(rows, cols):
    x = (torch.randn(rows, cols, device=DEV) * 3).half()
    s = torch.ops.tokitai.softmax_f16_fwd(x)
    close(s, torch.softmax(x.float(), -1), 2e-3)
    g = torch.randn(rows, cols, device=DEV).half()
    ref = s.float() * (g.float() - (g.float() * s.float()).sum(-1, keepdim=True))
    close(torch.ops.tokitai.softmax_xent_f16_bwd(s, g), ref, 2e-3)


@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_ops_match_torch(deterministic):
    V, D = 1000, 96
    w = torch.randn(V, D, device=DEV).half()
    idx = torch.randint(0, V, (8, 300), device=DEV, dtype=torch.int32)
    out = torch.ops.tokitai.embedding_f16_fwd(w, idx)
    assert out.shape == (8, 300, D)
    assert torch.equal(out, w[idx.long()])
    go = torch.randn(8, 300, D, device=DEV).half()
    gw = torch.ops.tokitai.embedding_f16_bwd(go, idx, V, deterministic)
    ref = torch.zeros(V, D, device=DEV).index_add_(0, idx.view(-1).long(), go.view(-1, D).float())
    close(gw, ref, 1e-2)
    if deterministic:
        assert torch.equal(gw, torch.ops.tokitai.embedding_f16_bwd(go, idx, V, True))


def test_embedding_bad_count_int32():
    w = torch.randn(10, 8, device=DEV).half()
    idx = torch.tensor([0, 11, -1, 3], device=DEV, dtype=torch.int32)
    ctx = tt.context_for(DEV)
    for dtype in (torch.int32,):
        bad = torch.zeros(1, device=DEV, dtype=dtype)
        out = ctx.embedding_f16_fwd(w, idx, bad_count=bad)
        torch.cuda.synchronize()
        assert bad.item() == 2
        assert out[1].abs().sum().item() == 0 and torch.equal(out[3], w[3])


# ------------------------------------------------------------- gradients


def _grads(fn, *inputs):
    ins = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*ins)
    g = torch.randn_like(out.float()).to(out.dtype)
    out.backward(g)
    return out.detach(), [t.grad for t in ins if t.is_floating_point()]


@pytest.mark.parametrize("M,N,K", [(64, 96, 48), (300, 256, 128), (7, 8, 40)])
@pytest.mark.parametrize("via", ["function", "op"])
def test_gemm_gradients_match_torch(M, N, K, via):
    torch.manual_seed(M + N + K)
    a, b = torch.randn(M, K, device=DEV).half(), torch.randn(K, N, device=DEV).half()
    torch.manual_seed(1)
    f = tt.gemm if via == "function" else torch.ops.tokitai.gemm_f16_fwd
    out, (ga, gb) = _grads(f, a, b)
    torch.manual_seed(1)
    ref, (ra, rb) = _grads(lambda x, y: (x.float() @ y.float()), a, b)
    close(out, ref, 1e-2, 1e-3)
    close(ga, ra, 3e-2)
    close(gb, rb, 3e-2)


@pytest.mark.parametrize("via", ["function", "op"])
def test_softmax_gradient_matches_torch(via):
    x = (torch.randn(200, 300, device=DEV) * 2).half()
    f = tt.softmax if via == "function" else torch.ops.tokitai.softmax_f16_fwd
    torch.manual_seed(2)
    out, (gx,) = _grads(f, x)
    torch.manual_seed(2)
    ref, (rx,) = _grads(lambda t: torch.softmax(t.float(), -1).half(), x)
    close(out, ref, 2e-3)
    close(gx, rx, 5e-3)


def test_softmax_cross_entropy_gradient():
    # -log softmax(x)[y] through the softmax/xent backward: x.grad = s - onehot
    x = torch.randn(128, 500, device=DEV).half().requires_grad_()
    y = torch.randint(0, 500, (128,), device=DEV)
    s = tt.softmax(x)
    (-s.gather(1, y.view(-1, 1)).float().log().sum()).backward()
    ref = torch.softmax(x.detach().float(), -1)
    ref[torch.arange(128), y] -= 1
    close(x.grad, ref, 5e-3)


@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_gradient_matches_torch(deterministic):
    V, D = 300, 64
    w = torch.randn(V, D, device=DEV).half()
    idx = torch.randint(0, V, (4, 500), device=DEV)
    torch.manual_seed(3)
    out, (gw,) = _grads(lambda t: tt.embedding(t, idx.to(torch.int32), deterministic), w)
    torch.manual_seed(3)
    ref, (rw,) = _grads(lambda t: torch.nn.functional.embedding(idx, t.float()).half(), w)
    assert torch.equal(out, ref)
    close(gw, rw, 2e-2)


def test_modules_match_torch():
    lin = torch.nn.Linear(96, 160).to(DEV)
    tl = tt.Linear.from_torch(lin)
    x = torch.randn(3, 5, 96, device=DEV).half()
    y = tl(x)
    assert y.shape == (3, 5, 160) and y.dtype == torch.float32
    close(y, lin(x.float()), 2e-2)
    assert tt.Linear.from_torch(lin, out_dtype=torch.float16)(x).dtype == torch.float16
    with pytest.raises(TypeError, match="float16"):
        tl(x.float())
    emb = tt.Embedding(50, 16).to(DEV)
    assert torch.equal(emb(torch.tensor([[1, 49]], device=DEV)), emb.weight[[1, 49]].unsqueeze(0))
    sm = tt.Softmax()
    close(sm(x), torch.softmax(x.float(), -1), 2e-3)
    with pytest.raises(ValueError, match="dim=-1"):
        tt.Softmax(dim=0)


# ------------------------------------------------------ compile and graphs


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = tt.Embedding(100, 64, dtype=torch.float32)
        self.lin = tt.Linear(64, 100, dtype=torch.float32)

    def forward(self, idx):
        h = self.emb(idx)
        p = tt.softmax(self.lin(h).half())
        return -p.float().clamp_min(1e-6).log().mean()


def _run_tiny(model, steps=3):
    idx = torch.randint(0, 100, (16, 32), device=DEV, dtype=torch.int32, generator=torch.Generator(DEV).manual_seed(0))
    out = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        loss = model(idx)
        loss.backward()
        out.append((loss.item(), model.lin.weight.grad.clone(), model.emb.weight.grad.clone()))
    return out


@pytest.mark.skipif(not tt.HAS_CUSTOM_OP, reason="torch.library.custom_op needs PyTorch >= 2.4")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compile_fullgraph_matches_eager(mode):
    torch.manual_seed(0)
    model = Tiny().to(DEV)
    eager = _run_tiny(model)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    got = _run_tiny(compiled)
    if mode == "reduce-overhead":
        # Inductor counts each graph it could not put in a CUDA graph
        assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    for (l0, w0, e0), (l1, w1, e1) in zip(eager, got):
        assert abs(l0 - l1) < 1e-3
        close(w1, w0, 1e-3)
        close(e1, e0, 1e-3)


@pytest.mark.skipif(not tt.HAS_CUSTOM_OP, reason="torch.library.custom_op needs PyTorch >= 2.4")
def test_compile_has_no_graph_break():
    torch._dynamo.reset()
    model = Tiny().to(DEV)
    idx = torch.randint(0, 100, (16, 32), device=DEV, dtype=torch.int32)
    ex = torch._dynamo.explain(model)(idx)
    assert ex.graph_break_count == 0, ex.break_reasons
    assert ex.graph_count == 1


def test_cuda_graph_capture_replays():
    a = torch.randn(512, 256, device=DEV).half()
    b = torch.randn(256, 384, device=DEV).half()
    tt.gemm(a, b)  # compiled and warmed outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c = tt.gemm(a, b)
        s = tt.softmax(c.half())
    a.copy_(torch.randn_like(a))
    g.replay()
    torch.cuda.synchronize()
    close(c, a.float() @ b.float(), 1e-2, 1e-3)
    close(s, torch.softmax((a.float() @ b.float()).half().float(), -1), 3e-3)


# ------------------------------------------------------------ the example


@pytest.mark.parametrize("mode", ["eager", pytest.param("default", marks=pytest.mark.skipif(
    not tt.HAS_CUSTOM_OP, reason="torch.compile of the operators needs PyTorch >= 2.4"))])
def test_moe_example_tracks_pytorch(mode):
    # The curves' tolerance is the example's compare(): 5% per step, against
    # at least 1% of the first loss (examples/moe_train.py).
    if os.environ.get("TK_MOE_MODES") and mode not in os.environ["TK_MOE_MODES"].split(","):
        pytest.skip("TK_MOE_MODES=%s" % os.environ["TK_MOE_MODES"])
    sys.path.insert(0, EXAMPLES)
    try:
        import moe_train
    finally:
        sys.path.pop(0)
    a = moe_train.train("tokitai", mode, 200, 1234, DEV)
    b = moe_train.train("torch", mode, 200, 1234, DEV)
    c = moe_train.compare(a["losses"], b["losses"])
    print(mode, c, "step ms %.3f / %.3f" % (a["step_ms"], b["step_ms"]))
    assert c["first_gap"] < 1e-2
    assert c["max_rel_gap"] < 0.05, c
    assert a["losses"][-1] < 0.5 * a["losses"][0]
