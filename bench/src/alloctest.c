/* alloc-test-style run, written from the description of ITHare's allocator test ("testing memory
 * allocators while trying to simulate real-world loads"): intensive allocation with sizes drawn
 * from a Pareto distribution (most blocks small, a long tail up to 1 KiB), and lifetimes skewed so
 * that most blocks die young while some live long. Each thread works on its own set of slots:
 * it picks a slot (hot slots near the start are picked far more often), frees the block there and
 * allocates a new one, writing into it.
 *
 *   alloctest THREADS OPS_PER_THREAD [SLOTS=65536] [SEED]
 * Prints: RESULT mops=<million operations per second> ops=<n> secs=<s>
 */
#include "common.h"
#include <math.h>

#define TABLE 8192
static uint16_t size_table[TABLE];  /* Pareto(alpha=1.1, xm=8) truncated at 1024 */
static uint32_t slot_table[TABLE];  /* slot index skew: slots * u^3 */
static long ops_per_thread, nslots;
static uint64_t seed;
static _Atomic long g_ops;
static _Atomic uint64_t g_bytes;

static void build_tables(void) {
  rng_t r;
  rng_seed(&r, 12345);
  for (int i = 0; i < TABLE; i++) {
    double u = ((double)i + 0.5) / TABLE;
    double s = 8.0 / pow(1.0 - u, 1.0 / 1.1);
    if (s > 1024.0) s = 8.0 + (double)rng_below(&r, 1017); /* fold the tail back into 8..1024 */
    size_table[i] = (uint16_t)s;
    double v = ((double)i + 0.5) / TABLE;
    slot_table[i] = (uint32_t)((double)nslots * v * v * v);
    if (slot_table[i] >= (uint32_t)nslots) slot_table[i] = (uint32_t)nslots - 1;
  }
}

static void *worker(void *arg) {
  rng_t rng;
  rng_seed(&rng, seed * 31 + (uint64_t)(uintptr_t)arg);
  item_t *slots = calloc((size_t)nslots, sizeof(item_t));
  if (!slots) oom_fail((size_t)nslots * sizeof(item_t));
  uint64_t bytes = 0;
  for (long i = 0; i < ops_per_thread; i++) {
    uint64_t x = rng_next(&rng);
    uint32_t j = slot_table[x & (TABLE - 1)];
    /* a little spread so that neighbouring slots are used too */
    j = (j + (uint32_t)((x >> 16) & 15)) % (uint32_t)nslots;
    size_t s = size_table[(x >> 32) & (TABLE - 1)];
    item_t *it = &slots[j];
    if (it->p) xfree_tagged(it->p, it->size, "alloc-test");
    it->p = xmalloc_tagged(s);
    it->size = s;
    /* touch the block like a real user would: fill up to 64 bytes after the tag */
    if (s > 24) memset((char *)it->p + 8, (int)(x & 0xff), (s - 16) < 64 ? (s - 16) : 64);
    bytes += s;
  }
  for (long j = 0; j < nslots; j++)
    if (slots[j].p) xfree_tagged(slots[j].p, slots[j].size, "alloc-test (final)");
  free(slots);
  atomic_fetch_add(&g_ops, ops_per_thread);
  atomic_fetch_add(&g_bytes, bytes);
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = (int)arg_long(argc, argv, 1, 1);
  ops_per_thread = arg_long(argc, argv, 2, 10000000);
  nslots = arg_long(argc, argv, 3, 65536);
  seed = (uint64_t)arg_long(argc, argv, 4, 3);
  if (nthreads < 1 || nslots < 16) return 2;
  build_tables();
  pthread_t *th = calloc((size_t)nthreads, sizeof(pthread_t));
  double t0 = now_sec();
  if (nthreads == 1) worker((void *)0);
  else {
    for (int i = 0; i < nthreads; i++) th[i] = spawn(worker, (void *)(uintptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  }
  double secs = now_sec() - t0;
  free(th);
  long ops = atomic_load(&g_ops);
  if (ops != (long)nthreads * ops_per_thread) verify_fail("alloc-test: %ld operations instead of %ld", ops, (long)nthreads * ops_per_thread);
  printf("RESULT mops=%.4f ops=%ld secs=%.6f\n", (double)ops / secs / 1e6, ops, secs);
  return 0;
}
