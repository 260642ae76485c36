/*
 * Sorting support of the embedding backward: builds 64-bit keys
 * (row << 32 | q) for the valid queries (~0 for out-of-range indices and for
 * the padding up to a power of two, counted into *bad) and sorts them with a
 * bitonic network: a shared-memory sort of chunks of TK_SORT_L keys, then for
 * each larger stage global passes for the long strides and one shared-memory
 * pass for the strides below TK_SORT_L. Keys are unique, so the order inside
 * each row is ascending q whatever the network does. No defines needed: one
 * compile per target.
 */
#define TK_SORT_L 2048
#define TK_SORT_T 1024

extern "C" __global__ void __launch_bounds__(256)
    tk_embedding_sort_keys(const int *__restrict__ idx, long long Q, long long V, long long P,
                           unsigned long long *__restrict__ keys, unsigned int *bad)
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i >= P)
        return;
    unsigned long long k = ~0ull;
    if (i < Q) {
        const long long r = idx[i];
        if (r >= 0 && r < V)
            k = ((unsigned long long)r << 32) | (unsigned long long)i;
        else if (bad != 0)
            atomicAdd(bad, 1u);
    }
    keys[i] = k;
}

static __device__ __forceinline__ void tk_cas(unsigned long long *s, int i, int p, bool up)
{
    const unsigned long long a = s[i], b = s[p];
    if ((a > b) == up) {
        s[i] = b;
        s[p] = a;
    }
}

/* Sorts each chunk of L keys (L = min(P, TK_SORT_L)) through stage k = L. */
extern "C" __global__ void __launch_bounds__(TK_SORT_T)
    tk_embedding_sort_local(unsigned long long *__restrict__ keys, long long L)
{
    __shared__ unsigned long long s[TK_SORT_L];
    const long long base = (long long)blockIdx.x * L;
    for (int t = threadIdx.x; t < L; t += TK_SORT_T)
        s[t] = keys[base + t];
    __syncthreads();
    for (long long k = 2; k <= L; k <<= 1) {
        for (long long j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < L / 2; t += TK_SORT_T) {
                const int i = (int)((t / j) * 2 * j + t % j);
                tk_cas(s, i, i + (int)j, ((base + i) & k) == 0);
            }
            __syncthreads();
        }
    }
    for (int t = threadIdx.x; t < L; t += TK_SORT_T)
        keys[base + t] = s[t];
}

/* One compare-exchange pass of stage k at stride j >= TK_SORT_L. */
extern "C" __global__ void __launch_bounds__(256)
    tk_embedding_sort_global(unsigned long long *__restrict__ keys, long long P, long long k,
                             long long j)
{
    const long long t = (long long)blockIdx.x * 256 + threadIdx.x;
    if (t >= P / 2)
        return;
    const long long i = (t / j) * 2 * j + t % j;
    const long long p = i + j;
    const unsigned long long a = keys[i], b = keys[p];
    if ((a > b) == ((i & k) == 0)) {
        keys[i] = b;
        keys[p] = a;
    }
}

/* The strides TK_SORT_L / 2 .. 1 of stage k, in shared memory. */
extern "C" __global__ void __launch_bounds__(TK_SORT_T)
    tk_embedding_sort_merge(unsigned long long *__restrict__ keys, long long k)
{
    __shared__ unsigned long long s[TK_SORT_L];
    const long long base = (long long)blockIdx.x * TK_SORT_L;
    for (int t = threadIdx.x; t < TK_SORT_L; t += TK_SORT_T)
        s[t] = keys[base + t];
    __syncthreads();
    for (int j = TK_SORT_L / 2; j > 0; j >>= 1) {
        for (int t = threadIdx.x; t < TK_SORT_L / 2; t += TK_SORT_T) {
            const int i = (t / j) * 2 * j + t % j;
            tk_cas(s, i, i + j, ((base + i) & k) == 0);
        }
        __syncthreads();
    }
    for (int t = threadIdx.x; t < TK_SORT_L; t += TK_SORT_T)
        keys[base + t] = s[t];
}
