/* mstress-style run, written from mimalloc's description of its stress test: many allocations
 * and reallocations, objects migrating between threads through a shared transfer array, and the
 * worker threads created and destroyed several times while some of their objects stay alive
 * (in the transfer array and in the per-slot leftovers handed to the next generation).
 *
 * Every object describes itself: the first 8 bytes hold a key, the next 8 its size, and a sample
 * of the payload (every 61st byte and the last byte) holds bytes derived from the key. Contents
 * are checked before every free and after every realloc (which must keep the old contents).
 *
 *   mstress THREADS ROUNDS ITERATIONS_PER_ROUND [SEED]
 * Prints: RESULT secs=<s> ops=<n>
 */
#include "common.h"

#define LOCAL_MAX 512
#define TRANSFER_PER_THREAD 1000

static int nthreads;
static long rounds, iters;
static uint64_t seed;
static _Atomic(uint64_t *) *transfer;
static long ntransfer;
static uint64_t **leftovers[1024]; /* per worker index: objects kept alive for the next generation */
static long nleft[1024];

static inline unsigned char pat(uint64_t key, size_t i) { return (unsigned char)((key >> ((i & 7) * 8)) + i); }

static void obj_fill(uint64_t *o, uint64_t key, size_t size) {
  unsigned char *c = (unsigned char *)o;
  o[0] = key;
  o[1] = size;
  for (size_t i = 16; i < size; i += 61) c[i] = pat(key, i);
  if (size > 16) c[size - 1] = pat(key, size - 1);
}
static void obj_check(const uint64_t *o, size_t size_limit, const char *where) {
  const unsigned char *c = (const unsigned char *)o;
  uint64_t key = o[0];
  size_t size = (size_t)o[1];
  if (size < 16 || (size_limit && size != size_limit) || size > (64u << 20))
    verify_fail("mstress %s: object %p has a corrupt header (size %zu)", where, (const void *)o, size);
  for (size_t i = 16; i < size; i += 61)
    if (c[i] != pat(key, i)) verify_fail("mstress %s: object %p byte %zu corrupted", where, (const void *)o, i);
  if (size > 16 && c[size - 1] != pat(key, size - 1)) verify_fail("mstress %s: object %p last byte corrupted", where, (const void *)o);
}

static size_t pick_size(rng_t *r) {
  uint32_t k = rng_below(r, 1000);
  if (k < 900) return 16 + rng_below(r, 241);          /* 16..256 */
  if (k < 990) return 256 + rng_below(r, 3841);        /* 256..4096 */
  if (k < 999) return 4096 + rng_below(r, 61441);      /* 4 KiB..64 KiB */
  return 65536 + rng_below(r, 458753);                 /* 64 KiB..512 KiB */
}

static uint64_t *obj_alloc(rng_t *r) {
  size_t s = pick_size(r);
  uint64_t *o = malloc(s);
  if (!o) oom_fail(s);
  obj_fill(o, rng_next(r), s);
  return o;
}
static void obj_free(uint64_t *o, const char *where) {
  obj_check(o, 0, where);
  free(o);
}

typedef struct {
  _Alignas(CACHE_LINE) int id; /* a worker writes its counters on every operation */
  long round;
  long na, nf, nr;
} warg_t;

static void *worker(void *arg) {
  warg_t *a = (warg_t *)arg;
  rng_t rng;
  rng_seed(&rng, seed * 1000003 + (uint64_t)a->round * 1009 + (uint64_t)a->id);
  uint64_t *local[LOCAL_MAX];
  long n = 0;
  /* adopt what the previous generation left behind in this slot */
  for (long i = 0; i < nleft[a->id]; i++) local[n++] = leftovers[a->id][i];
  nleft[a->id] = 0;
  for (long it = 0; it < iters; it++) {
    uint32_t k = rng_below(&rng, 100);
    if (k < 40 || n == 0) { /* allocate */
      if (n == LOCAL_MAX) {
        uint32_t j = rng_below(&rng, (uint32_t)n);
        obj_free(local[j], "free (full)");
        a->nf++;
        local[j] = local[--n];
      }
      local[n++] = obj_alloc(&rng);
      a->na++;
    } else if (k < 55) { /* grow with realloc, checking that contents survive */
      uint32_t j = rng_below(&rng, (uint32_t)n);
      uint64_t *o = local[j];
      size_t old = (size_t)o[1];
      obj_check(o, 0, "before realloc");
      size_t ns = old + old / 2 + rng_below(&rng, 64);
      if (ns > (2u << 20)) ns = 16 + rng_below(&rng, 241); /* too big: shrink instead */
      uint64_t *p = realloc(o, ns);
      if (!p) oom_fail(ns);
      size_t keep = ns < old ? ns : old;
      /* the first keep bytes must be intact: check the sample that lies inside them */
      const unsigned char *c = (const unsigned char *)p;
      if ((size_t)p[1] != old)
        verify_fail("mstress: realloc lost the header of %p", (void *)p);
      for (size_t i = 16; i + 1 < keep; i += 61)
        if (c[i] != pat(p[0], i)) verify_fail("mstress: realloc from %zu to %zu lost byte %zu", old, ns, i);
      obj_fill(p, p[0], ns);
      local[j] = p;
      a->nr++;
    } else if (k < 80) { /* free */
      uint32_t j = rng_below(&rng, (uint32_t)n);
      obj_free(local[j], "free");
      a->nf++;
      local[j] = local[--n];
    } else { /* swap with the shared transfer array: objects migrate between threads */
      uint32_t j = rng_below(&rng, (uint32_t)n);
      uint32_t t = rng_below(&rng, (uint32_t)ntransfer);
      uint64_t *got = atomic_exchange(&transfer[t], local[j]);
      if (got) {
        obj_check(got, 0, "received");
        local[j] = got;
      } else {
        local[j] = local[--n];
      }
    }
  }
  /* die: free half, leave the other half for the next generation of this slot */
  leftovers[a->id] = realloc(leftovers[a->id], LOCAL_MAX * sizeof(uint64_t *));
  for (long i = 0; i < n; i++) {
    if (i & 1) leftovers[a->id][nleft[a->id]++] = local[i];
    else {
      obj_free(local[i], "free (thread end)");
      a->nf++;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  nthreads = (int)arg_long(argc, argv, 1, 2);
  rounds = arg_long(argc, argv, 2, 10);
  iters = arg_long(argc, argv, 3, 100000);
  seed = (uint64_t)arg_long(argc, argv, 4, 11);
  if (nthreads < 1 || nthreads > 1024 || rounds < 1) return 2;
  ntransfer = (long)nthreads * TRANSFER_PER_THREAD;
  transfer = calloc((size_t)ntransfer, sizeof(*transfer));
  warg_t *args = xcalloc_lines((size_t)nthreads, sizeof(warg_t));
  pthread_t *th = calloc((size_t)nthreads, sizeof(pthread_t));
  long na = 0, nf = 0, nr = 0;
  double t0 = now_sec();
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < nthreads; i++) {
      memset(&args[i], 0, sizeof args[i]);
      args[i].id = i;
      args[i].round = r;
      th[i] = spawn(worker, &args[i]);
    }
    for (int i = 0; i < nthreads; i++) {
      pthread_join(th[i], NULL);
      na += args[i].na;
      nf += args[i].nf;
      nr += args[i].nr;
    }
  }
  /* the main thread frees everything that outlived its threads */
  for (long t = 0; t < ntransfer; t++) {
    uint64_t *o = atomic_load(&transfer[t]);
    if (o) {
      obj_free(o, "final (transfer)");
      nf++;
    }
  }
  for (int i = 0; i < nthreads; i++) {
    for (long j = 0; j < nleft[i]; j++) {
      obj_free(leftovers[i][j], "final (leftover)");
      nf++;
    }
    free(leftovers[i]);
  }
  double secs = now_sec() - t0;
  if (na != nf) verify_fail("mstress: %ld allocations but %ld frees", na, nf);
  printf("RESULT secs=%.6f ops=%ld\n", secs, na + nf + nr);
  free(transfer);
  free(args);
  free(th);
  return 0;
}
