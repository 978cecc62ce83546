#!/bin/bash
# override-bash: bash runs a script with LD_PRELOAD=libshardmalloc.so; its output must equal the
# output of the same script on glibc's malloc, and its malloc must be shardmalloc's.
. "$(dirname "$0")/common.sh"
need bash
cat > "$tmp/work.sh" <<'SCRIPT'
declare -A assoc
arr=()
s=""
for ((i = 0; i < 20000; i++)); do
  assoc["key$i"]=$((i * i % 9973))
  arr+=("item-$i")
  (( i % 500 == 0 )) && s+="${arr[i]}:"
done
sum=0
for k in "${!assoc[@]}"; do sum=$((sum + assoc[$k])); done
echo "assoc entries ${#assoc[@]} sum $sum"
echo "array ${#arr[@]} last ${arr[-1]} joined-length ${#s}"
big=$(printf '%s\n' "${arr[@]}" | sort -r | head -3 | tr '\n' ' ')
echo "sorted head: $big"
words=$(for i in $(seq 1 3000); do echo "w$((i % 37))"; done | sort | uniq -c | wc -l)
echo "distinct words $words"
str=$(printf 'x%.0s' {1..100000}); echo "long string ${#str}"
short=${str:0:5000}; short=${short//x/yz}; echo "replaced ${#short}"
f() { local v="$1$1"; if (( ${#v} < 40000 )); then f "$v"; else echo "recursion done ${#v}"; fi; }
f ab
unset assoc arr
echo "end"
SCRIPT
ref=$(bash "$tmp/work.sh" 2>&1)
out=$(preloaded bash "$tmp/work.sh" 2>&1)
check "bash script output equals the glibc run ($(wc -l <<<"$ref") lines)" "$ref" "$out"
check "bash script printed its last line" "end" "$(tail -1 <<<"$out")"
check "shardmalloc mapped into the preloaded bash" "yes" "$(preloaded bash -c 'grep -q libshardmalloc /proc/$$/maps && echo yes || echo no')"
check_true "bash's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" bound_to_shardmalloc 'bash' bash -c 'echo hi'
finish
