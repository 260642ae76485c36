"""Builds the tokitai_jit wheel with the shared library inside it.

``pip install --no-build-isolation ./python`` from a checkout:

1. the library: ``$TOKITAI_JIT_LIBRARY_DIR`` (a folder holding
   libtokitai_jit.so.1, such as a build tree) is copied when set; otherwise
   CMake builds the parent tree's ``tokitai_jit`` target (Release, no
   tests, no benchmarks) in a folder of the build, and the fallback kernels
   it ships (target ``tk_shipped_cache``, where NVRTC or hipRTC is there to
   compile them). The library goes into the package as
   ``libtokitai_jit.so.1`` and ``_install_paths.py`` names it, so the
   installed package loads it with no environment variable; the shipped
   tier beside the library (``share/tokitai-jit/cache``) goes into the
   package beside it, where the library finds it: a first run after
   ``pip install`` takes its fallback kernels from there instead of
   compiling one on the caller's thread.
2. the C extension ``tokitai_jit._fast`` (the operators' call path of
   tokitai_jit.torch); optional: without a C compiler or Python headers the
   package keeps its ctypes path. ``TOKITAI_JIT_NO_EXTENSION=1`` skips it.

``TOKITAI_JIT_CMAKE_ARGS`` adds arguments to the CMake configure step.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SONAME = "libtokitai_jit.so.1"
SHIPPED = os.path.join("share", "tokitai-jit", "cache")


def _library(build_temp: str) -> str:
    given = os.environ.get("TOKITAI_JIT_LIBRARY_DIR")
    if given:
        path = os.path.join(given, SONAME)
        if not os.path.isfile(path):
            sys.exit("TOKITAI_JIT_LIBRARY_DIR=%s holds no %s" % (given, SONAME))
        return path
    if not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")):
        sys.exit("the tokitai-jit sources are not beside this python/ folder (%s); build the library "
                 "and set TOKITAI_JIT_LIBRARY_DIR to its folder" % REPO)
    cmake = shutil.which("cmake")
    if not cmake:
        sys.exit("building the tokitai-jit library needs cmake (or set TOKITAI_JIT_LIBRARY_DIR)")
    bdir = os.path.join(os.path.abspath(build_temp), "tokitai-jit-lib")
    cfg = [cmake, "-S", REPO, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release", "-DTK_BUILD_TESTS=OFF",
           "-DTK_BUILD_BENCH=OFF", "-DTK_BUILD_FUZZ=OFF"]
    cfg += shlex.split(os.environ.get("TOKITAI_JIT_CMAKE_ARGS", ""))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    subprocess.check_call(cfg)
    subprocess.check_call([cmake, "--build", bdir, "--target", "tokitai_jit", "-j", jobs])
    # The shipped tier: a target only where a kernel compiler was found.
    if subprocess.call([cmake, "--build", bdir, "--target", "tk_shipped_cache", "-j", jobs]) != 0:
        print("note: no shipped fallback kernels built (no NVRTC or hipRTC at configure time?)")
    path = os.path.join(bdir, SONAME)
    if not os.path.isfile(path):
        sys.exit("the CMake build made no %s in %s" % (SONAME, bdir))
    return path


class BuildPy(build_py):
    """Puts the library and _install_paths.py into the built package."""

    def run(self) -> None:
        super().run()
        build_temp = os.path.join(os.path.dirname(os.path.abspath(self.build_lib)), "tk-temp")
        src = _library(build_temp)
        dst_dir = os.path.join(self.build_lib, "tokitai_jit")
        os.makedirs(dst_dir, exist_ok=True)
        dst = os.path.join(dst_dir, SONAME)
        shutil.copyfile(os.path.realpath(src), dst)
        os.chmod(dst, 0o755)
        with open(os.path.join(dst_dir, "_install_paths.py"), "w", encoding="utf-8") as f:
            f.write("# Written by setup.py: the library bundled in this package.\nLIBRARY = %r\n" % SONAME)
        # The read-only tier of fallback kernels beside the library, without
        # the user-cache bookkeeping (lock folder, statistics, leftovers).
        tier = os.path.join(os.path.dirname(os.path.realpath(src)), SHIPPED)
        dst_tier = os.path.join(dst_dir, SHIPPED)
        shutil.rmtree(dst_tier, ignore_errors=True)
        if os.path.isdir(tier):
            shutil.copytree(tier, dst_tier, ignore=shutil.ignore_patterns("locks", "stats", ".tmp.*"))
            print("bundled the shipped fallback kernels from %s" % tier)


class OptionalBuildExt(build_ext):
    """The C extension when it builds; the ctypes path otherwise."""

    def run(self) -> None:
        if os.environ.get("TOKITAI_JIT_NO_EXTENSION"):
            return
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - optional
            print("warning: tokitai_jit._fast not built (%s); the ctypes path is used" % e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - optional
            print("warning: %s not built (%s); the ctypes path is used" % (ext.name, e))


ext = Extension(
    "tokitai_jit._fast",
    sources=[os.path.relpath(os.path.join(HERE, "tokitai_jit", "_fast.c"), HERE)],
    include_dirs=[os.path.join(REPO, "include")],
    extra_compile_args=["-O2", "-std=gnu11"],
)

setup(
    ext_modules=[ext],
    cmdclass={"build_py": BuildPy, "build_ext": OptionalBuildExt},
)
