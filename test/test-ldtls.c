/* test-ldtls: the local-dynamic TLS build of shardmalloc, loaded with dlopen into a program whose
 * malloc is glibc's (DROPIN 14: "offer a local-dynamic build for libraries that are dlopen'ed").
 * Several threads, started before and after the dlopen, use it through dlsym'ed sm_ functions and
 * free each other's blocks; glibc's malloc keeps working beside it. */
#include "sm-test.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef void *(*sm_malloc_fn)(size_t);
typedef void (*sm_free_fn)(void *);
typedef bool (*sm_owned_fn)(const void *);
typedef size_t (*sm_usable_fn)(const void *);
static sm_malloc_fn ld_malloc;
static sm_free_fn ld_free;
static sm_owned_fn ld_owned;
static sm_usable_fn ld_usable;
static _Atomic(void *) handoff[64];
static atomic_int go;

static void *ld_thread(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  while (!atomic_load(&go)) usleep(1000); /* some threads exist before the dlopen */
  int ok = 1;
  for (int i = 0; i < 20000 && ok; i++) {
    size_t n = (size_t)((i * 131 + (int)id) % 3000) + 1;
    char *p = ld_malloc(n);
    if (!p || !ld_owned(p) || ld_usable(p) < n) ok = 0;
    if (!p) break;
    memset(p, (int)id, n);
    ld_free(atomic_exchange(&handoff[(size_t)i % 64], p)); /* cross-thread frees */
    void *g = malloc(n); /* glibc's malloc, beside it */
    if (!g || ld_owned(g)) ok = 0;
    free(g);
  }
  return (void *)(intptr_t)ok;
}

/* allocates with the library, then waits (go: 1 once it has, 2 to end) */
static void *ld_hold(void *arg) {
  ld_free(ld_malloc(100));
  atomic_store(&go, 1);
  while (atomic_load(&go) != 2) usleep(1000);
  return arg;
}

int main(int argc, char **argv) {
  sm_test_name = "test-ldtls";
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: test-ldtls LIBSHARDMALLOC-LDTLS.so\n");
    return 2;
  }
  pthread_t early[2], late[2];
  for (int i = 0; i < 2; i++) pthread_create(&early[i], NULL, ld_thread, (void *)(uintptr_t)(i + 1));
  SECTION("dlopen of the local-dynamic TLS build; sm_ API from 4 threads") {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen(%s): expected a handle, seen NULL: %s", argv[1], dlerror());
    if (!h) return sm_test_summary();
    ld_malloc = (sm_malloc_fn)dlsym(h, "sm_malloc");
    ld_free = (sm_free_fn)dlsym(h, "sm_free");
    ld_owned = (sm_owned_fn)dlsym(h, "sm_check_owned");
    ld_usable = (sm_usable_fn)dlsym(h, "sm_usable_size");
    CHECK(ld_malloc && ld_free && ld_owned && ld_usable, "dlsym of the sm_ functions: expected all four%s", "");
    if (!(ld_malloc && ld_free && ld_owned && ld_usable)) return sm_test_summary();
    void *p = ld_malloc(100);
    CHECK(p && ld_owned(p), "sm_malloc: expected an owned block, seen %p", p);
    void *g = malloc(100);
    CHECK(!ld_owned(g), "a glibc block: expected not owned by the dlopen'ed shardmalloc, seen owned (%p)", g);
    free(g);
    ld_free(p);
    atomic_store(&go, 1);
    for (int i = 0; i < 2; i++) pthread_create(&late[i], NULL, ld_thread, (void *)(uintptr_t)(i + 3));
    for (int i = 0; i < 2; i++) {
      void *ok = NULL;
      pthread_join(early[i], &ok);
      CHECK(ok != NULL, "thread started before dlopen: expected all its blocks owned and usable%s", "");
      pthread_join(late[i], &ok);
      CHECK(ok != NULL, "thread started after dlopen: expected all its blocks owned and usable%s", "");
    }
    for (int i = 0; i < 64; i++) ld_free(atomic_exchange(&handoff[i], NULL));
    /* dlclose while a thread that used it is alive: the library stays mapped (-z nodelete), so
     * the thread's exit, which runs the library's key destructor, and the purger do not jump
     * into unmapped code (a SIGSEGV until 2026-11-27) */
    pthread_t t;
    atomic_store(&go, 0);
    pthread_create(&t, NULL, ld_hold, NULL);
    while (atomic_load(&go) == 0) usleep(1000);
    CHECK_EQ(dlclose(h), 0);
    atomic_store(&go, 2);
    pthread_join(t, NULL);
    CHECK(true, "a thread that used the library ended after its dlclose%s", "");
  }
  return sm_test_summary();
}
