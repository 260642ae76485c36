/* tokitai-jit with a remote cache (a real redis-server): --precompile
 * publishes, --list / --stats --remote show the server, --push uploads a
 * cache or a bundle; usage and unreachable-server errors. Stub backend. */
#include "test_cli_common.h"
#include "test_remote_common.h"

static redis_srv g_srv;
static char *g_dir; /* manifests, bundles */
static char *g_a;   /* a cache (machine A) */
static char *g_b;   /* another cache (machine B) */

static void setup(void)
{
    g_dir = tk_test_tmpdir("cliremote");
    g_a = tk_test_tmpdir("cliremote-a");
    g_b = tk_test_tmpdir("cliremote-b");
    redis_start(&g_srv);
}

static void teardown(void)
{
    redis_stop(&g_srv);
    tk_test_rmtree(g_dir);
    tk_test_rmtree(g_a);
    tk_test_rmtree(g_b);
    free(g_dir), free(g_a), free(g_b);
}

static const char manifest[] = "arch stub\n"
                               "softmax_f16_fwd rows=4 cols=100,1000\n"
                               "embedding_f16_fwd V=100 D=64 Q=8\n"
                               "kernel user.cu user_entry -DTILE=4\n";
static const char user_kernel[] =
    "extern \"C\" __global__ void user_entry(float *x) { x[threadIdx.x] = TILE; }\n";

static void write_in_dir(const char *name, const char *text, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", g_dir, name);
    ck_assert_int_eq(tk_test_write_file(path, text, strlen(text)), 0);
}

static long json_field(const char *out, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\": ", name);
    const char *p = strstr(out, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void flushall(void)
{
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "FLUSHALL");
    freeReplyObject(r);
    redisFree(c);
}

START_TEST(precompile_publishes_list_stats_push)
{
    char mpath[1024], kpath[1024];
    write_in_dir("user.cu", user_kernel, kpath, sizeof kpath);
    write_in_dir("m.tkm", manifest, mpath, sizeof mpath);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", mpath, "-j", "2", "--cache-dir", g_a,
                     "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    long compiled = count_before(out, " compiled,");
    ck_assert_msg(compiled >= 4, "%s", out);
    free(out), free(err);

    /* The server holds what A compiled. */
    rc = cli_run(&out, &err, "--stats", "--remote", g_srv.url, "--json", NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert(json_valid(out));
    ck_assert_int_eq(json_field(out, "entries"), compiled);
    ck_assert_int_eq(json_field(out, "bad_values"), 0);
    ck_assert_int_eq(json_field(out, "leases"), 0);
    free(out), free(err);
    rc = cli_run(&out, &err, "--stats", "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK && strstr(out, "reachable, Redis"), "%s\n%s", out, err);
    free(out), free(err);
    rc = cli_run(&out, &err, "--list", "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_ptr_nonnull(strstr(out, "user_entry"));
    ck_assert_int_eq(count_before(out, " entries on the remote"), compiled);
    free(out), free(err);
    rc = cli_run(&out, &err, "--list", "--remote", g_srv.url, "--json", NULL);
    ck_assert_msg(rc == CLI_OK && json_valid(out), "%s", out);
    ck_assert_int_eq(count_substr(out, "\"kernel\""), compiled);
    free(out), free(err);

    /* Machine B: everything comes from the remote, nothing compiles. */
    rc = cli_run(&out, &err, "--precompile", "--manifest", mpath, "-j", "2", "--cache-dir", g_b,
                 "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "nothing to compile"), "B compiled: %s", out);
    free(out), free(err);

    /* --push: the server already holds A's entries. */
    rc = cli_run(&out, &err, "--push", "--cache-dir", g_a, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), 0);
    ck_assert_int_eq(count_before(out, ", rejected"), compiled);
    free(out), free(err);
    /* An empty server: push the cache... */
    flushall();
    rc = cli_run(&out, &err, "--push", "--cache-dir", g_a, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), compiled);
    free(out), free(err);
    /* ...or a bundle. */
    flushall();
    char bundle[1024];
    snprintf(bundle, sizeof bundle, "%s/a.tkb", g_dir);
    ck_assert_int_eq(cli_run(NULL, NULL, "--export", bundle, "--cache-dir", g_a, NULL), CLI_OK);
    rc = cli_run(&out, &err, "--push", "--bundle", bundle, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), compiled);
    free(out), free(err);
    rc = cli_run(&out, NULL, "--stats", "--remote", g_srv.url, "--json", NULL);
    ck_assert_int_eq(json_field(out, "entries"), compiled);
    free(out);

    /* A damaged bundle: the bad entry is named and the exit code says so. */
    size_t size = 0;
    char *bytes = tk_test_read_file(bundle, &size);
    ck_assert_ptr_nonnull(bytes);
    bytes[size - 20] ^= 0x5a; /* inside the last entry */
    ck_assert_int_eq(tk_test_write_file(bundle, bytes, size), 0);
    free(bytes);
    flushall();
    rc = cli_run(&out, &err, "--push", "--bundle", bundle, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_FAIL, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "rejected") && strstr(err, "a.tkb#"), "%s", err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), compiled - 1);
    free(out), free(err);
}
END_TEST

START_TEST(usage_and_unreachable)
{
    char *out, *err;
    /* --push needs a remote. */
    unsetenv("TOKITAI_JIT_REMOTE");
    ck_assert_int_eq(cli_run(&out, &err, "--push", "--cache-dir", g_a, NULL), CLI_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--remote"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--remote", "http://x", NULL), CLI_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--remote"));
    free(out), free(err);
    ck_assert_int_eq(cli_run(NULL, NULL, "--verify", "--remote", g_srv.url, NULL), CLI_USAGE);
    ck_assert_int_eq(cli_run(NULL, NULL, "--list", "--bundle", "x", NULL), CLI_USAGE);
    /* Nobody listening: a clear failure, not a hang. */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", free_port());
    double t0 = now_ms();
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--remote", url, NULL), CLI_FAIL);
    ck_assert_msg(strstr(err, "unreachable"), "%s", err);
    ck_assert_msg(now_ms() - t0 < 5000, "took %.0f ms", now_ms() - t0);
    free(out), free(err);
}
END_TEST

static Suite *cli_remote_suite(void)
{
    Suite *s = suite_create("cli_remote");
    TCase *tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, precompile_publishes_list_stats_push);
    tcase_add_test(tc, usage_and_unreachable);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    remote_or_skip();
    return tk_test_main(cli_remote_suite());
}
