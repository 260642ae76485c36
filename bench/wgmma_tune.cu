// Standalone harness for the sm_90a wgmma path of kernel_src/gemm_f16.cu
// (tkw::gemm_body) against cuBLAS and the mma.sync kernel (tkg::gemm_body),
// all three layouts, correctness against an fp32 device reference. Build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/wgmma_tune.cu -o wgmma_tune -lcublas
// Not built by CMake: it needs nvcc and cuBLAS on the GPU machine.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>

#define TK_GEMM_NO_ENTRY 1
#include "../kernel_src/gemm_f16.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1);} } while (0)
#define CB(x) do { cublasStatus_t e_ = (x); if (e_ != CUBLAS_STATUS_SUCCESS) { printf("cuBLAS %d at %d\n", (int)e_, __LINE__); exit(1);} } while (0)

template <int L, int BN, int ST>
__global__ void __launch_bounds__(256, 1) kwg(const void *A, const void *B, void *C, tk_i64 M, tk_i64 N,
                                               tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smw[];
    tkw::gemm_body<128, BN, 64, ST, L != 2, L == 1, L != 0, true>(
        (const unsigned short *)A, (const unsigned short *)B, C, M, N, K, lda, ldb, ldc, smw);
#endif
}
template <int L, int ST>
__global__ void __launch_bounds__(128) kmma(const void *A, const void *B, void *C, tk_i64 M, tk_i64 N,
                                             tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc) {
    extern __shared__ __align__(128) unsigned char smm[];
    tkg::gemm_body<128, 128, 32, 2, 2, ST, L != 2, L == 1, L != 0, true, true>(
        (const unsigned short *)A, (const unsigned short *)B, C, M, N, K, lda, ldb, ldc, smm);
}

template <int L>
__global__ void ref(const __half *A, const __half *B, float *C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda,
                    tk_i64 ldb, tk_i64 ldc) {
    tk_i64 m = blockIdx.y * 16 + threadIdx.y, n = blockIdx.x * 16 + threadIdx.x;
    if (m >= M || n >= N) return;
    float acc = 0;
    for (tk_i64 k = 0; k < K; ++k) {
        float a = L != 2 ? __half2float(A[m * lda + k]) : __half2float(A[k * lda + m]);
        float b = L == 1 ? __half2float(B[n * ldb + k]) : __half2float(B[k * ldb + n]);
        acc += a * b;
    }
    C[m * ldc + n] = acc;
}

__global__ void fill(__half *p, size_t n, unsigned seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    p[i] = __float2half(((x & 0xffff) / 65535.0f - 0.5f));
}

typedef void (*kfn)(const void *, const void *, void *, tk_i64, tk_i64, tk_i64, tk_i64, tk_i64, tk_i64);
struct Cfg { const char *name; kfn f; int bm, bn, threads, smem; };

template <int L, int BN, int ST> Cfg mkw(const char *name) {
    Cfg c{name, kwg<L, BN, ST>, 128, BN, 256, ST * (128 + BN) * 64 * 2 + 1024};
    CK(cudaFuncSetAttribute(c.f, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
    return c;
}
template <int L, int ST> Cfg mkm(const char *name) {
    Cfg c{name, kmma<L, ST>, 128, 128, 128, ST * (256) * 32 * 2};
    CK(cudaFuncSetAttribute(c.f, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
    return c;
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

template <int L> void run_layout(cublasHandle_t h, bool quick) {
    constexpr bool AK = L != 2, BKM = L == 1, O16 = L != 0;
    std::vector<Cfg> cfgs = {
        mkm<L, 3>("mma 128x128x32 s3"),      mkm<L, 4>("mma 128x128x32 s4"),
        mkw<L, 128, 4>("wg 128x128x64 s4"),  mkw<L, 128, 5>("wg 128x128x64 s5"),
        mkw<L, 128, 6>("wg 128x128x64 s6"),  mkw<L, 256, 3>("wg 128x256x64 s3"),
        mkw<L, 256, 4>("wg 128x256x64 s4"),
    };
    long shapes[][3] = {{257, 509, 127},   {2049, 2051, 2063}, {130, 4100, 1000}, {1024, 1024, 1024},
                        {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192}, {512, 8192, 2048},
                        {128, 4096, 4096},  {512, 1024, 8192}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const char *lname[] = {"NN fwd", "NT grad_a", "TN grad_b"};
    for (auto &s : shapes) {
        tk_i64 M = s[0], N = s[1], K = s[2];
        tk_i64 lda = ((AK ? K : M) + 7) / 8 * 8, ldb = ((BKM ? K : N) + 7) / 8 * 8, ldc = (N + 7) / 8 * 8;
        size_t na = (size_t)(AK ? M : K) * lda, nb = (size_t)(BKM ? N : K) * ldb, nc = (size_t)M * ldc;
        int R = std::max<int>(1, std::min<int>(8, (int)(200e6 / ((na + nb) * 2 + nc * 4)) + 1));
        std::vector<__half *> dA(R), dB(R);
        std::vector<void *> dC(R);
        for (int r = 0; r < R; ++r) {
            CK(cudaMalloc(&dA[r], na * 2)); CK(cudaMalloc(&dB[r], nb * 2)); CK(cudaMalloc(&dC[r], nc * 4));
            fill<<<(na + 255) / 256, 256>>>(dA[r], na, 17u + r);
            fill<<<(nb + 255) / 256, 256>>>(dB[r], nb, 91u + r);
        }
        float *dref; CK(cudaMalloc(&dref, nc * 4));
        ref<L><<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(dA[0], dB[0], dref, M, N, K, lda, ldb, ldc);
        CK(cudaGetLastError());
        std::vector<float> href(nc);
        CK(cudaMemcpy(href.data(), dref, nc * 4, cudaMemcpyDeviceToHost));
        double flops = 2.0 * M * N * K;
        int iters = quick ? 10 : (flops > 1e11 ? 20 : (flops > 1e10 ? 50 : 100));
        float one = 1.f, zero = 0.f;
        auto cub = [&](int r) {
            cublasOperation_t ta = BKM ? CUBLAS_OP_T : CUBLAS_OP_N;
            cublasOperation_t tb = AK ? CUBLAS_OP_N : CUBLAS_OP_T;
            CB(cublasGemmEx(h, ta, tb, (int)N, (int)M, (int)K, &one, dB[r], CUDA_R_16F, (int)ldb, dA[r],
                            CUDA_R_16F, (int)lda, &zero, dC[r], O16 ? CUDA_R_16F : CUDA_R_32F, (int)ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
        };
        // Batches of 5 back-to-back launches per event pair.
        auto timeit = [&](auto fn) {
            for (int w = 0; w < 3; ++w) fn(w % R);
            std::vector<float> t;
            for (int it = 0; it < iters; ++it) {
                CK(cudaEventRecord(e0));
                for (int b = 0; b < 5; ++b) fn((it * 5 + b) % R);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms / 5);
            }
            CK(cudaGetLastError());
            return median(t);
        };
        float tcb = timeit(cub);
        printf("%-10s %5ld %5ld %5ld cuBLAS %8.4f ms %7.1f TF\n", lname[L], (long)M, (long)N, (long)K, tcb,
               flops / tcb / 1e9);
        for (auto &c : cfgs) {
            tk_i64 tiles = ((M + c.bm - 1) / c.bm) * ((N + c.bn - 1) / c.bn);
            auto run = [&](int r) {
                c.f<<<(unsigned)tiles, c.threads, c.smem>>>(dA[r], dB[r], dC[r], M, N, K, lda, ldb, ldc);
            };
            CK(cudaMemset(dC[0], 0xFF, nc * 4));
            run(0); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
            double maxerr = 0; bool ok = true; size_t bad = 0;
            if (O16) {
                std::vector<__half> got(nc);
                CK(cudaMemcpy(got.data(), dC[0], nc * 2, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < nc; ++i) {
                    if ((tk_i64)(i % ldc) >= N) continue;
                    double g = __half2float(got[i]), w = href[i];
                    double e = fabs(g - w); if (!(e <= 1e-2 + 2e-3 * fabs(w))) { ok = false; if (!bad++) printf("      first bad at r %ld c %ld: %g vs %g\n", (long)(i / ldc), (long)(i % ldc), g, w); }
                    if (e == e) maxerr = std::max(maxerr, e);
                }
            } else {
                std::vector<float> got(nc);
                CK(cudaMemcpy(got.data(), dC[0], nc * 4, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < nc; ++i) {
                    if ((tk_i64)(i % ldc) >= N) continue;
                    double e = fabs((double)got[i] - href[i]); if (!(e <= 1e-3 + 1e-4 * fabs(href[i]))) { ok = false; if (!bad++) printf("      first bad at r %ld c %ld: %g vs %g\n", (long)(i / ldc), (long)(i % ldc), got[i], href[i]); }
                    if (e == e) maxerr = std::max(maxerr, e);
                }
            }
            float t = ok ? timeit(run) : 0.f;
            printf("    %-22s %8.4f ms %7.1f TF  ratio %.2f  %s maxerr %.2e bad %zu\n", c.name, t,
                   ok ? flops / t / 1e9 : 0.0, ok ? tcb / t : 0.0, ok ? "ok" : "FAIL", maxerr, bad);
        }
        for (int r = 0; r < R; ++r) { cudaFree(dA[r]); cudaFree(dB[r]); cudaFree(dC[r]); }
        cudaFree(dref);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    int only = argc > 1 ? atoi(argv[1]) : -1;
    cublasHandle_t h;
    CB(cublasCreate(&h));
    if (only < 0 || only == 0) run_layout<0>(h, false);
    if (only < 0 || only == 1) run_layout<1>(h, false);
    if (only < 0 || only == 2) run_layout<2>(h, false);
    return 0;
}
