/* Large blocks: 64 KiB to 32 MiB, sizes log-uniform, with reallocs that grow blocks (x1.25 to x2)
 * until they pass 32 MiB. At most 8 blocks are live. Every 4 KiB page of a block is written when
 * the block gets it (so the memory is really used) and checked before a free and after a realloc.
 *
 *   large OPERATIONS [SEED]
 * Prints: RESULT secs=<s> ops=<n> bytes=<total bytes requested>
 */
#include "common.h"
#include <math.h>

#define LIVE 8
#define MINSZ (64u << 10)
#define MAXSZ (32u << 20)
#define PAGE 4096

typedef struct {
  unsigned char *p;
  size_t size;
  uint64_t key;
} blk_t;

static inline unsigned char pg(uint64_t key, size_t off) { return (unsigned char)((key >> ((off >> 12) & 56)) ^ (off >> 12)); }

static void touch(blk_t *b, size_t from) {
  for (size_t off = (from + PAGE - 1) & ~(size_t)(PAGE - 1); off < b->size; off += PAGE) b->p[off] = pg(b->key, off);
  b->p[b->size - 1] = pg(b->key, b->size - 1);
}
static void verify(const blk_t *b, size_t upto, const char *where) {
  for (size_t off = 0; off < upto; off += PAGE)
    if (b->p[off] != pg(b->key, off)) verify_fail("large %s: block %p (%zu bytes) page at %zu corrupted", where, (void *)b->p, b->size, off);
}

int main(int argc, char **argv) {
  long ops = arg_long(argc, argv, 1, 2000);
  uint64_t seed = (uint64_t)arg_long(argc, argv, 2, 5);
  rng_t r;
  rng_seed(&r, seed);
  blk_t live[LIVE];
  memset(live, 0, sizeof live);
  double lmin = log((double)MINSZ), lmax = log((double)MAXSZ);
  uint64_t requested = 0;
  long nreal = 0;
  double t0 = now_sec();
  for (long i = 0; i < ops; i++) {
    blk_t *b = &live[rng_below(&r, LIVE)];
    if (b->p && (rng_next(&r) & 1)) {
      size_t grow = b->size + (size_t)((double)b->size * (0.25 + 0.75 * (double)rng_below(&r, 1000) / 1000.0));
      if (grow <= MAXSZ) {
        verify(b, b->size, "before realloc");
        unsigned char *np = realloc(b->p, grow);
        if (!np) oom_fail(grow);
        size_t old = b->size;
        b->p = np;
        verify(b, old, "after realloc");
        b->size = grow;
        touch(b, old);
        requested += grow - old;
        nreal++;
        continue;
      }
    }
    if (b->p) {
      verify(b, b->size, "before free");
      if (b->p[b->size - 1] != pg(b->key, b->size - 1)) verify_fail("large: last byte of block corrupted");
      free(b->p);
    }
    b->size = (size_t)exp(lmin + (lmax - lmin) * (double)rng_below(&r, 1u << 20) / (double)(1u << 20));
    if (b->size < MINSZ) b->size = MINSZ;
    b->p = malloc(b->size);
    if (!b->p) oom_fail(b->size);
    b->key = rng_next(&r);
    touch(b, 0);
    requested += b->size;
  }
  for (int j = 0; j < LIVE; j++)
    if (live[j].p) {
      verify(&live[j], live[j].size, "final");
      free(live[j].p);
    }
  double secs = now_sec() - t0;
  printf("RESULT secs=%.6f ops=%ld reallocs=%ld bytes=%llu\n", secs, ops, nreal, (unsigned long long)requested);
  return 0;
}
