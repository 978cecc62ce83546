/* Many short processes, as a shell script or a build runs them: what an allocator costs a program
 * that starts, makes a few hundred small allocations and exits. Most of it is fixed: loading and
 * relocating the library, its start-up, the first pages of its heap, and the shared-library pages
 * its start-up touches. The parent starts RUNS children one after the other (fork + exec of this
 * program, so each loads the allocator afresh through the inherited LD_PRELOAD) and waits for each.
 * Peak RSS is that of the largest process (a child's own peak reaches the parent through wait).
 *
 *   startup RUNS
 * Each child: 300 blocks of 16-2,000 bytes, each written and checked, then freed; exit status 0.
 * Prints: RESULT secs=<s> runs=<n>
 */
#include "common.h"
#include <sys/wait.h>

static int child(void) {
  enum { N = 300 };
  void *p[N];
  for (int i = 0; i < N; i++) p[i] = xmalloc_tagged((size_t)(16 + (i * 97) % 1985));
  for (int i = 0; i < N; i++) xfree_tagged(p[i], (size_t)(16 + (i * 97) % 1985), "startup");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "child") == 0) return child();
  if (argc != 2 || atoi(argv[1]) <= 0) {
    fprintf(stderr, "usage: startup RUNS\n");
    return 2;
  }
  int runs = atoi(argv[1]);
  double t0 = now_sec();
  for (int i = 0; i < runs; i++) {
    pid_t pid = fork();
    if (pid < 0) verify_fail("startup: fork failed");
    if (pid == 0) {
      char *args[] = {argv[0], "child", NULL};
      execv("/proc/self/exe", args);
      _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      verify_fail("startup: run %d ended with status %#x", i, status);
  }
  printf("RESULT secs=%.6f runs=%d\n", now_sec() - t0, runs);
  return 0;
}
