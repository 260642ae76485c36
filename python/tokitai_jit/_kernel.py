"""User kernels: Kernel(source, entry, ...) and kernel[grid, block](*args)."""

from __future__ import annotations

import ctypes
import re
import struct
from ctypes import (
    byref,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int16,
    c_int32,
    c_int64,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _arrays, _capi
from ._capi import Origin
from ._context import Context, DeviceBuffer, ResourceUsage, current_context

Dim3 = Union[int, Sequence[int]]
Defines = Union[Mapping[str, Any], Sequence[Union[str, Tuple[str, Any]]], None]

# ---------------------------------------------------------------- signature


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its signature name and how it is packed."""

    name: str  # canonical: ptr, i8..i64, u8..u64, f16, f32, f64
    ctype: Any

    def pack(self, value: Any, index: int, ctx: Context) -> Any:
        """The ctypes object holding ``value`` as this parameter."""
        where = "argument %d (%s)" % (index, self.name)
        if self.name == "ptr":
            return c_void_p(_pointer(value, where, ctx))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            self.name[0] in "iu" and not isinstance(value, int)
        ):
            want = "an int" if self.name[0] in "iu" else "a number"
            raise TypeError("%s: expected %s, got %s" % (where, want, type(value).__name__))
        if self.name[0] in "iu":
            bits = int(self.name[1:])
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if self.name[0] == "i" else (0, (1 << bits) - 1)
            if not lo <= value <= hi:
                raise ValueError("%s: %d is outside [%d, %d]" % (where, value, lo, hi))
            return self.ctype(value)
        if self.name == "f16":
            try:
                bits16 = struct.unpack("<H", struct.pack("<e", value))[0]
            except OverflowError:
                raise ValueError("%s: %r is outside the fp16 range" % (where, value)) from None
            return c_uint16(bits16)
        return self.ctype(value)


_CANON: Dict[str, Tuple[str, Any]] = {
    "ptr": ("ptr", c_void_p),
    "i8": ("i8", c_int8),
    "i16": ("i16", c_int16),
    "i32": ("i32", c_int32),
    "i64": ("i64", c_int64),
    "u8": ("u8", c_uint8),
    "u16": ("u16", c_uint16),
    "u32": ("u32", c_uint32),
    "u64": ("u64", c_uint64),
    "f16": ("f16", c_uint16),
    "f32": ("f32", c_float),
    "f64": ("f64", c_double),
}
# C spellings accepted as well
_ALIASES = {
    "int": "i32",
    "int32_t": "i32",
    "unsigned": "u32",
    "unsigned int": "u32",
    "uint32_t": "u32",
    "int64_t": "i64",
    "long long": "i64",
    "uint64_t": "u64",
    "unsigned long long": "u64",
    "size_t": "u64",
    "int16_t": "i16",
    "short": "i16",
    "uint16_t": "u16",
    "int8_t": "i8",
    "uint8_t": "u8",
    "char": "i8",
    "float": "f32",
    "double": "f64",
    "half": "f16",
    "__half": "f16",
}


def parse_signature(signature: Union[str, Sequence[str]]) -> Tuple[Param, ...]:
    """Parses ``"ptr, ptr, i32, f32"`` (or a list of such names).

    Names: ``ptr`` (any device pointer), ``i8 i16 i32 i64``, ``u8 u16 u32
    u64``, ``f16 f32 f64``; C spellings (``int``, ``unsigned``, ``float``,
    ``int64_t``, ``size_t``, ``__half``...) and any type ending in ``*``
    (``const float *``) are accepted too. An empty string is a kernel
    without parameters.
    """
    if isinstance(signature, str):
        items = [s for s in signature.split(",")] if signature.strip() else []
    elif isinstance(signature, (list, tuple)):
        items = list(signature)
    else:
        raise TypeError("signature: expected a string such as 'ptr, ptr, i32, f32'")
    out = []
    for i, raw in enumerate(items):
        if not isinstance(raw, str):
            raise TypeError("signature: parameter %d is not a string" % i)
        t = " ".join(raw.replace("*", " * ").split())
        if t.endswith("*"):
            out.append(Param("ptr", c_void_p))
            continue
        t = re.sub(r"^const ", "", t)
        t = _ALIASES.get(t, t)
        if t not in _CANON:
            raise ValueError(
                "signature: unknown type %r for parameter %d (use ptr, i8, i16, i32, i64, u8, u16, "
                "u32, u64, f16, f32, f64, or a pointer type ending in *)" % (raw.strip(), i)
            )
        out.append(Param(*_CANON[t]))
    return tuple(out)


def _pointer(value: Any, where: str, ctx: Context) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("%s: expected a device array or pointer, got bool" % where)
    if isinstance(value, int):
        if not 0 <= value < 1 << 64:
            raise ValueError("%s: %d is not a pointer value" % (where, value))
        return value
    if isinstance(value, c_void_p):
        return value.value or 0
    if isinstance(value, DeviceBuffer):
        return value.ptr
    if _arrays.is_array(value):
        v = _arrays.view(value, where)
        ctx._check_device(v)
        return v.ptr
    raise TypeError(
        "%s: expected a device array (__cuda_array_interface__ / __dlpack__), an int "
        "pointer or None, got %s" % (where, type(value).__name__)
    )


def _dim3(value: Dim3, what: str) -> Tuple[int, int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise TypeError("%s: expected an int or a tuple of 1 to 3 ints, got %r" % (what, value))
    dims = list(value) + [1] * (3 - len(value))
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError("%s: expected ints, got %r" % (what, value))
        if not 1 <= d <= 0xFFFFFFFF:
            raise ValueError("%s: every dimension must be in [1, 2^32), got %r" % (what, tuple(value)))
    return dims[0], dims[1], dims[2]


# -------------------------------------------------------------------- kernel


@dataclass(frozen=True)
class KernelInfo:
    """Details of a loaded kernel (tk_kernel_info)."""

    key: str
    entry: str
    origin: Origin
    compile_seconds: float
    resources: ResourceUsage


def _defines(defines: Defines) -> List[Tuple[str, Optional[str]]]:
    if defines is None:
        return []
    if isinstance(defines, Mapping):
        items = list(defines.items())
    elif isinstance(defines, (list, tuple)):
        items = []
        for d in defines:
            if isinstance(d, str):
                name, eq, val = d.partition("=")
                items.append((name, val if eq else None))
            elif isinstance(d, (tuple, list)) and len(d) == 2:
                items.append((d[0], d[1]))
            else:
                raise TypeError("defines: expected 'NAME', 'NAME=VALUE' or (name, value), got %r" % (d,))
    else:
        raise TypeError("defines: expected a dict or a list")
    out = []
    for name, val in items:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError("defines: %r is not a macro name" % (name,))
        if val is None:
            out.append((name, None))
        elif isinstance(val, bool):
            out.append((name, "1" if val else "0"))
        elif isinstance(val, (int, float, str)):
            out.append((name, str(val)))
        else:
            raise TypeError("defines: value of %s must be a str, int, float, bool or None" % name)
    return out


class Kernel:
    """A user kernel compiled at run time and cached like the library's own.

    ``source``: CUDA/HIP source text; ``entry``: the kernel's name as
    written (``extern "C"`` or not), or a C++ name expression such as
    ``"fill<4, float>"``. ``signature``: the parameter types, e.g. ``"ptr,
    ptr, i32, f32"``; without one, a launch packs the arguments by the
    parameter layout the compiler recorded (see :meth:`parameters`): an
    array -> a pointer, a float -> f16/f32/f64 by the parameter's size, an
    int -> the integer of that size, numpy and ctypes scalars by their own
    type, a ``ctypes.Structure`` or ``bytes`` -> a struct of that size. A
    parameter whose kind nothing records (only its size) takes no Python
    int or float (except an int into 1 byte): a ``TypeError`` asks for a
    typed scalar or a signature.
    ``defines``: ``{"TILE": 64}`` or ``["TILE=64", "FAST"]``, passed as
    ``-D``; ``options``: extra compiler options. ``headers``: ``{name:
    text}`` include files (libraries with header support only; otherwise
    NotImplementedError). ``context``: where to compile and launch by default
    (else the current context at launch).

    Launch: ``kernel[grid, block](*args, stream=None, shared=0)``. The first
    launch on a context compiles (or loads from the disk cache); later ones
    find it in memory.
    """

    def __init__(
        self,
        source: str,
        entry: str,
        *,
        signature: Union[str, Sequence[str], None] = None,
        defines: Defines = None,
        options: Optional[Sequence[str]] = None,
        headers: Union[Mapping[str, str], Sequence[Tuple[str, str]], None] = None,
        label: Optional[str] = None,
        context: Optional[Context] = None,
    ) -> None:
        if not isinstance(source, str) or not source:
            raise TypeError("source: expected the kernel's source text (a non-empty str)")
        if not isinstance(entry, str) or not entry:
            raise TypeError("entry: expected the entry point's name (a non-empty str)")
        self.source = source
        self.entry = entry
        self.params: Optional[Tuple[Param, ...]] = (
            parse_signature(signature) if signature is not None else None
        )
        self.defines = _defines(defines)
        if options is None:
            options = []
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise TypeError("options: expected a list of strings")
        self.options = list(options)
        self.headers: List[Tuple[str, str]] = []
        if headers:
            if not _capi.has_field(_capi.tk_kernel_desc, "headers"):
                raise NotImplementedError(
                    "headers=: this version of tokitai-jit has no header support "
                    "(tk_kernel_desc has no headers field); put the header text in the source"
                )
            items = headers.items() if isinstance(headers, Mapping) else headers
            for h in items:
                if not (isinstance(h, (tuple, list)) and len(h) == 2 and all(isinstance(x, str) for x in h)):
                    raise TypeError("headers: expected {name: text} or [(name, text)]")
                self.headers.append((h[0], h[1]))
        if label is not None and not _capi.has_field(_capi.tk_kernel_desc, "source_label"):
            raise NotImplementedError("label=: this version of tokitai-jit has no source labels")
        self.label = label
        if context is not None and not isinstance(context, Context):
            raise TypeError("context: expected a tokitai_jit.Context")
        self.context = context
        self._desc_obj, self._keep = self._build_desc()

    def _build_desc(self) -> Tuple[_capi.tk_kernel_desc, List[Any]]:
        keep: List[Any] = []
        d = _capi.tk_kernel_desc()
        d.source = self.source.encode()
        d.entry = self.entry.encode()
        keep += [d.source, d.entry]
        if self.defines:
            arr = (_capi.tk_define * len(self.defines))()
            for i, (n, v) in enumerate(self.defines):
                arr[i].name = n.encode()
                arr[i].value = v.encode() if v is not None else None
            d.defines = ctypes.cast(arr, ctypes.POINTER(_capi.tk_define))
            d.n_defines = len(self.defines)
            keep.append(arr)
        if self.options:
            opts = (c_char_p * len(self.options))(*[o.encode() for o in self.options])
            d.options = ctypes.cast(opts, ctypes.POINTER(c_char_p))
            d.n_options = len(self.options)
            keep.append(opts)
        if self.headers:  # only reached when the mirror has the fields
            hdr_t = getattr(_capi, "tk_header")
            harr = (hdr_t * len(self.headers))()
            for i, (n, t) in enumerate(self.headers):
                harr[i].name = n.encode()
                harr[i].text = t.encode()
            d.headers = ctypes.cast(harr, ctypes.POINTER(hdr_t))
            d.n_headers = len(self.headers)
            keep.append(harr)
        if self.label is not None:
            d.source_label = self.label.encode()
        return d, keep

    def _ctx(self, context: Optional[Context]) -> Context:
        ctx = context or self.context or current_context()
        ctx._handle()
        return ctx

    def _get(self, ctx: Context) -> int:
        kernels = ctx._kernels
        h = kernels.get(self)
        if h is None:
            out = c_void_p()
            ctx._call("tk_kernel_get", byref(self._desc_obj), byref(out))
            h = kernels[self] = out.value
        return h

    def compile(self, context: Optional[Context] = None) -> KernelInfo:
        """Gets the kernel on the context (memory, disk cache or compile) and
        returns where it came from; CompileError carries the compiler log."""
        ctx = self._ctx(context)
        h = self._get(ctx)
        info = _capi.out_struct(_capi.tk_kernel_info)
        _check(ctx, ctx._lib.tk_kernel_get_info(h, byref(info)), "tk_kernel_get_info")
        return KernelInfo(
            key=_capi.text(info.key_hex),
            entry=_capi.text(info.entry),
            origin=Origin(info.origin),
            compile_seconds=info.compile_seconds,
            resources=ResourceUsage._from_c(info.resources),
        )

    def precompile(self, context: Optional[Context] = None) -> Origin:
        """Compiles into the cache without loading (works on an offline
        context): Origin.DISK when it was cached already, else COMPILED."""
        ctx = self._ctx(context)
        origin = c_int()
        ctx._call("tk_kernel_precompile", byref(self._desc_obj), byref(origin))
        return Origin(origin.value)

    def parameters(self, context: Optional[Context] = None) -> Optional[Tuple["ParamInfo", ...]]:
        """The parameter layout the compiler recorded for the kernel
        (tk_kernel_get_params), compiling or loading it first; None when
        the library or the code object does not record one."""
        ctx = self._ctx(context)
        return _param_infos(ctx, self._get(ctx))

    def __getitem__(self, config: Any) -> "Launcher":
        if not isinstance(config, tuple) or len(config) != 2:
            raise TypeError("kernel[grid, block]: expected exactly two items, got %r" % (config,))
        return Launcher(self, _dim3(config[0], "grid"), _dim3(config[1], "block"))

    def launch(
        self,
        grid: Dim3,
        block: Dim3,
        *args: Any,
        stream: Any = None,
        shared: int = 0,
        context: Optional[Context] = None,
    ) -> None:
        """The same as ``kernel[grid, block](*args, stream=..., shared=...)``."""
        self[grid, block](*args, stream=stream, shared=shared, context=context)

    def __repr__(self) -> str:
        sig = ", ".join(p.name for p in self.params) if self.params is not None else "?"
        return "Kernel(%r, signature=%r)" % (self.entry, sig)


@dataclass(frozen=True)
class ParamInfo:
    """One parameter as the code object records it (tk_kernel_param)."""

    offset: int
    size: int
    kind: _capi.ParamKind


def _param_infos(ctx: Context, handle: int) -> Optional[Tuple[ParamInfo, ...]]:
    if not _capi.has("tk_kernel_get_params"):
        return None
    cache = ctx.__dict__.setdefault("_tk_param_infos", {})
    if handle in cache:
        return cache[handle]
    out = _capi.out_struct(_capi.tk_kernel_params)
    st = ctx._lib.tk_kernel_get_params(handle, byref(out))
    if st == _capi.Status.NOT_FOUND:
        infos = None
    else:
        _check(ctx, st, "tk_kernel_get_params")
        infos = tuple(
            ParamInfo(out.params[i].offset, out.params[i].size, _param_kind(out.params[i].kind))
            for i in range(out.n_params)
        )
    cache[handle] = infos
    return infos


def _param_kind(value: int) -> _capi.ParamKind:
    try:
        return _capi.ParamKind(value)
    except ValueError:
        return _capi.ParamKind.UNKNOWN


_INT_CTYPES = {1: (c_int8, c_uint8), 2: (c_int16, c_uint16), 4: (c_int32, c_uint32), 8: (c_int64, c_uint64)}


def _describe(p: ParamInfo) -> str:
    K = _capi.ParamKind
    what = {
        K.POINTER: "a pointer",
        K.INT: "a %d-byte signed integer" % p.size,
        K.UINT: "a %d-byte unsigned integer" % p.size,
        K.FLOAT: "a %d-byte float" % p.size,
        K.STRUCT: "a %d-byte value" % p.size,
    }.get(p.kind, "%d bytes of unknown kind" % p.size)
    return what


# What an unknown parameter of each size could be, for the message that
# refuses to guess.
_UNKNOWN_COULD_BE = {
    2: "a 16-bit integer, __half or bfloat16",
    4: "an int or a float",
    8: "a pointer, a 64-bit integer or a double",
}


def _refuse_unknown(where: str, p: ParamInfo, got: str) -> TypeError:
    could = _UNKNOWN_COULD_BE.get(p.size, "any %d-byte type" % p.size)
    return TypeError(
        "%s: got %s; neither the code object nor the kernel's declaration says what this "
        "parameter is (%s), so a Python number cannot be packed without guessing: pass a "
        "typed scalar (numpy.int32(x), numpy.float32(x), ctypes.c_double(x), ...) or "
        "Kernel(..., signature='...')" % (where, got, could))


def _is_numpy_scalar(value: Any) -> bool:
    return type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and hasattr(value, "dtype")


def _infer_one(value: Any, p: ParamInfo, index: int, ctx: Context) -> Any:
    """The ctypes object holding value as parameter p, or TypeError/ValueError."""
    K = _capi.ParamKind
    where = "argument %d (the kernel takes %s here)" % (index, _describe(p))
    pointer_ok = p.size == 8 and p.kind in (K.POINTER, K.UNKNOWN)
    # Arrays and pointer wrappers.
    if value is None or isinstance(value, (c_void_p, DeviceBuffer)) or (
        not isinstance(value, (int, float, bytes, bytearray)) and not _is_numpy_scalar(value)
        and not isinstance(value, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array))
        and _arrays.is_array(value)
    ):
        if not pointer_ok:
            raise TypeError("%s: got %s, a pointer" % (where, type(value).__name__))
        return c_void_p(_pointer(value, where, ctx))
    # Raw bytes of a struct (or of anything) passed by value.
    if isinstance(value, (ctypes.Structure, ctypes.Union, ctypes.Array, bytes, bytearray)):
        raw = bytes(value) if isinstance(value, (bytes, bytearray)) else ctypes.string_at(ctypes.addressof(value), ctypes.sizeof(value))
        if len(raw) != p.size or p.kind == K.POINTER:
            raise TypeError("%s: got %d bytes (%s)" % (where, len(raw), type(value).__name__))
        return (ctypes.c_char * p.size).from_buffer_copy(raw)
    # numpy and ctypes scalars: by their own type.
    if _is_numpy_scalar(value) or isinstance(value, ctypes._SimpleCData):
        if isinstance(value, ctypes._SimpleCData):
            size, code = ctypes.sizeof(value), value._type_
            fkind = "f" if code in "fdg" else ("u" if code in "BHILQ?" else "i")
            if code in "zPZ":
                raise TypeError("%s: got %s" % (where, type(value).__name__))
            raw = ctypes.string_at(ctypes.addressof(value), size)
        else:
            size, fkind, raw = value.dtype.itemsize, value.dtype.kind, value.tobytes()
            if fkind not in "fiub":
                raise TypeError("%s: got a numpy %s" % (where, value.dtype))
        if size != p.size:
            raise TypeError("%s: got %s, %d bytes" % (where, type(value).__name__, size))
        if (fkind == "f" and p.kind in (K.INT, K.UINT, K.POINTER, K.STRUCT)) or (
            fkind in "iub" and p.kind == K.FLOAT
        ):
            raise TypeError("%s: got %s" % (where, type(value).__name__))
        return (ctypes.c_char * p.size).from_buffer_copy(raw)
    # Python numbers carry no C type: into a parameter of unknown kind only
    # where one packing is possible (an int into 1 byte).
    if p.kind == K.UNKNOWN and isinstance(value, (int, float)) and not (
        isinstance(value, int) and p.size == 1
    ):
        raise _refuse_unknown(where, p, "a float" if isinstance(value, float) else "an int")
    if isinstance(value, float):
        if p.kind in (K.POINTER, K.INT, K.UINT, K.STRUCT) or p.size not in (2, 4, 8):
            raise TypeError("%s: got a float" % where)
        name = {2: "f16", 4: "f32", 8: "f64"}[p.size]
        return Param(*_CANON[name]).pack(value, index, ctx)
    if isinstance(value, int):  # bool included: a 1-byte integer
        if p.kind == K.STRUCT or p.size not in _INT_CTYPES:
            raise TypeError("%s: got an int" % where)
        if p.kind == K.FLOAT:
            name = {2: "f16", 4: "f32", 8: "f64"}.get(p.size)
            if name is None:
                raise TypeError("%s: got an int" % where)
            return Param(*_CANON[name]).pack(float(value), index, ctx)
        if p.kind == K.POINTER:
            return c_void_p(_pointer(value, where, ctx))
        value = int(value)
        bits = 8 * p.size
        lo = 0 if p.kind == K.UINT else -(1 << (bits - 1))
        hi = (1 << bits) - 1 if p.kind != K.INT else (1 << (bits - 1)) - 1
        if not lo <= value <= hi:
            raise ValueError("%s: %d is outside [%d, %d]" % (where, value, lo, hi))
        signed, unsigned = _INT_CTYPES[p.size]
        return signed(value) if value < 0 else unsigned(value)
    raise TypeError("%s: cannot pass %s (use an array, an int, a float, a numpy or ctypes scalar, "
                    "or bytes)" % (where, type(value).__name__))


def _infer(k: "Kernel", ctx: Context, handle: int, args: Sequence[Any]) -> List[Any]:
    infos = _param_infos(ctx, handle)
    if infos is None:
        raise TypeError(
            "%s: the code object records no parameter layout; launching needs the parameter "
            "types: Kernel(..., signature='ptr, i32, ...')" % k.entry
        )
    if len(args) != len(infos):
        raise TypeError("%s takes %d arguments (%s), %d given" % (
            k.entry, len(infos), ", ".join(_describe(p) for p in infos), len(args)))
    return [_infer_one(a, p, i, ctx) for i, (a, p) in enumerate(zip(args, infos))]


def _check(ctx: Context, st: int, call: str) -> None:
    from .errors import check

    check(st, ctx._error_text, call=call)


class Launcher:
    """``kernel[grid, block]``: call it with the kernel's arguments."""

    def __init__(self, kernel: Kernel, grid: Tuple[int, int, int], block: Tuple[int, int, int]) -> None:
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args: Any, stream: Any = None, shared: int = 0, context: Optional[Context] = None) -> None:
        k = self.kernel
        if k.params is not None and len(args) != len(k.params):
            raise TypeError("%s takes %d arguments (%s), %d given"
                            % (k.entry, len(k.params), ", ".join(p.name for p in k.params), len(args)))
        if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared <= 0xFFFFFFFF:
            raise ValueError("shared: expected bytes of dynamic shared memory, an int >= 0")
        ctx = k._ctx(context)
        if k.params is not None:
            packed = [p.pack(a, i, ctx) for i, (p, a) in enumerate(zip(k.params, args))]
        else:
            # No signature: the layout the compiler recorded decides (the
            # kernel is obtained first; nothing launches on a mismatch).
            packed = _infer(k, ctx, k._get(ctx), args)
        if stream is None:
            arrays = [_arrays.view(a, "argument") for a in args
                      if not isinstance(a, (int, float, bytes, bytearray, DeviceBuffer)) and not _is_numpy_scalar(a)
                      and _arrays.is_array(a)]
            handle = _arrays.default_stream(arrays)
        else:
            handle = ctx._stream(stream, ())
        h = k._get(ctx)
        argv = (c_void_p * max(len(packed), 1))(*[ctypes.addressof(o) for o in packed])
        grid = (c_uint * 3)(*self.grid)
        block = (c_uint * 3)(*self.block)
        ctx._call("tk_kernel_launch", h, grid, block, shared, handle, argv)
