#!/usr/bin/env python3
"""The wgmma K step of the TMA GEMM kernel alone, from shared memory.

Each block (one per multiprocessor) runs the kernel's own mma_kstep (the
m64nBNk16 wgmmas of one K step of 64, both operands K-major in the 128-byte
swizzle) on a fixed stage in shared memory, STEPS times, with the kernel's
commit / wait_group 1 between steps: no copies, no waits. Printed: cycles
per K step (clock64, mean over the blocks' consumer warpgroups) against the
tensor cores' floor (2048 FMA a cycle, so 128 x BN x 64 / 2048 = 4 BN for
two warpgroups of 64 rows), for each width BN; with one consumer
warpgroup; with the kernel's per-step release (an mbarrier arrive by each
warpgroup's first thread); and in clusters of two with the pairs' release
(threads 0 and 1 of each warpgroup arriving on the barrier of cluster
block 0 and 1). Then how fast shared memory takes writes while the wgmmas
read it: a third warpgroup storing 16 bytes a thread, or one thread
keeping eight 16 KiB bulk copies (the TMA engine, as the ring's stages
arrive) in flight from L2, each against the same writer alone; and the
same with one consumer warpgroup computing all 128 rows (two m64 wgmmas
per 16-deep slice against one B).

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
template <int ARRIVE, int MI = 1>
__device__ __forceinline__ void rate_body(long long *out, const unsigned char *src, int steps,
                                          int wgs, int writer)
{
    extern __shared__ unsigned char sm_raw[];
    __shared__ volatile int done;
    const unsigned raw = (unsigned)__cvta_generic_to_shared(sm_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char *gbase = sm_raw + (base - raw);
    for (int i = threadIdx.x; i < (65536 + 131072) / 16; i += blockDim.x)
        reinterpret_cast<uint4 *>(gbase)[i] = make_uint4(0, 0, 0, 0);
    __shared__ __align__(8) unsigned long long bar, cbar[8];
    const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned scbar = (unsigned)__cvta_generic_to_shared(cbar);
    if (threadIdx.x == 0) {
        done = 0;
        // never completes (nobody waits): counts the arrivals only
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sbar), "r"(1u << 19));
        for (int i = 0; i < 8; ++i) // the bulk writer's eight slots
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(scbar + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (ARRIVE == 2)
        asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
    const int cw = threadIdx.x >> 7;
    const long long G = gridDim.x, b = blockIdx.x;
    if (cw == 2 && writer == 1) {
        // st.shared, 16 bytes a thread, 2 KiB a round, into 32 KiB
        uint4 *w = reinterpret_cast<uint4 *>(gbase + 65536);
        const uint4 v = make_uint4(threadIdx.x, 1, 2, 3);
        long long n = 0;
        const long long t0 = clock64();
        while (wgs > 0 ? done < wgs : n < 65536) {
#pragma unroll 8
            for (int j = 0; j < 16; ++j)
                w[(j * 128 + (threadIdx.x & 127)) & 2047] = v;
            n += 16;
        }
        const long long t1 = clock64();
        if ((threadIdx.x & 127) == 0)
            out[3 * G + b] = n * 16 * 128, out[4 * G + b] = t1 - t0;
    } else if (cw == 2 && writer == 2 && (threadIdx.x & 127) == 0) {
        // bulk copies (the TMA engine) of 16 KiB from this block's own 128
        // KiB of global memory (resident in L2 after the first launch)
        // into eight slots of shared memory, eight in flight
        const unsigned dst = base + 65536;
        const unsigned char *mine = src + b * 131072;
        auto issue = [&](int i) {
            const unsigned bar_i = scbar + 8 * (i % 8);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16384;" ::"r"(bar_i)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                         " [%0], [%1], 16384, [%2];" ::"r"(dst + 16384 * (i % 8)),
                         "l"(mine + 16384 * (i % 8)), "r"(bar_i)
                         : "memory");
        };
        int issued = 0, landed = 0;
        const long long t0 = clock64();
        for (; issued < 8; ++issued)
            issue(issued);
        while (wgs > 0 ? done < wgs : landed < 2048) {
            tkw::bar_wait(scbar + 8 * (landed % 8), (landed / 8) & 1);
            ++landed;
            issue(issued++);
        }
        const long long t1 = clock64();
        out[3 * G + b] = (long long)landed * 16384, out[4 * G + b] = t1 - t0;
        for (; landed < issued; ++landed) // none left in flight at exit
            tkw::bar_wait(scbar + 8 * (landed % 8), (landed / 8) & 1);
    } else if (cw < wgs) {
        constexpr int NACC = MI * WR_BN / 2;
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            acc[i] = 0.f;
        const unsigned sa = base, sb = base + 16384;
        tkw::fence_regs<NACC>(acc);
        const long long t0 = clock64();
        for (int i = 0; i < steps; ++i) {
            tkw::fence();
            tkw::mma_kstep<WR_BN, MI, true, true>(acc, sa, sb, cw * MI);
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
extern "C" __global__ void __launch_bounds__(384)
    rate(long long *out, const unsigned char *src, int steps, int wgs, int writer)
{
    rate_body<0>(out, src, steps, wgs, writer);
}
extern "C" __global__ void __launch_bounds__(384)
    rate_arrive(long long *out, const unsigned char *src, int steps, int wgs, int writer)
{
    rate_body<1>(out, src, steps, wgs, writer);
}
// one consumer warpgroup for all 128 rows: two m64 wgmmas per slice, one B
extern "C" __global__ void __launch_bounds__(384)
    rate_mi2(long long *out, const unsigned char *src, int steps, int wgs, int writer)
{
    rate_body<0, 2>(out, src, steps, wgs, writer);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384)
    rate_pair(long long *out, const unsigned char *src, int steps, int wgs, int writer)
{
    rate_body<2>(out, src, steps, wgs, writer);
}
"""


def launch(k, grid, smem, src, steps, wgs, writer):
    """Two launches (the second kept): per-block consumer cycles and the
    writer's bytes and cycles."""
    out = cp.zeros(grid * 5, dtype=cp.int64)
    for _ in range(2):
        out[:] = 0
        k((grid,), (384,), (out, src, cp.int32(steps), cp.int32(wgs), cp.int32(writer)),
          shared_mem=smem)
    cp.cuda.Device().synchronize()
    h = out.get()
    cyc = [h[2 * b + w] for b in range(grid) for w in range(wgs)]
    step = sum(cyc) / len(cyc) / steps if cyc else float("nan")
    rate = (sum(h[3 * grid:4 * grid]) / sum(h[4 * grid:5 * grid])) if writer else float("nan")
    return step, rate


def main():
    widths = [int(a) for a in sys.argv[1:]] or [64, 72, 80, 88, 96, 112, 128, 192, 256]
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    steps = 2000
    smem = 1024 + 65536 + 131072
    src = cp.zeros(sms * 131072, dtype=cp.uint8)
    small = 32  # blocks for the bulk copies (so that the L2 does not bound them)
    mods = {}
    for bn in widths:
        mod = cp.RawModule(code=f"#define WR_BN {bn}\n" + SRC,
                           options=("--gpu-architecture=sm_90a", "-std=c++17", f"-I{KSRC}"),
                           name_expressions=None)
        kern = {}
        for name in ("rate", "rate_arrive", "rate_pair", "rate_mi2"):
            kern[name] = mod.get_function(name)
            kern[name].max_dynamic_shared_size_bytes = smem
        mods[bn] = kern
    print(f"{sms} blocks, {steps} K steps of 64 each; cycles per step (mean over blocks)")
    print("| BN | floor (2 wg) | 2 consumers | 1 consumer (floor BN x 2) "
          "| + local arrive | pairs, + remote arrives |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for bn in widths:
        kern = mods[bn]
        r = [launch(kern[n], sms, smem, src, steps, w, 0)[0]
             for n, w in (("rate", 2), ("rate", 1), ("rate_arrive", 2), ("rate_pair", 2))]
        print(f"| {bn} | {4 * bn} | {r[0]:.0f} | {r[1]:.0f} | {r[2]:.0f} | {r[3]:.0f} |")
    kern = mods[widths[0]]
    alone_st = launch(kern["rate"], sms, smem, src, steps, 0, 1)[1]
    alone_bulk = launch(kern["rate"], small, smem, src, steps, 0, 2)[1]
    alone_bulk_all = launch(kern["rate"], sms, smem, src, steps, 0, 2)[1]
    print()
    print("Shared-memory writes alongside the two consumers (bytes per cycle per block;")
    print(f"stores: {sms} blocks, alone {alone_st:.1f}; bulk copies of 16 KiB from L2:"
          f" {small} blocks, alone {alone_bulk:.1f}; {sms} blocks, alone {alone_bulk_all:.1f}):")
    print(f"| BN | step, + stores | stores B/clk | step, + bulk copies | bulk B/clk "
          f"| bulk B/clk, {sms} blocks "
          "| one warpgroup, 128 rows: step | + stores | stores B/clk |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for bn in widths:
        kern = mods[bn]
        st_step, st_rate = launch(kern["rate"], sms, smem, src, steps, 2, 1)
        bk_step, bk_rate = launch(kern["rate"], small, smem, src, steps, 2, 2)
        bk_all = launch(kern["rate"], sms, smem, src, steps, 2, 2)[1]
        m2 = "| - | - | -"  # 128 x BN accumulators in one warpgroup: up to 128 wide
        if bn <= 128:
            m2_step = launch(kern["rate_mi2"], sms, smem, src, steps, 1, 0)[0]
            m2_st_step, m2_st_rate = launch(kern["rate_mi2"], sms, smem, src, steps, 1, 1)
            m2 = f"| {m2_step:.0f} | {m2_st_step:.0f} | {m2_st_rate:.1f}"
        print(f"| {bn} | {st_step:.0f} | {st_rate:.1f} | {bk_step:.0f} | {bk_rate:.1f} "
              f"| {bk_all:.1f} {m2} |")


if __name__ == "__main__":
    main()
