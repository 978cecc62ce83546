#!/bin/bash
# valgrind-memcheck.sh LIBSHARDMALLOC-VALGRIND.so VG-PROG
# Issue 5: with the SM_VALGRIND build preloaded, memcheck reports a program's errors as it does
# under glibc: exactly the known leak (100 bytes in 1 blocks definitely lost) and the known invalid
# read (1 byte past a 32-byte block), nothing else (ERROR SUMMARY: 2 errors), and the allocation
# stacks show shardmalloc's malloc (not memcheck's replacement from vgpreload).
lib=$1
prog=$2
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind-memcheck: SKIPPED: valgrind is not installed"
  exit 77
fi
if [ ! -f "$lib" ]; then
  echo "valgrind-memcheck: SKIPPED: the SM_VALGRIND library was not built (valgrind/memcheck.h missing)"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "running: LD_PRELOAD=$(basename "$lib") valgrind --soname-synonyms=somalloc=nouserintercepts --leak-check=full $(basename "$prog")"
LD_PRELOAD=$lib valgrind --soname-synonyms=somalloc=nouserintercepts --leak-check=full --num-callers=8 \
  "$prog" >"$log" 2>&1
rc=$?
fails=0
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
check "program ran to its end (exit 0, seen $rc)" [ "$rc" -eq 0 ]
check "ERROR SUMMARY: 2 errors (seen: $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log" | head -1))" \
  grep -q 'ERROR SUMMARY: 2 errors from 2 contexts' "$log"
check "the leak: \"100 bytes in 1 blocks are definitely lost\"" grep -q '100 bytes in 1 blocks are definitely lost' "$log"
check "the invalid read: \"Invalid read of size 1\" in read_past_end" \
  bash -c "grep -A3 'Invalid read of size 1' '$log' | grep -q read_past_end"
check "the invalid read is 0 bytes after a block of size 32" grep -q '0 bytes after a block of size 32 alloc' "$log"
check "no other leak: \"definitely lost: 100 bytes in 1 blocks\"" grep -q 'definitely lost: 100 bytes in 1 blocks' "$log"
check "no indirect/possible leaks" bash -c "grep -q 'indirectly lost: 0 bytes' '$log' && grep -q 'possibly lost: 0 bytes' '$log'"
# the leak's allocation stack: shardmalloc's malloc, called from leak_100
stack=$(grep -A3 '100 bytes in 1 blocks are definitely lost' "$log")
check "the leak's stack shows malloc in the shardmalloc library" bash -c "echo \"\$0\" | grep -q 'malloc (.*shardmalloc'" "$stack"
check "the leak's stack does not show vgpreload's malloc" bash -c "! echo \"\$0\" | grep -q vgpreload" "$stack"
check "the leak's stack shows leak_100" bash -c "echo \"\$0\" | grep -q leak_100" "$stack"
echo "--- memcheck output (allocation stacks and summary) ---"
grep -E 'Invalid|bytes in|at 0x|by 0x|ERROR SUMMARY|lost:|after a block' "$log" | head -40 | sed 's/^/  | /'
if [ $fails -ne 0 ]; then
  echo "--- full log ---"; sed 's/^/  | /' "$log" | tail -80
  echo "valgrind-memcheck: FAILED: $fails checks failed"
  exit 1
fi
echo "valgrind-memcheck: all checks passed"
