/* A consumer of the installed package: found through find_package and through
 * pkg-config (tests/install_check.sh). Checks the header/library versions
 * agree and that a context either starts or says why not. */
#include <stdio.h>

#include <tokitai/ops.h>
#include <tokitai/tokitai.h>

int main(void)
{
    if (tk_version_number() != TK_VERSION_NUMBER) {
        fprintf(stderr, "header %u, library %u\n", TK_VERSION_NUMBER, tk_version_number());
        return 1;
    }
    tk_context *ctx = NULL;
    char why[512] = "";
    tk_status st = tk_context_create(NULL, &ctx, why, sizeof why);
    printf("tokitai-jit %s: context %s%s%s\n", tk_version_string(), tk_status_str(st),
           st == TK_OK ? "" : ": ", why);
    tk_context_destroy(ctx);
    return (st == TK_OK || st == TK_NO_DEVICE || st == TK_BACKEND_UNAVAILABLE) ? 0 : 1;
}
