/*
 * Checked run: random (or caller's) inputs, upload, run the op, download,
 * compare with the CPU reference, report.
 *
 * Tolerances (pass when every |got - want| <= abs + rel * |want|; NaN where
 * the reference has a number fails):
 *  - gemm_f16_fwd / grad_a / grad_b: abs = 1e-2 * max(1, sqrt(R / 64)),
 *    rel = 1e-2, R the reduction length (K, N, M). fp32 accumulation in a
 *    different order than the double-free reference grows like sqrt(R); the
 *    grads add one fp16 rounding (<= 4.9e-4 relative) covered by rel.
 *  - softmax_f16_fwd: abs 1e-3, rel 1e-2 (fp16 output: both sides round, at
 *    most one ulp apart; stricter than the origin's 1e-2 absolute).
 *  - softmax_xent_f16_bwd: abs 1e-3, rel 1e-2 (dot in fp32 vs double).
 *  - embedding_f16_fwd: exact (abs 0, rel 0): it is a copy. The device's
 *    count of out-of-range indices must equal the reference's.
 *  - embedding_f16_bwd: abs 1e-3, rel 2e-3 (one ulp); the deterministic
 *    order matches the reference, so in practice the bits are equal.
 *
 * Timing: the op runs once to get its kernels (compile / disk / memory,
 * measured from the context's counters), the output is reset, and the
 * second run is timed with device events.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/out_struct.h"
#include "ops/ops_internal.h"

typedef struct check_shape {
    tk_op op;
    int64_t d[3];
    size_t in0_n, in1_n, idx_n, out_n; /* element counts (in1_n / idx_n may be 0) */
    size_t out_elem;                   /* 4 (float) or 2 (fp16) */
    int out_is_in0;                    /* embedding bwd: the output starts as in0 */
} check_shape;

typedef struct check_run_args {
    tk_context *ctx;
    const check_shape *sh;
    void *in0, *in1, *idx, *out;
    uint32_t *bad;
} check_run_args;

static tk_status shape_make(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                            check_shape *sh)
{
    static const char fn[] = "tk_check_run";
    int want = 0;
    const char *names = tk_op_dims(op, &want);
    tk_status st;
    int64_t a, b, c;
    if (names == NULL)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: unknown op %d", fn, (int)op);
    if (dims == NULL || n_dims != want)
        return tk__fail(ctx, TK_INVALID_ARGUMENT, "%s: %s takes %d dims (%s), got %d", fn,
                        tk_op_name(op), want, names, dims == NULL ? 0 : n_dims);
    for (int i = 0; i < n_dims; i++) {
        st = tk__op_check_size(ctx, fn,
                               i == 0   ? "dims[0]"
                               : i == 1 ? "dims[1]"
                                        : "dims[2]",
                               dims[i]);
        if (st != TK_OK)
            return st;
    }
    memset(sh, 0, sizeof *sh);
    sh->op = op;
    for (int i = 0; i < n_dims; i++)
        sh->d[i] = dims[i];
    a = dims[0];
    b = dims[1];
    c = n_dims > 2 ? dims[2] : 1;
    /* Every array below is a product of two dims; 4 bytes covers the widest. */
    if ((st = tk__op_check_product(ctx, fn, "dims[0] x dims[1]", a, b, 4)) != TK_OK ||
        (st = tk__op_check_product(ctx, fn, "dims[0] x dims[2]", a, c, 4)) != TK_OK ||
        (st = tk__op_check_product(ctx, fn, "dims[1] x dims[2]", b, c, 4)) != TK_OK)
        return st;
    sh->out_elem = 2;
    switch (op) {
    case TK_OP_GEMM_F16_FWD: /* M, N, K */
        sh->in0_n = (size_t)(a * c);
        sh->in1_n = (size_t)(c * b);
        sh->out_n = (size_t)(a * b);
        sh->out_elem = 4;
        break;
    case TK_OP_GEMM_F16_GRAD_A:
        sh->in0_n = (size_t)(a * b);
        sh->in1_n = (size_t)(c * b);
        sh->out_n = (size_t)(a * c);
        break;
    case TK_OP_GEMM_F16_GRAD_B:
        sh->in0_n = (size_t)(a * c);
        sh->in1_n = (size_t)(a * b);
        sh->out_n = (size_t)(c * b);
        break;
    case TK_OP_SOFTMAX_F16_FWD:
        sh->in0_n = sh->out_n = (size_t)(a * b);
        break;
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        sh->in0_n = sh->in1_n = sh->out_n = (size_t)(a * b);
        break;
    case TK_OP_EMBEDDING_F16_FWD: /* V, D, Q */
        sh->in0_n = (size_t)(a * b);
        sh->idx_n = (size_t)c;
        sh->out_n = (size_t)(c * b);
        break;
    default: /* TK_OP_EMBEDDING_F16_BWD */
        sh->in0_n = sh->out_n = (size_t)(a * b);
        sh->idx_n = (size_t)c;
        sh->in1_n = (size_t)(c * b);
        sh->out_is_in0 = 1;
        break;
    }
    return TK_OK;
}

static void tolerance(const check_shape *sh, double *abs_tol, double *rel_tol)
{
    double r = 1.0;
    switch (sh->op) {
    case TK_OP_GEMM_F16_FWD:
        r = (double)sh->d[2];
        break;
    case TK_OP_GEMM_F16_GRAD_A:
        r = (double)sh->d[1];
        break;
    case TK_OP_GEMM_F16_GRAD_B:
        r = (double)sh->d[0];
        break;
    case TK_OP_SOFTMAX_F16_FWD:
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        *abs_tol = 1e-3;
        *rel_tol = 1e-2;
        return;
    case TK_OP_EMBEDDING_F16_FWD:
        *abs_tol = 0.0;
        *rel_tol = 0.0;
        return;
    default:
        *abs_tol = 1e-3;
        *rel_tol = 2e-3;
        return;
    }
    *abs_tol = 1e-2 * (r > 64.0 ? sqrt(r / 64.0) : 1.0);
    *rel_tol = 1e-2;
}

static tk_status run_op(void *user)
{
    check_run_args *a = user;
    const check_shape *sh = a->sh;
    const int64_t *d = sh->d;
    switch (sh->op) {
    case TK_OP_GEMM_F16_FWD:
        return tk_gemm_f16_fwd(a->ctx, d[0], d[1], d[2], a->in0, 0, a->in1, 0, a->out, 0, NULL);
    case TK_OP_GEMM_F16_GRAD_A:
        return tk_gemm_f16_grad_a(a->ctx, d[0], d[1], d[2], a->in0, 0, a->in1, 0, a->out, 0, NULL);
    case TK_OP_GEMM_F16_GRAD_B:
        return tk_gemm_f16_grad_b(a->ctx, d[0], d[1], d[2], a->in0, 0, a->in1, 0, a->out, 0, NULL);
    case TK_OP_SOFTMAX_F16_FWD:
        return tk_softmax_f16_fwd(a->ctx, d[0], d[1], a->in0, 0, a->out, 0, NULL);
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        return tk_softmax_xent_f16_bwd(a->ctx, d[0], d[1], a->in0, 0, a->in1, 0, a->out, 0, NULL);
    case TK_OP_EMBEDDING_F16_FWD:
        return tk_embedding_f16_fwd(a->ctx, d[0], d[1], a->in0, d[2], a->idx, a->out, a->bad, NULL);
    default:
        return tk_embedding_f16_bwd(a->ctx, d[0], d[1], a->out, d[2], a->idx, a->in1,
                                    TK_EMBEDDING_DETERMINISTIC, a->bad, NULL);
    }
}

static tk_status run_ref(const check_shape *sh, const void *in0, const void *in1,
                         const int32_t *idx, void *ref, uint64_t *n_bad)
{
    const int64_t *d = sh->d;
    *n_bad = 0;
    switch (sh->op) {
    case TK_OP_GEMM_F16_FWD:
        return tk_ref_gemm_f16_fwd(d[0], d[1], d[2], in0, in1, ref);
    case TK_OP_GEMM_F16_GRAD_A:
        return tk_ref_gemm_f16_grad_a(d[0], d[1], d[2], in0, in1, ref);
    case TK_OP_GEMM_F16_GRAD_B:
        return tk_ref_gemm_f16_grad_b(d[0], d[1], d[2], in0, in1, ref);
    case TK_OP_SOFTMAX_F16_FWD:
        return tk_ref_softmax_f16_fwd(d[0], d[1], in0, ref);
    case TK_OP_SOFTMAX_XENT_F16_BWD:
        return tk_ref_softmax_xent_f16_bwd(d[0], d[1], in0, in1, ref);
    case TK_OP_EMBEDDING_F16_FWD:
        return tk_ref_embedding_f16_fwd(d[0], d[1], in0, d[2], idx, ref, n_bad);
    default:
        memcpy(ref, in0, sh->out_n * 2);
        return tk_ref_embedding_f16_bwd(d[0], d[1], ref, d[2], idx, in1, n_bad);
    }
}

static char *dup_str(const char *s)
{
    size_t n;
    char *p;
    if (s == NULL)
        s = "";
    n = strlen(s) + 1;
    p = malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

/* The report's owned strings, as offsets, so that only those a caller's
 * struct_size covers are touched. */
static const size_t report_strings[] = {
    offsetof(tk_check_report, source_fingerprint), offsetof(tk_check_report, compiler),
    offsetof(tk_check_report, cache_key),          offsetof(tk_check_report, device),
    offsetof(tk_check_report, arch),               offsetof(tk_check_report, policy),
};

/* Frees the strings of r that lie at or beyond byte limit (all: limit 0 is
 * treated as "none covered" by the caller passing the struct's own size). */
static void report_free_from(tk_check_report *r, size_t covered)
{
    for (size_t i = 0; i < sizeof report_strings / sizeof report_strings[0]; i++) {
        size_t off = report_strings[i];
        if (tk__out_covers(covered, off + sizeof(char *)))
            continue;
        char **p = (char **)((char *)r + off);
        free(*p);
        *p = NULL;
    }
}

void tk_check_report_free(tk_check_report *report)
{
    if (report == NULL || tk__out_bad(report))
        return;
    size_t n = tk__out_size(report);
    for (size_t i = 0; i < sizeof report_strings / sizeof report_strings[0]; i++) {
        size_t off = report_strings[i];
        if (!tk__out_covers(n, off + sizeof(char *)))
            continue;
        char **p = (char **)((char *)report + off);
        free(*p);
        *p = NULL;
    }
}

/* Hands the library's full report r to the caller's (possibly smaller)
 * struct: the strings the caller cannot see are freed, not leaked. */
static void report_hand_over(tk_check_report *out, tk_check_report *r)
{
    report_free_from(r, tk__out_size(out));
    tk__out_copy(out, r, sizeof *r);
}

/* Compares got with want element by element into the report. */
static void compare(const check_shape *sh, const void *got, const void *want, tk_check_report *r)
{
    double max_abs = 0.0, max_rel = 0.0;
    int passed = 1;
    for (size_t i = 0; i < sh->out_n; i++) {
        double g, w, e;
        if (sh->out_elem == 4) {
            g = ((const float *)got)[i];
            w = ((const float *)want)[i];
        } else {
            g = tk_f16_to_f32(((const uint16_t *)got)[i]);
            w = tk_f16_to_f32(((const uint16_t *)want)[i]);
        }
        if (isnan(w) && isnan(g))
            continue;
        if (isinf(w) && g == w)
            continue;
        e = fabs(g - w);
        if (isnan(e))
            e = INFINITY;
        if (e > max_abs)
            max_abs = e;
        if (w != 0.0 && e / fabs(w) > max_rel)
            max_rel = e / fabs(w);
        if (!(e <= r->tolerance_abs + r->tolerance_rel * fabs(w)))
            passed = 0;
    }
    r->max_abs_error = max_abs;
    r->max_rel_error = max_rel;
    r->passed = passed;
}

/* Resets the device output: poison (all bits set: NaN) or the initial
 * grad_weight, and the bad-index counter. */
static tk_status reset_output(tk_context *ctx, const check_shape *sh, const void *in0, void *d_out,
                              uint32_t *d_bad)
{
    tk_status st;
    if (sh->out_is_in0)
        st = tk_mem_upload(ctx, d_out, in0, sh->out_n * 2);
    else
        st = tk_mem_set(ctx, d_out, 0xff, sh->out_n * sh->out_elem);
    if (st == TK_OK)
        st = tk_mem_set(ctx, d_bad, 0, sizeof(uint32_t));
    return st;
}

static tk_status check_host(tk_context *ctx, const check_shape *sh, const void *in0,
                            const void *in1, const int32_t *idx, void *out, uint64_t seed,
                            tk_check_report *report)
{
    check_run_args a;
    tk_check_report r = TK_STRUCT_INIT(tk_check_report);
    tk_check_report first = TK_STRUCT_INIT(tk_check_report);
    tk_context_stats s0 = TK_STRUCT_INIT(tk_context_stats);
    tk_context_stats s1 = TK_STRUCT_INIT(tk_context_stats);
    void *ref = NULL;
    uint32_t bad_dev = 0;
    uint64_t bad_ref = 0;
    float ms = 0.0f;
    tk_status st;
    char buf[128];

    memset(&a, 0, sizeof a);
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    a.ctx = ctx;
    a.sh = sh;
    r.op = sh->op;
    tk_op_dims(sh->op, &r.n_dims);
    for (int i = 0; i < r.n_dims; i++)
        r.dims[i] = sh->d[i];
    r.seed = seed;
    tolerance(sh, &r.tolerance_abs, &r.tolerance_rel);

    ref = malloc(sh->out_n * sh->out_elem);
    if (ref == NULL) {
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "tk_check_run: out of host memory");
        goto fail;
    }
    /* Embedding backward updates in place: its in0 goes to the output. */
    st = TK_OK;
    if (!sh->out_is_in0 && (st = tk_mem_alloc(ctx, sh->in0_n * 2, &a.in0)) == TK_OK)
        st = tk_mem_upload(ctx, a.in0, in0, sh->in0_n * 2);
    if (st == TK_OK && sh->in1_n > 0 && (st = tk_mem_alloc(ctx, sh->in1_n * 2, &a.in1)) == TK_OK)
        st = tk_mem_upload(ctx, a.in1, in1, sh->in1_n * 2);
    if (st == TK_OK && sh->idx_n > 0 && (st = tk_mem_alloc(ctx, sh->idx_n * 4, &a.idx)) == TK_OK)
        st = tk_mem_upload(ctx, a.idx, idx, sh->idx_n * 4);
    if (st == TK_OK)
        st = tk_mem_alloc(ctx, sh->out_n * sh->out_elem, &a.out);
    if (st == TK_OK)
        st = tk_mem_alloc(ctx, sizeof(uint32_t), (void **)&a.bad);
    if (st == TK_OK)
        st = reset_output(ctx, sh, in0, a.out, a.bad);
    if (st != TK_OK)
        goto fail;

    /* First run: obtains the kernels; the counters say from where. */
    (void)tk_context_get_stats(ctx, &s0);
    tk__op_trace_begin();
    st = run_op(&a);
    if (st == TK_OK)
        st = tk_stream_sync(ctx, NULL);
    if (st != TK_OK)
        goto fail;
    (void)tk_context_get_stats(ctx, &s1);
    r.fallback_calls = s1.fallback_calls - s0.fallback_calls;
    r.builds_pending = s1.builds_pending;
    r.wait_ms = (s1.wait_seconds - s0.wait_seconds) * 1e3;
    /* The first run's output is checked too: it may come from a fallback. */
    st = tk_mem_download(ctx, out, a.out, sh->out_n * sh->out_elem);
    if (st == TK_OK)
        st = tk_mem_download(ctx, &bad_dev, a.bad, sizeof bad_dev);
    if (st != TK_OK)
        goto fail;
    st = run_ref(sh, in0, in1, idx, ref, &bad_ref);
    if (st != TK_OK) {
        st = tk__fail(ctx, st, "tk_check_run: the CPU reference of %s failed: %s",
                      tk_op_name(sh->op), tk_status_str(st));
        goto fail;
    }
    first = r;
    compare(sh, out, ref, &first);
    if (bad_ref != bad_dev)
        first.passed = 0;
    /* The timed run uses the kernels the policy prefers: background builds
     * the first run started are waited for here, never inside a call. */
    (void)tk_context_wait_builds(ctx, -1);
    {
        tk_context_stats s2 = TK_STRUCT_INIT(tk_context_stats);
        (void)tk_context_get_stats(ctx, &s2);
        r.builds_done = s2.builds_done - s0.builds_done;
    }
    if (s1.compiles > s0.compiles) {
        r.origin = TK_ORIGIN_COMPILED;
        r.compile_ms = (s1.compile_seconds - s0.compile_seconds) * 1e3;
    } else if (s1.disk_hits > s0.disk_hits) {
        r.origin = TK_ORIGIN_DISK;
    } else {
        r.origin = TK_ORIGIN_MEMORY;
    }
    {
        const tk__op_trace *t = tk__op_trace_get();
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        size_t len = 0;
        const char *src = tk__embedded_source(t->source_name, &len);
        if (t->first != NULL && tk_kernel_get_info(t->first, &info) == TK_OK)
            r.cache_key = dup_str(info.key_hex);
        else
            r.cache_key = dup_str("");
        if (src != NULL) {
            snprintf(buf, sizeof buf, "%s:xxh3-64:%016llx", t->source_name,
                     (unsigned long long)XXH3_64bits(src, len));
            r.source_fingerprint = dup_str(buf);
        } else {
            r.source_fingerprint = dup_str(t->source_name);
        }
    }

    /* Second run, timed, on a reset output. */
    st = reset_output(ctx, sh, in0, a.out, a.bad);
    if (st == TK_OK)
        st = tk_time_on_stream(ctx, NULL, run_op, &a, &ms);
    if (st == TK_OK)
        st = tk_stream_sync(ctx, NULL);
    if (st == TK_OK)
        st = tk_mem_download(ctx, out, a.out, sh->out_n * sh->out_elem);
    if (st == TK_OK)
        st = tk_mem_download(ctx, &bad_dev, a.bad, sizeof bad_dev);
    if (st != TK_OK)
        goto fail;
    r.kernel_ms = ms;
    r.bad_indices = bad_dev;

    compare(sh, out, ref, &r);
    if (bad_ref != bad_dev)
        r.passed = 0;
    r.passed = r.passed && first.passed;
    if (!(first.max_abs_error <= r.max_abs_error))
        r.max_abs_error = first.max_abs_error;
    if (!(first.max_rel_error <= r.max_rel_error))
        r.max_rel_error = first.max_rel_error;

    r.compiler = dup_str(tk_context_compiler(ctx));
    r.device = dup_str(tk_context_backend_name(ctx));
    r.arch = dup_str(tk_context_target(ctx));
    r.policy = dup_str(tk__op_policy_name(tk_context_policy(ctx)));
    if (r.compiler == NULL || r.device == NULL || r.arch == NULL || r.policy == NULL ||
        r.cache_key == NULL || r.source_fingerprint == NULL) {
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "tk_check_run: out of host memory");
        goto fail;
    }
    if (a.in0 != NULL)
        tk_mem_free(ctx, a.in0);
    if (a.in1 != NULL)
        tk_mem_free(ctx, a.in1);
    if (a.idx != NULL)
        tk_mem_free(ctx, a.idx);
    tk_mem_free(ctx, a.out);
    tk_mem_free(ctx, a.bad);
    free(ref);
    report_hand_over(report, &r);
    return TK_OK;

fail:
    (void)tk_stream_sync(ctx, NULL);
    if (a.in0 != NULL)
        tk_mem_free(ctx, a.in0);
    if (a.in1 != NULL)
        tk_mem_free(ctx, a.in1);
    if (a.idx != NULL)
        tk_mem_free(ctx, a.idx);
    if (a.out != NULL)
        tk_mem_free(ctx, a.out);
    if (a.bad != NULL)
        tk_mem_free(ctx, a.bad);
    free(ref);
    tk_check_report_free(&r);
    return st;
}

tk_status tk_check_run_host(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims,
                            const void *in0, const void *in1, const int32_t *idx, void *out,
                            tk_check_report *report)
{
    check_shape sh;
    tk_status st = tk__op_need_device(ctx, "tk_check_run_host");
    if (st == TK_OK)
        st = shape_make(ctx, op, dims, n_dims, &sh);
    if (st != TK_OK)
        return st;
    if (in0 == NULL || out == NULL || report == NULL || (sh.in1_n > 0 && in1 == NULL) ||
        (sh.idx_n > 0 && idx == NULL))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_check_run_host: %s needs in0%s%s, out and report (non-NULL)",
                        tk_op_name(op), sh.in1_n > 0 ? ", in1" : "", sh.idx_n > 0 ? ", idx" : "");
    if (tk__out_bad(report))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_check_run_host: the report's struct_size must be set "
                        "(TK_STRUCT_INIT(tk_check_report))");
    return check_host(ctx, &sh, in0, in1, idx, out, 0, report);
}

/* ----------------------------------------------------------- random run */

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: good enough, and the same on every platform */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A non-zero fp16 in [-scale, scale]. */
static uint16_t rng_half(uint64_t *s, double scale)
{
    for (;;) {
        double u = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
        uint16_t h = tk_f32_to_f16((float)((2.0 * u - 1.0) * scale));
        if ((h & 0x7fffu) != 0)
            return h;
    }
}

tk_status tk_check_run(tk_context *ctx, tk_op op, const int64_t *dims, int n_dims, uint64_t seed,
                       tk_check_report *out)
{
    check_shape sh;
    uint16_t *in0 = NULL, *in1 = NULL;
    int32_t *idx = NULL;
    void *res = NULL;
    uint64_t s = seed;
    tk_status st = tk__op_need_device(ctx, "tk_check_run");
    if (st == TK_OK)
        st = shape_make(ctx, op, dims, n_dims, &sh);
    if (st != TK_OK)
        return st;
    if (tk__out_bad(out))
        return tk__fail(ctx, TK_INVALID_ARGUMENT,
                        "tk_check_run: out must not be NULL and its struct_size must be set "
                        "(TK_STRUCT_INIT(tk_check_report))");

    in0 = malloc(sh.in0_n * 2);
    in1 = sh.in1_n > 0 ? malloc(sh.in1_n * 2) : NULL;
    idx = sh.idx_n > 0 ? malloc(sh.idx_n * 4) : NULL;
    res = malloc(sh.out_n * sh.out_elem);
    if (in0 == NULL || res == NULL || (sh.in1_n > 0 && in1 == NULL) ||
        (sh.idx_n > 0 && idx == NULL)) {
        st = tk__fail(ctx, TK_OUT_OF_MEMORY, "tk_check_run: out of host memory");
        goto done;
    }
    if (op == TK_OP_SOFTMAX_XENT_F16_BWD) {
        /* s is a real softmax output (rows summing to one), g a gradient. */
        uint16_t *logits = malloc(sh.in0_n * 2);
        if (logits == NULL) {
            st = tk__fail(ctx, TK_OUT_OF_MEMORY, "tk_check_run: out of host memory");
            goto done;
        }
        for (size_t i = 0; i < sh.in0_n; i++)
            logits[i] = rng_half(&s, 4.0);
        st = tk_ref_softmax_f16_fwd(sh.d[0], sh.d[1], logits, in0);
        free(logits);
        if (st != TK_OK)
            goto done;
    } else {
        double scale = op == TK_OP_SOFTMAX_F16_FWD ? 4.0 : 1.0;
        for (size_t i = 0; i < sh.in0_n; i++)
            in0[i] = rng_half(&s, scale);
    }
    for (size_t i = 0; i < sh.in1_n; i++)
        in1[i] = rng_half(&s, 1.0);
    for (size_t q = 0; q < sh.idx_n; q++) {
        uint64_t r = rng_next(&s);
        int64_t V = sh.d[0];
        /* Every 97th index is out of range (negative or >= V), to exercise
         * and report the guard. */
        if (q % 97 == 96)
            idx[q] = (r & 1)
                         ? (int32_t)(-1 - (int32_t)(r % 5))
                         : (int32_t)(V + (int64_t)(r % 7) > INT32_MAX ? -7 : V + (int64_t)(r % 7));
        else
            idx[q] = (int32_t)(r % (uint64_t)V);
    }
    st = check_host(ctx, &sh, in0, in1, idx, res, seed, out);
done:
    free(in0);
    free(in1);
    free(idx);
    free(res);
    return st;
}

/* ------------------------------------------------------------- rendering */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int len;
    if (b->oom)
        return;
    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) {
        b->oom = 1;
        return;
    }
    if (b->n + (size_t)len + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 512) + (size_t)len;
        char *q = realloc(b->p, cap);
        if (q == NULL) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

static char *sb_finish(sbuf *b)
{
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

static const char *origin_name(tk_origin o)
{
    return o == TK_ORIGIN_COMPILED ? "compiled" : o == TK_ORIGIN_DISK ? "disk" : "memory";
}

static const char *nz(const char *s)
{
    return s != NULL ? s : "";
}

static void shape_text(const tk_check_report *r, char *buf, size_t size)
{
    const char *names = tk_op_dims(r->op, NULL);
    char tmp[64];
    size_t used = 0;
    buf[0] = '\0';
    if (names == NULL)
        return;
    snprintf(tmp, sizeof tmp, "%s", names);
    {
        char *save = NULL;
        const char *tok = strtok_r(tmp, ",", &save);
        for (int i = 0; i < r->n_dims && i < 4 && tok != NULL; i++) {
            int w = snprintf(buf + used, size - used, "%s%s=%lld", i ? ", " : "", tok,
                             (long long)r->dims[i]);
            if (w < 0 || (size_t)w >= size - used)
                break;
            used += (size_t)w;
            tok = strtok_r(NULL, ",", &save);
        }
    }
}

char *tk_check_report_markdown(const tk_check_report *r)
{
    sbuf b = {0};
    char shape[160];
    if (r == NULL)
        return NULL;
    shape_text(r, shape, sizeof shape);
    sb_printf(&b, "# tokitai-jit checked run: %s\n\n", nz(tk_op_name(r->op)));
    sb_printf(&b, "| field | value |\n| --- | --- |\n");
    sb_printf(&b, "| result | %s |\n", r->passed ? "PASS" : "FAIL");
    sb_printf(&b, "| shape | %s |\n", shape);
    sb_printf(&b, "| seed | %llu |\n", (unsigned long long)r->seed);
    sb_printf(&b, "| max_abs_error | %.6g |\n", r->max_abs_error);
    sb_printf(&b, "| max_rel_error | %.6g |\n", r->max_rel_error);
    sb_printf(&b, "| tolerance | abs %.3g + rel %.3g x abs(want) |\n", r->tolerance_abs,
              r->tolerance_rel);
    if (r->op == TK_OP_EMBEDDING_F16_FWD || r->op == TK_OP_EMBEDDING_F16_BWD)
        sb_printf(&b, "| bad_indices | %llu |\n", (unsigned long long)r->bad_indices);
    sb_printf(&b, "| kernel_ms | %.4f |\n", r->kernel_ms);
    sb_printf(&b, "| origin | %s |\n", origin_name(r->origin));
    if (r->origin == TK_ORIGIN_COMPILED)
        sb_printf(&b, "| compile_ms | %.2f |\n", r->compile_ms);
    sb_printf(&b, "| source_fingerprint | %s |\n", nz(r->source_fingerprint));
    sb_printf(&b, "| compiler | %s |\n", nz(r->compiler));
    sb_printf(&b, "| cache_key | %s |\n", nz(r->cache_key));
    sb_printf(&b, "| device | %s |\n", nz(r->device));
    sb_printf(&b, "| arch | %s |\n", nz(r->arch));
    sb_printf(&b, "| policy | %s |\n", nz(r->policy));
    sb_printf(&b, "| fallback_calls | %llu |\n", (unsigned long long)r->fallback_calls);
    sb_printf(&b, "| builds_done | %llu |\n", (unsigned long long)r->builds_done);
    sb_printf(&b, "| builds_pending | %llu |\n", (unsigned long long)r->builds_pending);
    sb_printf(&b, "| wait_ms | %.2f |\n", r->wait_ms);
    return sb_finish(&b);
}

static void json_str(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)nz(s); *p; p++) {
        if (*p == '"' || *p == '\\')
            sb_printf(b, "\\%c", *p);
        else if (*p == '\n')
            sb_printf(b, "\\n");
        else if (*p == '\t')
            sb_printf(b, "\\t");
        else if (*p == '\r')
            sb_printf(b, "\\r");
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_printf(b, "%c", *p);
    }
    sb_printf(b, "\"");
}

/* JSON has no inf or NaN: those become null. */
static void json_num(sbuf *b, double v)
{
    if (isfinite(v))
        sb_printf(b, "%.9g", v);
    else
        sb_printf(b, "null");
}

char *tk_check_report_json(const tk_check_report *r)
{
    sbuf b = {0};
    const char *names;
    if (r == NULL)
        return NULL;
    names = tk_op_dims(r->op, NULL);
    sb_printf(&b, "{\"op\":");
    json_str(&b, tk_op_name(r->op));
    sb_printf(&b, ",\"dims\":[");
    for (int i = 0; i < r->n_dims && i < 4; i++)
        sb_printf(&b, "%s%lld", i ? "," : "", (long long)r->dims[i]);
    sb_printf(&b, "],\"dim_names\":");
    json_str(&b, names);
    sb_printf(&b, ",\"seed\":%llu,\"passed\":%s,\"max_abs_error\":", (unsigned long long)r->seed,
              r->passed ? "true" : "false");
    json_num(&b, r->max_abs_error);
    sb_printf(&b, ",\"max_rel_error\":");
    json_num(&b, r->max_rel_error);
    sb_printf(&b, ",\"tolerance_abs\":");
    json_num(&b, r->tolerance_abs);
    sb_printf(&b, ",\"tolerance_rel\":");
    json_num(&b, r->tolerance_rel);
    sb_printf(&b, ",\"bad_indices\":%llu,\"kernel_ms\":", (unsigned long long)r->bad_indices);
    json_num(&b, r->kernel_ms);
    sb_printf(&b, ",\"origin\":\"%s\",\"compile_ms\":", origin_name(r->origin));
    json_num(&b, r->compile_ms);
    sb_printf(&b, ",\"source_fingerprint\":");
    json_str(&b, r->source_fingerprint);
    sb_printf(&b, ",\"compiler\":");
    json_str(&b, r->compiler);
    sb_printf(&b, ",\"cache_key\":");
    json_str(&b, r->cache_key);
    sb_printf(&b, ",\"device\":");
    json_str(&b, r->device);
    sb_printf(&b, ",\"arch\":");
    json_str(&b, r->arch);
    sb_printf(&b, ",\"policy\":");
    json_str(&b, r->policy);
    sb_printf(&b, ",\"fallback_calls\":%llu,\"builds_done\":%llu,\"builds_pending\":%llu",
              (unsigned long long)r->fallback_calls, (unsigned long long)r->builds_done,
              (unsigned long long)r->builds_pending);
    sb_printf(&b, ",\"wait_ms\":");
    json_num(&b, r->wait_ms);
    sb_printf(&b, "}\n");
    return sb_finish(&b);
}
