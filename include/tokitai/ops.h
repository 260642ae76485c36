/*
 * tokitai-jit operators: the origin system's seven kernels as library calls on
 * device memory, specialised per shape through the engine.
 *
 * Common rules:
 *  - Pointers named d_* are device pointers of the context's device
 *    (hipMalloc / cudaMalloc / tk_mem_alloc / PyTorch). fp16 data is IEEE
 *    binary16 stored as uint16_t bit patterns (or __half).
 *  - Work is enqueued on stream (the caller's hipStream_t / CUstream /
 *    cudaStream_t; NULL: the default stream) and the call returns without
 *    waiting for it.
 *  - Sizes are int64_t and must be > 0. Leading dimensions (ld*) are in
 *    elements; 0 means "packed" (the row length). Index arithmetic is 64-bit.
 *  - Bad input returns a named status (TK_INVALID_ARGUMENT, TK_OVERFLOW,
 *    TK_MISALIGNED, TK_NO_DEVICE...) with a message naming the argument in
 *    tk_context_last_error(), and nothing is enqueued or written.
 *  - Thread-safe as the context is.
 *  - Specialisation: see "Specialisation policies" below.
 *  - fp16 pointers need 2-byte alignment (TK_MISALIGNED otherwise), int32 /
 *    uint32 pointers 4-byte; wider alignment, when present, selects 16-byte
 *    vector variants, and its absence selects narrower ones, never an error.
 *    GEMM operands whose rows do not start on 16-byte boundaries (a
 *    leading dimension that is not a multiple of 8, or a pointer off 16
 *    bytes) are copied, in calls of 2^28 FLOP or more on NVIDIA sm_80+, into
 *    the context's operator workspace with padded rows before the call's
 *    kernel runs (one more launch and a read and a write of that operand,
 *    on the caller's stream); without device memory for the copy the call
 *    runs on the operands as they are.
 *
 * Specialisation policies (tk_config_set_policy) and what each bakes.
 *
 * A kernel is compiled per distinct set of baked values. In a training run
 * some dimensions never change (weights: GEMM N and K, the vocabulary and
 * hidden size) and some change on every step (tokens: GEMM M, the rows of a
 * softmax, the embedding lookups Q; in a mixture-of-experts model the tokens
 * routed to each expert are new at almost every call). Baking a moving
 * dimension costs a compile per value and bought nothing measurable on an
 * H100 (GEMM within 3% either way at the model's shapes).
 *
 *   op                   STABLE (default)   EXACT            GENERIC
 *   gemm_f16_fwd         N, K               M, N, K          -
 *   gemm_f16_grad_a      N, K               M, N, K          -
 *   gemm_f16_grad_b      N, K               M, N, K          -
 *   softmax_f16_fwd      cols               cols             -
 *   softmax_xent_f16_bwd cols               cols             -
 *   embedding_f16_fwd    D                  D                -
 *   embedding_f16_bwd    D                  D                -
 *   (never baked by any policy: softmax rows, embedding V and Q; no kernel
 *   of those ops depends on them)
 *
 * Every policy also bakes what selects the variant: the architecture, the
 * layout (forward / grad_a / grad_b), the alignment class of the pointers and
 * leading dimensions (16-byte vector loads or scalar ones), and the variant
 * chosen from the shape (GEMM: wgmma with TMA on sm_90 or mma.sync, the
 * block tile, split-K or not; softmax: the vector width, threads per row and
 * registers per thread; embedding: vector width and threads per row). For the
 * moving dimension those choices form a few classes (GEMM: a handful of token
 * count ranges per N and K; measured with the stub: 3000 random M in 1..20000
 * for one N, K compiled 5 kernels), so under STABLE and GENERIC a training
 * run compiles a bounded set once, and tk_op_precompile compiles every class
 * of the N and K it is given (the M it is given does not matter).
 *
 * EXACT compiles one kernel per distinct shape, the token count included: in
 * a MoE step that is a compile per expert call (tens of new kernels per
 * step, each 0.1-1 s of compiler time), for no measured gain; use it only
 * when shapes are truly fixed. GENERIC passes every dimension at run time:
 * the fewest kernels (one per variant), and the fallback that serves a call
 * while a specialised kernel is built.
 *
 * Build mode (tk_config_set_build_mode, default TK_BUILD_ASYNC): when the
 * kernel a call prefers is neither in memory nor on disk, the call runs at
 * once on a more generic kernel that is ready (GEMM: the "universal" kernel
 * of its layout, nothing baked, 64x64 mma.sync tiles, no split; softmax and
 * embedding: the GENERIC kernel of the same variant) and the preferred one
 * is compiled by a background worker; later calls use it once it is loaded.
 * The caller waits for a compile only when no usable kernel exists at all
 * (the first GEMM of each layout and alignment class in a process with an
 * empty cache; a softmax or embedding variant seen for the first time); the
 * tier shipped with the library holds the GEMM and embedding fallbacks for
 * the targets it was built for (tk_op_precompile_fallbacks), so those wait
 * for a read from disk instead.
 * Results of the fallback and the specialised kernel agree within the op's
 * tolerance (the same arithmetic in another tile order). tk_context_stats
 * counts fallback calls, background builds and the time callers waited;
 * tk_context_wait_builds waits for pending builds. TK_BUILD_SYNC compiles on
 * the caller's thread, always.
 *
 * Workspace. The GEMMs that split K (fp32 partials, then a reduce kernel)
 * and the embedding backward (its sort keys) use device scratch memory the
 * context allocates and keeps: one buffer per (context, stream), grown when a
 * call needs more (after a sync of that stream, to the need rounded up to a
 * power of two, at least 1 MiB), never shrunk, freed by tk_context_destroy.
 * A loop that repeats its shapes allocates nothing after its first pass; a
 * stream's buffer stays within the largest of 1 MiB, 64 MiB (GEMM split-K:
 * a shape whose partials would need more is not split) and
 * 8 x 2^ceil(log2 Q) bytes (embedding backward with Q lookups).
 * tk_context_stats reports workspace_bytes, workspace_peak and
 * workspace_allocs. The other ops use none.
 */
#ifndef TOKITAI_OPS_H
#define TOKITAI_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tokitai/tokitai.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ GEMM */

/* C[M,N] (fp32) = A[M,K] (fp16) x B[K,N] (fp16), fp32 accumulation.
 * Row-major; lda >= K, ldb >= N, ldc >= N (0: packed). */
TK_API tk_status tk_gemm_f16_fwd(tk_context *ctx, int64_t M, int64_t N, int64_t K,
                                 const void *d_A, int64_t lda, const void *d_B, int64_t ldb,
                                 float *d_C, int64_t ldc, void *stream);

/* grad_A[M,K] (fp16) = grad_C[M,N] (fp16) x B^T, B stored [K,N].
 * ldgc >= N, ldb >= N, ldga >= K (0: packed). fp32 accumulation. */
TK_API tk_status tk_gemm_f16_grad_a(tk_context *ctx, int64_t M, int64_t N, int64_t K,
                                    const void *d_grad_C, int64_t ldgc, const void *d_B,
                                    int64_t ldb, void *d_grad_A, int64_t ldga, void *stream);

/* grad_B[K,N] (fp16) = A^T x grad_C, A stored [M,K], grad_C [M,N].
 * lda >= K, ldgc >= N, ldgb >= N (0: packed). fp32 accumulation. */
TK_API tk_status tk_gemm_f16_grad_b(tk_context *ctx, int64_t M, int64_t N, int64_t K,
                                    const void *d_A, int64_t lda, const void *d_grad_C,
                                    int64_t ldgc, void *d_grad_B, int64_t ldgb, void *stream);

/* --------------------------------------------------------------- softmax */

/* out[r,:] = softmax(in[r,:]) over cols, fp16 in and out, fp32 arithmetic,
 * numerically stable (max subtracted). ld_in, ld_out >= cols (0: packed). */
TK_API tk_status tk_softmax_f16_fwd(tk_context *ctx, int64_t rows, int64_t cols, const void *d_in,
                                    int64_t ld_in, void *d_out, int64_t ld_out, void *stream);

/* Softmax + cross-entropy backward:
 * grad_in[r,c] = s[r,c] * (g[r,c] - sum_j g[r,j] * s[r,j]); s = softmax
 * output, g = upstream gradient; fp16, fp32 arithmetic. All ld >= cols. */
TK_API tk_status tk_softmax_xent_f16_bwd(tk_context *ctx, int64_t rows, int64_t cols,
                                         const void *d_s, int64_t ld_s, const void *d_g,
                                         int64_t ld_g, void *d_grad_in, int64_t ld_grad_in,
                                         void *stream);

/* ------------------------------------------------------------- embedding */

/* out[q,:] = weight[idx[q],:] for q < Q; weight is [V,D] fp16, idx int32.
 * Rows whose index is outside [0,V) are written as zeros and never read.
 * d_bad_count: optional device uint32 to which the number of out-of-range
 * indices is added (NULL: not counted). */
TK_API tk_status tk_embedding_f16_fwd(tk_context *ctx, int64_t V, int64_t D, const void *d_weight,
                                      int64_t Q, const int32_t *d_idx, void *d_out,
                                      uint32_t *d_bad_count, void *stream);

/* Embedding backward flags. */
#define TK_EMBEDDING_DETERMINISTIC 1u /* identical bits across runs */

/* grad_weight[idx[q],:] += grad_out[q,:] for q < Q, fp16 in/out. Contributions
 * to one row are summed in fp32 and rounded to fp16 once, so the result does
 * not drift with the order of updates beyond that final rounding.
 * Out-of-range indices are ignored (and counted into d_bad_count if given).
 * With TK_EMBEDDING_DETERMINISTIC the summation order is fixed (ascending q).
 * Uses the context's workspace on stream (8 x 2^ceil(log2 Q) bytes; see
 * "Workspace" above). */
TK_API tk_status tk_embedding_f16_bwd(tk_context *ctx, int64_t V, int64_t D, void *d_grad_weight,
                                      int64_t Q, const int32_t *d_idx, const void *d_grad_out,
                                      unsigned flags, uint32_t *d_bad_count, void *stream);

/* -------------------------------------------------- operator identities */

typedef enum tk_op {
    TK_OP_GEMM_F16_FWD = 0,
    TK_OP_GEMM_F16_GRAD_A = 1,
    TK_OP_GEMM_F16_GRAD_B = 2,
    TK_OP_SOFTMAX_F16_FWD = 3,
    TK_OP_SOFTMAX_XENT_F16_BWD = 4,
    TK_OP_EMBEDDING_F16_FWD = 5,
    TK_OP_EMBEDDING_F16_BWD = 6,
    TK_OP_COUNT = 7
} tk_op;

/* "gemm_f16_fwd", ... ; NULL for an unknown op. Static. */
TK_API const char *tk_op_name(tk_op op);
/* Parses an op name; TK_NOT_FOUND for an unknown one. */
TK_API tk_status tk_op_from_name(const char *name, tk_op *out);
/* Number of dims an op's shape has and their names, e.g. gemm: 3 "M,N,K";
 * softmax: 2 "rows,cols"; embedding: 3 "V,D,Q". Static string. */
TK_API const char *tk_op_dims(tk_op op, int *n_dims);

/* Compiles (or finds cached) every kernel op would use for the shape on the
 * context's target, under the context's policy, without running anything:
 * the precompile path. Works on an offline-target context. n_compiled /
 * n_cached may be NULL. */
TK_API tk_status tk_op_precompile(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                                  unsigned *n_compiled, unsigned *n_cached);

/* Compiles (or finds cached) the fallback kernels of op on the context's
 * target: the kernels that serve a call, whatever its shape, layout and
 * alignment, while its own kernel is built (TK_BUILD_ASYNC; see "Build
 * mode" above). op is one operator, or TK_OP_COUNT for all of them. They
 * are the same under every policy. Works on an offline-target context.
 * n_compiled / n_cached (may be NULL) count each operator's kernels once (a
 * kernel two operators share counts for both).
 *
 *   GEMM (each op): the universal kernel of each alignment class (operands
 *     16-byte aligned or not, output pairs aligned or not): 4 on NVIDIA
 *     sm_80 and later, 1 below sm_80 and on AMD; on sm_90 also the fast
 *     fallbacks (the TMA kernel, M, N, K at run time), 128 and 256 columns
 *     wide, for each output alignment (unaligned, paired, TMA-stored): 6.
 *     The forward's set also holds the staging copy of unaligned operands
 *     (NVIDIA sm_80 and later), which the three ops share. sm_90: 31
 *     kernels for the three ops; sm_80: 13.
 *   embedding forward: the GENERIC kernel of every variant (vector width
 *     1, 2, 4, 8 x threads per row 1..256): 36; backward: the GENERIC
 *     gather of every variant (4 x 4) and the 4 sort kernels: 20.
 *   softmax forward and backward: none (their fallback is the GENERIC
 *     kernel of the call's variant and row-length bucket: too many to
 *     compile ahead; each is compiled at its first use).
 *
 * The build ships them precompiled for the targets of CMake's
 * TK_SHIPPED_ARCHS, in the read-only tier tk_cache_shipped_tier finds;
 * `tokitai-jit --precompile --fallbacks` calls this. */
TK_API tk_status tk_op_precompile_fallbacks(tk_context *ctx, tk_op op, unsigned *n_compiled,
                                            unsigned *n_cached);

/* ---------------------------------------------------------------- tuning */

/* One candidate's time (tk_tune_report.timed). */
typedef struct tk_tune_timing {
    char config[64];
    double us;
} tk_tune_timing;

/* What tk_op_tune measured and kept. A sized struct: set struct_size first
 * (TK_STRUCT_INIT). */
typedef struct tk_tune_report {
    size_t struct_size;
    char record[128];    /* the shape class: "gemm_f16_fwd N=2816 K=1024 M<=4096" */
    char chosen[64];     /* the configuration kept, e.g. "tma bn=256 persist=1 epi=1 split=1" */
    char heuristic[64];  /* the configuration the heuristics choose without a record */
    double chosen_us;    /* device time per call of each, microseconds */
    double heuristic_us;
    int64_t timed_m;     /* the M it was timed at: the class's largest */
    unsigned candidates; /* configurations timed */
    unsigned compiled;   /* kernels compiled for them (the rest were cached) */
    unsigned rejected;   /* faster candidates dropped: output not the heuristics' */
    tk_tune_timing timed[128]; /* every candidate timed (the first `candidates`), in order */
    int stored;          /* 1: written to the cache; 0: in force for this context only */
    /* Appended fields (a caller whose struct_size ends before them does not
     * get them). tk_op_tune also times the class half way down its M range,
     * so that a record does not trade the token counts below its largest
     * for that one: mid_m is that M (0: timed at timed_m only, as
     * TOKITAI_JIT_TUNE=auto does on the caller's call), chosen_mid_us and
     * heuristic_mid_us the kept configuration's and the heuristics' own plan
     * of mid_m there, timed_mid_us[i] timed[i]'s (< 0: it does not fit
     * mid_m). The kept configuration is the one of least geometric-mean time
     * over both points relative to the heuristics; "heuristics" (chosen)
     * when none gains 3%: the record then leaves every M of the class to
     * the heuristics. */
    int64_t mid_m;
    double chosen_mid_us;
    double heuristic_mid_us;
    double timed_mid_us[128];
} tk_tune_report;

/* Tunes the shape class of dims for op on the context's device: compiles
 * every candidate configuration (in parallel), times each on random operands
 * (each launch on the next of up to 8 copies, as many as make consecutive
 * launches' operands exceed L2, so that they come from device memory; at
 * most 2 GiB of them; "auto" below times on the call's own operands)
 * with device events (warm-up runs, then the best of three batches of ~0.5
 * ms), and stores the fastest as a tuning record (the heuristics' own
 * configuration unless another is at least 3% faster) as a line for the
 * class of M (16-row steps to 128, 128-row steps to 8192, 1024-row steps to
 * 32768, then octaves) in the cache entry of the op's (N, K) family, keyed
 * also by backend, target, compiler and library version. Later calls of
 * the class (any process using that cache, a bundle or the remote tier) use
 * the record instead of the heuristics; precompile compiles its kernel.
 * Without a record the heuristics choose. Only the GEMM ops have
 * configurations to tune (TK_UNSUPPORTED for the others, and on targets with
 * one configuration: AMD, NVIDIA below sm_80); needs a device. Every
 * configuration computes the same fp32 products; split-K only reorders the
 * sums, within the op's tolerance. The winner's output is compared with the
 * heuristics' before it is kept (a mismatch drops it for the next fastest).
 *
 * $TOKITAI_JIT_TUNE: "off" ignores records (heuristics only); "auto" tunes
 * a class at its first call that has no record, on that call's operands and
 * stream: the call then costs the candidates' compiles (seconds, once per
 * kernel and cache), a few milliseconds of timing and a stream
 * synchronisation; the default uses records where they exist. */
TK_API tk_status tk_op_tune(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                            tk_tune_report *out);

/* -------------------------------------------------------- CPU references */

/* IEEE binary16 <-> binary32, round-to-nearest-even, subnormals, infinities
 * and NaN handled. */
TK_API float tk_f16_to_f32(uint16_t h);
TK_API uint16_t tk_f32_to_f16(float f);

/* References on host memory, packed row-major, fp32 (or wider) accumulation.
 * They return TK_INVALID_ARGUMENT / TK_OVERFLOW for bad sizes or NULL. */
TK_API tk_status tk_ref_gemm_f16_fwd(int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                     const uint16_t *B, float *C);
TK_API tk_status tk_ref_gemm_f16_grad_a(int64_t M, int64_t N, int64_t K, const uint16_t *grad_C,
                                        const uint16_t *B, uint16_t *grad_A);
TK_API tk_status tk_ref_gemm_f16_grad_b(int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                        const uint16_t *grad_C, uint16_t *grad_B);
TK_API tk_status tk_ref_softmax_f16_fwd(int64_t rows, int64_t cols, const uint16_t *in,
                                        uint16_t *out);
TK_API tk_status tk_ref_softmax_xent_f16_bwd(int64_t rows, int64_t cols, const uint16_t *s,
                                             const uint16_t *g, uint16_t *grad_in);
/* *n_bad (may be NULL) receives the number of out-of-range indices. */
TK_API tk_status tk_ref_embedding_f16_fwd(int64_t V, int64_t D, const uint16_t *weight, int64_t Q,
                                          const int32_t *idx, uint16_t *out, uint64_t *n_bad);
TK_API tk_status tk_ref_embedding_f16_bwd(int64_t V, int64_t D, uint16_t *grad_weight, int64_t Q,
                                          const int32_t *idx, const uint16_t *grad_out,
                                          uint64_t *n_bad);

/* ------------------------------------------------------------ checked run */

/* The report of one checked run (the origin system's report). Strings are
 * owned by the report: release with tk_check_report_free. A sized struct: set
 * struct_size first (TK_STRUCT_INIT); string fields beyond the caller's size
 * are not allocated. */
typedef struct tk_check_report {
    size_t struct_size;
    tk_op op;
    int64_t dims[4];
    int n_dims;
    uint64_t seed;
    double max_abs_error;
    double max_rel_error;
    double tolerance_abs; /* pass when every |got - want| <= abs + rel * |want| */
    double tolerance_rel;
    int passed;
    uint64_t bad_indices; /* embedding: out-of-range indices seen by the kernel */
    double kernel_ms;     /* device time of the op, measured with events */
    tk_origin origin;     /* memory, disk or fresh compile (of the first kernel) */
    double compile_ms;    /* when origin is TK_ORIGIN_COMPILED */
    char *source_fingerprint;
    char *compiler;
    char *cache_key;
    char *device;
    char *arch;
    char *policy;
    /* Build mode (tk_build_mode) during the first, untimed run: calls served
     * by a fallback kernel, background builds pending right after it and done
     * before the timed run (which waits for them), time the run waited for
     * compiles. Both runs' outputs are checked. */
    uint64_t fallback_calls;
    uint64_t builds_done;
    uint64_t builds_pending;
    double wait_ms;
} tk_check_report;

TK_API void tk_check_report_free(tk_check_report *report);

/* Generates random inputs from seed (not zeros), uploads them, runs op,
 * downloads, compares with the CPU reference and fills *out. Returns TK_OK when
 * the run happened, whether it passed or not (see out->passed); TK_NO_DEVICE
 * on a context without a device. */
TK_API tk_status tk_check_run(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                              uint64_t seed, tk_check_report *out);

/* The same on caller-supplied host arrays, for one op: inputs are uploaded,
 * the op runs, the output is written to the host array and compared with the
 * reference. gemm fwd: in0=A, in1=B, out=C (float). grad_a: in0=grad_C,
 * in1=B. grad_b: in0=A, in1=grad_C. softmax: in0=input. xent: in0=s, in1=g.
 * embedding fwd: in0=weight, idx, out. embedding bwd: in0=grad_weight (initial),
 * idx, in1=grad_out, out=updated grad_weight. */
TK_API tk_status tk_check_run_host(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                                   const void *in0, const void *in1, const int32_t *idx, void *out,
                                   tk_check_report *report);

/* Markdown (default) or JSON rendering, malloc'd, caller frees with free(). */
TK_API char *tk_check_report_markdown(const tk_check_report *report);
TK_API char *tk_check_report_json(const tk_check_report *report);

#ifdef __cplusplus
}
#endif

#endif /* TOKITAI_OPS_H */
