/* test-rss: memory goes back (issue "Memory goes back").  Allocate ~1 GiB in small blocks, touch
 * it, free everything, and check that RSS falls back close to where it started; then the same with
 * large and huge blocks.  RSS is reported right after the frees and after one sm_collect(false);
 * the check is made after sm_collect(false). */
#include "sm-test.h"

#include <malloc.h>

#include "shardmalloc.h"

#define TOTAL ((size_t)1 << 30)
#define SLACK (48 * MiB) /* what may stay resident: caches, metadata, a few retained segments */

struct node { struct node *next; size_t n; }; /* blocks are chained through themselves */

static void round_trip(const char *what, size_t total_wanted, size_t slack, size_t min, size_t max, size_t rss0) {
  SECTION(what) {
    struct node *head = NULL;
    size_t total = 0, count = 0, usable = 0;
    uint64_t s = 88172645463325252ull;
    while (total < total_wanted) {
      s ^= s << 13; s ^= s >> 7; s ^= s << 17;
      size_t n = min + (size_t)(s % (max - min + 1));
      struct node *b = malloc(n);
      CHECK_NONNULL(b);
      if (!b) break;
      memset(b, 0x5a, n); /* resident for real */
      b->n = n;
      b->next = head;
      head = b;
      total += n;
      usable += malloc_usable_size(b);
      count++;
    }
    size_t rss_peak = rss_bytes();
    size_t freed = 0, bad = 0;
    while (head) {
      struct node *next = head->next;
      bad += head->n > sizeof(struct node) && ((uint8_t *)head)[head->n - 1] != 0x5a;
      free(head);
      head = next;
      freed++;
    }
    CHECK_EQ(freed, count);
    CHECK(bad == 0, "blocks' last bytes: expected all intact, seen %zu damaged", bad);
    size_t rss_freed = rss_bytes();
    sm_collect(false);
    size_t rss_collected = rss_bytes();
    printf("  %zu blocks of %zu..%zu bytes, %zu MiB requested (%zu MiB usable)\n", count, min, max, total / MiB,
           usable / MiB);
    printf("  RSS: start %zu MiB, peak %zu MiB, after free-all %zu MiB, after sm_collect(false) %zu MiB\n", rss0 / MiB,
           rss_peak / MiB, rss_freed / MiB, rss_collected / MiB);
    CHECK(rss_peak >= rss0 + total_wanted / 2, "peak RSS: expected the memory to be resident (> %zu MiB), seen %zu MiB",
          (rss0 + total_wanted / 2) / MiB, rss_peak / MiB);
    CHECK(rss_collected < rss0 + slack,
          "RSS after freeing everything and sm_collect(false): expected < start (%zu MiB) + %zu MiB, seen %zu MiB",
          rss0 / MiB, slack / MiB, rss_collected / MiB);
  }
}

int main(void) {
  sm_test_name = "test-rss";
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("rss: allocate ~1 GiB (then 64 MiB), free it all, call sm_collect(false): RSS must come back close to the "
         "start (within %zu MiB; 16 MiB for the 64 MiB rounds)\n", SLACK / MiB);
  size_t rss0 = rss_bytes();
  round_trip("1 GiB in small blocks (16..1024 B)", TOTAL, SLACK, 16, 1024, rss0);
  round_trip("1 GiB in medium blocks (1..64 KiB)", TOTAL, SLACK, 1024, 64 * 1024, rss0);
  round_trip("1 GiB in large and huge blocks (64 KiB..64 MiB)", TOTAL, SLACK, 64 * 1024, 64 * MiB, rss0);
  /* smaller amounts must come back too (sm_collect flushes what a cache would keep) */
  round_trip("64 MiB in 4 KiB blocks", 64 * MiB, 16 * MiB, 4096, 4096, rss0);
  round_trip("64 MiB in 64 KiB..1 MiB blocks", 64 * MiB, 16 * MiB, 64 * 1024, MiB, rss0);
  return sm_test_summary();
}
