/*
 * libFuzzer target for bundles through tk_cache_import, with an oracle:
 * whatever the bytes, every entry that enters the cache verifies whole
 * (tk_cache_verify finds nothing bad) and the counts add up. Built by
 * -DTK_BUILD_FUZZ=ON (clang); see tests/fuzz/CMakeLists.txt. Inputs that do
 * not start with the bundle magic get it prepended, so that the fuzzer
 * spends its time past the header.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[] = "/tmp/tk-fuzz-bundle-XXXXXX";
    static int ready;
    if (!ready) {
        if (!mkdtemp(dir))
            abort();
        ready = 1;
    }
    char bundle[128], root[128];
    snprintf(bundle, sizeof bundle, "%s/b", dir);
    snprintf(root, sizeof root, "%s/c", dir);
    FILE *f = fopen(bundle, "wb");
    if (!f)
        abort();
    if (size < 8 || memcmp(data, TK__BUNDLE_MAGIC, 8) != 0) {
        uint8_t head[16] = {0};
        memcpy(head, TK__BUNDLE_MAGIC, 8);
        head[8] = TK__CACHE_FORMAT;
        fwrite(head, 1, 12, f);
    }
    fwrite(data, 1, size, f);
    fclose(f);
    tk__cache_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.root = root;
    opts.lower = "";
    tk_cache *cache = NULL;
    if (tk__cache_open(&opts, &cache) != TK_OK)
        abort();
    uint64_t imported = 0, rejected = 0, bad = 0, removed = 0;
    tk_status st = tk_cache_import(cache, bundle, NULL, NULL, &imported, &rejected);
    if (tk_cache_verify(cache, NULL, NULL, &bad) != TK_OK || bad != 0)
        abort(); /* something bad entered the cache */
    tk_cache_stats s = TK_STRUCT_INIT(tk_cache_stats);
    if (tk_cache_get_stats(cache, &s) != TK_OK || (st == TK_OK && s.entries != imported) ||
        s.temp_files != 0)
        abort();
    tk_cache_clear(cache, &removed);
    tk_cache_close(cache);
    unlink(bundle);
    return 0;
}
