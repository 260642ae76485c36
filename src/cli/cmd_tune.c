/* tokitai-jit --tune: time the candidate GEMM configurations of every shape
 * class a manifest's GEMM lines reach, on the GPU present, and keep the
 * fastest of each class as a tuning record in the cache (tk_op_tune). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "manifest.h"

/* One (op, N, K) of the manifest and the largest M its lines name. */
typedef struct tune_group {
    tk_op op;
    int64_t n, k, max_m;
    int64_t *ms; /* --classes manifest: the M values named */
    size_t n_ms;
} tune_group;

static int group_add(tune_group **g, size_t *n, const tk__mf_job *j)
{
    for (size_t i = 0; i < *n; i++) {
        tune_group *t = &(*g)[i];
        if (t->op == j->op && t->n == j->dims[1] && t->k == j->dims[2]) {
            int64_t *ms = realloc(t->ms, (t->n_ms + 1) * sizeof *ms);
            if (ms == NULL)
                return -1;
            t->ms = ms;
            t->ms[t->n_ms++] = j->dims[0];
            if (j->dims[0] > t->max_m)
                t->max_m = j->dims[0];
            return 0;
        }
    }
    tune_group *ng = realloc(*g, (*n + 1) * sizeof *ng);
    if (ng == NULL)
        return -1;
    *g = ng;
    memset(&ng[*n], 0, sizeof ng[*n]);
    ng[*n].op = j->op;
    ng[*n].n = j->dims[1];
    ng[*n].k = j->dims[2];
    ng[*n].max_m = j->dims[0];
    ng[*n].ms = malloc(sizeof(int64_t));
    if (ng[*n].ms == NULL)
        return -1;
    ng[*n].ms[0] = j->dims[0];
    ng[*n].n_ms = 1;
    (*n)++;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Every class up to this M is tuned by default (--classes all): the expert
 * projections of the MoE model see token counts up to a few thousand. */
#define TUNE_ALL_MIN_M 8192

int tk__cmd_tune(const tk__cli_opts *opts)
{
    tk__manifest m;
    char err[2048];
    tune_group *groups = NULL;
    size_t n_groups = 0, skipped = 0;
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    int rc = TK__EXIT_FAIL;
    unsigned tuned = 0, failed = 0, stored = 0, compiled = 0;
    double log_gain = 0.0;
    const double t0 = tk__now();
    const int all = opts->classes == NULL || strcmp(opts->classes, "all") == 0;

    memset(&m, 0, sizeof m);
    if (opts->classes != NULL && !all && strcmp(opts->classes, "manifest") != 0) {
        tk__cli_error("--classes: bad value '%s' (all or manifest)", opts->classes);
        return TK__EXIT_USAGE;
    }
    int prc = opts->manifest ? tk__manifest_load(opts->manifest, &m, err, sizeof err)
                             : tk__manifest_parse(tk__default_manifest, "<built-in manifest>", NULL,
                                                  &m, err, sizeof err);
    if (prc != 0) {
        tk__cli_error("%s", err);
        return TK__EXIT_USAGE;
    }
    if (opts->ops_list && tk__manifest_filter(&m, opts->ops_list, err, sizeof err) != 0) {
        tk__cli_error("%s", err);
        rc = TK__EXIT_USAGE;
        goto done;
    }
    for (size_t i = 0; i < m.n_jobs; i++) {
        const tk__mf_job *j = &m.jobs[i];
        if (j->kernel >= 0 || (j->op != TK_OP_GEMM_F16_FWD && j->op != TK_OP_GEMM_F16_GRAD_A &&
                               j->op != TK_OP_GEMM_F16_GRAD_B)) {
            skipped++;
            continue;
        }
        if (group_add(&groups, &n_groups, j) != 0) {
            tk__cli_error("out of memory");
            goto done;
        }
    }
    if (n_groups == 0) {
        tk__cli_error("%s names no GEMM shape: nothing to tune (only the GEMM ops have "
                      "configurations)",
                      m.name);
        rc = TK__EXIT_USAGE;
        goto done;
    }

    cfg = tk__cli_config(opts);
    if (cfg == NULL)
        goto done;
    if (opts->have_policy)
        tk_config_set_policy(cfg, opts->policy);
    char why[512] = "";
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    if (st != TK_OK) {
        tk__cli_error("--tune needs a GPU: it times kernels on the device (%s%s%s)",
                      tk_status_str(st), why[0] ? ": " : "", why);
        rc = st == TK_NO_DEVICE || st == TK_BACKEND_UNAVAILABLE ? TK__EXIT_NO_DEVICE
                                                                 : TK__EXIT_FAIL;
        goto done;
    }
    printf("tuning %zu GEMM shape group(s) of %s on %s (%s classes)%s\n", n_groups, m.name,
           tk_context_target(ctx), all ? "all" : "the manifest's",
           skipped ? "; non-GEMM lines skipped" : "");
    fflush(stdout);

    for (size_t g = 0; g < n_groups; g++) {
        tune_group *t = &groups[g];
        int64_t limit = t->max_m;
        size_t next_i = 0;
        if (all && limit < TUNE_ALL_MIN_M)
            limit = TUNE_ALL_MIN_M;
        qsort(t->ms, t->n_ms, sizeof *t->ms, cmp_i64);
        /* walk the classes: tk_op_tune reports each class's largest M */
        for (int64_t mm = all ? 1 : t->ms[0]; mm <= limit;) {
            tk_tune_report r = TK_STRUCT_INIT(tk_tune_report);
            const int64_t dims[3] = {mm, t->n, t->k};
            st = tk_op_tune(ctx, t->op, dims, 3, &r);
            if (st != TK_OK) {
                failed++;
                printf("  %s M=%lld N=%lld K=%lld: FAILED: %s\n", tk_op_name(t->op), (long long)mm,
                       (long long)t->n, (long long)t->k, tk_context_last_error(ctx));
                if (st == TK_UNSUPPORTED || st == TK_NO_DEVICE || st == TK_DEVICE_ERROR)
                    goto summary;
                r.timed_m = mm;
            } else {
                tuned++;
                stored += r.stored != 0;
                compiled += r.compiled;
                log_gain += log(r.heuristic_us / r.chosen_us);
                printf("  %-44s %-30s %8.1f us  (heuristics: %-30s %8.1f us, x%.2f) %u timed, %u "
                       "compiled%s\n",
                       r.record, r.chosen, r.chosen_us, r.heuristic, r.heuristic_us,
                       r.heuristic_us / r.chosen_us, r.candidates, r.compiled,
                       r.stored ? "" : ", NOT stored (cache read-only or disabled)");
                if (r.mid_m > 0)
                    printf("      and at M=%lld, the class's middle: %.1f us against the "
                           "heuristics' own plan's %.1f us, x%.2f\n",
                           (long long)r.mid_m, r.chosen_mid_us, r.heuristic_mid_us,
                           r.heuristic_mid_us / r.chosen_mid_us);
            }
            if (st == TK_OK && opts->verbose)
                for (unsigned i = 0; i < r.candidates && i < sizeof r.timed / sizeof r.timed[0];
                     i++) {
                    if (r.mid_m > 0 && r.timed_mid_us[i] >= 0.0)
                        printf("      %-36s %8.1f us  at M=%lld %8.1f us\n", r.timed[i].config,
                               r.timed[i].us, (long long)r.mid_m, r.timed_mid_us[i]);
                    else if (r.mid_m > 0)
                        printf("      %-36s %8.1f us  at M=%lld: does not fit\n", r.timed[i].config,
                               r.timed[i].us, (long long)r.mid_m);
                    else
                        printf("      %-36s %8.1f us\n", r.timed[i].config, r.timed[i].us);
                }
            fflush(stdout);
            if (all) {
                mm = r.timed_m + 1;
            } else {
                while (next_i < t->n_ms && t->ms[next_i] <= r.timed_m)
                    next_i++;
                if (next_i >= t->n_ms)
                    break;
                mm = t->ms[next_i];
            }
        }
    }
summary:
    printf("tuned %u class(es), %u record(s) stored, %u kernel(s) compiled, %u failed; "
           "geometric mean gain over the heuristics x%.3f; %.1f s\n",
           tuned, stored, compiled, failed, tuned ? exp(log_gain / tuned) : 1.0,
           tk__now() - t0);
    rc = failed ? TK__EXIT_FAIL : TK__EXIT_OK;
done:
    for (size_t g = 0; g < n_groups; g++)
        free(groups[g].ms);
    free(groups);
    if (ctx)
        tk_context_destroy(ctx);
    if (cfg)
        tk_config_destroy(cfg);
    tk__manifest_free(&m);
    return rc;
}
