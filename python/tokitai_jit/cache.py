"""Cache tools: list, stats, verify, prune, clear, export and import.

Each function opens the cache the arguments name (default: the user cache,
``$TOKITAI_JIT_CACHE_DIR`` or ``~/.cache/tokitai-jit``), does its work and
closes it, returning plain dataclasses. ``Cache`` keeps one handle open for
several calls. Nothing here needs a GPU.
"""

from __future__ import annotations

import builtins
import os
from ctypes import byref, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

from . import _capi
from ._context import ResourceUsage, _Config
from .errors import check

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class CacheEntry:
    """One cache entry's metadata (tk_cache_entry_info)."""

    key: str
    path: str
    kernel: str
    source: str
    backend: str
    arch: str
    compiler: str
    options: str
    payload_size: int
    file_size: int
    created: int
    last_used: int
    resources: ResourceUsage
    read_only_tier: bool


@dataclass(frozen=True)
class CacheStats:
    """Totals of the user cache (tk_cache_stats)."""

    entries: int
    bytes: int
    max_bytes: int
    temp_files: int
    bad_files: int
    # Counted across processes since the last zero_stats (0 from an older library).
    hits: int = 0
    misses: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    fallback_calls: int = 0
    errors: int = 0
    stats_since: int = 0


@dataclass(frozen=True)
class BadFile:
    """A file that failed verification or import, and why."""

    path: str
    why: str


@dataclass(frozen=True)
class ImportResult:
    imported: int
    rejected: List[BadFile]


def _entry(info: _capi.tk_cache_entry_info) -> CacheEntry:
    t = _capi.text
    return CacheEntry(
        key=t(info.key_hex),
        path=t(info.path),
        kernel=t(info.kernel),
        source=t(info.source),
        backend=t(info.backend),
        arch=t(info.arch),
        compiler=t(info.compiler),
        options=t(info.options),
        payload_size=info.payload_size,
        file_size=info.file_size,
        created=info.created,
        last_used=info.last_used,
        resources=ResourceUsage._from_c(info.resources),
        read_only_tier=bool(info.read_only_tier),
    )


class Cache:
    """A handle on an on-disk cache (tk_cache). Use as a context manager or
    call close(). ``cache_dir``: root (default: the user cache);
    ``cache_lower``: read-only caches listed after it; ``max_size``: the
    limit prune() uses by default (bytes or "2G")."""

    def __init__(
        self,
        cache_dir: Optional[PathLike] = None,
        *,
        cache_lower: Union[str, Sequence[str], None] = None,
        max_size: Union[int, str, None] = None,
    ) -> None:
        self._lib = _capi.lib()
        self._ptr: Optional[int] = None
        with _Config(cache_dir=cache_dir, cache_lower=cache_lower, cache_max_size=max_size) as cfg:
            out = c_void_p()
            check(self._lib.tk_cache_open(cfg.ptr, byref(out)), call="tk_cache_open")
            self._ptr = out.value

    def _handle(self) -> int:
        if not self._ptr:
            raise ValueError("the cache handle is closed")
        return self._ptr

    def _call(self, fn: str, *args: Any) -> None:
        st = getattr(self._lib, fn)(self._handle(), *args)
        check(st, lambda: _capi.text(self._lib.tk_cache_last_error(self._ptr)), call=fn)

    @property
    def root(self) -> str:
        """The root folder in use."""
        return _capi.text(self._lib.tk_cache_root(self._handle()))

    def list(self) -> List[CacheEntry]:
        """Every readable entry's metadata (payloads are not read)."""
        out: List[CacheEntry] = []
        errors: List[BaseException] = []

        def visit(user: Any, info: Any) -> int:
            try:
                out.append(_entry(info.contents))
                return 0
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
                return 1

        cb = _capi.CACHE_VISIT_FN(visit)
        self._call("tk_cache_list", cb, None)
        if errors:
            raise errors[0]
        return out

    def stats(self) -> CacheStats:
        s = _capi.out_struct(_capi.tk_cache_stats)
        self._call("tk_cache_get_stats", byref(s))
        return CacheStats(
            s.entries,
            s.bytes,
            s.max_bytes,
            s.temp_files,
            s.bad_files,
            s.hits,
            s.misses,
            s.compiles,
            s.compile_seconds,
            s.fallback_calls,
            s.errors,
            s.stats_since,
        )

    def zero_stats(self) -> None:
        """Sets the persistent counts (hits, misses, compiles...) to zero."""
        self._call("tk_cache_zero_stats")

    def verify(self) -> List[BadFile]:
        """Reads every entry in full (structure, key, checksum); returns the
        bad files. Removes nothing."""
        bad: List[BadFile] = []

        def on_bad(user: Any, path: Optional[bytes], why: Optional[bytes]) -> None:
            bad.append(BadFile(_capi.text(path), _capi.text(why)))

        cb = _capi.CACHE_BAD_FN(on_bad)
        n = c_uint64()
        self._call("tk_cache_verify", cb, None, byref(n))
        return bad

    def prune(self, max_size: Union[int, str, None] = None) -> int:
        """Evicts least-recently-used entries until the cache holds at most
        ``max_size`` bytes (None: the configured limit); returns the number
        of files removed."""
        from ._context import _parse_size

        n = c_uint64()
        self._call("tk_cache_prune", _parse_size(max_size), byref(n))
        return n.value

    def clear(self) -> int:
        """Removes every entry of the user cache; returns how many."""
        n = c_uint64()
        self._call("tk_cache_clear", byref(n))
        return n.value

    def export(self, path: PathLike, select: Optional[Callable[[CacheEntry], bool]] = None) -> int:
        """Packs the entries ``select`` accepts (default all) into one bundle
        file; returns how many."""
        errors: List[BaseException] = []
        cb = None
        if select is not None:

            def sel(user: Any, info: Any) -> int:
                try:
                    return 1 if select(_entry(info.contents)) else 0
                except BaseException as e:  # noqa: BLE001 - re-raised below
                    errors.append(e)
                    return 0

            cb = _capi.CACHE_SELECT_FN(sel)
        n = c_uint64()
        self._call("tk_cache_export", os.fsencode(path), cb or _capi.CACHE_SELECT_FN(), None, byref(n))
        if errors:
            raise errors[0]
        return n.value

    def import_bundle(self, path: PathLike) -> ImportResult:
        """Adds a bundle's good entries to the user cache; bad ones are
        listed in the result, not raised."""
        bad: List[BadFile] = []

        def on_bad(user: Any, p: Optional[bytes], why: Optional[bytes]) -> None:
            bad.append(BadFile(_capi.text(p), _capi.text(why)))

        cb = _capi.CACHE_BAD_FN(on_bad)
        n_in, n_rej = c_uint64(), c_uint64()
        self._call("tk_cache_import", os.fsencode(path), cb, None, byref(n_in), byref(n_rej))
        return ImportResult(n_in.value, bad)

    def close(self) -> None:
        if self._ptr:
            ptr, self._ptr = self._ptr, None
            self._lib.tk_cache_close(ptr)

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def list(cache_dir: Optional[PathLike] = None, *, cache_lower: Union[str, Sequence[str], None] = None) -> builtins.list:
    """Every entry of the cache (and of the read-only lower caches)."""
    with Cache(cache_dir, cache_lower=cache_lower) as c:
        return c.list()


def stats(cache_dir: Optional[PathLike] = None, *, max_size: Union[int, str, None] = None) -> CacheStats:
    """Entries, bytes, limit, leftovers of interrupted writes, bad files."""
    with Cache(cache_dir, max_size=max_size) as c:
        return c.stats()


def verify(cache_dir: Optional[PathLike] = None) -> builtins.list:
    """The bad files of the cache (empty when every entry is sound)."""
    with Cache(cache_dir) as c:
        return c.verify()


def prune(max_size: Union[int, str, None] = None, *, cache_dir: Optional[PathLike] = None) -> int:
    """LRU eviction down to ``max_size`` (default: the configured limit)."""
    with Cache(cache_dir) as c:
        return c.prune(max_size)


def clear(cache_dir: Optional[PathLike] = None) -> int:
    """Removes every entry of the user cache; returns how many."""
    with Cache(cache_dir) as c:
        return c.clear()


def export(
    path: PathLike,
    *,
    cache_dir: Optional[PathLike] = None,
    select: Optional[Callable[[CacheEntry], bool]] = None,
) -> int:
    """Writes a bundle of the selected entries; returns how many."""
    with Cache(cache_dir) as c:
        return c.export(path, select)


def import_bundle(path: PathLike, *, cache_dir: Optional[PathLike] = None) -> ImportResult:
    """Imports a bundle into the cache."""
    with Cache(cache_dir) as c:
        return c.import_bundle(path)
