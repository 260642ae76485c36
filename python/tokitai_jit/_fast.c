/* tokitai_jit._fast: the operators' library call without ctypes.
 *
 * call(op, fn, ctx, *args) -> status calls the operator function at address
 * fn (taken from the ctypes handle, so this module links against nothing)
 * with the prototype ops.h gives operator op (a tk_op value). Arguments are
 * Python ints (pointers as addresses, 0 for NULL). ctypes spends about 1-2 us
 * converting eleven arguments; this is one vectorcall. tokitai_jit.torch
 * falls back to ctypes when the module was not built. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "tokitai/ops.h"

typedef __typeof__(tk_gemm_f16_fwd) gemm_fwd_fn;
typedef __typeof__(tk_gemm_f16_grad_a) gemm_ga_fn;
typedef __typeof__(tk_gemm_f16_grad_b) gemm_gb_fn;
typedef __typeof__(tk_softmax_f16_fwd) softmax_fn;
typedef __typeof__(tk_softmax_xent_f16_bwd) xent_fn;
typedef __typeof__(tk_embedding_f16_fwd) emb_fwd_fn;
typedef __typeof__(tk_embedding_f16_bwd) emb_bwd_fn;

#define MAX_ARGS 12

static int read_args(PyObject *const *args, Py_ssize_t n, int64_t *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(args[i]);
        if (v == -1 && PyErr_Occurred()) {
            unsigned long long u; /* an address at or above 2^63 */
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear();
            u = PyLong_AsUnsignedLongLong(args[i]);
            if (u == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            v = (long long)u;
        }
        out[i] = (int64_t)v;
    }
    return 0;
}

static PyObject *fast_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const Py_ssize_t want[] = {
        [TK_OP_GEMM_F16_FWD] = 10,    [TK_OP_GEMM_F16_GRAD_A] = 10,    [TK_OP_GEMM_F16_GRAD_B] = 10,
        [TK_OP_SOFTMAX_F16_FWD] = 7,  [TK_OP_SOFTMAX_XENT_F16_BWD] = 9, [TK_OP_EMBEDDING_F16_FWD] = 8,
        [TK_OP_EMBEDDING_F16_BWD] = 9,
    };
    int64_t v[MAX_ARGS + 3];
    long op;
    uintptr_t fn; /* an integer to a function pointer: implementation-defined, exact on POSIX */
    void *ctx;
    tk_status st;
    (void)self;
    if (nargs < 3) {
        PyErr_SetString(PyExc_TypeError, "call(op, fn, ctx, *args)");
        return NULL;
    }
    op = PyLong_AsLong(args[0]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    if (op < 0 || op >= (long)(sizeof want / sizeof want[0])) {
        PyErr_Format(PyExc_ValueError, "call: unknown operator %ld", op);
        return NULL;
    }
    if (nargs - 3 != want[op]) {
        PyErr_Format(PyExc_TypeError, "call: operator %ld takes %zd arguments after ctx, got %zd", op,
                     want[op], nargs - 3);
        return NULL;
    }
    if (read_args(args + 1, nargs - 1, v) != 0)
        return NULL;
    fn = (uintptr_t)v[0];
    ctx = (void *)(uintptr_t)v[1];
    if (!fn) {
        PyErr_SetString(PyExc_ValueError, "call: null function address");
        return NULL;
    }
#define P(i) ((void *)(uintptr_t)v[(i)])
    Py_BEGIN_ALLOW_THREADS
    switch (op) {
    case TK_OP_GEMM_F16_FWD:
        st = ((gemm_fwd_fn *)fn)(ctx, v[2], v[3], v[4], P(5), v[6], P(7), v[8], (float *)P(9), v[10], P(11));
        break;
    case TK_OP_GEMM_F16_GRAD_A:
        st = ((gemm_ga_fn *)fn)(ctx, v[2], v[3], v[4], P(5), v[6], P(7), v[8], P(9), v[10], P(11));
        break;
    case TK_OP_GEMM_F16_GRAD_B:
        st = ((gemm_gb_fn *)fn)(ctx, v[2], v[3], v[4], P(5), v[6], P(7), v[8], P(9), v[10], P(11));
        break;
    case TK_OP_SOFTMAX_F16_FWD:
        st = ((softmax_fn *)fn)(ctx, v[2], v[3], P(4), v[5], P(6), v[7], P(8));
        break;
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        st = ((xent_fn *)fn)(ctx, v[2], v[3], P(4), v[5], P(6), v[7], P(8), v[9], P(10));
        break;
    case TK_OP_EMBEDDING_F16_FWD:
        st = ((emb_fwd_fn *)fn)(ctx, v[2], v[3], P(4), v[5], (const int32_t *)P(6), P(7),
                                (uint32_t *)P(8), P(9));
        break;
    default: /* TK_OP_EMBEDDING_F16_BWD */
        st = ((emb_bwd_fn *)fn)(ctx, v[2], v[3], P(4), v[5], (const int32_t *)P(6), P(7),
                                (unsigned)v[8], (uint32_t *)P(9), P(10));
        break;
    }
    Py_END_ALLOW_THREADS
#undef P
    return PyLong_FromLong((long)st);
}

static PyMethodDef fast_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fast_call, METH_FASTCALL,
     "call(op, fn, ctx, *args) -> status: the operator function at address fn."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT, "tokitai_jit._fast", "The operators' library call without ctypes.", -1,
    fast_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    return PyModule_Create(&fast_module);
}
