"""Launching user kernels without a signature, on the stub backend: the
parameter layout the library reads from the code object (the stub reads the
source's signature) decides how each Python value is packed; a mismatch is
a TypeError/ValueError before anything launches. C++ kernels are named as
written."""

from __future__ import annotations

import ctypes
import struct

import pytest

import tokitai_jit as tj
from tokitai_jit import _capi
from tokitai_jit._kernel import ParamInfo

from arrays import CaiArray

K = _capi.ParamKind

SRC = (
    "struct Pair { float a, b; };\n"
    "__global__ void every(signed char c, short s, int i, long long l, float f, double d,\n"
    "                      float *p, unsigned u, __half h, Pair pr) {}\n"
    'extern "C" __global__ void ext(float *y, int n) {}\n'
    "__global__ void ov(float *x) {}\n"
    "__global__ void ov(int *x) {}\n"
)


@pytest.fixture
def captured(ctx, monkeypatch):
    """The argument bytes of every tk_kernel_launch on ctx, per launch."""
    launches = []
    real = ctx._call

    def spy(name, *args):
        if name == "tk_kernel_launch":
            launches.append(args[-1])
        return real(name, *args)

    monkeypatch.setattr(ctx, "_call", spy)
    return launches


def arg_bytes(argv, index, size):
    return ctypes.string_at(argv[index], size)


def test_layout_of_a_cpp_kernel(ctx):
    k = tj.Kernel(SRC, "every")
    infos = k.parameters(ctx)
    assert [(p.offset, p.size, p.kind) for p in infos] == [
        (0, 1, K.INT),
        (2, 2, K.INT),
        (4, 4, K.INT),
        (8, 8, K.INT),
        (16, 4, K.FLOAT),
        (24, 8, K.FLOAT),
        (32, 8, K.POINTER),
        (40, 4, K.UINT),
        (44, 2, K.FLOAT),
        (46, 0, K.STRUCT),  # the stub does not lay out structs (size 0, no alignment)
    ]
    assert [int(m) for m in K] == [0, 1, 2, 3, 4, 5]


def test_every_size_class_is_packed_as_c(ctx, captured):
    k = tj.Kernel(SRC.replace(", Pair pr", ""), "every")
    y = ctx.empty(4, "float32")
    k[1, 32](-3, -300, -70000, -(1 << 40), 1.5, 0.1, y, 4000000000, 0.5, context=ctx)
    argv = captured[-1]
    assert arg_bytes(argv, 0, 1) == struct.pack("<b", -3)
    assert arg_bytes(argv, 1, 2) == struct.pack("<h", -300)
    assert arg_bytes(argv, 2, 4) == struct.pack("<i", -70000)
    assert arg_bytes(argv, 3, 8) == struct.pack("<q", -(1 << 40))
    assert arg_bytes(argv, 4, 4) == struct.pack("<f", 1.5)
    assert arg_bytes(argv, 5, 8) == struct.pack("<d", 0.1)
    assert arg_bytes(argv, 6, 8) == struct.pack("<Q", y.ptr)
    assert arg_bytes(argv, 7, 4) == struct.pack("<I", 4000000000)
    assert arg_bytes(argv, 8, 2) == struct.pack("<e", 0.5)
    # ctypes and numpy-like scalars by their own type; an int into a float
    # parameter converts; arrays of any kind are pointers.
    a = CaiArray((8,), "float32")
    k[1, 32](ctypes.c_int8(7), ctypes.c_int16(8), ctypes.c_int32(9), ctypes.c_int64(10),
             ctypes.c_float(2.5), 3, a, ctypes.c_uint32(5), 1, context=ctx)
    argv = captured[-1]
    assert arg_bytes(argv, 0, 1) == b"\x07"
    assert arg_bytes(argv, 4, 4) == struct.pack("<f", 2.5)
    assert arg_bytes(argv, 5, 8) == struct.pack("<d", 3.0)
    assert arg_bytes(argv, 6, 8) == struct.pack("<Q", a.ptr)
    assert arg_bytes(argv, 8, 2) == struct.pack("<e", 1.0)
    assert ctx.stats().compiles == 1


def test_numpy_scalars(ctx, captured):
    np = pytest.importorskip("numpy")
    k = tj.Kernel(SRC.replace(", Pair pr", ""), "every")
    y = ctx.empty(4, "float32")
    k[1, 1](np.int8(-1), np.int16(2), np.int32(3), np.int64(4), np.float32(0.25), np.float64(0.5),
            y, np.uint32(6), np.float16(2.0), context=ctx)
    argv = captured[-1]
    assert arg_bytes(argv, 4, 4) == struct.pack("<f", 0.25)
    assert arg_bytes(argv, 8, 2) == struct.pack("<e", 2.0)
    with pytest.raises(TypeError, match="argument 4"):  # a 4-byte float gets 8 bytes
        k[1, 1](1, 2, 3, 4, np.float64(0.5), 0.5, y, 6, 1.0, context=ctx)
    with pytest.raises(TypeError, match="argument 2"):  # an integer gets a float
        k[1, 1](1, 2, np.float32(3), 4, 0.5, 0.5, y, 6, 1.0, context=ctx)


def test_a_struct_by_value(ctx, captured):
    # The stub does not size structs; a layout with the size (as NVRTC and
    # hipRTC record it) takes a ctypes.Structure or bytes of that size.
    from tokitai_jit import _kernel

    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_float)]

    p = ParamInfo(0, 8, K.STRUCT)
    obj = _kernel._infer_one(Pair(1.0, 2.0), p, 0, ctx)
    assert bytes(obj) == struct.pack("<ff", 1.0, 2.0)
    assert bytes(_kernel._infer_one(b"12345678", p, 0, ctx)) == b"12345678"
    with pytest.raises(TypeError, match="a 8-byte value"):
        _kernel._infer_one(b"1234", p, 0, ctx)
    with pytest.raises(TypeError):
        _kernel._infer_one(1.0, p, 0, ctx)


def test_unknown_kinds_take_no_guess(ctx):
    """A parameter whose kind nothing records (size only) takes an array
    (8 bytes), a typed scalar or bytes of its size; a Python int or float
    could be packed more than one way there, so it is a TypeError that says
    how to type it. An int into 1 byte has one packing."""
    from tokitai_jit import _kernel

    u8 = ParamInfo(0, 8, K.UNKNOWN)
    u4 = ParamInfo(0, 4, K.UNKNOWN)
    u2 = ParamInfo(0, 2, K.UNKNOWN)
    a = CaiArray((2,), "float32")
    assert bytes(_kernel._infer_one(a, u8, 0, ctx)) == struct.pack("<Q", a.ptr)
    assert bytes(_kernel._infer_one(ctypes.c_double(2.0), u8, 0, ctx)) == struct.pack("<d", 2.0)
    assert bytes(_kernel._infer_one(ctypes.c_int64(-5), u8, 0, ctx)) == struct.pack("<q", -5)
    assert bytes(_kernel._infer_one(ctypes.c_float(2.0), u4, 0, ctx)) == struct.pack("<f", 2.0)
    assert bytes(_kernel._infer_one(ctypes.c_uint32(7), u4, 0, ctx)) == struct.pack("<I", 7)
    assert bytes(_kernel._infer_one(b"\x01\x02", u2, 0, ctx)) == b"\x01\x02"
    assert bytes(_kernel._infer_one(-3, ParamInfo(0, 1, K.UNKNOWN), 0, ctx)) == b"\xfd"
    for value, p, could in [
        (2.0, u8, "a pointer, a 64-bit integer or a double"),
        (-5, u8, "a pointer, a 64-bit integer or a double"),
        (2.0, u4, "an int or a float"),
        (7, u4, "an int or a float"),
        (True, u4, "an int or a float"),
        (0.5, u2, "a 16-bit integer, __half or bfloat16"),
    ]:
        with pytest.raises(TypeError, match=r"argument 3 \(the kernel takes %d bytes of unknown kind here\): "
                           r"got an? (int|float);.*\(%s\).*signature=" % (p.size, could)):
            _kernel._infer_one(value, p, 3, ctx)
    with pytest.raises(TypeError, match="got CaiArray, a pointer"):
        _kernel._infer_one(a, u4, 0, ctx)
    with pytest.raises(TypeError, match="got c_float, 4 bytes"):
        _kernel._infer_one(ctypes.c_float(1.0), u8, 0, ctx)


@pytest.mark.parametrize(
    "args,exc,match",
    [
        ((1, 2, 3, 4, 0.5, 0.5, 1.5, 6, 1.0), TypeError, "argument 6 .*a pointer.*got a float"),
        ((1, 2, 3, 4, 0.5, 0.5, None, 6), TypeError, "takes 9 arguments"),
        ((1, 2, 1 << 31, 4, 0.5, 0.5, None, 6, 1.0), ValueError, "argument 2 .*outside"),
        ((1, 2, 3, 4, 0.5, 0.5, None, -1, 1.0), ValueError, "argument 7 .*outside"),
        ((128, 2, 3, 4, 0.5, 0.5, None, 6, 1.0), ValueError, "argument 0"),
        ((1, 2, 3.5, 4, 0.5, 0.5, None, 6, 1.0), TypeError, "argument 2 .*got a float"),
        ((1, 2, 3, 4, "x", 0.5, None, 6, 1.0), TypeError, "argument 4 .*cannot pass str"),
        ((1, 2, 3, 4, 0.5, 0.5, None, 6, 1e6), ValueError, "argument 8 .*fp16"),
    ],
)
def test_mismatches_raise_before_launch(ctx, captured, args, exc, match):
    k = tj.Kernel(SRC.replace(", Pair pr", ""), "every")
    with pytest.raises(exc, match=match):
        k[1, 1](*args, context=ctx)
    assert captured == []  # nothing launched


def test_signature_still_wins(ctx, captured):
    k = tj.Kernel(SRC, "ext", signature="ptr, i64")
    k[1, 1](None, 1 << 40, context=ctx)  # the recorded layout says i32: the signature rules
    assert arg_bytes(captured[-1], 1, 8) == struct.pack("<q", 1 << 40)


def test_extern_c_inferred(ctx, captured):
    k = tj.Kernel(SRC, "ext")
    y = ctx.empty(4, "float32")
    k[1, 1](y, 7, context=ctx)
    assert arg_bytes(captured[-1], 1, 4) == struct.pack("<i", 7)


def test_names_errors_list_kernels(ctx):
    with pytest.raises(tj.TokitaiError, match=r"did you mean every\(signed char, short"):
        tj.Kernel(SRC, "evry").compile(ctx)
    with pytest.raises(tj.TokitaiError, match=r"overloaded.*static_cast<void \(\*\)\(float\*\)>\(ov\)"):
        tj.Kernel(SRC, "ov").compile(ctx)


# ------------------------------------------------ real compilers, no device

# extern "C": the cubin records sizes only (comgr marks pointers); the kinds
# come from the declaration. `real` has two definitions (#if branches) and
# stays unknown.
EXT = r"""
struct S12 { float a, b, c; };
typedef long long i64;
#ifdef WIDE
typedef double real;
#else
typedef float real;
#endif
extern "C" __global__ void ext_all(float *__restrict__ out, int n, float f, double d, i64 l,
                                   S12 s, const float *in, unsigned u, real r)
{ out[0] = n + f + d + l + s.b + in[0] + u + r; }
"""

OFFLINE = [("hip", "gfx90a"), ("cuda", "sm_90")]


@pytest.fixture(params=OFFLINE, ids=[t for _, t in OFFLINE])
def offline(request, cache_dir):
    backend, target = request.param
    try:
        c = tj.Context(backend=backend, target=target, cache_dir=cache_dir)
    except (tj.BackendUnavailableError, tj.UnsupportedError, tj.NoDeviceError) as e:
        pytest.skip("%s compiler unavailable: %s" % (backend, e))
    yield c
    c.close()


def test_extern_c_kinds_from_the_declaration_offline(offline):
    k = tj.Kernel(EXT, "ext_all")
    assert [(p.offset, p.size, p.kind) for p in k.parameters(offline)] == [
        (0, 8, K.POINTER),
        (8, 4, K.INT),
        (12, 4, K.FLOAT),
        (16, 8, K.FLOAT),
        (24, 8, K.INT),
        (32, 12, K.STRUCT),
        (48, 8, K.POINTER),
        (56, 4, K.UINT),
        (60, 4, K.UNKNOWN),
    ]


def test_extern_c_mismatches_are_type_errors_offline(offline, monkeypatch):
    launched = []
    real_call = offline._call

    def spy(name, *args):
        if name == "tk_kernel_launch":
            launched.append(args[-1])
        return real_call(name, *args)

    monkeypatch.setattr(offline, "_call", spy)
    k = tj.Kernel(EXT, "ext_all")
    out, inp = CaiArray((4,), "float32"), CaiArray((4,), "float32")
    s12 = struct.pack("<fff", 1, 2, 3)
    good = [out, 1, 0.5, 0.25, 1 << 40, s12, inp, 3, ctypes.c_float(1.5)]
    for i, bad, match in [
        (0, 1.5, "argument 0 .*a pointer.*got a float"),  # a float where the kernel takes a pointer
        (1, 2.5, "argument 1 .*signed integer.*got a float"),  # a float into an int
        (6, 0.5, "argument 6 .*a pointer.*got a float"),
        (8, 1.5, "argument 8 .*unknown kind.*got a float.*signature="),  # real: no guess
        (8, 1, "argument 8 .*unknown kind.*got an int.*signature="),
        (3, out, "argument 3 .*8-byte float.*got CaiArray"),
    ]:
        args = list(good)
        args[i] = bad
        with pytest.raises(TypeError, match=match):
            k[1, 1](*args, context=offline)
    assert launched == []  # nothing reached the launch
    # The good arguments pack as the declaration says (an int into the float
    # parameter converts); the offline context then refuses to launch.
    args = list(good)
    args[2] = 2
    with pytest.raises(tj.NoDeviceError):
        k[1, 1](*args, context=offline)
    argv = launched[-1]
    assert arg_bytes(argv, 1, 4) == struct.pack("<i", 1)
    assert arg_bytes(argv, 2, 4) == struct.pack("<f", 2.0)
    assert arg_bytes(argv, 3, 8) == struct.pack("<d", 0.25)
    assert arg_bytes(argv, 4, 8) == struct.pack("<q", 1 << 40)
    assert arg_bytes(argv, 5, 12) == s12
    assert arg_bytes(argv, 7, 4) == struct.pack("<I", 3)
    assert arg_bytes(argv, 8, 4) == struct.pack("<f", 1.5)
