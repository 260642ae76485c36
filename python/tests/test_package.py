"""Packaging: versions agree, the library is found where the install
layout, the build tree or TOKITAI_JIT_LIBRARY put it, and a failure to find
it says where it looked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import tokitai_jit as tj

from conftest import REPO

PKG = os.path.join(REPO, "python")


def run_py(code, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("TOKITAI_JIT_LIBRARY", "PYTHONPATH")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)


def test_versions_agree():
    with open(os.path.join(PKG, "pyproject.toml"), encoding="utf-8") as f:
        py = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert py == tj.__version__ == tj.library_version()


def test_missing_library_names_the_variable(tmp_path):
    r = run_py("import tokitai_jit as tj; tj.library_version()",
               {"PYTHONPATH": PKG, "TOKITAI_JIT_LIBRARY": str(tmp_path / "nope.so")}, str(tmp_path))
    assert r.returncode != 0
    assert "TOKITAI_JIT_LIBRARY" in r.stderr and "nope.so (no such file)" in r.stderr


def test_build_tree_search_skips_sanitizer_builds(tmp_path):
    # A checkout-shaped folder: include/, python/tokitai_jit, build/ and a
    # sanitizer build-asan/ that must never be picked.
    repo = tmp_path / "repo"
    (repo / "include" / "tokitai").mkdir(parents=True)
    (repo / "include" / "tokitai" / "tokitai.h").write_text("")
    shutil.copytree(os.path.join(PKG, "tokitai_jit"), repo / "python" / "tokitai_jit",
                    ignore=shutil.ignore_patterns("__pycache__", "_install_paths.py"))
    real = tj.library_path()
    for name, sanitize in (("build", "OFF"), ("build-asan", "ON")):
        (repo / name).mkdir()
        shutil.copy(real, repo / name / "libtokitai_jit.so.1")
        (repo / name / "CMakeCache.txt").write_text("TK_SANITIZE:BOOL=%s\n" % sanitize)
    r = run_py("import tokitai_jit as tj; print(tj._capi.candidate_paths()); print(tj.library_path())",
               {"PYTHONPATH": str(repo / "python")}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(repo / "build" / "libtokitai_jit.so.1")
    assert "build-asan" not in r.stdout


def test_cmake_install_layout(tmp_path):
    build = os.environ.get("TK_TEST_BUILD_DIR")
    if not build:
        pytest.skip("TK_TEST_BUILD_DIR is not set (CTest sets it to the build folder)")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True, capture_output=True)
    inits = [os.path.join(d, "__init__.py") for d, _, files in os.walk(prefix)
             if os.path.basename(d) == "tokitai_jit" and "__init__.py" in files]
    assert len(inits) == 1, inits
    assert os.path.isfile(os.path.join(os.path.dirname(inits[0]), "py.typed"))
    assert os.path.isfile(os.path.join(os.path.dirname(inits[0]), "_install_paths.py"))
    site = os.path.dirname(os.path.dirname(inits[0]))
    code = (
        "import tokitai_jit as tj\n"
        "print(tj.__file__)\n"
        "print(tj._capi.candidate_paths()[0][0])\n"
        "print(tj.library_path())\n"
        "with tj.Context(backend='stub', cache_dir=%r) as c:\n"
        "    print(c.softmax_f16_fwd(c.empty((2, 64))).shape)\n" % str(tmp_path / "cache")
    )
    r = run_py(code, {"PYTHONPATH": site}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(str(prefix))
    assert lines[1] == "install layout"
    assert lines[2].startswith(str(prefix)) and os.path.isfile(lines[2])
    assert lines[3] == "(2, 64)"


def test_library_of_another_api_version_is_refused(monkeypatch):
    from tokitai_jit import _capi

    lib = _capi.lib()
    monkeypatch.setattr(_capi, "ABI_VERSION", 9)
    with pytest.raises(OSError, match="needs interface 9"):
        _capi._check_version(lib, "libtokitai_jit.so.1")
