/* The cache across processes: many writers and readers of one key, a writer
 * killed mid-store, and threads sharing one handle (no GPU). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_cache_common.h"

#define N_PROCS 16
#define BIG (256 * 1024) /* wide write window: races would show */

/* Files in the shard folder of name's key: entries and temporaries. */
static void count_shard(const char *root, const char *name, int *entries, int *temps)
{
    char path[PATH_MAX];
    entry_path_of(root, name, path, sizeof(path));
    *strrchr(path, '/') = 0;
    *entries = *temps = 0;
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp.", 5) == 0)
            (*temps)++;
        else if (e->d_name[0] != '.')
            (*entries)++;
    }
    closedir(d);
}

static void wait_all(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %d", i,
                      status);
    }
}

/* The engine's protocol: look, lock, look again, compile once, store. */
static int child_get_or_compile(const char *root, int start_fd, const char *compiles)
{
    char c;
    tk_cache *cache = open_cache(root, NULL);
    if (read(start_fd, &c, 1) < 0)
        return 20;
    tk__key key;
    make_key(&key, "shared");
    tk__entry e;
    if (tk__cache_get(cache, &key, &e) != TK_OK) {
        tk__cache_lock *lock = NULL;
        if (tk__cache_lock_key(cache, &key, &lock) != TK_OK || !lock)
            return 21;
        if (tk__cache_get(cache, &key, &e) != TK_OK) {
            int fd = open(compiles, O_WRONLY | O_APPEND | O_CREAT, 0600);
            if (fd < 0 || write(fd, "c", 1) != 1)
                return 22;
            close(fd);
            struct timespec ts = {0, 20 * 1000 * 1000}; /* "compiling" */
            nanosleep(&ts, NULL);
            put_named(cache, "shared", BIG);
        } else {
            tk__entry_free(&e);
        }
        tk__cache_unlock(lock);
    } else {
        tk__entry_free(&e);
    }
    int ok = get_named(cache, "shared", BIG);
    tk__key_free(&key);
    tk_cache_close(cache);
    return ok ? 0 : 23;
}

static void check_one_valid_entry(const char *root)
{
    int entries, temps;
    count_shard(root, "shared", &entries, &temps);
    ck_assert_int_eq(entries, 1);
    ck_assert_int_eq(temps, 0);
    tk_cache *cache = open_cache(root, NULL);
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries, 1);
    ck_assert_uint_eq(stats.temp_files, 0);
    ck_assert_uint_eq(stats.bad_files, 0);
    uint64_t n_bad = 9;
    tk_assert_status(tk_cache_verify(cache, NULL, NULL, &n_bad), TK_OK);
    ck_assert_uint_eq(n_bad, 0);
    ck_assert(get_named(cache, "shared", BIG));
    tk_cache_close(cache);
}

START_TEST(sixteen_processes_one_key_one_compile)
{
    char *root = tk_test_tmpdir("cache-16");
    char compiles[PATH_MAX];
    snprintf(compiles, sizeof(compiles), "%s/compiles", root);
    int start[2];
    ck_assert_int_eq(pipe(start), 0);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(start[1]);
            _exit(child_get_or_compile(root, start[0], compiles));
        }
    }
    close(start[0]);
    close(start[1]); /* every child's read returns now: all start together */
    wait_all(pids, N_PROCS);
    size_t n = 0;
    char *log = tk_test_read_file(compiles, &n);
    ck_assert_ptr_nonnull(log);
    ck_assert_uint_eq(n, 1); /* one compile across sixteen processes */
    free(log);
    check_one_valid_entry(root);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* Without the lock: everyone stores and reads at once. Atomic publish alone
 * must leave one whole entry and never show a partial one. */
static int child_store_and_read(const char *root, int start_fd)
{
    char c;
    tk_cache *cache = open_cache(root, NULL);
    if (read(start_fd, &c, 1) < 0)
        return 20;
    for (int round = 0; round < 3; round++) {
        (void)get_named(cache, "shared", BIG); /* a hit asserts the bytes */
        put_named(cache, "shared", BIG);
        if (!get_named(cache, "shared", BIG))
            return 21;
    }
    tk_cache_close(cache);
    return 0;
}

START_TEST(sixteen_processes_store_and_read_at_once)
{
    char *root = tk_test_tmpdir("cache-16b");
    int start[2];
    ck_assert_int_eq(pipe(start), 0);
    pid_t pids[N_PROCS];
    for (int i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(start[1]);
            _exit(child_store_and_read(root, start[0]));
        }
    }
    close(start[0]);
    close(start[1]);
    wait_all(pids, N_PROCS);
    check_one_valid_entry(root);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(store_killed_mid_write_leaves_no_entry)
{
    char *root = tk_test_tmpdir("cache-kill");
    tk_cache *cache = open_cache(root, NULL);
    put_named(cache, "other", 100); /* the cache holds something already */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* Test hook: half the file, then a long pause before the rest. */
        setenv("TK__CACHE_TEST_WRITE_DELAY_MS", "20000", 1);
        tk_cache *slow = open_cache(root, NULL);
        put_named(slow, "shared", BIG);
        _exit(0);
    }
    int entries = 0, temps = 0;
    for (int i = 0; i < 1000 && temps == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        count_shard(root, "shared", &entries, &temps);
    }
    ck_assert_int_eq(temps, 1); /* the writer is inside its store */
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    char path[PATH_MAX];
    entry_path_of(root, "shared", path, sizeof(path));
    ck_assert(!path_exists(path));
    ck_assert(!get_named(cache, "shared", BIG));
    ck_assert(get_named(cache, "other", 100));
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_eq(stats.entries, 1);
    ck_assert_uint_eq(stats.temp_files, 1);
    uint64_t n_bad = 9;
    tk_assert_status(tk_cache_verify(cache, NULL, NULL, &n_bad), TK_OK);
    ck_assert_uint_eq(n_bad, 0);

    /* The next store works; a prune later clears the leftover. */
    put_named(cache, "shared", BIG);
    ck_assert(get_named(cache, "shared", BIG));
    count_shard(root, "shared", &entries, &temps);
    ck_assert_int_eq(temps, 1);
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp.", 5) == 0) {
            char tmp[PATH_MAX + 256];
            snprintf(tmp, sizeof(tmp), "%s/%s", dir, e->d_name);
            struct timespec ts[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
            ck_assert_int_eq(utimensat(AT_FDCWD, tmp, ts, 0), 0);
        }
    }
    closedir(d);
    uint64_t removed = 0;
    tk_assert_status(tk_cache_prune(cache, 0, &removed), TK_OK);
    ck_assert_uint_eq(removed, 1);
    count_shard(root, "shared", &entries, &temps);
    ck_assert_int_eq(temps, 0);
    ck_assert_int_eq(entries, 1);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

/* Threads sharing one handle: stores, lookups, bad entries and warnings. */
typedef struct thread_arg {
    tk_cache *cache;
    int index;
    int failures;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    char name[16];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof(name), "t%d", (a->index + i) % 8);
        tk__key key;
        make_key(&key, name);
        unsigned char payload[2048];
        fill_payload(payload, sizeof(payload), name);
        tk__entry_meta meta = make_meta(name);
        tk__entry e;
        if (tk__cache_get(a->cache, &key, &e) == TK_OK) {
            if (e.payload_size != sizeof(payload) || memcmp(e.payload, payload, sizeof(payload)))
                a->failures++;
            tk__entry_free(&e);
        } else if (tk__cache_put(a->cache, &key, &meta, payload, sizeof(payload)) != TK_OK) {
            a->failures++;
        }
        tk__key_free(&key);
    }
    return NULL;
}

START_TEST(threads_share_a_handle)
{
    char *root = tk_test_tmpdir("cache-thr");
    test_log log = {0};
    tk__cache_opts opts;
    memset(&opts, 0, sizeof(opts));
    opts.root = root;
    opts.lower = "";
    opts.max_size = 6 * 2600; /* small: eviction runs concurrently too */
    opts.log = test_log_fn;
    opts.log_user = &log;
    tk_cache *cache;
    tk_assert_status(tk__cache_open(&opts, &cache), TK_OK);
    pthread_t th[8];
    thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i].cache = cache;
        args[i].index = i;
        args[i].failures = 0;
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_int_eq(args[i].failures, 0);
    }
    tk_cache_stats stats = TK_STRUCT_INIT(tk_cache_stats);
    tk_assert_status(tk_cache_get_stats(cache, &stats), TK_OK);
    ck_assert_uint_le(stats.bytes, opts.max_size);
    ck_assert_uint_eq(stats.temp_files, 0);
    ck_assert_int_eq(log.warnings, 0);
    tk_cache_close(cache);
    tk_test_rmtree(root);
    free(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cache_procs");
    TCase *tc = tcase_create("procs");
    tcase_add_test(tc, sixteen_processes_one_key_one_compile);
    tcase_add_test(tc, sixteen_processes_store_and_read_at_once);
    tcase_add_test(tc, store_killed_mid_write_leaves_no_entry);
    tcase_add_test(tc, threads_share_a_handle);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tk_test_main(suite());
}
