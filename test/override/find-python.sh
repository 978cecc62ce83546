# find-python.sh: sourced; sets PY to a real python3 executable (not a pyenv shim script), and with
# "testsuite" as $1 one that has CPython's own test package (test.libregrtest and test_dict).
find_python() {
  local want=${1:-} c real
  local cands=()
  command -v python3 >/dev/null 2>&1 && cands+=("$(command -v python3)")
  cands+=(/usr/bin/python3 /usr/local/bin/python3)
  for c in /root/.pyenv/versions/3.1[0-9]*/bin/python3 /root/.pyenv/versions/3.[89]*/bin/python3; do
    [ -x "$c" ] && cands+=("$c")
  done
  for c in "${cands[@]}"; do
    [ -x "$c" ] || continue
    real=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null) || continue
    [ -x "$real" ] || continue
    if [ "$want" = testsuite ]; then
      "$real" -c 'import test.libregrtest, test.test_dict, test.test_json, test.test_pickle' >/dev/null 2>&1 || continue
    fi
    PY=$real
    return 0
  done
  return 1
}
