/*
 * Softmax forward and softmax + cross-entropy backward: validation, variant
 * choice and launch. Kernels: kernel_src/softmax_f16.cu, softmax_xent_f16.cu.
 *
 * Variant choice (same for both ops; cols, alignment and target only):
 *  - TK_VEC: the widest of 8/4/2 halves at which every array's rows start
 *    at the same distance from a vector boundary (base pointers equal
 *    modulo 2 * VEC bytes, leading dimensions modulo VEC), else 1. Where
 *    that distance is not always 0 or cols is not a multiple of VEC
 *    (odd vocabularies such as 50257, offset or oddly padded rows),
 *    TK_EDGE: the kernels read the whole aligned vectors of each row as
 *    they would an aligned row's and the < 2 * VEC halves before and after
 *    them one per thread, so an odd width costs a few scalar loads per row
 *    instead of 2-byte loads over the whole row (0.5-0.7 of the copy
 *    bandwidth at 50257 columns, measured on an H100). fp16 pointers only
 *    need 2-byte alignment; arrays that do not agree get a narrower
 *    variant, not an error.
 *  - Rows that fit in registers (ITERS * max(VEC/2,1) <= 32 registers per
 *    input, groups of at most 512 threads) are read once: up to 256 vectors
 *    per row a group of <= 32 threads per row (about one vector per thread,
 *    4..128 rows per block of 128), beyond that one block of 64..512
 *    threads per row (the forward at VEC 8 with TK_EDGE and 8 vectors a
 *    thread: a cluster of 2 on sm_90 and later, TK_SOFTMAX_EDGE8_C2).
 *  - Longer rows on NVIDIA sm_90 and later (thread-block clusters): a cluster
 *    of 2 to 8 blocks per row (TK_CLUSTER; up to 16: TK_SOFTMAX_EDGE_BIG),
 *    each block a contiguous
 *    slice, partial results exchanged through distributed shared memory:
 *    still one read and one write. The fewest blocks of 256 threads
 *    (CLUSTER_G) whose slices fit a 256-thread block's registers; beyond 8
 *    of those, 8 blocks (up to 262144 columns at VEC 8, 131072 at VEC 1).
 *    The forward at VEC 8 takes the fewest blocks of 512 threads instead,
 *    2 to 8 of them, not only powers of two (fwd4_blocks), 4 of them per
 *    SM (TK_SOFTMAX_FWD4), past 6 such blocks 5 or 6 larger ones at 3 per
 *    SM where they were measured faster (TK_SOFTMAX_WIDE); with TK_EDGE
 *    past 4 such blocks (rows whose pointers alone are off) or 6 (odd
 *    widths, leading dimensions) 8 blocks of 256 threads
 *    (TK_SOFTMAX_EDGE256), or, where those would hold more than 10
 *    vectors a thread, 9 to 16 of them in a non-portable cluster, on GPUs
 *    of 132 SMs or more (TK_SOFTMAX_EDGE_BIG); at VEC 4 and 2
 *    it first takes 4, then 8, blocks of 256 threads with up to 13 vectors each
 *    (CLUSTER_FWD_ITERS) before larger blocks.
 *    Measured on an H100 (bench/softmax --sweep): what
 *    limits these kernels is how many blocks are resident, a cluster being
 *    placed whole within one GPC. So the forward keeps exp(x - max) in
 *    place of x (TK_STORE_E: one exp per element) and most of its slice in
 *    shared memory (TK_SITERS): at VEC 8 all but 2 vectors a thread, at 32
 *    registers (TK_MINB 4); otherwise half of it, or with 512-thread
 *    blocks all of it, at 40 registers (TK_MINB 3). The backward keeps s and g in registers, g in
 *    shared memory (TK_SMEM_G) where 512-thread blocks would otherwise
 *    hold one block per SM (CLUSTER_SMEM_G_REGS); with TK_EDGE, blocks of
 *    512 threads where 256 would hold 8 vectors each (TK_SOFTMAX_BWD512).
 *    VEC 1 forward: registers only (cp.async has no 2-byte copy). The blocks' partials go through
 *    mbarriers (tk_xchg, common_f16.cuh), and a block returns as soon as
 *    its stores are issued.
 *  - Longer still, or on other targets (older NVIDIA, AMD): the block-per-row
 *    two-pass kernel (TK_LONG, 1024 threads).
 *  - Exact and stable policies bake cols (TK_COLS: a vocabulary, a head
 *    size, a sequence length) and the exact ITERS; rows (tokens) are never
 *    baked, and no variant depends on them. Generic policy rounds ITERS up to
 *    a power of two and passes cols at run time, so one compile serves every
 *    row length of a bucket: it is also the fallback that serves a call
 *    while the baked kernel is built in the background (TK_BUILD_ASYNC), with
 *    the same launch shape (only its shared memory may differ).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

/* Blocks per row at most on the cluster path (8: the portable cluster size,
 * launched without cuLaunchKernelEx through __cluster_dims__). */
#define CLUSTER_MAX 8
/* Threads per block on the cluster path while 8 such blocks hold a row:
 * smaller blocks, more of them per SM, one's loads in flight while another
 * reduces or waits at the cluster barrier. */
#define CLUSTER_G 256
/* Backward on the cluster path: where a thread would hold this many
 * registers of g or more, g waits in shared memory instead (s and g both in
 * registers leave one block of 512 threads per SM). */
#define CLUSTER_SMEM_G_REGS 20
/* Backward on the cluster path at TK_EDGE (TK_SOFTMAX_BWD512): where a
 * block of CLUSTER_G threads would hold BWD512_REGS registers of each input
 * (8 vectors a thread at VEC 8), blocks of twice as many threads with half
 * the vectors each. Those 8 vectors of s and g took 87-98 registers with
 * TK_EDGE (2 blocks of 256 per SM), 80 without (3 per SM); 512 threads of
 * 4 vectors 55-58 (2 blocks of 512). H200, bench/softmax, both builds in
 * one call, two runs (docs/performance-softmax.md): odd widths, rows 1 or 3
 * halves off and leading dimensions of cols + 3 at 57977-131072 columns
 * (4 or 8 blocks a row) 6.6-21.8% less time, 0.79-0.95 of copy -> 1.00-1.03
 * (rows 1 half off at 115001: 245.8 -> 192.1 us); packed rows there 0.4-1.4%
 * more time (1.02-1.04 -> 1.01-1.03), hence TK_EDGE only. Measured at VEC
 * 8 only. 0: the 256-thread blocks. */
#ifndef TK_SOFTMAX_BWD512
#define TK_SOFTMAX_BWD512 1
#endif
#define BWD512_REGS 32
/* Forward on the cluster path: vectors per thread a block of CLUSTER_G
 * threads holds before a cluster of 8 or blocks of 512 (measured on an H100
 * at 151936 columns: 8 blocks of 256 x 10 vectors, 6 of them in shared
 * memory, 0.93 of copy; 8 blocks of 512 x 5 0.83: at 3 blocks per SM half
 * as many clusters fit at once), of which CLUSTER_FWD_REGS in registers. A
 * cluster of 4 such blocks before one of 8 (at 100003 columns 4 blocks of
 * 256 x 13: 0.96 of copy, 8 blocks of 256 x 7: 0.94; at 70393 0.95 and
 * 0.92). */
#define CLUSTER_FWD_ITERS 13
#define CLUSTER_FWD_REGS 4
/* Forward on the cluster path at VEC 8 (TK_SOFTMAX_FWD4; 0 for the A/B:
 * the forms above): the fewest blocks of 512 threads whose slices fit
 * (fwd4_blocks, below), 4 blocks per SM (TK_MINB 4: 32 registers, all 2048 threads
 * an SM holds), FWD4_REGS vectors of each thread's slice in registers and
 * the rest, at most 6 (48 KiB a block), in shared memory. H100, both
 * builds in one call, 28 widths from 32769 to 262144 (docs/
 * performance-softmax.md): the old forms 0.87-0.98 of copy (175000 and
 * 188000 columns 0.87, 212992 and 240000 0.89, 262144 0.90), these
 * 0.93-0.98; at most 3% slower at any width (140000). More vectors in
 * registers spill at 32 registers. H200, 16 widths: 0.78-0.92 before,
 * 0.84-0.93 after, slower only at 140000 (0.90 -> 0.84); those figures
 * were taken with 2, 4 or 8 blocks a row. */
#ifndef TK_SOFTMAX_FWD4
#define TK_SOFTMAX_FWD4 1
#endif
#define FWD4_REGS 2
/* Forward at VEC 8 (TK_SOFTMAX_FWD4): blocks per row, any count from 2 to
 * CLUSTER_MAX (__cluster_dims__ takes counts that are not powers of two),
 * the fewest whose 512-thread blocks hold at most FWD4_ITERS vectors a
 * thread, with two exceptions: 3 blocks hold at most FWD4_ITERS_3, and 7
 * blocks are never taken (8 instead). H200 (docs/performance-softmax.md,
 * bench/softmax --sweep-fwd --clusters, 35 widths from 40000 to 245000
 * columns): at equal or better use of the slots, fewer blocks with more
 * vectors each are faster (151936 columns: 5 blocks x 8 vectors 0.93 of
 * copy, 8 x 5 0.86; 144000: 5 x 8 0.96, 8 x 5 0.82-0.86); 3 blocks of 8
 * vectors lost to 4 of 6 (90001: 0.89 against 0.92), 7 blocks never led 8
 * (200003-223207: 0.88-0.89 against 0.88-0.90). */
#define FWD4_ITERS 8
#define FWD4_ITERS_3 7
/* Forward at VEC 8 (TK_SOFTMAX_FWD4) past 6 blocks of FWD4_ITERS vectors
 * (196609 columns and more): the fewest blocks of 512 threads whose slices
 * fit WIDE_ITERS vectors a thread, WIDE_REGS of them in registers and the
 * rest (at most 64 KiB a block) in shared memory, 40 registers (TK_MINB 3:
 * 3 blocks per SM), in place of 8 blocks of 7 or 8 vectors at 4 per SM:
 * 5 blocks up to 225280 columns; 6 blocks of 11 vectors (245761 columns
 * and more) for packed rows only; the 8 blocks in between and for rows with
 * TK_EDGE past 225280. H200, bench/softmax, both builds in one call, two
 * runs (docs/performance-softmax.md): 196616-225280 columns 0.7-6.6% less
 * time (210000: 147.6 -> 139.4 us, 0.88 -> 0.94 of copy; rows offset at
 * 200003 0.89 -> 0.91), packed 256000 and 262144 5% less (0.88 -> 0.92);
 * with 6 blocks, odd widths (240001, 248833) 0.6-0.7% more time, rows
 * offset at 262144 5% more, packed 231000 (10 vectors) 1% more. 0: the 8
 * blocks. */
#ifndef TK_SOFTMAX_WIDE
#define TK_SOFTMAX_WIDE 1
#endif
#define WIDE_ITERS 11
#define WIDE_REGS 3
/* Forward at VEC 8, packed rows (no TK_EDGE) where the 4 blocks of 512
 * threads (TK_SOFTMAX_FWD4) would hold more than FWD2_16_ITERS / 2 - 0.5
 * vectors a thread (122881-131072 columns): 2 blocks of FWD2_16_ITERS,
 * FWD2_16_REGS of them in registers and the rest (96 KiB a block) in shared
 * memory, the compiler's registers (64: 2 blocks per SM). H200,
 * bench/softmax --sweep-fwd (docs/performance-softmax.md): 128256 and
 * 131072 columns 0.93-0.94 of copy where the 4 blocks read 0.89-0.90 (two
 * calls at 131072), 124000 0.93 both; 2 blocks of 15 vectors at 118000
 * 0.90 against 0.91, hence the start. Both builds in one call, two runs:
 * 128256 and 131072 4.5% less time (0.91 -> 0.95, 0.89 -> 0.93), 124000
 * 0.8% less, but 122888 and 130000 1.9-2.2% more (0.93 -> 0.91): the
 * band's worst 0.89 -> 0.91. 0: the 4 blocks. */
#ifndef TK_SOFTMAX_FWD2_16
#define TK_SOFTMAX_FWD2_16 1
#endif
#define FWD2_16_ITERS 16
#define FWD2_16_REGS 4
/* Forward at VEC 8 with TK_EDGE: 8 blocks of 256 threads, each thread's
 * slice in shared memory but for EDGE256_REGS vectors past
 * EDGE256_SMEM_ALL of them (all of it up to that: 40-48 registers), in
 * place of the 512-thread forms (TK_SOFTMAX_FWD4, TK_SOFTMAX_WIDE): for
 * rows whose base pointers are off 16-byte boundaries, width and leading
 * dimensions multiples of 8 (EDGE_SHIFTED: every row with the same partial
 * vectors at both ends), past 4 blocks of FWD4_ITERS vectors (131080
 * columns and more); for the other rows with TK_EDGE (a width or leading
 * dimension not a multiple of 8) past 6 such blocks (196616 and more).
 * H200, bench/softmax, both builds in one call, two runs each
 * (docs/performance-softmax.md): rows 1, 3 or 4 halves off at 140000-262144
 * columns 1.1-7.7% less time (0.84-0.90 of copy -> 0.90-0.95; 225280
 * columns 3 off 153.3 -> 141.4 us), 170000 even; widths not a multiple of 8
 * past 196616 columns 0-2.3% less (262143: 0.89 -> 0.91), but at
 * 140001-170001 1.2-3.1% more (151937: 0.93 -> 0.90) and with a leading
 * dimension of cols + 3 at 160000 2.6% more, hence the later start there.
 * 0: the 512-thread forms. */
#ifndef TK_SOFTMAX_EDGE256
#define TK_SOFTMAX_EDGE256 1
#endif
#ifndef EDGE256_SMEM_ALL
#define EDGE256_SMEM_ALL 10
#endif
#ifndef EDGE256_REGS
#define EDGE256_REGS 4
#endif
/* Forward at VEC 8 with TK_EDGE where those 8 blocks of 256 threads would
 * hold more than EDGE256_SMEM_ALL vectors a thread (rows shifted off
 * 16-byte boundaries from 163848 columns, varied ones from 196616, as
 * TK_SOFTMAX_EDGE256 starts): more blocks of 256 threads, the fewest that
 * hold at most EDGE_BIG_ITERS vectors a thread (14 or 15: 16), all but 2
 * of them in shared memory, TK_MINB 8 (32 registers, 8 blocks per SM), in
 * a cluster of 9-16 blocks, a non-portable size (the engine allows it at
 * load). Only on GPUs of EDGE_BIG_MIN_SMS multiprocessors or more (the
 * H100 SXM and H200, where it was measured; a 16-block cluster needs a
 * GPC with 16 free) or of unknown count (a precompile). H200, bench/softmax
 * --sweep-fwd --only m8 --clusters 9-16 (docs/performance-softmax.md):
 * rows 1 or 3 halves off at 165000-262144 columns 0.91-0.93 of copy where
 * the 8 blocks read 0.89-0.91; at 140000-160000, where the 8 blocks hold
 * their slice in shared memory, 0.89-0.93 against 0.92-0.95, hence the
 * start; packed rows 0.90-0.94 against the 512-thread forms' 0.92-0.95.
 * Clusters of 14 lost to 16 (225280 columns: 0.88 against 0.92). Both
 * builds in one call, two runs: 19 of the 21 widths it reaches (rows with
 * TK_EDGE at 163848-262144 columns, offset, odd or with odd leading
 * dimensions) 1.2-4.8% less time (rows 3 halves off at 170000: 147.0 ->
 * 140.2 us, 0.89 -> 0.94 of copy; odd 200003 0.91 -> 0.94), rows 3 halves
 * off at 210000 and the odd 262143 1.3% more (0.92 -> 0.91, 0.90 -> 0.89);
 * those it leaves (140000, 150000, 170001) even. 0: the 8 blocks. */
#ifndef TK_SOFTMAX_EDGE_BIG
#define TK_SOFTMAX_EDGE_BIG 1
#endif
#define EDGE_BIG_ITERS 8
/* Forward at VEC 8 for rows whose base pointers alone are off 16-byte
 * boundaries (EDGE_SHIFTED) from 4097 vectors (past one 512-thread block
 * of FWD4_ITERS: 32776 columns) to SHIFTED256_MAX_VECS (131072), where the 512-thread
 * forms (TK_SOFTMAX_FWD4) would take 2-4 blocks: the form of
 * TK_SOFTMAX_EDGE_BIG, the fewest blocks of 256 threads holding at most
 * EDGE_BIG_ITERS vectors each (3-8), on the same GPUs. H200, bench/softmax
 * --sweep-fwd, rows 1 half off at 40000-65536 columns: 0.93-0.95 of copy
 * where the 2 blocks of 512 read 0.90-0.93; rows whose widths are odd
 * (EDGE_VARIED) even, so left out. Both builds in one call, two runs
 * (with EDGE_BIG5_ITERS, below): rows 1 half off at 40000-100000 columns
 * 0.8-4.5% less time, 0.90-0.94 -> 0.92-0.96 of copy (65536 and 90000:
 * 0.90 -> 0.94, 0.95); in a first call rows 1 or 3 halves off at
 * 32776-131072 columns -5.0% to +0.5% but for 80000 (below). 0: the
 * 512-thread forms. */
#ifndef TK_SOFTMAX_SHIFTED256
#define TK_SOFTMAX_SHIFTED256 1
#endif
#ifndef SHIFTED256_MAX_VECS
#define SHIFTED256_MAX_VECS (4 * 512 * FWD4_ITERS)
#endif
/* TK_SOFTMAX_EDGE_BIG and _SHIFTED256: where 5 blocks would hold more than EDGE_BIG5_ITERS vectors
 * a thread, 6 (rows 1 half off at 80000 columns, bench/softmax --sweep-fwd: 6 blocks of 7 vectors
 * 0.95 of copy, 5 of 8 0.90; at 75000 0.95 and 0.94). */
#define EDGE_BIG5_ITERS 7
#define EDGE_BIG_REGS 2
#define EDGE_BIG_CLUSTER_MAX 16
#define EDGE_BIG_MIN_SMS 132
/* Forward, one block of 512 threads per row at VEC 8 with at most this
 * many vectors a thread (16392 to 28672 columns): TK_MINB 3, so that 3
 * blocks fit an SM. The compiler gave such blocks 40 registers, except for
 * rows that need TK_EDGE at 7 vectors (54-56 registers: 2 blocks per SM;
 * H200, 25949 columns 0.86 of copy, docs/performance-softmax.md). At 8
 * vectors 40 registers spill. Taken on sm_90 and later, where it was
 * measured. */
#define ROW_MINB3_ITERS 7
/* Forward at VEC 8 with TK_EDGE and more than ROW_MINB3_ITERS vectors a
 * thread in one block (odd widths of 28673-32775 columns, offset rows of
 * 28680-32768): a cluster of 2 blocks (fwd4_blocks, 4 vectors a thread, 32
 * registers) instead of the row kernel (54-56 registers with TK_EDGE at 8
 * vectors: 2 blocks per SM). H200, bench/softmax, both builds in one call,
 * two runs each (docs/performance-softmax.md): 1.6-3.8% less time at
 * 29001-32767 columns and offset rows of 30000-32760 (30001: 147.2 ->
 * 143.0 us, 0.89 -> 0.92 of copy); packed rows and 7 vectors a thread
 * unchanged. sm_90 and later (clusters). */
#ifndef TK_SOFTMAX_EDGE8_C2
#define TK_SOFTMAX_EDGE8_C2 1
#endif
/* Forward at VEC 8 with TK_EDGE and cols baked (TK_COLS) one less than a
 * multiple of 8 (131071, 196607, 262143: a row's whole vectors then number
 * cols / 8 whatever its head): TK_EDGE_OPAQUE, the head's length hidden
 * from the compiler (kernel_src/common_f16.cuh). Without it the cluster
 * forms spilled 8 bytes at 32 registers there and read 0.88-0.90 of copy
 * where widths 2 less read 0.92-0.93 (H200, bench/softmax --sweep-fwd
 * --define TK_EDGE_OPAQUE, docs/performance-softmax.md: 262143 columns
 * 0.88 -> 0.92, 196607 0.89 -> 0.91, 131071 0.90 -> 0.92, no spill);
 * widths that are not one less lost with it (223205: 0.93 -> 0.89), hence
 * those alone. Both builds in one call, two runs, 17 such widths of
 * 1031-262143 columns: 8 of them 1.0-4.6% less time (30007, a cluster of
 * 2: 0.88 -> 0.92; 262143 0.89 -> 0.93; 196607 0.90 -> 0.92), 6 within
 * 0.3% (223207 at 0.90 either way), 3 0.6-1.5% more (1031, 50263, 100007:
 * 0.93 -> 0.92). NVIDIA sm_90 and later (clusters), where it was measured.
 * 0: never. */
#ifndef TK_SOFTMAX_EDGE_OPAQUE
#define TK_SOFTMAX_EDGE_OPAQUE 1
#endif
/* On NVIDIA sm_90 and later the kernels are built with TK_PDL and launched
 * with programmatic dependent launch (as the GEMM's TMA kernel is): a
 * call's blocks are dispatched while the stream's previous kernel finishes,
 * and wait for it before touching global memory (tk_pdl_enter,
 * kernel_src/pdl.cuh). 0: plain launches. H100, bench/softmax, both builds in
 * one call, two runs each (docs/performance-softmax.md): 0.9-2.1 us less
 * per call (0.5-0.8%), forward and backward, 1024 to 262144 columns, but
 * 0.1-0.4 us on the 262144-column forward. */
#ifndef TK_SOFTMAX_PDL
#define TK_SOFTMAX_PDL 1
#endif
/* Shared memory a launch gets without raising the kernel's limit. */
#define SMEM_DEFAULT (48u * 1024u)

typedef struct softmax_plan {
    unsigned vec, g, iters, block, cluster, smem;
    int edge;        /* TK_EDGE (an EDGE_* kind): rows not on vector boundaries, or cols not a
                      * multiple of vec */
    unsigned siters; /* forward on the cluster path: vectors per thread in shared memory */
    unsigned minb;   /* forward: TK_MINB (0: the kernel's default) */
    int is_long, smem_g, store_e;
    int wide; /* forward: the larger blocks past 6 of 8 vectors (TK_SOFTMAX_WIDE) */
    int edge256; /* forward: 8 blocks of 256 threads at TK_EDGE (TK_SOFTMAX_EDGE256) */
    int edge_big; /* forward: 9-16 blocks of 256 threads at TK_EDGE (TK_SOFTMAX_EDGE_BIG) */
    int pdl; /* TK_PDL, launched with programmatic dependent launch */
    int64_t blocks;
    char d_vec[12], d_g[12], d_iters[12], d_block[12], d_cluster[12], d_siters[12], d_minb[12],
        d_cols[24]; /* u32: 10 digits + NUL */
    tk_define defs[14];
    size_t n_defs;
    const char *source;
    const char *entry;
} softmax_plan;

static unsigned next_pow2(uint64_t v)
{
    unsigned p = 1;
    while (p < v && p < (1u << 30))
        p <<= 1;
    return p;
}

/* Threads and ITERS for n vectors held by one block of at most max_g
 * threads: about 8 vectors per thread, 64..max_g threads. */
static void block_shape(int64_t n, unsigned max_g, unsigned *g, unsigned *iters)
{
    *g = next_pow2((uint64_t)(n + 7) / 8);
    if (*g < 64)
        *g = 64;
    if (*g > max_g)
        *g = max_g;
    *iters = (unsigned)((n + *g - 1) / *g);
}

/* Thread-block clusters: NVIDIA sm_90 and later (CLUSTERS_PORTABLE), of up
 * to 16 blocks (CLUSTERS_BIG) where the GPU has EDGE_BIG_MIN_SMS
 * multiprocessors or more, or no device tells (a precompile). */
enum { CLUSTERS_NONE = 0, CLUSTERS_PORTABLE = 1, CLUSTERS_BIG = 2 };
static int target_has_clusters(tk_context *ctx)
{
    const char *backend = tk_context_backend_name(ctx);
    const char *target = tk_context_target(ctx);
    if (backend == NULL || strcmp(backend, "cuda") != 0 || target == NULL ||
        strncmp(target, "sm_", 3) != 0 || atoi(target + 3) < 90)
        return CLUSTERS_NONE;
    const int sms = tk__ctx_sm_count(ctx);
    return sms == 0 || sms >= EDGE_BIG_MIN_SMS ? CLUSTERS_BIG : CLUSTERS_PORTABLE;
}

/* Why a row needs TK_EDGE (pick_vec): EDGE_SHIFTED when only the base
 * pointers are off a vector boundary (every row starts and ends with the
 * same partial vectors), EDGE_VARIED when the width or the leading
 * dimensions are not a multiple of the vector (the rows' partial vectors
 * differ from row to row). Nonzero: TK_EDGE. */
enum { EDGE_NONE = 0, EDGE_VARIED = 1, EDGE_SHIFTED = 2 };

/* The vector width for n arrays (base pointers, leading dimensions in
 * halves) of rows of cols halves, and whether it needs TK_EDGE (the
 * EDGE_* kind). A NULL pointer counts as aligned (precompile: buffers
 * from the allocator). */
static unsigned pick_vec(int64_t cols, const void *const *ptrs, const int64_t *lds, int n,
                         int *edge)
{
    static const unsigned widths[] = {8, 4, 2};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const unsigned v = widths[w];
        const uintptr_t p0 = ptrs[0] ? (uintptr_t)ptrs[0] % (2u * v) : 0;
        const int64_t l0 = lds[0] % v;
        int ok = 1;
        for (int i = 1; ok && i < n; i++)
            ok = (ptrs[i] ? (uintptr_t)ptrs[i] % (2u * v) : 0) == p0 && lds[i] % v == l0;
        if (ok) {
            *edge = l0 != 0 || cols % v != 0 ? EDGE_VARIED : p0 != 0 ? EDGE_SHIFTED : EDGE_NONE;
            return v;
        }
    }
    *edge = EDGE_NONE;
    return 1;
}

/* The forward's blocks per row at VEC 8 (TK_SOFTMAX_FWD4) for a row of
 * nvec vectors, more than one 512-thread block holds. */
static unsigned fwd4_blocks(int64_t nvec)
{
    for (unsigned c = 2; c < CLUSTER_MAX; c++) {
        const int64_t most = 512 * (c == 3 ? FWD4_ITERS_3 : FWD4_ITERS);
        if (c != 7 && (nvec + c - 1) / c <= most)
            return c;
    }
    return CLUSTER_MAX;
}

static void plan_make(tk_policy policy, tk_op op, int64_t rows, int64_t cols, unsigned vec,
                      int edge, int clusters, softmax_plan *p)
{
    /* TK_EDGE: the whole vectors of a row, at most cols / vec, are laid out
     * as an aligned row's; its < 2 * vec other halves go one per thread */
    const int64_t nvec = cols >= vec ? cols / vec : 1;
    const unsigned regs_vec = vec >= 2 ? vec / 2u : 1u; /* registers a vector of each input */
    const unsigned itmax = 32u / regs_vec;
    const int fwd = op == TK_OP_SOFTMAX_F16_FWD;

    memset(p, 0, sizeof *p);
    p->vec = vec;
    p->edge = edge;
    p->cluster = 1;
    if (nvec <= 256) {
        /* one or a few vectors per thread */
        p->g = next_pow2((uint64_t)nvec);
        if (p->g > 32)
            p->g = 32;
        p->iters = (unsigned)((nvec + p->g - 1) / p->g);
        p->block = 128;
    } else if (nvec <= (int64_t)512 * itmax &&
               !(TK_SOFTMAX_EDGE8_C2 && fwd && vec == 8 && TK_SOFTMAX_FWD4 && clusters && edge &&
                 (nvec + 511) / 512 > ROW_MINB3_ITERS)) {
        block_shape(nvec, 512, &p->g, &p->iters);
        p->block = p->g;
    } else if (clusters && nvec <= (int64_t)CLUSTER_MAX * 512 * itmax) {
        /* The fewest blocks of CLUSTER_G threads whose slices fit
         * (cap vectors each); 8 blocks beyond. */
        const int64_t cap = (int64_t)CLUSTER_G * itmax;
        /* forward at VEC >= 2: blocks of CLUSTER_G threads hold up to
         * CLUSTER_FWD_ITERS vectors each, all but CLUSTER_FWD_REGS of them
         * in shared memory, before a cluster of 8 or larger blocks */
        const int ext = fwd && vec >= 2;
        const int64_t cap_ext = (int64_t)CLUSTER_G * CLUSTER_FWD_ITERS;
        int64_t per;
        const int fwd4 = fwd && vec == 8 && TK_SOFTMAX_FWD4;
        if (fwd4)
            p->cluster = fwd4_blocks(nvec);
        else
            while (p->cluster < CLUSTER_MAX && (nvec + p->cluster - 1) / p->cluster > cap)
                p->cluster *= 2;
        if (ext && !fwd4 && p->cluster == CLUSTER_MAX && (nvec + 3) / 4 > cap &&
            (nvec + 3) / 4 <= cap_ext)
            p->cluster = 4;
        per = (nvec + p->cluster - 1) / p->cluster;
        /* shifted rows short of the 8 blocks of 256 threads: the
         * 256-thread form of TK_SOFTMAX_EDGE_BIG (TK_SOFTMAX_SHIFTED256) */
        const int shifted256 = TK_SOFTMAX_SHIFTED256 && fwd4 && edge == EDGE_SHIFTED &&
                               clusters >= CLUSTERS_BIG && nvec > (int64_t)512 * FWD4_ITERS &&
                               nvec <= SHIFTED256_MAX_VECS;
        if (shifted256 || (fwd4 && TK_SOFTMAX_EDGE256 && edge &&
                           nvec > (int64_t)(edge == EDGE_SHIFTED ? 4 : 6) * 512 * FWD4_ITERS)) {
            /* 8 blocks of 256 threads; where those would hold more than
             * EDGE256_SMEM_ALL vectors a thread (TK_SOFTMAX_EDGE_BIG), or
             * for shifted rows short of them (shifted256), the fewest
             * holding at most EDGE_BIG_ITERS */
            const int64_t iters8 =
                ((nvec + CLUSTER_MAX - 1) / CLUSTER_MAX + CLUSTER_G - 1) / CLUSTER_G;
            const int64_t big =
                (nvec + CLUSTER_G * EDGE_BIG_ITERS - 1) / (CLUSTER_G * EDGE_BIG_ITERS);
            p->edge_big = shifted256 || (TK_SOFTMAX_EDGE_BIG && clusters >= CLUSTERS_BIG &&
                                         iters8 > EDGE256_SMEM_ALL && big <= EDGE_BIG_CLUSTER_MAX);
            p->edge256 = !p->edge_big;
            p->cluster = !p->edge_big             ? CLUSTER_MAX
                         : big == 14 || big == 15 ? EDGE_BIG_CLUSTER_MAX
                                                  : (unsigned)big;
            /* 5 blocks hold at most EDGE_BIG5_ITERS vectors a thread */
            if (p->edge_big && p->cluster == 5 &&
                (nvec + 4) / 5 > (int64_t)CLUSTER_G * EDGE_BIG5_ITERS)
                p->cluster = 6;
            per = (nvec + p->cluster - 1) / p->cluster;
            p->g = CLUSTER_G;
            p->iters = (unsigned)((per + CLUSTER_G - 1) / CLUSTER_G);
            if (p->edge_big) {
                p->siters = p->iters - EDGE_BIG_REGS;
                p->minb = 8;
            } else {
                p->siters = p->iters > EDGE256_SMEM_ALL ? p->iters - EDGE256_REGS : p->iters;
            }
        } else if (fwd4 && TK_SOFTMAX_WIDE && nvec > (int64_t)6 * 512 * FWD4_ITERS &&
                   (nvec <= (int64_t)5 * 512 * WIDE_ITERS ||
                    (!edge && nvec > (int64_t)6 * 512 * (WIDE_ITERS - 1)))) {
            p->cluster = (unsigned)((nvec + 512 * WIDE_ITERS - 1) / (512 * WIDE_ITERS));
            per = (nvec + p->cluster - 1) / p->cluster;
            p->g = 512;
            p->iters = (unsigned)((per + 511) / 512);
            p->siters = p->iters - WIDE_REGS;
            p->minb = 3;
            p->wide = 1;
        } else if (fwd4 && TK_SOFTMAX_FWD2_16 && !edge && p->cluster == 4 &&
                   (nvec + 1) / 2 > (int64_t)512 * (FWD2_16_ITERS - 1)) {
            /* packed rows whose 4 blocks would hold about 8 vectors a
             * thread: 2 blocks of FWD2_16_ITERS (TK_SOFTMAX_FWD2_16) */
            p->cluster = 2;
            per = (nvec + 1) / 2;
            p->g = 512;
            p->iters = (unsigned)((per + 511) / 512);
            p->siters = p->iters - FWD2_16_REGS;
        } else if (fwd4) {
            p->g = 512;
            p->iters = (unsigned)((per + 511) / 512);
            p->siters = p->iters > FWD4_REGS ? p->iters - FWD4_REGS : 0;
            p->minb = 4;
        } else if (per <= cap) {
            block_shape(per, CLUSTER_G, &p->g, &p->iters);
            /* backward at TK_EDGE: twice the threads, half the vectors
             * each, where CLUSTER_G threads would hold BWD512_REGS
             * registers of each input (TK_SOFTMAX_BWD512) */
            if (TK_SOFTMAX_BWD512 && !fwd && edge && p->iters * regs_vec >= BWD512_REGS) {
                p->g = 2 * CLUSTER_G;
                p->iters = (unsigned)((per + p->g - 1) / p->g);
            }
            /* forward: half the slice in shared memory */
            if (fwd && vec >= 2)
                p->siters = p->iters / 2;
        } else if (ext && per <= cap_ext) {
            p->g = CLUSTER_G;
            p->iters = (unsigned)((per + CLUSTER_G - 1) / CLUSTER_G);
            p->siters = p->iters - CLUSTER_FWD_REGS;
        } else {
            block_shape(per, 512, &p->g, &p->iters);
            /* forward: all of it in shared memory, 40 registers: 3 blocks
             * of 512 per SM */
            if (fwd && vec >= 2) {
                p->siters = p->iters;
                p->minb = 3;
            }
        }
        p->block = p->g;
        /* 2-byte vectors: cp.async has no such size, and single halves
         * leave no registers to save */
        p->store_e = fwd && vec >= 2;
        p->smem_g = !fwd && p->g >= 512 && p->iters * regs_vec >= CLUSTER_SMEM_G_REGS;
    } else {
        p->is_long = 1;
    }
    if (p->is_long) {
        p->g = 1024;
        p->block = 1024;
        p->iters = 1;
        p->blocks = rows;
    } else {
        if (policy == TK_POLICY_GENERIC) {
            /* the same registers per thread, a larger shared slice (the
             * larger blocks: WIDE_ITERS, 2 of them in registers, whatever
             * the width, one kernel per block count; 16 with 3 in registers
             * spilled 8-24 bytes, this 8 with TK_EDGE and none packed; the
             * 256-thread blocks at TK_EDGE: EDGE256_REGS in registers, where
             * 16 all in shared memory spilled 16 bytes) */
            const unsigned in_regs = p->wide       ? 2
                                     : p->edge256  ? EDGE256_REGS
                                     : p->edge_big ? EDGE_BIG_REGS
                                                   : p->iters - p->siters;
            p->iters = p->wide ? WIDE_ITERS : next_pow2(p->iters);
            if (p->siters > 0)
                p->siters = p->iters - in_regs;
        }
        /* forward, one block of 512 threads per row of at most
         * ROW_MINB3_ITERS vectors a thread: 3 blocks per SM (sm_90 and
         * later, where it was measured) */
        if (fwd && clusters && vec == 8 && p->cluster == 1 && p->g == 512 &&
            p->iters <= ROW_MINB3_ITERS)
            p->minb = 3;
        p->blocks = p->g <= 32 ? (rows + (p->block / p->g) - 1) / (p->block / p->g)
                               : rows * (int64_t)p->cluster;
        if (p->smem_g)
            p->smem = p->g * p->iters * vec * 2u;
        else if (p->siters > 0)
            p->smem = p->g * p->siters * vec * 2u;
        /* These kernels' static shared memory (< 1 KiB) counts against the
         * 48 KiB default too (measured: 48 KiB dynamic + 272 bytes static
         * failed with CUDA_ERROR_INVALID_VALUE). The engine now raises the
         * limit on static + dynamic bytes when it knows the kernel's static
         * size (from the compiler's resource report); a request just under
         * 48 KiB still asks for a little more, so that the raise happens
         * also when that report is missing. */
        if (p->smem > SMEM_DEFAULT - 1024 && p->smem <= SMEM_DEFAULT)
            p->smem = SMEM_DEFAULT + 16;
    }

    tk__op_put_dec(p->d_vec, p->vec);
    tk__op_put_dec(p->d_g, p->g);
    tk__op_put_dec(p->d_iters, p->iters);
    tk__op_put_dec(p->d_block, p->block);
    tk__op_put_dec(p->d_cluster, p->cluster);
    tk__op_put_dec(p->d_siters, p->siters);
    tk__op_put_dec(p->d_minb, p->minb);
    tk__op_put_dec(p->d_cols, cols);
    p->n_defs = 0;
    p->defs[p->n_defs++] = (tk_define){"TK_VEC", p->d_vec};
    p->defs[p->n_defs++] = (tk_define){"TK_G", p->d_g};
    p->defs[p->n_defs++] = (tk_define){"TK_BLOCK", p->d_block};
    if (p->is_long)
        p->defs[p->n_defs++] = (tk_define){"TK_LONG", NULL};
    else
        p->defs[p->n_defs++] = (tk_define){"TK_ITERS", p->d_iters};
    if (p->edge)
        p->defs[p->n_defs++] = (tk_define){"TK_EDGE", NULL};
    if (TK_SOFTMAX_EDGE_OPAQUE && p->edge && fwd && vec == 8 && clusters &&
        policy != TK_POLICY_GENERIC && cols % 8 == 7)
        p->defs[p->n_defs++] = (tk_define){"TK_EDGE_OPAQUE", NULL};
    if (p->cluster > 1)
        p->defs[p->n_defs++] = (tk_define){"TK_CLUSTER", p->d_cluster};
    if (p->smem_g)
        p->defs[p->n_defs++] = (tk_define){"TK_SMEM_G", NULL};
    if (p->siters > 0)
        p->defs[p->n_defs++] = (tk_define){"TK_SITERS", p->d_siters};
    if (p->store_e)
        p->defs[p->n_defs++] = (tk_define){"TK_STORE_E", NULL};
    if (p->minb > 0)
        p->defs[p->n_defs++] = (tk_define){"TK_MINB", p->d_minb};
    if (policy != TK_POLICY_GENERIC)
        p->defs[p->n_defs++] = (tk_define){"TK_COLS", p->d_cols};
    /* sm_90 and later, the targets with clusters */
    p->pdl = TK_SOFTMAX_PDL && clusters;
    if (p->pdl)
        p->defs[p->n_defs++] = (tk_define){"TK_PDL", NULL};
    p->source = fwd ? "softmax_f16" : "softmax_xent_f16";
    if (fwd)
        p->entry = p->is_long       ? "tk_softmax_f16_fwd_long"
                   : p->cluster > 1 ? "tk_softmax_f16_fwd_cluster"
                                    : "tk_softmax_f16_fwd";
    else
        p->entry = p->is_long       ? "tk_softmax_xent_f16_bwd_long"
                   : p->cluster > 1 ? "tk_softmax_xent_f16_bwd_cluster"
                                    : "tk_softmax_xent_f16_bwd";
}

static tk_kernel_desc plan_desc(const softmax_plan *p)
{
    tk_kernel_desc d = {0};
    d.source_name = p->source;
    d.entry = p->entry;
    d.defines = p->defs;
    d.n_defines = p->n_defs;
    return d;
}

/* Shared validation of the shape; pointers are checked by the callers. */
static tk_status check_shape(tk_context *ctx, const char *op, int64_t rows, int64_t cols)
{
    tk_status st = tk__op_check_size(ctx, op, "rows", rows);
    if (st == TK_OK)
        st = tk__op_check_size(ctx, op, "cols", cols);
    if (st == TK_OK && cols > INT32_MAX)
        st = tk__fail(ctx, TK_UNSUPPORTED, "%s: cols must be <= %d (got %lld)", op, INT32_MAX,
                      (long long)cols);
    return st;
}

/* rows x ld elements addressable (the last row only needs cols). */
static tk_status check_extent(tk_context *ctx, const char *op, const char *name, int64_t rows,
                              int64_t ld)
{
    return tk__op_check_product(ctx, op, name, rows, ld, 2);
}

/* The policy's kernel, or while it is not ready (TK_BUILD_ASYNC) the
 * generic one of the same variant: same grid and block, cols at run time
 * (and its own shared memory: a generic ITERS may be larger). */
static tk_status launch(tk_context *ctx, const char *op, tk_op which, int64_t rows, int64_t cols,
                        unsigned vec, int edge, void *stream, void **args)
{
    softmax_plan p, pg;
    tk_kernel *k = NULL;
    tk_kernel_desc d, dg;
    int used_fallback;
    const tk_policy policy = tk_context_policy(ctx);
    const int clusters = target_has_clusters(ctx);
    plan_make(policy, which, rows, cols, vec, edge, clusters, &p);
    unsigned grid[3] = {(unsigned)p.blocks, 1, 1};
    unsigned block[3] = {p.block, 1, 1};
    tk_status st = tk__op_check_grid(ctx, op, p.blocks, p.block, 1);
    if (st != TK_OK)
        return st;
    d = plan_desc(&p);
    if (policy != TK_POLICY_GENERIC) {
        plan_make(TK_POLICY_GENERIC, which, rows, cols, vec, edge, clusters, &pg);
        dg = plan_desc(&pg);
    }
    st = tk__op_kernel_pick(ctx, &d, policy != TK_POLICY_GENERIC ? &dg : NULL, 1, NULL, &k,
                            &used_fallback);
    if (st != TK_OK)
        return st;
    return (p.pdl ? tk__kernel_launch_pdl : tk_kernel_launch)(
        ctx, k, grid, block, used_fallback ? pg.smem : p.smem, stream, args);
}

tk_status tk_softmax_f16_fwd(tk_context *ctx, int64_t rows, int64_t cols, const void *d_in,
                             int64_t ld_in, void *d_out, int64_t ld_out, void *stream)
{
    static const char op[] = "tk_softmax_f16_fwd";
    unsigned vec;
    int edge;
    tk_status st = tk__op_need_device(ctx, op);
    if (st == TK_OK)
        st = check_shape(ctx, op, rows, cols);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_in", d_in, 2);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_out", d_out, 2);
    if (st == TK_OK)
        st = tk__op_resolve_ld(ctx, op, "ld_in", &ld_in, cols);
    if (st == TK_OK)
        st = tk__op_resolve_ld(ctx, op, "ld_out", &ld_out, cols);
    if (st == TK_OK)
        st = check_extent(ctx, op, "rows x ld_in", rows, ld_in);
    if (st == TK_OK)
        st = check_extent(ctx, op, "rows x ld_out", rows, ld_out);
    if (st != TK_OK)
        return st;
    {
        const void *ptrs[2] = {d_in, d_out};
        const int64_t lds[2] = {ld_in, ld_out};
        vec = pick_vec(cols, ptrs, lds, 2, &edge);
    }
    {
        void *args[] = {&d_in, &ld_in, &d_out, &ld_out, &rows, &cols};
        return launch(ctx, op, TK_OP_SOFTMAX_F16_FWD, rows, cols, vec, edge, stream, args);
    }
}

tk_status tk_softmax_xent_f16_bwd(tk_context *ctx, int64_t rows, int64_t cols, const void *d_s,
                                  int64_t ld_s, const void *d_g, int64_t ld_g, void *d_grad_in,
                                  int64_t ld_grad_in, void *stream)
{
    static const char op[] = "tk_softmax_xent_f16_bwd";
    unsigned vec;
    int edge;
    tk_status st = tk__op_need_device(ctx, op);
    if (st == TK_OK)
        st = check_shape(ctx, op, rows, cols);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_s", d_s, 2);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_g", d_g, 2);
    if (st == TK_OK)
        st = tk__op_check_ptr(ctx, op, "d_grad_in", d_grad_in, 2);
    if (st == TK_OK)
        st = tk__op_resolve_ld(ctx, op, "ld_s", &ld_s, cols);
    if (st == TK_OK)
        st = tk__op_resolve_ld(ctx, op, "ld_g", &ld_g, cols);
    if (st == TK_OK)
        st = tk__op_resolve_ld(ctx, op, "ld_grad_in", &ld_grad_in, cols);
    if (st == TK_OK)
        st = check_extent(ctx, op, "rows x ld_s", rows, ld_s);
    if (st == TK_OK)
        st = check_extent(ctx, op, "rows x ld_g", rows, ld_g);
    if (st == TK_OK)
        st = check_extent(ctx, op, "rows x ld_grad_in", rows, ld_grad_in);
    if (st != TK_OK)
        return st;
    {
        const void *ptrs[3] = {d_s, d_g, d_grad_in};
        const int64_t lds[3] = {ld_s, ld_g, ld_grad_in};
        vec = pick_vec(cols, ptrs, lds, 3, &edge);
    }
    {
        void *args[] = {&d_s, &ld_s, &d_g, &ld_g, &d_grad_in, &ld_grad_in, &rows, &cols};
        return launch(ctx, op, TK_OP_SOFTMAX_XENT_F16_BWD, rows, cols, vec, edge, stream, args);
    }
}

tk_status tk__softmax_precompile(tk_context *ctx, tk_op op, const int64_t *dims,
                                 unsigned *n_compiled, unsigned *n_cached)
{
    /* Packed rows and cudaMalloc-aligned buffers: the variant a plain call
     * on this shape uses. */
    const char *name = tk_op_name(op);
    softmax_plan p;
    tk_kernel_desc d;
    const void *ptrs[1] = {NULL};
    int edge;
    unsigned vec;
    tk_status st = check_shape(ctx, name, dims[0], dims[1]);
    if (st != TK_OK)
        return st;
    vec = pick_vec(dims[1], ptrs, &dims[1], 1, &edge);
    plan_make(tk_context_policy(ctx), op, dims[0], dims[1], vec, edge, target_has_clusters(ctx),
              &p);
    d = plan_desc(&p);
    return tk__op_kernel(ctx, &d, NULL, n_compiled, n_cached);
}

void tk__softmax_plan_text(tk_op op, tk_policy policy, int64_t rows, int64_t cols,
                           const int64_t *lds, const unsigned *offsets, int n, int clusters,
                           char *buf, size_t size)
{
    /* base pointers offsets[i] halves past a 256-byte boundary, as the
     * allocator's */
    const void *ptrs[3];
    softmax_plan p;
    size_t used = 0;
    int edge;
    if (size == 0)
        return;
    n = n < 1 ? 1 : n > 3 ? 3 : n;
    for (int i = 0; i < n; i++)
        ptrs[i] = (const void *)(uintptr_t)(0x10000u + 2u * offsets[i]);
    const unsigned vec = pick_vec(cols, ptrs, lds, n, &edge);
    plan_make(policy, op, rows, cols, vec, edge, clusters, &p);
    buf[0] = '\0';
    for (size_t i = 0; i < p.n_defs && used < size; i++) {
        const int w = snprintf(buf + used, size - used, "%s%s%s%s", used ? " " : "", p.defs[i].name,
                               p.defs[i].value ? "=" : "", p.defs[i].value ? p.defs[i].value : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
}
