/* Small helpers shared by the commands: messages, JSON strings, formatting. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void tk__cli_error(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One line, whatever the library's message contained. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fflush(stdout);
    fprintf(stderr, "tokitai-jit: %s\n", msg);
}

void tk__cli_capped_bad(void *user, const char *where, const char *why)
{
    tk__cli_capped *c = user;
    fflush(stdout);
    if (where && c->bundle && strcmp(where, c->bundle) == 0) {
        fprintf(stderr, "warning: %s: %s\n", where, why ? why : "");
        return;
    }
    if (c->n++ >= TK__CLI_MSG_CAP)
        return;
    fprintf(stderr, "%s: %s: %s\n", c->prefix, where ? where : "entry", why ? why : "bad entry");
}

void tk__cli_capped_end(const tk__cli_capped *c)
{
    if (c->n > TK__CLI_MSG_CAP) {
        fflush(stdout);
        fprintf(stderr, "%s: ... and %llu more\n", c->prefix,
                (unsigned long long)(c->n - TK__CLI_MSG_CAP));
    }
}

tk_config *tk__cli_config(const tk__cli_opts *opts)
{
    tk_config *cfg = NULL;
    if (tk_config_create(&cfg) != TK_OK) {
        tk__cli_error("out of memory");
        return NULL;
    }
    if (opts->cache_dir) {
        tk_status st = tk_config_set_cache_dir(cfg, opts->cache_dir);
        if (st != TK_OK) {
            tk__cli_error("--cache-dir %s: %s", opts->cache_dir, tk_status_str(st));
            tk_config_destroy(cfg);
            return NULL;
        }
    }
    if (opts->remote && tk_config_set_remote(cfg, opts->remote) != TK_OK) {
        tk__cli_error("--remote %s: not a redis://host[:port][/db] or unix:///path URL",
                      opts->remote);
        tk_config_destroy(cfg);
        return NULL;
    }
    return cfg;
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n;
    unsigned min;
    unsigned cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0)
        n = 2, cp = s[0] & 0x1f, min = 0x80;
    else if ((s[0] & 0xf0) == 0xe0)
        n = 3, cp = s[0] & 0x0f, min = 0x800;
    else if ((s[0] & 0xf8) == 0xf0)
        n = 4, cp = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void tk__json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f), fputc(c, f), p++;
        } else if (c == '\n') {
            fputs("\\n", f), p++;
        } else if (c == '\t') {
            fputs("\\t", f), p++;
        } else if (c == '\r') {
            fputs("\\r", f), p++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c), p++;
        } else {
            size_t n = utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f), p++;
            } else {
                fwrite(p, 1, n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

const char *tk__fmt_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4)
        v /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

const char *tk__fmt_time(int64_t t, char *buf, size_t size)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (t <= 0 || !localtime_r(&tt, &tm) || strftime(buf, size, "%Y-%m-%d %H:%M", &tm) == 0)
        snprintf(buf, size, "-");
    return buf;
}

const char *tk__fmt_time_iso(int64_t t, char *buf, size_t size)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, size, "1970-01-01T00:00:00Z");
    return buf;
}

double tk__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tk__parse_i64(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!text || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = (int64_t)v;
    return 0;
}

tk_backend_kind tk__target_backend(const char *target)
{
    if (strncmp(target, "sm_", 3) == 0 || strncmp(target, "compute_", 8) == 0)
        return TK_BACKEND_CUDA;
    if (strncmp(target, "gfx", 3) == 0)
        return TK_BACKEND_HIP;
    if (strcmp(target, "stub") == 0)
        return TK_BACKEND_STUB;
    return TK_BACKEND_AUTO;
}

int tk__target_name_valid(const char *t)
{
    size_t len = strlen(t);
    if (len == 0 || len > 128)
        return 0;
    if (strncmp(t, "sm_", 3) == 0 || strncmp(t, "compute_", 8) == 0) {
        const char *d = t + (t[0] == 's' ? 3 : 8);
        size_t nd = strspn(d, "0123456789");
        /* sm_90, sm_100, sm_90a, sm_100f */
        return nd >= 2 && nd <= 3 && (d[nd] == 0 || (islower((unsigned char)d[nd]) && !d[nd + 1]));
    }
    if (strcmp(t, "stub") == 0)
        return 1;
    if (strncmp(t, "gfx", 3) == 0) {
        const char *p = t + 3;
        size_t nd = strspn(p, "0123456789abcdef");
        if (nd < 3 || nd > 4)
            return 0;
        p += nd;
        /* Features: ":sramecc+", ":xnack-". */
        while (*p == ':') {
            p++;
            size_t nf = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
            if (nf == 0 || (p[nf] != '+' && p[nf] != '-'))
                return 0;
            p += nf + 1;
        }
        return *p == 0;
    }
    return 0;
}

int tk__cli_open_regular(const char *path, uint64_t max, uint64_t *size, char *err, size_t err_size)
{
    /* Non-blocking: opening a FIFO with no writer must not hang the tool. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "%s: not a regular file (%s)", path,
                 S_ISDIR(st.st_mode)    ? "a folder"
                 : S_ISFIFO(st.st_mode) ? "a named pipe"
                 : S_ISCHR(st.st_mode)  ? "a character device"
                 : S_ISBLK(st.st_mode)  ? "a block device"
                 : S_ISSOCK(st.st_mode) ? "a socket"
                                        : "a special file");
        close(fd);
        return -1;
    }
    if (max && (uint64_t)st.st_size > max) {
        snprintf(err, err_size, "%s: %llu bytes, more than the %llu this tool reads", path,
                 (unsigned long long)st.st_size, (unsigned long long)max);
        close(fd);
        return -1;
    }
    if (size)
        *size = (uint64_t)st.st_size;
    return fd;
}

int tk__cli_read_regular(const char *path, uint64_t max, char **out, size_t *len, char *err,
                         size_t err_size)
{
    uint64_t size = 0;
    int fd = tk__cli_open_regular(path, max, &size, err, err_size);
    if (fd < 0)
        return -1;
    /* Read at most max bytes whatever the size said (a file that grows). */
    size_t cap = (size_t)size + 1, got = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, err_size, "%s: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got == cap) {
            if (got > max) {
                snprintf(err, err_size, "%s: more than the %llu bytes this tool reads", path,
                         (unsigned long long)max);
                free(buf);
                close(fd);
                return -1;
            }
            size_t ncap = cap * 2 > max + 1 ? (size_t)max + 1 : cap * 2;
            char *grown = realloc(buf, ncap + 1);
            if (!grown)
                break;
            buf = grown;
            cap = ncap;
        }
    }
    close(fd);
    if (!buf) {
        snprintf(err, err_size, "%s: out of memory", path);
        return -1;
    }
    buf[got] = 0;
    *out = buf;
    *len = got;
    return 0;
}
