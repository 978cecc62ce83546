/* extra-util.h: helpers shared by the tests in test/extra.
 *
 * run_child(): run this very program again (/proc/self/exe) as a child with extra arguments and
 * environment (LD_PRELOAD=<some shardmalloc variant>, SHARDMALLOC_* options), capture its stdout
 * and stderr, and report how it ended.  The parent is never the process that commits the misuse. */
#ifndef SM_EXTRA_UTIL_H
#define SM_EXTRA_UTIL_H

#include "sm-test.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <time.h>

typedef struct child_result_s {
  int status;      /* raw wait status */
  char out[65536]; /* stdout + stderr interleaved (both go to one pipe) */
  size_t out_len;
} child_result_t;

__attribute__((unused)) static bool child_exited(const child_result_t *r, int code) { return WIFEXITED(r->status) && WEXITSTATUS(r->status) == code; }
__attribute__((unused)) static bool child_signaled(const child_result_t *r, int sig) { return WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig; }

/* "exit 0", "signal 11 (Segmentation fault)" */
__attribute__((unused)) static const char *child_how(const child_result_t *r) {
  static char buf[96];
  if (WIFEXITED(r->status)) snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(r->status));
  else if (WIFSIGNALED(r->status)) snprintf(buf, sizeof buf, "signal %d (%s)", WTERMSIG(r->status), strsignal(WTERMSIG(r->status)));
  else snprintf(buf, sizeof buf, "status %#x", r->status);
  return buf;
}

/* the child's output, indented, for failure messages */
__attribute__((unused)) static const char *child_output(const child_result_t *r) {
  static char buf[4096];
  size_t n = r->out_len < sizeof buf - 64 ? r->out_len : sizeof buf - 64;
  size_t k = 0;
  buf[k++] = '\n';
  for (size_t i = 0; i < n && k < sizeof buf - 16; i++) {
    buf[k++] = r->out[i];
    if (r->out[i] == '\n' && i + 1 < n) { buf[k++] = ' '; buf[k++] = ' '; buf[k++] = '|'; buf[k++] = ' '; }
  }
  if (r->out_len > n) k += (size_t)snprintf(buf + k, sizeof buf - k, "  | ... (%zu bytes more)", r->out_len - n);
  buf[k] = 0;
  return buf;
}

__attribute__((unused)) static bool child_says(const child_result_t *r, const char *text) { return strstr(r->out, text) != NULL; }

/* the permissions of the mapping holding addr, per /proc/self/maps ("" if none) */
__attribute__((unused)) static void addr_perms(uintptr_t addr, char perms[8]) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  perms[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char pr[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, pr) == 3 && addr >= lo && addr < hi) memcpy(perms, pr, 8);
  }
  if (f) fclose(f);
}


/* Run /proc/self/exe args... with env (NULL-terminated "NAME=value" list, added to ours; "NAME="
 * with an empty value removes NAME). Kills the child after timeout_s seconds. */
__attribute__((unused)) static void run_child(child_result_t *r, char *const env[], char *const args[], int timeout_s) {
  int fd[2];
  memset(r, 0, sizeof *r);
  fflush(stdout);
  fflush(stderr);
  if (pipe(fd) != 0) { perror("pipe"); exit(2); }
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); exit(2); }
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    for (int i = 0; env != NULL && env[i] != NULL; i++) {
      char name[128];
      const char *eq = strchr(env[i], '=');
      size_t n = eq ? (size_t)(eq - env[i]) : strlen(env[i]);
      if (n >= sizeof name) n = sizeof name - 1;
      memcpy(name, env[i], n);
      name[n] = 0;
      if (eq && eq[1]) setenv(name, eq + 1, 1);
      else unsetenv(name);
    }
    char *argv[32];
    int k = 0;
    argv[k++] = "child";
    for (int i = 0; args[i] != NULL && k < 31; i++) argv[k++] = args[i];
    argv[k] = NULL;
    execv("/proc/self/exe", argv);
    perror("execv");
    _exit(127);
  }
  close(fd[1]);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool killed = false;
  for (;;) {
    struct pollfd p = {fd[0], POLLIN, 0};
    int rc = poll(&p, 1, 200);
    if (rc > 0) {
      char buf[4096];
      ssize_t n = read(fd[0], buf, sizeof buf);
      if (n <= 0) break;
      size_t room = sizeof r->out - 1 - r->out_len;
      size_t m = (size_t)n < room ? (size_t)n : room;
      memcpy(r->out + r->out_len, buf, m);
      r->out_len += m;
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!killed && t1.tv_sec - t0.tv_sec > timeout_s) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  close(fd[0]);
  r->out[r->out_len] = 0;
  waitpid(pid, &r->status, 0);
}

__attribute__((unused)) static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((unused)) static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

/* RSS without allocating (fopen would call malloc, which matters in tests measuring the heap) */
__attribute__((unused)) static size_t rss_now(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  unsigned long size = 0, res = 0;
  if (sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

#endif
