/* test-fuzz: a randomized stress of the whole sm_ API at once, across threads.
 * Threads pick operations at random: every allocation call (malloc, calloc, zalloc, mallocn,
 * malloc_small, the aligned ones, posix_memalign, in the thread's backing heap or in a heap of its
 * own), every way to resize (realloc, rezalloc, the aligned ones, expand), every way to free (free,
 * free_size, free_aligned), heap new/delete/destroy with contains_block, sm_collect. Sizes run from
 * 0 to 9 MiB (mostly small), alignments from 1 to 4 MiB. Blocks live in a thread's private slots or
 * in a shared table of atomic slots, so many are resized and freed by another thread than the one
 * that allocated them. Each block's first and last bytes carry a pattern that is checked before
 * every resize and free, together with its alignment, its usable size and (for zeroing calls) that
 * its memory reads as zero. Each thread also makes a heap that every thread allocates from (its
 * own part without a lock, the others through the heap's shared part), which outlives its
 * creator: the main thread deletes those heaps after the round, their blocks still in use. A
 * thread's own heap is now and then its default heap for a few calls of the plain API. Now and
 * then a thread reads the statistics, visits its heap, or changes the purge options under the
 * others' feet. Threads come and go in rounds. Half of the heaps are made in an exclusive arena
 * (sm_heap_new_in_arena): every block they hand out must lie in it.
 * Under ThreadSanitizer it found a remote free that wrote into a page after its owner had freed it
 * (page.c, page_wait_notify).
 * With --may-fail (under SHARDMALLOC_MEMORY_LIMIT or ulimit -v) calls may fail, with ENOMEM, and
 * nothing else may go wrong. With --fork N a thread now and then forks (about once in 100 N
 * operations, and once a round at least) while the others are in the middle of their calls; the
 * child goes on alone with everything it inherited and must neither hang nor find damage
 * (DROPIN 15).
 * Options: --threads T --ops N (per thread and round) --rounds R --seed S [--may-fail] [--fork N]. */
#include "sm-test.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "shardmalloc.h"

#define SLOTS 4096
#define PRIVATE_SLOTS 512
#define HEAD 256 /* checked bytes at the start of a block */
#define TAIL 64  /* and at its end, for blocks of more than HEAD + TAIL bytes */

typedef struct {
  void *p;
  size_t size;
  size_t align;  /* 0: the default alignment */
  uint32_t tag;  /* the pattern's seed */
  bool zeroed;   /* from a zeroing call, resized only by rezalloc since: new bytes must read zero */
} blk_t;

static _Atomic(blk_t *) shared[SLOTS];
static sm_heap_t *_Atomic round_heaps[64]; /* made by each thread of a round, used by all of them */
static sm_arena_id_t arena; /* an exclusive arena for heaps made in it (0: could not be reserved) */
static uint8_t *arena_start;
static size_t arena_size;
static int nthreads = 4, rounds = 2;
static long ops_per_thread = 10000;
static uint64_t base_seed = 1;
static atomic_long outside_arena;
static atomic_long damaged, misaligned, short_usable, not_zero, failed, wrong_errno, heap_lost, ops_done, cross,
    destroyed, in_round_heaps, as_default;
static bool may_fail; /* --may-fail: under a memory limit calls may fail (with ENOMEM) */

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static void report(atomic_long *counter, const char *what, const blk_t *b) {
  if (atomic_fetch_add(counter, 1) < 5)
    fprintf(stderr, "  %s: block %p of %zu bytes (alignment %zu)\n", what, b->p, b->size, b->align);
}

static size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s), v = r >> 8;
  switch (r % 64) {
  case 0: return 0;
  case 1: return v % 9000000;            /* huge */
  case 2: case 3: return v % 3000000;    /* large and huge */
  case 4: case 5: case 6: case 7: return v % 300000;
  default:
    if (r % 64 < 20) return v % 20000;
    if (r % 64 < 36) return v % 1100;
    return v % 128;
  }
}
static size_t pick_align(uint64_t *s) {
  uint64_t r = rnd(s);
  return r % 4 != 0 ? 0 : (size_t)1 << ((r >> 8) % 23);
}

static uint8_t head_byte(const blk_t *b, size_t i) { return (uint8_t)(b->tag + i); }
static uint8_t tail_byte(const blk_t *b, size_t i) { return (uint8_t)(b->tag ^ i); }
static bool has_tail(size_t size) { return size > HEAD + TAIL; }

static void fill(const blk_t *b) {
  uint8_t *q = b->p;
  for (size_t i = 0; i < b->size && i < HEAD; i++) q[i] = head_byte(b, i);
  if (has_tail(b->size))
    for (size_t i = b->size - TAIL; i < b->size; i++) q[i] = tail_byte(b, i);
}
/* the pattern in the first `upto` bytes (and at the end, if tail), the alignment, the usable size */
static void check_block(const blk_t *b, size_t upto, bool tail) {
  const uint8_t *q = b->p;
  for (size_t i = 0; i < upto && i < HEAD; i++)
    if (q[i] != head_byte(b, i)) { report(&damaged, "contents changed at its start", b); break; }
  if (tail && has_tail(b->size))
    for (size_t i = b->size - TAIL; i < b->size; i++)
      if (q[i] != tail_byte(b, i)) { report(&damaged, "contents changed at its end", b); break; }
  uintptr_t a = b->align ? b->align : (b->size >= 16 ? 16 : 1);
  if ((uintptr_t)b->p % a) report(&misaligned, "misaligned", b);
  if (sm_usable_size(b->p) < b->size) report(&short_usable, "usable size below the request", b);
}
static bool reads_zero(const void *p, size_t n) {
  const uint8_t *q = p;
  for (size_t i = 0; i < n; i++)
    if (q[i]) return false;
  return true;
}

/* a heap of its own for a thread, or a round's heap: in the arena now and then */
static sm_heap_t *heap_new(bool in_arena) { return in_arena && arena != 0 ? sm_heap_new_in_arena(arena) : sm_heap_new(); }
/* the round heaps of odd index are made in the arena */
static bool round_heap_in_arena(size_t i) { return i % 2 == 1 && arena != 0; }

/* in_arena: the heap was made in the arena, so the block must lie there */
static void block_new(blk_t *b, uint64_t *s, sm_heap_t *heap, bool in_arena) {
  b->size = pick_size(s);
  b->align = pick_align(s);
  b->tag = (uint32_t)rnd(s);
  int kind = (int)(rnd(s) % 6);
  bool zero = false;
  errno = 0;
  if (b->align) {
    switch (kind % 3) {
    case 0: b->p = heap ? sm_heap_malloc_aligned(heap, b->size, b->align) : sm_malloc_aligned(b->size, b->align); break;
    case 1:
      b->p = heap ? sm_heap_zalloc_aligned(heap, b->size, b->align) : sm_zalloc_aligned(b->size, b->align);
      zero = true;
      break;
    default:
      if (b->align < sizeof(void *)) b->align = sizeof(void *);
      in_arena = false; /* from the default heap */
      int err = sm_posix_memalign(&b->p, b->align, b->size);
      if (err != 0) {
        b->p = NULL;
        errno = err; /* it returns its error */
      }
    }
  } else {
    switch (kind) {
    case 0: case 1: b->p = heap ? sm_heap_malloc(heap, b->size) : sm_malloc(b->size); break;
    case 2: b->p = heap ? sm_heap_calloc(heap, 1, b->size) : sm_calloc(1, b->size); zero = true; break;
    case 3: b->p = heap ? sm_heap_zalloc(heap, b->size) : sm_zalloc(b->size); zero = true; break;
    case 4:
      if (b->size > 1024) b->size = 1024;
      b->p = heap ? sm_heap_malloc_small(heap, b->size) : sm_malloc_small(b->size);
      break;
    default: b->p = heap ? sm_heap_mallocn(heap, 1, b->size) : sm_mallocn(1, b->size); break;
    }
  }
  if (b->p != NULL && in_arena && ((uint8_t *)b->p < arena_start || (uint8_t *)b->p >= arena_start + arena_size))
    report(&outside_arena, "a block of a heap made in the arena lies outside it", b);
  if (b->p == NULL) {
    if (errno != ENOMEM) report(&wrong_errno, "allocation failed without ENOMEM", b);
    if (may_fail) atomic_fetch_add(&failed, 1);
    else report(&failed, "allocation failed", b);
    return;
  }
  if (zero && !reads_zero(b->p, b->size)) report(&not_zero, "a zeroing allocation does not read zero", b);
  b->zeroed = zero;
  fill(b);
}

/* resize to a random size; p == NULL afterwards if it was freed (realloc to 0) */
static void block_resize(blk_t *b, uint64_t *s) {
  check_block(b, b->size, true);
  size_t old = b->size, size = pick_size(s);
  int kind = (int)(rnd(s) % 4);
  bool zeroing = kind == 0;
  void *p;
  errno = 0;
  if (b->align) p = zeroing ? sm_rezalloc_aligned(b->p, size, b->align) : sm_realloc_aligned(b->p, size, b->align);
  else if (zeroing) p = sm_rezalloc(b->p, size);
  else if (kind == 1) {
    p = sm_expand(b->p, size);
    if (p == NULL) return; /* not in place: unchanged */
  } else p = sm_realloc(b->p, size);
  if (p == NULL && size == 0) { /* realloc(p, 0) frees p (as glibc's) */
    b->p = NULL;
    return;
  }
  if (p == NULL) {
    if (errno != ENOMEM) report(&wrong_errno, "resize failed without ENOMEM", b);
    if (may_fail) atomic_fetch_add(&failed, 1);
    else report(&failed, "resize failed", b);
    return;
  }
  b->p = p;
  b->size = old < size ? old : size;
  check_block(b, b->size, false); /* what was kept is still there */
  if (!zeroing) b->zeroed = false;
  if (b->zeroed && size > old && !reads_zero((uint8_t *)p + old, size - old))
    report(&not_zero, "rezalloc's new bytes do not read zero", b);
  b->size = size;
  fill(b);
}

static void block_free(blk_t *b, uint64_t *s) {
  check_block(b, b->size, true);
  switch (rnd(s) % 4) {
  case 0: sm_free_size(b->p, b->size); break;
  case 1:
    if (b->align) {
      sm_free_aligned(b->p, b->align);
      break;
    }
    /* fall through */
  default: sm_free(b->p);
  }
  b->p = NULL;
}

static pthread_barrier_t round_start;

static void discard_output(const char *msg, void *arg) { (void)msg; (void)arg; }
static bool count_block(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t size, void *arg) {
  (void)heap, (void)area, (void)size;
  if (block != NULL) ++*(long *)arg;
  return true;
}

/* what a thread works with */
typedef struct {
  uint64_t s;     /* its random state */
  blk_t *mine;    /* its private slots */
  sm_heap_t *heap; /* a heap of its own, now and then */
  bool heap_in_arena;
} wstate_t;

static void fork_check(wstate_t *w);
static long fork_every; /* --fork N: about one fork in every 100 N operations */

/* one random operation */
static void one_op(wstate_t *w) {
  uint64_t r = rnd(&w->s);
  int op = (int)(r % 100);
  if (op < 45) { /* a private slot, maybe in the private heap */
    blk_t *b = &w->mine[(r >> 8) % PRIVATE_SLOTS];
    if (b->p == NULL) block_new(b, &w->s, w->heap, w->heap != NULL && w->heap_in_arena);
    else if ((r >> 40) % 3 == 0) block_resize(b, &w->s);
    else block_free(b, &w->s);
  } else if (op < 90) { /* a shared slot: take it, change it, put it back */
    size_t i = (r >> 8) % SLOTS;
    blk_t *b = atomic_exchange(&shared[i], NULL);
    if (b == NULL) {
      if ((b = calloc(1, sizeof *b)) == NULL) {
        atomic_fetch_add(&failed, 1);
        return;
      }
      size_t k = (size_t)((r >> 52) % (uint64_t)nthreads);
      sm_heap_t *h = (r >> 50) % 4 == 0 ? atomic_load(&round_heaps[k]) : NULL;
      if (h != NULL) atomic_fetch_add(&in_round_heaps, 1);
      block_new(b, &w->s, h, h != NULL && round_heap_in_arena(k)); /* a heap of any thread of this round: they live until it is over */
    } else {
      atomic_fetch_add(&cross, 1);
      if ((r >> 40) % 3 == 0) block_resize(b, &w->s);
      else block_free(b, &w->s);
      if (b->p == NULL) block_new(b, &w->s, NULL, false);
    }
    if (b->p == NULL) { /* allocation failed (reported) */
      free(b);
      return;
    }
    b = atomic_exchange(&shared[i], b);
    if (b != NULL) { /* another thread filled the slot meanwhile */
      block_free(b, &w->s);
      free(b);
    }
  } else if (op < 93) {
    if (w->heap == NULL) {
      w->heap_in_arena = (r >> 30) % 2 && arena != 0;
      w->heap = heap_new(w->heap_in_arena);
    } else if ((r >> 20) % 2) { /* destroy: its blocks go with it */
      for (int j = 0; j < PRIVATE_SLOTS; j++)
        if (w->mine[j].p != NULL && sm_heap_contains_block(w->heap, w->mine[j].p)) w->mine[j].p = NULL;
      sm_heap_destroy(w->heap);
      w->heap = NULL;
      atomic_fetch_add(&destroyed, 1);
    } else { /* delete: its blocks stay valid */
      sm_heap_delete(w->heap);
      w->heap = NULL;
    }
  } else if (op == 93 && w->heap != NULL && (r >> 16) % 4 == 0) { /* the plain API, into this thread's heap */
    blk_t *b = &w->mine[(r >> 24) % PRIVATE_SLOTS];
    if (b->p == NULL) {
      sm_heap_t *previous = sm_heap_set_default(w->heap);
      if (previous != sm_heap_get_backing()) atomic_fetch_add(&failed, 1);
      block_new(b, &w->s, NULL, false);
      if (b->p != NULL && !sm_heap_contains_block(w->heap, b->p)) report(&heap_lost, "not in the default heap", b);
      sm_heap_set_default(previous);
      atomic_fetch_add(&as_default, 1);
    }
  } else if (op == 94 && (r >> 16) % 64 == 0) {
    sm_collect((r >> 30) & 1);
  } else if (op == 95 && (r >> 16) % 16 == 0) { /* introspection and options while others allocate */
    switch ((r >> 24) % 6) {
    case 0: {
      char *json = sm_stats_get_json(0, NULL);
      if (json == NULL || json[0] != '{') atomic_fetch_add(&failed, 1);
      sm_free(json);
      break;
    }
    case 1: sm_stats_merge(); break;
    case 2: sm_thread_stats_print_out(discard_output, NULL); break;
    case 3: {
      size_t rss = 0, commit = 0;
      sm_process_info(NULL, NULL, NULL, &rss, NULL, &commit, NULL, NULL);
      if (rss == 0) atomic_fetch_add(&failed, 1);
      break;
    }
    case 4:
      if (w->heap != NULL) {
        long live = 0;
        sm_heap_visit_blocks(w->heap, true, count_block, &live);
      }
      break;
    default: { /* purge at once, after the default delay, or never: the paths change under the others */
      static const long delays[] = {0, 10, 100, -1};
      sm_option_set(sm_option_purge_delay, delays[(r >> 32) % 4]);
      sm_option_set(sm_option_purge_decommits, (long)((r >> 36) & 1));
    }
    }
  } else if (op == 96) {
    sm_free(NULL);
    if (sm_usable_size(NULL) != 0) atomic_fetch_add(&failed, 1);
  } else if (op == 97 && fork_every > 0 && (r >> 16) % (uint64_t)fork_every == 0) {
    fork_check(w);
  } else if ((r >> 16) % 256 == 0) { /* now and then, everything private goes */
    for (int j = 0; j < PRIVATE_SLOTS; j++)
      if (w->mine[j].p != NULL) block_free(&w->mine[j], &w->s);
  }
}

static atomic_long forks, fork_failures;
static _Thread_local bool in_child;

static long problems(void) {
  return atomic_load(&damaged) + atomic_load(&misaligned) + atomic_load(&short_usable) + atomic_load(&not_zero) +
         atomic_load(&failed) + atomic_load(&wrong_errno) + atomic_load(&heap_lost);
}

/* fork while the other threads are in the middle of their calls: the child (this thread alone)
 * goes on with what it inherited (its private slots, the shared table with the other threads'
 * blocks, every heap), then frees all of it. It must not hang, and find nothing wrong. */
static void fork_check(wstate_t *w) {
  if (in_child) return;
  pid_t pid = fork();
  if (pid < 0) {
    atomic_fetch_add(&fork_failures, 1);
    return;
  }
  if (pid == 0) {
    in_child = true;
    alarm(60); /* a hang ends the child with SIGALRM */
    long before = problems();
    for (int n = 0; n < 3000; n++) one_op(w);
    for (int j = 0; j < PRIVATE_SLOTS; j++)
      if (w->mine[j].p != NULL) block_free(&w->mine[j], &w->s);
    for (int i = 0; i < SLOTS; i++) {
      blk_t *b = atomic_exchange(&shared[i], NULL);
      if (b != NULL) {
        block_free(b, &w->s);
        free(b);
      }
    }
    sm_collect(true);
    _exit(problems() == before ? 0 : 3);
  }
  int status = 0;
  for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) != pid; waited_ms += 10) {
    if (waited_ms > 120000) { /* the child's own alarm did not end it */
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(10000);
  }
  atomic_fetch_add(&forks, 1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    atomic_fetch_add(&fork_failures, 1);
    fprintf(stderr, "  fork child %s %d\n", WIFEXITED(status) ? "exited with" : "killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
}

static void *worker(void *arg) {
  uint64_t s = (base_seed * 0x9E3779B97F4A7C15ull) ^ ((uintptr_t)arg * 0xBF58476D1CE4E5B9ull) ^ 1;
  atomic_store(&round_heaps[(uintptr_t)arg % 64], heap_new(round_heap_in_arena((uintptr_t)arg % 64)));
  pthread_barrier_wait(&round_start);
  wstate_t w = {s, calloc(PRIVATE_SLOTS, sizeof(blk_t)), NULL, false};
  if (w.mine == NULL) { /* only under a memory limit (SHARDMALLOC_MEMORY_LIMIT) */
    atomic_fetch_add(&failed, 1);
    return NULL;
  }
  for (long n = 0; n < ops_per_thread; n++) {
    if (fork_every > 0 && n == ops_per_thread / 2 && (uintptr_t)arg % 64 == 0) fork_check(&w); /* at least one a round */
    one_op(&w);
  }
  if (w.heap != NULL) { /* a heap that is deleted keeps its blocks: they must all still be intact */
    for (int j = 0; j < PRIVATE_SLOTS; j++)
      if (w.mine[j].p != NULL && !sm_heap_contains_block(sm_heap_get_backing(), w.mine[j].p) &&
          !sm_heap_contains_block(w.heap, w.mine[j].p))
        report(&heap_lost, "a block of a live heap is in neither heap", &w.mine[j]);
    sm_heap_delete(w.heap);
  }
  for (int j = 0; j < PRIVATE_SLOTS; j++)
    if (w.mine[j].p != NULL) block_free(&w.mine[j], &w.s);
  free(w.mine);
  atomic_fetch_add(&ops_done, ops_per_thread);
  return NULL;
}

int main(int argc, char **argv) {
  sm_test_name = "test-fuzz";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ops")) ops_per_thread = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) base_seed = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--fork")) fork_every = atol(argv[i + 1]);
  }
  for (int i = 1; i < argc; i++) may_fail |= !strcmp(argv[i], "--may-fail");
  if (nthreads < 1 || nthreads > 64) nthreads = 4;
  /* address space only (nothing is committed until used); under ulimit -v it may be refused */
  if (sm_reserve_os_memory_ex((size_t)4 << 30, false, false, true, &arena) != 0) arena = 0;
  arena_start = sm_arena_area(arena, &arena_size);
  printf("  heaps in an exclusive arena: %s\n", arena != 0 ? "yes (4 GiB)" : "no (the reservation was refused)");
  SECTION("random sm_ API calls across threads and heaps") {
    uint64_t s = base_seed;
    pthread_barrier_init(&round_start, NULL, (unsigned)nthreads);
    for (int round = 0; round < rounds; round++) {
      pthread_t t[64];
      for (int i = 0; i < nthreads; i++) {
        int err = pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(round * 64 + i));
        if (err != 0) { /* under a memory limit glibc may get no stack or TLS for it */
          CHECK(may_fail, "pthread_create: expected a thread, seen %s", strerror(err));
          printf("  round %d: pthread_create failed (%s); the round's workers wait for each other, so the run "
                 "ends here\n", round, strerror(err));
          exit(sm_test_summary()); /* the workers started are blocked at the barrier for good */
        }
      }
      for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
      /* their creators have ended: the heaps are served through their locks now; deleting them
       * keeps their blocks (in the shared table) valid */
      for (int i = 0; i < nthreads; i++) {
        sm_heap_t *h = atomic_exchange(&round_heaps[i], NULL);
        if (h != NULL) sm_heap_delete(h);
      }
    }
    pthread_barrier_destroy(&round_start);
    for (int i = 0; i < SLOTS; i++) {
      blk_t *b = atomic_exchange(&shared[i], NULL);
      if (b != NULL) {
        block_free(b, &s);
        free(b);
      }
    }
    CHECK(atomic_load(&damaged) == 0, "expected every block intact, seen %ld damaged", atomic_load(&damaged));
    CHECK(atomic_load(&misaligned) == 0, "expected every block aligned, seen %ld misaligned", atomic_load(&misaligned));
    CHECK(atomic_load(&outside_arena) == 0, "expected the blocks of heaps made in the arena in it, seen %ld outside",
          atomic_load(&outside_arena));
    CHECK(atomic_load(&short_usable) == 0, "expected usable sizes >= requests, seen %ld below", atomic_load(&short_usable));
    CHECK(atomic_load(&not_zero) == 0, "expected zeroing calls to zero, seen %ld not", atomic_load(&not_zero));
    if (!may_fail) CHECK(atomic_load(&failed) == 0, "expected no call to fail, seen %ld", atomic_load(&failed));
    CHECK(atomic_load(&wrong_errno) == 0, "expected failures to set ENOMEM, seen %ld otherwise", atomic_load(&wrong_errno));
    CHECK(atomic_load(&heap_lost) == 0, "expected heap blocks found, seen %ld lost", atomic_load(&heap_lost));
    if (fork_every > 0) {
      CHECK(atomic_load(&forks) > 0, "expected forks, seen none");
      CHECK(atomic_load(&fork_failures) == 0, "expected every fork child to end well, seen %ld not", atomic_load(&fork_failures));
      printf("  %ld forks, each child going on alone\n", atomic_load(&forks));
    }
    if (may_fail) printf("  %ld calls failed with ENOMEM (allowed: --may-fail)\n", atomic_load(&failed));
    printf("  %d rounds of %d threads, %ld operations (%ld on blocks of other threads), %ld heaps destroyed,\n"
           "  %ld blocks from the round's shared heaps, %ld through a thread's heap made its default\n",
           rounds, nthreads, atomic_load(&ops_done), atomic_load(&cross), atomic_load(&destroyed),
           atomic_load(&in_round_heaps), atomic_load(&as_default));
  }
  sm_collect(true);
  return sm_test_summary();
}
