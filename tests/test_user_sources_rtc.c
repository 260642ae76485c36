/*
 * User kernels with the real compilers, offline (no GPU): every family of
 * CUDA toolkit headers compiles with NVRTC for sm_80 and sm_90 (CUDA 13
 * keeps libcu++ under include/cccl), template name expressions compile and
 * come back from disk by their lowered name with no compile, a user header
 * edit between two contexts recompiles once, and compiler errors name the
 * user's file and line, in the one-line message too. hipRTC (ROCm 5.2) for
 * gfx90a: name expressions, in-memory and -I headers, error positions.
 * A compiler that is not installed skips its tests with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jit/jit_internal.h"
#include "tk_test.h"

static char *g_dir;
static char *g_src;

static void setup(void)
{
    g_dir = tk_test_tmpdir("usrc_rtc_cache");
    g_src = tk_test_tmpdir("usrc_rtc_tree");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_src);
    free(g_dir);
    free(g_src);
}

static tk_context *offline(tk_backend_kind kind, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, kind), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    ck_assert_msg(st == TK_OK, "offline %s: %s: %s", target, tk_status_str(st), err);
    return ctx;
}

static int available(tk_backend_kind kind, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_backend(cfg, kind) != TK_OK ||
        tk_config_set_target(cfg, target) != TK_OK || tk_config_set_cache_disabled(cfg, 1) != TK_OK)
        return 0;
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    tk_context_destroy(ctx);
    if (st != TK_OK)
        printf("note: %s for %s unavailable, its tests skip: %s\n",
               kind == TK_BACKEND_CUDA ? "NVRTC" : "hipRTC", target, err);
    return st == TK_OK;
}

/* Compiles d on a fresh context; returns the origin, fails the test on error. */
static tk_origin precompile_ok(tk_backend_kind kind, const char *target, const tk_kernel_desc *d,
                               uint64_t *compiles)
{
    tk_context *ctx = offline(kind, target);
    tk_origin origin = TK_ORIGIN_MEMORY;
    tk_status st = tk_kernel_precompile(ctx, d, &origin);
    ck_assert_msg(st == TK_OK, "%s for %s: %s: %s", d->entry, target, tk_status_str(st),
                  tk_context_last_error(ctx));
    if (compiles) {
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
        *compiles = s.compiles;
    }
    tk_context_destroy(ctx);
    return origin;
}

/* ------------------------------------------------- toolkit header families */

typedef struct family {
    const char *name;
    const char *source;
    const char *entry;
} family;

static const family k_families[] = {
    {"cooperative_groups",
     "#include <cooperative_groups.h>\n"
     "#include <cooperative_groups/reduce.h>\n"
     "namespace cg = cooperative_groups;\n"
     "extern \"C\" __global__ void cg_sum(const int *in, int *out)\n"
     "{\n"
     "    cg::thread_block block = cg::this_thread_block();\n"
     "    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);\n"
     "    int v = cg::reduce(warp, in[block.thread_rank()], cg::plus<int>());\n"
     "    block.sync();\n"
     "    if (warp.thread_rank() == 0) atomicAdd(out, v);\n"
     "}\n",
     "cg_sum"},
    {"cuda/std",
     "#include <cuda/std/type_traits>\n"
     "#include <cuda/std/limits>\n"
     "#include <cuda/std/array>\n"
     "static_assert(cuda::std::is_same<int, cuda::std::remove_cv_t<const int>>::value, \"\");\n"
     "extern \"C\" __global__ void std_k(int *x)\n"
     "{\n"
     "    cuda::std::array<int, 2> a{{1, 2}};\n"
     "    x[0] = a[1] + cuda::std::numeric_limits<short>::max();\n"
     "}\n",
     "std_k"},
    {"cuda/barrier",
     "#include <cuda/barrier>\n"
     "extern \"C\" __global__ void bar_k(int *x)\n"
     "{\n"
     "    __shared__ cuda::barrier<cuda::thread_scope_block> bar;\n"
     "    if (threadIdx.x == 0) init(&bar, blockDim.x);\n"
     "    __syncthreads();\n"
     "    x[threadIdx.x] = 1;\n"
     "    bar.arrive_and_wait();\n"
     "}\n",
     "bar_k"},
    {"cuda/pipeline",
     "#include <cuda/pipeline>\n"
     "#include <cooperative_groups.h>\n"
     "extern \"C\" __global__ void pipe_k(const int *in, int *out)\n"
     "{\n"
     "    __shared__ int s[128];\n"
     "    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();\n"
     "    pipe.producer_acquire();\n"
     "    cuda::memcpy_async(&s[threadIdx.x], &in[threadIdx.x], sizeof(int), pipe);\n"
     "    pipe.producer_commit();\n"
     "    pipe.consumer_wait();\n"
     "    out[threadIdx.x] = s[threadIdx.x];\n"
     "    pipe.consumer_release();\n"
     "}\n",
     "pipe_k"},
    {"cuda_bf16",
     "#include <cuda_bf16.h>\n"
     "extern \"C\" __global__ void bf16_k(__nv_bfloat16 *x)\n"
     "{\n"
     "    x[threadIdx.x] = __hadd(x[threadIdx.x], __float2bfloat16(1.0f));\n"
     "}\n",
     "bf16_k"},
    {"cuda_fp8",
     "#include <cuda_fp8.h>\n"
     "extern \"C\" __global__ void fp8_k(const float *in, __nv_fp8_e4m3 *out)\n"
     "{\n"
     "    out[threadIdx.x] = __nv_fp8_e4m3(in[threadIdx.x]);\n"
     "}\n",
     "fp8_k"},
    {"mma.h",
     "#include <mma.h>\n"
     "using namespace nvcuda;\n"
     "extern \"C\" __global__ void wmma_k(const half *a, const half *b, float *c)\n"
     "{\n"
     "    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
     "    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
     "    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n"
     "    wmma::fill_fragment(fc, 0.0f);\n"
     "    wmma::load_matrix_sync(fa, a, 16);\n"
     "    wmma::load_matrix_sync(fb, b, 16);\n"
     "    wmma::mma_sync(fc, fa, fb, fc);\n"
     "    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);\n"
     "}\n",
     "wmma_k"},
};

static void toolkit_families(const char *target)
{
    if (!available(TK_BACKEND_CUDA, target))
        return;
    for (size_t i = 0; i < sizeof k_families / sizeof k_families[0]; i++) {
        tk_kernel_desc d = {.source = k_families[i].source,
                            .entry = k_families[i].entry,
                            .source_label =
                                k_families[i].name[0] == 'c' ? "family.cu" : "family_b.cu"};
        tk_context *ctx = offline(TK_BACKEND_CUDA, target);
        tk_status st = tk_kernel_precompile(ctx, &d, NULL);
        ck_assert_msg(st == TK_OK, "%s for %s: %s", k_families[i].name, target,
                      tk_context_last_error(ctx));
        tk_context_destroy(ctx);
    }
}

START_TEST(test_nvrtc_toolkit_headers_sm80)
{
    toolkit_families("sm_80");
}
END_TEST

START_TEST(test_nvrtc_toolkit_headers_sm90)
{
    toolkit_families("sm_90");
}
END_TEST

START_TEST(test_nvrtc_identity_covers_cccl)
{
    if (!available(TK_BACKEND_CUDA, "sm_90"))
        return;
    tk_context *ctx = offline(TK_BACKEND_CUDA, "sm_90");
    const char *id = tk_context_compiler(ctx);
    ck_assert_msg(strstr(id, ";headers-") != NULL, "identity %s", id);
    struct stat st;
    /* A toolkit with include/cccl (CUDA 13) says so in the identity. */
    const char *cuda = getenv("CUDA_PATH") ? getenv("CUDA_PATH") : "/usr/local/cuda";
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/include/cccl/cuda/std/version", cuda);
    if (stat(probe, &st) == 0)
        ck_assert_msg(strstr(id, "+cccl") != NULL, "identity %s", id);
    tk_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------ name expressions */

static const char *const k_templates =
    "template <int N, typename T> __global__ void fill(T *x) { x[threadIdx.x] = T(N); }\n"
    "namespace ns {\n"
    "template <int B, bool F> __global__ void gemm(float *x) { x[0] = F ? B : -B; }\n"
    "}\n";

static void name_expressions(tk_backend_kind kind, const char *target)
{
    if (!available(kind, target))
        return;
    const char *exprs[] = {"fill<4, float>", "ns::gemm<128, true>"};
    for (int i = 0; i < 2; i++) {
        tk_kernel_desc d = {.source = k_templates, .entry = exprs[i]};
        uint64_t compiles = 0;
        ck_assert_int_eq(precompile_ok(kind, target, &d, &compiles), TK_ORIGIN_COMPILED);
        ck_assert_uint_eq(compiles, 1);
        /* From disk in a new context, by the lowered name, no compile. */
        tk_context *ctx = offline(kind, target);
        tk_kernel *k = NULL;
        tk_status st = tk_kernel_get(ctx, &d, &k);
        ck_assert_msg(st == TK_OK, "%s", tk_context_last_error(ctx));
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
        ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
        ck_assert_str_eq(info.entry, exprs[i]);
        /* Resource usage was read under the lowered name. */
        ck_assert_int_gt(info.resources.registers, 0);
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
        ck_assert_uint_eq(s.compiles, 0);
        tk_context_destroy(ctx);
    }
}

START_TEST(test_nvrtc_name_expressions)
{
    name_expressions(TK_BACKEND_CUDA, "sm_90");
}
END_TEST

START_TEST(test_hiprtc_name_expressions)
{
    name_expressions(TK_BACKEND_HIP, "gfx90a");
}
END_TEST

/* ---------------------------------------------------------- user headers */

static void put(const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_src, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0700);
    *slash = '/';
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
}

static void header_edit(tk_backend_kind kind, const char *target)
{
    if (!available(kind, target))
        return;
    put("inc/params.h", "#pragma once\n#define SCALE 2\n");
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s/inc", g_src);
    const char *opts[] = {inc};
    tk_header mem = {"tile.h", "#define TILE 32\n"};
    tk_kernel_desc d = {.source = "#include \"params.h\"\n#include <tile.h>\n"
                                  "extern \"C\" __global__ void scaled(int *x)\n"
                                  "{ x[threadIdx.x % TILE] *= SCALE; }\n",
                        .entry = "scaled",
                        .options = opts,
                        .n_options = 1,
                        .headers = &mem,
                        .n_headers = 1,
                        .source_label = "scaled.cu"};
    uint64_t n = 0;
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_COMPILED);
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_DISK);
    put("inc/params.h", "#pragma once\n#define SCALE 3\n");
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_COMPILED);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_DISK);
    mem.text = "#define TILE 64\n";
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_COMPILED);
    ck_assert_int_eq(precompile_ok(kind, target, &d, &n), TK_ORIGIN_DISK);

    /* A pre-include is resolved and tracked like an include. */
    put("inc/pre.h", "#define OFFSET 1\n");
    const char *pre[] = {inc, "-include", "pre.h"};
    tk_kernel_desc p = {.source = "extern \"C\" __global__ void offs(int *x) { x[0] += OFFSET; }\n",
                        .entry = "offs",
                        .options = pre,
                        .n_options = 3};
    ck_assert_int_eq(precompile_ok(kind, target, &p, &n), TK_ORIGIN_COMPILED);
    ck_assert_int_eq(precompile_ok(kind, target, &p, &n), TK_ORIGIN_DISK);
    put("inc/pre.h", "#define OFFSET 2\n");
    ck_assert_int_eq(precompile_ok(kind, target, &p, &n), TK_ORIGIN_COMPILED);
}

START_TEST(test_nvrtc_header_edit)
{
    header_edit(TK_BACKEND_CUDA, "sm_80");
}
END_TEST

START_TEST(test_hiprtc_header_edit)
{
    header_edit(TK_BACKEND_HIP, "gfx90a");
}
END_TEST

/* ---------------------------------------------------------------- errors */

static void error_positions(tk_backend_kind kind, const char *target, const char *main_pos,
                            const char *header_pos)
{
    if (!available(kind, target))
        return;
    tk_context *ctx = offline(kind, target);
    tk_kernel_desc d = {.source = "extern \"C\" __global__ void k(int *x)\n"
                                  "{\n"
                                  "    x[0] = undeclared_thing;\n"
                                  "}\n",
                        .entry = "k",
                        .source_label = "my_kernels.cu"};
    tk_assert_status(tk_kernel_precompile(ctx, &d, NULL), TK_COMPILE_FAILED);
    const char *msg = tk_context_last_error(ctx);
    const char *pos = strstr(msg, main_pos);
    const char *nl = strchr(msg, '\n');
    ck_assert_msg(pos != NULL, "want %s in: %s", main_pos, msg);
    ck_assert_msg(nl == NULL || pos < nl, "first error not in the first line: %s", msg);
    ck_assert_msg(strstr(msg, "undeclared_thing") != NULL, "%s", msg);

    put("inc/bad.h", "// line 1\nstatic __device__ int f() { return also_undeclared; }\n");
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s/inc", g_src);
    const char *opts[] = {inc};
    tk_kernel_desc h = {.source = "#include \"bad.h\"\nextern \"C\" __global__ void k() {}\n",
                        .entry = "k",
                        .options = opts,
                        .n_options = 1};
    tk_assert_status(tk_kernel_precompile(ctx, &h, NULL), TK_COMPILE_FAILED);
    char want[4400];
    snprintf(want, sizeof want, "%s/inc/bad.h%s", g_src, header_pos);
    msg = tk_context_last_error(ctx);
    ck_assert_msg(strstr(msg, want) != NULL, "want %s in: %s", want, msg);
    tk_context_destroy(ctx);
}

START_TEST(test_nvrtc_error_positions)
{
    error_positions(TK_BACKEND_CUDA, "sm_90", "my_kernels.cu(3): error", "(2): error");
}
END_TEST

START_TEST(test_hiprtc_error_positions)
{
    error_positions(TK_BACKEND_HIP, "gfx90a", "my_kernels.cu:3:12: error", ":2:");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("user_sources_rtc");
    TCase *tc = tcase_create("offline");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_nvrtc_toolkit_headers_sm80);
    tcase_add_test(tc, test_nvrtc_toolkit_headers_sm90);
    tcase_add_test(tc, test_nvrtc_identity_covers_cccl);
    tcase_add_test(tc, test_nvrtc_name_expressions);
    tcase_add_test(tc, test_hiprtc_name_expressions);
    tcase_add_test(tc, test_nvrtc_header_edit);
    tcase_add_test(tc, test_hiprtc_header_edit);
    tcase_add_test(tc, test_nvrtc_error_positions);
    tcase_add_test(tc, test_hiprtc_error_positions);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
