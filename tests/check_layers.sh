#!/bin/sh
# The include rules of the layering (docs/architecture.md, "Layers"), checked on the sources:
#  1. src/autoflex/ is a leaf. Its files include only each other, the public flexpoint.h, the
#     format arithmetic ../flex/flex_math.h and system headers (<...>), and never name a path
#     under core/, train/, data/, nn/, dist/ or gpu/: the core calls into autoflex, never the
#     reverse.
#  2. The sources of the tensor library libflexpoint (src/core/, src/cpu/, src/autoflex/,
#     src/flex/, src/fp16/, src/bf16/, src/fp32/, src/nn/, src/gpu/) never include the code
#     of libflexpoint_train: no header under src/train/, src/data/ or src/dist/, and none of
#     its public headers (flexpoint_train.h, flexpoint_data.h, flexpoint_model.h). The
#     library links without libflexpoint_train, zlib or MPI.
# Usage: tests/check_layers.sh [SOURCE_ROOT]   (default: the folder above this script)
# Exit 0 when every rule holds; 1 with one line per offending include otherwise; 2 when the
# folders are missing (a wrong SOURCE_ROOT must not pass as "nothing to check").
set -u

root=${1:-$(dirname "$0")/..}
for d in src/autoflex src/core src/flex; do
    if [ ! -d "$root/$d" ]; then
        echo "check_layers: $root/$d is not a folder" >&2
        exit 2
    fi
done

bad=0
checked=0

# Print "file:line:text" for every #include line of the given files ("# include" too).
includes() {
    grep -n -E '^[[:space:]]*#[[:space:]]*include' /dev/null "$@"
}

# The included name of an #include line: what stands between "" or <>.
included_name() {
    printf '%s\n' "$1" | sed -n -E 's/^[^:]*:[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]*)[">].*$/\1/p'
}

# One line per finding, each prefixed with the rule.
violation() {
    printf '%s\n' "$2" | while IFS= read -r msg; do echo "check_layers: $1: $msg" >&2; done
    bad=1
}

# Rule 1.
for f in "$root"/src/autoflex/*.c "$root"/src/autoflex/*.h; do
    [ -e "$f" ] || continue
    checked=$((checked + 1))
    # the loop runs in a pipeline's subshell: its findings come back as its output
    msgs=$(includes "$f" | while IFS= read -r line; do
        name=$(included_name "$line")
        where=$(printf '%s\n' "$line" | cut -d: -f1,2)
        case "$line" in
        *'#'*include*'<'*)
            case "$name" in
            core/* | */core/* | train/* | */train/* | data/* | */data/* | nn/* | */nn/* | \
            dist/* | */dist/* | gpu/* | */gpu/*)
                echo "$where: src/autoflex includes <$name>, a header of another layer" ;;
            esac
            ;;
        *)
            case "$name" in
            flexpoint.h | ../flex/flex_math.h) ;;
            */*) echo "$where: src/autoflex includes \"$name\", outside src/autoflex (allowed: its own headers, flexpoint.h, ../flex/flex_math.h, system headers)" ;;
            *)
                if [ ! -e "$root/src/autoflex/$name" ]; then
                    echo "$where: src/autoflex includes \"$name\", which is not a file of src/autoflex"
                fi
                ;;
            esac
            ;;
        esac
    done)
    if [ -n "$msgs" ]; then
        violation "rule 1" "$msgs"
    fi
done

# Rule 2. (A missing folder, such as src/cpu/ in a tree without it, matches nothing.)
for d in core cpu autoflex flex fp16 bf16 fp32 nn gpu; do
    for f in "$root/src/$d"/*.c "$root/src/$d"/*.h "$root/src/$d"/*.cu "$root/src/$d"/*.cuh; do
        [ -e "$f" ] || continue
        checked=$((checked + 1))
        hits=$(includes "$f" |
            grep -E '["<](([^">]*/)?(train|data|dist)/|([^">]*/)?flexpoint_(train|data|model)\.h[">])' ||
            true)
        if [ -n "$hits" ]; then
            violation "rule 2" "the tensor library includes code of libflexpoint_train: $hits"
        fi
    done
done

if [ "$bad" -ne 0 ]; then
    echo "check_layers: FAILED (docs/architecture.md, \"Layers\", says what may include what)" >&2
    exit 1
fi
echo "check_layers: OK ($checked file checks)"
exit 0
