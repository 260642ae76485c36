/*
 * Environment variables: every variable the library reads, set to a value
 * its parser refuses, is reported by tk_env_check (fatal only for the
 * backend), warned about on a new context's log with the default used, and
 * a valid value of each is not reported. A TOKITAI_JIT_* name the library
 * does not read is reported as a probable misspelling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_test.h"

typedef struct var_case {
    const char *name;
    const char *good;
    const char *bad;
    int fatal;
} var_case;

static const var_case cases[] = {
    {"TOKITAI_JIT_BACKEND", "stub", "cuad", 1},
    {"TOKITAI_JIT_POLICY", "exact", "fast", 0},
    {"TOKITAI_JIT_BUILD", "sync", "later", 0},
    {"TOKITAI_JIT_TUNE", "off", "sometimes", 0},
    {"TOKITAI_JIT_LOG", "warn", "loud", 0},
    {"TOKITAI_JIT_GEMM_PDL", "0", "false", 0},
    {"TOKITAI_JIT_CACHE_MAX_SIZE", "2G", "abc", 0},
    {"TOKITAI_JIT_CACHE_DISABLE", "0", "ture", 0},
    {"TOKITAI_JIT_REMOTE", "redis://127.0.0.1:1/0", "http://x", 0},
    {"TOKITAI_JIT_REMOTE_CONNECT_TIMEOUT_MS", "500", "5s", 0},
    {"TOKITAI_JIT_REMOTE_IO_TIMEOUT_MS", "500", "-1", 0},
    {"TOKITAI_JIT_REMOTE_LEASE_MS", "1000", "0", 0},
    {"TOKITAI_JIT_REMOTE_WAIT_MS", "1000", "forever", 0},
};

typedef struct seen {
    int n;
    char name[128];
    char why[256];
    int fatal;
} seen;

static void on_problem(void *user, const char *name, const char *value, const char *why, int fatal)
{
    seen *s = user;
    (void)value;
    s->n++;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->why, sizeof s->why, "%s", why);
    s->fatal = fatal;
}

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        unsetenv(cases[i].name);
    unsetenv("TOKITAI_JIT_CACHE_DIRS");
}

START_TEST(each_variable_good_and_bad)
{
    clear_env();
    seen s = {0};
    ck_assert_uint_eq(tk_env_check(on_problem, &s), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const var_case *c = &cases[i];
        setenv(c->name, c->good, 1);
        memset(&s, 0, sizeof s);
        ck_assert_msg(tk_env_check(on_problem, &s) == 0, "%s=%s refused: %s", c->name, c->good,
                      s.why);
        setenv(c->name, c->bad, 1);
        memset(&s, 0, sizeof s);
        ck_assert_msg(tk_env_check(on_problem, &s) == 1, "%s=%s not reported", c->name, c->bad);
        ck_assert_str_eq(s.name, c->name);
        ck_assert_int_eq(s.fatal, c->fatal);
        ck_assert_int_gt((int)strlen(s.why), 8);
        /* Empty is the default, never a problem. */
        setenv(c->name, "", 1);
        ck_assert_uint_eq(tk_env_check(NULL, NULL), 0);
        unsetenv(c->name);
    }
    setenv("TOKITAI_JIT_CACHE_DIRS", "/tmp/x", 1);
    memset(&s, 0, sizeof s);
    ck_assert_uint_eq(tk_env_check(on_problem, &s), 1);
    ck_assert_str_eq(s.name, "TOKITAI_JIT_CACHE_DIRS");
    ck_assert_ptr_nonnull(strstr(s.why, "misspelt"));
    clear_env();
}
END_TEST

typedef struct log_rec {
    const char *name;
    int warnings;
    char text[4096];
} log_rec;

static void on_log(void *user, tk_log_level level, const char *msg)
{
    log_rec *l = user;
    if (level >= TK_LOG_WARN && strstr(msg, l->name)) {
        l->warnings++;
        strncat(l->text, msg, sizeof l->text - strlen(l->text) - 2);
        strcat(l->text, "\n");
    }
}

START_TEST(bad_values_warn_on_the_context_log)
{
    clear_env();
    char *root = tk_test_tmpdir("env");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const var_case *c = &cases[i];
        if (strstr(c->name, "REMOTE") && !c->fatal)
            continue; /* a bad remote URL or timeout: the remote tier's own message too */
        setenv(c->name, c->bad, 1);
        tk_config *cfg = NULL;
        tk_context *ctx = NULL;
        char err[512] = "";
        log_rec l = {c->name, 0, ""};
        tk_assert_status(tk_config_create(&cfg), TK_OK);
        tk_assert_status(tk_config_set_cache_dir(cfg, root), TK_OK);
        tk_assert_status(tk_config_set_log(cfg, on_log, &l), TK_OK);
        if (strcmp(c->name, "TOKITAI_JIT_BACKEND") != 0)
            tk_assert_status(tk_config_set_backend(cfg, TK_BACKEND_STUB), TK_OK);
        tk_status st = tk_context_create(cfg, &ctx, err, sizeof err);
        if (c->fatal) {
            ck_assert_msg(st != TK_OK, "%s=%s accepted", c->name, c->bad);
            ck_assert_ptr_nonnull(strstr(err, c->name));
        } else {
            ck_assert_msg(st == TK_OK, "%s=%s: %s", c->name, c->bad, err);
            ck_assert_msg(l.warnings == 1, "%s=%s: %d warnings:\n%s", c->name, c->bad, l.warnings,
                          l.text);
            /* "using the default", or the cache's own "using 5G". */
            ck_assert_ptr_nonnull(strstr(l.text, "using "));
            tk_context_destroy(ctx);
        }
        tk_config_destroy(cfg);
        unsetenv(c->name);
    }
    tk_test_rmtree(root);
    free(root);
}
END_TEST

START_TEST(info_names_the_problems)
{
    clear_env();
    setenv("TOKITAI_JIT_POLICY", "fast", 1);
    char *argv[] = {(char *)tk_test_cli(), "--info", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(tk_test_run(argv, &out, &err), 0);
    ck_assert_ptr_nonnull(strstr(out, "TOKITAI_JIT_POLICY=fast: expected one of: stable exact"));
    free(out), free(err);
    char *argv2[] = {(char *)tk_test_cli(), "--info", "--json", NULL};
    ck_assert_int_eq(tk_test_run(argv2, &out, &err), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"environment_problems\": [{\"name\": \"TOKITAI_JIT_POLICY\""));
    free(out), free(err);
    unsetenv("TOKITAI_JIT_POLICY");
    ck_assert_int_eq(tk_test_run(argv, &out, &err), 0);
    ck_assert_ptr_nonnull(strstr(out, "every TOKITAI_JIT_* variable set has a valid value"));
    free(out), free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("env");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, each_variable_good_and_bad);
    tcase_add_test(tc, bad_values_warn_on_the_context_log);
    tcase_add_test(tc, info_names_the_problems);
    suite_add_tcase(s, tc);
    return tk_test_main(s);
}
