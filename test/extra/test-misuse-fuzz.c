/* test-misuse-fuzz: misuse at random moments of a random workload, in the secure and debug builds
 * (DROPIN 20: misuse is reported and the heap is never silently corrupted).
 * Usage: test-misuse-fuzz LIBSHARDMALLOC-(SECURE|DEBUG).so [--ops N] [--seed S] [--threads T]
 * It runs itself again with that library preloaded, errors going to a handler (abort_on_error off).
 * The workload uses the standard API (malloc, calloc, realloc, aligned_alloc, posix_memalign,
 * free, free_sized) on blocks of 0 bytes to 3 MiB that carry a pattern; now and then it commits
 * one misuse: a double free (at once, or after an allocation of another size), a free of an
 * interior, stack or global pointer, a write one byte past the usable size followed by the free,
 * a realloc of a freed block (NULL and EINVAL), a free_sized with the wrong size. Every misuse
 * must be reported (at least one error), no correct call may be (no false alarm), and every live
 * block must keep its contents; a block that a rejected free left live is freed correctly later.
 * It also writes after free (8 bytes into a freed block, its link word or further in): that is
 * reported, if at all, when the memory is reused (a corrupted list, or in the debug build the
 * freed fill), and it must never make the allocator hand out memory wrong.
 * With several threads (each its own blocks), the misuses that free a block are left out: another
 * thread could take it meanwhile, and its owner's second free would then be a correct one. */
#include "sm-test.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "shardmalloc.h"

#define SLOTS 1024

void free_sized(void *p, size_t size); /* C23; glibc 2.36 does not declare it */

typedef struct {
  char *p;
  size_t size;
  uint32_t tag;
  bool leaked; /* a rejected free left it live (a plain free of it is correct) */
} blk_t;

/* per thread (the handler runs in the thread that made the bad call); summed at the end */
static _Thread_local volatile long errors; /* volatile: the compiler does not see the handler run inside free */
static _Thread_local volatile long corruption_errors; /* EFAULT: a corrupted list, an overwritten canary */
static _Thread_local long writes_after_free, late_reports; /* their reports come when the memory is reused */
static _Thread_local long misuses, misuses_missed, false_alarms, damaged, done_ops, realloc_errno_wrong;
static atomic_long total_errors, total_misuses, total_missed, total_false_alarms, total_damaged, total_ops,
    total_realloc_errno_wrong, total_writes_after_free, total_late_reports;
static int nthreads = 1; /* with several, no misuse that frees: another thread could take the block */
static long ops_per_thread = 200000;
static uint64_t base_seed = 1;
static char global_buf[256];

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static void on_error(int err, void *arg) {
  (void)arg;
  errors++;
  if (err == EFAULT) corruption_errors++;
}
static size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s), v = r >> 8;
  switch (r % 32) {
  case 0: return v % 3000000;
  case 1: case 2: return v % 200000;
  case 3: case 4: case 5: case 6: return v % 9000;
  default: return v % 300;
  }
}
static void fill(blk_t *b) {
  for (size_t i = 0; i < b->size && i < 64; i++) b->p[i] = (char)(b->tag + i);
  for (size_t i = b->size > 80 ? b->size - 16 : b->size; i < b->size; i++) b->p[i] = (char)(b->tag ^ i);
}
static bool head_intact(const blk_t *b, size_t upto) {
  for (size_t i = 0; i < upto && i < 64; i++)
    if (b->p[i] != (char)(b->tag + i)) return false;
  return true;
}
static bool intact(const blk_t *b) {
  for (size_t i = b->size > 80 ? b->size - 16 : b->size; i < b->size; i++)
    if (b->p[i] != (char)(b->tag ^ i)) return false;
  return head_intact(b, b->size);
}
static void block_new(blk_t *b, uint64_t *s) {
  b->size = pick_size(s);
  b->tag = (uint32_t)rnd(s);
  b->leaked = false;
  size_t align = (size_t)16 << (rnd(s) % 12);
  switch (rnd(s) % 5) {
  case 0: b->p = calloc(1, b->size); break;
  case 1: b->p = aligned_alloc(align, b->size); break;
  case 2: {
    void *p = NULL;
    b->p = posix_memalign(&p, align, b->size) == 0 ? p : NULL;
    break;
  }
  default: b->p = malloc(b->size);
  }
  if (b->p != NULL) fill(b);
}

/* a correct operation: no error may be reported, except a late one of a write after free */
static void correct_op(blk_t *b, uint64_t *s) {
  long before = errors, corruption_before = corruption_errors;
  if (b->p == NULL) {
    block_new(b, s);
  } else {
    if (!intact(b)) damaged++;
    uint64_t r = rnd(s) % 8;
    if (r < 2 && !b->leaked) {
      size_t size = pick_size(s) + 1, old = b->size;
      char *p = realloc(b->p, size);
      if (p != NULL) {
        b->p = p;
        if (!head_intact(b, old < size ? old : size)) damaged++;
        b->size = size;
        fill(b);
      }
    } else if (r < 4 && !b->leaked) {
      free_sized(b->p, b->size);
      b->p = NULL;
    } else { /* also a block whose free was rejected: this free is a correct one */
      free(b->p);
      b->p = NULL;
    }
  }
  if (errors != before) {
    if (writes_after_free > 0 && errors - before == corruption_errors - corruption_before) late_reports++;
    else false_alarms++;
  }
}

/* one misuse; returns false if none could be made here */
static bool misuse(blk_t *b, uint64_t *s) {
  long before = errors;
  char local[64];
  int kind = (int)(rnd(s) % 9);
  if (nthreads > 1 && (kind == 0 || kind == 1 || kind == 6 || kind == 8)) return false;
  switch (kind) {
  case 8: { /* a write after free, into the link word or further in: reported (if at all) when the
             * memory is handed out again; it must never be handed out wrong */
    if (b->p == NULL || b->leaked || b->size < 16 || b->size > 4096) return false;
    char *p = b->p;
    size_t size = b->size;
    free(p);
    b->p = NULL;
    if (!sm_check_owned(p)) return false; /* its memory went back to the OS */
    size_t at = rnd(s) % 2 ? 0 : 8 + rnd(s) % (size - 8 - 7);
    uint64_t junk = rnd(s);
    memcpy(p + at, &junk, 8);
    writes_after_free++;
    return false; /* not counted as a misuse that must be reported at once */
  }
  case 0: /* double free, at once */
    if (b->p == NULL || b->leaked) return false;
    free(b->p);
    free(b->p);
    b->p = NULL;
    break;
  case 1: { /* double free after an allocation of another size (which cannot take the block) */
    if (b->p == NULL || b->leaked || b->size < 16) return false;
    char *p = b->p;
    size_t size = b->size;
    free(p);
    b->p = NULL;
    void *other = malloc(size + 4096); /* another size class: p stays free */
    free(other);
    free(p);
    break;
  }
  case 2: /* interior pointer */
    if (b->p == NULL || b->size < 64) return false;
    free(b->p + 16 + rnd(s) % (b->size - 32));
    break;
  case 3:
    local[0] = 1;
    free(opaque_ptr(local + (rnd(s) % 32)));
    break;
  case 4:
    free(opaque_ptr(global_buf + 16 * (rnd(s) % 8)));
    break;
  case 5: { /* one byte past the usable size, then the free: rejected, the block stays live */
    if (b->p == NULL || b->leaked || b->size > 100000) return false;
    size_t usable = malloc_usable_size(b->p);
    b->p[usable] ^= 0x5a;
    free(b->p);
    if (errors == before) { /* not caught: nothing to repair */
      b->p = NULL;
      break;
    }
    b->p[usable] ^= 0x5a; /* repaired, so that the final free of the leaked block is a correct one */
    b->leaked = true;
    break;
  }
  case 6: { /* realloc of a freed block */
    if (b->p == NULL || b->leaked) return false;
    free(b->p);
    errno = 0;
    void *q = realloc(b->p, b->size + 1);
    if (q == NULL && errno != EINVAL) realloc_errno_wrong++;
    if (q != NULL && errors == before) free(q); /* not caught: do not leak */
    b->p = NULL;
    break;
  }
  default: /* free_sized with a size of another class */
    if (b->p == NULL || b->leaked || b->size < 64 || b->size > 100000) return false;
    free_sized(b->p, b->size * 2 + 4096);
    if (errors == before) b->p = NULL; /* not caught: it was freed */
    else b->leaked = true;               /* rejected: still live */
  }
  misuses++;
  if (errors == before) {
    misuses_missed++;
    if (misuses_missed <= 5) fprintf(stderr, "  a misuse was not reported (kind chosen with seed state %llu)\n",
                                     (unsigned long long)*s);
  }
  return true;
}

static void *worker(void *arg) {
  uint64_t s = (base_seed + (uintptr_t)arg) * 0x9E3779B97F4A7C15ull + 1;
  blk_t *live = calloc(SLOTS, sizeof(blk_t));
  for (long n = 0; n < ops_per_thread; n++) {
    blk_t *b = &live[rnd(&s) % SLOTS];
    if (rnd(&s) % 64 == 0) misuse(b, &s);
    else correct_op(b, &s);
    done_ops++;
  }
  for (int i = 0; i < SLOTS; i++) { /* every live block intact, and freed correctly */
    blk_t *b = &live[i];
    if (b->p == NULL) continue;
    if (!intact(b)) damaged++;
    long before = errors, corruption_before = corruption_errors;
    free(b->p);
    if (errors != before) {
      if (writes_after_free > 0 && errors - before == corruption_errors - corruption_before) late_reports++;
      else false_alarms++;
    }
  }
  free(live);
  atomic_fetch_add(&total_errors, errors);
  atomic_fetch_add(&total_misuses, misuses);
  atomic_fetch_add(&total_missed, misuses_missed);
  atomic_fetch_add(&total_false_alarms, false_alarms);
  atomic_fetch_add(&total_damaged, damaged);
  atomic_fetch_add(&total_ops, done_ops);
  atomic_fetch_add(&total_realloc_errno_wrong, realloc_errno_wrong);
  atomic_fetch_add(&total_writes_after_free, writes_after_free);
  atomic_fetch_add(&total_late_reports, late_reports);
  return NULL;
}

static int child(void) {
  sm_option_set(sm_option_abort_on_error, 0);
  sm_option_set(sm_option_show_errors, 0);
  sm_register_error(on_error, NULL);
  SECTION(nthreads > 1 ? "misuse at random moments in several threads (no double frees)"
                       : "misuse at random moments: reported, and no damage, no false alarm") {
    pthread_t t[64];
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    sm_collect(true);
    long m = atomic_load(&total_misuses), missed = atomic_load(&total_missed);
    CHECK(m > 100, "expected over 100 misuses committed, seen %ld", m);
    CHECK(missed == 0, "expected every misuse reported, seen %ld of %ld not", missed, m);
    CHECK(atomic_load(&total_false_alarms) == 0, "expected no error on a correct call, seen %ld",
          atomic_load(&total_false_alarms));
    CHECK(atomic_load(&total_damaged) == 0, "expected every live block intact, seen %ld damaged",
          atomic_load(&total_damaged));
    CHECK(atomic_load(&total_realloc_errno_wrong) == 0,
          "a rejected realloc: expected NULL with errno EINVAL, seen %ld otherwise", atomic_load(&total_realloc_errno_wrong));
    printf("  %d threads, %ld operations, %ld misuses, %ld errors reported\n", nthreads, atomic_load(&total_ops), m,
           atomic_load(&total_errors));
    if (nthreads == 1)
      printf("  and %ld writes after free, %ld of them reported when their memory was reused\n",
             atomic_load(&total_writes_after_free), atomic_load(&total_late_reports));
  }
  return sm_test_summary();
}

int main(int argc, char **argv) {
  sm_test_name = "test-misuse-fuzz";
  if (argc < 2) {
    fprintf(stderr, "usage: test-misuse-fuzz LIBSHARDMALLOC-(SECURE|DEBUG).so [--ops N] [--seed S] [--threads T]\n");
    return 2;
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ops")) ops_per_thread = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) base_seed = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--threads")) nthreads = atoi(argv[i + 1]);
  }
  if (nthreads < 1 || nthreads > 64) nthreads = 1;
  if (getenv("SM_MISUSE_FUZZ_CHILD") != NULL) return child();
  setenv("SM_MISUSE_FUZZ_CHILD", "1", 1);
  setenv("LD_PRELOAD", argv[1], 1);
  execv("/proc/self/exe", argv);
  perror("execv");
  return 1;
}
