/* test-static: built by static-override.sh with shardmalloc.o linked first, into a dynamic and
 * into a fully static executable.  malloc and friends, and libc's own allocations (strdup,
 * stdio buffers, asprintf), must be served by shardmalloc (sm_check_owned), also in threads.
 * With SM_TEST_GLIBC_EXT it also calls glibc's malloc extensions (mallopt, mallinfo2, ...), as real
 * programs do: a static link must still work. */
#include "sm-test.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>

#include "shardmalloc.h"

#define CHECK_OWNED(p) \
  CHECK(sm_check_owned(p), "%s: expected a shardmalloc block, seen %p (not owned: malloc was not replaced)", #p, \
        (const void *)(p))

static void *thread_main(void *arg) {
  (void)arg;
  void *p[100];
  int owned = 1;
  for (int i = 0; i < 100; i++) {
    p[i] = malloc((size_t)i * 50 + 1);
    owned &= sm_check_owned(p[i]);
  }
  for (int i = 0; i < 100; i++) free(p[i]);
  return (void *)(intptr_t)owned;
}

int main(void) {
  sm_test_name = "test-static";
  setvbuf(stdout, NULL, _IOLBF, 0);
  SECTION("the standard entry points are shardmalloc's") {
    void *a = malloc(100);
    CHECK_OWNED(a);
    void *b = calloc(10, 10);
    CHECK_OWNED(b);
    b = realloc(b, 100000);
    CHECK_OWNED(b);
    void *c = aligned_alloc(4096, 5000);
    CHECK_OWNED(c);
    CHECK_ALIGNED(c, 4096);
    void *d = NULL;
    CHECK_EQ(posix_memalign(&d, 256, 300), 0);
    CHECK_OWNED(d);
    void *e = memalign(64, 1000);
    CHECK_OWNED(e);
    void *f = valloc(100);
    CHECK_OWNED(f);
    CHECK(malloc_usable_size(a) >= 100, "malloc_usable_size: expected >= 100, seen %zu", malloc_usable_size(a));
    errno = 0;
    void *g = malloc(opaque_size(SIZE_MAX));
    CHECK(g == NULL && errno == ENOMEM, "malloc(SIZE_MAX): expected NULL/ENOMEM, seen %p errno %d", g, errno);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(f);
    void *h = malloc(40 << 20);
    CHECK_OWNED(h);
    free(h);
  }
  SECTION("libc's own allocations are shardmalloc's") {
    char *s = strdup("static");
    CHECK_OWNED(s);
    free(s);
    char *t = NULL;
    CHECK(asprintf(&t, "%d %s", 7, "x") == 3, "asprintf: expected 3 chars%s", "");
    CHECK_OWNED(t);
    free(t);
    FILE *fp = fopen("/proc/self/status", "r");
    CHECK_NONNULL(fp);
    char *line = NULL;
    size_t cap = 0;
    if (fp) {
      CHECK(getline(&line, &cap, fp) > 0, "getline: expected a line%s", "");
      CHECK_OWNED(line);
      fclose(fp);
    }
    free(line);
  }
  SECTION("threads allocate from shardmalloc") {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_main, NULL);
    for (int i = 0; i < 4; i++) {
      void *r = NULL;
      pthread_join(t[i], &r);
      CHECK(r != NULL, "thread %d: expected all its blocks owned by shardmalloc", i);
    }
  }
#if SM_TEST_GLIBC_EXT
  SECTION("glibc's malloc extensions (mallopt, malloc_trim, mallinfo2, malloc_stats, malloc_info) link and run") {
    /* a static program that uses them must still link with shardmalloc.o first: libc.a's malloc.o
     * (which defines malloc too) must not be pulled in */
    mallopt(M_ARENA_MAX, 1);
    malloc_trim(0);
    struct mallinfo2 mi = mallinfo2();
    (void)mi;
    FILE *devnull = fopen("/dev/null", "w");
    int r = malloc_info(0, devnull);
    (void)r;
    if (devnull) fclose(devnull);
    int saved = dup(2), fd = open("/dev/null", O_WRONLY);
    dup2(fd, 2); /* malloc_stats prints to stderr */
    malloc_stats();
    dup2(saved, 2);
    close(fd);
    close(saved);
    void *p = malloc(100);
    CHECK_OWNED(p);
    free(p);
  }
#endif
  return sm_test_summary();
}
