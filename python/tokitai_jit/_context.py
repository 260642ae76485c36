"""Context, device buffers and the seven operators."""

from __future__ import annotations

import ctypes
import math
import struct
import sys
import threading
import weakref
from ctypes import byref, c_int64, c_uint, c_uint64, c_void_p
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _arrays, _capi
from ._arrays import ArrayView
from ._capi import Backend, BuildMode, Op, Origin, Policy
from .errors import check

Shape = Union[int, Sequence[int]]
LogFn = Callable[[int, str], None]

# ------------------------------------------------------------ plain objects


@dataclass(frozen=True)
class ResourceUsage:
    """What the compiler reports for one kernel; None where unknown."""

    registers: Optional[int]
    sgprs: Optional[int]
    agprs: Optional[int]
    shared_bytes: Optional[int]
    local_bytes: Optional[int]
    spill_count: Optional[int]
    wavefront_size: Optional[int]
    kernarg_bytes: Optional[int]
    max_threads: Optional[int]

    @classmethod
    def _from_c(cls, r: _capi.tk_resource_usage) -> "ResourceUsage":
        return cls(*[None if getattr(r, f.name) < 0 else int(getattr(r, f.name)) for f in fields(cls)])


@dataclass(frozen=True)
class ContextStats:
    """Counters of a context since it was created or reset (tk_context_stats).

    Fields follow the C struct one for one; a test checks that they do.
    """

    memory_hits: int
    disk_hits: int
    compiles: int
    compile_failures: int
    loads: int
    load_failures: int
    cache_errors: int
    compile_seconds: float
    fallback_calls: int
    builds_queued: int
    builds_done: int
    builds_pending: int
    waits: int
    wait_seconds: float
    sync_compiles: int
    builds_failed: int
    builds_dropped: int
    remote_hits: int
    remote_misses: int
    remote_errors: int
    remote_rejected: int
    remote_publishes: int
    workspace_bytes: int
    workspace_peak: int
    workspace_allocs: int


@dataclass(frozen=True)
class CheckReport:
    """The report of a checked run (tk_check_report)."""

    op: str
    dims: Tuple[int, ...]
    seed: int
    max_abs_error: float
    max_rel_error: float
    tolerance_abs: float
    tolerance_rel: float
    passed: bool
    bad_indices: int
    kernel_ms: float
    origin: Origin
    compile_ms: float
    source_fingerprint: str
    compiler: str
    cache_key: str
    device: str
    arch: str
    policy: str
    fallback_calls: int
    builds_done: int
    builds_pending: int
    wait_ms: float


class PrecompileResult(NamedTuple):
    compiled: int
    cached: int


@dataclass(frozen=True)
class TuneReport:
    """What :meth:`Context.tune` measured and kept (tk_tune_report).

    ``record`` names the shape class, ``chosen`` the configuration kept (a
    tuning record in the cache when ``stored``), ``heuristic`` the one the
    heuristics pick without a record; times are microseconds per call;
    ``timed`` lists every candidate with its time, in the order timed.
    ``mid_m`` is the class's middle M, where every candidate is timed too
    (0: not), with ``chosen_mid_us`` / ``heuristic_mid_us`` there and
    ``timed_mid`` each candidate's time there (negative: does not fit);
    ``chosen`` is "heuristics" where no configuration gains 3% over them
    across both points."""

    record: str
    chosen: str
    heuristic: str
    chosen_us: float
    heuristic_us: float
    timed_m: int
    candidates: int
    compiled: int
    rejected: int
    timed: Tuple[Tuple[str, float], ...]
    stored: bool
    mid_m: int = 0
    chosen_mid_us: float = 0.0
    heuristic_mid_us: float = 0.0
    timed_mid: Tuple[float, ...] = ()


def _enum(enum_cls: Any, value: Any, what: str) -> Any:
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        try:
            return enum_cls[value.upper()]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum_cls(value)
        except ValueError:
            pass
    names = ", ".join(repr(m.name.lower()) for m in enum_cls)
    raise ValueError("%s must be one of %s (got %r)" % (what, names, value))


def _parse_size(value: Union[int, str, None]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("size: expected an int or a string such as '2G', got bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("size must be >= 0 (got %d)" % value)
        return value
    if isinstance(value, str):
        out = c_uint64()
        st = _capi.lib().tk_parse_size(value.encode(), byref(out))
        if st != 0:
            raise ValueError("size %r: expected a number with an optional K, M, G or T suffix" % value)
        return out.value
    raise TypeError("size: expected an int or a string such as '2G', got %s" % type(value).__name__)


def _device_ordinal(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, bool):
        raise TypeError("device: expected an int, 'cuda:N' or a torch.device, got bool")
    if isinstance(device, int):
        if device < 0:
            raise ValueError("device must be >= 0 (got %d)" % device)
        return device
    if isinstance(device, str):
        _, _, idx = device.partition(":")
        try:
            return int(idx) if idx else 0
        except ValueError:
            raise ValueError("device %r: expected 'cuda:N', 'hip:N' or an int" % device)
    idx = getattr(device, "index", None)  # torch.device
    if idx is None:
        idx = getattr(device, "id", None)  # cupy.cuda.Device
    if getattr(device, "type", "cuda") in ("cuda", "hip") and (idx is None or isinstance(idx, int)):
        return idx or 0
    raise TypeError("device: expected an int, 'cuda:N' or a torch.device, got %r" % (device,))


class _Config:
    """A tk_config built from keyword arguments; destroyed on exit."""

    def __init__(
        self,
        *,
        cache_dir: Optional[str] = None,
        cache_lower: Union[str, Sequence[str], None] = None,
        cache_max_size: Union[int, str, None] = None,
        cache_read_only: bool = False,
        cache_disabled: bool = False,
        backend: Any = None,
        device: Any = None,
        target: Optional[str] = None,
        policy: Any = None,
        build_mode: Any = None,
        log: Optional[Any] = None,
        log_level: int = _capi.LOG_WARN,
    ) -> None:
        lib = _capi.lib()
        self._lib = lib
        p = c_void_p()
        check(lib.tk_config_create(byref(p)), call="tk_config_create")
        self.ptr = p.value
        try:

            def put(fn: str, *args: Any) -> None:
                check(getattr(lib, fn)(self.ptr, *args), call=fn)

            if cache_dir is not None:
                put("tk_config_set_cache_dir", _fspath(cache_dir))
            if cache_lower is not None:
                if not isinstance(cache_lower, str):
                    cache_lower = ":".join(str(x) for x in cache_lower)
                put("tk_config_set_cache_lower", _fspath(cache_lower))
            if cache_max_size is not None:
                put("tk_config_set_cache_max_size", _parse_size(cache_max_size))
            if cache_read_only:
                put("tk_config_set_cache_read_only", 1)
            if cache_disabled:
                put("tk_config_set_cache_disabled", 1)
            if backend is not None:
                put("tk_config_set_backend", int(_enum(Backend, backend, "backend")))
            if device is not None:
                put("tk_config_set_device", _device_ordinal(device))
            if target is not None:
                put("tk_config_set_target", target.encode())
            if policy is not None:
                put("tk_config_set_policy", int(_enum(Policy, policy, "policy")))
            if build_mode is not None:
                mode = _enum(BuildMode, build_mode, "build_mode")
                if not _capi.has("tk_config_set_build_mode"):
                    raise NotImplementedError(
                        "build_mode: the tokitai-jit library at %s has no "
                        "tk_config_set_build_mode" % _capi.library_path()
                    )
                put("tk_config_set_build_mode", int(mode))
            if log is not None:
                put("tk_config_set_log", log, None)
                put("tk_config_set_log_level", int(log_level))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.ptr:
            self._lib.tk_config_destroy(self.ptr)
            self.ptr = None

    def __enter__(self) -> "_Config":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _fspath(p: Any) -> bytes:
    import os

    return os.fsencode(p)


# ------------------------------------------------------------ current context

_tls = threading.local()
_default_lock = threading.Lock()
_default: Optional["Context"] = None


def current_context() -> "Context":
    """The innermost ``with Context(...)`` of this thread, else a default
    context made on first use with every setting at its default (the
    environment variables apply)."""
    stack = getattr(_tls, "stack", None)
    if stack:
        return stack[-1]
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Context()
        return _default


# ------------------------------------------------------------- device buffer

_STRUCT_CODE = {
    "float16": "e",
    "float32": "f",
    "float64": "d",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
}


def _shape_tuple(shape: Shape) -> Tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    out = tuple(shape)
    for n in out:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError("shape %r: dimensions must be ints >= 0" % (shape,))
    return out


class DeviceBuffer:
    """Device memory from ``tk_mem_alloc``, packed row-major.

    Exposes ``__cuda_array_interface__`` (so PyTorch's ``torch.as_tensor``
    and CuPy's ``cupy.asarray`` can wrap it without a copy) and is what the
    operators return when their inputs are not PyTorch or CuPy arrays. The
    memory is freed by ``free()``, when the buffer is collected, or when its
    context is closed, whichever comes first.
    """

    def __init__(self, context: "Context", shape: Shape, dtype: str = "float16") -> None:
        self.shape: Tuple[int, ...] = _shape_tuple(shape)
        if dtype not in _arrays.TYPESTR:
            raise TypeError("dtype %r is not one of %s" % (dtype, ", ".join(_arrays.TYPESTR)))
        self.dtype = dtype
        self.nbytes = math.prod(self.shape) * _arrays.itemsize(dtype)
        self.context = context
        p = c_void_p()
        context._call("tk_mem_alloc", max(self.nbytes, 1), byref(p))
        self._ptr: Optional[int] = p.value
        context._buffers.add(self)

    @property
    def ptr(self) -> int:
        """The device pointer; ValueError once freed."""
        if self._ptr is None:
            raise ValueError("the buffer was freed (or its context closed)")
        return self._ptr

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": _arrays.TYPESTR[self.dtype],
            "data": (self.ptr, False),
            "strides": None,
            "stream": None,
        }

    def __dlpack_device__(self) -> Tuple[int, int]:
        kind = {"cuda": _arrays.DL_CUDA, "hip": _arrays.DL_ROCM}.get(self.context._backend_name, _arrays.DL_CPU)
        return kind, self.context.device

    def _tk_view(self, name: str) -> ArrayView:
        """The operators' view of this buffer, without the interface dict."""
        return ArrayView(self, name, self.ptr, self.shape, _arrays._row_major(self.shape), self.dtype,
                         self.__dlpack_device__(), "tokitai")

    def upload(self, data: Any) -> "DeviceBuffer":
        """Copies a bytes-like object of exactly nbytes into the buffer."""
        mv = memoryview(data).cast("B")
        if mv.nbytes != self.nbytes:
            raise ValueError("upload: %d bytes given, the buffer holds %d" % (mv.nbytes, self.nbytes))
        src = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)
        self.context._call("tk_mem_upload", self.ptr, src, mv.nbytes)
        return self

    def download(self) -> bytes:
        """The buffer's bytes (waits for the copy)."""
        dst = ctypes.create_string_buffer(max(self.nbytes, 1))
        self.context._call("tk_mem_download", dst, self.ptr, self.nbytes)
        return dst.raw[: self.nbytes]

    def tolist(self) -> List[Any]:
        """The elements, flat, as Python numbers."""
        n = math.prod(self.shape)
        return list(struct.unpack("<%d%s" % (n, _STRUCT_CODE[self.dtype]), self.download()))

    def fill_bytes(self, byte: int) -> "DeviceBuffer":
        """Sets every byte to ``byte`` (tk_mem_set)."""
        self.context._call("tk_mem_set", self.ptr, byte, self.nbytes)
        return self

    def free(self) -> None:
        """Frees the memory now (idempotent)."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None and self.context._ptr:
            self.context._buffers.discard(self)
            self.context._lib.tk_mem_free(self.context._ptr, ptr)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return "DeviceBuffer(shape=%s, dtype=%s, ptr=%s)" % (
            self.shape,
            self.dtype,
            hex(self._ptr) if self._ptr is not None else "freed",
        )


# ---------------------------------------------------------------- context

_F16, _F32, _I32, _U32 = "float16", "float32", "int32", "uint32"


class Context:
    """A tokitai-jit context: one backend, one device, a kernel table, a
    handle on the disk cache.

    Keyword arguments (all optional; None keeps the library's default, which
    the environment variables may set):

    - ``policy``: ``"stable"`` (the default: weight dimensions baked, token
      counts at run time), ``"exact"`` (every dimension baked: a compile per
      shape) or ``"generic"`` (nothing baked).
    - ``build_mode``: ``"async"`` (the default: a generic kernel serves a call
      while the specialised one builds in the background) or ``"sync"``.
    - ``cache_dir``: cache root; ``cache_lower``: read-only caches searched
      after it (a path or a list; ``"shipped"`` is the tier shipped with the
      library, the default; ``[]`` or ``"none"``: none at all);
      ``cache_max_size``: bytes or ``"2G"``;
      ``cache_read_only``, ``cache_disabled``.
    - ``device``: ordinal, ``"cuda:1"`` or a ``torch.device``.
    - ``backend``: ``"auto"``, ``"cuda"``, ``"hip"`` or ``"stub"`` (testing:
      compiles nothing real and launches nothing).
    - ``target``: offline target (``"sm_90"``, ``"gfx90a"``): compile and
      precompile with no device; nothing can run.
    - ``build_mode``: ``"async"`` or ``"sync"`` (libraries that have it).
    - ``log``: ``callable(level: int, message: str)`` receiving the library's
      log at ``log_level`` and above (0 debug ... 3 error).

    Use as a context manager: ``with Context(...) as ctx:`` makes it the
    current context of the thread (the one kernels launch on by default) and
    closes it on exit. Thread-safe as the C context is.
    """

    def __init__(
        self,
        *,
        policy: Union[str, Policy, None] = None,
        cache_dir: Optional[str] = None,
        device: Any = None,
        backend: Union[str, Backend, None] = None,
        target: Optional[str] = None,
        cache_lower: Union[str, Sequence[str], None] = None,
        cache_max_size: Union[int, str, None] = None,
        cache_read_only: bool = False,
        cache_disabled: bool = False,
        build_mode: Union[str, BuildMode, None] = None,
        log: Optional[LogFn] = None,
        log_level: int = _capi.LOG_WARN,
    ) -> None:
        self._ptr: Optional[int] = None
        self._lib = _capi.lib()
        self._buffers: "weakref.WeakSet[DeviceBuffer]" = weakref.WeakSet()
        self._kernels: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._log_cb = None
        if log is not None:
            if not callable(log):
                raise TypeError("log: expected a callable(level, message)")

            def _log(user: Any, level: int, msg: Optional[bytes]) -> None:
                try:
                    log(level, _capi.text(msg))
                except Exception:  # noqa: BLE001 - never unwind into C
                    pass

            self._log_cb = _capi.LOG_FN(_log)
        self.device: int = _device_ordinal(device)
        with _Config(
            cache_dir=cache_dir,
            cache_lower=cache_lower,
            cache_max_size=cache_max_size,
            cache_read_only=cache_read_only,
            cache_disabled=cache_disabled,
            backend=backend,
            device=self.device,
            target=target,
            policy=policy,
            build_mode=build_mode,
            log=self._log_cb,
            log_level=log_level,
        ) as cfg:
            out = c_void_p()
            why = ctypes.create_string_buffer(1024)
            st = self._lib.tk_context_create(cfg.ptr, byref(out), why, len(why))
            check(st, lambda: _capi.text(why.value), call="tk_context_create")
            self._ptr = out.value
        self.offline: bool = target is not None
        self._backend_name = _capi.text(self._lib.tk_context_backend_name(self._ptr))

    # -- plumbing

    def _error_text(self) -> str:
        return _capi.text(self._lib.tk_context_last_error(self._ptr))

    def _handle(self) -> int:
        if not self._ptr:
            raise ValueError("the context is closed")
        return self._ptr

    def _call(self, fn: str, *args: Any) -> None:
        st = getattr(self._lib, fn)(self._handle(), *args)
        if st != 0:
            check(st, self._error_text, call=fn)

    # -- lifetime

    def close(self) -> None:
        """Frees the buffers it allocated and destroys the context
        (idempotent). Kernels obtained on it become unusable."""
        if not self._ptr:
            return
        for b in list(self._buffers):
            b.free()
        self._kernels.clear()
        ptr, self._ptr = self._ptr, None
        self._lib.tk_context_destroy(ptr)

    @property
    def closed(self) -> bool:
        return not self._ptr

    def __enter__(self) -> "Context":
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = getattr(_tls, "stack", [])
        if stack and stack[-1] is self:
            stack.pop()
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self.closed:
            return "Context(closed)"
        return "Context(backend=%r, device=%d, target=%r, policy=%r)" % (
            self.backend,
            self.device,
            self.target,
            self.policy.name.lower(),
        )

    # -- properties

    @property
    def backend(self) -> str:
        """'cuda', 'hip' or 'stub'."""
        return _capi.text(self._lib.tk_context_backend_name(self._handle()))

    @property
    def target(self) -> str:
        """Full target id of the device or offline target ('sm_90', 'gfx90a:...')."""
        return _capi.text(self._lib.tk_context_target(self._handle()))

    @property
    def compiler(self) -> str:
        """Compiler identity used in cache keys."""
        return _capi.text(self._lib.tk_context_compiler(self._handle()))

    @property
    def policy(self) -> Policy:
        v = int(self._lib.tk_context_policy(self._handle()))
        try:
            return Policy(v)
        except ValueError:
            return v  # type: ignore[return-value]  # a policy newer than this package

    @property
    def last_error(self) -> str:
        """The library's message for the last failure on this context."""
        return self._error_text()

    def stats(self) -> ContextStats:
        """Counters since creation or the last reset_stats()."""
        s = _capi.out_struct(_capi.tk_context_stats)
        self._call("tk_context_get_stats", byref(s))
        return ContextStats(**{f.name: getattr(s, f.name) for f in fields(ContextStats)})

    def reset_stats(self) -> None:
        self._lib.tk_context_reset_stats(self._handle())

    def wait_builds(self, timeout: Optional[float] = None) -> None:
        """Blocks until no background build is queued or running (operators in
        the "async" build mode), so that every kernel asked for so far is
        ready. ``timeout`` in seconds (None: no limit); raises
        :class:`tokitai_jit.errors.TimeoutError_` when it passes first."""
        if not _capi.has("tk_context_wait_builds"):
            return
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        self._call("tk_context_wait_builds", ms)

    def synchronize(self, stream: Any = None) -> None:
        """Waits for the work enqueued on ``stream`` (default: the default stream)."""
        handle = 0 if stream is None else _arrays.stream_handle(stream)[0]
        self._call("tk_stream_sync", handle)

    # -- memory

    def empty(self, shape: Shape, dtype: str = _F16) -> DeviceBuffer:
        """Uninitialised device memory (tk_mem_alloc)."""
        return DeviceBuffer(self, shape, dtype)

    def array(self, values: Sequence[Any], shape: Optional[Shape] = None, dtype: str = _F16) -> DeviceBuffer:
        """A DeviceBuffer holding ``values`` (flat), converted to ``dtype``."""
        vals = list(values)
        shp = _shape_tuple(shape if shape is not None else len(vals))
        if math.prod(shp) != len(vals):
            raise ValueError("array: %d values do not fill shape %s" % (len(vals), shp))
        buf = DeviceBuffer(self, shp, dtype)
        try:
            data = struct.pack("<%d%s" % (len(vals), _STRUCT_CODE[dtype]), *vals)
        except struct.error as e:
            buf.free()
            raise ValueError("array: values do not fit %s: %s" % (dtype, e)) from None
        return buf.upload(data)

    # -- argument checks shared by the operators

    def _check_device(self, a: ArrayView) -> None:
        backend = self._backend_name
        if backend == "stub" or a.device is None:
            return
        t, i = a.device
        ok = {"cuda": (_arrays.DL_CUDA, _arrays.DL_CUDA_MANAGED), "hip": (_arrays.DL_ROCM, _arrays.DL_CUDA)}
        if t not in ok.get(backend, ()) or (t != _arrays.DL_CUDA_MANAGED and i != self.device):
            raise ValueError(
                "%s is on %s; this context runs on %s device %d"
                % (a.name, a.device_str(), backend, self.device)
            )

    def _array(self, obj: Any, name: str, dtype: str, writable: bool = False) -> ArrayView:
        a = _arrays.view(obj, name)
        if a.dtype != dtype:
            raise TypeError("%s must be %s, got %s" % (name, dtype, a.dtype))
        if any(n <= 0 for n in a.shape):
            raise ValueError("%s must not be empty (shape %s)" % (name, a.shape))
        if a.ptr == 0:
            raise ValueError("%s has a null data pointer" % name)
        if writable and a.readonly:
            raise ValueError("%s is read-only" % name)
        self._check_device(a)
        return a

    def _matrix(
        self,
        obj: Any,
        name: str,
        dtype: str,
        shape: Tuple[Optional[int], Optional[int]] = (None, None),
        names: Tuple[str, str] = ("rows", "cols"),
        writable: bool = False,
    ) -> Tuple[ArrayView, int]:
        """A 2-D row-major matrix with unit column stride: (view, ld)."""
        a = self._array(obj, name, dtype, writable)
        if a.ndim != 2:
            raise ValueError("%s must be 2-D [%s, %s], got %d-D shape %s" % (name, names[0], names[1], a.ndim, a.shape))
        for k in range(2):
            if shape[k] is not None and a.shape[k] != shape[k]:
                raise ValueError(
                    "%s must have %s = %d (dimension %d), got shape %s"
                    % (name, names[k], shape[k], k, a.shape)
                )
        rows, cols = a.shape
        rs, cs = a.strides
        if cols > 1 and cs != 1:
            raise ValueError(
                "%s must have contiguous rows (column stride 1, got %d): transposed or strided "
                "views are not supported, pass .contiguous()" % (name, cs)
            )
        if rows > 1 and rs < cols:
            raise ValueError(
                "%s: row stride %d is smaller than its %d columns: not a row-major matrix, "
                "pass .contiguous()" % (name, rs, cols)
            )
        return a, (rs if rows > 1 else 0)

    def _packed(self, obj: Any, name: str, dtype: str, writable: bool = False) -> ArrayView:
        a = self._array(obj, name, dtype, writable)
        want = _arrays._row_major(a.shape)
        if any(s != w for s, w, n in zip(a.strides, want, a.shape) if n > 1):
            raise ValueError("%s must be contiguous (row-major, packed), got strides %s for shape %s"
                             % (name, a.strides, a.shape))
        return a

    def _stream(self, stream: Any, arrays: Sequence[ArrayView]) -> int:
        if stream is None:
            return _arrays.default_stream(arrays)
        handle, dev = _arrays.stream_handle(stream)
        if dev is not None and dev != self.device and self._backend_name != "stub":
            raise ValueError("stream belongs to device %d; this context runs on device %d" % (dev, self.device))
        return handle

    def _output(
        self, out: Any, name: str, like: ArrayView, shape: Tuple[int, ...], dtype: str, stream: Any
    ) -> Tuple[Any, ArrayView]:
        if out is None:
            out = self._allocate(like, shape, dtype, stream)
        a, _ = self._matrix(out, name, dtype, (shape[0], shape[1]), writable=True)
        return out, a

    def _allocate(self, like: ArrayView, shape: Tuple[int, ...], dtype: str, stream: Any) -> Any:
        if like.framework == "torch":
            torch = sys.modules["torch"]
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device)
            if stream is not None and isinstance(stream, torch.cuda.Stream):
                t.record_stream(stream)  # the caching allocator must not reuse it early
            return t
        if like.framework == "cupy":
            cupy = sys.modules["cupy"]
            dev = like.device[1] if like.device is not None else self.device
            with cupy.cuda.Device(dev):
                return cupy.empty(shape, dtype=dtype)
        return self.empty(shape, dtype)

    # -- the seven operators

    def gemm_f16_fwd(self, a: Any, b: Any, out: Any = None, *, stream: Any = None) -> Any:
        """C = A @ B: ``a`` [M,K] fp16, ``b`` [K,N] fp16 -> ``out`` [M,N] fp32.

        Returns ``out`` (allocated like ``a`` when None). Rows may be padded
        (row stride >= columns); columns must be contiguous.
        """
        A, lda = self._matrix(a, "a", _F16, names=("M", "K"))
        M, K = A.shape
        B, ldb = self._matrix(b, "b", _F16, (K, None), names=("K", "N"))
        N = B.shape[1]
        h = self._stream(stream, (A, B))
        out, C = self._output(out, "out", A, (M, N), _F32, stream)
        ldc = C.strides[0] if M > 1 else 0
        self._call("tk_gemm_f16_fwd", M, N, K, A.ptr, lda, B.ptr, ldb, C.ptr, ldc, h)
        return out

    def gemm_f16_grad_a(self, grad_c: Any, b: Any, out: Any = None, *, stream: Any = None) -> Any:
        """grad_A = grad_C @ B^T: ``grad_c`` [M,N] fp16, ``b`` [K,N] fp16 ->
        ``out`` [M,K] fp16."""
        G, ldg = self._matrix(grad_c, "grad_c", _F16, names=("M", "N"))
        M, N = G.shape
        B, ldb = self._matrix(b, "b", _F16, (None, N), names=("K", "N"))
        K = B.shape[0]
        h = self._stream(stream, (G, B))
        out, O = self._output(out, "out", G, (M, K), _F16, stream)
        ldo = O.strides[0] if M > 1 else 0
        self._call("tk_gemm_f16_grad_a", M, N, K, G.ptr, ldg, B.ptr, ldb, O.ptr, ldo, h)
        return out

    def gemm_f16_grad_b(self, a: Any, grad_c: Any, out: Any = None, *, stream: Any = None) -> Any:
        """grad_B = A^T @ grad_C: ``a`` [M,K] fp16, ``grad_c`` [M,N] fp16 ->
        ``out`` [K,N] fp16."""
        A, lda = self._matrix(a, "a", _F16, names=("M", "K"))
        M, K = A.shape
        G, ldg = self._matrix(grad_c, "grad_c", _F16, (M, None), names=("M", "N"))
        N = G.shape[1]
        h = self._stream(stream, (A, G))
        out, O = self._output(out, "out", A, (K, N), _F16, stream)
        ldo = O.strides[0] if K > 1 else 0
        self._call("tk_gemm_f16_grad_b", M, N, K, A.ptr, lda, G.ptr, ldg, O.ptr, ldo, h)
        return out

    def softmax_f16_fwd(self, x: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Row-wise softmax of ``x`` [rows, cols] fp16 -> ``out`` fp16."""
        X, ldx = self._matrix(x, "x", _F16)
        rows, cols = X.shape
        h = self._stream(stream, (X,))
        out, O = self._output(out, "out", X, (rows, cols), _F16, stream)
        ldo = O.strides[0] if rows > 1 else 0
        self._call("tk_softmax_f16_fwd", rows, cols, X.ptr, ldx, O.ptr, ldo, h)
        return out

    def softmax_xent_f16_bwd(self, s: Any, g: Any, out: Any = None, *, stream: Any = None) -> Any:
        """Softmax backward: ``s`` (softmax output) and ``g`` (upstream
        gradient), both [rows, cols] fp16 -> ``out`` = s * (g - sum(g * s))."""
        S, lds = self._matrix(s, "s", _F16)
        rows, cols = S.shape
        G, ldg = self._matrix(g, "g", _F16, (rows, cols))
        h = self._stream(stream, (S, G))
        out, O = self._output(out, "out", S, (rows, cols), _F16, stream)
        ldo = O.strides[0] if rows > 1 else 0
        self._call("tk_softmax_xent_f16_bwd", rows, cols, S.ptr, lds, G.ptr, ldg, O.ptr, ldo, h)
        return out

    def _indices(self, idx: Any) -> ArrayView:
        try:
            return self._packed(idx, "idx", _I32)
        except TypeError:
            a = _arrays.view(idx, "idx")
            if a.dtype in ("int64", "uint32", "int16", "uint64"):
                raise TypeError(
                    "idx must be int32, got %s (PyTorch: idx.to(torch.int32))" % a.dtype
                ) from None
            raise

    def _bad_count(self, bad_count: Any) -> int:
        if bad_count is None:
            return 0
        # uint32 as the C API has it, or int32 (PyTorch has no practical
        # uint32 tensors): the same 4 bytes; counts stay far below 2^31.
        dtype = _arrays.view(bad_count, "bad_count").dtype
        if dtype not in (_U32, _I32):
            raise TypeError("bad_count must be uint32 or int32, got %s" % dtype)
        return self._array(bad_count, "bad_count", dtype, writable=True).ptr

    def embedding_f16_fwd(
        self, weight: Any, idx: Any, out: Any = None, *, bad_count: Any = None, stream: Any = None
    ) -> Any:
        """out[..., :] = weight[idx[...], :]: ``weight`` [V,D] fp16 packed,
        ``idx`` int32 (any shape, packed) -> ``out`` idx.shape + (D,) fp16.

        Out-of-range indices give zero rows; their number is added to
        ``bad_count`` (a uint32 or int32 device array of one element) when given.
        """
        W = self._packed(weight, "weight", _F16)
        if W.ndim != 2:
            raise ValueError("weight must be 2-D [V, D], got shape %s" % (W.shape,))
        V, D = W.shape
        I = self._indices(idx)
        Q = math.prod(I.shape)
        bad = self._bad_count(bad_count)
        h = self._stream(stream, (W, I))
        shape = I.shape + (D,)
        if out is None:
            out = self._allocate(W, shape, _F16, stream)
        O = self._packed(out, "out", _F16, writable=True)
        if O.shape not in (shape, (Q, D)):
            raise ValueError("out must have shape %s, got %s" % (shape, O.shape))
        self._call("tk_embedding_f16_fwd", V, D, W.ptr, Q, I.ptr, O.ptr, bad or None, h)
        return out

    def embedding_f16_bwd(
        self,
        grad_weight: Any,
        idx: Any,
        grad_out: Any,
        *,
        deterministic: bool = False,
        bad_count: Any = None,
        stream: Any = None,
    ) -> Any:
        """grad_weight[idx[q], :] += grad_out[q, :], in place: ``grad_weight``
        [V,D] fp16 packed, ``idx`` int32, ``grad_out`` idx.shape + (D,) (or
        [Q, D]) fp16 packed. ``deterministic`` fixes the summation order.
        Returns ``grad_weight``."""
        W = self._packed(grad_weight, "grad_weight", _F16, writable=True)
        if W.ndim != 2:
            raise ValueError("grad_weight must be 2-D [V, D], got shape %s" % (W.shape,))
        V, D = W.shape
        I = self._indices(idx)
        Q = math.prod(I.shape)
        G = self._packed(grad_out, "grad_out", _F16)
        if G.shape not in (I.shape + (D,), (Q, D)):
            raise ValueError("grad_out must have shape %s, got %s" % (I.shape + (D,), G.shape))
        bad = self._bad_count(bad_count)
        h = self._stream(stream, (W, I, G))
        flags = _capi.EMBEDDING_DETERMINISTIC if deterministic else 0
        self._call("tk_embedding_f16_bwd", V, D, W.ptr, Q, I.ptr, G.ptr, flags, bad or None, h)
        return grad_weight

    # -- precompile and checked runs

    def precompile(self, op: Union[str, Op], dims: Sequence[int]) -> PrecompileResult:
        """Compiles (or finds cached) every kernel ``op`` uses for ``dims``
        (GEMM: M, N, K; softmax: rows, cols; embedding: V, D, Q) under the
        context's policy, without running anything. Works offline."""
        o = _enum(Op, op, "op")
        d = (c_int64 * max(len(dims), 1))(*[int(x) for x in dims])
        nc, nh = c_uint(), c_uint()
        self._call("tk_op_precompile", int(o), d, len(dims), byref(nc), byref(nh))
        return PrecompileResult(nc.value, nh.value)

    def tune(self, op: Union[str, Op], dims: Sequence[int]) -> TuneReport:
        """Times every candidate configuration of a GEMM op for the shape
        class of ``dims`` (M, N, K: M's class) on the context's device and
        keeps the fastest as a tuning record in the cache (tk_op_tune: at
        the class's largest and middle M; "heuristics" unless a
        configuration is >= 3% faster over both).
        Later calls of the class, in any process using that cache, follow
        the record. Raises UnsupportedError for ops with nothing to tune."""
        o = _enum(Op, op, "op")
        d = (c_int64 * max(len(dims), 1))(*[int(x) for x in dims])
        r = _capi.out_struct(_capi.tk_tune_report)
        self._call("tk_op_tune", int(o), d, len(dims), byref(r))
        n = min(r.candidates, len(r.timed))
        return TuneReport(
            record=r.record.decode("utf-8", "replace"),
            chosen=r.chosen.decode("utf-8", "replace"),
            heuristic=r.heuristic.decode("utf-8", "replace"),
            chosen_us=r.chosen_us,
            heuristic_us=r.heuristic_us,
            timed_m=r.timed_m,
            candidates=r.candidates,
            compiled=r.compiled,
            rejected=r.rejected,
            timed=tuple((r.timed[i].config.decode("utf-8", "replace"), r.timed[i].us) for i in range(n)),
            stored=bool(r.stored),
            mid_m=r.mid_m,
            chosen_mid_us=r.chosen_mid_us,
            heuristic_mid_us=r.heuristic_mid_us,
            timed_mid=tuple(r.timed_mid_us[i] for i in range(n)) if r.mid_m else (),
        )

    def check_run(self, op: Union[str, Op], dims: Sequence[int], seed: int = 1) -> CheckReport:
        """Runs ``op`` on random inputs from ``seed`` and compares with the
        CPU reference (tk_check_run). ``passed`` says whether it agreed."""
        o = _enum(Op, op, "op")
        d = (c_int64 * max(len(dims), 1))(*[int(x) for x in dims])
        r = _capi.out_struct(_capi.tk_check_report)
        self._call("tk_check_run", int(o), d, len(dims), seed, byref(r))
        try:
            return CheckReport(
                op=_capi.text(self._lib.tk_op_name(r.op)),
                dims=tuple(r.dims[i] for i in range(r.n_dims)),
                seed=r.seed,
                max_abs_error=r.max_abs_error,
                max_rel_error=r.max_rel_error,
                tolerance_abs=r.tolerance_abs,
                tolerance_rel=r.tolerance_rel,
                passed=bool(r.passed),
                bad_indices=r.bad_indices,
                kernel_ms=r.kernel_ms,
                origin=Origin(r.origin),
                compile_ms=r.compile_ms,
                source_fingerprint=_capi.text(r.source_fingerprint),
                compiler=_capi.text(r.compiler),
                cache_key=_capi.text(r.cache_key),
                device=_capi.text(r.device),
                arch=_capi.text(r.arch),
                policy=_capi.text(r.policy),
                fallback_calls=r.fallback_calls,
                builds_done=r.builds_done,
                builds_pending=r.builds_pending,
                wait_ms=r.wait_ms,
            )
        finally:
            self._lib.tk_check_report_free(byref(r))
