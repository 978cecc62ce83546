/* test-huge-threads: huge blocks passed between threads that come and go. Threads allocate huge
 * blocks (plain, aligned, and from heaps of their own), swap them through shared slots, and the
 * thread that takes one grows it with realloc (mremap, off its heap's list and back on) or frees
 * it, while every thread visits its own heap (whose list other threads change meanwhile), deletes
 * and makes heaps, and ends; each round starts new threads (whose heaps are the ended ones',
 * reused). Every block carries its size and a pattern at both ends, checked when it is taken.
 * The lists of huge blocks are shared state (heap.c, segment.c); the tsan configurations run it
 * too, where it also checks that ThreadSanitizer is told the order of mremap calls (os_linux.c). */
#include "sm-test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "shardmalloc.h"

#define SLOTS 16
#define THREADS 4
#define STEPS 60

static _Atomic(void *) slots[SLOTS];
static atomic_int bad_blocks, bad_visits;

static bool count_huge(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)size;
  if (block == NULL && area->block_size > ((size_t)2 << 20)) ++*(int *)arg;
  return true;
}

static bool block_ok(const unsigned char *p, size_t size) {
  size_t recorded;
  memcpy(&recorded, p + 8, sizeof recorded);
  return recorded == size && p[0] == (unsigned char)size && p[size - 1] == (unsigned char)size;
}

static void *worker(void *arg) {
  uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  sm_heap_t *mine = sm_heap_new();
  for (int step = 0; step < STEPS; step++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t size = ((2 + r % 6) << 20) + (r >> 40) % 4096;
    unsigned char *p = (r & 1) ? sm_malloc(size) : (r & 2) ? sm_malloc_aligned(size, (size_t)1 << 20) : sm_heap_malloc(mine, size);
    if (p == NULL) continue;
    p[0] = p[size - 1] = (unsigned char)size;
    memcpy(p + 8, &size, sizeof size);
    unsigned char *old = atomic_exchange(&slots[(r >> 20) % SLOTS], p);
    if (old != NULL) {
      size_t old_size;
      memcpy(&old_size, old + 8, sizeof old_size);
      if (!block_ok(old, old_size)) atomic_fetch_add(&bad_blocks, 1);
      if (r & 4) { /* grow it: remapped where it can be */
        size_t grown = old_size + ((1 + (r >> 50) % 4) << 20);
        unsigned char *q = sm_realloc(old, grown);
        if (q == NULL || q[0] != (unsigned char)old_size || q[old_size - 1] != (unsigned char)old_size) atomic_fetch_add(&bad_blocks, 1);
        sm_free(q);
      } else {
        sm_free(old);
      }
    }
    int n = 0;
    if (!sm_heap_visit_blocks(sm_heap_get_default(), false, count_huge, &n) || n < 0) atomic_fetch_add(&bad_visits, 1);
    if ((r >> 33) % 8 == 0) { /* its huge blocks, some in other threads' hands, go to this thread's heap */
      sm_heap_delete(mine);
      mine = sm_heap_new();
    }
  }
  sm_heap_delete(mine); /* never destroyed: its blocks may be in other threads' hands */
  return NULL;
}

int main(int argc, char **argv) {
  sm_test_name = "test-huge-threads";
  int rounds = argc > 1 ? atoi(argv[1]) : 20;
  SECTION("huge blocks handed between threads that come and go: realloc, free, visits, heap deletes") {
    for (int round = 0; round < rounds; round++) {
      pthread_t t[THREADS];
      for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(round * THREADS + i + 1));
      for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    }
    for (int k = 0; k < SLOTS; k++) {
      unsigned char *p = atomic_exchange(&slots[k], NULL);
      if (p == NULL) continue;
      size_t size;
      memcpy(&size, p + 8, sizeof size);
      CHECK(block_ok(p, size), "a block left in a slot kept its size and pattern");
      sm_free(p);
    }
    CHECK(atomic_load(&bad_blocks) == 0, "expected every block taken from a slot intact, seen %d damaged",
          atomic_load(&bad_blocks));
    CHECK(atomic_load(&bad_visits) == 0, "expected every visit to complete, seen %d refused", atomic_load(&bad_visits));
  }
  return sm_test_summary();
}
