#!/bin/sh
# The tool's man page and bash completion: installed where man and
# bash-completion look, the man page naming every option of the tool's parser
# (src/cli/main.c), the completion offering exactly those options and the
# values each option takes.
# Usage: tool_docs_check.sh BUILD_DIR SOURCE_DIR HAVE_MAN(0|1)
set -eu
build=$1
src=$2
have_man=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "tool_docs_check: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
tool=$tmp/prefix/bin/tokitai-jit
comp=$tmp/prefix/share/bash-completion/completions/tokitai-jit
test -f "$comp" || fail "bash completion not installed at share/bash-completion/completions/tokitai-jit"

# Every option the parser knows: the long names and aliases of its table.
sed -n '/^static const opt_spec specs\[\]/,/^};/p' "$src/src/cli/main.c" |
    grep -o '"-[-a-zA-Z]*"' | tr -d '"' | sort -u >"$tmp/parser"
test -s "$tmp/parser" || fail "no options found in src/cli/main.c"

if [ "$have_man" = 1 ]; then
    man=$tmp/prefix/share/man/man1/tokitai-jit.1
    test -f "$man" || fail "man page not installed at share/man/man1/tokitai-jit.1"
    while read -r opt; do
        # help2man writes "-" as "\-".
        esc=$(printf '%s' "$opt" | sed 's/-/\\\\-/g')
        grep -q -- "$esc" "$man" || fail "the man page does not name $opt"
    done <"$tmp/parser"
    grep -q '^\.SH "SEE ALSO"' "$man" || fail "the man page has no SEE ALSO section"
else
    echo "help2man not installed: man page not checked"
fi

# Completion, as bash calls it: COMP_WORDS / COMP_CWORD in, COMPREPLY out.
cat >"$tmp/complete.bash" <<'SH'
source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
_tokitai_jit
printf '%s\n' "${COMPREPLY[@]}" | sort
SH
complete() { bash "$tmp/complete.bash" "$comp" "$tool" "$@"; }

complete "" | grep -v '^$' >"$tmp/offered"
if ! cmp -s "$tmp/parser" "$tmp/offered"; then
    diff "$tmp/parser" "$tmp/offered" >&2 || true
    fail "the completion's options differ from the parser's (< parser, > completion)"
fi
expect() { # expect "WANT..." WORDS...
    want=$1; shift
    got=$(complete "$@" | tr '\n' ' ' | sed 's/ $//')
    [ "$got" = "$want" ] || fail "completing '$*': got '$got', want '$want'"
}
expect "--precompile --prune --prune-others" --pr
expect "softmax_f16_fwd softmax_xent_f16_bwd" --run soft
expect "gemm_f16_fwd,softmax_f16_fwd gemm_f16_fwd,softmax_xent_f16_bwd" --ops gemm_f16_fwd,soft
expect "exact generic stable" --policy ""
expect "exact" --policy = e
expect "async sync" --build-mode ""
expect "all manifest" --classes ""
expect "created" --sort cr
expect "" --kernel ""
expect "" --shape ""
echo "tool docs check passed: $(wc -l <"$tmp/parser") options in the man page and the completion"
