/* Microbenchmark for the allocator's fast paths.
 *
 *   micro pairs OPS            single thread: malloc then free at once, sizes 8..1024 bytes
 *   micro xthread OPS          4 threads: 2 producers allocate (sizes 8..1024) and pass every block
 *                              through a lock-free queue to their own consumer, which frees it
 *                              (every free is a cross-thread free); OPS blocks in total
 *   micro walk WALKS [NODES]   single thread: allocate NODES (600,000) list nodes of 96 bytes, each
 *                              linked to the next one allocated, then walk the list WALKS times,
 *                              reading every node: the time of the walks only. Where consecutive
 *                              blocks are neighbours, the walk is a stream the CPU's prefetchers
 *                              follow; the nodes (57 MiB and more) do not fit in the caches.
 * Prints: RESULT mpairs=<millions of malloc/free pairs per second> pairs=<n> secs=<s>
 *    (walk: RESULT mnodes=<millions of nodes visited per second> nodes=<n> secs=<s>)
 */
#include "common.h"

#define NSIZES 4096
static uint16_t sizes[NSIZES];
static long per_producer;
static spsc_t queues[2];
static parker_t parkers[4]; /* producer 0 and 1, consumer 0 and 1 */
static _Atomic long g_freed;

static void *producer(void *arg) {
  int id = (int)(intptr_t)arg;
  pin_to_cpu_slot(2 * id); /* producer and consumer on different cores (see common.h) */
  unsigned k = (unsigned)id * 1237;
  for (long i = 0; i < per_producer; i++) {
    size_t s = sizes[k++ & (NSIZES - 1)];
    item_t it = {xmalloc_tagged(s), s};
    spsc_push(&queues[id], it);
  }
  spsc_push_done(&queues[id]);
  return NULL;
}
static void *consumer(void *arg) {
  int id = (int)(intptr_t)arg;
  pin_to_cpu_slot(2 * id + 1);
  long got = 0;
  for (; got < per_producer; got++) {
    item_t it = spsc_pop(&queues[id]);
    xfree_tagged(it.p, it.size, "micro xthread");
  }
  atomic_fetch_add(&g_freed, got);
  return NULL;
}

typedef struct walk_node_s {
  struct walk_node_s *next;
  uint64_t value;
  char payload[80];
} walk_node_t;

static int walk(long walks, long nodes) {
  walk_node_t *first = NULL, *last = NULL;
  for (long i = 0; i < nodes; i++) {
    walk_node_t *n = malloc(sizeof *n);
    if (!n) oom_fail(sizeof *n);
    n->next = NULL;
    n->value = (uint64_t)i;
    if (last) last->next = n;
    else first = n;
    last = n;
  }
  uint64_t sum = 0;
  double t0 = now_sec();
  for (long w = 0; w < walks; w++) {
    for (walk_node_t *n = first; n != NULL; n = n->next) sum += n->value;
    escape(first);
  }
  double secs = now_sec() - t0;
  if (sum != (uint64_t)walks * ((uint64_t)nodes * (uint64_t)(nodes - 1) / 2)) verify_fail("micro walk: checksum mismatch");
  for (walk_node_t *n = first, *next; n != NULL; n = next) {
    next = n->next;
    free(n);
  }
  printf("RESULT mnodes=%.4f nodes=%ld secs=%.6f\n", (double)(walks * nodes) / secs / 1e6, walks * nodes, secs);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: micro pairs|xthread OPS | micro walk WALKS [NODES]\n");
    return 2;
  }
  long ops = arg_long(argc, argv, 2, 10000000);
  if (strcmp(argv[1], "walk") == 0) return walk(ops, arg_long(argc, argv, 3, 600000));
  rng_t r;
  rng_seed(&r, 2024);
  for (int i = 0; i < NSIZES; i++) sizes[i] = (uint16_t)(8 + rng_below(&r, 1017));
  double t0, secs;
  long pairs;
  if (strcmp(argv[1], "pairs") == 0) {
    uint64_t sum = 0, want = 0;
    t0 = now_sec();
    for (long i = 0; i < ops; i++) {
      size_t s = sizes[i & (NSIZES - 1)];
      unsigned char *p = malloc(s);
      if (!p) oom_fail(s);
      p[0] = (unsigned char)i;
      p[s - 1] = (unsigned char)(i >> 8);
      escape(p);
      sum += (uint64_t)p[0] + p[s - 1];
      free(p);
    }
    secs = now_sec() - t0;
    for (long i = 0; i < ops; i++) want += (uint64_t)(unsigned char)i + (unsigned char)(i >> 8);
    if (sum != want) verify_fail("micro pairs: checksum mismatch");
    pairs = ops;
  } else if (strcmp(argv[1], "xthread") == 0) {
    per_producer = ops / 2;
    spsc_init(&queues[0], 1024, &parkers[0], &parkers[2]);
    spsc_init(&queues[1], 1024, &parkers[1], &parkers[3]);
    pthread_t th[4];
    t0 = now_sec();
    th[0] = spawn(consumer, (void *)0);
    th[1] = spawn(consumer, (void *)1);
    th[2] = spawn(producer, (void *)0);
    th[3] = spawn(producer, (void *)1);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    secs = now_sec() - t0;
    pairs = atomic_load(&g_freed);
    if (pairs != 2 * per_producer) verify_fail("micro xthread: freed %ld of %ld", pairs, 2 * per_producer);
    spsc_destroy(&queues[0]);
    spsc_destroy(&queues[1]);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  printf("RESULT mpairs=%.4f pairs=%ld secs=%.6f\n", (double)pairs / secs / 1e6, pairs, secs);
  return 0;
}
