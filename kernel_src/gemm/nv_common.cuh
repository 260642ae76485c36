// fp16 GEMM, NVIDIA: shared device helpers (cp.async, ldmatrix,
// mma.sync m16n8k16, the XOR swizzle, tile loads, fp16 packing).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* ======================================================================
 * NVIDIA: mma.sync m16n8k16 (fp16 in, fp32 accumulate), ldmatrix,
 * cp.async multi-stage pipeline, XOR-swizzled shared memory.
 * ==================================================================== */

namespace tkg
{

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                        unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                          unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float *c, const unsigned *a, const unsigned *b)
{
    // Not volatile: a pure register operation, so the compiler may interleave
    // it with the next fragments' ldmatrix.
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows hold
// W chunks. The XOR keeps the 8 rows an ldmatrix reads (same logical chunk)
// in 8 different bank groups, and cp.async writes conflict-free as well.
template <int W> __device__ __forceinline__ unsigned swz(int row, int chunk)
{
    int x;
    if (W >= 8)
        x = row & 7;
    else if (W == 4)
        x = (row >> 1) & 3;
    else if (W == 2)
        x = (row >> 2) & 1;
    else
        x = 0;
    return (unsigned)((row * W + (chunk ^ x)) * 16);
}

__device__ __forceinline__ unsigned short ld_h(const unsigned short *p)
{
    return __ldg(p);
}

// Copies a ROWS x (8*W) tile of 16-bit elements, row r at src + (r0+r)*ld +
// c0, into swizzled shared memory. Elements outside [0,rlim) x [0,clim) are
// zero.
template <int ROWS, int W, int NT, bool ALIGNED>
__device__ __forceinline__ void load_tile(unsigned sdst, const unsigned short *src, tk_i64 ld,
                                          tk_i64 r0, tk_i64 c0, tk_i64 rlim, tk_i64 clim, int tid)
{
    constexpr int CHUNKS = ROWS * W;
#pragma unroll
    for (int i = 0; i < (CHUNKS + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if (CHUNKS % NT != 0 && c >= CHUNKS)
            break;
        const int row = c / W;
        const int ch = c % W;
        const tk_i64 gr = r0 + row;
        const tk_i64 gc = c0 + (tk_i64)ch * 8;
        const unsigned dst = sdst + swz<W>(row, ch);
        if (ALIGNED) {
            tk_i64 rem = clim - gc;
            int bytes = (gr < rlim && rem > 0) ? (rem >= 8 ? 16 : (int)rem * 2) : 0;
            const unsigned short *g = bytes ? src + gr * ld + gc : src;
            cp_async16(dst, g, bytes);
        } else {
            unsigned short v[8];
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = 0;
            if (gr < rlim) {
                const unsigned short *g = src + gr * ld + gc;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (gc + e < clim)
                        v[e] = ld_h(g + e);
            }
            const unsigned w0 = v[0] | ((unsigned)v[1] << 16), w1 = v[2] | ((unsigned)v[3] << 16);
            const unsigned w2 = v[4] | ((unsigned)v[5] << 16), w3 = v[6] | ((unsigned)v[7] << 16);
            asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst), "r"(w0), "r"(w1),
                         "r"(w2), "r"(w3));
        }
    }
}

__device__ __forceinline__ unsigned pack_h2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned short to_h(float f)
{
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ float h2f(unsigned short h)
{
    float r;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"(h));
    return r;
}

} // namespace tkg
