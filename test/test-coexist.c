/* test-coexist: the program's own sbrk/brk and mmap use beside shardmalloc (DROPIN 18).  The
 * program moves the break up and down, maps and unmaps its own regions, and grabs address space
 * right after shardmalloc's blocks (where a segment allocator might want to grow), all interleaved
 * with allocation.  Nothing shardmalloc hands out may overlap the program's regions, both sides'
 * contents must survive, and sm_check_owned must not claim the program's memory. */
#include "sm-test.h"

#include <sys/mman.h>

#include "shardmalloc.h"

struct region { char *p; size_t n; uint64_t seed; };
#define NREG 64
static struct region regs[NREG];
static int nregs;

static int overlaps(const char *p, size_t n) {
  for (int i = 0; i < nregs; i++)
    if (regs[i].p && p < regs[i].p + regs[i].n && regs[i].p < p + n) return i;
  return -1;
}

int main(void) {
  sm_test_name = "test-coexist";
  setvbuf(stdout, NULL, _IOLBF, 0);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  enum { NB = 3000 };
  static char *blocks[NB];
  static size_t bsize[NB];

  SECTION("sbrk up and down interleaved with malloc") {
    char *brk0 = sbrk(0);
    for (int round = 0; round < 50; round++) {
      char *b = sbrk((intptr_t)(64 * KiB));
      CHECK(b != (void *)-1, "sbrk(64 KiB): expected the old break, seen failure errno %d", errno);
      if (b == (void *)-1) break;
      fill_pattern(b, 64 * KiB, (uint64_t)round);
      CHECK(!sm_check_owned(b), "sm_check_owned(sbrk'ed memory): expected false, seen true (%p)", (void *)b);
      for (int i = 0; i < 60; i++) {
        int k = round * 60 + i;
        bsize[k] = (size_t)(k * 7919 % 20000) + 1;
        blocks[k] = malloc(bsize[k]);
        CHECK_NONNULL(blocks[k]);
        CHECK(!(blocks[k] < b + 64 * KiB && b < blocks[k] + bsize[k]),
              "malloc'd block %p overlaps the program's sbrk region %p", (void *)blocks[k], (void *)b);
        fill_pattern(blocks[k], bsize[k], (uint64_t)k + 1000);
      }
      CHECK_PATTERN(b, 64 * KiB, (uint64_t)round);
      if (round % 3 == 2) sbrk(-(intptr_t)(32 * KiB)); /* give some back */
    }
    CHECK((char *)sbrk(0) > brk0, "the break: expected above where it started%s", "");
    brk(brk0); /* back to the start */
    for (int k = 0; k < NB; k++) {
      CHECK_PATTERN(blocks[k], bsize[k], (uint64_t)k + 1000);
      free(blocks[k]);
    }
  }
  SECTION("own mmap regions, also squeezed right after shardmalloc's memory") {
    for (int round = 0; round < 40; round++) {
      char *anchor = malloc(round % 2 ? 100 : (size_t)(1 << 20) + (size_t)round * 4096);
      /* try to take address space just behind shardmalloc's current memory, at several
       * plausible segment boundaries */
      size_t bounds[] = {4 << 20, 32 << 20, 64 << 20};
      for (int k = 0; k < 3 && nregs < NREG; k++) {
        uintptr_t want = ((uintptr_t)anchor + bounds[k]) & ~(uintptr_t)(bounds[k] - 1);
        char *m = mmap((void *)want, 2 * MiB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED) continue; /* occupied (maybe by shardmalloc itself): fine */
        regs[nregs] = (struct region){m, 2 * MiB, (uint64_t)(round * 3 + k)};
        fill_pattern(m, 2 * MiB, regs[nregs].seed);
        CHECK(!sm_check_owned(m), "sm_check_owned(program's mmap at %p): expected false, seen true", (void *)m);
        nregs++;
      }
      if (nregs < NREG) { /* and an ordinary one, partly unmapped again */
        char *m = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
          munmap(m + 512 * KiB, 256 * KiB); /* a hole in the middle */
          regs[nregs++] = (struct region){m, 512 * KiB, (uint64_t)round + 500};
          fill_pattern(m, 512 * KiB, (uint64_t)round + 500);
        }
      }
      for (int i = 0; i < NB / 40; i++) { /* allocate across the squeezed space */
        int k = round * (NB / 40) + i;
        bsize[k] = i % 50 == 0 ? (size_t)(3 << 20) + (size_t)i : (size_t)(k * 131 % 60000) + 1;
        blocks[k] = malloc(bsize[k]);
        CHECK_NONNULL(blocks[k]);
        if (!blocks[k]) continue;
        int o = overlaps(blocks[k], bsize[k]);
        CHECK(o < 0, "block %p (%zu bytes) overlaps the program's region %p", (void *)blocks[k], bsize[k],
              o >= 0 ? (void *)regs[o].p : NULL);
        fill_pattern(blocks[k], bsize[k], (uint64_t)k + 7);
      }
      free(anchor);
    }
    for (int i = 0; i < nregs; i++) {
      CHECK_PATTERN(regs[i].p, regs[i].n, regs[i].seed);
      munmap(regs[i].p, regs[i].n);
    }
    for (int k = 0; k < NB; k++) {
      if (!blocks[k]) continue;
      CHECK_PATTERN(blocks[k], bsize[k], (uint64_t)k + 7);
      free(blocks[k]);
    }
    printf("  %d program regions mapped beside shardmalloc's memory (page %zu)\n", nregs, page);
  }
  return sm_test_summary();
}
