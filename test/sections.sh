# sections.sh, sourced by test scripts that run a test program and accept some of its sections
# failing (extra/suite-preload.sh, pagesize.sh):
#   sections_check LOG STATUS ALLOWED WHERE
# LOG is the program's output, STATUS its exit status, ALLOWED a '|'-separated list of section
# titles that may fail, WHERE names the run in messages. Passes (status 0) when every failed
# section is an allowed one, the allocator reported no error (a correct program) and the program
# ended normally (exit 0, or the test's own "FAILED" exit for allowed sections only).
sections_check() {
  local log=$1 status=$2 allowed=$3 where=$4 bad=0 line title a ok list
  while IFS= read -r line; do
    title=$(echo "$line" | sed -E 's/^FAIL  (.*[^ ]) +[0-9]+ of [0-9]+ checks failed$/\1/')
    IFS='|' read -ra list <<<"$allowed"
    ok=0
    for a in "${list[@]}"; do [ -n "$a" ] && [ "$title" = "$a" ] && ok=1; done
    if [ $ok = 1 ]; then
      echo "  (section allowed to fail $where, failed: $title)"
    else
      echo "FAIL: section failed $where: $line"
      bad=1
    fi
  done < <(grep -E '^FAIL  ' "$log")
  if grep -q '^shardmalloc: error:' "$log"; then
    echo "FAIL: the allocator reported an error $where, in a correct program:"
    grep '^shardmalloc: error:' "$log" | head -5 | sed 's/^/  | /'
    bad=1
  fi
  if [ "$status" -ne 0 ] && [ $bad = 0 ] && ! grep -q ': FAILED: ' "$log"; then
    echo "FAIL: expected a normal exit $where, seen exit status $status (signal $((status > 128 ? status - 128 : 0)))"
    bad=1
  fi
  return $bad
}
