/* The rows of `tokitai-jit --list --json`, for the suites that check what
 * --list shows (test_cli_cache.c, test_cli_list_gemm.c). */
#ifndef TK_TEST_CLI_LIST_H
#define TK_TEST_CLI_LIST_H

#include "test_cli_common.h"

typedef struct list_row {
    char key[33], kernel[256], label[320], op[64], policy[16], arch[64], path[1024];
    unsigned long long file_size;
} list_row;

/* The string value of "name" in [from, to) (no escapes in what the tests
 * read); "" when absent. */
static inline void row_str(const char *from, const char *to, const char *name, char *buf,
                           size_t size)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", name);
    const char *p = strstr(from, pat);
    buf[0] = 0;
    if (!p || p >= to)
        return;
    p += strlen(pat);
    const char *q = strchr(p, '"');
    size_t n = q ? (size_t)(q - p) : 0;
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
}

/* Parses the entries of a --list --json output in their order; returns
 * how many (at most max). */
static inline int json_rows(const char *out, list_row *rows, int max)
{
    int n = 0;
    const char *p = strstr(out, "{\"key\": ");
    while (p && n < max) {
        const char *next = strstr(p + 1, "{\"key\": ");
        const char *end = next ? next : p + strlen(p);
        list_row *r = &rows[n++];
        row_str(p, end, "key", r->key, sizeof r->key);
        row_str(p, end, "kernel", r->kernel, sizeof r->kernel);
        row_str(p, end, "label", r->label, sizeof r->label);
        row_str(p, end, "op", r->op, sizeof r->op);
        row_str(p, end, "policy", r->policy, sizeof r->policy);
        row_str(p, end, "arch", r->arch, sizeof r->arch);
        row_str(p, end, "path", r->path, sizeof r->path);
        const char *fs = strstr(p, "\"file_size\": ");
        r->file_size = fs && fs < end ? strtoull(fs + 13, NULL, 10) : 0;
        p = next;
    }
    return n;
}

/* Runs --list --json with the extra arguments (NULL-terminated, at most 8)
 * on the cache at root; returns the rows (malloc'd) and their number. */
static inline list_row *list_json_rows(const char *root, int *n, ...)
{
    const char *a[8] = {NULL};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < 8; i++) {
        a[i] = va_arg(ap, const char *);
        if (!a[i])
            break;
    }
    va_end(ap);
    char *out, *err;
    int rc = cli_run(&out, &err, "--list", "--json", "--cache-dir", root, a[0], a[1], a[2], a[3],
                     a[4], a[5], a[6], a[7], NULL);
    ck_assert_msg(rc == CLI_OK, "--list --json: %d\n%s", rc, err);
    ck_assert_msg(json_valid(out), "invalid JSON: %s", out);
    list_row *rows = calloc(4096, sizeof *rows);
    ck_assert_ptr_nonnull(rows);
    *n = json_rows(out, rows, 4096);
    ck_assert_int_eq(*n, count_substr(out, "{\"key\": "));
    free(out), free(err);
    return rows;
}

/* The number of rows with this op and policy (NULL: any). */
static inline int rows_with(const list_row *rows, int n, const char *op, const char *policy)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += (!op || strcmp(rows[i].op, op) == 0) &&
             (!policy || strcmp(rows[i].policy, policy) == 0);
    return k;
}

/* Asserts that no two rows of one target share a label. */
static inline void assert_labels_distinct(const list_row *rows, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(rows[i].arch, rows[j].arch) != 0 ||
                              strcmp(rows[i].label, rows[j].label) != 0,
                          "entries %s and %s share the label '%s'", rows[i].key, rows[j].key,
                          rows[i].label);
}

/* The ENTRIES count of the summary row for op, arch and policy; -1 when
 * there is no such row. */
static inline long summary_count(const char *out, const char *op, const char *arch,
                                 const char *policy)
{
    for (const char *line = out; line && *line;) {
        const char *nl = strchr(line, '\n');
        char buf[512], o[128], a[128], p[32];
        long count = -1;
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = 0;
        if (sscanf(buf, "%127s %127s %31s %ld", o, a, p, &count) == 4 && strcmp(o, op) == 0 &&
            strcmp(a, arch) == 0 && strcmp(p, policy) == 0)
            return count;
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

#endif
