/* test-posix: the standard, POSIX, glibc, BSD, macOS and Windows functions under sm_ names
 * (src/posix.c): results, alignment, usable size, errno, EINVAL and overflow, exactly as the
 * unprefixed originals (docs/api/posix.md). */
#include "sm-test.h"

#include "shardmalloc.h"

#define BIG_FAIL ((size_t)1 << 62) /* no allocator can serve it */

static void check_block(void *p, size_t size, size_t align, const char *what) {
  CHECK(p != NULL, "%s(align %zu, size %zu): expected a block, seen NULL (errno %d)", what, align, size, errno);
  if (p == NULL) return;
  CHECK_ALIGNED(p, align);
  CHECK(sm_usable_size(p) >= size, "%s(align %zu, size %zu): usable size expected >= %zu, seen %zu", what, align, size,
        size, sm_usable_size(p));
  memset(p, 0xA5, size); /* all of it may be written */
  sm_free(p);
}

static void test_aligned_alloc(void) {
  SECTION("sm_aligned_alloc: every power of two, sizes not multiples; EINVAL; ENOMEM") {
    for (size_t a = 1; a <= ((size_t)8 << 20); a <<= 1) {
      check_block(sm_aligned_alloc(a, opaque_size(a / 2 + 3)), a / 2 + 3, a, "sm_aligned_alloc");
      check_block(sm_aligned_alloc(a, opaque_size(3 * a + 1)), 3 * a + 1, a, "sm_aligned_alloc");
    }
    void *z = sm_aligned_alloc(64, opaque_size(0));
    CHECK(z != NULL, "sm_aligned_alloc(64, 0): expected a unique block, seen NULL%s", "");
    sm_free(z);
    const size_t bad[] = {0, 3, 24, 48, 100, ((size_t)1 << 63) + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      errno = 0;
      void *p = sm_aligned_alloc(opaque_size(bad[i]), 64);
      CHECK(p == NULL && errno == EINVAL, "sm_aligned_alloc(%#zx, 64): expected NULL/EINVAL, seen %p errno %d", bad[i], p,
            errno);
    }
    const size_t huge[] = {BIG_FAIL, SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
      errno = 0;
      void *p = sm_aligned_alloc(64, opaque_size(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "sm_aligned_alloc(64, %#zx): expected NULL/ENOMEM, seen %p errno %d", huge[i], p,
            errno);
      errno = 0;
      p = sm_aligned_alloc((size_t)1 << 22, opaque_size(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "sm_aligned_alloc(4 MiB, %#zx): expected NULL/ENOMEM, seen %p errno %d", huge[i],
            p, errno);
    }
    errno = 0;
    void *p = sm_aligned_alloc(opaque_size((size_t)1 << 62), 16); /* an alignment no mapping can have */
    CHECK(p == NULL && errno == ENOMEM, "sm_aligned_alloc(2^62, 16): expected NULL/ENOMEM, seen %p errno %d", p, errno);
  }
}

static void test_posix_memalign(void) {
  SECTION("sm_posix_memalign: EINVAL/ENOMEM returned, errno and *out untouched") {
    void *sentinel = (void *)(uintptr_t)0x5151;
    const size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, ((size_t)1 << 63) + 8, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      void *p = sentinel;
      errno = EDOM;
      int r = sm_posix_memalign(&p, opaque_size(bad[i]), 64);
      CHECK(r == EINVAL, "sm_posix_memalign(align %#zx): expected EINVAL (%d), seen %d", bad[i], EINVAL, r);
      CHECK(p == sentinel, "sm_posix_memalign(align %#zx) failing: expected *out untouched, seen %p", bad[i], p);
      CHECK_ERRNO(EDOM);
    }
    errno = EDOM;
    CHECK_EQ(sm_posix_memalign(NULL, 64, 64), EINVAL);
    CHECK_ERRNO(EDOM);
    const size_t huge[] = {BIG_FAIL, SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
      void *p = sentinel;
      errno = EDOM;
      int r = sm_posix_memalign(&p, 4096, opaque_size(huge[i]));
      CHECK(r == ENOMEM, "sm_posix_memalign(4096, %#zx): expected ENOMEM (%d), seen %d", huge[i], ENOMEM, r);
      CHECK(p == sentinel, "sm_posix_memalign(4096, %#zx) failing: expected *out untouched, seen %p", huge[i], p);
      CHECK_ERRNO(EDOM);
    }
  }
  SECTION("sm_posix_memalign: every valid alignment, size 0 included") {
    for (size_t a = sizeof(void *); a <= ((size_t)8 << 20); a <<= 1) {
      const size_t sizes[] = {0, 1, a - 1, a + 1, 5 * a + 7};
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        void *p = NULL;
        errno = EDOM;
        int r = sm_posix_memalign(&p, a, sizes[k]);
        CHECK(r == 0, "sm_posix_memalign(align %zu, %zu): expected 0, seen %d", a, sizes[k], r);
        CHECK_ERRNO(EDOM);
        check_block(p, sizes[k], a, "sm_posix_memalign");
      }
    }
  }
}

static void test_memalign_valloc(void) {
  SECTION("sm_memalign: rounds a non-power-of-two alignment up (glibc); EINVAL; ENOMEM") {
    const struct { size_t in, out; } al[] = {{0, 16}, {1, 8}, {3, 8}, {24, 32}, {100, 128}, {4095, 4096}, {5000, 8192},
                                             {(1u << 20) + 1, 2u << 20}};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++)
      check_block(sm_memalign(opaque_size(al[i].in), 200), 200, al[i].out, "sm_memalign");
    for (size_t a = 8; a <= ((size_t)8 << 20); a <<= 1) check_block(sm_memalign(a, a / 2 + 5), a / 2 + 5, a, "sm_memalign");
    errno = 0;
    void *p = sm_memalign(opaque_size(((size_t)1 << 63) + 1), 16); /* cannot be rounded up */
    CHECK(p == NULL && errno == EINVAL, "sm_memalign(2^63+1, 16): expected NULL/EINVAL, seen %p errno %d", p, errno);
    errno = 0;
    p = sm_memalign(4096, opaque_size(BIG_FAIL));
    CHECK(p == NULL && errno == ENOMEM, "sm_memalign(4096, 2^62): expected NULL/ENOMEM, seen %p errno %d", p, errno);
  }
  SECTION("sm_valloc and sm_pvalloc: page-aligned; pvalloc rounds to whole pages; overflow ENOMEM") {
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    const size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 100000, 5u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      check_block(sm_valloc(opaque_size(sizes[k])), sizes[k], ps, "sm_valloc");
      void *p = sm_pvalloc(opaque_size(sizes[k]));
      size_t rounded = sizes[k] == 0 ? ps : (sizes[k] + ps - 1) / ps * ps;
      CHECK(p != NULL && sm_usable_size(p) >= rounded,
            "sm_pvalloc(%zu): expected a block of at least %zu bytes, seen %p with %zu", sizes[k], rounded, p,
            sm_usable_size(p));
      check_block(p, rounded, ps, "sm_pvalloc");
    }
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - ps + 2, BIG_FAIL};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
      errno = 0;
      void *p = sm_valloc(opaque_size(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "sm_valloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", huge[i], p, errno);
      errno = 0;
      p = sm_pvalloc(opaque_size(huge[i]));
      CHECK(p == NULL && errno == ENOMEM, "sm_pvalloc(%#zx): expected NULL/ENOMEM, seen %p errno %d", huge[i], p, errno);
    }
  }
}

static void test_reallocarray(void) {
  SECTION("sm_reallocarray: overflow NULL/ENOMEM with the block intact; growth keeps contents") {
    char *p = sm_reallocarray(NULL, 10, 10);
    CHECK_NONNULL(p);
    fill_pattern(p, 100, 7);
    const struct { size_t a, b; } ov[] = {{SIZE_MAX, 2}, {2, SIZE_MAX}, {(size_t)1 << 32, (size_t)1 << 32}, {SIZE_MAX, SIZE_MAX}};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++) {
      errno = 0;
      void *q = sm_reallocarray(p, opaque_size(ov[i].a), opaque_size(ov[i].b));
      CHECK(q == NULL && errno == ENOMEM, "sm_reallocarray(p, %#zx, %#zx): expected NULL/ENOMEM, seen %p errno %d", ov[i].a,
            ov[i].b, q, errno);
      CHECK_PATTERN(p, 100, 7);
    }
    errno = 0;
    void *q = sm_reallocarray(p, opaque_size(1), BIG_FAIL); /* no overflow, but too large */
    CHECK(q == NULL && errno == ENOMEM, "sm_reallocarray(p, 1, 2^62): expected NULL/ENOMEM, seen %p errno %d", q, errno);
    CHECK_PATTERN(p, 100, 7);
    char *r = sm_reallocarray(p, 1000, 100);
    CHECK_NONNULL(r);
    CHECK(sm_usable_size(r) >= 100000, "usable after sm_reallocarray(p, 1000, 100): expected >= 100000, seen %zu",
          sm_usable_size(r));
    CHECK_PATTERN(r, 100, 7);
    /* glibc: reallocarray(p, 0, n) is realloc(p, 0): frees p, returns NULL */
    CHECK_NULL(sm_reallocarray(r, 0, 100));
  }
}

static void test_reallocarr(void) {
  SECTION("sm_reallocarr (NetBSD): 0 or an errno value, *p untouched on error, errno never changed") {
    void *p = NULL;
    errno = EDOM;
    CHECK_EQ(sm_reallocarr(&p, 10, 10), 0);
    CHECK_ERRNO(EDOM);
    CHECK_NONNULL(p);
    fill_pattern(p, 100, 11);
    void *before = p;
    CHECK_EQ(sm_reallocarr(&p, opaque_size(SIZE_MAX), 2), EOVERFLOW);
    CHECK(p == before, "after EOVERFLOW: expected *p untouched (%p), seen %p", before, p);
    CHECK_ERRNO(EDOM);
    CHECK_EQ(sm_reallocarr(&p, opaque_size((size_t)1 << 31), (size_t)1 << 31), ENOMEM); /* 2^62 bytes */
    CHECK(p == before, "after ENOMEM: expected *p untouched (%p), seen %p", before, p);
    CHECK_ERRNO(EDOM);
    CHECK_PATTERN(p, 100, 11);
    CHECK_EQ(sm_reallocarr(&p, 5000, 8), 0);
    CHECK(sm_usable_size(p) >= 40000, "after sm_reallocarr(&p, 5000, 8): usable expected >= 40000, seen %zu",
          sm_usable_size(p));
    CHECK_PATTERN(p, 100, 11);
    CHECK_ERRNO(EDOM);
    /* the pointer need not be aligned in memory: NetBSD copies it in and out */
    unsigned char store[sizeof(void *) + 1];
    memcpy(store + 1, &p, sizeof p);
    CHECK_EQ(sm_reallocarr(store + 1, 100, 100), 0);
    memcpy(&p, store + 1, sizeof p);
    CHECK_PATTERN(p, 100, 11);
    /* a count or size of 0 frees the block and stores NULL */
    CHECK_EQ(sm_reallocarr(&p, 0, 100), 0);
    CHECK_NULL(p);
    CHECK_EQ(sm_reallocarr(&p, 100, 0), 0);
    CHECK_NULL(p);
    CHECK_ERRNO(EDOM);
    CHECK_EQ(sm_reallocarr(NULL, 1, 1), EINVAL);
  }
}

static void test_sizes(void) {
  SECTION("sm_malloc_size, sm_malloc_usable_size, sm_malloc_good_size, sm__expand") {
    CHECK_EQ(sm_malloc_size(NULL), 0);
    CHECK_EQ(sm_malloc_usable_size(NULL), 0);
    const size_t sizes[] = {0, 1, 8, 17, 100, 1000, 5000, 70000, 1u << 20, 9u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      char *p = sm_malloc(sizes[k]);
      CHECK_NONNULL(p);
      size_t u = sm_malloc_usable_size(p);
      CHECK(u >= sizes[k] && u == sm_usable_size(p) && sm_malloc_size(p) == u,
            "size %zu: malloc_usable_size %zu, malloc_size %zu, usable_size %zu: expected equal and >= the request",
            sizes[k], u, sm_malloc_size(p), sm_usable_size(p));
      size_t g = sm_malloc_good_size(sizes[k]);
      CHECK(g >= sizes[k] && g == sm_good_size(sizes[k]), "sm_malloc_good_size(%zu): expected sm_good_size (%zu), seen %zu",
            sizes[k], sm_good_size(sizes[k]), g);
      memset(p, 0x3C, u);
      /* _expand: in place within the block, never moves */
      CHECK(sm__expand(p, u) == p, "sm__expand(p, usable %zu): expected p, seen another result", u);
      CHECK(sm__expand(p, sizes[k] / 2) == p, "sm__expand(p, %zu): expected p (shrinking in place)", sizes[k] / 2);
      void *q = sm__expand(p, u + (64u << 20));
      CHECK(q == NULL, "sm__expand(p, usable + 64 MiB): expected NULL (cannot grow in place), seen %p", q);
      CHECK(p[0] == 0x3C || sizes[k] < 2, "block after a failed sm__expand: expected its contents kept%s", "");
      sm_free(p);
    }
    CHECK_NULL(sm__expand(NULL, 10));
  }
}

static void test_sized_frees(void) {
  SECTION("sm_free_size, sm_free_size_aligned, sm_free_aligned, sm_cfree") {
    for (size_t n = 1; n <= (1u << 22); n = n * 3 + 1) {
      void *p = sm_malloc(n);
      CHECK_NONNULL(p);
      sm_free_size(p, n);
      for (size_t a = 8; a <= (1u << 16); a <<= 4) {
        p = sm_aligned_alloc(a, n);
        CHECK_ALIGNED(p, a);
        sm_free_size_aligned(p, n, a);
        p = sm_malloc_aligned(n, a);
        CHECK_ALIGNED(p, a);
        sm_free_aligned(p, a);
      }
      p = sm_calloc(n, 1);
      CHECK_NONNULL(p);
      sm_cfree(p);
    }
    int e = errno = EDOM;
    sm_free_size(NULL, 10); /* like free(NULL) */
    sm_free_size_aligned(NULL, 10, 64);
    sm_free_aligned(NULL, 64);
    sm_cfree(NULL);
    CHECK(errno == e, "frees of NULL: expected errno untouched, seen %d", errno);
    /* the memory is really given back: the block is handed out again once its page's current free
     * list runs dry (free-list sharding: a freed block waits on the page's local list) */
    enum { HOLD = 20000 };
    void **held = sm_malloc(HOLD * sizeof(void *));
    void *a = sm_malloc(48);
    uintptr_t first = (uintptr_t)a;
    sm_free_size(a, 48);
    int reused_at = -1, n_held = 0;
    while (n_held < HOLD && reused_at < 0) {
      held[n_held] = sm_malloc(48);
      if ((uintptr_t)held[n_held] == first) reused_at = n_held;
      n_held++;
    }
    for (int i = 0; i < n_held; i++) sm_free(held[i]);
    sm_free(held);
    CHECK(reused_at >= 0, "a block freed with sm_free_size: expected it handed out again within %d allocations of its size",
          (int)HOLD);
  }
}

static void test_aligned_recalloc(void) {
  SECTION("sm_aligned_recalloc, sm_aligned_offset_recalloc: zeroed growth, alignment, overflow") {
    unsigned char *p = sm_calloc_aligned(10, 10, 64);
    CHECK_NONNULL(p);
    CHECK_ALIGNED(p, 64);
    CHECK_ZERO(p, 100);
    memset(p, 0x77, 100);
    unsigned char *q = sm_aligned_recalloc(p, 1000, 10, 64);
    CHECK_NONNULL(q);
    CHECK_ALIGNED(q, 64);
    for (int i = 0; i < 100; i++) CHECK(q[i] == 0x77, "old byte %d after growth: expected 0x77, seen %#x", i, q[i]);
    CHECK_ZERO(q + 100, 9900);
    errno = 0;
    void *r = sm_aligned_recalloc(q, opaque_size(SIZE_MAX / 2), 3, 64);
    CHECK(r == NULL && errno == ENOMEM, "sm_aligned_recalloc overflow: expected NULL/ENOMEM, seen %p errno %d", r, errno);
    CHECK(q[99] == 0x77 && q[5000] == 0, "block after a failed recalloc: expected it intact%s", "");
    sm_free(q);

    unsigned char *s = sm_calloc_aligned_at(4, 25, 256, 16);
    CHECK_NONNULL(s);
    CHECK_ALIGNED(s + 16, 256);
    memset(s, 0x19, 100);
    unsigned char *t = sm_aligned_offset_recalloc(s, 300, 25, 256, 16);
    CHECK_NONNULL(t);
    CHECK_ALIGNED(t + 16, 256);
    for (int i = 0; i < 100; i++) CHECK(t[i] == 0x19, "old byte %d after offset growth: expected 0x19, seen %#x", i, t[i]);
    CHECK_ZERO(t + 100, 7400);
    errno = 0;
    r = sm_aligned_offset_recalloc(t, opaque_size(SIZE_MAX), SIZE_MAX, 256, 16);
    CHECK(r == NULL && errno == ENOMEM, "sm_aligned_offset_recalloc overflow: expected NULL/ENOMEM, seen %p errno %d", r, errno);
    sm_free(t);
  }
}

static size_t u16len(const unsigned short *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

static void test_strings(void) {
  SECTION("sm_wcsdup, sm_mbsdup") {
    /* "héllo", a U+1D11E (surrogate pair) and a terminator: 16-bit units, as on Windows */
    const unsigned short w[] = {'h', 0xE9, 'l', 'l', 'o', 0xD834, 0xDD1E, 0};
    unsigned short *c = sm_wcsdup(w);
    CHECK_NONNULL(c);
    CHECK(c != w && u16len(c) == 7 && memcmp(c, w, sizeof w) == 0, "sm_wcsdup: expected an equal copy of 7 units, seen %zu",
          c ? u16len(c) : 0);
    CHECK(sm_check_owned(c) && sm_usable_size(c) >= sizeof w, "sm_wcsdup: expected a shardmalloc block of >= %zu bytes",
          sizeof w);
    sm_free(c);
    const unsigned short empty[] = {0};
    c = sm_wcsdup(empty);
    CHECK(c != NULL && c[0] == 0, "sm_wcsdup(\"\"): expected an empty string, seen %p", (void *)c);
    sm_free(c);
    CHECK_NULL(sm_wcsdup(NULL));
    const unsigned char mb[] = "multi\xE2\x82\xAC" "byte";
    unsigned char *m = sm_mbsdup(mb);
    CHECK(m != NULL && m != mb && strcmp((char *)m, (const char *)mb) == 0 && sm_check_owned(m),
          "sm_mbsdup: expected an equal copy owned by shardmalloc, seen %p", (void *)m);
    sm_free(m);
    CHECK_NULL(sm_mbsdup(NULL));
  }
  SECTION("sm_dupenv_s: a copy (size counts the terminator), unset is 0 with NULL, EINVAL") {
    setenv("SMTEST_DUPENV", "some value", 1);
    unsetenv("SMTEST_UNSET_VARIABLE");
    char *buf = (char *)(uintptr_t)1;
    size_t size = 12345;
    CHECK_EQ(sm_dupenv_s(&buf, &size, "SMTEST_DUPENV"), 0);
    CHECK(buf != NULL && strcmp(buf, "some value") == 0 && size == 11 && sm_check_owned(buf),
          "sm_dupenv_s: expected \"some value\" and size 11, seen \"%s\" and %zu", buf ? buf : "(null)", size);
    sm_free(buf);
    CHECK_EQ(sm_dupenv_s(&buf, NULL, "SMTEST_DUPENV"), 0); /* size may be NULL */
    CHECK(buf != NULL && strcmp(buf, "some value") == 0, "sm_dupenv_s(size NULL): expected the copy, seen %p", (void *)buf);
    sm_free(buf);
    buf = (char *)(uintptr_t)1;
    size = 12345;
    CHECK_EQ(sm_dupenv_s(&buf, &size, "SMTEST_UNSET_VARIABLE"), 0);
    CHECK(buf == NULL && size == 0, "sm_dupenv_s of an unset variable: expected NULL and 0, seen %p and %zu", (void *)buf,
          size);
    setenv("SMTEST_EMPTY", "", 1);
    CHECK_EQ(sm_dupenv_s(&buf, &size, "SMTEST_EMPTY"), 0);
    CHECK(buf != NULL && buf[0] == 0 && size == 1, "sm_dupenv_s of \"\": expected \"\" and size 1, seen %p and %zu",
          (void *)buf, size);
    sm_free(buf);
    CHECK_EQ(sm_dupenv_s(NULL, &size, "SMTEST_DUPENV"), EINVAL);
    CHECK_EQ(sm_dupenv_s(&buf, &size, NULL), EINVAL);
  }
  SECTION("sm_wdupenv_s: UTF-16 name and value over the UTF-8 environment; EILSEQ, EINVAL") {
    setenv("SMTEST_W\xC3\xA9", "h\xC3\xA9llo \xF0\x9D\x84\x9E!", 1); /* name SMTEST_Wé, value "héllo 𝄞!" */
    const unsigned short name[] = {'S', 'M', 'T', 'E', 'S', 'T', '_', 'W', 0xE9, 0};
    const unsigned short expect[] = {'h', 0xE9, 'l', 'l', 'o', ' ', 0xD834, 0xDD1E, '!', 0};
    unsigned short *buf = NULL;
    size_t size = 0;
    CHECK_EQ(sm_wdupenv_s(&buf, &size, name), 0);
    CHECK(buf != NULL && size == 10 && memcmp(buf, expect, sizeof expect) == 0 && sm_check_owned(buf),
          "sm_wdupenv_s: expected 9 units + terminator (size 10), seen %p with size %zu", (void *)buf, size);
    sm_free(buf);
    const unsigned short unset[] = {'S', 'M', 'T', 'E', 'S', 'T', '_', 'N', 'O', 'N', 'E', 0};
    unsetenv("SMTEST_NONE");
    buf = (unsigned short *)(uintptr_t)2;
    size = 7;
    CHECK_EQ(sm_wdupenv_s(&buf, &size, unset), 0);
    CHECK(buf == NULL && size == 0, "sm_wdupenv_s of an unset variable: expected NULL and 0, seen %p and %zu", (void *)buf,
          size);
    setenv("SMTEST_BAD", "\xFF\xFE", 1);
    const unsigned short bad[] = {'S', 'M', 'T', 'E', 'S', 'T', '_', 'B', 'A', 'D', 0};
    CHECK_EQ(sm_wdupenv_s(&buf, &size, bad), EILSEQ);
    CHECK(buf == NULL, "sm_wdupenv_s of invalid UTF-8: expected *buf NULL, seen %p", (void *)buf);
    const unsigned short lone[] = {'A', 0xDC00, 0}; /* an unpaired surrogate cannot be a name */
    CHECK_EQ(sm_wdupenv_s(&buf, &size, lone), EILSEQ);
    CHECK_EQ(sm_wdupenv_s(NULL, &size, name), EINVAL);
    CHECK_EQ(sm_wdupenv_s(&buf, &size, NULL), EINVAL);
  }
}

int main(void) {
  sm_test_name = "test-posix";
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_aligned_alloc();
  test_posix_memalign();
  test_memalign_valloc();
  test_reallocarray();
  test_reallocarr();
  test_sizes();
  test_sized_frees();
  test_aligned_recalloc();
  test_strings();
  return sm_test_summary();
}
