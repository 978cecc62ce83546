/* vg-prog: a program with exactly two memory errors, for valgrind-memcheck.sh:
 *   one leak:          100 bytes, the only pointer to them dropped;
 *   one invalid read:  one byte past the end of a live 32-byte block.
 * Everything else is correct (blocks of several sizes allocated, used and freed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

static __attribute__((noinline)) void leak_100(void) {
  char *p = malloc(100);
  memset(p, 1, 100);
  sink = p;
  sink = NULL; /* dropped: definitely lost */
}

static __attribute__((noinline)) int read_past_end(void) {
  char *p = malloc(32);
  memset(p, 2, 32);
  volatile char *q = p;
  int c = q[32]; /* one byte past the block: invalid read of size 1 */
  free(p);
  return c;
}

int main(void) {
  /* correct traffic in every size kind, so the annotations are exercised */
  static const size_t sizes[] = {8, 32, 100, 1000, 40000, 300000, 3000000};
  for (int r = 0; r < 3; r++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      char *b = malloc(sizes[i]);
      memset(b, (int)i, sizes[i]);
      b = realloc(b, sizes[i] * 2);
      b[sizes[i] * 2 - 1] = 0;
      free(b);
    }
  /* realloc in place (the block keeps its address): its bytes stay the program's, as they were */
  char *keep = malloc(100);
  memset(keep, 7, 100);
  char *same = realloc(keep, 90);
  int sum = same[0] + same[89];
  free(same);
  leak_100();
  int c = read_past_end();
  printf("vg-prog: done (%d)\n", (c & 0) + (sum == 14 ? 0 : 1));
  return 0;
}
