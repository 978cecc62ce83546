#!/bin/bash
# static-override: shardmalloc.o linked first replaces malloc (a) in a dynamic executable and
# (b) in a fully static one (-static, against glibc's libc.a), and (c) in a static one that also
# calls glibc's malloc extensions (mallopt, malloc_trim, mallinfo2, malloc_stats, malloc_info), as
# real programs do.  A link failure is reported with the linker's own message.
# usage: static-override.sh CC shardmalloc.o test-static.c INCLUDE-DIR WORK-DIR
set -u
cc=$1 obj=$2 src=$3 inc=$4 work=$5
mkdir -p "$work"
checks=0 failures=0
fail() { failures=$((failures + 1)); echo "FAIL  $1"; }
if [ ! -f "$obj" ]; then echo "static-override: FAIL: $obj not built"; exit 1; fi
for kind in dynamic static static-glibc-ext; do
  checks=$((checks + 1))
  flags=""
  case $kind in
    static) flags="-static" ;;
    static-glibc-ext) flags="-static -DSM_TEST_GLIBC_EXT=1 -Wno-deprecated-declarations" ;;
  esac
  exe="$work/test-static-$kind"
  rm -f "$exe"
  echo "\$ $cc $flags -O2 -fno-builtin -o $exe $obj $src -I$inc -pthread"
  if ! "$cc" $flags -O2 -fno-builtin -o "$exe" "$obj" "$src" -I"$inc" -pthread >"$work/link-$kind.log" 2>&1; then
    cat "$work/link-$kind.log"
    fail "$kind executable with shardmalloc.o first: link failed (linker output above)"
    continue
  fi
  if [ $kind != dynamic ]; then
    checks=$((checks + 1))
    if file "$exe" 2>/dev/null | grep -q dynamically; then fail "$kind executable is not static"; fi
    if readelf -lW "$exe" | grep -q INTERP; then fail "the -static executable has an ELF interpreter"; fi
  fi
  [ -s "$work/link-$kind.log" ] && { echo "(linker said:)"; cat "$work/link-$kind.log"; }
  checks=$((checks + 1))
  out=$("$exe" 2>&1)
  rc=$?
  sed 's/^/  /' <<<"$out"
  if [ $rc -ne 0 ]; then fail "$kind executable: expected exit 0, seen $rc"; else echo "ok    $kind executable: malloc replaced by shardmalloc.o"; fi
done
if [ $failures -ne 0 ]; then echo "static-override: FAILED: $failures of $checks checks failed"; exit 1; fi
echo "static-override: all $checks checks passed"
