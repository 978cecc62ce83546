/* test-firstcall: every entry point works as the very first call into the allocator, before any
 * constructor has run (DROPIN 14).  The call is made from the executable's .preinit_array, which
 * the dynamic loader runs before the initialisers of every shared library (shardmalloc's too).
 * The program runs itself once per entry point (SM_FIRST=<name>), so each is really first, with
 * SHARDMALLOC_PURGE_DELAY=77 in its environment: the options are read then too. */
#include "sm-test.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "shardmalloc.h"

/* exported by libshardmalloc.so (glibc 2.36 does not declare them, or only as compat symbols) */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
void cfree(void *p);
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_memalign(size_t alignment, size_t size);

static const char *const entry_points[] = {
    "malloc", "calloc", "realloc", "free", "reallocarray", "aligned_alloc", "posix_memalign", "memalign",
    "valloc", "pvalloc", "malloc_usable_size", "strdup", "sm_malloc", "sm_calloc", "sm_zalloc", "sm_realloc",
    "sm_malloc_aligned", "sm_usable_size", "sm_good_size", "sm_check_owned", "sm_free", "sm_collect",
    "malloc-huge", "malloc-zero", "thread-first", "free_sized", "free_aligned_sized", "cfree", "__libc_malloc",
    "__libc_calloc", "__libc_memalign"};
#define NENTRY (sizeof entry_points / sizeof entry_points[0])

static const char *first;       /* which entry point the pre-init ran */
static void *first_block;       /* the block it got */
static size_t first_size;       /* its size */
static int first_result = -1;   /* 0 ok, else the step that failed */

static void *thread_first(void *arg) { /* a thread whose very first action is malloc */
  (void)arg;
  char *p = malloc(100);
  if (p) memset(p, 7, 100);
  return p;
}

static int do_first(const char *ep) {
  void *p = NULL;
  size_t n = 100;
  if (!strcmp(ep, "malloc")) p = malloc(n);
  else if (!strcmp(ep, "calloc")) {
    p = calloc(n, 1);
    if (p && first_nonzero(p, n) != (size_t)-1) return 2;
  } else if (!strcmp(ep, "realloc")) p = realloc(NULL, n);
  else if (!strcmp(ep, "free")) { free(NULL); return 0; }
  else if (!strcmp(ep, "reallocarray")) p = reallocarray(NULL, 10, 10);
  else if (!strcmp(ep, "aligned_alloc")) { p = aligned_alloc(4096, n); if (p && ((uintptr_t)p & 4095)) return 3; }
  else if (!strcmp(ep, "posix_memalign")) { if (posix_memalign(&p, 256, n)) return 4; if ((uintptr_t)p & 255) return 3; }
  else if (!strcmp(ep, "memalign")) { p = memalign(64, n); if (p && ((uintptr_t)p & 63)) return 3; }
  else if (!strcmp(ep, "valloc")) { p = valloc(n); if (p && ((uintptr_t)p & 4095)) return 3; }
  else if (!strcmp(ep, "pvalloc")) { p = pvalloc(n); n = 4096; if (p && ((uintptr_t)p & 4095)) return 3; }
  else if (!strcmp(ep, "malloc_usable_size")) return malloc_usable_size(NULL) == 0 ? 0 : 5;
  else if (!strcmp(ep, "strdup")) { p = strdup("first call from libc"); n = 21; }
  else if (!strcmp(ep, "sm_malloc")) p = sm_malloc(n);
  else if (!strcmp(ep, "sm_calloc")) p = sm_calloc(1, n);
  else if (!strcmp(ep, "sm_zalloc")) p = sm_zalloc(n);
  else if (!strcmp(ep, "sm_realloc")) p = sm_realloc(NULL, n);
  else if (!strcmp(ep, "sm_malloc_aligned")) p = sm_malloc_aligned(n, 1 << 16);
  else if (!strcmp(ep, "sm_usable_size")) return sm_usable_size(NULL) == 0 ? 0 : 5;
  else if (!strcmp(ep, "sm_good_size")) return sm_good_size(100) >= 100 ? 0 : 5;
  else if (!strcmp(ep, "sm_check_owned")) { int x = 0; return sm_check_owned(&x) ? 5 : 0; }
  else if (!strcmp(ep, "sm_free")) { sm_free(NULL); return 0; }
  else if (!strcmp(ep, "sm_collect")) { sm_collect(true); return 0; }
  else if (!strcmp(ep, "malloc-huge")) { n = 50 << 20; p = malloc(n); }
  else if (!strcmp(ep, "malloc-zero")) { n = 0; p = malloc(0); }
  else if (!strcmp(ep, "thread-first")) {
    pthread_t t;
    if (pthread_create(&t, NULL, thread_first, NULL)) return 6;
    if (pthread_join(t, &p)) return 7;
  } else if (!strcmp(ep, "free_sized")) { free_sized(NULL, 0); return 0; }
  else if (!strcmp(ep, "free_aligned_sized")) { free_aligned_sized(NULL, 64, 0); return 0; }
  else if (!strcmp(ep, "cfree")) { cfree(NULL); return 0; }
  else if (!strcmp(ep, "__libc_malloc")) p = __libc_malloc(n);
  else if (!strcmp(ep, "__libc_calloc")) p = __libc_calloc(1, n);
  else if (!strcmp(ep, "__libc_memalign")) { p = __libc_memalign(128, n); if (p && ((uintptr_t)p & 127)) return 3; }
  else return 9;
  if (!p) return 1;
  if (n) memset(p, 0x3c, n); /* writable */
  first_block = p;
  first_size = n;
  return 0;
}

/* runs before every constructor: no stdio here, only the call under test */
static void preinit(int argc, char **argv, char **envp) {
  (void)argc;
  (void)argv;
  for (char **e = envp; *e; e++)
    if (!strncmp(*e, "SM_FIRST=", 9)) first = *e + 9;
  if (first) first_result = do_first(first);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_entry)(int, char **, char **) = preinit;

int main(int argc, char **argv) {
  sm_test_name = "test-firstcall";
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (first) { /* child: report on the first call made in pre-init */
    if (first_result != 0) {
      printf("first call %s failed at step %d (errno %d)\n", first, first_result, errno);
      return 1;
    }
    if (first_block) {
      if (!sm_check_owned(first_block)) {
        printf("first call %s: block %p is not owned by shardmalloc\n", first, first_block);
        return 1;
      }
      free(first_block);
    }
    /* the options came from the environment, although libc had not set `environ` yet (until
     * 2026-11-28 they were read from no environment then, silently) */
    if (sm_option_get(sm_option_purge_delay) != 77) {
      printf("first call %s: SHARDMALLOC_PURGE_DELAY=77 not read (purge_delay %ld)\n", first, sm_option_get(sm_option_purge_delay));
      return 1;
    }
    /* and everything works afterwards */
    void *q = malloc(1000);
    if (!q || !sm_check_owned(q)) return 1;
    free(q);
    return 0;
  }
  (void)argc;
  for (size_t i = 0; i < NENTRY; i++) {
    SECTION(entry_points[i]) {
      char envbuf[64];
      snprintf(envbuf, sizeof envbuf, "SM_FIRST=%s", entry_points[i]);
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        /* the library preloaded here (the secure and debug suites) is the one under test there too */
        char preload[4096] = "";
        if (getenv("LD_PRELOAD") != NULL) snprintf(preload, sizeof preload, "LD_PRELOAD=%s", getenv("LD_PRELOAD"));
        char *env[] = {envbuf, "SHARDMALLOC_PURGE_DELAY=77", preload[0] ? preload : NULL, NULL};
        execve("/proc/self/exe", argv, env);
        _exit(127);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "%s as the very first call (pre-init): expected exit 0, seen %s %d", entry_points[i],
            WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  return sm_test_summary();
}
