/* test-rlimit: address-space exhaustion (DROPIN 17).  A child process lowers RLIMIT_AS to a little
 * above what it uses, then allocates until every size class fails.  Every entry point must then
 * return NULL with ENOMEM (posix_memalign: return ENOMEM), a failed realloc must keep its block, a
 * shrinking realloc must not fail (as glibc's),
 * threads whose first allocation (heap set-up: metadata) happens now must get NULL too, and nothing
 * may crash or abort.  After freeing, allocation works again. */
#include "sm-test.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "shardmalloc.h"

#define MAXP (4u << 20)
static void **ptrs; /* mmap'ed before the limit, so our own bookkeeping never needs malloc */
static size_t nptrs;

/* a NULL result must come with ENOMEM; a block must be usable */
#define CHECK_OOM(expr, what)                                                                  \
  do {                                                                                         \
    errno = 0;                                                                                 \
    void *r_ = (expr);                                                                         \
    SM_COUNT();                                                                                \
    if (r_ == NULL && errno != ENOMEM)                                                         \
      sm_fail(__FILE__, __LINE__, what, "expected NULL with ENOMEM, seen NULL with errno %d", errno); \
    else if (r_ != NULL && nptrs < MAXP) ptrs[nptrs++] = r_;                                   \
    oom_nulls += r_ == NULL;                                                                   \
  } while (0)
static long oom_nulls;
static char *reserved_small; /* allocated before the limit */
static char *reserved_huge;  /* 8 MiB, allocated before the limit */
static char *reserved_shrink[2]; /* 16 MiB and 60,000 bytes, allocated before the limit */

static pthread_barrier_t bar;
static atomic_int thread_bad;
static void *late_thread(void *arg) { /* first allocation happens under exhaustion */
  if (arg == NULL) pthread_barrier_wait(&bar); /* the late extra thread (arg != NULL) does not wait */
  static const size_t sizes[] = {1 << 20, 100000, 4096, 1000, 100, 16, 1};
  for (int i = 0; i < 7; i++) {
    errno = 0;
    void *p = malloc(sizes[i]);
    if (p == NULL && errno != ENOMEM) atomic_fetch_add(&thread_bad, 1);
    if (p) memset(p, 1, sizes[i]);
    free(p);
    errno = 0;
    p = sm_calloc(1, sizes[i]);
    if (p == NULL && errno != ENOMEM) atomic_fetch_add(&thread_bad, 1);
    sm_free(p);
  }
  return NULL;
}

static size_t fill_until_failure(size_t size, size_t *count) {
  size_t got = 0;
  for (;;) {
    if (nptrs >= MAXP) return got;
    errno = 0;
    void *p = malloc(size);
    if (!p) {
      CHECK(errno == ENOMEM, "malloc(%zu) failing under RLIMIT_AS: expected ENOMEM, seen errno %d", size, errno);
      break;
    }
    memset(p, 0x6b, size < 4096 ? size : 4096); /* touch a little */
    ptrs[nptrs++] = p;
    got++;
  }
  *count += got;
  return got;
}

static int child(void) {
  sm_test_name = "test-rlimit (child)";
  ptrs = mmap(NULL, MAXP * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ptrs == MAP_FAILED) return 2;
  /* warm up: this thread's heap exists, stdout has its buffer */
  free(malloc(100));
  reserved_small = malloc(100);
  reserved_huge = malloc(8 << 20);
  if (reserved_huge) fill_pattern(reserved_huge, 8 << 20, 8);
  reserved_shrink[0] = malloc(16 << 20);
  reserved_shrink[1] = malloc(60000);
  if (reserved_shrink[0]) fill_pattern(reserved_shrink[0], 1 << 20, 16);
  if (reserved_shrink[1]) fill_pattern(reserved_shrink[1], 100, 17);
  printf("child: starting\n");
  pthread_barrier_init(&bar, NULL, 3);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, late_thread, NULL);

  unsigned long vm_pages = 0, rss_pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lu %lu", &vm_pages, &rss_pages) != 2) return 3;
  fclose(f);
  size_t vm = vm_pages * (size_t)sysconf(_SC_PAGESIZE);
  struct rlimit rl = {vm + 160 * MiB, vm + 160 * MiB};
  if (setrlimit(RLIMIT_AS, &rl)) return 4;
  printf("child: address space %zu MiB, RLIMIT_AS set to %zu MiB\n", vm / MiB, (size_t)rl.rlim_cur / MiB);

  SECTION("allocate until every size fails (8 MiB .. 16 B): NULL with ENOMEM") {
    size_t count = 0;
    static const size_t sizes[] = {8 << 20, 1 << 20, 256 << 10, 64 << 10, 8 << 10, 1024, 128, 16};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t got = fill_until_failure(sizes[i], &count);
      printf("  %8zu-byte blocks: %zu more before the first failure\n", sizes[i], got);
    }
    CHECK(nptrs < MAXP, "expected exhaustion before %u blocks, seen none%s", MAXP, "");
  }
  SECTION("every entry point under exhaustion returns NULL/ENOMEM, no crash") {
    /* a shrink never fails (as glibc's): with no memory for a smaller block, the block stays
     * (until 2026-11-27 these returned NULL/ENOMEM) */
    static const size_t shrink_to[2] = {1 << 20, 100};
    for (int k = 0; k < 2; k++) {
      CHECK_NONNULL(reserved_shrink[k]);
      if (reserved_shrink[k] == NULL) continue;
      errno = EDOM;
      char *q = realloc(reserved_shrink[k], shrink_to[k]);
      CHECK(q != NULL && errno == EDOM, "realloc shrinking a block to %zu bytes under exhaustion: expected a block "
            "and errno untouched, seen %p errno %d", shrink_to[k], (void *)q, errno);
      if (q == NULL) continue;
      CHECK_PATTERN(q, shrink_to[k], 16 + k);
      CHECK(malloc_usable_size(q) >= shrink_to[k], "usable size %zu", malloc_usable_size(q));
      free(q);
    }
    oom_nulls = 0;
    size_t big = 4 << 20;
    CHECK_OOM(malloc(big), "malloc");
    CHECK_OOM(calloc(1, big), "calloc");
    CHECK_OOM(calloc(big / 8, 8), "calloc(n,8)");
    CHECK_OOM(realloc(NULL, big), "realloc(NULL)");
    CHECK_OOM(reallocarray(NULL, big / 16, 16), "reallocarray");
    CHECK_OOM(aligned_alloc(4096, big), "aligned_alloc");
    CHECK_OOM(aligned_alloc(1 << 22, 100), "aligned_alloc(4 MiB alignment)");
    CHECK_OOM(memalign(64, big), "memalign");
    CHECK_OOM(valloc(big), "valloc");
    CHECK_OOM(pvalloc(big), "pvalloc");
    CHECK_OOM(sm_malloc(big), "sm_malloc");
    CHECK_OOM(sm_zalloc(big), "sm_zalloc");
    CHECK_OOM(sm_calloc(1, big), "sm_calloc");
    CHECK_OOM(sm_mallocn(big / 4, 4), "sm_mallocn");
    CHECK_OOM(sm_malloc_aligned(big, 1 << 16), "sm_malloc_aligned");
    CHECK_OOM(sm_zalloc_aligned(big, 256), "sm_zalloc_aligned");
    CHECK_OOM(sm_calloc_aligned(big / 2, 2, 64), "sm_calloc_aligned");
    CHECK_OOM(sm_malloc_aligned_at(big, 4096, 16), "sm_malloc_aligned_at");
    CHECK(oom_nulls >= 16, "expected (nearly) all 4 MiB requests to fail, seen %ld of 18 fail", oom_nulls);
    void *pm = (void *)(uintptr_t)0x5eed;
    errno = EDOM;
    int r = posix_memalign(&pm, 64, big);
    CHECK(r == ENOMEM || (r == 0 && pm != (void *)(uintptr_t)0x5eed),
          "posix_memalign under exhaustion: expected ENOMEM, seen %d", r);
    CHECK(r == 0 || (pm == (void *)(uintptr_t)0x5eed && errno == EDOM),
          "posix_memalign failing: expected *p and errno untouched, seen %p errno %d", pm, errno);
    if (r == 0) ptrs[nptrs++] = pm;
    /* a failed realloc keeps its block */
    char *small = reserved_small;
    CHECK_NONNULL(small);
    if (small) {
      fill_pattern(small, 64, 99);
      errno = 0;
      void *q = realloc(small, big);
      CHECK(q == NULL ? errno == ENOMEM : 1, "realloc failing: expected ENOMEM, seen errno %d", errno);
      if (q == NULL) {
        CHECK_PATTERN(small, 64, 99);
        free(small);
      } else free(q);
      char *s2 = sm_malloc(64);
      if (s2) {
        errno = 0;
        q = sm_reallocf(s2, big); /* frees s2 on failure */
        CHECK(q != NULL || errno == ENOMEM, "sm_reallocf failing: expected ENOMEM, seen errno %d", errno);
        sm_free(q);
      }
    }
    /* a huge block that cannot grow keeps its contents; one that can, keeps them too */
    CHECK_NONNULL(reserved_huge);
    if (reserved_huge) {
      size_t want[] = {64 << 20, 9 << 20, 200 << 20};
      for (int k = 0; k < 3; k++) {
        errno = 0;
        char *q = realloc(reserved_huge, want[k]);
        CHECK(q != NULL || errno == ENOMEM, "realloc(8 MiB block, %zu MiB) under exhaustion: expected a block or "
              "ENOMEM, seen NULL errno %d", want[k] >> 20, errno);
        if (q) reserved_huge = q;
        CHECK_PATTERN(reserved_huge, 8 << 20, 8);
      }
      free(reserved_huge);
    }
    /* small requests: either a block or NULL/ENOMEM */
    for (size_t n = 1; n <= 8192; n = n * 2 + 1) {
      CHECK_OOM(malloc(n), "malloc small");
      CHECK_OOM(sm_malloc_small(n < SM_SMALL_SIZE_MAX ? n : SM_SMALL_SIZE_MAX), "sm_malloc_small");
      CHECK_OOM(strdup("a string"), "strdup");
    }
    sm_collect(false);
    CHECK_OOM(malloc(big), "malloc after sm_collect");
  }
  SECTION("threads whose first allocation is under exhaustion get NULL/ENOMEM") {
    pthread_barrier_wait(&bar);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(atomic_load(&thread_bad) == 0, "expected every NULL with ENOMEM, seen %d wrong errno", atomic_load(&thread_bad));
    pthread_t t2;
    /* may fail for lack of a stack: fine. It must not wait on the barrier, which is destroyed
     * below (a waiter would block the destroy forever) */
    int r = pthread_create(&t2, NULL, late_thread, (void *)1);
    if (r == 0) pthread_join(t2, NULL);
    pthread_barrier_destroy(&bar);
  }
  SECTION("after freeing, allocation works again") {
    size_t freed = 0;
    for (size_t i = 0; i < nptrs; i++) {
      free(ptrs[i]);
      freed++;
    }
    nptrs = 0;
    /* the freed memory must be usable again: when mmap fails, cached/empty segments should be
     * given back (or reused) before giving up */
    void *p = malloc(32 << 20);
    CHECK(p != NULL,
          "malloc(32 MiB) after freeing all %zu blocks (no sm_collect): expected a block, seen NULL errno %d "
          "(freed memory neither reused nor unmapped when mmap failed)", freed, errno);
    free(p);
    sm_collect(true);
    p = malloc(32 << 20);
    CHECK(p != NULL, "malloc(32 MiB) after freeing %zu blocks and sm_collect(true): expected a block, seen NULL errno %d",
          freed, errno);
    if (p) memset(p, 1, 32 << 20);
    free(p);
    void *q[1000];
    for (int i = 0; i < 1000; i++) {
      q[i] = malloc((size_t)i * 100 + 1);
      CHECK(q[i] != NULL, "malloc(%d) after freeing: expected a block, seen NULL", i * 100 + 1);
    }
    for (int i = 0; i < 1000; i++) free(q[i]);
  }
  return sm_test_summary();
}

int main(void) {
  sm_test_name = "test-rlimit";
  setvbuf(stdout, NULL, _IOLBF, 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(child());
  int st = 0;
  waitpid(pid, &st, 0);
  SECTION("the exhausted child ran to the end") {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: expected exit 0, seen %s %d (a signal means a crash/abort)",
          WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  return sm_test_summary();
}
