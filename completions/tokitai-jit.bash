# bash completion for tokitai-jit.
#
# The options and operator names are read from `tokitai-jit --help` the first
# time they are needed, so the completion follows the tool it completes.
# Installed as share/bash-completion/completions/tokitai-jit; from a checkout:
#   source completions/tokitai-jit.bash

# Prints every option of the tool's help ("  --list", "  -j N, --jobs N").
_tokitai_jit_help_options()
{
    "$1" --help 2>/dev/null | sed -n 's/^  \(-[^ ]\)/\1/p' | while IFS= read -r line; do
        line=${line%%  *}                 # the option column only
        local IFS=','
        for spec in $line; do
            spec=${spec# }
            printf '%s\n' "${spec%% *}"   # the option, not its VALUE
        done
    done
}

# Prints the operator names listed under "Operators:" in the help.
_tokitai_jit_help_operators()
{
    "$1" --help 2>/dev/null | sed -n '/^Operators:/,/^$/p' | sed 's/^Operators://' | tr -s ' ' '\n' | sed '/^$/d'
}

_tokitai_jit()
{
    local cur prev tool=${COMP_WORDS[0]}
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    # --name=value: bash splits it into "--name", "=", "value".
    if [[ $cur == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD-1]} cur=
    elif [[ $prev == = && $COMP_CWORD -ge 2 ]]; then
        prev=${COMP_WORDS[COMP_CWORD-2]}
    fi

    if [[ -z ${_tokitai_jit_options-} ]]; then
        _tokitai_jit_options=$(_tokitai_jit_help_options "$tool")
        _tokitai_jit_operators=$(_tokitai_jit_help_operators "$tool")
    fi

    COMPREPLY=()
    case $prev in
    --run)
        mapfile -t COMPREPLY < <(compgen -W "$_tokitai_jit_operators" -- "$cur")
        return
        ;;
    --ops)
        # A comma-separated list: complete the last item.
        local head=
        [[ $cur == *,* ]] && head=${cur%,*},
        mapfile -t COMPREPLY < <(compgen -P "$head" -W "$_tokitai_jit_operators" -- "${cur##*,}")
        compopt -o nospace 2>/dev/null
        return
        ;;
    --arch)
        local head=
        [[ $cur == *,* ]] && head=${cur%,*},
        mapfile -t COMPREPLY < <(compgen -P "$head" -W "sm_80 sm_90 gfx90a gfx1030" -- "${cur##*,}")
        compopt -o nospace 2>/dev/null
        return
        ;;
    --policy)
        mapfile -t COMPREPLY < <(compgen -W "stable exact generic" -- "$cur")
        return
        ;;
    --build-mode)
        mapfile -t COMPREPLY < <(compgen -W "async sync" -- "$cur")
        return
        ;;
    --classes)
        mapfile -t COMPREPLY < <(compgen -W "all manifest" -- "$cur")
        return
        ;;
    --sort)
        mapfile -t COMPREPLY < <(compgen -W "key kernel arch size created used" -- "$cur")
        return
        ;;
    --cache-dir)
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        compopt -o filenames 2>/dev/null
        return
        ;;
    --manifest | --export | --import | --bundle)
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        compopt -o filenames 2>/dev/null
        return
        ;;
    --shape | --seed | --max-size | -M | --remote | -j | --jobs | --kernel | --older-than | --limit)
        return # a value only the user knows
        ;;
    esac
    mapfile -t COMPREPLY < <(compgen -W "$_tokitai_jit_options" -- "$cur")
}

complete -F _tokitai_jit tokitai-jit
