/* cache-scratch and cache-thrash, written from the descriptions of the Hoard paper's false-sharing
 * tests (Berger et al., ASPLOS 2000).
 *
 * scratch (passive false sharing): the main thread allocates one small object per thread, one
 * right after the other, and hands them out. Each thread frees the object it was given, then
 * repeatedly allocates an object of the same size, writes to it many times and frees it. An
 * allocator that hands the freed (neighbouring) memory back to that thread makes threads write
 * to the same cache line.
 * thrash (active false sharing): the same, but no object is handed out: each thread allocates its
 * own objects. An allocator that places small objects of different threads in the same cache line
 * makes the threads fight over it.
 *
 *   cache scratch|thrash THREADS ITERATIONS REPETITIONS [OBJSIZE=8]
 * Prints: RESULT secs=<s> writes=<n>
 */
#include "common.h"

static int scratch;
static long iterations, repetitions;
static size_t objsize;
static char **given;

typedef struct {
  int id;
  uint64_t sum;
} carg_t;

static void *worker(void *arg) {
  carg_t *a = (carg_t *)arg;
  if (scratch) {
    check_block(given[a->id], objsize, "cache-scratch (given object)");
    free(given[a->id]);
  }
  uint64_t sum = 0;
  for (long i = 0; i < iterations; i++) {
    volatile unsigned char *p = malloc(objsize);
    if (!p) oom_fail(objsize);
    for (size_t k = 0; k < objsize; k++) p[k] = (unsigned char)k;
    for (long r = 0; r < repetitions; r++)
      for (size_t k = 0; k < objsize; k++) p[k] = (unsigned char)(p[k] + 1);
    for (size_t k = 0; k < objsize; k++) {
      unsigned char want = (unsigned char)(k + (size_t)repetitions);
      if (p[k] != want) verify_fail("cache: byte %zu of object %p is %u, expected %u", k, (void *)p, p[k], want);
      sum += p[k];
    }
    free((void *)p);
  }
  a->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: cache scratch|thrash THREADS ITERATIONS REPETITIONS [OBJSIZE]\n");
    return 2;
  }
  scratch = strcmp(argv[1], "scratch") == 0;
  int nthreads = (int)arg_long(argc, argv, 2, 2);
  iterations = arg_long(argc, argv, 3, 1000);
  repetitions = arg_long(argc, argv, 4, 10000);
  objsize = (size_t)arg_long(argc, argv, 5, 8);
  if (nthreads < 1 || objsize < 1) return 2;
  given = calloc((size_t)nthreads, sizeof(char *));
  if (scratch)
    for (int i = 0; i < nthreads; i++) given[i] = xmalloc_tagged(objsize);
  carg_t *args = calloc((size_t)nthreads, sizeof(carg_t));
  pthread_t *th = calloc((size_t)nthreads, sizeof(pthread_t));
  double t0 = now_sec();
  for (int i = 0; i < nthreads; i++) {
    args[i].id = i;
    th[i] = spawn(worker, &args[i]);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  double secs = now_sec() - t0;
  uint64_t expect = 0;
  for (size_t k = 0; k < objsize; k++) expect += (unsigned char)(k + (size_t)repetitions);
  expect *= (uint64_t)iterations;
  for (int i = 0; i < nthreads; i++)
    if (args[i].sum != expect) verify_fail("cache: thread %d checksum %llu, expected %llu", i,
                                           (unsigned long long)args[i].sum, (unsigned long long)expect);
  printf("RESULT secs=%.6f writes=%ld\n", secs, (long)nthreads * iterations * repetitions * (long)objsize);
  free(args);
  free(th);
  free(given);
  return 0;
}
