/* test-misuse: misuse is reported with a clear message in the debug and secure builds, and the heap
 * is never silently corrupted (DROPIN 20).  Usage: test-misuse LIBSHARDMALLOC-(DEBUG|SECURE).so
 * Each case runs in a child process with that library preloaded: the child commits the misuse,
 * then runs a heap-integrity workload (blocks of nearby sizes filled and checked) and
 * sm_collect(true).  The case passes when the library wrote a report to stderr and the workload
 * found no damage (the library may abort after reporting, or carry on). */
#include "sm-test.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "shardmalloc.h" /* the option names; the calls go through dlsym */

static char global_buf[64];
static void *thread_free(void *p) {
  free(p);
  return NULL;
}
static void *thread_free_all(void *arg) { /* frees blocks[0..] until a NULL */
  for (void **b = arg; *b != NULL; b++) free(*b);
  return NULL;
}
/* a write after free of p, whose usable size was `end`: its first `len` bytes, and the word past
 * its usable size, where the secure build keeps a free block's list link (the debug build checks
 * every byte of a freed block) */
static void write_after_free(void *p, size_t end, int byte, size_t len) {
  memset(p, byte, len);
  memset((char *)p + end, byte, 8);
}
static void churn_other_class(void) { /* traffic in a size class different from the victim's */
  for (int i = 0; i < 2000; i++) free(malloc(3000));
}


/* A one-bit write after free into a freed block's list link makes it lead to a live neighbour of
 * 128 bytes away (the debug build keeps links in the first word, the secure build in the last,
 * 120 here: both bytes are flipped). Reported when the list is walked; until 2026-11-28 the
 * delayed list's walk freed that live block after the report, and the secure build's random
 * reuse relinked it: it was handed out twice. Returns 3 where a block is held twice. */
typedef struct {
  char *p;
  size_t n;
} held_t;
static int held_cmp(const void *a, const void *b) {
  const held_t *x = a, *y = b;
  return x->p < y->p ? -1 : x->p > y->p;
}
static void forge_link(char *freed) {
  ((volatile char *)freed)[0] ^= (char)0x80;
  ((volatile char *)freed)[120] ^= (char)0x80;
}
static int forged_link(const char *c) {
  void (*set)(int, long) = (void (*)(int, long))dlsym(RTLD_DEFAULT, "sm_option_set");
  if (set != NULL) set(sm_option_abort_on_error, 0); /* on after the report: the hand-out is what is tested */
  enum { N = 3000 };
  static char *v[N];
  static bool gone[N];
  for (int i = 0; i < N; i++) v[i] = malloc(120); /* 128-byte blocks, full pages */
  if (!strcmp(c, "forged-link-delayed")) { /* another thread frees two blocks of full pages: the delayed list */
    for (int k = 0; k < 2; k++) {
      pthread_t t;
      pthread_create(&t, NULL, thread_free, v[300 + 1200 * k]);
      pthread_join(t, NULL);
      gone[300 + 1200 * k] = true;
    }
    forge_link(v[1500]);
  } else { /* the owner frees pairs in one page, to be reused from a random one */
    for (int j = 200, pairs = 0; j + 50 < N && pairs < 8; j += 400) {
      if (((uintptr_t)v[j] >> 16) != ((uintptr_t)v[j + 50] >> 16)) continue;
      free(v[j]);
      free(v[j + 50]);
      gone[j] = gone[j + 50] = true;
      forge_link(v[j + 50]);
      pairs++;
    }
  }
  static held_t held[2 * N];
  size_t n = 0;
  for (int i = 0; i < N; i++) held[n++] = (held_t){malloc(120), 120};
  for (int i = 0; i < N; i++)
    if (!gone[i]) held[n++] = (held_t){v[i], 120};
  qsort(held, n, sizeof held[0], held_cmp);
  for (size_t i = 1; i < n; i++)
    if (held[i].p != NULL && held[i - 1].p + held[i - 1].n > held[i].p) return 3;
  return 0;
}

/* A write of n bytes before a block, into the end of the block before it (an int written at
 * index -1 is 4): reported at that block's free. The last 4 bytes of a block are its size record
 * (padding.h); until 2026-11-28 the secure build saw an underflow only from 5 bytes on. */
static int ptr_cmp(const void *a, const void *b) {
  char *const *x = a, *const *y = b;
  return *x < *y ? -1 : *x > *y;
}
static void underflow(size_t n) {
  enum { N = 64 };
  char *v[N];
  for (int i = 0; i < N; i++) v[i] = malloc(100);
  qsort(v, N, sizeof v[0], ptr_cmp);
  ptrdiff_t step = PTRDIFF_MAX; /* the block size: the nearest neighbours */
  for (int i = 1; i < N; i++)
    if (v[i] - v[i - 1] < step) step = v[i] - v[i - 1];
  for (int i = 1; i < N; i++) {
    if (v[i] - v[i - 1] != step) continue;
    for (size_t k = 1; k <= n; k++) ((volatile char *)v[i])[-(ptrdiff_t)k] = 0x55;
    free(v[i - 1]);
    return;
  }
}

static void misuse(const char *c) {
  volatile char *p = malloc(100);
  if (!strncmp(c, "forged-link-", 12)) {
    exit(forged_link(c));
  } else if (!strncmp(c, "underflow-", 10)) {
    underflow(strtoul(c + 10, NULL, 10));
  } else if (!strcmp(c, "double-free")) {
    free((void *)p);
    free((void *)p);
  } else if (!strcmp(c, "double-free-remote-full")) {
    /* freed by another thread into a full page: the block waits on the owner's list of such
     * blocks, linked into another page; the owner frees it again (reported as an overflow by
     * the secure build until 2026-11-28) */
    enum { N = 4000 };
    static char *v[N];
    for (int i = 0; i < N; i++) v[i] = malloc(100); /* the first pages fill and go to the full queue */
    pthread_t t;
    pthread_create(&t, NULL, thread_free, v[10]);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, thread_free, v[2000]); /* another page: its link leads into the first */
    pthread_join(t, NULL);
    free(v[2000]);
  } else if (!strcmp(c, "double-free-delayed")) {
    free((void *)p);
    churn_other_class();
    free((void *)p);
  } else if (!strcmp(c, "double-free-other-thread")) {
    free((void *)p);
    pthread_t t;
    pthread_create(&t, NULL, thread_free, (void *)p);
    pthread_join(t, NULL);
  } else if (!strcmp(c, "free-interior")) {
    free((void *)(p + 32));
  } else if (!strcmp(c, "free-sized-interior-huge")) { /* a C++ delete through a base that is not first */
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized"); /* C23: not in glibc 2.36 */
    char *h = malloc(3000000);
    if (fs) fs(opaque_ptr(h + 16), 64); /* its recorded size was read past the mapping: a crash */
  } else if (!strcmp(c, "free-sized-twice")) {
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    if (fs) fs((void *)p, 100);
    if (fs) fs((void *)p, 100); /* was reported as a size mismatch */
  } else if (!strcmp(c, "free-unaligned")) {
    free((void *)(p + 1));
  } else if (!strcmp(c, "free-stack")) {
    char local[64];
    local[0] = 1;
    free(opaque_ptr(local));
  } else if (!strcmp(c, "free-global")) {
    free(opaque_ptr(global_buf));
  } else if (!strcmp(c, "free-never-allocated")) {
    char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    free(opaque_ptr(m + 4096));
  } else if (!strcmp(c, "free-1")) {
    free(opaque_ptr((void *)1));
  } else if (!strcmp(c, "realloc-freed")) {
    free((void *)p);
    churn_other_class();
    void *q = realloc((void *)p, 200);
    (void)q;
  } else if (!strcmp(c, "usable-size-freed")) {
    free((void *)p);
    if (malloc_usable_size((void *)p) != 0) _exit(6); /* reported, and 0 as for NULL */
  } else if (!strcmp(c, "usable-size-freed-huge")) { /* its mapping is unmapped at the free: it read there */
    char *h = malloc(80 << 20);
    free(h);
    if (malloc_usable_size(opaque_ptr(h)) != 0) _exit(6);
  } else if (!strcmp(c, "expand-freed")) { /* it wrote a live padding over the free block's link */
    void *(*expand)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "sm_expand");
    free((void *)p);
    if (expand((void *)p, 90) != NULL) _exit(6);
  } else if (!strcmp(c, "write-after-free-large") || !strcmp(c, "write-after-page-release")) {
    /* a large block is alone in its page, which goes at its free or soon after: the write lands
     * in a released page, before (first case) or after (second: sm_collect) it was released;
     * the next blocks of its size take that memory again. `keep` holds the segment. */
    void (*collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "sm_collect");
    char *keep = malloc(100000), *big = malloc(100000);
    free(big);
    if (!strcmp(c, "write-after-page-release")) collect(true);
    memset(opaque_ptr(big + 1000), 0x55, 16);
    for (int i = 0; i < 4; i++) (void)opaque_ptr(malloc(100000));
    (void)opaque_ptr(keep);
  } else if (!strcmp(c, "write-after-free-small-page")) { /* the last block of its page */
    void (*collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "sm_collect");
    char *b = malloc(9000);
    free(b);
    memset(opaque_ptr(b + 100), 0x55, 16);
    collect(true);
  } else if (!strcmp(c, "write-past-end")) {
    /* past the usable size: the requested 100 bytes in the debug build, up to the canary in the
     * secure one */
    volatile char *q = opaque_ptr((void *)p);
    size_t end = malloc_usable_size((void *)p);
    for (size_t i = end; i < end + 4; i++) q[i] = 0x55;
    free((void *)p);
  } else if (!strcmp(c, "write-after-free")) {
    size_t end = malloc_usable_size((void *)p);
    free((void *)p);
    write_after_free((void *)p, end, 0x55, 16);
  } else if (!strcmp(c, "write-zero-after-free")) { /* 0 into the link word only: no plain NULL */
    size_t end = malloc_usable_size((void *)p);
    free((void *)p);
    write_after_free((void *)p, end, 0, 8);
  } else if (!strcmp(c, "free-after-heap-destroy")) {
    /* blocks of a destroyed heap, whose segment a new heap takes back from the cache: its first
     * page of the same class lies where theirs was, so most of them are carved blocks on its free
     * list again (unless a bad free is caught, the new heap then hands one block out twice) */
    void *(*heap_new)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "sm_heap_new");
    void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "sm_heap_malloc");
    void (*heap_destroy)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "sm_heap_destroy");
    enum { N = 36 }; /* the first extension of a page of 112-byte blocks */
    void *old[N], *fresh[2 * N];
    void *h = heap_new();
    for (int i = 0; i < N; i++) old[i] = heap_malloc(h, 100);
    heap_destroy(h);
    h = heap_new();
    void *first = heap_malloc(h, 100);
    for (int i = 0; i < N; i++)
      if (old[i] != first) free(old[i]);
    for (int i = 0; i < 2 * N; i++) {
      fresh[i] = heap_malloc(h, 100);
      for (int j = 0; j < i; j++)
        if (fresh[j] == fresh[i]) _exit(3); /* the same block handed out twice */
    }
  } else if (!strcmp(c, "write-after-remote-free") || !strcmp(c, "write-after-delayed-free")) {
    /* the link of a block another thread freed: it waits on its page's list of remote frees, or
     * (the first one freed into a full page) on the owner's list of delayed frees */
    enum { N = 2000 }; /* more than a page of 112-byte blocks holds: the first pages are full */
    static void *blocks[N + 1];
    for (int i = 0; i < N; i++) blocks[i] = malloc(100);
    blocks[N] = NULL;
    size_t end = malloc_usable_size(blocks[0]);
    pthread_t t;
    pthread_create(&t, NULL, thread_free_all, blocks);
    pthread_join(t, NULL);
    write_after_free(blocks[strcmp(c, "write-after-remote-free") ? 0 : 10], end, 0x55, 16);
  }
}

/* exit 3 when the heap was damaged */
static int integrity(void) {
  enum { N = 3000 };
  static char *b[N];
  static size_t n[N];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      n[i] = (size_t)(i % 5) * 40 + 60; /* 60..220: the victim's neighbourhood */
      b[i] = malloc(n[i]);
      if (!b[i]) return 4;
      fill_pattern(b[i], n[i], (uint64_t)i + (uint64_t)round * N);
    }
    for (int i = 0; i < N; i++)
      for (int j = i + 1; j < i + 3 && j < N; j++)
        if (b[i] == b[j]) return 3; /* the same block handed out twice */
    for (int i = 0; i < N; i++) {
      if (verify_pattern(b[i], n[i], (uint64_t)i + (uint64_t)round * N) != (size_t)-1) return 3;
      free(b[i]);
    }
  }
  void (*collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "sm_collect");
  if (collect) collect(true);
  return 0;
}

static const char *const cases[] = {"double-free", "double-free-delayed", "double-free-other-thread", "double-free-remote-full",
                                    "free-interior", "free-sized-interior-huge", "free-sized-twice", "free-unaligned", "free-stack", "free-global",
                                    "free-never-allocated", "free-1", "realloc-freed", "usable-size-freed",
                                    "usable-size-freed-huge", "expand-freed", "write-past-end", "write-after-free-large",
                                    "write-after-page-release", "write-after-free-small-page",
                                    "write-after-free", "write-zero-after-free", "write-after-remote-free",
                                    "write-after-delayed-free", "free-after-heap-destroy", "forged-link-delayed",
                                    "forged-link-reuse", "underflow-1", "underflow-4", "underflow-8"};

/* what the report must say where the misuse is to be caught at the bad call itself, not later
 * (a corrupted list found by a later malloc also reports, but too late to name the culprit) */
/* the debug build's alone: the secure build checks no freed byte but its list link */
static bool debug_only(const char *c) { return !strncmp(c, "write-after-free-", 17) || !strcmp(c, "write-after-page-release"); }

static const char *expected_report(const char *c) {
  if (!strcmp(c, "free-sized-interior-huge")) return "interior pointer";
  if (!strcmp(c, "free-sized-twice") || !strcmp(c, "double-free-remote-full")) return "double free";
  /* into the size record alone: named as an underflow; reaching the canary too, from either side */
  if (!strcmp(c, "underflow-1") || !strcmp(c, "underflow-4")) return "buffer underflow into block";
  if (!strcmp(c, "underflow-8")) return "before the block after it";
  if (debug_only(c)) return "write after free";
  /* a call other than free names itself */
  if (!strcmp(c, "realloc-freed")) return "realloc of";
  if (!strncmp(c, "usable-size-", 12)) return "malloc_usable_size of";
  if (!strcmp(c, "expand-freed")) return "sm_expand of";
  return !strcmp(c, "free-after-heap-destroy") ? "free of" : NULL;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--case")) {
    if (!dlsym(RTLD_DEFAULT, "sm_check_owned")) return 5; /* not preloaded */
    free(malloc(10));
    misuse(argv[2]);
    return integrity();
  }
  sm_test_name = "test-misuse";
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: test-misuse LIBSHARDMALLOC.so\n");
    return 2;
  }
  if (access(argv[1], R_OK)) sm_skip("library not built");
  printf("library: %s\n", argv[1]);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    if (debug_only(cases[k]) && strstr(argv[1], "debug") == NULL) continue;
    SECTION(cases[k]) {
      int fds[2];
      if (pipe(fds)) return 2;
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        char env[4200];
        snprintf(env, sizeof env, "LD_PRELOAD=%s", argv[1]);
        char *envp[] = {env, NULL};
        char *args[] = {argv[0], "--case", (char *)cases[k], NULL};
        execve("/proc/self/exe", args, envp);
        _exit(127);
      }
      close(fds[1]);
      char msg[4096];
      size_t len = 0;
      ssize_t r;
      while ((r = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)r;
      msg[len] = 0;
      close(fds[0]);
      int st = 0;
      waitpid(pid, &st, 0);
      char how[64];
      if (WIFSIGNALED(st)) snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
      else snprintf(how, sizeof how, "exit %d", WEXITSTATUS(st));
      char *nl = strchr(msg, '\n');
      printf("      %-24s -> %s; report: %.*s\n", cases[k], how, nl ? (int)(nl - msg) : (int)len, len ? msg : "(none)");
      CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 5), "child: expected shardmalloc preloaded, seen it missing%s", "");
      CHECK(len > 0, "%s: expected a report on stderr, seen none (%s)", cases[k], how);
      const char *want = expected_report(cases[k]);
      CHECK(want == NULL || strstr(msg, want) != NULL, "%s: expected a report containing \"%s\", seen: %s", cases[k],
            want ? want : "", msg);
      CHECK(!(WIFEXITED(st) && (WEXITSTATUS(st) == 3 || WEXITSTATUS(st) == 4)),
            "%s: expected the heap intact after the misuse, seen %s (the same block handed out twice or a block's "
            "contents damaged)", cases[k], WEXITSTATUS(st) == 3 ? "damage" : "allocation failure");
      CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 6), "%s: expected the call to fail as for NULL (0 or NULL), seen it "
            "answer for the freed block", cases[k]);
      CHECK(!(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS) && len == 0),
            "%s: expected a report, seen a silent crash (%s)", cases[k], how);
    }
  }
  return sm_test_summary();
}
