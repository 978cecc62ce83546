/* sh6bench- and sh8bench-style stress tests, written from MicroQuill's descriptions of the
 * SmartHeap benchmarks: objects are freed partly in the usual last-allocated-first-freed (LIFO)
 * order and partly in reverse (allocation) order; in the sh8 variant a part of every batch is
 * freed by another thread.
 *
 * Every iteration of a thread:
 *   1. allocates a batch of BATCH blocks whose sizes sweep MIN..MAX (random start and stride);
 *   2. frees the odd-numbered blocks from the last to the first (LIFO);
 *   3. allocates new blocks into those slots (other sizes);
 *   4. sh6: frees the whole batch in allocation order (the "reverse" order);
 *      sh8: frees the first half in allocation order and sends the second half to the next
 *           thread (in a ring), which frees it in reverse allocation order; the thread also
 *           frees whatever its predecessor sent it.
 *
 *   shbench sh6|sh8 THREADS ITERATIONS [BATCH=1000] [MIN=1] [MAX=1000] [SEED]
 * Prints: RESULT mops=<million allocations per second> allocs=<n> secs=<s>
 */
#include "common.h"

typedef struct parcel {
  struct parcel *next;
  long n;
  item_t items[];
} parcel_t;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  parcel_t *head;
  long received;
  _Atomic long pending; /* parcels sent but not yet taken */
} mailbox_t;

/* a sender waits (freeing its own mail meanwhile) while the receiver has this many parcels */
#define MAX_PENDING 4

static int sh8;
static int nthreads;
static long iterations, batch, smin, smax;
static uint64_t seed;
static mailbox_t *boxes;
static _Atomic long g_alloc, g_free;

static size_t sweep_size(long i, long start, long stride) {
  long range = smax - smin + 1;
  return (size_t)(smin + (start + i * stride) % range);
}

static long drain(mailbox_t *mb, int wait) {
  long freed = 0;
  pthread_mutex_lock(&mb->mu);
  while (wait && !mb->head) pthread_cond_wait(&mb->cv, &mb->mu);
  parcel_t *p = mb->head;
  mb->head = NULL;
  pthread_mutex_unlock(&mb->mu);
  for (parcel_t *q = p; q; q = q->next) atomic_fetch_sub(&mb->pending, 1);
  while (p) {
    parcel_t *next = p->next;
    for (long i = p->n - 1; i >= 0; i--) xfree_tagged(p->items[i].p, p->items[i].size, "sh8bench (received)");
    freed += p->n;
    free(p);
    p = next;
    pthread_mutex_lock(&mb->mu);
    mb->received++;
    pthread_mutex_unlock(&mb->mu);
  }
  return freed;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  rng_t rng;
  rng_seed(&rng, seed * 77 + (uint64_t)id);
  item_t *b = malloc((size_t)batch * sizeof(item_t));
  if (!b) oom_fail((size_t)batch * sizeof(item_t));
  long na = 0, nf = 0;
  mailbox_t *mine = sh8 ? &boxes[id] : NULL, *next = sh8 ? &boxes[(id + 1) % nthreads] : NULL;
  for (long it = 0; it < iterations; it++) {
    long start = rng_below(&rng, 1000), stride = 1 + rng_below(&rng, 97);
    for (long i = 0; i < batch; i++) {
      b[i].size = sweep_size(i, start, stride);
      b[i].p = xmalloc_tagged(b[i].size);
    }
    na += batch;
    for (long i = (batch - 1) | 1; i >= 1; i -= 2) {
      if (i >= batch) continue;
      xfree_tagged(b[i].p, b[i].size, "shbench (LIFO)");
      nf++;
    }
    start = rng_below(&rng, 1000);
    for (long i = 1; i < batch; i += 2) {
      b[i].size = sweep_size(i, start, stride);
      b[i].p = xmalloc_tagged(b[i].size);
      na++;
    }
    long keep = sh8 ? batch / 2 : batch;
    for (long i = 0; i < keep; i++) xfree_tagged(b[i].p, b[i].size, "shbench (reverse)");
    nf += keep;
    if (sh8) {
      long n = batch - keep;
      parcel_t *p = malloc(sizeof(parcel_t) + (size_t)n * sizeof(item_t));
      if (!p) oom_fail(sizeof(parcel_t));
      p->n = n;
      memcpy(p->items, b + keep, (size_t)n * sizeof(item_t));
      while (atomic_load(&next->pending) >= MAX_PENDING) {
        nf += drain(mine, 0);
        sched_yield();
      }
      atomic_fetch_add(&next->pending, 1);
      pthread_mutex_lock(&next->mu);
      p->next = next->head;
      next->head = p;
      pthread_cond_signal(&next->cv);
      pthread_mutex_unlock(&next->mu);
      nf += drain(mine, 0);
    }
  }
  if (sh8) {
    for (;;) {
      pthread_mutex_lock(&mine->mu);
      long got = mine->received;
      int pending = mine->head != NULL;
      pthread_mutex_unlock(&mine->mu);
      if (got >= iterations && !pending) break;
      nf += drain(mine, 1);
    }
  }
  free(b);
  atomic_fetch_add(&g_alloc, na);
  atomic_fetch_add(&g_free, nf);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: shbench sh6|sh8 THREADS ITERATIONS [BATCH] [MIN] [MAX] [SEED]\n");
    return 2;
  }
  sh8 = strcmp(argv[1], "sh8") == 0;
  nthreads = (int)arg_long(argc, argv, 2, 1);
  iterations = arg_long(argc, argv, 3, 1000);
  batch = arg_long(argc, argv, 4, 1000);
  smin = arg_long(argc, argv, 5, 1);
  smax = arg_long(argc, argv, 6, 1000);
  seed = (uint64_t)arg_long(argc, argv, 7, 1);
  if (nthreads < 1 || batch < 2 || smin < 1 || smax < smin) return 2;
  if (sh8) {
    boxes = calloc((size_t)nthreads, sizeof(mailbox_t));
    for (int i = 0; i < nthreads; i++) {
      pthread_mutex_init(&boxes[i].mu, NULL);
      pthread_cond_init(&boxes[i].cv, NULL);
    }
  }
  pthread_t *th = calloc((size_t)nthreads, sizeof(pthread_t));
  double t0 = now_sec();
  if (nthreads == 1) worker((void *)0);
  else {
    for (int i = 0; i < nthreads; i++) th[i] = spawn(worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  }
  double secs = now_sec() - t0;
  long expect = (long)nthreads * iterations * (batch + batch / 2);
  if (atomic_load(&g_alloc) != expect || atomic_load(&g_free) != expect)
    verify_fail("shbench: expected %ld allocations and frees, got %ld and %ld", expect, atomic_load(&g_alloc),
                atomic_load(&g_free));
  printf("RESULT mops=%.4f allocs=%ld secs=%.6f\n", (double)expect / secs / 1e6, expect, secs);
  free(th);
  free(boxes);
  return 0;
}
