/*
 * libFuzzer target for the precompile manifest parser (src/cli/manifest.c):
 * any bytes parse into a manifest or fail with one message, never more than
 * TK__MF_MAX_JOBS jobs, every job describable. Built by -DTK_BUILD_FUZZ=ON
 * (clang); see tests/fuzz/CMakeLists.txt.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the tool reads files the same way: up to the first NUL */
    tk__manifest m;
    char err[2048];
    err[0] = 0;
    if (tk__manifest_parse(text, "<fuzz>", "/nonexistent", &m, err, sizeof err) == 0) {
        if (m.n_jobs > TK__MF_MAX_JOBS)
            abort();
        char what[512];
        for (size_t i = 0; i < m.n_jobs && i < 64; i++)
            tk__mf_job_describe(&m, &m.jobs[i], what, sizeof what);
        if (tk__manifest_filter(&m, "softmax_f16_fwd,gemm_f16_fwd", err, sizeof err) == 0)
            tk__manifest_clear_line_policies(&m);
        tk__manifest_free(&m);
    } else if (!err[0] || memchr(err, '\n', strlen(err))) {
        abort(); /* a failure always says why, on one line */
    }
    free(text);
    return 0;
}
