/* test-singlethread: a single-threaded program stays single-threaded.  Some programs require it
 * (unshare(CLONE_NEWUSER) fails with EINVAL in a multithreaded process; so do some sandboxes), so
 * an allocator must not start a helper thread behind the back of a program that has none: after
 * heavy allocation, freeing and sm_collect, /proc/self/task must still list one thread; and once a
 * program's other threads are joined, it is single-threaded again (unshare(CLONE_NEWUSER) works, as
 * it does with glibc's malloc). */
#include "sm-test.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>

#include "shardmalloc.h"

static int ntasks(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void *worker(void *arg) { /* a short-lived thread that allocates and frees a lot */
  (void)arg;
  enum { N = 20000 };
  static void *v[N];
  for (int i = 0; i < N; i++) v[i] = malloc((size_t)(i % 500) * 64 + 1);
  for (int i = 0; i < N; i++) free(v[i]);
  void *h = malloc(64 << 20);
  memset(h, 1, 64 << 20);
  free(h);
  return NULL;
}

int main(void) {
  sm_test_name = "test-singlethread";
  setvbuf(stdout, NULL, _IOLBF, 0);
  SECTION("no helper thread in a single-threaded program") {
    CHECK_EQ(ntasks(), 1);
    enum { N = 50000 };
    static void *v[N];
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < N; i++) {
        v[i] = malloc((size_t)(i % 2000) * 32 + 1);
        memset(v[i], 1, 1);
      }
      for (int i = 0; i < N; i++) free(v[i]);
      void *h = malloc(64 << 20);
      memset(h, 1, 64 << 20);
      free(h);
      usleep(200000); /* time for a background thread to appear, if there were one */
    }
    sm_collect(false);
    sm_collect(true);
    int n = ntasks();
    CHECK(n == 1, "threads in /proc/self/task after allocating, freeing and sm_collect: expected 1, seen %d", n);
  }
  SECTION("after its only other thread is joined, the program is single-threaded again") {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    usleep(300000);
    int n = ntasks();
    CHECK(n == 1, "threads in /proc/self/task after the program's one extra thread was joined: expected 1, seen %d "
          "(a helper thread started by the allocator stays)", n);
    int r = unshare(CLONE_NEWUSER);
    int e = errno;
    if (r != 0 && e != EINVAL)
      printf("  (unshare(CLONE_NEWUSER) not permitted here: %s; not checked)\n", strerror(e));
    else
      CHECK(r == 0, "unshare(CLONE_NEWUSER) after the join: expected success (as with glibc's malloc), seen %s "
            "(EINVAL: the process is multithreaded)", strerror(e));
  }
  return sm_test_summary();
}
