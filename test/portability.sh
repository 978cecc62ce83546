#!/bin/bash
# portability: the library keeps building for the other targets the project supports, warning-free
# (-Wall -Wextra -Werror), in its release, secure and debug configurations:
#   aarch64 (Debian's cross compiler aarch64-linux-gnu-gcc): compiled, and where qemu-aarch64 is
#   installed (Debian: qemu-user) regular test programs linked statically with it and run there
#   (the static override in all three builds; the sm_ API, threads and heaps in the release build);
#   musl (musl-gcc): compiled, then test-static.c linked with it into a fully static executable and
#   run (malloc replaced in musl's libc too, threads included).
# A compiler that is not installed, or cannot find its C headers, is skipped with a message; with
# neither, the test is skipped.
# usage: portability.sh SOURCE-DIR WORK-DIR
set -u
src=$1 work=$2
mkdir -p "$work"
checks=0 failures=0 ran=0
fail() { failures=$((failures + 1)); echo "FAIL  $1"; }
for cc in aarch64-linux-gnu-gcc musl-gcc; do
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "skip  $cc: not installed (Debian: gcc-aarch64-linux-gnu, musl-tools)"
    continue
  fi
  # a cross compiler without its C library's headers (Debian only recommends libc6-dev-arm64-cross)
  if ! echo '#include <stdint.h>' | "$cc" -std=c11 -fsyntax-only -x c - >/dev/null 2>&1; then
    echo "skip  $cc: cannot compile <stdint.h>: its C library headers are missing (Debian: libc6-dev-arm64-cross)"
    continue
  fi
  ran=1
  for config in release secure debug; do
    case $config in
      release) defs="" ;;
      secure) defs="-DSM_SECURE=1" ;;
      debug) defs="-DSM_DEBUG=1" ;;
    esac
    checks=$((checks + 1))
    obj="$work/shardmalloc-$cc-$config.o"
    # shellcheck disable=SC2086
    if out=$("$cc" -std=c11 -O2 -fPIC -Wall -Wextra -Werror $defs -I"$src/include" -I"$src/src" \
                 -c "$src/src/unity.c" -o "$obj" 2>&1); then
      echo "ok    $cc $config: compiles without warnings"
    else
      fail "$cc $config: does not compile"
      echo "$out" | head -20
    fi
  done
  if [ "$cc" = aarch64-linux-gnu-gcc ]; then
    if ! command -v qemu-aarch64 >/dev/null 2>&1; then
      echo "skip  aarch64 runs: qemu-aarch64 is not installed (Debian: qemu-user)"
    else
      for run in test-static:release test-static:secure test-static:debug test-smapi:release test-fuzz:release \
                 test-stress:release test-heap:release test-huge-threads:release; do
        prog=${run%%:*} config=${run#*:}
        checks=$((checks + 1))
        exe="$work/$prog-aarch64-$config"
        defs=""
        [ "$prog" != test-static ] && defs="-DSM_TEST_SM_API=1"
        # shellcheck disable=SC2086
        if ! out=$("$cc" -std=c11 -O2 -fno-builtin -w $defs -I"$src/include" -I"$src/test" "$src/test/$prog.c" \
                     "$work/shardmalloc-$cc-$config.o" -o "$exe" -static -lpthread -lm 2>&1); then
          fail "aarch64: $prog ($config) does not link statically"
          echo "$out" | head -20
        elif ! out=$(qemu-aarch64 "$exe" $([ "$prog" = test-stress ] && echo --threads 4 --generations 2 --ops 5000) 2>&1); then
          fail "aarch64: $prog ($config) failed under qemu-aarch64"
          echo "$out" | grep -E -A2 '^FAIL' | head -20
          echo "$out" | tail -3
        else
          echo "ok    aarch64 (qemu): $prog ($config): $(echo "$out" | tail -1)"
        fi
      done
    fi
  fi
  if [ "$cc" = musl-gcc ]; then
    checks=$((checks + 1))
    exe="$work/test-static-musl"
    if ! out=$(musl-gcc -std=c11 -O2 -fno-builtin -I"$src/include" -I"$src/test" "$src/test/test-static.c" \
                 "$work/shardmalloc-musl-gcc-release.o" -o "$exe" -static -lpthread 2>&1); then
      fail "musl: test-static does not link statically"
      echo "$out" | head -20
    elif ! out=$("$exe" 2>&1); then
      fail "musl: test-static failed"
      echo "$out" | tail -20
    else
      echo "ok    musl: static test-static passes ($(echo "$out" | tail -1))"
    fi
  fi
done
if [ $ran = 0 ]; then
  echo "portability: SKIP: neither aarch64-linux-gnu-gcc nor musl-gcc is usable"
  exit 77
fi
if [ $failures -gt 0 ]; then
  echo "portability: FAILED: $failures of $checks checks failed"
  exit 1
fi
echo "portability: all $checks checks passed"
