/*
 * Reliability: the remote tier under a hostile writer (no GPU; a real
 * redis-server on loopback, the stub backend).
 *
 * Each round, a writer with access to the server (and without the fleet's
 * secret) plants one thing at a kernel's keys: a lease without an expiry,
 * with an expiry of an hour, of another type, unsigned, forged; a value that
 * is garbage, truncated, of another type, oversized, signed under another
 * secret. A node with the fleet's secret then looks the kernel up in a
 * fresh local cache: it must get a correct kernel (the engine compares the
 * full key material), compile it once, never wait for a planted lease, and
 * leave no lease behind; the tools (stats, list) must keep answering. At the
 * end everything is poisoned again and one push repairs it all.
 */
#include <pthread.h>
#include <stdarg.h>

#include "cache/cache_internal.h"
#include "test_remote_common.h"
#include "test_stress_common.h"

#define SECRET "fleet secret"

static const char *const k_source = "extern \"C\" __global__ void scale(float *x, int n)\n"
                                    "{\n"
                                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    "    if (i < n) x[i] *= FACTOR;\n"
                                    "}\n";

static tk_context *make_ctx(const char *dir, const char *url, const char *key)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[512];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, dir), TK_OK);
    tk_assert_status(tk_config_set_remote(cfg, url), TK_OK);
    tk_assert_status(tk_config_set_remote_key(cfg, key ? key : "", key ? strlen(key) : 0), TK_OK);
    tk_assert_status(tk_config_set_remote_timeouts(cfg, 2000, 2000), TK_OK);
    tk_assert_status(tk_config_set_remote_lease(cfg, 0, 5000), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    ck_assert_msg(st == TK_OK, "context: %s", err);
    tk_config_destroy(cfg);
    return ctx;
}

static tk_kernel *get_kernel(tk_context *ctx, int i)
{
    char value[16];
    snprintf(value, sizeof value, "%d.0f", i);
    tk_define def = {"FACTOR", value};
    tk_kernel_desc d = {.source = k_source, .entry = "scale", .defines = &def, .n_defines = 1};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "tk_kernel_get: %s: %s", tk_status_str(st),
                  tk_context_last_error(ctx));
    return k;
}

static void key_of(const char *url, const char *dir, const char *key, int i, char hex[33])
{
    tk_context *ctx = make_ctx(dir, url, key);
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(get_kernel(ctx, i), &info), TK_OK);
    memcpy(hex, info.key_hex, 33);
    tk_context_destroy(ctx);
}

static int count_visit(void *user, const tk_cache_entry_info *info)
{
    (*(uint64_t *)user)++;
    return 0;
}

static tk_cache *tools_cache(const char *dir, const char *url, const char *key)
{
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, dir), TK_OK);
    tk_assert_status(tk_config_set_remote(cfg, url), TK_OK);
    tk_assert_status(tk_config_set_remote_key(cfg, key ? key : "", key ? strlen(key) : 0), TK_OK);
    /* The tools' timeouts (the command-line tool's): nobody waits on a kernel. */
    tk_assert_status(tk_config_set_remote_timeouts(cfg, 2000, 10000), TK_OK);
    tk_cache *cache = NULL;
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    tk_config_destroy(cfg);
    return cache;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "%s: %s", fmt, r ? r->str : "no reply");
    return r;
}

#define N_ATTACKS 11
static const char *const attack_names[N_ATTACKS] = {
    "lease, no expiry", "lease, 1 h expiry", "lease, a list",      "lease, unsigned",
    "lease, forged",    "value, garbage",    "value, truncated",   "value, a list",
    "value, a hash",    "value, oversized",  "value, other secret"};

/* Plants attack a at kernel hex's keys; good/len: a genuine value (signed
 * under the fleet's secret), other/olen: one signed under another. */
static void plant(redisContext *c, int a, const char *hex, const uint8_t *good, size_t len,
                  const uint8_t *other, size_t olen)
{
    char lease[160], value[160];
    snprintf(lease, sizeof lease, "tkjit:%s:%d:lease:%s", TK_VERSION_STRING, TK__CACHE_FORMAT, hex);
    value_name(hex, value, sizeof value);
    freeReplyObject(cmd(c, "DEL %s %s", lease, value));
    char forged[200];
    snprintf(forged, sizeof forged, "host:1:0000000000000000.%064d", 0);
    switch (a) {
    case 0:
        freeReplyObject(cmd(c, "SET %s attacker", lease));
        break;
    case 1:
        freeReplyObject(cmd(c, "SET %s attacker PX 3600000", lease));
        break;
    case 2:
        freeReplyObject(cmd(c, "RPUSH %s attacker", lease));
        break;
    case 3:
        freeReplyObject(cmd(c, "SET %s attacker PX 30000", lease));
        break;
    case 4:
        freeReplyObject(cmd(c, "SET %s %s PX 30000", lease, forged));
        break;
    case 5:
        freeReplyObject(cmd(c, "SET %s %b", value, "hello, world", (size_t)12));
        break;
    case 6:
        freeReplyObject(cmd(c, "SET %s %b", value, good, len / 2));
        break;
    case 7:
        freeReplyObject(cmd(c, "RPUSH %s attacker", value));
        break;
    case 8:
        freeReplyObject(cmd(c, "HSET %s f v", value));
        break;
    case 9: {
        /* Over the reader's limit (lowered to 64 KiB by a test hook). */
        size_t n = 200 << 10;
        char *big = malloc(n);
        ck_assert_ptr_nonnull(big);
        memset(big, 'x', n);
        freeReplyObject(cmd(c, "SET %s %b", value, big, n));
        free(big);
        break;
    }
    default:
        freeReplyObject(cmd(c, "SET %s %b", value, other, olen));
        break;
    }
}

static int get_value(redisContext *c, const char *hex, uint8_t **out, size_t *len)
{
    char value[160];
    value_name(hex, value, sizeof value);
    redisReply *r = cmd(c, "GET %s", value);
    int ok = r->type == REDIS_REPLY_STRING;
    if (ok) {
        *out = malloc(r->len);
        memcpy(*out, r->str, r->len);
        *len = r->len;
    }
    freeReplyObject(r);
    return ok;
}

START_TEST(test_hostile_writer)
{
    remote_or_skip();
    redis_srv srv;
    redis_start(&srv);
    char *dir = tk_test_tmpdir("stress-remote");
    setenv("TK__REMOTE_TEST_MAX_VALUE", "65536", 1);
    redisContext *c = redis_client(&srv);
    /* A genuine value (fleet's secret) and one under another secret. */
    char base[PATH_MAX], other_dir[PATH_MAX], hex0[33];
    snprintf(base, sizeof base, "%s/genuine", dir);
    snprintf(other_dir, sizeof other_dir, "%s/other", dir);
    key_of(srv.url, base, SECRET, 0, hex0);
    uint8_t *good = NULL, *other = NULL;
    size_t len = 0, olen = 0;
    ck_assert(get_value(c, hex0, &good, &len));
    freeReplyObject(cmd(c, "FLUSHALL"));
    tk_context *oc = make_ctx(other_dir, srv.url, "another secret");
    get_kernel(oc, 0);
    tk_context_destroy(oc);
    ck_assert(get_value(c, hex0, &other, &olen));
    freeReplyObject(cmd(c, "FLUSHALL"));

    rng r = {stress_seed() ^ 0x7e3};
    const int rounds = 550 * stress_scale();
    const int kernels = 1000;
    uint64_t per_attack[N_ATTACKS] = {0}, compiles = 0, wrong = 0, tool_failures = 0;
    double worst_ms = 0, t_start = now_ms();
    char *hexes = calloc((size_t)kernels, 33);
    ck_assert_ptr_nonnull(hexes);
    for (int t = 0; t < rounds; t++) {
        int k = 1 + (int)rng_below(&r, (uint64_t)kernels - 1);
        int a = t < N_ATTACKS ? t : (int)rng_below(&r, N_ATTACKS);
        char kdir[PATH_MAX];
        snprintf(kdir, sizeof kdir, "%s/probe", dir);
        if (!hexes[33 * k]) {
            tk_context *p = make_ctx(kdir, "", NULL); /* no remote: the key only */
            tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
            tk_assert_status(tk_kernel_get_info(get_kernel(p, k), &info), TK_OK);
            memcpy(hexes + 33 * k, info.key_hex, 33);
            tk_context_destroy(p);
        }
        const char *hex = hexes + 33 * k;
        /* Genuine bytes of this kernel for the truncation and other-secret
         * cases: those of kernel 0 stand in (another key's entry: refused). */
        plant(c, a, hex, good, len, other, olen);
        per_attack[a]++;
        char node[PATH_MAX];
        snprintf(node, sizeof node, "%s/node%d", dir, t);
        tk_context *ctx = make_ctx(node, srv.url, SECRET);
        double t0 = now_ms();
        tk_kernel *kern = get_kernel(ctx, k);
        double ms = now_ms() - t0;
        if (ms > worst_ms)
            worst_ms = ms;
        tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
        tk_assert_status(tk_kernel_get_info(kern, &info), TK_OK);
        wrong += strcmp(info.key_hex, hex) != 0;
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
        compiles += s.compiles;
        ck_assert_msg(s.compiles == 1, "%s: %llu compiles", attack_names[a],
                      (unsigned long long)s.compiles);
        ck_assert_msg(ms < 2500, "%s: the lookup took %.0f ms", attack_names[a], ms);
        tk_context_destroy(ctx);
        tk_test_rmtree(node);
        /* No lease left; the tools still answer. */
        char lease[160];
        snprintf(lease, sizeof lease, "tkjit:%s:%d:lease:%s", TK_VERSION_STRING, TK__CACHE_FORMAT,
                 hex);
        redisReply *e = cmd(c, "EXISTS %s", lease);
        ck_assert_msg(e->integer == 0, "%s: a lease was left", attack_names[a]);
        freeReplyObject(e);
        if (t % 10 == 0) { /* a key of another type among the values */
            plant(c, 7 + (int)rng_below(&r, 2), hex, good, len, other, olen);
            char tdir[PATH_MAX];
            snprintf(tdir, sizeof tdir, "%s/tools", dir);
            tk_cache *cache = tools_cache(tdir, srv.url, SECRET);
            tk_cache_stats st = TK_STRUCT_INIT(tk_cache_stats);
            uint64_t skipped = 0, listed = 0;
            tk_status s1 = tk_cache_remote_get_stats(cache, &st);
            tk_status s2 = tk_cache_remote_list_counted(cache, count_visit, &listed, &skipped);
            if (s1 != TK_OK || s2 != TK_OK || st.bad_files < 1 || skipped < 1 ||
                listed != st.entries) {
                tool_failures++;
                printf("tool failure in round %d: stats %s, list %s (%s), bad %llu, skipped "
                       "%llu, listed %llu of %llu\n",
                       t, tk_status_str(s1), tk_status_str(s2), tk_cache_last_error(cache),
                       (unsigned long long)st.bad_files, (unsigned long long)skipped,
                       (unsigned long long)listed, (unsigned long long)st.entries);
            }
            tk_cache_close(cache);
        }
    }
    /* Everything poisoned again: one push (the fleet's secret) repairs it. */
    uint64_t probed = 0;
    for (int k = 1; k < kernels; k++) {
        if (!hexes[33 * k])
            continue;
        probed++;
        static const int value_attacks[] = {5, 6, 7, 8, 9, 10};
        plant(c, value_attacks[rng_below(&r, 6)], hexes + 33 * k, good, len, other, olen);
    }
    char pdir[PATH_MAX];
    snprintf(pdir, sizeof pdir, "%s/probe", dir);
    tk_cache *cache = tools_cache(pdir, srv.url, SECRET);
    tk_cache_push_counts pc = TK_STRUCT_INIT(tk_cache_push_counts);
    tk_assert_status(tk_cache_remote_push_report(cache, NULL, NULL, NULL, &pc), TK_OK);
    tk_cache_stats st = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_remote_get_stats(cache, &st), TK_OK);
    tk_cache_close(cache);
    printf("FIGURE stress-remote-push: %llu poisoned values: push replaced %llu, pushed %llu, "
           "present %llu; the server then holds %llu good values, %llu bad\n",
           (unsigned long long)probed, (unsigned long long)pc.replaced,
           (unsigned long long)pc.pushed, (unsigned long long)pc.present,
           (unsigned long long)st.entries, (unsigned long long)st.bad_files);
    ck_assert_uint_eq(pc.replaced, probed);
    ck_assert_uint_eq(st.entries, probed);
    ck_assert_uint_eq(st.bad_files, 0);
    double secs = (now_ms() - t_start) / 1e3;
    printf("FIGURE stress-remote: %d rounds of a hostile writer (", rounds);
    for (int a = 0; a < N_ATTACKS; a++)
        printf("%s%s %llu", a ? ", " : "", attack_names[a], (unsigned long long)per_attack[a]);
    printf("): %llu compiles (1 a round), %llu wrong kernels, worst lookup %.1f ms (wait bound "
           "5000 ms), 0 leases left, %llu tool failures, %.1f s\n",
           (unsigned long long)compiles, (unsigned long long)wrong, worst_ms,
           (unsigned long long)tool_failures, secs);
    ck_assert_uint_eq(wrong, 0);
    ck_assert_uint_eq(tool_failures, 0);
    unsetenv("TK__REMOTE_TEST_MAX_VALUE");
    free(hexes);
    free(good);
    free(other);
    redisFree(c);
    redis_stop(&srv);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    remote_or_skip();
    Suite *suite = suite_create("stress_remote");
    TCase *tc = tcase_create("remote");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_hostile_writer);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
