/*
 * Reliability: corrupted cache entries and bundles (no GPU).
 *
 * Seeds are real entries: the stub backend's (volume) and, where the
 * compilers are installed, hipRTC's gfx90a and NVRTC's sm_90 code objects.
 * From them come valid entries of many distinct keys, each planted corrupted
 * (tests/test_stress_mutate.h: bit flips anywhere, cuts at every structural
 * boundary, zeroed and inflated length fields, wrong versions, entries moved
 * to another key's path, empty files, folders, links and pipes). Every tool
 * command runs over each batch under a time limit, the library's lookup runs
 * over each variant under its own alarm, and --precompile repairs the
 * variants planted at its own keys. Figures are printed at the end.
 *
 * TK_STRESS_SCALE=N multiplies the trial counts; TK_STRESS_SEED replays.
 */
#include <setjmp.h>

#include "test_cli_common.h"
#include "test_stress_mutate.h"

#define CLI_LIMIT_S 120.0
#define LOOKUP_LIMIT_S 10

static const char stub_manifest_text[] = "arch stub\n"
                                         "softmax_f16_fwd rows=64 cols=64..2048:+64\n";
static const char real_manifest_text[] = "softmax_f16_fwd rows=4 cols=100\n"
                                         "embedding_f16_fwd V=100 D=64 Q=8\n";

typedef struct seeds {
    char *dir;       /* scratch: manifests */
    char *stub_root; /* the stub backend's cache of stub_manifest_text */
    blob_set stub;   /* its entries */
    blob_set real;   /* gfx90a / sm_90 entries, where the compilers are here */
    char manifest[PATH_MAX];
} seeds;

static void run_ok(run_result *r, const char *what)
{
    char why[512];
    ck_assert_msg(cli_contract(r, why, sizeof why) == 0, "%s: %s\nstderr: %.2000s", what, why,
                  r->err);
}

static void precompile_into(const char *root, const char *manifest, const char *arch, int must)
{
    run_result r;
    if (arch)
        cli_limit(600, &r, "--precompile", "--manifest", manifest, "--arch", arch, "-j", "2",
                  "--cache-dir", root, NULL);
    else
        cli_limit(600, &r, "--precompile", "--manifest", manifest, "-j", "2", "--cache-dir", root,
                  NULL);
    run_ok(&r, "seed precompile");
    if (must)
        ck_assert_msg(r.code == 0, "seed precompile: exit %d: %s", r.code, r.err);
    run_result_free(&r);
}

static void seeds_make(seeds *s, int with_real)
{
    memset(s, 0, sizeof *s);
    s->dir = tk_test_tmpdir("stress-seed");
    s->stub_root = tk_test_tmpdir("stress-seed-stub");
    snprintf(s->manifest, sizeof s->manifest, "%s/stub.tkm", s->dir);
    ck_assert_int_eq(
        tk_test_write_file(s->manifest, stub_manifest_text, strlen(stub_manifest_text)), 0);
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    precompile_into(s->stub_root, s->manifest, NULL, 1);
    read_cache_files(s->stub_root, &s->stub, NULL);
    ck_assert_uint_ge(s->stub.n, 16);
    unsetenv("TOKITAI_JIT_BACKEND");
    if (!with_real)
        return;
    char real[PATH_MAX];
    snprintf(real, sizeof real, "%s/real.tkm", s->dir);
    ck_assert_int_eq(tk_test_write_file(real, real_manifest_text, strlen(real_manifest_text)), 0);
    static const struct {
        const char *arch;
        tk_backend_kind kind;
    } targets[] = {{"gfx90a", TK_BACKEND_HIP}, {"sm_90", TK_BACKEND_CUDA}};
    for (size_t i = 0; i < 2; i++) {
        if (!target_available(targets[i].arch, targets[i].kind))
            continue;
        char *root = tk_test_tmpdir("stress-seed-real");
        precompile_into(root, real, targets[i].arch, 1);
        size_t before = s->real.n;
        read_cache_files(root, &s->real, NULL);
        printf("seed: %zu real %s entries\n", s->real.n - before, targets[i].arch);
        tk_test_rmtree(root);
        free(root);
    }
}

static void seeds_free(seeds *s)
{
    tk_test_rmtree(s->dir);
    tk_test_rmtree(s->stub_root);
    free(s->dir);
    free(s->stub_root);
    blob_set_free(&s->stub);
    blob_set_free(&s->real);
}

/* ------------------------------------------------- lookups under an alarm */

static sigjmp_buf g_jmp;

static void on_alarm(int sig)
{
    (void)sig;
    siglongjmp(g_jmp, 1);
}

/* TK_OK, TK_NOT_FOUND..., or -1 for a lookup that ran past the limit. */
static int timed_lookup(tk_cache *cache, const tk__key *key, tk__entry *out)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, &old);
    volatile int result = -1;
    if (sigsetjmp(g_jmp, 1) == 0) {
        alarm(LOOKUP_LIMIT_S);
        result = (int)tk__cache_get(cache, key, out);
        alarm(0);
    }
    sigaction(SIGALRM, &old, NULL);
    return result;
}

/* ------------------------------------------------------------ the figures */

typedef struct figures {
    uint64_t variants, per_kind[M_COUNT];
    uint64_t cli_runs, lookups, crashes, hangs, accepted, repaired, repair_tried;
    uint64_t verify_flagged, exported_controls;
} figures;

static void count_failure(figures *f, const run_result *r, const char *what, const char *root)
{
    char why[512];
    f->cli_runs++;
    if (cli_contract(r, why, sizeof why) != 0) {
        if (r->timed_out)
            f->hangs++;
        else
            f->crashes++;
        ck_abort_msg("%s over %s: %s\nstdout: %.1000s\nstderr: %.2000s", what, root, why, r->out,
                     r->err);
    }
}

/* Bundle records must each be byte-identical to one of want. */
static size_t check_bundle(const char *path, const blob_set *want)
{
    size_t size = 0;
    uint8_t *b = (uint8_t *)tk_test_read_file(path, &size);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ge(size, TK__BUNDLE_HEADER_SIZE);
    ck_assert_int_eq(memcmp(b, TK__BUNDLE_MAGIC, 8), 0);
    uint64_t count = get_le_n(b + 16, 8);
    size_t off = TK__BUNDLE_HEADER_SIZE;
    for (uint64_t i = 0; i < count; i++) {
        ck_assert_uint_le(off + 8, size);
        uint64_t len = get_le_n(b + off, 8);
        off += 8;
        ck_assert_uint_le(off + len, size);
        int found = 0;
        for (size_t j = 0; j < want->n && !found; j++)
            found = want->v[j].len == len && memcmp(want->v[j].bytes, b + off, len) == 0;
        ck_assert_msg(found, "bundle record %llu is not one of the good entries",
                      (unsigned long long)i);
        off += len;
    }
    ck_assert_uint_eq(off, size);
    free(b);
    return (size_t)count;
}

/* One batch: synthesized variants (lookups, listing, verify, export) plus a
 * variant at each of the stub manifest's own keys (repaired by --precompile). */
static void run_batch(const seeds *s, uint64_t first, int n_syn, rng *r, figures *f)
{
    char *root = tk_test_tmpdir("stress-batch");
    char *outside = tk_test_tmpdir("stress-outside");
    const int n_ctl = 3;
    tk__key *keys = calloc((size_t)n_syn + (size_t)n_ctl, sizeof *keys);
    blob_set controls = {0};
    ck_assert_ptr_nonnull(keys);
    size_t n_bases = s->stub.n + 2 * s->real.n; /* real code objects weigh double */

    for (int i = 0; i < n_syn + n_ctl; i++) {
        uint64_t v = first + (uint64_t)i;
        size_t bi = (size_t)(v % n_bases);
        const blob *base = bi < s->stub.n ? &s->stub.v[bi] : &s->real.v[(bi - s->stub.n) / 2];
        uint8_t *good = NULL, *other = NULL;
        size_t len = 0, other_len = 0;
        tk__key other_key;
        derive_entry(base, v, &keys[i], &good, &len);
        char path[PATH_MAX];
        entry_file_path(root, keys[i].hex, path, sizeof path);
        if (i >= n_syn) { /* a control: planted intact */
            write_at(path, good, len);
            blob_set_add(&controls, keys[i].hex, good, len);
        } else {
            derive_entry(base, v | (1ull << 62), &other_key, &other, &other_len);
            int kind = (int)(v % M_COUNT);
            plant_variant(path, kind, good, len, other, other_len, outside, r);
            f->per_kind[kind]++;
            f->variants++;
            tk__key_free(&other_key);
            free(other);
        }
        free(good);
    }
    /* The stub manifest's keys, each corrupted some way (not a folder: the
     * cache never removes a folder it did not make, so no store could land). */
    for (size_t i = 0; i < s->stub.n; i++) {
        char path[PATH_MAX];
        entry_file_path(root, s->stub.v[i].hex, path, sizeof path);
        tk__key ok;
        uint8_t *other = NULL;
        size_t other_len = 0;
        derive_entry(&s->stub.v[i], 1ull << 63, &ok, &other, &other_len);
        int kind;
        do
            kind = (int)rng_below(r, M_COUNT);
        while (kind == M_DIR);
        plant_variant(path, kind, s->stub.v[i].bytes, s->stub.v[i].len, other, other_len, outside,
                      r);
        f->per_kind[kind]++;
        f->variants++;
        tk__key_free(&ok);
        free(other);
    }
    size_t n_bad = (size_t)n_syn + s->stub.n;

    /* Read-only tools. */
    static const char *const ro[][3] = {{"--list", NULL, NULL},
                                        {"--list", "--verbose", NULL},
                                        {"--list", "--json", NULL},
                                        {"--stats", NULL, NULL},
                                        {"--stats", "--json", NULL}};
    for (size_t c = 0; c < sizeof ro / sizeof ro[0]; c++) {
        run_result rr;
        if (ro[c][1])
            cli_limit(CLI_LIMIT_S, &rr, ro[c][0], ro[c][1], "--cache-dir", root, NULL);
        else
            cli_limit(CLI_LIMIT_S, &rr, ro[c][0], "--cache-dir", root, NULL);
        count_failure(f, &rr, ro[c][0], root);
        ck_assert_msg(rr.code == 0, "%s %s: exit %d: %s", ro[c][0], ro[c][1] ? ro[c][1] : "",
                      rr.code, rr.err);
        if (ro[c][1] && strcmp(ro[c][1], "--json") == 0)
            ck_assert_msg(json_valid(rr.out), "%s --json: invalid JSON", ro[c][0]);
        run_result_free(&rr);
    }
    /* --verify names every variant and no control. */
    run_result rr;
    cli_limit(CLI_LIMIT_S, &rr, "--verify", "--cache-dir", root, NULL);
    count_failure(f, &rr, "--verify", root);
    ck_assert_int_eq(rr.code, CLI_FAIL);
    ck_assert_msg((size_t)count_substr(rr.err, "bad: ") == n_bad, "--verify flagged %d of %zu",
                  count_substr(rr.err, "bad: "), n_bad);
    for (size_t i = 0; i < controls.n; i++)
        ck_assert_msg(!strstr(rr.err, controls.v[i].hex + 2), "a good entry was flagged");
    f->verify_flagged += (uint64_t)count_substr(rr.err, "bad: ");
    run_result_free(&rr);
    /* --export ships exactly the controls. */
    char bundle[PATH_MAX];
    snprintf(bundle, sizeof bundle, "%s/b.tkb", outside);
    cli_limit(CLI_LIMIT_S, &rr, "--export", bundle, "--cache-dir", root, NULL);
    count_failure(f, &rr, "--export", root);
    ck_assert_msg(rr.code == 0, "--export: %s", rr.err);
    run_result_free(&rr);
    size_t exported = check_bundle(bundle, &controls);
    f->accepted += exported > controls.n ? exported - controls.n : 0;
    ck_assert_uint_eq(exported, controls.n);
    f->exported_controls += exported;

    /* --precompile repairs its own keys. */
    setenv("TOKITAI_JIT_BACKEND", "stub", 1);
    cli_limit(CLI_LIMIT_S, &rr, "--precompile", "--manifest", s->manifest, "-j", "2", "--cache-dir",
              root, NULL);
    unsetenv("TOKITAI_JIT_BACKEND");
    count_failure(f, &rr, "--precompile", root);
    ck_assert_msg(rr.code == 0, "--precompile over corrupt entries: exit %d\n%s\n%s", rr.code,
                  rr.out, rr.err);
    run_result_free(&rr);
    for (size_t i = 0; i < s->stub.n; i++) {
        char path[PATH_MAX];
        entry_file_path(root, s->stub.v[i].hex, path, sizeof path);
        struct stat st;
        size_t len = 0;
        f->repair_tried++;
        ck_assert_msg(lstat(path, &st) == 0 && S_ISREG(st.st_mode), "%s not repaired", path);
        uint8_t *b = (uint8_t *)tk_test_read_file(path, &len);
        tk__entry_view v;
        const char *why;
        char fp[33] = "";
        if (tk__entry_parse(b, len, 1, &v, &why) == TK_OK)
            tk__fp_hex(v.fp_hi, v.fp_lo, fp);
        ck_assert_msg(strcmp(fp, s->stub.v[i].hex) == 0, "%s not repaired", path);
        free(b);
        f->repaired++;
    }

    /* --prune keeps the good entries. */
    cli_limit(CLI_LIMIT_S, &rr, "--prune", "--cache-dir", root, NULL);
    count_failure(f, &rr, "--prune", root);
    ck_assert_msg(rr.code == 0, "--prune: %s", rr.err);
    run_result_free(&rr);

    /* The library: every variant a miss, every control a hit. */
    tk__cache_opts o;
    memset(&o, 0, sizeof o);
    o.root = root;
    o.lower = "";
    tk_cache *cache = NULL;
    tk_assert_status(tk__cache_open(&o, &cache), TK_OK);
    for (int i = 0; i < n_syn + n_ctl; i++) {
        tk__entry e;
        memset(&e, 0, sizeof e);
        int st = timed_lookup(cache, &keys[i], &e);
        f->lookups++;
        if (st < 0) {
            f->hangs++;
            ck_abort_msg("lookup of %s ran past %d s", keys[i].hex, LOOKUP_LIMIT_S);
        }
        if (i < n_syn && st == TK_OK)
            f->accepted++;
        ck_assert_msg(i < n_syn ? st == TK_NOT_FOUND : st == TK_OK, "lookup %d (%s): %s", i,
                      i < n_syn ? "variant" : "control", tk_status_str((tk_status)st));
        if (st == TK_OK) {
            tk__entry_view v;
            const char *why;
            const blob *c = &controls.v[i - n_syn];
            ck_assert_int_eq(tk__entry_parse(c->bytes, c->len, 1, &v, &why), TK_OK);
            ck_assert_uint_eq(e.payload_size, v.payload_size);
            void *code = malloc(v.payload_size ? (size_t)v.payload_size : 1);
            ck_assert_int_eq(tk__entry_payload(&v, code), TK_OK);
            ck_assert_int_eq(memcmp(e.payload, code, e.payload_size), 0);
            free(code);
        }
        tk__entry_free(&e);
    }
    tk_cache_close(cache);
    /* After the lookups removed what they could: still a defined answer. */
    cli_limit(CLI_LIMIT_S, &rr, "--verify", "--cache-dir", root, NULL);
    count_failure(f, &rr, "--verify", root);
    run_result_free(&rr);

    for (int i = 0; i < n_syn + n_ctl; i++)
        tk__key_free(&keys[i]);
    free(keys);
    blob_set_free(&controls);
    tk_test_rmtree(root);
    tk_test_rmtree(outside);
    free(root);
    free(outside);
}

START_TEST(test_corrupt_entries)
{
    seeds s;
    seeds_make(&s, 1);
    const uint64_t target = 10000ull * (uint64_t)stress_scale();
    const int n_syn = 250;
    rng r = {stress_seed()};
    figures f;
    memset(&f, 0, sizeof f);
    double t0 = now_s();
    uint64_t first = 0;
    while (f.variants < target) {
        run_batch(&s, first, n_syn, &r, &f);
        first += (uint64_t)n_syn + 3;
    }
    printf("FIGURE corrupt-entries: %llu variants (%zu stub seeds, %zu real gfx90a/sm_90 seeds), "
           "%llu tool runs, %llu library lookups: %llu crashes, %llu hangs, %llu corrupt "
           "accepted, %llu/%llu repaired by --precompile, %llu flagged by --verify, %.1f s\n",
           (unsigned long long)f.variants, s.stub.n, s.real.n, (unsigned long long)f.cli_runs,
           (unsigned long long)f.lookups, (unsigned long long)f.crashes,
           (unsigned long long)f.hangs, (unsigned long long)f.accepted,
           (unsigned long long)f.repaired, (unsigned long long)f.repair_tried,
           (unsigned long long)f.verify_flagged, now_s() - t0);
    printf("  per kind:");
    for (int k = 0; k < M_COUNT; k++)
        printf(" %s=%llu", mutation_names[k], (unsigned long long)f.per_kind[k]);
    printf("\n");
    fflush(stdout);
    ck_assert_uint_eq(f.crashes + f.hangs + f.accepted, 0);
    ck_assert_uint_eq(f.repaired, f.repair_tried);
    seeds_free(&s);
}
END_TEST

/* ---------------------------------------------------------------- bundles */

enum bundle_mutation {
    B_FLIPS,
    B_TRUNC_RANDOM,
    B_TRUNC_RECORD,
    B_COUNT_FIELD,
    B_RECORD_LEN,
    B_MAGIC_VERSION,
    B_ENTRY_CORRUPT,
    B_DUPLICATE,
    B_SWAP,
    B_GARBAGE,
    B_KINDS
};

static const char *const bundle_names[B_KINDS] = {
    "flips",         "trunc-random",  "trunc-record", "count-field", "record-length",
    "magic-version", "entry-corrupt", "duplicate",    "swap",        "garbage"};

/* Record offsets (of each u64 length field) of a well-formed bundle. */
static size_t record_offsets(const uint8_t *b, size_t size, size_t *offs, size_t max)
{
    size_t n = 0, off = TK__BUNDLE_HEADER_SIZE;
    while (off + 8 <= size && n < max) {
        offs[n++] = off;
        off += 8 + (size_t)get_le_n(b + off, 8);
    }
    return n;
}

static uint8_t *mutate_bundle(const uint8_t *in, size_t size, int kind, rng *r, size_t *out_len)
{
    uint8_t *b = malloc(2 * size + 256);
    ck_assert_ptr_nonnull(b);
    memcpy(b, in, size);
    size_t n = size;
    size_t offs[256];
    size_t nr = record_offsets(in, size, offs, 256);
    ck_assert_uint_ge(nr, 2);
    size_t ri = (size_t)rng_below(r, nr);
    switch (kind) {
    case B_FLIPS: {
        int k = 1 + (int)rng_below(r, 8);
        for (int i = 0; i < k; i++)
            b[rng_below(r, n)] ^= (uint8_t)(1u << rng_below(r, 8));
        break;
    }
    case B_TRUNC_RANDOM:
        n = (size_t)rng_below(r, size);
        break;
    case B_TRUNC_RECORD: {
        long d = (long)rng_below(r, 17) - 8;
        long at = (long)offs[ri] + (rng_below(r, 2) ? 8 : 0) + d;
        n = at < 0 ? 0 : (size_t)at >= size ? size - 1 : (size_t)at;
        break;
    }
    case B_COUNT_FIELD: {
        static const uint64_t cs[] = {0, 1, UINT64_MAX, (uint64_t)1 << 63, 0xffffffffu};
        uint64_t c = get_le_n(b + 16, 8);
        uint64_t pick = rng_below(r, 7);
        put_le_n(b + 16, pick < 5 ? cs[pick] : pick == 5 ? c + 1 : c - 1, 8);
        break;
    }
    case B_RECORD_LEN: {
        uint64_t l = get_le_n(b + offs[ri], 8);
        static const uint64_t ls[] = {0, 1, UINT64_MAX, (uint64_t)1 << 63, ((uint64_t)1 << 31) + 1};
        uint64_t pick = rng_below(r, 8);
        put_le_n(b + offs[ri],
                 pick < 5    ? ls[pick]
                 : pick == 5 ? l + 1
                 : pick == 6 ? l - 1
                             : l + 64,
                 8);
        break;
    }
    case B_MAGIC_VERSION:
        if (rng_below(r, 2))
            b[rng_below(r, 8)] ^= (uint8_t)(1u + rng_below(r, 255));
        else
            put_le_n(b + 8, TK__CACHE_FORMAT + 1 + rng_below(r, 1000), 4);
        break;
    case B_ENTRY_CORRUPT: {
        uint64_t l = get_le_n(b + offs[ri], 8);
        uint8_t *e = b + offs[ri] + 8;
        int which = (int)rng_below(r, 3);
        if (which == 0)
            e[rng_below(r, l)] ^= (uint8_t)(1u << rng_below(r, 8));
        else if (which == 1) {
            put_le_n(e + 16 + 4 * rng_below(r, 2), (uint64_t)rng_next(r) & 0xffff, 4);
            refix_hashes(e, (size_t)l);
        } else {
            put_le_n(e + 8, TK__CACHE_FORMAT + 1, 4);
            refix_hashes(e, (size_t)l);
        }
        break;
    }
    case B_DUPLICATE: {
        uint64_t l = get_le_n(b + offs[ri], 8);
        memcpy(b + n, in + offs[ri], 8 + (size_t)l);
        n += 8 + (size_t)l;
        put_le_n(b + 16, get_le_n(b + 16, 8) + 1, 8);
        break;
    }
    case B_SWAP: {
        /* The first two records exchanged: still a well-formed bundle. */
        size_t l0 = offs[1] - offs[0], l1 = (nr > 2 ? offs[2] : size) - offs[1];
        memcpy(b + offs[0], in + offs[1], l1);
        memcpy(b + offs[0] + l1, in + offs[0], l0);
        break;
    }
    case B_GARBAGE: {
        size_t at = (size_t)rng_below(r, n), k = 1 + (size_t)rng_below(r, 200);
        memmove(b + at + k, b + at, n - at);
        for (size_t i = 0; i < k; i++)
            b[at + i] = (uint8_t)rng_next(r);
        n += k;
        break;
    }
    default:
        ck_abort_msg("unknown bundle mutation %d", kind);
    }
    *out_len = n;
    return b;
}

START_TEST(test_corrupt_bundles)
{
    seeds s;
    seeds_make(&s, 1);
    char *src = tk_test_tmpdir("stress-bsrc");
    char *dir = tk_test_tmpdir("stress-bdir");
    /* The bundle: up to 12 stub entries and every real one. */
    blob_set originals = {0};
    for (size_t i = 0; i < s.stub.n && i < 12; i++)
        blob_set_add(&originals, s.stub.v[i].hex, s.stub.v[i].bytes, s.stub.v[i].len);
    for (size_t i = 0; i < s.real.n; i++)
        blob_set_add(&originals, s.real.v[i].hex, s.real.v[i].bytes, s.real.v[i].len);
    for (size_t i = 0; i < originals.n; i++) {
        char path[PATH_MAX];
        entry_file_path(src, originals.v[i].hex, path, sizeof path);
        write_at(path, originals.v[i].bytes, originals.v[i].len);
    }
    char bundle[PATH_MAX], mutated[PATH_MAX], root[PATH_MAX];
    snprintf(bundle, sizeof bundle, "%s/good.tkb", dir);
    snprintf(mutated, sizeof mutated, "%s/bad.tkb", dir);
    snprintf(root, sizeof root, "%s/cache", dir);
    run_result rr;
    cli_limit(CLI_LIMIT_S, &rr, "--export", bundle, "--cache-dir", src, NULL);
    ck_assert_msg(rr.code == 0, "--export: %s", rr.err);
    run_result_free(&rr);
    size_t size = 0;
    uint8_t *good = (uint8_t *)tk_test_read_file(bundle, &size);
    ck_assert_ptr_nonnull(good);

    const uint64_t target = 2000ull * (uint64_t)stress_scale();
    rng r = {stress_seed() ^ 0xb0b};
    uint64_t per_kind[B_KINDS] = {0}, runs = 0, crashes = 0, hangs = 0, bad_entered = 0;
    uint64_t accepted_entries = 0, fully_refused = 0, rc_fail = 0;
    double t0 = now_s();
    for (uint64_t t = 0; t < target; t++) {
        int kind = (int)(t % B_KINDS);
        size_t n = 0;
        uint8_t *b = mutate_bundle(good, size, kind, &r, &n);
        ck_assert_int_eq(tk_test_write_file(mutated, b, n), 0);
        free(b);
        per_kind[kind]++;
        cli_limit(CLI_LIMIT_S, &rr, "--import", mutated, "--cache-dir", root, NULL);
        runs++;
        char why[512];
        if (cli_contract(&rr, why, sizeof why) != 0) {
            rr.timed_out ? hangs++ : crashes++;
            ck_abort_msg("--import of variant %llu (%s): %s\n%s", (unsigned long long)t,
                         bundle_names[kind], why, rr.err);
        }
        rc_fail += rr.code != 0;
        /* Nothing but byte-identical originals, at their own key's path. */
        blob_set in = {0};
        int others = read_cache_files(root, &in, NULL);
        ck_assert_msg(others == 0, "variant %llu left %d stray files", (unsigned long long)t,
                      others);
        for (size_t i = 0; i < in.n; i++) {
            int same = 0;
            for (size_t j = 0; j < originals.n && !same; j++)
                same = strcmp(in.v[i].hex, originals.v[j].hex) == 0 &&
                       in.v[i].len == originals.v[j].len &&
                       memcmp(in.v[i].bytes, originals.v[j].bytes, in.v[i].len) == 0;
            if (!same)
                bad_entered++;
        }
        ck_assert_msg(bad_entered == 0, "variant %llu (%s) let a bad entry in",
                      (unsigned long long)t, bundle_names[kind]);
        if (rr.code == 0 || strstr(rr.out, "imported ")) {
            char want[64];
            snprintf(want, sizeof want, "imported %zu entr", in.n);
            ck_assert_msg(strstr(rr.out, want), "variant %llu: %zu in the cache, stdout %s",
                          (unsigned long long)t, in.n, rr.out);
        }
        accepted_entries += in.n;
        fully_refused += in.n == 0;
        blob_set_free(&in);
        run_result_free(&rr);
        tk_test_rmtree(root);
    }
    printf("FIGURE corrupt-bundles: %llu mutated bundles of %zu entries through --import: %llu "
           "crashes, %llu hangs, %llu bad entries let in; %llu good entries accepted "
           "(byte-identical), %llu bundles refused whole, %llu runs exit 1, %.1f s\n",
           (unsigned long long)runs, originals.n, (unsigned long long)crashes,
           (unsigned long long)hangs, (unsigned long long)bad_entered,
           (unsigned long long)accepted_entries, (unsigned long long)fully_refused,
           (unsigned long long)rc_fail, now_s() - t0);
    printf("  per kind:");
    for (int k = 0; k < B_KINDS; k++)
        printf(" %s=%llu", bundle_names[k], (unsigned long long)per_kind[k]);
    printf("\n");
    fflush(stdout);
    free(good);
    blob_set_free(&originals);
    tk_test_rmtree(src);
    tk_test_rmtree(dir);
    free(src);
    free(dir);
    seeds_free(&s);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("stress_corrupt");
    TCase *tc = tcase_create("corrupt");
    tcase_set_timeout(tc, 1500);
    tcase_add_test(tc, test_corrupt_entries);
    tcase_add_test(tc, test_corrupt_bundles);
    suite_add_tcase(suite, tc);
    return tk_test_main(suite);
}
