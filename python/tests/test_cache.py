"""tokitai_jit.cache on a real cache folder filled by offline precompiles
on the stub backend."""

from __future__ import annotations

import os

import pytest

import tokitai_jit as tj


@pytest.fixture
def filled(offline, cache_dir):
    offline.precompile("softmax_f16_fwd", (64, 1024))
    offline.precompile("softmax_xent_f16_bwd", (64, 1024))
    offline.precompile("embedding_f16_fwd", (100, 64, 32))
    k = tj.Kernel('extern "C" __global__ void k(int *p) {}', "k")
    k.precompile(offline)
    return cache_dir


def test_list_and_stats(filled):
    entries = tj.cache.list(filled)
    assert len(entries) >= 4
    kernels = {e.kernel for e in entries}
    assert {"tk_softmax_f16_fwd", "tk_softmax_xent_f16_bwd", "k"} <= kernels
    for e in entries:
        assert isinstance(e, tj.cache.CacheEntry)
        assert len(e.key) == 32 and e.backend == "stub" and e.arch == "stub"
        assert os.path.isfile(e.path) and e.path.startswith(filled)
        assert e.file_size == os.path.getsize(e.path) and e.payload_size > 0
        assert e.created > 0 and not e.read_only_tier
        assert e.resources.registers == 16 and e.resources.sgprs is None
    user = [e for e in entries if e.kernel == "k"][0]
    assert user.source.startswith("user:")
    st = tj.cache.stats(filled)
    assert st.entries == len(entries)
    assert st.bytes == sum(e.file_size for e in entries)
    assert (st.temp_files, st.bad_files) == (0, 0)
    assert tj.cache.stats(filled, max_size="1G").max_bytes == 1 << 30


def test_verify_names_a_corrupt_entry(filled):
    assert tj.cache.verify(filled) == []
    victim = tj.cache.list(filled)[0].path
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) - 20)
        f.write(b"\xff" * 8)
    bad = tj.cache.verify(filled)
    assert [b.path for b in bad] == [victim]
    assert bad[0].why


def test_prune_and_clear(filled):
    n = len(tj.cache.list(filled))
    assert tj.cache.prune(cache_dir=filled) == 0  # the configured limit (5 GiB): nothing to do
    assert len(tj.cache.list(filled)) == n
    removed = tj.cache.prune(1, cache_dir=filled)
    assert removed == n
    assert tj.cache.list(filled) == []
    with pytest.raises(ValueError, match="suffix"):
        tj.cache.prune("lots", cache_dir=filled)


def test_clear(filled):
    n = len(tj.cache.list(filled))
    assert tj.cache.clear(filled) == n
    assert tj.cache.stats(filled).entries == 0


def test_export_import(filled, tmp_path):
    bundle = str(tmp_path / "warm.tkb")
    n = tj.cache.export(bundle, cache_dir=filled, select=lambda e: e.kernel.startswith("tk_softmax"))
    assert n == len([e for e in tj.cache.list(filled) if e.kernel.startswith("tk_softmax")])
    other = str(tmp_path / "other")
    res = tj.cache.import_bundle(bundle, cache_dir=other)
    assert (res.imported, res.rejected) == (n, [])
    assert sorted(e.key for e in tj.cache.list(other)) == sorted(
        e.key for e in tj.cache.list(filled) if e.kernel.startswith("tk_softmax")
    )
    with open(bundle, "wb") as f:
        f.write(b"not a bundle")
    with pytest.raises(tj.CorruptError):
        tj.cache.import_bundle(bundle, cache_dir=other)


def test_default_cache_from_environment(filled, monkeypatch):
    monkeypatch.setenv("TOKITAI_JIT_CACHE_DIR", filled)
    assert len(tj.cache.list()) == len(tj.cache.list(filled))
    with tj.cache.Cache() as c:
        assert c.root == filled


def test_missing_cache_is_empty(tmp_path):
    assert tj.cache.list(str(tmp_path / "none")) == []
    assert tj.cache.stats(str(tmp_path / "none")).entries == 0


def test_lower_tier_is_listed_read_only(filled, tmp_path):
    entries = tj.cache.list(str(tmp_path / "empty"), cache_lower=[filled])
    assert entries and all(e.read_only_tier for e in entries)


def test_a_visitor_error_propagates(filled):
    def boom(e):
        raise RuntimeError("select failed")

    with pytest.raises(RuntimeError, match="select failed"):
        tj.cache.export(os.path.join(filled, "..", "b.tkb"), cache_dir=filled, select=boom)


def test_stub_backend_from_the_environment(monkeypatch, cache_dir):
    monkeypatch.setenv("TOKITAI_JIT_BACKEND", "stub")
    with tj.Context(cache_dir=cache_dir) as c:
        assert c.backend == "stub"
        c.softmax_f16_fwd(c.empty((2, 16)))
    # The generic kernel that served the call, and the specialised one when
    # its background build finished before the context closed: one or two.
    backends = [e.backend for e in tj.cache.list(cache_dir)]
    assert backends and set(backends) == {"stub"}
