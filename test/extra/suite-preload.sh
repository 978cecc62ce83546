#!/bin/bash
# suite-preload.sh LIB PROGRAM [ARGS...]: run one of the regular test programs with LD_PRELOAD=LIB
# (a secure or debug build of shardmalloc), so the regular suite is shown to pass under that build
# (issue 5: "The whole regular test suite also passes under both builds").
# Sections named in SM_RELEASE_ONLY (a '|'-separated list of section titles) check behaviour that
# only the release build promises (exact usable sizes, realloc in place); padded builds return
# less than the block as the usable size (the debug build the requested size). Those sections may
# fail; every other section must pass, and the program must end normally (no crash, no abort, no
# error report).
lib=$1; shift
prog=$1; shift
name=$(basename "$prog")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "running $name with LD_PRELOAD=$(basename "$lib")"
LD_PRELOAD=$lib "$prog" "$@" >"$out" 2>&1
rc=$?
fail=0
# every failed section must be a release-only one
# shellcheck source=../sections.sh
. "$(dirname "$0")/../sections.sh"
sections_check "$out" $rc "${SM_RELEASE_ONLY:-}" "under $(basename "$lib")" || fail=1
grep -E '^(ok|FAIL)  ' "$out" | sed 's/^/  /' | head -80
tail -n 3 "$out" | sed 's/^/  | /'
if [ $fail = 0 ]; then
  echo "suite-preload $name under $(basename "$lib"): passed (exit status $rc)"
  exit 0
fi
echo "suite-preload $name under $(basename "$lib"): FAILED (exit status $rc); full output:"
sed 's/^/  | /' "$out" | tail -n 60
exit 1
