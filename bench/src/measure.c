/* Runs a program and reports its exit status, wall time and peak RSS.
 *
 *   measure OUTFILE PROGRAM [ARGS...]
 *
 * Why not measure from the (Python) harness directly: on Linux a child's ru_maxrss also counts
 * the memory of the process it was forked from (the pre-exec copy of the parent), which would add
 * the harness's own tens of MiB to every result. This helper is tiny, so what it adds is noise.
 * If BENCH_PRELOAD is set, the program (only) gets it as LD_PRELOAD. SIGTERM/SIGINT/SIGHUP are
 * passed on to the program. OUTFILE receives one line:
 *   exit=<code> signal=<sig> maxrss_kb=<kib> wall=<seconds> user=<s> sys=<s>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t child = -1;

static void forward(int sig) {
  if (child > 0) kill(child, sig);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: measure OUTFILE PROGRAM [ARGS...]\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  const char *pre = getenv("BENCH_PRELOAD");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 2;
  }
  if (pid == 0) {
    if (pre && *pre) setenv("LD_PRELOAD", pre, 1);
    unsetenv("BENCH_PRELOAD");
    execvp(argv[2], argv + 2);
    fprintf(stderr, "measure: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  child = pid;
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("wait4");
      return 2;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  FILE *f = fopen(argv[1], "w");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fprintf(f, "exit=%d signal=%d maxrss_kb=%ld wall=%.6f user=%.6f sys=%.6f\n",
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
          WIFSIGNALED(status) ? WTERMSIG(status) : 0, ru.ru_maxrss, wall,
          (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
  fclose(f);
  return 0;
}
