#!/bin/bash
# compat-names: every mi_ function, function-like macro and allocator template that
# include/compat/mimalloc.h defines is used (called, or instantiated) by the compat tests, so none
# of them goes untested. Attribute macros (mi_attr_*, mi_decl_*) and the header's own helpers
# (mi__sm_*) are not API to call.
# usage: compat-names.sh include/compat/mimalloc.h test-file...
set -u
header=$1; shift
names=$( { sed -nE 's/^MI_SHIM [^(]*[^A-Za-z0-9_](mi_[A-Za-z0-9_]+)\(.*/\1/p' "$header"
           sed -nE 's/^#define (mi_[A-Za-z0-9_]+)\(.*/\1/p' "$header"
           sed -nE 's/^template <class T> using (mi_[A-Za-z0-9_]+) .*/\1/p' "$header"; } \
         | grep -vE '^(mi__sm_|mi_attr_|mi_decl_)' | sort -u)
count=$(wc -w <<<"$names")
if [ "$count" -lt 130 ]; then
  echo "compat-names: FAILED: only $count names found in $header (expected the whole mimalloc API: the patterns no longer match)"
  exit 1
fi
missing=()
for n in $names; do
  grep -qE "(^|[^A-Za-z0-9_])$n[[:space:]]*[(<]" "$@" || missing+=("$n")
done
if [ ${#missing[@]} -ne 0 ]; then
  printf 'FAIL  %-58s %s of %s names unused\n' "every mi_ name of the compat header is used by a test" ${#missing[@]} "$count"
  printf '     not used in %s: %s\n' "$*" "${missing[*]}" >&2
  echo "compat-names: FAILED: ${#missing[@]} of $count checks failed"
  exit 1
fi
printf 'ok    %-58s %s checks\n' "every mi_ name of the compat header is used by a test" "$count"
echo "compat-names: all $count checks passed"
