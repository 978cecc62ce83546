/* pagesize-guards: the secure build's guard pages on a kernel whose page size is
 * getauxval(AT_PAGESZ) (test/pagesize.sh links this program statically with the secure build and
 * test/pagesize-model.c, which models a kernel with 16 or 64 KiB pages). A guard is one OS page
 * where that is at most 16 KiB: after the 16 KiB header area of every segment, at the end of every
 * segment and at the end of every huge block's mapping; on a kernel with 64 KiB pages there are
 * none (the secure build says so under verbose) and the same addresses are plain memory.
 * Each probe writes one byte in a child process: a guard must kill it with SIGSEGV, and the byte
 * just before a guard (and, where there is no guard, the guard's place) must be writable. */
#include "sm-test.h"

#include <malloc.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/wait.h>

#define SEG_SIZE ((uintptr_t)4 << 20)
#define HEADER_AREA ((uintptr_t)16 << 10)

/* 0: the write worked; SIGSEGV (or another signal) if the child died of it */
static int write_in_child(uintptr_t addr) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    *(volatile char *)addr = 1;
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* [guard, guard + size): a guard page when `guarded`, else plain memory */
static void check_guard(const char *what, uintptr_t guard, size_t size, bool guarded) {
  int before = write_in_child(guard - 1), first = write_in_child(guard), last = write_in_child(guard + size - 1);
  CHECK(before == 0, "%s: the byte before it at %#lx: expected writable, seen %d", what, (unsigned long)(guard - 1), before);
  if (guarded) {
    CHECK(first == SIGSEGV && last == SIGSEGV, "%s [%#lx, +%zu): expected SIGSEGV (%d) at both ends, seen %d and %d", what,
          (unsigned long)guard, size, SIGSEGV, first, last);
  } else {
    CHECK(first == 0 && last == 0, "%s [%#lx, +%zu): no guard pages here, expected writable, seen %d and %d", what,
          (unsigned long)guard, size, first, last);
  }
}

int main(void) {
  sm_test_name = "pagesize-guards";
  size_t os_page = (size_t)getauxval(AT_PAGESZ);
  bool guarded = os_page <= HEADER_AREA;
  size_t guard = guarded ? os_page : 4096; /* the layout without guards keeps 4 KiB places */
  printf("OS pages of %zu KiB: guard pages of %zu KiB expected%s\n", os_page / 1024, guard / 1024,
         guarded ? "" : " (unprotected: larger pages than the header area)");

  /* a small, a medium and a large block's segments: the guard after the header and at the end */
  static const size_t sizes[] = {32, 20000, 300000};
  static const char *kinds[] = {"small", "medium", "large"};
  for (int k = 0; k < 3; k++) {
    char name[64];
    snprintf(name, sizeof name, "%s segment: guard after the header", kinds[k]);
    SECTION(name) {
      char *p = malloc(sizes[k]);
      CHECK_NONNULL(p);
      memset(p, 1, sizes[k]);
      uintptr_t seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1);
      CHECK((uintptr_t)p >= seg + HEADER_AREA + guard, "the first block %p lies in its segment's header or guard", (void *)p);
      check_guard("header guard", seg + HEADER_AREA, guard, guarded);
      check_guard("end guard", seg + SEG_SIZE - guard, guard, guarded);
      free(p);
    }
  }

  SECTION("huge block: its usable part ends where its end guard starts") {
    size_t n = (size_t)3 << 20;
    char *p = malloc(n);
    CHECK_NONNULL(p);
    size_t usable = malloc_usable_size(p);
    memset(p, 2, usable);
    uintptr_t seg = ((uintptr_t)p - 1) & ~(SEG_SIZE - 1);
    CHECK((uintptr_t)p == seg + HEADER_AREA + guard, "a huge block starts after the header and its guard: seen %p in %#lx",
          (void *)p, (unsigned long)seg);
    check_guard("huge header guard", seg + HEADER_AREA, guard, guarded);
    uintptr_t end_guard = (uintptr_t)p + usable + 8; /* past the secure build's 8-byte padding */
    CHECK(end_guard % os_page == 0 || !guarded, "the end guard %#lx is not on an OS page", (unsigned long)end_guard);
    check_guard("huge end guard", end_guard, guard, guarded);
    /* grown by realloc (pages moved where the layout allows, else copied): guards at the new end */
    char *q = realloc(p, (size_t)9 << 20);
    CHECK_NONNULL(q);
    usable = malloc_usable_size(q);
    memset(q, 3, usable);
    check_guard("grown huge block's end guard", (uintptr_t)q + usable + 8, guard, guarded);
    free(q);
  }
  return sm_test_summary();
}
