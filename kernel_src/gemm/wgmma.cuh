// fp16 GEMM, NVIDIA sm_90a: warpgroup MMA helpers shared by the cp.async
// and the TMA wgmma kernels (descriptors, the wgmma instruction, tile
// loads, register epilogue).
// Part of gemm_f16.cu (its defines are documented there), which includes it.

/* ======================================================================
 * NVIDIA sm_90a (Hopper): warpgroup MMA (wgmma.mma_async m64nNk16, fp32
 * accumulators in registers), both operands read from shared memory through
 * matrix descriptors in the 128-byte swizzle layout, the transpose bits
 * serving the M-/N-major operands (so NN, NT and TN need no copies).
 * Two consumer warpgroups (256 threads), each owning 64 rows of a
 * 128 x TK_BN tile; all threads also load: cp.async with zero fill at the
 * edges into a TK_STAGES-deep ring of K tiles of 64.
 *
 * Shared-memory layout of one stage (base 1024-byte aligned, the period of
 * the 128-byte swizzle): the operand tile is a set of 64-element-wide
 * column blocks, each ROWS rows of 128 bytes, 16-byte chunk c of row r at
 * r*128 + ((c ^ (r & 7)) * 16). A K-major tile (rows = M or N, 64 k per
 * row) is one block; an M-/N-major tile (rows = 64 k) has BM/64 or BN/64
 * blocks. Descriptors: K-major SBO = 1024 (8-row groups), LBO unused; MN-
 * major LBO = ROWS*128 (next 64-wide block), SBO = 1024 (next 8 k rows).
 *
 * Pipeline per K tile kt: wait for this thread's copies of tile kt, fence
 * the generic-proxy writes for the async proxy, barrier (which also tells
 * every thread that both warpgroups finished the wgmma of tile kt-2, see
 * wait_group<1> below), issue the copies of tile kt+STAGES-2 into the slot
 * of tile kt-2, issue the 4 wgmma of tile kt, commit, wait until at most
 * one wgmma group (this one) is pending.
 * ==================================================================== */
// A CUtensorMap (128 bytes, 64-byte aligned), opaque here.
struct __align__(64) tk_tmap
{
    unsigned long long w[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace tkw
{

__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) |
           ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous MMA's fence and wait.
template <int R> __device__ __forceinline__ void fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < R; ++i)
        asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma.mma_async m64nNk16 (fp32 += fp16 x fp16, both operands from shared
// memory), N any multiple of 8 from 16 to 256: N/2 accumulators per thread,
// as N/16 groups of 8 registers (TK_WG_Lg: the operand numbers of the first
// g groups, TK_WG_Cg: their constraints) and for N % 16 == 8 a half group of
// 4 (TK_WG_HLg, TK_WG_HCg), then the two descriptors and the operands'
// transposition flags. Accumulator 4 j + e belongs to columns 8 j .. 8 j + 7
// whatever N is, so the epilogues walk N / 8 column blocks.
#define TK_WG_G0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define TK_WG_G1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define TK_WG_G2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define TK_WG_G3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define TK_WG_G4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define TK_WG_G5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define TK_WG_G6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define TK_WG_G7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define TK_WG_G8 "%64,%65,%66,%67,%68,%69,%70,%71"
#define TK_WG_G9 "%72,%73,%74,%75,%76,%77,%78,%79"
#define TK_WG_G10 "%80,%81,%82,%83,%84,%85,%86,%87"
#define TK_WG_G11 "%88,%89,%90,%91,%92,%93,%94,%95"
#define TK_WG_G12 "%96,%97,%98,%99,%100,%101,%102,%103"
#define TK_WG_G13 "%104,%105,%106,%107,%108,%109,%110,%111"
#define TK_WG_G14 "%112,%113,%114,%115,%116,%117,%118,%119"
#define TK_WG_G15 "%120,%121,%122,%123,%124,%125,%126,%127"
#define TK_WG_F8(b)                                                                                \
    "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]),      \
        "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])
#define TK_WG_L1 TK_WG_G0
#define TK_WG_C1 TK_WG_F8(0)
#define TK_WG_L2 TK_WG_L1 "," TK_WG_G1
#define TK_WG_C2 TK_WG_C1, TK_WG_F8(8)
#define TK_WG_L3 TK_WG_L2 "," TK_WG_G2
#define TK_WG_C3 TK_WG_C2, TK_WG_F8(16)
#define TK_WG_L4 TK_WG_L3 "," TK_WG_G3
#define TK_WG_C4 TK_WG_C3, TK_WG_F8(24)
#define TK_WG_L5 TK_WG_L4 "," TK_WG_G4
#define TK_WG_C5 TK_WG_C4, TK_WG_F8(32)
#define TK_WG_L6 TK_WG_L5 "," TK_WG_G5
#define TK_WG_C6 TK_WG_C5, TK_WG_F8(40)
#define TK_WG_L7 TK_WG_L6 "," TK_WG_G6
#define TK_WG_C7 TK_WG_C6, TK_WG_F8(48)
#define TK_WG_L8 TK_WG_L7 "," TK_WG_G7
#define TK_WG_C8 TK_WG_C7, TK_WG_F8(56)
#define TK_WG_L9 TK_WG_L8 "," TK_WG_G8
#define TK_WG_C9 TK_WG_C8, TK_WG_F8(64)
#define TK_WG_L10 TK_WG_L9 "," TK_WG_G9
#define TK_WG_C10 TK_WG_C9, TK_WG_F8(72)
#define TK_WG_L11 TK_WG_L10 "," TK_WG_G10
#define TK_WG_C11 TK_WG_C10, TK_WG_F8(80)
#define TK_WG_L12 TK_WG_L11 "," TK_WG_G11
#define TK_WG_C12 TK_WG_C11, TK_WG_F8(88)
#define TK_WG_L13 TK_WG_L12 "," TK_WG_G12
#define TK_WG_C13 TK_WG_C12, TK_WG_F8(96)
#define TK_WG_L14 TK_WG_L13 "," TK_WG_G13
#define TK_WG_C14 TK_WG_C13, TK_WG_F8(104)
#define TK_WG_L15 TK_WG_L14 "," TK_WG_G14
#define TK_WG_C15 TK_WG_C14, TK_WG_F8(112)
#define TK_WG_L16 TK_WG_L15 "," TK_WG_G15
#define TK_WG_C16 TK_WG_C15, TK_WG_F8(120)
// A half group (8 columns, 4 registers) after the first g whole ones, for
// widths of 16 g + 8 (TK_WG_HLg / TK_WG_HCg).
#define TK_WG_F4(b) "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3])
#define TK_WG_HL1 TK_WG_L1 ",%8,%9,%10,%11"
#define TK_WG_HC1 TK_WG_C1, TK_WG_F4(8)
#define TK_WG_HL2 TK_WG_L2 ",%16,%17,%18,%19"
#define TK_WG_HC2 TK_WG_C2, TK_WG_F4(16)
#define TK_WG_HL3 TK_WG_L3 ",%24,%25,%26,%27"
#define TK_WG_HC3 TK_WG_C3, TK_WG_F4(24)
#define TK_WG_HL4 TK_WG_L4 ",%32,%33,%34,%35"
#define TK_WG_HC4 TK_WG_C4, TK_WG_F4(32)
#define TK_WG_HL5 TK_WG_L5 ",%40,%41,%42,%43"
#define TK_WG_HC5 TK_WG_C5, TK_WG_F4(40)
#define TK_WG_HL6 TK_WG_L6 ",%48,%49,%50,%51"
#define TK_WG_HC6 TK_WG_C6, TK_WG_F4(48)
#define TK_WG_HL7 TK_WG_L7 ",%56,%57,%58,%59"
#define TK_WG_HC7 TK_WG_C7, TK_WG_F4(56)
#define TK_WG_HL8 TK_WG_L8 ",%64,%65,%66,%67"
#define TK_WG_HC8 TK_WG_C8, TK_WG_F4(64)
#define TK_WG_HL9 TK_WG_L9 ",%72,%73,%74,%75"
#define TK_WG_HC9 TK_WG_C9, TK_WG_F4(72)
#define TK_WG_HL10 TK_WG_L10 ",%80,%81,%82,%83"
#define TK_WG_HC10 TK_WG_C10, TK_WG_F4(80)
#define TK_WG_HL11 TK_WG_L11 ",%88,%89,%90,%91"
#define TK_WG_HC11 TK_WG_C11, TK_WG_F4(88)
#define TK_WG_HL12 TK_WG_L12 ",%96,%97,%98,%99"
#define TK_WG_HC12 TK_WG_C12, TK_WG_F4(96)
#define TK_WG_HL13 TK_WG_L13 ",%104,%105,%106,%107"
#define TK_WG_HC13 TK_WG_C13, TK_WG_F4(104)
#define TK_WG_HL14 TK_WG_L14 ",%112,%113,%114,%115"
#define TK_WG_HC14 TK_WG_C14, TK_WG_F4(112)
#define TK_WG_HL15 TK_WG_L15 ",%120,%121,%122,%123"
#define TK_WG_HC15 TK_WG_C15, TK_WG_F4(120)
#define TK_WG_MMA(n, regs, da_op, db_op, ta_op, tb_op, ...)                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.f16.f16 {" regs "}, %" #da_op    \
                 ", %" #db_op ", p, 1, 1, %" #ta_op ", %" #tb_op ";\n}\n"                         \
                 : __VA_ARGS__                                                                     \
                 : "l"(da), "l"(db), "n"(TA), "n"(TB))

// Widths of 16 g + 8 (24 to 248): the TMA kernel's 128- and 256-row tiles
// with K-major B and the register epilogue, whose tokens fit such widths
// (TK_BN; the host's gemm config rules).
template <int BN, int TA, int TB>
__device__ __forceinline__ void mma_h(float *d, unsigned long long da, unsigned long long db)
{
    static_assert(BN % 16 == 8 && BN >= 24 && BN <= 248, "wgmma tile width of 16 g + 8");
    if constexpr (BN == 248)
        TK_WG_MMA(248, TK_WG_HL15, 124, 125, 126, 127, TK_WG_HC15);
    else if constexpr (BN == 232)
        TK_WG_MMA(232, TK_WG_HL14, 116, 117, 118, 119, TK_WG_HC14);
    else if constexpr (BN == 216)
        TK_WG_MMA(216, TK_WG_HL13, 108, 109, 110, 111, TK_WG_HC13);
    else if constexpr (BN == 200)
        TK_WG_MMA(200, TK_WG_HL12, 100, 101, 102, 103, TK_WG_HC12);
    else if constexpr (BN == 184)
        TK_WG_MMA(184, TK_WG_HL11, 92, 93, 94, 95, TK_WG_HC11);
    else if constexpr (BN == 168)
        TK_WG_MMA(168, TK_WG_HL10, 84, 85, 86, 87, TK_WG_HC10);
    else if constexpr (BN == 152)
        TK_WG_MMA(152, TK_WG_HL9, 76, 77, 78, 79, TK_WG_HC9);
    else if constexpr (BN == 136)
        TK_WG_MMA(136, TK_WG_HL8, 68, 69, 70, 71, TK_WG_HC8);
    else if constexpr (BN == 120)
        TK_WG_MMA(120, TK_WG_HL7, 60, 61, 62, 63, TK_WG_HC7);
    else if constexpr (BN == 104)
        TK_WG_MMA(104, TK_WG_HL6, 52, 53, 54, 55, TK_WG_HC6);
    else if constexpr (BN == 88)
        TK_WG_MMA(88, TK_WG_HL5, 44, 45, 46, 47, TK_WG_HC5);
    else if constexpr (BN == 72)
        TK_WG_MMA(72, TK_WG_HL4, 36, 37, 38, 39, TK_WG_HC4);
    else if constexpr (BN == 56)
        TK_WG_MMA(56, TK_WG_HL3, 28, 29, 30, 31, TK_WG_HC3);
    else if constexpr (BN == 40)
        TK_WG_MMA(40, TK_WG_HL2, 20, 21, 22, 23, TK_WG_HC2);
    else if constexpr (BN == 24)
        TK_WG_MMA(24, TK_WG_HL1, 12, 13, 14, 15, TK_WG_HC1);
}

template <int BN, int TA, int TB>
__device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db)
{
    static_assert(BN % 8 == 0 && BN >= 16 && BN <= 256, "wgmma tile width");
    if constexpr (BN % 16 == 8)
        mma_h<BN, TA, TB>(d, da, db);
    else if constexpr (BN == 256)
        TK_WG_MMA(256, TK_WG_L16, 128, 129, 130, 131, TK_WG_C16);
    else if constexpr (BN == 240)
        TK_WG_MMA(240, TK_WG_L15, 120, 121, 122, 123, TK_WG_C15);
    else if constexpr (BN == 224)
        TK_WG_MMA(224, TK_WG_L14, 112, 113, 114, 115, TK_WG_C14);
    else if constexpr (BN == 208)
        TK_WG_MMA(208, TK_WG_L13, 104, 105, 106, 107, TK_WG_C13);
    else if constexpr (BN == 192)
        TK_WG_MMA(192, TK_WG_L12, 96, 97, 98, 99, TK_WG_C12);
    else if constexpr (BN == 176)
        TK_WG_MMA(176, TK_WG_L11, 88, 89, 90, 91, TK_WG_C11);
    else if constexpr (BN == 160)
        TK_WG_MMA(160, TK_WG_L10, 80, 81, 82, 83, TK_WG_C10);
    else if constexpr (BN == 144)
        TK_WG_MMA(144, TK_WG_L9, 72, 73, 74, 75, TK_WG_C9);
    else if constexpr (BN == 128)
        TK_WG_MMA(128, TK_WG_L8, 64, 65, 66, 67, TK_WG_C8);
    else if constexpr (BN == 112)
        TK_WG_MMA(112, TK_WG_L7, 56, 57, 58, 59, TK_WG_C7);
    else if constexpr (BN == 96)
        TK_WG_MMA(96, TK_WG_L6, 48, 49, 50, 51, TK_WG_C6);
    else if constexpr (BN == 80)
        TK_WG_MMA(80, TK_WG_L5, 40, 41, 42, 43, TK_WG_C5);
    else if constexpr (BN == 64)
        TK_WG_MMA(64, TK_WG_L4, 32, 33, 34, 35, TK_WG_C4);
    else if constexpr (BN == 48)
        TK_WG_MMA(48, TK_WG_L3, 24, 25, 26, 27, TK_WG_C3);
    else if constexpr (BN == 32)
        TK_WG_MMA(32, TK_WG_L2, 16, 17, 18, 19, TK_WG_C2);
    else if constexpr (BN == 16)
        TK_WG_MMA(16, TK_WG_L1, 8, 9, 10, 11, TK_WG_C1);
}

// Copies a ROWS x COLS tile (COLS contiguous elements per row in global
// memory, COLS % 64 == 0) into the swizzled block layout described above.
// Elements outside [0,rlim) x [0,clim) are zero.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tile(unsigned sdst, const unsigned short *src, tk_i64 ld,
                                          tk_i64 r0, tk_i64 c0, tk_i64 rlim, tk_i64 clim, int tid)
{
    constexpr int W = COLS / 8;
    constexpr int CHUNKS = ROWS * W;
    static_assert(CHUNKS % NT == 0, "tile chunks per thread");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
        const int c = tid + i * NT;
        const int row = c / W;
        const int ch = c % W;
        const tk_i64 gr = r0 + row;
        const tk_i64 gc = c0 + (tk_i64)ch * 8;
        const unsigned dst =
            sdst + (unsigned)((ch >> 3) * ROWS * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
        const tk_i64 rem = clim - gc;
        const int bytes = (gr < rlim && rem > 0) ? (rem >= 8 ? 16 : (int)rem * 2) : 0;
        const unsigned short *g = bytes ? src + gr * ld + gc : src;
        tkg::cp_async16(dst, g, bytes);
    }
}


// Register epilogue shared by the wgmma kernels. Accumulator layout (per warp
// of a warpgroup, 16 rows): register 4j+2h+e holds row rbase + 8h, column
// n0 + 8j + 2*(lane%4) + e. SWAP: the kernel computes C^T (its rows are C's
// columns): element (r, c) goes to C[c * ldc + r].
template <int BN, bool OUT16, bool VEC, bool SWAP = false>
__device__ __forceinline__ void store_acc_regs(const float *acc, void *C, tk_i64 ldc, tk_i64 M,
                                               tk_i64 N, tk_i64 rbase, tk_i64 n0, int lane)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const tk_i64 r = rbase + h * 8;
        if (r >= M)
            continue;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const tk_i64 c = n0 + j * 8 + (lane & 3) * 2;
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (SWAP) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (c + e >= N)
                        break;
                    if (OUT16)
                        ((unsigned short *)C)[(c + e) * ldc + r] = tkg::to_h(e ? v1 : v0);
                    else
                        ((float *)C)[(c + e) * ldc + r] = e ? v1 : v0;
                }
            } else if (OUT16) {
                unsigned short *out = (unsigned short *)C + r * ldc + c;
                if (VEC && c + 1 < N) {
                    *(unsigned *)out = tkg::pack_h2(v0, v1);
                } else {
                    if (c < N)
                        out[0] = tkg::to_h(v0);
                    if (c + 1 < N)
                        out[1] = tkg::to_h(v1);
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

} // namespace tkw
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
