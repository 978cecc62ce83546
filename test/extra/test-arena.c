/* test-arena: arenas, huge OS pages and NUMA (src/arena.c, src/os_linux.c; docs/api/os-memory.md).
 * One case per process (options are read at start-up; ctest sets them per case). Linked against
 * the static library, so it can ask the allocator's internal queries (smi_arena_contains, ...).
 *   reserve       RESERVE_OS_MEMORY=64M: segments, large and huge blocks come from the arena; freed
 *                 memory goes back to it (RSS and committed drop after sm_collect, the units are
 *                 handed out again); nothing is mapped from the OS meanwhile
 *   exhaust       RESERVE_OS_MEMORY=16M: beyond the arena, memory comes from the OS
 *   disallow      RESERVE_OS_MEMORY=16M DISALLOW_OS_ALLOC=1: beyond it, NULL/ENOMEM; after frees
 *                 allocation works again
 *   threads       RESERVE_OS_MEMORY=512M DISALLOW_OS_ALLOC=1: 4 threads claim and free runs of units
 *                 at once; no unit is ever handed out twice
 *   limit         RESERVE_OS_MEMORY=256M MEMORY_LIMIT=32M: the limit counts what is handed out,
 *                 not the reservation
 *   grow          ARENA_RESERVE=32M: arenas are added 32 MiB at a time; a 24 MiB block is mapped
 *                 on its own
 *   api           no options: no arena for a small program; sm_manage_os_memory (dirty memory is
 *                 handed out zeroed where it must be), sm_reserve_os_memory (commit faults it in);
 *                 memory handed over as large OS pages is pinned (never purged)
 *   ids           arena ids: bad ids refused; an exclusive arena that only heaps made in it use
 *                 (every kind of block, another thread's too; NULL/ENOMEM once full, all of it
 *                 back after sm_heap_destroy; after sm_heap_delete the default heap carves no new
 *                 page there); a shared arena; memory handed over as an exclusive arena
 *   huge1g        sm_reserve_huge_os_pages_at: one 1 GiB page (skipped unless the kernel has one
 *                 free: hugepages.sh makes one where it may), never purged, reused zeroed by calloc
 *   huge1g-option RESERVE_HUGE_OS_PAGES=1: the same page reserved at start-up
 *   huge1g-timeout  two pages asked with a 1 ms bound: one obtained, ETIMEDOUT; 0 = no bound
 *   hugetlb2m     ALLOW_LARGE_OS_PAGES=1 with free 2 MiB hugetlb pages: segments on them, then
 *                 ordinary memory once the pool is empty
 *   thp           ALLOW_LARGE_OS_PAGES=1, no hugetlb pool: transparent huge pages in smaps
 *   numa          node detection and list parsing (also on made-up machines), the cheap getcpu
 *                 against the system call on every CPU, node preference of arenas
 *   numa-use1     USE_NUMA_NODES=1: one node in use whatever was detected
 *   verbose       VERBOSE=1 says what was reserved and how the node is found */
#include "extra-util.h"
#include "shardmalloc.h"
#include "os.h" /* the OS layer's test hooks (src/os.h) */

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* internal queries of the library (src/arena.c) */
bool smi_arena_contains(const void *p);
size_t smi_arenas_count(void);

#define GiB ((size_t)1 << 30)

static size_t commit_now(void) {
  size_t c = 0;
  sm_process_info(NULL, NULL, NULL, NULL, NULL, &c, NULL, NULL);
  return c;
}

static long read_long(const char *path) {
  char buf[64];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  return strtol(buf, NULL, 10);
}
/* free pages of the pool not promised to any mapping yet */
static long hugetlb_free(size_t kb) {
  char path[128];
  snprintf(path, sizeof path, "/sys/kernel/mm/hugepages/hugepages-%zukB/free_hugepages", kb);
  long f = read_long(path);
  snprintf(path, sizeof path, "/sys/kernel/mm/hugepages/hugepages-%zukB/resv_hugepages", kb);
  long r = read_long(path);
  return f < 0 ? f : r > 0 ? f - r : f;
}

/* the smaps figures (kB) of the mapping that holds p */
typedef struct vma_info_s {
  bool found;
  unsigned long start, end;
  long kernel_page_kb, anon_huge_kb, hugetlb_kb, rss_kb;
} vma_info_t;
static vma_info_t vma_of(const void *p) {
  vma_info_t v = {0};
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return v;
  char line[512];
  bool in = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    long kb;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (in) break;
      in = (uintptr_t)p >= a && (uintptr_t)p < b;
      if (in) v.found = true, v.start = a, v.end = b;
    } else if (in) {
      if (sscanf(line, "KernelPageSize: %ld kB", &kb) == 1) v.kernel_page_kb = kb;
      else if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) v.anon_huge_kb = kb;
      else if (sscanf(line, "Private_Hugetlb: %ld kB", &kb) == 1) v.hugetlb_kb += kb;
      else if (sscanf(line, "Shared_Hugetlb: %ld kB", &kb) == 1) v.hugetlb_kb += kb;
      else if (sscanf(line, "Rss: %ld kB", &kb) == 1) v.rss_kb = kb;
    }
  }
  fclose(f);
  return v;
}

static bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

/* fill n blocks of `size` (touching every page) and count those in an arena */
static size_t alloc_many(void **ptrs, size_t n, size_t size, size_t *in_arena) {
  size_t got = 0;
  *in_arena = 0;
  for (size_t i = 0; i < n; i++) {
    ptrs[i] = sm_malloc(size);
    if (ptrs[i] == NULL) break;
    memset(ptrs[i], 0x5A, size);
    got++;
    if (smi_arena_contains(ptrs[i])) (*in_arena)++;
  }
  return got;
}
static void free_many(void **ptrs, size_t n) {
  for (size_t i = 0; i < n; i++) sm_free(ptrs[i]);
}

/* Blocks freed, then the purge delay passes in the segment cache: memory that cannot be purged
 * must not come back as if it read as zero. Huge callocs of one unit take the slow path (which
 * sweeps the cache once the delay is over) and reuse cached one-unit segments. Returns how many of
 * the calloc'ed blocks (4 of 3 MiB, then n of `size`) were not all zero. */
static size_t calloc_after_delay(void **ptrs, size_t n, size_t size) {
  for (size_t i = 0; i < n; i++) {
    ptrs[i] = sm_malloc(size);
    if (ptrs[i] != NULL) memset(ptrs[i], 0xEE, size);
  }
  free_many(ptrs, n);
  sleep_ms(150); /* past the purge delay (10 ms, at most 8x that when adaptive) */
  size_t bad = 0;
  void *h[4];
  for (int i = 0; i < 4; i++) {
    h[i] = sm_calloc(1, 3 * MiB);
    if (h[i] == NULL || first_nonzero(h[i], 3 * MiB) != (size_t)-1) bad++;
  }
  for (size_t i = 0; i < n; i++) {
    ptrs[i] = sm_calloc(1, size);
    if (ptrs[i] == NULL || first_nonzero(ptrs[i], size) != (size_t)-1) bad++;
  }
  free_many(h, 4);
  free_many(ptrs, n);
  return bad;
}

/* ---------------------------------------------------------------- reserve */
static void case_reserve(void) {
  static void *small[4000], *medium[100], *large[4];
  size_t in;
  SECTION("RESERVE_OS_MEMORY=64M: one arena, and every kind of segment comes from it") {
    CHECK_EQ(smi_arenas_count(), 1);
    size_t a = alloc_many(small, 4000, 1000, &in);
    CHECK(a == 4000 && in == a, "4000 small blocks: %zu allocated, %zu in the arena", a, in);
    a = alloc_many(medium, 100, 40 * KiB, &in);
    CHECK(a == 100 && in == a, "100 medium blocks: %zu allocated, %zu in the arena", a, in);
    a = alloc_many(large, 4, MiB, &in);
    CHECK(a == 4 && in == a, "4 large blocks: %zu allocated, %zu in the arena", a, in);
    void *huge = sm_malloc(8 * MiB);
    CHECK(huge != NULL && smi_arena_contains(huge) && sm_check_owned(huge), "an 8 MiB block %p in the arena", huge);
    CHECK(sm_check_owned(small[0]) && sm_check_owned(medium[99]) && sm_check_owned(large[3]), "blocks are owned");
    CHECK(!smi_arena_contains(&a) && !smi_arena_contains((void *)small), "the stack and .bss are not in an arena");
    sm_free(huge);
    free_many(small, 4000);
    free_many(medium, 100);
    free_many(large, 4);
  }
  SECTION("freed memory goes back to the arena: RSS and committed drop, the units come back") {
    sm_collect(true);
    size_t rss0 = rss_now(), commit0 = commit_now();
    static void *blocks[40];
    size_t a = alloc_many(blocks, 40, MiB, &in); /* 14 large segments, every page touched */
    size_t rss1 = rss_now(), commit1 = commit_now();
    CHECK(a == 40 && in == 40, "40 blocks of 1 MiB: %zu allocated, %zu in the arena", a, in);
    CHECK(rss1 >= rss0 + 40 * MiB, "RSS grew by at least 40 MiB: %zu -> %zu MiB", rss0 / MiB, rss1 / MiB);
    CHECK(commit1 >= commit0 + 40 * MiB, "committed grew by at least 40 MiB: %zu -> %zu MiB", commit0 / MiB, commit1 / MiB);
    free_many(blocks, a);
    sm_collect(true);
    size_t rss2 = rss_now(), commit2 = commit_now();
    printf("      RSS %zu -> %zu -> %zu MiB, committed %zu -> %zu -> %zu MiB\n", rss0 / MiB, rss1 / MiB, rss2 / MiB,
           commit0 / MiB, commit1 / MiB, commit2 / MiB);
    CHECK(rss2 <= rss0 + 4 * MiB, "RSS back within 4 MiB of %zu MiB, seen %zu MiB", rss0 / MiB, rss2 / MiB);
    CHECK(commit2 <= commit0 + 4 * MiB, "committed back within 4 MiB of %zu MiB, seen %zu MiB", commit0 / MiB, commit2 / MiB);
    /* 48 MiB in one piece needs 13 contiguous units: only there if the freed units came back */
    void *big = sm_malloc(48 * MiB);
    CHECK(big != NULL && smi_arena_contains(big), "a 48 MiB block (13 units) fits the arena again: %p", big);
    if (big != NULL) memset(big, 0xC3, 48 * MiB); /* dirty them: the calloc below must not see it */
    sm_free(big);
    sm_collect(true); /* out of the segment cache, back into the arena */
    void *z = sm_calloc(1, 20 * MiB);
    CHECK(z != NULL && smi_arena_contains(z), "calloc(20 MiB) from the arena");
    if (z != NULL) CHECK_ZERO(z, 20 * MiB);
    sm_free(z);
  }
}

/* ---------------------------------------------------------------- exhaust / disallow */
static void case_exhaust(void) {
  static void *blocks[48];
  SECTION("RESERVE_OS_MEMORY=16M: 48 MiB of blocks: the first in the arena, the rest from the OS") {
    size_t in, a = alloc_many(blocks, 48, MiB, &in);
    CHECK_EQ(a, 48);
    CHECK(in >= 6 && in <= 16, "between 6 and 16 of the 1 MiB blocks in the 16 MiB arena, seen %zu", in);
    CHECK(smi_arena_contains(blocks[0]) && !smi_arena_contains(blocks[47]), "first in, last out: %d %d",
          smi_arena_contains(blocks[0]), smi_arena_contains(blocks[47]));
    size_t owned = 0;
    for (size_t i = 0; i < a; i++) owned += sm_check_owned(blocks[i]);
    CHECK_EQ(owned, a);
    free_many(blocks, a);
  }
}

static void case_disallow(void) {
  static void *blocks[1024];
  SECTION("DISALLOW_OS_ALLOC=1: allocation beyond the 16 MiB arena fails with ENOMEM") {
    size_t in, a = alloc_many(blocks, 1024, 256 * KiB, &in);
    int err = errno;
    printf("      %zu blocks of 256 KiB (%zu MiB) before NULL\n", a, a / 4);
    CHECK(a < 1024 && err == ENOMEM, "expected NULL with ENOMEM before 256 MiB, seen %zu blocks, errno %d", a, err);
    CHECK(a >= 15 && a <= 16 * 4, "between 4 and 16 MiB handed out, seen %zu KiB", a * 256);
    CHECK_EQ(in, a);
    errno = 0;
    void *huge = sm_malloc(32 * MiB);
    CHECK(huge == NULL && errno == ENOMEM, "a 32 MiB block: NULL with ENOMEM, seen %p errno %d", huge, errno);
    free_many(blocks, a);
    /* no sm_collect: the freed segments wait in the cache; the allocator must find them */
    void *again = sm_malloc(7 * MiB); /* 2 units */
    CHECK(again != NULL && smi_arena_contains(again), "after the frees a 7 MiB block fits: %p (errno %d)", again, errno);
    if (again != NULL) memset(again, 1, 7 * MiB);
    sm_free(again);
    size_t b = alloc_many(blocks, 1024, 256 * KiB, &in);
    CHECK(b + 4 >= a && b <= a + 4, "as many blocks as the first time (%zu), seen %zu", a, b);
    free_many(blocks, b);
  }
}

/* ---------------------------------------------------------------- threads */
enum { T_THREADS = 4, T_ROUNDS = 3000, T_HELD = 6 };
static _Atomic(size_t) t_bad, t_null, t_outside;
static void *thread_claims(void *arg) {
  uint64_t tag = (uint64_t)(uintptr_t)arg << 32, x = 88172645463325252ull ^ (uint64_t)(uintptr_t)arg;
  void *held[T_HELD] = {0};
  size_t sizes[T_HELD] = {0};
  for (int r = 0; r < T_ROUNDS; r++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int k = (int)(x % T_HELD);
    if (held[k] != NULL) { /* every 4 KiB of it still carries our tag: nobody else got the units */
      for (size_t off = 0; off < sizes[k]; off += 4096)
        if (*(uint64_t *)((char *)held[k] + off) != (tag | (uint64_t)k)) { t_bad++; break; }
      sm_free(held[k]);
    }
    sizes[k] = (x >> 8) % 2 ? (size_t)(2 + (x >> 16) % 12) * MiB : (16 + (x >> 16) % 100) * KiB;
    held[k] = sm_malloc(sizes[k]);
    if (held[k] == NULL) { t_null++; continue; }
    if (!smi_arena_contains(held[k])) t_outside++;
    for (size_t off = 0; off < sizes[k]; off += 4096) *(uint64_t *)((char *)held[k] + off) = tag | (uint64_t)k;
  }
  for (int k = 0; k < T_HELD; k++) sm_free(held[k]);
  return NULL;
}

static void case_threads(void) {
  SECTION("4 threads claim and free runs of units concurrently: no unit is handed out twice") {
    pthread_t t[T_THREADS];
    for (int i = 0; i < T_THREADS; i++) pthread_create(&t[i], NULL, thread_claims, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < T_THREADS; i++) pthread_join(t[i], NULL);
    printf("      %d threads x %d rounds: %zu blocks overwritten, %zu NULL, %zu outside the arena\n", T_THREADS, T_ROUNDS,
           (size_t)t_bad, (size_t)t_null, (size_t)t_outside);
    CHECK_EQ(t_bad, 0);
    CHECK_EQ(t_outside, 0);
    CHECK(t_null < T_THREADS * T_ROUNDS / 20, "few NULLs (the arena is big enough for what is held), seen %zu", (size_t)t_null);
    sm_collect(true);
    void *big = sm_malloc(400 * MiB); /* everything went back: 101 contiguous units are free again */
    CHECK(big != NULL && smi_arena_contains(big), "after the threads, a 400 MiB block fits the arena: %p", big);
    if (big == NULL) sm_stats_print(); /* what still holds the arena */
    sm_free(big);
  }
}

/* ---------------------------------------------------------------- limit */
static void case_limit(void) {
  static void *blocks[256];
  SECTION("MEMORY_LIMIT=32M with a 256 MiB arena: the limit counts what is handed out") {
    size_t in, a = alloc_many(blocks, 256, MiB, &in);
    printf("      %zu blocks of 1 MiB before NULL\n", a);
    CHECK(a >= 16, "at least 16 MiB can be allocated (the reservation is not counted), seen %zu MiB", a);
    CHECK(a < 40, "the 32 MiB limit holds inside the arena, seen %zu MiB", a);
    CHECK_EQ(in, a);
    free_many(blocks, a);
    void *again = sm_malloc(MiB);
    CHECK(again != NULL, "after the frees allocation works again");
    sm_free(again);
  }
}

/* a new heap in the arena gets a block of `size` (errno tells why not) */
static bool new_heap_gets(sm_arena_id_t id, size_t size) {
  sm_heap_t *h = sm_heap_new_in_arena(id);
  errno = 0;
  void *p = h != NULL ? sm_heap_malloc(h, size) : NULL;
  int err = errno;
  if (h != NULL) sm_heap_destroy(h);
  errno = err;
  return p != NULL;
}

/* MEMORY_LIMIT=64M, PURGE_DELAY=1000: a heap in an arena is not refused while freed huge blocks
 * fill the segment cache (until 2026-11-28 only the default heap's requests flushed it first) */
static void case_limit_cache(void) {
  SECTION("MEMORY_LIMIT=64M: a heap in an arena gets 40 MiB after 40 MiB of huge blocks were freed into the cache") {
    sm_arena_id_t id = 0;
    CHECK_EQ(sm_reserve_os_memory_ex(128 * MiB, false, false, true, &id), 0);
    for (int i = 0; i < 4; i++) {
      void *p = sm_malloc(10 * MiB);
      memset(p, 1, 10 * MiB);
      sm_free(p);
    }
    CHECK(new_heap_gets(id, 40 * MiB), "40 MiB from a heap in the arena (errno %d)", errno);
  }
}

/* BACKGROUND_PURGE=0: a heap in an exclusive arena deleted by a thread that then ends leaves its
 * blocks to that thread's heap, whose segments are abandoned; once another thread has freed
 * them all, the arena's next heap finds the room (until 2026-11-28: ENOMEM, 20 MiB held) */
static sm_arena_id_t ended_arena;
static void *ended_blocks[3000];
static void *make_and_delete(void *arg) {
  (void)arg;
  sm_heap_t *h = sm_heap_new_in_arena(ended_arena);
  for (int i = 0; i < 3000 && h != NULL; i++) ended_blocks[i] = sm_heap_malloc(h, 1000 + (size_t)i % 3000);
  if (h != NULL) sm_heap_delete(h);
  return NULL;
}
static void case_delete_ended(void) {
  SECTION("an exclusive arena's heap deleted by a thread that ended: its freed memory serves the arena's next heap") {
    CHECK_EQ(sm_reserve_os_memory_ex(64 * MiB, false, false, true, &ended_arena), 0);
    pthread_t t;
    pthread_create(&t, NULL, make_and_delete, NULL);
    pthread_join(t, NULL);
    for (int i = 0; i < 3000; i++) sm_free(ended_blocks[i]);
    CHECK(new_heap_gets(ended_arena, 60 * MiB), "60 MiB of the 64 MiB arena after every block was freed (errno %d)", errno);
  }
}

/* DISALLOW_OS_ALLOC=1 with a 256 MiB arena: a huge block of the arena grown by realloc is
 * copied within the arena, and no refusal is reported for it (until 2026-11-28 a false warning,
 * said once, then silenced the real one) */
static int warnings_seen;
static void count_warnings(const char *msg, void *arg) {
  (void)arg;
  if (strstr(msg, "warning") != NULL) warnings_seen++;
}
static void case_disallow_grow(void) {
  SECTION("DISALLOW_OS_ALLOC=1: an arena's huge block grows 5 -> 40 MiB inside the arena, with no warning") {
    sm_register_output(count_warnings, NULL);
    char *p = sm_malloc(5 * MiB);
    CHECK(p != NULL && smi_arena_contains(p), "5 MiB in the arena: %p", (void *)p);
    if (p == NULL) return;
    memset(p, 7, 5 * MiB);
    char *q = sm_realloc(p, 40 * MiB);
    CHECK(q != NULL && smi_arena_contains(q) && q[5 * MiB - 1] == 7, "40 MiB in the arena, contents kept: %p", (void *)q);
    sm_free(q != NULL ? q : p);
    CHECK(warnings_seen == 0, "no refusal reported for a grow that succeeds, seen %d warnings", warnings_seen);
    errno = 0;
    void *big = sm_malloc((size_t)1 << 30); /* more than the arena: the one real refusal, reported */
    CHECK(big == NULL && errno == ENOMEM && warnings_seen == 1, "1 GiB: NULL, ENOMEM, one warning; seen %p, %d, %d", big,
          errno, warnings_seen);
    sm_register_output(NULL, NULL);
  }
}

/* ---------------------------------------------------------------- grow */
static void case_grow(void) {
  static void *blocks[64];
  SECTION("ARENA_RESERVE=32M: arenas 32 MiB at a time, big blocks on their own") {
    void *p = sm_malloc(100);
    CHECK(p != NULL && smi_arena_contains(p), "the first segment comes from an arena");
    CHECK_EQ(smi_arenas_count(), 1);
    size_t in, a = alloc_many(blocks, 64, MiB, &in);
    CHECK(a == 64 && in == 64, "64 blocks of 1 MiB: %zu allocated, %zu in arenas", a, in);
    CHECK(smi_arenas_count() >= 3, "64 MiB need at least 3 arenas of 32 MiB, seen %zu", smi_arenas_count());
    void *big = sm_malloc(24 * MiB);
    CHECK(big != NULL && !smi_arena_contains(big), "a 24 MiB block (> half an arena) is mapped on its own");
    sm_free(big);
    free_many(blocks, a);
    sm_free(p);
  }
}

/* ---------------------------------------------------------------- api */
static void case_api(void) {
  SECTION("no options: a small program reserves no arena") {
    void *p = sm_malloc(100);
    CHECK(p != NULL && !smi_arena_contains(p), "a 100-byte block outside any arena");
    CHECK_EQ(smi_arenas_count(), 0);
    sm_free(p);
  }
  SECTION("sm_manage_os_memory: an unaligned dirty region, carved from its aligned part") {
    CHECK(!sm_manage_os_memory(NULL, 64 * MiB, true, false, true, -1), "NULL is refused");
    uint8_t *tiny = mmap(NULL, 6 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(!sm_manage_os_memory(tiny + 4096, 4 * MiB, true, false, true, -1), "less than one aligned unit is refused");
    size_t len = 40 * MiB;
    uint8_t *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED, "mmap");
    memset(region, 0xAB, len); /* dirty: the allocator must not take it for zeroed memory */
    uint8_t *start = region + 12345;
    CHECK(sm_manage_os_memory(start, len - 12345, true, false, false, -1), "40 MiB handed over");
    CHECK_EQ(smi_arenas_count(), 1);
    void *blocks[5];
    size_t inside = 0;
    for (int i = 0; i < 5; i++) {
      blocks[i] = sm_calloc(1, 1536 * KiB); /* large blocks: a new segment each */
      if (blocks[i] != NULL && (uint8_t *)blocks[i] >= start && (uint8_t *)blocks[i] < region + len) inside++;
      CHECK(blocks[i] != NULL, "calloc");
      if (blocks[i] != NULL) CHECK_ZERO(blocks[i], 1536 * KiB);
    }
    CHECK_EQ(inside, 5);
    void *h = sm_calloc(1, 9 * MiB);
    CHECK(h != NULL && (uint8_t *)h >= start && (uint8_t *)h < region + len, "a 9 MiB calloc from the region: %p", h);
    if (h != NULL) CHECK_ZERO(h, 9 * MiB);
    sm_free(h);
    for (int i = 0; i < 5; i++) sm_free(blocks[i]);
  }
  SECTION("sm_reserve_os_memory: commit faults the arena in; size 0 is EINVAL") {
    CHECK_EQ(sm_reserve_os_memory(0, false, false), EINVAL);
    size_t rss0 = rss_now(), commit0 = commit_now();
    CHECK_EQ(sm_reserve_os_memory(32 * MiB, true, false), 0);
    size_t rss1 = rss_now(), commit1 = commit_now();
    printf("      RSS %zu -> %zu MiB, committed %zu -> %zu MiB\n", rss0 / MiB, rss1 / MiB, commit0 / MiB, commit1 / MiB);
    CHECK(rss1 >= rss0 + 28 * MiB, "RSS grew by the committed 32 MiB: %zu -> %zu MiB", rss0 / MiB, rss1 / MiB);
    CHECK(commit1 >= commit0 + 32 * MiB, "committed grew by 32 MiB: %zu -> %zu MiB", commit0 / MiB, commit1 / MiB);
    CHECK_EQ(smi_arenas_count(), 2);
    size_t rss2 = rss_now();
    CHECK_EQ(sm_reserve_os_memory(64 * MiB, false, false), 0);
    CHECK(rss_now() < rss2 + 4 * MiB, "without commit, 64 MiB reserved cost no RSS: %zu -> %zu MiB", rss2 / MiB, rss_now() / MiB);
  }
  SECTION("sm_manage_os_memory of large OS pages: the region is pinned (never purged), its mark made at the first pin (last: it adds an arena)") {
    size_t len = 16 * MiB;
    uint8_t *region = mmap(NULL, len + 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED, "mmap");
    uint8_t *start = (uint8_t *)(((uintptr_t)region + 4 * MiB - 1) & ~(uintptr_t)(4 * MiB - 1));
    CHECK(!smi_os_is_pinned(start, len), "nothing is pinned before the first pin");
    CHECK(sm_manage_os_memory(start, len, true, true, true, -1), "16 MiB handed over as large OS pages");
    CHECK(smi_os_is_pinned(start, len) && smi_os_is_pinned(start + len - 1, 1), "the region is marked pinned");
    CHECK(!smi_os_is_pinned(start + len, 4 * MiB) && !smi_os_is_pinned(start - 1, 1), "and nothing else");
    CHECK(!smi_os_purge(start, 4 * MiB, true), "a purge of pinned memory is refused (it would not read as zero)");
  }
}

/* ---------------------------------------------------------------- arena ids */
static uint8_t *area_start;
static size_t area_size;
static bool in_area(const void *p) { return p != NULL && (const uint8_t *)p >= area_start && (const uint8_t *)p < area_start + area_size; }

/* blocks of every kind from heap h: small, medium, large, huge, aligned; how many lie in the area */
static size_t kinds_in_area(sm_heap_t *h, void **b, size_t *n) {
  static const size_t sizes[] = {24, 100, 1000, 3000, 40 * KiB, 200 * KiB, 1 * MiB, 3 * MiB, 5 * MiB};
  size_t inside = 0;
  *n = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int k = 0; k < (sizes[i] > MiB ? 1 : 3); k++) { /* 2 huge ones: 12 MiB of the arena in all */
      void *p = sm_heap_malloc(h, sizes[i]);
      if (p == NULL) continue;
      memset(p, 0x33, sizes[i]);
      inside += in_area(p);
      b[(*n)++] = p;
    }
  }
  void *a = sm_heap_malloc_aligned(h, 5000, 64 * KiB);
  if (a != NULL) memset(a, 0x33, 5000), inside += in_area(a), b[(*n)++] = a;
  return inside;
}

/* 1 MiB blocks from h until it says no; how many, and the errno of the refusal */
static size_t fill_heap(sm_heap_t *h, void **b, size_t max, int *err) {
  size_t n = 0;
  errno = 0;
  while (n < max && (b[n] = sm_heap_malloc(h, 1 * MiB)) != NULL) n++;
  *err = errno;
  return n;
}

typedef struct {
  sm_heap_t *heap;
  void *got;
} other_thread_t;
static void *alloc_from_other_thread(void *arg) {
  other_thread_t *t = arg;
  t->got = sm_heap_malloc(t->heap, 5000);
  return NULL;
}

static void case_ids(void) {
  static void *b[256], *m[4000];
  size_t n, inside;
  sm_arena_id_t id = 0;
  SECTION("bad ids: sm_heap_new_in_arena gives NULL with EINVAL, sm_arena_area NULL") {
    int bad[] = {0, -1, 1, 64, 65, 1 << 20};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      errno = 0;
      sm_heap_t *h = sm_heap_new_in_arena(bad[i]);
      CHECK(h == NULL && errno == EINVAL, "id %d: expected NULL/EINVAL, seen %p/%d", bad[i], (void *)h, errno);
      size_t size = 1;
      CHECK(sm_arena_area(bad[i], &size) == NULL && size == 0, "sm_arena_area(%d): expected NULL and size 0", bad[i]);
    }
    CHECK_EQ(sm_reserve_os_memory_ex(0, false, false, true, &id), EINVAL);
    /* more than all 64 arena entries of 16 GiB hold: never possible, so EINVAL (not ENOMEM) */
    CHECK_EQ(sm_reserve_os_memory_ex((size_t)1 << 50, false, false, true, &id), EINVAL);
    CHECK_EQ(sm_reserve_os_memory(SIZE_MAX - 8 * MiB, false, false), EINVAL);
  }
  SECTION("an exclusive 64 MiB arena: its id and area; the program's own blocks never land in it") {
    CHECK_EQ(sm_reserve_os_memory_ex(64 * MiB, false, false, true, &id), 0);
    area_start = sm_arena_area(id, &area_size);
    printf("      arena %d at %p, %zu MiB\n", id, (void *)area_start, area_size / MiB);
    CHECK(id > 0 && area_start != NULL && area_size == 64 * MiB && ((uintptr_t)area_start & (4 * MiB - 1)) == 0,
          "expected a 64 MiB arena at a 4 MiB boundary, seen id %d at %p, %zu bytes", id, (void *)area_start, area_size);
    size_t got = alloc_many(m, 4000, 1000, &inside), in = 0;
    for (size_t i = 0; i < got; i++) in += in_area(m[i]);
    void *big[8];
    for (int i = 0; i < 8; i++) in += in_area(big[i] = sm_malloc((size_t)(i + 1) * MiB));
    CHECK(got == 4000 && in == 0, "4000 small and 8 large or huge blocks of the default heap: %zu in the exclusive arena", in);
    free_many(m, got);
    free_many(big, 8);
  }
  sm_heap_t *h = sm_heap_new_in_arena(id);
  SECTION("a heap in the arena: small, medium, large, huge and aligned blocks all come from it") {
    CHECK(h != NULL, "sm_heap_new_in_arena(%d)", id);
    if (h == NULL) return;
    inside = kinds_in_area(h, b, &n);
    CHECK(n == 24 && inside == n, "%zu blocks, %zu of them in the arena", n, inside);
    other_thread_t t = {h, NULL};
    pthread_t th;
    pthread_create(&th, NULL, alloc_from_other_thread, &t);
    pthread_join(th, NULL);
    CHECK(in_area(t.got), "a block another thread took from the heap: %p, in the arena", t.got);
    sm_free(t.got);
    free_many(b, n);
  }
  SECTION("the arena full: the heap gets NULL with ENOMEM; the default heap goes on") {
    int err;
    /* three to a 4 MiB segment (its header takes part of a slot); the heap keeps an empty segment
     * of each kind it used, and its part for other threads one more */
    n = fill_heap(h, b, 256, &err);
    printf("      %zu blocks of 1 MiB before NULL\n", n);
    CHECK(n >= 36 && n <= 48 && err == ENOMEM, "expected 36-48 blocks, then ENOMEM; seen %zu, errno %d", n, err);
    void *p = sm_malloc(1 * MiB);
    CHECK(p != NULL && !in_area(p), "sm_malloc(1 MiB) meanwhile: %p, outside the arena", p);
    sm_free(p);
    sm_heap_destroy(h);
    h = sm_heap_new_in_arena(id);
    size_t again = fill_heap(h, b, 256, &err);
    CHECK(again == 48, "after sm_heap_destroy a new heap in the arena gets all 48 (%zu; %zu before)", again, n);
    sm_heap_destroy(h);
  }
  SECTION("sm_heap_delete: the blocks stay valid; the default heap carves no new page in the arena; all comes back") {
    h = sm_heap_new_in_arena(id);
    inside = kinds_in_area(h, b, &n);
    sm_heap_delete(h);
    size_t intact = 0;
    for (size_t i = 0; i < n; i++) intact += ((uint8_t *)b[i])[0] == 0x33;
    CHECK(n == 24 && inside == n && intact == n, "%zu blocks, %zu in the arena, %zu kept their contents after the delete", n,
          inside, intact);
    size_t got = alloc_many(m, 4000, 2500, &inside), in = 0; /* a class the arena heap did not use */
    for (size_t i = 0; i < got; i++) in += in_area(m[i]);
    CHECK(in == 0, "4000 blocks of 2500 bytes from the default heap: %zu in the arena", in);
    free_many(m, got);
    free_many(b, n);
    /* the pages of the classes it did use are empty now: none may stay as its bin's only page
     * (until 2026-11-27 the first blocks of such a class landed in the arena) */
    got = alloc_many(m, 4000, 3000, &inside), in = 0;
    for (size_t i = 0; i < got; i++) in += in_area(m[i]);
    CHECK(got == 4000 && in == 0, "then 4000 blocks of 3000 bytes (a class it used, the default heap not): %zu in the arena", in);
    free_many(m, got);
    sm_collect(true);
    int err;
    h = sm_heap_new_in_arena(id);
    size_t full = fill_heap(h, b, 256, &err);
    CHECK(full == 48, "once they are freed, a new heap in the arena gets all 48 blocks of 1 MiB: %zu", full);
    sm_heap_destroy(h);
  }
  SECTION("a shared (not exclusive) arena, and memory handed over with sm_manage_os_memory_ex") {
    sm_arena_id_t shared = 0, handed = 0;
    CHECK_EQ(sm_reserve_os_memory_ex(32 * MiB, false, false, false, &shared), 0);
    area_start = sm_arena_area(shared, &area_size);
    CHECK(shared > id && area_size == 32 * MiB, "a second arena, id %d, %zu MiB", shared, area_size / MiB);
    h = sm_heap_new_in_arena(shared);
    inside = kinds_in_area(h, b, &n);
    CHECK(inside == n, "a heap in it: %zu of %zu blocks in the arena", inside, n);
    sm_heap_destroy(h);
    /* what a heap in it frees goes back to it, not to the segment cache, which such heaps never
     * take from (until 2026-11-27 the second heap got nothing: all four units sat in the cache) */
    for (int round = 0; round < 3; round++) {
      int err;
      h = sm_heap_new_in_arena(shared);
      size_t full = fill_heap(h, b, 256, &err);
      for (size_t i = 0; i < full; i++) sm_free(b[i]); /* freed one by one, then the rest destroyed */
      sm_heap_destroy(h);
      CHECK(full >= 20 && err == ENOMEM, "round %d: a heap in the shared arena gets %zu blocks of 1 MiB, then errno %d", round,
            full, err);
    }
    size_t len = 24 * MiB;
    uint8_t *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(sm_manage_os_memory_ex(region, len, true, false, true, -1, true, &handed) && handed > shared,
          "24 MiB handed over as an exclusive arena: id %d", handed);
    area_start = sm_arena_area(handed, &area_size);
    CHECK(area_start >= region && area_start + area_size <= region + len && area_size >= 16 * MiB,
          "its area %p, %zu MiB, lies in the region", (void *)area_start, area_size / MiB);
    h = sm_heap_new_in_arena(handed);
    void *p = sm_heap_calloc(h, 1, 3 * MiB), *q = sm_heap_malloc(h, 100);
    CHECK(in_area(p) && in_area(q), "a 3 MiB calloc and a 100-byte block from the handed-over arena: %p %p", p, q);
    if (p != NULL) CHECK_ZERO(p, 3 * MiB);
    sm_heap_destroy(h);
    sm_debug_show_arenas();
  }
}

/* ---------------------------------------------------------------- 1 GiB pages */
static void check_huge_arena(const char *how) {
  static void *blocks[256];
  long free_before = hugetlb_free(1048576);
  size_t in, a = alloc_many(blocks, 256, 256 * KiB, &in); /* 64 MiB */
  CHECK(a == 256 && in == 256, "%s: 64 MiB of 256 KiB blocks: %zu allocated, %zu in the huge page arena", how, a, in);
  vma_info_t v = vma_of(blocks[0]);
  printf("      mapping %lx-%lx: KernelPageSize %ld kB, hugetlb %ld kB\n", v.start, v.end, v.kernel_page_kb, v.hugetlb_kb);
  CHECK(v.found && v.kernel_page_kb == 1048576, "the block's mapping has 1 GiB pages (KernelPageSize %ld kB)", v.kernel_page_kb);
  CHECK(commit_now() >= GiB, "the page counts as committed (%zu MiB)", commit_now() / MiB);
  free_many(blocks, a);
  size_t bad = calloc_after_delay(blocks, 64, 256 * KiB);
  CHECK(bad == 0, "after the purge delay, calloc'ed blocks read zero: %zu of 68 did not", bad);
  sm_collect(true);
  CHECK_EQ(hugetlb_free(1048576), free_before); /* never given back */
  v = vma_of(blocks[0]);
  CHECK(v.found && v.kernel_page_kb == 1048576, "still mapped after sm_collect(true)");
  /* the units come back with their old contents: calloc must still read zero */
  size_t zeroed = 0;
  for (int i = 0; i < 64; i++) {
    blocks[i] = sm_calloc(1, 256 * KiB);
    if (blocks[i] != NULL && smi_arena_contains(blocks[i]) && first_nonzero(blocks[i], 256 * KiB) == (size_t)-1) zeroed++;
  }
  CHECK_EQ(zeroed, 64);
  void *h = sm_calloc(1, 40 * MiB);
  CHECK(h != NULL && smi_arena_contains(h), "a 40 MiB calloc from the huge page: %p", h);
  if (h != NULL) CHECK_ZERO(h, 40 * MiB);
  sm_free(h);
  free_many(blocks, 64);
}

static void case_huge1g(void) {
  long free1g = hugetlb_free(1048576);
  if (free1g < 1) {
    printf("test-arena: /sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages is %ld\n", free1g);
    sm_skip("no free 1 GiB huge page (as root: echo 1 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages)");
  }
  SECTION("sm_reserve_huge_os_pages_at(1, 0): one 1 GiB page, an arena that is never purged") {
    int err = sm_reserve_huge_os_pages_at(1, 0, 10000);
    CHECK(err == 0, "reserved one page: %d (%s)", err, strerror(err));
    if (err != 0) return;
    CHECK_EQ(smi_arenas_count(), 1);
    CHECK_EQ(hugetlb_free(1048576), free1g - 1);
    check_huge_arena("sm_reserve_huge_os_pages_at");
  }
  SECTION("no more free pages: ENOMEM; interleave over all nodes too") {
    if (hugetlb_free(1048576) == 0) {
      CHECK_EQ(sm_reserve_huge_os_pages_at(1, 0, 1000), ENOMEM);
      CHECK_EQ(sm_reserve_huge_os_pages_interleave(2, 0, 1000), ENOMEM);
      CHECK_EQ(smi_arenas_count(), 1);
    } else {
      printf("      (the system has more free 1 GiB pages: not checked)\n");
    }
  }
}

static void case_huge1g_timeout(void) {
  long free1g = hugetlb_free(1048576);
  if (free1g < 2) {
    printf("test-arena: %ld free 1 GiB pages\n", free1g);
    sm_skip("fewer than 2 free 1 GiB huge pages (as root: echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages)");
  }
  SECTION("huge_timeout: after 1 ms no second page is tried (ETIMEDOUT, the first one kept); 0 = no limit") {
    double t0 = now_s();
    int err = sm_reserve_huge_os_pages_at(2, 0, 1);
    double t = now_s() - t0;
    printf("      2 pages with a 1 ms bound: %s after %.0f ms; %ld free left\n", strerror(err), t * 1000, hugetlb_free(1048576));
    CHECK_EQ(err, ETIMEDOUT);
    CHECK_EQ(hugetlb_free(1048576), free1g - 1);
    CHECK_EQ(smi_arenas_count(), 1);
    CHECK_EQ(sm_reserve_huge_os_pages_interleave(1, 0, 0), 0);
    CHECK_EQ(hugetlb_free(1048576), free1g - 2);
    CHECK_EQ(smi_arenas_count(), 2);
    void *p = sm_calloc(1, 1536 * MiB); /* more than one page: two arenas never make one block */
    CHECK(p == NULL || !smi_arena_contains(p), "a 1.5 GiB block is not carved across two arenas");
    sm_free(p);
  }
}

static void case_verbose(void) {
  SECTION("VERBOSE=1 reports the arenas, NUMA and large pages") {
    child_result_t *r = malloc(sizeof *r);
    char *env[] = {"SHARDMALLOC_VERBOSE=1", "SHARDMALLOC_RESERVE_OS_MEMORY=8M", "SHARDMALLOC_ALLOW_LARGE_OS_PAGES=1", NULL};
    char *args[] = {"noop", NULL};
    run_child(r, env, args, 60);
    CHECK(child_exited(r, 0), "the child ran: %s%s", child_how(r), child_output(r));
    CHECK(child_says(r, "arena 1: reserved 8 MiB"), "the arena reported:%s", child_output(r));
    CHECK(child_says(r, "NUMA: 1 node in use") || child_says(r, "NUMA: "), "NUMA reported:%s", child_output(r));
    CHECK(child_says(r, "large OS pages: "), "large pages reported:%s", child_output(r));
    free(r);
  }
}

static void case_huge1g_option(void) {
  if (smi_arenas_count() == 0) {
    printf("test-arena: free 1 GiB pages now: %ld\n", hugetlb_free(1048576));
    sm_skip("RESERVE_HUGE_OS_PAGES=1 got no page (none free; see huge1g)");
  }
  SECTION("RESERVE_HUGE_OS_PAGES=1: the page is reserved at start-up and used") {
    CHECK_EQ(smi_arenas_count(), 1);
    check_huge_arena("RESERVE_HUGE_OS_PAGES=1");
  }
}

/* ---------------------------------------------------------------- 2 MiB pages */
static void case_hugetlb2m(void) {
  long free2m = hugetlb_free(2048);
  if (free2m < 4) {
    printf("test-arena: /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages is %ld\n", free2m);
    sm_skip("fewer than 4 free 2 MiB hugetlb pages (as root: echo 8 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)");
  }
  static void *blocks[64];
  SECTION("ALLOW_LARGE_OS_PAGES=1 with a hugetlb pool: segments on 2 MiB pages, then ordinary ones") {
    printf("      %ld free 2 MiB pages at the start\n", free2m);
    size_t in, a = alloc_many(blocks, 64, MiB, &in);
    CHECK_EQ(a, 64);
    size_t huge = 0, normal = 0;
    for (size_t i = 0; i < a; i++) {
      vma_info_t v = vma_of(blocks[i]);
      if (v.kernel_page_kb == 2048) huge++;
      else if (v.kernel_page_kb == 4) normal++;
    }
    printf("      of 64 blocks of 1 MiB: %zu on 2 MiB pages, %zu on 4 KiB pages; %ld pages left in the pool\n", huge, normal,
           hugetlb_free(2048));
    CHECK(huge >= 3, "at least 3 blocks on 2 MiB pages, seen %zu", huge);
    CHECK(huge + normal == a, "every block on 2 MiB or 4 KiB pages (%zu + %zu of %zu)", huge, normal, a);
    CHECK(free2m >= 32 || normal > 0, "once the pool is empty, ordinary memory follows (%zu blocks)", normal);
    CHECK(hugetlb_free(2048) < free2m, "the pool shrank: %ld -> %ld", free2m, hugetlb_free(2048));
    vma_info_t v = vma_of(blocks[0]);
    CHECK(v.kernel_page_kb != 2048 || v.hugetlb_kb > 0, "Private_Hugetlb counts the touched pages: %ld kB", v.hugetlb_kb);
    long before = hugetlb_free(2048);
    free_many(blocks, a);
    size_t bad = calloc_after_delay(blocks, 32, MiB);
    CHECK(bad == 0, "after the purge delay, calloc'ed blocks read zero: %zu of 36 did not", bad);
    sm_collect(true); /* hugetlb segments are unmapped, not purged: the pages go back to the pool */
    CHECK(hugetlb_free(2048) > before, "after sm_collect(true) the pool has its pages back: %ld -> %ld", before,
          hugetlb_free(2048));
    size_t zeroed = 0;
    for (int i = 0; i < 16; i++) {
      blocks[i] = sm_calloc(1, 1536 * KiB);
      if (blocks[i] != NULL && first_nonzero(blocks[i], 1536 * KiB) == (size_t)-1) zeroed++;
    }
    CHECK_EQ(zeroed, 16);
    free_many(blocks, 16);
  }
  SECTION("sm_reserve_os_memory(allow_large) takes 2 MiB hugetlb pages while the pool has enough") {
    sm_collect(true);
    long before = hugetlb_free(2048);
    CHECK(before >= 4, "the pool has its pages back (%ld)", before);
    CHECK_EQ(sm_reserve_os_memory(8 * MiB, false, true), 0);
    CHECK_EQ(hugetlb_free(2048), before - 4);
    void *p = sm_malloc(5 * MiB);
    vma_info_t v = vma_of(p);
    CHECK(p != NULL && smi_arena_contains(p) && v.kernel_page_kb == 2048, "a 5 MiB block in the arena, on 2 MiB pages (%ld kB)",
          v.kernel_page_kb);
    sm_free(p);
    sm_collect(true);
    CHECK_EQ(hugetlb_free(2048), before - 4); /* arenas are never unmapped */
  }
}

static void case_thp(void) {
  char mode[128] = "";
  int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
  if (fd >= 0) {
    ssize_t n = read(fd, mode, sizeof mode - 1);
    mode[n > 0 ? n : 0] = 0;
    close(fd);
  }
  if (strstr(mode, "[never]") != NULL || mode[0] == 0) sm_skip("transparent huge pages are off in this kernel");
  if (hugetlb_free(2048) > 0) sm_skip("the system has free 2 MiB hugetlb pages: they would be used instead of THP");
  SECTION("ALLOW_LARGE_OS_PAGES=1 without a hugetlb pool: transparent huge pages (AnonHugePages)") {
    static void *blocks[8];
    size_t in;
    size_t a = alloc_many(blocks, 8, MiB + 512 * KiB, &in);
    CHECK_EQ(a, 8);
    long anon = 0;
    for (size_t i = 0; i < a; i++) {
      vma_info_t v = vma_of(blocks[i]);
      if (v.anon_huge_kb > anon) anon = v.anon_huge_kb;
    }
    printf("      AnonHugePages of the blocks' mapping: %ld kB (THP %s)\n", anon, mode);
    CHECK(anon >= 2048, "at least one 2 MiB transparent huge page, seen AnonHugePages %ld kB", anon);
    free_many(blocks, a);
  }
  SECTION("reserve_os_memory with allow_large: the arena gets THP too") {
    CHECK_EQ(sm_reserve_os_memory(16 * MiB, false, true), 0);
    void *p = sm_malloc(6 * MiB);
    CHECK(p != NULL && smi_arena_contains(p), "a 6 MiB block in the new arena");
    if (p != NULL) {
      memset(p, 1, 6 * MiB);
      vma_info_t v = vma_of(p);
      printf("      arena mapping AnonHugePages %ld kB\n", v.anon_huge_kb);
      CHECK(v.anon_huge_kb >= 2048, "AnonHugePages >= 2048 kB, seen %ld", v.anon_huge_kb);
    }
    sm_free(p);
  }
}

/* ---------------------------------------------------------------- NUMA */
static size_t sysfs_online_nodes(void) {
  char buf[256];
  int fd = open("/sys/devices/system/node/online", O_RDONLY);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = 0;
  size_t max = 0; /* the last number in the list is the highest node */
  for (char *s = buf; *s; s++)
    if (*s >= '0' && *s <= '9' && (s == buf || s[-1] < '0' || s[-1] > '9')) max = strtoul(s, NULL, 10);
  return max + 1;
}

/* what the library detects: one node when the process may allocate on one only (its cpuset's
 * nodes, from get_mempolicy), else the nodes online */
static size_t expected_nodes(void) {
  unsigned long mask[8] = {0};
  if (syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)(8 * sizeof mask), NULL, 4UL /* MPOL_F_MEMS_ALLOWED */) == 0) {
    size_t n = 0;
    for (size_t i = 0; i < 8; i++) n += (size_t)__builtin_popcountl(mask[i]);
    if (n == 1) return 1;
  }
  return sysfs_online_nodes();
}

static void case_numa(void) {
  SECTION("list parsing: sysfs cpulist/online formats, and garbage refused") {
    uint16_t map[16] = {0};
    size_t end = 99;
    CHECK(smi_os_parse_list("0-3,8,10-11\n", map, 16, 7, &end) && end == 12, "\"0-3,8,10-11\" ends at 12 (seen %zu)", end);
    CHECK(map[0] == 7 && map[3] == 7 && map[4] == 0 && map[8] == 7 && map[9] == 0 && map[11] == 7 && map[12] == 0,
          "the listed entries and only those are set");
    CHECK(smi_os_parse_list("\n", map, 16, 1, &end) && end == 0, "an empty list (a node without CPUs) is valid");
    CHECK(smi_os_parse_list("5", NULL, 0, 1, &end) && end == 6, "a single number");
    CHECK(!smi_os_parse_list("0-x", map, 16, 1, &end), "\"0-x\" refused");
    CHECK(!smi_os_parse_list("3-1", map, 16, 1, &end), "a reversed range refused");
    CHECK(!smi_os_parse_list("0;1", map, 16, 1, &end), "\"0;1\" refused");
    CHECK(!smi_os_parse_list("99999999999", map, 16, 1, &end), "absurd numbers refused");
  }
  size_t detected = expected_nodes();
  SECTION("detection at start-up matches the allowed nodes and sysfs; one node needs no getcpu") {
    printf("      expected: %zu node(s); the library: %zu detected, %zu in use, node source %s\n", detected,
           smi_os_numa_detected(), smi_os_numa_count(), smi_os_numa_method());
    CHECK_EQ(smi_os_numa_detected(), detected);
    long use = getenv("SHARDMALLOC_USE_NUMA_NODES") ? atol(getenv("SHARDMALLOC_USE_NUMA_NODES")) : 0;
    CHECK_EQ(smi_os_numa_count(), use > 0 && (size_t)use < detected ? (size_t)use : detected);
    if (smi_os_numa_count() == 1) CHECK_EQ(smi_os_numa_node(), 0);
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t orig;
  sched_getaffinity(0, sizeof orig, &orig);
  SECTION("the cheap getcpu agrees with the system call on every CPU") {
    size_t tried = 0, agree = 0;
    int method = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu < 1024; cpu++) {
      if (!CPU_ISSET(cpu, &orig) || !pin_to_cpu(cpu)) continue;
      unsigned c1 = 0, n1 = 0, c2 = 0, n2 = 0;
      method = smi_os_getcpu(&c1, &n1);
      long r = syscall(SYS_getcpu, &c2, &n2, NULL);
      tried++;
      if (r == 0 && c1 == c2 && n1 == n2 && c1 == (unsigned)cpu) agree++;
      else printf("      cpu %d: cheap (method %d) says cpu %u node %u, the system call cpu %u node %u\n", cpu, method, c1, n1, c2, n2);
    }
    printf("      %zu CPUs, method %d (0 rseq, 1 vDSO, 2 system call)\n", tried, method);
    CHECK(tried > 0, "could pin to at least one CPU");
    CHECK_EQ(agree, tried);
    CHECK(method >= 0, "some way to know the CPU");
    sched_setaffinity(0, sizeof orig, &orig);
  }
  SECTION("a made-up 4-node machine: counts, use_numa_nodes cap, cpu -> node") {
    const char *lists[4] = {"2-3\n", "4-5\n", "", "0-1,6-7\n"};
    CHECK(smi_os_numa_setup("0-3\n", lists, 0), "set-up accepted");
    CHECK_EQ(smi_os_numa_detected(), 4);
    CHECK_EQ(smi_os_numa_count(), 4);
    CHECK_EQ(smi_os_numa_node_of_cpu(0), 3);
    CHECK_EQ(smi_os_numa_node_of_cpu(5), 1);
    CHECK_EQ(smi_os_numa_node_of_cpu(8), -1);
    CHECK(smi_os_numa_setup("0-3\n", lists, 2), "set-up with use_numa_nodes=2");
    CHECK_EQ(smi_os_numa_count(), 2);
    CHECK_EQ(smi_os_numa_node_of_cpu(0), 1); /* node 3 -> 3 % 2 */
    CHECK_EQ(smi_os_numa_node_of_cpu(3), 0);
    CHECK(smi_os_numa_setup("0,2\n", (const char *const[]){"0\n", NULL, "1\n"}, 0), "holes in the node list");
    CHECK_EQ(smi_os_numa_count(), 3);
    CHECK_EQ(smi_os_numa_node_of_cpu(1), 2);
    CHECK(!smi_os_numa_setup("zero", lists, 0), "garbage: refused, one node");
    CHECK_EQ(smi_os_numa_count(), 1);
  }
  SECTION("arenas of the current node first (made-up 2-node machine)") {
    const char *lists[2] = {"0\n", "1-4095\n"};
    smi_os_numa_setup("0-1\n", lists, 0);
    unsigned c, n;
    if (ncpu < 2 || smi_os_getcpu(&c, &n) != 0) {
      printf("      (one CPU, or the node comes from the kernel rather than the cpu map: made-up nodes cannot be checked)\n");
      smi_os_numa_init(0);
    } else {
    sm_collect(true); /* nothing cached: new blocks come from the arenas */
    size_t len = 16 * MiB;
    uint8_t *r1 = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *r0 = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(sm_manage_os_memory(r1, len, false, false, true, 1), "node 1 region (registered first)");
    CHECK(sm_manage_os_memory(r0, len, false, false, true, 0), "node 0 region");
    void *on0 = NULL, *on1 = NULL;
    if (pin_to_cpu(0)) on0 = sm_malloc(6 * MiB);
    CHECK_EQ(smi_os_numa_node(), 0);
    if (pin_to_cpu(1)) on1 = sm_malloc(6 * MiB);
    CHECK_EQ(smi_os_numa_node(), 1);
    CHECK(on0 != NULL && (uint8_t *)on0 >= r0 && (uint8_t *)on0 < r0 + len, "on cpu 0 (node 0): from the node 0 region (%p)", on0);
    CHECK(on1 != NULL && (uint8_t *)on1 >= r1 && (uint8_t *)on1 < r1 + len, "on cpu 1 (node 1): from the node 1 region (%p)", on1);
    /* fresh OS memory on a 'multi-node' machine gets mbind(MPOL_PREFERRED): harmless when the
     * node does not exist */
    void *big = sm_malloc(40 * MiB);
    CHECK(big != NULL, "a 40 MiB block beyond both regions");
    if (big != NULL) memset(big, 3, 40 * MiB);
    sm_free(big);
    sm_free(on0);
    sm_free(on1);
    sched_setaffinity(0, sizeof orig, &orig);
    smi_os_numa_init(0);
    CHECK_EQ(smi_os_numa_detected(), detected);
    }
  }
}

int main(int argc, char **argv) {
  sm_test_name = "test-arena";
  if (argc < 2) {
    fprintf(stderr, "usage: %s reserve|exhaust|disallow|threads|limit|limit-cache|delete-ended|disallow-grow|grow|api|ids|huge1g|huge1g-option|huge1g-timeout|hugetlb2m|thp|numa|numa-use1|verbose\n", argv[0]);
    return 2;
  }
  const char *c = argv[1];
  printf("test-arena %s\n", c);
  free(malloc(1)); /* start-up reservations are made now */
  if (!strcmp(c, "reserve")) case_reserve();
  else if (!strcmp(c, "exhaust")) case_exhaust();
  else if (!strcmp(c, "disallow")) case_disallow();
  else if (!strcmp(c, "limit")) case_limit();
  else if (!strcmp(c, "limit-cache")) case_limit_cache();
  else if (!strcmp(c, "delete-ended")) case_delete_ended();
  else if (!strcmp(c, "disallow-grow")) case_disallow_grow();
  else if (!strcmp(c, "threads")) case_threads();
  else if (!strcmp(c, "grow")) case_grow();
  else if (!strcmp(c, "api")) case_api();
  else if (!strcmp(c, "ids")) case_ids();
  else if (!strcmp(c, "huge1g")) case_huge1g();
  else if (!strcmp(c, "huge1g-option")) case_huge1g_option();
  else if (!strcmp(c, "huge1g-timeout")) case_huge1g_timeout();
  else if (!strcmp(c, "verbose")) case_verbose();
  else if (!strcmp(c, "noop")) free(malloc(10 * MiB)); /* the child of verbose */
  else if (!strcmp(c, "hugetlb2m")) case_hugetlb2m();
  else if (!strcmp(c, "thp")) case_thp();
  else if (!strcmp(c, "numa") || !strcmp(c, "numa-use1")) case_numa();
  else {
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
  }
  return sm_test_summary();
}
