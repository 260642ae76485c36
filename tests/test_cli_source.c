/*
 * tokitai-jit --source KEY: the source of a cache entry as the compiler saw
 * it, by its key or a prefix, in the cache that compiled it and in one that
 * imported it from a bundle; --stats counts the kept sources. Stub backend.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "test_cli_common.h"

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("cli-source");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
}

static const char user_kernel[] =
    "// a user kernel, long enough to be kept as a file: its text is not in the key\n"
    "extern \"C\" __global__ void user_entry(float *x)\n"
    "{\n"
    "    // TILE comes from the manifest's define; the loop has nothing to do but be long.\n"
    "    for (int i = 0; i < TILE; i++)\n"
    "        x[threadIdx.x + i * blockDim.x] = x[threadIdx.x + i * blockDim.x] * 2.0f + TILE;\n"
    "}\n";

START_TEST(source_by_key_and_after_import)
{
    char path[1024], manifest[1024], a[1024], b[1024], bundle[1024];
    snprintf(path, sizeof path, "%s/user.cu", g_dir);
    snprintf(manifest, sizeof manifest, "%s/m.tkm", g_dir);
    snprintf(a, sizeof a, "%s/a", g_dir);
    snprintf(b, sizeof b, "%s/b", g_dir);
    snprintf(bundle, sizeof bundle, "%s/x.tkb", g_dir);
    ck_assert_int_eq(tk_test_write_file(path, user_kernel, strlen(user_kernel)), 0);
    const char *m = "arch stub\nkernel user.cu user_entry -DTILE=4\n";
    ck_assert_int_eq(tk_test_write_file(manifest, m, strlen(m)), 0);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", manifest, "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_OK, "precompile: %d\n%s\n%s", rc, out, err);
    free(out), free(err);
    key_set *ks = cache_keys(a);
    ck_assert_int_eq(ks->n, 1);
    char key[33], prefix[13];
    memcpy(key, ks->keys[0], 33);
    snprintf(prefix, sizeof prefix, "%.12s", key);
    free(ks);

    /* By a prefix of the key, as --list shows it. */
    rc = cli_run(&out, &err, "--source", prefix, "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, user_kernel), "%s", out);
    ck_assert_msg(strstr(out, "// kernel:   user_entry"), "%s", out);
    ck_assert_msg(strstr(out, "-DTILE=4"), "%s", out);
    ck_assert_msg(strstr(out, "// key:      ") && strstr(out, key), "%s", out);
    ck_assert_msg(strstr(out, "// hash:     "), "%s", out);
    free(out), free(err);

    /* --stats counts the kept source. */
    rc = cli_run(&out, &err, "--stats", "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_OK && strstr(out, "sources:"), "%s", out);
    free(out), free(err);
    rc = cli_run(&out, &err, "--stats", "--json", "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_OK && json_valid(out) && strstr(out, "\"source_bytes\": "), "%s", out);
    free(out), free(err);

    /* The source travels with a bundle. */
    ck_assert_int_eq(cli_run(NULL, NULL, "--export", bundle, "--cache-dir", a, NULL), CLI_OK);
    rc = cli_run(&out, &err, "--import", bundle, "--cache-dir", b, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--source", key, "--cache-dir", b, NULL);
    ck_assert_msg(rc == CLI_OK && strstr(out, user_kernel), "exit %d\n%s\n%s", rc, out, err);
    free(out), free(err);

    /* No such key: a failure; not a key: a usage error. */
    char other[33];
    snprintf(other, sizeof other, "%s", key);
    other[0] = other[0] == 'f' ? '0' : 'f';
    rc = cli_run(&out, &err, "--source", other, "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_FAIL && strstr(err, "no entry"), "exit %d\n%s", rc, err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--source", "not-hex", "--cache-dir", a, NULL);
    ck_assert_msg(rc == CLI_USAGE && strstr(err, "not a key"), "exit %d\n%s", rc, err);
    free(out), free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli_source");
    TCase *tc = tcase_create("source");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, source_by_key_and_after_import);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
