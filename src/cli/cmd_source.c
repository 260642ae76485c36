/* --source KEY: the source of one cache entry as the compiler saw it, under
 * a comment header saying which entry and with which options. */
#include <stddef.h>
#include <stdio.h>

#include "cli.h"

typedef struct shown {
    int source_printed;
} shown;

static void print_source(void *user, const tk_cache_entry_info *info, const char *source,
                         size_t len)
{
    shown *s = user;
    printf("// key:      %s\n", info->key_hex);
    printf("// kernel:   %s\n", info->kernel);
    printf("// source:   %s\n", info->source);
    printf("// target:   %s (%s)\n", info->arch, info->backend);
    printf("// compiler: %s\n", info->compiler);
    printf("// options:  %s\n", info->options[0] ? info->options : "(none)");
    if (info->struct_size >= offsetof(tk_cache_entry_info, source_hash) + sizeof(char *) &&
        info->source_hash)
        printf("// hash:     %s (XXH3-128 of the text below)\n", info->source_hash);
    if (!source)
        return;
    printf("\n");
    fwrite(source, 1, len, stdout);
    if (len && source[len - 1] != '\n')
        putchar('\n');
    s->source_printed = 1;
}

int tk__cmd_source(const tk__cli_opts *opts)
{
    tk_config *cfg = tk__cli_config(opts);
    if (!cfg)
        return TK__EXIT_FAIL;
    tk_cache *cache = NULL;
    tk_status st = tk_cache_open(cfg, &cache);
    tk_config_destroy(cfg);
    if (st != TK_OK) {
        tk__cli_error("cannot open the cache: %s", tk_status_str(st));
        return TK__EXIT_FAIL;
    }
    shown s = {0};
    st = tk_cache_entry_source(cache, opts->file, print_source, &s);
    int rc = TK__EXIT_OK;
    if (st != TK_OK) {
        tk__cli_error("--source %s: %s", opts->file, tk_cache_last_error(cache));
        /* Not a key, or a prefix naming several entries: a bad value. */
        rc = st == TK_INVALID_ARGUMENT ? TK__EXIT_USAGE : TK__EXIT_FAIL;
    }
    tk_cache_close(cache);
    return rc;
}
