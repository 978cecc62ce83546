// sm-test-cxx.h: the small check harness of the C++ tests (the C tests use sm-test.h).
// A section is begin(name) ... end(); a failed CHECK prints what was expected and what was seen.
#ifndef SM_TEST_CXX_H
#define SM_TEST_CXX_H

#include <cstdio>
#include <new>

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

/* every unaligned operator new/delete form (plain, array, nothrow, sized) uses shardmalloc blocks */
static void check_plain_operator_forms() {
  int *a = new int(5);
  CHECK_OWNED(a);
  delete a;
  int *b = new int[1000];
  CHECK_OWNED(b);
  delete[] b;
  int *c = new (std::nothrow) int(3);
  CHECK_OWNED(c);
  delete c;
  int *d = new (std::nothrow) int[77];
  CHECK_OWNED(d);
  delete[] d;
  void *e = ::operator new(100);
  CHECK_OWNED(e);
  ::operator delete(e, 100); // sized
  void *f = ::operator new[](100);
  CHECK_OWNED(f);
  ::operator delete[](f, 100); // sized array
  void *g = ::operator new(100, std::nothrow);
  CHECK_OWNED(g);
  ::operator delete(g, std::nothrow);
  void *h = ::operator new[](100, std::nothrow);
  CHECK_OWNED(h);
  ::operator delete[](h, std::nothrow);
}

static size_t opaque(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

#endif
