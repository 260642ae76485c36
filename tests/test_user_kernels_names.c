/*
 * User kernels named as written: a plain name finds an extern "C" function
 * and a C++ one alike with one compile, comes back from disk by its stored
 * symbol with none, and shows in listings as written; a name found nowhere
 * or overloaded fails with the kernels the code object holds ("did you
 * mean"); the parameter layout the compiler records (tk_kernel_get_params).
 * With the stub backend, then offline with NVRTC (sm_90) and hipRTC
 * (gfx90a); a compiler that is not installed skips its tests with a note.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/decl.h"
#include "jit/jit_internal.h"
#include "jit/symbols.h"
#include "tk_test.h"

static char *g_dir;

static void setup(void)
{
    g_dir = tk_test_tmpdir("ukn_cache");
}

static void teardown(void)
{
    tk_test_rmtree(g_dir);
    free(g_dir);
}

static tk_context *context(tk_backend_kind kind, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_backend(cfg, kind), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    if (target)
        tk_assert_status(tk_config_set_target(cfg, target), TK_OK);
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    ck_assert_msg(st == TK_OK, "context: %s: %s", tk_status_str(st), err);
    return ctx;
}

static int available(tk_backend_kind kind, const char *target)
{
    tk_config *cfg = NULL;
    tk_context *ctx = NULL;
    char err[1024];
    if (tk_config_create(&cfg) != TK_OK || tk_config_set_backend(cfg, kind) != TK_OK ||
        tk_config_set_target(cfg, target) != TK_OK || tk_config_set_cache_disabled(cfg, 1) != TK_OK)
        return 0;
    tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
    tk_config_destroy(cfg);
    tk_context_destroy(ctx);
    if (st != TK_OK)
        printf("note: %s for %s unavailable, its tests skip: %s\n",
               kind == TK_BACKEND_CUDA ? "NVRTC" : "hipRTC", target, err);
    return st == TK_OK;
}

static uint64_t compiles(tk_context *ctx)
{
    tk_context_stats s = TK_STRUCT_INIT(tk_context_stats);
    tk_assert_status(tk_context_get_stats(ctx, &s), TK_OK);
    return s.compiles;
}

static tk_kernel *get_ok(tk_context *ctx, const char *source, const char *entry)
{
    tk_kernel_desc d = {.source = source, .entry = entry};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == TK_OK, "%s: %s: %s", entry, tk_status_str(st), tk_context_last_error(ctx));
    return k;
}

/* The message of a failing get. */
static const char *get_fails(tk_context *ctx, const char *source, const char *entry, tk_status want)
{
    tk_kernel_desc d = {.source = source, .entry = entry};
    tk_kernel *k = NULL;
    tk_status st = tk_kernel_get(ctx, &d, &k);
    ck_assert_msg(st == want, "%s: got %s, want %s: %s", entry, tk_status_str(st),
                  tk_status_str(want), tk_context_last_error(ctx));
    return tk_context_last_error(ctx);
}

static void expect_in(const char *hay, const char *needle)
{
    ck_assert_msg(strstr(hay, needle) != NULL, "expected '%s' in: %s", needle, hay);
}

typedef struct want_param {
    uint32_t offset, size;
    int kind;
} want_param;

static void expect_params(const tk_kernel *k, const want_param *want, size_t n)
{
    tk_kernel_params p = TK_STRUCT_INIT(tk_kernel_params);
    tk_assert_status(tk_kernel_get_params(k, &p), TK_OK);
    ck_assert_uint_eq(p.struct_size, sizeof p);
    ck_assert_uint_eq(p.n_params, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(p.params[i].offset == want[i].offset && p.params[i].size == want[i].size &&
                          p.params[i].kind == want[i].kind,
                      "param %zu: offset %u size %u kind %d, want %u %u %d", i, p.params[i].offset,
                      p.params[i].size, p.params[i].kind, want[i].offset, want[i].size,
                      want[i].kind);
    }
}

typedef struct listed {
    char kernels[1024];
} listed;

static int on_entry(void *user, const tk_cache_entry_info *info)
{
    listed *l = user;
    snprintf(l->kernels + strlen(l->kernels), sizeof l->kernels - strlen(l->kernels), "[%s]",
             info->kernel);
    return 0;
}

/* The cache lists exactly these names (each "[name]"), in any order. */
static void expect_listed(const char *const *names, size_t n)
{
    tk_config *cfg = NULL;
    tk_cache *cache = NULL;
    tk_assert_status(tk_config_create(&cfg), TK_OK);
    tk_assert_status(tk_config_set_cache_dir(cfg, g_dir), TK_OK);
    tk_assert_status(tk_cache_open(cfg, &cache), TK_OK);
    listed l = {""};
    tk_assert_status(tk_cache_list(cache, on_entry, &l), TK_OK);
    size_t count = 0;
    for (const char *c = l.kernels; (c = strchr(c, '[')) != NULL; c++)
        count++;
    ck_assert_msg(count == n, "listed %s", l.kernels);
    for (size_t i = 0; i < n; i++) {
        char want[256];
        snprintf(want, sizeof want, "[%s]", names[i]);
        expect_in(l.kernels, want);
    }
    tk_cache_close(cache);
    tk_config_destroy(cfg);
}

/* ------------------------------------------------------------ demangler */

START_TEST(test_demangler)
{
    static const struct {
        const char *in, *out;
        int kinds[10];
        size_t n;
    } cases[] = {
        {"_Z25layernorm_forward_kernel3PfS_S_PKfS1_S1_ii",
         "layernorm_forward_kernel3(float*, float*, float*, const float*, const float*, const "
         "float*, int, int)",
         {1, 1, 1, 1, 1, 1, 2, 2},
         8},
        {"_Z3foocsixPf3S163S122S3dPKf",
         "foo(char, short, int, long long, float*, S16, S12, S3, double, const float*)",
         {2, 2, 2, 2, 1, 5, 5, 5, 4, 1},
         10},
        {"_Z4fillILi4EfEvPT0_", "fill<4, float>(float*)", {1}, 1},
        {"_ZN2ns4gemmILi128ELb1EEEvPf", "ns::gemm<128, true>(float*)", {1}, 1},
        {"_ZN2ns1kEPNS_3FooES1_", "ns::k(ns::Foo*, ns::Foo*)", {1, 1}, 2},
        {"_Z1kv", "k()", {0}, 0},
        {"_Z5adamwPfS_mfy6__half",
         "adamw(float*, float*, unsigned long, float, unsigned long long, __half)",
         {1, 1, 3, 4, 3, 4},
         6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[512];
        tk__demangle(cases[i].in, buf, sizeof buf);
        ck_assert_str_eq(buf, cases[i].out);
        int kinds[16];
        size_t n = 99;
        ck_assert_int_eq(tk__demangle_kinds(cases[i].in, kinds, 16, &n), 1);
        ck_assert_uint_eq(n, cases[i].n);
        for (size_t j = 0; j < n; j++)
            ck_assert_int_eq(kinds[j], cases[i].kinds[j]);
    }
    /* Not mangled, or beyond the subset: shown as is, no kinds. */
    const char *raw[] = {"plain_c_name", "_Z", "_Z3fooPFviE", "_Z999x", "_ZN3fooE"};
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        char buf[64];
        int kinds[4];
        size_t n = 0;
        tk__demangle(raw[i], buf, sizeof buf);
        ck_assert_str_eq(buf, raw[i]);
        ck_assert_int_eq(tk__demangle_kinds(raw[i], kinds, 4, &n), 0);
    }
    char base[64];
    tk__symbol_base("_ZN2ns4gemmILi128ELb1EEEvPf", base, sizeof base);
    ck_assert_str_eq(base, "gemm");
    tk__symbol_base("plain", base, sizeof base);
    ck_assert_str_eq(base, "plain");
}
END_TEST

/* ------------------------------------------------- declarations in source */

enum {
    U = TK_PARAM_UNKNOWN,
    P = TK_PARAM_POINTER,
    I = TK_PARAM_INT,
    UI = TK_PARAM_UINT,
    F = TK_PARAM_FLOAT,
    S = TK_PARAM_STRUCT
};

/* tk__decl_kinds on one text: the number of declarations used and the kinds. */
static void expect_decl(const char *text, const tk__decl_macro *macros, size_t n_macros,
                        const char *name, const uint32_t *sizes, size_t n, size_t want_used,
                        const int *want)
{
    int kinds[32];
    const char *texts[] = {text};
    ck_assert_uint_le(n, sizeof kinds / sizeof kinds[0]);
    size_t used = tk__decl_kinds(texts, 1, macros, n_macros, name, sizes, n, kinds);
    ck_assert_msg(used == want_used, "%s: used %zu declarations, want %zu", name, used, want_used);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(kinds[i] == want[i], "%s: param %zu: kind %d, want %d", name, i, kinds[i],
                      want[i]);
}

START_TEST(test_decl_kinds)
{
    const char *src =
        "typedef long long i64;\n"
        "using u32 = unsigned;\n"
        "#define REAL float\n"
        "struct __align__(8) Pair { float a, b; };\n"
        "typedef struct { float a, b, c; } Trip;\n"
        "// __global__ void all(int a);  (a comment is no declaration)\n"
        "const char *s = \"__global__ void all(double)\";\n"
        "extern \"C\" __global__ void __launch_bounds__(256, 2)\n"
        "all(float *__restrict__ out, const float * /* why */ in, int n, float f, double d,\n"
        "    i64 l, Pair p, Trip t, float4 v, u32 u, REAL r, unsigned char c, bool b,\n"
        "    std::size_t z, __half h, signed short ss, float arr[], __grid_constant__ const Pair "
        "g)\n"
        "{ }\n";
    const uint32_t sizes[] = {8, 8, 4, 4, 8, 8, 8, 12, 16, 4, 4, 1, 1, 8, 2, 2, 8, 8};
    const int want[] = {P, P, I, F, F, I, S, S, S, UI, F, UI, UI, UI, F, I, P, S};
    expect_decl(src, NULL, 0, "all", sizes, 18, 1, want);
    expect_decl(src, NULL, 0, "::all", sizes, 18, 1, want);

    /* A size the object contradicts, or another count: not that declaration. */
    const uint32_t wrong[] = {8, 8, 8};
    const int none[] = {U, U, U};
    expect_decl("extern \"C\" __global__ void k(float *x, int n, float f) {}", NULL, 0, "k", wrong,
                3, 0, none);
    expect_decl("extern \"C\" __global__ void k(float *x, int n) {}", NULL, 0, "k", wrong, 3, 0,
                none);
    /* Declarations that disagree (#if branches) leave that parameter unknown. */
    const uint32_t s3[] = {8, 4, 4};
    const int first_two[] = {P, I, U};
    expect_decl("#ifdef A\n__global__ void k(float *x, int n, float f);\n#else\n"
                "__global__ void k(float *x, int n, int f);\n#endif\n",
                NULL, 0, "k", s3, 3, 2, first_two);
    /* So do aliases that disagree, references, templates, enums, unknown names. */
    const uint32_t s5[] = {4, 8, 8, 4, 2};
    const int unknowns[] = {U, U, U, U, U};
    expect_decl("#if X\ntypedef float real;\n#else\ntypedef int real;\n#endif\n"
                "template <typename T> struct Box { T v; }; enum E { A };\n"
                "__global__ void k(real r, const Pair &p, Box<float> b, E e, __nv_bfloat16 h) {}\n",
                NULL, 0, "k", s5, 5, 1, unknowns);
    /* The given macros (-D) come before the source's #define. */
    const tk__decl_macro m[] = {{"T", "double"}, {"FLAG", NULL}};
    const uint32_t s2[] = {8, 8};
    const int dd[] = {F, P};
    expect_decl("#ifndef T\n#define T float\n#endif\n__global__ void k(T a, T *b) {}", m, 2, "k",
                s2, 2, 1, dd);
    const int uu[] = {U, U};
    expect_decl("#ifndef T\n#define T float\n#endif\n__global__ void k(T a, T *b) {}", NULL, 0, "k",
                s2, 2, 0, uu); /* float is 4 bytes, not 8: that declaration is not used */
    /* No parameters; a name expression is not looked up. */
    expect_decl("__global__ void k(void) {}", NULL, 0, "k", NULL, 0, 1, NULL);
    expect_decl("__global__ void k(float *x) {}", NULL, 0, "fill<4, float>", s2, 1, 0, uu);
    /* Variadic or unterminated: nothing. */
    expect_decl("__global__ void k(float *x, ...) {}", NULL, 0, "k", s2, 1, 0, uu);
    expect_decl("__global__ void k(float *x", NULL, 0, "k", s2, 1, 0, uu);
}
END_TEST

/* ----------------------------------------------------------------- stub */

static const char *const k_stub_src =
    "__global__ void scale(float *x, int n) { }\n"
    "extern \"C\" __global__ void ext(const float *x, char c, short s, double d, __half h) { }\n"
    "__global__ void ov(float *x) { }\n"
    "__global__ void ov(int *x) { }\n";

START_TEST(test_stub_cpp_name_one_compile_then_disk)
{
    tk_context *ctx = context(TK_BACKEND_STUB, NULL);
    tk_kernel *k = get_ok(ctx, k_stub_src, "scale");
    ck_assert_uint_eq(compiles(ctx), 1);
    ck_assert_str_eq(k->symbol, "_Z5scalePfi");
    tk_kernel *e = get_ok(ctx, k_stub_src, "ext");
    ck_assert_ptr_null(e->symbol); /* extern "C": the name itself */
    ck_assert_uint_eq(compiles(ctx), 2);
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    float x = 0, *px = &x;
    int n = 1;
    void *args[] = {&px, &n};
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, args), TK_OK);
    tk_context_destroy(ctx);

    /* A new process: from disk by the stored symbol, no compile. */
    ctx = context(TK_BACKEND_STUB, NULL);
    k = get_ok(ctx, k_stub_src, "scale");
    ck_assert_uint_eq(compiles(ctx), 0);
    ck_assert_str_eq(k->symbol, "_Z5scalePfi");
    tk_kernel_info info = TK_STRUCT_INIT(tk_kernel_info);
    tk_assert_status(tk_kernel_get_info(k, &info), TK_OK);
    ck_assert_int_eq(info.origin, TK_ORIGIN_DISK);
    ck_assert_str_eq(info.entry, "scale");
    tk_assert_status(tk_kernel_launch(ctx, k, grid, block, 0, NULL, args), TK_OK);
    tk_context_destroy(ctx);
    /* Listings show the names as the user wrote them. */
    const char *names[] = {"ext", "scale"};
    expect_listed(names, 2);
}
END_TEST

START_TEST(test_stub_params)
{
    tk_context *ctx = context(TK_BACKEND_STUB, NULL);
    tk_kernel *k = get_ok(ctx, k_stub_src, "scale");
    const want_param scale[] = {{0, 8, TK_PARAM_POINTER}, {8, 4, TK_PARAM_INT}};
    expect_params(k, scale, 2);
    tk_kernel *e = get_ok(ctx, k_stub_src, "ext");
    const want_param ext[] = {{0, 8, TK_PARAM_POINTER},
                              {8, 1, TK_PARAM_INT},
                              {10, 2, TK_PARAM_INT},
                              {16, 8, TK_PARAM_FLOAT},
                              {24, 2, TK_PARAM_FLOAT}};
    expect_params(e, ext, 5);
    /* The same array on a second call. */
    tk_kernel_params a = TK_STRUCT_INIT(tk_kernel_params), b = TK_STRUCT_INIT(tk_kernel_params);
    tk_assert_status(tk_kernel_get_params(e, &a), TK_OK);
    tk_assert_status(tk_kernel_get_params(e, &b), TK_OK);
    ck_assert_ptr_eq(a.params, b.params);
    /* Sized-struct rules. */
    tk_kernel_params zero;
    memset(&zero, 0, sizeof zero);
    tk_assert_status(tk_kernel_get_params(e, &zero), TK_INVALID_ARGUMENT);
    tk_assert_status(tk_kernel_get_params(NULL, &a), TK_INVALID_ARGUMENT);
    struct {
        size_t struct_size;
        size_t n_params;
    } old = {sizeof old, 0};
    tk_assert_status(tk_kernel_get_params(e, (tk_kernel_params *)&old), TK_OK);
    ck_assert_uint_eq(old.struct_size, sizeof old);
    ck_assert_uint_eq(old.n_params, 5);
    tk_context_destroy(ctx);

    /* From disk (no compiler), the same layout. */
    ctx = context(TK_BACKEND_STUB, NULL);
    k = get_ok(ctx, k_stub_src, "scale");
    ck_assert_uint_eq(compiles(ctx), 0);
    expect_params(k, scale, 2);
    tk_context_destroy(ctx);
}
END_TEST

START_TEST(test_stub_missing_and_overloaded)
{
    tk_context *ctx = context(TK_BACKEND_STUB, NULL);
    /* (The stub finds a symbol anywhere in its text, as a substring: the
     * misspelling is not one.) */
    const char *msg = get_fails(ctx, k_stub_src, "scalx", TK_NOT_FOUND);
    expect_in(msg, "kernel scalx is not in the code compiled from user:");
    expect_in(msg, "did you mean scale(float*, int)?");
    expect_in(msg, "its kernels: scale(float*, int), ext, ov(float*), ov(int*)");
    /* One compile as the engine counts it (NVRTC and hipRTC compile a
     * second time inside it, without the name, to list the kernels). */
    ck_assert_uint_eq(compiles(ctx), 1);
    msg = get_fails(ctx, k_stub_src, "zzzzzz", TK_NOT_FOUND);
    ck_assert_ptr_null(strstr(msg, "did you mean"));
    expect_in(msg, "its kernels: scale(float*, int)");
    msg = get_fails(ctx, k_stub_src, "ov", TK_NOT_FOUND);
    expect_in(msg, "the name is overloaded (");
    expect_in(msg, "static_cast<void (*)(float*)>(ov)");
    msg = get_fails(ctx, "int not_a_kernel;\n", "nope", TK_NOT_FOUND);
    expect_in(msg, "it contains no kernel");
    tk_context_destroy(ctx);
    expect_listed(NULL, 0); /* nothing stored */
}
END_TEST

/* ------------------------------------------------- NVRTC and hipRTC offline */

/* llm.c-style kernels: C++ functions, not extern "C". */
static const char *const k_rtc_src =
    "struct S12 { float a, b, c; };\n"
    "__global__ void layernorm_forward_kernel3(float *out, float *mean, float *rstd,\n"
    "                                          const float *inp, const float *weight,\n"
    "                                          const float *bias, int N, int C)\n"
    "{ if (N > 0) out[0] = inp[0] * weight[0] + bias[0] + C; mean[0] = rstd[0]; }\n"
    "__global__ void sizes(char c, short s, int i, long long l, float f, double d, S12 y,\n"
    "                      unsigned char u, float *p)\n"
    "{ p[0] = c + s + i + l + f + d + y.c + u; }\n"
    "extern \"C\" __global__ void ext_sizes(char c, long long l, float *p, double d)\n"
    "{ p[0] = c + l + d; }\n"
    "typedef long long i64;\n"
    "#ifdef WIDE\ntypedef double real;\n#else\ntypedef float real;\n#endif\n"
    "extern \"C\" __global__ void __launch_bounds__(128)\n"
    "ext_all(float *__restrict__ out, int n, float f, double d, i64 l, S12 s, const float *in,\n"
    "        unsigned u, real r)\n"
    "{ out[0] = n + f + d + l + s.b + in[0] + u + r; }\n"
    "__global__ void ov(float *x) { x[0] = 1; }\n"
    "__global__ void ov(int *x) { x[0] = 1; }\n";

static void rtc_names(tk_backend_kind kind, const char *target)
{
    if (!available(kind, target))
        return;
    int amd = kind == TK_BACKEND_HIP;
    tk_context *ctx = context(kind, target);
    tk_kernel *k = get_ok(ctx, k_rtc_src, "layernorm_forward_kernel3");
    ck_assert_uint_eq(compiles(ctx), 1);
    ck_assert_str_eq(k->symbol, "_Z25layernorm_forward_kernel3PfS_S_PKfS1_S1_ii");
    want_param ln[8];
    for (int i = 0; i < 6; i++)
        ln[i] = (want_param){(uint32_t)(8 * i), 8, TK_PARAM_POINTER};
    ln[6] = (want_param){48, 4, TK_PARAM_INT};
    ln[7] = (want_param){52, 4, TK_PARAM_INT};
    expect_params(k, ln, 8);

    tk_kernel *s = get_ok(ctx, k_rtc_src, "sizes");
    const want_param sz[] = {
        {0, 1, TK_PARAM_INT},      {2, 2, TK_PARAM_INT},    {4, 4, TK_PARAM_INT},
        {8, 8, TK_PARAM_INT},      {16, 4, TK_PARAM_FLOAT}, {24, 8, TK_PARAM_FLOAT},
        {32, 12, TK_PARAM_STRUCT}, {44, 1, TK_PARAM_UINT},  {48, 8, TK_PARAM_POINTER}};
    expect_params(s, sz, 9);
    /* extern "C": the code object records sizes and offsets (and on AMD
     * which parameters are pointers); the kinds come from the declaration. */
    tk_kernel *e = get_ok(ctx, k_rtc_src, "ext_sizes");
    ck_assert_ptr_null(e->symbol);
    const want_param ex[] = {{0, 1, TK_PARAM_INT},
                             {8, 8, TK_PARAM_INT},
                             {16, 8, TK_PARAM_POINTER},
                             {24, 8, TK_PARAM_FLOAT}};
    expect_params(e, ex, 4);
    /* Every kind through typedefs, const, restrict and __launch_bounds__; a
     * type whose #if branches disagree (real) stays unknown. */
    tk_kernel *a = get_ok(ctx, k_rtc_src, "ext_all");
    ck_assert_ptr_null(a->symbol);
    const want_param all[] = {
        {0, 8, TK_PARAM_POINTER},  {8, 4, TK_PARAM_INT},   {12, 4, TK_PARAM_FLOAT},
        {16, 8, TK_PARAM_FLOAT},   {24, 8, TK_PARAM_INT},  {32, 12, TK_PARAM_STRUCT},
        {48, 8, TK_PARAM_POINTER}, {56, 4, TK_PARAM_UINT}, {60, 4, TK_PARAM_UNKNOWN}};
    expect_params(a, all, 9);
    ck_assert_uint_eq(compiles(ctx), 4);

    /* Errors that list the kernels. */
    const char *msg = get_fails(ctx, k_rtc_src, "layernorm_forward_kernel", TK_NOT_FOUND);
    expect_in(msg, "did you mean layernorm_forward_kernel3(float*, float*, float*, const float*, "
                   "const float*, const float*, int, int)?");
    expect_in(msg, "ext_sizes");
    msg = get_fails(ctx, k_rtc_src, "ov", TK_NOT_FOUND);
    expect_in(msg, "the name is overloaded");
    expect_in(msg, "ov(float*)");
    expect_in(msg, "ov(int*)");
    /* The suggested name expression picks one (NVRTC; hipRTC 5.2 refuses
     * to lower a cast expression: HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID). */
    if (!amd) {
        tk_kernel *o = get_ok(ctx, k_rtc_src, "static_cast<void (*)(int*)>(ov)");
        ck_assert_str_eq(o->symbol, "_Z2ovPi");
    }
    /* A real compile error is still one, with its log. */
    const char *bad = "__global__ void broken(float *x) { x[0] = ; }\n";
    msg = get_fails(ctx, bad, "broken", TK_COMPILE_FAILED);
    expect_in(msg, "error");
    tk_context_destroy(ctx);

    /* A new process: from disk, no compile, the same symbol and layout. */
    ctx = context(kind, target);
    k = get_ok(ctx, k_rtc_src, "layernorm_forward_kernel3");
    ck_assert_uint_eq(compiles(ctx), 0);
    ck_assert_str_eq(k->symbol, "_Z25layernorm_forward_kernel3PfS_S_PKfS1_S1_ii");
    expect_params(k, ln, 8);
    expect_params(get_ok(ctx, k_rtc_src, "ext_all"), all, 9);
    ck_assert_uint_eq(compiles(ctx), 0);
    tk_context_destroy(ctx);
    const char *names[] = {"layernorm_forward_kernel3", "sizes", "ext_sizes", "ext_all",
                           "static_cast<void (*)(int*)>(ov)"};
    expect_listed(names, amd ? 4 : 5);
}

START_TEST(test_nvrtc_names_and_params)
{
    rtc_names(TK_BACKEND_CUDA, "sm_90");
}
END_TEST

START_TEST(test_hiprtc_names_and_params)
{
    rtc_names(TK_BACKEND_HIP, "gfx90a");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("user_kernels_names");
    TCase *tc = tcase_create("names");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_demangler);
    tcase_add_test(tc, test_decl_kinds);
    tcase_add_test(tc, test_stub_cpp_name_one_compile_then_disk);
    tcase_add_test(tc, test_stub_params);
    tcase_add_test(tc, test_stub_missing_and_overloaded);
    tcase_add_test(tc, test_nvrtc_names_and_params);
    tcase_add_test(tc, test_hiprtc_names_and_params);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
