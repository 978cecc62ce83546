/* larson-style server simulation, written from the description of Larson and Krishnan's
 * benchmark ("Memory allocation for long-running server applications", ISMM 1998): each worker
 * owns an array of live blocks and repeatedly frees a random one and allocates a replacement of
 * a random size. After each round the worker starts a successor thread, hands it the array and
 * exits, so blocks allocated by one thread are freed by another ("bleeding"). The arrays are
 * first filled by the main thread and emptied by it at the end (more cross-thread frees).
 *
 *   larson THREADS ROUNDS OPS_PER_ROUND [SLOTS=1000] [MIN=8] [MAX=1000] [SEED]
 * Prints: RESULT mops=<million replace operations per second> ops=<n> secs=<s>
 */
#include "common.h"

typedef struct {
  _Alignas(CACHE_LINE) item_t *slots; /* a worker writes its counters on every operation */
  long nslots;
  long rounds_left;
  long ops;
  rng_t rng;
  long done_ops;
  long nalloc, nfree;
} larson_t;

static long gmin = 8, gmax = 1000;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int finished;

static void *worker(void *arg) {
  larson_t *w = (larson_t *)arg;
  long range = gmax - gmin + 1;
  for (long i = 0; i < w->ops; i++) {
    uint32_t j = rng_below(&w->rng, (uint32_t)w->nslots);
    item_t *s = &w->slots[j];
    xfree_tagged(s->p, s->size, "larson");
    w->nfree++;
    s->size = (size_t)(gmin + rng_below(&w->rng, (uint32_t)range));
    s->p = xmalloc_tagged(s->size);
    w->nalloc++;
  }
  w->done_ops += w->ops;
  if (--w->rounds_left > 0) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &a, worker, w) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      exit(2);
    }
    pthread_attr_destroy(&a);
    return NULL;
  }
  pthread_mutex_lock(&mu);
  finished++;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = (int)arg_long(argc, argv, 1, 2);
  long rounds = arg_long(argc, argv, 2, 10);
  long ops = arg_long(argc, argv, 3, 100000);
  long nslots = arg_long(argc, argv, 4, 1000);
  gmin = arg_long(argc, argv, 5, 8);
  gmax = arg_long(argc, argv, 6, 1000);
  uint64_t seed = (uint64_t)arg_long(argc, argv, 7, 4141);
  if (nthreads < 1 || rounds < 1 || nslots < 1 || gmin < 1 || gmax < gmin) return 2;

  larson_t *ws = xcalloc_lines((size_t)nthreads, sizeof(larson_t));
  rng_t r0;
  rng_seed(&r0, seed);
  long range = gmax - gmin + 1;
  long prefill = 0;
  for (int t = 0; t < nthreads; t++) {
    larson_t *w = &ws[t];
    w->nslots = nslots;
    w->rounds_left = rounds;
    w->ops = ops;
    rng_seed(&w->rng, seed + 1 + (uint64_t)t);
    w->slots = malloc((size_t)nslots * sizeof(item_t));
    if (!w->slots) oom_fail((size_t)nslots * sizeof(item_t));
    for (long j = 0; j < nslots; j++) {
      w->slots[j].size = (size_t)(gmin + rng_below(&r0, (uint32_t)range));
      w->slots[j].p = xmalloc_tagged(w->slots[j].size);
      prefill++;
    }
  }
  double t0 = now_sec();
  for (int t = 0; t < nthreads; t++) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &a, worker, &ws[t]) != 0) return 2;
    pthread_attr_destroy(&a);
  }
  pthread_mutex_lock(&mu);
  while (finished < nthreads) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  double secs = now_sec() - t0;

  long total_ops = 0, na = prefill, nf = 0;
  for (int t = 0; t < nthreads; t++) {
    larson_t *w = &ws[t];
    total_ops += w->done_ops;
    na += w->nalloc;
    nf += w->nfree;
    for (long j = 0; j < nslots; j++) {
      xfree_tagged(w->slots[j].p, w->slots[j].size, "larson (final)");
      nf++;
    }
    free(w->slots);
  }
  free(ws);
  if (total_ops != (long)nthreads * rounds * ops || na != nf)
    verify_fail("larson: expected %ld operations, did %ld; %ld allocations vs %ld frees",
                (long)nthreads * rounds * ops, total_ops, na, nf);
  printf("RESULT mops=%.4f ops=%ld secs=%.6f\n", (double)total_ops / secs / 1e6, total_ops, secs);
  return 0;
}
