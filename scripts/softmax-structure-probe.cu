// Where the softmax forward's time goes on sm_90 (docs/performance-softmax.md,
// 2026-11-29): the library's one-pass cluster forward at VEC 8 (blocks of
// 512 threads, 2 vectors a thread in registers and the rest in shared
// memory through cp.async, 4 blocks per SM, exp(x - thread max) kept in
// place, clusters of 2, 4 or 8 blocks as src/ops/softmax.c takes them),
// rebuilt standalone with its arithmetic (MODE) and its exchange (EX) varied:
//   MODE 0: per-element fp32, as the library was
//   MODE 3: no arithmetic, the slice copied through (wrong results: cost only)
//   MODE 4: max and output scaling in fp16 pairs, exp and sum in fp32
//   EX 0: cluster barrier, loads from the other blocks' shared memory, a
//         second barrier before returning (as the library was)
//   EX 1: no exchange (each block its own partial: cost only)
//   EX 2: partials stored into every block's shared memory, mbarriers
// Whole vectors only (cols rounded down to a multiple of 8), packed rows,
// 2^27 halves per tensor; x copy = cudaMemcpyAsync of the same bytes in the
// same run; three rows checked against an fp64 reference with the library's
// tolerance (abs 1e-3 + rel 1e-2). Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//        -o probe scripts/softmax-structure-probe.cu && ./probe [cols,...]
#include <cooperative_groups.h>
#include <string.h>

#include "softmax-probe-common.cuh"
namespace cg = cooperative_groups;

static __device__ __forceinline__ void comb(float &m, float &s, float m2, float s2)
{
    comb_unit(m, s, m2, s2, L2E);
}
static __device__ __forceinline__ void cp16(void *s, const void *g)
{
    unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
}

static __device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ unsigned mapa(unsigned a, unsigned r)
{
    unsigned o;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(r));
    return o;
}
struct V {
    uint4 u;
    __device__ __forceinline__ __half2 &h(int k) { return reinterpret_cast<__half2 *>(&u)[k]; }
    __device__ __forceinline__ __half &x(int k) { return reinterpret_cast<__half *>(&u)[k]; }
};

template <int IT, int MODE, int EX>
__global__ void __launch_bounds__(512, 4) kf(const uint4 *__restrict__ in, uint4 *__restrict__ out,
                                             int nvec, int C)
{
    constexpr int R = IT < 2 ? IT : 2, S = IT - R;
    extern __shared__ __align__(16) uint4 xs[];
    __shared__ float2 red[16], part, whole, slots[16];
    __shared__ __align__(8) unsigned long long bar;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), t = threadIdx.x;
    const long long row = blockIdx.x / C;
    const int per = (nvec + C - 1) / C, lo = rank * per, n = min(nvec, lo + per) - lo;
    const uint4 *src = in + row * nvec + lo;
    if (EX == 2) {
        if (t == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&bar)), "r"(C) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
    V v[R];
#pragma unroll
    for (int i = 0; i < IT; ++i) {
        const int c = i * 512 + t;
        if (c < n) {
            if (i < R)
                v[i < R ? i : 0].u = src[c];
            else
                cp16(&xs[(i - R) * 512 + t], src + c);
        }
    }
    if (S > 0) {
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
#define X(i) ((i) < R ? v[(i) < R ? (i) : 0] : *reinterpret_cast<V *>(&xs[((i) < R ? 0 : (i)-R) * 512 + t]))
#define PUT(i, e)                                                                                  \
    do {                                                                                           \
        if ((i) < R)                                                                               \
            v[(i) < R ? (i) : 0] = (e);                                                            \
        else                                                                                       \
            *reinterpret_cast<V *>(&xs[((i) < R ? 0 : (i)-R) * 512 + t]) = (e);                    \
    } while (0)
    float m = -INFINITY, s = 0.f;
    if (MODE == 0) {
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V x = X(i);
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    m = fmaxf(m, __half2float(x.x(k)));
            }
        const float ml = m * L2E;
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V x = X(i), e;
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const float q = ex2(fmaf(__half2float(x.x(k)), L2E, -ml));
                    s += q;
                    e.x(k) = __float2half_rn(q);
                }
                PUT(i, e);
            }
    } else if (MODE == 4) {
        __half2 mh = __float2half2_rn(-INFINITY);
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V x = X(i);
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    mh = __hmax2(mh, x.h(k));
            }
        const __half mx = __hmax(__low2half(mh), __high2half(mh));
        m = __half2float(mx);
        const float ml = m * L2E;
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V x = X(i), e;
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 f = __half22float2(x.h(k));
                    const float a = ex2(fmaf(f.x, L2E, -ml)), b = ex2(fmaf(f.y, L2E, -ml));
                    s += a + b;
                    e.h(k) = __floats2half2_rn(a, b);
                }
                PUT(i, e);
            }
        if (m == -INFINITY)
            s = 0.f;
    } else {
        m = 0.f;
        s = 1.f;
    }
    const float m_own = m;
    // block, then cluster
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        comb(m, s, m2, s2);
    }
    if ((t & 31) == 0)
        red[t >> 5] = make_float2(m, s);
    __syncthreads();
    if (t == 0) {
        float bm = red[0].x, bs = red[0].y;
        for (int w = 1; w < 16; ++w)
            comb(bm, bs, red[w].x, red[w].y);
        part = make_float2(bm, bs);
    }
    if (EX == 0) {
        cl.sync();
        if (t == 0) {
            float rm = -INFINITY, rs = 0.f;
            for (int r = 0; r < C; ++r) {
                float2 q = *cl.map_shared_rank(&part, r);
                comb(rm, rs, q.x, q.y);
            }
            whole = make_float2(rm, 1.f / rs);
        }
        __syncthreads();
        asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    } else if (EX == 2) {
        asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
        __syncthreads(); // part written
        if (t < C) {
            const float2 p = part;
            const unsigned rs = mapa(su32(&slots[rank]), t), rb = mapa(su32(&bar), t);
            asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(rs), "f"(p.x), "f"(p.y) : "memory");
            asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(rb) : "memory");
        }
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(su32(&bar)) : "memory");
        if (t == 0) {
            float rm = -INFINITY, rs = 0.f;
            for (int r = 0; r < C; ++r)
                comb(rm, rs, slots[r].x, slots[r].y);
            whole = make_float2(rm, 1.f / rs);
        }
        __syncthreads();
    } else {
        if (t == 0)
            whole = part;
        __syncthreads();
    }
    const float gm = whole.x, inv = whole.y;
    const float sc = MODE == 3 ? 1.f : m_own == -INFINITY ? 0.f : ex2((m_own - gm) * L2E) * inv;
    uint4 *dst = out + row * nvec + lo;
    if (MODE == 4) {
        const __half2 s2 = __float2half2_rn(sc);
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V e = X(i), o;
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    o.h(k) = __hmul2(e.h(k), s2);
                dst[i * 512 + t] = o.u;
            }
    } else if (MODE == 3) {
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n)
                dst[i * 512 + t] = X(i).u;
    } else {
#pragma unroll
        for (int i = 0; i < IT; ++i)
            if (i * 512 + t < n) {
                V e = X(i), o;
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    o.x(k) = __float2half_rn(__half2float(e.x(k)) * sc);
                dst[i * 512 + t] = o.u;
            }
    }
    if (EX == 0)
        asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

typedef void (*kfn)(const uint4 *, uint4 *, int, int);
#define NV 7
static const char *vname[NV] = {"per element, barriers (0, 0)",     "fp16 pairs, barriers (4, 0)",
                                "no arithmetic, barriers (3, 0)",   "no arithmetic, no exchange (3, 1)",
                                "fp16 pairs, mbarriers (4, 2)",     "no arithmetic, mbarriers (3, 2)",
                                "per element, mbarriers (0, 2)"};
static const int vmath[NV] = {0, 4, 3, 3, 4, 3, 0};
static kfn table[9][NV];
template <int IT> static void reg()
{
    table[IT][0] = kf<IT, 0, 0>;
    table[IT][1] = kf<IT, 4, 0>;
    table[IT][2] = kf<IT, 3, 0>;
    table[IT][3] = kf<IT, 3, 1>;
    table[IT][4] = kf<IT, 4, 2>;
    table[IT][5] = kf<IT, 3, 2>;
    table[IT][6] = kf<IT, 0, 2>;
}
int main(int argc, char **argv)
{
    std::vector<int> widths = {40000, 50257, 65536, 70393, 100003, 131072, 151936, 200003, 223207, 262144};
    if (argc > 1) {
        widths.clear();
        for (char *p = strtok(argv[1], ","); p; p = strtok(NULL, ","))
            widths.push_back(atoi(p));
    }
    reg<3>(); reg<4>(); reg<5>(); reg<6>(); reg<7>(); reg<8>();
    probe_io io;
    const size_t total = io.total;
    printf("| cols | rows | C | it | copy us |");
    for (int q = 0; q < NV; ++q)
        printf(" %s |", vname[q]);
    printf("\n");
    for (int cols0 : widths) {
        const int nvec = cols0 / 8, cols = nvec * 8, rows = (int)(total / cols);
        const size_t bytes = (size_t)rows * cols * 2;
        int C = 2;
        while (C < 8 && (nvec + C - 1) / C > 512 * 8)
            C *= 2;
        const int per = (nvec + C - 1) / C, IT = (per + 511) / 512;
        if (IT < 3 || IT > 8)
            continue;
        const float tc = io.copy_us(bytes);
        printf("| %d | %d | %d | %d | %.1f |", cols, rows, C, IT, tc);
        for (int mode = 0; mode < NV; ++mode) {
            kfn fn = table[IT][mode];
            const int smem = 512 * (IT - 2) * 16;
            CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            cluster_launch cl(C, 512, smem, io.st);
            cudaLaunchConfig_t &cfg = cl.cfg;
            cfg.gridDim = dim3(rows * C);
            const uint4 *xi = (const uint4 *)io.x;
            uint4 *yo = (uint4 *)io.y;
            CK(cudaMemsetAsync(io.y, 0xff, bytes, io.st));
            auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, fn, xi, yo, nvec, C)); };
            launch();
            CK(cudaStreamSynchronize(io.st));
            const double worst = io.check(rows, cols);
            const float tt = io.time(launch);
            printf(" %.1f us %.3f%s |", tt, tc / tt, vmath[mode] == 3 ? "" : worst <= 1 ? "" : " BAD");
            fflush(stdout);
        }
        printf("\n");
    }
    return 0;
}
