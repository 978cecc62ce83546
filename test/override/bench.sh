#!/bin/bash
# override-bench: the benchmark suite's own programs (bench/src), built as bench/run builds them
# and run small under LD_PRELOAD=libshardmalloc.so. Each program checks its own work (tags in
# every block, counts and checksums; exit 3 on a mismatch), so this is a multithreaded test of the
# allocator (cross-thread frees, threads that come and go) and keeps the harness from breaking
# unnoticed: the producer/consumer programs sleep on futexes, and a lost wake-up would hang
# (ctest's timeout fails it).
. "$(dirname "$0")/common.sh"
cc=${CC:-cc}
need "$cc" gcc
src="$SM_TEST_DIR/../bench/src"
for prog in shsh larson xmalloc cache shbench alloctest mstress large bigint trees micro; do
  if ! "$cc" -O2 -std=gnu11 -Wall -Wextra -pthread -o "$tmp/$prog" "$src/$prog.c" -lm -ldl 2>"$tmp/cc.log"; then
    check "bench/src/$prog.c builds" "ok" "$(head -3 "$tmp/cc.log")"
  fi
done

# run NAME ARGS...: exit status 0 and a RESULT line
run() {
  local out status
  out=$(preloaded timeout 120 "$tmp/$1" "${@:2}" 2>&1)
  status=$?
  check "$* exits 0" "0" "$status$( [ $status != 0 ] && echo " ($(echo "$out" | tail -1))")"
  check "$* prints its RESULT" "1" "$(echo "$out" | grep -c '^RESULT')"
}
for w in simple isolated swing chain; do run shsh $w 3 30000; done
for t in 2 4 6; do
  run shsh unidirectional $t 60000
  run shsh bidirectional $t 60000
done
run micro xthread 200000
run micro pairs 200000
run larson 4 30 5000
run xmalloc 2 2 20000
run cache scratch 2 100 1000
run cache thrash 2 100 1000
run shbench sh8 2 20
run alloctest 2 20000
run mstress 4 5 5000
run large 60
run bigint 500
run trees 10
finish
