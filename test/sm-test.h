/* sm-test.h: the small harness every shardmalloc test program uses.
 *
 * A test is a list of sections; each section runs some CHECKs and prints one line ("ok" or "FAIL")
 * with its number of checks.  A failed CHECK prints what was expected and what was seen.  The
 * program ends with sm_test_summary(), which prints one summary line and returns the exit code.
 * Everything is static: each test program includes this header once. */
#ifndef SM_TEST_H
#define SM_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SM_TEST_SKIP 77 /* exit code ctest is told means "skipped" */

static const char *sm_test_name = "test";
static long sm_checks, sm_failures;
static long sm_section_checks, sm_section_failures;
static const char *sm_section_name;

/* Opaque copies of values, so the compiler cannot fold calls like malloc(SIZE_MAX). */
static inline size_t opaque_size(size_t n) { __asm__ volatile("" : "+r"(n)); return n; }
static inline void *opaque_ptr(void *p) { __asm__ volatile("" : "+r"(p)); return p; }

__attribute__((format(printf, 4, 5)))
static void sm_fail(const char *file, int line, const char *what, const char *fmt, ...) {
  sm_failures++;
  sm_section_failures++;
  if (sm_section_failures > 12) { /* the first dozen tell the story; the section line gives the count */
    if (sm_section_failures == 13) fprintf(stderr, "     (further failures in this section not shown)\n");
    return;
  }
  fflush(stdout);
  fprintf(stderr, "FAIL %s:%d [%s] %s\n     ", file, line, sm_section_name ? sm_section_name : "-", what);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
}

#define SM_COUNT() (sm_checks++, sm_section_checks++)
/* CHECK(cond, fmt, ...): the message should say what was expected and what was seen. */
#define CHECK(cond, ...)                                                           \
  do {                                                                             \
    SM_COUNT();                                                                    \
    if (!(cond)) sm_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                  \
  } while (0)
#define CHECK_EQ(seen, expected)                                                   \
  do {                                                                             \
    unsigned long long s_ = (unsigned long long)(seen), e_ = (unsigned long long)(expected); \
    SM_COUNT();                                                                    \
    if (s_ != e_)                                                                  \
      sm_fail(__FILE__, __LINE__, #seen " == " #expected, "expected %llu (%#llx), seen %llu (%#llx)", \
              e_, e_, s_, s_);                                                     \
  } while (0)
#define CHECK_NULL(p)                                                              \
  do {                                                                             \
    const void *p_ = (p);                                                          \
    SM_COUNT();                                                                    \
    if (p_ != NULL) sm_fail(__FILE__, __LINE__, #p " == NULL", "expected NULL, seen %p", p_); \
  } while (0)
#define CHECK_NONNULL(p)                                                           \
  do {                                                                             \
    const void *p_ = (p);                                                          \
    SM_COUNT();                                                                    \
    if (p_ == NULL) sm_fail(__FILE__, __LINE__, #p " != NULL", "expected a block, seen NULL (errno %d %s)", errno, strerror(errno)); \
  } while (0)
#define CHECK_ERRNO(expected)                                                      \
  do {                                                                             \
    int e_ = errno;                                                                \
    SM_COUNT();                                                                    \
    if (e_ != (expected))                                                          \
      sm_fail(__FILE__, __LINE__, "errno == " #expected, "expected errno %d (%s), seen %d (%s)", \
              (expected), strerror(expected), e_, strerror(e_));                   \
  } while (0)
#define CHECK_ALIGNED(p, a)                                                        \
  do {                                                                             \
    uintptr_t p_ = (uintptr_t)(p), a_ = (uintptr_t)(a);                            \
    SM_COUNT();                                                                    \
    if (a_ && p_ % a_ != 0)                                                        \
      sm_fail(__FILE__, __LINE__, #p " aligned to " #a, "expected a multiple of %#lx, seen %p", \
              (unsigned long)a_, (void *)p_);                                      \
  } while (0)

static void section(const char *name) {
  sm_section_name = name;
  sm_section_checks = 0;
  sm_section_failures = 0;
}
static void section_end(void) {
  if (!sm_section_name) return;
  if (sm_section_failures)
    printf("FAIL  %-58s %ld of %ld checks failed\n", sm_section_name, sm_section_failures, sm_section_checks);
  else
    printf("ok    %-58s %ld checks\n", sm_section_name, sm_section_checks);
  fflush(stdout);
  sm_section_name = NULL;
}
#define SECTION(name) for (int once_ = (section(name), 1); once_; once_ = (section_end(), 0))

__attribute__((unused)) static int sm_test_summary(void) {
  section_end();
  if (sm_failures)
    printf("%s: FAILED: %ld of %ld checks failed\n", sm_test_name, sm_failures, sm_checks);
  else
    printf("%s: all %ld checks passed\n", sm_test_name, sm_checks);
  fflush(stdout);
  return sm_failures ? 1 : 0;
}

__attribute__((unused)) static void sm_skip(const char *why) {
  printf("%s: SKIPPED: %s\n", sm_test_name, why);
  fflush(stdout);
  exit(SM_TEST_SKIP);
}

/* Deterministic fill/verify patterns: byte i of a block depends on the seed and on i. */
static inline uint8_t pattern_byte(uint64_t seed, size_t i) {
  uint64_t x = seed + i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return (uint8_t)(x ^ (x >> 8) ^ (seed >> 3));
}
__attribute__((unused)) static void fill_pattern(void *p, size_t n, uint64_t seed) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++) b[i] = pattern_byte(seed, i);
}
/* returns the index of the first wrong byte, or (size_t)-1 if the whole range is right */
__attribute__((unused)) static size_t verify_pattern(const void *p, size_t n, uint64_t seed) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != pattern_byte(seed, i)) return i;
  return (size_t)-1;
}
__attribute__((unused)) static size_t first_nonzero(const void *p, size_t n) {
  static const uint8_t zero[4096];
  const uint8_t *b = p;
  size_t i = 0;
  while (i < n) { /* memcmp in chunks: fast, also under the sanitizers */
    size_t k = n - i < sizeof zero ? n - i : sizeof zero;
    if (memcmp(b + i, zero, k) != 0) break;
    i += k;
  }
  for (; i < n; i++)
    if (b[i]) return i;
  return (size_t)-1;
}
#define CHECK_PATTERN(p, n, seed)                                                  \
  do {                                                                             \
    size_t at_ = verify_pattern((p), (n), (seed));                                 \
    SM_COUNT();                                                                    \
    if (at_ != (size_t)-1)                                                         \
      sm_fail(__FILE__, __LINE__, "contents of " #p " preserved",                  \
              "block %p (%zu bytes checked): byte %zu expected %#x, seen %#x", (void *)(p), (size_t)(n), at_, \
              pattern_byte((seed), at_), ((const uint8_t *)(p))[at_]);             \
  } while (0)
#define CHECK_ZERO(p, n)                                                           \
  do {                                                                             \
    size_t at_ = first_nonzero((p), (n));                                          \
    SM_COUNT();                                                                    \
    if (at_ != (size_t)-1)                                                         \
      sm_fail(__FILE__, __LINE__, #p " zeroed", "block %p of %zu bytes: byte %zu expected 0, seen %#x", \
              (void *)(p), (size_t)(n), at_, ((const uint8_t *)(p))[at_]);         \
  } while (0)

/* resident set size in bytes, from /proc/self/statm */
__attribute__((unused)) static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
    fclose(f);
  }
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

/* Tests built twice (through the standard names and, for the TSan build, through the sm_ API)
 * call xmalloc & co.; the sm_ functions are declared in shardmalloc.h, which those tests include. */
#ifndef SM_TEST_SM_API
#define SM_TEST_SM_API 0
#endif
#if SM_TEST_SM_API
#define xmalloc sm_malloc
#define xfree sm_free
#define xrealloc sm_realloc
#define xcalloc sm_calloc
#else
#define xmalloc malloc
#define xfree free
#define xrealloc realloc
#define xcalloc calloc
#endif
#define xowned(p) sm_check_owned(p)

#endif
