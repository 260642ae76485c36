"""The PyTorch code paths without PyTorch: a stand-in module named "torch"
with the few attributes the package reads (Tensor.data_ptr/shape/stride/
dtype/device/layout, torch.empty, torch.cuda.current_stream, Stream,
record_stream), so a typo there fails here and not only on the GPU machine.
Skipped where the real PyTorch is installed (test_gpu.py covers it there)."""

from __future__ import annotations

import ctypes
import math
import sys
import types

import pytest

import tokitai_jit as tj
from tokitai_jit import _arrays

try:
    import torch as _real_torch  # noqa: F401
except Exception:  # noqa: BLE001
    _real_torch = None

pytestmark = pytest.mark.skipif(_real_torch is not None, reason="the real PyTorch is installed")


class Dtype:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __str__(self):
        return "torch." + self.name


class Device:
    def __init__(self, spec):
        t, _, i = str(spec).partition(":")
        self.type, self.index = t, (int(i) if i else None)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class Tensor:
    def __init__(self, shape, dtype, device="cuda:0", strides=None):
        self.shape, self.dtype, self.device = tuple(shape), dtype, Device(device)
        self._strides = strides or _arrays._row_major(self.shape)
        span = 1 + sum((n - 1) * s for n, s in zip(self.shape, self._strides))
        self._buf = ctypes.create_string_buffer(max(span, 1) * dtype.size + 16)
        self.layout = STRIDED
        self.recorded = []

    def data_ptr(self):
        return (ctypes.addressof(self._buf) + 15) // 16 * 16

    def stride(self):
        return self._strides

    def record_stream(self, s):
        self.recorded.append(s)


STRIDED = object()


class Stream:
    def __init__(self, handle=0x5000, device_index=0):
        self.cuda_stream, self.device_index = handle, device_index


def make_torch():
    m = types.ModuleType("torch")
    m.Tensor, m.strided = Tensor, STRIDED
    for name, size in (("float16", 2), ("float32", 4), ("int32", 4), ("int64", 8), ("uint32", 4)):
        setattr(m, name, Dtype(name, size))
    m.empty = lambda shape, dtype, device: Tensor(shape, dtype, device)
    current = Stream(0xC0FFEE)
    m.cuda = types.SimpleNamespace(
        Stream=Stream, current_stream=lambda device=None: current, current_device=lambda: 0
    )
    return m


@pytest.fixture
def torch(monkeypatch):
    m = make_torch()
    monkeypatch.setitem(sys.modules, "torch", m)
    return m


def test_view_reads_tensors_directly(torch):
    t = Tensor((4, 6), torch.float16, strides=(8, 1))
    v = _arrays.view(t, "t")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device, v.framework) == (
        t.data_ptr(), (4, 6), (8, 1), "float16", (_arrays.DL_CUDA, 0), "torch")
    assert _arrays.view(Tensor((2,), torch.int32, "cpu"), "c").device == (_arrays.DL_CPU, 0)
    assert _arrays.view(Tensor((2,), torch.int32, "cuda"), "c").device == (_arrays.DL_CUDA, 0)
    with pytest.raises(ValueError, match="mps"):
        _arrays.view(Tensor((2,), torch.int32, "mps:0"), "m")
    sparse = Tensor((2,), torch.float16)
    sparse.layout = "sparse_coo"
    with pytest.raises(TypeError, match="dense"):
        _arrays.view(sparse, "s")
    assert _arrays.is_array(t)


def test_default_stream_is_torchs_current(torch):
    v = _arrays.view(Tensor((2, 2), torch.float16), "t")
    assert _arrays.default_stream([v]) == 0xC0FFEE


def test_outputs_are_tensors(ctx, torch):
    x = Tensor((3, 40), torch.float16)
    y = ctx.softmax_f16_fwd(x)
    assert isinstance(y, Tensor) and y.shape == (3, 40) and y.dtype is torch.float16
    assert str(y.device) == "cuda:0" and y.recorded == []
    c = ctx.gemm_f16_fwd(Tensor((4, 8), torch.float16), Tensor((8, 16), torch.float16))
    assert c.shape == (4, 16) and c.dtype is torch.float32
    e = ctx.embedding_f16_fwd(Tensor((10, 8), torch.float16), Tensor((2, 3), torch.int32))
    assert e.shape == (2, 3, 8)


def test_output_on_a_side_stream_is_recorded(ctx, torch):
    s = Stream(0x7000)
    y = ctx.softmax_f16_fwd(Tensor((3, 40), torch.float16), stream=s)
    assert y.recorded == [s]


def test_int64_indices_get_a_hint(ctx, torch):
    with pytest.raises(TypeError, match=r"idx.to\(torch.int32\)"):
        ctx.embedding_f16_fwd(Tensor((10, 8), torch.float16), Tensor((4,), torch.int64))


def test_cpu_tensor_rejected_on_a_cuda_context(ctx, torch, monkeypatch):
    monkeypatch.setattr(ctx, "_backend_name", "cuda")
    with pytest.raises(ValueError, match="x is on cpu:0"):
        ctx.softmax_f16_fwd(Tensor((2, 8), torch.float16, "cpu"))
    with pytest.raises(ValueError, match="x is on cuda:1"):
        ctx.softmax_f16_fwd(Tensor((2, 8), torch.float16, "cuda:1"))
    assert ctx.stats().compiles == 0


def test_kernel_arguments_from_tensors(ctx, torch):
    k = tj.Kernel('extern "C" __global__ void k(float *p, int n) {}', "k", signature="ptr, i32")
    t = Tensor((math.prod((4, 4)),), torch.float32)
    k[1, 32](t, 16, context=ctx)
    assert ctx.stats().compiles == 1
