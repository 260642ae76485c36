"""ctypes view of the C library: every struct mirror and every prototype.

This is the one module that knows the C ABI. Each ``ctypes.Structure`` below
mirrors a struct of ``include/tokitai/tokitai.h`` or ``ops.h`` field for field;
``python/tests/test_layout.py`` compiles a C program against the headers and
compares every size and offset with these classes, so a header change that is
not repeated here fails the tests instead of corrupting memory.

Fields appended to a C struct are appended here (same order, same types).
Functions that only newer libraries have are declared in ``_OPTIONAL`` and
probed with ``has()``; callers raise ``NotImplementedError`` when they are
missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    c_char_p,
    c_double,
    c_float,
    c_char,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_ubyte,
    c_uint,
    c_uint16,
    c_uint64,
    c_void_p,
)
from typing import Any, Callable, Dict, List, Optional, Tuple

# ------------------------------------------------------------------ enums


class Status(enum.IntEnum):
    """tk_status: fixed numeric values (TK_STATUS_LIST in tokitai.h)."""

    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    IO_ERROR = 3
    NOT_FOUND = 4
    CORRUPT = 5
    BACKEND_UNAVAILABLE = 6
    NO_DEVICE = 7
    UNSUPPORTED = 8
    COMPILE_FAILED = 9
    LOAD_FAILED = 10
    LAUNCH_FAILED = 11
    DEVICE_ERROR = 12
    MISALIGNED = 13
    OVERFLOW = 14
    OUT_OF_TOLERANCE = 15
    INTERNAL = 16
    TIMEOUT = 17


class Backend(enum.IntEnum):
    """tk_backend_kind."""

    AUTO = 0
    CUDA = 1
    HIP = 2
    STUB = 3


class Policy(enum.IntEnum):
    """tk_policy: operator specialisation policy."""

    EXACT = 0
    GENERIC = 1
    STABLE = 2


class BuildMode(enum.IntEnum):
    """tk_build_mode (libraries with tk_config_set_build_mode only)."""

    ASYNC = 0
    SYNC = 1


class Origin(enum.IntEnum):
    """tk_origin: where tk_kernel_get found a kernel."""

    MEMORY = 0
    DISK = 1
    COMPILED = 2


class Op(enum.IntEnum):
    """tk_op: the seven operators."""

    GEMM_F16_FWD = 0
    GEMM_F16_GRAD_A = 1
    GEMM_F16_GRAD_B = 2
    SOFTMAX_F16_FWD = 3
    SOFTMAX_XENT_F16_BWD = 4
    EMBEDDING_F16_FWD = 5
    EMBEDDING_F16_BWD = 6


LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = 0, 1, 2, 3
EMBEDDING_DETERMINISTIC = 1

# ---------------------------------------------------------------- structs


class tk_resource_usage(ctypes.Structure):
    _fields_ = [
        ("registers", c_int32),
        ("sgprs", c_int32),
        ("agprs", c_int32),
        ("shared_bytes", c_int32),
        ("local_bytes", c_int32),
        ("spill_count", c_int32),
        ("wavefront_size", c_int32),
        ("kernarg_bytes", c_int32),
        ("max_threads", c_int32),
    ]


class tk_cache_entry_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("key_hex", c_char_p),
        ("path", c_char_p),
        ("kernel", c_char_p),
        ("source", c_char_p),
        ("backend", c_char_p),
        ("arch", c_char_p),
        ("compiler", c_char_p),
        ("options", c_char_p),
        ("payload_size", c_uint64),
        ("file_size", c_uint64),
        ("created", c_int64),
        ("last_used", c_int64),
        ("resources", tk_resource_usage),
        ("read_only_tier", c_int),
        ("source_hash", c_char_p),
    ]


class tk_cache_stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("entries", c_uint64),
        ("bytes", c_uint64),
        ("max_bytes", c_uint64),
        ("temp_files", c_uint64),
        ("bad_files", c_uint64),
        ("hits", c_uint64),
        ("misses", c_uint64),
        ("compiles", c_uint64),
        ("compile_seconds", c_double),
        ("fallback_calls", c_uint64),
        ("errors", c_uint64),
        ("stats_since", c_int64),
        ("source_bytes", c_uint64),
    ]


class tk_context_stats(ctypes.Structure):
    # Fields appended to the C struct are appended here, in order.
    _fields_ = [
        ("struct_size", c_size_t),
        ("memory_hits", c_uint64),
        ("disk_hits", c_uint64),
        ("compiles", c_uint64),
        ("compile_failures", c_uint64),
        ("loads", c_uint64),
        ("load_failures", c_uint64),
        ("cache_errors", c_uint64),
        ("compile_seconds", c_double),
        ("fallback_calls", c_uint64),
        ("builds_queued", c_uint64),
        ("builds_done", c_uint64),
        ("builds_pending", c_uint64),
        ("waits", c_uint64),
        ("wait_seconds", c_double),
        ("sync_compiles", c_uint64),
        ("builds_failed", c_uint64),
        ("builds_dropped", c_uint64),
        ("remote_hits", c_uint64),
        ("remote_misses", c_uint64),
        ("remote_errors", c_uint64),
        ("remote_rejected", c_uint64),
        ("remote_publishes", c_uint64),
        ("workspace_bytes", c_uint64),
        ("workspace_peak", c_uint64),
        ("workspace_allocs", c_uint64),
    ]


class tk_define(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_char_p)]


class tk_header(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("text", c_char_p)]


class tk_kernel_desc(ctypes.Structure):
    # A library whose tk_kernel_desc ends with source_label / headers /
    # n_headers gets them appended here (with a tk_header mirror); Kernel()
    # then accepts headers= and label= (see has_field()).
    _fields_ = [
        ("source_name", c_char_p),
        ("source", c_char_p),
        ("entry", c_char_p),
        ("defines", POINTER(tk_define)),
        ("n_defines", c_size_t),
        ("options", POINTER(c_char_p)),
        ("n_options", c_size_t),
        ("source_label", c_char_p),
        ("headers", POINTER(tk_header)),
        ("n_headers", c_size_t),
    ]


class tk_kernel_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("key_hex", c_char_p),
        ("entry", c_char_p),
        ("origin", c_int),
        ("compile_seconds", c_double),
        ("resources", tk_resource_usage),
    ]


class tk_check_report(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("op", c_int),
        ("dims", c_int64 * 4),
        ("n_dims", c_int),
        ("seed", c_uint64),
        ("max_abs_error", c_double),
        ("max_rel_error", c_double),
        ("tolerance_abs", c_double),
        ("tolerance_rel", c_double),
        ("passed", c_int),
        ("bad_indices", c_uint64),
        ("kernel_ms", c_double),
        ("origin", c_int),
        ("compile_ms", c_double),
        ("source_fingerprint", c_char_p),
        ("compiler", c_char_p),
        ("cache_key", c_char_p),
        ("device", c_char_p),
        ("arch", c_char_p),
        ("policy", c_char_p),
        ("fallback_calls", c_uint64),
        ("builds_done", c_uint64),
        ("builds_pending", c_uint64),
        ("wait_ms", c_double),
    ]


# Every mirrored struct, by its C name: the layout test walks this table.
class tk_tune_timing(ctypes.Structure):
    _fields_ = [("config", c_char * 64), ("us", c_double)]


class tk_tune_report(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("record", c_char * 128),
        ("chosen", c_char * 64),
        ("heuristic", c_char * 64),
        ("chosen_us", c_double),
        ("heuristic_us", c_double),
        ("timed_m", c_int64),
        ("candidates", c_uint),
        ("compiled", c_uint),
        ("rejected", c_uint),
        ("timed", tk_tune_timing * 128),
        ("stored", c_int),
        ("mid_m", c_int64),
        ("chosen_mid_us", c_double),
        ("heuristic_mid_us", c_double),
        ("timed_mid_us", c_double * 128),
    ]


STRUCTS: Dict[str, type] = {
    "tk_resource_usage": tk_resource_usage,
    "tk_cache_entry_info": tk_cache_entry_info,
    "tk_cache_stats": tk_cache_stats,
    "tk_context_stats": tk_context_stats,
    "tk_define": tk_define,
    "tk_header": tk_header,
    "tk_kernel_desc": tk_kernel_desc,
    "tk_kernel_info": tk_kernel_info,
    "tk_check_report": tk_check_report,
    "tk_tune_timing": tk_tune_timing,
    "tk_tune_report": tk_tune_report,
}


def out_struct(struct: type) -> Any:
    """An instance of ``struct`` for the library to write into. Sized structs
    (those starting with ``struct_size``) get this mirror's size, so a
    library whose struct has grown writes no more than the mirror holds; the
    spare room behind it covers older libraries of unsized structs."""
    buf = ctypes.create_string_buffer(ctypes.sizeof(struct) + 1024)
    obj = struct.from_buffer(buf)  # keeps buf alive
    if struct._fields_ and struct._fields_[0][0] == "struct_size":
        obj.struct_size = ctypes.sizeof(struct)
    return obj


def has_field(struct: type, name: str) -> bool:
    """True when the mirror of ``struct`` has a field ``name``."""
    return any(f[0] == name for f in struct._fields_)


# -------------------------------------------------------------- callbacks

LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
CACHE_VISIT_FN = CFUNCTYPE(c_int, c_void_p, POINTER(tk_cache_entry_info))
CACHE_BAD_FN = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
CACHE_SELECT_FN = CFUNCTYPE(c_int, c_void_p, POINTER(tk_cache_entry_info))

# ------------------------------------------------------------- prototypes

_ctx = c_void_p  # tk_context *
_cfg = c_void_p  # tk_config *
_cache = c_void_p  # tk_cache *
_st = c_int  # tk_status
_i64 = c_int64
_vp = c_void_p

# name: (restype, argtypes). Every function of the public API the package uses.
_REQUIRED: Dict[str, Tuple[Any, List[Any]]] = {
    "tk_version_number": (c_uint, []),
    "tk_version_string": (c_char_p, []),
    "tk_abi_version": (c_uint, []),
    "tk_status_str": (c_char_p, [c_int]),
    "tk_config_create": (_st, [POINTER(c_void_p)]),
    "tk_config_destroy": (None, [_cfg]),
    "tk_config_set_cache_dir": (_st, [_cfg, c_char_p]),
    "tk_config_set_cache_lower": (_st, [_cfg, c_char_p]),
    "tk_config_set_cache_max_size": (_st, [_cfg, c_uint64]),
    "tk_config_set_cache_read_only": (_st, [_cfg, c_int]),
    "tk_config_set_cache_disabled": (_st, [_cfg, c_int]),
    "tk_config_set_backend": (_st, [_cfg, c_int]),
    "tk_config_set_device": (_st, [_cfg, c_int]),
    "tk_config_set_target": (_st, [_cfg, c_char_p]),
    "tk_config_set_policy": (_st, [_cfg, c_int]),
    "tk_config_set_log": (_st, [_cfg, LOG_FN, c_void_p]),
    "tk_config_set_log_level": (_st, [_cfg, c_int]),
    "tk_cache_open": (_st, [_cfg, POINTER(c_void_p)]),
    "tk_cache_close": (None, [_cache]),
    "tk_cache_root": (c_char_p, [_cache]),
    "tk_cache_last_error": (c_char_p, [_cache]),
    "tk_cache_list": (_st, [_cache, CACHE_VISIT_FN, c_void_p]),
    "tk_cache_get_stats": (_st, [_cache, POINTER(tk_cache_stats)]),
    "tk_cache_verify": (_st, [_cache, CACHE_BAD_FN, c_void_p, POINTER(c_uint64)]),
    "tk_cache_prune": (_st, [_cache, c_uint64, POINTER(c_uint64)]),
    "tk_cache_clear": (_st, [_cache, POINTER(c_uint64)]),
    "tk_cache_export": (
        _st,
        [_cache, c_char_p, CACHE_SELECT_FN, c_void_p, POINTER(c_uint64)],
    ),
    "tk_cache_import": (
        _st,
        [_cache, c_char_p, CACHE_BAD_FN, c_void_p, POINTER(c_uint64), POINTER(c_uint64)],
    ),
    "tk_parse_size": (_st, [c_char_p, POINTER(c_uint64)]),
    "tk_context_create": (_st, [_cfg, POINTER(c_void_p), c_char_p, c_size_t]),
    "tk_context_destroy": (None, [_ctx]),
    "tk_context_last_error": (c_char_p, [_ctx]),
    "tk_context_backend_name": (c_char_p, [_ctx]),
    "tk_context_target": (c_char_p, [_ctx]),
    "tk_context_compiler": (c_char_p, [_ctx]),
    "tk_context_policy": (c_int, [_ctx]),
    "tk_context_get_stats": (_st, [_ctx, POINTER(tk_context_stats)]),
    "tk_context_reset_stats": (None, [_ctx]),
    "tk_kernel_get": (_st, [_ctx, POINTER(tk_kernel_desc), POINTER(c_void_p)]),
    "tk_kernel_get_info": (_st, [c_void_p, POINTER(tk_kernel_info)]),
    "tk_kernel_launch": (
        _st,
        [_ctx, c_void_p, POINTER(c_uint), POINTER(c_uint), c_uint, c_void_p, POINTER(c_void_p)],
    ),
    "tk_kernel_precompile": (_st, [_ctx, POINTER(tk_kernel_desc), POINTER(c_int)]),
    "tk_backend_describe": (_st, [c_int, c_char_p, c_size_t]),
    "tk_embedded_sources": (POINTER(c_char_p), []),
    "tk_mem_alloc": (_st, [_ctx, c_size_t, POINTER(c_void_p)]),
    "tk_mem_free": (_st, [_ctx, c_void_p]),
    "tk_mem_upload": (_st, [_ctx, c_void_p, c_void_p, c_size_t]),
    "tk_mem_download": (_st, [_ctx, c_void_p, c_void_p, c_size_t]),
    "tk_mem_set": (_st, [_ctx, c_void_p, c_ubyte, c_size_t]),
    "tk_stream_sync": (_st, [_ctx, c_void_p]),
    # ops.h
    "tk_gemm_f16_fwd": (_st, [_ctx, _i64, _i64, _i64, _vp, _i64, _vp, _i64, _vp, _i64, _vp]),
    "tk_gemm_f16_grad_a": (_st, [_ctx, _i64, _i64, _i64, _vp, _i64, _vp, _i64, _vp, _i64, _vp]),
    "tk_gemm_f16_grad_b": (_st, [_ctx, _i64, _i64, _i64, _vp, _i64, _vp, _i64, _vp, _i64, _vp]),
    "tk_softmax_f16_fwd": (_st, [_ctx, _i64, _i64, _vp, _i64, _vp, _i64, _vp]),
    "tk_softmax_xent_f16_bwd": (_st, [_ctx, _i64, _i64, _vp, _i64, _vp, _i64, _vp, _i64, _vp]),
    "tk_embedding_f16_fwd": (_st, [_ctx, _i64, _i64, _vp, _i64, _vp, _vp, _vp, _vp]),
    "tk_embedding_f16_bwd": (_st, [_ctx, _i64, _i64, _vp, _i64, _vp, _vp, c_uint, _vp, _vp]),
    "tk_op_name": (c_char_p, [c_int]),
    "tk_op_precompile": (
        _st,
        [_ctx, c_int, POINTER(c_int64), c_int, POINTER(c_uint), POINTER(c_uint)],
    ),
    "tk_op_tune": (_st, [_ctx, c_int, POINTER(c_int64), c_int, POINTER(tk_tune_report)]),
    "tk_check_run": (_st, [_ctx, c_int, POINTER(c_int64), c_int, c_uint64, POINTER(tk_check_report)]),
    "tk_check_report_free": (None, [POINTER(tk_check_report)]),
    "tk_f16_to_f32": (c_float, [c_uint16]),
    "tk_f32_to_f16": (c_uint16, [c_float]),
}

# Functions of newer libraries: declared when present, probed with has().
_OPTIONAL: Dict[str, Tuple[Any, List[Any]]] = {
    "tk_config_set_build_mode": (_st, [_cfg, c_int]),
    "tk_context_wait_builds": (_st, [_ctx, c_int]),
    "tk_cache_zero_stats": (_st, [_cache]),
}

# --------------------------------------------------------------- loading

LIBRARY_ENV = "TOKITAI_JIT_LIBRARY"
_SONAME = "libtokitai_jit.so.%d" % 1

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _is_sanitizer_build(build_dir: str) -> bool:
    # An ASan library cannot be dlopen'ed into a plain python3 (the runtime
    # must come first and would abort the process), so such build trees are
    # never picked automatically.
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            return any(line.startswith("TK_SANITIZE:BOOL=ON") for line in f)
    except OSError:
        return False


def candidate_paths() -> List[Tuple[str, str]]:
    """Where the library is looked for, in order, as (how, path) pairs.

    1. ``$TOKITAI_JIT_LIBRARY`` (a file);
    2. the install layout: ``_install_paths.py``, written by ``cmake --install``
       next to this package, holds the library's path relative to it;
    3. the build tree, when the package runs from a checkout
       (``<repo>/build/``, then the other ``<repo>/build*/`` folders that are
       not sanitizer builds, newest first);
    4. the system loader (``libtokitai_jit.so.1`` on the usual search path).
    """
    out: List[Tuple[str, str]] = []
    env = os.environ.get(LIBRARY_ENV)
    if env:
        out.append((LIBRARY_ENV, env))
        return out
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _install_paths  # type: ignore[attr-defined]

        out.append(("install layout", os.path.normpath(os.path.join(here, _install_paths.LIBRARY))))
    except ImportError:
        pass
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "include", "tokitai", "tokitai.h")):
        builds = []
        try:
            names = os.listdir(repo)
        except OSError:
            names = []
        for name in names:
            d = os.path.join(repo, name)
            lib = os.path.join(d, _SONAME)
            if name.startswith("build") and os.path.isfile(lib) and not _is_sanitizer_build(d):
                builds.append((name != "build", -os.path.getmtime(lib), lib))
        for _, _, lib in sorted(builds):
            out.append(("build tree", lib))
    out.append(("system loader", ctypes.util.find_library("tokitai_jit") or _SONAME))
    return out


def _declare(lib: ctypes.CDLL) -> None:
    missing = [n for n in _REQUIRED if not hasattr(lib, n)]
    if missing:
        raise OSError(
            "the tokitai-jit library lacks %s: it is older than this package" % ", ".join(missing)
        )
    for table in (_REQUIRED, _OPTIONAL):
        for name, (res, args) in table.items():
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.restype = res
                fn.argtypes = args


# The library's major.minor this package mirrors (TK_VERSION_MAJOR/MINOR).
ABI_VERSION = 1


def _check_version(handle: ctypes.CDLL, path: str) -> None:
    # The mirrors above follow the sized-struct rule, so any library of the
    # same binary interface (tk_abi_version) works, whatever its version.
    try:
        fn = handle.tk_abi_version
    except AttributeError:
        fn = None
    found = int(fn()) if fn is not None else 0
    if found != ABI_VERSION:
        raise OSError(
            "%s is tokitai-jit %s with binary interface %d; this package needs interface %d "
            "(install matching versions)" % (path, text(handle.tk_version_string()), found, ABI_VERSION)
        )


def lib() -> ctypes.CDLL:
    """The loaded library (loaded on first use; see candidate_paths())."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, path in candidate_paths():
            if how != "system loader" and not os.path.exists(path):
                tried.append("%s: %s (no such file)" % (how, path))
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s: %s (%s)" % (how, path, e))
                continue
            _declare(handle)
            _check_version(handle, path)
            _lib, _lib_path = handle, path
            return handle
        raise OSError(
            "cannot load the tokitai-jit library; set %s to its path. Tried:\n  %s"
            % (LIBRARY_ENV, "\n  ".join(tried))
        )


def library_path() -> str:
    """Path (or loader name) of the library in use."""
    lib()
    assert _lib_path is not None
    return _lib_path


def has(name: str) -> bool:
    """True when the loaded library exports the function ``name``."""
    return hasattr(lib(), name)


def text(value: Optional[bytes]) -> str:
    """A C string from the library as str ('' for NULL)."""
    return value.decode("utf-8", "replace") if value is not None else ""


def status_str(status: int) -> str:
    return text(lib().tk_status_str(status))


Fn = Callable[..., int]


# ------------------------------------------------ kernel parameter layouts


class ParamKind(enum.IntEnum):
    """tk_param_kind: what a kernel parameter is, as far as the code object
    (and a C++ kernel's mangled name) tells."""

    UNKNOWN = 0
    POINTER = 1
    INT = 2
    UINT = 3
    FLOAT = 4
    STRUCT = 5


class tk_kernel_param(ctypes.Structure):
    _fields_ = [
        ("offset", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("kind", c_int32),
        ("reserved", ctypes.c_uint32),
    ]


class tk_kernel_params(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("n_params", c_size_t),
        ("params", POINTER(tk_kernel_param)),
    ]


STRUCTS["tk_kernel_param"] = tk_kernel_param
STRUCTS["tk_kernel_params"] = tk_kernel_params
_OPTIONAL["tk_kernel_get_params"] = (_st, [c_void_p, POINTER(tk_kernel_params)])
