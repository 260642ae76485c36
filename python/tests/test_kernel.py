"""User kernels on the stub backend: signatures, argument packing, launch
configuration checks, compile errors with their log, caching."""

from __future__ import annotations

import ctypes
import struct

import pytest

import tokitai_jit as tj
from tokitai_jit._kernel import parse_signature

from arrays import CaiArray

SRC = 'extern "C" __global__ void scale(float *y, const float *x, float a, int n) {}\n'


def test_parse_signature_names_and_c_spellings():
    names = [p.name for p in parse_signature("ptr, ptr, i32, f32, i64, u32, u64, f64, f16, i8, u16")]
    assert names == ["ptr", "ptr", "i32", "f32", "i64", "u32", "u64", "f64", "f16", "i8", "u16"]
    c = [p.name for p in parse_signature("float *, const __half*, int, unsigned int, size_t, double, const int")]
    assert c == ["ptr", "ptr", "i32", "u32", "u64", "f64", "i32"]
    assert parse_signature("") == ()
    assert [p.name for p in parse_signature(["ptr", "i32"])] == ["ptr", "i32"]
    with pytest.raises(ValueError, match="unknown type 'complex' for parameter 1"):
        parse_signature("ptr, complex")
    with pytest.raises(TypeError):
        parse_signature(42)


def packed_bytes(sig, value, ctx):
    obj = parse_signature(sig)[0].pack(value, 0, ctx)
    return ctypes.string_at(ctypes.addressof(obj), ctypes.sizeof(obj))


def test_packing_is_the_c_representation(ctx):
    assert packed_bytes("i32", -2, ctx) == struct.pack("<i", -2)
    assert packed_bytes("u32", 0xFFFFFFFF, ctx) == struct.pack("<I", 0xFFFFFFFF)
    assert packed_bytes("i64", -(1 << 40), ctx) == struct.pack("<q", -(1 << 40))
    assert packed_bytes("u64", (1 << 64) - 1, ctx) == struct.pack("<Q", (1 << 64) - 1)
    assert packed_bytes("f32", 1.5, ctx) == struct.pack("<f", 1.5)
    assert packed_bytes("f32", 3, ctx) == struct.pack("<f", 3.0)
    assert packed_bytes("f64", 0.1, ctx) == struct.pack("<d", 0.1)
    assert packed_bytes("f16", 0.333, ctx) == struct.pack("<e", 0.333)
    assert packed_bytes("i8", -128, ctx) == b"\x80"
    buf = ctx.empty(4, "float32")
    assert packed_bytes("ptr", buf, ctx) == struct.pack("<Q", buf.ptr)
    assert packed_bytes("ptr", None, ctx) == b"\0" * 8
    assert packed_bytes("ptr", 0x1000, ctx) == struct.pack("<Q", 0x1000)
    a = CaiArray((3,), "float32")
    assert packed_bytes("ptr", a, ctx) == struct.pack("<Q", a.ptr)


@pytest.mark.parametrize(
    "sig,value,exc",
    [
        ("i32", 1 << 31, ValueError),
        ("i32", -(1 << 31) - 1, ValueError),
        ("u32", -1, ValueError),
        ("u8", 256, ValueError),
        ("i32", 1.5, TypeError),
        ("i32", "3", TypeError),
        ("f32", "1.0", TypeError),
        ("f32", None, TypeError),
        ("f16", 1e6, ValueError),
        ("ptr", 1.0, TypeError),
        ("ptr", -1, ValueError),
        ("ptr", "0x10", TypeError),
        ("i64", True, TypeError),
    ],
)
def test_packing_rejects(ctx, sig, value, exc):
    with pytest.raises(exc, match="argument 0"):
        parse_signature(sig)[0].pack(value, 0, ctx)


def test_launch_on_the_stub(ctx):
    k = tj.Kernel(SRC, "scale", signature="ptr, ptr, f32, i32")
    y, x = ctx.empty(256, "float32"), ctx.empty(256, "float32")
    k[2, 128](y, x, 2.0, 256, context=ctx)
    s = ctx.stats()
    assert (s.compiles, s.loads) == (1, 1)
    k[(2, 1), (128, 1, 1)](y, x, 2.0, 256, stream=0, shared=1024, context=ctx)
    k.launch(2, 128, y, x, 2.0, 256, context=ctx)
    s = ctx.stats()  # the handle is kept per context: no second lookup at all
    assert (s.compiles, s.loads, s.memory_hits) == (1, 1, 0)
    info = k.compile(ctx)
    assert info.entry == "scale" and len(info.key) == 32
    assert info.origin == tj.Origin.COMPILED


def test_current_context_is_used(cache_dir):
    k = tj.Kernel(SRC, "scale", signature="ptr, ptr, f32, i32")
    with tj.Context(backend="stub", cache_dir=cache_dir) as c:
        assert tj.current_context() is c
        k[1, 32](None, None, 1.0, 0)
        assert c.stats().compiles == 1
    assert c.closed


def test_launch_argument_errors(ctx):
    k = tj.Kernel(SRC, "scale", signature="ptr, ptr, f32, i32", context=ctx)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        k[1, 32](None, None, 1.0)
    with pytest.raises(TypeError, match="argument 3"):
        k[1, 32](None, None, 1.0, 2.5)
    with pytest.raises(ValueError, match="grid"):
        k[0, 32]
    with pytest.raises(ValueError, match="block"):
        k[1, (32, 1 << 32)]
    with pytest.raises(TypeError, match="grid"):
        k[(1, 1, 1, 1), 32]
    with pytest.raises(TypeError, match="exactly two"):
        k[1]
    with pytest.raises(ValueError, match="shared"):
        k[1, 32](None, None, 1.0, 1, shared=-1)
    with pytest.raises(TypeError, match="stream"):
        k[1, 32](None, None, 1.0, 1, stream="s")
    assert ctx.stats().compiles == 0
    # Without a signature the recorded layout packs the arguments
    # (test_kernel_infer.py); where the code object records none, the
    # signature is asked for.
    nosig = tj.Kernel(SRC, "scale", context=ctx)
    nosig[1, 32](None, None, 1.0, 1)
    unknown = tj.Kernel("/* defines scale without a signature the stub can read */", "scale", context=ctx)
    with pytest.raises(TypeError, match="signature="):
        unknown[1, 32](None, None, 1.0, 1)


def test_compile_error_carries_the_log(ctx):
    k = tj.Kernel('#error "TILE must divide 64"\n' + SRC, "scale", signature="ptr, ptr, f32, i32")
    with pytest.raises(tj.CompileError) as e:
        k.compile(ctx)
    err = e.value
    assert err.status == tj.Status.COMPILE_FAILED
    assert "compiling" in err.message
    assert '#error "TILE must divide 64"' in err.log
    assert err.log in str(err)
    assert ctx.stats().compile_failures == 1


def test_missing_entry_point(ctx):
    k = tj.Kernel(SRC, "nothere", signature="")
    with pytest.raises(tj.TokitaiError, match="nothere"):
        k.compile(ctx)


def test_defines_and_options_reach_the_key(ctx, cache_dir):
    a = tj.Kernel(SRC, "scale", defines={"TILE": 64, "FAST": None, "ON": True})
    b = tj.Kernel(SRC, "scale", defines=["TILE=32", "FAST", ("ON", 1)])
    c = tj.Kernel(SRC, "scale", options=["-lineinfo"])
    keys = {k.compile(ctx).key for k in (a, b, c)}
    assert len(keys) == 3
    assert a.defines == [("TILE", "64"), ("FAST", None), ("ON", "1")]
    entries = tj.cache.list(cache_dir)
    opts = sorted(e.options for e in entries)
    assert any("-DTILE=64" in o and "-DFAST" in o for o in opts)
    assert any("-lineinfo" in o for o in opts)


def test_kernel_argument_checks():
    with pytest.raises(TypeError, match="source"):
        tj.Kernel("", "k")
    with pytest.raises(TypeError, match="entry"):
        tj.Kernel(SRC, None)
    with pytest.raises(ValueError, match="macro name"):
        tj.Kernel(SRC, "scale", defines={"1BAD": 1})
    with pytest.raises(TypeError, match="options"):
        tj.Kernel(SRC, "scale", options="-O3")
    with pytest.raises(TypeError, match="context"):
        tj.Kernel(SRC, "scale", context="ctx")


def test_headers_need_library_support():
    if tj._capi.has_field(tj._capi.tk_kernel_desc, "headers"):
        pytest.skip("this library supports headers")
    with pytest.raises(NotImplementedError, match="header"):
        tj.Kernel(SRC, "scale", headers={"tile.h": "#define TILE 64\n"})


def test_headers_are_part_of_the_kernel(ctx):
    if not tj._capi.has_field(tj._capi.tk_kernel_desc, "headers"):
        pytest.skip("this library has no header support (tk_kernel_desc.headers)")
    src = '#include "tile.h"\n' + SRC
    a = tj.Kernel(src, "scale", headers={"tile.h": "#define TILE 64\n"})
    b = tj.Kernel(src, "scale", headers=[("tile.h", "#define TILE 32\n")])
    assert a.compile(ctx).key != b.compile(ctx).key


def test_precompile_then_disk_hit(cache_dir):
    k = tj.Kernel(SRC, "scale", signature="ptr, ptr, f32, i32")
    with tj.Context(backend="stub", target="stub", cache_dir=cache_dir) as off:
        assert k.precompile(off) == tj.Origin.COMPILED
        assert k.precompile(off) == tj.Origin.DISK
    with tj.Context(backend="stub", cache_dir=cache_dir) as c:
        assert k.compile(c).origin == tj.Origin.DISK
        s = c.stats()
        assert (s.compiles, s.disk_hits) == (0, 1)
