#!/bin/bash
# hugepages.sh KB COUNT PROGRAM ARGS...: run PROGRAM with at least COUNT free hugetlb pages of KB
# kB in the kernel's pool. If there are fewer and we may (root), grow the pool for the run and put
# it back afterwards, whatever happens (the system is never left changed). If the pool cannot grow
# (not root, no such page size, memory too fragmented for a 1 GiB page), PROGRAM runs anyway and
# skips with its own message (exit 77).
kb=$1 count=$2
shift 2
dir=/sys/kernel/mm/hugepages/hugepages-${kb}kB
if [ ! -e "$dir/nr_hugepages" ]; then
  echo "hugepages.sh: this kernel has no ${kb} kB huge pages"
  exec "$@"
fi
orig=$(cat "$dir/nr_hugepages")
free=$(( $(cat "$dir/free_hugepages") - $(cat "$dir/resv_hugepages") )) # reserved ones are promised
if [ "$free" -lt "$count" ] && [ -w "$dir/nr_hugepages" ]; then
  restore() { echo "$orig" > "$dir/nr_hugepages"; echo "hugepages.sh: nr_hugepages back to $orig ($(cat "$dir/nr_hugepages"))"; }
  trap restore EXIT
  trap 'exit 130' INT TERM
  want=$((orig + count - free))
  echo "$want" > "$dir/nr_hugepages" 2>/dev/null
  echo "hugepages.sh: ${kb} kB pages: nr_hugepages $orig -> $(cat "$dir/nr_hugepages") (asked $want), free $(cat "$dir/free_hugepages")"
fi
"$@"
