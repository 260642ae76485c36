// The TMA variant of the sm_90a wgmma GEMM of kernel_src/gemm_f16.cu
// (tkw::gemm_body_tma, TK_WGMMA=2) with TMA loads (cp.async.bulk.tensor, 128-byte
// swizzle, hardware zero fill at the edges) and warp specialisation: one
// producer warpgroup (setmaxnreg down) issues the copies into a ring of
// stages guarded by full/empty mbarriers; two consumer warpgroups (setmaxnreg
// up) run the wgmma. Compared with the cp.async kernel (tkw::gemm_body) and
// cuBLAS in the same process, all three layouts, fp32 device reference.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/wgmma_tma_tune.cu -o wgmma_tma -lcublas
#include <cuda.h>
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

// The kernel body is the library's (tkw::gemm_body_tma in kernel_src/gemm_f16.cu).

template <int L, int BN, int ST>
__global__ void __launch_bounds__(384, 1) ktma(const __grid_constant__ CUtensorMap mA, const __grid_constant__ CUtensorMap mB,
                                                void *C, tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 ldc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smt[];
    tkw::gemm_body_tma<BN, ST, L != 2, L == 1, L != 0, true>((const tk_tmap *)&mA, (const tk_tmap *)&mB, C, M, N,
                                                         K, ldc, smt);
#endif
}
template <int L, int BN, int ST>
__global__ void __launch_bounds__(256, 1) kwg(const void *A, const void *B, void *C, tk_i64 M, tk_i64 N,
                                               tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smw[];
    tkw::gemm_body<128, BN, 64, ST, L != 2, L == 1, L != 0, true>(
        (const unsigned short *)A, (const unsigned short *)B, C, M, N, K, lda, ldb, ldc, smw);
#endif
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

typedef CUresult (*encode_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                             const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                             CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static encode_t encode;

// rows x cols fp16 matrix, row stride ld elements; box = 64 columns x box_rows rows.
static CUtensorMap make_map(const void *p, tk_i64 rows, tk_i64 cols, tk_i64 ld, int box_rows) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    cuuint32_t es[2] = {1, 1};
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)p, dims, strides, box, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled failed %d\n", (int)r); exit(1); }
    return m;
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

template <int L> void run_layout(cublasHandle_t h) {
    constexpr bool AK = L != 2, BKM = L == 1, O16 = L != 0;
    typedef void (*tf)(CUtensorMap, CUtensorMap, void *, tk_i64, tk_i64, tk_i64, tk_i64);
    typedef void (*wf)(const void *, const void *, void *, tk_i64, tk_i64, tk_i64, tk_i64, tk_i64, tk_i64);
    struct TC { const char *name; tf f; int bn, smem; };
    struct WC { const char *name; wf f; int bn, smem; };
    std::vector<TC> tcs = {{"tma 128x256 s4", ktma<L, 256, 4>, 256, 4 * 384 * 128 + 2048},
                           {"tma 128x128 s6", ktma<L, 128, 6>, 128, 6 * 256 * 128 + 2048},
                           {"tma 128x128 s4", ktma<L, 128, 4>, 128, 4 * 256 * 128 + 2048}};
    std::vector<WC> wcs = {{"cp.async wg 128x256 s4", kwg<L, 256, 4>, 256, 4 * 384 * 128 + 1024},
                           {"cp.async wg 128x128 s5", kwg<L, 128, 5>, 128, 5 * 256 * 128 + 1024}};
    for (auto &c : tcs) CK(cudaFuncSetAttribute(c.f, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
    for (auto &c : wcs) CK(cudaFuncSetAttribute(c.f, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
    long shapes[][3] = {{257, 509, 127}, {2049, 2051, 2063}, {2048, 2048, 2048}, {4096, 4096, 4096},
                        {8192, 8192, 8192}, {512, 8192, 2048}};
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
        std::vector<CUtensorMap> tA[2], tB[2]; // [bn==256]
        for (int r = 0; r < R; ++r) {
            CK(cudaMalloc(&dA[r], na * 2)); CK(cudaMalloc(&dB[r], nb * 2)); CK(cudaMalloc(&dC[r], nc * 4));
            fill<<<(na + 255) / 256, 256>>>(dA[r], na, 17u + r);
            fill<<<(nb + 255) / 256, 256>>>(dB[r], nb, 91u + r);
            for (int w = 0; w < 2; ++w) {
                int bn = w ? 256 : 128;
                tA[w].push_back(AK ? make_map(dA[r], M, K, lda, 128) : make_map(dA[r], K, M, lda, 64));
                tB[w].push_back(BKM ? make_map(dB[r], N, K, ldb, bn) : make_map(dB[r], K, N, ldb, 64));
            }
        }
        float *dref; CK(cudaMalloc(&dref, nc * 4));
        ref<L><<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(dA[0], dB[0], dref, M, N, K, lda, ldb, ldc);
        CK(cudaGetLastError());
        std::vector<float> href(nc);
        CK(cudaMemcpy(href.data(), dref, nc * 4, cudaMemcpyDeviceToHost));
        double flops = 2.0 * M * N * K;
        int iters = flops > 1e11 ? 15 : 40;
        float one = 1.f, zero = 0.f;
        auto cub = [&](int r) {
            CB(cublasGemmEx(h, BKM ? CUBLAS_OP_T : CUBLAS_OP_N, AK ? CUBLAS_OP_N : CUBLAS_OP_T, (int)N, (int)M, (int)K,
                            &one, dB[r], CUDA_R_16F, (int)ldb, dA[r], CUDA_R_16F, (int)lda, &zero, dC[r],
                            O16 ? CUDA_R_16F : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
        };
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
        auto check = [&](const char *name, auto run) {
            CK(cudaMemset(dC[0], 0xFF, nc * 4));
            run(0); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
            double maxerr = 0; size_t bad = 0;
            std::vector<float> got32(O16 ? 0 : nc); std::vector<__half> got16(O16 ? nc : 0);
            if (O16) CK(cudaMemcpy(got16.data(), dC[0], nc * 2, cudaMemcpyDeviceToHost));
            else CK(cudaMemcpy(got32.data(), dC[0], nc * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < nc; ++i) {
                if ((tk_i64)(i % ldc) >= N) continue;
                double g = O16 ? (double)__half2float(got16[i]) : (double)got32[i], w = href[i];
                double e = fabs(g - w);
                bool ok = O16 ? e <= 1e-2 + 2e-3 * fabs(w) : e <= 1e-3 + 1e-4 * fabs(w);
                if (!ok && !bad++) printf("      first bad at r %ld c %ld: %g vs %g\n", (long)(i / ldc), (long)(i % ldc), g, w);
                if (e == e) maxerr = std::max(maxerr, e);
            }
            return bad;
        };
        float tcb = timeit(cub);
        printf("%-10s %5ld %5ld %5ld cuBLAS %8.4f ms %7.1f TF\n", lname[L], (long)M, (long)N, (long)K, tcb, flops / tcb / 1e9);
        for (auto &c : wcs) {
            unsigned tiles = (unsigned)(((M + 127) / 128) * ((N + c.bn - 1) / c.bn));
            auto run = [&](int r) { c.f<<<tiles, 256, c.smem>>>(dA[r], dB[r], dC[r], M, N, K, lda, ldb, ldc); };
            size_t bad = check(c.name, run);
            float t = bad ? 0.f : timeit(run);
            printf("    %-24s %8.4f ms %7.1f TF  ratio %.2f  %s bad %zu\n", c.name, t, bad ? 0.0 : flops / t / 1e9,
                   bad ? 0.0 : tcb / t, bad ? "FAIL" : "ok", bad);
        }
        for (auto &c : tcs) {
            int w = c.bn == 256;
            unsigned tiles = (unsigned)(((M + 127) / 128) * ((N + c.bn - 1) / c.bn));
            auto run = [&](int r) { c.f<<<tiles, 384, c.smem>>>(tA[w][r], tB[w][r], dC[r], M, N, K, ldc); };
            size_t bad = check(c.name, run);
            float t = bad ? 0.f : timeit(run);
            printf("    %-24s %8.4f ms %7.1f TF  ratio %.2f  %s bad %zu\n", c.name, t, bad ? 0.0 : flops / t / 1e9,
                   bad ? 0.0 : tcb / t, bad ? "FAIL" : "ok", bad);
        }
        for (int r = 0; r < R; ++r) { cudaFree(dA[r]); cudaFree(dB[r]); cudaFree(dC[r]); }
        cudaFree(dref);
        fflush(stdout);
    }
}

int main() {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void **)&encode, cudaEnableDefault, &q));
    if (!encode) { printf("no cuTensorMapEncodeTiled\n"); return 1; }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    run_layout<0>(h);
    run_layout<1>(h);
    run_layout<2>(h);
    return 0;
}
