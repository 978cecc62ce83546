#!/bin/bash
# valgrind: run a test program under valgrind's memcheck; any error it finds fails the test.
# Used for the sm_ API stress test: valgrind replaces malloc/free with its own, but not the sm_
# functions, so memcheck watches shardmalloc's own code (uninitialised reads, accesses outside
# its mappings) while it serves every block.
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind: SKIPPED: valgrind is not installed (tools/install-deps installs it)"
  exit 77
fi
echo "\$ valgrind -q --error-exitcode=99 $*"
valgrind -q --error-exitcode=99 "$@"
rc=$?
[ $rc -eq 99 ] && echo "valgrind: FAILED: memcheck reported errors (above)"
exit $rc
