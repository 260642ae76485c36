/* --run (checked run of one operator on the device) and --info. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/env_vars.h"

/* "512x1024x4096" or "512,1024,4096". */
static int parse_shape(const char *text, int64_t *dims, int max, int *n)
{
    char *copy = strdup(text);
    if (!copy)
        return -1;
    int k = 0;
    char *save = NULL;
    int rc = 0;
    for (char *t = strtok_r(copy, "x,", &save); t; t = strtok_r(NULL, "x,", &save)) {
        if (k == max || tk__parse_i64(t, 1, INT64_MAX, &dims[k]) != 0) {
            rc = -1;
            break;
        }
        k++;
    }
    free(copy);
    *n = k;
    return rc;
}

int tk__cmd_run(const tk__cli_opts *opts)
{
    tk_op op;
    if (tk_op_from_name(opts->run_op, &op) != TK_OK) {
        tk__cli_error("--run: unknown operator '%s' (operators: gemm_f16_fwd, gemm_f16_grad_a, "
                      "gemm_f16_grad_b, softmax_f16_fwd, softmax_xent_f16_bwd, "
                      "embedding_f16_fwd, embedding_f16_bwd)",
                      opts->run_op);
        return TK__EXIT_USAGE;
    }
    int want = 0;
    const char *dim_names = tk_op_dims(op, &want);
    int64_t dims[4];
    int n = 0;
    if (parse_shape(opts->shape, dims, 4, &n) != 0 || n != want) {
        tk__cli_error("--shape: bad value '%s': %s needs %d positive sizes (%s), e.g. %s",
                      opts->shape, opts->run_op, want, dim_names ? dim_names : "?",
                      want == 3 ? "512x1024x4096" : "4096x32000");
        return TK__EXIT_USAGE;
    }
    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return TK__EXIT_FAIL;
    if (opts->have_policy && tk_config_set_policy(cfg, opts->policy) != TK_OK) {
        tk_config_destroy(cfg);
        tk__cli_error("--policy: not accepted by the library");
        return TK__EXIT_FAIL;
    }
    if (opts->have_build_mode && tk_config_set_build_mode(cfg, opts->build_mode) != TK_OK) {
        tk_config_destroy(cfg);
        tk__cli_error("--build-mode: not accepted by the library");
        return TK__EXIT_FAIL;
    }
    tk_context *ctx = NULL;
    char why[1024] = "";
    tk_status st = tk_context_create(cfg, &ctx, why, sizeof why);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        tk__cli_error("--run needs a GPU and found none usable: %s: %s", tk_status_str(st),
                      why[0] ? why : "no detail");
        return st == TK_NO_DEVICE || st == TK_BACKEND_UNAVAILABLE ? TK__EXIT_NO_DEVICE
                                                                  : TK__EXIT_FAIL;
    }
    tk_check_report report = TK_STRUCT_INIT(tk_check_report);
    st = tk_check_run(ctx, op, dims, n, opts->seed, &report);
    if (st != TK_OK) {
        tk__cli_error("--run %s: %s: %s", opts->run_op, tk_status_str(st),
                      tk_context_last_error(ctx));
        tk_context_destroy(ctx);
        return st == TK_NO_DEVICE ? TK__EXIT_NO_DEVICE : TK__EXIT_FAIL;
    }
    char *text = opts->json ? tk_check_report_json(&report) : tk_check_report_markdown(&report);
    int rc = report.passed ? TK__EXIT_OK : TK__EXIT_FAIL;
    tk_context_stats cs = TK_STRUCT_INIT(tk_context_stats);
    int have_cs = tk_context_get_stats(ctx, &cs) == TK_OK;
    if (!text) {
        tk__cli_error("out of memory rendering the report");
        rc = TK__EXIT_FAIL;
    } else if (opts->json) {
        /* the operator workspace the run used, as more fields of the object */
        char *end = strrchr(text, '}');
        if (end != NULL && have_cs) {
            fwrite(text, 1, (size_t)(end - text), stdout);
            printf(",\"workspace_bytes\":%llu,\"workspace_peak\":%llu,\"workspace_allocs\":%llu}\n",
                   (unsigned long long)cs.workspace_bytes, (unsigned long long)cs.workspace_peak,
                   (unsigned long long)cs.workspace_allocs);
        } else {
            fputs(text, stdout);
        }
        free(text);
    } else {
        fputs(text, stdout);
        if (text[0] && text[strlen(text) - 1] != '\n')
            putchar('\n');
        if (have_cs) /* more rows of the report's table */
            printf("| workspace_bytes | %llu |\n| workspace_peak | %llu |\n"
                   "| workspace_allocs | %llu |\n",
                   (unsigned long long)cs.workspace_bytes, (unsigned long long)cs.workspace_peak,
                   (unsigned long long)cs.workspace_allocs);
        free(text);
    }
    if (!report.passed)
        tk__cli_error("%s %s: result outside tolerance (max abs error %g, max rel error %g)",
                      opts->run_op, opts->shape, report.max_abs_error, report.max_rel_error);
    tk_check_report_free(&report);
    tk_context_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------- info */

typedef struct backend_row {
    const char *name;
    tk_backend_kind kind;
} backend_row;

static void print_indented(const char *text, const char *indent)
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        printf("%s%.*s\n", indent, (int)len, p);
        p += len + (nl != NULL);
    }
}

/* The documented bound of the operators' device workspace (tokitai/ops.h,
 * "Workspace"); what a run used is in --run's report. */
static const char workspace_bound[] =
    "per context and stream, grown to a power of two and kept; at most the largest of 1 MiB, "
    "64 MiB (GEMM split-K) and 8 x 2^ceil(log2 Q) bytes (embedding backward, Q lookups)";

typedef struct env_out {
    int json;
    unsigned n;
} env_out;

static void env_problem(void *user, const char *name, const char *value, const char *why,
                        int fatal)
{
    env_out *o = user;
    const tk__env_var *e = tk__env_find(name, strlen(name));
    if (o->json) {
        fputs(o->n++ ? ", {\"name\": " : "{\"name\": ", stdout);
        tk__json_str(stdout, name);
        fputs(", \"value\": ", stdout);
        tk__json_str(stdout, value);
        fputs(", \"problem\": ", stdout);
        tk__json_str(stdout, why);
        fputs(", \"default\": ", stdout);
        tk__json_str(stdout, e && !fatal ? e->fallback : NULL);
        printf(", \"fatal\": %s}", fatal ? "true" : "false");
    } else {
        o->n++;
        if (fatal)
            printf("  %s=%s: %s (an error: what reads it refuses to start)\n", name, value, why);
        else if (e)
            printf("  %s=%s: %s (ignored: the default is used: %s)\n", name, value, why,
                   e->fallback);
        else
            printf("  %s=%s: %s (ignored)\n", name, value, why);
    }
}

int tk__cmd_info(const tk__cli_opts *opts)
{
    backend_row rows[3] = {
        {"cuda", TK_BACKEND_CUDA}, {"hip", TK_BACKEND_HIP}, {"stub", TK_BACKEND_STUB}};
    /* The stub is a testing backend: shown only when asked for (the words
     * of TOKITAI_JIT_BACKEND: auto cuda hip stub). */
    size_t n_rows = tk__env_word(TK__ENV_BACKEND, 0) == 3 ? 3 : 2;
    static char desc[3][16384];
    tk_status st[3];
    for (size_t i = 0; i < n_rows; i++) {
        desc[i][0] = 0;
        st[i] = tk_backend_describe(rows[i].kind, desc[i], sizeof desc[i]);
    }

    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return TK__EXIT_FAIL;
    tk_cache *cache = NULL;
    tk_status cst = tk_cache_open(cfg, &cache);
    tk_config_destroy(cfg);
    tk_cache_stats cs = TK_STRUCT_INIT(tk_cache_stats);
    int have_stats = cst == TK_OK && tk_cache_get_stats(cache, &cs) == TK_OK;
    /* the read-only tiers the cache searches, and where the list came from */
    const char *lower = cst == TK_OK ? tk_cache_lower_tiers(cache) : "";
    const char *lower_from = tk__env_get(TK__ENV_CACHE_PATH) ? "TOKITAI_JIT_CACHE_PATH"
                                                             : "the default: the shipped tier";
    const char *shipped = tk_cache_shipped_tier();

    if (opts->json) {
        printf("{\"version\": \"%s\", \"backends\": [", tk_version_string());
        for (size_t i = 0; i < n_rows; i++) {
            printf("%s{\"name\": \"%s\", \"usable\": %s, \"status\": ", i ? ", " : "", rows[i].name,
                   st[i] == TK_OK ? "true" : "false");
            tk__json_str(stdout, tk_status_str(st[i]));
            fputs(", \"description\": ", stdout);
            tk__json_str(stdout, desc[i]);
            fputs("}", stdout);
        }
        fputs("], \"cache\": {\"root\": ", stdout);
        tk__json_str(stdout, cst == TK_OK ? tk_cache_root(cache) : NULL);
        if (have_stats)
            printf(", \"entries\": %llu, \"bytes\": %llu, \"max_bytes\": %llu",
                   (unsigned long long)cs.entries, (unsigned long long)cs.bytes,
                   (unsigned long long)cs.max_bytes);
        fputs(", \"lower\": ", stdout);
        tk__json_str(stdout, *lower ? lower : NULL);
        fputs(", \"lower_from\": ", stdout);
        tk__json_str(stdout,
                     tk__env_get(TK__ENV_CACHE_PATH) ? "TOKITAI_JIT_CACHE_PATH" : "default");
        fputs(", \"shipped\": ", stdout);
        tk__json_str(stdout, *shipped ? shipped : NULL);
        fputs("}, \"operator_workspace\": ", stdout);
        tk__json_str(stdout, workspace_bound);
        fputs(", \"environment_problems\": [", stdout);
        env_out eo = {1, 0};
        tk_env_check(env_problem, &eo);
        fputs("]}\n", stdout);
    } else {
        printf("tokitai-jit %s (library %s)\n", TK_VERSION_STRING, tk_version_string());
        for (size_t i = 0; i < n_rows; i++) {
            printf("backend %s: %s\n", rows[i].name,
                   st[i] == TK_OK ? "usable" : tk_status_str(st[i]));
            print_indented(desc[i], "  ");
        }
        if (cst == TK_OK) {
            char b[32], m[32];
            printf("cache: %s", tk_cache_root(cache));
            if (have_stats)
                printf(" (%llu %s, %s of %s)", (unsigned long long)cs.entries,
                       cs.entries == 1 ? "entry" : "entries", tk__fmt_size(cs.bytes, b, sizeof b),
                       tk__fmt_size(cs.max_bytes, m, sizeof m));
            putchar('\n');
        } else {
            printf("cache: cannot open: %s\n", tk_status_str(cst));
        }
        printf("read-only caches: %s (%s)\n", *lower ? lower : "none", lower_from);
        printf("shipped tier: %s\n",
               *shipped ? shipped
                        : "none found (share/tokitai-jit/cache beside the library, or "
                          "../share/tokitai-jit/cache)");
        printf("operator workspace: %s\n", workspace_bound);
        if (tk_env_check(NULL, NULL) == 0) {
            printf("environment: every TOKITAI_JIT_* variable set has a valid value\n");
        } else {
            printf("environment: values refused\n");
            env_out eo = {0, 0};
            tk_env_check(env_problem, &eo);
        }
    }
    tk_cache_close(cache);
    return TK__EXIT_OK;
}
