/*
 * Target selection for Hopper-only code, offline with NVRTC (no GPU): a
 * kernel whose options name the architecture (--gpu-architecture=sm_90a) is
 * compiled for exactly that one on an sm_90 context (the default option is
 * left out, so __CUDA_ARCH_FEAT_SM90_ALL is defined), and the GEMM operator's
 * precompile for sm_90 yields the sm_90a wgmma kernel a device run of the
 * same shape asks for. Skipped (exit 77) where NVRTC is not installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"
#include "tokitai/ops.h"

/* Fails to compile unless the target has the sm_90a feature set. */
static const char *const k_source =
    "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
    "static_assert(sizeof(char) == 0, \"not sm_90a\");\n"
    "#endif\n"
    "extern \"C\" __global__ void hopper_only(float *x) { x[threadIdx.x] = 1.0f; }\n";

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("backend_arch");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
}

static tk_context *offline_sm90(tk_policy policy)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_CUDA), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_config_set_target(cfg, "sm_90"), TK_OK);
    tk_assert_status(tk_config_set_policy(cfg, policy), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    ck_assert_msg(st == TK_OK, "offline sm_90 context: %s: %s", tk_status_str(st), err);
    return ctx;
}

START_TEST(test_explicit_arch_option)
{
    tk_context *ctx = offline_sm90(TK_POLICY_EXACT);
    static const char *const opts[] = {"--gpu-architecture=sm_90a"};
    tk_kernel_desc d = {.source = k_source, .entry = "hopper_only"};
    tk_origin origin;

    /* The default target (sm_90) lacks the feature set: the assert fires. */
    ck_assert_int_eq(tk_kernel_precompile(ctx, &d, &origin), TK_COMPILE_FAILED);
    ck_assert_msg(strstr(tk_context_last_error(ctx), "not sm_90a") != NULL, "log: %s",
                  tk_context_last_error(ctx));

    /* Named by the caller: compiled for sm_90a alone. */
    d.options = opts;
    d.n_options = 1;
    tk_status st = tk_kernel_precompile(ctx, &d, &origin);
    ck_assert_msg(st == TK_OK, "%s: %s", tk_status_str(st), tk_context_last_error(ctx));
    ck_assert_int_eq(origin, TK_ORIGIN_COMPILED);
    st = tk_kernel_precompile(ctx, &d, &origin);
    ck_assert_int_eq(st, TK_OK);
    ck_assert_int_eq(origin, TK_ORIGIN_DISK);
    tk_context_destroy(ctx);
}
END_TEST

typedef struct found {
    int n, wgmma_sm90a;
} found;

static int visit(void *user, const tk_cache_entry_info *info)
{
    found *f = user;
    f->n++;
    if (strstr(info->options, "--gpu-architecture=sm_90a") != NULL &&
        strstr(info->options, "-DTK_WGMMA=") != NULL && strcmp(info->arch, "sm_90") == 0)
        f->wgmma_sm90a++;
    return 0;
}

/* On sm_90 every aligned shape takes the TMA wgmma kernel in each layout,
 * 4096^3 and 64^3 alike (exact policy: one kernel per shape). */
START_TEST(test_gemm_precompile_sm90)
{
    static const tk_op ops[] = {TK_OP_GEMM_F16_FWD, TK_OP_GEMM_F16_GRAD_A, TK_OP_GEMM_F16_GRAD_B};
    const int64_t big[3] = {4096, 4096, 4096}, small[3] = {64, 64, 64};
    tk_context *ctx = offline_sm90(TK_POLICY_EXACT);
    for (int i = 0; i < 3; i++) {
        unsigned compiled = 0, cached = 0;
        tk_status st = tk_op_precompile(ctx, ops[i], big, 3, &compiled, &cached);
        ck_assert_msg(st == TK_OK, "%s: %s", tk_status_str(st), tk_context_last_error(ctx));
        ck_assert_uint_eq(compiled + cached, 1);
        st = tk_op_precompile(ctx, ops[i], small, 3, &compiled, &cached);
        ck_assert_msg(st == TK_OK, "%s: %s", tk_status_str(st), tk_context_last_error(ctx));
    }
    tk_context_destroy(ctx);

    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    found f = {0, 0};
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_assert_status(tk_cache_list(cache, visit, &f), TK_OK);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    ck_assert_int_eq(f.n, 6);
    ck_assert_int_eq(f.wgmma_sm90a, 6);
}
END_TEST

int main(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    /* Skip when NVRTC cannot be loaded. */
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_backend(cfg, TK_BACKEND_CUDA) != TK_OK ||
        tk_config_set_target(cfg, "sm_90") != TK_OK)
        return 1;
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        printf("skipped: NVRTC unavailable: %s\n", err);
        return 77;
    }
    tk_context_destroy(ctx);

    Suite *s = suite_create("backend_arch");
    TCase *tc = tcase_create("arch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_explicit_arch_option);
    tcase_add_test(tc, test_gemm_precompile_sm90);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
