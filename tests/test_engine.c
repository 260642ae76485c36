/*
 * The engine's logic with the stub backend (no GPU, no vendor library):
 * memory / disk / compile path, counts of compiles and loads, single flight,
 * keys, failures. Check runs each test in its own process, so the stub's
 * process-wide counters start at zero in every test.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit/jit_internal.h"
#include "tk_test.h"

static const char *const k_source = "extern \"C\" __global__ void add_one(float *x, int n)\n"
                                    "{\n"
                                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    "    if (i < n) x[i] += ADD;\n"
                                    "}\n";

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("engine");
    memset(tk__stub_counters_get(), 0, sizeof(tk__stub_counters));
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
}

static tk_context *stub_context_in(const char *dir, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, dir), TK_OK);
    if (target)
        tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    ck_assert_msg(st == TK_OK, "tk_context_create: %s: %s", tk_status_str(st), err);
    tk_config_destroy(cfg);
    return ctx;
}

static tk_context *stub_context(void)
{
    return stub_context_in(g_dir, NULL);
}

static const tk_define k_defines[] = {{"ADD", "1.0f"}, {"UNUSED", NULL}};

static tk_kernel_desc base_desc(void)
{
    tk_kernel_desc d = {
        .source = k_source, .entry = "add_one", .defines = k_defines, .n_defines = 2};
    return d;
}

static tk_context_stats stats_of(const tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s;
}

static tk_kernel *get_ok(tk_context *ctx, const tk_kernel_desc *d)
{
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(st),
                  tk_context_last_error(ctx));
    ck_assert_ptr_nonnull(k);
    return k;
}

static tk_origin origin_of(const tk_kernel *k)
{
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    return info.origin;
}

static void key_of(const tk_kernel *k, char hex[33])
{
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_uint_eq(strlen(info.key_hex), 32);
    memcpy(hex, info.key_hex, 33);
}

START_TEST(test_compile_then_memory_hit)
{
    tk_context *ctx = stub_context();
    tk_kernel_desc d = base_desc();
    tk_kernel *k = get_ok(ctx, &d);
    ck_assert_int_eq(origin_of(k), TK_ORIGIN_COMPILED);
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.loads, 1);
    ck_assert_uint_eq(s.memory_hits, 0);
    ck_assert_uint_eq(s.disk_hits, 0);

    for (int i = 0; i < 100; i++)
        ck_assert_ptr_eq(get_ok(ctx, &d), k);
    s = stats_of(ctx);
    ck_assert_uint_eq(s.memory_hits, 100);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, 1);
    ck_assert_uint_eq(tk__stub_counters_get()->loads, 1);

    /* The same text in another buffer is the same kernel, found in memory. */
    char *copy = strdup(k_source);
    tk_kernel_desc dc = d;
    dc.source = copy;
    ck_assert_ptr_eq(get_ok(ctx, &dc), k);
    ck_assert_ptr_eq(get_ok(ctx, &dc), k);
    free(copy);
    s = stats_of(ctx);
    ck_assert_uint_eq(s.memory_hits, 102);
    ck_assert_uint_eq(s.compiles, 1);

    /* The same defines in another order are the same kernel. */
    const tk_define swapped[] = {{"UNUSED", NULL}, {"ADD", "1.0f"}};
    tk_kernel_desc d2 = d;
    d2.defines = swapped;
    ck_assert_ptr_eq(get_ok(ctx, &d2), k);

    unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
    float *x = NULL;
    int n = 64;
    tk_assert_status(tk_mem_alloc(ctx, 64 * sizeof(float), (void **)&x), TK_OK);
    void *args[] = {&x, &n};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, args), TK_OK);
    ck_assert_uint_eq(tk__stub_counters_get()->launches, 1);
    tk_assert_status(tk_mem_free(ctx, x), TK_OK);

    tk_context_reset_stats(ctx);
    ck_assert_uint_eq(stats_of(ctx).memory_hits, 0);
    ck_assert_str_eq(tk_context_backend_name(ctx), "stub");
    ck_assert_str_eq(tk_context_target(ctx), "stub");
    ck_assert_str_eq(tk_context_compiler(ctx), "stub-1");
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_warm_cache_compiles_zero)
{
    tk_kernel_desc d = base_desc();
    tk_context *ctx = stub_context();
    char first[33];
    key_of(get_ok(ctx, &d), first);
    tk_context_destroy(ctx);

    ctx = stub_context();
    tk_kernel *k = get_ok(ctx, &d);
    ck_assert_int_eq(origin_of(k), TK_ORIGIN_DISK);
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, 0);
    ck_assert_uint_eq(s.disk_hits, 1);
    ck_assert_uint_eq(s.loads, 1);
    char again[33];
    key_of(k, again);
    ck_assert_str_eq(first, again);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.resources.registers, 16); /* stored with the entry */
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, 1);
    tk_context_destroy(ctx);
}
END_TEST

static int g_n_files;
static char g_files[16][4096];

static int collect_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    size_t n = strlen(path);
    if (flag == FTW_F && S_ISREG(st->st_mode) && n > 4 && strcmp(path + n - 4, ".tkc") == 0 &&
        g_n_files < 16)
        snprintf(g_files[g_n_files++], sizeof g_files[0], "%s", path);
    return 0;
}

static void find_entries(void)
{
    g_n_files = 0;
    nftw(g_dir, collect_entry, 16, FTW_PHYS);
}

START_TEST(test_corrupt_entry_costs_one_recompile)
{
    tk_kernel_desc d = base_desc();
    tk_context *ctx = stub_context();
    get_ok(ctx, &d);
    tk_context_destroy(ctx);

    find_entries();
    ck_assert_int_eq(g_n_files, 1);
    size_t size = 0;
    char *bytes = tk_test_read_file(g_files[0], &size);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_gt(size, 16);
    bytes[size / 2] ^= 0x5a;
    ck_assert_int_eq(tk_test_write_file(g_files[0], bytes, size), 0);
    free(bytes);

    ctx = stub_context();
    tk_kernel *k = get_ok(ctx, &d);
    ck_assert_int_eq(origin_of(k), TK_ORIGIN_COMPILED);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    tk_context_destroy(ctx);

    /* Replaced: the next process compiles nothing. */
    ctx = stub_context();
    get_ok(ctx, &d);
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    ck_assert_uint_eq(stats_of(ctx).disk_hits, 1);
    tk_context_destroy(ctx);
}
END_TEST

typedef struct race {
    tk_context *ctx;
    tk_kernel *got;
    tk_status st;
} race;

static void *race_get(void *arg)
{
    race *r = arg;
    tk_kernel_desc d = base_desc();
    r->st = tk_kernel_get(r->ctx, &d, &r->got);
    return NULL;
}

START_TEST(test_sixteen_threads_compile_once)
{
    tk__stub_counters_get()->compile_delay_ms = 200;
    tk_context *ctx = stub_context();
    pthread_t t[16];
    race r[16];
    for (int i = 0; i < 16; i++) {
        r[i].ctx = ctx;
        r[i].got = NULL;
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_get, &r[i]), 0);
    }
    for (int i = 0; i < 16; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 16; i++) {
        tk_assert_status(r[i].st, TK_OK);
        ck_assert_ptr_eq(r[i].got, r[0].got);
    }
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.loads, 1);
    ck_assert_uint_eq(s.memory_hits, 15);
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, 1);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_processes_compile_once)
{
    /* Four processes at once, one cache: the per-key lock and the second
     * look make one of them compile. Each child reports its compile count
     * as its exit status. */
    tk__stub_counters_get()->compile_delay_ms = 300;
    pid_t pids[4];
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            tk_context *ctx = stub_context();
            tk_kernel_desc d = base_desc();
            tk_kernel *k = NULL;
            if (tk_kernel_get(ctx, &d, &k) != TK_OK)
                _exit(100);
            _exit((int)stats_of(ctx).compiles);
        }
    }
    ck_assert_int_eq(tk_test_wait_children(pids, 4), 1);
}
END_TEST

START_TEST(test_key_changes_with_every_input)
{
    tk_context *ctx = stub_context();
    tk_kernel_desc d = base_desc();
    char keys[7][33];
    key_of(get_ok(ctx, &d), keys[0]);

    const tk_define other_value[] = {{"ADD", "2.0f"}, {"UNUSED", NULL}};
    tk_kernel_desc v = d;
    v.defines = other_value;
    key_of(get_ok(ctx, &v), keys[1]);

    const tk_define one_more[] = {{"ADD", "1.0f"}, {"UNUSED", NULL}, {"EXTRA", "3"}};
    v = d;
    v.defines = one_more;
    v.n_defines = 3;
    key_of(get_ok(ctx, &v), keys[2]);

    const char *const opts[] = {"-O3"};
    v = d;
    v.options = opts;
    v.n_options = 1;
    key_of(get_ok(ctx, &v), keys[3]);

    char *src2 = malloc(strlen(k_source) + 32);
    sprintf(src2, "%s// changed\n", k_source);
    v = d;
    v.source = src2;
    key_of(get_ok(ctx, &v), keys[4]);

    /* A define without a value differs from one with an empty value. */
    const tk_define empty_value[] = {{"ADD", "1.0f"}, {"UNUSED", ""}};
    v = d;
    v.defines = empty_value;
    key_of(get_ok(ctx, &v), keys[5]);

    v = d;
    v.source = "extern \"C\" __global__ void add_one(float *x, int n) {}\n"
               "extern \"C\" __global__ void add_two(float *x, int n) {}\n";
    key_of(get_ok(ctx, &v), keys[6]);
    char other_entry[33];
    v.entry = "add_two";
    key_of(get_ok(ctx, &v), other_entry);
    ck_assert_str_ne(keys[6], other_entry);

    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            ck_assert_msg(strcmp(keys[i], keys[j]) != 0, "keys %d and %d are equal", i, j);
    ck_assert_uint_eq(stats_of(ctx).compiles, 8);

    /* The user buffer changing in place is seen: the text is compared. */
    v = d;
    v.source = src2;
    tk_kernel *before = get_ok(ctx, &v);
    src2[strlen(src2) - 2] = 'X';
    tk_kernel *after = get_ok(ctx, &v);
    ck_assert_ptr_ne(before, after);
    ck_assert_ptr_eq(get_ok(ctx, &v), after);
    src2[strlen(src2) - 2] = 'd';
    ck_assert_ptr_eq(get_ok(ctx, &v), before);
    ck_assert_uint_eq(stats_of(ctx).compiles, 9);
    free(src2);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_load_failure_evicts_and_recompiles_once)
{
    tk_kernel_desc d = base_desc();
    tk_context *ctx = stub_context();
    get_ok(ctx, &d);
    tk_context_destroy(ctx);

    /* A cached entry the driver refuses: evicted, recompiled once, loaded. */
    tk__stub_counters_get()->fail_next_loads = 1;
    ctx = stub_context();
    tk_kernel *k = get_ok(ctx, &d);
    ck_assert_int_eq(origin_of(k), TK_ORIGIN_COMPILED);
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.disk_hits, 1);
    ck_assert_uint_eq(s.load_failures, 1);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.loads, 1);
    tk_context_destroy(ctx);

    ctx = stub_context();
    get_ok(ctx, &d);
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    tk_context_destroy(ctx);

    /* Refused twice: reported, after exactly one recompile. */
    tk__stub_counters_get()->fail_next_loads = 2;
    ctx = stub_context();
    tk_kernel *none = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &none), TK_LOAD_FAILED);
    ck_assert_ptr_null(none);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "refused"));
    s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.load_failures, 2);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_compile_error_returns_log)
{
    tk_context *ctx = stub_context();
    tk_kernel_desc d = base_desc();
    d.source = "extern \"C\" __global__ void add_one(float *x, int n) {}\n"
               "#error the kernel says no\n";
    tk_kernel *k = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_COMPILE_FAILED);
    ck_assert_ptr_null(k);
    const char *msg = tk_context_last_error(ctx);
    ck_assert_msg(strstr(msg, "#error the kernel says no") != NULL, "log missing: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "1 error detected"));
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compile_failures, 1);
    /* Failures are not cached: asking again compiles again. */
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_COMPILE_FAILED);
    ck_assert_uint_eq(stats_of(ctx).compiles, 2);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_unsupported_target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512] = "";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "stub-unknown"), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_UNSUPPORTED);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(err, "stub-unknown") != NULL, "message: %s", err);
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(test_offline_context)
{
    tk_context *ctx = stub_context_in(g_dir, "stub");
    ck_assert_str_eq(tk_context_target(ctx), "stub");
    tk_kernel_desc d = base_desc();
    tk_origin origin = TK_ORIGIN_MEMORY;
    tk_assert_status(tk_kernel_precompile(ctx, &d, &origin), TK_OK);
    ck_assert_int_eq(origin, TK_ORIGIN_COMPILED);
    tk_assert_status(tk_kernel_precompile(ctx, &d, &origin), TK_OK);
    ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);

    /* A kernel can be had (for its metadata) but not launched. */
    tk_kernel *k = get_ok(ctx, &d);
    ck_assert_int_eq(origin_of(k), TK_ORIGIN_DISK);
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, NULL), TK_NO_DEVICE);
    void *p = NULL;
    tk_assert_status(tk_mem_alloc(ctx, 16, &p), TK_NO_DEVICE);
    ck_assert_ptr_null(p);
    ck_assert_uint_eq(tk__stub_counters_get()->loads, 0);
    tk_context_destroy(ctx);

    /* The device context finds what the offline one stored. */
    ctx = stub_context();
    get_ok(ctx, &d);
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_missing_libraries_are_named)
{
    char buf[4096];
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024] = "";

    setenv("TK__NVRTC_LIB", "/nonexistent/libnvrtc_missing.so.13", 1);
    setenv("TK__CUDA_DRIVER_LIB", "/nonexistent/libcuda_missing.so.1", 1);
    setenv("TK__HIP_LIB", "/nonexistent/libamdhip64_missing.so.5", 1);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_CUDA), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_BACKEND_UNAVAILABLE);
    ck_assert_msg(strstr(err, "libnvrtc_missing.so.13") != NULL, "message: %s", err);

    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_HIP), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_BACKEND_UNAVAILABLE);
    ck_assert_msg(strstr(err, "libamdhip64_missing.so.5") != NULL, "message: %s", err);
    ck_assert_ptr_null(ctx);

    tk_assert_status(tk_backend_describe(TK_BACKEND_CUDA, buf, sizeof buf), TK_BACKEND_UNAVAILABLE);
    ck_assert_msg(strstr(buf, "libnvrtc_missing.so.13") != NULL, "describe: %s", buf);
    tk_assert_status(tk_backend_describe(TK_BACKEND_AUTO, buf, sizeof buf), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_backend_describe(TK_BACKEND_STUB, buf, sizeof buf), TK_OK);
    ck_assert_ptr_nonnull(strstr(buf, "stub"));
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(test_missing_symbol_is_named)
{
    /* A library that exists but is not NVRTC: the first missing symbol is named. */
    setenv("TK__NVRTC_LIB", "libxxhash.so.0", 1);
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024] = "";
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_CUDA), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "sm_90"), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_BACKEND_UNAVAILABLE);
    ck_assert_msg(strstr(err, "symbol nvrtcGetErrorString missing from libxxhash.so.0") != NULL,
                  "message: %s", err);
    tk_config_destroy(cfg);
}
END_TEST

START_TEST(test_bad_descriptors)
{
    tk_context *ctx = stub_context();
    tk_kernel *k = NULL;
    tk_kernel_desc d = base_desc();
    tk_assert_status(tk_kernel_get(ctx, NULL, &k), TK_INVALID_ARGUMENT);
    d.source_name = "add_one";
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_INVALID_ARGUMENT); /* both sources */
    d = base_desc();
    d.entry = NULL;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_INVALID_ARGUMENT);
    d = base_desc();
    d.entry = "not an identifier";
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_INVALID_ARGUMENT);
    const tk_define twice[] = {{"ADD", "1"}, {"ADD", "2"}};
    d = base_desc();
    d.defines = twice;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "ADD"));
    const tk_define bad_name[] = {{"A=B", "1"}};
    d = base_desc();
    d.defines = bad_name;
    d.n_defines = 1;
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_INVALID_ARGUMENT);
    d = base_desc();
    d.source = NULL;
    d.source_name = "no_such_embedded_source";
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "no_such_embedded_source"));
    d = base_desc();
    d.entry = "missing_entry";
    tk_assert_status(tk_kernel_get(ctx, &d, &k), TK_NOT_FOUND);
    ck_assert_ptr_null(k);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_cache_disabled_compiles_per_context)
{
    tk_kernel_desc d = base_desc();
    for (int i = 0; i < 2; i++) {
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        char err[256];
        tk_assert_status(tk_config_create(&cfg), TK_OK);
        tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
        tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
        tk_assert_status(tk_config_set_cache_disabled(cfg, 1), TK_OK);
        tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
        tk_config_destroy(cfg);
        get_ok(ctx, &d);
        ck_assert_uint_eq(stats_of(ctx).compiles, 1);
        ck_assert_uint_eq(stats_of(ctx).cache_errors, 0);
        tk_context_destroy(ctx);
    }
    find_entries();
    ck_assert_int_eq(g_n_files, 0);
}
END_TEST

START_TEST(test_environment_selects_stub)
{
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    setenv("TOKITAI_JIT_CACHE_DIR", g_dir, 1);
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_context_create(NULL, &ctx, err, sizeof err), TK_OK);
    ck_assert_str_eq(tk_context_backend_name(ctx), "stub");
    tk_context_destroy(ctx);
    setenv("TOKITAI_JIT_BACKEND", "nonsense", 1);
    tk_assert_status(tk_context_create(NULL, &ctx, err, sizeof err), TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "nonsense"));
}
END_TEST

typedef struct log_sink {
    int n_info;
    char last[512];
} log_sink;

static void sink(void *user, tk_log_level level, const char *msg)
{
    log_sink *s = user;
    if (level == TK_LOG_INFO)
        s->n_info++;
    snprintf(s->last, sizeof s->last, "%s", msg);
}

START_TEST(test_log_callback)
{
    log_sink s = {0, ""};
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_log(cfg, sink, &s), TK_OK);
    tk_assert_status(tk_config_set_log_level(cfg, TK_LOG_INFO), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    tk_config_destroy(cfg);
    tk_kernel_desc d = base_desc();
    get_ok(ctx, &d);
    ck_assert_int_ge(s.n_info, 2);
    ck_assert_msg(strstr(s.last, "compiled add_one") != NULL, "last: %s", s.last);
    tk_context_destroy(ctx);
}
END_TEST

static tk_status timed_nothing(void *user)
{
    (void)user;
    return TK_OK;
}

START_TEST(test_memory_api_on_stub)
{
    tk_context *ctx = stub_context();
    unsigned char *p = NULL;
    unsigned char host[32], back[32];
    for (int i = 0; i < 32; i++)
        host[i] = (unsigned char)i;
    tk_assert_status(tk_mem_alloc(ctx, 32, (void **)&p), TK_OK);
    tk_assert_status(tk_mem_set(ctx, p, 0xee, 32), TK_OK);
    tk_assert_status(tk_mem_download(ctx, back, p, 32), TK_OK);
    ck_assert_int_eq(back[31], 0xee);
    tk_assert_status(tk_mem_upload(ctx, p, host, 32), TK_OK);
    tk_assert_status(tk_mem_download(ctx, back, p, 32), TK_OK);
    ck_assert_int_eq(memcmp(host, back, 32), 0);
    tk_assert_status(tk_stream_sync(ctx, NULL), TK_OK);
    float ms = -1.0f;
    tk_assert_status(tk_time_on_stream(ctx, NULL, timed_nothing, NULL, &ms), TK_OK);
    ck_assert(ms >= 0.0f);
    tk_assert_status(tk_mem_free(ctx, p), TK_OK);
    tk_assert_status(tk_mem_free(ctx, NULL), TK_OK);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_config_rejects_nonsense)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(NULL), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, (tk_backend_kind)42), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_set_device(cfg, -1), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_set_policy(cfg, (tk_policy)7), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_set_target(cfg, ""), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_set_target(cfg, NULL), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, TK_POLICY_GENERIC), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_context *ctx = NULL;
    char err[128];
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    ck_assert_int_eq(tk_context_policy(ctx), TK_POLICY_GENERIC);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    tk_config_destroy(NULL);
    tk_context_destroy(NULL);
    tk_assert_status(tk_context_create(NULL, NULL, NULL, 0), TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(tk_embedded_sources());
}
END_TEST

START_TEST(test_embedded_includes_expanded_once)
{
    const char *const *names = tk_embedded_sources();
    ck_assert_ptr_nonnull(names);
    if (!names[0]) {
        printf("skipped: no embedded sources in this build\n");
        return;
    }
    size_t len = 0;
    const char *text = tk__embedded_source(names[0], &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), len);

    char src[512];
    snprintf(src, sizeof src,
             "#include \"%s.cu\"\n#include \"%s.cu\"\n"
             "extern \"C\" __global__ void after_include(int *x) { x[0] = 1; }\n",
             names[0], names[0]);
    tk_context *ctx = stub_context();
    tk_kernel_desc d = {.source = src, .entry = "after_include"};
    const tk_kernel *k = get_ok(ctx, &d);
    /* The stub's code object carries the source the compiler would see. */
    char *code = malloc(k->code_size + 1);
    memcpy(code, k->code, k->code_size);
    code[k->code_size] = '\0';
    const char *body = code + 8 + strlen(code + 8) + 1;
    char marker[128];
    snprintf(marker, sizeof marker, "#line 1 \"%s\"", names[0]);
    const char *first = strstr(body, marker);
    ck_assert_msg(first != NULL, "no %s in %s", marker, body);
    ck_assert_ptr_null(strstr(first + 1, marker)); /* included once */
    ck_assert_ptr_nonnull(strstr(body, "/* stub prelude */"));
    ck_assert_ptr_null(strstr(body, "#include \""));
    /* A prefix of the embedded text is in there verbatim. */
    char head[64];
    size_t hl = len < sizeof head - 1 ? len : sizeof head - 1;
    memcpy(head, text, hl);
    head[hl] = '\0';
    ck_assert_ptr_nonnull(strstr(body, head));
    free(code);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_env_logger_writes_stderr_only_when_asked)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    FILE *f = fopen(path, "w+");
    ck_assert_ptr_nonnull(f);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(f), 2), 0);

    tk_kernel_desc d = base_desc();
    unsetenv("TOKITAI_JIT_LOG");
    tk_context *ctx = stub_context();
    get_ok(ctx, &d);
    tk_context_destroy(ctx);
    fflush(stderr);
    long quiet = ftell(f);

    setenv("TOKITAI_JIT_LOG", "info", 1);
    ctx = stub_context();
    d.entry = "add_one";
    const tk_define other[] = {{"ADD", "5.0f"}};
    d.defines = other;
    d.n_defines = 1;
    get_ok(ctx, &d);
    tk_context_destroy(ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);

    ck_assert_int_eq(quiet, 0);
    char *text = tk_test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "tokitai-jit: info: compiled add_one") != NULL, "stderr: %s", text);
    free(text);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("stub");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_compile_then_memory_hit);
    tcase_add_test(tc, test_warm_cache_compiles_zero);
    tcase_add_test(tc, test_corrupt_entry_costs_one_recompile);
    tcase_add_test(tc, test_sixteen_threads_compile_once);
    tcase_add_test(tc, test_processes_compile_once);
    tcase_add_test(tc, test_key_changes_with_every_input);
    tcase_add_test(tc, test_load_failure_evicts_and_recompiles_once);
    tcase_add_test(tc, test_compile_error_returns_log);
    tcase_add_test(tc, test_unsupported_target);
    tcase_add_test(tc, test_offline_context);
    tcase_add_test(tc, test_missing_libraries_are_named);
    tcase_add_test(tc, test_missing_symbol_is_named);
    tcase_add_test(tc, test_bad_descriptors);
    tcase_add_test(tc, test_cache_disabled_compiles_per_context);
    tcase_add_test(tc, test_environment_selects_stub);
    tcase_add_test(tc, test_log_callback);
    tcase_add_test(tc, test_memory_api_on_stub);
    tcase_add_test(tc, test_config_rejects_nonsense);
    tcase_add_test(tc, test_embedded_includes_expanded_once);
    tcase_add_test(tc, test_env_logger_writes_stderr_only_when_asked);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(engine_suite());
}
