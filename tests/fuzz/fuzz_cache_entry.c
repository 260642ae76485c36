/*
 * libFuzzer target for the bytes the cache reads from disk: entry files
 * (header-only and full parses) and bundles (through tk_cache_import into a
 * scratch cache). Not part of the default build; with clang:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -DTK_STATIC_DEFINE \
 *     -Iinclude -Isrc tests/fuzz/fuzz_cache_entry.c \
 *     src/cache/{cache,diag,entry,fs,key,remote,source,stats,tools}.c src/jit/status.c \
 *     -lxxhash -lzstd -lpthread -o fuzz_cache_entry
 *
 * Built with -DTK_FUZZ_STANDALONE (any C compiler) it replays the files named
 * on the command line instead. The Check suite test_cache_key runs a
 * fixed-seed mutation loop over the same parser on every test run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_entry(const uint8_t *data, size_t size)
{
    tk__entry_view v;
    const char *why;
    if (tk__entry_parse(data, size, 1, &v, &why) == TK_OK) {
        /* Whatever parses must be self-consistent. */
        if ((uint64_t)v.key_size + v.stored_size > size)
            abort();
        /* And decoding stays within the size it declares. */
        void *code = malloc(v.payload_size ? (size_t)v.payload_size : 1);
        if (code)
            (void)tk__entry_payload(&v, code);
        free(code);
    }
    if (size >= TK__ENTRY_HEADER_SIZE && tk__entry_parse_header(data, size, &v, &why) == TK_OK &&
        TK__ENTRY_HEADER_SIZE + (size_t)v.meta_size <= size)
        (void)tk__entry_parse_meta(data, &v, &why);
}

static void import_bundle(const uint8_t *data, size_t size)
{
    char dir[] = "/tmp/tk-fuzz-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char bundle[64], root[64];
    snprintf(bundle, sizeof(bundle), "%s/b", dir);
    snprintf(root, sizeof(root), "%s/c", dir);
    FILE *f = fopen(bundle, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
        tk__cache_opts opts;
        memset(&opts, 0, sizeof(opts));
        opts.root = root;
        opts.lower = "";
        tk_cache *cache = NULL;
        if (tk__cache_open(&opts, &cache) == TK_OK) {
            (void)tk_cache_import(cache, bundle, NULL, NULL, NULL, NULL);
            uint64_t n;
            (void)tk_cache_clear(cache, &n);
            tk_cache_close(cache);
        }
        unlink(bundle);
    }
    char fmt[80];
    snprintf(fmt, sizeof(fmt), "%s/%d/locks", root, TK__CACHE_FORMAT);
    rmdir(fmt);
    snprintf(fmt, sizeof(fmt), "%s/%d", root, TK__CACHE_FORMAT);
    rmdir(fmt);
    rmdir(root);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse_entry(data, size);
    if (size >= 8 && memcmp(data, TK__BUNDLE_MAGIC, 8) == 0)
        import_bundle(data, size);
    return 0;
}

#ifdef TK_FUZZ_STANDALONE
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            continue;
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0, r;
        uint8_t chunk[65536];
        while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            if (len + r > cap) {
                cap = (len + r) * 2;
                uint8_t *nb = realloc(buf, cap);
                if (!nb)
                    abort();
                buf = nb;
            }
            memcpy(buf + len, chunk, r);
            len += r;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
        free(buf);
    }
    return 0;
}
#endif
