/* test-stats.c: the statistics API (docs/api/stats.md): sm_stats_get_json, sm_stats_merge,
 * sm_stats_reset, sm_process_info, sm_stats_print_out, sm_thread_stats_print_out and
 * SHARDMALLOC_SHOW_STATS at exit (in a child process: `test-stats child`), and glibc's mallinfo2.
 *
 * Figures are read back through the JSON, which a small validating parser turns into a table of
 * "path = value" entries ("counts.normal_blocks.total"); the parser is itself checked against
 * broken documents, and python3 -m json.tool checks the JSON too where it is installed.
 * Between two readings the test allocates nothing but what it counts: JSON goes into a static
 * buffer, the parser uses static tables, and nothing is printed. */
#include "sm-test.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <pthread.h>
#include <shardmalloc.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/* ---- a small validating JSON parser: scalars are kept as (path, text) ---- */
typedef struct {
  char path[80];
  char text[40];
  bool is_num;
} jent_t;
static jent_t jents[2048];
static int jcount;
static const char *jp;

static void jws(void) {
  while (*jp == ' ' || *jp == '\n' || *jp == '\t' || *jp == '\r') jp++;
}
static void jadd(const char *path, const char *start, size_t len, bool is_num) {
  if (jcount >= (int)(sizeof jents / sizeof jents[0])) return;
  jent_t *e = &jents[jcount++];
  snprintf(e->path, sizeof e->path, "%s", path);
  snprintf(e->text, sizeof e->text, "%.*s", (int)len, start);
  e->is_num = is_num;
}
static bool jstring(char *out, size_t n) {
  if (*jp != '"') return false;
  jp++;
  size_t k = 0;
  for (; *jp != '"'; jp++) {
    if ((unsigned char)*jp < 0x20) return false; /* also the end of the text */
    if (*jp == '\\') {
      jp++;
      if (*jp == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", jp[i]) || jp[i] == 0) return false;
        jp += 4;
      } else if (*jp == 0 || !strchr("\"\\/bfnrt", *jp)) {
        return false;
      }
    }
    if (k + 1 < n) out[k++] = *jp;
  }
  jp++;
  out[k] = 0;
  return true;
}
static bool jnumber(const char *path) {
  const char *s = jp;
  if (*jp == '-') jp++;
  if (*jp == '0') jp++;
  else if (*jp >= '1' && *jp <= '9') while (*jp >= '0' && *jp <= '9') jp++;
  else return false;
  if (*jp == '.') {
    jp++;
    if (!(*jp >= '0' && *jp <= '9')) return false;
    while (*jp >= '0' && *jp <= '9') jp++;
  }
  if (*jp == 'e' || *jp == 'E') {
    jp++;
    if (*jp == '+' || *jp == '-') jp++;
    if (!(*jp >= '0' && *jp <= '9')) return false;
    while (*jp >= '0' && *jp <= '9') jp++;
  }
  jadd(path, s, (size_t)(jp - s), true);
  return true;
}
static bool jvalue(const char *path, int depth) {
  char sub[80], key[64];
  if (depth > 16) return false;
  jws();
  if (*jp == '{' || *jp == '[') {
    bool obj = *jp == '{';
    char close = obj ? '}' : ']';
    jp++;
    jws();
    if (*jp == close) { jp++; return true; }
    for (int i = 0;; i++) {
      if (obj) {
        if (!jstring(key, sizeof key)) return false;
        jws();
        if (*jp++ != ':') return false;
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
      } else {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
      }
      if (!jvalue(sub, depth + 1)) return false;
      jws();
      if (*jp == ',') { jp++; jws(); continue; }
      if (*jp == close) { jp++; return true; }
      return false;
    }
  }
  if (*jp == '"') {
    const char *s = jp + 1;
    char tmp[64];
    if (!jstring(tmp, sizeof tmp)) return false;
    jadd(path, s, (size_t)(jp - 1 - s), false);
    return true;
  }
  if (strncmp(jp, "true", 4) == 0 || strncmp(jp, "null", 4) == 0) { jadd(path, jp, 4, false); jp += 4; return true; }
  if (strncmp(jp, "false", 5) == 0) { jadd(path, jp, 5, false); jp += 5; return true; }
  return jnumber(path);
}
static bool json_parse(const char *text) {
  jcount = 0;
  jp = text;
  if (!jvalue("", 0)) return false;
  jws();
  return *jp == 0;
}
static const jent_t *jfind(const char *path) {
  for (int i = 0; i < jcount; i++)
    if (strcmp(jents[i].path, path) == 0) return &jents[i];
  return NULL;
}
static long long jnum_at(const char *file, int line, const char *path) {
  const jent_t *e = jfind(path);
  SM_COUNT();
  if (e == NULL || !e->is_num) {
    sm_fail(file, line, "JSON number present", "no number at %s", path);
    return -1;
  }
  return strtoll(e->text, NULL, 10);
}
#define JNUM(...) jnum_from(__FILE__, __LINE__, __VA_ARGS__)
__attribute__((format(printf, 3, 4))) static long long jnum_from(const char *file, int line, const char *fmt, ...) {
  char path[80];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(path, sizeof path, fmt, ap);
  va_end(ap);
  return jnum_at(file, line, path);
}

/* ---- reading the statistics ---- */
static char jbuf[1 << 17];

static bool stats_read(void) {
  if (sm_stats_get_json(sizeof jbuf, jbuf) == NULL) return false;
  return json_parse(jbuf);
}
typedef struct { long long total, freed, current, peak; } row_t;
static row_t row(const char *key) {
  row_t r;
  r.total = JNUM("counts.%s.total", key);
  r.freed = JNUM("counts.%s.freed", key);
  r.current = JNUM("counts.%s.current", key);
  r.peak = JNUM("counts.%s.peak", key);
  return r;
}
static bool have_bins(void) { return jfind("bins[0].total") != NULL; }
/* the index of the huge-block row, which follows the size classes (-1 if none) */
static int huge_bin(void) {
  char path[32];
  for (int i = 0; i < 256; i++) {
    snprintf(path, sizeof path, "bins[%d].huge", i);
    const jent_t *e = jfind(path);
    if (e != NULL && !strcmp(e->text, "true")) return i;
  }
  return -1;
}
static const char *const count_keys[] = {"normal", "normal_blocks", "large", "large_blocks", "huge", "huge_blocks",
                                         "reserved", "committed", "cached", "segments", "pages", "abandoned",
                                         "threads", "heaps"};
#define NKEYS (int)(sizeof count_keys / sizeof count_keys[0])

/* Readings from another thread, which merges only its own (empty) heap and so sees what the
 * allocating thread has merged. One helper thread serves every reading: creating a thread
 * allocates (its TLS), which would show up in the figures. */
static pthread_mutex_t reader_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reader_cond = PTHREAD_COND_INITIALIZER;
static int reader_request, reader_done; /* request: 1 read, -1 stop */
static bool reader_ok;
static void *reader_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&reader_lock);
  for (;;) {
    while (reader_request == 0) pthread_cond_wait(&reader_cond, &reader_lock);
    if (reader_request < 0) break;
    reader_ok = stats_read();
    reader_request = 0;
    reader_done = 1;
    pthread_cond_broadcast(&reader_cond);
  }
  pthread_mutex_unlock(&reader_lock);
  return NULL;
}
static void reader_call(int request) {
  pthread_mutex_lock(&reader_lock);
  reader_request = request;
  reader_done = 0;
  pthread_cond_broadcast(&reader_cond);
  while (request > 0 && !reader_done) pthread_cond_wait(&reader_cond, &reader_lock);
  pthread_mutex_unlock(&reader_lock);
}
static bool stats_read_elsewhere(void) {
  reader_call(1);
  return reader_ok;
}

static size_t padding; /* debug/secure builds pad every request by 8 bytes */
static size_t block_of(size_t size) { return sm_good_size(size) + padding; } /* good_size: up to the padding */

/* ---- output capture ---- */
typedef struct {
  int calls, bad;
  size_t len;
  void *arg_seen;
  char text[1 << 16];
} collect_t;
static collect_t col;
static void collect(const char *msg, void *arg) {
  collect_t *c = arg;
  c->calls++;
  c->arg_seen = arg;
  size_t n = strlen(msg);
  if (n == 0 || msg[n - 1] != '\n' || memchr(msg, '\n', n) != msg + n - 1) c->bad++; /* one line each */
  if (c->len + n < sizeof c->text) {
    memcpy(c->text + c->len, msg, n);
    c->len += n;
    c->text[c->len] = 0;
  }
}
static int stderr_saved = -1, stderr_file = -1;
static void stderr_capture(void) {
  char name[] = "/tmp/test-stats-XXXXXX";
  fflush(stderr);
  stderr_file = mkstemp(name);
  unlink(name);
  stderr_saved = dup(2);
  dup2(stderr_file, 2);
}
/* restores stderr; returns what was written to it (in col.text when want_text) */
static size_t stderr_release(char *text, size_t size) {
  fflush(stderr);
  dup2(stderr_saved, 2);
  close(stderr_saved);
  struct stat st;
  fstat(stderr_file, &st);
  if (text != NULL) {
    ssize_t n = pread(stderr_file, text, size - 1, 0);
    text[n > 0 ? n : 0] = 0;
  }
  close(stderr_file);
  return (size_t)st.st_size;
}

static bool have_python(void) { return system("command -v python3 >/dev/null 2>&1") == 0; }
static int python_json_check(const char *text) {
  FILE *p = popen("python3 -m json.tool >/dev/null 2>&1", "w");
  if (p == NULL) return -1;
  fputs(text, p);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* run `self child` with SHARDMALLOC_SHOW_STATS=value; its stderr into out */
static int run_child(const char *self, const char *value, char *out, size_t size) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    if (value) setenv("SHARDMALLOC_SHOW_STATS", value, 1);
    else unsetenv("SHARDMALLOC_SHOW_STATS");
    execl(self, self, "child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t n;
  while ((n = read(fds[0], out + len, size - 1 - len)) > 0) len += (size_t)n;
  out[len] = 0;
  close(fds[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
/* the message lines without their "shardmalloc: " prefix, joined */
static void strip_prefix(const char *in, char *out, size_t size) {
  size_t k = 0;
  while (*in && k + 1 < size) {
    if (strncmp(in, "shardmalloc: ", 13) == 0) in += 13;
    while (*in && *in != '\n' && k + 1 < size) out[k++] = *in++;
    if (*in == '\n' && k + 1 < size) out[k++] = *in++;
  }
  out[k] = 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static double cpu_ms(void) { /* the process's CPU time */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    /* at exit: two 5 MiB huge blocks still live, one freed */
    void *a = sm_malloc(5 * MiB), *b = sm_malloc(5 * MiB), *c = sm_malloc(5 * MiB);
    memset(a, 1, 4096);
    sm_free(c);
    return a != NULL && b != NULL ? 0 : 1;
  }
  sm_test_name = "test-stats";
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("test-stats: the statistics API\n"); /* stdout's buffer exists before any reading */
  /* padded builds: the debug build reports the requested size as usable, the secure build the
   * block less its 8 bytes of padding (1024 is a class of its own; 1032 is not) */
  void *probe = sm_malloc(17), *probe_class = sm_malloc(1024);
  padding = sm_usable_size(probe) == 17 || sm_usable_size(probe_class) != 1024 ? 8 : 0;
  sm_free(probe);
  sm_free(probe_class);

  SECTION("JSON: valid, every figure present; the parser rejects broken JSON") {
    CHECK(stats_read(), "sm_stats_get_json into a buffer parses: %.200s", jbuf);
    for (int i = 0; i < NKEYS; i++) {
      row_t r = row(count_keys[i]);
      CHECK(r.peak >= r.current, "%s: peak %lld >= current %lld", count_keys[i], r.peak, r.current);
    }
    const char *proc[] = {"elapsed_ms", "user_ms", "system_ms", "current_rss", "peak_rss", "current_commit",
                          "peak_commit", "page_faults"};
    for (size_t i = 0; i < sizeof proc / sizeof proc[0]; i++) JNUM("process.%s", proc[i]);
    JNUM("counters.segment_map");
    JNUM("counters.mmap_calls");
    const jent_t *b = jfind("build"), *v = jfind("version");
    CHECK(b != NULL && (!strcmp(b->text, "release") || !strcmp(b->text, "debug") || !strcmp(b->text, "secure")),
          "build is release, debug or secure: %s", b ? b->text : "(missing)");
    CHECK(v != NULL && v->text[0] >= '0' && v->text[0] <= '9', "version: %s", v ? v->text : "(missing)");
    if (b != NULL && !strcmp(b->text, "debug")) CHECK(have_bins() && huge_bin() > 0, "debug build: bins, the last for huge blocks");
    if (b != NULL && !strcmp(b->text, "release")) CHECK(!have_bins(), "release build: no bins");
    const char *bad[] = {"{\"a\": 1,}", "{\"a\" 1}", "[1 2]", "{\"a\": 01}", "{\"a\": -}", "{\"a\": tru}",
                         "{\"a\": \"x}", "{} {}", "{\"a\": 1.}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!json_parse(bad[i]), "rejects %s", bad[i]);
    char *j = sm_stats_get_json(0, NULL);
    CHECK_NONNULL(j);
    if (j != NULL) {
      size_t len = strlen(j);
      CHECK(json_parse(j), "allocated JSON parses");
      j[len - 2] = 0; /* truncated: must be rejected */
      CHECK(!json_parse(j), "truncated JSON rejected");
      sm_free(j);
    }
    char small[64] = "x";
    CHECK_NULL(sm_stats_get_json(sizeof small, small));
    CHECK(small[0] == 0, "a buffer too small holds an empty string, seen \"%.20s\"", small);
    CHECK_NULL(sm_stats_get_json(0, small));
    if (have_python()) {
      CHECK(stats_read(), "read");
      CHECK_EQ(python_json_check(jbuf), 0);
      CHECK(python_json_check("{\"a\": 1,}") != 0, "python3 -m json.tool rejects broken JSON");
    } else {
      printf("      (python3 not installed: json.tool check skipped)\n");
    }
  }

  SECTION("normal blocks: allocated - freed = current after sm_stats_merge") {
    enum { N = 2400 };
    static void *p[N];
    static const size_t sizes[] = {16, 40, 200, 1000, 3000, 20000}; /* small and medium pages */
    long long n_alloc = 0, n_free = 0, b_alloc = 0, b_free = 0;
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t a = row("normal"), ab = row("normal_blocks");
    long long bins_a = 0;
    if (have_bins())
      for (int i = 0; i < huge_bin(); i++) bins_a += JNUM("bins[%d].total", i);
    for (int i = 0; i < N; i++) {
      size_t s = sizes[i % 6];
      p[i] = sm_malloc(s);
      memset(p[i], 0x5a, s);
      n_alloc++;
      b_alloc += (long long)block_of(s);
    }
    for (int i = 0; i < N; i++) {
      if (i % 8 >= 5) continue;
      sm_free(p[i]);
      p[i] = NULL;
      n_free++;
      b_free += (long long)block_of(sizes[i % 6]);
    }
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t b = row("normal"), bb = row("normal_blocks");
    CHECK_EQ(bb.total - ab.total, n_alloc);
    CHECK_EQ(bb.freed - ab.freed, n_free);
    CHECK_EQ(bb.current - ab.current, n_alloc - n_free);
    CHECK_EQ(b.total - a.total, b_alloc);
    CHECK_EQ(b.freed - a.freed, b_free);
    CHECK_EQ(b.current - a.current, b_alloc - b_free);
    CHECK_EQ(b.total - b.freed, b.current);
    CHECK_EQ(bb.total - bb.freed, bb.current);
    CHECK(b.peak >= b.current && bb.peak >= bb.current, "peaks %lld %lld", b.peak, bb.peak);
    if (have_bins()) {
      long long bins_b = 0;
      for (int i = 0; i < huge_bin(); i++) bins_b += JNUM("bins[%d].total", i);
      CHECK_EQ(bins_b - bins_a, n_alloc);
    }
    for (int i = 0; i < N; i++) sm_free(p[i]);
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t c = row("normal"), cb = row("normal_blocks");
    CHECK_EQ(cb.current, ab.current);
    CHECK_EQ(c.current, a.current);
    CHECK_EQ(cb.freed - ab.freed, n_alloc);
  }

  SECTION("peak: blocks that fill whole pages count while they are live, not only once freed") {
    /* 32 MiB of 64-byte blocks, then 24 MiB of 192 KiB ones (large pages), all freed before the
     * statistics are read: until 2026-11-25 a page's blocks were counted only when the page was
     * refilled or given back, netted against their frees, so the peaks stayed near zero */
    enum { SMALL = 32 * 1024 * 1024 / 64, LARGE = 128 };
    void **p = sm_malloc(SMALL * sizeof *p);
    CHECK(p != NULL, "the array");
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t n0 = row("normal"), l0 = row("large");
    for (int i = 0; i < SMALL; i++) p[i] = sm_malloc(64);
    for (int i = 0; i < SMALL; i++) sm_free(p[i]);
    for (int i = 0; i < LARGE; i++) p[i] = sm_malloc(192 * 1024);
    for (int i = 0; i < LARGE; i++) sm_free(p[i]);
    sm_free(p);
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t n1 = row("normal"), l1 = row("large");
    CHECK(n1.peak - n0.current >= 30LL * 1024 * 1024, "normal peak %lld, %lld before: 32 MiB were live", n1.peak,
          n0.current);
    CHECK(l1.peak - l0.current >= 22LL * 1024 * 1024, "large peak %lld, %lld before: 24 MiB were live", l1.peak,
          l0.current);
    CHECK_EQ(n1.current, n0.current);
    CHECK_EQ(l1.current, l0.current);
  }

  SECTION("sm_stats_merge: block figures lag until the allocating thread merges") {
    enum { N = 1000 }; /* 16 KiB of small blocks: far below the 1 MiB a heap adds on its own */
    static void *p[N];
    pthread_t reader;
    CHECK_EQ(pthread_create(&reader, NULL, reader_main, NULL), 0);
    CHECK(stats_read_elsewhere(), "read from another thread"); /* the thread is fully started */
    sm_stats_merge();
    CHECK(stats_read_elsewhere(), "read from another thread");
    row_t a = row("normal_blocks");
    for (int i = 0; i < N; i++) p[i] = sm_malloc(16);
    CHECK(stats_read_elsewhere(), "read from another thread");
    row_t b = row("normal_blocks");
    CHECK(b.total - a.total < N, "not merged yet: %lld of %d blocks seen elsewhere", b.total - a.total, N);
    sm_stats_merge();
    CHECK(stats_read_elsewhere(), "read from another thread");
    row_t c = row("normal_blocks");
    CHECK_EQ(c.total - a.total, N);
    CHECK_EQ(c.current - a.current, N);
    for (int i = 0; i < N; i++) sm_free(p[i]);
    sm_stats_merge();
    CHECK(stats_read_elsewhere(), "read from another thread");
    row_t d = row("normal_blocks");
    CHECK_EQ(d.freed - a.freed, N);
    CHECK_EQ(d.current, a.current);
    reader_call(-1);
    pthread_join(reader, NULL);
  }

#if defined(__GLIBC__)
  SECTION("mallinfo2: blocks in use, the rest of the segments' memory, huge blocks as mmapped") {
    /* glibc's meaning: uordblks in use, fordblks free, their sum the arena; hblkhd mmapped.
     * Until 2026-11-25 "in use" was the segments' address space less the cache. */
    enum { N = 20000 };
    static void *p[N];
    struct mallinfo2 a = mallinfo2();
    CHECK_EQ(a.uordblks + a.fordblks, a.arena);
    for (int i = 0; i < N; i++) p[i] = malloc(1000); /* 20 MB in blocks of 1000 (1024 or 1040) */
    void *huge = malloc(40 * MiB);
    CHECK(huge != NULL, "40 MiB");
    memset(huge, 1, 4096);
    struct mallinfo2 b = mallinfo2();
    long long grew = (long long)b.uordblks - (long long)a.uordblks;
    CHECK(grew >= N * 1000LL && grew <= N * 1100LL, "in use grew by %lld for %d x 1000 bytes", grew, N);
    CHECK_EQ(b.uordblks + b.fordblks, b.arena);
    CHECK(b.hblkhd >= a.hblkhd + 40 * MiB && b.hblks == a.hblks + 1, "mmapped %zu -> %zu bytes, %zu -> %zu blocks",
          a.hblkhd, b.hblkhd, a.hblks, b.hblks);
    for (int i = 0; i < N; i++) free(p[i]);
    free(huge);
    struct mallinfo2 c = mallinfo2();
    CHECK_EQ(c.uordblks, a.uordblks);
    CHECK_EQ(c.hblks, a.hblks);
    CHECK(c.hblkhd <= a.hblkhd, "mmapped back to %zu from %zu", c.hblkhd, a.hblkhd);
  }

  SECTION("glibc's other names: malloc_info's unknown options return EINVAL (errno untouched), __libc_mallinfo") {
    FILE *devnull = fopen("/dev/null", "w");
    CHECK_NONNULL(devnull);
    if (devnull != NULL) {
      errno = 1234;
      int r = malloc_info(1, devnull); /* glibc: `return EINVAL`, not -1 and errno (until 2026-11-28 here) */
      CHECK(r == EINVAL && errno == 1234, "expected EINVAL returned and errno kept, seen %d and errno %d", r, errno);
      CHECK_EQ(malloc_info(0, devnull), 0);
      fclose(devnull);
    }
    /* glibc exports its internal names too; a program calling them must reach this allocator */
    struct mallinfo (*libc_mallinfo)(void) = (struct mallinfo (*)(void))dlsym(RTLD_DEFAULT, "__libc_mallinfo");
    int (*libc_mallopt)(int, int) = (int (*)(int, int))dlsym(RTLD_DEFAULT, "__libc_mallopt");
    CHECK(libc_mallinfo != NULL && libc_mallopt != NULL, "expected both names, seen %p and %p", (void *)libc_mallinfo,
          (void *)libc_mallopt);
    if (libc_mallinfo != NULL) {
      void *huge = malloc(40 * MiB);
      struct mallinfo m = libc_mallinfo();
      CHECK(m.hblks >= 1 && m.hblkhd >= 40 * (int)MiB, "expected the huge block counted, seen %d blocks of %d bytes", m.hblks,
            m.hblkhd);
      free(huge);
    }
    if (libc_mallopt != NULL) CHECK_EQ(libc_mallopt(M_ARENA_MAX, 1), 1);
  }
#endif

  SECTION("huge blocks are counted exactly, with their whole mapping") {
    static const size_t sizes[] = {5 * MiB, 9 * MiB, 13 * MiB - 64 * KiB}; /* mappings of 8, 12, 16 MiB */
    const long long mapped = 36 * (long long)MiB;
    CHECK(stats_read(), "read");
    row_t a = row("huge"), ab = row("huge_blocks");
    long long bin_a = have_bins() ? JNUM("bins[%d].total", huge_bin()) : 0;
    void *p[3];
    for (int i = 0; i < 3; i++) p[i] = sm_malloc(sizes[i]);
    CHECK(stats_read(), "read");
    row_t b = row("huge"), bb = row("huge_blocks");
    CHECK_EQ(bb.total - ab.total, 3);
    CHECK_EQ(bb.current - ab.current, 3);
    CHECK_EQ(b.total - a.total, mapped);
    CHECK_EQ(b.current - a.current, mapped);
    CHECK(b.peak >= b.current, "peak %lld >= current %lld", b.peak, b.current);
    if (have_bins()) CHECK_EQ(JNUM("bins[%d].total", huge_bin()) - bin_a, 3);
    for (int i = 0; i < 3; i++) sm_free(p[i]);
    CHECK(stats_read(), "read");
    row_t c = row("huge"), cb = row("huge_blocks");
    CHECK_EQ(cb.freed - ab.freed, 3);
    CHECK_EQ(cb.current, ab.current);
    CHECK_EQ(c.freed - a.freed, mapped);
    CHECK_EQ(c.current, a.current);
  }

  SECTION("reserved and committed follow mapping and purging (sm_collect)") {
    enum { N = 768 }; /* 48 MiB in 64 KiB blocks: a dozen new segments */
    static void *p[N];
    sm_collect(true);
    CHECK(stats_read(), "read");
    row_t ra = row("reserved"), ca = row("committed");
    long long mmaps = JNUM("counters.mmap_calls");
    for (int i = 0; i < N; i++) {
      p[i] = sm_malloc(64 * KiB);
      memset(p[i], 1, 64 * KiB);
    }
    CHECK(stats_read(), "read");
    row_t rb = row("reserved"), cb = row("committed");
    CHECK(rb.current - ra.current >= 40 * (long long)MiB, "reserved grew by %lld", rb.current - ra.current);
    CHECK(cb.current - ca.current >= 40 * (long long)MiB, "committed grew by %lld", cb.current - ca.current);
    CHECK(rb.total - ra.total >= 40 * (long long)MiB, "reserved total grew by %lld", rb.total - ra.total);
    CHECK(JNUM("counters.mmap_calls") > mmaps, "mmap calls counted");
    CHECK(rb.current <= rb.peak && cb.current <= cb.peak && cb.current <= rb.current, "committed %lld <= reserved %lld",
          cb.current, rb.current);
    for (int i = 0; i < N; i++) sm_free(p[i]);
    sm_collect(true);
    CHECK(stats_read(), "read");
    row_t rc = row("reserved"), cc = row("committed");
    CHECK(cb.current - cc.current >= 40 * (long long)MiB, "committed fell by %lld", cb.current - cc.current);
    CHECK(cc.freed - cb.freed >= 40 * (long long)MiB, "committed freed grew by %lld", cc.freed - cb.freed);
    CHECK(rc.current <= rb.current, "reserved did not grow: %lld -> %lld", rb.current, rc.current);
  }

  SECTION("sm_stats_reset: totals and counters restart, current stays, peak = current") {
    enum { L = 100 };
    static void *live[L];
    for (int i = 0; i < L; i++) live[i] = sm_malloc(100);
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t before[NKEYS];
    for (int i = 0; i < NKEYS; i++) before[i] = row(count_keys[i]);
    long long bins_before[256] = {0};
    bool bins = have_bins();
    if (bins)
      for (int i = 0; i <= huge_bin(); i++) bins_before[i] = JNUM("bins[%d].current", i);
    sm_stats_reset();
    CHECK(stats_read(), "read");
    for (int i = 0; i < NKEYS; i++) {
      row_t r = row(count_keys[i]);
      CHECK(r.total == 0 && r.freed == 0, "%s: total %lld freed %lld after reset", count_keys[i], r.total, r.freed);
      CHECK(r.current == before[i].current, "%s: current %lld, before the reset %lld", count_keys[i], r.current,
            before[i].current);
      CHECK(r.peak == r.current, "%s: peak %lld = current %lld", count_keys[i], r.peak, r.current);
    }
    int counters = 0;
    for (int i = 0; i < jcount; i++) {
      if (strncmp(jents[i].path, "counters.", 9) != 0) continue;
      counters++;
      CHECK(strcmp(jents[i].text, "0") == 0, "%s = %s after reset", jents[i].path, jents[i].text);
    }
    CHECK(counters >= 9, "%d counters", counters);
    if (bins)
      for (int i = 0; i <= huge_bin(); i++) {
        CHECK(JNUM("bins[%d].total", i) == 0 && JNUM("bins[%d].freed", i) == 0, "bin %d restarted", i);
        CHECK_EQ(JNUM("bins[%d].current", i), bins_before[i]);
      }
    void *p[10];
    for (int i = 0; i < 10; i++) p[i] = sm_malloc(100);
    sm_stats_merge();
    CHECK(stats_read(), "read");
    row_t r = row("normal_blocks");
    CHECK_EQ(r.total, 10);
    CHECK_EQ(r.freed, 0);
    CHECK_EQ(r.current, before[1].current + 10);
    for (int i = 0; i < 10; i++) sm_free(p[i]);
    for (int i = 0; i < L; i++) sm_free(live[i]);
    sm_stats_merge();
    CHECK(stats_read(), "read");
    r = row("normal_blocks");
    CHECK_EQ(r.freed, 10 + L);
    CHECK_EQ(r.current, before[1].current - L);
  }

  SECTION("sm_process_info: plausible and live") {
    size_t e1, u1, s1, r1, pr1, c1, pc1, f1, e2, u2, s2, r2, pr2, c2, pc2, f2;
    sm_process_info(&e1, &u1, &s1, &r1, &pr1, &c1, &pc1, &f1);
    CHECK(stats_read(), "read");
    row_t cm = row("committed");
    CHECK(r1 > 0 && pr1 >= r1, "rss %zu, peak %zu", r1, pr1);
    CHECK(c1 > 0 && pc1 >= c1, "commit %zu, peak %zu", c1, pc1);
    CHECK_EQ(c1, cm.current);
    CHECK_EQ(pc1, cm.peak);
    size_t own = rss_bytes();
    CHECK(r1 + 8 * MiB > own && own + 8 * MiB > r1, "rss %zu, /proc/self/statm says %zu", r1, own);
    CHECK(e1 < 600000, "elapsed %zu ms since start", e1);
    char *big = sm_malloc(32 * MiB); /* fresh memory: faults and RSS */
    CHECK_NONNULL(big);
    memset(big, 1, 32 * MiB);
    double t0 = now_ms();
    usleep(60000);
    /* 150 ms of CPU time, however long a loaded machine takes to give it (the wall clock is no
     * measure of it: with other processes on the cores, 140 ms of looping got under 50 ms) */
    volatile unsigned long x = 0;
    double c0 = cpu_ms();
    while ((cpu_ms() - c0 < 150 || now_ms() - t0 < 200) && now_ms() - t0 < 30000) x += (unsigned long)x * 3 + 1;
    sm_process_info(&e2, &u2, &s2, &r2, &pr2, &c2, &pc2, &f2);
    CHECK(e2 >= e1 + 190 && e2 < e1 + 60000, "elapsed %zu -> %zu ms over 200 ms", e1, e2);
    CHECK(u2 + s2 >= u1 + s1 + 100, "cpu time %zu -> %zu ms after 150 ms of work", u1 + s1, u2 + s2);
    CHECK(f2 > f1 && f2 > 0, "page faults %zu -> %zu after touching 32 MiB", f1, f2);
    CHECK(r2 >= r1 + 24 * MiB, "rss %zu -> %zu after touching 32 MiB", r1, r2);
    CHECK(pr2 >= r2 && pc2 >= c2 && c2 >= c1 + 32 * MiB, "peaks; commit %zu -> %zu", c1, c2);
    sm_free(big);
    sm_process_info(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    size_t only = 0;
    sm_process_info(NULL, NULL, NULL, &only, NULL, NULL, NULL, NULL);
    CHECK(only > 0, "rss alone %zu", only);
  }

  SECTION("print_out: every line to the function, none to stderr") {
    static const char *const rows[] = {"normal", "normal blocks", "large blocks", "huge blocks", "reserved",
                                       "committed", "cached", "segments", "pages", "abandoned", "threads", "heaps",
                                       "segments mapped", "bytes purged", "mmap calls", "elapsed", "page faults",
                                       "rss", "commit", "peak", "current"};
    void *keep = sm_malloc(5 * MiB);
    memset(&col, 0, sizeof col);
    stderr_capture();
    sm_stats_print_out(collect, &col);
    size_t err = stderr_release(NULL, 0);
    CHECK_EQ(err, 0);
    CHECK(col.arg_seen == &col, "arg passed through");
    CHECK_EQ(col.bad, 0);
    CHECK(col.calls >= 14 + 9 + 5, "%d lines", col.calls);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) CHECK(strstr(col.text, rows[i]), "row %s", rows[i]);
    const char *huge = strstr(col.text, "huge  ");
    CHECK(huge != NULL && strstr(huge, "MiB") != NULL && strstr(huge, "MiB") < strchr(huge, '\n'),
          "byte rows read in units: %.80s", huge ? huge : "(no huge row)");
    if (padding != 0 && have_bins()) CHECK(strstr(col.text, "size classes"), "debug build: size classes");
    memset(&col, 0, sizeof col);
    stderr_capture();
    sm_thread_stats_print_out(collect, &col);
    err = stderr_release(NULL, 0);
    CHECK_EQ(err, 0);
    CHECK_EQ(col.bad, 0);
    CHECK(strstr(col.text, "this thread") && strstr(col.text, "normal blocks"), "thread view, then the table");
    static char text[1 << 16];
    stderr_capture();
    sm_stats_print();
    err = stderr_release(text, sizeof text);
    CHECK(err > 0 && strstr(text, "normal blocks") && strstr(text, "elapsed"), "sm_stats_print to stderr: %zu bytes",
          err);
    memset(&col, 0, sizeof col);
    sm_register_output(collect, &col);
    stderr_capture();
    sm_stats_print();
    err = stderr_release(NULL, 0);
    sm_register_output(NULL, NULL);
    CHECK_EQ(err, 0);
    CHECK(col.calls >= 14 + 9 + 5 && strstr(col.text, "committed"), "registered output: %d lines", col.calls);
    sm_free(keep);
  }

  SECTION("SHARDMALLOC_SHOW_STATS prints at exit (1: table, json: JSON, 0: nothing)") {
    static char out[1 << 17], json[1 << 17];
    const char *self = "/proc/self/exe";
    char path[4096];
    ssize_t n = readlink(self, path, sizeof path - 1);
    if (n > 0) path[n] = 0, self = path;
    CHECK_EQ(run_child(self, "1", out, sizeof out), 0);
    CHECK(strstr(out, "normal blocks") && strstr(out, "elapsed") && strstr(out, "huge blocks"), "table: %.300s", out);
    CHECK(strchr(out, '{') == NULL, "no JSON in the table");
    const char *modes[] = {"json", "2"};
    for (int m = 0; m < 2; m++) {
      CHECK_EQ(run_child(self, modes[m], out, sizeof out), 0);
      strip_prefix(out, json, sizeof json);
      const char *start = strchr(json, '{');
      CHECK(start != NULL && json_parse(start), "SHOW_STATS=%s: valid JSON: %.300s", modes[m], json);
      if (start != NULL && json_parse(start)) {
        CHECK(JNUM("counts.huge_blocks.current") >= 2 && JNUM("counts.huge_blocks.total") >= 3,
              "the child's huge blocks (2 live of 3)");
        if (have_python()) CHECK_EQ(python_json_check(start), 0);
      }
      CHECK(strstr(out, "normal blocks") == NULL, "SHOW_STATS=%s: no table", modes[m]);
    }
    CHECK_EQ(run_child(self, "0", out, sizeof out), 0);
    CHECK(strstr(out, "normal") == NULL && strchr(out, '{') == NULL, "SHOW_STATS=0: nothing, seen %.200s", out);
  }

  return sm_test_summary();
}
