// fp16 GEMM, NVIDIA: the split-K reduction kernel (TK_GEMM_REDUCE).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* ======================================================================
 * Split-K reduction (NVIDIA): C[r,c] = sum over s = 0..splits-1, in that
 * order, of W[s][r][c] (fp32 workspace, M rows of N), converted to the output
 * type (TK_OUT_F16) and stored with ldc. The fixed order gives the same bits
 * on every run. Four consecutive elements per thread, grid-stride; where N
 * is a multiple of 4 they lie in one row, every split's four are loaded
 * before the sum (up to TK_REDUCE_UNROLL loads in flight) and C takes one
 * 16-byte (fp32) or 8-byte (fp16) store when its alignment allows.
 * On sm_90 the host may launch it with programmatic dependent launch after
 * the split kernel: griddepcontrol.wait then holds it until the partials are
 * written (and is a no-op otherwise). It does not let the next kernel start
 * early (griddepcontrol.launch_dependents): with that, the next GEMM's split
 * grid of one wave ran 1.4x slower (H100, grad_a 1024x50304x1024: 688 ->
 * 505 TF/s; cause not known). */
#ifndef TK_REDUCE_UNROLL
#define TK_REDUCE_UNROLL 8
#endif
template <typename I>
__device__ __forceinline__ void tk_reduce_quads(const float *__restrict__ W, void *C, I M, I N,
                                                I ldc, int splits)
{
    const I total = M * N;
    const I step = (I)gridDim.x * blockDim.x * 4;
    const bool vec = (N & 3) == 0;
#if TK_OUT_F16
    const bool vst = vec && ((unsigned long long)C % 8 == 0) && (ldc & 3) == 0;
#else
    const bool vst = vec && ((unsigned long long)C % 16 == 0) && (ldc & 3) == 0;
#endif
    for (I i = ((I)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < total; i += step) {
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (vec) {
            // i % 4 == 0 and N % 4 == 0: the four share row i / N.
            for (int s0 = 0; s0 < splits; s0 += TK_REDUCE_UNROLL) {
                float4 w[TK_REDUCE_UNROLL];
#pragma unroll
                for (int u = 0; u < TK_REDUCE_UNROLL; ++u)
                    if (s0 + u < splits)
                        asm("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                            : "=f"(w[u].x), "=f"(w[u].y), "=f"(w[u].z), "=f"(w[u].w)
                            : "l"(W + (I)(s0 + u) * total + i));
#pragma unroll
                for (int u = 0; u < TK_REDUCE_UNROLL; ++u)
                    if (s0 + u < splits) {
                        v[0] += w[u].x;
                        v[1] += w[u].y;
                        v[2] += w[u].z;
                        v[3] += w[u].w;
                    }
            }
            const I r = i / N, c = i - r * N;
            if (vst) {
#if TK_OUT_F16
                unsigned short h[4];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h[e]) : "f"(v[e]));
                *(uint2 *)((unsigned short *)C + r * ldc + c) =
                    make_uint2((unsigned)h[0] | ((unsigned)h[1] << 16),
                               (unsigned)h[2] | ((unsigned)h[3] << 16));
#else
                *(float4 *)((float *)C + r * ldc + c) = make_float4(v[0], v[1], v[2], v[3]);
#endif
                continue;
            }
        } else {
            const int n = total - i < 4 ? (int)(total - i) : 4;
            for (int s = 0; s < splits; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (e < n)
                        v[e] += W[(I)s * total + i + e];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (i + e >= total)
                break;
            const I r = (i + e) / N, c = (i + e) - r * N;
#if TK_OUT_F16
            unsigned short h;
            asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v[e]));
            ((unsigned short *)C)[r * ldc + c] = h;
#else
            ((float *)C)[r * ldc + c] = v[e];
#endif
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
    tk_gemm_f16(const float *__restrict__ W, void *C, tk_i64 M, tk_i64 N, tk_i64 ldc, int splits)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    // 32-bit index arithmetic where every index fits (the divisions are the
    // kernel's main cost after the loads)
    if ((tk_i64)splits * M * N + (tk_i64)gridDim.x * blockDim.x * 4 < 0x7fffffffLL &&
        (M - 1) * ldc + N < 0x7fffffffLL)
        tk_reduce_quads<int>(W, C, (int)M, (int)N, (int)ldc, splits);
    else
        tk_reduce_quads<tk_i64>(W, C, M, N, ldc, splits);
