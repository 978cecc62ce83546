/* test-neverfree: a program that never calls free (like many compilers and short tools): threads
 * allocate ~300 MiB in blocks of all sizes, touch them, and exit; the program exits with everything
 * still allocated.  It must simply work, at thread exit and at process exit. */
#include "sm-test.h"

#include <pthread.h>

#include "shardmalloc.h"

static void *allocator_thread(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  uint64_t s = id * 0x9E3779B97F4A7C15ull + 1;
  size_t total = 0;
  char *last = NULL;
  size_t lastn = 0;
  while (total < 60 * MiB) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    size_t n = s % 100 < 90 ? s % 512 + 2 : s % 100 < 99 ? s % 65536 + 2 : s % (4 << 20) + 2;
    char *p = malloc(n);
    if (!p) return (void *)1;
    p[0] = (char)id;
    p[n - 1] = (char)n;
    if (last && (last[0] != (char)id || last[lastn - 1] != (char)lastn)) return (void *)2;
    last = p;
    lastn = n;
    total += n;
  }
  return NULL; /* everything it allocated is still live */
}

int main(void) {
  sm_test_name = "test-neverfree";
  setvbuf(stdout, NULL, _IOLBF, 0);
  SECTION("5 threads allocate 60 MiB each and exit without freeing") {
    pthread_t t[5];
    for (uintptr_t i = 0; i < 5; i++) pthread_create(&t[i], NULL, allocator_thread, (void *)(i + 1));
    for (int i = 0; i < 5; i++) {
      void *r = (void *)1;
      pthread_join(t[i], &r);
      CHECK(r == NULL, "thread %d: expected all blocks allocated and intact, seen code %ld", i, (long)(intptr_t)r);
    }
    char *p = malloc(1000);
    CHECK_NONNULL(p);
    CHECK(sm_check_owned(p), "malloc after the threads: expected a shardmalloc block%s", "");
  }
  return sm_test_summary(); /* exits with ~300 MiB never freed */
}
