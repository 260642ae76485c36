"""Builds the tokitai_jit wheel with the shared library inside it.

``pip install --no-build-isolation ./python`` from a checkout:

1. the library: ``$TOKITAI_JIT_LIBRARY_DIR`` (a folder holding
   libtokitai_jit.so.1, such as a build tree) is copied when set; otherwise
   CMake builds the parent tree's ``tokitai_jit`` target alone (Release, no
   tests, no benchmarks) in a folder of the build. The library goes into the
   package as ``libtokitai_jit.so.1`` and ``_install_paths.py`` names it, so
   the installed package loads it with no environment variable.
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
