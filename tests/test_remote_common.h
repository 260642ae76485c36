/*
 * A real redis-server for the remote tier's tests: each test starts its own
 * on a free loopback port in a fresh temporary folder (no persistence) and
 * stops it by its pid. Bounded waits only. Suites skip (exit 77, "Skipped")
 * when the library was built without the remote tier or redis-server is not
 * installed (scripts/install-deps.sh installs it).
 */
#ifndef TK_TEST_REMOTE_COMMON_H
#define TK_TEST_REMOTE_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cache/remote.h"
#include "tk_test.h"

typedef struct redis_srv {
    pid_t pid;
    int port;
    char *dir;
    char url[64];
} redis_srv;

static pid_t g_redis_pids[8];

static inline void redis_kill_all(void)
{
    for (size_t i = 0; i < sizeof g_redis_pids / sizeof g_redis_pids[0]; i++) {
        if (g_redis_pids[i] > 0) {
            kill(g_redis_pids[i], SIGKILL);
            waitpid(g_redis_pids[i], NULL, 0);
            g_redis_pids[i] = 0;
        }
    }
}

static inline void redis_track(pid_t pid, int add)
{
    static int registered;
    if (!registered) {
        atexit(redis_kill_all); /* a failing assertion exits the test process */
        registered = 1;
    }
    for (size_t i = 0; i < sizeof g_redis_pids / sizeof g_redis_pids[0]; i++) {
        if (add && g_redis_pids[i] == 0) {
            g_redis_pids[i] = pid;
            return;
        }
        if (!add && g_redis_pids[i] == pid) {
            g_redis_pids[i] = 0;
            return;
        }
    }
}

static const char *redis_binary(void)
{
    static const char *const candidates[] = {"/usr/bin/redis-server", "/usr/local/bin/redis-server",
                                             "/usr/sbin/redis-server"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    return NULL;
}

/* Exits 77 (CTest: Skipped) when the remote tier cannot be tested here. */
static inline void remote_or_skip(void)
{
    if (!tk__remote_built()) {
        printf("skipped: this build has no remote tier (hiredis or libcrypto missing)\n");
        exit(77);
    }
    if (!redis_binary()) {
        printf("skipped: redis-server is not installed (apt-get install redis-server)\n");
        exit(77);
    }
}

/* A loopback port nobody listens on right now (bind to 0, read, close). */
static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static inline void sleep_ms_test(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int redis_pings(int port)
{
    struct timeval tv = {0, 200 * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r && ((r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0) ||
                   (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* Starts redis-server; extra (NULL-terminated, may be NULL) is appended to
 * its arguments. */
static inline void redis_start_args(redis_srv *s, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    s->dir = tk_test_tmpdir("redis");
    const char *bin = redis_binary();
    ck_assert_ptr_nonnull(bin);
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = free_port();
        char port_s[16];
        snprintf(port_s, sizeof port_s, "%d", port);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            char log[1024];
            snprintf(log, sizeof log, "%s/redis.log", s->dir);
            /* the server's output in its folder; without it, on the
             * test's own (what it would say then is still seen) */
            if (!freopen(log, "a", stdout) || !freopen(log, "a", stderr))
                perror(log);
            const char *argv[32] = {
                bin,  "--port", port_s, "--bind",      "127.0.0.1", "--save", "", "--appendonly",
                "no", "--dir",  s->dir, "--daemonize", "no"};
            int n = 13;
            for (int i = 0; extra && extra[i] && n < 31; i++)
                argv[n++] = extra[i];
            argv[n] = NULL;
            execv(bin, (char *const *)argv);
            _exit(127);
        }
        redis_track(pid, 1);
        for (int i = 0; i < 250; i++) { /* at most ~5 s */
            if (redis_pings(port)) {
                s->pid = pid;
                s->port = port;
                snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", port);
                return;
            }
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                redis_track(pid, 0);
                pid = 0;
                break; /* port taken meanwhile: try another */
            }
            sleep_ms_test(20);
        }
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            redis_track(pid, 0);
        }
    }
    ck_abort_msg("redis-server did not start (see %s/redis.log)", s->dir);
}

static inline void redis_start(redis_srv *s)
{
    redis_start_args(s, NULL);
}

/* Kills the server (SIGKILL: also the "server dies" of the tests). */
static inline void redis_kill(redis_srv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        redis_track(s->pid, 0);
        s->pid = 0;
    }
}

static inline void redis_stop(redis_srv *s)
{
    redis_kill(s);
    tk_test_rmtree(s->dir);
    free(s->dir);
    s->dir = NULL;
}

/* A direct client, for planting and reading values. */
static redisContext *redis_client(const redis_srv *s)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    ck_assert_msg(c && !c->err, "connect to redis: %s", c ? c->errstr : "oom");
    redisSetTimeout(c, tv);
    return c;
}

/* The server's key for an entry of this library version. */
static inline void value_name(const char *hex, char *buf, size_t size)
{
    snprintf(buf, size, "tkjit:%s:%d:e:%s", TK_VERSION_STRING, TK__CACHE_FORMAT, hex);
}

#endif
