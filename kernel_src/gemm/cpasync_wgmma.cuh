// fp16 GEMM, NVIDIA sm_90a: the wgmma kernel body fed by cp.async
// (TK_WGMMA=1; the pipeline is described in gemm/wgmma.cuh).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace tkw
{

template <int BM, int BN, int BK, int STAGES, bool AK, bool BKM, bool OUT16, bool VEC>
__device__ __forceinline__ void
gemm_body(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, void *C,
          tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc, unsigned char *smem)
{
    constexpr int NT = 256;
    static_assert(BM == 128 && BK == 64 && (BN == 128 || BN == 256) && STAGES >= 3, "wgmma tile");
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int NACC = BN / 2;

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int lane = tid & 31, warp_in_wg = (tid >> 5) & 3;

    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    tk_i64 tm, tn;
    tk_gemm_tile_of((tk_i64)blockIdx.x, tiles_m, tiles_n, &tm, &tn);
    if (tm >= tiles_m)
        return;
    const tk_i64 m0 = tm * BM, n0 = tn * BN;

    // 1024-byte alignment for the swizzle pattern (the host adds the slack).
    const unsigned sbase = (tkg::smem_u32(smem) + 1023u) & ~1023u;
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);

    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i)
        acc[i] = 0.f;

    auto load_stage = [&](int slot, int kt) {
        const tk_i64 k0 = (tk_i64)(kt0 + kt) * BK;
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        if (AK)
            load_tile<BM, BK, NT>(sa, A, lda, m0, k0, M, K, tid);
        else
            load_tile<BK, BM, NT>(sa, A, lda, k0, m0, K, M, tid);
        if (BKM)
            load_tile<BN, BK, NT>(sb, B, ldb, n0, k0, N, K, tid);
        else
            load_tile<BK, BN, NT>(sb, B, ldb, k0, n0, K, N, tid);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < KT)
            load_stage(s, s);
        tkg::cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        tkg::cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        {
            const int nk = kt + STAGES - 2;
            if (nk < KT)
                load_stage(nk % STAGES, nk);
            tkg::cp_async_commit();
        }
        const unsigned sa = sbase + (kt % STAGES) * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        fence_regs<NACC>(acc);
        fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned long long da, db;
            if (AK) // rows of 128 bytes, this warpgroup's 64 rows, k at 32 bytes a step
                da = desc(sa + wg * 64 * 128 + kk * 32, 16, 1024);
            else // 64 k rows per column block of 64 m; block wg; 16 k rows a step
                da = desc(sa + wg * BK * 128 + kk * 16 * 128, BK * 128, 1024);
            if (BKM)
                db = desc(sb + kk * 32, 16, 1024);
            else
                db = desc(sb + kk * 16 * 128, BK * 128, 1024);
            mma<BN, AK ? 0 : 1, BKM ? 0 : 1>(acc, da, db);
        }
        commit();
        wait<1>();
        fence_regs<NACC>(acc);
    }
    wait<0>();
    fence_regs<NACC>(acc);
    tkg::cp_async_wait<0>();

    store_acc_regs<BN, OUT16, VEC>(acc, C, ldc, M, N, m0 + wg * 64 + warp_in_wg * 16 + (lane >> 2),
                                   n0, lane);
}

} // namespace tkw
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
