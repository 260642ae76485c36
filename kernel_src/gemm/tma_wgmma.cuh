// fp16 GEMM, NVIDIA sm_90a: the TMA wgmma kernel (TK_WGMMA=2) with its
// forms: swapped, 64- and 256-row tiles, clusters, split-K, persistent,
// stream-K, TMA-store epilogue.
// Part of gemm_f16.cu (its defines are documented there), which includes it.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace tkw
{

/* ---- TMA variant (TK_WGMMA=2): the same MMA and smem layout, loads by the
 * bulk tensor copy engine (cp.async.bulk.tensor.2d, 128-byte swizzle, zero
 * fill outside the tensor done by the hardware) into a ring of stages
 * guarded by full / empty mbarriers; warp-specialised: warpgroup 0 (its
 * registers cut with setmaxnreg) has one thread issue the copies, warpgroups
 * 1-2 (registers raised) run the wgmma and the epilogue. Tensor maps (built
 * on the host with cuTensorMapEncodeTiled) describe the stored operands:
 * K-major A [M,K] box 64 x 128, M-major A [K,M] box 64 x 64 (two per stage),
 * K-major B [N,K] box 64 x BN, N-major B [K,N] box 64 x 64 (BN/64 per stage).
 * Coordinates are 32-bit: the host keeps M, N, K below 2^31. */
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\n.reg .pred p;\nTK_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TK_WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// Arrival on the barrier at the same shared offset in cluster block `cta`
// (this block's own included): the address mapped with mapa, then a remote
// arrive, CTA-scope release as for a local one (what a consumer orders
// before it is its wgmma reads of the stage, already complete).
__device__ __forceinline__ void bar_arrive_cta(unsigned bar, unsigned cta)
{
    asm volatile("{\n.reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster arrives (relaxed: thread 0's
// fence.mbarrier_init orders the barriers' initialisation, the one thing a
// partner needs to see), and later waits: after the wait, every block's
// barriers are initialised. No block leaves while a partner may still
// signal its barriers or its smem: the producer's tail waits for that
// (gemm_loop_tma). A cluster-wide release / acquire barrier at both ends
// instead cost 1.4-2.5 us per call at one round of pairs (H100,
// bench/gemm-measurements.md).
__device__ __forceinline__ void cluster_arrive_relaxed()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
// Tile (tm, tn) of block-work index t. TK_CLUSTER 2: t's pair (t / 2) walks
// the tile rows and pairs of columns like tk_gemm_tile_of, the two blocks of
// a cluster (ranks t % 2) on columns 2 p and 2 p + 1 of one tile row. With
// an odd column count the last pair's second tile does not exist: that
// block still loads its half of A for its partner and runs the main loop on
// a copy of the partner's tile, and stores nothing (*phantom).
// TK_CLUSTER 4: t / 4 walks pairs of tile rows by pairs of columns, the
// ranks t % 4 = 2 rm + rn on row 2 q + rm, column 2 p + rn (a 2 x 2 square:
// rn's pair shares A, rm's pair shares B); a tile past the last row or
// column is a phantom on the last one. TK_CLUSTER_ROWS (TK_CLUSTER 2): the
// pairs are two row tiles of one column (ranks t % 2 on rows 2 q and 2 q +
// 1), sharing B; an odd row count's last pair has a phantom.
__device__ __forceinline__ void tma_tile_of(tk_i64 t, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 *tm,
                                            tk_i64 *tn, bool *phantom)
{
    *phantom = false;
    if (TK_CLUSTER == 1) {
        tk_gemm_tile_of(t, tiles_m, tiles_n, tm, tn);
        return;
    }
    tk_i64 pn;
    if (TK_CLUSTER_ROWS) {
        tk_i64 pm;
        tk_gemm_tile_of(t >> 1, (tiles_m + 1) >> 1, tiles_n, &pm, tn);
        *tm = 2 * pm + (t & 1);
        if (*tm >= tiles_m) {
            *phantom = true;
            *tm = tiles_m - 1;
        }
        return;
    }
    if (TK_CLUSTER == 4) {
        tk_i64 pm;
        tk_gemm_tile_of(t >> 2, (tiles_m + 1) >> 1, (tiles_n + 1) >> 1, &pm, &pn);
        *tm = 2 * pm + ((t >> 1) & 1);
        if (*tm >= tiles_m) {
            *phantom = true;
            *tm = tiles_m - 1;
        }
    } else {
        tk_gemm_tile_of(t >> 1, tiles_m, (tiles_n + 1) >> 1, tm, &pn);
    }
    *tn = 2 * pn + (t & 1);
    if (*tn >= tiles_n) {
        *phantom = true;
        *tn = tiles_n - 1;
    }
}
// First row (column) of tile t of size B along a dimension of `dim`: a last
// tile that would reach past the edge is moved back to end at it instead
// (its start rounded up to a multiple of 8, which keeps the epilogue's
// 16-byte stores aligned and leaves at most 7 rows outside), overlapping the
// tile before it, when the dimension holds a whole tile. The overlap is computed by both tiles from the same operands in the
// same order and stored by both with the same bits. Why: the bulk tensor
// copies of a box mostly outside the tensor are slow. On an H100, fwd M x
// 1024 x 2816 on 128 x 64 tiles took 12.4 us at M = 640 and 768, but 21.5
// us at 641 and 19.8 at 656, where the last tile row's boxes held 1 and 16
// rows of A (bench/gemm-measurements.md).
__device__ __forceinline__ int tile_origin(tk_i64 t, int B, tk_i64 dim)
{
    tk_i64 o = t * B;
    if (o + B > dim && dim >= B)
        o = (dim - B + 7) & ~(tk_i64)7; // <= t * B: that is a multiple of 8 above dim - B
    return (int)o;
}
// First row and column of block-work index t's BM x BN tile (tma_tile_of,
// tile_origin), for the producer and the consumers alike; true for a
// cluster's missing tile.
template <int BM, int BN>
__device__ __forceinline__ bool tma_tile_at(tk_i64 t, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 M,
                                            tk_i64 N, int *m0, int *n0)
{
    tk_i64 tm, tn;
    bool phantom;
    tma_tile_of(t, tiles_m, tiles_n, &tm, &tn, &phantom);
    *m0 = tile_origin(tm, BM, M);
    *n0 = tile_origin(tn, BN, N);
    return phantom;
}
// Blocks (work items) of the TMA kernel's grid: a tile each, pairs of
// column tiles with TK_CLUSTER 2 (row tiles with TK_CLUSTER_ROWS), squares
// of 2 x 2 tiles with 4. A persistent grid of clusters is a multiple of the
// cluster size (the host's): block b takes items b, b + grid, ..., so the
// blocks of a cluster take one cluster's items in step, as many each.
__device__ __forceinline__ tk_i64 tma_grid_tiles(tk_i64 tiles_m, tk_i64 tiles_n)
{
    return TK_CLUSTER == 1   ? tiles_m * tiles_n
           : TK_CLUSTER_ROWS ? ((tiles_m + 1) >> 1) * tiles_n * 2
           : TK_CLUSTER == 2 ? tiles_m * ((tiles_n + 1) >> 1) * 2
                             : ((tiles_m + 1) >> 1) * ((tiles_n + 1) >> 1) * 4;
}
// mask 0: into this block's shared memory; else multicast: written at the
// same shared offset of every cluster block in mask, each block's barrier at
// offset `bar` counting its bytes.
__device__ __forceinline__ void tma_load2d(unsigned dst, const tk_tmap *map, int c0, int c1,
                                           unsigned bar, unsigned short mask = 0)
{
    if (mask == 0)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                     "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                     "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                     : "memory");
}

// fp16 register epilogue with full 32-byte sectors: the accumulator layout
// gives a lane 2 columns of each 8-column block; lanes trade pairs inside
// their quad so that each lane stores 4 consecutive halves (8 bytes), 4 lanes
// a whole 32-byte sector of a row, half as many stores as pair stores.
// Needs C 8-byte aligned and ldc % 4 == 0 (checked by the caller).
template <int BN>
__device__ __forceinline__ void store_acc_h4(const float *acc, unsigned short *C, tk_i64 ldc,
                                             tk_i64 M, tk_i64 N, tk_i64 rbase, tk_i64 n0,
                                             int lane)
{
    const int q = lane & 3;
    const int src0 = (lane & ~3) | ((q & 1) << 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const tk_i64 r = rbase + h * 8;
#pragma unroll
        for (int j = 0; j < BN / 8; j += 2) {
            const unsigned pj = tkg::pack_h2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            const unsigned pk = tkg::pack_h2(acc[4 * (j + 1) + 2 * h], acc[4 * (j + 1) + 2 * h + 1]);
            const unsigned a0 = __shfl_sync(0xffffffffu, pj, src0);
            const unsigned a1 = __shfl_sync(0xffffffffu, pj, src0 + 1);
            const unsigned b0 = __shfl_sync(0xffffffffu, pk, src0);
            const unsigned b1 = __shfl_sync(0xffffffffu, pk, src0 + 1);
            if (r >= M)
                continue;
            const unsigned lo = q < 2 ? a0 : b0, hi = q < 2 ? a1 : b1;
            const tk_i64 c = n0 + (j + (q >> 1)) * 8 + (q & 1) * 4;
            unsigned short *out = C + r * ldc + c;
            if (c + 3 < N) {
                *(uint2 *)out = make_uint2(lo, hi);
            } else {
                const unsigned xs[2] = {lo, hi};
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (c + e < N)
                        out[e] = (unsigned short)(xs[e / 2] >> (16 * (e % 2)));
            }
        }
    }
}

// Bulk tensor store of a staged shared-memory box to global memory (elements
// outside the tensor are not written), and its completion groups.
__device__ __forceinline__ void tma_store2d(const tk_tmap *map, unsigned src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// TMA-store epilogue (TK_EPI_TMA): the tile leaves in chunks of 128 rows x
// 128 bytes (32 fp32 or 64 fp16 columns), each written by the consumers into
// one of two 16 KiB staging buffers after the ring (128-byte swizzle: the
// 8 rows of a warp's store hit 8 different 16-byte columns, no bank
// conflicts), then stored by one thread with the bulk tensor copy engine
// while the next chunk, the next tile's main loop, go on. A buffer is
// rewritten only after the store that read it two chunks ago has read it.
// `chunk` counts chunks across the block's tiles (buffer parity). A width
// that is not a whole number of chunks (grad_a's K-major widths: 176 =
// 2 x 64 + 48 fp16 columns) stores its last BN % CW columns from registers
// (C 16-byte aligned, rows a multiple of 16 bytes apart: the host's c16).
// PP (ping-pong, consume_pp): one warpgroup holds all 128 rows (MI = 2
// blocks of 64, accumulators acc + 64-row block x BN / 2) and stores them
// alone, through its own two staging buffers (stg + cw x 32 KiB), its own
// named barrier and its first thread, while the other warpgroup's main loop
// runs.
template <int BN, bool OUT16, int NACC, bool PP = false>
__device__ __forceinline__ void store_acc_tma(const float (&acc)[NACC], const tk_tmap *mC,
                                              unsigned stg, int &chunk, int m0, int n0, int cw,
                                              int warp_in_wg, int lane, int tid, void *C,
                                              tk_i64 ldc, tk_i64 M, tk_i64 N)
{
    constexpr int ES = OUT16 ? 2 : 4;
    constexpr int CW = 128 / ES; // columns per chunk
    constexpr int NCH = BN / CW, TAIL = BN % CW;
    constexpr int MI = PP ? 2 : 1, NACC1 = BN / 2;
    static_assert(TAIL % 16 == 0, "TMA-store epilogue: a tail of whole 16-column blocks");
    const bool issuer = PP ? (tid & 127) == 0 : tid == 128;
    const int rl = (PP ? 0 : cw * 64) + warp_in_wg * 16 + (lane >> 2);
    const unsigned mine = stg + (PP ? (unsigned)cw * 32768u : 0u);
#pragma unroll
    for (int ch = 0; ch < NCH; ++ch, ++chunk) {
        const unsigned buf = mine + (unsigned)(chunk & 1) * 16384u;
        if (issuer)
            bulk_wait_read<1>();
        if (PP)
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
        else
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = rl + 64 * mi + 8 * h;
#pragma unroll
                for (int jj = 0; jj < CW / 8; ++jj) {
                    const int j = ch * (CW / 8) + jj;
                    const int cb = (jj * 8 + (lane & 3) * 2) * ES; // byte in the chunk's row
                    const unsigned off =
                        buf + (unsigned)(r * 128 + ((((cb >> 4) ^ (r & 7)) << 4) | (cb & 15)));
                    const float v0 = acc[mi * NACC1 + 4 * j + 2 * h];
                    const float v1 = acc[mi * NACC1 + 4 * j + 2 * h + 1];
                    if (OUT16)
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(off),
                                     "r"(tkg::pack_h2(v0, v1))
                                     : "memory");
                    else
                        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(off), "f"(v0),
                                     "f"(v1)
                                     : "memory");
                }
            }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        if (PP)
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
        else
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
        if (issuer) {
            tma_store2d(mC, buf, n0 + ch * CW, m0);
            bulk_commit();
        }
    }
    if constexpr (TAIL > 0) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const tk_i64 r = m0 + rl + 64 * mi;
            if constexpr (OUT16)
                store_acc_h4<TAIL>(acc + mi * NACC1 + NCH * CW / 2, (unsigned short *)C, ldc, M,
                                   N, r, n0 + NCH * CW, lane);
            else
                store_acc_regs<TAIL, false, true>(acc + mi * NACC1 + NCH * CW / 2, C, ldc, M, N,
                                                  r, n0 + NCH * CW, lane);
        }
    }
}

// TMA-store epilogue of swapped tiles (TK_EPI_TMA with TK_SWAP): the tile is
// C^T, its rows C's columns and its columns C's rows. Each consumer
// warpgroup stores its BM / 2 rows on its own: for each 64-row block, each
// box column of CW = 128 / ES of them (fp16: the block, fp32: half of it),
// each 64 of its BN columns, the accumulators go transposed into one of the
// warpgroup's two 8 KiB buffers (64 C rows x 128 bytes, 128-byte swizzle:
// a warp's 2- or 4-byte stores reach 4 C rows at distinct 16-byte columns,
// no bank conflicts), then its first thread stores them as boxes of CW C
// columns x 16 C rows (the host's map) while the warpgroup goes on. A width
// of 16 g + 8 leaves the last chunk 8 C rows past its whole boxes: the
// warpgroup's threads copy those from the buffer to C themselves, 8 bytes
// each, within C's bounds (C 16-byte aligned, rows a multiple of 16 bytes
// apart, as the map needs). A buffer is rewritten only after the
// store that read it two chunks ago has read it (`chunk`, counted across
// the block's tiles: the buffer's parity). fp32: a chunk's rows are those
// of two of the four warps (warp-uniform), the other two only wait.
template <int BM, int BN, bool OUT16, int NACC>
__device__ __forceinline__ void store_acc_tma_t(const float (&acc)[NACC], const tk_tmap *mC,
                                                unsigned stg, int &chunk, int m0, int n0, int cw,
                                                int warp_in_wg, int lane, int tid, void *C,
                                                tk_i64 ldc, tk_i64 M, tk_i64 N)
{
    constexpr int ES = OUT16 ? 2 : 4;
    constexpr int CW = 128 / ES, RCH = 64 / CW;
    constexpr int MI = BM / 128, NACC1 = BN / 2;
    constexpr int TR = 64, NT = (BN + TR - 1) / TR;
    static_assert(BN % 8 == 0, "swapped TMA-store epilogue: C rows in 8s");
    const bool issuer = (tid & 127) == 0;
    const unsigned mine = stg + (unsigned)cw * 16384u;
    const int rw = warp_in_wg * 16 + (lane >> 2); // the thread's row (h = 0) in a 64-row block
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int rc = 0; rc < RCH; ++rc) {
#pragma unroll
            for (int tc = 0; tc < NT; ++tc, ++chunk) {
                const int rows = BN - tc * TR < TR ? BN - tc * TR : TR;
                const unsigned buf = mine + (unsigned)(chunk & 1) * 8192u;
                if (issuer)
                    bulk_wait_read<1>();
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
                if (warp_in_wg * 16 / CW == rc) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int cb = ((rw + 8 * h) % CW) * ES; // byte in a box row
#pragma unroll
                        for (int jj = 0; jj < TR / 8; ++jj) {
                            if (jj * 8 >= rows)
                                break;
                            const int j = tc * (TR / 8) + jj;
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int tr = jj * 8 + (lane & 3) * 2 + e; // C row in the buffer
                                const unsigned off =
                                    buf + (unsigned)(tr * 128 +
                                                     ((((cb >> 4) ^ (tr & 7)) << 4) | (cb & 15)));
                                const float v = acc[mi * NACC1 + 4 * j + 2 * h + e];
                                if (OUT16)
                                    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(off),
                                                 "h"(tkg::to_h(v))
                                                 : "memory");
                                else
                                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(off), "f"(v)
                                                 : "memory");
                            }
                        }
                    }
                }
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
                const int c0 = m0 + cw * (BM / 2) + 64 * mi + rc * CW;
                if (issuer) {
                    for (int b = 0; b < rows / 16; ++b)
                        tma_store2d(mC, buf + (unsigned)b * 2048u, c0, n0 + tc * TR + 16 * b);
                    bulk_commit();
                }
                if (BN % 16 != 0 && tc == NT - 1) {
                    // The last 8 C rows (no whole box): thread ct copies
                    // bytes 8 (ct % 16) .. + 8 of row rows - 8 + ct / 16.
                    const int ct = tid & 127;
                    const int tr = rows - 8 + (ct >> 4), cb = (ct & 15) * 8;
                    unsigned lo, hi;
                    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                                 : "=r"(lo), "=r"(hi)
                                 : "r"(buf + (unsigned)(tr * 128 + ((((cb >> 4) ^ (tr & 7)) << 4) |
                                                                    (cb & 15))))
                                 : "memory");
                    const tk_i64 n = (tk_i64)n0 + tc * TR + tr, m = (tk_i64)c0 + cb / ES;
                    if (n < N && m < M) {
                        char *dst = (char *)C + (n * ldc + m) * ES;
                        if (m + 8 / ES <= M) {
                            asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(dst), "r"(lo),
                                         "r"(hi)
                                         : "memory");
                        } else {
                            // C's last columns: element by element
                            const unsigned long long w = ((unsigned long long)hi << 32) | lo;
#pragma unroll
                            for (int e = 0; e < 8 / ES; ++e)
                                if (m + e < M) {
                                    if (OUT16)
                                        *(unsigned short *)(dst + e * ES) =
                                            (unsigned short)(w >> (16 * e));
                                    else
                                        *(unsigned *)(dst + e * ES) = (unsigned)(w >> (32 * e));
                                }
                        }
                    }
                }
            }
        }
    }
}

// The work of one block of the TMA kernel, as segments (tile, first K step,
// end K step). Whole tiles blockIdx.x, + gridDim.x, ... (one when the grid
// has a block per tile, several on a persistent grid); or, stream-K
// (TK_STREAMK), the block's share [b * total / G, (b + 1) * total / G) of the
// total = tiles x KT K steps in tile-major order: a tile cut by a block
// boundary is begun (K step 0 on) by block b, its "owner", and ended by
// block b + 1, which starts with it. The host makes every share at least KT
// steps long, so a tile spans two blocks at most.
struct tk_work {
    tk_i64 tiles, next, end;
    int KT;
    __device__ __forceinline__ void init(tk_i64 tiles_, int KT_)
    {
        tiles = tiles_;
        KT = KT_;
        if (TK_STREAMK) {
            const tk_i64 total = tiles * KT, g = gridDim.x, b = blockIdx.x;
            next = b * total / g;
            end = (b + 1) * total / g;
        } else {
            next = blockIdx.x;
            end = tiles;
        }
    }
    // The next segment; false when the block's work is done.
    __device__ __forceinline__ bool take(tk_i64 &t, int &k0, int &k1, bool &more)
    {
        if (next >= end)
            return false;
        if (TK_STREAMK) {
            t = next / KT;
            k0 = (int)(next - t * KT);
            const tk_i64 left = end - next;
            k1 = left < (tk_i64)(KT - k0) ? k0 + (int)left : KT;
            next += k1 - k0;
        } else {
            t = next;
            k0 = 0;
            k1 = KT;
            next += gridDim.x;
        }
        more = next < end;
        return true;
    }
};

// Stream-K fix-up area (TK_STREAMK): a flag per block (u64), then a partial
// tile per block (256 x NACC floats, thread-major so each warp's stores and
// loads are contiguous). Block b + 1 writes its partial of the tile it
// shares with block b into slot b + 1 and sets flag b + 1 to `tag` (release);
// block b waits for it (acquire), adds it and stores the tile. The tag
// changes with every launch, so flags need no reset; its high word makes a
// NaN as a float, which no partial sum of finite inputs leaves behind.
__device__ __forceinline__ void sk_signal(unsigned long long *flag, unsigned long long tag)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(flag), "l"(tag) : "memory");
}
__device__ __forceinline__ void sk_wait(const unsigned long long *flag, unsigned long long tag)
{
    unsigned long long v;
    do {
        asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(flag) : "memory");
    } while (v != tag);
}

// The wgmmas of one K step (64) of a ring stage: A at sa, B at sb (the
// producer's layouts), for each 16-deep slice the MI 64-row blocks of A from
// block mb0 on against the same slice of B, accumulators acc + mi * BN / 2.
// The step's descriptors differ from the stage's first ones in the start
// address field alone (address / 16 in the low 14 bits; shared memory lies
// below 256 KiB, so the sum never carries out of it): each is that first
// descriptor plus a constant, where building each from its address cost
// three more instructions per wgmma.
template <int BN, int MI, bool AK, bool BKM>
__device__ __forceinline__ void mma_kstep(float *acc, unsigned sa, unsigned sb, int mb0)
{
    constexpr int BK = 64;
    const unsigned long long db0 = BKM ? desc(sb, 16, 1024) : desc(sb, BK * 128, 1024);
    const unsigned long long da0 =
        AK ? desc(sa + mb0 * 64 * 128, 16, 1024) : desc(sa + mb0 * BK * 128, BK * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        const unsigned long long db = db0 + (unsigned)((BKM ? kk * 32 : kk * 16 * 128) >> 4);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            // 64-row block mb0 + mi of the tile
            const unsigned long long da =
                da0 +
                (unsigned)((AK ? mi * 64 * 128 + kk * 32 : mi * BK * 128 + kk * 16 * 128) >> 4);
            mma<BN, AK ? 0 : 1, BKM ? 0 : 1>(acc + mi * (BN / 2), da, db);
        }
    }
}

// Consumer warpgroups 1-2 of gemm_body_tma: wgmma on each full stage, then
// the epilogue, for each segment of the block's work (tk_work). A function
// of its own so that the producer / consumer split is one if / else
// (setmaxnreg applies per branch). Stage s of the ring holds K step `it`
// (counted across the block's segments) when it % STAGES == s, in phase
// (it / STAGES) & 1. Each consumer warpgroup owns BM / 2 rows of the tile:
// MI = BM / 128 blocks of 64 rows, an m64nBNk16 wgmma each per K step of 16
// (the B operand shared), MI x BN / 2 accumulators per thread. 64-row tiles
// (KS, BM = 64) split the K steps instead: warpgroup c takes the steps kt
// with kt - k0 = c mod 2, the whole 64 x BN tile each (one m64nBNk16 wgmma
// per K step of 16: every stage's A and B read from shared memory once,
// where splitting the columns read A twice), and the two partial tiles are
// summed through the free ring at the end, each warpgroup keeping half of
// the columns for the epilogue. With TK_KS_ONE warpgroup 0 takes every K
// step and hands warpgroup 1 half of the columns the same way (the host's
// choice for tiles wider than 64, tk__gemm_ks_one: 1-10% less time at 64 x
// 80-256 tiles on an H200, where the alternate steps ran the tensor cores
// less busy; narrower tiles lose 2-10% with it, docs/performance-gemm.md).
// Split-K in a cluster (TK_SPLITK 2): the TK_KSPLITS blocks of one tile,
// ranks 0 .. S - 1 of a cluster (1, S, 1), blockIdx.y its K share, sum their
// partials through distributed shared memory and each stores a slice of C.
// A consumer thread's accumulators fall in units of UW columns (16, or 8
// where 16 would leave a block no unit or the width is 16 g + 8) of two
// rows of one 64-row block: UW / 2 accumulators from acc[a]. Every block's
// thread ct holds the same elements of its partial, so the exchange goes
// by thread and needs no layout. Each block
// 1. leaves its whole partial in its own ring (free: both consumer
//    warpgroups are past their last wgmma and the producer past its last
//    copy; a block per tile), unit-major, 16-byte vectors, a warp's 512
//    bytes contiguous;
// 2. tells every other block so (an arrival, release at cluster scope, on
//    its `ready` barrier, S - 1 of them expected) and waits for theirs;
// 3. for its slice of the units, [rank U / S, (rank + 1) U / S), reads the
//    other blocks' partials (ld.shared::cluster) and sums all S in rank
//    order, from 0 on, so the bits are those of the reduce kernel, whose
//    order is the same; stores the slice;
// 4. tells every other block it has read their rings (`done`) and waits
//    for theirs before it leaves, so no block's shared memory goes while
//    another reads it.
// Both barriers are after the ring's full / empty ones (gemm_body_tma
// initialises them, then meets the cluster before any arrival).
// kcl_store's signals: one arrival on the barrier at `bar` in each other
// block of the cluster, release at cluster scope (what the block's consumer
// threads wrote before the bar.sync ahead of it is seen by the waiters),
// and the wait for the S - 1 arrivals on this block's own (its first phase;
// acquire at cluster scope).
template <int S> __device__ __forceinline__ void kcl_arrive_others(unsigned bar, unsigned rank)
{
    for (unsigned q = 0; q < (unsigned)S; ++q)
        if (q != rank)
            asm volatile(
                "{\n.reg .b32 ra;\n"
                "mapa.shared::cluster.u32 ra, %0, %1;\n"
                "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                "r"(q)
                : "memory");
}
__device__ __forceinline__ void kcl_wait(unsigned bar)
{
    asm volatile("{\n.reg .pred p;\nTK_KCL_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n"
                 "@!p bra TK_KCL_WAIT_%=;\n}\n" ::"r"(bar)
                 : "memory");
}
template <int EW, int MB, int NACC1, bool OUT16, bool VEC, bool SWAP, int NACC>
__device__ __forceinline__ void kcl_store(float (&acc)[NACC], unsigned ring, unsigned ready,
                                          void *C, tk_i64 ldc, tk_i64 M, tk_i64 N, tk_i64 rbase,
                                          tk_i64 col0, int lane, int ct)
{
    constexpr int S = TK_KSPLITS;
    constexpr int UW = EW % 16 == 0 && MB * (EW / 16) >= S ? 16 : 8;
    constexpr int PR = EW / UW, UNITS = MB * PR, V = UW / 8; // 16-byte vectors a unit
    static_assert(EW % 8 == 0 && UNITS >= S, "split-K in a cluster: a unit for every block");
    const unsigned rank = cluster_rank(), done = ready + 8;
    const int u0 = (int)(rank * UNITS / S), u1 = (int)((rank + 1) * UNITS / S);
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
    for (int u = 0; u < UNITS; ++u) {
        const int a = (u / PR) * NACC1 + (u % PR) * (UW / 2);
#pragma unroll
        for (int h = 0; h < V; ++h)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                             ring + (unsigned)(((V * u + h) * 256 + ct) * 16)),
                         "f"(acc[a + 4 * h]), "f"(acc[a + 4 * h + 1]), "f"(acc[a + 4 * h + 2]),
                         "f"(acc[a + 4 * h + 3])
                         : "memory");
    }
    asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    if (ct == 0)
        kcl_arrive_others<S>(ready, rank);
    kcl_wait(ready);
#pragma unroll
    for (int u = 0; u < UNITS; ++u) {
        if (u < u0 || u >= u1)
            continue; // (the same for every thread of the block)
        const int a = (u / PR) * NACC1 + (u % PR) * (UW / 2);
        // every other block's share of the unit in flight at once (one
        // round trip to the cluster's shared memory a unit), then the sum
        float w[S][UW / 2];
#pragma unroll
        for (int q = 0; q < S; ++q) {
            if ((unsigned)q == rank)
                continue;
#pragma unroll
            for (int h = 0; h < V; ++h)
                asm volatile("{\n.reg .b32 ra;\n"
                             "mapa.shared::cluster.u32 ra, %4, %5;\n"
                             "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [ra];\n}\n"
                             : "=f"(w[q][4 * h]), "=f"(w[q][4 * h + 1]), "=f"(w[q][4 * h + 2]),
                               "=f"(w[q][4 * h + 3])
                             : "r"(ring + (unsigned)(((V * u + h) * 256 + ct) * 16)), "r"(q)
                             : "memory");
        }
#pragma unroll
        for (int e = 0; e < UW / 2; ++e) {
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < S; ++q) {
                const float x = (unsigned)q == rank ? acc[a + e] : w[q][e];
                v = q == 0 ? x : v + x;
            }
            acc[a + e] = v;
        }
        const tk_i64 r = rbase + 64 * (u / PR), c = col0 + UW * (u % PR);
        if (UW == 16 && !SWAP && OUT16 && VEC && ((unsigned long long)C % 8 == 0) && (ldc % 4 == 0))
            store_acc_h4<UW>(acc + a, (unsigned short *)C, ldc, M, N, r, c, lane);
        else
            store_acc_regs<UW, OUT16, VEC, SWAP>(acc + a, C, ldc, M, N, r, c, lane);
    }
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    if (ct == 0)
        kcl_arrive_others<S>(done, rank);
    kcl_wait(done);
}

template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void consume_tma(unsigned sbase, unsigned bars, int KT, tk_i64 M,
                                            tk_i64 N, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 ldc,
                                            void *C, const tk_tmap *mC, void *skw,
                                            unsigned long long tag)
{
    constexpr bool KS = BM == 64;
    constexpr int BK = 64, MI = KS ? 1 : BM / 128;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int NACC1 = BN / 2, NACC = MI * NACC1;
    // The epilogue's share of a warpgroup: RW rows by EW columns.
    constexpr int RW = KS ? 64 : BM / 2, EW = KS ? BN / 2 : BN;
    static_assert(BM == 64 || BM == 128 || BM == 256, "TMA tile height");
    static_assert(!KS || (!TK_EPI_TMA && !TK_STREAMK && (TK_CLUSTER == 1 || TK_CLUSTER_ROWS)),
                  "64-row tiles: a block per tile (pairs sharing B), register or staged epilogue");
    static_assert(!KS || BN % 16 == 0, "64-row tiles: each warpgroup stores half of the columns");
    static_assert(BM == 128 || ((!TK_EPI_TMA || SWAP) && !TK_STREAMK),
                  "256-row tiles: register or staged epilogue, or swapped TMA-store");
    static_assert(!SWAP || !TK_STREAMK, "swapped tiles: whole tiles (split-K or not)");
    static_assert(TK_CLUSTER == 1 ||
                      ((TK_CLUSTER == 2 || TK_CLUSTER == 4) && !TK_STREAMK && !TK_SPLITK),
                  "clusters of two or four, a block per tile");
    const int tid = threadIdx.x;
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = (tid >> 7) - 1;
    const int lane = tid & 31, warp_in_wg = (tid >> 5) & 3;
    tk_work work;
    work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
    int it = 0, chunk = 0;
    tk_i64 t;
    int k0, k1;
    bool more;
    while (work.take(t, k0, k1, more)) {
        int m0, n0;
        const bool phantom = tma_tile_at<BM, BN>(t, tiles_m, tiles_n, M, N, &m0, &n0);
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            acc[i] = 0.f;
        // KS: this warpgroup's steps are k0 + cw, k0 + cw + 2, ... (with
        // TK_KS_ONE warpgroup 0's all of them, 1's none); step kt is the
        // block's step number it + kt - k0 (the producer's order).
        constexpr bool ONE = KS && TK_KS_ONE;
        const int kstep = KS && !ONE ? 2 : 1;
        const int kfirst = ONE ? (cw == 0 ? k0 : k1) : k0 + (KS ? cw : 0);
        int mine = -1; // the block's step number of this warpgroup's last step
        for (int kt = kfirst; kt < k1; kt += kstep) {
            // unsigned: a stage and a phase without the signed division's
            // fix-ups (i >= 0)
            const unsigned i = (unsigned)(it + (kt - k0));
            const unsigned s = i % STAGES;
            bar_wait(bars + 8 * s, (i / STAGES) & 1);
            const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
            fence_regs<NACC>(acc);
            fence();
            mma_kstep<BN, MI, AK, BKM>(acc, sa, sb, KS ? 0 : cw * MI);
            commit();
            wait<1>(); // this warpgroup's previous step is done: its stage is free
            fence_regs<NACC>(acc);
            if (mine >= 0) {
                // Cluster: every block's copies may write this stage, every
                // block waits; thread r of the warpgroup arrives on block
                // r's barrier, the TK_CLUSTER arrivals one instruction.
                const unsigned empty = bars + 8 * (STAGES + (unsigned)mine % STAGES);
                if (TK_CLUSTER == 1) {
                    if ((tid & 127) == 0)
                        bar_arrive(empty);
                } else if ((tid & 127) < TK_CLUSTER) {
                    bar_arrive_cta(empty, (unsigned)(tid & 127));
                }
            }
            mine = (int)i;
        }
        it += k1 - k0;
        wait<0>();
        fence_regs<NACC>(acc);
        // More work follows: free the last stage for the producer (already
        // loading it); the last segment's stage is never waited for, but
        // in a cluster by every block's producer's tail (gemm_loop_tma).
        if (mine >= 0) {
            const unsigned empty = bars + 8 * (STAGES + (unsigned)mine % STAGES);
            if (TK_CLUSTER > 1) {
                if ((tid & 127) < TK_CLUSTER)
                    bar_arrive_cta(empty, (unsigned)(tid & 127));
            } else if (more && (tid & 127) == 0) {
                bar_arrive(empty);
            }
        }
        if constexpr (KS) {
            // The host gives 64-row tiles a block per tile (no `more`): both
            // warpgroups are past their last wgmma, the producer past its
            // last copy, and the ring is free. Warpgroup 0 keeps columns
            // [0, BN / 2), 1 the rest: each leaves the other half in the ring
            // (thread-major, conflict-free) and adds the half it receives;
            // its half ends in acc[0, NACC / 2). ONE: warpgroup 1 holds
            // nothing; it only takes warpgroup 0's second half.
            constexpr int H = NACC / 2;
            if (more)
                __trap();
            const int ct = tid & 127;
            const unsigned give = sbase + (unsigned)(cw * H * 128 * 4);
            const unsigned take = sbase + (unsigned)((1 - cw) * H * 128 * 4);
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (!ONE || cw == 0) {
#pragma unroll
                for (int e = 0; e < H; ++e) {
                    const float v = cw == 0 ? acc[H + e] : acc[e];
                    asm volatile(
                        "st.shared.f32 [%0], %1;\n" ::"r"(give + (unsigned)((e * 128 + ct) * 4)),
                        "f"(v)
                        : "memory");
                }
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (!ONE || cw == 1) {
#pragma unroll
                for (int e = 0; e < H; ++e) {
                    float v;
                    asm volatile("ld.shared.f32 %0, [%1];\n"
                                 : "=f"(v)
                                 : "r"(take + (unsigned)((e * 128 + ct) * 4))
                                 : "memory");
                    acc[e] = ONE ? v : (cw == 0 ? acc[e] : acc[H + e]) + v;
                }
            }
        }
        if (TK_STREAMK) {
            unsigned long long *flags = (unsigned long long *)skw;
            float *part = (float *)((char *)skw + 8 * (tk_i64)gridDim.x);
            const int ct = tid - 128;
            if (k0 > 0) {
                // The end of a tile block b - 1 owns: hand the partial over.
                float *slot = part + (tk_i64)blockIdx.x * 256 * NACC;
#pragma unroll
                for (int i = 0; i < NACC; ++i)
                    asm volatile("st.global.cg.f32 [%0], %1;\n" ::"l"(slot + i * 256 + ct),
                                 "f"(acc[i])
                                 : "memory");
                __threadfence();
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                if (tid == 128)
                    sk_signal(flags + blockIdx.x, tag);
                continue;
            }
            if (k1 < KT) {
                // Owner of a tile block b + 1 ends: add its partial.
                if (tid == 128)
                    sk_wait(flags + blockIdx.x + 1, tag);
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
                const float *slot = part + ((tk_i64)blockIdx.x + 1) * 256 * NACC;
#pragma unroll
                for (int i = 0; i < NACC; ++i) {
                    float v;
                    asm volatile("ld.global.cg.f32 %0, [%1];\n"
                                 : "=f"(v)
                                 : "l"(slot + i * 256 + ct)
                                 : "memory");
                    acc[i] += v;
                }
            }
        }
        if (phantom)
            continue; // a cluster's missing tile (tma_tile_of): nothing to store
        // This warpgroup's share: RW rows from row0 by EW columns from col0;
        // its first accumulator's row in 64-row block mi: rbase + 64 mi.
        const tk_i64 row0 = m0 + (KS ? 0 : cw * (BM / 2)), col0 = n0 + (KS ? cw * EW : 0);
        const tk_i64 rbase = row0 + warp_in_wg * 16 + (lane >> 2);
        if constexpr (TK_SPLITK == 2) {
            // A block per tile (no `more`): the ring is free for the exchange.
            static_assert(BM * BN * 4 <= STAGES * STAGE_BYTES && !TK_EPI_TMA && !TK_STREAMK,
                          "split-K in a cluster: the fp32 tile fits the ring");
            if (more)
                __trap();
            kcl_store<EW, KS ? 1 : MI, NACC1, OUT16, VEC, SWAP>(
                acc, sbase, bars + 8 * (2 * STAGES), C, ldc, M, N, rbase, col0, lane, tid - 128);
            continue;
        }
        if constexpr (TK_EPI_TMA && SWAP) {
            store_acc_tma_t<BM, BN, OUT16>(acc, mC, sbase + STAGES * STAGE_BYTES, chunk, m0, n0, cw,
                                           warp_in_wg, lane, tid, C, ldc, M, N);
            continue;
        }
        if constexpr (TK_EPI_TMA && !SWAP && BM == 128) {
            store_acc_tma<BN, OUT16>(acc, mC, sbase + STAGES * STAGE_BYTES, chunk, m0, n0, cw,
                                     warp_in_wg, lane, tid, C, ldc, M, N);
            continue;
        }
        constexpr int ES = OUT16 ? 2 : 4;
        // Staging rows (see below): padded so that the stores of a warp hit
        // distinct banks.
        constexpr int STRIDE = SWAP ? RW * ES + 16 : EW * ES + (OUT16 ? 16 : 32);
        constexpr int ROWS = SWAP ? EW : RW;
        constexpr bool STAGE = TK_EPI_SMEM && 2 * ROWS * STRIDE <= STAGES * STAGE_BYTES;
        if (more || !STAGE) {
            // The ring is the producer's (or too small): store from registers.
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                if (!SWAP && OUT16 && VEC && EW % 16 == 0 && ((unsigned long long)C % 8 == 0) &&
                    (ldc % 4 == 0))
                    store_acc_h4<EW>(acc + mi * NACC1, (unsigned short *)C, ldc, M, N,
                                     rbase + 64 * mi, col0, lane);
                else
                    store_acc_regs<EW, OUT16, VEC, SWAP>(acc + mi * NACC1, C, ldc, M, N,
                                                         rbase + 64 * mi, col0, lane);
            }
            continue;
        }
        // The block's last segment: both consumer warpgroups are past their
        // last wgmma (and the producer past its last copy) before either
        // overwrites the ring with its share of the tile, which then leaves
        // as whole 16-byte vectors of C's rows, a warp per 512 bytes.
        // Short-K shapes (grad_b with K = the op's M) are bound by this write:
        // the register layout gives each warp 8 rows x 16-32 bytes per store.
        // Unswapped: the warpgroup's RW rows of EW columns, row padding so
        // that the pair stores of 8 rows hit distinct banks (16 bytes shift
        // 4 banks a row for 4-byte pairs, 32 bytes 8 banks for 8-byte).
        // SWAP: transposed, EW rows (C's rows) of RW columns; a warp's store
        // is 8 consecutive columns of 4 rows 2 apart, which the 16-byte
        // padding puts on distinct banks.
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        const unsigned st = sbase + cw * ROWS * STRIDE;
        const int rl = warp_in_wg * 16 + (lane >> 2);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int j = 0; j < EW / 8; ++j) {
                    const int r = rl + 64 * mi + 8 * h, c = j * 8 + (lane & 3) * 2;
                    const float v0 = acc[mi * NACC1 + 4 * j + 2 * h];
                    const float v1 = acc[mi * NACC1 + 4 * j + 2 * h + 1];
                    if (SWAP) {
                        const unsigned off = st + (unsigned)(c * STRIDE + r * ES);
                        if (OUT16) {
                            asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(off),
                                         "h"(tkg::to_h(v0))
                                         : "memory");
                            asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(off + STRIDE),
                                         "h"(tkg::to_h(v1))
                                         : "memory");
                        } else {
                            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(off), "f"(v0)
                                         : "memory");
                            asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(off + STRIDE), "f"(v1)
                                         : "memory");
                        }
                    } else {
                        const unsigned off = st + (unsigned)(r * STRIDE + c * ES);
                        if (OUT16)
                            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(off),
                                         "r"(tkg::pack_h2(v0, v1))
                                         : "memory");
                        else
                            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(off),
                                         "f"(v0), "f"(v1)
                                         : "memory");
                    }
                }
            }
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
        // Row ROW of the staging holds C row cr0 + ROW from column cc0 on.
        constexpr int COLS = SWAP ? RW : EW; // elements per staging row
        constexpr int CH = COLS * ES / 16, PER = 16 / ES;
        const tk_i64 cr0 = SWAP ? col0 : row0;
        const tk_i64 cc0 = SWAP ? row0 : col0;
        const tk_i64 rlim = SWAP ? N : M, clim = SWAP ? M : N;
        const bool v16 = (SWAP || VEC) && ((unsigned long long)C % 16 == 0) && ((ldc * ES) % 16 == 0);
        for (int i = tid & 127; i < ROWS * CH; i += 128) {
            const int row = i / CH, ch = i % CH;
            const tk_i64 r = cr0 + row, c = cc0 + ch * PER;
            if (r >= rlim)
                break; // rows grow with i
            unsigned x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(st + (unsigned)(row * STRIDE + ch * 16))
                         : "memory");
            char *out = (char *)C + (r * ldc + c) * ES;
            if (v16 && c + PER <= clim) {
                *(uint4 *)out = make_uint4(x0, x1, x2, x3);
            } else {
                const unsigned xs[4] = {x0, x1, x2, x3};
#pragma unroll
                for (int e = 0; e < PER; ++e) {
                    if (c + e >= clim)
                        break;
                    if (OUT16)
                        ((unsigned short *)out)[e] = (unsigned short)(xs[e / 2] >> (16 * (e % 2)));
                    else
                        ((unsigned *)out)[e] = xs[e];
                }
            }
        }
    }
    if (TK_EPI_TMA && (tid & 127) == 0)
        bulk_wait_all(); // the staging buffers live until the stores have read them
}

// Ping-pong consumers (TK_PINGPONG): each consumer warpgroup computes whole
// 128 x BN tiles of its own, the block's tiles j = 0, 1, 2, ... (the
// producer's order, tk_work) going to warpgroup j % 2, so that one
// warpgroup's epilogue runs while the other's wgmmas keep the tensor cores
// busy (the cooperative form has both warpgroups store at once, the tensor
// cores idle meanwhile). Tile j's K step kt is the block's step j * KT + kt
// (every tile has all KT steps: no stream-K); each stage is read by one
// warpgroup, which alone releases it. The main loops take turns (a named
// barrier each way): a warpgroup waits on tile j's stages only once the
// other has seen tile j - 1's last one land, since a parity wait more than a
// whole ring ahead of the barrier's phase would pass on an earlier phase.
// The producer loads tile j + 1 right after tile j, so the next main loop
// finds its first stages full. A warpgroup holds 128 rows (two 64-row wgmmas per K step, B
// shared) by BN columns: BN accumulators a thread, BN <= 192 for registers
// (192 of them, of the 232 that setmaxnreg gives a consumer thread).
// The epilogue stores from registers (8-byte fp16 quads where C allows it),
// SWAP transposed; with TK_EPI_TMA (unswapped) through the warpgroup's own
// staging buffers by the bulk tensor copy engine (store_acc_tma).
template <int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void consume_pp(unsigned sbase, unsigned bars, int KT, tk_i64 M,
                                           tk_i64 N, tk_i64 tiles_m, tk_i64 tiles_n, tk_i64 ldc,
                                           void *C, const tk_tmap *mC)
{
    constexpr int BM = 128, BK = 64, MI = 2;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int NACC1 = BN / 2, NACC = MI * NACC1;
    static_assert(BN <= 192, "ping-pong tiles: BN accumulators a thread, at most 192");
    static_assert(!TK_PINGPONG || (!TK_STREAMK && !TK_SPLITK && TK_CLUSTER == 1),
                  "ping-pong: whole tiles on a persistent grid");
    static_assert(!TK_PINGPONG || !TK_EPI_TMA || !SWAP,
                  "ping-pong: the TMA-store epilogue of unswapped tiles");
    const int tid = threadIdx.x;
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = (tid >> 7) - 1;
    const int lane = tid & 31, warp_in_wg = (tid >> 5) & 3;
    const bool h4 = !SWAP && OUT16 && VEC && BN % 16 == 0 && ((unsigned long long)C % 8 == 0) &&
                    (ldc % 4 == 0);
    tk_work work;
    work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
    tk_i64 t;
    int k0, k1, chunk = 0;
    bool more;
    for (int j = 0; work.take(t, k0, k1, more); ++j) {
        if ((j & 1) != cw)
            continue;
        int m0, n0;
        tma_tile_at<BM, BN>(t, tiles_m, tiles_n, M, N, &m0, &n0); // (no clusters: never phantom)
        float acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            acc[i] = 0.f;
        const int i0 = j * KT;
        // The other warpgroup's main loop of tile j - 1 is past its last
        // wait: every step before i0 has landed, so that this warpgroup's
        // parity waits below are never a whole ring ahead of a stage's
        // barrier (named barriers 4 + w, 256 threads: the other warpgroup
        // arrives, this one waits).
        if (j > 0)
            asm volatile("bar.sync %0, 256;\n" ::"r"(4 + cw) : "memory");
        int mine = -1;
        for (int kt = 0; kt < KT; ++kt) {
            const unsigned i = (unsigned)(i0 + kt); // unsigned as in consume_tma
            const unsigned s = i % STAGES;
            bar_wait(bars + 8 * s, (i / STAGES) & 1);
            const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
            fence_regs<NACC>(acc);
            fence();
            mma_kstep<BN, MI, AK, BKM>(acc, sa, sb, 0);
            commit();
            wait<1>(); // the previous step is done: its stage is free
            fence_regs<NACC>(acc);
            if (mine >= 0 && (tid & 127) == 0)
                bar_arrive(bars + 8 * (STAGES + (unsigned)mine % STAGES));
            mine = (int)i;
        }
        if (more) // the block's next tile is the other warpgroup's: its turn
            asm volatile("bar.arrive %0, 256;\n" ::"r"(5 - cw) : "memory");
        wait<0>();
        fence_regs<NACC>(acc);
        // the last stage too: the other warpgroup's tiles follow in the ring
        if (mine >= 0 && (tid & 127) == 0)
            bar_arrive(bars + 8 * (STAGES + (unsigned)mine % STAGES));
        if constexpr (TK_EPI_TMA && !SWAP) {
            store_acc_tma<BN, OUT16, NACC, true>(acc, mC, sbase + STAGES * STAGE_BYTES, chunk, m0,
                                                 n0, cw, warp_in_wg, lane, tid, C, ldc, M, N);
            continue;
        }
        const tk_i64 rbase = m0 + warp_in_wg * 16 + (lane >> 2);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            if (h4)
                store_acc_h4<BN>(acc + mi * NACC1, (unsigned short *)C, ldc, M, N, rbase + 64 * mi,
                                 n0, lane);
            else
                store_acc_regs<BN, OUT16, VEC, SWAP>(acc + mi * NACC1, C, ldc, M, N,
                                                     rbase + 64 * mi, n0, lane);
        }
    }
    if (TK_EPI_TMA && (tid & 127) == 0)
        bulk_wait_all(); // the staging buffers live until the stores have read them
}

// Producer and consumers of gemm_body_tma once the barriers are set up.
template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void gemm_loop_tma(const tk_tmap *mA, const tk_tmap *mB,
                                              const tk_tmap *mC, void *C, tk_i64 M, tk_i64 N,
                                              tk_i64 ldc, void *skw, unsigned long long tag,
                                              unsigned sbase, unsigned bars, int kt0, int KT)
{
    constexpr int BK = 64;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            tk_work work;
            work.init(tma_grid_tiles(tiles_m, tiles_n), KT);
            const unsigned rank = TK_CLUSTER > 1 ? cluster_rank() : 0u;
            int it = 0;
            tk_i64 t;
            int k0, k1;
            bool more;
            while (work.take(t, k0, k1, more)) {
                int m0, n0;
                tma_tile_at<BM, BN>(t, tiles_m, tiles_n, M, N, &m0, &n0);
                for (int kt = k0; kt < k1; ++kt, ++it) {
                    const unsigned s = (unsigned)it % STAGES;
                    if (it >= STAGES) // the consumers released step it - STAGES
                        bar_wait(bars + 8 * (STAGES + s), ((unsigned)it / STAGES - 1) & 1);
                    const unsigned full = bars + 8 * s;
                    bar_expect(full, STAGE_BYTES); // whole boxes count, zero-filled parts too
                    const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
                    const int kc = (kt0 + kt) * BK;
                    if (TK_CLUSTER > 1 && !TK_CLUSTER_ROWS) {
                        // A in 64-row boxes of 8 KiB (K-major: 64 x 64 boxes,
                        // the host's map), this block's half of them sent
                        // to both blocks of its tile row (ranks 2 rm, 2 rm
                        // + 1); each block's barrier counts all of them.
                        constexpr int PER = BM / 64 / 2;
                        const int rn = (int)(rank & 1u);
                        const unsigned short row = (unsigned short)(3u << (rank & ~1u));
                        for (int b = rn * PER; b < (rn + 1) * PER; ++b) {
                            const int r = m0 + 64 * b;
                            tma_load2d(sa + b * 8192, mA, AK ? kc : r, AK ? r : kc, full, row);
                        }
                    } else if (AK)
                        // boxes of 128 rows (64: the host's map for 64-row tiles)
                        for (int b = 0; b < (BM + 127) / 128; ++b)
                            tma_load2d(sa + b * 128 * 128, mA, kc, m0 + 128 * b, full);
                    else
                        for (int b = 0; b < BM / 64; ++b)
                            tma_load2d(sa + b * BK * 128, mA, m0 + 64 * b, kc, full);
                    if (TK_CLUSTER == 4 || TK_CLUSTER_ROWS) {
                        // B likewise: this block's half sent to both blocks
                        // of its tile column (ranks rn, rn + 2; with
                        // TK_CLUSTER_ROWS ranks 0 and 1). K-major: a box of
                        // BN / 2 rows (the host's map; 1 KiB-aligned in the
                        // stage, BN being a multiple of 16), N-major: half
                        // of the 64-column boxes.
                        const int rm = (int)(TK_CLUSTER_ROWS ? rank : rank >> 1);
                        const unsigned short col =
                            (unsigned short)(TK_CLUSTER_ROWS ? 3u : 5u << (rank & 1u));
                        if (BKM)
                            tma_load2d(sb + rm * (BN / 2) * 128, mB, kc, n0 + rm * (BN / 2), full,
                                       col);
                        else
                            for (int b = rm * (BN / 128); b < (rm + 1) * (BN / 128); ++b)
                                tma_load2d(sb + b * BK * 128, mB, n0 + 64 * b, kc, full, col);
                    } else if (BKM)
                        tma_load2d(sb, mB, kc, n0, full);
                    else
                        for (int b = 0; b < BN / 64; ++b)
                            tma_load2d(sb + b * BK * 128, mB, n0 + 64 * b, kc, full);
                }
            }
            // Cluster: the block leaves only once every block's consumers
            // have released each of its last stages. Then no partner
            // arrives on its barriers any more, and every copy it sent to
            // a partner has landed (that partner's consumers waited for it
            // before their release).
            if (TK_CLUSTER > 1)
                for (int j = it > STAGES ? it - STAGES : 0; j < it; ++j)
                    bar_wait(bars + 8 * (STAGES + j % STAGES), (j / STAGES) & 1);
        }
    } else if constexpr (TK_PINGPONG) {
        static_assert(BM == 128, "ping-pong: 128-row tiles");
        consume_pp<BN, STAGES, AK, BKM, OUT16, VEC, SWAP>(sbase, bars, KT, M, N, tiles_m, tiles_n,
                                                          ldc, C, mC);
    } else {
        consume_tma<BM, BN, STAGES, AK, BKM, OUT16, VEC, SWAP>(sbase, bars, KT, M, N, tiles_m,
                                                               tiles_n, ldc, C, mC, skw, tag);
    }
}

// Dynamic shared memory: STAGES * (BM + BN) * 64 * 2 + 2048 bytes (1 KiB of
// alignment slack, then the barriers), + 32 KiB of staging with TK_EPI_TMA
// (64 KiB with TK_PINGPONG: each warpgroup's own).
// 384 threads. BN a multiple of 64 when B is N-major (its boxes are 64
// columns wide), of 8 when K-major (16 for the forms named below).
template <int BM, int BN, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC, bool SWAP>
__device__ __forceinline__ void gemm_body_tma(const tk_tmap *mA, const tk_tmap *mB,
                                              const tk_tmap *mC, void *C, tk_i64 M, tk_i64 N,
                                              tk_i64 K, tk_i64 ldc, void *skw,
                                              unsigned long long tag, unsigned char *smem)
{
    constexpr int BK = 64;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(BKM ? BN % 8 == 0 : BN % 64 == 0, "TMA tile width");
    // Widths of 16 g + 8 (mma_h): 128- or 256-row tiles stored from
    // registers, the ring or, swapped, the TMA-store epilogue (its last 8 C
    // rows copied by the threads), B whole in each block (the unswapped
    // TMA-store epilogue stores boxes of 16 columns, 64-row tiles and
    // ping-pong split or hold the columns in 16s, a cluster sharing B
    // halves it).
    static_assert(
        BN % 16 == 0 || (BM != 64 && (!TK_EPI_TMA || SWAP) && !TK_PINGPONG && TK_CLUSTER != 4 &&
                         !TK_CLUSTER_ROWS),
        "TMA tile width of 16 g + 8: 128- or 256-row tiles, no unswapped TMA store, B whole");
    static_assert((TK_CLUSTER != 4 && !TK_CLUSTER_ROWS) || BKM || BN % 128 == 0,
                  "B shared: N-major B in an even number of 64-column boxes");
    static_assert(!TK_CLUSTER_ROWS || TK_CLUSTER == 2, "row pairs: clusters of two");
    const int tid = threadIdx.x;
    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const unsigned sbase = (tkg::smem_u32(smem) + 1023u) & ~1023u;
    // full[s] at bars + 8 s (one arrival: the producer's expect_tx), empty[s]
    // at bars + 8 (STAGES + s) (one arrival per consumer warpgroup of every
    // block of the cluster: all of them read what the stage's copies wrote;
    // 64-row tiles and ping-pong: one, the warpgroup whose K step it held).
    const unsigned bars =
        sbase + STAGES * STAGE_BYTES + (TK_EPI_TMA ? (TK_PINGPONG ? 65536u : 32768u) : 0u);
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);
    if (tid == 0) {
        // The tensor maps (kernel parameters) into the descriptor cache
        // before the first copy needs them.
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mA) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mB) : "memory");
        if (TK_EPI_TMA)
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)mC) : "memory");
        for (int s = 0; s < STAGES; ++s) {
            bar_init(bars + 8 * s, 1);
            bar_init(bars + 8 * (STAGES + s), (BM == 64 || TK_PINGPONG ? 1 : 2) * TK_CLUSTER);
        }
        if (TK_SPLITK == 2) { // kcl_store's ready and done: the other blocks' arrivals
            bar_init(bars + 8 * (2 * STAGES), TK_KSPLITS - 1);
            bar_init(bars + 8 * (2 * STAGES + 1), TK_KSPLITS - 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (TK_CLUSTER > 1 || TK_SPLITK == 2) {
        // The host sizes the grid to the pairs (tma_grid_tiles; split-K in
        // a cluster: a block per tile and K share): no block leaves early;
        // the wait is below.
        cluster_arrive_relaxed();
    } else {
        __syncthreads();
        if (!TK_STREAMK && (tk_i64)blockIdx.x >= tiles_m * tiles_n)
            return;
    }
    // With programmatic dependent launch this block may start while the
    // stream's previous kernel finishes: its set-up above touches only
    // shared memory and the parameters (pdl.cuh).
    tk_pdl_enter();
    if constexpr (TK_CLUSTER > 1 || TK_SPLITK == 2)
        cluster_wait();
    gemm_loop_tma<BM, BN, STAGES, AK, BKM, OUT16, VEC, SWAP>(mA, mB, mC, C, M, N, ldc, skw, tag,
                                                             sbase, bars, kt0, KT);
}

} // namespace tkw
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
