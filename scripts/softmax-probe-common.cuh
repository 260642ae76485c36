// The harness of the softmax probes (softmax-structure-probe.cu,
// softmax-two-pass-probe.cu): 2^27 random fp16 inputs in [-8, 8), device
// time per call (median of batches of 10 launches between two events) and
// a check of three rows against an fp64 reference.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define L2E 1.4426950408889634f
// 2^x, denormal results flushed (one MUFU.EX2)
static __device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// Two (max, sum) pairs into one, m in units where ex2(unit * (m - nm))
// rescales a sum: unit L2E for natural-log maxima, 1 for maxima already
// in log2 units. An empty side (m = -inf, s = 0) leaves the other.
static __device__ __forceinline__ void comb_unit(float &m, float &s, float m2, float s2, float unit)
{
    if (m2 == -INFINITY)
        return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    const float nm = fmaxf(m, m2);
    s = s * ex2((m - nm) * unit) + s2 * ex2((m2 - nm) * unit);
    m = nm;
}

// A launch of `threads`-thread blocks in clusters of C along x, on stream
// st (set cfg.gridDim before launching with cudaLaunchKernelEx(&cfg, ...)).
struct cluster_launch {
    cudaLaunchAttribute at = {};
    cudaLaunchConfig_t cfg = {};
    cluster_launch(int C, unsigned threads, size_t smem, cudaStream_t st)
    {
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = C;
        at.val.clusterDim.y = 1;
        at.val.clusterDim.z = 1;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        cfg.blockDim = dim3(threads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
    }
    cluster_launch(const cluster_launch &) = delete; // cfg.attrs points into it
};

struct probe_io {
    size_t total = (size_t)1 << 27; // halves per tensor
    unsigned short *x = nullptr, *y = nullptr;
    std::vector<unsigned short> hx, hy;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    probe_io()
    {
        CK(cudaMalloc(&x, total * 2 + 64));
        CK(cudaMalloc(&y, total * 2 + 64));
        hx.resize(total);
        srand(1);
        for (size_t i = 0; i < total; ++i)
            hx[i] = __half_as_ushort(__float2half((rand() / (float)RAND_MAX) * 16.f - 8.f));
        CK(cudaMemcpy(x, hx.data(), total * 2, cudaMemcpyHostToDevice));
        CK(cudaStreamCreate(&st));
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
    }
    // us per call: median over `samples` batches of 10 launches
    template <class F> float time(F launch, int samples = 11)
    {
        for (int i = 0; i < 3; ++i)
            launch();
        CK(cudaStreamSynchronize(st));
        std::vector<float> ts;
        for (int r = 0; r < samples; ++r) {
            CK(cudaEventRecord(e0, st));
            for (int i = 0; i < 10; ++i)
                launch();
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            ts.push_back(ms * 100.f);
        }
        std::sort(ts.begin(), ts.end());
        return ts[ts.size() / 2];
    }
    float copy_us(size_t bytes)
    {
        return time([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, st)); });
    }
    // rows 0, rows / 2 and rows - 1 of y against fp64: the worst error over
    // the library's tolerance (abs 1e-3 + rel 1e-2; <= 1 passes)
    double check(int rows, int cols)
    {
        const size_t n = (size_t)rows * cols;
        hy.resize(n);
        CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
        double worst = 0;
        const int rr[3] = {0, rows / 2, rows - 1};
        for (int q = 0; q < 3; ++q) {
            const unsigned short *xr = hx.data() + (size_t)rr[q] * cols;
            const unsigned short *yr = hy.data() + (size_t)rr[q] * cols;
            double mx = -1e30, sm = 0;
            for (int c = 0; c < cols; ++c)
                mx = fmax(mx, h2f(xr[c]));
            for (int c = 0; c < cols; ++c)
                sm += exp(h2f(xr[c]) - mx);
            for (int c = 0; c < cols; ++c) {
                const double r = exp(h2f(xr[c]) - mx) / sm, g = h2f(yr[c]);
                const double e = fabs(g - r) / (1e-3 + 1e-2 * r);
                worst = isnan(e) ? 1e9 : fmax(worst, e);
            }
        }
        return worst;
    }
    static double h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
};
