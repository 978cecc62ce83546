// sm-test-cxx.h: the small check harness of the C++ tests (the C tests use sm-test.h).
// A section is begin(name) ... end(); a failed CHECK prints what was expected and what was seen.
#ifndef SM_TEST_CXX_H
#define SM_TEST_CXX_H

#include <cstdio>

#include "shardmalloc.h"

static long checks, failures;
static const char *section_name;
static long sec_checks, sec_failures;

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    checks++;                                                                       \
    sec_checks++;                                                                   \
    if (!(cond)) {                                                                  \
      failures++;                                                                   \
      sec_failures++;                                                               \
      std::fprintf(stderr, "FAIL %s:%d [%s] %s\n     ", __FILE__, __LINE__, section_name, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                     \
    }                                                                               \
  } while (0)
#define CHECK_OWNED(p)                                                              \
  CHECK(sm_check_owned(p), "%s: expected a block owned by shardmalloc, seen %p (not owned)", #p, (const void *)(p))

static void begin(const char *name) {
  section_name = name;
  sec_checks = sec_failures = 0;
}
static void end() {
  std::printf("%-4s  %-60s %ld checks\n", sec_failures ? "FAIL" : "ok", section_name, sec_checks);
  std::fflush(stdout);
}

static size_t opaque(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

#endif
