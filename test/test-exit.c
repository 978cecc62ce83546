/* test-exit: allocation in every phase of process exit (DROPIN 16): atexit and on_exit handlers
 * (one registered from inside another), the executable's and a library's destructors, pthread_key
 * destructors that allocate and re-arm their key, and a thread still allocating when exit() runs.
 * The scenario runs in a child; it writes markers to a pipe, which the parent checks. */
#include "sm-test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "shardmalloc.h"

void exitlib_touch(void);
extern int exitlib_fd;

static int out_fd = -1;
static void mark(const char *what, int ok) {
  if (out_fd < 0) return;
  char buf[128];
  int n = snprintf(buf, sizeof buf, "MARK %s %s\n", what, ok ? "ok" : "FAILED");
  if (write(out_fd, buf, (size_t)n) < 0) _exit(5);
}

static int churn(int rounds) { /* allocate, check, free; returns 1 if everything was right */
  int ok = 1;
  void *keep[64] = {0};
  for (int i = 0; i < rounds; i++) {
    size_t n = (size_t)(i * 7919 % 70000) + 1;
    char *p = malloc(n);
    if (!p || !sm_check_owned(p)) return 0;
    fill_pattern(p, n, n);
    int k = i % 64;
    if (keep[k]) {
      size_t m = (size_t)((i - 64) * 7919 % 70000) + 1;
      ok &= verify_pattern(keep[k], m, m) == (size_t)-1;
      free(keep[k]);
    }
    keep[k] = p;
  }
  for (int k = 0; k < 64; k++) free(keep[k]);
  return ok;
}

static void atexit_inner(void) { mark("atexit-registered-in-handler", churn(2000)); }
static void atexit_outer(void) {
  mark("atexit", churn(5000));
  atexit(atexit_inner); /* registering during exit: runs next */
  char *leak = strdup("allocated in an atexit handler and never freed");
  (void)leak;
}
static void on_exit_handler(int status, void *arg) {
  int ok = status == 0 && arg && !strcmp(arg, "on_exit arg");
  free(arg);
  mark("on_exit", ok && churn(1000));
}
__attribute__((destructor)) static void exe_destructor(void) { mark("exe-destructor", churn(3000)); }

/* pthread_key destructors: allocate, free the old value and re-arm the key a few times */
static pthread_key_t key;
static atomic_int key_runs;
static void key_dtor(void *v) {
  int round = *(int *)v;
  free(v);
  int ok = churn(200);
  if (!ok) mark("key-destructor-churn", 0);
  atomic_fetch_add(&key_runs, 1);
  if (round < 3) { /* re-arm: glibc calls us again, up to PTHREAD_DESTRUCTOR_ITERATIONS rounds */
    int *nv = malloc(sizeof(int) * 100);
    *nv = round + 1;
    pthread_setspecific(key, nv);
  }
}
static void *key_thread(void *arg) {
  (void)arg;
  int *v = malloc(sizeof(int) * 100);
  *v = 1;
  pthread_setspecific(key, v);
  churn(500);
  return NULL;
}

static atomic_int stop_busy;
static void *busy_thread(void *arg) { /* still allocating when the main thread calls exit() */
  (void)arg;
  while (!atomic_load(&stop_busy)) {
    void *p = malloc(1000);
    free(malloc(50));
    free(p);
  }
  return NULL;
}

static void scenario(void) {
  exitlib_touch();
  atexit(atexit_outer);
  on_exit(on_exit_handler, strdup("on_exit arg"));
  pthread_key_create(&key, key_dtor);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, key_thread, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  mark("key-destructors-ran-3-rounds-x4-threads", atomic_load(&key_runs) == 12);
  pthread_t b;
  pthread_create(&b, NULL, busy_thread, NULL);
  usleep(20000);
  mark("main", churn(1000));
  exit(0); /* the busy thread is still running */
}

int main(void) {
  sm_test_name = "test-exit";
  setvbuf(stdout, NULL, _IOLBF, 0);
  int fds[2];
  if (pipe(fds)) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    out_fd = fds[1];
    exitlib_fd = fds[1];
    scenario();
  }
  close(fds[1]);
  char buf[8192];
  size_t len = 0;
  ssize_t r;
  while ((r = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)r;
  buf[len] = 0;
  int st = 0;
  waitpid(pid, &st, 0);
  printf("child's markers:\n%s", buf);
  static const char *const expected[] = {
      "MARK key-destructors-ran-3-rounds-x4-threads ok", "MARK main ok", "MARK atexit ok",
      "MARK atexit-registered-in-handler ok", "MARK on_exit ok", "MARK exe-destructor ok",
      "MARK lib-destructor ok"};
  SECTION("allocation in atexit, on_exit, destructors, key destructors, with a busy thread") {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: expected exit status 0, seen %s %d",
          WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
      CHECK(strstr(buf, expected[i]) != NULL, "expected marker \"%s\", not seen", expected[i]);
    CHECK(strstr(buf, "FAILED") == NULL, "expected no FAILED marker, seen one%s", "");
  }
  return sm_test_summary();
}
