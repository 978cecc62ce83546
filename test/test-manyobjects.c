/* test-manyobjects: a program holding millions of small objects still gets memory, and the
 * allocator keeps its number of mappings far below vm.max_map_count (65530 by default) (DROPIN 21).
 * Built twice: linked to libshardmalloc.so, and unlinked for LD_PRELOAD of the debug and secure
 * test builds (guard-page-heavy designs are where mappings multiply). */
#include "sm-test.h"

#include <dlfcn.h>
#include <stdbool.h>

static int count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  int n = 0, c;
  if (!f) return -1;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}
static int max_map_count(void) {
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  int n = 65530;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = 65530;
    fclose(f);
  }
  return n;
}

int main(void) {
  sm_test_name = "test-manyobjects";
  setvbuf(stdout, NULL, _IOLBF, 0);
  bool (*owned)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "sm_check_owned");
  if (!owned) sm_skip("shardmalloc is not loaded (no sm_check_owned)");
  enum { N = 3000000 };
  int maps0 = count_maps(), limit = max_map_count();
  void **objs = malloc(N * sizeof(void *));
  SECTION("3 million small objects (8..256 bytes) live at once") {
    CHECK_NONNULL(objs);
    if (!objs) return sm_test_summary();
    int fails = 0;
    for (int i = 0; i < N; i++) {
      size_t n = (size_t)(i % 32 + 1) * 8;
      uint64_t *p = malloc(n);
      if (!p) { fails++; objs[i] = NULL; continue; }
      p[0] = (uint64_t)i * 2654435761u;
      objs[i] = p;
    }
    CHECK(fails == 0, "expected all 3 million allocations to succeed, seen %d NULL", fails);
    int maps = count_maps();
    printf("  mappings: %d before, %d with 3 million objects (vm.max_map_count %d), RSS %zu MiB\n", maps0, maps, limit,
           rss_bytes() / MiB);
    CHECK(maps < 4096 && maps < limit / 4,
          "mappings with 3 million small objects: expected < 4096 (a budget well below max_map_count %d), seen %d",
          limit, maps);
    CHECK(owned(objs[N / 2]), "sm_check_owned(object): expected true%s", "");
    int bad = 0;
    for (int i = 0; i < N; i++)
      if (objs[i] && ((uint64_t *)objs[i])[0] != (uint64_t)i * 2654435761u) bad++;
    CHECK(bad == 0, "object contents: expected all intact, seen %d damaged", bad);
    for (int i = 0; i < N; i += 2) free(objs[i]);
    for (int i = 0; i < N; i += 2) objs[i] = malloc(24);
    for (int i = 0; i < N; i++) free(objs[i]);
    free(objs);
  }
  return sm_test_summary();
}
