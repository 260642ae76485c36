#!/usr/bin/env python3
"""L2-to-SM copy throughput with and without multicast (NVIDIA sm_90, CuPy).

Each block streams STEPS chunks of CHUNK bytes from an L2-resident buffer
into a ring of shared-memory stages with 1-D bulk copies
(cp.async.bulk ... mbarrier::complete_tx), one producer thread, one
consumer warp that releases each stage as soon as it has landed: the
GEMM kernel's ring with no math. Modes:
  distinct  every block its own chunks
  sharedG   G blocks (a cluster of G) load the same chunk, each on its own
  mcastG    the same G blocks each load 1/G of it, multicast to all G
then a GEMM's stage (16 KiB of A shared by a pair, the rest each block's
own B: loaded by each, or multicast), groups of 2, 8 or 16 blocks without clusters reading the same chunks
in step or block j of a group j x 1 or j x 4 chunks ahead (out of step),
and distinct and shared2 again with each stage loaded by 2, 3 or 6 copies.
Prints bytes landed in shared memory per second over the grid.

Usage (GPU machine): python3 scripts/bulk-stream.py [BLOCKS] [CHUNK_KIB]
Measured with it: bench/gemm-measurements.md.
"""
import sys

import cupy as cp
from ring_probe import MBARRIER_SRC, median_seconds

SRC = MBARRIER_SRC + r"""
__device__ __forceinline__ unsigned rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }

// MODE 0: distinct, 1: shared (each block loads the whole chunk), 2: multicast;
// 3 / 4: a GEMM's stage, its first ACH bytes shared by the cluster (3: each
// block loads them, 4: multicast in CL parts), the rest the block's own;
// GROUP: blocks per group of MODE 1 (default CL); LAG: block j of a group
// reads j * LAG chunks ahead of block 0 (out of step)
extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(64, 1)
stream(const char *src, long long nchunks, int steps)
{
    extern __shared__ __align__(1024) unsigned char sm[];
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u;
    const unsigned bars = base + STAGES * CHUNK;
    const unsigned r = CL > 1 ? rank() : 0u;
    const long long group = blockIdx.x / (MODE == 0 ? 1 : GROUP);
    const int lag = MODE == 1 ? (int)(blockIdx.x % GROUP) * LAG : 0;
    ring_init(bars, STAGES, MODE == 2 || MODE == 4 ? CL : 1);
    if (threadIdx.x == 0) {
        for (int it = 0; it < steps; ++it) {
            const int s = it % STAGES;
            const unsigned full = ring_produce(bars, STAGES, it, CHUNK);
            const char *g = src + ((group * 7919 + it + lag) % nchunks) * CHUNK;
            const unsigned dst = base + s * CHUNK;
            if (MODE == 3 || MODE == 4) {
                const char *own = src + ((blockIdx.x * 7919 + it + 3) % nchunks) * CHUNK + ACH;
                if (MODE == 3)
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                 :: "r"(dst), "l"(g), "r"(ACH), "r"(full) : "memory");
                else
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                                 " [%0], [%1], %2, [%3], %4;"
                                 :: "r"(dst + r * (ACH / CL)), "l"(g + r * (ACH / CL)), "r"(ACH / CL), "r"(full),
                                    "h"((unsigned short)((1u << CL) - 1)) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(dst + ACH), "l"(own), "r"(CHUNK - ACH), "r"(full) : "memory");
            } else if (MODE == 2) {
                const unsigned part = CHUNK / CL;
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                             " [%0], [%1], %2, [%3], %4;"
                             :: "r"(dst + r * part), "l"(g + r * part), "r"(part), "r"(full),
                                "h"((unsigned short)((1u << CL) - 1)) : "memory");
            } else {
                // PIECES copies of CHUNK / PIECES bytes each
                for (int q = 0; q < PIECES; ++q)
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                 :: "r"(dst + q * (CHUNK / PIECES)), "l"(g + q * (CHUNK / PIECES)),
                                    "r"(CHUNK / PIECES), "r"(full) : "memory");
            }
        }
    } else if (threadIdx.x == 32) {
        for (int it = 0; it < steps; ++it) {
            const int s = it % STAGES;
            bar_wait(bars + 8 * s, (it / STAGES) & 1);
            const unsigned empty = bars + 8 * (STAGES + s);
            if (MODE == 2 || MODE == 4)
                for (unsigned c = 0; c < CL; ++c)
                    bar_arrive_cta(empty, c);
            else
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(empty) : "memory");
        }
    }
    // no block leaves while a partner may still write into it or arrive on it
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
"""


def run(mode, cl, blocks, chunk, stages, steps, src, reps=5, pieces=1, group=0, lag=0, ach=0):
    opts = ("-DMODE=%d" % mode, "-DCL=%d" % cl, "-DCHUNK=%d" % chunk, "-DSTAGES=%d" % stages,
            "-DPIECES=%d" % pieces, "-DGROUP=%d" % (group or cl), "-DLAG=%d" % lag,
            "-DACH=%d" % ach, "--gpu-architecture=sm_90")
    fn = cp.RawModule(code=SRC, options=opts).get_function("stream")
    smem = stages * chunk + 1024 + 16 * stages
    fn.max_dynamic_shared_size_bytes = smem
    nchunks = src.size // chunk
    args = (src, cp.int64(nchunks), cp.int32(steps))
    t = median_seconds(fn, (blocks,), (64,), args, smem, reps)  # (its warm-up fills L2 with src)
    return blocks * steps * chunk / t / 1e12


def main():
    blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    chunk = (int(sys.argv[2]) if len(sys.argv) > 2 else 24) * 1024
    stages = max(2, (192 * 1024) // chunk)
    steps = 4096
    src = cp.zeros(16 * 1024 * 1024, dtype=cp.uint8)  # 16 MiB: resident in L2
    print("%d blocks, chunks of %d KiB, %d stages, %d steps each" % (blocks, chunk // 1024, stages, steps))
    for name, mode, cl in (("distinct", 0, 1), ("distinct (clusters of 2)", 0, 2),
                           ("shared2", 1, 2), ("mcast2", 2, 2),
                           ("shared4", 1, 4), ("mcast4", 2, 4)):
        if blocks % cl:
            continue
        print("%-26s %6.2f TB/s into shared memory" % (name, run(mode, cl, blocks, chunk, stages, steps, src)))
    # a GEMM's stage: 16 KiB of A shared by the pair, the rest the block's B
    ach = 16 * 1024 if chunk > 16 * 1024 else chunk // 2
    for name, mode, cl in (("A+B, no sharing", 0, 1), ("A+B, pairs load A each", 3, 2),
                           ("A+B, pairs multicast A", 4, 2)):
        print("%-26s %6.2f TB/s into shared memory" % (
            name, run(mode, cl, blocks, chunk, stages, steps, src, ach=ach)))
    for group in (2, 8, 16):
        for lag in (0, 1, 4):
            print("%-26s %6.2f TB/s into shared memory" % (
                "shared%d, no cluster, lag %d" % (group, lag),
                run(1, 1, blocks, chunk, stages, steps, src, group=group, lag=lag)))
    for pieces in (2, 3, 6):
        if chunk % (16 * pieces) == 0:
            for name, mode, cl in (("distinct", 0, 1), ("shared2", 1, 2)):
                print("%-26s %6.2f TB/s into shared memory" % (
                    "%s, %d copies per stage" % (name, pieces),
                    run(mode, cl, blocks, chunk, stages, steps, src, pieces=pieces)))


if __name__ == "__main__":
    main()
