/*
 * The remote tier on a real redis-server (no mock), with the stub backend
 * counting compiles: miss then hit from an empty local cache, one compile per
 * kernel across a fleet of processes and cache folders, bad values refused,
 * a server that dies or never answers, signing, lease expiry.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>

#include <xxhash.h>

#include "cache/cache_internal.h"
#include "jit/jit_internal.h"
#include "test_remote_common.h"

static const char *const k_source = "extern \"C\" __global__ void scale(float *x, int n)\n"
                                    "{\n"
                                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    "    if (i < n) x[i] *= FACTOR;\n"
                                    "}\n";

static redis_srv g_srv;
static char *g_tmp;

static void setup(void)
{
    g_tmp = tk_test_tmpdir("remote");
    memset(tk__stub_counters_get(), 0, sizeof(tk__stub_counters));
    redis_start(&g_srv);
}

static void teardown(void)
{
    redis_stop(&g_srv);
    tk_test_rmtree(g_tmp);
    free(g_tmp);
}

/* <g_tmp>/<name>, a local cache folder of one "machine". */
static void local_dir(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", g_tmp, name);
}

typedef struct ctx_opts {
    const char *url;
    const char *key; /* NULL: none */
    unsigned connect_ms, io_ms;
    unsigned lease_ms, wait_ms;
} ctx_opts;

/* NULL on failure (usable in forked children, which must not ck_assert). */
static tk_context *make_ctx(const char *dir, const ctx_opts *o)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    if (tk_config_create(&cfg) != TK_OK)
        return NULL;
    int ok =
        tk_config_set_backend(cfg, TK_BACKEND_STUB) == TK_OK &&
        tk_config_set_cache_dir(cfg, dir) == TK_OK && tk_config_set_remote(cfg, o->url) == TK_OK &&
        tk_config_set_remote_key(cfg, o->key ? o->key : "", o->key ? strlen(o->key) : 0) == TK_OK &&
        tk_config_set_remote_timeouts(cfg, o->connect_ms ? o->connect_ms : 2000,
                                      o->io_ms ? o->io_ms : 2000) == TK_OK &&
        tk_config_set_remote_lease(cfg, o->lease_ms, o->wait_ms) == TK_OK &&
        tk_context_create(cfg, &ctx, err, sizeof err) == TK_OK;
    tk_config_destroy(cfg);
    return ok ? ctx : NULL;
}

static tk_context *make_ctx_ok(const char *dir, const ctx_opts *o)
{
    tk_context *ctx = make_ctx(dir, o);
    ck_assert_ptr_nonnull(ctx);
    return ctx;
}

static tk_kernel_desc desc_for(tk_define *def, char *value, int i)
{
    snprintf(value, 16, "%d.0f", i);
    def->name = "FACTOR";
    def->value = value;
    tk_kernel_desc d = {.source = k_source, .entry = "scale", .defines = def, .n_defines = 1};
    return d;
}

static tk_kernel *get_kernel(tk_context *ctx, int i)
{
    tk_define def;
    char value[16];
    tk_kernel_desc d = desc_for(&def, value, i);
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(st),
                  tk_context_last_error(ctx));
    return k;
}

static tk_context_stats stats_of(const tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s;
}

static void key_hex_of(const tk_kernel *k, char hex[33])
{
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    memcpy(hex, info.key_hex, 33);
}

/* The value the server holds for hex (malloc'd), or NULL. */
static uint8_t *server_value(const char *hex, size_t *len)
{
    char name[128];
    value_name(hex, name, sizeof name);
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "GET %s", name);
    ck_assert_ptr_nonnull(r);
    uint8_t *v = NULL;
    if (r->type == REDIS_REPLY_STRING) {
        v = malloc(r->len);
        memcpy(v, r->str, r->len);
        *len = r->len;
    }
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void server_set(const char *hex, const void *value, size_t len)
{
    char name[128];
    value_name(hex, name, sizeof name);
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "SET %s %b", name, value, len);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "SET failed");
    freeReplyObject(r);
    redisFree(c);
}

static int local_has(const char *dir, const char *hex)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%d/%.2s/%s.tkc", dir, TK__CACHE_FORMAT, hex, hex + 2);
    return access(path, R_OK) == 0;
}

/* --------------------------------------------------------- miss then hit */

START_TEST(miss_then_hit_from_an_empty_local_cache)
{
    char a[1024], b[1024];
    local_dir("machine-a", a, sizeof a);
    local_dir("machine-b", b, sizeof b);
    ctx_opts o = {.url = g_srv.url};

    tk_context *ca = make_ctx_ok(a, &o);
    char hex[33];
    key_hex_of(get_kernel(ca, 1), hex);
    tk_context_stats s = stats_of(ca);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.remote_hits, 0);
    ck_assert_uint_ge(s.remote_misses, 1);
    ck_assert_uint_eq(s.remote_publishes, 1);
    ck_assert_uint_eq(s.remote_errors, 0);
    tk_context_destroy(ca);
    size_t len = 0;
    uint8_t *v = server_value(hex, &len);
    ck_assert_ptr_nonnull(v);
    ck_assert_mem_eq(v, TK__REMOTE_MAGIC, 8);
    /* The value is the envelope (no signature without a key) around the
     * very entry file machine A keeps on disk: format 3, the code object in
     * its stored (compressed when that saves anything) form, the key
     * material with long values as their hashes. */
    ck_assert_uint_eq(v[12] | v[13] | v[14] | v[15], 0);
    const uint8_t *e = v + TK__REMOTE_HEADER_SIZE;
    size_t elen = len - TK__REMOTE_HEADER_SIZE;
    tk__entry_view ev;
    const char *why = NULL;
    tk_assert_status(tk__entry_parse(e, elen, 1, &ev, &why), TK_OK);
    ck_assert_uint_eq(ev.version, TK__CACHE_FORMAT);
    ck_assert(ev.codec == TK__CODEC_ZSTD || ev.stored_size == ev.payload_size);
    char fp[33], disk[1200];
    tk__fp_hex(ev.fp_hi, ev.fp_lo, fp);
    ck_assert_str_eq(fp, hex);
    snprintf(disk, sizeof disk, "%s/%d/%.2s/%s.tkc", a, TK__CACHE_FORMAT, hex, hex + 2);
    size_t dlen = 0;
    char *dbytes = tk_test_read_file(disk, &dlen);
    ck_assert_ptr_nonnull(dbytes);
    ck_assert_uint_eq(dlen, elen);
    ck_assert_mem_eq(dbytes, e, elen);
    free(dbytes);
    free(v);

    /* Another machine: an empty local cache, the same kernel. */
    uint64_t compiles_before = tk__stub_counters_get()->compiles;
    ck_assert(!local_has(b, hex));
    tk_context *cb = make_ctx_ok(b, &o);
    tk_kernel *k = get_kernel(cb, 1);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
    s = stats_of(cb);
    ck_assert_uint_eq(s.compiles, 0);
    ck_assert_uint_eq(tk__stub_counters_get()->compiles, compiles_before);
    ck_assert_uint_eq(s.remote_hits, 1);
    ck_assert_uint_eq(s.remote_rejected, 0);
    ck_assert_uint_eq(s.remote_publishes, 0);
    ck_assert_uint_eq(s.loads, 1);
    tk_context_destroy(cb);
    /* ... and written to the local cache: the next process reads it from disk. */
    ck_assert(local_has(b, hex));
    ctx_opts off = {.url = ""};
    tk_context *cc = make_ctx_ok(b, &off);
    get_kernel(cc, 1);
    s = stats_of(cc);
    ck_assert_uint_eq(s.compiles, 0);
    ck_assert_uint_eq(s.disk_hits, 1);
    ck_assert_uint_eq(s.remote_hits + s.remote_misses, 0);
    tk_context_destroy(cc);
}
END_TEST

START_TEST(unix_socket_url)
{
    redis_srv u;
    char sock[1024];
    char *sdir = tk_test_tmpdir("redis-sock");
    snprintf(sock, sizeof sock, "%s/redis.sock", sdir);
    const char *extra[] = {"--unixsocket", sock, "--unixsocketperm", "700", NULL};
    redis_start_args(&u, extra);
    char url[1100];
    snprintf(url, sizeof url, "unix://%s?db=3", sock);
    char a[1024], b[1024];
    local_dir("ua", a, sizeof a);
    local_dir("ub", b, sizeof b);
    ctx_opts o = {.url = url};
    tk_context *ca = make_ctx_ok(a, &o);
    get_kernel(ca, 7);
    ck_assert_uint_eq(stats_of(ca).remote_publishes, 1);
    tk_context_destroy(ca);
    tk_context *cb = make_ctx_ok(b, &o);
    get_kernel(cb, 7);
    ck_assert_uint_eq(stats_of(cb).compiles, 0);
    ck_assert_uint_eq(stats_of(cb).remote_hits, 1);
    tk_context_destroy(cb);
    /* db 3, not db 0 */
    redisContext *c = redis_client(&u);
    redisReply *r = redisCommand(c, "DBSIZE");
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
    r = redisCommand(c, "SELECT 3");
    freeReplyObject(r);
    r = redisCommand(c, "DBSIZE");
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    redisFree(c);
    redis_stop(&u);
    tk_test_rmtree(sdir);
    free(sdir);
}
END_TEST

START_TEST(config_rejects_bad_urls)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    const char *bad[] = {"http://x",      "redis://",        "redis://h:0", "redis://h:99999",
                         "redis://h:1/x", "unix://relative", "rediss://h",  "redis://h:12x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tk_config_set_remote(cfg, bad[i]) == TK_INVALID_ARGUMENT, "%s accepted",
                      bad[i]);
    const char *good[] = {"redis://h",
                          "redis://10.0.0.1:6380/2",
                          "redis://:pw@h:1",
                          "redis://user:pw@[::1]:6379/0",
                          "unix:///run/redis.sock",
                          ""};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        tk_assert_status(tk_config_set_remote(cfg, good[i]), TK_OK);
    tk_assert_status(tk_config_set_remote(cfg, NULL), TK_OK);
    tk_assert_status(tk_config_set_remote_key(cfg, NULL, 3), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_config_set_remote_timeouts(cfg, 10, 20), TK_OK);
    tk_config_destroy(cfg);
}
END_TEST

/* ------------------------------------------------------------ the fleet */

#define FLEET_CACHES 4
#define FLEET_PROCS 8 /* per cache folder */
#define FLEET_KERNELS 8

typedef struct fleet_result {
    uint64_t compiles, remote_hits, disk_hits, errors;
    int ok;
} fleet_result;

static void fleet_child(const char *dir, int idx, int start_fd, int out_fd)
{
    fleet_result r = {0, 0, 0, 0, 0};
    tk__stub_counters_get()->compile_delay_ms = 30; /* a compile takes time: races show */
    ctx_opts o = {.url = g_srv.url, .io_ms = 5000, .connect_ms = 5000};
    tk_context *ctx = make_ctx(dir, &o);
    char c;
    if (ctx && read(start_fd, &c, 1) >= 0) {
        r.ok = 1;
        for (int k = 0; k < FLEET_KERNELS; k++) {
            tk_define def;
            char value[16];
            tk_kernel_desc d = desc_for(&def, value, (k + idx) % FLEET_KERNELS);
            tk_kernel *kern = NULL;
            if (tk_kernel_get(ctx, &d, &kern) != TK_OK)
                r.ok = 0;
        }
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_context_get_stats(ctx, &s);
        r.compiles = s.compiles;
        r.remote_hits = s.remote_hits;
        r.disk_hits = s.disk_hits;
        r.errors = s.remote_errors;
    }
    tk_context_destroy(ctx);
    if (write(out_fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(3);
    _exit(r.ok ? 0 : 2);
}

START_TEST(fleet_compiles_each_kernel_once)
{
    int start[2], results[2];
    ck_assert_int_eq(pipe(start), 0);
    ck_assert_int_eq(pipe(results), 0);
    enum { N = FLEET_CACHES * FLEET_PROCS };
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        char dir[1024], name[32];
        snprintf(name, sizeof name, "node-%d", i % FLEET_CACHES);
        local_dir(name, dir, sizeof dir);
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(start[1]);
            close(results[0]);
            fleet_child(dir, i, start[0], results[1]);
        }
    }
    close(start[0]);
    close(results[1]);
    double t0 = now_ms();
    close(start[1]); /* go: every child's read returns */
    fleet_result total = {0, 0, 0, 0, 1};
    for (int i = 0; i < N; i++) {
        fleet_result r;
        ck_assert_int_eq(read(results[0], &r, sizeof r), (ssize_t)sizeof r);
        total.compiles += r.compiles;
        total.remote_hits += r.remote_hits;
        total.disk_hits += r.disk_hits;
        total.errors += r.errors;
        total.ok &= r.ok;
    }
    for (int i = 0; i < N; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %d", i,
                      status);
    }
    close(results[0]);
    printf("fleet: %d processes over %d cache folders, %d kernels: %llu compiles, %llu remote "
           "hits, %llu cache hits in all, %llu remote errors, %.0f ms\n",
           N, FLEET_CACHES, FLEET_KERNELS, (unsigned long long)total.compiles,
           (unsigned long long)total.remote_hits, (unsigned long long)total.disk_hits,
           (unsigned long long)total.errors, now_ms() - t0);
    ck_assert(total.ok);
    ck_assert_uint_eq(total.errors, 0);
    ck_assert_uint_eq(total.compiles, FLEET_KERNELS);
    /* Every other get was served by a cache tier. */
    ck_assert_uint_eq(total.disk_hits, (uint64_t)N * FLEET_KERNELS - FLEET_KERNELS);
    /* No lease left behind. */
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "KEYS tkjit:*:lease:*");
    ck_assert_uint_eq(r->elements, 0);
    freeReplyObject(r);
    redisFree(c);
}
END_TEST

/* ------------------------------------------------------------ bad values */

/* Plants value under the kernel's key, then an empty local cache asks for
 * it: refused (counted), compiled, and the good value replaces the bad. */
static void expect_refused(const char *tag, const char *hex, const void *value, size_t len,
                           const ctx_opts *o)
{
    char dir[1024];
    local_dir(tag, dir, sizeof dir);
    server_set(hex, value, len);
    tk_context *ctx = make_ctx_ok(dir, o);
    get_kernel(ctx, 1);
    tk_context_stats s = stats_of(ctx);
    /* Refused at each look (before and under the lock), never used. */
    ck_assert_msg(s.remote_rejected >= 1 && s.compiles == 1 && s.remote_hits == 0,
                  "%s: rejected %llu compiles %llu hits %llu", tag,
                  (unsigned long long)s.remote_rejected, (unsigned long long)s.compiles,
                  (unsigned long long)s.remote_hits);
    ck_assert_uint_eq(s.remote_publishes, 1);
    tk_context_destroy(ctx);
    size_t now_len = 0;
    uint8_t *now = server_value(hex, &now_len);
    ck_assert_ptr_nonnull(now);
    ck_assert_msg(now_len != len || memcmp(now, value, len) != 0, "%s: bad value left", tag);
    free(now);
}

/* Rewrites the entry's trailing checksum so only a signature can tell. */
static void fix_checksum(uint8_t *entry, size_t len)
{
    uint64_t h = XXH3_64bits(entry, len - 8);
    for (int i = 0; i < 8; i++)
        entry[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

START_TEST(bad_values_are_refused)
{
    char a[1024];
    local_dir("writer", a, sizeof a);
    ctx_opts o = {.url = g_srv.url};
    tk_context *ca = make_ctx_ok(a, &o);
    char hex[33];
    key_hex_of(get_kernel(ca, 1), hex);
    tk_context_destroy(ca);
    size_t len = 0;
    uint8_t *good = server_value(hex, &len);
    ck_assert_ptr_nonnull(good);
    const size_t env = TK__REMOTE_HEADER_SIZE; /* unsigned: no MAC */
    uint8_t *bad = malloc(len);

    /* corrupt: one payload byte flipped (checksum mismatch) */
    memcpy(bad, good, len);
    bad[len - 12] ^= 0x40;
    expect_refused("corrupt", hex, bad, len, &o);
    /* truncated */
    expect_refused("truncated", hex, good, len / 2, &o);
    /* foreign version: the entry says cache format 99 */
    memcpy(bad, good, len);
    bad[env + 8] = 99;
    expect_refused("foreign-version", hex, bad, len, &o);
    /* not a remote value at all */
    expect_refused("garbage", hex, "hello, world", 12, &o);
    /* a valid entry of another key, under this key's name */
    {
        char b[1024], hex2[33];
        local_dir("writer2", b, sizeof b);
        tk_context *cb = make_ctx_ok(b, &o);
        key_hex_of(get_kernel(cb, 2), hex2);
        tk_context_destroy(cb);
        size_t len2 = 0;
        uint8_t *other = server_value(hex2, &len2);
        expect_refused("other-key", hex, other, len2, &o);
        free(other);
    }
    /* unsigned while the reader has a key */
    ctx_opts keyed = {.url = g_srv.url, .key = "fleet secret"};
    expect_refused("unsigned", hex, good, len, &keyed);
    /* oversized: over the reader's limit (a test hook lowers it to 64 bytes) */
    setenv("TK__REMOTE_TEST_MAX_VALUE", "64", 1);
    {
        char dir[1024];
        local_dir("oversized", dir, sizeof dir);
        server_set(hex, good, len);
        tk_context *ctx = make_ctx_ok(dir, &o);
        get_kernel(ctx, 1);
        tk_context_stats s = stats_of(ctx);
        ck_assert_uint_ge(s.remote_rejected, 1);
        ck_assert_uint_eq(s.compiles, 1);
        ck_assert_uint_eq(s.remote_publishes, 0); /* too big to publish under that limit too */
        tk_context_destroy(ctx);
    }
    unsetenv("TK__REMOTE_TEST_MAX_VALUE");
    free(bad);
    free(good);
}
END_TEST

START_TEST(signed_accepted_tampered_refused)
{
    char a[1024], b[1024];
    local_dir("signer", a, sizeof a);
    local_dir("reader", b, sizeof b);
    ctx_opts keyed = {.url = g_srv.url, .key = "fleet secret"};
    tk_context *ca = make_ctx_ok(a, &keyed);
    char hex[33];
    key_hex_of(get_kernel(ca, 1), hex);
    tk_context_destroy(ca);
    size_t len = 0;
    uint8_t *good = server_value(hex, &len);
    ck_assert_ptr_nonnull(good);
    ck_assert_uint_eq(good[12], TK__REMOTE_MAC_SIZE); /* MAC length */

    /* Signed with the fleet's key: accepted. */
    tk_context *cb = make_ctx_ok(b, &keyed);
    get_kernel(cb, 1);
    ck_assert_uint_eq(stats_of(cb).compiles, 0);
    ck_assert_uint_eq(stats_of(cb).remote_hits, 1);
    tk_context_destroy(cb);

    /* Tampered: another payload byte with a recomputed checksum, so the entry
     * is well formed and only the signature tells. */
    size_t off = TK__REMOTE_HEADER_SIZE + TK__REMOTE_MAC_SIZE;
    uint8_t *bad = malloc(len);
    memcpy(bad, good, len);
    bad[len - 12] ^= 0x01;
    fix_checksum(bad + off, len - off);
    tk__entry_view v;
    const char *why = NULL;
    tk_assert_status(tk__entry_parse(bad + off, len - off, 1, &v, &why), TK_OK);
    expect_refused("tampered", hex, bad, len, &keyed);
    /* Signed with another key: refused. */
    server_set(hex, good, len);
    ctx_opts other = {.url = g_srv.url, .key = "another secret"};
    expect_refused("other-secret", hex, good, len, &other);
    /* A reader with no key takes a signed value (it checks the entry only). */
    server_set(hex, good, len);
    char c[1024];
    local_dir("keyless", c, sizeof c);
    ctx_opts plain = {.url = g_srv.url};
    tk_context *cc = make_ctx_ok(c, &plain);
    get_kernel(cc, 1);
    ck_assert_uint_eq(stats_of(cc).remote_hits, 1);
    tk_context_destroy(cc);
    free(bad);
    free(good);
}
END_TEST

/* ------------------------------------------------- a server in trouble */

#define KILL_KERNELS 40

START_TEST(server_killed_mid_run)
{
    char a[1024], base[1024];
    local_dir("victim", a, sizeof a);
    local_dir("baseline", base, sizeof base);
    /* The lookup path's defaults (50 ms timeouts), as in production. */
    ctx_opts o = {.url = g_srv.url, .connect_ms = 50, .io_ms = 50};
    ctx_opts off = {.url = ""};
    tk_context *ref = make_ctx_ok(base, &off);
    tk_context *ctx = make_ctx_ok(a, &o);
    double t_ref[KILL_KERNELS], t[KILL_KERNELS];
    for (int i = 0; i < KILL_KERNELS; i++) {
        double t0 = now_ms();
        get_kernel(ref, 100 + i);
        t_ref[i] = now_ms() - t0;
    }
    for (int i = 0; i < KILL_KERNELS; i++) {
        if (i == KILL_KERNELS / 2)
            redis_kill(&g_srv);
        double t0 = now_ms();
        get_kernel(ctx, 100 + i); /* every call succeeds */
        t[i] = now_ms() - t0;
    }
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, KILL_KERNELS);
    ck_assert_uint_eq(s.remote_publishes, KILL_KERNELS / 2);
    ck_assert_uint_ge(s.remote_errors, 1);
    double before = 0, after_first = t[KILL_KERNELS / 2], after_rest = 0, ref_avg = 0, worst = 0;
    for (int i = 0; i < KILL_KERNELS; i++) {
        ref_avg += t_ref[i] / KILL_KERNELS;
        if (i < KILL_KERNELS / 2)
            before += t[i] / (KILL_KERNELS / 2);
        else if (i > KILL_KERNELS / 2)
            after_rest += t[i] / (KILL_KERNELS / 2 - 1);
        if (i >= KILL_KERNELS / 2 && t[i] - t_ref[i] > worst)
            worst = t[i] - t_ref[i];
    }
    printf("server killed mid-run: per call (stub compile) no remote %.3f ms; remote up %.3f "
           "ms; first call after the kill %.3f ms; later calls %.3f ms; worst added %.3f ms; "
           "remote errors %llu\n",
           ref_avg, before, after_first, after_rest, worst, (unsigned long long)s.remote_errors);
    /* Bounded: at most one timeout (50 ms) plus slack for a loaded CI box. */
    ck_assert_msg(worst < 50 + 250, "a call after the kill took %.1f ms more than without remote",
                  worst);
    tk_context_destroy(ctx);
    tk_context_destroy(ref);
}
END_TEST

START_TEST(silent_server_costs_one_timeout)
{
    /* A listening socket that accepts connections (the kernel's backlog) and
     * never answers. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t alen = sizeof addr;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &alen), 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(addr.sin_port));

    char a[1024];
    local_dir("silent", a, sizeof a);
    ctx_opts o = {.url = url, .connect_ms = 100, .io_ms = 100};
    tk_context *ctx = make_ctx_ok(a, &o);
    double t0 = now_ms();
    get_kernel(ctx, 1);
    double first = now_ms() - t0;
    double later_max = 0;
    t0 = now_ms();
    for (int i = 2; i < 12; i++) {
        double t1 = now_ms();
        get_kernel(ctx, i);
        double dt = now_ms() - t1;
        if (dt > later_max)
            later_max = dt;
    }
    double later = now_ms() - t0;
    tk_context_stats s = stats_of(ctx);
    printf("silent server (100 ms timeouts): first call %.1f ms, next 10 calls %.2f ms in all "
           "(worst %.2f ms), remote errors %llu\n",
           first, later, later_max, (unsigned long long)s.remote_errors);
    ck_assert_uint_eq(s.compiles, 11);
    ck_assert_uint_eq(s.remote_errors, 1); /* one timeout, then the breaker */
    ck_assert_msg(first >= 90 && first < 100 + 400, "first call %.1f ms", first);
    /* Below the 100 ms timeout: no call waited on the server again. */
    ck_assert_msg(later_max < 90, "a call with the breaker open took %.1f ms", later_max);
    tk_context_destroy(ctx);
    close(fd);
}
END_TEST

START_TEST(full_server_costs_nothing)
{
    redis_srv full;
    const char *extra[] = {"--maxmemory", "1", "--maxmemory-policy", "noeviction", NULL};
    redis_start_args(&full, extra);
    char a[1024];
    local_dir("full", a, sizeof a);
    ctx_opts o = {.url = full.url};
    tk_context *ctx = make_ctx_ok(a, &o);
    for (int i = 0; i < 5; i++)
        get_kernel(ctx, i);
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_eq(s.compiles, 5);
    ck_assert_uint_eq(s.remote_publishes, 0);
    ck_assert_uint_ge(s.remote_errors, 5); /* OOM replies, counted */
    tk_context_destroy(ctx);
    redis_stop(&full);
}
END_TEST

/* ---------------------------------------------------------------- leases */

START_TEST(crashed_holders_lease_expires)
{
    char a[1024], w[1024];
    local_dir("probe", a, sizeof a);
    local_dir("waiter", w, sizeof w);
    /* Learn the key with the remote off. */
    ctx_opts off = {.url = ""};
    tk_context *probe = make_ctx_ok(a, &off);
    char hex[33];
    key_hex_of(get_kernel(probe, 5), hex);
    tk_context_destroy(probe);

    /* A holder that crashed: its lease stays until it expires (400 ms). */
    char lease[128];
    snprintf(lease, sizeof lease, "tkjit:%s:%d:lease:%s", TK_VERSION_STRING, TK__CACHE_FORMAT, hex);
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "SET %s crashed-host:1:0 PX 400", lease);
    freeReplyObject(r);
    ctx_opts o = {.url = g_srv.url};
    tk_context *ctx = make_ctx_ok(w, &o);
    double t0 = now_ms();
    get_kernel(ctx, 5);
    double waited = now_ms() - t0;
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    ck_assert_uint_eq(stats_of(ctx).remote_publishes, 1);
    tk_context_destroy(ctx);
    printf("crashed holder: waited %.0f ms for a 400 ms lease to expire, then compiled\n", waited);
    ck_assert_msg(waited >= 300 && waited < 3000, "waited %.0f ms", waited);
    r = redisCommand(c, "EXISTS %s", lease);
    ck_assert_int_eq(r->integer, 0); /* released after publishing */
    freeReplyObject(r);

    /* A holder that never publishes: the wait is bounded (wait 300 ms). */
    r = redisCommand(c, "SET %s stuck-host:1:0 PX 60000", lease);
    freeReplyObject(r);
    redisFree(c);
    char w2[1024];
    local_dir("waiter2", w2, sizeof w2);
    ctx_opts bounded = {.url = g_srv.url, .wait_ms = 300};
    r = NULL;
    c = redis_client(&g_srv);
    char name[128];
    value_name(hex, name, sizeof name);
    r = redisCommand(c, "DEL %s", name);
    freeReplyObject(r);
    redisFree(c);
    ctx = make_ctx_ok(w2, &bounded);
    t0 = now_ms();
    get_kernel(ctx, 5);
    waited = now_ms() - t0;
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    tk_context_destroy(ctx);
    printf("stuck holder: waited %.0f ms (bound 300 ms), then compiled\n", waited);
    ck_assert_msg(waited >= 250 && waited < 3000, "waited %.0f ms", waited);
}
END_TEST

START_TEST(environment_configures_the_remote)
{
    char a[1024], b[1024], c[1024];
    local_dir("env-a", a, sizeof a);
    local_dir("env-b", b, sizeof b);
    local_dir("env-c", c, sizeof c);
    setenv("TOKITAI_JIT_REMOTE", g_srv.url, 1);
    setenv("TOKITAI_JIT_REMOTE_KEY", "env secret", 1);
    setenv("TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS", "2000", 1);
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    const char *dirs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        tk_assert_status(tk_config_create(&cfg), TK_OK);
        tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
        tk_assert_status(tk_config_set_cache_dir(cfg, dirs[i]), TK_OK);
        tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
        tk_config_destroy(cfg);
        char hex[33];
        key_hex_of(get_kernel(ctx, 3), hex);
        tk_context_stats s = stats_of(ctx);
        ck_assert_uint_eq(s.compiles, i == 0 ? 1 : 0);
        ck_assert_uint_eq(s.remote_hits, i == 0 ? 0 : 1);
        tk_context_destroy(ctx);
        if (i == 0) {
            size_t len = 0;
            uint8_t *v = server_value(hex, &len);
            ck_assert_ptr_nonnull(v);
            ck_assert_uint_eq(v[12], TK__REMOTE_MAC_SIZE); /* signed with the env key */
            free(v);
        }
    }
    /* The API overrides the environment: "" turns the remote off. */
    ctx_opts off = {.url = ""};
    ctx = make_ctx_ok(c, &off);
    get_kernel(ctx, 3);
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    ck_assert_uint_eq(stats_of(ctx).remote_hits + stats_of(ctx).remote_misses, 0);
    tk_context_destroy(ctx);
    unsetenv("TOKITAI_JIT_REMOTE");
    unsetenv("TOKITAI_JIT_REMOTE_KEY");
    unsetenv("TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS");
}
END_TEST

START_TEST(read_only_local_cache_reads_but_never_publishes)
{
    char a[1024], b[1024];
    local_dir("ro-writer", a, sizeof a);
    local_dir("ro-reader", b, sizeof b);
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, b), TK_OK);
    tk_assert_status(tk_config_set_cache_read_only(cfg, 1), TK_OK);
    tk_assert_status(tk_config_set_remote(cfg, g_srv.url), TK_OK);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    get_kernel(ctx, 4); /* a miss: compiled, not published */
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    ck_assert_uint_eq(stats_of(ctx).remote_publishes, 0);
    tk_context_destroy(ctx);
    ctx_opts o = {.url = g_srv.url};
    tk_context *w = make_ctx_ok(a, &o);
    get_kernel(w, 5);
    tk_context_destroy(w);
    tk_assert_status(tk_context_create(cfg, &ctx, err, sizeof err), TK_OK);
    get_kernel(ctx, 5); /* a hit, read only */
    ck_assert_uint_eq(stats_of(ctx).compiles, 0);
    ck_assert_uint_eq(stats_of(ctx).remote_hits, 1);
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    struct stat st;
    ck_assert_int_ne(stat(b, &st), 0); /* nothing written locally */
}
END_TEST

/* ------------------------------------------------- hostile writers */

/* The key of kernel i, learnt with the remote off. */
static void probe_key(int i, char hex[33])
{
    char a[1024];
    local_dir("probe-key", a, sizeof a);
    ctx_opts off = {.url = ""};
    tk_context *probe = make_ctx_ok(a, &off);
    key_hex_of(get_kernel(probe, i), hex);
    tk_context_destroy(probe);
}

static void lease_name(const char *hex, char *buf, size_t size)
{
    snprintf(buf, size, "tkjit:%s:%d:lease:%s", TK_VERSION_STRING, TK__CACHE_FORMAT, hex);
}

static void redis_do(const char *cmd, const char *key, const char *arg)
{
    redisContext *c = redis_client(&g_srv);
    redisReply *r =
        arg ? redisCommand(c, "%s %s %s", cmd, key, arg) : redisCommand(c, "%s %s", cmd, key);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s %s: %s", cmd, key,
                  r ? r->str : "no reply");
    freeReplyObject(r);
    redisFree(c);
}

static long long redis_int(const char *cmd, const char *key)
{
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "%s %s", cmd, key);
    ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "%s %s", cmd, key);
    long long v = r->integer;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* Plants a lease with plant(lease name), then times a lookup of kernel i
 * in a fresh cache (wait bound 3 s, so the test ends either way). */
static double lookup_with_planted_lease(int i, const char *key, const char *how, const char *a1,
                                        const char *a2, const char *a3)
{
    char hex[33], lease[160], dir[1024];
    probe_key(i, hex);
    lease_name(hex, lease, sizeof lease);
    redisContext *c = redis_client(&g_srv);
    redisReply *r = a3 ? redisCommand(c, "%s %s %s %s %s", how, lease, a1, a2, a3)
                       : redisCommand(c, "%s %s %s", how, lease, a1);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "planting with %s", how);
    freeReplyObject(r);
    redisFree(c);
    char sub[64];
    snprintf(sub, sizeof sub, "planted-%d", i);
    local_dir(sub, dir, sizeof dir);
    ctx_opts o = {.url = g_srv.url, .key = key, .wait_ms = 3000};
    tk_context *ctx = make_ctx_ok(dir, &o);
    double t0 = now_ms();
    get_kernel(ctx, i);
    double waited = now_ms() - t0;
    ck_assert_uint_eq(stats_of(ctx).compiles, 1);
    ck_assert_uint_eq(stats_of(ctx).remote_publishes, 1);
    tk_context_destroy(ctx);
    /* Our lease replaced the planted one, and was released after publishing. */
    ck_assert_int_eq(redis_int("EXISTS", lease), 0);
    return waited;
}

START_TEST(planted_leases_do_not_stall)
{
    /* No expiry: before, every lookup waited the whole wait time and the
     * lease stayed forever. */
    double t1 = lookup_with_planted_lease(11, NULL, "SET", "attacker", NULL, NULL);
    /* A list at the lease's key. */
    double t2 = lookup_with_planted_lease(12, NULL, "RPUSH", "attacker", NULL, NULL);
    /* An expiry far beyond the lease time (60 s). */
    double t3 = lookup_with_planted_lease(13, NULL, "SET", "attacker", "PX", "3600000");
    /* With a shared secret, an unsigned lease within the lease time. */
    double t4 = lookup_with_planted_lease(14, "fleet secret", "SET", "attacker", "PX", "30000");
    /* ...and one that looks signed but is forged. */
    char forged[128];
    snprintf(forged, sizeof forged, "host:1:0000000000000000.%064d", 0);
    double t5 = lookup_with_planted_lease(15, "fleet secret", "SET", forged, "PX", "30000");
    /* ...and an unsigned one of any length (a long value is compared by
     * its hash, not copied). */
    char long_lease[1200];
    memset(long_lease, 'a', sizeof long_lease - 1);
    long_lease[sizeof long_lease - 1] = 0;
    double t6 = lookup_with_planted_lease(16, "fleet secret", "SET", long_lease, "PX", "30000");
    printf("planted leases: no expiry %.1f ms, a list %.1f ms, 1 h expiry %.1f ms, unsigned %.1f "
           "ms, forged %.1f ms, unsigned of %zu bytes %.1f ms (wait bound 3000 ms)\n",
           t1, t2, t3, t4, t5, strlen(long_lease), t6);
    ck_assert_msg(t1 < 1000 && t2 < 1000 && t3 < 1000 && t4 < 1000 && t5 < 1000 && t6 < 1000,
                  "a planted lease stalled a lookup: %.0f %.0f %.0f %.0f %.0f %.0f ms", t1, t2, t3,
                  t4, t5, t6);
}
END_TEST

/* A cache handle at dir with the remote tier ro (the cache layer's hooks
 * called directly), and the key of a probe's hex. */
static tk_cache *cache_with_remote(const char *dir, tk__remote_opts *ro)
{
    tk__cache_opts co = {.root = dir, .remote = ro};
    tk_cache *c = NULL;
    tk_assert_status(tk__cache_open(&co, &c), TK_OK);
    return c;
}

static void key_of_hex(const char *hex, tk__key *key)
{
    memset(key, 0, sizeof *key);
    memcpy(key->hex, hex, 33);
}

START_TEST(genuine_signed_lease_is_waited_for)
{
    char hex[33], lease[160], dir[1024];
    probe_key(21, hex);
    lease_name(hex, lease, sizeof lease);
    /* A holder of the fleet's key takes the lease (the cache layer's hook). */
    char holder_dir[1024];
    local_dir("holder", holder_dir, sizeof holder_dir);
    tk__remote_opts ro = {.url = g_srv.url,
                          .secret = "fleet secret",
                          .secret_len = 12,
                          .secret_set = 1,
                          .connect_ms = 2000,
                          .io_ms = 2000};
    tk_cache *holder = cache_with_remote(holder_dir, &ro);
    tk__key key;
    key_of_hex(hex, &key);
    void *held = tk__cache_remote_lease(holder, &key);
    ck_assert_ptr_nonnull(held);
    ck_assert_int_gt(redis_int("PTTL", lease), 0);
    /* Same key: waited for (bound 400 ms). */
    local_dir("waiter-signed", dir, sizeof dir);
    ctx_opts o = {.url = g_srv.url, .key = "fleet secret", .wait_ms = 400};
    tk_context *ctx = make_ctx_ok(dir, &o);
    double t0 = now_ms();
    get_kernel(ctx, 21);
    double waited = now_ms() - t0;
    tk_context_destroy(ctx);
    /* Another secret: the holder's lease (still held) is a forgery to it. */
    char dir2[1024];
    local_dir("waiter-other", dir2, sizeof dir2);
    char name[128];
    value_name(hex, name, sizeof name);
    redis_do("DEL", name, NULL);
    ctx_opts other = {.url = g_srv.url, .key = "another secret", .wait_ms = 400};
    ctx = make_ctx_ok(dir2, &other);
    t0 = now_ms();
    get_kernel(ctx, 21);
    double other_waited = now_ms() - t0;
    tk_context_destroy(ctx);
    tk__cache_remote_release(held);
    tk_cache_close(holder);
    printf("signed lease: same key waited %.0f ms (bound 400), another key %.1f ms\n", waited,
           other_waited);
    ck_assert_msg(waited >= 300, "a genuine lease was not waited for (%.0f ms)", waited);
    ck_assert_msg(other_waited < 300, "a lease signed under another key stalled (%.0f ms)",
                  other_waited);
}
END_TEST

typedef struct stopper {
    pid_t pid;
    int after_ms;
} stopper;

static void *stop_later(void *p)
{
    stopper *s = p;
    sleep_ms_test(s->after_ms);
    kill(s->pid, SIGSTOP);
    return NULL;
}

START_TEST(leases_released_after_a_stalled_server)
{
    char hex[33], lease[160], dir[1024];
    probe_key(31, hex);
    lease_name(hex, lease, sizeof lease);
    local_dir("stalled", dir, sizeof dir);
    /* The store is slowed (a test hook) so the server stops between the
     * lease and the publish; it resumes before the context is destroyed. */
    setenv("TK__CACHE_TEST_WRITE_DELAY_MS", "600", 1);
    ctx_opts o = {.url = g_srv.url, .connect_ms = 100, .io_ms = 100};
    tk_context *ctx = make_ctx_ok(dir, &o);
    unsetenv("TK__CACHE_TEST_WRITE_DELAY_MS");
    stopper s = {g_srv.pid, 250};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, stop_later, &s), 0);
    get_kernel(ctx, 31);
    pthread_join(th, NULL);
    kill(g_srv.pid, SIGCONT);
    tk_context_stats st = stats_of(ctx);
    ck_assert_uint_eq(st.compiles, 1);
    ck_assert_uint_eq(st.remote_publishes, 0);       /* the server was stopped */
    ck_assert_int_eq(redis_int("EXISTS", lease), 1); /* still held: the release missed */
    tk_context_destroy(ctx);
    printf("stalled server: lease left after destroy: %lld\n", redis_int("EXISTS", lease));
    ck_assert_int_eq(redis_int("EXISTS", lease), 0);
}
END_TEST

/* A lease request the stopped server never answered, run once it resumes:
 * the process that sent it, which compiled without the lease, releases it
 * at close (other processes would otherwise wait the lease's time). */
START_TEST(unanswered_lease_released_at_close)
{
    char hex[33], lease[160], dir[1024];
    probe_key(41, hex);
    lease_name(hex, lease, sizeof lease);
    local_dir("unanswered", dir, sizeof dir);
    tk__remote_opts ro = {.url = g_srv.url, .connect_ms = 2000, .io_ms = 100};
    tk_cache *c = cache_with_remote(dir, &ro);
    tk__key key;
    key_of_hex(hex, &key);
    kill(g_srv.pid, SIGSTOP);
    void *held = tk__cache_remote_lease(c, &key); /* sent, no reply within 100 ms */
    kill(g_srv.pid, SIGCONT);
    ck_assert_ptr_null(held);
    long long taken = 0;
    for (int i = 0; i < 300 && !(taken = redis_int("EXISTS", lease)); i++)
        sleep_ms_test(10);
    ck_assert_int_eq(taken, 1); /* the late request took the lease */
    tk_cache_close(c);
    printf("unanswered lease: left after close: %lld\n", redis_int("EXISTS", lease));
    ck_assert_int_eq(redis_int("EXISTS", lease), 0);
}
END_TEST

START_TEST(oversized_values_are_not_read)
{
    char hex[33];
    probe_key(41, hex);
    /* 4 KiB under the value's name; the reader's limit is 64 bytes. */
    char *big = malloc(4096);
    memset(big, 'x', 4096);
    server_set(hex, big, 4096);
    free(big);
    redis_do("CONFIG", "RESETSTAT", NULL);
    setenv("TK__REMOTE_TEST_MAX_VALUE", "64", 1);
    char dir[1024];
    local_dir("oversized-unread", dir, sizeof dir);
    ctx_opts o = {.url = g_srv.url};
    tk_context *ctx = make_ctx_ok(dir, &o);
    unsetenv("TK__REMOTE_TEST_MAX_VALUE");
    get_kernel(ctx, 41);
    ck_assert_uint_ge(stats_of(ctx).remote_rejected, 1); /* a lookup looks twice */
    tk_context_destroy(ctx);
    redisContext *c = redis_client(&g_srv);
    redisReply *r = redisCommand(c, "INFO commandstats");
    ck_assert_ptr_nonnull(r);
    int read_it =
        strstr(r->str, "cmdstat_getrange:") != NULL; /* (the release script GETs its lease) */
    int sized = strstr(r->str, "cmdstat_strlen:") != NULL;
    freeReplyObject(r);
    redisFree(c);
    ck_assert_msg(!read_it, "an oversized value was read");
    ck_assert_msg(sized, "no STRLEN before reading");
}
END_TEST

START_TEST(wrong_type_value_key_is_a_miss)
{
    char hex[33], name[128], dir[1024];
    probe_key(51, hex);
    value_name(hex, name, sizeof name);
    redis_do("RPUSH", name, "attacker");
    local_dir("wrongtype", dir, sizeof dir);
    ctx_opts o = {.url = g_srv.url};
    tk_context *ctx = make_ctx_ok(dir, &o);
    get_kernel(ctx, 51);
    tk_context_stats s = stats_of(ctx);
    ck_assert_uint_ge(s.remote_rejected, 1);
    ck_assert_uint_eq(s.compiles, 1);
    ck_assert_uint_eq(s.remote_publishes, 1); /* the plain SET replaced the list */
    tk_context_destroy(ctx);
    size_t len = 0;
    uint8_t *v = server_value(hex, &len);
    ck_assert_ptr_nonnull(v);
    free(v);
}
END_TEST

static Suite *remote_suite(void)
{
    Suite *s = suite_create("remote");
    TCase *tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, miss_then_hit_from_an_empty_local_cache);
    tcase_add_test(tc, unix_socket_url);
    tcase_add_test(tc, config_rejects_bad_urls);
    tcase_add_test(tc, fleet_compiles_each_kernel_once);
    tcase_add_test(tc, bad_values_are_refused);
    tcase_add_test(tc, signed_accepted_tampered_refused);
    tcase_add_test(tc, server_killed_mid_run);
    tcase_add_test(tc, silent_server_costs_one_timeout);
    tcase_add_test(tc, full_server_costs_nothing);
    tcase_add_test(tc, crashed_holders_lease_expires);
    tcase_add_test(tc, environment_configures_the_remote);
    tcase_add_test(tc, read_only_local_cache_reads_but_never_publishes);
    tcase_add_test(tc, planted_leases_do_not_stall);
    tcase_add_test(tc, genuine_signed_lease_is_waited_for);
    tcase_add_test(tc, leases_released_after_a_stalled_server);
    tcase_add_test(tc, unanswered_lease_released_at_close);
    tcase_add_test(tc, oversized_values_are_not_read);
    tcase_add_test(tc, wrong_type_value_key_is_a_miss);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    remote_or_skip();
    return tk_test_main(remote_suite());
}
