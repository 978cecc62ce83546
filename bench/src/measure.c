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
 *
 * If BENCH_RSS_SAMPLES names a file, the program's RSS is also sampled every BENCH_RSS_INTERVAL_MS
 * (default 5) milliseconds from /proc/PID/statm (constant cost, unlike smaps, which walks the page
 * tables under the program's mmap lock) into that file: a first line "# t0=<CLOCK_MONOTONIC
 * seconds at the fork> interval_ms=<ms>", then one "<ms since t0> <rss KiB>" line per sample.
 * Sampling here rather than in the harness keeps the interval steady and the harness's own
 * scheduling out of the series. (The exit is then noticed up to one interval late: wall includes it.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Samples the RSS of pid until it exits; returns wait4's result like the plain wait below. */
static pid_t sample_until_exit(pid_t pid, int *status, struct rusage *ru, const char *path, long every_ms,
                               double t0) {
  FILE *out = fopen(path, "w");
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/%d/statm", (int)pid);
  int fd = open(proc, O_RDONLY | O_CLOEXEC);
  pid_t r;
  if (!out || fd < 0) { /* no samples, but still the measurement */
    perror(out ? proc : path);
    if (out) fclose(out);
    if (fd >= 0) close(fd);
    while ((r = wait4(pid, status, 0, ru)) < 0 && errno == EINTR) {
    }
    return r;
  }
  long page_kib = sysconf(_SC_PAGESIZE) / 1024;
  fprintf(out, "# t0=%.6f interval_ms=%ld\n", t0, every_ms);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (;;) {
    r = wait4(pid, status, WNOHANG, ru);
    if (r != 0) {
      if (r < 0 && errno == EINTR) continue;
      break;
    }
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long size = 0, resident = 0;
    if (n > 0) {
      buf[n] = 0;
      /* between exec and exit the resident count is never 0; 0 means the child just exited */
      if (sscanf(buf, "%ld %ld", &size, &resident) == 2 && resident > 0)
        fprintf(out, "%.1f %ld\n", (mono() - t0) * 1e3, resident * page_kib);
    }
    /* absolute deadlines: the interval does not drift by the time a sample takes; after a stall
     * (a loaded machine) the missed deadlines are skipped, not caught up in a burst */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    do {
      next.tv_nsec += every_ms * 1000000L;
      next.tv_sec += next.tv_nsec / 1000000000L;
      next.tv_nsec %= 1000000000L;
    } while (next.tv_sec < now.tv_sec || (next.tv_sec == now.tv_sec && next.tv_nsec <= now.tv_nsec));
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
    }
  }
  close(fd);
  fclose(out);
  return r;
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
    unsetenv("BENCH_RSS_SAMPLES");
    unsetenv("BENCH_RSS_INTERVAL_MS");
    execvp(argv[2], argv + 2);
    fprintf(stderr, "measure: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  child = pid;
  int status = 0;
  struct rusage ru;
  const char *samples = getenv("BENCH_RSS_SAMPLES");
  if (samples && *samples) {
    const char *iv = getenv("BENCH_RSS_INTERVAL_MS");
    long every_ms = iv && atol(iv) > 0 ? atol(iv) : 5;
    if (sample_until_exit(pid, &status, &ru, samples, every_ms,
                          (double)t0.tv_sec + (double)t0.tv_nsec * 1e-9) < 0) {
      perror("wait4");
      return 2;
    }
  } else {
    while (wait4(pid, &status, 0, &ru) < 0) {
      if (errno != EINTR) {
        perror("wait4");
        return 2;
      }
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
