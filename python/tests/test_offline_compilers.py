"""Real compilers with no GPU: offline contexts for gfx90a (hipRTC, Debian's
ROCm packages) and sm_90 (NVRTC, when the CUDA toolkit is installed) compile
user kernels and an operator into a temporary cache from Python. Each
target is skipped, with the library's reason, when its compiler is missing."""

from __future__ import annotations

import pytest

import tokitai_jit as tj

from arrays import CaiArray

TARGETS = [("hip", "gfx90a"), ("cuda", "sm_90")]

GOOD = r"""
extern "C" __global__ void saxpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
"""

BAD = 'extern "C" __global__ void broken(int *p) { p[0] = not_declared_anywhere; }\n'


@pytest.fixture(params=TARGETS, ids=[t for _, t in TARGETS])
def offline_real(request, cache_dir):
    backend, target = request.param
    try:
        c = tj.Context(backend=backend, target=target, cache_dir=cache_dir)
    except (tj.BackendUnavailableError, tj.UnsupportedError, tj.NoDeviceError) as e:
        pytest.skip("%s compiler unavailable: %s" % (backend, e))
    yield c, target
    c.close()


def test_user_kernel_compiles_then_hits_the_cache(offline_real, cache_dir):
    ctx, target = offline_real
    k = tj.Kernel(GOOD, "saxpy", signature="ptr, ptr, f32, i32", defines={"UNUSED": 1})
    assert k.precompile(ctx) == tj.Origin.COMPILED
    assert k.precompile(ctx) == tj.Origin.DISK
    s = ctx.stats()
    assert (s.compiles, s.compile_failures) == (1, 0) and s.compile_seconds > 0
    [entry] = [e for e in tj.cache.list(cache_dir) if e.kernel == "saxpy"]
    assert entry.arch.startswith(target) and entry.backend == ctx.backend
    assert "-DUNUSED=1" in entry.options
    assert entry.resources.registers is not None and entry.resources.registers > 0
    assert tj.cache.verify(cache_dir) == []


def test_compile_error_carries_the_compilers_log(offline_real):
    ctx, _ = offline_real
    with pytest.raises(tj.CompileError) as e:
        tj.Kernel(BAD, "broken").precompile(ctx)
    assert "not_declared_anywhere" in e.value.log
    assert ctx.stats().compile_failures == 1


def test_operator_precompile(offline_real, cache_dir):
    ctx, _ = offline_real
    r = ctx.precompile("softmax_f16_fwd", (128, 4096))
    assert r.compiled >= 1 and r.cached == 0
    assert ctx.precompile("softmax_f16_fwd", (128, 4096)) == (0, r.compiled)
    kernels = {e.kernel for e in tj.cache.list(cache_dir)}
    assert "tk_softmax_f16_fwd" in kernels
    # host memory behind the interface: the offline context refuses to run
    with pytest.raises(tj.NoDeviceError):
        ctx.softmax_f16_fwd(CaiArray((2, 8)), CaiArray((2, 8)))
