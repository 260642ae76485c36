"""GPU tests: each operator against PyTorch on the device, the current and a
non-default stream, user kernel launches, CuPy arrays when CuPy is there.

Skipped (with the reason) without PyTorch or without a CUDA/HIP device.
Run: TOKITAI_JIT_LIBRARY=build/libtokitai_jit.so.1 PYTHONPATH=python \
     python3 -m pytest -p no:cacheprovider -rs -v -m gpu python/tests
"""

from __future__ import annotations

import struct

import pytest

import tokitai_jit as tj

pytestmark = pytest.mark.gpu

try:
    import torch
except Exception as e:  # noqa: BLE001 - any import failure means no torch
    torch = None
    _why = "PyTorch is not installed (%s)" % e
else:
    _why = "" if torch.cuda.is_available() else "PyTorch sees no CUDA/HIP device"
if torch is None or _why:
    pytest.skip(_why or "no PyTorch", allow_module_level=True)

DEV = "cuda:0"


@pytest.fixture(scope="module")
def gctx(tmp_path_factory):
    torch.backends.cuda.matmul.allow_tf32 = False
    c = tj.Context(device=0, cache_dir=str(tmp_path_factory.mktemp("gpu-cache")))
    assert c.backend in ("cuda", "hip"), c.backend
    yield c
    c.close()


def gen(seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return g


def randn(shape, seed, scale=1.0, dtype=None):
    x = torch.randn(shape, generator=gen(seed), device=DEV, dtype=torch.float32) * scale
    return x.to(dtype or torch.float16)


# ------------------------------------------------------------------ GEMM

GEMM_SHAPES = [(64, 64, 64), (37, 72, 40), (256, 512, 128), (1, 96, 200)]


@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_gemm_fwd(gctx, M, N, K):
    a, b = randn((M, K), 1, 0.5), randn((K, N), 2, 0.5)
    c = gctx.gemm_f16_fwd(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.shape == (M, N)
    assert c.device == a.device
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, atol=1e-3 * K ** 0.5, rtol=1e-3)


def test_gemm_fwd_padded_rows_and_given_out(gctx):
    M, N, K = 48, 80, 64
    a = randn((M, K + 8), 3, 0.5)[:, :K]
    b = randn((K, N + 24), 4, 0.5)[:, :N]
    out = torch.full((M, N + 8), float("nan"), device=DEV)[:, :N]
    assert gctx.gemm_f16_fwd(a, b, out) is out
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_gemm_grad_a(gctx, M, N, K):
    gc, b = randn((M, N), 5, 0.5), randn((K, N), 6, 0.5)
    ga = gctx.gemm_f16_grad_a(gc, b)
    assert ga.dtype == torch.float16 and ga.shape == (M, K)
    torch.cuda.synchronize()
    ref = gc.double() @ b.double().T
    torch.testing.assert_close(ga.double(), ref, atol=2e-2, rtol=4e-3)


@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_gemm_grad_b(gctx, M, N, K):
    a, gc = randn((M, K), 7, 0.5), randn((M, N), 8, 0.5)
    gb = gctx.gemm_f16_grad_b(a, gc)
    assert gb.dtype == torch.float16 and gb.shape == (K, N)
    torch.cuda.synchronize()
    ref = a.double().T @ gc.double()
    torch.testing.assert_close(gb.double(), ref, atol=2e-2, rtol=4e-3)


# --------------------------------------------------------------- softmax


@pytest.mark.parametrize("rows,cols", [(64, 1000), (8, 32000), (5, 7)])
def test_softmax_fwd(gctx, rows, cols):
    x = randn((rows, cols), 9, 3.0)
    y = gctx.softmax_f16_fwd(x)
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), dim=1)
    torch.testing.assert_close(y.double(), ref, atol=2e-3, rtol=1e-2)


@pytest.mark.parametrize("rows,cols", [(64, 1000), (8, 32000)])
def test_softmax_xent_bwd(gctx, rows, cols):
    s = torch.softmax(randn((rows, cols), 10, 3.0).float(), dim=1).half()
    g = randn((rows, cols), 11)
    out = gctx.softmax_xent_f16_bwd(s, g)
    torch.cuda.synchronize()
    sd, gd = s.double(), g.double()
    ref = sd * (gd - (gd * sd).sum(dim=1, keepdim=True))
    torch.testing.assert_close(out.double(), ref, atol=3e-3, rtol=1e-2)


# ------------------------------------------------------------- embedding


def test_embedding_fwd(gctx):
    V, D, Q = 1000, 128, 300
    w = randn((V, D), 12)
    idx = torch.randint(0, V, (Q,), generator=gen(13), device=DEV, dtype=torch.int32)
    idx[5], idx[17], idx[200] = -1, V, V + 7  # out of range: zero rows, counted
    bad = gctx.array([0], dtype="uint32")
    out = gctx.embedding_f16_fwd(w, idx, bad_count=bad)
    assert out.shape == (Q, D) and out.dtype == torch.float16
    torch.cuda.synchronize()
    ok = (idx >= 0) & (idx < V)
    ref = torch.zeros_like(out)
    ref[ok] = w[idx[ok].long()]
    assert torch.equal(out, ref)
    assert bad.tolist() == [3]


def test_embedding_fwd_2d_indices(gctx):
    w = randn((50, 64), 14)
    idx = torch.randint(0, 50, (4, 6), generator=gen(15), device=DEV, dtype=torch.int32)
    out = gctx.embedding_f16_fwd(w, idx)
    torch.cuda.synchronize()
    assert out.shape == (4, 6, 64)
    assert torch.equal(out, w[idx.long()])


@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_bwd(gctx, deterministic):
    V, D, Q = 500, 64, 2000  # many repeats per row
    gw0 = randn((V, D), 16, 0.1)
    idx = torch.randint(0, V, (Q,), generator=gen(17), device=DEV, dtype=torch.int32)
    go = randn((Q, D), 18, 0.5)
    gw = gw0.clone()
    assert gctx.embedding_f16_bwd(gw, idx, go, deterministic=deterministic) is gw
    torch.cuda.synchronize()
    ref = gw0.double().index_add(0, idx.long(), go.double())
    torch.testing.assert_close(gw.double(), ref, atol=4e-3, rtol=4e-3)
    if deterministic:
        again = gw0.clone()
        gctx.embedding_f16_bwd(again, idx, go, deterministic=True)
        torch.cuda.synchronize()
        assert torch.equal(again, gw)


# ---------------------------------------------------------------- checks


def test_wrong_device_and_dtype_launch_nothing(gctx):
    gctx.wait_builds()  # earlier tests' background builds would move the counters
    before = gctx.stats()
    with pytest.raises(ValueError, match="cpu"):
        gctx.softmax_f16_fwd(torch.zeros((4, 8), dtype=torch.float16))  # a CPU tensor
    with pytest.raises(TypeError, match="float16"):
        gctx.softmax_f16_fwd(torch.zeros((4, 8), device=DEV))
    with pytest.raises(ValueError, match="column stride"):
        gctx.softmax_f16_fwd(randn((8, 4), 19).T)
    with pytest.raises(TypeError, match="int32"):
        gctx.embedding_f16_fwd(randn((10, 8), 20), torch.zeros(4, dtype=torch.int64, device=DEV))
    after = gctx.stats()
    assert (after.compiles, after.memory_hits, after.disk_hits) == (
        before.compiles, before.memory_hits, before.disk_hits)


def test_tensors_that_require_grad(gctx):
    x = randn((16, 100), 26).requires_grad_()
    y = gctx.softmax_f16_fwd(x)
    torch.cuda.synchronize()
    assert not y.requires_grad
    torch.testing.assert_close(y.double(), torch.softmax(x.detach().double(), dim=1), atol=2e-3, rtol=1e-2)


def test_check_run(gctx):
    rep = gctx.check_run("gemm_f16_fwd", (64, 128, 96), seed=5)
    assert rep.passed, rep
    assert rep.kernel_ms > 0


# --------------------------------------------------------------- streams


def test_current_stream_is_the_default(gctx):
    x = randn((64, 1000), 21)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = gctx.softmax_f16_fwd(x)
    s.synchronize()
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), atol=2e-3, rtol=1e-2)


@pytest.mark.skipif(not hasattr(torch.cuda, "_sleep"), reason="this PyTorch has no torch.cuda._sleep")
def test_work_runs_on_the_given_stream(gctx):
    # PyTorch's streams do not synchronise with the default stream: work on
    # `s` queued behind a long sleep is not done when the default stream is.
    x = randn((64, 1000), 22)
    out = torch.zeros_like(x)
    gctx.softmax_f16_fwd(x, out)  # compile and load first
    out.zero_()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(2_000_000_000)
    gctx.softmax_f16_fwd(x, out, stream=s)
    torch.cuda.current_stream().synchronize()
    early = out.clone()  # on the default stream, while s still sleeps
    torch.cuda.current_stream().synchronize()
    assert not s.query(), "the sleep on s ended before the check; the test proves nothing"
    assert torch.count_nonzero(early).item() == 0
    s.synchronize()
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), dim=1), atol=2e-3, rtol=1e-2)


def test_every_operator_on_a_side_stream(gctx):
    # Inputs made on the default stream; each operator enqueued on `s` only.
    M, N, K, V, D, Q = 96, 160, 64, 300, 64, 500
    a, b, gc = randn((M, K), 30, 0.5), randn((K, N), 31, 0.5), randn((M, N), 32, 0.5)
    x, g = randn((M, N), 33, 3.0), randn((M, N), 34)
    w = randn((V, D), 35)
    idx = torch.randint(0, V, (Q,), generator=gen(36), device=DEV, dtype=torch.int32)
    go = randn((Q, D), 37, 0.5)
    gw = torch.zeros((V, D), dtype=torch.float16, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = {
        "fwd": gctx.gemm_f16_fwd(a, b, stream=s),
        "grad_a": gctx.gemm_f16_grad_a(gc, b, stream=s),
        "grad_b": gctx.gemm_f16_grad_b(a, gc, stream=s),
        "softmax": gctx.softmax_f16_fwd(x, stream=s),
    }
    out["xent"] = gctx.softmax_xent_f16_bwd(out["softmax"], g, stream=s)
    out["emb"] = gctx.embedding_f16_fwd(w, idx, stream=s)
    gctx.embedding_f16_bwd(gw, idx, go, deterministic=True, stream=s)
    s.synchronize()
    sm = torch.softmax(x.double(), dim=1)
    torch.testing.assert_close(out["fwd"].double(), a.double() @ b.double(), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(out["grad_a"].double(), gc.double() @ b.double().T, atol=2e-2, rtol=4e-3)
    torch.testing.assert_close(out["grad_b"].double(), a.double().T @ gc.double(), atol=2e-2, rtol=4e-3)
    torch.testing.assert_close(out["softmax"].double(), sm, atol=2e-3, rtol=1e-2)
    sd = out["softmax"].double()
    ref = sd * (g.double() - (g.double() * sd).sum(dim=1, keepdim=True))
    torch.testing.assert_close(out["xent"].double(), ref, atol=3e-3, rtol=1e-2)
    assert torch.equal(out["emb"], w[idx.long()])
    ref_gw = torch.zeros((V, D), dtype=torch.float64, device=DEV).index_add(0, idx.long(), go.double())
    torch.testing.assert_close(gw.double(), ref_gw, atol=4e-3, rtol=4e-3)


def test_raw_stream_handle(gctx):
    a, b = randn((64, 64), 23, 0.5), randn((64, 64), 24, 0.5)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    c = gctx.gemm_f16_fwd(a, b, stream=s.cuda_stream)
    s.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=1e-2, rtol=1e-3)


# ---------------------------------------------------------- user kernels

AXPY = r"""
extern "C" __global__ void axpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
"""

PARAMS = r"""
extern "C" __global__ void params(double *out, long long a, unsigned long long b, double c,
                                  __half h, unsigned int u, signed char s)
{
    out[0] = (double)a;
    out[1] = (double)b;
    out[2] = c;
    out[3] = (double)__half2float(h);
    out[4] = (double)u;
    out[5] = (double)s;
}
"""

REVERSE = r"""
extern "C" __global__ void reverse_block(float *x)
{
    extern __shared__ float buf[];
    unsigned t = threadIdx.x, base = blockIdx.x * blockDim.x;
    buf[t] = x[base + t];
    __syncthreads();
    x[base + t] = buf[blockDim.x - 1 - t];
}
"""


def test_user_kernel_axpy(gctx):
    n = 10_000
    x = torch.randn(n, device=DEV)
    y = torch.randn(n, device=DEV)
    want = 2.5 * x + y
    k = tj.Kernel(AXPY, "axpy", signature="ptr, ptr, f32, i32")
    k[(n + 255) // 256, 256](y, x, 2.5, n, context=gctx)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, want)
    assert k.compile(gctx).origin == tj.Origin.COMPILED


def test_user_kernel_scalar_packing(gctx):
    out = torch.zeros(6, dtype=torch.float64, device=DEV)
    k = tj.Kernel(PARAMS, "params", signature="ptr, i64, u64, f64, f16, u32, i8", context=gctx)
    k[1, 1](out, -(1 << 40), (1 << 53) + 2, 0.1, 0.333, 0xFFFFFFFF, -7)
    torch.cuda.synchronize()
    h = struct.unpack("<e", struct.pack("<e", 0.333))[0]
    assert out.tolist() == [float(-(1 << 40)), float((1 << 53) + 2), 0.1, h, float(0xFFFFFFFF), -7.0]


def test_user_kernel_shared_memory_and_stream(gctx):
    blocks, threads = 8, 128
    x = torch.arange(blocks * threads, dtype=torch.float32, device=DEV)
    want = x.view(blocks, threads).flip(1).reshape(-1).clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    k = tj.Kernel(REVERSE, "reverse_block", signature="float *", context=gctx)
    k[blocks, threads](x, stream=s, shared=threads * 4)
    s.synchronize()
    assert torch.equal(x, want)


def test_user_kernel_compile_error_log(gctx):
    k = tj.Kernel('extern "C" __global__ void broken(int *p) { p[0] = undeclared; }', "broken")
    with pytest.raises(tj.CompileError) as e:
        k.compile(gctx)
    assert "undeclared" in e.value.log


def test_user_kernel_defines(gctx):
    src = 'extern "C" __global__ void fill(float *p) { p[threadIdx.x] = VALUE; }'
    out = torch.zeros(32, device=DEV)
    tj.Kernel(src, "fill", signature="ptr", defines={"VALUE": "3.5f"}, context=gctx)[1, 32](out)
    torch.cuda.synchronize()
    assert torch.all(out == 3.5).item()


# ------------------------------------------------------ DeviceBuffer, CuPy


def test_device_buffers_without_a_framework(gctx):
    a = gctx.array([1.0, 2.0, 3.0, 4.0], (2, 2), "float16")
    b = gctx.array([0.5, 0.0, 0.0, 2.0], (2, 2), "float16")
    c = gctx.gemm_f16_fwd(a, b)
    assert isinstance(c, tj.DeviceBuffer)
    gctx.synchronize()
    assert c.tolist() == [0.5, 4.0, 1.5, 8.0]
    t = torch.as_tensor(c, device=DEV)  # zero-copy through __cuda_array_interface__
    assert t.tolist() == [[0.5, 4.0], [1.5, 8.0]]


def test_cupy_arrays_and_stream(gctx):
    cupy = pytest.importorskip("cupy")
    x = cupy.random.default_rng(25).standard_normal((16, 500), dtype=cupy.float32).astype(cupy.float16)
    cupy.cuda.Device().synchronize()  # x is ready before a non-blocking stream reads it
    s = cupy.cuda.Stream(non_blocking=True)
    y = gctx.softmax_f16_fwd(x, stream=s)
    s.synchronize()
    assert isinstance(y, cupy.ndarray) and y.dtype == cupy.float16
    xd = x.astype(cupy.float64)
    e = cupy.exp(xd - xd.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    assert float(cupy.abs(y.astype(cupy.float64) - ref).max()) < 2e-3
    with s:
        z = gctx.softmax_f16_fwd(x)  # CuPy's current stream
    s.synchronize()
    assert bool((z == y).all())


# ------------------------------------------------------------ the README


def test_readme_example(monkeypatch, tmp_path, capsys):
    import os
    import re

    from conftest import REPO

    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- python-example[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, "the README's Python example was not found"
    monkeypatch.setenv("TOKITAI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    exec(compile(m.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "ContextStats(" in out and "CacheStats(entries=" in out
