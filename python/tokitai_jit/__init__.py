"""tokitai_jit: GPU kernels compiled at run time, from Python.

A pure-Python binding (ctypes) of the tokitai-jit C library: the seven fp16
operators on PyTorch / CuPy arrays (anything with ``__cuda_array_interface__``
or DLPack) on the caller's stream, user kernels compiled with NVRTC / hipRTC
and cached on disk, and the cache tools.

    import torch, tokitai_jit as tj
    with tj.Context() as ctx:
        c = ctx.gemm_f16_fwd(a, b)          # a, b: torch.float16 CUDA tensors

The shared library is found through ``$TOKITAI_JIT_LIBRARY``, the install
layout, the build tree of a checkout, then the system loader.
"""

from __future__ import annotations

from . import cache
from ._capi import Backend, BuildMode, Op, Origin, Policy, Status, has, library_path
from ._context import (
    CheckReport,
    Context,
    ContextStats,
    DeviceBuffer,
    PrecompileResult,
    ResourceUsage,
    TuneReport,
    current_context,
)
from ._kernel import Kernel, KernelInfo, Launcher, parse_signature
from .errors import (
    BackendUnavailableError,
    CompileError,
    CorruptError,
    DeviceError,
    InternalError,
    InvalidArgumentError,
    LaunchError,
    LoadError,
    MisalignedError,
    NoDeviceError,
    NotFoundError,
    OutOfMemoryError,
    OutOfToleranceError,
    SizeOverflowError,
    TokitaiError,
    TokitaiIOError,
    UnsupportedError,
)

__version__ = "0.2.0"


def library_version() -> str:
    """The version string of the loaded C library (tk_version_string)."""
    from . import _capi

    return _capi.text(_capi.lib().tk_version_string())


def describe_backend(backend: str) -> str:
    """What ``tokitai-jit --info`` prints for one backend ('cuda', 'hip',
    'stub'): library paths and versions, devices, or why it is unusable."""
    import ctypes

    from . import _capi
    from ._context import _enum

    kind = _enum(Backend, backend, "backend")
    buf = ctypes.create_string_buffer(8192)
    _capi.lib().tk_backend_describe(int(kind), buf, len(buf))
    return _capi.text(buf.value)


__all__ = [
    "Backend",
    "BackendUnavailableError",
    "BuildMode",
    "CheckReport",
    "CompileError",
    "Context",
    "ContextStats",
    "CorruptError",
    "DeviceBuffer",
    "DeviceError",
    "InternalError",
    "InvalidArgumentError",
    "Kernel",
    "KernelInfo",
    "LaunchError",
    "Launcher",
    "LoadError",
    "MisalignedError",
    "NoDeviceError",
    "NotFoundError",
    "Op",
    "Origin",
    "OutOfMemoryError",
    "OutOfToleranceError",
    "Policy",
    "PrecompileResult",
    "ResourceUsage",
    "SizeOverflowError",
    "Status",
    "TokitaiError",
    "TuneReport",
    "TokitaiIOError",
    "UnsupportedError",
    "cache",
    "current_context",
    "describe_backend",
    "has",
    "library_path",
    "library_version",
    "parse_signature",
]
