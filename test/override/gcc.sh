#!/bin/bash
# override-gcc: gcc (driver, cc1, as, collect2, ld: all preloaded) compiles a C file with
# LD_PRELOAD=libshardmalloc.so; the program it built runs (preloaded too) with the right output.
. "$(dirname "$0")/common.sh"
CC=${CC:-gcc}
case $CC in *clang*) CC=gcc ;; esac
need "$CC" gcc
cat > "$tmp/prog.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item { char name[24]; long value; };
static int cmp(const void *a, const void *b) {
  const struct item *x = a, *y = b;
  return x->value < y->value ? -1 : x->value > y->value;
}
int main(void) {
  enum { N = 100000 };
  struct item *v = malloc(N * sizeof *v);
  long sum = 0;
  for (long i = 0; i < N; i++) {
    v[i].value = (i * 7919) % 100003;
    snprintf(v[i].name, sizeof v[i].name, "item%ld", i);
    sum += v[i].value;
  }
  qsort(v, N, sizeof *v, cmp);
  char *s = strdup(v[N - 1].name);
  printf("sum=%ld min=%ld max=%ld last=%s\n", sum, v[0].value, v[N - 1].value, s);
  free(s);
  free(v);
  return 0;
}
C
preloaded "$CC" -O2 -Wall -o "$tmp/prog" "$tmp/prog.c" 2>"$tmp/cc.err"
check "gcc -O2 compiles prog.c under shardmalloc (exit status)" "0" "$?"
[ -s "$tmp/cc.err" ] && cat "$tmp/cc.err"
expected=$("$CC" -O2 -o "$tmp/prog-ref" "$tmp/prog.c" && "$tmp/prog-ref")
check "the program built under shardmalloc prints the right result" "$expected" "$(preloaded "$tmp/prog" 2>&1)"
check "the reference result itself (min, max, last)" "min=0 max=100002 last=item" "$(cut -d' ' -f2-4 <<<"$expected" | sed 's/last=item[0-9]*/last=item/')"
# a bigger translation unit: many functions, so cc1 allocates a lot
{
  for i in $(seq 1 400); do echo "int f$i(int x) { int a[$((i % 50 + 1))]; for (int k = 0; k < $((i % 50 + 1)); k++) a[k] = x * k + $i; return a[$((i % 50))] ^ x; }"; done
  echo 'int main(void) { long s = 0;'
  for i in $(seq 1 400); do echo "s += f$i($i);"; done
  echo 'return (int)(s & 0x7f); }'
} > "$tmp/big.c"
preloaded "$CC" -O2 -o "$tmp/big" "$tmp/big.c"
check "gcc -O2 compiles a 400-function file under shardmalloc" "0" "$?"
"$CC" -O2 -o "$tmp/big-ref" "$tmp/big.c"; "$tmp/big-ref"; ref=$?
"$tmp/big"; got=$?
check "the 400-function program computes the same result as the reference build" "$ref" "$got"
check_true "cc1's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" \
  bound_to_shardmalloc 'cc1' "$CC" -O2 -c -o "$tmp/prog2.o" "$tmp/prog.c"
finish
