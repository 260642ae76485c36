/* Remote tier commands: --stats / --list with --remote URL, and --push. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common/env_vars.h"

/* Tools wait longer than a lookup would: nobody is waiting for a kernel. */
#define TOOL_CONNECT_MS 2000
#define TOOL_IO_MS 10000

static int exit_for(tk_status st)
{
    if (st == TK_UNSUPPORTED)
        return TK__EXIT_UNAVAILABLE;
    return TK__EXIT_FAIL;
}

static tk_cache *open_remote(const tk__cli_opts *opts)
{
    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return NULL;
    if (!tk__env_get(TK__ENV_REMOTE_CONNECT_TIMEOUT_MS) &&
        !tk__env_get(TK__ENV_REMOTE_IO_TIMEOUT_MS))
        tk_config_set_remote_timeouts(cfg, TOOL_CONNECT_MS, TOOL_IO_MS);
    tk_cache *cache = NULL;
    tk_status st = tk_cache_open(cfg, &cache);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        tk__cli_error("cannot open the cache: %s", tk_status_str(st));
        return NULL;
    }
    return cache;
}

static int report(tk_cache *cache, const char *what, tk_status st)
{
    tk__cli_error("%s: %s: %s", what, tk_status_str(st), tk_cache_last_error(cache));
    return exit_for(st);
}

int tk__cmd_remote_stats(const tk__cli_opts *opts)
{
    tk_cache *cache = open_remote(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    char desc[1024];
    tk_status st = tk_cache_remote_describe(cache, desc, sizeof desc);
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    if (st == TK_OK)
        st = tk_cache_remote_get_stats(cache, &s);
    if (st != TK_OK) {
        int code = report(cache, "remote cache", st);
        tk_cache_close(cache);
        return code;
    }
    char b1[32], b2[32];
    if (opts->json) {
        printf("{\"remote\": true, \"entries\": %llu, \"bytes\": %llu, \"max_bytes\": %llu, "
               "\"leases\": %llu, \"bad_values\": %llu}\n",
               (unsigned long long)s.entries, (unsigned long long)s.bytes,
               (unsigned long long)s.max_bytes, (unsigned long long)s.temp_files,
               (unsigned long long)s.bad_files);
    } else {
        fputs(desc, stdout);
        printf("entries:     %llu (this library version)\n", (unsigned long long)s.entries);
        printf("bytes:       %s\n", tk__fmt_size(s.bytes, b1, sizeof b1));
        printf("server limit: %s\n",
               s.max_bytes ? tk__fmt_size(s.max_bytes, b2, sizeof b2) : "none or not readable");
        printf("leases held: %llu\n", (unsigned long long)s.temp_files);
        printf("bad values:  %llu (keys of another type and oversized values included)\n",
               (unsigned long long)s.bad_files);
    }
    tk_cache_close(cache);
    return TK__EXIT_OK;
}

typedef struct list_state {
    const tk__cli_opts *opts;
    unsigned long long n;
} list_state;

static int print_one(void *user, const tk_cache_entry_info *e)
{
    list_state *ls = user;
    char size[32], created[32];
    tk__entry_desc d;
    tk__entry_describe(e, &d);
    if (ls->opts->json) {
        fputs(ls->n ? ",\n  {" : "\n  {", stdout);
        fputs("\"key\": ", stdout);
        tk__json_str(stdout, e->key_hex);
        fputs(", \"kernel\": ", stdout);
        tk__json_str(stdout, e->kernel);
        fputs(", \"label\": ", stdout);
        tk__json_str(stdout, d.label);
        fputs(", \"op\": ", stdout);
        tk__json_str(stdout, d.op);
        fputs(", \"policy\": ", stdout);
        tk__json_str(stdout, d.policy);
        fputs(", \"source\": ", stdout);
        tk__json_str(stdout, e->source);
        fputs(", \"backend\": ", stdout);
        tk__json_str(stdout, e->backend);
        fputs(", \"arch\": ", stdout);
        tk__json_str(stdout, e->arch);
        fputs(", \"compiler\": ", stdout);
        tk__json_str(stdout, e->compiler);
        fputs(", \"options\": ", stdout);
        tk__json_str(stdout, e->options);
        printf(", \"payload_size\": %llu, \"value_size\": %llu, \"created\": ",
               (unsigned long long)e->payload_size, (unsigned long long)e->file_size);
        tk__json_str(stdout, tk__fmt_time_iso(e->created, created, sizeof created));
        fputs("}", stdout);
    } else {
        printf("%.12s  %-28s %-5s %-24s %-22s %10s  %s\n", e->key_hex, d.label, e->backend, e->arch,
               e->compiler, tk__fmt_size(e->file_size, size, sizeof size),
               tk__fmt_time(e->created, created, sizeof created));
        if (ls->opts->verbose)
            printf("              entry %s  options: %s\n", e->kernel, e->options);
    }
    ls->n++;
    return 0;
}

int tk__cmd_remote_list(const tk__cli_opts *opts)
{
    tk_cache *cache = open_remote(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    list_state ls = {opts, 0};
    if (opts->json)
        fputs("[", stdout);
    else
        printf("%-12s  %-28s %-5s %-24s %-22s %10s  %s\n", "key", "kernel", "bknd", "arch",
               "compiler", "size", "created");
    uint64_t skipped = 0;
    tk_status st = tk_cache_remote_list_counted(cache, print_one, &ls, &skipped);
    if (opts->json)
        fputs(ls.n ? "\n]\n" : "]\n", stdout);
    else if (st == TK_OK && skipped)
        printf("%llu entries on the remote, %llu keys skipped (not values a lookup would take: "
               "another type, oversized or not verifying)\n",
               ls.n, (unsigned long long)skipped);
    else if (st == TK_OK)
        printf("%llu entries on the remote\n", ls.n);
    if (opts->json && st == TK_OK && skipped)
        tk__cli_error("%llu keys on the remote skipped: not values a lookup would take",
                      (unsigned long long)skipped);
    int code = st == TK_OK ? TK__EXIT_OK : report(cache, "remote cache", st);
    tk_cache_close(cache);
    return code;
}

int tk__cmd_push(const tk__cli_opts *opts)
{
    if (!opts->remote && !tk__env_get(TK__ENV_REMOTE)) {
        tk__cli_error("--push needs --remote URL (or TOKITAI_JIT_REMOTE)");
        return TK__EXIT_USAGE;
    }
    if (opts->bundle) {
        char why[1200];
        int fd = tk__cli_open_regular(opts->bundle, 0, NULL, why, sizeof why);
        if (fd < 0) { /* a FIFO or a device would hang or flood the reader */
            tk__cli_error("cannot push %s", why);
            return TK__EXIT_FAIL;
        }
        close(fd);
    }
    tk_cache *cache = open_remote(opts);
    if (!cache)
        return TK__EXIT_FAIL;
    tk_cache_push_counts n = TK_STRUCT_INIT(tk_cache_push_counts);
    double t0 = tk__now();
    tk__cli_capped cap = {"tokitai-jit: rejected", opts->bundle, 0};
    tk_status st = tk_cache_remote_push_report(cache, opts->bundle, tk__cli_capped_bad, &cap, &n);
    tk__cli_capped_end(&cap);
    uint64_t rejected = n.rejected;
    if (st != TK_OK) {
        int code = report(cache, "push", st);
        tk_cache_close(cache);
        return code;
    }
    printf("pushed %llu, already on the remote %llu, rejected %llu, replaced %llu (values that "
           "did not verify) (%s, %.2f s)\n",
           (unsigned long long)n.pushed, (unsigned long long)n.present,
           (unsigned long long)n.rejected, (unsigned long long)n.replaced,
           opts->bundle ? opts->bundle : tk_cache_root(cache), tk__now() - t0);
    tk_cache_close(cache);
    return rejected ? TK__EXIT_FAIL : TK__EXIT_OK;
}

int tk__cmd_remote_check(const tk__cli_opts *opts)
{
    tk_cache *cache = open_remote(opts);
    if (!cache)
        return -1;
    char desc[1024];
    tk_status st = tk_cache_remote_describe(cache, desc, sizeof desc);
    int rc = 0;
    if (st == TK_UNSUPPORTED) {
        tk__cli_error("--remote: %s", tk_cache_last_error(cache));
        rc = -1;
    } else if (st != TK_OK) {
        tk__cli_error("warning: %s; compiling without publishing", tk_cache_last_error(cache));
    }
    tk_cache_close(cache);
    return rc;
}
