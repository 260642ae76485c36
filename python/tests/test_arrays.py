"""Reading arrays (__cuda_array_interface__, DLPack) and stream arguments."""

from __future__ import annotations

import ctypes

import pytest

from tokitai_jit import _arrays

from arrays import CaiArray, DlpackArray


def test_cai_packed():
    a = CaiArray((3, 5), "float16")
    v = _arrays.view(a, "a")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.readonly) == (a.ptr, (3, 5), (5, 1), "float16", False)


def test_cai_strides_are_converted_to_elements():
    a = CaiArray((4, 3), "float32", strides=(8, 1))
    assert _arrays.view(a, "a").strides == (8, 1)


def test_cai_dtypes():
    for dt in ("float16", "float32", "int32", "uint32", "int64", "bfloat16"):
        assert _arrays.view(CaiArray((2,), dt), "x").dtype == dt


def test_cai_stride_not_multiple_of_element():
    a = CaiArray((2, 2), "float32")
    a.strides = (6, 4)
    with pytest.raises(ValueError, match="not multiples"):
        _arrays.view(a, "a")


def test_cai_device_from_dlpack_device():
    a = CaiArray((2,), device=(2, 3))
    assert _arrays.view(a, "a").device == (2, 3)


def test_dlpack_view_reads_the_tensor():
    d = DlpackArray((2, 6), "float32", device=(2, 1))
    v = _arrays.view(d, "d")
    assert v.ptr == ctypes.addressof(d.buf)
    assert (v.shape, v.strides, v.dtype, v.device) == ((2, 6), (6, 1), "float32", (2, 1))
    assert d.exports == 1
    assert v.keepalive is not None


def test_dlpack_strides_and_offset():
    d = DlpackArray((2, 3), "int32", strides=(4, 1), byte_offset=8)
    v = _arrays.view(d, "d")
    assert v.strides == (4, 1)
    assert v.ptr == ctypes.addressof(d.buf) + 8


def test_not_an_array():
    with pytest.raises(TypeError, match="__cuda_array_interface__ or __dlpack__"):
        _arrays.view([1, 2, 3], "x")
    with pytest.raises(TypeError, match="got None"):
        _arrays.view(None, "x")


def test_stream_handles():
    class TorchLike:
        cuda_stream = 0x1234
        device_index = 0

    class CupyLike:
        ptr = 0x5678
        device_id = 1

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x9A)

    assert _arrays.stream_handle(7) == (7, None)
    assert _arrays.stream_handle(TorchLike()) == (0x1234, 0)
    assert _arrays.stream_handle(CupyLike()) == (0x5678, 1)
    assert _arrays.stream_handle(Protocol()) == (0x9A, None)
    assert _arrays.stream_handle(ctypes.c_void_p(0x42)) == (0x42, None)
    with pytest.raises(TypeError):
        _arrays.stream_handle("s")
    with pytest.raises(TypeError):
        _arrays.stream_handle(True)
    with pytest.raises(ValueError):
        _arrays.stream_handle(-1)


def test_default_stream_without_frameworks_is_zero():
    assert _arrays.default_stream([_arrays.view(CaiArray((1,)), "a")]) == 0
