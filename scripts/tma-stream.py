#!/usr/bin/env python3
"""The GEMM's operand copies without the math (NVIDIA sm_90, CuPy + ctypes).

Each block streams the K steps of one tile's operands, as the TMA GEMM
kernel's producer does: per step an A box of 128 rows x 64 halves and a B
box of BN rows x 64 halves (2-D tensor copies, 128-byte swizzle, 256-byte
L2 promotion) into a ring of shared-memory stages; a consumer releases
each stage as soon as it lands. A (1024 x K) and B (tokens x K) are fp16,
K-major and resident in L2. Tile b of a grid of 8 x T tiles: A rows
128 (b % 8), B rows BN (b / 8) (the GEMM's grouped order). Forms:
  single   a block per tile
  pairs    clusters of two tiles with the same A rows, each loading it
  mcast    the same pairs, each loading half of A, multicast to both
Prints bytes landed in shared memory per second.

Usage (GPU machine): python3 scripts/tma-stream.py [BN] [TILES_N] [K] [DELAY]
(default 72 16 4096 0: fwd 1149x1024x3072's swapped tiles, 128 blocks;
DELAY: clock cycles the consumer spends on each stage before releasing
it, standing in for the K step's math).
Measured with it: bench/gemm-measurements.md.
"""
import ctypes
import sys

import cupy as cp
from ring_probe import MBARRIER_SRC, median_seconds
import numpy as np

SRC = MBARRIER_SRC + r"""
struct __align__(64) tmap { unsigned long long v[16]; };
__device__ __forceinline__ void load(unsigned dst, const tmap *m, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(bar) : "memory"); }
__device__ __forceinline__ void load_mc(unsigned dst, const tmap *m, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(bar), "h"((unsigned short)3) : "memory"); }

// FORM 0: single, 1: pairs each loading A, 2: pairs multicasting A halves
extern "C" __global__ void __cluster_dims__(FORM ? 2 : 1, 1, 1) __launch_bounds__(64, 1)
stream(const tmap *mA, const tmap *mA64, const tmap *mB, int ksteps, int steps)
{
    extern __shared__ __align__(1024) unsigned char sm[];
    constexpr int A_BYTES = 128 * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES;
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u;
    const unsigned bars = base + STAGES * STAGE;
    unsigned r = 0;
    if (FORM) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    const int tile = FORM ? (int)(blockIdx.x / 2) : (int)blockIdx.x;
    const int tm = tile % 8;
    const int tn = FORM ? 2 * (tile / 8) + (int)r : tile / 8;
    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"((unsigned long long)mA) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"((unsigned long long)mA64) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"((unsigned long long)mB) : "memory");
    }
    ring_init(bars, STAGES, FORM == 2 ? 2 : 1);
    if (threadIdx.x == 0) {
        for (int it = 0; it < steps; ++it) {
            const int s = it % STAGES;
            const unsigned full = ring_produce(bars, STAGES, it, STAGE), sa = base + s * STAGE,
                           sb = sa + A_BYTES;
            const int kc = (it % ksteps) * 64;
            if (FORM == 2)
                load_mc(sa + r * 8192, mA64, kc, tm * 128 + (int)r * 64, full);
            else
                load(sa, mA, kc, tm * 128, full);
            load(sb, mB, kc, tn * BN, full);
        }
    } else if (threadIdx.x == 32) {
        for (int it = 0; it < steps; ++it) {
            const int s = it % STAGES;
            bar_wait(bars + 8 * s, (it / STAGES) & 1);
            // DELAY: the math a K step would take (clock cycles) before the
            // stage is released
            if (DELAY > 0) {
                const long long t0 = clock64();
                while (clock64() - t0 < DELAY) {
                }
            }
            const unsigned empty = bars + 8 * (STAGES + s);
            if (FORM == 2) {
                bar_arrive_cta(empty, 0);
                bar_arrive_cta(empty, 1);
            } else {
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(empty) : "memory");
            }
        }
    }
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
"""

_cuda = ctypes.CDLL("libcuda.so.1")
_encode = _cuda.cuTensorMapEncodeTiled
_encode.restype = ctypes.c_int


def tensor_map(arr, rows, k, box_rows):
    """A 2-D map of a rows x k fp16 K-major array: boxes of box_rows x 64."""
    tm = np.zeros(16, dtype=np.uint64)
    dims = (ctypes.c_uint64 * 2)(k, rows)
    strides = (ctypes.c_uint64 * 1)(k * 2)
    box = (ctypes.c_uint32 * 2)(64, box_rows)
    estr = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encode(tm.ctypes.data_as(ctypes.c_void_p), 6, 2, ctypes.c_void_p(arr.data.ptr), dims,
                 strides, box, estr, 0, 3, 3, 0)  # fp16, no interleave, 128B swizzle, L2 256B
    if rc != 0:
        raise RuntimeError("cuTensorMapEncodeTiled: %d" % rc)
    return cp.asarray(tm)


def main():
    bn = int(sys.argv[1]) if len(sys.argv) > 1 else 72
    tiles_n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    delay = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    a = cp.zeros((1024, k), dtype=cp.float16)
    b = cp.zeros((bn * tiles_n, k), dtype=cp.float16)
    mA, mA64, mB = tensor_map(a, 1024, k, 128), tensor_map(a, 1024, k, 64), tensor_map(b, bn * tiles_n, k, bn)
    stage = 128 * 128 + bn * 128
    stages = min(8, (200 * 1024) // stage)
    steps, blocks = 4096, 8 * tiles_n
    print("%d tiles of 128 x %d, K = %d, %d stages of %d bytes, %d steps each, %d cycles per stage"
          % (blocks, bn, k, stages, stage, steps, delay))
    for name, form in (("single", 0), ("pairs", 1), ("mcast", 2)):
        if form and tiles_n % 2:
            continue
        fn = cp.RawModule(code=SRC, options=("-DFORM=%d" % form, "-DBN=%d" % bn, "-DSTAGES=%d" % stages,
                                             "-DDELAY=%d" % delay,
                                             "--gpu-architecture=sm_90a")).get_function("stream")
        smem = stages * stage + 1024 + 16 * stages
        fn.max_dynamic_shared_size_bytes = smem
        args = (mA, mA64, mB, cp.int32(k // 64), cp.int32(steps))
        t = median_seconds(fn, (blocks,), (64,), args, smem)
        print("%-8s %6.2f TB/s into shared memory, %.0f ns per step" % (
            name, blocks * steps * stage / t / 1e12, t / steps * 1e9))


if __name__ == "__main__":
    main()
