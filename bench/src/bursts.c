/* Bursts of allocation with idle phases in between, for the "memory over time" chart: the
 * harness samples the process's RSS every few milliseconds (measure with BENCH_RSS_SAMPLES) while
 * this runs, so the interesting part is what the allocator gives back while the program sleeps.
 *
 * Each cycle: every worker allocates its share of MIB in mixed sizes (by bytes: 10% 8-256 B, 30%
 * 256 B-4 KiB, 45% 4-64 KiB, 15% in six huge blocks in all, 3-10 MiB each at 256 MiB) and writes
 * every page; then 90% of the blocks are freed, 40% of them by the other worker (cross-thread),
 * and 10% stay live until the end, so the survivors of each cycle are scattered over the memory of
 * the burst; then everyone sleeps IDLE_MS. After the last cycle everything is freed and the
 * process sleeps FINAL_IDLE_MS more. THREADS=1 runs it all on the main thread (no second thread at
 * all, which matters to allocators that only start background work in multi-threaded processes).
 * The huge blocks are all freed in the cycle that made them (half of them by the other worker).
 *
 * Checks: tags at both ends of every block and a word in every 4 KiB page, checked when the block
 * is freed (so survivors are checked after all idle phases: purging a live page would show);
 * counts, bytes and a checksum of the tags read back at free time must match those written.
 *
 *   bursts THREADS MIB CYCLES IDLE_MS FINAL_IDLE_MS [SEED]
 * Prints, with CLOCK_MONOTONIC times in seconds (the harness aligns them with its RSS samples):
 *   PHASE cycle=<c> alloc=<t> free=<t> idle=<t> end=<t> live_peak=<bytes> live_kept=<bytes>
 *   PHASE cycle=final free=<t> idle=<t> end=<t> live_peak=<bytes> live_kept=0
 *   RESULT secs=<s> blocks=<n> bytes=<total requested>
 */
#include "common.h"

#define MAXT 2
#define MAXCYCLES 64
#define PAGE 4096
#define NHUGE 6 /* per cycle, shared among the workers */
#define SMALL_SHARE 0.10
#define MEDIUM_SHARE 0.30
#define LARGE_SHARE 0.45 /* the rest (15%) is huge */

typedef struct { unsigned char *p; size_t size; } blk_t;

typedef struct {
  int id;
  rng_t rng;
  blk_t *b;               /* every block this worker allocated, all cycles */
  size_t n, cap;
  size_t cycle_start;     /* index of the first block of the current cycle */
  /* totals, written by the worker only */
  uint64_t n_alloc, bytes_alloc, sum_alloc;
  uint64_t n_free, bytes_free, sum_free;
} worker_t;

static int nthreads, ncycles;
static size_t budget; /* bytes per worker per cycle */
static worker_t workers[MAXT];
static pthread_barrier_t start_bar, done_bar;
static _Atomic int phase; /* what the workers do after start_bar: 0 alloc, 1 free, 2 free all, 3 exit */

static inline uint64_t page_word(uint64_t tag, size_t off) { return tag ^ (off * 0x9E3779B97F4A7C15ull); }

static void fill(blk_t *k) {
  fill_block(k->p, k->size);
  uint64_t tag = block_tag(k->p, k->size);
  /* one word per page, clear of the end tags: every page is written, so RSS counts the block */
  for (size_t off = PAGE; off + 16 <= k->size; off += PAGE) {
    uint64_t w = page_word(tag, off);
    memcpy(k->p + off, &w, 8);
  }
}

/* Checks a block, returns the tag read from its memory (for the checksum). */
static uint64_t check(const blk_t *k) {
  check_block(k->p, k->size, "bursts");
  uint64_t tag = block_tag(k->p, k->size), w;
  for (size_t off = PAGE; off + 16 <= k->size; off += PAGE) {
    memcpy(&w, k->p + off, 8);
    if (w != page_word(tag, off))
      verify_fail("bursts: block %p (%zu bytes): page at offset %zu corrupted while live", (void *)k->p, k->size, off);
  }
  if (k->size < 8) return tag; /* too small for a whole tag: block_ok compared every byte */
  memcpy(&w, k->p, 8);
  return w;
}

/* Who frees block i of owner's cycle c: 0 = nobody until the end (10%), 1 = the owner (50%),
 * 2 = the other worker (40%; with one thread, the owner). A hash, not a flag, so that both
 * workers can decide without writing to shared records. */
static int fate(int owner, size_t i) {
  uint64_t x = ((uint64_t)owner << 40) ^ (uint64_t)i ^ 0x51ED270B7A3C1F5Dull;
  x ^= x >> 31; x *= 0x7FB5D329728EA185ull; x ^= x >> 27;
  uint32_t k = (uint32_t)(x % 10);
  return k == 0 ? 0 : k <= 5 ? 1 : 2;
}

static void push(worker_t *w, size_t size) {
  if (w->n == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 65536;
    w->b = realloc(w->b, w->cap * sizeof(blk_t));
    if (!w->b) oom_fail(w->cap * sizeof(blk_t));
  }
  blk_t *k = &w->b[w->n++];
  k->size = size;
  k->p = malloc(size);
  if (!k->p) oom_fail(size);
  fill(k);
  w->n_alloc++;
  w->bytes_alloc += size;
  w->sum_alloc += block_tag(k->p, size);
}

static void release(worker_t *w, const blk_t *k) {
  w->sum_free += check(k);
  w->n_free++;
  w->bytes_free += k->size;
  free(k->p);
}

static void do_alloc(worker_t *w) {
  w->cycle_start = w->n;
  /* counts drawn so that each class gets its share of the bytes (means 132 B, 2176 B, 34816 B) */
  double ps = SMALL_SHARE / 132.0, pm = MEDIUM_SHARE / 2176.0, pl = LARGE_SHARE / 34816.0;
  uint32_t cs = (uint32_t)(1e6 * ps / (ps + pm + pl)), cm = cs + (uint32_t)(1e6 * pm / (ps + pm + pl));
  size_t target = (size_t)((double)budget * (SMALL_SHARE + MEDIUM_SHARE + LARGE_SHARE)), got = 0;
  int nh = NHUGE / nthreads, nhuge = 0;
  size_t huge = (budget - target) / (size_t)nh;
  while (got < target) {
    /* the huge blocks come evenly spread among the others */
    if (nhuge < nh && got >= target / (size_t)(nh + 1) * (size_t)(nhuge + 1)) {
      size_t s = huge / 2 + rng_below(&w->rng, (uint32_t)huge);
      push(w, s);
      nhuge++;
      continue;
    }
    uint32_t k = rng_below(&w->rng, 1000000);
    size_t s = k < cs ? 8 + rng_below(&w->rng, 249)
             : k < cm ? 256 + rng_below(&w->rng, 3841)
             : 4096 + rng_below(&w->rng, 61441);
    push(w, s);
    got += s;
  }
}

static int is_huge(const blk_t *k) { return k->size >= (1u << 20); }

static void do_free(worker_t *w) {
  /* own blocks first, then the other worker's share: both workers free at the same time */
  for (size_t i = w->cycle_start; i < w->n; i++) {
    const blk_t *k = &w->b[i];
    int f = is_huge(k) ? 1 + (int)(i & 1) : fate(w->id, i);
    if (f == 1 || (f == 2 && nthreads == 1)) release(w, k);
  }
  if (nthreads == 1) return;
  worker_t *o = &workers[(w->id + 1) % nthreads];
  for (size_t i = o->cycle_start; i < o->n; i++) {
    const blk_t *k = &o->b[i];
    int f = is_huge(k) ? 1 + (int)(i & 1) : fate(o->id, i);
    if (f == 2) release(w, k);
  }
}

static void do_free_all(worker_t *w) {
  for (size_t i = 0; i < w->n; i++)
    if (!is_huge(&w->b[i]) && fate(w->id, i) == 0) release(w, &w->b[i]);
  free(w->b);
  w->b = NULL;
  w->n = w->cap = 0;
}

static void step(worker_t *w, int ph) {
  if (ph == 0) do_alloc(w);
  else if (ph == 1) do_free(w);
  else if (ph == 2) do_free_all(w);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  for (;;) {
    pthread_barrier_wait(&start_bar);
    int ph = atomic_load(&phase);
    if (ph == 3) return NULL;
    step(w, ph);
    pthread_barrier_wait(&done_bar);
  }
}

/* Runs one phase on every worker (on the main thread when there is only one). */
static void run_phase(int ph) {
  if (nthreads == 1) {
    step(&workers[0], ph);
    return;
  }
  atomic_store(&phase, ph);
  pthread_barrier_wait(&start_bar);
  if (ph != 3) pthread_barrier_wait(&done_bar);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static uint64_t live_bytes(void) {
  uint64_t a = 0, f = 0;
  for (int t = 0; t < nthreads; t++) {
    a += workers[t].bytes_alloc;
    f += workers[t].bytes_free;
  }
  return a - f;
}

int main(int argc, char **argv) {
  nthreads = (int)arg_long(argc, argv, 1, 2);
  long mib = arg_long(argc, argv, 2, 256);
  ncycles = (int)arg_long(argc, argv, 3, 3);
  long idle_ms = arg_long(argc, argv, 4, 300);
  long final_idle_ms = arg_long(argc, argv, 5, 500);
  uint64_t seed = (uint64_t)arg_long(argc, argv, 6, 11);
  if (nthreads < 1 || nthreads > MAXT || mib < 4 || ncycles < 1 || ncycles > MAXCYCLES) {
    fprintf(stderr, "usage: bursts THREADS(1-%d) MIB CYCLES(1-%d) IDLE_MS FINAL_IDLE_MS [SEED]\n", MAXT, MAXCYCLES);
    return 2;
  }
  budget = (size_t)mib * (1u << 20) / (size_t)nthreads;
  pthread_t th[MAXT];
  for (int t = 0; t < nthreads; t++) {
    workers[t].id = t;
    rng_seed(&workers[t].rng, seed * 1000 + (uint64_t)t);
  }
  if (nthreads > 1) {
    pthread_barrier_init(&start_bar, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&done_bar, NULL, (unsigned)nthreads + 1);
    for (int t = 0; t < nthreads; t++) th[t] = spawn(worker, &workers[t]);
  }
  /* the marks are printed at the end: output while the RSS is sampled would only add noise */
  double marks[MAXCYCLES][4];
  uint64_t peak[MAXCYCLES], kept[MAXCYCLES];
  double t0 = now_sec();
  for (int c = 0; c < ncycles; c++) {
    marks[c][0] = now_sec();
    run_phase(0);
    peak[c] = live_bytes();
    marks[c][1] = now_sec();
    run_phase(1);
    kept[c] = live_bytes();
    marks[c][2] = now_sec();
    sleep_ms(idle_ms);
    marks[c][3] = now_sec();
  }
  uint64_t final_peak = live_bytes();
  double ff = now_sec();
  run_phase(2);
  double fi = now_sec();
  sleep_ms(final_idle_ms);
  double fe = now_sec();
  if (nthreads > 1) {
    run_phase(3);
    for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  }
  uint64_t na = 0, nf = 0, ba = 0, bf = 0, sa = 0, sf = 0;
  for (int t = 0; t < nthreads; t++) {
    na += workers[t].n_alloc; nf += workers[t].n_free;
    ba += workers[t].bytes_alloc; bf += workers[t].bytes_free;
    sa += workers[t].sum_alloc; sf += workers[t].sum_free;
  }
  if (na != nf || ba != bf || sa != sf)
    verify_fail("bursts: allocated %llu blocks (%llu bytes), freed %llu (%llu bytes); tag checksums %016llx vs %016llx",
                (unsigned long long)na, (unsigned long long)ba, (unsigned long long)nf, (unsigned long long)bf,
                (unsigned long long)sa, (unsigned long long)sf);
  for (int c = 0; c < ncycles; c++)
    printf("PHASE cycle=%d alloc=%.6f free=%.6f idle=%.6f end=%.6f live_peak=%llu live_kept=%llu\n", c + 1,
           marks[c][0], marks[c][1], marks[c][2], marks[c][3], (unsigned long long)peak[c], (unsigned long long)kept[c]);
  printf("PHASE cycle=final free=%.6f idle=%.6f end=%.6f live_peak=%llu live_kept=0\n", ff, fi, fe,
         (unsigned long long)final_peak);
  printf("RESULT secs=%.6f blocks=%llu bytes=%llu\n", fe - t0, (unsigned long long)na, (unsigned long long)ba);
  return 0;
}
