/* test-stress: the multithreaded stress test.  Threads allocate blocks of 1 B .. 1 MiB (mostly
 * small), fill each with a pattern derived from its address and size, and hand blocks to each other
 * through a shared table of atomic slots, so most blocks are freed by another thread than the one
 * that allocated them; some are reallocated (contents checked across the move).  Threads come and
 * go: each worker runs a fixed number of operations and exits, and a new one takes its place.
 * Some blocks are aligned (16 B .. 64 KiB), and another thread calls sm_collect all along.
 * Every block's contents are verified before it is freed or reallocated. Then: a producer/consumer
 * run (memory freed remotely is reused), and the owner reusing another thread's freed blocks while
 * it keeps freeing its own.
 *   default: standard malloc/free/realloc (the release build, linked to libshardmalloc.so)
 *   SM_TEST_SM_API: sm_malloc/sm_free/sm_realloc (the TSan build, where malloc is TSan's)
 * Options: --threads T --generations G --ops N (per worker). */
#include "sm-test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "shardmalloc.h"

/* xmalloc & co.: the standard names, or the sm_ API with SM_TEST_SM_API (sm-test.h) */

struct desc { /* what travels through the table: the block and what is needed to check it */
  uint8_t *p;
  size_t n;
  uint64_t seed;
};

#define NSLOTS 4096
static _Atomic(struct desc *) slots[NSLOTS];
static atomic_long damaged, failures, not_owned, allocs, frees, reallocs, cross_frees;
static int ops_per_worker = 50000;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s) % 1000;
  uint64_t v = rnd(s);
  if (r < 700) return v % 64 + 1;
  if (r < 920) return v % 960 + 65;
  if (r < 985) return v % (31 * 1024) + 1025;
  if (r < 997) return v % (224 * 1024) + 32 * 1024 + 1;
  if (v % 8 == 0) return v % (10 << 20) + (2 << 20); /* now and then a huge one: 2..12 MiB */
  return v % (768 * 1024) + 256 * 1024 + 1; /* up to 1 MiB */
}

/* word-at-a-time pattern (cheap enough under TSan), derived from address, size and a salt */
static inline uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  return x;
}
static void fill(uint8_t *p, size_t n, uint64_t seed) {
  size_t w = n / 8;
  uint64_t *q = (uint64_t *)(void *)p;
  uint64_t m = mix(seed);
  if (((uintptr_t)p & 7) == 0)
    for (size_t i = 0; i < w; i++) q[i] = m + i * 0x9E3779B97F4A7C15ull;
  else
    for (size_t i = 0; i < w; i++) {
      uint64_t v = m + i * 0x9E3779B97F4A7C15ull;
      memcpy(p + i * 8, &v, 8);
    }
  uint64_t last = m + w * 0x9E3779B97F4A7C15ull; /* the tail holds the first bytes of the next word */
  for (size_t i = w * 8; i < n; i++) p[i] = (uint8_t)(last >> (i % 8 * 8));
}
/* number of bytes checked correct from the start (n if all) */
static size_t check(const uint8_t *p, size_t n, uint64_t seed) {
  size_t w = n / 8;
  uint64_t m = mix(seed);
  for (size_t i = 0; i < w; i++) {
    uint64_t v;
    memcpy(&v, p + i * 8, 8);
    if (v != m + i * 0x9E3779B97F4A7C15ull) return i * 8;
  }
  uint64_t last = m + w * 0x9E3779B97F4A7C15ull;
  for (size_t i = w * 8; i < n; i++)
    if (p[i] != (uint8_t)(last >> (i % 8 * 8))) return i;
  return n;
}
static uint64_t seed_for(const void *p, size_t n, uint64_t salt) { return (uint64_t)(uintptr_t)p * 31 + n * 1000003 + salt; }

static atomic_long aligned_allocs, misaligned;
static uint8_t *aligned_block(size_t n, size_t a) {
#if SM_TEST_SM_API
  return sm_malloc_aligned(n, a);
#else
  void *p = NULL;
  if (a >= sizeof(void *) && (a & 64)) return posix_memalign(&p, a, n) ? NULL : p;
  return aligned_alloc(a, n);
#endif
}
static struct desc *new_block(uint64_t *s, uint64_t salt) {
  size_t n = pick_size(s);
  uint64_t how = rnd(s) % 16;
  uint8_t *p;
  if (how == 0) p = xcalloc(1, n);
  else if (how <= 2) { /* aligned: freed, maybe by another thread, through an interior-looking pointer */
    size_t a = (size_t)16 << (rnd(s) % 13); /* 16 B .. 64 KiB */
    p = aligned_block(n, a);
    atomic_fetch_add(&aligned_allocs, 1);
    if (p && ((uintptr_t)p & (a - 1))) atomic_fetch_add(&misaligned, 1);
  } else p = xmalloc(n);
  struct desc *d = xmalloc(sizeof *d);
  if (!p || !d) {
    atomic_fetch_add(&failures, 1);
    xfree(p);
    xfree(d);
    return NULL;
  }
  if (!xowned(p)) atomic_fetch_add(&not_owned, 1);
  atomic_fetch_add(&allocs, 1);
  d->p = p;
  d->n = n;
  d->seed = seed_for(p, n, salt);
  fill(p, n, d->seed);
  return d;
}
static void report_damage(const struct desc *d, size_t at, const char *when) {
  if (atomic_fetch_add(&damaged, 1) < 10)
    fprintf(stderr, "FAIL block %p of %zu bytes, %s: contents damaged at byte %zu (expected pattern of seed %#llx)\n",
            (void *)d->p, d->n, when, at, (unsigned long long)d->seed);
}
static void free_block(struct desc *d) {
  if (!d) return;
  size_t ok = check(d->p, d->n, d->seed);
  if (ok != d->n) report_damage(d, ok, "before free");
  xfree(d->p);
  xfree(d);
  atomic_fetch_add(&frees, 1);
}
static struct desc *realloc_block(struct desc *d, uint64_t *s, uint64_t salt) {
  size_t ok = check(d->p, d->n, d->seed);
  if (ok != d->n) report_damage(d, ok, "before realloc");
  size_t m = (rnd(s) & 1) ? pick_size(s) : d->n + d->n / 2 + 1;
  if (m > (12 << 20)) m = 12 << 20;
  uint8_t *q = xrealloc(d->p, m);
  if (!q) {
    atomic_fetch_add(&failures, 1);
    return d;
  }
  size_t keep = m < d->n ? m : d->n;
  /* the old pattern, at the old seed, must have moved along */
  size_t ok2 = check(q, keep, d->seed);
  if (ok2 != keep) {
    struct desc moved = {q, keep, d->seed};
    report_damage(&moved, ok2, "after realloc");
  }
  d->p = q;
  d->n = m;
  d->seed = seed_for(q, m, salt);
  fill(q, m, d->seed);
  atomic_fetch_add(&reallocs, 1);
  return d;
}

static atomic_int workers_done;
static atomic_long collects;
static void *collector(void *arg) { /* sm_collect while the workers run */
  (void)arg;
  for (int i = 0; !atomic_load(&workers_done); i++) {
    sm_collect(i % 8 == 7);
    atomic_fetch_add(&collects, 1);
    usleep(2000);
  }
  return NULL;
}

static void *worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  uint64_t s = mix(id + 1) | 1;
  struct desc *local[64] = {0};
  for (int op = 0; op < ops_per_worker; op++) {
    uint64_t r = rnd(&s) % 100;
    uint64_t salt = id * 1000000007ull + (uint64_t)op;
    if (r < 40) { /* new block into the shared table; free whatever was there (another thread's, mostly) */
      struct desc *d = new_block(&s, salt);
      if (!d) continue;
      struct desc *old = atomic_exchange(&slots[rnd(&s) % NSLOTS], d);
      if (old) atomic_fetch_add(&cross_frees, 1);
      free_block(old);
    } else if (r < 55) { /* take one from the table, realloc it, put it back */
      size_t k = rnd(&s) % NSLOTS;
      struct desc *d = atomic_exchange(&slots[k], NULL);
      if (!d) continue;
      d = realloc_block(d, &s, salt);
      free_block(atomic_exchange(&slots[k], d));
    } else if (r < 80) { /* own blocks, kept a while */
      int k = (int)(rnd(&s) % 64);
      if (local[k]) free_block(local[k]);
      local[k] = new_block(&s, salt);
    } else if (r < 90) { /* short-lived */
      free_block(new_block(&s, salt));
    } else { /* take a block from the table and free it here */
      free_block(atomic_exchange(&slots[rnd(&s) % NSLOTS], NULL));
    }
  }
  /* leave: half of our own blocks go to the table for others to free after we are gone */
  for (int k = 0; k < 64; k++) {
    if (k % 2) free_block(atomic_exchange(&slots[rnd(&s) % NSLOTS], local[k]));
    else free_block(local[k]);
  }
  return NULL;
}

/* ---- producer/consumer: every block is allocated by one thread and freed by another, so the
 * producer's pages fill up and are only emptied by remote frees (the "full page" and delayed-free
 * paths).  Memory must be reused: with at most RING blocks alive per pair, RSS stays small however
 * many blocks pass through. */
#define RING 1024
struct spsc {
  _Atomic(uint64_t *) slot[RING];
  long count;
  atomic_long bad;
};
static void *producer(void *arg) {
  struct spsc *q = arg;
  uint64_t s = (uint64_t)(uintptr_t)q | 1;
  for (long i = 0; i < q->count; i++) {
    size_t n = (size_t)(rnd(&s) % 240 + 16) & ~(size_t)7;
    uint64_t *b = xmalloc(n);
    if (!b) { atomic_fetch_add(&q->bad, 1); continue; }
    b[0] = n;
    b[1] = (uint64_t)i;
    fill((uint8_t *)(b + 2), n - 16, seed_for(b, n, (uint64_t)i));
    _Atomic(uint64_t *) *slot = &q->slot[i % RING];
    while (atomic_load_explicit(slot, memory_order_acquire) != NULL) sched_yield(); /* consumer behind */
    atomic_store_explicit(slot, b, memory_order_release);
  }
  return NULL;
}
static atomic_int pc_done;
static void *consumer(void *arg) {
  struct spsc *q = arg;
  for (long i = 0; i < q->count; i++) {
    _Atomic(uint64_t *) *slot = &q->slot[i % RING];
    uint64_t *b;
    while ((b = atomic_load_explicit(slot, memory_order_acquire)) == NULL) sched_yield();
    atomic_store_explicit(slot, NULL, memory_order_release);
    size_t n = b[0];
    if (b[1] != (uint64_t)i || n < 16 || n > 256 || check((uint8_t *)(b + 2), n - 16, seed_for(b, n, (uint64_t)i)) != n - 16)
      atomic_fetch_add(&q->bad, 1);
    xfree(b);
  }
  atomic_fetch_add(&pc_done, 1);
  return NULL;
}
static void producer_consumer(long per_pair) {
  SECTION("producer/consumer: 2 pairs, every block freed by the other thread; memory reused") {
    static struct spsc q[2];
    size_t rss0 = rss_bytes(), peak = rss0;
    pthread_t t[4];
    for (int k = 0; k < 2; k++) {
      q[k].count = per_pair;
      pthread_create(&t[2 * k], NULL, producer, &q[k]);
      pthread_create(&t[2 * k + 1], NULL, consumer, &q[k]);
    }
    while (atomic_load(&pc_done) < 2) { /* sample RSS while the blocks flow */
      size_t r = rss_bytes();
      if (r > peak) peak = r;
      usleep(5000);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK(atomic_load(&q[0].bad) + atomic_load(&q[1].bad) == 0,
          "expected every block intact and in order, seen %ld bad", atomic_load(&q[0].bad) + atomic_load(&q[1].bad));
    printf("  %ld blocks of 16..255 bytes per pair (%ld MiB in all); RSS start %zu MiB, peak while running %zu MiB\n",
           per_pair, per_pair * 2 * 136 / (long)MiB, rss0 / MiB, peak / MiB);
#if !SM_TEST_SM_API
    /* at most 2 x RING blocks are alive at any time: anything more than a few MiB is memory the
     * producers could not get back from the remote frees */
    CHECK(peak < rss0 + 64 * MiB,
          "RSS: expected < start (%zu MiB) + 64 MiB with at most %d blocks alive, seen %zu MiB", rss0 / MiB, 2 * RING,
          peak / MiB);
#endif
  }
}

/* Blocks that another thread freed are reused even while the owner keeps freeing blocks of its own:
 * each of the owner's refills then finds its own list non-empty, and one that always preferred it
 * would never reach the other thread's blocks. */
enum { RR_BLOCKS = 512 };
static void *free_them(void *arg) {
  void **v = arg;
  for (int i = 0; i < RR_BLOCKS; i++) xfree(v[i]);
  return NULL;
}
static void remote_reuse(void) {
  SECTION("blocks freed by another thread are reused while the owner keeps freeing its own") {
    static void *mine[RR_BLOCKS], *theirs[RR_BLOCKS];
    for (int i = 0; i < RR_BLOCKS; i++) { /* interleaved: the same pages */
      mine[i] = xmalloc(48);
      theirs[i] = xmalloc(48);
      if (mine[i] == NULL || theirs[i] == NULL) abort();
    }
    pthread_t t;
    pthread_create(&t, NULL, free_them, theirs);
    pthread_join(t, NULL);
    long reused = 0;
    for (int round = 0; round < 8 * RR_BLOCKS; round++) {
      int k = round % RR_BLOCKS;
      xfree(mine[k]);
      mine[k] = xmalloc(48);
      if (mine[k] == NULL) abort();
      for (int j = 0; j < RR_BLOCKS; j++) reused += mine[k] == theirs[j];
    }
    printf("  %d allocations after each free of the owner's own: %ld of them reused a block the other thread freed\n",
           8 * RR_BLOCKS, reused);
    CHECK(reused > 0, "expected the other thread's %d freed blocks to be reused, none were", RR_BLOCKS);
    for (int i = 0; i < RR_BLOCKS; i++) xfree(mine[i]);
  }
}

int main(int argc, char **argv) {
  sm_test_name = SM_TEST_SM_API ? "test-stress (sm_ API)" : "test-stress";
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nthreads = 4, generations = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--generations")) generations = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ops")) ops_per_worker = atoi(argv[i + 1]);
  }
  if (nthreads < 1 || nthreads > 64) nthreads = 4;
  printf("%d threads at a time, %d workers in all, %d operations each, blocks 1 B .. 1 MiB (a few up to 12 MiB)\n", nthreads,
         nthreads * generations, ops_per_worker);
  SECTION("threads allocate, hand over, realloc and free blocks; all contents verified") {
    pthread_t t[64], coll;
    int started = 0;
    pthread_create(&coll, NULL, collector, NULL);
    for (int i = 0; i < nthreads; i++, started++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)started);
    /* as each worker ends, a new one takes its place: threads come and go while others run */
    for (int g = 1; g < generations; g++)
      for (int i = 0; i < nthreads; i++, started++) {
        pthread_join(t[i], NULL);
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)started);
      }
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    atomic_store(&workers_done, 1);
    pthread_join(coll, NULL);
    for (int i = 0; i < NSLOTS; i++) free_block(atomic_exchange(&slots[i], NULL));
    CHECK(atomic_load(&misaligned) == 0, "aligned blocks: expected all aligned, seen %ld misaligned",
          atomic_load(&misaligned));
    CHECK(atomic_load(&damaged) == 0, "expected every block intact, seen %ld damaged", atomic_load(&damaged));
    CHECK(atomic_load(&failures) == 0, "expected no allocation failure, seen %ld", atomic_load(&failures));
    CHECK(atomic_load(&not_owned) == 0, "expected every block owned by shardmalloc, seen %ld not owned",
          atomic_load(&not_owned));
    CHECK(atomic_load(&allocs) == atomic_load(&frees), "every block freed once: expected %ld frees, seen %ld",
          atomic_load(&allocs), atomic_load(&frees));
    printf("  %ld blocks allocated (%ld aligned), %ld reallocated, %ld freed by another thread via the table; "
           "%ld sm_collect calls meanwhile\n", atomic_load(&allocs), atomic_load(&aligned_allocs),
           atomic_load(&reallocs), atomic_load(&cross_frees), atomic_load(&collects));
  }
  producer_consumer(ops_per_worker >= 50000 ? 1000000 : (long)ops_per_worker * 10);
  remote_reuse();
  sm_collect(true);
  return sm_test_summary();
}
