// A two-pass softmax forward on sm_90 clusters whose second read of the row
// should hit L2 (tried and not kept: docs/performance-softmax.md, 2026-11-29).
// A: one row per cluster, each block streams its slice twice (the (max, sum)
//    pass, then the output pass).
// B: persistent clusters: the output pass of row r fused with the (max, sum)
//    pass of row r + stride (one loop, both loads in flight).
// T threads, U vectors in flight a thread, HINT L2 eviction hints (bit 0
// first pass evict-last, bit 1 second pass evict-first, bit 2 stores
// evict-first); clusters of 2-16 blocks. Whole vectors only, packed rows,
// 2^27 halves per tensor, x copy against cudaMemcpyAsync in the same run.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//        -o probe scripts/softmax-two-pass-probe.cu && ./probe [cols,...] [variant filter]
#include <cooperative_groups.h>
#include <string.h>

#include "softmax-probe-common.cuh"
namespace cg = cooperative_groups;

static __device__ __forceinline__ unsigned long long pol_last()
{
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
static __device__ __forceinline__ unsigned long long pol_first()
{
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
static __device__ __forceinline__ uint4 ldh(const uint4 *p, unsigned long long pol)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}
static __device__ __forceinline__ void sth(uint4 *p, uint4 v, unsigned long long pol)
{
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(pol)
                 : "memory");
}
// HINT bit 0: pass-1 loads evict_last; bit 1: pass-2 loads evict_first;
// bit 2: stores evict_first
template <int HINT> static __device__ __forceinline__ uint4 ld1(const uint4 *p)
{
    if (HINT & 1)
        return ldh(p, pol_last());
    return __ldg(p);
}
template <int HINT> static __device__ __forceinline__ uint4 ld2(const uint4 *p)
{
    if (HINT & 2)
        return ldh(p, pol_first());
    return __ldg(p);
}
template <int HINT> static __device__ __forceinline__ void st(uint4 *p, uint4 v)
{
    if (HINT & 4)
        sth(p, v, pol_first());
    else
        *p = v;
}

static __device__ __forceinline__ void unpack(uint4 v, float f[8])
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 t = __half22float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}
static __device__ __forceinline__ uint4 pack(const float f[8])
{
    uint4 v;
    __half2 *h = reinterpret_cast<__half2 *>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k)
        h[k] = __floats2half2_rn(f[2 * k], f[2 * k + 1]);
    return v;
}
// (m, s) in log2 units: s = sum 2^(x*L2E - m)
static __device__ __forceinline__ void acc(float &m, float &s, uint4 v)
{
    float f[8];
    unpack(v, f);
    float mv = m;
#pragma unroll
    for (int k = 0; k < 8; ++k)
        mv = fmaxf(mv, f[k] * L2E);
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k)
        t += ex2(fmaf(f[k], L2E, -mv));
    s = s * ex2(m - mv) + t; // m = -inf: ex2(-inf) = 0
    m = mv;
}
static __device__ __forceinline__ void comb(float &m, float &s, float m2, float s2)
{
    comb_unit(m, s, m2, s2, 1.f);
}
static __device__ __forceinline__ uint4 outv(uint4 v, float gm, float inv)
{
    float f[8];
    unpack(v, f);
#pragma unroll
    for (int k = 0; k < 8; ++k)
        f[k] = ex2(fmaf(f[k], L2E, -gm)) * inv;
    return pack(f);
}

// block + cluster reduce of (m, s); buf: 2 slots of the block's part
template <int T>
static __device__ __forceinline__ float2 reduce(float m, float s, float2 *red, float2 *part,
                                                float2 *whole, int slot, cg::cluster_group &cl,
                                                int C)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        comb(m, s, m2, s2);
    }
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = make_float2(m, s);
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = red[0].x, bs = red[0].y;
        for (int w = 1; w < T / 32; ++w)
            comb(bm, bs, red[w].x, red[w].y);
        part[slot] = make_float2(bm, bs);
    }
    cl.sync();
    if (threadIdx.x == 0) {
        float rm = -INFINITY, rs = 0.f;
        for (int r = 0; r < C; ++r) {
            float2 q = *cl.map_shared_rank(&part[slot], r);
            comb(rm, rs, q.x, q.y);
        }
        *whole = make_float2(rm, 1.f / rs);
    }
    __syncthreads();
    return *whole;
}

// the (max, sum) pass over a block's slice of n vectors, U in flight a thread
template <int T, int U, int HINT>
static __device__ __forceinline__ void stats_pass(const uint4 *src, int n, float &m, float &s)
{
    m = -INFINITY;
    s = 0.f;
    for (int b = 0; b < n; b += T * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = b + u * T + threadIdx.x;
            if (c < n)
                v[u] = ld1<HINT>(src + c);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (b + u * T + threadIdx.x < n)
                acc(m, s, v[u]);
    }
}

// A: one row per cluster
template <int T, int U, int HINT>
__global__ void __launch_bounds__(T) k_a(const uint4 *__restrict__ in, uint4 *__restrict__ out,
                                          int nvec, int C)
{
    __shared__ float2 red[32], part[2], whole;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank();
    const long long row = blockIdx.x / C;
    const int per = (nvec + C - 1) / C, lo = rank * per, n = min(nvec, lo + per) - lo;
    const uint4 *src = in + row * nvec + lo;
    uint4 *dst = out + row * nvec + lo;
    float m, s;
    stats_pass<T, U, HINT>(src, n, m, s);
    const float2 w = reduce<T>(m, s, red, part, &whole, 0, cl, C);
    for (int b = 0; b < n; b += T * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = b + u * T + threadIdx.x;
            if (c < n)
                v[u] = ld2<HINT>(src + c);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = b + u * T + threadIdx.x;
            if (c < n)
                st<HINT>(dst + c, outv(v[u], w.x, w.y));
        }
    }
    cl.sync(); // keep shared memory alive for the others' reads
}

// B: persistent; output pass of row r fused with the stats pass of row r + stride
template <int T, int U, int HINT>
__global__ void __launch_bounds__(T) k_b(const uint4 *__restrict__ in, uint4 *__restrict__ out,
                                          int nvec, int C, int rows)
{
    __shared__ float2 red[32], part[2], whole;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank();
    const int stride = gridDim.x / C;
    int row = blockIdx.x / C;
    const int per = (nvec + C - 1) / C, lo = rank * per, n = min(nvec, lo + per) - lo;
    if (row >= rows)
        return; // whole clusters leave together
    float m, s;
    stats_pass<T, U, HINT>(in + (long long)row * nvec + lo, n, m, s);
    int slot = 0;
    float2 w = reduce<T>(m, s, red, part, &whole, slot, cl, C);
    for (;;) {
        const int nx = row + stride;
        const bool more = nx < rows;
        const uint4 *src = in + (long long)row * nvec + lo;
        uint4 *dst = out + (long long)row * nvec + lo;
        const uint4 *nsrc = in + (long long)(more ? nx : row) * nvec + lo;
        m = -INFINITY;
        s = 0.f;
        for (int b = 0; b < n; b += T * U) {
            uint4 v[U], x[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = b + u * T + threadIdx.x;
                if (c < n) {
                    v[u] = ld2<HINT>(src + c);
                    if (more)
                        x[u] = ld1<HINT>(nsrc + c);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = b + u * T + threadIdx.x;
                if (c < n) {
                    st<HINT>(dst + c, outv(v[u], w.x, w.y));
                    if (more)
                        acc(m, s, x[u]);
                }
            }
        }
        if (!more)
            break;
        slot ^= 1;
        w = reduce<T>(m, s, red, part, &whole, slot, cl, C);
        row = nx;
    }
    cl.sync();
}

typedef void (*kfn)(const uint4 *, uint4 *, int, int);
typedef void (*kfnb)(const uint4 *, uint4 *, int, int, int);

struct Var {
    char name[64];
    int kind; // 0 A, 1 B
    void *fn;
    int T, U, HINT;
};
static std::vector<Var> vars;
template <int T, int U, int HINT> static void add()
{
    Var v;
    v.kind = 0;
    v.fn = (void *)k_a<T, U, HINT>;
    v.T = T;
    v.U = U;
    v.HINT = HINT;
    snprintf(v.name, sizeof v.name, "A T%d U%d h%d", T, U, HINT);
    vars.push_back(v);
    v.kind = 1;
    v.fn = (void *)k_b<T, U, HINT>;
    snprintf(v.name, sizeof v.name, "B T%d U%d h%d", T, U, HINT);
    vars.push_back(v);
}

int main(int argc, char **argv)
{
    std::vector<int> widths = {50257, 70393, 100003, 151936, 223207, 262144};
    if (argc > 1) {
        widths.clear();
        for (char *t = strtok(argv[1], ","); t; t = strtok(NULL, ","))
            widths.push_back(atoi(t));
    }
    const char *only = argc > 2 ? argv[2] : NULL;
    add<256, 4, 0>();
    add<256, 8, 0>();
    add<512, 4, 0>();
    add<512, 8, 0>();
    add<1024, 4, 0>();
    add<1024, 2, 0>();
    add<512, 4, 7>();
    add<1024, 4, 7>();
    add<512, 4, 4>();
    add<1024, 4, 4>();
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    probe_io io;
    const size_t total = io.total;
    for (int cols0 : widths) {
        const int nvec = cols0 / 8, cols = nvec * 8;
        const int rows = (int)(total / cols);
        const size_t bytes = (size_t)rows * cols * 2;
        const float tc = io.copy_us(bytes);
        printf("\n== cols %d (probe %d) rows %d: copy %.1f us (%.0f GB/s)\n", cols0, cols, rows, tc,
               2.0 * bytes / tc / 1e3);
        for (const Var &v : vars) {
            if (only && !strstr(v.name, only))
                continue;
            for (int C = 2; C <= 16; C *= 2) {
                const int per = (nvec + C - 1) / C;
                if (per > v.T * v.U * 8 || per < v.T * v.U / 2)
                    continue; // 0.5..8 iterations per thread
                cluster_launch cl(C, v.T, 0, io.st);
                cudaLaunchConfig_t &cfg = cl.cfg;
                if (C > 8)
                    CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
                int ncl = 0;
                cfg.gridDim = dim3(C * 64);
                if (cudaOccupancyMaxActiveClusters(&ncl, v.fn, &cfg) != cudaSuccess || ncl == 0) {
                    cudaGetLastError();
                    continue;
                }
                const int grid = v.kind == 0 ? rows * C : std::min(rows, ncl) * C;
                cfg.gridDim = dim3(grid);
                const uint4 *xi = (const uint4 *)io.x;
                uint4 *yo = (uint4 *)io.y;
                CK(cudaMemsetAsync(io.y, 0xff, bytes, io.st));
                auto launch = [&] {
                    if (v.kind == 0)
                        CK(cudaLaunchKernelEx(&cfg, (kfn)v.fn, xi, yo, nvec, C));
                    else
                        CK(cudaLaunchKernelEx(&cfg, (kfnb)v.fn, xi, yo, nvec, C, rows));
                };
                launch();
                CK(cudaStreamSynchronize(io.st));
                const double worst = io.check(rows, cols);
                const float t = io.time(launch, 9);
                printf("%-16s C%-2d res %3d clusters  %7.1f us  %6.0f GB/s  %.3f x copy  err/tol %.2f%s\n",
                       v.name, C, ncl, t, 2.0 * bytes / t / 1e3, tc / t, worst,
                       worst > 1 ? "  BAD" : "");
            }
        }
    }
    return 0;
}
