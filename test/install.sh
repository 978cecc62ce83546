#!/bin/bash
# install: `cmake --install` into a temporary prefix; the header must be in <prefix>/include and
# the libraries in <prefix>/lib; then a program is built with find_package(shardmalloc) (shared and
# static targets) and another with pkg-config, and all of them run.
# usage: install.sh BUILD-DIR CONSUMER-SOURCE-DIR WORK-DIR CC CMAKE SM_NAME
set -u
build=$1 consumer=$2 work=$3 cc=$4 cmake=$5 smname=${6:-shardmalloc}
checks=0 failures=0
ok() { checks=$((checks + 1)); echo "ok    $1"; }
fail() { checks=$((checks + 1)); failures=$((failures + 1)); echo "FAIL  $1"; }
t() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
if "$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then ok "cmake --install --prefix $prefix"
else cat "$work/install.log"; fail "cmake --install"; fi
t "header installed as <prefix>/include/shardmalloc.h" test -f "$prefix/include/shardmalloc.h"
t "shared library in <prefix>/lib" test -e "$prefix/lib/lib$smname.so"
t "static library in <prefix>/lib" test -f "$prefix/lib/lib$smname.a"
t "shardmalloc.o in <prefix>/lib" test -f "$prefix/lib/$smname.o"
t "CMake package config in <prefix>/lib/cmake/shardmalloc" test -f "$prefix/lib/cmake/shardmalloc/shardmalloc-config.cmake"
t "pkg-config file in <prefix>/lib/pkgconfig" test -f "$prefix/lib/pkgconfig/$smname.pc"
t "the installed shared library has a soname" bash -c "readelf -dW '$prefix/lib/lib$smname.so' | grep -q SONAME"

# find_package(shardmalloc)
if "$cmake" -S "$consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
     >"$work/consumer-configure.log" 2>&1 &&
   "$cmake" --build "$work/consumer" >"$work/consumer-build.log" 2>&1; then
  ok "a consumer builds with find_package(shardmalloc)"
  for kind in shared static; do
    out=$("$work/consumer/consumer-$kind" 2>&1); rc=$?
    echo "      consumer-$kind: $out"
    target=shardmalloc::shardmalloc; [ $kind = static ] && target=shardmalloc::shardmalloc-static
    [ $rc -eq 0 ] && ok "consumer-$kind (target $target) runs on shardmalloc" \
      || fail "consumer-$kind: expected exit 0, seen $rc"
  done
  t "consumer-shared is linked to the installed library" \
    bash -c "ldd '$work/consumer/consumer-shared' | grep -q '$prefix/lib/lib$smname.so'"
  t "consumer-static does not need the shared library" \
    bash -c "! ldd '$work/consumer/consumer-static' | grep -q 'lib$smname.so'"
else
  cat "$work/consumer-configure.log" "$work/consumer-build.log" 2>/dev/null | tail -30
  fail "a consumer builds with find_package(shardmalloc)"
fi

# pkg-config
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs "$smname" 2>&1)
  echo "      pkg-config --cflags --libs $smname: $flags"
  if [ $? -eq 0 ] && "$cc" -o "$work/consumer-pkgconfig" "$consumer/main.c" $flags -Wl,-rpath,"$prefix/lib" -pthread \
       >"$work/pkgconfig-build.log" 2>&1; then
    ok "a consumer builds with pkg-config --cflags --libs $smname"
    out=$("$work/consumer-pkgconfig" 2>&1); rc=$?
    echo "      consumer-pkgconfig: $out"
    [ $rc -eq 0 ] && ok "consumer-pkgconfig runs on shardmalloc" || fail "consumer-pkgconfig: expected exit 0, seen $rc"
  else
    cat "$work/pkgconfig-build.log"
    fail "a consumer builds with pkg-config"
  fi
else
  fail "pkg-config is not installed (tools/install-deps installs it)"
fi
if [ $failures -ne 0 ]; then echo "install: FAILED: $failures of $checks checks failed"; exit 1; fi
echo "install: all $checks checks passed"
