"""The seven operators as PyTorch operators, with autograd and modules.

    import torch, tokitai_jit.torch as tt
    lin = tt.Linear(1024, 4096).cuda()          # fp16 weight [in, out]
    y = lin(x.half())                           # fp32 [.., 4096]
    p = tt.softmax(logits16)                    # fp16, grad via the xent bwd
    e = tt.embedding(weight16, idx32)           # grad via the embedding bwd

The operators are registered in the ``tokitai`` namespace
(``torch.ops.tokitai.gemm_f16_fwd`` ...) with ``torch.library.custom_op``
where the installed PyTorch has it (2.4 and later: fake implementations and
autograd formulas registered with them, so ``torch.compile(fullgraph=True)``
traces them and CUDA graphs capture them), else with
``torch.library.Library`` (a Meta implementation, so fake tensors and meta
tensors get shapes; autograd through the functions below).

Eager calls of the functions and modules below skip the dispatcher: they
check the tensors, allocate the output with ``torch.empty`` and call the C
library directly (through the small C extension ``tokitai_jit._fast`` when it
was built, else through ctypes), on ``torch.cuda.current_stream()``. Under
``torch.compile`` they call ``torch.ops.tokitai.*`` so the graph holds the
operators.

CUDA/HIP tensors run on the device through one context per device (made on
first use, build mode "sync": the first call of a shape class compiles the
specialised kernel before it runs, so no kernel changes behind a captured
graph). CPU tensors run the library's CPU references (``tk_ref_*``:
packed, single-threaded, meant for tests).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from ctypes import c_int64, c_uint64, c_void_p
from typing import Any, Dict, Iterator, Optional, Tuple

import torch

from . import _capi
from ._context import Context
from .errors import check

try:
    from . import _fast  # type: ignore[attr-defined]
except ImportError:  # the pure-Python path
    _fast = None

__all__ = [
    "HAS_CUSTOM_OP",
    "Embedding",
    "Linear",
    "Softmax",
    "context_for",
    "embedding",
    "gemm",
    "linear",
    "set_deterministic_embedding",
    "set_fast_path",
    "softmax",
    "use_context",
]

NAMESPACE = "tokitai"
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")

_lib = _capi.lib()
_F16, _F32, _I32 = torch.float16, torch.float32, torch.int32

# ------------------------------------------------------------ C entry points


def _fn(name: str, argtypes: Any) -> Any:
    # lib[name] is a fresh function object: these prototypes do not touch
    # the ones _capi declares on lib.<name>.
    f = _lib[name]
    f.restype = ctypes.c_int
    f.argtypes = argtypes
    return f


_i, _p = c_int64, c_void_p
_GEMM_ARGS = [_p, _i, _i, _i, _p, _i, _p, _i, _p, _i, _p]
_C = {
    "gemm_f16_fwd": _fn("tk_gemm_f16_fwd", _GEMM_ARGS),
    "gemm_f16_grad_a": _fn("tk_gemm_f16_grad_a", _GEMM_ARGS),
    "gemm_f16_grad_b": _fn("tk_gemm_f16_grad_b", _GEMM_ARGS),
    "softmax_f16_fwd": _fn("tk_softmax_f16_fwd", [_p, _i, _i, _p, _i, _p, _i, _p]),
    "softmax_xent_f16_bwd": _fn("tk_softmax_xent_f16_bwd", [_p, _i, _i, _p, _i, _p, _i, _p, _i, _p]),
    "embedding_f16_fwd": _fn("tk_embedding_f16_fwd", [_p, _i, _i, _p, _i, _p, _p, _p, _p]),
    "embedding_f16_bwd": _fn("tk_embedding_f16_bwd", [_p, _i, _i, _p, _i, _p, _p, ctypes.c_uint, _p, _p]),
}
_ADDR = {k: ctypes.cast(f, c_void_p).value for k, f in _C.items()}
# The C extension's operator numbers (tk_op order, as in _fast.c).
_KIND = {k: int(getattr(_capi.Op, k.upper())) for k in _C}
_REF = {
    "gemm_f16_fwd": _fn("tk_ref_gemm_f16_fwd", [_i, _i, _i, _p, _p, _p]),
    "gemm_f16_grad_a": _fn("tk_ref_gemm_f16_grad_a", [_i, _i, _i, _p, _p, _p]),
    "gemm_f16_grad_b": _fn("tk_ref_gemm_f16_grad_b", [_i, _i, _i, _p, _p, _p]),
    "softmax_f16_fwd": _fn("tk_ref_softmax_f16_fwd", [_i, _i, _p, _p]),
    "softmax_xent_f16_bwd": _fn("tk_ref_softmax_xent_f16_bwd", [_i, _i, _p, _p, _p]),
    "embedding_f16_fwd": _fn("tk_ref_embedding_f16_fwd", [_i, _i, _p, _i, _p, _p, ctypes.POINTER(c_uint64)]),
    "embedding_f16_bwd": _fn("tk_ref_embedding_f16_bwd", [_i, _i, _p, _i, _p, _p, ctypes.POINTER(c_uint64)]),
}
_USE_FAST = _fast is not None


def set_fast_path(enabled: bool) -> bool:
    """Chooses the C extension (True, when built) or ctypes (False) for the
    library calls; returns the previous setting. For measurements and tests."""
    global _USE_FAST
    prev = _USE_FAST
    _USE_FAST = bool(enabled) and _fast is not None
    return prev


def _failed(op: str, ctx: int, st: int) -> None:
    check(st, lambda: _capi.text(_lib.tk_context_last_error(ctx)), call="tk_" + op)


def _launch(op: str, ctx: int, *args: int) -> None:
    if _USE_FAST:
        st = _fast.call(_KIND[op], _ADDR[op], ctx, *args)
    else:
        st = _C[op](ctx, *args)
    if st:
        _failed(op, ctx, st)


# (kind, address) of the two operators whose common case is inlined
_FAST_GEMM_FWD = (_KIND["gemm_f16_fwd"], _ADDR["gemm_f16_fwd"])
_FAST_SOFTMAX_FWD = (_KIND["softmax_f16_fwd"], _ADDR["softmax_f16_fwd"])


def _ref(op: str, *args: Any) -> None:
    st = _REF[op](*args)
    if st:
        check(st, call="tk_ref_" + op)


# ------------------------------------------------------------------ contexts

_lock = threading.Lock()
_contexts: Dict[int, Context] = {}
_tls = threading.local()

try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # type: ignore[attr-defined]
except AttributeError:  # CPU-only builds of PyTorch

    def _raw_stream(index: int) -> int:
        return int(torch.cuda.current_stream(index).cuda_stream)


def context_for(device: Any) -> Context:
    """The context the operators use for a CUDA/HIP ``device`` (made on
    first use with build_mode="sync", the environment's settings otherwise),
    or the one set with :func:`use_context`."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is not None:
        return ctx
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    c = _contexts.get(index)
    if c is None or c.closed:
        with _lock:
            c = _contexts.get(index)
            if c is None or c.closed:
                c = _contexts[index] = Context(device=index, build_mode="sync")
    return c


@contextlib.contextmanager
def use_context(ctx: Context) -> Iterator[Context]:
    """Runs the operators of this thread on ``ctx`` inside the block, and
    the backward of what they computed there (on whichever thread PyTorch
    runs it, inside the block or after it). With a
    stub-backend context, CPU tensors go through the device path too (the
    library is called and counts the launch; nothing is computed): the
    plumbing tests use that."""
    prev = getattr(_tls, "ctx", None)
    _tls.ctx = ctx
    try:
        yield ctx
    finally:
        _tls.ctx = prev


def _device_target(t: torch.Tensor) -> Optional[Tuple[int, int]]:
    """(context pointer, stream) for a device call, None for the CPU references."""
    ctx = getattr(_tls, "ctx", None)
    if t.is_cuda:
        index = t.get_device()
        if ctx is None:
            ctx = _contexts.get(index)
            if ctx is None or not ctx._ptr:
                ctx = context_for(t.device)
        return ctx._handle(), _raw_stream(index)
    if ctx is not None and ctx._backend_name == "stub":
        return ctx._handle(), 0
    return None


def _quick_context(dev: int) -> int:
    """The context pointer for tensors on device ``dev`` (-1: CPU) when one
    is ready without creating it, else 0 (the checked path then decides)."""
    ctx = getattr(_tls, "ctx", None)
    if dev >= 0:
        if ctx is None:
            ctx = _contexts.get(dev)
    elif ctx is not None and ctx._backend_name != "stub":
        return 0
    return ctx._ptr or 0 if ctx is not None else 0


# ---------------------------------------------------------- argument checks


_Tensor, _STRIDED = torch.Tensor, torch.strided


def _check_f16_matrix(t: Any, name: str, op: str) -> None:
    if isinstance(t, _Tensor) and t.dtype is _F16 and t.dim() == 2 and t.layout is _STRIDED:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: %s must be a torch.Tensor, got %s" % (op, name, type(t).__name__))
    if t.dtype != _F16:
        raise TypeError("%s: %s must be torch.float16, got %s (cast with .half())" % (op, name, t.dtype))
    if t.dim() != 2:
        raise ValueError("%s: %s must be 2-D, got shape %s" % (op, name, tuple(t.shape)))
    if t.layout != torch.strided:
        raise TypeError("%s: %s must be a dense (strided) tensor, got %s" % (op, name, t.layout))


def _same_device(op: str, *ts: torch.Tensor) -> None:
    d = ts[0].get_device()
    for t in ts[1:]:
        if t.get_device() != d:
            raise ValueError("%s: tensors on %s and %s" % (op, ts[0].device, t.device))


def _rows(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """t with unit column stride and row stride >= columns (a copy
    otherwise), and its leading dimension."""
    rows, cols = t.shape
    rs, cs = t.stride()
    if (cols > 1 and cs != 1) or (rows > 1 and rs < cols):
        t = t.contiguous()
        rs = cols
    return t, (rs if rows > 1 else cols)


def _gemm_shapes(op: str, x: torch.Tensor, y: torch.Tensor, xn: str, yn: str) -> None:
    _check_f16_matrix(x, xn, op)
    _check_f16_matrix(y, yn, op)
    _same_device(op, x, y)


def _check_gemm_fwd(a: torch.Tensor, b: torch.Tensor) -> Tuple[int, int, int]:
    _gemm_shapes("gemm_f16_fwd", a, b, "a", "b")
    if a.shape[1] != b.shape[0]:
        raise ValueError("gemm_f16_fwd: a [M,K] %s and b [K,N] %s disagree on K" % (tuple(a.shape), tuple(b.shape)))
    return a.shape[0], b.shape[1], a.shape[1]


def _check_grad_a(gc: torch.Tensor, b: torch.Tensor) -> Tuple[int, int, int]:
    _gemm_shapes("gemm_f16_grad_a", gc, b, "grad_c", "b")
    if gc.shape[1] != b.shape[1]:
        raise ValueError("gemm_f16_grad_a: grad_c [M,N] %s and b [K,N] %s disagree on N" % (tuple(gc.shape), tuple(b.shape)))
    return gc.shape[0], gc.shape[1], b.shape[0]


def _check_grad_b(a: torch.Tensor, gc: torch.Tensor) -> Tuple[int, int, int]:
    _gemm_shapes("gemm_f16_grad_b", a, gc, "a", "grad_c")
    if a.shape[0] != gc.shape[0]:
        raise ValueError("gemm_f16_grad_b: a [M,K] %s and grad_c [M,N] %s disagree on M" % (tuple(a.shape), tuple(gc.shape)))
    return a.shape[0], gc.shape[1], a.shape[1]


def _check_softmax(op: str, *ts: torch.Tensor) -> None:
    for t, n in zip(ts, ("x",) if len(ts) == 1 else ("s", "g")):
        _check_f16_matrix(t, n, op)
    if len(ts) == 2 and ts[0].shape != ts[1].shape:
        raise ValueError("%s: s %s and g %s differ in shape" % (op, tuple(ts[0].shape), tuple(ts[1].shape)))
    _same_device(op, *ts)


def _check_idx(op: str, idx: Any) -> None:
    if not isinstance(idx, torch.Tensor):
        raise TypeError("%s: idx must be a torch.Tensor, got %s" % (op, type(idx).__name__))
    if idx.dtype != _I32:
        raise TypeError("%s: idx must be torch.int32, got %s (idx.to(torch.int32))" % (op, idx.dtype))


def _check_embedding(weight: torch.Tensor, idx: torch.Tensor) -> None:
    _check_f16_matrix(weight, "weight", "embedding_f16_fwd")
    _check_idx("embedding_f16_fwd", idx)
    _same_device("embedding_f16_fwd", weight, idx)


def _check_embedding_bwd(grad_out: torch.Tensor, idx: torch.Tensor, num_weights: int) -> int:
    op = "embedding_f16_bwd"
    _check_idx(op, idx)
    if not isinstance(grad_out, torch.Tensor) or grad_out.dtype != _F16:
        raise TypeError("%s: grad_out must be a torch.float16 tensor" % op)
    ok = grad_out.dim() >= 1 and (tuple(grad_out.shape[:-1]) == tuple(idx.shape)
                                  or (grad_out.dim() == 2 and grad_out.shape[0] == idx.numel()))
    if not ok:
        raise ValueError("%s: grad_out %s must be idx.shape + (D,) for idx %s" % (op, tuple(grad_out.shape), tuple(idx.shape)))
    if num_weights < 0:
        raise ValueError("%s: num_weights must be >= 0 (got %d)" % (op, num_weights))
    _same_device(op, grad_out, idx)
    return grad_out.shape[-1]


# ------------------------------------------------------ the implementations
# One per operator, for every device: the CUDA/HIP path calls the library on
# the current stream, the CPU path its reference.


def _gemm_fwd_impl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # The common case in one piece (this is the per-call host cost): fp16
    # matrices with unit column strides on one device, with row strides
    # the library takes as they are; anything else takes the checked path.
    if a.dtype is _F16 and b.dtype is _F16 and a.dim() == 2 and b.dim() == 2 \
            and a.layout is _STRIDED and b.layout is _STRIDED:
        dev = a.get_device()
        ctx = _quick_context(dev)
        if ctx and b.get_device() == dev:
            M, K = a.shape
            K2, N = b.shape
            sa, sb = a.stride(), b.stride()
            if K == K2 and M > 1 and K > 1 and N > 1 and sa[1] == 1 and sb[1] == 1 and sa[0] >= K \
                    and sb[0] >= N:
                out = a.new_empty((M, N), dtype=_F32)
                stream = _raw_stream(dev) if dev >= 0 else 0
                if _USE_FAST:  # _launch, inlined: this is the per-call host cost
                    st = _fast.call(_FAST_GEMM_FWD[0], _FAST_GEMM_FWD[1], ctx, M, N, K, a.data_ptr(), sa[0],
                                    b.data_ptr(), sb[0], out.data_ptr(), N, stream)
                    if st:
                        _failed("gemm_f16_fwd", ctx, st)
                else:
                    _launch("gemm_f16_fwd", ctx, M, N, K, a.data_ptr(), sa[0], b.data_ptr(), sb[0],
                            out.data_ptr(), N, stream)
                return out
    M, N, K = _check_gemm_fwd(a, b)
    out = torch.empty((M, N), dtype=_F32, device=a.device)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()
    tgt = _device_target(a)
    if tgt is None:
        a, b = a.contiguous(), b.contiguous()
        _ref("gemm_f16_fwd", M, N, K, a.data_ptr(), b.data_ptr(), out.data_ptr())
        return out
    a, lda = _rows(a)
    b, ldb = _rows(b)
    _launch("gemm_f16_fwd", tgt[0], M, N, K, a.data_ptr(), lda, b.data_ptr(), ldb, out.data_ptr(), N, tgt[1])
    return out


def _gemm_grad_a_impl(grad_c: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, N, K = _check_grad_a(grad_c, b)
    out = torch.empty((M, K), dtype=_F16, device=grad_c.device)
    if M == 0 or K == 0:
        return out
    if N == 0:
        return out.zero_()
    tgt = _device_target(grad_c)
    if tgt is None:
        grad_c, b = grad_c.contiguous(), b.contiguous()
        _ref("gemm_f16_grad_a", M, N, K, grad_c.data_ptr(), b.data_ptr(), out.data_ptr())
        return out
    grad_c, ldg = _rows(grad_c)
    b, ldb = _rows(b)
    _launch("gemm_f16_grad_a", tgt[0], M, N, K, grad_c.data_ptr(), ldg, b.data_ptr(), ldb, out.data_ptr(), K, tgt[1])
    return out


def _gemm_grad_b_impl(a: torch.Tensor, grad_c: torch.Tensor) -> torch.Tensor:
    M, N, K = _check_grad_b(a, grad_c)
    out = torch.empty((K, N), dtype=_F16, device=a.device)
    if K == 0 or N == 0:
        return out
    if M == 0:
        return out.zero_()
    tgt = _device_target(a)
    if tgt is None:
        a, grad_c = a.contiguous(), grad_c.contiguous()
        _ref("gemm_f16_grad_b", M, N, K, a.data_ptr(), grad_c.data_ptr(), out.data_ptr())
        return out
    a, lda = _rows(a)
    grad_c, ldg = _rows(grad_c)
    _launch("gemm_f16_grad_b", tgt[0], M, N, K, a.data_ptr(), lda, grad_c.data_ptr(), ldg, out.data_ptr(), N, tgt[1])
    return out


def _softmax_fwd_impl(x: torch.Tensor) -> torch.Tensor:
    if x.dtype is _F16 and x.dim() == 2 and x.layout is _STRIDED:  # as in _gemm_fwd_impl
        dev = x.get_device()
        ctx = _quick_context(dev)
        if ctx:
            rows, cols = x.shape
            rs, cs = x.stride()
            if rows > 1 and cols > 1 and cs == 1 and rs >= cols:
                out = x.new_empty((rows, cols))
                stream = _raw_stream(dev) if dev >= 0 else 0
                if _USE_FAST:  # as in _gemm_fwd_impl
                    st = _fast.call(_FAST_SOFTMAX_FWD[0], _FAST_SOFTMAX_FWD[1], ctx, rows, cols, x.data_ptr(),
                                    rs, out.data_ptr(), cols, stream)
                    if st:
                        _failed("softmax_f16_fwd", ctx, st)
                else:
                    _launch("softmax_f16_fwd", ctx, rows, cols, x.data_ptr(), rs, out.data_ptr(), cols, stream)
                return out
    _check_softmax("softmax_f16_fwd", x)
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=_F16, device=x.device)
    if rows == 0 or cols == 0:
        return out
    tgt = _device_target(x)
    if tgt is None:
        x = x.contiguous()
        _ref("softmax_f16_fwd", rows, cols, x.data_ptr(), out.data_ptr())
        return out
    x, ldx = _rows(x)
    _launch("softmax_f16_fwd", tgt[0], rows, cols, x.data_ptr(), ldx, out.data_ptr(), cols, tgt[1])
    return out


def _softmax_bwd_impl(s: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    _check_softmax("softmax_xent_f16_bwd", s, g)
    rows, cols = s.shape
    out = torch.empty((rows, cols), dtype=_F16, device=s.device)
    if rows == 0 or cols == 0:
        return out
    tgt = _device_target(s)
    if tgt is None:
        s, g = s.contiguous(), g.contiguous()
        _ref("softmax_xent_f16_bwd", rows, cols, s.data_ptr(), g.data_ptr(), out.data_ptr())
        return out
    s, lds = _rows(s)
    g, ldg = _rows(g)
    _launch("softmax_xent_f16_bwd", tgt[0], rows, cols, s.data_ptr(), lds, g.data_ptr(), ldg, out.data_ptr(), cols, tgt[1])
    return out


def _embedding_fwd_impl(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    _check_embedding(weight, idx)
    V, D = weight.shape
    out = torch.empty(tuple(idx.shape) + (D,), dtype=_F16, device=weight.device)
    Q = idx.numel()
    if Q == 0 or D == 0:
        return out
    weight, idx = weight.contiguous(), idx.contiguous()
    tgt = _device_target(weight)
    if tgt is None:
        _ref("embedding_f16_fwd", V, D, weight.data_ptr(), Q, idx.data_ptr(), out.data_ptr(), None)
        return out
    _launch("embedding_f16_fwd", tgt[0], V, D, weight.data_ptr(), Q, idx.data_ptr(), out.data_ptr(), 0, tgt[1])
    return out


def _embedding_bwd_impl(grad_out: torch.Tensor, idx: torch.Tensor, num_weights: int,
                        deterministic: bool = False) -> torch.Tensor:
    D = _check_embedding_bwd(grad_out, idx, num_weights)
    V = num_weights
    gw = torch.zeros((V, D), dtype=_F16, device=grad_out.device)
    Q = idx.numel()
    if Q == 0 or D == 0 or V == 0:
        return gw
    grad_out, idx = grad_out.contiguous(), idx.contiguous()
    tgt = _device_target(grad_out)
    if tgt is None:
        _ref("embedding_f16_bwd", V, D, gw.data_ptr(), Q, idx.data_ptr(), grad_out.data_ptr(), None)
        return gw
    flags = _capi.EMBEDDING_DETERMINISTIC if deterministic else 0
    _launch("embedding_f16_bwd", tgt[0], V, D, gw.data_ptr(), Q, idx.data_ptr(), grad_out.data_ptr(), flags, 0, tgt[1])
    return gw


# -------------------------------------------------------------- fake impls


def _gemm_fwd_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, N, _ = _check_gemm_fwd(a, b)
    return a.new_empty((M, N), dtype=_F32)


def _gemm_grad_a_fake(grad_c: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, _, K = _check_grad_a(grad_c, b)
    return grad_c.new_empty((M, K), dtype=_F16)


def _gemm_grad_b_fake(a: torch.Tensor, grad_c: torch.Tensor) -> torch.Tensor:
    _, N, K = _check_grad_b(a, grad_c)
    return a.new_empty((K, N), dtype=_F16)


def _softmax_fwd_fake(x: torch.Tensor) -> torch.Tensor:
    _check_softmax("softmax_f16_fwd", x)
    return x.new_empty(tuple(x.shape), dtype=_F16)


def _softmax_bwd_fake(s: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    _check_softmax("softmax_xent_f16_bwd", s, g)
    return s.new_empty(tuple(s.shape), dtype=_F16)


def _embedding_fwd_fake(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    _check_embedding(weight, idx)
    return weight.new_empty(tuple(idx.shape) + (weight.shape[1],), dtype=_F16)


def _embedding_bwd_fake(grad_out: torch.Tensor, idx: torch.Tensor, num_weights: int,
                        deterministic: bool = False) -> torch.Tensor:
    D = _check_embedding_bwd(grad_out, idx, num_weights)
    return grad_out.new_empty((num_weights, D), dtype=_F16)


# name: (schema, implementation, fake implementation)
_OPS: Dict[str, Tuple[str, Any, Any]] = {
    "gemm_f16_fwd": ("(Tensor a, Tensor b) -> Tensor", _gemm_fwd_impl, _gemm_fwd_fake),
    "gemm_f16_grad_a": ("(Tensor grad_c, Tensor b) -> Tensor", _gemm_grad_a_impl, _gemm_grad_a_fake),
    "gemm_f16_grad_b": ("(Tensor a, Tensor grad_c) -> Tensor", _gemm_grad_b_impl, _gemm_grad_b_fake),
    "softmax_f16_fwd": ("(Tensor x) -> Tensor", _softmax_fwd_impl, _softmax_fwd_fake),
    "softmax_xent_f16_bwd": ("(Tensor s, Tensor g) -> Tensor", _softmax_bwd_impl, _softmax_bwd_fake),
    "embedding_f16_fwd": ("(Tensor weight, Tensor idx) -> Tensor", _embedding_fwd_impl, _embedding_fwd_fake),
    "embedding_f16_bwd": (
        "(Tensor grad_out, Tensor idx, int num_weights, bool deterministic=False) -> Tensor",
        _embedding_bwd_impl,
        _embedding_bwd_fake,
    ),
}


class _Raw:
    """The implementations under the operators' names (eager calls)."""

    gemm_f16_fwd = staticmethod(_gemm_fwd_impl)
    gemm_f16_grad_a = staticmethod(_gemm_grad_a_impl)
    gemm_f16_grad_b = staticmethod(_gemm_grad_b_impl)
    softmax_f16_fwd = staticmethod(_softmax_fwd_impl)
    softmax_xent_f16_bwd = staticmethod(_softmax_bwd_impl)
    embedding_f16_fwd = staticmethod(_embedding_fwd_impl)
    embedding_f16_bwd = staticmethod(_embedding_bwd_impl)


# ----------------------------------------------------------- the gradients
# Written once against an operator namespace: the registered operators'
# autograd formulas use torch.ops.tokitai (traceable), the eager
# autograd.Functions the implementations.


def _gemm_backward(ops: Any, a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor,
                   need_a: bool, need_b: bool) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    g = grad.to(_F16)
    ga = ops.gemm_f16_grad_a(g, b) if need_a else None
    gb = ops.gemm_f16_grad_b(a, g) if need_b else None
    return ga, gb


def _softmax_backward(ops: Any, s: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return ops.softmax_xent_f16_bwd(s, grad.to(_F16))


def _embedding_backward(ops: Any, idx: torch.Tensor, num_weights: int, deterministic: bool,
                        grad: torch.Tensor) -> torch.Tensor:
    return ops.embedding_f16_bwd(grad.to(_F16), idx, num_weights, deterministic)


@contextlib.contextmanager
def _within(ctx: Optional[Context]) -> Iterator[None]:
    """The context override a forward saw, again for its backward: PyTorch
    runs a CUDA backward on its own threads, where use_context's
    thread-local setting is not."""
    prev = getattr(_tls, "ctx", None)
    _tls.ctx = ctx
    try:
        yield
    finally:
        _tls.ctx = prev


# --------------------------------------------------------------- registering

_library: Any = None  # keeps the 1.13-style registrations alive


def _register() -> None:
    global _library
    if HAS_CUSTOM_OP:
        for name, (schema, impl, fake) in _OPS.items():
            op = torch.library.custom_op("%s::%s" % (NAMESPACE, name), impl, mutates_args=(), schema=schema)
            op.register_fake(fake)
        ops = torch.ops.tokitai

        def gemm_setup(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(*inputs)
            ctx.tk = getattr(_tls, "ctx", None)

        def gemm_bwd(ctx: Any, grad: torch.Tensor) -> Any:
            a, b = ctx.saved_tensors
            with _within(ctx.tk):
                return _gemm_backward(ops, a, b, grad, ctx.needs_input_grad[0], ctx.needs_input_grad[1])

        def softmax_setup(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(output)
            ctx.tk = getattr(_tls, "ctx", None)

        def softmax_bwd(ctx: Any, grad: torch.Tensor) -> Any:
            (s,) = ctx.saved_tensors
            with _within(ctx.tk):
                return _softmax_backward(ops, s, grad)

        def emb_setup(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(inputs[1])
            ctx.num_weights = inputs[0].shape[0]
            # the mode when the forward ran (set_deterministic_embedding)
            ctx.deterministic = _deterministic()
            ctx.tk = getattr(_tls, "ctx", None)

        def emb_bwd(ctx: Any, grad: torch.Tensor) -> Any:
            (idx,) = ctx.saved_tensors
            with _within(ctx.tk):
                return _embedding_backward(ops, idx, ctx.num_weights, ctx.deterministic, grad), None

        torch.library.register_autograd("tokitai::gemm_f16_fwd", gemm_bwd, setup_context=gemm_setup)
        torch.library.register_autograd("tokitai::softmax_f16_fwd", softmax_bwd, setup_context=softmax_setup)
        torch.library.register_autograd("tokitai::embedding_f16_fwd", emb_bwd, setup_context=emb_setup)
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, (schema, impl, fake) in _OPS.items():
        lib.define(name + schema)
        for key in ("CPU", "CUDA"):
            lib.impl(name, impl, key)
        lib.impl(name, fake, "Meta")
        lib.impl(name, fake, "AutogradMeta")  # not a fallthrough before 2.0
    _library = lib


_register()

# The embedding's backward mode for the registered operator's gradient
# (the functions and modules pass theirs explicitly).
_det_default = False


def _deterministic() -> bool:
    return _det_default


def set_deterministic_embedding(enabled: bool) -> bool:
    """The summation order of torch.ops.tokitai.embedding_f16_fwd's gradient
    (fixed when True); returns the previous setting. :func:`embedding` and
    :class:`Embedding` take it as an argument instead."""
    global _det_default
    prev, _det_default = _det_default, bool(enabled)
    return prev


# ----------------------------------------------------------------- eager

try:
    from torch.compiler import is_compiling as _is_compiling  # type: ignore[attr-defined]
except ImportError:  # before 2.1

    def _is_compiling() -> bool:
        return False


def _ops() -> Any:
    return torch.ops.tokitai if _is_compiling() else _Raw


class _GemmFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(a, b)
        ctx.tk = getattr(_tls, "ctx", None)
        return _gemm_fwd_impl(a, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        a, b = ctx.saved_tensors
        with _within(ctx.tk):
            return _gemm_backward(_Raw, a, b, grad, ctx.needs_input_grad[0], ctx.needs_input_grad[1])


class _SoftmaxFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        s = _softmax_fwd_impl(x)
        ctx.save_for_backward(s)
        ctx.tk = getattr(_tls, "ctx", None)
        return s

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        (s,) = ctx.saved_tensors
        with _within(ctx.tk):
            return _softmax_backward(_Raw, s, grad)


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, idx: torch.Tensor, deterministic: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(idx)
        ctx.num_weights, ctx.deterministic = weight.shape[0], deterministic
        ctx.tk = getattr(_tls, "ctx", None)
        return _embedding_fwd_impl(weight, idx)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        (idx,) = ctx.saved_tensors
        with _within(ctx.tk):
            return _embedding_backward(_Raw, idx, ctx.num_weights, ctx.deterministic, grad), None, None


def _needs_grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``: ``a`` [M,K] fp16, ``b`` [K,N] fp16 -> [M,N] **fp32**, with
    gradients (grad_a / grad_b ops; the incoming gradient is rounded to fp16)."""
    if _is_compiling():
        return torch.ops.tokitai.gemm_f16_fwd(a, b)
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        return _GemmFn.apply(a, b)
    return _gemm_fwd_impl(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           out_dtype: torch.dtype = _F32) -> torch.Tensor:
    """``x @ weight (+ bias)`` over the last dimension of ``x`` (fp16
    [..., in]); ``weight`` is fp16 **[in, out]** (the transpose of
    torch.nn.functional.linear's). Output fp32 (or ``out_dtype``)."""
    if x.dim() < 1:
        raise ValueError("linear: x must have at least one dimension")
    lead = x.shape[:-1]
    y = gemm(x.reshape(-1, x.shape[-1]), weight)
    if bias is not None:
        y = y + bias
    if out_dtype != _F32:
        y = y.to(out_dtype)
    return y.reshape(tuple(lead) + (weight.shape[1],))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over the last dimension of fp16 ``x`` -> fp16; the gradient
    runs the softmax/cross-entropy backward op."""
    if not isinstance(x, torch.Tensor):
        raise TypeError("softmax: x must be a torch.Tensor, got %s" % type(x).__name__)
    nd = x.dim()
    if nd < 1 or (dim != -1 and dim != nd - 1):
        raise ValueError("softmax: only the last dimension (dim=-1) is supported, got dim=%d of %d-D x" % (dim, nd))
    x2 = x if nd == 2 else x.reshape(-1, x.shape[-1])
    if _is_compiling():
        s = torch.ops.tokitai.softmax_f16_fwd(x2)
    elif x2.requires_grad and torch.is_grad_enabled():
        s = _SoftmaxFn.apply(x2)
    else:
        s = _softmax_fwd_impl(x2)
    return s if nd == 2 else s.reshape(x.shape)


def embedding(weight: torch.Tensor, idx: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
    """``weight[idx]``: ``weight`` [V,D] fp16, ``idx`` int32 of any shape ->
    idx.shape + (D,) fp16. Out-of-range indices give zero rows (PyTorch
    raises instead). The gradient runs the embedding backward op, in a fixed
    summation order when ``deterministic``."""
    if _is_compiling():
        if deterministic != _det_default:
            raise ValueError("embedding: under torch.compile the gradient's mode comes from "
                             "set_deterministic_embedding(); call it with %r first" % deterministic)
        return torch.ops.tokitai.embedding_f16_fwd(weight, idx)
    if _needs_grad(weight):
        return _EmbeddingFn.apply(weight, idx, bool(deterministic))
    return _embedding_fwd_impl(weight, idx)


# ------------------------------------------------------------------ modules


class Linear(torch.nn.Module):
    """``y = x @ weight + bias`` with the GEMM ops.

    Differs from torch.nn.Linear where the ops do: ``weight`` is
    **[in_features, out_features]** (torch.nn.Linear's transposed;
    :meth:`from_torch` converts), the input must be fp16 and the output is
    fp32 (``out_dtype=torch.float16`` rounds it). ``weight`` may be kept in
    fp32 (``dtype=torch.float32``, master weights for training): it is
    rounded to fp16 on each call. ``bias`` is fp32."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 out_dtype: torch.dtype = _F32, device: Any = None, dtype: torch.dtype = _F16) -> None:
        super().__init__()
        if dtype not in (_F16, _F32):
            raise TypeError("Linear: weight dtype must be torch.float16 or torch.float32, got %s" % dtype)
        if out_dtype not in (_F16, _F32):
            raise TypeError("Linear: out_dtype must be torch.float16 or torch.float32, got %s" % out_dtype)
        self.in_features, self.out_features, self.out_dtype = in_features, out_features, out_dtype
        w = torch.empty((in_features, out_features), device=device, dtype=torch.float32)
        bound = 1.0 / max(in_features, 1) ** 0.5
        torch.nn.init.uniform_(w, -bound, bound)
        self.weight = torch.nn.Parameter(w.to(dtype))
        if bias:
            self.bias: Optional[torch.nn.Parameter] = torch.nn.Parameter(
                torch.empty(out_features, device=device, dtype=torch.float32).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_torch(cls, lin: torch.nn.Linear, *, out_dtype: torch.dtype = _F32,
                   dtype: torch.dtype = _F16) -> "Linear":
        """A copy of a torch.nn.Linear (weight transposed and rounded)."""
        m = cls(lin.in_features, lin.out_features, lin.bias is not None, out_dtype=out_dtype,
                device=lin.weight.device, dtype=dtype)
        with torch.no_grad():
            m.weight.copy_(lin.weight.t())
            if lin.bias is not None:
                m.bias.copy_(lin.bias)  # type: ignore[union-attr]
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != _F16:
            raise TypeError("Linear: input must be torch.float16, got %s (cast with .half())" % x.dtype)
        if x.shape[-1] != self.in_features:
            raise ValueError("Linear: input has %d features, the layer takes %d" % (x.shape[-1], self.in_features))
        w = self.weight if self.weight.dtype == _F16 else self.weight.to(_F16)
        return linear(x, w, self.bias, self.out_dtype)

    # The weight's layout travels in the state dict, so that a
    # torch.nn.Linear's state dict (weight [out, in]) is refused with a
    # reason instead of loading transposed where the layer is square.
    _LAYOUT = {"weight_layout": "in_out"}

    def get_extra_state(self) -> Any:
        return dict(self._LAYOUT)

    def set_extra_state(self, state: Any) -> None:
        if state != self._LAYOUT:
            raise ValueError("Linear: state dict with weight layout %r, expected %r" % (state, self._LAYOUT))

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: Any, unexpected_keys: Any, error_msgs: Any) -> None:
        layout = state_dict.get(prefix + "_extra_state", None)
        if layout is not None and layout != self._LAYOUT:
            error_msgs.append("%sweight: weight layout %r, this layer's is %r" % (prefix, layout, self._LAYOUT))
            return
        if prefix + "weight" in state_dict and layout is None:
            error_msgs.append(
                "%sweight: a state dict without tokitai_jit.torch.Linear's weight layout (a "
                "torch.nn.Linear's has weight [out, in]; this layer's is [in, out]): load it into "
                "torch.nn.Linear and convert with Linear.from_torch(), or transpose the weight and "
                "load with strict=False" % prefix)
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def extra_repr(self) -> str:
        return "in_features=%d, out_features=%d, bias=%s, out_dtype=%s" % (
            self.in_features, self.out_features, self.bias is not None, self.out_dtype)


class Embedding(torch.nn.Module):
    """``weight[idx]`` with the embedding ops: fp16 weight [V, D] (or fp32
    master weight rounded on each call), int32 indices (int64 is converted,
    at the cost of a cast), out-of-range indices give zero rows.
    ``deterministic`` fixes the backward's summation order."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, deterministic: bool = False,
                 device: Any = None, dtype: torch.dtype = _F16) -> None:
        super().__init__()
        if dtype not in (_F16, _F32):
            raise TypeError("Embedding: weight dtype must be torch.float16 or torch.float32, got %s" % dtype)
        self.num_embeddings, self.embedding_dim, self.deterministic = num_embeddings, embedding_dim, deterministic
        self.weight = torch.nn.Parameter(torch.randn((num_embeddings, embedding_dim), device=device).to(dtype))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.dtype == torch.int64:
            idx = idx.to(_I32)
        w = self.weight if self.weight.dtype == _F16 else self.weight.to(_F16)
        return embedding(w, idx, self.deterministic)

    def extra_repr(self) -> str:
        return "%d, %d, deterministic=%s" % (self.num_embeddings, self.embedding_dim, self.deterministic)


class Softmax(torch.nn.Module):
    """torch.nn.Softmax over the last dimension, fp16 in and out."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        if dim != -1:
            raise ValueError("Softmax: only dim=-1 (the last dimension) is supported, got %d" % dim)
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != _F16:
            raise TypeError("Softmax: input must be torch.float16, got %s" % x.dtype)
        return softmax(x, -1)
