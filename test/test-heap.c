/* test-heap: first-class heaps (docs/api/heaps.md).
 * new/destroy frees everything at once (RSS and stats drop), delete keeps blocks usable in the
 * backing heap, set_default routes malloc, allocation from other threads (the locked part), a heap
 * outliving its creator, contains/check_owned, visitors that see exactly the live blocks, every
 * sm_heap_ allocation call, and the deferred-free hook. */
#include "sm-test.h"

#include <semaphore.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <shardmalloc.h>
#include <stdbool.h>

static size_t stats_current(const char *row) { /* "current" of a row from the JSON statistics */
  char *json = sm_stats_get_json(0, NULL);
  if (json == NULL) return (size_t)-1;
  char key[64];
  snprintf(key, sizeof key, "\"%s\"", row);
  const char *at = strstr(json, key);
  size_t v = (size_t)-1;
  if (at != NULL && (at = strstr(at, "\"current\"")) != NULL) v = strtoull(strchr(at, ':') + 1, NULL, 10);
  sm_free(json);
  return v;
}

typedef struct {
  size_t areas, blocks, bytes;
  void *seen[4096];
  size_t nseen;
} visit_t;

/* a thread that hands its backing heap to another and ends when told */
typedef struct {
  _Atomic(sm_heap_t *) heap;
  _Atomic int may_end;
} backing_lender_t;
static void *backing_lend(void *arg) {
  backing_lender_t *l = arg;
  sm_free(sm_malloc(32)); /* its heap in use */
  atomic_store(&l->heap, sm_heap_get_backing());
  while (!atomic_load(&l->may_end)) sched_yield();
  return NULL;
}
/* allocates 500 blocks from another thread's backing heap, frees all but `n` (kept, patterned) */
typedef struct {
  sm_heap_t *heap;
  void **kept;
  int n;
  unsigned seed;
} borrower_t;
static void *backing_borrow(void *arg) {
  borrower_t *b = arg;
  void *p[500];
  for (int i = 0; i < 500; i++) p[i] = sm_heap_malloc(b->heap, 112 + (size_t)(i % 40) * 24); /* kept ones: 100 bytes patterned */
  for (int i = 0; i < 500; i++) {
    if (i < b->n && p[i] != NULL) {
      b->kept[i] = p[i];
      fill_pattern(p[i], 100, (uint64_t)b->seed * (uint64_t)b->n + (uint64_t)i);
    } else {
      sm_free(p[i]);
    }
  }
  return NULL;
}

static bool count_visitor(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap;
  visit_t *v = arg;
  if (block == NULL) {
    v->areas++;
    return true;
  }
  v->blocks++;
  v->bytes += size;
  if (size != area->block_size) return false;
  if (v->nseen < 4096) v->seen[v->nseen++] = block;
  return true;
}

static bool seen_in(const visit_t *v, const void *p) {
  for (size_t i = 0; i < v->nseen; i++)
    if (v->seen[i] == p) return true;
  return false;
}

typedef struct {
  sm_heap_t *heap;
  void *blocks[1000];
  int ok;
} foreign_t;

static void *foreign_alloc(void *arg) { /* another thread allocates from the heap (its locked part) */
  foreign_t *f = arg;
  f->ok = 1;
  for (int i = 0; i < 1000; i++) {
    f->blocks[i] = sm_heap_malloc(f->heap, 16 + (size_t)(i % 50) * 24);
    if (f->blocks[i] == NULL) f->ok = 0;
    else memset(f->blocks[i], 0x5A, 16);
    if (!sm_heap_contains_block(f->heap, f->blocks[i])) f->ok = 0;
  }
  return NULL;
}

static void *foreign_free(void *arg) {
  foreign_t *f = arg;
  for (int i = 0; i < 1000; i++) sm_free(f->blocks[i]);
  return NULL;
}

/* huge blocks of a heap being deleted, freed by another thread meanwhile (mailboxes) */
#define HUGE_MAILBOXES 4
static void *_Atomic huge_mailbox[HUGE_MAILBOXES];
static atomic_int huge_freer_stop;
static void *huge_freer(void *arg) {
  while (!atomic_load(&huge_freer_stop))
    for (int i = 0; i < HUGE_MAILBOXES; i++) sm_free(atomic_exchange(&huge_mailbox[i], NULL));
  return arg;
}
static bool count_huge_areas(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)size;
  if (block == NULL && area->block_size > ((size_t)2 << 20)) ++*(int *)arg;
  return true;
}

/* visitors that allocate and free in the heap they visit (until 2026-11-28 they waited for the
 * heap's lock, which the visit held, for ever) */
typedef struct {
  void **got;
  size_t n, cap;
} grow_t;
static bool collect_growing(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)area, (void)size;
  grow_t *g = arg;
  if (block == NULL) return true;
  if (g->n == g->cap) { /* realloc: allocates from the thread's default heap */
    g->cap = g->cap ? 2 * g->cap : 4;
    g->got = realloc(g->got, g->cap * sizeof(void *));
  }
  g->got[g->n++] = block;
  return true;
}
static bool free_visited(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)area, (void)size;
  if (block != NULL) {
    sm_free(block);
    ++*(size_t *)arg;
  }
  return true;
}
static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL  a visit did not return within 20 s (its visitor allocates or frees in the heap)\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(1);
}
typedef struct {
  sm_heap_t *heap;
  void *blocks[200];
  sem_t made, done;
} idle_owner_t;
static void *idle_owner(void *arg) { /* makes a heap, allocates, then waits (not using it) */
  idle_owner_t *o = arg;
  o->heap = sm_heap_new();
  for (int i = 0; i < 200; i++) o->blocks[i] = sm_heap_malloc(o->heap, 48);
  sem_post(&o->made);
  sem_wait(&o->done);
  return NULL;
}

/* the huge areas of a visit: how many, and whether one starts at `want` */
typedef struct {
  int count;
  const void *want;
  bool found;
} huge_seen_t;
static bool find_huge_area(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)size;
  huge_seen_t *seen = arg;
  if (block != NULL || area->block_size <= ((size_t)2 << 20)) return true;
  seen->count++;
  if (area->blocks == seen->want) seen->found = true;
  return true;
}
static huge_seen_t visit_huge(const sm_heap_t *heap, const void *want) {
  huge_seen_t seen = {0, want, false};
  sm_heap_visit_blocks(heap, false, find_huge_area, &seen);
  return seen;
}

static void *huge_left; /* a huge block whose thread ends before it is freed */
static void *free_it(void *p) {
  sm_free(p);
  return NULL;
}
static void *own_heap_huge(void *arg) { /* a thread's own heap: its huge blocks, visited */
  int *bad = arg;
  sm_heap_t *h = sm_heap_get_default();
  char *p = sm_malloc((size_t)5 << 20), *q = sm_malloc_aligned((size_t)3 << 20, (size_t)1 << 20);
  if (p == NULL || q == NULL) return (*bad = 1), NULL;
  huge_seen_t seen = visit_huge(h, p);
  if (seen.count != 2 || !seen.found || !visit_huge(h, q).found) *bad = 2;
  if (!sm_heap_contains_block(h, p) || !sm_heap_contains_block(h, q)) *bad = 3;
  p[0] = 7;
  p = sm_realloc(p, (size_t)40 << 20); /* grows by moving pages: off the list and back on */
  if (p == NULL || p[0] != 7) return (*bad = 4), NULL;
  seen = visit_huge(h, p);
  if (seen.count != 2 || !seen.found) *bad = 5;
  pthread_t t;
  pthread_create(&t, NULL, free_it, q); /* freed by another thread: off this heap's list */
  pthread_join(t, NULL);
  seen = visit_huge(h, p);
  if (seen.count != 1 || !seen.found) *bad = 6;
  sm_free(p);
  if (visit_huge(h, NULL).count != 0) *bad = 7;
  huge_left = sm_malloc((size_t)6 << 20); /* outlives its thread */
  return NULL;
}

static sm_heap_t *orphan_heap;
static void *orphan_blocks[100];
static void *make_orphan(void *arg) { /* a heap whose creator ends while its blocks live on */
  (void)arg;
  orphan_heap = sm_heap_new();
  for (int i = 0; i < 100; i++) {
    orphan_blocks[i] = sm_heap_malloc(orphan_heap, 100);
    if (orphan_blocks[i] != NULL) fill_pattern(orphan_blocks[i], 100, (uint64_t)i);
  }
  return NULL;
}

/* the area (page) holding `p` in the calling thread's heap: how many blocks it has in use, or -1
 * if the heap has no page there */
typedef struct {
  const void *p;
  long used;
} area_of_t;
static bool find_area_of(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap;
  (void)size;
  area_of_t *a = arg;
  const uint8_t *start = area->blocks;
  if (block == NULL && (const uint8_t *)a->p >= start && (const uint8_t *)a->p < start + area->reserved) a->used = (long)area->used;
  return true;
}
static long area_used(const void *p) {
  area_of_t a = {p, -1};
  sm_heap_visit_blocks(sm_heap_get_default(), false, find_area_of, &a);
  return a.used;
}

/* A size class's only page, emptied at every free, is kept while the thread goes on using it, and
 * goes back once the thread has taken many slow paths without it (src/page.c, retire). */
static void *kept_page_thread(void *arg) {
  int *bad = arg;
  void *first = sm_malloc(40);
  sm_free(first);
  for (int i = 0; i < 200000; i++) { /* refills every few pairs, each with the page kept */
    void *q = sm_malloc(40);
    if (q == NULL) return (*bad = 1), NULL;
    *(volatile char *)q = 1;
    sm_free(q);
  }
  long used = area_used(first);
  if (used != 0) return (*bad = 2), (void *)(intptr_t)used;
  enum { N = 6000 };
  static void *big[N]; /* medium blocks: a few per carving, each carving a slow path */
  for (int i = 0; i < N; i++)
    if ((big[i] = sm_malloc(3000)) == NULL) return (*bad = 3), NULL;
  for (int i = 0; i < N; i++) sm_free(big[i]);
  used = area_used(first);
  if (used != -1) return (*bad = 4), (void *)(intptr_t)used;
  return NULL;
}

#ifndef SM_TEST_SECURE_LIB
#define SM_TEST_SECURE_LIB 0 /* 1: linked with the secure build (tsan-secure) */
#endif

/* A small class with one block live at a time cycles through what its page has carved: the
 * release build carves at least 8 blocks of it before it reuses them (src/page.c, SM_CYCLE_MIN),
 * and no more than the next 4 KiB. Returns how many distinct blocks 200 malloc/free pairs of
 * 1000 bytes saw. */
static void *cycle_thread(void *arg) {
  (void)arg;
  enum { PAIRS = 200 };
  static void *seen[PAIRS];
  size_t distinct = 0;
  for (int i = 0; i < PAIRS; i++) {
    void *q = sm_malloc(1000);
    if (q == NULL) return (void *)(intptr_t)-1;
    *(volatile char *)q = 1;
    size_t k = 0;
    while (k < distinct && seen[k] != q) k++;
    if (k == distinct) seen[distinct++] = q;
    sm_free(q);
  }
  return (void *)(intptr_t)distinct;
}

static unsigned long long deferred_calls, deferred_last;
static int deferred_force_seen;
static void deferred(bool force, unsigned long long heartbeat, void *arg) {
  (void)arg;
  deferred_calls++;
  if (heartbeat <= deferred_last) deferred_calls = 1ull << 40; /* not monotonic: poison */
  deferred_last = heartbeat;
  if (force) deferred_force_seen = 1;
  void *p = sm_malloc(32); /* the hook may allocate (no recursion into it) */
  sm_free(p);
}

int main(void) {
  sm_test_name = "test-heap";

  SECTION("new, allocate, destroy: everything goes at once") {
    sm_collect(true);
    sm_stats_merge();
    size_t normal0 = stats_current("normal"), rss0 = rss_bytes();
    sm_heap_t *heap = sm_heap_new();
    CHECK_NONNULL(heap);
    enum { N = 200000 };
    static void *blocks[N];
    for (int i = 0; i < N; i++) {
      blocks[i] = sm_heap_malloc(heap, 16 + (size_t)(i % 64) * 16); /* ~100 MiB of small blocks */
      if (blocks[i] != NULL) memset(blocks[i], 1, 16);
    }
    void *huge = sm_heap_malloc(heap, 8 * MiB);
    CHECK_NONNULL(huge);
    memset(huge, 2, 8 * MiB);
    for (int i = 0; i < N; i += 997) CHECK(sm_heap_contains_block(heap, blocks[i]), "block %d in its heap", i);
    CHECK(sm_heap_contains_block(heap, huge), "the huge block is in its heap");
    CHECK(sm_heap_contains_block(heap, (char *)huge + 4 * MiB), "an interior pointer of the huge block too");
    char *large = sm_heap_malloc(heap, 700 * KiB); /* a span of 64 KiB slots in a large segment */
    CHECK(large && sm_heap_contains_block(heap, large + 600 * KiB), "an interior pointer of a large block too");
    CHECK(!sm_heap_contains_block(sm_heap_get_default(), large + 600 * KiB), "%s", "not in the default heap");
    sm_free(large);
    CHECK(!sm_heap_contains_block(sm_heap_get_default(), blocks[0]), "not in the default heap");
    sm_stats_merge();
    size_t normal_peak = stats_current("normal"), rss_peak = rss_bytes();
    CHECK(normal_peak >= normal0 + 50 * MiB, "stats: normal grew by > 50 MiB, seen %zu -> %zu", normal0, normal_peak);
    sm_heap_destroy(heap);
    sm_collect(true);
    size_t normal1 = stats_current("normal"), rss1 = rss_bytes();
    printf("  normal bytes %zu -> %zu -> %zu; RSS %zu -> %zu -> %zu MiB\n", normal0, normal_peak, normal1, rss0 / MiB,
           rss_peak / MiB, rss1 / MiB);
    CHECK(normal1 <= normal0 + MiB, "stats: normal back to %zu, seen %zu", normal0, normal1);
    CHECK(rss1 < rss0 + (rss_peak - rss0) / 10, "RSS fell below 10%% of the growth: %zu MiB (start %zu, peak %zu)",
          rss1 / MiB, rss0 / MiB, rss_peak / MiB);
  }

  SECTION("delete: blocks stay valid in the backing heap") {
    sm_heap_t *heap = sm_heap_new();
    CHECK_NONNULL(heap);
    void *b[500];
    for (int i = 0; i < 500; i++) {
      b[i] = sm_heap_malloc(heap, (size_t)(i * 37 % 3000) + 1);
      fill_pattern(b[i], (size_t)(i * 37 % 3000) + 1, (uint64_t)i);
    }
    void *big = sm_heap_malloc(heap, 300 * KiB), *huge = sm_heap_malloc(heap, 5 * MiB);
    fill_pattern(big, 300 * KiB, 7);
    fill_pattern(huge, 5 * MiB, 8);
    sm_heap_delete(heap);
    sm_heap_t *backing = sm_heap_get_backing();
    for (int i = 0; i < 500; i++) {
      CHECK_PATTERN(b[i], (size_t)(i * 37 % 3000) + 1, (uint64_t)i);
      CHECK(sm_heap_contains_block(backing, b[i]), "block %d moved to the backing heap", i);
    }
    CHECK_PATTERN(big, 300 * KiB, 7);
    CHECK_PATTERN(huge, 5 * MiB, 8);
    for (int i = 0; i < 500; i += 2) sm_free(b[i]);
    void *more[100]; /* the backing heap allocates on, freely mixed with the moved pages */
    for (int i = 0; i < 100; i++) CHECK_NONNULL(more[i] = sm_malloc((size_t)(i * 37 % 3000) + 1));
    for (int i = 1; i < 500; i += 2) sm_free(b[i]);
    for (int i = 0; i < 100; i++) sm_free(more[i]);
    sm_free(big);
    sm_free(huge);
  }

  SECTION("set_default routes malloc; get_default/get_backing") {
    sm_heap_t *backing = sm_heap_get_backing(), *heap = sm_heap_new();
    CHECK(sm_heap_get_default() == backing, "default is the backing heap");
    sm_heap_t *old = sm_heap_set_default(heap);
    CHECK(old == backing, "set_default returns the previous heap");
    CHECK(sm_heap_get_default() == heap, "get_default sees it");
    void *p = xmalloc(100), *q = sm_malloc(200), *r = sm_calloc(10, 10);
    CHECK(sm_heap_contains_block(heap, p) && sm_heap_contains_block(heap, q) && sm_heap_contains_block(heap, r),
          "malloc, sm_malloc and calloc allocate from the default heap");
    xfree(p);
    sm_free(q);
    sm_free(r);
    CHECK(sm_heap_set_default(NULL) == NULL && errno == EINVAL, "NULL is refused with EINVAL");
    CHECK(sm_heap_set_default(backing) == heap, "back to the backing heap");
    sm_heap_set_default(heap);
    sm_heap_destroy(heap); /* destroying the default heap makes the backing heap the default again */
    CHECK(sm_heap_get_default() == backing, "destroyed default falls back to the backing heap");
    void *s = xmalloc(10);
    CHECK(sm_heap_contains_block(backing, s), "malloc works after that");
    xfree(s);
  }

  SECTION("other threads allocate from a heap; frees from anywhere") {
    sm_heap_t *heap = sm_heap_new();
    foreign_t f[3];
    pthread_t t[3];
    for (int k = 0; k < 3; k++) {
      f[k].heap = heap;
      pthread_create(&t[k], NULL, foreign_alloc, &f[k]);
    }
    void *mine[1000]; /* the owner allocates at the same time, without a lock */
    for (int i = 0; i < 1000; i++) mine[i] = sm_heap_malloc(heap, 16 + (size_t)(i % 50) * 24);
    for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 3; k++) CHECK(f[k].ok, "thread %d allocated 1000 blocks in the heap", k);
    visit_t v;
    memset(&v, 0, sizeof v);
    CHECK(sm_heap_visit_blocks(heap, true, count_visitor, &v), "visit completes");
    CHECK_EQ(v.blocks, 4000);
    for (int k = 0; k < 3; k++) pthread_create(&t[k], NULL, foreign_free, &f[k]); /* remote frees */
    for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
    for (int i = 0; i < 1000; i++) sm_free(mine[i]);
    memset(&v, 0, sizeof v);
    sm_heap_visit_blocks(heap, true, count_visitor, &v);
    CHECK_EQ(v.blocks, 0);
    sm_heap_delete(heap);
  }

  SECTION("other threads allocate from a thread's backing heap: that part ends with the thread, its live blocks stay valid") {
    /* until 2026-11-28 the part they used was never released: a segment a round stayed mapped */
    enum { ROUNDS = 24, KEPT = 3 };
    static void *kept[ROUNDS][KEPT];
    sm_collect(true);
    size_t before = stats_current("segments");
    for (int round = 0; round < ROUNDS; round++) {
      backing_lender_t lender;
      atomic_init(&lender.heap, NULL);
      atomic_init(&lender.may_end, 0);
      pthread_t a, b;
      pthread_create(&a, NULL, backing_lend, &lender);
      while (atomic_load(&lender.heap) == NULL) sched_yield();
      borrower_t borrower = {atomic_load(&lender.heap), kept[round], KEPT, (unsigned)round};
      pthread_create(&b, NULL, backing_borrow, &borrower);
      pthread_join(b, NULL);
      atomic_store(&lender.may_end, 1);
      pthread_join(a, NULL);
    }
    size_t bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
      for (int i = 0; i < KEPT; i++) {
        if (kept[round][i] == NULL || verify_pattern(kept[round][i], 100, (uint64_t)round * KEPT + (uint64_t)i) != (size_t)-1) bad++;
        sm_free(kept[round][i]);
      }
    }
    CHECK(bad == 0, "expected the blocks kept across their lender's end intact, %zu damaged", bad);
    sm_collect(true); /* adopts the ended threads' segments, empty now, and gives them back */
    size_t after = stats_current("segments");
    printf("      segments: %zu before, %zu after %d rounds\n", before, after, ROUNDS);
    CHECK(after <= before + 4, "expected the lenders' parts released, seen %zu segments after %d rounds (%zu before)", after,
          ROUNDS, before);
  }

  SECTION("delete while another thread frees the heap's huge blocks: the next heap's list of huge blocks stays right") {
    /* the freer takes the block's heap, then its lock: by then the delete may have handed the
     * blocks over and the heap (its memory reused by the next sm_heap_new) may be another one */
    pthread_t t;
    pthread_create(&t, NULL, huge_freer, NULL);
    int wrong = 0, rounds = SM_TEST_SM_API ? 1000 : 10000;
    for (int it = 0; it < rounds && wrong == 0; it++) {
      sm_heap_t *h = sm_heap_new();
      for (int i = 0; i < HUGE_MAILBOXES; i++) {
        void *p = sm_heap_malloc(h, ((size_t)3 << 20) + (size_t)i * 4096);
        while (atomic_load(&huge_mailbox[i]) != NULL) sched_yield();
        atomic_store(&huge_mailbox[i], p);
      }
      sm_heap_delete(h);
      sm_heap_t *h2 = sm_heap_new();
      void *q = sm_heap_malloc(h2, (size_t)3 << 20);
      int n = 0;
      sm_heap_visit_blocks(h2, false, count_huge_areas, &n);
      if (n != 1) wrong = it + 1;
      sm_free(q);
      sm_heap_destroy(h2);
    }
    atomic_store(&huge_freer_stop, 1);
    pthread_join(t, NULL);
    CHECK(wrong == 0, "expected the new heap to list its one huge block, seen another count in round %d", wrong);
  }

  SECTION("a thread's own heap lists its huge blocks: visits and contains see them, also moved by realloc, until freed") {
    int bad = 0;
    pthread_t t;
    pthread_create(&t, NULL, own_heap_huge, &bad);
    pthread_join(t, NULL);
    CHECK(bad == 0, "expected each huge block in its thread's heap's visit exactly while it lives, failed at step %d", bad);
    CHECK_NONNULL(huge_left);
    CHECK(!sm_heap_contains_block(sm_heap_get_default(), huge_left), "a block of an ended thread is in no heap");
    sm_free(huge_left); /* its thread has ended: its heap's list let it go */
    /* sm_heap_delete hands a heap's huge blocks to the backing heap, on its list */
    sm_heap_t *h = sm_heap_new();
    void *big = sm_heap_malloc(h, (size_t)4 << 20);
    CHECK_NONNULL(big);
    sm_heap_delete(h);
    CHECK(visit_huge(sm_heap_get_backing(), big).found, "a deleted heap's huge block is in the backing heap's visit");
    CHECK(sm_heap_contains_block(sm_heap_get_backing(), big), "and the backing heap contains it");
    sm_free(big);
    CHECK(!visit_huge(sm_heap_get_backing(), big).found, "and not once freed");
  }

  SECTION("sm_heap_realloc into another heap: a block that grows moves to that heap, huge ones too") {
    /* until 2026-11-27 a huge block grew in place (mremap) and stayed in its old heap, whose
     * destroy then freed it under the program */
    static const size_t from[] = {100, 70000, (size_t)3 << 20, (size_t)20 << 20};
    static const size_t to[] = {5000, 300000, (size_t)8 << 20, (size_t)40 << 20};
    for (int k = 0; k < 4; k++) {
      sm_heap_t *h2 = sm_heap_new(), *h3 = sm_heap_new();
      char *p = sm_heap_malloc(h2, from[k]);
      CHECK_NONNULL(p);
      if (p == NULL) continue;
      memset(p, 'a', from[k]);
      char *q = sm_heap_realloc(h3, p, to[k]);
      CHECK_NONNULL(q);
      if (q == NULL) continue;
      CHECK(sm_heap_contains_block(h3, q) && !sm_heap_contains_block(h2, q),
            "%zu -> %zu bytes: expected the block in the heap realloc was given, seen in h3 %d, in h2 %d", from[k], to[k],
            sm_heap_contains_block(h3, q), sm_heap_contains_block(h2, q));
      memset(q + from[k], 'z', to[k] - from[k]);
      sm_heap_destroy(h2);
      char *r = sm_malloc(to[k]); /* must not be given q's memory */
      CHECK(r == NULL || r + to[k] <= q || q + to[k] <= r, "%zu bytes: a new block overlaps the moved one", to[k]);
      if (r) memset(r, 'n', to[k]);
      CHECK(q[0] == 'a' && q[from[k] - 1] == 'a' && q[to[k] - 1] == 'z', "%zu bytes: the moved block's contents changed", to[k]);
      sm_free(r);
      sm_free(q);
      sm_heap_destroy(h3);
    }
  }
  SECTION("a heap outlives its creator and stays usable") {
    pthread_t t;
    pthread_create(&t, NULL, make_orphan, NULL);
    pthread_join(t, NULL);
    CHECK_NONNULL(orphan_heap);
    for (int i = 0; i < 100; i++) CHECK_PATTERN(orphan_blocks[i], 100, (uint64_t)i);
    void *p = sm_heap_malloc(orphan_heap, 1000);
    CHECK(p != NULL && sm_heap_contains_block(orphan_heap, p), "allocation from the orphaned heap");
    sm_free(p);
    for (int i = 0; i < 50; i++) sm_free(orphan_blocks[i]);
    sm_heap_delete(orphan_heap); /* its owner has ended: any thread may delete it */
    for (int i = 50; i < 100; i++) CHECK_PATTERN(orphan_blocks[i], 100, (uint64_t)i);
    for (int i = 50; i < 100; i++) sm_free(orphan_blocks[i]);
  }

  SECTION("visit_blocks sees exactly the live blocks") {
    sm_heap_t *heap = sm_heap_new();
    void *b[3000];
    size_t live_bytes = 0;
    for (int i = 0; i < 3000; i++) b[i] = sm_heap_malloc(heap, (size_t)(8 + i % 300));
    void *big = sm_heap_malloc(heap, 200 * KiB), *huge = sm_heap_malloc(heap, 3 * MiB);
    for (int i = 0; i < 3000; i += 3) {
      sm_free(b[i]);
      b[i] = NULL;
    }
    visit_t v;
    memset(&v, 0, sizeof v);
    CHECK(sm_heap_visit_blocks(heap, true, count_visitor, &v), "visit completes");
    CHECK_EQ(v.blocks, 2000 + 2);
    for (size_t k = 0; k < v.nseen; k++) {
      int known = v.seen[k] == big || v.seen[k] == huge;
      for (int i = 0; i < 3000 && !known; i++) known = b[i] == v.seen[k];
      CHECK(known, "visited block %p is one of the live blocks", v.seen[k]);
    }
    for (int i = 0; i < 3000; i++) {
      if (b[i] == NULL) continue;
      live_bytes += sm_usable_size(b[i]);
      CHECK(seen_in(&v, b[i]), "live block %d visited", i);
    }
    CHECK(seen_in(&v, big) && seen_in(&v, huge), "the large and the huge block are visited");
    int freed_seen = 0;
    for (int i = 0; i < 3000; i += 3) freed_seen += seen_in(&v, b[i]) && b[i] != NULL;
    CHECK_EQ(freed_seen, 0);
    CHECK(v.areas >= 3, "areas: one per page (seen %zu)", v.areas);
    visit_t areas_only;
    memset(&areas_only, 0, sizeof areas_only);
    sm_heap_visit_blocks(heap, false, count_visitor, &areas_only);
    CHECK(areas_only.blocks == 0 && areas_only.areas == v.areas, "without visit_all_blocks: areas only");
    (void)live_bytes;
    sm_heap_destroy(heap);
  }

  SECTION("a visitor may allocate and free in the heap it visits; blocks other threads freed are not live to a visit by another thread") {
    signal(SIGALRM, on_alarm);
    alarm(20);
    sm_heap_t *heap = sm_heap_new();
    sm_heap_t *old = sm_heap_set_default(heap); /* the visitor's realloc allocates in the visited heap */
    for (int i = 0; i < 3000; i++) CHECK(sm_heap_malloc(heap, 24 + (size_t)(i % 9) * 40) != NULL, "allocation %d", i);
    grow_t g = {NULL, 0, 0};
    CHECK(sm_heap_visit_blocks(heap, true, collect_growing, &g), "visit completes");
    sm_heap_set_default(old);
    CHECK(g.n >= 3000, "every block visited (seen %zu of 3000 or more)", g.n);
    free(g.got);
    size_t freed = 0;
    CHECK(sm_heap_visit_blocks(heap, true, free_visited, &freed), "freeing visit completes");
    CHECK(freed >= 3000, "the freeing visitor was given every block (%zu)", freed);
    visit_t v;
    memset(&v, 0, sizeof v);
    sm_heap_visit_blocks(heap, true, count_visitor, &v);
    CHECK(v.blocks == 0, "nothing live after the freeing visit (seen %zu)", v.blocks);
    for (int i = 0; i < 40; i++) CHECK(sm_heap_malloc(heap, 3 * MiB) != NULL, "huge %d", i);
    freed = 0;
    sm_heap_visit_blocks(heap, true, free_visited, &freed);
    CHECK(freed == 40, "a visitor that frees each huge block is given all 40 (seen %zu)", freed);
    sm_heap_destroy(heap);
    idle_owner_t o;
    sem_init(&o.made, 0, 0);
    sem_init(&o.done, 0, 0);
    pthread_t t;
    pthread_create(&t, NULL, idle_owner, &o);
    sem_wait(&o.made);
    for (int i = 0; i < 200; i += 2) sm_free(o.blocks[i]); /* frees by another thread, not yet collected */
    memset(&v, 0, sizeof v);
    sm_heap_visit_blocks(o.heap, true, count_visitor, &v);
    CHECK(v.blocks == 100, "visit by another thread while the owner idles: 100 live blocks (seen %zu)", v.blocks);
    sem_post(&o.done);
    pthread_join(t, NULL);
    sm_heap_destroy(o.heap);
    alarm(0);
  }

  SECTION("aligned blocks up to 4 KiB come from a class of aligned blocks, not from inside a bigger block") {
    /* an interior pointer sends every free of its page to the slow path (alloc.c) */
    sm_heap_t *heap = sm_heap_new();
    void *b[200];
    size_t n = 0;
    for (size_t a = 16; a <= 4096; a *= 2) {
      size_t sizes[] = {a / 2 + 3, a, a + 8, 3 * a + 1};
      for (size_t k = 0; k < 4; k++) {
        b[n] = sm_heap_malloc_aligned(heap, sizes[k], a);
        CHECK(b[n] != NULL && (uintptr_t)b[n] % a == 0, "%zu bytes aligned to %zu: %p", sizes[k], a, b[n]);
        n++;
      }
    }
    visit_t v;
    memset(&v, 0, sizeof v);
    CHECK(sm_heap_visit_blocks(heap, true, count_visitor, &v), "visit completes");
    CHECK_EQ(v.blocks, n);
    for (size_t i = 0; i < n; i++) CHECK(seen_in(&v, b[i]), "block %zu (%p) is the start of a block", i, b[i]);
    sm_heap_destroy(heap);
  }

  SECTION("every sm_heap_ allocation call") {
    sm_heap_t *heap = sm_heap_new();
    char *p;
    CHECK((p = sm_heap_zalloc(heap, 100)) && first_nonzero(p, 100) == (size_t)-1, "zalloc zeroes");
    p = sm_heap_rezalloc(heap, p, 5000);
    CHECK(p && first_nonzero(p, 5000) == (size_t)-1 && sm_heap_contains_block(heap, p), "rezalloc keeps zeros");
    sm_free(p);
    CHECK((p = sm_heap_calloc(heap, 10, 10)) && first_nonzero(p, 100) == (size_t)-1, "calloc zeroes");
    p = sm_heap_recalloc(heap, p, 100, 10);
    CHECK(p && first_nonzero(p, 1000) == (size_t)-1, "recalloc zeroes");
    sm_free(p);
    errno = 0;
    CHECK(sm_heap_calloc(heap, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow: NULL/ENOMEM");
    CHECK(sm_heap_mallocn(heap, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "mallocn overflow: NULL/ENOMEM");
    CHECK_NONNULL(p = sm_heap_mallocn(heap, 10, 10));
    p = sm_heap_reallocn(heap, p, 20, 20);
    CHECK(p && sm_usable_size(p) >= 400, "reallocn");
    p = sm_heap_realloc(heap, p, 20);
    CHECK_NONNULL(p);
    CHECK(sm_heap_reallocf(heap, p, SIZE_MAX / 2) == NULL, "reallocf failure frees (and returns NULL)");
    CHECK((p = sm_heap_malloc_small(heap, 64)) && sm_heap_contains_block(heap, p), "malloc_small");
    sm_free(p);
    char *s = sm_heap_strdup(heap, "shardmalloc");
    CHECK(s && strcmp(s, "shardmalloc") == 0 && sm_heap_contains_block(heap, s), "strdup");
    sm_free(s);
    s = sm_heap_strndup(heap, "shardmalloc", 5);
    CHECK(s && strcmp(s, "shard") == 0, "strndup");
    sm_free(s);
    s = sm_heap_realpath(heap, "/", NULL);
    CHECK(s && strcmp(s, "/") == 0 && sm_heap_contains_block(heap, s), "realpath");
    sm_free(s);
    size_t aligns[] = {16, 64, 4096, 65536, 1u << 22};
    for (size_t k = 0; k < sizeof aligns / sizeof *aligns; k++) {
      size_t a = aligns[k];
      void *q = sm_heap_malloc_aligned(heap, 100, a);
      CHECK_ALIGNED(q, a);
      CHECK(sm_heap_contains_block(heap, q), "aligned %zu in the heap", a);
      q = sm_heap_realloc_aligned(heap, q, 3000, a);
      CHECK_ALIGNED(q, a);
      sm_free(q);
      q = sm_heap_malloc_aligned_at(heap, 100, a, 8);
      CHECK_ALIGNED((char *)q + 8, a);
      q = sm_heap_realloc_aligned_at(heap, q, 200, a, 8);
      CHECK_ALIGNED((char *)q + 8, a);
      sm_free(q);
      q = sm_heap_zalloc_aligned(heap, 300, a);
      CHECK(q && first_nonzero(q, 300) == (size_t)-1, "zalloc_aligned");
      CHECK_ALIGNED(q, a);
      q = sm_heap_rezalloc_aligned(heap, q, 900, a);
      CHECK(q && first_nonzero(q, 900) == (size_t)-1, "rezalloc_aligned");
      sm_free(q);
      q = sm_heap_zalloc_aligned_at(heap, 300, a, 16);
      CHECK_ALIGNED((char *)q + 16, a);
      q = sm_heap_rezalloc_aligned_at(heap, q, 600, a, 16);
      CHECK(q && first_nonzero(q, 600) == (size_t)-1, "rezalloc_aligned_at");
      sm_free(q);
      q = sm_heap_calloc_aligned(heap, 10, 30, a);
      CHECK(q && first_nonzero(q, 300) == (size_t)-1, "calloc_aligned");
      q = sm_heap_recalloc_aligned(heap, q, 20, 30, a);
      CHECK(q && first_nonzero(q, 600) == (size_t)-1, "recalloc_aligned");
      sm_free(q);
      q = sm_heap_calloc_aligned_at(heap, 10, 30, a, 8);
      CHECK_ALIGNED((char *)q + 8, a);
      q = sm_heap_recalloc_aligned_at(heap, q, 20, 30, a, 8);
      CHECK(q && first_nonzero(q, 600) == (size_t)-1, "recalloc_aligned_at");
      sm_free(q);
    }
    errno = 0;
    CHECK(sm_heap_malloc_aligned(heap, 10, 3) == NULL && errno == EINVAL, "alignment 3: NULL/EINVAL");
    sm_heap_collect(heap, true);
    visit_t v;
    memset(&v, 0, sizeof v);
    sm_heap_visit_blocks(heap, true, count_visitor, &v);
    CHECK_EQ(v.blocks, 0);
    sm_heap_destroy(heap);
  }

  SECTION("introspection: check_owned, is_in_heap_region") {
    sm_heap_t *heap = sm_heap_new();
    int local = 0;
    void *p = sm_heap_malloc(heap, 40), *q = sm_malloc(40);
    CHECK(sm_heap_check_owned(heap, p) && !sm_heap_check_owned(heap, q), "check_owned tells heaps apart");
    CHECK(sm_check_owned(p) && sm_check_owned(q) && !sm_check_owned(&local), "sm_check_owned");
    CHECK(sm_is_in_heap_region(p) && !sm_is_in_heap_region(&local) && !sm_is_in_heap_region(NULL), "is_in_heap_region");
    CHECK(!sm_heap_contains_block(heap, NULL) && !sm_heap_contains_block(NULL, p), "NULL answers false");
    sm_free(q);
    sm_heap_destroy(heap);
  }

  SECTION("deferred free: called from slow paths and collect, heartbeat grows") {
    sm_register_deferred_free(deferred, NULL);
    void *b[20000];
    for (int i = 0; i < 20000; i++) b[i] = sm_malloc(64 + (size_t)(i % 7) * 300);
    for (int i = 0; i < 20000; i++) sm_free(b[i]);
    sm_collect(true);
    sm_register_deferred_free(NULL, NULL);
    printf("  deferred-free calls: %llu, last heartbeat %llu\n", deferred_calls, deferred_last);
    CHECK(deferred_calls > 0 && deferred_calls < (1ull << 40), "called, heartbeat monotonic (calls %llu)", deferred_calls);
    CHECK(deferred_force_seen, "sm_collect(true) passes force");
  }

  SECTION("an emptied page is kept while its class is in use, and goes back once unused") {
    int bad = 0;
    pthread_t t;
    void *used = NULL;
    pthread_create(&t, NULL, kept_page_thread, &bad);
    pthread_join(t, &used);
    CHECK(bad == 0, "step %d failed (1: out of memory, 2: page gone or not empty while in use, 4: page kept "
                    "after thousands of slow paths), blocks in use %ld", bad, (long)(intptr_t)used);
  }

  SECTION("a small class cycling through few blocks carves at least 8 first") {
    if (SM_TEST_SECURE_LIB) {
      printf("  skipped: the secure build chooses at random between carving and reuse\n");
    } else {
      pthread_t t;
      void *distinct = NULL;
      pthread_create(&t, NULL, cycle_thread, NULL);
      pthread_join(t, &distinct);
      long n = (long)(intptr_t)distinct;
      CHECK(n == 8, "blocks of 1000 bytes seen in 200 pairs: %ld (expected 8; one extension holds 4)", n);
    }
  }

  SECTION("misuse gets a clear answer") {
    sm_heap_destroy(NULL);
    sm_heap_delete(NULL);
    sm_heap_destroy(sm_heap_get_backing()); /* refused with a warning: a thread's own heap */
    void *p = sm_malloc(10);
    CHECK(p != NULL && sm_heap_contains_block(sm_heap_get_backing(), p), "the backing heap still works");
    sm_free(p);
  }

  return sm_test_summary();
}
