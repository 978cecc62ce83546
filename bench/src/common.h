/* Shared helpers for the shardmalloc benchmark workloads.
 *
 * Every workload is a small stand-alone C11 program that uses only the standard malloc interface,
 * so any allocator can be slipped under it with LD_PRELOAD. Conventions:
 *   - it prints one line "RESULT key=value ..." on stdout with its own measurements;
 *   - it checks its own work: every block carries a tag derived from its address and size in
 *     its first and last bytes, checked before it is freed; counts and checksums are compared at
 *     the end. On any mismatch it prints "VERIFY FAILED: ..." on stderr and exits with status 3;
 *     a NULL from malloc exits with status 4.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/futex.h>

#define EXIT_VERIFY 3
#define EXIT_OOM 4

static inline double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noreturn, format(printf, 1, 2))) static void verify_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("VERIFY FAILED: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  _Exit(EXIT_VERIFY);
}

__attribute__((noreturn)) static void oom_fail(size_t size) {
  fprintf(stderr, "OUT OF MEMORY: allocation of %zu bytes returned NULL\n", size);
  fflush(stderr);
  _Exit(EXIT_OOM);
}

/* Per-thread harness state (counters, random state, queue ends) that a thread writes on every
 * operation is declared _Alignas(CACHE_LINE) and allocated with this: n zeroed elements, the
 * array aligned to a cache line. Otherwise two threads' counters may share a line or not,
 * depending on where the allocator under test happens to put the array, and that false sharing,
 * not the allocator's own work, decides the result (larson on glibc: 1.05 s against 0.65 s). */
#define CACHE_LINE 64
static inline void *xcalloc_lines(size_t n, size_t size) {
  size_t bytes = n * size;
  bytes = (bytes + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE; /* aligned_alloc wants a multiple */
  void *p = aligned_alloc(CACHE_LINE, bytes ? bytes : CACHE_LINE);
  if (!p) oom_fail(bytes);
  memset(p, 0, bytes);
  return p;
}

/* Keep the compiler from eliding an allocation whose result is never read. */
static inline void escape(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* ---- small fast PRNG (xorshift64*), one per thread ---- */
typedef struct { uint64_t s; } rng_t;
static inline void rng_seed(rng_t *r, uint64_t seed) {
  r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  if (r->s == 0) r->s = 1;
}
static inline uint64_t rng_next(rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}
/* uniform in [0, n) */
static inline uint32_t rng_below(rng_t *r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* ---- block tagging ----
 * The tag of a block depends on its address and size. fill_block writes it into the first and
 * the last (up to) 8 bytes; check_block verifies both ends. Two live blocks that overlap, or a
 * block that the allocator scribbles on (free-list pointers in live memory), are caught when
 * either is freed. */
static inline uint64_t block_tag(const void *p, size_t size) {
  uint64_t x = (uint64_t)(uintptr_t)p ^ ((uint64_t)size << 48) ^ 0xA5A5C3C3F0F00F0Full;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
  return x;
}
static inline void fill_block(void *p, size_t size) {
  uint64_t t = block_tag(p, size);
  unsigned char *c = (unsigned char *)p;
  if (size >= 16) {
    memcpy(c, &t, 8);
    memcpy(c + size - 8, &t, 8);
  } else {
    for (size_t i = 0; i < size; i++) c[i] = (unsigned char)(t >> ((i & 7) * 8));
  }
}
static inline int block_ok(const void *p, size_t size) {
  uint64_t t = block_tag(p, size);
  const unsigned char *c = (const unsigned char *)p;
  if (size >= 16) {
    uint64_t a, b;
    memcpy(&a, c, 8);
    memcpy(&b, c + size - 8, 8);
    return a == t && b == t;
  }
  for (size_t i = 0; i < size; i++)
    if (c[i] != (unsigned char)(t >> ((i & 7) * 8))) return 0;
  return 1;
}
static inline void check_block(const void *p, size_t size, const char *where) {
  if (!block_ok(p, size)) verify_fail("%s: block %p of %zu bytes was corrupted while live", where, p, size);
}

/* malloc + NULL check + tag */
static inline void *xmalloc_tagged(size_t size) {
  void *p = malloc(size);
  if (!p) oom_fail(size);
  fill_block(p, size);
  return p;
}
static inline void xfree_tagged(void *p, size_t size, const char *where) {
  check_block(p, size, where);
  free(p);
}

/* ---- a thread that has nothing to do sleeps on a futex until its partner wakes it ----
 * Waiting threads sleep rather than spin or sched_yield: with more threads than cores (4 on the
 * 2-core CI machines) a spinning or yielding waiter takes the CPU its partner needs, and whether
 * it does depends on the scheduler, not on the allocator: unidirectional-4 measured 13 to 70
 * Mpairs/s on one library, run after run. A sleeping waiter costs nothing, so the result is
 * the allocator's work spread over the cores. */
typedef struct {
  _Alignas(64) _Atomic uint32_t seq; /* bumped by every wake; the futex word */
  _Atomic uint32_t sleeping;
} parker_t;

static inline void futex_call(_Atomic uint32_t *word, int op, uint32_t val) {
  syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}
/* Sleep unless ready() (re-checked after announcing the sleep, so a wake cannot be missed: the
 * waker stores its progress, fences, then reads `sleeping`; we store `sleeping`, fence, then read
 * its progress; one of the two sees the other). */
static inline void parker_park(parker_t *me, int (*ready)(void *), void *arg) {
  uint32_t s = atomic_load_explicit(&me->seq, memory_order_relaxed);
  atomic_store_explicit(&me->sleeping, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
  if (!ready(arg)) futex_call(&me->seq, FUTEX_WAIT_PRIVATE, s);
  atomic_store_explicit(&me->sleeping, 0, memory_order_relaxed);
}
static inline void parker_wake(parker_t *other) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&other->sleeping, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&other->seq, 1, memory_order_relaxed);
    futex_call(&other->seq, FUTEX_WAKE_PRIVATE, 1);
  }
}

/* Pin the calling thread to the n-th (modulo their number) of the CPUs the process may use.
 * Where threads outnumber cores, the scheduler's placement decides whether a producer shares a
 * core (and its cache) with its consumer, and that, not the allocator, decided the result:
 * pinned to one core, unidirectional-2 ran at 27 Mpairs/s; spread by the scheduler, at 16. The
 * pair workloads pin thread i to CPU slot i, so partners always sit on different cores, and every
 * free really is a cross-core one. */
static inline void pin_to_cpu_slot(int n) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
  int k = n % CPU_COUNT(&allowed);
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &allowed) && k-- == 0) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

/* ---- a bounded single-producer single-consumer ring of (pointer, size) items ----
 * Lock-free. Each end has a parker for its thread; a side wakes the other only when the ring
 * crosses half full (and when it is about to sleep itself), so a sleeping side is woken once per
 * half ring, not once per item. */
typedef struct { void *p; size_t size; } item_t;
typedef struct {
  _Alignas(64) _Atomic size_t head; /* next slot to read (consumer) */
  _Alignas(64) _Atomic size_t tail; /* next slot to write (producer) */
  _Alignas(64) size_t cap;          /* power of two */
  item_t *slots;
  parker_t *producer, *consumer;    /* the threads at each end */
} spsc_t;

static inline void spsc_init(spsc_t *q, size_t cap, parker_t *producer, parker_t *consumer) {
  atomic_init(&q->head, 0);
  atomic_init(&q->tail, 0);
  q->cap = cap;
  q->slots = (item_t *)calloc(cap, sizeof(item_t));
  if (!q->slots) oom_fail(cap * sizeof(item_t));
  q->producer = producer;
  q->consumer = consumer;
}
static inline void spsc_destroy(spsc_t *q) { free(q->slots); }
static inline int spsc_can_push(spsc_t *q) {
  return atomic_load_explicit(&q->tail, memory_order_relaxed) - atomic_load_explicit(&q->head, memory_order_acquire) < q->cap;
}
static inline int spsc_can_pop(spsc_t *q) {
  return atomic_load_explicit(&q->head, memory_order_relaxed) != atomic_load_explicit(&q->tail, memory_order_acquire);
}
static inline int spsc_try_push(spsc_t *q, item_t it) {
  size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
  size_t h = atomic_load_explicit(&q->head, memory_order_acquire);
  if (t - h >= q->cap) return 0;
  q->slots[t & (q->cap - 1)] = it;
  atomic_store_explicit(&q->tail, t + 1, memory_order_release);
  if (t + 1 - h == q->cap / 2) parker_wake(q->consumer);
  return 1;
}
static inline int spsc_try_pop(spsc_t *q, item_t *out) {
  size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
  size_t t = atomic_load_explicit(&q->tail, memory_order_acquire);
  if (h == t) return 0;
  *out = q->slots[h & (q->cap - 1)];
  atomic_store_explicit(&q->head, h + 1, memory_order_release);
  if (t - (h + 1) == q->cap / 2) parker_wake(q->producer);
  return 1;
}
static inline int spsc_ready_push(void *q) { return spsc_can_push((spsc_t *)q); }
static inline int spsc_ready_pop(void *q) { return spsc_can_pop((spsc_t *)q); }
/* push, sleeping while the ring is full */
static inline void spsc_push(spsc_t *q, item_t it) {
  while (!spsc_try_push(q, it)) {
    parker_wake(q->consumer);
    parker_park(q->producer, spsc_ready_push, q);
  }
}
/* pop, sleeping while the ring is empty */
static inline item_t spsc_pop(spsc_t *q) {
  item_t it;
  while (!spsc_try_pop(q, &it)) {
    parker_wake(q->producer);
    parker_park(q->consumer, spsc_ready_pop, q);
  }
  return it;
}
/* the producer's last push: the consumer must not wait for the ring to fill to half */
static inline void spsc_push_done(spsc_t *q) { parker_wake(q->consumer); }

/* ---- argument helpers ---- */
static inline long arg_long(int argc, char **argv, int i, long def) {
  return (i < argc) ? strtol(argv[i], NULL, 0) : def;
}

static inline pthread_t spawn(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) != 0) {
    fprintf(stderr, "pthread_create failed\n");
    exit(2);
  }
  return t;
}

#endif
