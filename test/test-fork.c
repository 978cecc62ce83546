/* test-fork: fork() in a multithreaded program (DROPIN 15).  Worker threads allocate, free and
 * hand blocks to each other without pause; another thread runs stdio in a loop (fflush(NULL),
 * getline, fprintf), which takes glibc's stdio locks; the main thread and one worker fork over and
 * over.  Each child checks and frees blocks the parent allocated, allocates, reallocates, starts a
 * thread and uses stdio, then exits; some also check that memory they free goes back.  The
 * program's own pthread_atfork handlers allocate and free as well.  One more thread keeps taking
 * the allocator's locks: it allocates huge blocks from a heap of its own (that heap's lock is held
 * around the mmap) and calls sm_collect (the heap list's lock); the child frees a huge block of
 * that heap and makes and deletes a heap of its own.  A child that hangs is killed after a timeout
 * and reported as a deadlock; a fork() that does not return is caught by a watchdog thread. */
#include "sm-test.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "shardmalloc.h"

#define NWORKERS 3
#define NSLOTS 256
#define NPARENT 64
#define FORKS_MAIN 60
#define FORKS_WORKER 25
#define CHILD_TIMEOUT_S 20
#define FORK_TIMEOUT_S 30

static _Atomic(void *) slots[NSLOTS];
static atomic_int stop;
static atomic_long progress;           /* bumped by every completed fork, watched by the watchdog */
static atomic_int failed_children, hung_children, forks_done;
static char *parent_blocks[NPARENT];   /* allocated before the threads start, never touched by them */
static void *_Atomic heap_huge;        /* a huge block of heap_thread's heap, freed only by children */
static size_t parent_sizes[NPARENT];

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s) % 100;
  if (r < 70) return rnd(s) % 256 + 1;
  if (r < 95) return rnd(s) % 16384 + 1;
  return rnd(s) % (2 << 20) + 1;
}

/* the program's own pthread_atfork handlers allocate too */
/* per thread: several threads fork at once, and each fork runs the handlers in its own thread */
static __thread void *atfork_block;
static int atfork_child_ok;
static void atfork_prepare(void) { atfork_block = malloc(333); }
static void atfork_parent(void) { free(atfork_block); }
static void atfork_child(void) {
  void *p = malloc(4444);
  atfork_child_ok = p != NULL && atfork_block != NULL && sm_check_owned(atfork_block);
  free(atfork_block); /* allocated in the parent's prepare handler */
  free(p);
}

/* the child's work; returns 0 when everything was right */
static void *child_thread(void *arg) {
  (void)arg;
  void *p[100];
  for (int i = 0; i < 100; i++) p[i] = malloc((size_t)i * 100 + 1);
  for (int i = 0; i < 100; i++) free(p[i]);
  return malloc(10);
}
static int child_work(void) {
  alarm(CHILD_TIMEOUT_S); /* a deadlock kills the child with SIGALRM */
  for (int i = 0; i < NPARENT; i++) {
    if (!sm_check_owned(parent_blocks[i])) return 10;
    if (verify_pattern(parent_blocks[i], parent_sizes[i], (uint64_t)i) != (size_t)-1) return 11;
  }
  for (int i = 0; i < NPARENT; i += 2) free(parent_blocks[i]); /* blocks the parent allocated */
  for (int i = 1; i < NPARENT; i += 4) { /* and reallocate some */
    char *q = realloc(parent_blocks[i], parent_sizes[i] * 2 + 100);
    if (!q || verify_pattern(q, parent_sizes[i], (uint64_t)i) != (size_t)-1) return 12;
    free(q);
  }
  /* blocks the workers were passing around at the moment of the fork */
  for (int i = 0; i < NSLOTS; i++) free(atomic_exchange(&slots[i], NULL));
  uint64_t s = (uint64_t)getpid() * 2654435761u + 1;
  void *mine[200];
  for (int i = 0; i < 200; i++) {
    size_t n = pick_size(&s);
    mine[i] = malloc(n);
    if (!mine[i] || !sm_check_owned(mine[i])) return 13;
    fill_pattern(mine[i], n < 64 ? n : 64, (uint64_t)i);
  }
  for (int i = 0; i < 200; i++) free(mine[i]);
  if (getpid() % 8 == 0) { /* now and then: memory freed in the child goes back (sm_collect(true) works here) */
    size_t before = rss_bytes();
    enum { NB = 1024 };
    static void *big[NB];
    for (int i = 0; i < NB; i++) {
      big[i] = malloc(64 << 10);
      if (!big[i]) return 16;
      memset(big[i], 0x3e, 64 << 10);
    }
    for (int i = 0; i < NB; i++) free(big[i]);
    sm_collect(true);
    if (rss_bytes() > before + 32 * MiB) return 17;
  }
  if (atfork_child_ok != 1) return 18;
  void *hh = atomic_load(&heap_huge); /* its heap's lock may have been held at the fork */
  if (hh != NULL && !sm_check_owned(hh)) return 19;
  free(hh);
  sm_heap_t *h = sm_heap_new(); /* the heap list's lock may have been held at the fork */
  void *hb = h != NULL ? sm_heap_malloc(h, 5000) : NULL;
  if (hb == NULL) return 19;
  sm_heap_delete(h);
  free(hb);
  pthread_t t;
  if (pthread_create(&t, NULL, child_thread, NULL)) return 14;
  void *r = NULL;
  pthread_join(t, &r);
  free(r);
  FILE *f = fopen("/dev/null", "w");
  if (!f) return 15;
  fprintf(f, "child %d wrote this\n", (int)getpid());
  fclose(f);
  /* no fflush(NULL) here: it would lock every FILE, and the parent's getline thread may have held
   * one at the moment of the fork (glibc does not reset FILE locks in the child) */
  return 0;
}

static void do_fork(void) {
  pid_t pid = fork();
  if (pid < 0) {
    atomic_fetch_add(&failed_children, 1);
    return;
  }
  if (pid == 0) _exit(child_work());
  atomic_fetch_add(&progress, 1);
  int st = 0;
  /* wait with a timeout: a hung child is a deadlock */
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > CHILD_TIMEOUT_S + 5) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      atomic_fetch_add(&hung_children, 1);
      return;
    }
    poll(NULL, 0, 2);
  }
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) atomic_fetch_add(&hung_children, 1);
  else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (atomic_fetch_add(&failed_children, 1) < 5)
      fprintf(stderr, "child %d: expected exit 0, seen %s %d (10-11 parent block lost/damaged, 12 realloc, 13 malloc, "
                      "14 thread, 15 stdio, 16-17 64 MiB not given back after sm_collect(true), 18 atfork handler, "
                      "19 heap API)\n",
              (int)pid, WIFSIGNALED(st) ? "signal" : "exit code",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  atomic_fetch_add(&forks_done, 1);
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t s = (uint64_t)id * 7777 + 3;
  int forks = 0;
  long iter = 0;
  while (!atomic_load(&stop)) {
    size_t n = pick_size(&s);
    char *p = malloc(n);
    if (!p) continue;
    memset(p, id, n < 128 ? n : 128);
    free(atomic_exchange(&slots[rnd(&s) % NSLOTS], p)); /* frees another thread's block, often */
    void *q = malloc(pick_size(&s));
    q = realloc(q, pick_size(&s));
    free(q);
    if (id == 0 && forks < FORKS_WORKER && ++iter % 300 == 0) { /* a worker forks too */
      do_fork();
      forks++;
    }
  }
  return NULL;
}

/* Two stdio threads make the deadlock DROPIN 15 warns about possible: fork() takes glibc's stdio
 * list lock after the atfork prepare handlers ran; fflush(NULL) holds that list lock while it takes
 * each FILE's lock; getline holds its FILE's lock while it mallocs (here: growing a buffer to
 * 512 KiB, through the slow paths).  An allocator lock held across fork() closes the cycle. */
/* holds the allocator's locks as often as it can: a heap's around a huge allocation, the heap
 * list's in sm_collect */
static void *heap_thread(void *arg) {
  (void)arg;
  sm_heap_t *h = sm_heap_new();
  atomic_store(&heap_huge, h != NULL ? sm_heap_malloc(h, 6 << 20) : NULL);
  while (h != NULL && !atomic_load(&stop)) {
    sm_free(sm_heap_malloc(h, 4 << 20));
    sm_collect(false);
  }
  sm_free(atomic_load(&heap_huge));
  return NULL;
}

static char line_file[64];
static void *flush_thread(void *arg) {
  (void)arg;
  FILE *out = fopen("/dev/null", "w");
  while (!atomic_load(&stop)) {
    fprintf(out, "stdio thread line %ld\n", (long)atomic_load(&progress));
    fflush(NULL);
    char *s = NULL;
    if (asprintf(&s, "%d", 42) > 0) free(s);
  }
  fclose(out);
  return NULL;
}
static void *getline_thread(void *arg) {
  (void)arg;
  FILE *in = fopen(line_file, "r");
  if (!in) return NULL;
  while (!atomic_load(&stop)) {
    char *line = NULL; /* a fresh buffer each time: getline grows it with realloc under the FILE lock */
    size_t cap = 0;
    rewind(in);
    while (getline(&line, &cap, in) > 0) {}
    free(line);
    FILE *st = fopen("/proc/self/stat", "r"); /* FILE structures allocated and freed */
    if (st) fclose(st);
  }
  fclose(in);
  return NULL;
}

static void *watchdog(void *arg) { /* no malloc, no stdio here: it must work when they are stuck */
  (void)arg;
  long last = -1;
  int still = 0;
  while (!atomic_load(&stop)) {
    sleep(1);
    long now = atomic_load(&progress);
    still = now == last ? still + 1 : 0;
    last = now;
    if (still >= FORK_TIMEOUT_S) {
      static const char msg[] = "FAIL test-fork: no fork() completed for 30 s: deadlock in fork()\n";
      if (write(2, msg, sizeof msg - 1) < 0) {}
      _exit(1);
    }
  }
  return NULL;
}

/* ---- a fork while a thread walks the abandoned segments ----
 * With no purger, a thread that frees into segments of ended threads walks the abandoned list
 * itself every 1024 such frees, holding one segment off the list at a time. Until 2026-11-28 a
 * fork then gave the child that segment on no list: never adopted, never freed (2 of 20 children,
 * every run). Each child adopts everything abandoned with sm_collect(true); none may stay. */
#define WALK_BLOCKS 2000000
#define WALK_FORKS 20
static void *_Atomic *walk_blocks;
static atomic_int walk_stop;
static void *walk_alloc(void *arg) {
  (void)arg;
  for (size_t i = 0; i < WALK_BLOCKS; i++) walk_blocks[i] = malloc(16);
  return NULL;
}
static void *walk_free(void *arg) { /* each slot cleared first: a child frees no block twice */
  (void)arg;
  for (size_t i = 0; i < WALK_BLOCKS && !atomic_load(&walk_stop); i++) free(atomic_exchange(&walk_blocks[i], NULL));
  return NULL;
}
static long long abandoned_now(void) {
  static char json[1 << 16];
  const char *at = strstr(sm_stats_get_json(sizeof json, json), "\"abandoned\":");
  at = at != NULL ? strstr(at, "\"current\":") : NULL;
  return at != NULL ? strtoll(at + 10, NULL, 10) : -1;
}
static int fork_during_walk(void) { /* in a process of its own: no purger from the start */
  sm_option_set(sm_option_background_purge, 0);
  walk_blocks = calloc(WALK_BLOCKS, sizeof(void *));
  pthread_t t;
  for (int k = 0; k < 2; k++) { /* two ended threads' segments, then one thread freeing into them */
    pthread_create(&t, NULL, walk_alloc, NULL);
    pthread_join(t, NULL);
  }
  pthread_create(&t, NULL, walk_free, NULL);
  int stranded = 0;
  for (int f = 0; f < WALK_FORKS; f++) {
    usleep(300);
    pid_t pid = fork();
    if (pid == 0) {
      sm_collect(true);
      _exit(abandoned_now() == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    stranded += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  atomic_store(&walk_stop, 1);
  pthread_join(t, NULL);
  printf("      %d of %d children left with an abandoned segment after sm_collect(true)\n", stranded, WALK_FORKS);
  return stranded;
}

int main(void) {
  sm_test_name = "test-fork";
  setvbuf(stdout, NULL, _IOLBF, 0);
  SECTION("fork while a thread walks the abandoned segments (no purger): no child keeps one from adoption") {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(fork_during_walk() == 0 ? 0 : 1);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "expected every child to adopt every abandoned segment, seen status 0x%x", st);
  }
  for (int i = 0; i < NPARENT; i++) {
    parent_sizes[i] = i % 8 == 7 ? (size_t)(3 << 20) + (size_t)i : (size_t)(i * 997 % 50000) + 1;
    parent_blocks[i] = malloc(parent_sizes[i]);
    fill_pattern(parent_blocks[i], parent_sizes[i], (uint64_t)i);
  }
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  snprintf(line_file, sizeof line_file, "/tmp/sm-test-fork-%d.txt", (int)getpid());
  FILE *lf = fopen(line_file, "w");
  if (lf) { /* lines of 1 KiB .. 512 KiB */
    for (int len = 1024; len <= 512 * 1024; len *= 2) {
      for (int i = 0; i < len; i++) fputc('a' + i % 26, lf);
      fputc('\n', lf);
    }
    fclose(lf);
  }
  pthread_t w[NWORKERS], io, io2, wd, ht;
  pthread_create(&wd, NULL, watchdog, NULL);
  for (int i = 0; i < NWORKERS; i++) pthread_create(&w[i], NULL, worker, (void *)(intptr_t)i);
  pthread_create(&io, NULL, flush_thread, NULL);
  pthread_create(&io2, NULL, getline_thread, NULL);
  pthread_create(&ht, NULL, heap_thread, NULL);
  usleep(50000);
  for (int i = 0; i < FORKS_MAIN; i++) do_fork();
  while (atomic_load(&forks_done) < FORKS_MAIN + FORKS_WORKER && atomic_load(&hung_children) == 0) usleep(10000);
  atomic_store(&stop, 1);
  for (int i = 0; i < NWORKERS; i++) pthread_join(w[i], NULL);
  pthread_join(io, NULL);
  pthread_join(io2, NULL);
  pthread_join(ht, NULL);
  unlink(line_file);
  pthread_join(wd, NULL);
  SECTION("fork: threads allocating, fflush(NULL) and getline threads; child allocates, frees parent blocks") {
    CHECK_EQ(atomic_load(&forks_done), FORKS_MAIN + FORKS_WORKER);
    CHECK(atomic_load(&hung_children) == 0, "expected no child to hang, seen %d hung (deadlock after fork)",
          atomic_load(&hung_children));
    CHECK(atomic_load(&failed_children) == 0, "expected every child to exit 0, seen %d failures",
          atomic_load(&failed_children));
    for (int i = 0; i < NPARENT; i++) { /* the parent's blocks are untouched by the children */
      CHECK_PATTERN(parent_blocks[i], parent_sizes[i], (uint64_t)i);
      free(parent_blocks[i]);
    }
    for (int i = 0; i < NSLOTS; i++) free(atomic_exchange(&slots[i], NULL));
  }
  printf("%d forks (%d from the main thread, %d from a worker)\n", atomic_load(&forks_done), FORKS_MAIN, FORKS_WORKER);
  return sm_test_summary();
}
