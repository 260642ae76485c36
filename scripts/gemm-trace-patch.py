#!/usr/bin/env python3
"""Counters in the TMA GEMM kernel, for a measurement build only.

Writes to OUT a copy of kernel_src/gemm/tma_wgmma.cuh whose consumer
warpgroups count clock64 cycles waiting on each stage's full barrier, in
wgmma.wait_group 1 and in their main loop, and whose producer counts the
cycles it waits for free stages. Blocks 0 and 64 store them as 32-bit
words just past the end of C (M x N, fp16 or fp32; words 0-3 and 4-7:
the consumer warpgroups' steps, data wait, wgmma wait, main loop; 8-10:
the producer's steps, free-stage wait, total; 11-12: warpgroup 0's main
loop and what follows it to the end, in ns of %globaltimer; 13-14: the
consumer warpgroups' cycles from each tile's main loop end to the next
tile's start (the epilogues), 15: warpgroup 0's cycles in all, for the
clock; +16 for block 64): the caller allocates 128 bytes more and reads
them back. (Not
printf: a call in the kernel makes ptxas serialize its wgmmas.) Put OUT in place of the
header in a scratch copy of the tree (never in one that ships), build,
and run one GEMM configuration (a tuning record naming it).
Measured with it: bench/gemm-measurements.md, "What the K step's time
goes to".

Usage: python3 scripts/gemm-trace-patch.py OUT
"""
import os
import sys

p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernel_src", "gemm", "tma_wgmma.cuh")
s = open(p).read()
def rep(old, new, count=1):
    global s
    assert s.count(old) >= 1, old
    s = s.replace(old, new, count)
rep('''    tk_work work;
    work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
    int it = 0, chunk = 0;''', '''    tk_work work;
    work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
    long long tr_full = 0, tr_mma = 0, tr_mainend = 0, tr_epi = 0, tr_t0;
    unsigned long long tr_g0, tr_g1 = 0, tr_g2;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tr_g0));
    const long long tr_start = clock64();
    int it = 0, chunk = 0;''')
rep('''    while (work.take(t, k0, k1, more)) {
        int m0, n0;
        const bool phantom''', '''    while (work.take(t, k0, k1, more)) {
        if (tr_mainend)
            tr_epi += clock64() - tr_mainend;
        int m0, n0;
        const bool phantom''')
rep('''            bar_wait(bars + 8 * s, (i / STAGES) & 1);
            const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
            fence_regs<NACC>(acc);
            fence();
            mma_kstep<BN, MI, AK, BKM>(acc, sa, sb, KS ? 0 : cw * MI);
            commit();
            wait<1>(); // this warpgroup's previous step is done: its stage is free''', '''            tr_t0 = clock64();
            bar_wait(bars + 8 * s, (i / STAGES) & 1);
            tr_full += clock64() - tr_t0;
            const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
            fence_regs<NACC>(acc);
            fence();
            mma_kstep<BN, MI, AK, BKM>(acc, sa, sb, KS ? 0 : cw * MI);
            commit();
            tr_t0 = clock64();
            wait<1>(); // this warpgroup's previous step is done: its stage is free
            tr_mma += clock64() - tr_t0;''')
rep('''        it += k1 - k0;
        wait<0>();
        fence_regs<NACC>(acc);''', '''        it += k1 - k0;
        wait<0>();
        fence_regs<NACC>(acc);
        tr_mainend = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tr_g1));''')
rep('''    if (TK_EPI_TMA && (tid & 127) == 0)
        bulk_wait_all(); // the staging buffers live until the stores have read them
}''', '''    if (TK_EPI_TMA && (tid & 127) == 0)
        bulk_wait_all(); // the staging buffers live until the stores have read them
    if ((tid & 127) == 0 && (blockIdx.x == 0 || blockIdx.x == 64)) {
        unsigned *tr = (unsigned *)((char *)C + (size_t)M * (size_t)N * (OUT16 ? 2 : 4)) + (blockIdx.x ? 16 : 0) + 4 * cw;
        tr[0] = (unsigned)it, tr[1] = (unsigned)tr_full, tr[2] = (unsigned)tr_mma;
        tr[3] = (unsigned)(tr_mainend - tr_start);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(tr_g2));
        if (cw == 0) // 11-12: the main loop and the rest to here in ns
            tr[11] = (unsigned)(tr_g1 - tr_g0), tr[12] = (unsigned)(tr_g2 - tr_g1);
        // 13-14: each warpgroup's epilogues, cycles from each tile's main
        // loop end to the next tile's start (or to here); 15: cycles of
        // warpgroup 0 from its start to here, for the clock (with 11-12)
        tr[13 - 3 * cw] = (unsigned)(tr_epi + clock64() - tr_mainend);
        if (cw == 0)
            tr[15] = (unsigned)(clock64() - tr_start);
    }
}''')
rep('''                    const int s = it % STAGES;
                    if (it >= STAGES) // the consumers released step it - STAGES
                        bar_wait(bars + 8 * (STAGES + s), ((it / STAGES) - 1) & 1);''', '''                    const int s = it % STAGES;
                    const long long tr_t0 = clock64();
                    if (it >= STAGES) // the consumers released step it - STAGES
                        bar_wait(bars + 8 * (STAGES + s), ((it / STAGES) - 1) & 1);
                    tr_empty += clock64() - tr_t0;''')
rep('''            tk_work work;
            work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
            const unsigned rank = TK_CLUSTER > 1 ? cluster_rank() : 0u;''', '''            tk_work work;
            work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
            long long tr_empty = 0;
            const long long tr_start = clock64();
            const unsigned rank = TK_CLUSTER > 1 ? cluster_rank() : 0u;''')
rep('''            if (TK_CLUSTER > 1)
                for (int j = it > STAGES ? it - STAGES : 0; j < it; ++j)
                    bar_wait(bars + 8 * (STAGES + j % STAGES), (j / STAGES) & 1);''', '''            if (TK_CLUSTER > 1)
                for (int j = it > STAGES ? it - STAGES : 0; j < it; ++j)
                    bar_wait(bars + 8 * (STAGES + j % STAGES), (j / STAGES) & 1);
            if (blockIdx.x == 0 || blockIdx.x == 64) {
                unsigned *tr = (unsigned *)((char *)C + (size_t)M * (size_t)N * (OUT16 ? 2 : 4)) + (blockIdx.x ? 16 : 0) + 8;
                tr[0] = (unsigned)it, tr[1] = (unsigned)tr_empty, tr[2] = (unsigned)(clock64() - tr_start);
            }''')
if len(sys.argv) != 2:
    sys.exit("usage: gemm-trace-patch.py OUT")
open(sys.argv[1], "w").write(s)
