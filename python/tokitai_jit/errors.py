"""Library statuses as exceptions.

Every failing call raises a subclass of :class:`TokitaiError` chosen by its
``tk_status``; the exception carries the status, the library's message (the
first line of ``tk_context_last_error``) and, for compile failures, the
compiler's whole log (the lines after it).

Bad arguments caught in Python, before anything reaches the library, raise
the built-in ``TypeError`` / ``ValueError`` instead (nothing is launched).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

from . import _capi
from ._capi import Status


class TokitaiError(RuntimeError):
    """A call into the tokitai-jit library failed.

    Attributes:
        status: the :class:`~tokitai_jit.Status` the library returned.
        message: what went wrong, as the library wrote it.
        log: the compiler's log (compile failures), else ``""``.
    """

    status: Status = Status.INTERNAL

    def __init__(self, status: int, message: str = "", log: str = "", call: str = "") -> None:
        try:
            self.status = Status(status)
        except ValueError:  # a status newer than this package
            self.status = Status.INTERNAL
        self.code = int(status)
        self.message = message
        self.log = log
        self.call = call
        name = self.status.name if self.status.value == status else "status %d" % status
        if not message:
            message = call
        text = "%s: %s" % (name, message) if message else name
        if log:
            text += "\n" + log
        super().__init__(text)


class InvalidArgumentError(TokitaiError, ValueError):
    """TK_INVALID_ARGUMENT (also a ValueError)."""


class OutOfMemoryError(TokitaiError, MemoryError):
    """TK_OUT_OF_MEMORY."""


class TokitaiIOError(TokitaiError, OSError):
    """TK_IO_ERROR."""


class NotFoundError(TokitaiError, LookupError):
    """TK_NOT_FOUND."""


class CorruptError(TokitaiError):
    """TK_CORRUPT."""


class BackendUnavailableError(TokitaiError):
    """TK_BACKEND_UNAVAILABLE: a vendor library or symbol is missing."""


class NoDeviceError(TokitaiError):
    """TK_NO_DEVICE."""


class UnsupportedError(TokitaiError):
    """TK_UNSUPPORTED."""


class CompileError(TokitaiError):
    """TK_COMPILE_FAILED; ``log`` holds the compiler's log."""


class LoadError(TokitaiError):
    """TK_LOAD_FAILED."""


class LaunchError(TokitaiError):
    """TK_LAUNCH_FAILED."""


class DeviceError(TokitaiError):
    """TK_DEVICE_ERROR."""


class MisalignedError(TokitaiError, ValueError):
    """TK_MISALIGNED (also a ValueError)."""


class SizeOverflowError(TokitaiError, OverflowError):
    """TK_OVERFLOW."""


class OutOfToleranceError(TokitaiError):
    """TK_OUT_OF_TOLERANCE."""


class InternalError(TokitaiError):
    """TK_INTERNAL."""


class TimeoutError_(TokitaiError, TimeoutError):
    """TK_TIMEOUT (also a TimeoutError)."""


ERRORS: Dict[Status, Type[TokitaiError]] = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.IO_ERROR: TokitaiIOError,
    Status.NOT_FOUND: NotFoundError,
    Status.CORRUPT: CorruptError,
    Status.BACKEND_UNAVAILABLE: BackendUnavailableError,
    Status.NO_DEVICE: NoDeviceError,
    Status.UNSUPPORTED: UnsupportedError,
    Status.COMPILE_FAILED: CompileError,
    Status.LOAD_FAILED: LoadError,
    Status.LAUNCH_FAILED: LaunchError,
    Status.DEVICE_ERROR: DeviceError,
    Status.MISALIGNED: MisalignedError,
    Status.OVERFLOW: SizeOverflowError,
    Status.OUT_OF_TOLERANCE: OutOfToleranceError,
    Status.INTERNAL: InternalError,
    Status.TIMEOUT: TimeoutError_,
}


def error_for(status: int, text: str = "", call: str = "") -> TokitaiError:
    """The exception for ``status`` with the library's ``text``.

    The library writes a compile failure as one line of message followed by
    the compiler's log; the two are split here.
    """
    message, _, log = text.partition("\n")
    try:
        cls = ERRORS.get(Status(status), TokitaiError)
    except ValueError:
        cls = TokitaiError
    return cls(status, message, log, call)


def check(status: int, text_fn: Optional[object] = None, call: str = "") -> None:
    """Raises the exception for ``status`` unless it is TK_OK.

    ``text_fn`` is a callable returning the message (read only on failure).
    """
    if status == 0:
        return
    text = text_fn() if callable(text_fn) else ""
    if not text:
        text = _capi.status_str(status)
    raise error_for(status, text, call)
