/*
 * User kernels as people write them, with the stub backend (no GPU, no
 * vendor library): their own headers through -I folders, relative includes
 * and in-memory headers, each tracked by the disk cache (an edit, a
 * shadowing file, a reordered -I list or a changed in-memory header costs
 * exactly one compile; unchanged headers hit); C++ name expressions as entry
 * points, hitting from disk with no compiler call; compiler messages naming
 * the user's file and line. Each context below stands for a new process: a
 * new context has an empty memory table and finds kernels on disk.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jit/jit_internal.h"
#include "tk_test.h"

static char *g_dir; /* cache */
static char *g_src; /* the user's source tree */
static char g_log[8192];
static int g_warnings;

static void on_log(void *user, tk_log_level level, const char *msg)
{
    (void)user;
    if (level >= TK_LOG_WARN) {
        g_warnings++;
        snprintf(g_log + strlen(g_log), sizeof g_log - strlen(g_log), "%s\n", msg);
    }
}

static void setup(void)
{
    g_dir = tk_test_tmpdir("usrc_cache");
    g_src = tk_test_tmpdir("usrc_tree");
    g_log[0] = '\0';
    g_warnings = 0;
    memset(tk__stub_counters_get(), 0, sizeof(tk__stub_counters));
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_src);
    free(g_dir);
    free(g_src);
}

static tk_context *new_context(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_log(cfg, on_log, NULL), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    ck_assert_msg(st == TK_OK, "tk_context_create: %s", err);
    tk_config_destroy(cfg);
    return ctx;
}

/* Writes text to g_src/rel, creating folders. */
static void put(const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_src, rel);
    for (char *c = path + strlen(g_src) + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            mkdir(path, 0700);
            *c = '/';
        }
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
}

static char *under(const char *rel)
{
    char *p = malloc(strlen(g_src) + strlen(rel) + 4);
    sprintf(p, "-I%s/%s", g_src, rel);
    return p;
}

typedef struct got {
    tk_status st;
    tk_origin origin;
    uint64_t compiles; /* compiler calls this lookup made (stub counter) */
    char code[4096];   /* the code object's text (stub: source + headers) */
    char key[33];
} got;

/* tk_kernel_get on a new context (a new process, as far as caches go). */
static got get_fresh(const tk_kernel_desc *d)
{
    got g;
    memset(&g, 0, sizeof g);
    uint64_t before = tk__stub_counters_get()->compiles;
    tk_context *ctx = new_context();
    tk_kernel *k = NULL;
    g.st = tk_kernel_get(ctx, d, &k);
    g.compiles = tk__stub_counters_get()->compiles - before;
    if (g.st == TK_OK) {
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
        g.origin = info.origin;
        memcpy(g.key, info.key_hex, 33);
        size_t n = k->code_size < sizeof g.code - 1 ? k->code_size : sizeof g.code - 1;
        /* The stub's object: magic, target, NUL, then text. */
        const char *text = (const char *)k->code + 8 + strlen((const char *)k->code + 8) + 1;
        size_t off = (size_t)(text - (const char *)k->code);
        n = k->code_size - off < n ? k->code_size - off : n;
        memcpy(g.code, text, n);
        g.code[n] = '\0';
    } else {
        snprintf(g.code, sizeof g.code, "%s", tk_context_last_error(ctx));
    }
    tk_context_destroy(ctx);
    return g;
}

static got get_ok(const tk_kernel_desc *d)
{
    got g = get_fresh(d);
    ck_assert_msg(g.st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(g.st), g.code);
    return g;
}

static const char *const k_main = "#include \"params.h\"\n"
                                  "extern \"C\" __global__ void scale(float *x) { x[0] *= K; }\n";

START_TEST(test_header_edit_one_compile)
{
    put("inc/params.h", "#define K 2.0f /* v1 */\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .options = opts, .n_options = 1};

    got g = get_ok(&d);
    ck_assert_int_eq(g.origin, TK_ORIGIN_COMPILED);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "v1"));
    g = get_ok(&d); /* unchanged header: a disk hit */
    ck_assert_int_eq(g.origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(g.compiles, 0);

    put("inc/params.h", "#define K 3.0f /* v2 */\n");
    g = get_ok(&d);
    ck_assert_int_eq(g.origin, TK_ORIGIN_COMPILED);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "v2"));
    ck_assert_ptr_null(strstr(g.code, "v1"));
    g = get_ok(&d);
    ck_assert_int_eq(g.origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(g.compiles, 0);
    ck_assert_ptr_nonnull(strstr(g.code, "v2"));
    free(inc);
}
END_TEST

START_TEST(test_nested_relative_include_edit)
{
    /* params.h includes "detail/tile.h" relative to itself, which includes
     * "../common.h" relative to itself. */
    put("inc/params.h", "#pragma once\n#include \"detail/tile.h\"\n#define K TILE\n");
    put("inc/detail/tile.h", "#include \"../common.h\"\n#define TILE 4 /* t1 */\n");
    put("inc/common.h", "/* c1 */\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .options = opts, .n_options = 1};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "t1"));
    ck_assert_ptr_nonnull(strstr(g.code, "c1"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);

    put("inc/common.h", "/* c2 */\n"); /* two levels down */
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "c2"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    free(inc);
}
END_TEST

START_TEST(test_shadowing_header_one_compile)
{
    /* -I a -I b; params.h only in b at first. */
    put("b/params.h", "#define K 1.0f /* from b */\n");
    put("a/other.h", "\n");
    char *a = under("a"), *b = under("b");
    const char *opts[] = {a, b};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .options = opts, .n_options = 2};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "from b"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);

    put("a/params.h", "#define K 5.0f /* from a */\n"); /* now shadows b's */
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "from a"));
    ck_assert_ptr_null(strstr(g.code, "from b"));
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 0);
    ck_assert_ptr_nonnull(strstr(g.code, "from a"));

    /* A header shadowing a toolkit header (not found in the user's folders
     * at first) counts too. */
    tk_kernel_desc t = d;
    t.source = "#include <cooperative_groups.h>\n"
               "extern \"C\" __global__ void cg_user(float *x) { x[0] = 1; }\n";
    t.entry = "cg_user";
    ck_assert_uint_eq(get_ok(&t).compiles, 1);
    ck_assert_uint_eq(get_ok(&t).compiles, 0);
    put("b/cooperative_groups.h", "/* mine */\n");
    g = get_ok(&t);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "mine"));
    free(a);
    free(b);
}
END_TEST

START_TEST(test_include_order_one_compile)
{
    put("a/params.h", "#define K 1.0f /* in a */\n");
    put("b/params.h", "#define K 2.0f /* in b */\n");
    char *a = under("a"), *b = under("b");
    const char *ab[] = {a, b}, *ba[] = {b, a};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .options = ab, .n_options = 2};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "in a"));
    d.options = ba;
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "in b"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    d.options = ab; /* back: the first entry is still there */
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 0);
    ck_assert_ptr_nonnull(strstr(g.code, "in a"));
    /* "-I dir" as two options is the same folder list. */
    char dir_a[4096];
    snprintf(dir_a, sizeof dir_a, "%s/a", g_src);
    const char *split[] = {"-I", dir_a};
    d.options = split;
    g = get_ok(&d);
    ck_assert_ptr_nonnull(strstr(g.code, "in a"));
    free(a);
    free(b);
}
END_TEST

START_TEST(test_memory_header_change_one_compile)
{
    tk_header h = {"params.h", "#define K 1.0f /* mem1 */\n"};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .headers = &h, .n_headers = 1};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "mem1"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    char *copy = strdup(h.text); /* same text elsewhere: the same kernel */
    h.text = copy;
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    free(copy);

    h.text = "#define K 1.0f /* mem2 */\n";
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "mem2"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);

    /* In memory is searched before the -I folders. */
    put("inc/params.h", "#define K 9.0f /* disk */\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    d.options = opts;
    d.n_options = 1;
    g = get_ok(&d);
    ck_assert_ptr_nonnull(strstr(g.code, "mem2"));
    ck_assert_ptr_null(strstr(g.code, "disk"));

    /* A header in memory may include others in memory or from -I. */
    put("inc/deep.h", "/* deep on disk */\n");
    tk_header two[] = {{"params.h", "#include \"more.h\"\n#define K 1.0f\n"},
                       {"more.h", "#include <deep.h>\n/* more */\n"}};
    d.headers = two;
    d.n_headers = 2;
    g = get_ok(&d);
    ck_assert_ptr_nonnull(strstr(g.code, "more"));
    ck_assert_ptr_nonnull(strstr(g.code, "deep on disk"));
    put("inc/deep.h", "/* deep edited */\n");
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "deep edited"));
    free(inc);
}
END_TEST

START_TEST(test_unchanged_headers_hit_many)
{
    /* 20 headers, each including the next. */
    char main_src[4096] = "#include \"h00.h\"\n"
                          "extern \"C\" __global__ void chain(float *x) { x[0] = V19; }\n";
    for (int i = 0; i < 20; i++) {
        char name[32], text[128];
        snprintf(name, sizeof name, "inc/h%02d.h", i);
        if (i < 19)
            snprintf(text, sizeof text, "#pragma once\n#include \"h%02d.h\"\n#define V%02d %d\n",
                     i + 1, i, i);
        else
            snprintf(text, sizeof text, "#pragma once\n#define V%02d %d\n", i, i);
        put(name, text);
    }
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc d = {.source = main_src, .entry = "chain", .options = opts, .n_options = 1};
    ck_assert_uint_eq(get_ok(&d).compiles, 1);
    for (int i = 0; i < 3; i++) {
        got g = get_ok(&d);
        ck_assert_int_eq(g.origin, TK_ORIGIN_DISK);
        ck_assert_uint_eq(g.compiles, 0);
    }
    put("inc/h13.h", "#pragma once\n#include \"h14.h\"\n#define V13 130\n");
    ck_assert_uint_eq(get_ok(&d).compiles, 1);
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    free(inc);
}
END_TEST

START_TEST(test_memory_hit_keeps_kernel)
{
    /* Documented choice: a context reuses what it holds; an edit on disk
     * reaches new contexts (new processes). */
    put("inc/params.h", "#define K 1.0f\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .options = opts, .n_options = 1};
    tk_context *ctx = new_context();
    tk_kernel *k1 = NULL, *k2 = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k1), TK_OK);
    put("inc/params.h", "#define K 2.0f\n");
    tk_assert_status(tk_kernel_get(ctx, &d, &k2), TK_OK);
    ck_assert_ptr_eq(k1, k2);
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, 1);
    tk_context_destroy(ctx);
    ck_assert_uint_eq(get_ok(&d).compiles, 1);
    free(inc);
}
END_TEST

START_TEST(test_computed_include_not_cached)
{
    put("inc/params.h", "#define K 1.0f\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc d = {.source = "#define P \"params.h\"\n#include P\n"
                                  "extern \"C\" __global__ void scale(float *x) { x[0] *= K; }\n",
                        .entry = "scale",
                        .options = opts,
                        .n_options = 1};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_int_eq(g_warnings, 1);
    ck_assert_ptr_nonnull(strstr(g_log, "#include P"));
    ck_assert_ptr_nonnull(strstr(g_log, "never cached"));
    g = get_ok(&d); /* compiled again: nothing was stored */
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_int_eq(g.origin, TK_ORIGIN_COMPILED);
    tk_cache *cache = NULL;
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_cache_stats st = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &st), TK_OK);
    ck_assert_uint_eq(st.entries, 0);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    free(inc);
}
END_TEST

static const char *const k_templates =
    "template <int N, typename T> __global__ void fill(T *x) { x[0] = N; }\n"
    "namespace ns {\n"
    "template <int B, bool F> __global__ void gemm(float *x) { x[0] = B; }\n"
    "}\n";

typedef struct listed {
    char kernel[128];
    int n;
} listed;

static int on_entry(void *user, const tk_cache_entry_info *info)
{
    listed *l = user;
    snprintf(l->kernel, sizeof l->kernel, "%s", info->kernel);
    l->n++;
    return 0;
}

START_TEST(test_name_expression_disk_hit_no_compiler)
{
    tk_kernel_desc d = {.source = k_templates, .entry = "fill<4, float>"};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "_Zstub_fill_4__float_"));

    /* A new context loads it from disk with no compiler call and finds the
     * function by the lowered name stored in the entry. */
    uint64_t loads = tk__stub_counters_get()->loads;
    tk_context *ctx = new_context();
    tk_kernel *k = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_OK);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
    ck_assert_str_eq(info.entry, "fill<4, float>");
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, 1);
    ck_assert_uint_eq(tk__stub_counters_get()->loads, loads + 1);
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    float x = 0, *px = &x;
    void *args[] = {&px};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, args), TK_OK);
    tk_context_destroy(ctx);

    tk_kernel_desc d2 = {.source = k_templates, .entry = "ns::gemm<128, true>"};
    ck_assert_uint_eq(get_ok(&d2).compiles, 1);
    ck_assert_uint_eq(get_ok(&d2).compiles, 0);

    /* The listing shows the name expression. */
    tk_cache *cache = NULL;
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    listed l = {"", 0};
    tk_assert_status(tk_cache_list(cache, on_entry, &l), TK_OK);
    ck_assert_int_eq(l.n, 2);
    ck_assert_msg(strcmp(l.kernel, "fill<4, float>") == 0 ||
                      strcmp(l.kernel, "ns::gemm<128, true>") == 0,
                  "listed %s", l.kernel);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(test_bad_entries_and_descriptors)
{
    tk_context *ctx = new_context();
    tk_kernel *k = NULL;
    const char *bad[] = {"fill<4", "fill>", "a b", "fill<4>;", "fill<\"x\">", "{x}", "4fill", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tk_kernel_desc d = {.source = k_templates, .entry = bad[i]};
        ck_assert_msg(tk_kernel_get(ctx, &d, &k) == TK_INVALID_ARGUMENT, "entry '%s'", bad[i]);
    }
    /* A name expression naming nothing: the compiler says so. */
    tk_kernel_desc none = {.source = k_templates, .entry = "nothing<1>"};
    ck_assert_int_ne(tk_kernel_get(ctx, &none, &k), TK_OK);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "nothing"));
    /* Embedded sources take neither headers nor labels, nor name expressions. */
    tk_header h = {"x.h", ""};
    tk_kernel_desc e = {
        .source_name = "gemm_f16", .entry = "gemm_f16_naive", .headers = &h, .n_headers = 1};
    tk_assert_status(tk_kernel_get(ctx, &e, &k), TK_INVALID_ARGUMENT);
    tk_kernel_desc e2 = {.source_name = "gemm_f16", .entry = "gemm<1>"};
    tk_assert_status(tk_kernel_get(ctx, &e2, &k), TK_INVALID_ARGUMENT);
    tk_header nul = {"x.h", NULL};
    tk_kernel_desc u = {.source = k_main, .entry = "scale", .headers = &nul, .n_headers = 1};
    tk_assert_status(tk_kernel_get(ctx, &u, &k), TK_INVALID_ARGUMENT);
    tk_kernel_desc lab = {.source = k_main, .entry = "scale", .source_label = "a\"b.cu"};
    tk_assert_status(tk_kernel_get(ctx, &lab, &k), TK_INVALID_ARGUMENT);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_errors_name_user_file_and_line)
{
    tk_kernel_desc d = {.source = "extern \"C\" __global__ void k(float *x)\n"
                                  "{\n"
                                  "#error boom in main\n"
                                  "}\n",
                        .entry = "k",
                        .source_label = "my_kernels.cu"};
    got g = get_fresh(&d);
    ck_assert_int_eq(g.st, TK_COMPILE_FAILED);
    ck_assert_msg(strstr(g.code, "my_kernels.cu(3): error: #error boom in main") != NULL, "%s",
                  g.code);
    /* The first error line is in the one-line message, before the log. */
    char *nl = strchr(g.code, '\n');
    ck_assert_ptr_nonnull(nl);
    ck_assert_msg(strstr(g.code, "my_kernels.cu(3)") < nl, "%s", g.code);

    put("inc/bad.h", "/* one */\n#error boom in header\n");
    char *inc = under("inc");
    const char *opts[] = {inc};
    tk_kernel_desc h = {.source = "#include \"bad.h\"\nextern \"C\" __global__ void k() {}\n",
                        .entry = "k",
                        .options = opts,
                        .n_options = 1,
                        .source_label = "uses_bad.cu"};
    g = get_fresh(&h);
    ck_assert_int_eq(g.st, TK_COMPILE_FAILED);
    char want[4200];
    snprintf(want, sizeof want, "%s/inc/bad.h(2): error", g_src);
    ck_assert_msg(strstr(g.code, want) != NULL, "want %s in %s", want, g.code);
    free(inc);
}
END_TEST

START_TEST(test_label_in_listing)
{
    tk_kernel_desc d = {.source = k_main, .entry = "scale", .source_label = "scale.cu"};
    tk_header h = {"params.h", "#define K 1\n"};
    d.headers = &h;
    d.n_headers = 1;
    get_ok(&d);
    tk_cache *cache = NULL;
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    listed l = {"", 0};
    tk_assert_status(tk_cache_list(cache, on_entry, &l), TK_OK);
    ck_assert_int_eq(l.n, 1);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    /* The label names the file for the compiler: another label is another
     * program (__FILE__ differs). */
    d.source_label = "other.cu";
    ck_assert_uint_eq(get_ok(&d).compiles, 1);
}
END_TEST

START_TEST(test_pre_include_tracked)
{
    put("inc/pre.h", "#define K 1.0f /* pre1 */\n");
    char *inc = under("inc");
    const char *opts[] = {inc, "--pre-include=pre.h"};
    tk_kernel_desc d = {.source = "extern \"C\" __global__ void scale(float *x) { x[0] *= K; }\n",
                        .entry = "scale",
                        .options = opts,
                        .n_options = 2,
                        .source_label = "pre_user.cu"};
    got g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "pre1"));
    ck_assert_uint_eq(get_ok(&d).compiles, 0);
    put("inc/pre.h", "#define K 2.0f /* pre2 */\n");
    g = get_ok(&d);
    ck_assert_uint_eq(g.compiles, 1);
    ck_assert_ptr_nonnull(strstr(g.code, "pre2"));
    /* "-include x" as two options is the same; lines of the user's file
     * still count from 1. */
    const char *two[] = {inc, "-include", "pre.h"};
    tk_kernel_desc e = {.source = "extern \"C\" __global__ void scale(float *x)\n#error at two\n",
                        .entry = "scale",
                        .options = two,
                        .n_options = 3,
                        .source_label = "pre_user.cu"};
    g = get_fresh(&e);
    ck_assert_int_eq(g.st, TK_COMPILE_FAILED);
    ck_assert_msg(strstr(g.code, "pre_user.cu(2): error") != NULL, "%s", g.code);
    free(inc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("user_sources");
    TCase *tc = tcase_create("stub");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_header_edit_one_compile);
    tcase_add_test(tc, test_nested_relative_include_edit);
    tcase_add_test(tc, test_shadowing_header_one_compile);
    tcase_add_test(tc, test_include_order_one_compile);
    tcase_add_test(tc, test_memory_header_change_one_compile);
    tcase_add_test(tc, test_unchanged_headers_hit_many);
    tcase_add_test(tc, test_memory_hit_keeps_kernel);
    tcase_add_test(tc, test_computed_include_not_cached);
    tcase_add_test(tc, test_name_expression_disk_hit_no_compiler);
    tcase_add_test(tc, test_bad_entries_and_descriptors);
    tcase_add_test(tc, test_errors_name_user_file_and_line);
    tcase_add_test(tc, test_label_in_listing);
    tcase_add_test(tc, test_pre_include_tracked);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
