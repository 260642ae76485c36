// fp16 GEMM: device helpers every kernel family uses (split-K range,
// baked dimensions, block-to-tile order).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

// Split-K share of block row blockIdx.y: K tiles [*kt0, *kt0 + *kt) of the
// kt_all. gridDim.y == 1 gives the whole range.
__device__ __forceinline__ void tk_gemm_k_range(int kt_all, int *kt0, int *kt)
{
    const int per = (kt_all + (int)gridDim.y - 1) / (int)gridDim.y;
    const int first = (int)blockIdx.y * per;
    const int n = kt_all - first;
    *kt0 = first;
    *kt = n < per ? (n < 0 ? 0 : n) : per;
}

// The dimensions the specialiser baked in (TK_M, TK_N, TK_K) replace the
// run-time arguments: every entry point starts with this.
__device__ __forceinline__ void tk_gemm_baked(tk_i64 &M, tk_i64 &N, tk_i64 &K)
{
#ifdef TK_M
    M = TK_M;
#endif
#ifdef TK_N
    N = TK_N;
#endif
#ifdef TK_K
    K = TK_K;
#endif
    (void)M, (void)N, (void)K;
}

// Block-to-tile mapping: groups of TK_GROUP_M tile rows walk N together so
// that the A and B panels they share stay in L2.
__device__ __forceinline__ void tk_gemm_tile_of(tk_i64 pid, tk_i64 tiles_m, tk_i64 tiles_n,
                                                tk_i64 *tm, tk_i64 *tn)
{
    const tk_i64 width = (tk_i64)TK_GROUP_M * tiles_n;
    const tk_i64 group = pid / width;
    const tk_i64 first_m = group * TK_GROUP_M;
    tk_i64 gsz = tiles_m - first_m;
    if (gsz > TK_GROUP_M)
        gsz = TK_GROUP_M;
    const tk_i64 in_group = pid - group * width;
    *tm = first_m + in_group % gsz;
    *tn = in_group / gsz;
}
