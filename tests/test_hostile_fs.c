/*
 * Reliability: a hostile file system (no GPU).
 *
 * - Links planted inside the cache (an entry, a shard folder, the lock
 *   folder, the format folder) never make a lookup accept them, nor --clear,
 *   --prune, --export or a store touch anything outside the cache: the
 *   outside folder is compared byte for byte before and after.
 * - Entries owned by another user, or in group/world-writable folders, are
 *   refused, in the user tier and in read-only tiers (TOKITAI_JIT_CACHE_PATH;
 *   those may also be root's, as a shipped cache is). The second user is
 *   uid 65534 (nobody), reached with setuid in a forked child (needs root;
 *   skipped visibly otherwise).
 * - TOKITAI_JIT_CACHE_DIR naming a file, an over-long path, HOME unset, a
 *   full file system (a 8 KiB tmpfs in a private mount namespace where
 *   mount is permitted, else RLIMIT_FSIZE): correct results, one warning.
 */
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include "test_cache_common.h"
#include "test_cli_common.h"
#include "test_stress_common.h"
#include "tokitai/ops.h"

#define NOBODY 65534
#define LIMIT_S 60.0

static void set_mtime(const char *path, time_t t)
{
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

/* --------------------------------------------------- outside-folder images */

/* path, mode, size and content hash of everything under a folder. */
typedef struct image {
    char text[1 << 16];
    size_t len;
} image;

static void image_walk(image *im, const char *dir, const char *rel)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX], r[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(r, sizeof r, "%s/%s", rel, e->d_name);
        struct stat st;
        ck_assert_int_eq(lstat(path, &st), 0);
        uint64_t h = 0;
        if (S_ISREG(st.st_mode)) {
            size_t n = 0;
            char *b = tk_test_read_file(path, &n);
            h = XXH3_64bits(b, n);
            free(b);
        }
        im->len += (size_t)snprintf(im->text + im->len, sizeof im->text - im->len,
                                    "%s %o %u %lld %llx %lld\n", r, (unsigned)st.st_mode,
                                    (unsigned)st.st_uid, (long long)st.st_size,
                                    (unsigned long long)h, (long long)st.st_mtim.tv_sec);
        ck_assert_uint_lt(im->len, sizeof im->text - 1);
        if (S_ISDIR(st.st_mode))
            image_walk(im, path, r);
    }
    closedir(d);
}

static image *image_of(const char *dir)
{
    image *im = calloc(1, sizeof *im);
    ck_assert_ptr_nonnull(im);
    image_walk(im, dir, "");
    return im;
}

static void assert_untouched(const image *before, const char *dir, const char *after_what)
{
    image *now = image_of(dir);
    ck_assert_msg(strcmp(before->text, now->text) == 0,
                  "%s touched the outside folder:\nbefore:\n%s\nafter:\n%s", after_what,
                  before->text, now->text);
    free(now);
}

/* A valid entry for name's key (as put_named would store it). */
static void encode_named(const char *name, size_t size, uint8_t **out, size_t *len, tk__key *key)
{
    make_key(key, name);
    unsigned char *payload = malloc(size);
    fill_payload(payload, size, name);
    tk__entry_meta meta = make_meta(name);
    tk_assert_status(tk__entry_encode(key->bytes, key->len, key->fp_hi, key->fp_lo, &meta, payload,
                                      size, out, len),
                     TK_OK);
    free(payload);
}

static int g_tools_runs;

static void tool(const char *root, const char *cmd, const char *arg, int want_rc)
{
    run_result r;
    if (arg)
        cli_limit(LIMIT_S, &r, cmd, arg, "--cache-dir", root, NULL);
    else
        cli_limit(LIMIT_S, &r, cmd, "--cache-dir", root, NULL);
    char why[512];
    ck_assert_msg(cli_contract(&r, why, sizeof why) == 0, "%s: %s", cmd, why);
    if (want_rc >= 0)
        ck_assert_msg(r.code == want_rc, "%s %s: exit %d (want %d)\n%s%s", cmd, arg ? arg : "",
                      r.code, want_rc, r.out, r.err);
    g_tools_runs++;
    run_result_free(&r);
}

/* ------------------------------------------------------------ links */

static char g_shard[3];
static uint8_t *g_good;
static size_t g_good_len;
static tk__key g_key;

static void plant_entry_link(const char *root, const char *outside)
{
    char path[PATH_MAX], target[PATH_MAX];
    entry_file_path(root, g_key.hex, path, sizeof path);
    snprintf(target, sizeof target, "%s/victim.tkc", outside);
    mkdir_for(path);
    unlink(path);
    ck_assert_int_eq(symlink(target, path), 0);
}

static void plant_shard_link(const char *root, const char *outside)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d/%s", root, TK__CACHE_FORMAT, g_shard);
    mkdir_for(path);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISLNK(st.st_mode))
        tk_test_rmtree(path);
    unlink(path);
    ck_assert_int_eq(symlink(outside, path), 0);
}

static void plant_locks_link(const char *root, const char *outside)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d/%s", root, TK__CACHE_FORMAT, TK__LOCK_DIR);
    mkdir_for(path);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISLNK(st.st_mode))
        tk_test_rmtree(path);
    unlink(path);
    ck_assert_int_eq(symlink(outside, path), 0);
}

/* The outside folder: what a planted link points at. Old files, so that an
 * age rule would not protect them. */
static void fill_outside(const char *outside)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/victim.tkc", outside);
    ck_assert_int_eq(tk_test_write_file(p, g_good, g_good_len), 0);
    snprintf(p, sizeof p, "%s/%s%s", outside, g_key.hex + 2, TK__ENTRY_EXT); /* as in a shard */
    ck_assert_int_eq(tk_test_write_file(p, g_good, g_good_len), 0);
    snprintf(p, sizeof p, "%s/.tmp.%s.AAAAAA", outside, g_key.hex + 2);
    ck_assert_int_eq(tk_test_write_file(p, "half", 4), 0);
    snprintf(p, sizeof p, "%s/%s.lock", outside, g_key.hex);
    ck_assert_int_eq(tk_test_write_file(p, "", 0), 0);
    snprintf(p, sizeof p, "%s/precious.txt", outside);
    ck_assert_int_eq(tk_test_write_file(p, "keep me", 7), 0);
    DIR *d = opendir(outside);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || e->d_name[1] == '.'))
            continue;
        snprintf(p, sizeof p, "%s/%s", outside, e->d_name);
        set_mtime(p, time(NULL) - 7200);
    }
    closedir(d);
}

static void link_case(void (*plant)(const char *, const char *), const char *what, int *n_cases)
{
    char *root = tk_test_tmpdir("hostile-root");
    char *outside = tk_test_tmpdir("hostile-outside");
    fill_outside(outside);
    image *before = image_of(outside);
    test_log log = {0};
    plant(root, outside);

    /* The library: a lookup never accepts it, a store never lands outside. */
    tk_cache *cache = open_cache(root, &log);
    tk__entry e;
    memset(&e, 0, sizeof e);
    tk_assert_status(tk__cache_get(cache, &g_key, &e), TK_NOT_FOUND);
    tk__cache_lock *lock = NULL;
    tk_assert_status(tk__cache_lock_key(cache, &g_key, &lock), TK_OK);
    tk__entry_meta meta = make_meta("hostile");
    unsigned char payload[300];
    fill_payload(payload, sizeof payload, "hostile");
    tk_status ps = tk__cache_put(cache, &g_key, &meta, payload, sizeof payload);
    tk__cache_unlock(lock);
    assert_untouched(before, outside, what);
    if (ps == TK_OK) { /* stored: then inside the cache, as a real file */
        char path[PATH_MAX];
        struct stat st;
        entry_file_path(root, g_key.hex, path, sizeof path);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", path);
        *strrchr(parent, '/') = 0;
        ck_assert_int_eq(lstat(parent, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
    }
    ck_assert_msg(log.warnings <= 1, "%s: %d warnings, the last: %s", what, log.warnings, log.last);
    tk_cache_close(cache);
    char stored[PATH_MAX];
    struct stat sst;
    entry_file_path(root, g_key.hex, stored, sizeof stored);
    char stored_dir[PATH_MAX];
    snprintf(stored_dir, sizeof stored_dir, "%s", stored);
    *strrchr(stored_dir, '/') = 0;
    if (lstat(stored_dir, &sst) == 0 && S_ISDIR(sst.st_mode) && lstat(stored, &sst) == 0 &&
        S_ISREG(sst.st_mode))
        unlink(stored); /* the tools below see only what was planted */
    plant(root, outside);

    /* The tools. */
    char bundle[PATH_MAX];
    snprintf(bundle, sizeof bundle, "%s.tkb", root);
    tool(root, "--list", NULL, -1);
    tool(root, "--verify", NULL, -1);
    tool(root, "--export", bundle, -1);
    assert_untouched(before, outside, "--export");
    /* The bundle holds no entry from outside. */
    size_t blen = 0;
    char *b = tk_test_read_file(bundle, &blen);
    if (b)
        ck_assert_uint_eq(get_le_n((uint8_t *)b + 16, 8), 0);
    free(b);
    unlink(bundle);
    plant(root, outside);
    tool(root, "--prune", NULL, 0);
    assert_untouched(before, outside, "--prune");
    plant(root, outside);
    run_result r;
    cli_limit(LIMIT_S, &r, "--prune", "--max-size", "1", "--cache-dir", root, NULL);
    ck_assert_msg(r.code == 0, "%s", r.err);
    run_result_free(&r);
    assert_untouched(before, outside, "--prune --max-size 1");
    plant(root, outside);
    tool(root, "--clear", NULL, -1);
    assert_untouched(before, outside, "--clear");
    free(before);
    tk_test_rmtree(root);
    tk_test_rmtree(outside);
    free(root);
    free(outside);
    (*n_cases)++;
}

START_TEST(test_planted_links)
{
    encode_named("hostile", 300, &g_good, &g_good_len, &g_key);
    memcpy(g_shard, g_key.hex, 2);
    g_shard[2] = 0;
    int n = 0;
    link_case(plant_entry_link, "entry link", &n);
    link_case(plant_shard_link, "shard folder link", &n);
    link_case(plant_locks_link, "lock folder link", &n);

    /* The format folder itself a link: the cache is refused, one warning. */
    char *root = tk_test_tmpdir("hostile-fmt");
    char *outside = tk_test_tmpdir("hostile-fmt-out");
    fill_outside(outside);
    image *before = image_of(outside);
    char fmt[PATH_MAX];
    snprintf(fmt, sizeof fmt, "%s/%d", root, TK__CACHE_FORMAT);
    ck_assert_int_eq(symlink(outside, fmt), 0);
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_msg(strstr(log.last, "symbolic link"), "%s", log.last);
    tk__entry e;
    memset(&e, 0, sizeof e);
    tk_assert_status(tk__cache_get(cache, &g_key, &e), TK_NOT_FOUND);
    tk__entry_meta meta = make_meta("hostile");
    ck_assert_int_ne(tk__cache_put(cache, &g_key, &meta, "x", 1), TK_OK);
    ck_assert_int_eq(log.warnings, 1);
    tk_cache_close(cache);
    tool(root, "--clear", NULL, CLI_FAIL);
    tool(root, "--prune", NULL, CLI_FAIL);
    tool(root, "--verify", NULL, CLI_FAIL);
    assert_untouched(before, outside, "tools over a linked format folder");
    n++;
    free(before);
    tk_test_rmtree(root);
    tk_test_rmtree(outside);
    free(root);
    free(outside);
    printf("FIGURE hostile-links: %d planted-link cases (entry, shard folder, lock folder, format "
           "folder), %d tool runs + lookups, stores and locks: outside folders unchanged byte for "
           "byte, 0 links accepted\n",
           n, g_tools_runs);
    fflush(stdout);
    free(g_good);
    tk__key_free(&g_key);
}
END_TEST

/* ---------------------------------------------------------- ownership */

static int is_root(void)
{
    if (geteuid() == 0)
        return 1;
    printf("skipped: ownership checks with a second uid need root (running as uid %u)\n",
           (unsigned)geteuid());
    fflush(stdout);
    return 0;
}

static void become_nobody(void)
{
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        _exit(90);
}

/* Runs fn in a child as uid/gid 65534; returns its exit code. */
static int as_nobody(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        become_nobody();
        _exit(fn(arg));
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child died: status %d", status);
    return WEXITSTATUS(status);
}

static int count_warnings_log;
static void warn_counter(void *user, tk_log_level level, const char *msg)
{
    (void)user;
    if (level >= TK_LOG_WARN) {
        count_warnings_log++;
        printf("  warning seen: %s\n", msg);
    }
}

/* A stub context over a cache folder; two precompiles (of 3 kernels each time
 * asked); returns the number of failures (0: correct). *warnings gets the
 * WARN messages logged. */
static int stub_compiles(const char *cache_dir, int *warnings)
{
    tk_config *cfg = NULL;
    if (tk_config_create(&cfg) != TK_OK)
        return 100;
    tk_config_set_backend(cfg, TK_BACKEND_STUB);
    tk_config_set_target(cfg, "stub");
    if (cache_dir)
        tk_config_set_cache_dir(cfg, cache_dir);
    count_warnings_log = 0;
    tk_config_set_log(cfg, warn_counter, NULL);
    tk_config_set_log_level(cfg, TK_LOG_WARN);
    tk_context *ctx = NULL;
    char why[512] = "";
    int fails = 0;
    if (tk_context_create(cfg, &ctx, why, sizeof why) != TK_OK) {
        printf("context: %s\n", why);
        fails = 101;
        goto done;
    }
    for (int i = 0; i < 6; i++) {
        int64_t dims[2] = {64, 128 + 64 * i};
        unsigned nc = 0, nh = 0;
        tk_status st = tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, dims, 2, &nc, &nh);
        if (st != TK_OK) {
            printf("precompile %d: %s: %s\n", i, tk_status_str(st), tk_context_last_error(ctx));
            fails++;
        }
    }
    /* Asking again must still work (from memory, the disk or a compile). */
    int64_t dims[2] = {64, 128};
    if (tk_op_precompile(ctx, TK_OP_SOFTMAX_F16_FWD, dims, 2, NULL, NULL) != TK_OK)
        fails++;
done:
    tk_context_destroy(ctx);
    tk_config_destroy(cfg);
    *warnings = count_warnings_log;
    return fails;
}

typedef struct nobody_args {
    const char *root;      /* root's cache folder */
    const char *ww_shard;  /* a world-writable shard folder to plant into */
    const char *plant_hex; /* key to plant there */
} nobody_args;

static int nobody_main(void *p)
{
    const nobody_args *a = p;
    /* Root's cache folder is not ours: refused, one warning, still correct. */
    int warnings = 0;
    int fails = stub_compiles(a->root, &warnings);
    if (fails)
        return 10;
    if (warnings != 1)
        return 11;
    /* Plant an entry into the world-writable shard folder. */
    uint8_t *bytes = NULL;
    size_t len = 0;
    tk__key key;
    encode_named("planted", 200, &bytes, &len, &key);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s%s", a->ww_shard, key.hex + 2, TK__ENTRY_EXT);
    int ok = tk_test_write_file(path, bytes, len) == 0;
    free(bytes);
    tk__key_free(&key);
    return ok ? 0 : 12;
}

START_TEST(test_ownership)
{
    if (!is_root())
        return;
    int refusals = 0;
    char *root = tk_test_tmpdir("hostile-own");
    ck_assert_int_eq(chmod(root, 0755), 0); /* others may enter, not write */
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    put_named(cache, "mine", 300);
    put_named(cache, "theirs", 300);
    put_named(cache, "loose", 300);
    tk_cache_close(cache);

    /* An entry owned by another user: refused, kept, named by --verify. */
    char path[PATH_MAX];
    entry_path_of(root, "theirs", path, sizeof path);
    ck_assert_int_eq(chown(path, NOBODY, NOBODY), 0);
    cache = open_cache(root, &log);
    ck_assert(get_named(cache, "mine", 300));
    ck_assert(!get_named(cache, "theirs", 300));
    refusals++;
    ck_assert(path_exists(path));
    ck_assert_int_eq(log.warnings, 1);
    ck_assert_msg(strstr(log.last, "owned by another user"), "%s", log.last);
    tk_cache_close(cache);
    run_result r;
    cli_limit(LIMIT_S, &r, "--verify", "--cache-dir", root, NULL);
    ck_assert_int_eq(r.code, CLI_FAIL);
    ck_assert_msg(strstr(r.err, "owned by another user"), "%s", r.err);
    run_result_free(&r);

    /* A group- or world-writable shard folder: its entries are refused. */
    entry_path_of(root, "loose", path, sizeof path);
    char shard[PATH_MAX];
    snprintf(shard, sizeof shard, "%s", path);
    *strrchr(shard, '/') = 0;
    for (int mode = 0; mode < 3; mode++) {
        static const mode_t modes[] = {0770, 0707, 0777};
        ck_assert_int_eq(chmod(shard, modes[mode]), 0);
        test_log l2 = {0};
        cache = open_cache(root, &l2);
        ck_assert_msg(!get_named(cache, "loose", 300), "entry in a %o folder accepted",
                      (unsigned)modes[mode]);
        refusals++;
        ck_assert_int_eq(l2.warnings, 1);
        tk_cache_close(cache);
    }
    ck_assert_int_eq(chmod(shard, 0700), 0);
    /* A shard folder owned by another user. */
    ck_assert_int_eq(chown(shard, NOBODY, NOBODY), 0);
    cache = open_cache(root, NULL);
    ck_assert(!get_named(cache, "loose", 300));
    refusals++;
    tk_cache_close(cache);
    ck_assert_int_eq(chown(shard, 0, 0), 0);

    /* A world-writable cache folder: the whole cache is refused. */
    ck_assert_int_eq(chmod(root, 0777), 0);
    test_log l3 = {0};
    cache = open_cache(root, &l3);
    ck_assert(!get_named(cache, "mine", 300));
    refusals++;
    ck_assert_int_eq(l3.warnings, 1);
    tk_cache_close(cache);
    ck_assert_int_eq(chmod(root, 0755), 0);

    /* The second user: root's cache is not theirs (refused, one warning,
     * compiles still correct); what they plant in a world-writable folder
     * is refused to root. */
    char ww[PATH_MAX + 8];
    tk__key planted;
    make_key(&planted, "planted");
    snprintf(ww, sizeof ww, "%s/%d/%.2s", root, TK__CACHE_FORMAT, planted.hex);
    mkdir(ww, 0700);
    ck_assert_int_eq(chmod(ww, 0777), 0);
    char fmt[PATH_MAX];
    snprintf(fmt, sizeof fmt, "%s/%d", root, TK__CACHE_FORMAT);
    ck_assert_int_eq(chmod(fmt, 0755), 0);
    nobody_args a = {root, ww, planted.hex};
    ck_assert_int_eq(as_nobody(nobody_main, &a), 0);
    refusals++;
    ck_assert_int_eq(chmod(ww, 0700), 0); /* even once the folder is fixed: */
    test_log l4 = {0};
    cache = open_cache(root, &l4);
    ck_assert(!get_named(cache, "planted", 200));
    refusals++;
    ck_assert_int_eq(l4.warnings, 1);
    ck_assert_msg(strstr(l4.last, "owned by another user"), "%s", l4.last);
    tk_cache_close(cache);
    tk__key_free(&planted);

    /* Read-only tiers (TOKITAI_JIT_CACHE_PATH): the same checks, except that
     * root may own a shipped tier's entries. */
    char *lower = tk_test_tmpdir("hostile-lower");
    ck_assert_int_eq(chmod(lower, 0755), 0);
    cache = open_cache(lower, NULL);
    put_named(cache, "shipped", 300);
    put_named(cache, "foreign", 300);
    tk_cache_close(cache);
    entry_path_of(lower, "foreign", path, sizeof path);
    ck_assert_int_eq(chown(path, NOBODY, NOBODY), 0);
    char *user = tk_test_tmpdir("hostile-user");
    tk__cache_opts o;
    memset(&o, 0, sizeof o);
    o.root = user;
    o.lower = lower;
    test_log l5 = {0};
    o.log = test_log_fn;
    o.log_user = &l5;
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    ck_assert(get_named(cache, "shipped", 300)); /* root's, in a root tier */
    ck_assert(!get_named(cache, "foreign", 300));
    refusals++;
    ck_assert_int_eq(l5.warnings, 1);
    tk_cache_close(cache);
    entry_path_of(lower, "shipped", path, sizeof path);
    snprintf(shard, sizeof shard, "%s", path);
    *strrchr(shard, '/') = 0;
    ck_assert_int_eq(chmod(shard, 0777), 0);
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    ck_assert(!get_named(cache, "shipped", 300));
    refusals++;
    tk_cache_close(cache);
    ck_assert_int_eq(chmod(shard, 0755), 0);
    /* A lower tier's shard folder swapped for a link to a good copy of it. */
    char moved[PATH_MAX + 16];
    snprintf(moved, sizeof moved, "%s.real", lower);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", shard, moved);
    ck_assert_int_eq(system(cmd), 0);
    tk_test_rmtree(shard);
    ck_assert_int_eq(symlink(moved, shard), 0);
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    ck_assert(!get_named(cache, "shipped", 300));
    refusals++;
    tk_cache_close(cache);
    unlink(shard);
    snprintf(cmd, sizeof cmd, "mv '%s' '%s'", moved, shard);
    ck_assert_int_eq(system(cmd), 0);
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    ck_assert(get_named(cache, "shipped", 300)); /* back in place: served again */
    tk_cache_close(cache);
    ck_assert_int_eq(chmod(lower, 0777), 0);
    test_log l6 = {0};
    o.log_user = &l6;
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    ck_assert(!get_named(cache, "shipped", 300));
    refusals++;
    ck_assert_int_eq(l6.warnings, 1);
    ck_assert_msg(strstr(l6.last, "read-only cache tier"), "%s", l6.last);
    tk_cache_close(cache);

    printf("FIGURE hostile-ownership: %d refusals (entry of uid 65534; shard folders 0770, "
           "0707, 0777 and of uid 65534; a 0777 cache folder; root's cache seen by uid 65534; an "
           "entry planted by uid 65534; lower tier: foreign entry, 0777 shard, linked shard, 0777 "
           "tier), 0 "
           "accepted, one warning each\n",
           refusals);
    fflush(stdout);
    tk_test_rmtree(root);
    tk_test_rmtree(lower);
    tk_test_rmtree(user);
    free(root);
    free(lower);
    free(user);
}
END_TEST

/* -------------------------------------------------- environment trouble */

static int nobody_home_unset(void *p)
{
    (void)p;
    unsetenv("HOME");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    int warnings = 0;
    int fails = stub_compiles(NULL, &warnings);
    printf("  HOME unset as uid 65534 (home /nonexistent): %d failures, %d warnings\n", fails,
           warnings);
    fflush(stdout);
    return fails ? 20 : warnings != 1 ? 21 : 0;
}

START_TEST(test_environment)
{
    int cases = 0;
    char *dir = tk_test_tmpdir("hostile-env");
    int warnings = 0;

    /* TOKITAI_JIT_CACHE_DIR naming a file. */
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/not-a-folder", dir);
    ck_assert_int_eq(tk_test_write_file(file, "data", 4), 0);
    setenv("TOKITAI_JIT_CACHE_DIR", file, 1);
    ck_assert_int_eq(stub_compiles(NULL, &warnings), 0);
    ck_assert_int_eq(warnings, 1);
    size_t n = 0;
    char *content = tk_test_read_file(file, &n);
    ck_assert_int_eq(n, 4);
    free(content);
    run_result r;
    cli_limit(LIMIT_S, &r, "--list", NULL);
    ck_assert_int_eq(r.code, CLI_FAIL);
    ck_assert_int_eq(count_lines(r.err), 1);
    run_result_free(&r);
    cases++;

    /* An over-long path: its parser refuses it, so the default root (here
     * under XDG_CACHE_HOME) serves, with one warning; --info names it. */
    char *longp = malloc(6000);
    memset(longp, 'a', 5999);
    longp[0] = '/';
    longp[5999] = 0;
    char xdg[PATH_MAX];
    snprintf(xdg, sizeof xdg, "%s/xdg", dir);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("TOKITAI_JIT_CACHE_DIR", longp, 1);
    ck_assert_int_eq(stub_compiles(NULL, &warnings), 0);
    ck_assert_int_eq(warnings, 1);
    cli_limit(LIMIT_S, &r, "--info", NULL);
    ck_assert_int_eq(r.code, CLI_OK);
    ck_assert_msg(strstr(r.out, "TOKITAI_JIT_CACHE_DIR=/aaa") && strstr(r.out, "longer than"), "%s",
                  r.out);
    ck_assert_msg(strstr(r.out, xdg), "%s", r.out);
    run_result_free(&r);
    unsetenv("XDG_CACHE_HOME");
    /* Also through the API (a path component too long for the file system). */
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    char *longc = malloc(400);
    snprintf(longc, 400, "%s/", dir);
    size_t k = strlen(longc);
    memset(longc + k, 'b', 399 - k);
    longc[399] = 0;
    ck_assert_int_eq(stub_compiles(longc, &warnings), 0);
    ck_assert_int_eq(warnings, 1);
    free(longc);
    free(longp);
    cases++;

    /* HOME unset: the password database's home; nobody's does not exist. */
    const char *home = getenv("HOME");
    char *saved_home = home ? strdup(home) : NULL;
    unsetenv("HOME");
    unsetenv("XDG_CACHE_HOME");
    tk_config *cfg = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_config_set_cache_read_only(cfg, 1); /* look, create nothing */
    tk_cache *cache = NULL;
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    struct passwd *pw = getpwuid(geteuid());
    ck_assert_ptr_nonnull(pw);
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s/.cache/tokitai-jit", pw->pw_dir);
    ck_assert_str_eq(tk_cache_root(cache), want);
    tk_cache_close(cache);
    tk_config_destroy(cfg);
    if (saved_home)
        setenv("HOME", saved_home, 1);
    free(saved_home);
    if (geteuid() == 0)
        ck_assert_int_eq(as_nobody(nobody_home_unset, NULL), 0);
    cases++;

    printf("FIGURE hostile-environment: %d cases (TOKITAI_JIT_CACHE_DIR a file, an over-long "
           "path, HOME unset): every compile correct, exactly one warning each, the CLI one "
           "line or the default root\n",
           cases);
    fflush(stdout);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

/* --------------------------------------------------------- a full disk */

static int full_disk_child(const char *root, int use_rlimit)
{
    if (use_rlimit) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {256, 256}; /* below one compressed entry: every store fails */
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            return 30;
    }
    int warnings = 0;
    int fails = stub_compiles(root, &warnings);
    printf("  full file system (%s): %d failures, %d warnings\n",
           use_rlimit ? "RLIMIT_FSIZE" : "8 KiB tmpfs", fails, warnings);
    fflush(stdout);
    if (fails)
        return 31;
    if (warnings != 1)
        return 32;
    /* What went in is whole; nothing half-written is left. */
    blob_set s = {0};
    int temps = 0;
    int others = read_cache_files(root, &s, &temps);
    for (size_t i = 0; i < s.n; i++) {
        tk__entry_view v;
        const char *why;
        if (tk__entry_parse(s.v[i].bytes, s.v[i].len, 1, &v, &why) != TK_OK)
            return 33;
    }
    printf("  %zu entries stored whole, %d temporary files left\n", s.n, temps);
    fflush(stdout);
    blob_set_free(&s);
    if (others)
        return 34;
    /* The CLI: a precompile that could not store says so in one line. */
    char manifest[PATH_MAX];
    snprintf(manifest, sizeof manifest, "/tmp/tk-full-%d.tkm", (int)getpid());
    const char *text = "arch stub\nsoftmax_f16_fwd rows=32 cols=64..1024:+64\n";
    if (tk_test_write_file(manifest, text, strlen(text)) != 0)
        return 35;
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    run_result r;
    cli_limit(LIMIT_S, &r, "--precompile", "--manifest", manifest, "-j", "1", "--cache-dir", root,
              NULL);
    unlink(manifest);
    printf("  --precompile on the full file system: exit %d, stderr: %s", r.code, r.err);
    fflush(stdout);
    int bad = r.code != 5 || count_lines(r.err) != 1 || !strstr(r.err, "stored");
    run_result_free(&r);
    return bad ? 36 : 0;
}

START_TEST(test_full_disk)
{
    char *dir = tk_test_tmpdir("hostile-full");
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/mnt", dir);
    ck_assert_int_eq(mkdir(root, 0700), 0);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* A private mount namespace: the tmpfs goes away with the child. */
        int use_rlimit = 1;
        const char *force = getenv("TK_TEST_FULL_DISK_RLIMIT"); /* to test the stand-in */
        if (force && *force && *force != '0')
            printf("  TK_TEST_FULL_DISK_RLIMIT set: RLIMIT_FSIZE stands in for a full disk\n");
        else if (unshare(CLONE_NEWNS) == 0 &&
                 mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                 mount("tmpfs", root, "tmpfs", 0, "size=8k,mode=0700") == 0)
            use_rlimit = 0;
        else
            printf("  mount not permitted here (%s): RLIMIT_FSIZE stands in for a full disk\n",
                   strerror(errno));
        fflush(stdout);
        _exit(full_disk_child(root, use_rlimit));
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "full-disk child: status %d",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -status);
    printf("FIGURE hostile-full-disk: compiles correct, one warning, no partial entry or "
           "temporary file, --precompile exit 5 with one line\n");
    fflush(stdout);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

/* ----------------------------------------------- a folder where an entry is */

/* A folder (with something inside) at an entry's path: a store replaces it,
 * --prune removes it, --clear removes it (the folder is the cache's own). */
START_TEST(test_folder_at_entry_path)
{
    char *root = tk_test_tmpdir("hostile-dirent");
    test_log log = {0};
    tk_cache *cache = open_cache(root, &log);
    put_named(cache, "victim", 300);
    tk_cache_close(cache);
    char path[PATH_MAX], inner[PATH_MAX + 16];
    entry_path_of(root, "victim", path, sizeof path);
    struct stat st;

    /* 1. A lookup misses, the store that follows repairs it. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(inner, sizeof inner, "%s/x", path);
    ck_assert_int_eq(tk_test_write_file(inner, "x", 1), 0);
    cache = open_cache(root, &log);
    ck_assert(!get_named(cache, "victim", 300));
    put_named(cache, "victim", 300);
    tk_cache_close(cache);
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert_msg(S_ISREG(st.st_mode), "a store left the folder at %s", path);
    cache = open_cache(root, &log);
    ck_assert(get_named(cache, "victim", 300));
    tk_cache_close(cache);

    /* 2. --prune removes it. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(tk_test_write_file(inner, "x", 1), 0);
    tool(root, "--prune", NULL, CLI_OK);
    ck_assert_msg(lstat(path, &st) != 0, "--prune left the folder at %s", path);

    /* 3. --clear removes it (and succeeds). */
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(tk_test_write_file(inner, "x", 1), 0);
    tool(root, "--clear", NULL, CLI_OK);
    ck_assert_msg(lstat(path, &st) != 0, "--clear left the folder at %s", path);

    /* 4. Folders nested deeper than any fixed bound (a file at the bottom of
     * each level): the store, --prune and --clear remove them too. */
    const int depth = 40;
    for (int round = 0; round < 3; round++) {
        char deep[PATH_MAX];
        int n = snprintf(deep, sizeof deep, "%s", path);
        *strrchr(deep, '/') = 0; /* the shard folder, which --clear removed */
        ck_assert(mkdir(deep, 0700) == 0 || errno == EEXIST);
        n = snprintf(deep, sizeof deep, "%s", path);
        for (int d = 0; d < depth; d++) {
            ck_assert_int_eq(mkdir(deep, 0700), 0);
            snprintf(inner, sizeof inner, "%s/f", deep);
            ck_assert_int_eq(tk_test_write_file(inner, "x", 1), 0);
            n += snprintf(deep + n, sizeof deep - (size_t)n, "/d");
        }
        if (round == 0) {
            cache = open_cache(root, &log);
            put_named(cache, "victim", 300);
            tk_cache_close(cache);
            ck_assert_int_eq(lstat(path, &st), 0);
            ck_assert_msg(S_ISREG(st.st_mode), "a store left the %d-level folder", depth);
            ck_assert_int_eq(unlink(path), 0);
        } else {
            tool(root, round == 1 ? "--prune" : "--clear", NULL, CLI_OK);
            ck_assert_msg(lstat(path, &st) != 0, "%s left the %d-level folder",
                          round == 1 ? "--prune" : "--clear", depth);
        }
    }
    printf("FIGURE hostile-folder-entry: a folder at an entry's path (one level, and %d levels "
           "deep): replaced by the store, removed by --prune and --clear\n",
           depth);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* --------------------------------------------------- a linked cache root */

static int count_entries_under(const char *root)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "find '%s/' -name '*.tkc' -type f | wc -l", root);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

/* The cache root a symbolic link: the link and its target get the rules of
 * a real folder (owned by the user; the target not writable by others),
 * however the root is spelt ("RL", "RL/", "RL//", "RL/."), and nothing is
 * created inside a refused target. The cases with a second owner need root;
 * the others run for everyone. */
START_TEST(test_linked_root)
{
    char *dir = tk_test_tmpdir("hostile-rootlink");
    char tgt[PATH_MAX], link[PATH_MAX], fmt[PATH_MAX + 16];
    snprintf(tgt, sizeof tgt, "%s/tgt", dir);
    snprintf(link, sizeof link, "%s/RL", dir);
    snprintf(fmt, sizeof fmt, "%s/%d", tgt, TK__CACHE_FORMAT);
    const char *const spellings[] = {"", "/", "//", "/."};
    char spelt[PATH_MAX + 8];
    ck_assert_int_eq(mkdir(tgt, 0700), 0);
    ck_assert_int_eq(symlink(tgt, link), 0);
    test_log log = {0};
    int cases = 0;

    /* Our own link to a group-writable target with no cache in it yet: refused
     * in every spelling, and the format folder is not created inside. */
    ck_assert_int_eq(chmod(tgt, 0770), 0);
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        snprintf(spelt, sizeof spelt, "%s%s", link, spellings[i]);
        tool(spelt, "--clear", NULL, CLI_FAIL);
        log.warnings = 0;
        tk_cache *cache = open_cache(spelt, &log);
        ck_assert(!get_named(cache, "a", 300));
        ck_assert_int_eq(log.warnings, 1);
        ck_assert_msg(strstr(log.last, "group- or world-writable"), "%s: %s", spelt, log.last);
        tk_cache_close(cache);
        ck_assert_msg(!path_exists(fmt), "opening %s created %s", spelt, fmt);
        cases++;
    }
    /* The environment's spelling too. */
    setenv("TOKITAI_JIT_CACHE_DIR", spelt, 1);
    run_result r;
    cli_limit(LIMIT_S, &r, "--clear", NULL);
    unsetenv("TOKITAI_JIT_CACHE_DIR");
    ck_assert_msg(r.code == CLI_FAIL, "TOKITAI_JIT_CACHE_DIR=%s --clear: exit %d\n%s", spelt,
                  r.code, r.err);
    run_result_free(&r);
    ck_assert_msg(!path_exists(fmt), "created %s", fmt);
    cases++;

    /* Our link to our own folder: used like the folder, in every spelling. */
    ck_assert_int_eq(chmod(tgt, 0700), 0);
    tk_cache *cache = open_cache(tgt, &log);
    put_named(cache, "a", 300);
    put_named(cache, "b", 300);
    tk_cache_close(cache);
    ck_assert_int_eq(count_entries_under(tgt), 2);
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        snprintf(spelt, sizeof spelt, "%s%s", link, spellings[i]);
        cache = open_cache(spelt, &log);
        ck_assert_msg(get_named(cache, "a", 300), "%s", spelt);
        tk_cache_close(cache);
        cases++;
    }

    if (geteuid() != 0) {
        printf("skipped: test_linked_root's cases of a link or target owned by another user "
               "need root\n");
    } else {
        /* A link owned by another user: refused in every spelling; --clear
         * and --prune leave the target. */
        ck_assert_int_eq(lchown(link, NOBODY, NOBODY), 0);
        for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
            snprintf(spelt, sizeof spelt, "%s%s", link, spellings[i]);
            tool(spelt, "--clear", NULL, CLI_FAIL);
            tool(spelt, "--prune", NULL, CLI_FAIL);
            ck_assert_int_eq(count_entries_under(tgt), 2);
            log.warnings = 0;
            cache = open_cache(spelt, &log);
            ck_assert(!get_named(cache, "a", 300));
            ck_assert_int_eq(log.warnings, 1);
            ck_assert_msg(strstr(log.last, "symbolic link owned by another user"), "%s: %s",
                          spelt, log.last);
            tk_cache_close(cache);
            cases++;
        }
        setenv("TOKITAI_JIT_CACHE_DIR", spelt, 1);
        cli_limit(LIMIT_S, &r, "--clear", NULL);
        unsetenv("TOKITAI_JIT_CACHE_DIR");
        ck_assert_msg(r.code == CLI_FAIL, "TOKITAI_JIT_CACHE_DIR=%s --clear: exit %d", spelt,
                      r.code);
        run_result_free(&r);
        ck_assert_int_eq(count_entries_under(tgt), 2);
        cases++;

        /* Our own link to a target another user owns: refused. */
        ck_assert_int_eq(lchown(link, 0, 0), 0);
        ck_assert_int_eq(chown(tgt, NOBODY, NOBODY), 0);
        for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
            snprintf(spelt, sizeof spelt, "%s%s", link, spellings[i]);
            tool(spelt, "--clear", NULL, CLI_FAIL);
            cases++;
        }
        ck_assert_int_eq(count_entries_under(tgt), 2);
        ck_assert_int_eq(chown(tgt, 0, 0), 0);
    }

    /* Through our own link, --clear acts on our own folder. */
    snprintf(spelt, sizeof spelt, "%s/", link);
    tool(spelt, "--clear", NULL, CLI_OK);
    ck_assert_int_eq(count_entries_under(tgt), 0);
    printf("FIGURE hostile-root-link: %d cases of a linked cache root spelt RL, RL/, RL//, RL/. "
           "(and through TOKITAI_JIT_CACHE_DIR): a link another user owns, or to a folder another "
           "user owns or others may write, refused, target untouched, nothing created in it; our "
           "own: used\n",
           cases);
    tk_test_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("hostile_fs");
    TCase *tc = tcase_create("hostile");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_planted_links);
    tcase_add_test(tc, test_ownership);
    tcase_add_test(tc, test_environment);
    tcase_add_test(tc, test_full_disk);
    tcase_add_test(tc, test_folder_at_entry_path);
    tcase_add_test(tc, test_linked_root);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
