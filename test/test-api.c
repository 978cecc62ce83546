/* test-api: the standard allocation API as a drop-in malloc must provide it (DROPIN 1-12, 16 partly).
 * Linked to libshardmalloc.so, so the standard names resolve to shardmalloc; sm_check_owned()
 * proves it for every entry point. */
#include "sm-test.h"

#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "shardmalloc.h"

#if SM_TEST_PRELOAD /* built without linking shardmalloc, run with LD_PRELOAD=libshardmalloc.so */
static bool (*sm_check_owned_p)(const void *);
#define sm_check_owned(p) sm_check_owned_p(p)
#endif

/* Not (or not always) declared by glibc 2.36's headers. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);
typedef void (*cfree_fn)(void *);

static free_sized_fn p_free_sized;
static free_aligned_sized_fn p_free_aligned_sized;
static cfree_fn p_cfree;
static size_t page;
/* Called through pointers without the headers' alloc_align attribute: with it, UBSan (rightly)
 * flags calls whose alignment argument is not a power of two, and those are what is tested here. */
static void *(*volatile aligned_alloc_any)(size_t, size_t) = aligned_alloc;
static void *(*volatile memalign_any)(size_t, size_t) = memalign;

#define CHECK_OWNED(p)                                                             \
  do {                                                                             \
    const void *q_ = (p);                                                          \
    SM_COUNT();                                                                    \
    if (!sm_check_owned(q_))                                                       \
      sm_fail(__FILE__, __LINE__, "sm_check_owned(" #p ")",                        \
              "expected a block managed by shardmalloc, seen %p (not owned: the call did not reach shardmalloc)", q_); \
  } while (0)

/* requests above this must fail */
#define HUGE_FAIL_COUNT 12
static size_t huge_fail[HUGE_FAIL_COUNT];
static void init_huge_fail(void) {
  size_t v[HUGE_FAIL_COUNT] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4095, SIZE_MAX - (64u << 20),
                               (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX + 4096, SIZE_MAX / 2 + 4096,
                               (size_t)1 << 62, (size_t)1 << 48, (size_t)1 << 47, ((size_t)1 << 47) + 12345};
  memcpy(huge_fail, v, sizeof v);
}

static size_t min_align_for(size_t n) { /* alignment every block of n bytes must have */
  if (n >= 16) return 16;
  size_t a = 1;
  while (a * 2 <= n) a *= 2;
  return a;
}

static void test_malloc0(void) {
  SECTION("DROPIN 1: malloc(0) returns unique freeable pointers") {
    enum { N = 2000 };
    void **ps = calloc(N, sizeof(void *));
    CHECK_NONNULL(ps);
    for (int i = 0; i < N; i++) {
      ps[i] = malloc(opaque_size(0));
      CHECK_NONNULL(ps[i]);
      if (i < 4) CHECK_OWNED(ps[i]);
    }
    /* uniqueness: sort and compare neighbours */
    for (int i = 1; i < N; i++) { /* insertion sort is fine for 2000 */
      void *x = ps[i];
      int j = i - 1;
      while (j >= 0 && (uintptr_t)ps[j] > (uintptr_t)x) { ps[j + 1] = ps[j]; j--; }
      ps[j + 1] = x;
    }
    int dups = 0;
    for (int i = 1; i < N; i++) dups += ps[i] == ps[i - 1];
    CHECK(dups == 0, "expected %d distinct pointers from malloc(0), seen %d duplicates", N, dups);
    for (int i = 0; i < N; i++) free(ps[i]);
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b, "expected two distinct pointers, seen %p and %p", a, b);
    free(a);
    free(b);
    void *r = realloc(NULL, opaque_size(0));
    CHECK_NONNULL(r);
    free(r);
    void *c = calloc(opaque_size(0), 16);
    CHECK_NONNULL(c);
    free(c);
    c = calloc(16, opaque_size(0));
    CHECK_NONNULL(c);
    free(c);
    free(ps);
  }
}

static void test_enomem(void) {
  SECTION("DROPIN 2: impossible requests give NULL and ENOMEM") {
    for (int i = 0; i < HUGE_FAIL_COUNT; i++) {
      size_t n = opaque_size(huge_fail[i]);
      errno = 0;
      void *p = malloc(n);
      CHECK(p == NULL && errno == ENOMEM, "malloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = calloc(1, n);
      CHECK(p == NULL && errno == ENOMEM, "calloc(1, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = realloc(NULL, n);
      CHECK(p == NULL && errno == ENOMEM, "realloc(NULL, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = aligned_alloc(64, n);
      CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(64, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = aligned_alloc((size_t)1 << 22, n);
      CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(4 MiB, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = memalign(4096, n);
      CHECK(p == NULL && errno == ENOMEM, "memalign(4096, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = valloc(n);
      CHECK(p == NULL && errno == ENOMEM, "valloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = pvalloc(n);
      CHECK(p == NULL && errno == ENOMEM, "pvalloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
      errno = 0;
      p = reallocarray(NULL, 1, n);
      CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, 1, %#zx): expected NULL/ENOMEM, seen %p errno %d", n, p, errno);
    }
    /* the next ones fail only because the process has no room, not by arithmetic */
    size_t n = opaque_size((size_t)1 << 47);
    errno = 0;
    void *p = malloc(n);
    CHECK(p == NULL && errno == ENOMEM, "malloc(128 TiB): expected NULL/ENOMEM, seen %p errno %d", p, errno);
    /* refused by the OS: with the kernel's default overcommit heuristic (mode 0), a mapping larger
     * than memory and swap together is refused, and glibc's malloc then fails; so must ours
     * (until 2026-11-27 its mappings were outside that check: the block came, and the OOM killer
     * later). Twice memory and swap, from malloc, calloc, aligned_alloc and a realloc's growth. */
    FILE *oc = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (oc != NULL) {
      if (fscanf(oc, "%d", &mode) != 1) mode = -1;
      fclose(oc);
    }
    struct sysinfo si;
    if (mode == 0 && sysinfo(&si) == 0) {
      size_t backed = ((size_t)si.totalram + si.totalswap) * si.mem_unit;
      size_t more = opaque_size(2 * backed);
      errno = 0;
      p = malloc(more);
      CHECK(p == NULL && errno == ENOMEM, "malloc(%zu GiB), twice memory and swap: expected NULL/ENOMEM, seen %p errno %d",
            more >> 30, p, errno);
      errno = 0;
      p = calloc(1, more);
      CHECK(p == NULL && errno == ENOMEM, "calloc(1, %zu GiB): expected NULL/ENOMEM, seen %p errno %d", more >> 30, p, errno);
      errno = 0;
      p = aligned_alloc((size_t)1 << 21, more);
      CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(2 MiB, %zu GiB): expected NULL/ENOMEM, seen %p errno %d",
            more >> 30, p, errno);
      char *small = malloc(100), *grown;
      errno = 0;
      grown = small != NULL ? realloc(small, more) : NULL;
      CHECK(grown == NULL && errno == ENOMEM, "realloc(100 B -> %zu GiB): expected NULL/ENOMEM, seen %p errno %d",
            more >> 30, (void *)grown, errno);
      free(grown != NULL ? grown : small);
    } else {
      printf("      (overcommit mode %d: a request larger than memory and swap is not refused by the kernel; not checked)\n", mode);
    }
    /* nothing is broken afterwards */
    p = malloc(100);
    CHECK_NONNULL(p);
    CHECK_OWNED(p);
    free(p);
  }
}

static void test_calloc(void) {
  SECTION("DROPIN 3: calloc overflow gives NULL and ENOMEM") {
    struct { size_t a, b; } ov[] = {
        {SIZE_MAX, 2}, {2, SIZE_MAX}, {(size_t)1 << 32, (size_t)1 << 32}, {SIZE_MAX / 3 + 1, 3},
        {(size_t)PTRDIFF_MAX / 2 + 1, 2}, {65537, (size_t)1 << 48}, {SIZE_MAX, SIZE_MAX}, {(size_t)1 << 33, 1u << 31}};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
      errno = 0;
      void *p = calloc(opaque_size(ov[i].a), opaque_size(ov[i].b));
      CHECK(p == NULL && errno == ENOMEM, "calloc(%#zx, %#zx): expected NULL/ENOMEM, seen %p errno %d", ov[i].a,
            ov[i].b, p, errno);
    }
  }
  SECTION("DROPIN 3: calloc memory is zero, also when recycled") {
    static const size_t sizes[] = {1, 8, 16, 24, 40, 64, 100, 128, 500, 1024, 1500, 4096, 8000, 16384, 40000,
                                   65536, 100000, 262144, 500000, 1 << 20, 3 << 20, 8 << 20, 33 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      int rounds = n > (1 << 20) ? 3 : 40;
      for (int r = 0; r < rounds; r++) {
        /* dirty blocks of this size, free them, then calloc: the recycled memory must be zero */
        enum { K = 8 };
        void *d[K];
        for (int k = 0; k < K; k++) {
          d[k] = malloc(n);
          CHECK_NONNULL(d[k]);
          if (d[k]) memset(d[k], 0xA5, malloc_usable_size(d[k]));
        }
        for (int k = 0; k < K; k++) free(d[k]);
        for (int k = 0; k < K; k++) {
          d[k] = (k & 1) ? calloc(n, 1) : calloc(1, n);
          CHECK_NONNULL(d[k]);
          if (d[k]) {
            CHECK_ZERO(d[k], n);
            CHECK_OWNED(d[k]);
            CHECK_ALIGNED(d[k], min_align_for(n));
          }
        }
        for (int k = 0; k < K; k++) {
          if (d[k]) memset(d[k], 0x5A, malloc_usable_size(d[k]));
          free(d[k]);
        }
      }
    }
    /* calloc with count > 1 */
    int *v = calloc(opaque_size(1000), sizeof(int));
    CHECK_NONNULL(v);
    if (v) CHECK_ZERO(v, 1000 * sizeof(int));
    free(v);
  }
}

static void test_realloc(void) {
  SECTION("DROPIN 4: realloc(NULL, n) is malloc(n)") {
    for (size_t n = 1; n < 100000; n = n * 3 + 1) {
      char *p = realloc(NULL, n);
      CHECK_NONNULL(p);
      CHECK_OWNED(p);
      CHECK(malloc_usable_size(p) >= n, "usable size of realloc(NULL, %zu): expected >= %zu, seen %zu", n, n,
            malloc_usable_size(p));
      memset(p, 1, n);
      free(p);
    }
  }
  SECTION("DROPIN 4: failed realloc leaves the block valid and unchanged") {
    static const size_t sizes[] = {1, 16, 100, 5000, 300000, 5 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      char *p = malloc(n);
      CHECK_NONNULL(p);
      fill_pattern(p, n, 77 + n);
      for (int i = 0; i < HUGE_FAIL_COUNT; i++) {
        errno = 0;
        void *q = realloc(p, opaque_size(huge_fail[i]));
        CHECK(q == NULL && errno == ENOMEM, "realloc(p of %zu, %#zx): expected NULL/ENOMEM, seen %p errno %d", n,
              huge_fail[i], q, errno);
      }
      CHECK_PATTERN(p, n, 77 + n);
      CHECK(malloc_usable_size(p) >= n, "usable size after failed realloc: expected >= %zu, seen %zu", n,
            malloc_usable_size(p));
      /* still a live block: it can grow and be freed */
      char *q = realloc(p, n + 1000);
      CHECK_NONNULL(q);
      if (q) {
        CHECK_PATTERN(q, n, 77 + n);
        free(q);
      }
    }
  }
  SECTION("DROPIN 4: contents survive realloc from 1 B up to 64 MiB and back") {
    size_t n = 1, seq = 0;
    char *p = malloc(n);
    fill_pattern(p, n, seq);
    /* grow: geometric steps with odd sizes, so every size class and mapping kind is crossed */
    while (n < (64u << 20)) {
      size_t m = n + n / 3 + 1 + (seq % 7);
      if (m > (64u << 20)) m = 64u << 20;
      char *q = realloc(p, m);
      CHECK_NONNULL(q);
      if (!q) break;
      CHECK_PATTERN(q, n, seq);
      CHECK_OWNED(q);
      CHECK_ALIGNED(q, min_align_for(m));
      p = q;
      n = m;
      seq++;
      fill_pattern(p, n, seq);
    }
    CHECK_EQ(n, 64u << 20);
    /* shrink back down */
    while (n > 1) {
      size_t m = n / 2 - (seq % 5);
      if ((ptrdiff_t)m < 1) m = 1;
      char *q = realloc(p, m);
      CHECK_NONNULL(q);
      if (!q) break;
      CHECK_PATTERN(q, m, seq);
      p = q;
      n = m;
      seq++;
      fill_pattern(p, n, seq);
    }
    /* jumps: tiny <-> huge directly */
    static const size_t jumps[] = {10, 40 << 20, 3, 9 << 20, 200, 100000, 17 << 20, 1, 2 << 20, 64};
    for (size_t j = 0; j < sizeof jumps / sizeof jumps[0]; j++) {
      size_t m = jumps[j];
      char *q = realloc(p, m);
      CHECK_NONNULL(q);
      if (!q) break;
      CHECK_PATTERN(q, n < m ? n : m, seq);
      p = q;
      n = m;
      seq++;
      fill_pattern(p, n, seq);
    }
    free(p);
  }
  SECTION("huge realloc: 1 MiB -> 256 MiB in 1 MiB steps and back, contents kept") {
    /* every MiB carries its own pattern; after each step the start and end of every MiB are
     * checked, and the whole block at the turning point */
    size_t n = MiB, steps = 0;
    char *p = malloc(n);
    CHECK_NONNULL(p);
    fill_pattern(p, n, 0);
    while (p && n < (256u << 20)) {
      char *q = realloc(p, n + MiB);
      CHECK_NONNULL(q);
      if (!q) break;
      p = q;
      fill_pattern(p + n, MiB, n / MiB);
      n += MiB;
      steps++;
      CHECK_ALIGNED(p, 16);
      size_t bad = (size_t)-1;
      for (size_t k = 0; k < n / MiB && bad == (size_t)-1; k++)
        if (verify_pattern(p + k * MiB, 64, k) != (size_t)-1) bad = k;
      for (size_t k = 0; k < n / MiB && bad == (size_t)-1; k++) {
        uint8_t expect = pattern_byte(k, MiB - 1);
        if ((uint8_t)p[k * MiB + MiB - 1] != expect) bad = k;
      }
      CHECK(bad == (size_t)-1, "after growing to %zu MiB: expected every MiB intact, seen MiB %zu damaged", n / MiB,
            bad);
      if (bad != (size_t)-1) break;
    }
    CHECK_EQ(n, 256u << 20);
    for (size_t k = 0; p && k < n / MiB; k++) CHECK_PATTERN(p + k * MiB, MiB, k);
    CHECK_OWNED(p);
    while (p && n > 9 * MiB) { /* and back down, in 8 MiB steps */
      char *q = realloc(p, n - 8 * MiB);
      CHECK_NONNULL(q);
      if (!q) break;
      p = q;
      n -= 8 * MiB;
      CHECK(verify_pattern(p + n - MiB, MiB, n / MiB - 1) == (size_t)-1, "after shrinking to %zu MiB: last MiB damaged",
            n / MiB);
    }
    if (p) CHECK_PATTERN(p, MiB, 0);
    free(p);
    /* an over-aligned huge block grows too */
    char *a = aligned_alloc(64u << 20, 70u << 20);
    CHECK_NONNULL(a);
    if (a) {
      CHECK_ALIGNED(a, 64u << 20);
      fill_pattern(a, 70u << 20, 99);
      char *b = realloc(a, 200u << 20);
      CHECK_NONNULL(b);
      if (b) {
        CHECK_PATTERN(b, 70u << 20, 99);
        free(b);
      } else free(a);
    }
  }
  SECTION("huge blocks: malloc, calloc and realloc leave the pages they need not write untouched") {
    /* as glibc's mmap'ed chunks: a program may ask for more than it uses (or than the machine
     * has). The debug build filled all of a huge block until 2026-11-27 (run under it by
     * extra-suite-debug-test-api-preload). */
    size_t before = rss_bytes();
    char *a = malloc(512 * MiB), *b = calloc(1, 512 * MiB), *c = malloc(MiB);
    CHECK_NONNULL(a);
    CHECK_NONNULL(b);
    if (c) c = realloc(c, 512 * MiB);
    CHECK_NONNULL(c);
    size_t after = rss_bytes();
    printf("      RSS %zu MiB -> %zu MiB with three blocks of 512 MiB\n", before / MiB, after / MiB);
    CHECK(after < before + 64 * MiB, "expected RSS to grow by less than 64 MiB, seen %zu -> %zu MiB", before / MiB,
          after / MiB);
    free(a);
    free(b);
    free(c);
  }
  SECTION("realloc within the usable size grows and shrinks in place") {
    static const size_t sizes[] = {1, 7, 16, 33, 100, 250, 1000, 3000, 10000, 70000, 500000, 3 << 20, 20 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      char *p = malloc(n);
      size_t u = malloc_usable_size(p);
      fill_pattern(p, n, n);
      char *q = realloc(p, u); /* grow to the usable size */
      CHECK(q == p, "realloc(p, usable size %zu) of a %zu-byte block: expected in place %p, seen %p", u, n,
            (void *)p, (void *)q);
      CHECK_PATTERN(q, n, n);
      memset(q + n, 0x11, u - n);
      size_t m = u - u / 4; /* shrink by a quarter */
      if (m == 0) m = 1;
      char *r = realloc(q, m);
      CHECK(r == q, "realloc(p, %zu) shrinking a block of usable size %zu: expected in place %p, seen %p", m, u,
            (void *)q, (void *)r);
      CHECK_PATTERN(r, n < m ? n : m, n);
      free(r);
    }
  }
  SECTION("DROPIN 4: realloc(p, 0) frees p and returns NULL (glibc)") {
    for (int i = 0; i < 1000; i++) {
      void *p = malloc((size_t)(i * 37 % 5000) + 1);
      void *q = realloc(p, opaque_size(0));
      CHECK_NULL(q);
    }
    void *h = malloc(8 << 20);
    CHECK_NULL(realloc(h, opaque_size(0)));
  }
  SECTION("DROPIN 4: realloc of aligned blocks keeps contents") {
    for (size_t a = 16; a <= (1u << 22); a <<= 3) {
      char *p = aligned_alloc(a, 100);
      CHECK_NONNULL(p);
      fill_pattern(p, 100, a);
      char *q = realloc(p, 1 << 20);
      CHECK_NONNULL(q);
      CHECK_PATTERN(q, 100, a);
      CHECK_ALIGNED(q, 16);
      q = realloc(q, 50);
      CHECK_PATTERN(q, 50, a);
      free(q);
    }
  }
}

static void test_reallocarray(void) {
  SECTION("DROPIN 5: reallocarray overflow leaves the block alone") {
    char *p = reallocarray(NULL, 10, 10);
    CHECK_NONNULL(p);
    CHECK_OWNED(p);
    fill_pattern(p, 100, 5);
    struct { size_t a, b; } ov[] = {{SIZE_MAX, 2}, {(size_t)1 << 33, (size_t)1 << 33}, {2, SIZE_MAX / 2 + 1},
                                    {(size_t)PTRDIFF_MAX / 4 + 1, 4}, {(size_t)1 << 40, (size_t)1 << 10}};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
      errno = 0;
      void *q = reallocarray(p, opaque_size(ov[i].a), opaque_size(ov[i].b));
      CHECK(q == NULL && errno == ENOMEM, "reallocarray(p, %#zx, %#zx): expected NULL/ENOMEM, seen %p errno %d",
            ov[i].a, ov[i].b, q, errno);
    }
    CHECK_PATTERN(p, 100, 5);
    char *q = reallocarray(p, 1000, 100);
    CHECK_NONNULL(q);
    CHECK_PATTERN(q, 100, 5);
    CHECK(malloc_usable_size(q) >= 100000, "usable after reallocarray(p,1000,100): expected >= 100000, seen %zu",
          malloc_usable_size(q));
    memset(q, 3, 100000);
    free(q);
  }
}

static void check_block(void *p, size_t n, size_t align, const char *how) {
  CHECK(p != NULL, "%s(%zu, align %zu): expected a block, seen NULL errno %d", how, n, align, errno);
  if (!p) return;
  CHECK(((uintptr_t)p & (align - 1)) == 0, "%s(size %zu): expected alignment %zu, seen %p", how, n, align, p);
  CHECK_ALIGNED(p, min_align_for(n));
  size_t u = malloc_usable_size(p);
  CHECK(u >= n, "%s: usable size of a %zu-byte block: expected >= %zu, seen %zu", how, n, n, u);
  CHECK_OWNED(p);
  memset(p, 0xC3, u); /* all of it is writable */
}

static void test_aligned_alloc(void) {
  SECTION("DROPIN 6: aligned_alloc, every power of two 1 B .. 256 MiB, sizes not multiples") {
    for (size_t a = 1; a <= ((size_t)256 << 20); a <<= 1) {
      size_t ns[] = {1, 13, a + 1, a / 2 + 3, 3 * a + 5};
      for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        if (a >= (64u << 20) && k >= 4) continue; /* keep the biggest ones moderate */
        void *p = aligned_alloc(opaque_size(a), ns[k]);
        check_block(p, ns[k], a, "aligned_alloc");
        free(p);
      }
      /* several at once, so they come from the same pages */
      if (a <= 4096) {
        void *q[16];
        for (int i = 0; i < 16; i++) {
          q[i] = aligned_alloc(a, (size_t)i * 7 + 1);
          check_block(q[i], (size_t)i * 7 + 1, a, "aligned_alloc");
        }
        for (int i = 0; i < 16; i++) free(q[i]);
      }
    }
    void *z = aligned_alloc(64, opaque_size(0));
    CHECK_NONNULL(z);
    CHECK_ALIGNED(z, 64);
    free(z);
  }
  SECTION("DROPIN 6: aligned_alloc with a non-power-of-two alignment gives NULL/EINVAL") {
    size_t bad[] = {0, 3, 5, 6, 12, 24, 48, 100, 4095, 4097, (1u << 20) + 1, 3u << 20, SIZE_MAX, SIZE_MAX / 2,
                    ((size_t)1 << 63) + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      errno = 0;
      void *p = aligned_alloc_any(opaque_size(bad[i]), 64);
      CHECK(p == NULL && errno == EINVAL, "aligned_alloc(%#zx, 64): expected NULL/EINVAL, seen %p errno %d", bad[i],
            p, errno);
      if (p) free(p);
    }
  }
}

static void test_posix_memalign(void) {
  SECTION("DROPIN 7: posix_memalign EINVAL/ENOMEM: returned, errno kept, *p untouched") {
    void *const sentinel = (void *)(uintptr_t)0x5eed;
    size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, 100, 4097, (1u << 20) + 8, SIZE_MAX, ((size_t)1 << 63) + 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      void *p = sentinel;
      errno = EDOM;
      int r = posix_memalign(&p, opaque_size(bad[i]), 64);
      CHECK(r == EINVAL, "posix_memalign(align %#zx): expected EINVAL (%d), seen %d", bad[i], EINVAL, r);
      CHECK(p == sentinel, "posix_memalign(align %#zx) failing: expected *p untouched (%p), seen %p", bad[i],
            sentinel, p);
      CHECK(errno == EDOM, "posix_memalign(align %#zx) failing: expected errno untouched (EDOM), seen %d", bad[i],
            errno);
    }
    for (int i = 0; i < HUGE_FAIL_COUNT; i++) {
      size_t aligns[] = {8, 64, 4096, (size_t)1 << 21};
      for (size_t k = 0; k < 4; k++) {
        void *p = sentinel;
        errno = EDOM;
        int r = posix_memalign(&p, aligns[k], opaque_size(huge_fail[i]));
        CHECK(r == ENOMEM, "posix_memalign(align %zu, %#zx): expected ENOMEM (%d), seen %d", aligns[k], huge_fail[i],
              ENOMEM, r);
        CHECK(p == sentinel, "posix_memalign(%#zx) failing: expected *p untouched, seen %p", huge_fail[i], p);
        CHECK(errno == EDOM, "posix_memalign(%#zx) failing: expected errno untouched (EDOM), seen %d", huge_fail[i],
              errno);
      }
    }
  }
  SECTION("DROPIN 7: posix_memalign with every valid alignment") {
    for (size_t a = sizeof(void *); a <= ((size_t)64 << 20); a <<= 1) {
      size_t ns[] = {1, a + 1, 3 * a / 2 + 1, 100};
      for (size_t k = 0; k < 4; k++) {
        void *p = NULL;
        int r = posix_memalign(&p, a, ns[k]);
        CHECK(r == 0, "posix_memalign(align %zu, %zu): expected 0, seen %d", a, ns[k], r);
        check_block(p, ns[k], a, "posix_memalign");
        free(p);
      }
    }
    void *p = NULL;
    CHECK_EQ(posix_memalign(&p, 64, opaque_size(0)), 0);
    free(p);
  }
}

static void test_memalign_valloc(void) {
  SECTION("DROPIN 8: memalign rounds a non-power-of-two alignment up") {
    struct { size_t in, out; } al[] = {{3, 4}, {5, 8}, {24, 32}, {48, 64}, {100, 128}, {1000, 1024},
                                       {4097, 8192}, {(1u << 20) + 1, 1u << 21}, {3u << 20, 4u << 20}};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
      void *p = memalign_any(opaque_size(al[i].in), 200);
      check_block(p, 200, al[i].out, "memalign");
      free(p);
    }
    for (size_t a = 1; a <= (32u << 20); a <<= 1) {
      void *p = memalign(a, a / 2 + 5);
      check_block(p, a / 2 + 5, a, "memalign");
      free(p);
    }
    void *p = memalign_any(opaque_size(0), 100); /* glibc: alignment 0 means the default */
    check_block(p, 100, 16, "memalign(0,...)");
    free(p);
    errno = 0;
    p = memalign_any(opaque_size(((size_t)1 << 63) + 1), 16); /* cannot be rounded up */
    CHECK(p == NULL && (errno == EINVAL || errno == ENOMEM),
          "memalign(2^63+1, 16): expected NULL with EINVAL or ENOMEM, seen %p errno %d", p, errno);
  }
  SECTION("DROPIN 9: valloc and pvalloc are page aligned; pvalloc rounds up") {
    size_t ns[] = {1, 100, 4095, 4096, 4097, 10000, 100000, 3 << 20, 10 << 20};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
      void *p = valloc(ns[i]);
      check_block(p, ns[i], page, "valloc");
      free(p);
      void *q = pvalloc(ns[i]);
      size_t rounded = (ns[i] + page - 1) / page * page;
      check_block(q, rounded, page, "pvalloc");
      free(q);
    }
    for (int i = 0; i < HUGE_FAIL_COUNT; i++) {
      errno = 0;
      void *p = pvalloc(opaque_size(huge_fail[i]));
      CHECK(p == NULL && errno == ENOMEM, "pvalloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", huge_fail[i], p,
            errno);
    }
  }
}

static void test_alignment16(void) {
  SECTION("DROPIN 10: every block of >= 16 bytes is 16-byte aligned") {
    void *keep[64];
    int nk = 0;
    for (size_t n = 1; n <= 20000; n += (n < 600 ? 1 : n / 50)) {
      void *p = malloc(n);
      CHECK_ALIGNED(p, min_align_for(n));
      void *c = calloc(1, n);
      CHECK_ALIGNED(c, min_align_for(n));
      void *r = realloc(NULL, n);
      CHECK_ALIGNED(r, min_align_for(n));
      r = realloc(r, n + 17);
      CHECK_ALIGNED(r, 16);
      void *ra = reallocarray(NULL, n, 1);
      CHECK_ALIGNED(ra, min_align_for(n));
      free(c);
      free(r);
      free(ra);
      if (nk < 64) keep[nk++] = p; /* keep some, so later ones are not always the same block */
      else free(p);
    }
    for (int i = 0; i < nk; i++) free(keep[i]);
    for (size_t n = 16 << 10; n <= (64u << 20); n = n * 2 + 4096 + 16) {
      void *p = malloc(n);
      CHECK_ALIGNED(p, 16);
      free(p);
    }
  }
}

static void test_usable_size(void) {
  SECTION("DROPIN 11: malloc_usable_size: 0 for NULL, >= request, all writable") {
    CHECK_EQ(malloc_usable_size(NULL), 0);
    for (size_t n = 0; n <= 70000; n += (n < 2100 ? 1 : 997)) {
      char *p = malloc(n);
      size_t u = malloc_usable_size(p);
      CHECK(u >= n, "malloc_usable_size(malloc(%zu)): expected >= %zu, seen %zu", n, n, u);
      fill_pattern(p, u, u);
      char *q = realloc(p, u + 1);
      CHECK_NONNULL(q);
      CHECK_PATTERN(q, u, u);
      free(q);
    }
    for (size_t n = 100000; n <= (50u << 20); n = n * 3 + 1) {
      char *p = malloc(n);
      size_t u = malloc_usable_size(p);
      CHECK(u >= n, "malloc_usable_size(malloc(%zu)): expected >= %zu, seen %zu", n, n, u);
      memset(p, 0x77, u);
      char *q = realloc(p, u / 2);
      CHECK_NONNULL(q);
      free(q);
    }
  }
}

static void test_free(void) {
  SECTION("DROPIN 12: free(NULL) does nothing; free never changes errno") {
    errno = EDOM;
    free(NULL);
    CHECK_ERRNO(EDOM);
    enum { N = 20000 };
    void **ps = malloc(N * sizeof(void *));
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < N; i++) ps[i] = malloc((size_t)(i % 300) * 16 + 1);
      for (int i = 0; i < N; i++) {
        errno = EDOM;
        free(ps[i]);
        if (errno != EDOM) {
          CHECK_ERRNO(EDOM);
          break;
        }
      }
      CHECK_ERRNO(EDOM);
    }
    /* big and huge blocks: freeing them may return memory to the OS */
    size_t big[] = {100000, 1 << 20, 5 << 20, 64 << 20, 200 << 20};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
      char *p = malloc(big[i]);
      memset(p, 1, big[i]);
      errno = EILSEQ;
      free(p);
      CHECK(errno == EILSEQ, "free of a %zu-byte block: expected errno untouched (EILSEQ), seen %d", big[i], errno);
    }
    /* the other free entry points */
    errno = EDOM;
    if (p_cfree) {
      p_cfree(malloc(100));
      p_cfree(NULL);
    }
    if (p_free_sized) {
      p_free_sized(malloc(100), 100);
      p_free_sized(NULL, 0);
      p_free_sized(malloc(3 << 20), 3 << 20);
    }
    if (p_free_aligned_sized) {
      p_free_aligned_sized(aligned_alloc(4096, 100), 4096, 100);
      p_free_aligned_sized(NULL, 64, 0);
    }
    CHECK_ERRNO(EDOM);
    free(ps);
  }
  SECTION("free_sized, free_aligned_sized and cfree are exported and work") {
    CHECK(p_free_sized != NULL, "expected dlsym(RTLD_DEFAULT, \"free_sized\") to find it, seen NULL%s", "");
    CHECK(p_free_aligned_sized != NULL, "expected dlsym(\"free_aligned_sized\"), seen NULL%s", "");
    CHECK(p_cfree != NULL, "expected dlsym(\"cfree\"), seen NULL%s", "");
    if (p_free_sized && p_free_aligned_sized && p_cfree) {
      for (size_t n = 1; n < (8u << 20); n = n * 2 + 3) {
        p_free_sized(malloc(n), n);
        p_free_sized(calloc(n, 1), n);
        void *p = malloc(1);
        p = realloc(p, n);
        p_free_sized(p, n);
        for (size_t a = 1; a <= 8192; a <<= 2) p_free_aligned_sized(aligned_alloc(a, n), a, n);
        p_cfree(malloc(n));
      }
      /* each of them really frees: a loop of alloc/free_sized does not grow memory */
      size_t before = rss_bytes();
      for (int i = 0; i < 200000; i++) {
        p_free_sized(malloc(4000), 4000);
        p_free_aligned_sized(aligned_alloc(256, 3000), 256, 3000);
        p_cfree(malloc(2000));
      }
      size_t after = rss_bytes();
      CHECK(after < before + 64 * MiB, "200000 alloc/free_sized rounds: expected RSS growth < 64 MiB, seen %zu MiB",
            (after - before) / MiB);
    }
  }
}

static void test_libc_internal(void) {
  SECTION("libc's own allocations (strdup, asprintf, getline...) come from shardmalloc") {
    char *s = strdup("hello");
    CHECK_OWNED(s);
    free(s);
    s = strndup("hello world", 5);
    CHECK_OWNED(s);
    CHECK(strcmp(s, "hello") == 0, "strndup: expected \"hello\", seen \"%s\"", s);
    free(s);
    char *a = NULL;
    CHECK(asprintf(&a, "%d-%s", 42, "x") == 4, "asprintf: expected 4 chars, seen \"%s\"", a ? a : "(null)");
    CHECK_OWNED(a);
    free(a);
    FILE *f = fopen("/proc/self/maps", "r");
    char *line = NULL;
    size_t cap = 0;
    if (f) {
      CHECK(getline(&line, &cap, f) > 0, "getline of /proc/self/maps: expected a line, seen none%s", "");
      CHECK_OWNED(line);
      fclose(f);
    }
    free(line);
  }
}

int main(void) {
  sm_test_name = "test-api";
  setvbuf(stdout, NULL, _IOLBF, 0);
#if SM_TEST_PRELOAD
  sm_test_name = "test-api (LD_PRELOAD)";
  sm_check_owned_p = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "sm_check_owned");
  if (!sm_check_owned_p) {
    printf("test-api (LD_PRELOAD): FAILED: shardmalloc is not preloaded (no sm_check_owned)\n");
    return 1;
  }
#endif
  page = (size_t)sysconf(_SC_PAGESIZE);
  init_huge_fail();
  p_free_sized = (free_sized_fn)dlsym(RTLD_DEFAULT, "free_sized");
  p_free_aligned_sized = (free_aligned_sized_fn)dlsym(RTLD_DEFAULT, "free_aligned_sized");
  p_cfree = (cfree_fn)dlsym(RTLD_DEFAULT, "cfree");

  SECTION("malloc resolves to shardmalloc") {
    void *p = malloc(24);
    CHECK_OWNED(p);
    int local;
    static int global;
    CHECK(!sm_check_owned(&local), "sm_check_owned(stack address): expected false, seen true%s", "");
    CHECK(!sm_check_owned(&global), "sm_check_owned(global address): expected false, seen true%s", "");
    CHECK(!sm_check_owned(NULL), "sm_check_owned(NULL): expected false, seen true%s", "");
    free(p);
  }
  test_malloc0();
  test_enomem();
  test_calloc();
  test_realloc();
  test_reallocarray();
  test_aligned_alloc();
  test_posix_memalign();
  test_memalign_valloc();
  test_alignment16();
  test_usable_size();
  test_free();
  test_libc_internal();
  return sm_test_summary();
}
