/* xmalloc-style asymmetric producer/consumer, written from the description of Lever and
 * Boreham's xmalloc-test: some threads only allocate, the others only free. Producers fill
 * batches of 64 blocks of mixed sizes and push them on a shared, bounded stack of batches;
 * consumers pop batches and free every block (and the batch itself, also allocated by a
 * producer). The bound keeps the live memory independent of the relative speeds.
 *
 *   xmalloc PRODUCERS CONSUMERS TOTAL_BLOCKS [SEED]
 * Prints: RESULT mops=<million blocks per second> blocks=<n> secs=<s>
 */
#include "common.h"

#define BATCH 64
#define MAX_OUTSTANDING 512

typedef struct batch {
  struct batch *next;
  int n;
  item_t items[BATCH];
} batch_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static batch_t *stack;
static long outstanding;
static int producers_left;
static long batches_per_producer;
static _Atomic long g_alloc, g_free;
static _Atomic uint64_t g_bytes_alloc, g_bytes_free;

static size_t pick_size(rng_t *r) {
  uint32_t k = rng_below(r, 100);
  if (k < 70) return 8 + rng_below(r, 57);     /* 8..64 */
  if (k < 95) return 64 + rng_below(r, 449);   /* 64..512 */
  return 512 + rng_below(r, 3585);             /* 512..4096 */
}

static void *producer(void *arg) {
  rng_t rng;
  rng_seed(&rng, (uint64_t)(uintptr_t)arg);
  long na = 0;
  uint64_t bytes = 0;
  for (long b = 0; b < batches_per_producer; b++) {
    batch_t *bt = malloc(sizeof(batch_t));
    if (!bt) oom_fail(sizeof(batch_t));
    bt->n = BATCH;
    for (int i = 0; i < BATCH; i++) {
      size_t s = pick_size(&rng);
      bt->items[i].p = xmalloc_tagged(s);
      bt->items[i].size = s;
      bytes += s;
    }
    na += BATCH;
    pthread_mutex_lock(&mu);
    while (outstanding >= MAX_OUTSTANDING) pthread_cond_wait(&not_full, &mu);
    bt->next = stack;
    stack = bt;
    outstanding++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_lock(&mu);
  producers_left--;
  pthread_cond_broadcast(&not_empty);
  pthread_mutex_unlock(&mu);
  atomic_fetch_add(&g_alloc, na);
  atomic_fetch_add(&g_bytes_alloc, bytes);
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  long nf = 0;
  uint64_t bytes = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!stack && producers_left > 0) pthread_cond_wait(&not_empty, &mu);
    batch_t *bt = stack;
    if (!bt) {
      pthread_mutex_unlock(&mu);
      break;
    }
    stack = bt->next;
    outstanding--;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&mu);
    /* free in reverse order of allocation */
    for (int i = bt->n - 1; i >= 0; i--) {
      xfree_tagged(bt->items[i].p, bt->items[i].size, "xmalloc");
      bytes += bt->items[i].size;
    }
    nf += bt->n;
    free(bt);
  }
  atomic_fetch_add(&g_free, nf);
  atomic_fetch_add(&g_bytes_free, bytes);
  return NULL;
}

int main(int argc, char **argv) {
  int np = (int)arg_long(argc, argv, 1, 1);
  int nc = (int)arg_long(argc, argv, 2, 1);
  long total = arg_long(argc, argv, 3, 4000000);
  uint64_t seed = (uint64_t)arg_long(argc, argv, 4, 7);
  if (np < 1 || nc < 1) return 2;
  batches_per_producer = total / BATCH / np;
  if (batches_per_producer < 1) batches_per_producer = 1;
  producers_left = np;
  pthread_t *th = calloc((size_t)(np + nc), sizeof(pthread_t));
  double t0 = now_sec();
  for (int i = 0; i < nc; i++) th[np + i] = spawn(consumer, NULL);
  for (int i = 0; i < np; i++) th[i] = spawn(producer, (void *)(uintptr_t)(seed * 100 + (uint64_t)i));
  for (int i = 0; i < np + nc; i++) pthread_join(th[i], NULL);
  double secs = now_sec() - t0;
  free(th);
  long expect = batches_per_producer * BATCH * np;
  if (atomic_load(&g_alloc) != expect || atomic_load(&g_free) != expect ||
      atomic_load(&g_bytes_alloc) != atomic_load(&g_bytes_free))
    verify_fail("xmalloc: expected %ld blocks, allocated %ld, freed %ld", expect, atomic_load(&g_alloc),
                atomic_load(&g_free));
  printf("RESULT mops=%.4f blocks=%ld secs=%.6f\n", (double)expect / secs / 1e6, expect, secs);
  return 0;
}
