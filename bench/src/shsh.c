/* The six workloads of the "Scalable High Speed Heap" benchmark set, written from the published
 * descriptions (orz, 2011): simple, isolated, swing, unidirectional, bidirectional, chain.
 * Block sizes are uniform in 4..259 bytes, and consecutive allocations tend to have the same size
 * (the size is re-drawn with probability 1/8 per allocation).
 *
 *   shsh WORKLOAD THREADS PAIRS [SEED]
 *
 * PAIRS is the total number of malloc/free pairs, split evenly over the threads. Prints
 *   RESULT mpairs=<millions of pairs per second> pairs=<n> secs=<s>
 */
#include "common.h"

enum { W_SIMPLE, W_ISOLATED, W_SWING, W_UNIDIR, W_BIDIR, W_CHAIN };
static const char *wnames[] = {"simple", "isolated", "swing", "unidirectional", "bidirectional", "chain"};

static int workload;
static int nthreads;
static long pairs_per_thread;
static uint64_t seed = 42;

static _Atomic long total_alloc, total_free;
static _Atomic uint64_t sum_alloc_bytes, sum_free_bytes;

typedef struct {
  rng_t rng;
  size_t cur;
  long nalloc, nfree;
  uint64_t balloc, bfree;
} tstate_t;

static inline size_t next_size(tstate_t *t) {
  if ((rng_next(&t->rng) & 7) == 0) t->cur = 4 + rng_below(&t->rng, 256);
  return t->cur;
}
static inline item_t do_alloc(tstate_t *t) {
  size_t s = next_size(t);
  item_t it = {xmalloc_tagged(s), s};
  t->nalloc++;
  t->balloc += s;
  return it;
}
static inline void do_free(tstate_t *t, item_t it) {
  xfree_tagged(it.p, it.size, wnames[workload]);
  t->nfree++;
  t->bfree += it.size;
}
static void tstate_init(tstate_t *t, uint64_t s) {
  rng_seed(&t->rng, s);
  t->cur = 4 + rng_below(&t->rng, 256);
  t->nalloc = t->nfree = 0;
  t->balloc = t->bfree = 0;
}
static void tstate_flush(tstate_t *t) {
  atomic_fetch_add(&total_alloc, t->nalloc);
  atomic_fetch_add(&total_free, t->nfree);
  atomic_fetch_add(&sum_alloc_bytes, t->balloc);
  atomic_fetch_add(&sum_free_bytes, t->bfree);
  t->nalloc = t->nfree = 0;
  t->balloc = t->bfree = 0;
}

/* ---- simple: allocate, free, repeat ---- */
static void run_simple(tstate_t *t, long n) {
  for (long i = 0; i < n; i++) {
    item_t it = do_alloc(t);
    escape(it.p);
    do_free(t, it);
  }
}

/* ---- isolated: a block lives exactly FIFO_LEN allocations in a FIFO, then sits in a pool of
 * POOL_LEN slots from which one random slot is recycled per allocation (mean POOL_LEN more).
 * Lifetime: at least 2.7 thousand allocations, 5.4 thousand on average. ---- */
#define ISO_FIFO 2700
#define ISO_POOL 2700
typedef struct {
  item_t fifo[ISO_FIFO];
  item_t pool[ISO_POOL];
  long fifo_n, fifo_pos;
} iso_t;

static void iso_init(iso_t *s) { memset(s, 0, sizeof *s); }
static inline void iso_step(tstate_t *t, iso_t *s) {
  item_t x = do_alloc(t);
  if (s->fifo_n < ISO_FIFO) {
    s->fifo[s->fifo_n++] = x;
    return;
  }
  item_t y = s->fifo[s->fifo_pos];
  s->fifo[s->fifo_pos] = x;
  if (++s->fifo_pos == ISO_FIFO) s->fifo_pos = 0;
  uint32_t j = rng_below(&t->rng, ISO_POOL);
  if (s->pool[j].p) do_free(t, s->pool[j]);
  s->pool[j] = y;
}
static void iso_drain(tstate_t *t, iso_t *s) {
  for (long i = 0; i < s->fifo_n; i++) do_free(t, s->fifo[i]);
  for (long j = 0; j < ISO_POOL; j++)
    if (s->pool[j].p) do_free(t, s->pool[j]);
  iso_init(s);
}
static void run_isolated(tstate_t *t, long n) {
  iso_t *s = malloc(sizeof(iso_t));
  if (!s) oom_fail(sizeof(iso_t));
  iso_init(s);
  for (long i = 0; i < n; i++) iso_step(t, s);
  iso_drain(t, s);
  free(s);
}

/* ---- swing: each cycle of 20k..80k allocations frees a random live block after every second
 * allocation on average, so the live set climbs to 10k..40k blocks; then everything is freed
 * (in allocation order) and the cycle starts over. ---- */
static void run_swing(tstate_t *t, long n) {
  size_t cap = 80000;
  item_t *live = malloc(cap * sizeof(item_t));
  if (!live) oom_fail(cap * sizeof(item_t));
  long done = 0;
  while (done < n) {
    long len = 20000 + rng_below(&t->rng, 60000);
    if (len > n - done) len = n - done;
    size_t cnt = 0;
    for (long i = 0; i < len; i++) {
      live[cnt++] = do_alloc(t);
      if (rng_next(&t->rng) & 1) {
        uint32_t j = rng_below(&t->rng, (uint32_t)cnt);
        do_free(t, live[j]);
        live[j] = live[--cnt];
      }
    }
    for (size_t i = 0; i < cnt; i++) do_free(t, live[i]);
    done += len;
  }
  free(live);
}

/* ---- unidirectional / bidirectional: threads in pairs joined by lock-free queues ---- */
typedef struct {
  spsc_t q[2];      /* q[0]: a -> b, q[1]: b -> a */
  parker_t park[2]; /* where a and b sleep */
} pairq_t;
static pairq_t *pairs;

typedef struct {
  _Alignas(CACHE_LINE) int id; /* a worker writes its tstate_t on every operation */
  tstate_t st;
} targ_t;

static void run_unidir(tstate_t *t, int id, long n) {
  pairq_t *pq = &pairs[id / 2];
  if ((id & 1) == 0) { /* producer */
    for (long i = 0; i < n; i++) spsc_push(&pq->q[0], do_alloc(t));
    spsc_push_done(&pq->q[0]);
  } else { /* consumer: frees as many as its producer allocates */
    for (long got = 0; got < n; got++) do_free(t, spsc_pop(&pq->q[0]));
  }
}

typedef struct {
  spsc_t *out, *in;
  long sent, got, n;
} bidir_t;
static int bidir_ready(void *arg) {
  bidir_t *b = (bidir_t *)arg;
  return (b->sent < b->n && spsc_can_push(b->out)) || (b->got < b->n && spsc_can_pop(b->in));
}

static void run_bidir(tstate_t *t, int id, long n) {
  pairq_t *pq = &pairs[id / 2];
  bidir_t b = {&pq->q[id & 1], &pq->q[(id & 1) ^ 1], 0, 0, n};
  item_t pending = {NULL, 0}, it;
  while (b.sent < n || b.got < n) {
    int progress = 0;
    if (b.sent < n) {
      if (!pending.p) pending = do_alloc(t);
      if (spsc_try_push(b.out, pending)) {
        pending.p = NULL;
        if (++b.sent == n) spsc_push_done(b.out);
        progress = 1;
      }
    }
    while (b.got < n && spsc_try_pop(b.in, &it)) {
      do_free(t, it);
      b.got++;
      progress = 1;
    }
    if (!progress) { /* my ring out is full (or all sent) and the one in is empty */
      parker_wake(b.out->consumer);
      parker_park(b.out->producer, bidir_ready, &b);
    }
  }
}

/* ---- chain: a thread does a short isolated-like run (random replacement in a pool of 512
 * blocks), then starts its successor, hands it the pool (its live blocks outlive it) and exits. */
#define CHAIN_POOL 512
#define CHAIN_LINK 2500
typedef struct {
  _Alignas(CACHE_LINE) tstate_t st;
  long remaining;
  item_t pool[CHAIN_POOL];
} chain_t;
static pthread_mutex_t chain_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t chain_cv = PTHREAD_COND_INITIALIZER;
static int chains_done;

static void *chain_link(void *arg) {
  chain_t *c = (chain_t *)arg;
  tstate_t *t = &c->st;
  long n = c->remaining < CHAIN_LINK ? c->remaining : CHAIN_LINK;
  for (long i = 0; i < n; i++) {
    uint32_t j = rng_below(&t->rng, CHAIN_POOL);
    if (c->pool[j].p) do_free(t, c->pool[j]);
    c->pool[j] = do_alloc(t);
  }
  c->remaining -= n;
  if (c->remaining > 0) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &a, chain_link, c) != 0) {
      fprintf(stderr, "pthread_create failed in chain\n");
      exit(2);
    }
    pthread_attr_destroy(&a);
    return NULL;
  }
  for (int j = 0; j < CHAIN_POOL; j++)
    if (c->pool[j].p) do_free(t, c->pool[j]);
  tstate_flush(t);
  pthread_mutex_lock(&chain_mu);
  chains_done++;
  pthread_cond_signal(&chain_cv);
  pthread_mutex_unlock(&chain_mu);
  return NULL;
}

static void *worker(void *arg) {
  targ_t *a = (targ_t *)arg;
  tstate_t *t = &a->st;
  switch (workload) {
  case W_SIMPLE: run_simple(t, pairs_per_thread); break;
  case W_ISOLATED: run_isolated(t, pairs_per_thread); break;
  case W_SWING: run_swing(t, pairs_per_thread); break;
  case W_UNIDIR: pin_to_cpu_slot(a->id); run_unidir(t, a->id, pairs_per_thread); break;
  case W_BIDIR: pin_to_cpu_slot(a->id); run_bidir(t, a->id, pairs_per_thread); break;
  }
  tstate_flush(t);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: shsh simple|isolated|swing|unidirectional|bidirectional|chain THREADS PAIRS [SEED]\n");
    return 2;
  }
  workload = -1;
  for (int i = 0; i < 6; i++)
    if (strcmp(argv[1], wnames[i]) == 0) workload = i;
  if (workload < 0) {
    fprintf(stderr, "unknown workload %s\n", argv[1]);
    return 2;
  }
  nthreads = (int)arg_long(argc, argv, 2, 1);
  long total = arg_long(argc, argv, 3, 1000000);
  seed = (uint64_t)arg_long(argc, argv, 4, 42);
  if (nthreads < 1) nthreads = 1;
  if ((workload == W_UNIDIR || workload == W_BIDIR) && (nthreads & 1)) {
    fprintf(stderr, "%s needs an even number of threads\n", wnames[workload]);
    return 2;
  }
  pairs_per_thread = total / nthreads;
  long expect = pairs_per_thread * nthreads;
  if (workload == W_UNIDIR) { /* only the producers allocate */
    pairs_per_thread = total / (nthreads / 2);
    expect = pairs_per_thread * (nthreads / 2);
  }

  if (workload == W_UNIDIR || workload == W_BIDIR) {
    pairs = xcalloc_lines((size_t)nthreads / 2, sizeof(pairq_t)); /* spsc_t's ends are line-aligned */
    for (int i = 0; i < nthreads / 2; i++) {
      parker_t *a = &pairs[i].park[0], *b = &pairs[i].park[1];
      spsc_init(&pairs[i].q[0], 1024, a, b);
      spsc_init(&pairs[i].q[1], 1024, b, a);
    }
  }

  double t0 = now_sec();
  if (workload == W_CHAIN) {
    chain_t *chains = xcalloc_lines((size_t)nthreads, sizeof(chain_t));
    for (int i = 0; i < nthreads; i++) {
      tstate_init(&chains[i].st, seed * 1000 + (uint64_t)i);
      chains[i].remaining = pairs_per_thread;
    }
    for (int i = 0; i < nthreads; i++) {
      pthread_attr_t a;
      pthread_attr_init(&a);
      pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
      pthread_t th;
      if (pthread_create(&th, &a, chain_link, &chains[i]) != 0) return 2;
      pthread_attr_destroy(&a);
    }
    pthread_mutex_lock(&chain_mu);
    while (chains_done < nthreads) pthread_cond_wait(&chain_cv, &chain_mu);
    pthread_mutex_unlock(&chain_mu);
    free(chains);
  } else {
    targ_t *args = xcalloc_lines((size_t)nthreads, sizeof(targ_t));
    pthread_t *th = calloc((size_t)nthreads, sizeof(pthread_t));
    for (int i = 0; i < nthreads; i++) {
      args[i].id = i;
      tstate_init(&args[i].st, seed * 1000 + (uint64_t)i);
    }
    if (nthreads == 1) worker(&args[0]);
    else {
      for (int i = 0; i < nthreads; i++) th[i] = spawn(worker, &args[i]);
      for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    }
    free(args);
    free(th);
  }
  double secs = now_sec() - t0;

  long na = atomic_load(&total_alloc), nf = atomic_load(&total_free);
  if (na != expect || nf != expect)
    verify_fail("%s: expected %ld allocations and frees, got %ld and %ld", wnames[workload], expect, na, nf);
  if (atomic_load(&sum_alloc_bytes) != atomic_load(&sum_free_bytes))
    verify_fail("%s: allocated and freed byte sums differ", wnames[workload]);
  if (pairs) {
    for (int i = 0; i < nthreads / 2; i++) {
      spsc_destroy(&pairs[i].q[0]);
      spsc_destroy(&pairs[i].q[1]);
    }
    free(pairs);
  }
  printf("RESULT mpairs=%.4f pairs=%ld secs=%.6f\n", (double)na / secs / 1e6, na, secs);
  return 0;
}
