#!/usr/bin/env python3
"""The wgmma K step of the TMA GEMM kernel alone, from shared memory.

Each block (one per multiprocessor) runs the kernel's own mma_kstep (the
m64nBNk16 wgmmas of one K step of 64, both operands K-major in the 128-byte
swizzle) on a fixed stage in shared memory, STEPS times, with the kernel's
commit / wait_group 1 between steps: no copies, no barriers. Printed: cycles
per K step (clock64, mean over the blocks' consumer warpgroups) against the
tensor cores' floor (2048 FMA a cycle, so 128 x BN x 64 / 2048 = 4 BN for
two warpgroups of 64 rows), for each width BN; then with a third
warpgroup writing 16 bytes a thread to shared memory all the while (about
what a stage's copies write), with one consumer warpgroup, with the
kernel's per-step release (an mbarrier arrive by each warpgroup's first
thread), and in clusters of two with the pairs' release (threads 0 and 1
of each warpgroup arriving on the barrier of cluster block 0 and 1).

Needs CuPy and an sm_90 GPU. Usage: python3 scripts/wgmma-rate.py [BN ...]
"""
import os
import sys

import cupy as cp

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KSRC = os.path.join(ROOT, "kernel_src")

SRC = r"""
#define TK_GEMM_NO_ENTRY 1
#define TK_WGMMA 2
#define TK_A_KMAJOR 1
#define TK_B_KMAJOR 1
#define TK_OUT_F16 1
#define TK_ALIGNED 1
#include "gemm_f16.cu"

// 384 threads: warpgroups 0-1 the consumers (wgs of them run), warpgroup 2
// the writer (if `writer`), storing 16 bytes a thread into its own 32 KiB
// of shared memory until both consumers are done.
template <int ARRIVE>
__device__ __forceinline__ void rate_body(long long *out, int steps, int wgs, int writer)
{
    extern __shared__ unsigned char sm_raw[];
    __shared__ volatile int done;
    const unsigned raw = (unsigned)__cvta_generic_to_shared(sm_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char *gbase = sm_raw + (base - raw);
    for (int i = threadIdx.x; i < (65536 + 32768) / 16; i += blockDim.x)
        reinterpret_cast<uint4 *>(gbase)[i] = make_uint4(0, 0, 0, 0);
    __shared__ __align__(8) unsigned long long bar;
    const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        done = 0;
        // never completes (nobody waits): counts the arrivals only
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sbar), "r"(1u << 19));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (ARRIVE == 2)
        asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
    const int cw = threadIdx.x >> 7;
    if (cw == 2 && writer) {
        uint4 *w = reinterpret_cast<uint4 *>(gbase + 65536);
        const uint4 v = make_uint4(threadIdx.x, 1, 2, 3);
        int n = 0;
        while (done < wgs) {
#pragma unroll 8
            for (int j = 0; j < 16; ++j)
                w[(j * 128 + (threadIdx.x & 127)) & 2047] = v;
            n += 16;
        }
        if ((threadIdx.x & 127) == 0)
            out[gridDim.x * 2 + blockIdx.x] = n;
    } else if (cw < wgs) {
        constexpr int NACC = WR_BN / 2;
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            acc[i] = 0.f;
        const unsigned sa = base, sb = base + 16384;
        tkw::fence_regs<NACC>(acc);
        const long long t0 = clock64();
        for (int i = 0; i < steps; ++i) {
            tkw::fence();
            tkw::mma_kstep<WR_BN, 1, true, true>(acc, sa, sb, cw);
            tkw::commit();
            tkw::wait<1>();
            tkw::fence_regs<NACC>(acc);
            // the kernel's release of the previous step's stage
            if (ARRIVE == 1 && (threadIdx.x & 127) == 0)
                tkw::bar_arrive(sbar);
            if (ARRIVE == 2 && (threadIdx.x & 127) < 2)
                tkw::bar_arrive_cta(sbar, threadIdx.x & 127);
        }
        tkw::wait<0>();
        tkw::fence_regs<NACC>(acc);
        const long long t1 = clock64();
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            s += acc[i];
        if ((threadIdx.x & 127) == 0) {
            out[blockIdx.x * 2 + cw] = (t1 - t0) + (s != 0.f);
            atomicAdd((int *)&done, 1);
        }
    }
    if (ARRIVE == 2) // the partner's barrier stays alive until both are done
        asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
extern "C" __global__ void __launch_bounds__(384) rate(long long *out, int steps, int wgs, int writer)
{
    rate_body<0>(out, steps, wgs, writer);
}
extern "C" __global__ void __launch_bounds__(384) rate_arrive(long long *out, int steps, int wgs, int writer)
{
    rate_body<1>(out, steps, wgs, writer);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384)
    rate_pair(long long *out, int steps, int wgs, int writer)
{
    rate_body<2>(out, steps, wgs, writer);
}
"""


def main():
    widths = [int(a) for a in sys.argv[1:]] or [64, 72, 80, 88, 96, 112, 128, 192, 256]
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    steps = 2000
    smem = 1024 + 65536 + 32768
    print(f"{sms} blocks, {steps} K steps of 64 each; cycles per step (mean over blocks)")
    print("| BN | floor (2 wg) | 2 consumers | + writer | 1 consumer | floor (1 wg) "
          "| + local arrive | pairs, + remote arrives |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for bn in widths:
        mod = cp.RawModule(code=f"#define WR_BN {bn}\n" + SRC,
                           options=("--gpu-architecture=sm_90a", "-std=c++17", f"-I{KSRC}"),
                           name_expressions=None)
        kern = {}
        for name in ("rate", "rate_arrive", "rate_pair"):
            kern[name] = mod.get_function(name)
            kern[name].max_dynamic_shared_size_bytes = smem
        row = []
        for name, wgs, writer in (("rate", 2, 0), ("rate", 2, 1), ("rate", 1, 0),
                                  ("rate_arrive", 2, 0), ("rate_pair", 2, 0)):
            k = kern[name]
            out = cp.zeros(sms * 3, dtype=cp.int64)
            for _ in range(2):  # the second launch is the one kept
                out[:] = 0
                k((sms,), (384,), (out, cp.int32(steps), cp.int32(wgs), cp.int32(writer)),
                  shared_mem=smem)
            cp.cuda.Device().synchronize()
            h = out.get()
            cyc = [h[2 * b + w] for b in range(sms) for w in range(wgs)]
            row.append(sum(cyc) / len(cyc) / steps)
        print(f"| {bn} | {4 * bn} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.0f} | {2 * bn} "
              f"| {row[3]:.0f} | {row[4]:.0f} |")


if __name__ == "__main__":
    main()
