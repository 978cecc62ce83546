/* test-churn: thousands of short threads (DROPIN 19, issue "Thread exit").  10,000 threads are
 * created and joined in batches; each allocates blocks of several sizes, frees some itself, and
 * leaves a few in a shared table, where a later thread (its owner long gone) checks and frees them.
 * Every block's contents are verified before it is freed (a block handed out twice, or freed
 * twice, shows up as damaged contents), and RSS must stay bounded: blocks freed after their owner
 * exited are neither lost nor double-counted.
 * With SM_TEST_SM_API (the TSan build) it uses the sm_ API and does not check RSS. */
#include "sm-test.h"

#include <pthread.h>
#include <stdatomic.h>

#include "shardmalloc.h"

/* xmalloc & co.: the standard names, or the sm_ API with SM_TEST_SM_API (sm-test.h) */

#define NSLOTS 512
#define BATCH 50
static _Atomic(uint64_t *) slots[NSLOTS]; /* block: [0] = size, [1] = seed, rest = pattern */
static atomic_long damaged, alloc_failures, blocks_made, blocks_freed;

static uint64_t *make_block(size_t n, uint64_t seed) {
  uint64_t *b = xmalloc(n);
  if (!b) {
    atomic_fetch_add(&alloc_failures, 1);
    return NULL;
  }
  b[0] = n;
  b[1] = seed;
  fill_pattern(b + 2, n - 16, seed);
  atomic_fetch_add(&blocks_made, 1);
  return b;
}
static void check_free(uint64_t *b) {
  if (!b) return;
  size_t n = b[0];
  if (n < 16 || n > (1 << 20) || verify_pattern(b + 2, n - 16, b[1]) != (size_t)-1) {
    if (atomic_fetch_add(&damaged, 1) < 5)
      fprintf(stderr, "damaged block %p: header size %zu seed %#llx\n", (void *)b, n, (unsigned long long)b[1]);
  }
  atomic_fetch_add(&blocks_freed, 1);
  xfree(b);
}

static void *churn_thread(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  static const size_t sizes[] = {16, 40, 100, 700, 3000, 20000, 120000};
  uint64_t *mine[7];
  for (int i = 0; i < 7; i++) mine[i] = make_block(sizes[i] + (id % 13) * 8, id * 8 + (uint64_t)i);
  /* free 3 of them ourselves (one after a realloc) */
  check_free(mine[0]);
  check_free(mine[3]);
  if (mine[5]) {
    uint64_t *r = xrealloc(mine[5], mine[5][0] + 5000);
    if (!r) atomic_fetch_add(&alloc_failures, 1);
    else {
      if (verify_pattern(r + 2, r[0] - 16, r[1]) != (size_t)-1) atomic_fetch_add(&damaged, 1);
      r[0] += 5000;
      fill_pattern(r + 2, r[0] - 16, r[1]);
    }
    mine[5] = r;
  }
  /* leave the other 4 in the table; whatever was there (from earlier threads) is ours to free */
  int leave[4] = {1, 2, 4, 5};
  for (int k = 0; k < 4; k++) {
    size_t slot = (size_t)((id * 4 + (uint64_t)k) * 2654435761u % NSLOTS);
    check_free(atomic_exchange(&slots[slot], mine[leave[k]]));
  }
  check_free(mine[6]);
  return NULL;
}

int main(int argc, char **argv) {
  sm_test_name = "test-churn";
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nthreads = 10000;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
  size_t rss_start = rss_bytes(), rss_warm = 0, rss_max = 0;
  SECTION("create and join threads in batches; blocks freed by later threads") {
    int created = 0;
    for (int b = 0; created < nthreads; b++) {
      pthread_t t[BATCH];
      int n = 0;
      for (; n < BATCH && created < nthreads; n++, created++) {
        int r = pthread_create(&t[n], NULL, churn_thread, (void *)(uintptr_t)created);
        if (r) {
          CHECK(r == 0, "pthread_create #%d: expected 0, seen %d", created, r);
          break;
        }
      }
      for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
      size_t rss = rss_bytes();
      if (created == 1000 || (nthreads < 1000 && b == 0)) rss_warm = rss;
      if (rss > rss_max) rss_max = rss;
    }
    CHECK_EQ(created, nthreads);
    for (int i = 0; i < NSLOTS; i++) check_free(atomic_exchange(&slots[i], NULL));
    CHECK(atomic_load(&damaged) == 0, "expected every block intact when freed, seen %ld damaged",
          atomic_load(&damaged));
    CHECK(atomic_load(&alloc_failures) == 0, "expected no allocation failure, seen %ld", atomic_load(&alloc_failures));
    CHECK(atomic_load(&blocks_made) == atomic_load(&blocks_freed),
          "every block freed exactly once: expected %ld frees, seen %ld", atomic_load(&blocks_made),
          atomic_load(&blocks_freed));
  }
  size_t rss_end = rss_bytes();
#if SM_TEST_SM_API
  sm_collect(true);
  printf("  %d threads; RSS start %zu MiB, after 1000 threads %zu MiB, max %zu MiB, end %zu MiB (not checked here)\n",
         nthreads, rss_start / MiB, rss_warm / MiB, rss_max / MiB, rss_end / MiB);
#else
  sm_collect(true);
  size_t rss_collected = rss_bytes();
  printf("  %d threads; RSS start %zu MiB, after 1000 threads %zu MiB, max %zu MiB, end %zu MiB, "
         "after sm_collect(true) %zu MiB\n",
         nthreads, rss_start / MiB, rss_warm / MiB, rss_max / MiB, rss_end / MiB, rss_collected / MiB);
  SECTION("RSS stays bounded over 10,000 threads") {
    /* each thread leaves ~150 KiB in blocks behind: lost or never-reclaimed memory would add up to
     * more than a GiB over the run */
    CHECK(rss_max < rss_warm + 48 * MiB,
          "peak RSS: expected < RSS after the first 1000 threads (%zu MiB) + 48 MiB, seen %zu MiB", rss_warm / MiB,
          rss_max / MiB);
    CHECK(rss_collected < rss_start + 32 * MiB,
          "RSS after all blocks freed and sm_collect(true): expected < start (%zu MiB) + 32 MiB, seen %zu MiB",
          rss_start / MiB, rss_collected / MiB);
  }
#endif
  return sm_test_summary();
}
