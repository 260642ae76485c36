"""Shared pieces of the ring probes (scripts/bulk-stream.py, scripts/tma-stream.py):
the mbarrier helpers their CUDA sources start with, and their timing."""
import cupy as cp

# Device helpers: shared-memory address, mbarrier init / expect-tx / wait on
# a parity / arrive on the same barrier of another block of the cluster.
MBARRIER_SRC = r"""
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(unsigned b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_expect(unsigned b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory"); }
__device__ __forceinline__ void bar_wait(unsigned b, unsigned ph) {
    asm volatile("{\n.reg .pred p;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W_%=;\n}"
                 :: "r"(b), "r"(ph) : "memory"); }
__device__ __forceinline__ void bar_arrive_cta(unsigned b, unsigned cta) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}" :: "r"(b), "r"(cta) : "memory"); }
// The ring's barriers at bars: full[s] (one arrival, the producer's) at
// bars + 8 s, empty[s] (`empty` arrivals) at bars + 8 (stages + s); set up by
// thread 0, then every thread of the cluster passes the cluster barrier.
__device__ __forceinline__ void ring_init(unsigned bars, int stages, unsigned empty) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            bar_init(bars + 8 * s, 1);
            bar_init(bars + 8 * (stages + s), empty);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
// The producer's step it: waits until the stage's last use is released,
// expects `bytes` on its full barrier and returns that barrier.
__device__ __forceinline__ unsigned ring_produce(unsigned bars, int stages, int it, unsigned bytes) {
    const int s = it % stages;
    if (it >= stages)
        bar_wait(bars + 8 * (stages + s), ((it / stages) - 1) & 1);
    bar_expect(bars + 8 * s, bytes);
    return bars + 8 * s;
}
"""


def median_seconds(fn, grid, block, args, smem, reps=5):
    """One warm-up launch, then the median of `reps` timed ones (seconds)."""
    fn(grid, block, args, shared_mem=smem)
    times = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        fn(grid, block, args, shared_mem=smem)
        e1.record()
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    return sorted(times)[len(times) // 2]
