#!/bin/bash
# override-python-testsuite: a real slice of CPython's own test suite, with PYTHONMALLOC=malloc and
# LD_PRELOAD=libshardmalloc.so: test_dict test_list test_set test_unicode (test_str on 3.12+)
# test_gc test_json test_pickle, and the threaded test_thread test_threading_local test_queue.
# Needs a python3 with the test package (pyenv's, or Debian's with libpython3.X-testsuite, which
# tools/install-deps installs).  test/extra runs it under the secure and debug builds too (SM_LIB):
# no report there.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/find-python.sh"
find_python testsuite || {
  echo "override-python-testsuite: SKIPPED: no python3 with the test package (install libpython3-testsuite)"
  exit 77
}
echo "python: $PY ($("$PY" -V 2>&1)), library: $SM_LIB"
tests="test_dict test_list test_set test_gc test_json test_pickle test_thread test_threading_local test_queue"
if "$PY" -c 'import test.test_unicode' >/dev/null 2>&1; then tests="$tests test_unicode"; else tests="$tests test_str"; fi
check "shardmalloc mapped into the preloaded python" "True" \
  "$(PYTHONMALLOC=malloc preloaded "$PY" -c 'print("libshardmalloc" in open("/proc/self/maps").read())' 2>&1)"
cd "$tmp"
PYTHONMALLOC=malloc preloaded "$PY" -m test $tests </dev/null >"$tmp/out.txt" 2>&1
rc=$?
tail -25 "$tmp/out.txt"
if [ "$rc" != 0 ]; then
  # the tail above is the bottom of a crash's traceback: show which test ran and the top of it
  echo "--- last tests started, and the start of any fatal error report:"
  grep -E '^[0-9:]+ load avg: .*\[ *[0-9]+/[0-9]+\]' "$tmp/out.txt" | tail -3
  grep -A30 'Fatal Python error' "$tmp/out.txt" | head -60
fi
check "python -m test $tests: exit status" "0" "$rc"
check_true "python -m test reports SUCCESS" grep -Eq "^(Tests )?[Rr]esult: SUCCESS" "$tmp/out.txt"
check "errors reported by shardmalloc" "0" "$(grep -c 'shardmalloc: error' "$tmp/out.txt")"
finish
