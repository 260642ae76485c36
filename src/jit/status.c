/* Version and status strings: the one table behind tk_status_str. */
#include "tokitai/tokitai.h"

unsigned tk_version_number(void)
{
    return TK_VERSION_NUMBER;
}

const char *tk_version_string(void)
{
    return TK_VERSION_STRING;
}

const char *tk_status_str(tk_status status)
{
    switch (status) {
#define TK__STATUS_CASE(name, value, text)                                                     \
    case TK_##name:                                                                            \
        return text;
        TK_STATUS_LIST(TK__STATUS_CASE)
#undef TK__STATUS_CASE
    }
    return "unknown status";
}

unsigned tk_abi_version(void)
{
    return TK_ABI_VERSION;
}
