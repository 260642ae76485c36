/*
 * The engine on a real device (label gpu): compile, load, launch and check;
 * a second process with the warm cache compiles nothing; 16 threads at first
 * use compile once; the caller's stream is honoured. Without a device it
 * prints "skipped: ..." and exits 77.
 *
 * Runs without forking (CUDA does not survive fork); the second process is
 * this binary re-executed with "--child <cache dir>".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit/jit_internal.h"
#include "tk_test.h"

static const char *const k_axpb =
    "extern \"C\" __global__ void axpb(float *y, const float *x, float a, float b, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + b + OFFSET;\n"
    "}\n";

static const char *const k_spin = "extern \"C\" __global__ void spin(long long cycles, int *out)\n"
                                  "{\n"
                                  "    long long t0 = clock64();\n"
                                  "    while (clock64() - t0 < cycles) {\n"
                                  "    }\n"
                                  "    if (threadIdx.x == 0) *out = 42;\n"
                                  "}\n";

static const tk_define k_defines[] = {{"OFFSET", "0.5f"}};

static tk_context *context_in(const char *dir)
{
    tk_config *cfg = NULL;
    tk_config_create(&cfg);
    tk_config_set_cache_dir(cfg, dir);
    tk_context *ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    return ctx;
}

static tk_kernel *get_axpb(tk_context *ctx)
{
    tk_kernel_desc d = {.source = k_axpb, .entry = "axpb", .defines = k_defines, .n_defines = 1};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(st),
                  tk_context_last_error(ctx));
    return k;
}

/* Runs axpb on n elements and checks every result; returns the number wrong. */
static int run_axpb(tk_context *ctx, tk_kernel *k, void *stream)
{
    enum { N = 10000 };
    static float x[N], y[N];
    float *dx = NULL, *dy = NULL;
    int n = N, wrong = 0;
    float a = 3.0f, b = -1.0f;
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 97) * 0.25f;
    if (tk_mem_alloc(ctx, sizeof x, (void **)&dx) != TK_OK ||
        tk_mem_alloc(ctx, sizeof y, (void **)&dy) != TK_OK)
        return -1;
    tk_mem_upload(ctx, dx, x, sizeof x);
    tk_mem_set(ctx, dy, 0xff, sizeof y);
    void *args[] = {&dy, &dx, &a, &b, &n};
    unsigned grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    if (tk_kernel_launch(ctx, k, grid, block, 0, stream, args) != TK_OK ||
        tk_stream_sync(ctx, stream) != TK_OK)
        return -1;
    tk_mem_download(ctx, y, dy, sizeof y);
    for (int i = 0; i < N; i++)
        if (y[i] != a * x[i] + b + 0.5f)
            wrong++;
    tk_mem_free(ctx, dx);
    tk_mem_free(ctx, dy);
    return wrong;
}

static char g_self[4096];

START_TEST(test_compile_load_launch)
{
    char *dir = tk_test_tmpdir("gpu-engine");
    tk_context *ctx = context_in(dir);
    tk_kernel *k = get_axpb(ctx);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_COMPILED);
    ck_assert_int_gt(info.resources.registers, 0);
    ck_assert_int_eq(run_axpb(ctx, k, NULL), 0);
    ck_assert_ptr_eq(get_axpb(ctx), k);

    /* A second process with the warm cache compiles nothing. */
    char *argv[] = {g_self, "--child", dir, NULL};
    char *out = NULL, *errs = NULL;
    int rc = tk_test_run(argv, &out, &errs);
    ck_assert_msg(rc == 0, "child exit %d: %s %s", rc, out ? out : "", errs ? errs : "");
    free(errs);
    ck_assert_msg(out && strstr(out, "child: compiles 0 disk_hits 1 wrong 0"), "child: %s",
                  out ? out : "");
    free(out);
    tk_context_destroy(ctx);
    tk_test_rmtree(dir);
    free(dir);
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
    tk_kernel_desc d = {.source = k_axpb, .entry = "axpb", .defines = k_defines, .n_defines = 1};
    r->st = tk_kernel_get(r->ctx, &d, &r->got);
    return NULL;
}

START_TEST(test_sixteen_threads_compile_once)
{
    char *dir = tk_test_tmpdir("gpu-engine");
    tk_context *ctx = context_in(dir);
    pthread_t t[16];
    race r[16];
    for (int i = 0; i < 16; i++) {
        r[i].ctx = ctx;
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_get, &r[i]), 0);
    }
    for (int i = 0; i < 16; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 16; i++) {
        tk_assert_status(r[i].st, TK_OK);
        ck_assert_ptr_eq(r[i].got, r[0].got);
    }
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_context_get_stats(ctx, &s);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.loads, 1);
    ck_assert_int_eq(run_axpb(ctx, r[0].got, NULL), 0);
    tk_context_destroy(ctx);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

typedef struct spin_run {
    tk_context *ctx;
    tk_kernel *k;
    void *stream;
    int *out;
} spin_run;

static tk_status launch_spin(void *user)
{
    spin_run *s = user;
    long long cycles = 100000000LL; /* ~50 ms at 2 GHz */
    void *args[] = {&cycles, &s->out};
    unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    return tk_kernel_launch(s->ctx, s->k, grid, block, 0, s->stream, args);
}

START_TEST(test_callers_stream_is_honoured)
{
    char *dir = tk_test_tmpdir("gpu-engine");
    tk_context *ctx = context_in(dir);
    tk_kernel_desc d = {.source = k_spin, .entry = "spin"};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "%s", tk_context_last_error(ctx));
    void *stream = NULL;
    tk_assert_status(tk__ctx_stream_create(ctx, &stream), TK_OK);
    int *dout = NULL, out = 0;
    tk_assert_status(tk_mem_alloc(ctx, sizeof(int), (void **)&dout), TK_OK);
    tk_assert_status(tk_mem_set(ctx, dout, 0, sizeof(int)), TK_OK);

    /* The events are recorded on a non-blocking stream: they only bracket
     * the spin kernel if the kernel really went to that stream. */
    spin_run run = {ctx, k, stream, dout};
    float ms = 0.0f;
    tk_assert_status(tk_time_on_stream(ctx, stream, launch_spin, &run, &ms), TK_OK);
    ck_assert_msg(ms > 10.0f, "spin on the caller's stream measured %.3f ms", ms);
    tk_assert_status(tk_stream_sync(ctx, stream), TK_OK);
    tk_assert_status(tk_mem_download(ctx, &out, dout, sizeof out), TK_OK);
    ck_assert_int_eq(out, 42);

    /* And the default stream does not wait for it... the axpb result on the
     * caller's stream is right too. */
    tk_kernel *ka = get_axpb(ctx);
    ck_assert_int_eq(run_axpb(ctx, ka, stream), 0);
    tk_mem_free(ctx, dout);
    tk__ctx_stream_destroy(ctx, stream);
    tk_context_destroy(ctx);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

/* The second process: no Check macros here (outside a running test, even a
 * passing ck_assert exits the process). */
static int child_main(const char *dir)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024] = "";
    tk_config_create(&cfg);
    tk_config_set_cache_dir(cfg, dir);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        printf("child: no context: %s: %s\n", tk_status_str(st), err);
        return 3;
    }
    tk_kernel_desc d = {.source = k_axpb, .entry = "axpb", .defines = k_defines, .n_defines = 1};
    tk_kernel *k = NULL;
    st = tk_kernel_get(ctx, &d, &k);
    if (st != TK_OK) {
        printf("child: tk_kernel_get: %s: %s\n", tk_status_str(st), tk_context_last_error(ctx));
        tk_context_destroy(ctx);
        return 4;
    }
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_context_get_stats(ctx, &s);
    int wrong = run_axpb(ctx, k, NULL);
    printf("child: compiles %llu disk_hits %llu wrong %d\n", (unsigned long long)s.compiles,
           (unsigned long long)s.disk_hits, wrong);
    tk_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2]);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0)
        return 1;
    g_self[n] = '\0';

    Suite *s = suite_create("gpu_engine");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_compile_load_launch);
    tcase_add_test(tc, test_sixteen_threads_compile_once);
    tcase_add_test(tc, test_callers_stream_is_honoured);
    suite_add_tcase(s, tc);
    return tk_test_gpu_main(s);
}
