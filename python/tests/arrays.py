"""Test helpers: host-memory arrays that speak __cuda_array_interface__ or
DLPack, for the stub backend (whose "device" memory is host memory)."""

from __future__ import annotations

import ctypes
import math

from tokitai_jit import _arrays

TYPESTR = dict(_arrays.TYPESTR)
TYPESTR["bfloat16"] = "<V2"


class CaiArray:
    """Host memory with a __cuda_array_interface__ (strides in elements,
    None = packed). ``offset`` shifts the pointer by bytes (misalignment)."""

    def __init__(self, shape, dtype="float16", strides=None, offset=0, readonly=False, device=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        size = _arrays.itemsize(dtype)
        span = 1
        if strides is None:
            span = math.prod(self.shape)
        else:
            span = 1 + sum((n - 1) * s for n, s in zip(self.shape, strides))
        self.buf = ctypes.create_string_buffer(max(span, 1) * size + offset + 16)
        base = ctypes.addressof(self.buf)
        self.ptr = (base + 15) // 16 * 16 + offset
        self.strides = None if strides is None else tuple(s * size for s in strides)
        self.readonly = readonly
        self.device = device  # DLPack (type, id) or None

    @property
    def __cuda_array_interface__(self):
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": TYPESTR[self.dtype],
            "data": (self.ptr, self.readonly),
            "strides": self.strides,
        }

    def __getattr__(self, name):
        if name == "__dlpack_device__" and self.__dict__.get("device") is not None:
            return lambda: self.__dict__["device"]
        raise AttributeError(name)


_DL = {"float16": (2, 16), "float32": (2, 32), "int32": (0, 32), "int64": (0, 64), "uint32": (1, 32)}

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DlpackArray:
    """Host memory exported through __dlpack__ (a real DLManagedTensor in a
    "dltensor" capsule), as NumPy or a framework would export it."""

    def __init__(self, shape, dtype="float16", device=(1, 0), strides=None, byte_offset=0):
        self.shape = tuple(shape)
        n = math.prod(self.shape)
        self.buf = ctypes.create_string_buffer(max(n, 1) * _arrays.itemsize(dtype) + 64)
        self.c_shape = (ctypes.c_int64 * len(shape))(*shape)
        self.c_strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.mt = _arrays.DLManagedTensor()
        t = self.mt.dl_tensor
        t.data = ctypes.addressof(self.buf)
        t.device.device_type, t.device.device_id = device
        t.ndim = len(shape)
        code, bits = _DL[dtype]
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = self.c_shape
        t.strides = self.c_strides
        t.byte_offset = byte_offset
        self.device = device
        self.exports = 0

    def __dlpack__(self, stream=None):
        self.exports += 1
        return _new_capsule(ctypes.addressof(self.mt), b"dltensor", None)

    def __dlpack_device__(self):
        return self.device
