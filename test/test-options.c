/* test-options: run-time options (docs/api/options.md).
 *
 * Every case runs this program again (fork + exec of /proc/self/exe with a MODE argument) in an
 * environment made from scratch, so that the variables of the case, and nothing from the caller's
 * environment, reach the library; the parent checks what the child printed (its stdout and the
 * library's stderr, through one pipe) and its exit status.
 *
 *   test-options [SECURE-LIB]                     the cases below (SECURE-LIB: a secure build, for
 *                                                 max_errors; without it that case is skipped)
 *   test-options --run-check SCRIPT LIB CC [OBJ]  shardmalloc-run --check on a dynamic, a static, an
 *                                                 own-malloc program (and one linked with OBJ)
 * Child modes: dump (every option as name=value), api, limit, errors. */
#include "sm-test.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include "shardmalloc.h"

#define OUT_MAX (256 * 1024)
static char out[OUT_MAX]; /* what the last child printed */

/* Runs argv with exactly the environment env (NULL-terminated); returns the exit status (128 +
 * signal if killed) and leaves stdout+stderr in `out`. */
static int run_argv(char *const argv[], const char *const env[]) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execve(argv[0], argv, (char *const *)env);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(126);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while ((r = read(fds[0], out + n, OUT_MAX - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char self[4096];
/* this program in MODE, with the environment env */
static int run(const char *mode, const char *const env[]) {
  char *argv[] = {self, (char *)mode, NULL};
  return run_argv(argv, env);
}

static bool has(const char *needle) { return strstr(out, needle) != NULL; }
static int count(const char *needle) {
  int n = 0;
  for (const char *p = strstr(out, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}
/* the line of `out` that contains both a and b, or NULL */
static const char *line_with(const char *a, const char *b) {
  static char line[1024];
  for (const char *p = out; *p;) {
    size_t len = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)len, p);
    if (strstr(line, a) && strstr(line, b)) return line;
    p += len + (p[len] == '\n');
  }
  return NULL;
}
#define CHECK_OUT(needle) CHECK(has(needle), "expected \"%s\" in the output:\n%s", needle, out)
#define CHECK_NOT_OUT(needle) CHECK(!has(needle), "expected no \"%s\" in the output:\n%s", needle, out)
#define CHECK_LINE(a, b) CHECK(line_with(a, b) != NULL, "expected a line with \"%s\" and \"%s\":\n%s", a, b, out)
#define CHECK_RUN(mode, ...)                                                       \
  do {                                                                             \
    const char *env_[] = {__VA_ARGS__, NULL};                                      \
    int rc_ = run(mode, env_);                                                     \
    CHECK(rc_ == 0, "%s child: expected exit 0, seen %d; output:\n%s", mode, rc_, out); \
  } while (0)

/* ---- child modes ---- */

static int child_dump(void) {
  for (int i = 0; i < _sm_option_last; i++) printf("%s=%ld\n", sm_option_name((sm_option_t)i), sm_option_get((sm_option_t)i));
  return 0;
}

static char captured[8192];
static void capture(const char *msg, void *arg) {
  (void)arg;
  size_t n = strlen(captured);
  snprintf(captured + n, sizeof captured - n, "%s", msg);
}

static int child_api(void) {
  sm_test_name = "test-options (api)";
  SECTION("sm_option_name: every option, distinct; NULL for invalid ones") {
    CHECK(!strcmp(sm_option_name(sm_option_purge_delay), "purge_delay"), "seen %s", sm_option_name(sm_option_purge_delay));
    CHECK(!strcmp(sm_option_name(sm_option_memory_limit), "memory_limit"), "seen %s", sm_option_name(sm_option_memory_limit));
    for (int i = 0; i < _sm_option_last; i++) {
      const char *a = sm_option_name((sm_option_t)i);
      CHECK(a != NULL && *a, "option %d has no name", i);
      for (int j = 0; j < i && a; j++) CHECK(strcmp(a, sm_option_name((sm_option_t)j)) != 0, "%d and %d are both %s", i, j, a);
    }
    CHECK_NULL(sm_option_name(_sm_option_last));
    CHECK_NULL(sm_option_name((sm_option_t)-1));
    CHECK_NULL(sm_option_name((sm_option_t)100000));
  }
  SECTION("invalid option numbers: 0, ignored, one warning") {
    sm_register_output(capture, NULL);
    CHECK_EQ(sm_option_get(_sm_option_last), 0);
    CHECK_EQ(sm_option_get((sm_option_t)-5), 0);
    sm_option_set((sm_option_t)-1, 5);
    sm_option_set_default((sm_option_t)1000, 5);
    sm_option_enable(_sm_option_last);
    CHECK(!sm_option_is_enabled((sm_option_t)77), "invalid option enabled");
    CHECK_EQ(sm_option_get_size((sm_option_t)99), 0);
    sm_register_output(NULL, NULL);
    CHECK(strstr(captured, "warning: ") && strstr(captured, "invalid option"), "expected a warning, seen \"%s\"", captured);
    const char *first = strstr(captured, "invalid option");
    CHECK(first == NULL || strstr(first + 1, "invalid option") == NULL, "expected one warning only, seen \"%s\"", captured);
    for (int i = 0; i < _sm_option_last; i++)
      CHECK(sm_option_get((sm_option_t)i) != 5, "option %s became 5", sm_option_name((sm_option_t)i));
  }
  SECTION("set, get, enable, disable, set_enabled") {
    CHECK_EQ(sm_option_get(sm_option_purge_delay), 10);
    sm_option_set(sm_option_purge_delay, 123);
    CHECK_EQ(sm_option_get(sm_option_purge_delay), 123);
    CHECK(sm_option_is_enabled(sm_option_purge_delay), "123 is enabled");
    sm_option_disable(sm_option_purge_delay);
    CHECK_EQ(sm_option_get(sm_option_purge_delay), 0);
    CHECK(!sm_option_is_enabled(sm_option_purge_delay), "0 is disabled");
    sm_option_enable(sm_option_purge_delay);
    CHECK_EQ(sm_option_get(sm_option_purge_delay), 1);
    sm_option_set_enabled(sm_option_zero_on_free, true);
    CHECK(sm_option_is_enabled(sm_option_zero_on_free), "set_enabled(true)");
    sm_option_set_enabled(sm_option_zero_on_free, false);
    CHECK(!sm_option_is_enabled(sm_option_zero_on_free), "set_enabled(false)");
    sm_option_set(sm_option_purge_delay, -1);
    CHECK_EQ(sm_option_get(sm_option_purge_delay), (unsigned long long)-1LL);
    sm_option_set(sm_option_purge_delay, 10);
    void *p = malloc(1000); /* the allocator runs on with values set at run time */
    CHECK_NONNULL(p);
    free(p);
  }
  SECTION("get_clamp and get_size") {
    sm_option_set(sm_option_segment_cache, 500);
    CHECK_EQ(sm_option_get_clamp(sm_option_segment_cache, 0, 256), 256);
    CHECK_EQ(sm_option_get_clamp(sm_option_segment_cache, 0, 1000), 500);
    sm_option_set(sm_option_segment_cache, -5);
    CHECK_EQ(sm_option_get_clamp(sm_option_segment_cache, 0, 256), 0);
    sm_option_set(sm_option_segment_cache, 16);
    sm_option_set(sm_option_reserve_os_memory, 1L << 40);
    CHECK_EQ(sm_option_get_size(sm_option_reserve_os_memory), (size_t)1 << 40);
    sm_option_set(sm_option_reserve_os_memory, -1);
    CHECK_EQ(sm_option_get_size(sm_option_reserve_os_memory), 0);
    sm_option_set(sm_option_reserve_os_memory, 0);
  }
  SECTION("set_default applies to defaults only, and yields to sm_option_set") {
    CHECK_EQ(sm_option_get(sm_option_quarantine), 0);
    sm_option_set_default(sm_option_quarantine, 5);
    CHECK_EQ(sm_option_get(sm_option_quarantine), 5);
    sm_option_set_default(sm_option_quarantine, 6); /* a later default replaces an earlier one */
    CHECK_EQ(sm_option_get(sm_option_quarantine), 6);
    sm_option_set(sm_option_quarantine, 7);
    sm_option_set_default(sm_option_quarantine, 9);
    CHECK_EQ(sm_option_get(sm_option_quarantine), 7);
    sm_option_set(sm_option_quarantine, 0);
    sm_option_set_enabled_default(sm_option_populate, true);
    CHECK(sm_option_is_enabled(sm_option_populate), "set_enabled_default on a default value");
    sm_option_disable(sm_option_populate);
    /* values from the environment stay (SHARDMALLOC_EAGER_COMMIT_DELAY, _CONF and MIMALLOC_ are set by the parent) */
    sm_option_set_default(sm_option_eager_commit_delay, 9);
    CHECK_EQ(sm_option_get(sm_option_eager_commit_delay), 4);
    sm_option_set_default(sm_option_segment_cache, 9);
    CHECK_EQ(sm_option_get(sm_option_segment_cache), 16); /* sm_option_set above */
    sm_option_set_default(sm_option_huge_timeout, 9);
    CHECK_EQ(sm_option_get(sm_option_huge_timeout), 500);
    sm_option_set_default(sm_option_arena_reserve, 9);
    CHECK_EQ(sm_option_get(sm_option_arena_reserve), 1 << 20);
  }
  SECTION("sm_is_redirected: this program is linked with libshardmalloc") {
    CHECK(sm_is_redirected(), "malloc of a program linked with -lshardmalloc is shardmalloc's");
    void *p = malloc(100);
    CHECK(sm_check_owned(p), "and malloc really serves blocks of shardmalloc");
    free(p);
  }
  return sm_test_summary();
}

/* with SHARDMALLOC_MEMORY_LIMIT=64M */
static int child_limit(void) {
  sm_test_name = "test-options (memory_limit)";
  SECTION("memory_limit=64M: a 100 MB block is refused, small ones still work") {
    CHECK_EQ(sm_option_get_size(sm_option_memory_limit), 64 * MiB);
    errno = 0;
    void *big = malloc(opaque_size(100 * MiB));
    CHECK_NULL(big);
    CHECK_ERRNO(ENOMEM);
    void *small[1000];
    for (int i = 0; i < 1000; i++) small[i] = malloc(100 + (size_t)i);
    for (int i = 0; i < 1000; i++) CHECK_NONNULL(small[i]);
    for (int i = 0; i < 1000; i++) free(small[i]);
  }
  SECTION("memory_limit=64M: filling up to the limit, then freeing gives the room back") {
    void *blocks[200];
    int n = 0;
    errno = 0;
    while (n < 200 && (blocks[n] = malloc(MiB)) != NULL) {
      memset(blocks[n], 1, MiB); /* really used: nothing about the limit is only on paper */
      n++;
    }
    CHECK(n < 200, "200 MiB allocated under a 64 MiB limit");
    CHECK(n >= 40, "only %d MiB allocated under a 64 MiB limit", n);
    CHECK_ERRNO(ENOMEM);
    printf("      %d blocks of 1 MiB before ENOMEM\n", n);
    for (int i = 0; i < n; i++) free(blocks[i]);
    /* freed memory the allocator keeps for reuse still counts until sm_collect(true) gives it back
     * (docs/api/options.md); a limit that never let go would fail here */
    void *p = malloc(48 * MiB);
    printf("      after free, 48 MiB %s without sm_collect\n", p ? "fits" : "does not fit");
    free(p);
    sm_collect(true);
    p = malloc(48 * MiB);
    CHECK_NONNULL(p);
    if (p) memset(p, 2, 48 * MiB);
    free(p);
    sm_collect(true);
    void *q[40];
    for (int i = 0; i < 40; i++) q[i] = malloc(MiB);
    for (int i = 0; i < 40; i++) CHECK_NONNULL(q[i]);
    for (int i = 0; i < 40; i++) free(q[i]);
    errno = 0;
    CHECK_NULL(malloc(opaque_size(100 * MiB)));
    CHECK_ERRNO(ENOMEM);
  }
  SECTION("disallow_os_alloc set at run time: huge blocks neither grow nor take a cached mapping with fresh OS memory") {
    /* both grew with mremap until 2026-11-28 (within the 64 MiB limit here, so only the option
     * can refuse them) */
    uint8_t *block = malloc(opaque_size(8 * MiB)), *cached = malloc(opaque_size(8 * MiB));
    CHECK(block != NULL && cached != NULL, "expected two 8 MiB blocks");
    if (block != NULL && cached != NULL) {
      memset(block, 3, 8 * MiB);
      free(cached); /* its mapping waits in the cache */
      sm_option_set(sm_option_disallow_os_alloc, 1);
      errno = 0;
      CHECK_NULL(realloc(block, opaque_size(40 * MiB)));
      CHECK_ERRNO(ENOMEM);
      CHECK(block[0] == 3 && block[8 * MiB - 1] == 3, "expected the block intact after the refused growth");
      errno = 0;
      CHECK_NULL(malloc(opaque_size(30 * MiB)));
      CHECK_ERRNO(ENOMEM);
      sm_option_set(sm_option_disallow_os_alloc, 0);
      uint8_t *grown = realloc(block, opaque_size(40 * MiB));
      CHECK_NONNULL(grown);
      free(grown != NULL ? grown : block);
    }
  }
  return sm_test_summary();
}

static int handler_calls;
static void on_error(int err, void *arg) {
  (void)arg;
  if (err == EINVAL) handler_calls++;
}
/* under a preloaded secure build, with SHARDMALLOC_ABORT_ON_ERROR=0 */
static int child_errors(void) {
  sm_register_error(on_error, NULL);
  char local[64];
  for (int i = 0; i < 5; i++) free(opaque_ptr(local + 16 * (i % 2)));
  printf("handler calls: %d\n", handler_calls);
  return 0;
}

/* ---- the cases ---- */

static void check_value(const char *name, long value) {
  static char buf[OUT_MAX + 2]; /* the output with a newline in front, so the first line matches too */
  char want[128];
  snprintf(want, sizeof want, "\n%s=%ld\n", name, value);
  snprintf(buf, sizeof buf, "\n%s", out);
  CHECK(strstr(buf, want) != NULL, "expected %s=%ld; output:\n%s", name, value, out);
}

static int run_cases(const char *secure_lib) {
  SECTION("defaults, no warning") {
    CHECK_RUN("dump", "X=1");
    check_value("purge_delay", 10);
    check_value("segment_cache", 16);
    check_value("max_errors", -1);
    check_value("memory_limit", 0);
    check_value("eager_commit_delay", 1);
    CHECK_NOT_OUT("warning: ");
    CHECK_NOT_OUT("malloc is"); /* not verbose */
  }
  SECTION("SHARDMALLOC_<NAME>, upper, lower and mixed case") {
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=50", "SHARDMALLOC_segment_cache=3", "shardmalloc_Quarantine=7");
    check_value("purge_delay", 50);
    check_value("segment_cache", 3);
    check_value("quarantine", 7);
    CHECK_NOT_OUT("warning: ");
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=-1", "SHARDMALLOC_BACKGROUND_PURGE=+2", "SHARDMALLOC_VERBOSE=");
    check_value("purge_delay", -1);
    check_value("background_purge", 2);
    check_value("verbose", 0); /* empty: as if unset */
    CHECK_NOT_OUT("warning: ");
  }
  SECTION("sizes: K/M/G/T, KiB/MiB/GiB, KB/MB/GB, bytes") {
    CHECK_RUN("dump", "SHARDMALLOC_MEMORY_LIMIT=64M", "SHARDMALLOC_RESERVE_OS_MEMORY=2GiB", "SHARDMALLOC_ARENA_RESERVE=512kb");
    check_value("memory_limit", 64L << 20);
    check_value("reserve_os_memory", 2L << 30);
    check_value("arena_reserve", 512L << 10);
    CHECK_RUN("dump", "SHARDMALLOC_MEMORY_LIMIT=3KiB", "SHARDMALLOC_RESERVE_OS_MEMORY=1g", "SHARDMALLOC_ARENA_RESERVE=4096",
              "SHARDMALLOC_CONF=memory_limit=10MB");
    check_value("memory_limit", 3L << 10);
    check_value("reserve_os_memory", 1L << 30);
    check_value("arena_reserve", 4096);
    CHECK_RUN("dump", "SHARDMALLOC_MEMORY_LIMIT=2T", "SHARDMALLOC_ARENA_RESERVE=100B", "SHARDMALLOC_RESERVE_OS_MEMORY=10MB");
    check_value("memory_limit", 2L << 40);
    check_value("arena_reserve", 100);
    check_value("reserve_os_memory", 10L << 20);
    CHECK_NOT_OUT("warning: ");
  }
  SECTION("booleans and show_stats=json") {
    CHECK_RUN("dump", "SHARDMALLOC_ALLOW_LARGE_OS_PAGES=on", "SHARDMALLOC_PURGE_DECOMMITS=off", "SHARDMALLOC_ZERO_ON_FREE=yes",
              "SHARDMALLOC_POPULATE=TRUE", "SHARDMALLOC_DESTROY_ON_EXIT=True", "SHARDMALLOC_SHOW_STATS=json",
              "SHARDMALLOC_EAGER_COMMIT=1");
    check_value("allow_large_os_pages", 1);
    check_value("purge_decommits", 0);
    check_value("zero_on_free", 1);
    check_value("populate", 1);
    check_value("destroy_on_exit", 1);
    check_value("show_stats", 2);
    check_value("eager_commit", 1);
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DECOMMITS=no", "SHARDMALLOC_BACKGROUND_PURGE=false", "SHARDMALLOC_SHOW_STATS=JSON");
    check_value("purge_decommits", 0);
    check_value("background_purge", 0);
    check_value("show_stats", 2);
    CHECK_NOT_OUT("warning: ");
  }
  SECTION("bad values: one warning naming the variable and the value; the option keeps its value") {
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=soon", "SHARDMALLOC_SEGMENT_CACHE=16M", "SHARDMALLOC_MEMORY_LIMIT=12Q",
              "SHARDMALLOC_ARENA_RESERVE=99999999999G", "SHARDMALLOC_QUARANTINE=99999999999999999999",
              "SHARDMALLOC_SHOW_STATS=jsonx");
    check_value("purge_delay", 10);
    check_value("segment_cache", 16);
    check_value("memory_limit", 0);
    check_value("arena_reserve", 0);
    check_value("quarantine", 0);
    check_value("show_stats", 0);
    CHECK_LINE("SHARDMALLOC_PURGE_DELAY", "\"soon\"");
    CHECK_LINE("SHARDMALLOC_SEGMENT_CACHE", "\"16M\"");
    CHECK_LINE("SHARDMALLOC_MEMORY_LIMIT", "\"12Q\"");
    CHECK_LINE("SHARDMALLOC_ARENA_RESERVE", "\"99999999999G\"");
    CHECK_LINE("SHARDMALLOC_QUARANTINE", "\"99999999999999999999\"");
    CHECK_LINE("SHARDMALLOC_SHOW_STATS", "\"jsonx\"");
    CHECK_EQ(count("warning: "), 6);
  }
  SECTION("unknown names: a warning naming them, nothing else changes") {
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAYY=5", "SHARDMALLOC_CONF=bogus_opt=1,purge_delay=20,junk",
              "SHARDMALLOC_=1", "SHARDMALLOC_CHECK_REDIRECT=1:9");
    CHECK_LINE("warning: ", "SHARDMALLOC_PURGE_DELAYY");
    CHECK_LINE("warning: ", "bogus_opt");
    CHECK_LINE("warning: ", "\"junk\"");
    CHECK_LINE("warning: ", "SHARDMALLOC_=1");
    CHECK_EQ(count("warning: "), 4);
    check_value("purge_delay", 20);
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=5", "SHARDMALLOC_purge_delay=6");
    check_value("purge_delay", 5);
    CHECK_LINE("warning: ", "SHARDMALLOC_purge_delay=6");
  }
  SECTION("an option that makes allocations fail says so, once") {
    /* disallow_os_alloc without a reservation: every allocation fails at once (until 2026-11-27
     * without a word from shardmalloc) */
    CHECK_RUN("dump", "SHARDMALLOC_DISALLOW_OS_ALLOC=1");
    CHECK_LINE("warning: disallow_os_alloc", "said once");
    CHECK_EQ(count("warning: "), 1);
    CHECK_RUN("dump", "SHARDMALLOC_MEMORY_LIMIT=1M");
    CHECK_LINE("warning: memory_limit (1048576 bytes) reached", "said once");
    CHECK_EQ(count("warning: "), 1);
    check_value("memory_limit", 1L << 20);
  }
  SECTION("SHARDMALLOC_CONF: '=' and ':', spaces, precedence below SHARDMALLOC_<NAME>") {
    CHECK_RUN("dump", "SHARDMALLOC_CONF=show_stats=0,purge_delay=50,segment_cache:7, memory_limit = 1G ,,Quarantine=3");
    check_value("purge_delay", 50);
    check_value("segment_cache", 7);
    check_value("memory_limit", 1L << 30);
    check_value("quarantine", 3);
    CHECK_NOT_OUT("warning: ");
    CHECK_RUN("dump", "SHARDMALLOC_CONF=purge_delay=50,segment_cache=7,purge_delay=55", "SHARDMALLOC_SEGMENT_CACHE=8");
    check_value("purge_delay", 55); /* later entries win */
    check_value("segment_cache", 8);
    CHECK_RUN("dump", "SHARDMALLOC_CONF=purge_delay=x,segment_cache=7");
    CHECK_LINE("SHARDMALLOC_CONF", "\"x\"");
    check_value("segment_cache", 7);
    /* a value too long to read is refused, not cut short (until 2026-11-27 these 70 zeros and a 5
     * were read as their first 63 characters: 0) */
    CHECK_RUN("dump", "SHARDMALLOC_CONF=purge_delay=" "0000000000" "0000000000" "0000000000" "0000000000" "0000000000"
              "0000000000" "0000000000" "5,segment_cache=6");
    CHECK_LINE("SHARDMALLOC_CONF entry purge_delay", "too long");
    check_value("purge_delay", 10);
    check_value("segment_cache", 6);
  }
  SECTION("MIMALLOC_<NAME>: current and old names, below SHARDMALLOC_CONF") {
    CHECK_RUN("dump", "MIMALLOC_PURGE_DELAY=70", "MIMALLOC_LARGE_OS_PAGES=1", "MIMALLOC_RESET_DECOMMITS=0",
              "MIMALLOC_ARENA_RESERVE=1M", "mimalloc_verbose=0", "MIMALLOC_RESERVE_HUGE_OS_PAGES=2",
              "MIMALLOC_USE_NUMA_NODES=1", "MIMALLOC_MAX_WARNINGS=3", "MIMALLOC_SHOW_STATS=1");
    check_value("purge_delay", 70);
    check_value("allow_large_os_pages", 1);
    check_value("purge_decommits", 0);
    check_value("arena_reserve", 1L << 20);
    check_value("reserve_huge_os_pages", 2);
    check_value("use_numa_nodes", 1);
    check_value("max_warnings", 3);
    check_value("show_stats", 1);
    CHECK_RUN("dump", "MIMALLOC_RESET_DELAY=71");
    check_value("purge_delay", 71);
    CHECK_RUN("dump", "MIMALLOC_PURGE_DELAY=72", "MIMALLOC_RESET_DELAY=71");
    check_value("purge_delay", 72); /* the current name wins over the old one */
    CHECK_RUN("dump", "MIMALLOC_PURGE_DELAY=70", "SHARDMALLOC_CONF=purge_delay=80", "MIMALLOC_SEGMENT_CACHE=5");
    check_value("purge_delay", 80);
    check_value("segment_cache", 16); /* not mapped: per thread in mimalloc */
    CHECK_RUN("dump", "MIMALLOC_PURGE_DELAY=70", "SHARDMALLOC_CONF=purge_delay=80", "SHARDMALLOC_PURGE_DELAY=90");
    check_value("purge_delay", 90);
    CHECK_RUN("dump", "MIMALLOC_EAGER_COMMIT=1", "MIMALLOC_ARENA_EAGER_COMMIT=2", "MIMALLOC_UNKNOWN_THING=1");
    check_value("eager_commit", 0); /* mimalloc's eager_commit means something else */
    CHECK_NOT_OUT("warning: "); /* mimalloc's settings for mimalloc are not ours to judge */
    CHECK_RUN("dump", "MIMALLOC_PURGE_DELAY=never");
    CHECK_LINE("warning: ", "MIMALLOC_PURGE_DELAY: cannot read the value \"never\"");
  }
  SECTION("max_warnings: at most N warnings, then one line") {
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=a", "SHARDMALLOC_SEGMENT_CACHE=b", "SHARDMALLOC_QUARANTINE=c",
              "SHARDMALLOC_NOPE=1");
    CHECK_EQ(count("warning: "), 4);
    CHECK_NOT_OUT("further");
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=a", "SHARDMALLOC_SEGMENT_CACHE=b", "SHARDMALLOC_QUARANTINE=c",
              "SHARDMALLOC_NOPE=1", "SHARDMALLOC_MAX_WARNINGS=2");
    CHECK_EQ(count("warning: "), 2);
    CHECK_EQ(count("further warnings are not shown"), 1);
    /* max_warnings from SHARDMALLOC_CONF governs warnings about variables read before it */
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=a", "SHARDMALLOC_SEGMENT_CACHE=b", "SHARDMALLOC_CONF=max_warnings:0");
    CHECK_EQ(count("warning: "), 0);
    CHECK_EQ(count("further warnings are not shown"), 1);
    CHECK_RUN("dump", "SHARDMALLOC_PURGE_DELAY=a", "SHARDMALLOC_SHOW_ERRORS=0");
    CHECK_EQ(count("warning: "), 0); /* show_errors=0 silences warnings too */
    check_value("show_errors", 0);
  }
  SECTION("verbose: version, build, every option with its origin, redirection") {
    CHECK_RUN("dump", "SHARDMALLOC_VERBOSE=1", "SHARDMALLOC_PURGE_DELAY=50", "SHARDMALLOC_CONF=segment_cache=7",
              "MIMALLOC_ARENA_RESERVE=1M", "MIMALLOC_RESET_DELAY=99", "SHARDMALLOC_memory_limit=1G");
    char version[32];
    snprintf(version, sizeof version, "shardmalloc %d.%d.%d", SM_VERSION_MAJOR, SM_VERSION_MINOR, SM_VERSION_PATCH);
    CHECK_LINE(version, "release build");
    for (int i = 0; i < _sm_option_last; i++) {
      char opt[64];
      snprintf(opt, sizeof opt, "option %s ", sm_option_name((sm_option_t)i));
      CHECK_EQ(count(opt), 1);
    }
    CHECK_LINE("option purge_delay ", "environment SHARDMALLOC_PURGE_DELAY");
    CHECK_LINE("option purge_delay ", "50 ms");
    CHECK_LINE("option segment_cache ", "SHARDMALLOC_CONF");
    CHECK_LINE("option arena_reserve ", "environment MIMALLOC_ARENA_RESERVE");
    CHECK_LINE("option arena_reserve ", "(1 MiB)");
    CHECK_LINE("option memory_limit ", "environment SHARDMALLOC_MEMORY_LIMIT");
    CHECK_LINE("option memory_limit ", "(1 GiB)");
    CHECK_LINE("option show_stats ", "default");
    CHECK_LINE("option verbose ", "environment SHARDMALLOC_VERBOSE");
    CHECK_LINE("shardmalloc: malloc is shardmalloc's", "pid");
    CHECK_NOT_OUT("warning: ");
  }
  SECTION("setuid programs ignore the environment (SHARDMALLOC_*, _CONF, MIMALLOC_*)") {
    if (geteuid() != 0) {
      printf("      (not root: cannot make a setuid copy; skipped)\n");
      continue;
    }
    /* a copy owned by nobody with the setuid bit, run by root: euid != ruid, so AT_SECURE */
    char dir[] = "/tmp/sm-options-suid-XXXXXX", copy[64], cmd[200];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(copy, sizeof copy, "%s/test-options", dir);
    snprintf(cmd, sizeof cmd, "chmod 755 %s && cp %s %s && chown 65534 %s", dir, self, copy, copy);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    const char *env[] = {"SHARDMALLOC_PURGE_DELAY=77", "SHARDMALLOC_CONF=segment_cache=3", "MIMALLOC_VERBOSE=1",
                         "SHARDMALLOC_BOGUS=1", NULL};
    char *argv[] = {copy, "dump", NULL};
    CHECK_EQ(run_argv(argv, env), 0);
    check_value("purge_delay", 77); /* without the setuid bit the values are read: the copy works */
    check_value("segment_cache", 3);
    CHECK(chmod(copy, 04755) == 0, "chmod: %s", strerror(errno));
    int rc = run_argv(argv, env);
    CHECK_EQ(rc, 0);
    check_value("purge_delay", 10);
    check_value("segment_cache", 16);
    check_value("verbose", 0);
    CHECK_NOT_OUT("warning: ");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s failed", cmd);
  }
  SECTION("the API (in a child with SHARDMALLOC_EAGER_COMMIT_DELAY, _CONF and MIMALLOC_ set)") {
    CHECK_RUN("api", "SHARDMALLOC_EAGER_COMMIT_DELAY=4", "SHARDMALLOC_CONF=huge_timeout=500", "MIMALLOC_ARENA_RESERVE=1M");
    printf("%s", out);
  }
  SECTION("memory_limit=64M") {
    CHECK_RUN("limit", "SHARDMALLOC_MEMORY_LIMIT=64M");
    printf("%s", out);
  }
  SECTION("max_errors (secure build, misuse reported, handler still called)") {
    if (secure_lib == NULL) {
      printf("      (no secure library given: max_errors not checked)\n");
      continue;
    }
    char preload[4200];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", secure_lib);
    CHECK_RUN("errors", preload, "SHARDMALLOC_ABORT_ON_ERROR=0");
    CHECK_EQ(count("error: "), 5);
    CHECK_OUT("handler calls: 5");
    CHECK_RUN("errors", preload, "SHARDMALLOC_ABORT_ON_ERROR=0", "SHARDMALLOC_MAX_ERRORS=2");
    CHECK_EQ(count("error: "), 2);
    CHECK_EQ(count("further errors are not shown (max_errors=2)"), 1);
    CHECK_OUT("handler calls: 5");
    CHECK_RUN("errors", preload, "SHARDMALLOC_ABORT_ON_ERROR=0", "SHARDMALLOC_SHOW_ERRORS=0");
    CHECK_EQ(count("error: "), 0);
    CHECK_OUT("handler calls: 5");
  }
  return sm_test_summary();
}

/* ---- shardmalloc-run --check ---- */

static bool write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return false;
  fputs(text, f);
  return fclose(f) == 0;
}

/* runs CC with args; true iff it succeeded (output in `out`) */
static bool compile(const char *cc, const char *a, const char *b, const char *c, const char *d, const char *e) {
  char *argv[] = {(char *)cc, (char *)a, (char *)b, (char *)c, (char *)d, (char *)e, NULL};
  const char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
  return run_argv(argv, env) == 0;
}

static int run_check(const char *script, const char *lib, const char *cc, const char *obj) {
  sm_test_name = "test-options (shardmalloc-run --check)";
  char libvar[4200], dir[] = "/tmp/sm-options-XXXXXX";
  snprintf(libvar, sizeof libvar, "SM_LIB=%s", lib);
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  const char *env[] = {libvar, "PATH=/usr/local/bin:/usr/bin:/bin", NULL};
  SECTION("a dynamic program: /bin/true") {
    char *argv[] = {"/bin/bash", (char *)script, "--check", "/bin/true", NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 0, "exit %d, output:\n%s", rc, out);
    CHECK_LINE("malloc is shardmalloc's", "/true");
    CHECK_NOT_OUT("NOT");
  }
  SECTION("python3, through the shell PATH lookup, with its output and exit status") {
    if (access("/usr/bin/python3", X_OK) != 0) {
      printf("      (no /usr/bin/python3: skipped)\n");
      continue;
    }
    char *argv[] = {"/bin/bash", (char *)script, "--check", "python3", "-c", "import sys; print('hi'); sys.exit(4)", NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 4, "expected the program's status 4, seen %d, output:\n%s", rc, out);
    CHECK_OUT("hi\n");
    CHECK_LINE("malloc is shardmalloc's", "python3");
  }
  SECTION("a program with its own malloc: NOT shardmalloc's, and why") {
    char src[256], exe[256];
    snprintf(src, sizeof src, "%s/ownmalloc.c", dir);
    snprintf(exe, sizeof exe, "%s/ownmalloc", dir);
    write_file(src, "#include <stddef.h>\n#include <string.h>\nstatic char arena[1 << 24]; static size_t used;\n"
                    "void *malloc(size_t n) { void *p = arena + used; used += (n + 15) & ~(size_t)15; return p; }\n"
                    "void free(void *p) { (void)p; }\n"
                    "void *calloc(size_t a, size_t b) { void *p = malloc(a * b); memset(p, 0, a * b); return p; }\n"
                    "void *realloc(void *p, size_t n) { void *q = malloc(n); if (p) memcpy(q, p, n); return q; }\n"
                    "int main(void) { return *(char *)malloc(1) == 0 ? 0 : 1; }\n");
    CHECK(compile(cc, "-O1", "-o", exe, src, NULL), "cc failed:\n%s", out);
    char *argv[] = {"/bin/bash", (char *)script, "--check", exe, NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 3, "expected exit 3 (check failed), seen %d, output:\n%s", rc, out);
    CHECK_LINE("malloc is NOT shardmalloc's", "defines its own malloc");
  }
  SECTION("a static program: explained") {
    char src[256], exe[256];
    snprintf(src, sizeof src, "%s/static.c", dir);
    snprintf(exe, sizeof exe, "%s/static", dir);
    write_file(src, "#include <stdlib.h>\nint main(void) { free(malloc(10)); return 0; }\n");
    if (!compile(cc, "-static", "-o", exe, src, NULL)) {
      printf("      (no static C library: static case skipped)\n%s", out);
      continue;
    }
    char *argv[] = {"/bin/bash", (char *)script, "--check", exe, NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 3, "expected exit 3 (check failed), seen %d, output:\n%s", rc, out);
    CHECK_LINE("statically linked", "LD_PRELOAD");
    CHECK_NOT_OUT("malloc is shardmalloc's");
    if (obj == NULL || access(obj, R_OK) != 0) continue;
    /* the same program with shardmalloc.o linked in: its malloc is shardmalloc's */
    snprintf(exe, sizeof exe, "%s/static-sm", dir);
    CHECK(compile(cc, "-static", "-o", exe, obj, src) || (printf("%s", out), 0), "static link with %s failed", obj);
    rc = run_argv(argv, env);
    CHECK(rc == 0, "exit %d, output:\n%s", rc, out);
    CHECK_LINE("malloc is shardmalloc's", "static-sm");
  }
  SECTION("not a program, no program") {
    char *argv[] = {"/bin/bash", (char *)script, "--check", "/nonexistent/prog", NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 127, "expected 127, seen %d, output:\n%s", rc, out);
    char *argv2[] = {"/bin/bash", (char *)script, "--check", NULL};
    rc = run_argv(argv2, env);
    CHECK(rc == 2, "expected 2 (usage), seen %d, output:\n%s", rc, out);
  }
  SECTION("options: an unknown one is refused with the usage; -- ends them") {
    char *argv[] = {"/bin/bash", (char *)script, "--bogus", "/bin/true", NULL};
    int rc = run_argv(argv, env);
    CHECK(rc == 2, "expected 2 (usage), seen %d, output:\n%s", rc, out);
    CHECK_LINE("unknown option --bogus", "");
    CHECK_LINE("usage: shardmalloc-run", "--secure");
    char *argv2[] = {"/bin/bash", (char *)script, "--check", "--", "/bin/true", NULL};
    rc = run_argv(argv2, env);
    CHECK(rc == 0, "exit %d, output:\n%s", rc, out);
    CHECK_LINE("malloc is shardmalloc's", "/true");
    char *argv3[] = {"/bin/bash", (char *)script, "--help", NULL};
    rc = run_argv(argv3, env);
    CHECK(rc == 0, "--help: expected exit 0, seen %d, output:\n%s", rc, out);
    CHECK_LINE("usage: shardmalloc-run", "--debug");
    CHECK_LINE("Run any program on shardmalloc", "preloads it");
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return sm_test_summary();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "dump")) return child_dump();
  if (argc > 1 && !strcmp(argv[1], "api")) return child_api();
  if (argc > 1 && !strcmp(argv[1], "limit")) return child_limit();
  if (argc > 1 && !strcmp(argv[1], "errors")) return child_errors();
  if (argc > 4 && !strcmp(argv[1], "--run-check")) return run_check(argv[2], argv[3], argv[4], argc > 5 ? argv[5] : NULL);
  sm_test_name = "test-options";
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[n] = 0;
  return run_cases(argc > 1 ? argv[1] : NULL);
}
