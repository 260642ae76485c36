// fp16 GEMM: the staging copy (TK_GEMM_PAD) for an operand whose rows do not
// start on 16-byte boundaries (a leading dimension that is not a multiple of
// 8 halves, or a pointer off 16 bytes: d_model 700, GPT-2's 50257), which
// the fast kernels cannot load with 16-byte copies or tensor maps.
// Part of gemm_f16.cu (its defines are documented there), which includes it.
//
// rows x cols halves from src (leading dimension lds, any 2-byte alignment)
// to dst (leading dimension ldd, a multiple of 8; dst 16-byte aligned), the
// columns cols .. ldd - 1 of each row zeroed. A thread per 8 halves of dst:
// 2-byte loads (consecutive threads read consecutive halves: coalesced),
// one 16-byte store. Grid-stride; 64-bit offsets.
extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_pad(const unsigned short *__restrict__ src, tk_i64 lds,
                unsigned short *__restrict__ dst, tk_i64 ldd, tk_i64 rows, tk_i64 cols)
{
    const tk_i64 per_row = ldd / 8;
    const tk_i64 total = rows * per_row;
    for (tk_i64 i = (tk_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (tk_i64)gridDim.x * blockDim.x) {
        const tk_i64 r = i / per_row, c = (i - r * per_row) * 8;
        const unsigned short *s = src + r * lds + c;
        unsigned v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const unsigned lo = c + 2 * e < cols ? s[2 * e] : 0u;
            const unsigned hi = c + 2 * e + 1 < cols ? s[2 * e + 1] : 0u;
            v[e] = lo | (hi << 16);
        }
        uint4 o;
        o.x = v[0];
        o.y = v[1];
        o.z = v[2];
        o.w = v[3];
        *(uint4 *)(dst + r * ldd + c) = o;
    }
}
