/*
 * The remote tier on loopback, with the stub backend (no GPU: "load" is the
 * stub's, so the figures are the remote tier's own cost, not a driver's):
 *
 *   remote hit:  tk_kernel_get in a fresh process with an empty local cache,
 *                after context creation, to a launchable handle (connect,
 *                GETRANGE, envelope + entry checks, write to the local
 *                cache, load), against a disk hit in a fresh process;
 *   server down: first call and later calls with a remote nobody listens on
 *                (refused) and with one that accepts and never answers
 *                (default 50 ms timeouts), against no remote at all.
 *
 * Starts its own redis-server on a free loopback port (or uses
 * $TOKITAI_JIT_REMOTE). Exits 77 without the remote tier or redis-server.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
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

#include "bench_stats.h"
#include "tokitai/tokitai.h"

#define ROUNDS 21

static const char *const k_body = "extern \"C\" __global__ void scale(float *x, int n)\n"
                                  "{\n"
                                  "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                  "    if (i < n) x[i] *= FACTOR;\n"
                                  "}\n";

static char g_tmp[256];
static char g_url[256];
static pid_t g_redis;

/* CPU time of this thread: with a loaded machine, wall time includes
 * waiting for a core (for this process and for redis-server). */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void cleanup(void)
{
    if (g_redis > 0) {
        kill(g_redis, SIGKILL);
        waitpid(g_redis, NULL, 0);
    }
    if (g_tmp[0])
        nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int free_port(int *listen_fd)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (listen_fd && listen(fd, 64) == 0)
        *listen_fd = fd;
    else
        close(fd);
    return ntohs(a.sin_port);
}

static tk_context *make_ctx_ro(const char *dir, const char *url, int read_only)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[256];
    if (tk_config_create(&cfg) != TK_OK)
        return NULL;
    tk_config_set_backend(cfg, TK_BACKEND_STUB);
    tk_config_set_cache_dir(cfg, dir);
    tk_config_set_remote(cfg, url);
    tk_config_set_cache_read_only(cfg, read_only);
    if (tk_context_create(cfg, &ctx, err, sizeof err) != TK_OK)
        ctx = NULL;
    tk_config_destroy(cfg);
    return ctx;
}

static tk_context *make_ctx(const char *dir, const char *url)
{
    return make_ctx_ro(dir, url, 0);
}

/* The source of kernel i, padded to about pad bytes (the stub's code object
 * is its source, so this sets the payload size too). */
static char *source_of(size_t pad)
{
    size_t n = strlen(k_body) + pad + 64;
    char *s = malloc(n);
    if (!s)
        return NULL;
    strcpy(s, k_body);
    if (pad) {
        strcat(s, "/*");
        size_t len = strlen(s);
        memset(s + len, 'x', pad);
        strcpy(s + len + pad, "*/\n");
    }
    return s;
}

static int get_kernel(tk_context *ctx, const char *src, int i)
{
    char value[16];
    snprintf(value, sizeof value, "%d.0f", i);
    tk_define def = {"FACTOR", value};
    tk_kernel_desc d = {.source = src, .entry = "scale", .defines = &def, .n_defines = 1};
    tk_kernel *k = NULL;
    return tk_kernel_get(ctx, &d, &k) == TK_OK && k ? 0 : -1;
}

/* The child side of fresh_process_get: one timed tk_kernel_get. */
static int child_main(char **argv)
{
    const char *dir = argv[2], *url = argv[3];
    size_t pad = strtoul(argv[4], NULL, 10);
    int i = atoi(argv[5]);
    int read_only = atoi(argv[6]);
    char *src = source_of(pad);
    double ms = -1, cpu = -1;
    tk_context *ctx = src ? make_ctx_ro(dir, url, read_only) : NULL;
    if (ctx) {
        double t0 = bench_now_ms(), c0 = cpu_ms();
        if (get_kernel(ctx, src, i) == 0) {
            ms = bench_now_ms() - t0;
            cpu = cpu_ms() - c0;
        }
        tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
        tk_context_get_stats(ctx, &s);
        if (s.compiles != 0)
            ms = -2; /* not a hit: the figure would be wrong */
        tk_context_destroy(ctx);
    }
    free(src);
    printf("%.6f %.6f\n", ms, cpu);
    return 0;
}

/* In a fresh process (fork + exec of this program): ms for one
 * tk_kernel_get on an empty (remote) or a warm (disk) local cache, context
 * creation excluded. */
static double fresh_process_get(const char *dir, const char *url, size_t pad, int i, int read_only,
                                double *cpu)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    char pad_s[32], i_s[32];
    snprintf(pad_s, sizeof pad_s, "%zu", pad);
    snprintf(i_s, sizeof i_s, "%d", i);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 1);
        execl("/proc/self/exe", "remote", "--child", dir, url, pad_s, i_s, read_only ? "1" : "0",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char buf[64] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    waitpid(pid, NULL, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *end = NULL;
    double ms = strtod(buf, &end);
    *cpu = strtod(end, NULL);
    return ms;
}

static int start_redis(void)
{
    const char *bin = access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : NULL;
    if (!bin)
        return -1;
    int port = free_port(NULL);
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    g_redis = fork();
    if (g_redis == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(126);
        execl(bin, bin, "--port", port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--dir", g_tmp, (char *)NULL);
        _exit(127);
    }
    snprintf(g_url, sizeof g_url, "redis://127.0.0.1:%d", port);
    return 0;
}

static int wait_ready(void)
{
    tk_config *cfg = NULL;
    tk_config_create(&cfg);
    tk_config_set_remote(cfg, g_url);
    tk_config_set_cache_disabled(cfg, 1);
    tk_status st = TK_IO_ERROR;
    for (int i = 0; i < 250 && st != TK_OK; i++) {
        tk_cache *cache = NULL;
        char buf[512];
        if (tk_cache_open(cfg, &cache) != TK_OK)
            break;
        st = tk_cache_remote_describe(cache, buf, sizeof buf);
        tk_cache_close(cache);
        if (st == TK_UNSUPPORTED)
            break;
        if (st != TK_OK) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    tk_config_destroy(cfg);
    return st == TK_OK ? 0 : (st == TK_UNSUPPORTED ? 77 : -1);
}

typedef struct series {
    double wall[ROUNDS], cpu[ROUNDS];
} series;

static void print_series(const char *what, series *s, int n)
{
    double wall = bench_median(s->wall, n); /* sorts */
    printf("    %-40s %7.3f ms wall (min %.3f, max %.3f), %7.3f ms CPU\n", what, wall, s->wall[0],
           s->wall[n - 1], bench_median(s->cpu, n));
}

static void bench_hits(size_t pad, const char *label)
{
    char *src = source_of(pad);
    series remote, remote_ro, disk;
    int n = 0;
    for (int r = 0; r < ROUNDS; r++) {
        char writer[512], reader[512], reader_ro[512];
        snprintf(writer, sizeof writer, "%s/w-%zu-%d", g_tmp, pad, r);
        snprintf(reader, sizeof reader, "%s/r-%zu-%d", g_tmp, pad, r);
        snprintf(reader_ro, sizeof reader_ro, "%s/ro-%zu-%d", g_tmp, pad, r);
        int k = (int)pad + r; /* a new kernel each round */
        tk_context *w = make_ctx(writer, g_url);
        if (!w || get_kernel(w, src, k) != 0) {
            printf("  could not publish kernel %d\n", k);
            tk_context_destroy(w);
            break;
        }
        tk_context_destroy(w);
        /* remote -> local cache -> load; then the same from the local cache */
        remote.wall[n] = fresh_process_get(reader, g_url, pad, k, 0, &remote.cpu[n]);
        disk.wall[n] = fresh_process_get(reader, "", pad, k, 0, &disk.cpu[n]);
        /* remote -> load, the local cache read-only (no write-back) */
        remote_ro.wall[n] = fresh_process_get(reader_ro, g_url, pad, k, 1, &remote_ro.cpu[n]);
        if (remote.wall[n] < 0 || disk.wall[n] < 0 || remote_ro.wall[n] < 0) {
            printf("  round %d: not a hit\n", r);
            break;
        }
        n++;
    }
    if (n > 0) {
        printf("%s [median of %d fresh processes each]\n", label, n);
        print_series("remote hit, written to the local cache:", &remote, n);
        print_series("remote hit, local cache read-only:", &remote_ro, n);
        print_series("disk hit (for comparison):", &disk, n);
    }
    free(src);
}

static void bench_down(const char *url, const char *label)
{
    char dir[512], base[512];
    snprintf(dir, sizeof dir, "%s/down-%d", g_tmp, (int)(bench_now_ms()));
    snprintf(base, sizeof base, "%s/base-%d", g_tmp, (int)(bench_now_ms()));
    char *src = source_of(0);
    tk_context *ref = make_ctx(base, "");
    tk_context *ctx = make_ctx(dir, url);
    if (!ref || !ctx) {
        printf("  cannot create contexts\n");
        goto done;
    }
    double t_ref[50], t_later[50];
    for (int i = 0; i < 50; i++) {
        double t0 = bench_now_ms();
        get_kernel(ref, src, 1000 + i);
        t_ref[i] = bench_now_ms() - t0;
    }
    double t0 = bench_now_ms();
    get_kernel(ctx, src, 999);
    double first = bench_now_ms() - t0;
    for (int i = 0; i < 50; i++) {
        t0 = bench_now_ms();
        get_kernel(ctx, src, 1000 + i);
        t_later[i] = bench_now_ms() - t0;
    }
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_context_get_stats(ctx, &s);
    printf("%-34s first call %.3f ms, later calls %.3f ms (no remote: %.3f ms); remote errors "
           "%llu  [medians of 50 compiles with the stub]\n",
           label, first, bench_median(t_later, 50), bench_median(t_ref, 50),
           (unsigned long long)s.remote_errors);
done:
    tk_context_destroy(ctx);
    tk_context_destroy(ref);
    free(src);
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "--child") == 0)
        return child_main(argv);
    snprintf(g_tmp, sizeof g_tmp, "%s/tk-bench-remote-XXXXXX",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    atexit(cleanup); /* children exec, so only this process cleans up */
    const char *env = getenv("TOKITAI_JIT_REMOTE");
    if (env && *env) {
        snprintf(g_url, sizeof g_url, "%s", env);
    } else if (start_redis() != 0) {
        printf("skipped: redis-server is not installed\n");
        return 77;
    }
    int ready = wait_ready();
    if (ready == 77) {
        printf("skipped: this build has no remote tier (hiredis or libcrypto missing)\n");
        return 77;
    }
    if (ready != 0) {
        printf("redis at %s did not answer\n", g_url);
        return 1;
    }
    printf("remote tier on loopback (%s), stub backend: figures exclude any driver\n", g_url);
    bench_hits(0, "0.2 KiB code object");
    bench_hits(64 * 1024, "64 KiB code object");
    bench_hits(1024 * 1024, "1 MiB code object");

    int silent_fd = -1;
    int refused_port = free_port(NULL);
    int silent_port = free_port(&silent_fd);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", refused_port);
    bench_down(url, "server down (connection refused):");
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", silent_port);
    bench_down(url, "server silent (50 ms timeouts):");
    if (silent_fd >= 0)
        close(silent_fd);
    return 0;
}
