/* test-secure-features: the secure build's defences (issue 5, "Secure build"), each in a child
 * process with libshardmalloc-secure preloaded:
 *   - guard pages: a write to the guard page after a segment header, at the end of a small
 *     segment, and at the end of a huge block's mapping dies with SIGSEGV (a write to the last
 *     usable byte before it does not), also for the two parts of a cached mapping split for two
 *     smaller huge blocks, and for a huge block grown by realloc (its pages moved, not copied);
 *   - realloc of a freed huge block to a larger size is reported and returns NULL;
 *   - SHARDMALLOC_QUARANTINE=8: a freed block is not handed out by the next 8 mallocs of its size;
 *   - SHARDMALLOC_ZERO_ON_FREE=1: a freed block reads 0 past its first word right after free;
 *   - sized free with a wrong size (free_sized, C++ sized operator delete) is reported and ignored
 *     with SHARDMALLOC_ABORT_ON_ERROR=0, and aborts by default;
 *   - sm_register_error's handler gets the error code when abort_on_error is off;
 *   - a freed block whose link was overwritten is reported and never handed out again;
 *   - every block handed out has its first word cleared (a reused block's old data is not there);
 *   - randomised free-list order: two processes see different address sequences, not a fixed
 *     stride, while the release build hands out a fresh page in ascending order;
 *   - randomised reuse: the first freed block handed out again is one of the last 8 freed, not
 *     always the last; a malloc/free loop does not make its page grow past two extensions.
 * Usage: test-secure-features LIBSHARDMALLOC-SECURE.so LIBSHARDMALLOC.so
 * The program itself is not linked with shardmalloc: the sm_ functions are looked up with dlsym. */
#include "extra-util.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

static const char *secure_lib, *release_lib;

#define SEG_SIZE ((uintptr_t)4 << 20)

static void *sym(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    fprintf(stderr, "child: symbol %s not found (is a shardmalloc library preloaded?)\n", name);
    exit(90);
  }
  return f;
}

/* is addr in a PROT_NONE mapping, according to /proc/self/maps? */
static bool addr_is_guard(uintptr_t addr) {
  char perms[8];
  addr_perms(addr, perms);
  return strncmp(perms, "---", 3) == 0;
}

static void poke(uintptr_t addr, const char *what) {
  fprintf(stderr, "child: writing to %s at %#lx (PROT_NONE in /proc/self/maps: %s)\n", what, (unsigned long)addr,
          addr_is_guard(addr) ? "yes" : "no");
  *(volatile char *)addr = 1;
  fprintf(stderr, "child: the write to %s did not fault\n", what);
}

static volatile uintptr_t sink;

/* fork-quarantine: make and destroy heaps, and free, without end */
static void *destroy_loop(void *arg) {
  void *(*heap_new)(void) = (void *(*)(void))sym("sm_heap_new");
  void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))sym("sm_heap_malloc");
  void (*heap_destroy)(void *) = (void (*)(void *))sym("sm_heap_destroy");
  for (;;) {
    void *h = heap_new();
    for (int i = 0; i < 16; i++) {
      void *p = heap_malloc(h, 64);
      if (i & 1) free(p);
    }
    heap_destroy(h);
  }
  return arg;
}
static void *free_loop(void *arg) {
  for (;;) free(opaque_ptr(malloc(48)));
  return arg;
}

/* sm_heap_visit_blocks visitor (its types spelled out: the test does not link the library) */
static bool visit_count_blocks(const void *heap, const void *area, void *block, size_t size, void *arg) {
  (void)heap, (void)area, (void)size;
  if (block != NULL) ++*(int *)arg;
  return true;
}

static int codes[16], ncodes;
static void handler(int err, void *arg) {
  (void)arg;
  if (ncodes < 16) codes[ncodes++] = err;
}

static void *order_run(void *arg) {
  (void)arg;
  char *b[32];
  for (int i = 0; i < 32; i++) b[i] = malloc(32);
  printf("diffs:");
  for (int i = 1; i < 32; i++) printf(" %ld", (long)(b[i] - b[i - 1]));
  printf("\n");
  return NULL;
}

/* 200 blocks freed in order: which one does the first malloc that reuses one get? (0 = the last
 * freed, as plain LIFO reuse would give) */
static void *reuse_run(void *arg) {
  (void)arg;
  enum { N = 200 };
  char *b[N], *q[N + 100];
  for (int i = 0; i < N; i++) b[i] = malloc(40);
  for (int i = 0; i < N; i++) free(b[i]);
  int first = -1;
  for (int k = 0; k < N + 100 && first < 0; k++) {
    q[k] = malloc(40);
    for (int i = 0; i < N; i++)
      if (q[k] == b[i]) first = N - 1 - i;
  }
  printf("first-reused: %d\n", first);
  return NULL;
}

/* one block allocated and freed over and over: how many addresses does it take? */
static void *pingpong_run(void *arg) {
  (void)arg;
  enum { PAIRS = 100000, SLOTS = 1 << 12 };
  static uintptr_t seen[SLOTS]; /* open addressing; a page holds at most 64 KiB / 48 blocks */
  int distinct = 0;
  for (int i = 0; i < PAIRS; i++) {
    char *p = malloc(40);
    p[0] = 1;
    uintptr_t a = (uintptr_t)p;
    for (size_t h = (a >> 4) % SLOTS;; h = (h + 1) % SLOTS) {
      if (seen[h] == a) break;
      if (seen[h] == 0 && distinct < SLOTS / 2) {
        seen[h] = a;
        distinct++;
        break;
      }
    }
    free(p);
  }
  printf("distinct: %d\n", distinct);
  return NULL;
}

static int child(const char *c) {
  if (!strcmp(c, "unmap-grace")) {
    /* blocks above 64 MiB are unmapped at their free while no purger runs: the first one's range
     * stays a read-only mapping of zeros until the second one goes, then it is unmapped */
    size_t n = 80 * MiB;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 0x5A, n);
    free(a);
    char perms[8];
    addr_perms((uintptr_t)a + n / 2, perms);
    fprintf(stderr, "child: after the first free: %s, reads %d\n", perms[0] ? perms : "unmapped", *(volatile char *)(a + n / 2));
    free(b);
    addr_perms((uintptr_t)a + n / 2, perms);
    fprintf(stderr, "child: after the second free: %s\n", perms[0] ? perms : "unmapped");
    return 0;
  }
  if (!strcmp(c, "guard-header")) {
    char *p = malloc(32);
    uintptr_t seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1);
    p[0] = 1;
    *(volatile char *)(seg + 100) = *(volatile char *)(seg + 100); /* the header itself is ours to touch */
    poke(seg + 16384 + 100, "the guard page after the segment header (segment + 16 KiB)");
    return 0;
  }
  if (!strcmp(c, "guard-segment-end")) {
    char *p = malloc(32);
    uintptr_t seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1);
    *(volatile char *)(seg + SEG_SIZE - 4096 - 1) = 1; /* last byte of the last page: usable */
    fprintf(stderr, "child: the write to the last byte before the end guard worked\n");
    poke(seg + SEG_SIZE - 4096, "the guard page at the end of the segment");
    return 0;
  }
  if (!strcmp(c, "guard-huge")) {
    size_t (*usable)(const void *) = (size_t (*)(const void *))sym("sm_usable_size");
    size_t n = 3 * MiB;
    char *p = malloc(n);
    size_t u = usable(p);
    /* The huge block's mapping: whole 4 MiB units from (p-1) rounded down; the guard is its last
     * 4 KiB page. The block ends at the guard, so the usable part is everything before it. */
    uintptr_t seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1);
    uintptr_t end = ((uintptr_t)p + u + 8 + 4096 + SEG_SIZE - 1) & ~(SEG_SIZE - 1); /* + padding + guard */
    uintptr_t guard = end - 4096;
    fprintf(stderr, "child: huge block %p, usable %zu, mapping %#lx..%#lx, guard at %#lx\n", (void *)p, u,
            (unsigned long)seg, (unsigned long)end, (unsigned long)guard);
    memset(p, 0x5A, u);
    *(volatile char *)(guard - 1) = 1; /* the last byte of the mapping's usable part */
    fprintf(stderr, "child: the write to the last byte before the guard worked\n");
    poke(guard, "the guard page at the end of the huge block");
    return 0;
  }
  if (!strcmp(c, "guard-huge-split-end") || !strcmp(c, "guard-huge-split-tail")) {
    /* SHARDMALLOC_PURGE_DELAY=60000: a freed 15 MiB block's 16 MiB mapping waits in the cache,
     * resident; a 3 MiB block takes its first 4 MiB and a 7 MiB block the next 8 MiB. Each part
     * must have its guards: at the end of the first, after the header of the second. */
    char *big = malloc(15 * MiB);
    memset(big, 1, 15 * MiB);
    uintptr_t seg = ((uintptr_t)big - 1) & ~(SEG_SIZE - 1);
    free(big);
    char *p = malloc(3 * MiB), *q = malloc(7 * MiB);
    uintptr_t p_seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1), q_seg = ((uintptr_t)q - 1) & ~(SEG_SIZE - 1);
    fprintf(stderr, "child: freed mapping %#lx, 3 MiB block %p, 7 MiB block %p\n", (unsigned long)seg, (void *)p, (void *)q);
    if (p_seg != seg || q_seg != seg + SEG_SIZE) {
      fprintf(stderr, "child: the blocks did not take the cached mapping's parts\n");
      return 3;
    }
    memset(p, 2, 3 * MiB);
    memset(q, 3, 7 * MiB);
    if (!strcmp(c, "guard-huge-split-end")) poke(seg + SEG_SIZE - 4096, "the guard page at the end of the first part");
    else poke(q_seg + 16384 + 100, "the guard page after the second part's header");
    return 0;
  }
  if (!strcmp(c, "guard-huge-realloc")) {
    /* a huge block grown by realloc moves its pages into a new mapping (no copy): the contents
     * stay, and the new mapping has its guards */
    size_t (*usable)(const void *) = (size_t (*)(const void *))sym("sm_usable_size");
    char *p = malloc(5 * MiB);
    fill_pattern(p, 5 * MiB, 3);
    char *q = realloc(p, 13 * MiB);
    if (q == NULL || verify_pattern(q, 5 * MiB, 3) != (size_t)-1) {
      fprintf(stderr, "child: realloc lost the block's contents\n");
      return 3;
    }
    size_t u = usable(q);
    memset(q, 0x5A, u);
    uintptr_t end = ((uintptr_t)q + u + 8 + 4096 + SEG_SIZE - 1) & ~(SEG_SIZE - 1);
    fprintf(stderr, "child: 5 MiB block %p grown to 13 MiB at %p, usable %zu\n", (void *)p, (void *)q, u);
    poke(end - 4096, "the guard page at the end of the grown block's mapping");
    return 0;
  }
  if (!strcmp(c, "guard-huge-realloc-filled")) {
    /* SHARDMALLOC_PURGE_DELAY=60000: a freed 7 MiB block's 8 MiB mapping waits in the cache,
     * resident. A 5 MiB block grown to 13 MiB gets a fresh 8 MiB tail, and the cached mapping's
     * pages move in over it (no page faults to write it), its own guards left out: the grown
     * block is writable up to its end guard, and that guard still stops a write. */
    size_t (*usable)(const void *) = (size_t (*)(const void *))sym("sm_usable_size");
    char *old = malloc(7 * MiB);
    memset(old, 1, 7 * MiB);
    char *p = malloc(5 * MiB);
    fill_pattern(p, 5 * MiB, 5);
    free(old);
    char *q = realloc(p, 13 * MiB);
    if (q == NULL || verify_pattern(q, 5 * MiB, 5) != (size_t)-1) {
      fprintf(stderr, "child: realloc lost the block's contents\n");
      return 3;
    }
    size_t u = usable(q);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    memset(q, 0x5A, u);
    getrusage(RUSAGE_SELF, &after);
    long faults = after.ru_minflt - before.ru_minflt; /* 2048 for a fresh 8 MiB tail */
    uintptr_t end = ((uintptr_t)q + u + 8 + 4096 + SEG_SIZE - 1) & ~(SEG_SIZE - 1);
    fprintf(stderr, "child: 5 MiB block %p grown to 13 MiB at %p, usable %zu, %ld page faults to write it\n",
            (void *)p, (void *)q, u, faults);
    if (faults > 1024) {
      fprintf(stderr, "child: the grown tail was not filled from the cached mapping\n");
      return 3;
    }
    poke(end - 4096, "the guard page at the end of the grown block's mapping");
    return 0;
  }
  if (!strcmp(c, "realloc-freed-huge") || !strcmp(c, "realloc-freed-huge-unmapped")) { /* SHARDMALLOC_ABORT_ON_ERROR=0 */
    /* 5 MiB: its mapping waits in the cache; 100 MiB: unmapped at the free (one thread, no purger) */
    size_t n = strcmp(c, "realloc-freed-huge") ? 100 * MiB : 5 * MiB;
    char *p = malloc(n);
    free(p);
    char *q = realloc(opaque_ptr(p), 13 * MiB);
    printf("child: realloc of the freed block returned %s\n", q == NULL ? "NULL" : "a block");
    return 0;
  }
  if (!strcmp(c, "bad-link")) { /* SHARDMALLOC_ABORT_ON_ERROR=0: a freed block's link overwritten */
    char *p = malloc(100);
    size_t end = malloc_usable_size(p);
    free(p);
    memset((char *)opaque_ptr(p) + end, 0x55, 8); /* the link: the word past the usable size */
    int again = -1;
    for (int i = 0; i < 2000 && again < 0; i++)
      if (malloc(100) == p) again = i;
    printf("child: the written block came back at malloc %d\n", again);
    return 0;
  }
  if (!strcmp(c, "double-free-bad-link")) { /* SHARDMALLOC_ABORT_ON_ERROR=0: freed, overwritten, freed again */
    char *p = malloc(100), *q = malloc(100);
    size_t end = malloc_usable_size(q);
    free(p);
    free(q);
    memset(opaque_ptr(p), 0x55, 8); /* a first word, where other builds keep the link */
    memset((char *)opaque_ptr(q) + end, 0x55, 8); /* the link itself: the freed block looks overrun */
    free(opaque_ptr(p));
    free(opaque_ptr(q));
    int times_p = 0, times_q = 0;
    void *got[2000];
    for (int i = 0; i < 2000; i++) {
      got[i] = malloc(100);
      times_p += got[i] == p;
      times_q += got[i] == q;
    }
    printf("child: the block was handed out %d times in 2000 mallocs\n", times_p);
    printf("child: the block with the overwritten link was handed out %d times\n", times_q);
    for (int i = 0; i < 2000; i++) free(got[i]);
    return 0;
  }
  if (!strcmp(c, "destroyed-heap-dangling")) { /* SHARDMALLOC_ABORT_ON_ERROR=0 */
    /* a destroyed heap's blocks are not freed one by one: their canaries still say "live". A new
     * heap takes the same page and carves it again; a dangling pointer to a block it carved but
     * did not hand out must be seen as free */
    void *(*heap_new)(void) = (void *(*)(void))sym("sm_heap_new");
    void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))sym("sm_heap_malloc");
    void (*heap_destroy)(void *) = (void (*)(void *))sym("sm_heap_destroy");
    void *h = heap_new(), *b[8];
    for (int i = 0; i < 8; i++) b[i] = heap_malloc(h, 48);
    heap_destroy(h);
    void *h2 = heap_new();
    void *q = heap_malloc(h2, 48);
    void *p = b[0] == q ? b[1] : b[0];
    free(opaque_ptr(p));
    int times = 0;
    for (int i = 0; i < 200; i++) times += heap_malloc(h2, 48) == p;
    printf("child: the dangling block was handed out %d times\n", times);
    return 0;
  }
  if (!strcmp(c, "quarantine-destroy")) { /* SHARDMALLOC_QUARANTINE=50 */
    /* a block freed before its heap is destroyed waits in the quarantine; when it leaves, its
     * memory belongs to a new heap: it must not be freed into it (small and huge blocks). While
     * it waits, sm_heap_visit_blocks does not count it as live. */
    void *(*heap_new)(void) = (void *(*)(void))sym("sm_heap_new");
    void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))sym("sm_heap_malloc");
    void (*heap_destroy)(void *) = (void (*)(void *))sym("sm_heap_destroy");
    void *(*heap_malloc_aligned_at)(void *, size_t, size_t, size_t) =
        (void *(*)(void *, size_t, size_t, size_t))sym("sm_heap_malloc_aligned_at");
    bool (*visit)(void *, bool, bool (*)(const void *, const void *, void *, size_t, void *), void *) =
        (bool (*)(void *, bool, bool (*)(const void *, const void *, void *, size_t, void *), void *))sym("sm_heap_visit_blocks");
    int twice = 0, damaged = 0, visited_too_many = 0;
    for (int k = 0; k < 2; k++) {
      size_t size = k == 0 ? 64 : (size_t)8 << 20;
      void *h = heap_new();
      void *keep = heap_malloc(h, size), *p = heap_malloc(h, size);
      free(opaque_ptr(p)); /* waits in this thread's quarantine */
      free(opaque_ptr(heap_malloc_aligned_at(h, 100, 256, 8))); /* an interior pointer waits too */
      int live = 0;
      visit(h, true, visit_count_blocks, &live);
      visited_too_many += live != 1;
      (void)keep;
      heap_destroy(h);
      void *h2 = heap_new(), *got[64];
      for (int i = 0; i < 64; i++) {
        got[i] = heap_malloc(h2, size);
        memset(got[i], 0xA0 + i, size < 4096 ? size : 4096);
      }
      for (int i = 0; i < 60; i++) free(opaque_ptr(malloc(32))); /* p leaves the quarantine */
      for (int i = 0; i < 64; i++) {
        void *q = heap_malloc(h2, size);
        for (int j = 0; j < 64; j++) twice += q == got[j];
      }
      for (int i = 0; i < 64; i++)
        for (size_t b = 0; b < (size < 4096 ? size : 4096); b++) damaged += ((unsigned char *)got[i])[b] != (unsigned char)(0xA0 + i);
      heap_destroy(h2);
    }
    printf("child: handed out twice %d, damaged bytes %d, visits counting a quarantined block %d\n", twice, damaged,
           visited_too_many);
    return 0;
  }
  if (!strcmp(c, "fork-quarantine")) { /* SHARDMALLOC_QUARANTINE=50 */
    /* threads in sm_heap_destroy and in free (their rings busy) at the fork: the child, which
     * has neither, must not wait for them */
    pthread_t t1, t2;
    pthread_create(&t1, NULL, destroy_loop, NULL);
    pthread_create(&t2, NULL, free_loop, NULL);
    usleep(10000);
    int hung = 0, forks = 100;
    for (int i = 0; i < forks; i++) {
      pid_t pid = fork();
      if (pid == 0) {
        alarm(5);
        for (int k = 0; k < 100; k++) free(opaque_ptr(malloc(32)));
        void (*collect)(bool) = (void (*)(bool))sym("sm_collect");
        collect(false);
        void *(*heap_new)(void) = (void *(*)(void))sym("sm_heap_new");
        void (*heap_destroy)(void *) = (void (*)(void *))sym("sm_heap_destroy");
        heap_destroy(heap_new());
        _exit(0);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      hung += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    printf("child: %d of %d fork children hung or failed\n", hung, forks);
    fflush(stdout);
    _exit(0); /* the loops never end */
  }
  if (!strcmp(c, "quarantine-huge")) { /* SHARDMALLOC_QUARANTINE=8: freed huge blocks wait without their memory */
    for (int i = 0; i < 4; i++) {
      size_t n = (size_t)(64 + i) << 20;
      char *p = malloc(n);
      memset(opaque_ptr(p), 1, n);
      free(opaque_ptr(p));
    }
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld %ld", &pages, &resident) != 2) return 3;
    fclose(f);
    printf("child: resident %ld MiB after four huge blocks of 64-67 MiB were written and freed\n",
           resident * sysconf(_SC_PAGESIZE) >> 20);
    return 0;
  }
  if (!strcmp(c, "quarantine-user-default")) {
    /* blocks freed while a heap of sm_heap_new is the thread's default wait in the thread's ring,
     * not that heap's: until 2026-11-28 the heap's destroy, its delete and the thread's exit left
     * them in it, never freed (183 MB of 200 rounds) */
    void *(*heap_new)(void) = (void *(*)(void))sym("sm_heap_new");
    void *(*set_default)(void *) = (void *(*)(void *))sym("sm_heap_set_default");
    void (*destroy)(void *) = (void (*)(void *))sym("sm_heap_destroy");
    void (*del)(void *) = (void (*)(void *))sym("sm_heap_delete");
    void (*collect)(bool) = (void (*)(bool))sym("sm_collect");
    for (int round = 0; round < 200; round++) {
      char *b[8];
      for (int i = 0; i < 8; i++) b[i] = malloc(100000);
      void *h = heap_new();
      void *old = set_default(h);
      for (int i = 0; i < 8; i++) free(b[i]);
      set_default(old);
      if (round % 2) destroy(h);
      else del(h);
    }
    collect(true);
    printf("child: %zu bytes in use after 200 rounds that freed all they allocated\n", mallinfo2().uordblks);
    return 0;
  }
  if (!strcmp(c, "quarantine")) { /* run with SHARDMALLOC_QUARANTINE=8 (or not, as a control) */
    enum { K = 8 };
    void *keep[2000];
    char *p = malloc(48);
    free(p);
    int again = -1;
    for (int i = 0; i < 2000; i++) {
      keep[i] = malloc(48);
      if (keep[i] == p && again < 0) again = i;
    }
    printf("child: freed block %p handed out again by malloc number %d after its free (-1: not in 2000)\n", (void *)p,
           again < 0 ? -1 : again + 1);
    for (int i = 0; i < 2000; i++) free(keep[i]);
    return 0;
  }
  if (!strcmp(c, "first-word")) { /* every block handed out starts with a cleared word */
    enum { N = 64 };
    static const size_t sizes[] = {8, 24, 100, 1000, 20000};
    int reused = 0, dirty = 0;
    for (int round = 0; round < 50; round++) {
      size_t n = sizes[round % 5];
      unsigned char *b[N];
      uintptr_t old[N];
      for (int i = 0; i < N; i++) {
        b[i] = malloc(n);
        memset(b[i], 0xAB, n);
        old[i] = (uintptr_t)b[i];
      }
      for (int i = 0; i < N; i++) free(b[i]);
      for (int i = 0; i < N; i++) {
        b[i] = malloc(n);
        uint64_t w;
        memcpy(&w, b[i], 8);
        bool again = false;
        for (int j = 0; j < N; j++) again |= old[j] == (uintptr_t)b[i];
        reused += again;
        dirty += again && w != 0;
      }
      for (int i = 0; i < N; i++) free(b[i]);
    }
    printf("child: %d blocks handed out again, %d of them with a first word not cleared\n", reused, dirty);
    return 0;
  }
  if (!strcmp(c, "zero-on-free")) { /* run with SHARDMALLOC_ZERO_ON_FREE=1 (or not, as a control) */
    static const size_t sizes[] = {200, 40 * KiB, 300 * KiB};
    int nonzero = 0;
    for (int k = 0; k < 3; k++) {
      size_t n = sizes[k];
      unsigned char *p = malloc(n);
      memset(p, 0xAB, n);
      unsigned char *aside = opaque_ptr(p); /* test-only: read the block after its free */
      free(p);
      size_t first = (size_t)-1;
      for (size_t i = 8; i < n; i++)
        if (aside[i] != 0) { first = i; break; }
      printf("child: %zu-byte block after free: first nonzero byte past the link word: %zd\n", n, (ssize_t)first);
      if (first != (size_t)-1) nonzero++;
    }
    printf("child: %d of 3 blocks not zeroed\n", nonzero);
    return 0;
  }
  if (!strcmp(c, "sized-free") || !strcmp(c, "sized-delete")) {
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))sym(!strcmp(c, "sized-free") ? "free_sized" : "_ZdlPvm");
    size_t n = 100;
    char *p = malloc(n);
    fill_pattern(p, n, 7);
    fs(p, n + 1); /* wrong size: reported, ignored */
    fprintf(stderr, "child: survived the wrong-size free\n");
    /* the block was not freed: it still holds its data and is not handed out again */
    for (int i = 0; i < 300; i++) {
      void *q = malloc(n);
      if (q == p) { fprintf(stderr, "child: the block was handed out again after the ignored free\n"); return 5; }
      free(q);
    }
    if (verify_pattern(p, n, 7) != (size_t)-1) { fprintf(stderr, "child: block contents changed\n"); return 6; }
    fs(p, n); /* the right size: fine */
    fprintf(stderr, "child: right-size free done\n");
    return 0;
  }
  if (!strcmp(c, "error-handler")) { /* SHARDMALLOC_ABORT_ON_ERROR=0 */
    void (*reg)(void (*)(int, void *), void *) = (void (*)(void (*)(int, void *), void *))sym("sm_register_error");
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))sym("free_sized");
    reg(handler, NULL);
    char *p = malloc(64);
    free(p);
    free(opaque_ptr(p)); /* double free: EINVAL */
    char *q = malloc(64);
    fs(q, 65); /* wrong size: EINVAL */
    size_t (*usable)(const void *) = (size_t (*)(const void *))sym("sm_usable_size");
    char *o = malloc(24);
    size_t u = usable(o);
    memset(opaque_ptr(o), 0x41, u);
    /* one byte past the usable size: EFAULT. It must change the byte: a fixed value equals the
     * canary's byte there in one run of 256, and a write that changes nothing cannot be seen. */
    volatile char *v = opaque_ptr(o);
    v[u] = (char)(v[u] ^ 0x5A);
    free(o);
    free(q);
    printf("child: handler calls: %d:", ncodes);
    for (int i = 0; i < ncodes; i++) printf(" %d", codes[i]);
    printf("\n");
    return 0;
  }
  if (!strcmp(c, "order")) { /* 32 consecutive malloc(32) in a fresh thread: address differences */
    pthread_t t;
    pthread_create(&t, NULL, order_run, NULL);
    pthread_join(t, NULL);
    return 0;
  }
  if (!strcmp(c, "reuse") || !strcmp(c, "pingpong")) { /* in a fresh thread: a fresh heap */
    pthread_t t;
    pthread_create(&t, NULL, !strcmp(c, "reuse") ? reuse_run : pingpong_run, NULL);
    pthread_join(t, NULL);
    return 0;
  }
  fprintf(stderr, "child: unknown case %s\n", c);
  return 99;
}

static void expect_segv(const char *c, const char *opt) {
  child_result_t r;
  char pre[4096];
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", secure_lib);
  char *env[] = {pre, (char *)opt, NULL};
  char *args[] = {(char *)c, NULL};
  run_child(&r, env, args, 30);
  printf("      %s: %s\n", c, child_how(&r));
  CHECK(child_signaled(&r, SIGSEGV), "%s: expected death by SIGSEGV, seen %s; output:%s", c, child_how(&r), child_output(&r));
  CHECK(child_says(&r, "PROT_NONE in /proc/self/maps: yes"), "%s: expected the address to be in a PROT_NONE mapping; output:%s", c,
        child_output(&r));
}

static void run_secure(child_result_t *r, const char *c, const char *opt1, const char *opt2) {
  char pre[4096];
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", secure_lib);
  char *env[] = {pre, (char *)opt1, (char *)opt2, NULL};
  char *args[] = {(char *)c, NULL};
  run_child(r, env, args, 60);
}

static int order_diffs(const char *lib, const char *opt, long diffs[31], child_result_t *r) {
  char pre[4096];
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", lib);
  char *env[] = {pre, (char *)opt, NULL};
  char *args[] = {"order", NULL};
  run_child(r, env, args, 30);
  const char *s = strstr(r->out, "diffs:");
  if (!s) return 0;
  s += 6;
  int n = 0;
  while (n < 31) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    diffs[n++] = v;
    s = end;
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[0], "child")) return child(argv[1]);
  sm_test_name = "test-secure-features";
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBSHARDMALLOC-SECURE.so LIBSHARDMALLOC.so\n", argv[0]);
    return 2;
  }
  secure_lib = argv[1];
  release_lib = argv[2];
  child_result_t r;

  SECTION("guard page after a segment header: write dies with SIGSEGV") expect_segv("guard-header", NULL);
  SECTION("guard page at the end of a small segment: SIGSEGV") expect_segv("guard-segment-end", NULL);
  SECTION("guard page at the end of a 3 MiB huge block's mapping: SIGSEGV") {
    expect_segv("guard-huge", NULL);
  }
  SECTION("a cached 16 MiB mapping split for a 3 MiB and a 7 MiB block: both parts keep their guards") {
    expect_segv("guard-huge-split-end", "SHARDMALLOC_PURGE_DELAY=60000");
    expect_segv("guard-huge-split-tail", "SHARDMALLOC_PURGE_DELAY=60000");
  }

  SECTION("a huge block grown by realloc keeps its contents and its end guard: SIGSEGV") {
    expect_segv("guard-huge-realloc", NULL);
    expect_segv("guard-huge-realloc-filled", "SHARDMALLOC_PURGE_DELAY=60000");
  }
  SECTION("realloc of a freed huge block (5 MiB, cached; 100 MiB, unmapped) to a larger size: reported, NULL (ABORT_ON_ERROR=0)") {
    for (int k = 0; k < 2; k++) {
      run_secure(&r, k ? "realloc-freed-huge-unmapped" : "realloc-freed-huge", "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
      CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
      CHECK(child_says(&r, "shardmalloc: error:"), "expected a report on stderr; output:%s", child_output(&r));
      CHECK(child_says(&r, "returned NULL"), "expected realloc to return NULL; output:%s", child_output(&r));
    }
  }

  SECTION("SHARDMALLOC_QUARANTINE=8: freed block not reused by the next 8 mallocs") {
    run_secure(&r, "quarantine", "SHARDMALLOC_QUARANTINE=8", NULL);
    int again = -2;
    const char *s = strstr(r.out, "malloc number ");
    if (s) again = atoi(s + 14);
    printf("      quarantine=8: %s", strstr(r.out, "child:") ? strstr(r.out, "child:") : "(no output)\n");
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(again == -1 || again > 8, "expected the freed block not among the next 8 mallocs of its size, seen it at malloc %d", again);
    run_secure(&r, "quarantine", NULL, NULL);
    s = strstr(r.out, "malloc number ");
    printf("      (control, no quarantine: handed out again at malloc %d of 2000)\n", s ? atoi(s + 14) : -2);
  }

  SECTION("SHARDMALLOC_QUARANTINE=8: blocks freed while a heap of sm_heap_new is the default are freed after it is gone") {
    run_secure(&r, "quarantine-user-default", "SHARDMALLOC_QUARANTINE=8", NULL);
    size_t in_use = SIZE_MAX;
    const char *s = strstr(r.out, "child: ");
    if (s) in_use = strtoull(s + 7, NULL, 10);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(in_use < 1000000, "expected under 1 MB in use (all 1600 blocks of 100 kB freed), seen %zu; output:%s", in_use, child_output(&r));
  }

  SECTION("SHARDMALLOC_QUARANTINE=8: freed huge blocks wait in the quarantine without their memory") {
    run_secure(&r, "quarantine-huge", "SHARDMALLOC_QUARANTINE=8", NULL);
    const char *s = strstr(r.out, "resident ");
    long mib = s ? atol(s + 9) : -1;
    printf("      %s", strstr(r.out, "child:") ? strstr(r.out, "child:") : "(no output)\n");
    CHECK(child_exited(&r, 0) && mib >= 0, "expected exit 0 and a resident size, seen %s; output:%s", child_how(&r), child_output(&r));
    /* kept resident (until 2026-11-27) it was 260 MiB */
    CHECK(mib < 32, "expected the quarantined blocks' memory given back (resident < 32 MiB), seen %ld MiB", mib);
  }

  SECTION("SHARDMALLOC_QUARANTINE=50: a quarantined block of a destroyed heap is not freed into its memory's new heap, nor visited") {
    for (int zero_on_free = 0; zero_on_free < 2; zero_on_free++) { /* zero_on_free clears the freed mark */
      run_secure(&r, "quarantine-destroy", "SHARDMALLOC_QUARANTINE=50", zero_on_free ? "SHARDMALLOC_ZERO_ON_FREE=1" : NULL);
      CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
      CHECK(child_says(&r, "handed out twice 0, damaged bytes 0, visits counting a quarantined block 0"),
            "zero_on_free=%d: expected no block handed out twice, none damaged, none visited; output:%s", zero_on_free,
            child_output(&r));
    }
  }

  SECTION("SHARDMALLOC_QUARANTINE=50: fork while threads destroy heaps and free; no child waits for them") {
    run_secure(&r, "fork-quarantine", "SHARDMALLOC_QUARANTINE=50", NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "child: 0 of 100 fork children hung or failed"), "expected no fork child to hang; output:%s",
          child_output(&r));
  }

  SECTION("every block handed out has its first word cleared (no free-list link or old data there)") {
    run_secure(&r, "first-word", NULL, NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    int reused = -1, dirty = -1;
    const char *line = strstr(child_output(&r), "child: ");
    if (line) sscanf(line, "child: %d blocks handed out again, %d", &reused, &dirty);
    CHECK(reused > 1000 && dirty == 0, "expected over 1000 blocks reused, none with its first word set; output:%s",
          child_output(&r));
  }

  SECTION("SHARDMALLOC_ZERO_ON_FREE=1: a freed block reads 0 past its first word") {
    run_secure(&r, "zero-on-free", "SHARDMALLOC_ZERO_ON_FREE=1", NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "0 of 3 blocks not zeroed"), "expected all 3 blocks (200 B, 40 KiB, 300 KiB) zeroed; output:%s",
          child_output(&r));
    run_secure(&r, "zero-on-free", NULL, NULL); /* control: without the option the bytes stay */
    CHECK(child_says(&r, "3 of 3 blocks not zeroed"), "control without the option: expected the bytes to stay; output:%s",
          child_output(&r));
  }

  static const char *sized[] = {"sized-free", "sized-delete"};
  for (int k = 0; k < 2; k++) {
    char title[96];
    snprintf(title, sizeof title, "%s(p, n+1): reported and ignored with ABORT_ON_ERROR=0", k ? "operator delete" : "free_sized");
    SECTION(title) {
      run_secure(&r, sized[k], "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
      CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
      CHECK(child_says(&r, "shardmalloc: error: sized free of"), "expected a \"sized free\" report on stderr; output:%s",
            child_output(&r));
    }
    snprintf(title, sizeof title, "%s(p, n+1): SIGABRT by default in the secure build", k ? "operator delete" : "free_sized");
    SECTION(title) {
      run_secure(&r, sized[k], NULL, NULL);
      CHECK(child_signaled(&r, SIGABRT), "expected SIGABRT, seen %s; output:%s", child_how(&r), child_output(&r));
      CHECK(child_says(&r, "shardmalloc: error: sized free of"), "expected the report before the abort; output:%s", child_output(&r));
    }
  }

  SECTION("sm_register_error handler gets EINVAL, EINVAL, EFAULT (abort_on_error off)") {
    run_secure(&r, "error-handler", "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
    char want[64];
    snprintf(want, sizeof want, "handler calls: 3: %d %d %d\n", EINVAL, EINVAL, EFAULT);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, want), "expected \"%s\" (double free, wrong sized free, overflow); output:%s", want, child_output(&r));
  }

  SECTION("a freed block whose link was overwritten: reported, never handed out again (ABORT_ON_ERROR=0)") {
    run_secure(&r, "bad-link", "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "corrupted at block"), "expected the free-list report; output:%s", child_output(&r));
    CHECK(child_says(&r, "came back at malloc -1"), "expected the block never handed out in 2000 mallocs; output:%s",
          child_output(&r));
    run_secure(&r, "bad-link", NULL, NULL);
    CHECK(child_signaled(&r, SIGABRT), "expected SIGABRT by default, seen %s; output:%s", child_how(&r), child_output(&r));
  }

  SECTION("a double free after the freed block's first word was overwritten: reported as a double free, ignored; after its link was: reported") {
    run_secure(&r, "double-free-bad-link", "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "double free of"), "expected the double free reported; output:%s", child_output(&r));
    CHECK(!child_says(&r, "handed out 2 times"), "expected the block never handed out twice; output:%s", child_output(&r));
    CHECK(child_says(&r, "overwritten link was handed out 0 times") || child_says(&r, "overwritten link was handed out 1 times"),
          "expected the block with the overwritten link never handed out twice; output:%s", child_output(&r));
    CHECK(child_says(&r, "byte 104 was overwritten") || child_says(&r, "corrupted at block"),
          "expected the overwritten link reported; output:%s", child_output(&r));
  }

  SECTION("a dangling pointer into a destroyed heap's page, carved again by a new heap: reported as a double free") {
    run_secure(&r, "destroyed-heap-dangling", "SHARDMALLOC_ABORT_ON_ERROR=0", NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "double free of"), "expected the free reported as a double free; output:%s", child_output(&r));
    CHECK(child_says(&r, "handed out 1 times"), "expected the block handed out once; output:%s", child_output(&r));
  }

  SECTION("memory given back to the OS stays readable (zeros) until the next unmap: a late check reads no unmapped page") {
    run_secure(&r, "unmap-grace", NULL, NULL);
    CHECK(child_exited(&r, 0), "expected exit 0, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "after the first free: r--p, reads 0"), "expected a read-only mapping of zeros; output:%s", child_output(&r));
    CHECK(child_says(&r, "after the second free: unmapped"), "expected the first range unmapped at the second free; output:%s",
          child_output(&r));
  }

  SECTION("free-list order: random in the secure build, ascending in the release build") {
    long a[31], b[31];
    child_result_t r2;
    int na = order_diffs(secure_lib, NULL, a, &r), nb = order_diffs(secure_lib, NULL, b, &r2);
    CHECK(na == 31 && nb == 31, "expected 31 differences from each secure child, seen %d and %d; outputs:%s%s", na, nb,
          child_output(&r), child_output(&r2));
    bool same = na == nb && memcmp(a, b, sizeof(long) * (size_t)na) == 0;
    bool ascending = true; /* both runs plain ascending (one may be, by chance: stride 1, start 0) */
    for (int i = 0; i < na; i++) ascending &= a[i] > 0;
    bool ascending_b = true;
    for (int i = 0; i < nb; i++) ascending_b &= b[i] > 0;
    ascending &= ascending_b;
    printf("      secure run 1: %s", strstr(r.out, "diffs:") ? strstr(r.out, "diffs:") : "-\n");
    printf("      secure run 2: %s", strstr(r2.out, "diffs:") ? strstr(r2.out, "diffs:") : "-\n");
    CHECK(!same, "expected two secure processes to differ in the order of 32 consecutive malloc(32), seen the same sequence");
    CHECK(!ascending, "expected the secure order not to be plain ascending (in at least one of two runs)");
    /* not a fixed stride either (two observed addresses would give every later one away): a
     * fixed stride through a window shows at most two distinct differences */
    int distinct = 0;
    for (int i = 0; i < na; i++) {
      bool seen = false;
      for (int j = 0; j < i; j++) seen |= a[j] == a[i];
      distinct += !seen;
    }
    CHECK(distinct >= 4, "expected the differences between consecutive secure addresses to vary (at least 4 distinct), seen %d", distinct);
    long c[31];
    int nc = order_diffs(release_lib, NULL, c, &r);
    printf("      release:      %s", strstr(r.out, "diffs:") ? strstr(r.out, "diffs:") : "-\n");
    CHECK(nc == 31, "expected 31 differences from the release child, seen %d; output:%s", nc, child_output(&r));
    int bad = -1;
    for (int i = 0; i < nc; i++)
      if (c[i] <= 0) { bad = i; break; }
    CHECK(bad < 0, "release build: expected ascending addresses on a fresh page, seen difference %ld at step %d", bad < 0 ? 0 : c[bad], bad + 1);
  }

  SECTION("reuse: freed blocks come back starting from a random one of the last 8 freed, and do not make the page grow") {
    int firsts[8], n_not_last = 0;
    for (int k = 0; k < 8; k++) {
      run_secure(&r, "reuse", NULL, NULL);
      const char *s = strstr(r.out, "first-reused:");
      firsts[k] = s ? atoi(s + 13) : -1;
      n_not_last += firsts[k] > 0;
      CHECK(firsts[k] >= 0 && firsts[k] < 8, "run %d: expected the first reused block to be one of the last 8 freed, seen %d; output:%s",
            k + 1, firsts[k], child_output(&r));
    }
    printf("      first reused block, counted back from the last freed, in 8 runs: %d %d %d %d %d %d %d %d\n", firsts[0],
           firsts[1], firsts[2], firsts[3], firsts[4], firsts[5], firsts[6], firsts[7]);
    CHECK(n_not_last > 0, "expected the first reused block not to be the last one freed in at least one of 8 runs");
    run_secure(&r, "pingpong", NULL, NULL);
    const char *s = strstr(r.out, "distinct:");
    int distinct = s ? atoi(s + 9) : -1;
    printf("      100,000 malloc(40)/free pairs used %d addresses (one extension carves 4 KiB: 85 blocks of 48 bytes)\n", distinct);
    CHECK(distinct > 0 && distinct <= 2 * 85, "expected a malloc/free loop to stay within two extensions of its page (170 blocks), seen %d; output:%s",
          distinct, child_output(&r));
  }
  SECTION("shuffle=0: the secure build hands out new blocks in address order and reuses the last freed first") {
    long d[31];
    int n = order_diffs(secure_lib, "SHARDMALLOC_SHUFFLE=0", d, &r);
    printf("      secure, shuffle=0: %s", strstr(r.out, "diffs:") ? strstr(r.out, "diffs:") : "-\n");
    CHECK(n == 31, "expected 31 differences, seen %d; output:%s", n, child_output(&r));
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (d[i] != 48) { bad = i; break; } /* malloc(32) and the padding: 48-byte blocks, one after the other */
    CHECK(bad < 0, "expected each address 48 bytes after the previous one, seen difference %ld at step %d", bad < 0 ? 0 : d[bad], bad + 1);
    for (int k = 0; k < 3; k++) {
      run_secure(&r, "reuse", "SHARDMALLOC_SHUFFLE=0", NULL);
      const char *s = strstr(r.out, "first-reused:");
      int first = s ? atoi(s + 13) : -1;
      CHECK(first == 0, "run %d: expected the last freed block to come back first, seen %d; output:%s", k + 1, first, child_output(&r));
    }
  }
  (void)sink;
  return sm_test_summary();
}
