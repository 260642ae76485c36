"""Statuses as exceptions, and configuration errors."""

from __future__ import annotations

import pytest

import tokitai_jit as tj
from tokitai_jit import errors


def test_every_status_has_its_exception():
    for st in tj.Status:
        if st == tj.Status.OK:
            continue
        cls = errors.ERRORS[st]
        assert issubclass(cls, tj.TokitaiError)
        e = errors.error_for(int(st), "what happened", "tk_x")
        assert type(e) is cls and e.status == st and e.message == "what happened"
        assert str(e) == "%s: what happened" % st.name
    assert issubclass(tj.InvalidArgumentError, ValueError)
    assert issubclass(tj.OutOfMemoryError, MemoryError)
    assert issubclass(tj.NotFoundError, LookupError)


def test_message_and_log_are_split():
    e = errors.error_for(9, "compiling k failed\nk.cu(3): error: oops\n1 error detected.")
    assert isinstance(e, tj.CompileError)
    assert e.message == "compiling k failed"
    assert e.log == "k.cu(3): error: oops\n1 error detected."


def test_unknown_status_is_still_an_error():
    e = errors.error_for(99, "newer")
    assert type(e) is tj.TokitaiError and e.code == 99


def test_check_reads_the_message_only_on_failure():
    calls = []
    errors.check(0, lambda: calls.append(1))
    assert calls == []
    with pytest.raises(tj.NotFoundError, match="not found"):
        errors.check(4, lambda: "")


def test_bad_configuration_values(cache_dir):
    with pytest.raises(ValueError, match="policy must be one of 'exact', 'generic'"):
        tj.Context(backend="stub", policy="fastest")
    with pytest.raises(ValueError, match="backend must be one of"):
        tj.Context(backend="opencl")
    with pytest.raises(ValueError, match="device must be >= 0"):
        tj.Context(backend="stub", device=-1)
    with pytest.raises(TypeError, match="log"):
        tj.Context(backend="stub", log=3)
    with pytest.raises(ValueError, match="suffix"):
        tj.Context(backend="stub", cache_max_size="big")


def test_context_creation_failure_carries_the_reason(cache_dir):
    with pytest.raises(tj.NoDeviceError, match="no device 1"):
        tj.Context(backend="stub", device=1, cache_dir=cache_dir)
    with pytest.raises(tj.UnsupportedError, match="sm_90"):
        tj.Context(backend="stub", target="sm_90", cache_dir=cache_dir)


def test_build_mode_needs_library_support(cache_dir):
    if tj.has("tk_config_set_build_mode"):
        with tj.Context(backend="stub", build_mode="sync", cache_dir=cache_dir) as c:
            assert c.backend == "stub"
    else:
        with pytest.raises(NotImplementedError, match="tk_config_set_build_mode"):
            tj.Context(backend="stub", build_mode="sync", cache_dir=cache_dir)
    with pytest.raises(ValueError, match="build_mode"):
        tj.Context(backend="stub", build_mode="later", cache_dir=cache_dir)


def test_context_properties_and_log(cache_dir):
    got = []
    with tj.Context(backend="stub", policy="generic", cache_dir=cache_dir, log=lambda lv, m: got.append((lv, m)), log_level=0) as c:
        assert (c.backend, c.target, c.compiler, c.policy) == ("stub", "stub", "stub-1", tj.Policy.GENERIC)
        assert "stub" in repr(c)
        k = tj.Kernel('#error "x"\nextern "C" __global__ void k() {}', "k")
        with pytest.raises(tj.CompileError):
            k.compile(c)
        assert "compiling" in c.last_error
        c.reset_stats()
        assert c.stats().compile_failures == 0
    assert any("compil" in m for _, m in got)


def test_describe_backend():
    assert "stub" in tj.describe_backend("stub")
