/* test-dlopen: dlopen/dlclose of a module that allocates, many times, with threads touching its
 * thread-local storage (allocated by the loader through malloc: DROPIN 14), and blocks crossing the
 * module boundary in both directions, also after dlclose. */
#include "sm-test.h"

#include <dlfcn.h>
#include <pthread.h>

#include "shardmalloc.h"

typedef char *(*make_fn)(size_t, int);
typedef char *(*strdup_fn)(const char *);
typedef void (*free_fn)(void *);
typedef int (*ok_fn)(void);
typedef long (*tls_fn)(int);

static tls_fn p_tls;
static void *tls_thread(void *arg) {
  int v = (int)(intptr_t)arg;
  long s = p_tls(v);
  return (void *)(intptr_t)(s == 64L * v); /* 256 KiB / 4 KiB samples of value v */
}

int main(int argc, char **argv) {
  sm_test_name = "test-dlopen";
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: test-dlopen PLUGIN.so\n");
    return 2;
  }
  SECTION("dlopen/dlclose a module that allocates, 200 times, with dynamic TLS in 4 threads") {
    char *from_plugin[200] = {0};
    void *held = NULL;
    for (int round = 0; round < 200; round++) {
      void *h = dlopen(argv[1], RTLD_NOW | (round % 2 ? RTLD_GLOBAL : RTLD_LOCAL));
      CHECK(h != NULL, "dlopen(%s): expected a handle, seen NULL: %s", argv[1], dlerror());
      if (!h) break;
      make_fn make = (make_fn)dlsym(h, "plugin_make");
      strdup_fn sd = (strdup_fn)dlsym(h, "plugin_strdup");
      free_fn pf = (free_fn)dlsym(h, "plugin_free");
      ok_fn cok = (ok_fn)dlsym(h, "plugin_ctor_ok");
      p_tls = (tls_fn)dlsym(h, "plugin_tls");
      CHECK(make && sd && pf && cok && p_tls, "dlsym: expected all plugin symbols%s", "");
      if (!(make && sd && pf && cok && p_tls)) break;
      CHECK(cok(), "plugin constructor's block: expected intact%s", "");
      from_plugin[round] = make((size_t)round * 100 + 1, round & 0xff);
      CHECK(sm_check_owned(from_plugin[round]), "block from the plugin: expected shardmalloc's, seen %p",
            (void *)from_plugin[round]);
      char *s = sd("duplicated in the plugin");
      CHECK(s && sm_check_owned(s), "strdup in the plugin: expected a shardmalloc block, seen %p", (void *)s);
      free(s);
      char *mine = malloc(5000);
      pf(mine); /* the plugin frees the program's block */
      if (round % 4 == 0) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, tls_thread, (void *)(intptr_t)(i + 1));
        for (int i = 0; i < 4; i++) {
          void *ok = NULL;
          pthread_join(t[i], &ok);
          CHECK(ok != NULL, "thread %d's view of the plugin's TLS: expected intact%s", i, "");
        }
      }
      if (round % 10 == 5) { /* keep one open across a later dlclose */
        if (held) dlclose(held);
        held = dlopen(argv[1], RTLD_NOW);
      }
      CHECK(dlclose(h) == 0, "dlclose: expected 0, seen error %s", dlerror());
    }
    if (held) dlclose(held);
    /* blocks the (now unloaded) plugin allocated are freed by the program */
    for (int round = 0; round < 200; round++) {
      if (!from_plugin[round]) continue;
      size_t n = (size_t)round * 100 + 1;
      int bad = 0;
      for (size_t i = 0; i < n; i++) bad |= (unsigned char)from_plugin[round][i] != (round & 0xff);
      CHECK(!bad, "block from plugin round %d: expected its contents intact after dlclose", round);
      free(from_plugin[round]);
    }
  }
  return sm_test_summary();
}
