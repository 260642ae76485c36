"""C++ kernels (not extern "C") named as written and launched with no
signature on a real device: the arguments are packed by the layout the
library reads from the code object, for every size class (i8, i16, i32, i64,
f16, f32, f64, a struct by value, pointers), and the kernel echoes what it
received. Skips (with the reason) without PyTorch and a device."""

from __future__ import annotations

import ctypes

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

SRC = r"""
struct Pair { float a; double b; };
__global__ void echo_every(signed char c, short s, int i, long long l, float f, double d,
                           __half h, Pair pr, unsigned u, long long *oi, double *od)
{
    if (threadIdx.x != 0) return;
    oi[0] = c; oi[1] = s; oi[2] = i; oi[3] = l; oi[4] = u;
    od[0] = f; od[1] = d; od[2] = __half2float(h); od[3] = pr.a; od[4] = pr.b;
}
__global__ void saxpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


class Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_double)]


@pytest.fixture(scope="module")
def gctx(tmp_path_factory):
    c = tj.Context(device=0, cache_dir=str(tmp_path_factory.mktemp("gpu-infer-cache")))
    yield c
    c.close()


def test_every_size_class_inferred(gctx):
    k = tj.Kernel(SRC, "echo_every")
    oi = torch.zeros(5, dtype=torch.int64, device=DEV)
    od = torch.zeros(5, dtype=torch.float64, device=DEV)
    k[1, 32](-5, -300, -70000, -(1 << 40), 1.5, 0.1, 1.0, Pair(2.5, -7.25), 4000000000, oi, od,
             context=gctx)
    torch.cuda.synchronize()
    assert oi.tolist() == [-5, -300, -70000, -(1 << 40), 4000000000]
    assert od.tolist() == [1.5, 0.1, 1.0, 2.5, -7.25]
    kinds = [p.kind.name for p in k.parameters(gctx)]
    assert kinds == ["INT", "INT", "INT", "INT", "FLOAT", "FLOAT", "FLOAT", "STRUCT", "UINT",
                     "POINTER", "POINTER"]
    with pytest.raises(TypeError, match="argument 9 .*a pointer"):
        k[1, 32](-5, -300, -70000, 1, 1.5, 0.1, 1.0, Pair(0, 0), 1, 2.0, od, context=gctx)


def test_saxpy_matches_torch(gctx):
    k = tj.Kernel(SRC, "saxpy")
    n = 10000
    x = torch.randn(n, device=DEV)
    y = torch.randn(n, device=DEV)
    want = y + 0.5 * x
    k[(n + 255) // 256, 256](y, x, 0.5, n, context=gctx)
    torch.cuda.synchronize()
    assert torch.allclose(y, want, rtol=1e-6, atol=1e-6)
