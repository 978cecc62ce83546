# common.sh: sourced by the override tests.  Environment (set by ctest): SM_LIB = path of
# libshardmalloc.so.  Gives: need (skip with 77 when a program is missing), a private temp dir,
# preloaded (run a command with LD_PRELOAD=$SM_LIB), bound_to_shardmalloc (LD_DEBUG proof that a
# program's malloc was bound to shardmalloc), and check / finish for the summary line.
set -u
name=$(basename "$0" .sh)
checks=0
failures=0
: "${SM_LIB:?SM_LIB must name libshardmalloc.so}"
if [ ! -f "$SM_LIB" ]; then echo "override-$name: FAIL: $SM_LIB not built"; exit 1; fi
SM_LIB=$(readlink -f "$SM_LIB")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sm-override-$name.XXXXXX")
cleanup_hooks=()
cleanup() {
  local h
  for h in "${cleanup_hooks[@]}"; do eval "$h"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

need() { # need PROGRAM [package hint]
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "override-$name: SKIPPED: $1 is not installed${2:+ (package $2; tools/install-deps installs it)}"
    exit 77
  fi
}
preloaded() { LD_PRELOAD="$SM_LIB${LD_PRELOAD:+:$LD_PRELOAD}" "$@"; }

# check DESCRIPTION EXPECTED SEEN
check() {
  checks=$((checks + 1))
  if [ "$2" == "$3" ]; then
    printf 'ok    %s\n' "$1"
  else
    failures=$((failures + 1))
    printf 'FAIL  %s\n      expected: %s\n      seen:     %s\n' "$1" "$2" "$3"
  fi
}
# check_true DESCRIPTION COMMAND...
check_true() {
  local what=$1; shift
  checks=$((checks + 1))
  if "$@"; then printf 'ok    %s\n' "$what"; else failures=$((failures + 1)); printf 'FAIL  %s\n' "$what"; fi
}
# bound_to_shardmalloc PROGRAM-REGEX COMMAND...: runs COMMAND preloaded with LD_DEBUG=bindings and
# succeeds when a process whose binary matches PROGRAM-REGEX had `malloc' and `free' bound to
# libshardmalloc (the dynamic loader's own record of symbol resolution).
bound_to_shardmalloc() {
  local prog=$1; shift
  rm -rf "$tmp/lddebug"; mkdir -p "$tmp/lddebug"
  LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/lddebug/log" preloaded "$@" >/dev/null 2>&1 </dev/null
  local f
  for f in "$tmp"/lddebug/log.*; do
    [ -f "$f" ] || continue
    if grep -Eq "binding file [^ ]*($prog)[^ ]* \[0\] to [^ ]*libshardmalloc[^ ]* \[0\]: normal symbol \`malloc'" "$f" &&
       grep -Eq "to [^ ]*libshardmalloc[^ ]* \[0\]: normal symbol \`free'" "$f"; then
      return 0
    fi
  done
  echo "      (no process matching '$prog' had malloc and free bound to libshardmalloc; LD_DEBUG logs: $(ls "$tmp/lddebug" | wc -l))"
  return 1
}
# loaded_in PID: libshardmalloc is mapped into process PID
loaded_in() { grep -q "$(basename "$SM_LIB")\|libshardmalloc" "/proc/$1/maps" 2>/dev/null; }

finish() {
  if [ $failures -ne 0 ]; then
    echo "override-$name: FAILED: $failures of $checks checks failed"
    exit 1
  fi
  echo "override-$name: all $checks checks passed"
  exit 0
}
