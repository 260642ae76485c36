"""The ctypes mirrors in tokitai_jit._capi against the C headers.

A C program compiled against include/ prints sizeof and offsetof of every
mirrored struct and field, and the value of every mirrored enumerator; the
headers are also read for each struct's field names and each enum's
enumerators, so a field or value added in C and not here fails."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from tokitai_jit import _capi

from conftest import REPO

INCLUDE = os.path.join(REPO, "include")
HEADERS = [os.path.join(INCLUDE, "tokitai", h) for h in ("tokitai.h", "ops.h")]

ENUMS = {
    # C enum typedef name: (Python enum, C enumerator prefix)
    "tk_backend_kind": (_capi.Backend, "TK_BACKEND_"),
    "tk_policy": (_capi.Policy, "TK_POLICY_"),
    "tk_origin": (_capi.Origin, "TK_ORIGIN_"),
    "tk_op": (_capi.Op, "TK_OP_"),
    "tk_build_mode": (_capi.BuildMode, "TK_BUILD_"),
    "tk_param_kind": (_capi.ParamKind, "TK_PARAM_"),
}


def _walk(struct, prefix=""):
    """(C member designator, ctypes field descriptor, ctypes type) of every
    field, nested structs included."""
    for name, ctype in struct._fields_:
        yield prefix + name, getattr(struct, name), ctype
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            base = getattr(struct, name).offset
            for sub, desc, t in _walk(ctype, prefix + name + "."):
                yield sub, (base, desc), t


def _header_text():
    text = ""
    for h in HEADERS:
        with open(h, encoding="utf-8") as f:
            text += f.read() + "\n"
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc/gcc) to check the struct layouts with"
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "tokitai/ops.h"', "int main(void) {"]
    for cname, struct in _capi.STRUCTS.items():
        lines.append('printf("%%s %%zu %%zu\\n", "%s", sizeof(%s), _Alignof(%s));' % (cname, cname, cname))
        for member, _, _ in _walk(struct):
            lines.append(
                'printf("%%s %%zu %%zu\\n", "%s.%s", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                % (cname, member, cname, member, cname, member)
            )
    for status in _capi.Status:
        lines.append('printf("%%s %%d\\n", "TK_%s", (int)TK_%s);' % (status.name, status.name))
    for _, (enum, prefix) in ENUMS.items():
        for m in enum:
            lines.append('printf("%%s %%d\\n", "%s%s", (int)%s%s);' % (prefix, m.name, prefix, m.name))
    lines.append("return 0; }")
    d = tmp_path_factory.mktemp("layout")
    src, exe = d / "layout.c", d / "layout"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", INCLUDE, str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        key, *vals = line.split()
        table[key] = tuple(int(v) for v in vals)
    return table


@pytest.mark.parametrize("cname", sorted(_capi.STRUCTS))
def test_struct_size_and_offsets(measured, cname):
    struct = _capi.STRUCTS[cname]
    assert measured[cname] == (ctypes.sizeof(struct), ctypes.alignment(struct)), cname
    for member, desc, ctype in _walk(struct):
        if isinstance(desc, tuple):  # nested: offset of the parent + offset inside it
            offset = desc[0] + desc[1].offset
            size = desc[1].size
        else:
            offset, size = desc.offset, desc.size
        assert measured["%s.%s" % (cname, member)] == (offset, size), "%s.%s" % (cname, member)


@pytest.mark.parametrize("cname", sorted(_capi.STRUCTS))
def test_struct_field_names_match_header(cname):
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (cname, cname), _header_text(), re.S)
    assert m, "struct %s not found in the headers" % cname
    names = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            names.append(re.search(r"(\w+)\s*(\[\s*\w+\s*\])?$", decl).group(1))
    assert names == [f[0] for f in _capi.STRUCTS[cname]._fields_]


def test_status_values(measured):
    header = re.findall(r"X\((\w+), (\d+),", _header_text())
    assert header, "TK_STATUS_LIST not found"
    assert {n: int(v) for n, v in header} == {s.name: s.value for s in _capi.Status}
    for s in _capi.Status:
        assert measured["TK_" + s.name] == (s.value,)


@pytest.mark.parametrize("cname", sorted(ENUMS))
def test_enum_values(measured, cname):
    enum, prefix = ENUMS[cname]
    m = re.search(r"typedef enum %s \{(.*?)\} %s;" % (cname, cname), _header_text(), re.S)
    assert m, "enum %s not found" % cname
    header = {n: int(v) for n, v in re.findall(r"%s(\w+)\s*=\s*(\d+)" % prefix, m.group(1))}
    if cname == "tk_op":
        header.pop("COUNT", None)
    assert header == {e.name: e.value for e in enum}
    for e in enum:
        assert measured[prefix + e.name] == (e.value,)


def test_context_stats_dataclass_follows_the_mirror():
    from dataclasses import fields

    from tokitai_jit import ContextStats

    mirror = [f[0] for f in _capi.tk_context_stats._fields_]
    assert mirror[0] == "struct_size"  # the ABI's sized-struct header, not a counter
    assert [f.name for f in fields(ContextStats)] == mirror[1:]
