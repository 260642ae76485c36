// fp16 GEMM, NVIDIA sm_80+: the mma.sync kernel body (cp.async pipeline,
// any tile of TK_BM x TK_BN x TK_BK, TK_WM x TK_WN warps).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

namespace tkg
{

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool AK, bool BKM, bool OUT16,
          bool ALIGNED, bool VEC>
__device__ __forceinline__ void
gemm_body(const unsigned short *__restrict__ A, const unsigned short *__restrict__ B, void *C,
          tk_i64 M, tk_i64 N, tk_i64 K, tk_i64 lda, tk_i64 ldb, tk_i64 ldc, unsigned char *smem)
{
    constexpr int NT = WM * WN * 32;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "tile shape");
    // A tile: [BM][BK] when K-major, [BK][BM] otherwise; B tile: [BN][BK]
    // when K-major, [BK][BN] otherwise. W = 16-byte chunks per stored row.
    constexpr int AW = AK ? BK / 8 : BM / 8;
    constexpr int BW = BKM ? BK / 8 : BN / 8;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;

    const tk_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    tk_i64 tm, tn;
    tk_gemm_tile_of((tk_i64)blockIdx.x, tiles_m, tiles_n, &tm, &tn);
    if (tm >= tiles_m)
        return;
    const tk_i64 m0 = tm * BM, n0 = tn * BN;

    const unsigned sbase = smem_u32(smem);
    int kt0, KT;
    tk_gemm_k_range((int)((K + BK - 1) / BK), &kt0, &KT);

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.f;

    auto load_stage = [&](int slot, int kt) {
        const tk_i64 k0 = (tk_i64)(kt0 + kt) * BK;
        const unsigned sa = sbase + slot * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
        if (AK)
            load_tile<BM, AW, NT, ALIGNED>(sa, A, lda, m0, k0, M, K, tid);
        else
            load_tile<BK, AW, NT, ALIGNED>(sa, A, lda, k0, m0, K, M, tid);
        if (BKM)
            load_tile<BN, BW, NT, ALIGNED>(sb, B, ldb, n0, k0, N, K, tid);
        else
            load_tile<BK, BW, NT, ALIGNED>(sb, B, ldb, k0, n0, K, N, tid);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT)
            load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + STAGES - 1;
            if (nk < KT)
                load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const unsigned sa = sbase + (kt % STAGES) * STAGE_BYTES;
        const unsigned sb = sa + A_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned af[MI][4];
            unsigned bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int mrow = wm * WTM + i * 16;
                if (AK) {
                    const int r = mrow + (lane & 15);
                    const int ch = kk * 2 + (lane >> 4);
                    ldsm_x4(sa + swz<AW>(r, ch), af[i][0], af[i][1], af[i][2], af[i][3]);
                } else {
                    const int r = kk * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int ch = (mrow >> 3) + ((lane >> 3) & 1);
                    ldsm_x4_t(sa + swz<AW>(r, ch), af[i][0], af[i][1], af[i][2], af[i][3]);
                }
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int ncol = wn * WTN + j * 8;
                if (BKM) {
                    const int r = ncol + (lane & 7) + ((lane >> 4) << 3);
                    const int ch = kk * 2 + ((lane >> 3) & 1);
                    ldsm_x4(sb + swz<BW>(r, ch), bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
                } else {
                    const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    const int ch = (ncol >> 3) + (lane >> 4);
                    ldsm_x4_t(sb + swz<BW>(r, ch), bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
                }
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma16816(acc[i][j], af[i], bf[j]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: each lane owns pairs of adjacent columns in rows r and r+8.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const tk_i64 r = m0 + wm * WTM + i * 16 + (lane >> 2) + h * 8;
            if (r >= M)
                continue;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const tk_i64 c = n0 + wn * WTN + j * 8 + (lane & 3) * 2;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (OUT16) {
                    unsigned short *out = (unsigned short *)C + r * ldc + c;
                    if (VEC && c + 1 < N) {
                        *(unsigned *)out = pack_h2(v0, v1);
                    } else {
                        if (c < N)
                            out[0] = to_h(v0);
                        if (c + 1 < N)
                            out[1] = to_h(v1);
                    }
                } else {
                    float *out = (float *)C + r * ldc + c;
                    if (VEC && c + 1 < N) {
                        *(float2 *)out = make_float2(v0, v1);
                    } else {
                        if (c < N)
                            out[0] = v0;
                        if (c + 1 < N)
                            out[1] = v1;
                    }
                }
            }
        }
    }
}

} // namespace tkg
