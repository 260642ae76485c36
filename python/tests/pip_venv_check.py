"""`pip install --no-build-isolation ./python` into a fresh venv, then the
installed package, run from outside the checkout with no TOKITAI_JIT_*
variable, loads the library bundled in it and runs the stub backend.

    python3 pip_venv_check.py WORKDIR [LIBRARY_DIR]

LIBRARY_DIR (a build tree holding libtokitai_jit.so.1) is handed to setup.py
as TOKITAI_JIT_LIBRARY_DIR so that the package bundles it; without it
setup.py builds the library with CMake. The python/ folder is copied (the
rest of the tree linked beside it) so the build writes nothing into the
checkout. Exits 0
when every check passed; prints what it checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs inside the venv, from WORKDIR, with a scrubbed environment.
INSIDE = r'''
import os, sys
import tokitai_jit as tj
from tokitai_jit import _capi
here = os.path.dirname(tj.__file__)
assert here.startswith(sys.prefix), ("imported from", here, "not the venv", sys.prefix)
path = tj.library_path()
assert os.path.dirname(path) == here, ("library", path, "not the bundled one in", here)
print("library:", path, tj.library_version())
# The shipped tier of fallback kernels: bundled beside the library when the
# build had one (TK_WANT_TIER=1), and then the tier the library finds.
import ctypes
lib = ctypes.CDLL(path)
lib.tk_cache_shipped_tier.restype = ctypes.c_char_p
found = (lib.tk_cache_shipped_tier() or b"").decode()
bundled = os.path.join(here, "share", "tokitai-jit", "cache")
if os.environ.get("TK_WANT_TIER") == "1":
    n = sum(len(fs) for _, _, fs in os.walk(bundled))
    assert os.path.isdir(bundled) and n > 0, ("no shipped tier bundled in", bundled)
    assert found == bundled, ("the library found", found, "not", bundled)
    print("shipped tier: bundled and found,", n, "files")
else:
    print("shipped tier: none expected; found %r" % found)
with tj.Context(backend="stub", cache_dir=os.path.join(os.getcwd(), "cache")) as ctx:
    c = ctx.gemm_f16_fwd(ctx.empty((4, 8)), ctx.empty((8, 16)))
    assert (c.shape, c.dtype) == ((4, 16), "float32")
    assert ctx.stats().compiles >= 1
    print("stub gemm: ok,", ctx.stats().compiles, "compile(s)")
try:
    import torch
except ImportError:
    print("torch: not installed; tokitai_jit.torch not checked")
    sys.exit(0)
import tokitai_jit.torch as tt
assert tt._fast is not None, "the C extension tokitai_jit._fast was not built"
a, b = torch.randn(3, 5).half(), torch.randn(5, 2).half()
err = (tt.gemm(a, b) - a.float() @ b.float()).abs().max().item()
assert err < 1e-3, err
with tj.Context(backend="stub", cache_dir=os.path.join(os.getcwd(), "cache2")) as ctx:
    with tt.use_context(ctx):
        for fast in (True, False):
            tt.set_fast_path(fast)
            tt.gemm(a, b)
            tt.softmax(a)
            tt.embedding(a, torch.tensor([0, 2], dtype=torch.int32))
    s = ctx.stats()
    assert s.compiles >= 3, s
print("torch %s: CPU reference and the stub device path (C extension and ctypes): ok" % torch.__version__)
'''


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    work = os.path.abspath(sys.argv[1])
    libdir = sys.argv[2] if len(sys.argv) > 2 else ""
    shutil.rmtree(work, ignore_errors=True)
    src = os.path.join(work, "src")
    os.makedirs(src)
    shutil.copytree(os.path.join(REPO, "python"), os.path.join(src, "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so*"))
    for name in os.listdir(REPO):  # the rest of the tree, for setup.py's CMake build
        if name not in ("python", ".git") and not name.startswith("build"):
            os.symlink(os.path.join(REPO, name), os.path.join(src, name))
    venv = os.path.join(work, "venv")
    subprocess.check_call([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = os.path.join(venv, "bin", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOKITAI_JIT", "PYTHON"))}
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if libdir:
        env["TOKITAI_JIT_LIBRARY_DIR"] = os.path.abspath(libdir)
    subprocess.check_call([py, "-m", "pip", "install", "-q", "--no-build-isolation", "./python"], cwd=src, env=env)
    env.pop("TOKITAI_JIT_LIBRARY_DIR", None)
    # a tier is expected where the library handed over has one, or where
    # setup.py's own build could compile one (a kernel compiler here)
    if libdir:
        want = os.path.isdir(os.path.join(libdir, "share", "tokitai-jit", "cache"))
    else:
        want = any(os.path.isdir(os.path.join(root, "share", "tokitai-jit", "cache"))
                   for root, _, _ in os.walk(os.path.join(src, "python", "build")))
    env["TK_WANT_TIER"] = "1" if want else "0"
    rc = subprocess.call([py, "-c", INSIDE], cwd=work, env=env)
    print("pip install + import + stub backend:", "ok" if rc == 0 else "FAILED (%d)" % rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
