/* tokitai-jit with a remote cache (a real redis-server): --precompile
 * publishes, --list / --stats --remote show the server, --push uploads a
 * cache or a bundle; usage and unreachable-server errors. Stub backend. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/wait.h>

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
    long compiled = kernels_compiled(out);
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
    bytes[24 + 8 + 70] ^= 0x5a; /* inside the first entry (the kept sources come last) */
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

/* --------------------------------------------------- hostile writers */

static void redis_cmd(const redis_srv *srv, const char *fmt, const char *a, const char *b)
{
    redisContext *c = redis_client(srv);
    redisReply *r = redisCommand(c, fmt, a, b);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt, r ? r->str : "no reply");
    freeReplyObject(r);
    redisFree(c);
}

/* The server's value keys (this version), in a malloc'd array of names. */
static int value_keys(const redis_srv *srv, char names[][128], int max)
{
    redisContext *c = redis_client(srv);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "tkjit:%s:%d:e:*", TK_VERSION_STRING, TK__CACHE_FORMAT);
    redisReply *r = redisCommand(c, "KEYS %s", pattern);
    ck_assert(r && r->type == REDIS_REPLY_ARRAY);
    int n = 0;
    for (size_t i = 0; i < r->elements && n < max; i++)
        snprintf(names[n++], 128, "%s", r->element[i]->str);
    freeReplyObject(r);
    redisFree(c);
    return n;
}

static long long lease_count(const redis_srv *srv)
{
    redisContext *c = redis_client(srv);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "tkjit:%s:%d:lease:*", TK_VERSION_STRING, TK__CACHE_FORMAT);
    redisReply *r = redisCommand(c, "KEYS %s", pattern);
    ck_assert(r && r->type == REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

static long precompile_into(const char *cache, char *mpath, size_t size)
{
    char kpath[1024];
    write_in_dir("user.cu", user_kernel, kpath, sizeof kpath);
    write_in_dir("m.tkm", manifest, mpath, size);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", mpath, "-j", "2", "--cache-dir",
                     cache, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    long compiled = kernels_compiled(out);
    free(out), free(err);
    return compiled;
}

/* Garbage, a list, a value signed under another secret: --push overwrites
 * each (they do not verify) and says how many; the keys of another type do
 * not break --stats / --list. */
START_TEST(push_repairs_a_poisoned_remote)
{
    char mpath[1024];
    long compiled = precompile_into(g_a, mpath, sizeof mpath);
    ck_assert_int_ge(compiled, 4);
    char names[16][128];
    int n = value_keys(&g_srv, names, 16);
    ck_assert_int_eq(n, compiled);
    redis_cmd(&g_srv, "SET %s %s", names[0], "garbage");
    redis_cmd(&g_srv, "DEL %s%s", names[1], "");
    redis_cmd(&g_srv, "RPUSH %s %s", names[1], "a list");

    /* Wrong-type keys are skipped and counted, not "unreachable". */
    char *out, *err;
    int rc = cli_run(&out, &err, "--stats", "--remote", g_srv.url, "--json", NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(json_field(out, "entries"), compiled - 2);
    ck_assert_int_eq(json_field(out, "bad_values"), 2);
    free(out), free(err);
    rc = cli_run(&out, &err, "--list", "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, " entries on the remote"), compiled - 2);
    ck_assert_int_eq(count_before(out, " keys skipped"), 2);
    free(out), free(err);

    /* Push repairs both. */
    rc = cli_run(&out, &err, "--push", "--cache-dir", g_a, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), 0); /* pushed */
    ck_assert_int_eq(count_before(out, ", rejected"), compiled - 2);   /* present */
    ck_assert_int_eq(count_before(out, " (values that did not verify)"), 2);
    free(out), free(err);
    rc = cli_run(&out, &err, "--stats", "--remote", g_srv.url, "--json", NULL);
    ck_assert_int_eq(json_field(out, "entries"), compiled);
    ck_assert_int_eq(json_field(out, "bad_values"), 0);
    free(out), free(err);

    /* Signed with another secret: a push with the fleet's secret replaces all. */
    flushall();
    setenv("TOKITAI_JIT_REMOTE_KEY", "old secret", 1);
    rc = cli_run(&out, &err, "--push", "--cache-dir", g_a, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    free(out), free(err);
    setenv("TOKITAI_JIT_REMOTE_KEY", "fleet secret", 1);
    rc = cli_run(&out, &err, "--push", "--cache-dir", g_a, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", rejected"), 0);
    ck_assert_int_eq(count_before(out, " (values that did not verify)"), compiled);
    free(out), free(err);
    rc = cli_run(&out, &err, "--stats", "--remote", g_srv.url, "--json", NULL);
    ck_assert_int_eq(json_field(out, "entries"), compiled);
    free(out), free(err);
    unsetenv("TOKITAI_JIT_REMOTE_KEY");
}
END_TEST

/* Wrong password, unknown user: the server's words, not "unreachable". */
START_TEST(authentication_failures_say_why)
{
    redis_srv locked;
    const char *extra[] = {"--requirepass", "right", NULL};
    redis_start_args(&locked, extra);
    char url[128];
    char *out, *err;
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", locked.port);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--remote", url, NULL), CLI_FAIL);
    ck_assert_msg(strstr(err, "AUTH") && strstr(err, "WRONGPASS"), "%s", err);
    ck_assert_msg(!strstr(err, "***") || !strstr(err, "wrong@"), "password shown: %s", err);
    free(out), free(err);
    snprintf(url, sizeof url, "redis://nobody:right@127.0.0.1:%d", locked.port);
    ck_assert_int_eq(cli_run(&out, &err, "--list", "--remote", url, NULL), CLI_FAIL);
    ck_assert_msg(strstr(err, "WRONGPASS"), "%s", err);
    free(out), free(err);
    snprintf(url, sizeof url, "redis://:right@127.0.0.1:%d", locked.port);
    ck_assert_int_eq(cli_run(&out, &err, "--stats", "--remote", url, NULL), CLI_OK);
    free(out), free(err);
    redis_stop(&locked);
}
END_TEST

/* A full server: the run says it published nothing and exits 5. */
START_TEST(precompile_to_a_full_server_fails)
{
    redis_srv full;
    const char *extra[] = {"--maxmemory", "1", "--maxmemory-policy", "noeviction", NULL};
    redis_start_args(&full, extra);
    char mpath[1024], kpath[1024];
    write_in_dir("user.cu", user_kernel, kpath, sizeof kpath);
    write_in_dir("m.tkm", manifest, mpath, sizeof mpath);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", mpath, "-j", "2", "--cache-dir", g_a,
                     "--remote", full.url, NULL);
    ck_assert_msg(rc == CLI_NOT_KEPT, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "compiled but 0 published"), "%s", err);
    free(out), free(err);
    ck_assert_int_eq(lease_count(&full), 0);
    redis_stop(&full);
}
END_TEST

typedef struct pauser {
    pid_t pid;
    int stop_ms, cont_ms;
} pauser;

static void *pause_server(void *p)
{
    pauser *s = p;
    sleep_ms_test(s->stop_ms);
    kill(s->pid, SIGSTOP);
    sleep_ms_test(s->cont_ms - s->stop_ms);
    kill(s->pid, SIGCONT);
    return NULL;
}

/* The server stopped (SIGSTOP) mid-run, resumed before the end: the run
 * says what it could not publish, exits 5 and leaves no lease behind. */
START_TEST(precompile_with_a_stalled_server)
{
    char kpath[1024], mpath[1024];
    write_in_dir("user.cu", user_kernel, kpath, sizeof kpath);
    char text[2048] = "arch stub\n";
    for (int i = 1; i <= 12; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "kernel user.cu user_entry -DTILE=%d\n", i);
    write_in_dir("many.tkm", text, mpath, sizeof mpath);
    setenv("TK__CACHE_TEST_WRITE_DELAY_MS", "150", 1); /* each store takes 150 ms */
    pauser ps = {g_srv.pid, 200, 700};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, pause_server, &ps), 0);
    char *out, *err;
    int rc = cli_run(&out, &err, "--precompile", "--manifest", mpath, "-j", "2", "--cache-dir", g_a,
                     "--remote", g_srv.url, NULL);
    pthread_join(th, NULL);
    unsetenv("TK__CACHE_TEST_WRITE_DELAY_MS");
    long long leases = lease_count(&g_srv);
    char names[16][128];
    int published = value_keys(&g_srv, names, 16);
    printf("stalled server: exit %d, %d of 12 published, %lld leases left\n", rc, published,
           leases);
    ck_assert_int_lt(published, 12);
    ck_assert_msg(rc == CLI_NOT_KEPT, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(err, "published"), "%s", err);
    ck_assert_int_eq(leases, 0);
    free(out), free(err);
}
END_TEST

/* ------------------------------------------ hostile bundles for --push */

/* Runs tokitai-jit with args (NULL-terminated) writing stdout and stderr to
 * files; its exit code, peak memory (ru_maxrss, KiB) and wall time. */
static int cli_measured(char **out, char **err, long *maxrss_kb, double *secs, ...)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)tk_test_cli();
    va_list ap;
    va_start(ap, secs);
    for (const char *a = va_arg(ap, const char *); a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    char opath[1100], epath[1100];
    snprintf(opath, sizeof opath, "%s/measured.out", g_dir);
    snprintf(epath, sizeof epath, "%s/measured.err", g_dir);
    double t0 = now_ms();
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(120);
        alarm(60);
        execv(argv[0], argv);
        _exit(121);
    }
    int status = 0;
    struct rusage ru;
    ck_assert_int_eq(wait4(pid, &status, 0, &ru), pid);
    *secs = (now_ms() - t0) / 1e3;
    *maxrss_kb = ru.ru_maxrss;
    *out = tk_test_read_file(opath, NULL);
    *err = tk_test_read_file(epath, NULL);
    ck_assert_msg(WIFEXITED(status), "killed by signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

static void le_put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A bundle file of apparent size `size` holding only head (its first
 * bytes); the rest is a hole. */
static void sparse_bundle(const char *path, const uint8_t *head, size_t n, off_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, head, n), (ssize_t)n);
    ck_assert_int_eq(ftruncate(fd, size), 0);
    close(fd);
}

static void bundle_header(uint8_t *b, uint64_t count)
{
    memset(b, 0, 24);
    memcpy(b, "TKJITBDL", 8);
    le_put(b + 8, TK__CACHE_FORMAT, 4);
    le_put(b + 16, count, 8);
}

/* --push --bundle reads a bundle with exactly the checks of --import: the
 * record headers before any allocation, a record shorter than any record
 * ends the walk, rejections capped at 20 lines, bytes after the declared
 * records reported. Before, it read the whole file into memory (a 4 KiB
 * sparse bundle of 2 GiB: 2.1 GB peak) and printed every rejection. */
START_TEST(push_reads_hostile_bundles_like_import)
{
    char bundle[1024];
    char *out, *err;
    long rss;
    double secs;
    uint8_t head[4096];

    /* 1. One record declaring 2 GiB, in a 2 GiB file holding 4 KiB. */
    snprintf(bundle, sizeof bundle, "%s/sparse.tkb", g_dir);
    memset(head, 0, sizeof head);
    bundle_header(head, 1);
    le_put(head + 24, ((uint64_t)1 << 31) - 32, 8); /* fills the file */
    sparse_bundle(bundle, head, sizeof head, (off_t)1 << 31);
    int rc = cli_measured(&out, &err, &rss, &secs, "--push", "--bundle", bundle, "--remote",
                          g_srv.url, NULL);
    printf("FIGURE push-sparse-bundle: 4 KiB sparse bundle of 2 GiB: exit %d, peak %.1f MiB, "
           "%.2f s\n",
           rc, rss / 1024.0, secs);
    fflush(stdout);
    ck_assert_msg(rc == CLI_FAIL, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "rejected 1"), "%s", out);
    ck_assert_int_eq(count_substr(err, "rejected"), 1);
    ck_assert_msg(rss < 256 * 1024, "peak %ld KiB", rss);
    free(out), free(err);

    /* 2. A million declared records, all empty (a 100 MiB hole): the walk
     * ends at the first, one line. */
    snprintf(bundle, sizeof bundle, "%s/zeros.tkb", g_dir);
    bundle_header(head, 1000000);
    sparse_bundle(bundle, head, 24, (off_t)100 << 20);
    rc = cli_measured(&out, &err, &rss, &secs, "--push", "--bundle", bundle, "--remote", g_srv.url,
                      NULL);
    printf("FIGURE push-empty-records: 100 MiB bundle of 1,000,000 empty records: exit %d, %d "
           "lines on stderr, %.2f s\n",
           rc, count_lines(err), secs);
    fflush(stdout);
    ck_assert_msg(rc == CLI_FAIL, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(count_lines(err) <= 3, "%s", err);
    ck_assert_msg(strstr(err, "shorter than"), "%s", err);
    free(out), free(err);

    /* 3. Thirty records that are no entries: 20 lines and the rest counted. */
    snprintf(bundle, sizeof bundle, "%s/junk.tkb", g_dir);
    size_t n = 30, rec = 8 + 100, len = 24 + n * rec;
    uint8_t *b = calloc(1, len);
    bundle_header(b, n);
    for (size_t i = 0; i < n; i++) {
        le_put(b + 24 + i * rec, 100, 8);
        memset(b + 24 + i * rec + 8, 'J', 100);
    }
    ck_assert_int_eq(tk_test_write_file(bundle, b, len), 0);
    free(b);
    rc = cli_run(&out, &err, "--push", "--bundle", bundle, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_FAIL, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "rejected 30"), "%s", out);
    ck_assert_msg(count_lines(err) == 21 && strstr(err, "... and 10 more"), "%s", err);
    free(out), free(err);

    /* 4. A good bundle with bytes after its declared records: pushed, and
     * the bytes reported. */
    char mpath[1024];
    long compiled = precompile_into(g_a, mpath, sizeof mpath);
    flushall();
    snprintf(bundle, sizeof bundle, "%s/trail.tkb", g_dir);
    ck_assert_int_eq(cli_run(NULL, NULL, "--export", bundle, "--cache-dir", g_a, NULL), CLI_OK);
    size_t size = 0;
    char *bytes = tk_test_read_file(bundle, &size);
    char *more = malloc(size + 7);
    memcpy(more, bytes, size);
    memcpy(more + size, "garbage", 7);
    ck_assert_int_eq(tk_test_write_file(bundle, more, size + 7), 0);
    free(bytes), free(more);
    rc = cli_run(&out, &err, "--push", "--bundle", bundle, "--remote", g_srv.url, NULL);
    ck_assert_msg(rc == CLI_OK, "exit %d\n%s\n%s", rc, out, err);
    ck_assert_int_eq(count_before(out, ", already on the remote"), compiled);
    ck_assert_msg(strstr(err, "warning: ") && strstr(err, "7 bytes after the"), "%s", err);
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
    tcase_add_test(tc, push_repairs_a_poisoned_remote);
    tcase_add_test(tc, authentication_failures_say_why);
    tcase_add_test(tc, precompile_to_a_full_server_fails);
    tcase_add_test(tc, precompile_with_a_stalled_server);
    tcase_add_test(tc, push_reads_hostile_bundles_like_import);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    remote_or_skip();
    return tk_test_main(cli_remote_suite());
}
