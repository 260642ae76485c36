/*
 * User kernels on a real device (label gpu): a template kernel named by a
 * C++ name expression and a cooperative_groups reduction run and give the
 * right answer; kernels in thread-block clusters of 2, 8 and 16 blocks
 * (sm_90) read each other's shared memory; a header edited between two
 * processes gives the new result (one compile), and a third process hits
 * the disk cache with it. Without a device it prints "skipped: ..." and
 * exits 77.
 *
 * Runs without forking (CUDA does not survive fork); the other processes
 * are this binary re-executed with "--child <cache dir> <include dir>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tk_test.h"

static char g_self[4096];

static tk_context *context_in(const char *dir)
{
    tk_config *cfg = NULL;
    tk_config_create(&cfg);
    tk_config_set_cache_dir(cfg, dir);
    tk_context *ctx = tk_test_gpu_context_or_skip(cfg);
    tk_config_destroy(cfg);
    return ctx;
}

/* The end of a test that made its context with context_in. */
static void context_done(tk_context *ctx, char *dir)
{
    tk_context_destroy(ctx);
    tk_test_rmtree(dir);
    free(dir);
}

static tk_kernel *get_ok(tk_context *ctx, const tk_kernel_desc *d)
{
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get %s: %s: %s", d->entry, tk_status_str(st),
                  tk_context_last_error(ctx));
    return k;
}

static const char *const k_templates =
    "template <int N, typename T> __global__ void fill(T *x, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] = T(N) + T(i);\n"
    "}\n"
    "namespace ns {\n"
    "template <int B, bool NEG> __global__ void scale(int *x, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] *= NEG ? -B : B;\n"
    "}\n"
    "}\n";

START_TEST(test_template_kernels)
{
    char *dir = tk_test_tmpdir("gpu_usr_tpl");
    tk_context *ctx = context_in(dir);
    enum { N = 5000 };
    unsigned grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    int n = N;

    tk_kernel_desc df = {.source = k_templates, .entry = "fill<7, float>"};
    tk_kernel *kf = get_ok(ctx, &df);
    float *hf = malloc(N * sizeof *hf);
    void *d = NULL;
    tk_assert_status(tk_mem_alloc(ctx, N * sizeof(float), &d), TK_OK);
    void *args[] = {&d, &n};
    tk_assert_status(tk_kernel_launch(ctx, kf, grid, block, 0, NULL, args), TK_OK);
    tk_assert_status(tk_mem_download(ctx, hf, d, N * sizeof(float)), TK_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(hf[i] == 7.0f + (float)i, "fill<7, float>[%d] = %g", i, (double)hf[i]);

    tk_kernel_desc di = {.source = k_templates, .entry = "fill<3, int>"};
    tk_kernel_desc ds = {.source = k_templates, .entry = "ns::scale<5, true>"};
    tk_kernel *ki = get_ok(ctx, &di), *ks = get_ok(ctx, &ds);
    ck_assert_ptr_ne(ki, kf);
    int *hi = malloc(N * sizeof *hi);
    tk_assert_status(tk_kernel_launch(ctx, ki, grid, block, 0, NULL, args), TK_OK);
    tk_assert_status(tk_kernel_launch(ctx, ks, grid, block, 0, NULL, args), TK_OK);
    tk_assert_status(tk_mem_download(ctx, hi, d, N * sizeof(int)), TK_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(hi[i] == -5 * (3 + i), "scale<5, true>(fill<3, int>)[%d] = %d", i, hi[i]);
    tk_mem_free(ctx, d);
    free(hf);
    free(hi);
    context_done(ctx, dir);
}
END_TEST

static const char *const k_cg =
    "#include <cooperative_groups.h>\n"
    "#include <cooperative_groups/reduce.h>\n"
    "namespace cg = cooperative_groups;\n"
    "extern \"C\" __global__ void cg_sum(const int *in, int n, unsigned long long *out)\n"
    "{\n"
    "    cg::thread_block block = cg::this_thread_block();\n"
    "    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    unsigned long long v = i < n ? (unsigned long long)in[i] : 0ull;\n"
    "    v = cg::reduce(warp, v, cg::plus<unsigned long long>());\n"
    "    block.sync();\n"
    "    if (warp.thread_rank() == 0) atomicAdd(out, v);\n"
    "}\n";

START_TEST(test_cooperative_groups_kernel)
{
    char *dir = tk_test_tmpdir("gpu_usr_cg");
    tk_context *ctx = context_in(dir);
    if (strcmp(tk_context_backend_name(ctx), "cuda") != 0) {
        printf("note: cooperative_groups.h is a CUDA toolkit header; not run on %s\n",
               tk_context_backend_name(ctx));
        context_done(ctx, dir);
        return;
    }
    enum { N = 100003 };
    int *h = malloc(N * sizeof *h);
    unsigned long long want = 0, got = 0;
    for (int i = 0; i < N; i++) {
        h[i] = (i * 7919) % 1000;
        want += (unsigned long long)h[i];
    }
    tk_kernel_desc d = {.source = k_cg, .entry = "cg_sum", .source_label = "cg_sum.cu"};
    tk_kernel *k = get_ok(ctx, &d);
    void *din = NULL, *dout = NULL;
    tk_assert_status(tk_mem_alloc(ctx, N * sizeof(int), &din), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, sizeof got, &dout), TK_OK);
    tk_assert_status(tk_mem_upload(ctx, din, h, N * sizeof(int)), TK_OK);
    tk_assert_status(tk_mem_set(ctx, dout, 0, sizeof got), TK_OK);
    int n = N;
    void *args[] = {&din, &n, &dout};
    unsigned grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, args), TK_OK);
    tk_assert_status(tk_mem_download(ctx, &got, dout, sizeof got), TK_OK);
    ck_assert_uint_eq(got, want);
    tk_mem_free(ctx, din);
    tk_mem_free(ctx, dout);
    free(h);
    context_done(ctx, dir);
}
END_TEST

/* Thread-block clusters (sm_90 and later): each block reads its neighbour's
 * shared memory in the cluster ring. 16 blocks is a non-portable size: the
 * engine allows it when it loads a kernel compiled for it. */
static const char *const k_cluster_ring =
    "#include <cooperative_groups.h>\n"
    "namespace cg = cooperative_groups;\n"
    "template <int C> __global__ void __cluster_dims__(C, 1, 1) ring(int *out)\n"
    "{\n"
    "    __shared__ int mine;\n"
    "    cg::cluster_group cl = cg::this_cluster();\n"
    "    if (threadIdx.x == 0) mine = (int)blockIdx.x * 7 + 1;\n"
    "    cl.sync();\n"
    "    const unsigned r = cl.block_rank(), n = cl.num_blocks();\n"
    "    const int *peer = cl.map_shared_rank(&mine, (r + 1) % n);\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = (int)n * 1000000 + *peer;\n"
    "    cl.sync();\n"
    "}\n";

START_TEST(test_cluster_kernels)
{
    char *dir = tk_test_tmpdir("gpu_usr_cluster");
    tk_context *ctx = context_in(dir);
    const char *target = tk_context_target(ctx);
    if (strcmp(tk_context_backend_name(ctx), "cuda") != 0 || target == NULL ||
        strncmp(target, "sm_", 3) != 0 || atoi(target + 3) < 90) {
        printf("note: thread-block clusters need NVIDIA sm_90 or later; not run on %s %s\n",
               tk_context_backend_name(ctx), target ? target : "?");
        context_done(ctx, dir);
        return;
    }
    enum { BLOCKS = 64 };
    void *d = NULL;
    int h[BLOCKS];
    tk_assert_status(tk_mem_alloc(ctx, sizeof h, &d), TK_OK);
    static const char *const entries[] = {"ring<2>", "ring<8>", "ring<16>"};
    static const int sizes[] = {2, 8, 16};
    for (int e = 0; e < 3; e++) {
        tk_kernel_desc kd = {.source = k_cluster_ring, .entry = entries[e]};
        tk_kernel *k = get_ok(ctx, &kd);
        unsigned grid[3] = {BLOCKS, 1, 1}, block[3] = {64, 1, 1};
        void *args[] = {&d};
        tk_assert_status(tk_mem_set(ctx, d, 0, sizeof h), TK_OK);
        tk_status st = tk_kernel_launch(ctx, k, grid, block, 0, NULL, args);
        ck_assert_msg(st == TK_OK, "%s: %s: %s", entries[e], tk_status_str(st),
                      tk_context_last_error(ctx));
        tk_assert_status(tk_mem_download(ctx, h, d, sizeof h), TK_OK);
        const int c = sizes[e];
        for (int b = 0; b < BLOCKS; b++) {
            const int peer = b / c * c + (b % c + 1) % c;
            ck_assert_msg(h[b] == c * 1000000 + peer * 7 + 1, "%s: block %d read %d", entries[e],
                          b, h[b]);
        }
    }
    tk_mem_free(ctx, d);
    context_done(ctx, dir);
}
END_TEST

/* ---------------------------------------------- header edit across processes */

static const char *const k_uses_header =
    "#include \"value.h\"\n"
    "extern \"C\" __global__ void put_value(int *out) { *out = VALUE; }\n";

/* Child: gets put_value with -I<inc>, runs it, prints "<value> <origin> <compiles>". */
static int child_main(const char *cache, const char *inc)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024] = "";
    tk_config_create(&cfg);
    tk_config_set_cache_dir(cfg, cache);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        printf("child: no context: %s\n", err);
        return 3;
    }
    char opt[4200];
    snprintf(opt, sizeof opt, "-I%s", inc);
    const char *opts[] = {opt};
    tk_kernel_desc d = {
        .source = k_uses_header, .entry = "put_value", .options = opts, .n_options = 1};
    tk_kernel *k = NULL;
    if (tk_kernel_get(ctx, &d, &k) != TK_OK) {
        printf("child: %s\n", tk_context_last_error(ctx));
        return 4;
    }
    void *dout = NULL;
    int value = -1;
    unsigned one[3] = {1, 1, 1};
    if (tk_mem_alloc(ctx, sizeof value, &dout) != TK_OK)
        return 5;
    void *args[] = {&dout};
    if (tk_kernel_launch(ctx, k, one, one, 0, NULL, args) != TK_OK ||
        tk_mem_download(ctx, &value, dout, sizeof value) != TK_OK)
        return 6;
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_kernel_get_info(k, &info);
    tk_context_get_stats(ctx, &s);
    printf("%d %d %llu\n", value, (int)info.origin, (unsigned long long)s.compiles);
    tk_mem_free(ctx, dout);
    tk_context_destroy(ctx);
    return 0;
}

static void run_child(const char *cache, const char *inc, int *value, int *origin,
                      unsigned long long *compiles)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s' --child '%s' '%s'", g_self, cache, inc);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[2048] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    int rc = pclose(p);
    ck_assert_msg(rc == 0 && sscanf(line, "%d %d %llu", value, origin, compiles) == 3,
                  "child failed (%d): %s", rc, line);
}

START_TEST(test_header_edit_between_processes)
{
    char *cache = tk_test_tmpdir("gpu_usr_hdr_cache");
    char *inc = tk_test_tmpdir("gpu_usr_hdr_inc");
    char path[4200];
    snprintf(path, sizeof path, "%s/value.h", inc);
    ck_assert_int_eq(tk_test_write_file(path, "#define VALUE 1\n", 16), 0);
    int value, origin;
    unsigned long long compiles;
    run_child(cache, inc, &value, &origin, &compiles);
    ck_assert_int_eq(value, 1);
    ck_assert_uint_eq(compiles, 1);
    run_child(cache, inc, &value, &origin, &compiles);
    ck_assert_int_eq(value, 1);
    ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(compiles, 0);

    ck_assert_int_eq(tk_test_write_file(path, "#define VALUE 2\n", 16), 0);
    run_child(cache, inc, &value, &origin, &compiles);
    ck_assert_int_eq(value, 2);
    ck_assert_int_eq(origin, TK_ORIGIN_COMPILED);
    ck_assert_uint_eq(compiles, 1);
    run_child(cache, inc, &value, &origin, &compiles);
    ck_assert_int_eq(value, 2);
    ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    ck_assert_uint_eq(compiles, 0);
    tk_test_rmtree(cache);
    tk_test_rmtree(inc);
    free(cache);
    free(inc);
}
END_TEST

/* A C++ kernel (not extern "C") named as written, with a parameter of
 * every size class; its arguments are placed by the layout the library
 * read from the code object, and the kernel echoes what it received. */
static const char *const k_every =
    "struct Pair { float a; double b; };\n"
    "__global__ void echo_every(signed char c, short s, int i, long long l, float f, double d,\n"
    "                           __half h, Pair pr, long long *oi, double *od)\n"
    "{\n"
    "    if (threadIdx.x != 0) return;\n"
    "    oi[0] = c; oi[1] = s; oi[2] = i; oi[3] = l;\n"
    "    od[0] = f; od[1] = d; od[2] = __half2float(h); od[3] = pr.a; od[4] = pr.b;\n"
    "}\n";

START_TEST(test_cpp_named_every_size_class)
{
    char *dir = tk_test_tmpdir("gpu_usr_every");
    tk_context *ctx = context_in(dir);
    /* __half: the CUDA prelude includes cuda_fp16.h, hipRTC has it built in. */
    tk_kernel_desc desc = {.source = k_every, .entry = "echo_every"};
    tk_kernel *k = get_ok(ctx, &desc);
    tk_kernel_params p = TK_STRUCT_INIT(tk_kernel_params);
    tk_assert_status(tk_kernel_get_params(k, &p), TK_OK);
    ck_assert_uint_eq(p.n_params, 10);
    static const uint32_t sizes[10] = {1, 2, 4, 8, 4, 8, 2, 16, 8, 8};
    static const int kinds[10] = {TK_PARAM_INT,   TK_PARAM_INT,    TK_PARAM_INT,    TK_PARAM_INT,
                                  TK_PARAM_FLOAT, TK_PARAM_FLOAT,  TK_PARAM_FLOAT,  TK_PARAM_STRUCT,
                                  TK_PARAM_POINTER, TK_PARAM_POINTER};
    for (int i = 0; i < 10; i++) {
        ck_assert_msg(p.params[i].size == sizes[i], "param %d size %u", i, p.params[i].size);
        ck_assert_msg(p.params[i].kind == kinds[i], "param %d kind %d", i, p.params[i].kind);
    }
    void *oi = NULL, *od = NULL;
    tk_assert_status(tk_mem_alloc(ctx, 4 * sizeof(long long), &oi), TK_OK);
    tk_assert_status(tk_mem_alloc(ctx, 5 * sizeof(double), &od), TK_OK);
    signed char c = -5;
    short sh = -300;
    int in = -70000;
    long long l = -(1LL << 40);
    float f = 1.5f;
    double d = 0.1;
    uint16_t h = 0x3c00; /* 1.0 in fp16 */
    struct {
        float a;
        double b;
    } pr = {2.5f, -7.25};
    void *values[10] = {&c, &sh, &in, &l, &f, &d, &h, &pr, &oi, &od};
    /* Each argument copied into a block laid out as the code object says,
     * then handed over one pointer per parameter. */
    unsigned char block_bytes[256] = {0};
    void *args[10];
    for (int i = 0; i < 10; i++) {
        ck_assert_uint_le(p.params[i].offset + p.params[i].size, sizeof block_bytes);
        memcpy(block_bytes + p.params[i].offset, values[i], p.params[i].size);
        args[i] = block_bytes + p.params[i].offset;
    }
    unsigned grid[3] = {1, 1, 1}, blk[3] = {32, 1, 1};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, blk, 0, NULL, args), TK_OK);
    long long hi[4];
    double hd[5];
    tk_assert_status(tk_mem_download(ctx, hi, oi, sizeof hi), TK_OK);
    tk_assert_status(tk_mem_download(ctx, hd, od, sizeof hd), TK_OK);
    ck_assert(hi[0] == -5 && hi[1] == -300 && hi[2] == -70000 && hi[3] == -(1LL << 40));
    ck_assert(hd[0] == 1.5 && hd[1] == 0.1 && hd[2] == 1.0 && hd[3] == 2.5 && hd[4] == -7.25);
    tk_mem_free(ctx, oi);
    tk_mem_free(ctx, od);
    context_done(ctx, dir);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], argv[3]);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0)
        return 1;
    g_self[n] = '\0';

    Suite *s = suite_create("gpu_user_kernels");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_template_kernels);
    tcase_add_test(tc, test_cooperative_groups_kernel);
    tcase_add_test(tc, test_cluster_kernels);
    tcase_add_test(tc, test_header_edit_between_processes);
    tcase_add_test(tc, test_cpp_named_every_size_class);
    suite_add_tcase(s, tc);
    return tk_test_gpu_main(s);
}
