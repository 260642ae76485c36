/*
 * cuBLAS as the reference for the GEMM benchmarks (bench/bench_ops.c,
 * bench/dynamic.c): loaded with dlopen (no CUDA headers needed), the library's
 * three GEMM ops mapped onto cublasGemmEx with identical input and output
 * types and layouts (fp16 in, fp32 compute, fp32 output for the forward and
 * fp16 for the gradients), on the default stream.
 */
#ifndef TK_BENCH_CUBLAS_REF_H
#define TK_BENCH_CUBLAS_REF_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "tokitai/ops.h"

typedef int (*cublasCreate_t)(void **);
typedef int (*cublasSetStream_t)(void *, void *);
typedef int (*cublasGemmEx_t)(void *, int, int, int, int, int, const void *, const void *, int, int,
                              const void *, int, int, const void *, void *, int, int, int, int);
static struct {
    void *lib, *handle;
    cublasGemmEx_t gemm;
} cub;

enum { OP_N = 0, OP_T = 1, R_16F = 2, R_32F = 0, COMPUTE_32F = 68, GEMM_DEFAULT_TENSOR_OP = 99 };

/* 1 when cuBLAS is loaded and a handle on the default stream exists. */
static int cublas_ref_open(void)
{
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    cublasCreate_t create;
    cublasSetStream_t set_stream;
    if (cub.handle != NULL)
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && cub.lib == NULL; i++)
        cub.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (cub.lib == NULL)
        return 0;
    *(void **)&create = dlsym(cub.lib, "cublasCreate_v2");
    *(void **)&set_stream = dlsym(cub.lib, "cublasSetStream_v2");
    *(void **)&cub.gemm = dlsym(cub.lib, "cublasGemmEx");
    if (create == NULL || set_stream == NULL || cub.gemm == NULL || create(&cub.handle) != 0 ||
        set_stream(cub.handle, NULL) != 0) {
        cub.handle = NULL;
        return 0;
    }
    return 1;
}

/* The op on packed row-major operands: x and y are the op's two inputs in its
 * argument order (fwd: A, B; grad_a: grad_C, B; grad_b: A, grad_C). Returns
 * cuBLAS's status (0: success). Row-major X is column-major X^T, so each op
 * computes the transposed product. */
static int cublas_ref_gemm(tk_op op, int64_t M64, int64_t N64, int64_t K64, const void *x,
                           const void *y, void *out)
{
    const float one = 1.0f, zero = 0.0f;
    const int M = (int)M64, N = (int)N64, K = (int)K64;
    switch (op) {
    case TK_OP_GEMM_F16_FWD: /* C^T[N,M] = B^T A^T */
        return cub.gemm(cub.handle, OP_N, OP_N, N, M, K, &one, y, R_16F, N, x, R_16F, K, &zero, out,
                        R_32F, N, COMPUTE_32F, GEMM_DEFAULT_TENSOR_OP);
    case TK_OP_GEMM_F16_GRAD_A: /* gA^T[K,M] = B[K,N](col view N x K, op T) gC^T */
        return cub.gemm(cub.handle, OP_T, OP_N, K, M, N, &one, y, R_16F, N, x, R_16F, N, &zero, out,
                        R_16F, K, COMPUTE_32F, GEMM_DEFAULT_TENSOR_OP);
    default: /* gB^T[N,K] = gC^T A (A col view K x M, op T) */
        return cub.gemm(cub.handle, OP_N, OP_T, N, K, M, &one, y, R_16F, N, x, R_16F, K, &zero, out,
                        R_16F, N, COMPUTE_32F, GEMM_DEFAULT_TENSOR_OP);
    }
}

#endif
