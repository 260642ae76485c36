"""Device arrays from other frameworks: __cuda_array_interface__ and DLPack.

``view()`` turns any supported object into an :class:`ArrayView` (pointer,
shape, strides in elements, dtype name, device) without copying and without
importing any framework. ``stream_handle()`` turns a stream argument into the
raw handle the library takes.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

# DLPack device types (dlpack.h)
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_ROCM = 10
DL_ROCM_HOST = 11
DL_CUDA_MANAGED = 13

DEVICE_TYPE_NAMES = {
    DL_CPU: "cpu",
    DL_CUDA: "cuda",
    DL_CUDA_HOST: "cuda_host",
    DL_ROCM: "rocm",
    DL_ROCM_HOST: "rocm_host",
    DL_CUDA_MANAGED: "cuda_managed",
}

_ITEMSIZE = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
}

# typestr (numpy array interface) of the dtypes this package writes
TYPESTR = {
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
}


def itemsize(dtype: str) -> int:
    try:
        return _ITEMSIZE[dtype]
    except KeyError:
        raise TypeError("unknown dtype %r (known: %s)" % (dtype, ", ".join(sorted(_ITEMSIZE))))


@dataclass
class ArrayView:
    """What the library needs to know about one array argument.

    ``strides`` are in elements (row-major when the producer gave none).
    ``device`` is a DLPack (device_type, device_id) pair, or None when the
    producer does not say. ``keepalive`` holds whatever must live as long as
    the pointer is used (a DLPack capsule).
    """

    obj: Any
    name: str
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str
    device: Optional[Tuple[int, int]]
    framework: str
    readonly: bool = False
    keepalive: Any = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def device_str(self) -> str:
        if self.device is None:
            return "an unknown device"
        t, i = self.device
        return "%s:%d" % (DEVICE_TYPE_NAMES.get(t, "device type %d" % t), i)


def framework_of(obj: Any) -> str:
    """"torch", "cupy", "tokitai" or "other", from the object's type."""
    mod = type(obj).__module__ or ""
    top = mod.split(".", 1)[0]
    if top in ("torch", "cupy", "tokitai_jit"):
        return "tokitai" if top == "tokitai_jit" else top
    return "other"


def _row_major(shape: Sequence[int]) -> Tuple[int, ...]:
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _dtype_from_typestr(typestr: str, name: str) -> str:
    if not isinstance(typestr, str) or len(typestr) < 3:
        raise TypeError("%s: bad typestr %r in __cuda_array_interface__" % (name, typestr))
    order, kind, size = typestr[0], typestr[1], typestr[2:]
    if order == ">" and size != "1":
        raise TypeError("%s: big-endian data (%s) is not supported" % (name, typestr))
    try:
        bits = int(size) * 8
    except ValueError:
        raise TypeError("%s: bad typestr %r" % (name, typestr))
    if kind == "f":
        return "float%d" % bits
    if kind == "i":
        return "int%d" % bits
    if kind == "u":
        return "uint%d" % bits
    if kind == "b" and bits == 8:
        return "bool"
    if kind == "V" and bits == 16:
        return "bfloat16"  # PyTorch writes bfloat16 as '<V2'
    raise TypeError("%s: unsupported element type %r" % (name, typestr))


def _dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    fn = getattr(obj, "__dlpack_device__", None)
    if fn is None:
        return None
    try:
        t, i = fn()
        return int(t), int(i)
    except Exception:  # noqa: BLE001 - a producer that cannot say
        return None


def _from_cai(obj: Any, name: str) -> ArrayView:
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError("%s: __cuda_array_interface__ is not a dict" % name)
    if cai.get("mask") is not None:
        raise TypeError("%s: masked arrays are not supported" % name)
    shape = tuple(int(n) for n in cai["shape"])
    dtype = _dtype_from_typestr(cai["typestr"], name)
    size = _ITEMSIZE[dtype]
    ptr, readonly = cai["data"]
    ptr = int(ptr or 0)
    bstrides = cai.get("strides")
    if bstrides is None:
        strides = _row_major(shape)
    else:
        if any(int(s) % size for s in bstrides):
            raise ValueError("%s: strides %s are not multiples of the element size %d"
                             % (name, tuple(bstrides), size))
        strides = tuple(int(s) // size for s in bstrides)
    device = _dlpack_device(obj)
    if device is None:
        dev = getattr(obj, "device", None)
        idx = getattr(dev, "index", None)
        if idx is None:
            idx = getattr(dev, "id", None)
        if isinstance(idx, int):
            device = (DL_CUDA, idx)
    return ArrayView(obj, name, ptr, shape, strides, dtype, device, framework_of(obj), bool(readonly))


# ---------------------------------------------------------------- DLPack


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


DLPACK_FLAG_READ_ONLY = 1

_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}


def _from_dlpack(obj: Any, name: str) -> ArrayView:
    # The capsule is not consumed (not renamed to "used_dltensor"): when it
    # is collected, its destructor calls the producer's deleter. The view
    # keeps it alive while the pointer is in use.
    try:
        capsule = obj.__dlpack__()
    except Exception as e:  # noqa: BLE001 - the producer's own error
        raise TypeError("%s: __dlpack__() failed: %s" % (name, e)) from e
    readonly = False
    if _capsule_is_valid(capsule, b"dltensor"):
        mt = DLManagedTensor.from_address(_capsule_get(capsule, b"dltensor"))
        t = mt.dl_tensor
    elif _capsule_is_valid(capsule, b"dltensor_versioned"):
        mv = DLManagedTensorVersioned.from_address(_capsule_get(capsule, b"dltensor_versioned"))
        t = mv.dl_tensor
        readonly = bool(mv.flags & DLPACK_FLAG_READ_ONLY)
    else:
        raise TypeError("%s: __dlpack__() did not return a DLPack capsule" % name)
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else _row_major(shape)
    code, bits, lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    if lanes != 1 or code not in _DL_CODES:
        raise TypeError("%s: unsupported DLPack dtype (code %d, %d bits, %d lanes)"
                        % (name, code, bits, lanes))
    dtype = "bool" if code == 6 else "%s%d" % (_DL_CODES[code], bits)
    if dtype not in _ITEMSIZE:
        raise TypeError("%s: unsupported DLPack dtype %s" % (name, dtype))
    ptr = (t.data or 0) + int(t.byte_offset)
    device = (int(t.device.device_type), int(t.device.device_id))
    return ArrayView(obj, name, ptr, shape, strides, dtype, device, framework_of(obj), readonly,
                     keepalive=capsule)


def is_array(obj: Any) -> bool:
    """True when obj exposes __cuda_array_interface__ or __dlpack__."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return True
    return _has_cai(obj) or hasattr(obj, "__dlpack__")


def _has_cai(obj: Any) -> bool:
    # PyTorch's CPU tensors have the attribute but raise on access.
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001
        return False


def _from_torch(obj: Any, name: str, torch: Any) -> ArrayView:
    # Read directly: cheaper than building the interface dict, and it works
    # on tensors that require grad (whose __cuda_array_interface__ raises).
    if obj.layout != torch.strided:
        raise TypeError("%s: only dense (strided) tensors are supported, got %s" % (name, obj.layout))
    dtype = str(obj.dtype).replace("torch.", "")
    if dtype not in _ITEMSIZE:
        raise TypeError("%s: unsupported element type %s" % (name, obj.dtype))
    dev = obj.device
    if dev.type == "cuda":
        device = (DL_CUDA, dev.index if dev.index is not None else torch.cuda.current_device())
    elif dev.type == "cpu":
        device = (DL_CPU, 0)
    else:
        raise ValueError("%s is on %s: tokitai_jit needs CUDA/HIP device memory" % (name, dev))
    return ArrayView(obj, name, int(obj.data_ptr()), tuple(obj.shape), tuple(obj.stride()), dtype,
                     device, "torch")


def view(obj: Any, name: str) -> ArrayView:
    """The ArrayView of obj; TypeError when it is not a device array."""
    if obj is None:
        raise TypeError("%s: expected a device array, got None" % name)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name, torch)
    own = getattr(type(obj), "_tk_view", None)  # tokitai_jit.DeviceBuffer
    if own is not None:
        return own(obj, name)
    if _has_cai(obj):
        return _from_cai(obj, name)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    raise TypeError(
        "%s: expected an array with __cuda_array_interface__ or __dlpack__ "
        "(a PyTorch CUDA tensor, a CuPy array, a tokitai_jit.DeviceBuffer), got %s"
        % (name, type(obj).__name__)
    )


# --------------------------------------------------------------- streams


def _torch_stream_of(arr: ArrayView) -> int:
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    dev = getattr(arr.obj, "device", None)
    return int(torch.cuda.current_stream(dev).cuda_stream)


def _cupy_stream() -> int:
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return 0
    return int(cupy.cuda.get_current_stream().ptr)


def default_stream(arrays: Sequence[ArrayView]) -> int:
    """The current stream of the framework that made the arrays: PyTorch's
    torch.cuda.current_stream() for tensors, CuPy's current stream for CuPy
    arrays, else 0 (the default stream)."""
    for a in arrays:
        if a.framework == "torch":
            return _torch_stream_of(a)
        if a.framework == "cupy":
            return _cupy_stream()
    return 0


def stream_handle(stream: Any) -> Tuple[int, Optional[int]]:
    """(raw handle, device index or None) of a stream argument.

    Accepts an int (a CUstream / hipStream_t value; 0 is the default stream),
    an object with ``__cuda_stream__()`` (returns (version, handle)), a
    PyTorch stream (``.cuda_stream``), a CuPy stream (``.ptr``) or a ctypes
    ``c_void_p``.
    """
    if isinstance(stream, bool):
        raise TypeError("stream: expected a stream object or an int handle, got bool")
    dev: Optional[int] = None
    if isinstance(stream, int):
        handle = stream
    elif isinstance(stream, c_void_p):
        handle = stream.value or 0
    elif hasattr(stream, "cuda_stream"):  # PyTorch
        handle = int(stream.cuda_stream)
        idx = getattr(stream, "device_index", None)
        dev = idx if isinstance(idx, int) else None
    elif hasattr(stream, "ptr") and isinstance(getattr(stream, "ptr"), int):  # CuPy
        handle = int(stream.ptr)
        d = getattr(stream, "device_id", None)
        dev = d if isinstance(d, int) else None
    elif hasattr(stream, "__cuda_stream__"):
        pair = stream.__cuda_stream__()
        handle = int(pair[1])
    else:
        raise TypeError(
            "stream: expected a PyTorch or CuPy stream, an object with __cuda_stream__, "
            "or an int handle; got %s" % type(stream).__name__
        )
    if handle < 0 or handle >= 1 << 64:
        raise ValueError("stream: handle %d is not a pointer value" % handle)
    return handle, dev
