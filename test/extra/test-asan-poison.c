/* test-asan-poison: the SM_ASAN build (a static library compiled without -fsanitize, SM_ASAN=1,
 * SM_OVERRIDE=0) poisons free blocks and block padding for an ASan-instrumented program using the
 * sm_ API (issue 5, "An SM_ASAN=ON build poisons free memory and padding for AddressSanitizer").
 * Each case runs in a child (this program again) and the parent checks how it ended:
 *   use-after-free:  sm_malloc(40), write, sm_free, read p[0]  -> ASan "use-after-poison" report;
 *   past-the-end:    read p[40] of a live 40-byte block         -> ASan report;
 *   correct:         ordinary sm_ traffic, no report, exit 0 (the annotations do not get in the way). */
#include "extra-util.h"
#include "shardmalloc.h"

static volatile char sinkc;

static int child(const char *c) {
  if (!strcmp(c, "use-after-free")) {
    char *p = sm_malloc(40);
    memset(p, 7, 40);
    sm_free(p);
    fprintf(stderr, "child: reading p[0] after sm_free\n");
    sinkc = ((volatile char *)p)[0];
    fprintf(stderr, "child: the read was not reported\n");
    return 0;
  }
  if (!strcmp(c, "past-the-end")) {
    char *p = sm_malloc(40);
    memset(p, 7, 40);
    fprintf(stderr, "child: reading p[40] of a live 40-byte block\n");
    sinkc = ((volatile char *)opaque_ptr(p))[40];
    fprintf(stderr, "child: the read was not reported\n");
    sm_free(p);
    return 0;
  }
  if (!strcmp(c, "correct")) {
    for (int r = 0; r < 3; r++) {
      static const size_t sizes[] = {1, 8, 40, 100, 1000, 40000, 300000, 3000000};
      void *b[8];
      for (int i = 0; i < 8; i++) {
        b[i] = sm_malloc(sizes[i]);
        fill_pattern(b[i], sizes[i], (uint64_t)i);
      }
      for (int i = 0; i < 8; i++) {
        if (verify_pattern(b[i], sizes[i], (uint64_t)i) != (size_t)-1) return 3;
        b[i] = sm_realloc(b[i], sizes[i] * 2 + 1);
        ((char *)b[i])[sizes[i] * 2] = 1;
        sm_free(b[i]);
      }
      char *z = sm_calloc(10, 10);
      if (first_nonzero(z, 100) != (size_t)-1) return 4;
      sm_free(z);
    }
    sm_collect(true);
    fprintf(stderr, "child: correct traffic done\n");
    return 0;
  }
  return 99;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[0], "child")) return child(argv[1]);
  sm_test_name = "test-asan-poison";
  child_result_t r;
  char *env[] = {"ASAN_OPTIONS=detect_leaks=0:abort_on_error=0", NULL};
  SECTION("read of a freed block (sm_free): AddressSanitizer use-after-poison") {
    char *args[] = {"use-after-free", NULL};
    run_child(&r, env, args, 60);
    printf("      child: %s\n", child_how(&r));
    CHECK(!child_exited(&r, 0), "expected the child to die with a report, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "ERROR: AddressSanitizer: use-after-poison"), "expected \"AddressSanitizer: use-after-poison\"; output:%s",
          child_output(&r));
    CHECK(child_says(&r, "READ of size 1"), "expected \"READ of size 1\"; output:%s", child_output(&r));
    CHECK(!child_says(&r, "the read was not reported"), "the read went through; output:%s", child_output(&r));
  }
  SECTION("read one byte past a live 40-byte block: AddressSanitizer report") {
    char *args[] = {"past-the-end", NULL};
    run_child(&r, env, args, 60);
    printf("      child: %s\n", child_how(&r));
    CHECK(!child_exited(&r, 0), "expected the child to die with a report, seen %s; output:%s", child_how(&r), child_output(&r));
    CHECK(child_says(&r, "ERROR: AddressSanitizer: "), "expected an AddressSanitizer report; output:%s", child_output(&r));
    CHECK(child_says(&r, "READ of size 1"), "expected \"READ of size 1\"; output:%s", child_output(&r));
    CHECK(!child_says(&r, "the read was not reported"), "the read went through; output:%s", child_output(&r));
  }
  SECTION("correct sm_ traffic: no report") {
    char *args[] = {"correct", NULL};
    run_child(&r, env, args, 60);
    CHECK(child_exited(&r, 0) && !child_says(&r, "AddressSanitizer"), "expected exit 0 without a report, seen %s; output:%s",
          child_how(&r), child_output(&r));
  }
  return sm_test_summary();
}
