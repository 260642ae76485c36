/*
 * Programmatic dependent launch (TK_PDL, NVIDIA sm_90 and later; the host
 * sets it on those targets alone and then launches the kernel with it):
 * included by the kernel sources that the host may launch that way, called
 * before a kernel's first global memory access. It waits for the stream's
 * previous kernel and its memory, then lets the next kernel be launched as
 * soon as every block of this one runs (its blocks wait in their own
 * griddepcontrol.wait). A no-op without TK_PDL and on other targets.
 */
#ifndef TK_PDL_CUH
#define TK_PDL_CUH
static __device__ __forceinline__ void tk_pdl_enter(void)
{
#if defined(TK_PDL) && TK_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif
