#!/usr/bin/env python3
"""Where the blocks of a cluster launch land (NVIDIA sm_90 and later, CuPy).

A kernel of CL blocks per cluster holds one block per SM (200 KiB of
dynamic shared memory) long enough for a whole grid to be resident and
records each block's %smid. Clusters of 8 lie inside one GPC, so the SMs
they share, joined over repeated launches, give groups of SMs each inside
one GPC; the script then prints how many blocks of single-block and
cluster launches of a few grid sizes land in each group.

Usage (GPU machine): python3 scripts/cluster-placement.py [GRIDS]
GRIDS: comma-separated block counts (default 64,112,128,176).
Measured with it: bench/gemm-measurements.md, "Where cluster blocks land".
"""
import collections
import sys

import cupy as cp

SRC = r"""
extern "C" __global__ void __cluster_dims__(CL, 1, 1) probe(unsigned *out, long long spin)
{
    extern __shared__ unsigned char pad[];
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) {
        out[blockIdx.x] = smid;
        pad[0] = 1;
    }
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
}
"""
SMEM = 200 * 1024
_kernels = {}


def launch(cl, blocks, spin=2000000):
    """SM ids of the blocks of one launch of `blocks` blocks, `cl` per cluster."""
    if cl not in _kernels:
        mod = cp.RawModule(code=SRC, options=("-DCL=%d" % cl, "--gpu-architecture=sm_90"))
        fn = mod.get_function("probe")
        fn.max_dynamic_shared_size_bytes = SMEM
        _kernels[cl] = fn
    out = cp.zeros(blocks, dtype=cp.uint32)
    _kernels[cl]((blocks,), (128,), (out, cp.int64(spin)), shared_mem=SMEM)
    cp.cuda.Device().synchronize()
    return [int(x) for x in out.get()]


def main():
    grids = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "64,112,128,176").split(",")]
    nsm = cp.cuda.Device().attributes["MultiProcessorCount"]
    parent = list(range(nsm))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _ in range(12):
        for clusters in (16, 15, 14, 12, 9):
            sms = launch(8, 8 * clusters)
            for c in range(clusters):
                for s in sms[8 * c : 8 * c + 8]:
                    parent[find(s)] = find(sms[8 * c])
    groups = collections.defaultdict(list)
    for s in range(nsm):
        groups[find(s)].append(s)
    groups = sorted(groups.values(), key=lambda g: g[0])
    group_of = {s: i for i, g in enumerate(groups) for s in g}
    print("%d SMs, %d groups (sizes %s)" % (nsm, len(groups), [len(g) for g in groups]))
    for g in groups:
        print("  ", g)
    for blocks in grids:
        for cl in (1, 2, 4):
            if blocks % cl:
                continue
            count = collections.Counter(group_of[s] for s in launch(cl, blocks))
            print("%3d blocks, clusters of %d: %s (groups used %d)"
                  % (blocks, cl, [count.get(i, 0) for i in range(len(groups))], len(count)))


if __name__ == "__main__":
    main()
