/* A caller compiled against the frozen interface-1 headers (tests/abi/v1),
 * linked with the current shared library: sized out-structs must be filled
 * up to the caller's struct_size and never beyond it. */
#define _GNU_SOURCE
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokitai/ops.h>
#include <tokitai/tokitai.h>

#define CANARY 0xA5u

static char g_dir[] = "/tmp/tk-abi-XXXXXX";

static tk_context *stub_context(void)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    ck_assert_int_eq(tk_config_create(&cfg), TK_OK);
    ck_assert_int_eq(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    ck_assert_int_eq(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    ck_assert_msg(st == TK_OK, "tk_context_create: %s", err);
    tk_config_destroy(cfg);
    return ctx;
}

static tk_kernel *compile_one(tk_context *ctx)
{
    static const char src[] = "extern \"C\" __global__ void k(float *x) { x[0] = 1.0f; }\n";
    tk_kernel_desc d;
    memset(&d, 0, sizeof d);
    d.source = src;
    d.entry = "k";
    tk_kernel *k = NULL;
    ck_assert_int_eq(tk_kernel_get(ctx, &d, &k), TK_OK);
    return k;
}

START_TEST(test_versions)
{
    /* The library linked is of this header's interface, and its version is
     * at least the frozen header's. */
    ck_assert_uint_eq(tk_abi_version(), TK_ABI_VERSION);
    ck_assert_uint_ge(tk_version_number(), TK_VERSION_NUMBER);
}
END_TEST

START_TEST(test_full_struct_of_the_frozen_header)
{
    tk_context *ctx = stub_context();
    (void)compile_one(ctx);
    struct {
        tk_context_stats s;
        unsigned char canary[64];
    } buf;
    memset(&buf, CANARY, sizeof buf);
    buf.s.struct_size = sizeof buf.s;
    ck_assert_int_eq(tk_context_get_stats(ctx, &buf.s), TK_OK);
    ck_assert_uint_eq(buf.s.disk_hits + buf.s.compiles, 1);
    ck_assert_uint_eq(buf.s.loads, 1);
    ck_assert_uint_eq(buf.s.memory_hits, 0);
    ck_assert_uint_le(buf.s.struct_size, sizeof buf.s);
    for (size_t i = 0; i < sizeof buf.canary; i++)
        ck_assert_uint_eq(buf.canary[i], CANARY);
    tk_context_destroy(ctx);
}
END_TEST

/* The first fields of tk_context_stats, as a header older than the frozen
 * one would have declared it. */
typedef struct older_context_stats {
    size_t struct_size;
    uint64_t memory_hits;
    uint64_t disk_hits;
    uint64_t compiles;
} older_context_stats;

START_TEST(test_smaller_struct_is_not_overrun)
{
    tk_context *ctx = stub_context();
    tk_kernel *k = compile_one(ctx);
    (void)compile_one(ctx); /* a memory hit */
    struct {
        older_context_stats s;
        unsigned char canary[256];
    } buf;
    memset(&buf, CANARY, sizeof buf);
    buf.s.struct_size = sizeof buf.s;
    ck_assert_int_eq(tk_context_get_stats(ctx, (tk_context_stats *)&buf.s), TK_OK);
    ck_assert_uint_eq(buf.s.struct_size, sizeof buf.s); /* the bytes written */
    ck_assert_uint_eq(buf.s.memory_hits, 1);
    /* compiled here, or found on disk when an earlier case compiled it */
    ck_assert_uint_eq(buf.s.disk_hits + buf.s.compiles, 1);
    for (size_t i = 0; i < sizeof buf.canary; i++)
        ck_assert_uint_eq(buf.canary[i], CANARY);

    /* tk_kernel_info cut after entry: key_hex and entry filled, nothing more. */
    struct {
        size_t struct_size;
        const char *key_hex;
        const char *entry;
        unsigned char canary[128];
    } ki;
    memset(&ki, CANARY, sizeof ki);
    ki.struct_size = offsetof(tk_kernel_info, origin);
    ck_assert_int_eq(tk_kernel_get_info(k, (tk_kernel_info *)&ki), TK_OK);
    ck_assert_uint_eq(ki.struct_size, offsetof(tk_kernel_info, origin));
    ck_assert_uint_eq(strlen(ki.key_hex), 32);
    ck_assert_str_eq(ki.entry, "k");
    for (size_t i = 0; i < sizeof ki.canary; i++)
        ck_assert_uint_eq(ki.canary[i], CANARY);

    /* tk_cache_stats cut after entries. */
    tk_cache *cache = NULL;
    tk_config *cfg = NULL;
    ck_assert_int_eq(tk_config_create(&cfg), TK_OK);
    ck_assert_int_eq(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    ck_assert_int_eq(tk_cache_open(cfg, &cache), TK_OK);
    tk_config_destroy(cfg);
    struct {
        size_t struct_size;
        uint64_t entries;
        unsigned char canary[64];
    } cs;
    memset(&cs, CANARY, sizeof cs);
    cs.struct_size = sizeof(size_t) + sizeof(uint64_t);
    ck_assert_int_eq(tk_cache_get_stats(cache, (tk_cache_stats *)&cs), TK_OK);
    ck_assert_uint_eq(cs.entries, 1);
    for (size_t i = 0; i < sizeof cs.canary; i++)
        ck_assert_uint_eq(cs.canary[i], CANARY);
    tk_cache_close(cache);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_unset_size_is_refused)
{
    tk_context *ctx = stub_context();
    tk_kernel *k = compile_one(ctx);
    tk_context_stats s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(tk_context_get_stats(ctx, &s), TK_INVALID_ARGUMENT);
    ck_assert_uint_eq(s.compiles, 0); /* nothing written */
    tk_kernel_info ki;
    memset(&ki, 0, sizeof ki);
    ck_assert_int_eq(tk_kernel_get_info(k, &ki), TK_INVALID_ARGUMENT);
    ck_assert_ptr_null(ki.key_hex);
    tk_tune_report tr;
    memset(&tr, 0, sizeof tr);
    const int64_t dims[3] = {64, 64, 64};
    ck_assert_int_eq(tk_op_tune(ctx, TK_OP_GEMM_F16_FWD, dims, 3, &tr), TK_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(tk_context_last_error(ctx), "struct_size"));
    tk_check_report cr;
    memset(&cr, 0, sizeof cr);
    tk_status st = tk_check_run(ctx, TK_OP_SOFTMAX_F16_FWD, dims, 2, 1, &cr);
    ck_assert_int_ne(st, TK_OK);
    ck_assert_ptr_null(cr.cache_key);
    tk_check_report_free(&cr); /* harmless on an unset report */
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_init_macro)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    ck_assert_uint_eq(s.struct_size, sizeof s);
    ck_assert_uint_eq(s.compiles, 0);
    tk_check_report r = TK_STRUCT_INIT(tk_check_report);
    ck_assert_uint_eq(r.struct_size, sizeof r);
    ck_assert_ptr_null(r.compiler);
}
END_TEST

int main(void)
{
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("abi_old_caller");
    TCase *tc = tcase_create("sized structs");
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_full_struct_of_the_frozen_header);
    tcase_add_test(tc, test_smaller_struct_is_not_overrun);
    tcase_add_test(tc, test_unset_size_is_refused);
    tcase_add_test(tc, test_init_macro);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
