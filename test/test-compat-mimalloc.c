/* test-compat-mimalloc: code written for mimalloc compiles against include/compat/mimalloc.h and
 * runs on shardmalloc. Every mi_ function, macro and type of the header is used here or in
 * test-compat-mimalloc.cpp (compat-names.sh checks that), each with assertions on its result, and
 * the documented differences from mimalloc (docs/api/compat.md) are pinned down. */
#include "sm-test.h"

#include <pthread.h>
#include <sys/mman.h>

#include <mimalloc.h>

#define BIG_FAIL ((size_t)1 << 62)

static void test_basic(void) {
  SECTION("malloc, calloc, realloc, expand, free, strdup, strndup, realpath") {
    unsigned char *p = mi_malloc(100);
    CHECK_NONNULL(p);
    CHECK(sm_check_owned(p), "mi_malloc: expected a shardmalloc block, seen %p", (void *)p);
    fill_pattern(p, 100, 1);
    p = mi_realloc(p, 5000);
    CHECK_NONNULL(p);
    CHECK_PATTERN(p, 100, 1);
    CHECK(mi_expand(p, mi_usable_size(p)) == p, "mi_expand(p, usable size): expected p%s", "");
    CHECK_NULL(mi_expand(p, 100u << 20));
    /* mimalloc's realloc(p, 0) returns a minimal block (shardmalloc's frees and gives NULL) */
    p = mi_realloc(p, 0);
    CHECK(p != NULL && sm_check_owned(p), "mi_realloc(p, 0): expected a minimal block as in mimalloc, seen %p", (void *)p);
    mi_free(p);
    unsigned char *c = mi_calloc(1000, 7);
    CHECK_NONNULL(c);
    CHECK_ZERO(c, 7000);
    mi_free(c);
    errno = 0;
    CHECK_NULL(mi_calloc(opaque_size(SIZE_MAX / 2), 3));
    CHECK_ERRNO(ENOMEM);
    mi_free(NULL);
    char *s = mi_strdup("compat");
    CHECK(s != NULL && strcmp(s, "compat") == 0 && sm_check_owned(s), "mi_strdup: expected a copy, seen %s", s ? s : "(null)");
    mi_free(s);
    s = mi_strndup("compatible", 6);
    CHECK(s != NULL && strcmp(s, "compat") == 0, "mi_strndup(.., 6): expected \"compat\", seen %s", s ? s : "(null)");
    mi_free(s);
    char *r = mi_realpath("/", NULL);
    CHECK(r != NULL && strcmp(r, "/") == 0 && sm_check_owned(r), "mi_realpath(\"/\", NULL): expected \"/\", seen %s",
          r ? r : "(null)");
    mi_free(r);
    char buf[4096];
    CHECK(mi_realpath("/", buf) == buf && strcmp(buf, "/") == 0, "mi_realpath into a buffer: expected the buffer%s", "");
  }
}

static void test_extended(void) {
  SECTION("small, zalloc, mallocn, reallocn, reallocf, usable and good size, the _tp macros") {
    CHECK_EQ(MI_SMALL_SIZE_MAX, SM_SMALL_SIZE_MAX);
    void *p = mi_malloc_small(MI_SMALL_SIZE_MAX);
    CHECK(p != NULL && mi_usable_size(p) >= MI_SMALL_SIZE_MAX, "mi_malloc_small(max): expected %zu usable bytes",
          (size_t)MI_SMALL_SIZE_MAX);
    mi_free(p);
    unsigned char *z = mi_zalloc_small(200);
    CHECK_NONNULL(z);
    CHECK_ZERO(z, 200);
    mi_free(z);
    z = mi_zalloc(50000);
    CHECK_NONNULL(z);
    CHECK_ZERO(z, 50000);
    mi_free(z);
    errno = 0;
    CHECK_NULL(mi_mallocn(opaque_size(SIZE_MAX / 2), 4));
    CHECK_ERRNO(ENOMEM);
    unsigned char *n = mi_mallocn(10, 10);
    CHECK_NONNULL(n);
    fill_pattern(n, 100, 2);
    errno = 0;
    CHECK_NULL(mi_reallocn(n, opaque_size(SIZE_MAX / 2), 4));
    CHECK_ERRNO(ENOMEM);
    CHECK_PATTERN(n, 100, 2);
    n = mi_reallocn(n, 100, 100);
    CHECK(n != NULL && mi_usable_size(n) >= 10000, "mi_reallocn(n, 100, 100): expected >= 10000 bytes%s", "");
    CHECK_PATTERN(n, 100, 2);
    n = mi_reallocn(n, 0, 100);
    CHECK(n != NULL, "mi_reallocn(n, 0, 100): expected a minimal block as in mimalloc, seen NULL%s", "");
    n = mi_reallocf(n, 300);
    CHECK_NONNULL(n);
    errno = 0;
    CHECK_NULL(mi_reallocf(n, opaque_size(BIG_FAIL))); /* frees n: nothing leaks */
    CHECK_ERRNO(ENOMEM);
    CHECK(mi_good_size(100) >= 100 && mi_good_size(100) == sm_good_size(100), "mi_good_size(100): expected %zu, seen %zu",
          sm_good_size(100), mi_good_size(100));
    CHECK_EQ(mi_usable_size(NULL), 0);

    struct pt { double x, y; };
    struct pt *a = mi_malloc_tp(struct pt);
    struct pt *b = mi_zalloc_tp(struct pt);
    struct pt *c = mi_calloc_tp(struct pt, 10);
    struct pt *d = mi_mallocn_tp(struct pt, 10);
    CHECK(a && b && c && d && b->x == 0 && c[9].y == 0, "the _tp macros: expected blocks (zeroed for zalloc/calloc)%s", "");
    d[9].x = 4;
    d = mi_reallocn_tp(d, struct pt, 1000);
    c = mi_recalloc_tp(c, struct pt, 1000);
    CHECK(d && c && d[9].x == 4 && c[999].x == 0 && c[500].y == 0, "mi_reallocn_tp / mi_recalloc_tp: wrong contents%s", "");
    mi_free(a);
    mi_free(b);
    mi_free(c);
    mi_free(d);
  }
}

static void test_aligned(void) {
  SECTION("aligned: malloc, zalloc, calloc, realloc (and _at)") {
    for (size_t al = 8; al <= (1u << 20); al <<= 2) {
      unsigned char *p = mi_malloc_aligned(al + 5, al);
      CHECK_ALIGNED(p, al);
      fill_pattern(p, al + 5, al);
      p = mi_realloc_aligned(p, 3 * al, al);
      CHECK_ALIGNED(p, al);
      CHECK_PATTERN(p, al + 5, al);
      mi_free(p);
      p = mi_malloc_aligned_at(100, al, 16);
      CHECK_ALIGNED(p + 16, al);
      p = mi_realloc_aligned_at(p, 5000, al, 16);
      CHECK_ALIGNED(p + 16, al);
      mi_free(p);
      p = mi_zalloc_aligned(3000, al);
      CHECK_ALIGNED(p, al);
      CHECK_ZERO(p, 3000);
      mi_free(p);
      p = mi_zalloc_aligned_at(3000, al, 8);
      CHECK_ALIGNED(p + 8, al);
      CHECK_ZERO(p, 3000);
      mi_free(p);
      p = mi_calloc_aligned(30, 100, al);
      CHECK_ALIGNED(p, al);
      CHECK_ZERO(p, 3000);
      mi_free(p);
      p = mi_calloc_aligned_at(30, 100, al, 24);
      CHECK_ALIGNED(p + 24, al);
      CHECK_ZERO(p, 3000);
      mi_free(p);
    }
    errno = 0;
    CHECK_NULL(mi_malloc_aligned(100, opaque_size(48)));
    CHECK_ERRNO(EINVAL);
    void *p = mi_realloc_aligned(mi_malloc_aligned(64, 64), 0, 64);
    CHECK(p != NULL, "mi_realloc_aligned(p, 0, 64): expected a minimal block as in mimalloc, seen NULL%s", "");
    mi_free(p);
  }
}

typedef struct {
  size_t areas, blocks, bytes, bad_tags;
  void *want;
  bool found;
} visit_t;
static bool count_visit(const mi_heap_t *heap, const mi_heap_area_t *area, void *block, size_t block_size, void *arg) {
  visit_t *v = arg;
  (void)heap;
  if (area->heap_tag != 0) v->bad_tags++;
  if (block == NULL) {
    v->areas++;
    return true;
  }
  v->blocks++;
  v->bytes += block_size;
  if (block == v->want) v->found = true;
  return true;
}

static void test_heaps(void) {
  SECTION("heaps: new, allocate in every way, contains, visit, default, collect, delete, destroy") {
    mi_heap_t *h = mi_heap_new();
    CHECK(h != NULL, "mi_heap_new: expected a heap, seen NULL%s", "");
    if (h == NULL) return;
    void *blocks[40];
    int k = 0;
    blocks[k++] = mi_heap_malloc(h, 100);
    blocks[k++] = mi_heap_zalloc(h, 100);
    blocks[k++] = mi_heap_calloc(h, 10, 10);
    blocks[k++] = mi_heap_mallocn(h, 10, 10);
    blocks[k++] = mi_heap_malloc_small(h, 64);
    blocks[k++] = mi_heap_strdup(h, "heap string");
    blocks[k++] = mi_heap_strndup(h, "heap string", 4);
    blocks[k++] = mi_heap_realpath(h, "/", NULL);
    blocks[k++] = mi_heap_malloc_aligned(h, 100, 256);
    blocks[k++] = mi_heap_malloc_aligned_at(h, 100, 256, 8);
    blocks[k++] = mi_heap_zalloc_aligned(h, 100, 128);
    blocks[k++] = mi_heap_zalloc_aligned_at(h, 100, 128, 8);
    blocks[k++] = mi_heap_calloc_aligned(h, 10, 10, 64);
    blocks[k++] = mi_heap_calloc_aligned_at(h, 10, 10, 64, 8);
    blocks[k++] = mi_heap_malloc_tp(h, double);
    blocks[k++] = mi_heap_zalloc_tp(h, double);
    blocks[k++] = mi_heap_calloc_tp(h, double, 4);
    blocks[k++] = mi_heap_mallocn_tp(h, double, 4);
    int nk = k;
    for (int i = 0; i < nk; i++) {
      CHECK(blocks[i] != NULL && mi_heap_contains_block(h, blocks[i]) && mi_heap_check_owned(h, blocks[i]),
            "heap block %d: expected a block of the heap, seen %p", i, blocks[i]);
    }
    CHECK(strcmp(blocks[5], "heap string") == 0 && strcmp(blocks[6], "heap") == 0 && strcmp(blocks[7], "/") == 0,
          "heap strings: wrong contents%s", "");
    CHECK_ALIGNED(blocks[8], 256);
    CHECK_ALIGNED((char *)blocks[9] + 8, 256);
    CHECK_ZERO(blocks[1], 100);
    CHECK_ZERO(blocks[2], 100);
    CHECK_ZERO(blocks[10], 100);
    CHECK_ZERO(blocks[11], 100);
    CHECK_ZERO(blocks[12], 100);
    CHECK_ZERO(blocks[13], 100);
    CHECK_ZERO(blocks[16], 4 * sizeof(double));
    void *outside = mi_malloc(100);
    CHECK(!mi_heap_contains_block(h, outside), "a block of the default heap: expected not in h%s", "");
    mi_free(outside);

    fill_pattern(blocks[0], 100, 3);
    blocks[0] = mi_heap_realloc(h, blocks[0], 20000);
    CHECK_PATTERN(blocks[0], 100, 3);
    blocks[0] = mi_heap_reallocn(h, blocks[0], 300, 100);
    CHECK_PATTERN(blocks[0], 100, 3);
    blocks[0] = mi_heap_reallocf(h, blocks[0], 50);
    CHECK_PATTERN(blocks[0], 50, 3);
    blocks[3] = mi_heap_realloc_aligned(h, blocks[3], 5000, 1024);
    CHECK_ALIGNED(blocks[3], 1024);
    blocks[4] = mi_heap_realloc_aligned_at(h, blocks[4], 5000, 1024, 16);
    CHECK_ALIGNED((char *)blocks[4] + 16, 1024);
    blocks[17] = mi_heap_reallocn_tp(h, blocks[17], double, 1000);
    blocks[16] = mi_heap_recalloc_tp(h, blocks[16], double, 1000);
    CHECK_ZERO(blocks[16], 1000 * sizeof(double));
    for (int i = 0; i < nk; i++) {
      CHECK(blocks[i] != NULL && mi_heap_contains_block(h, blocks[i]), "heap block %d after realloc: expected in h", i);
    }
    blocks[0] = mi_heap_realloc(h, blocks[0], 0);
    CHECK(blocks[0] != NULL, "mi_heap_realloc(h, p, 0): expected a minimal block as in mimalloc, seen NULL%s", "");

    visit_t v = {0};
    v.want = blocks[5];
    CHECK(mi_heap_visit_blocks(h, true, count_visit, &v), "mi_heap_visit_blocks: expected true (never stopped)%s", "");
    CHECK(v.areas >= 1 && v.blocks >= (size_t)nk && v.found && v.bad_tags == 0,
          "visit: expected >= 1 area, >= %d blocks among them blocks[5], heap_tag 0; seen %zu areas, %zu blocks, found %d, "
          "%zu bad tags", nk, v.areas, v.blocks, (int)v.found, v.bad_tags);
    visit_t w = {0};
    CHECK(mi_heap_visit_blocks(h, false, count_visit, &w) && w.blocks == 0 && w.areas == v.areas,
          "visit without blocks: expected the same %zu areas and no block, seen %zu and %zu", v.areas, w.areas, w.blocks);

    mi_heap_t *prev = mi_heap_set_default(h);
    CHECK(prev != NULL && mi_heap_get_default() == h && mi_heap_get_backing() == prev,
          "mi_heap_set_default: expected h as the default, the backing heap unchanged%s", "");
    void *via_malloc = mi_malloc(77);
    CHECK(mi_heap_contains_block(h, via_malloc), "mi_malloc with h as the default: expected a block of h%s", "");
    mi_free(via_malloc);
    CHECK(mi_heap_set_default(prev) == h && mi_heap_get_default() == prev, "restoring the default heap failed%s", "");
    mi_heap_collect(h, true);

    /* delete: the heap goes, its live blocks stay valid */
    char *live = mi_heap_strdup(h, "still valid");
    mi_heap_delete(h);
    CHECK(strcmp(live, "still valid") == 0 && mi_check_owned(live), "after mi_heap_delete: expected its blocks valid%s", "");
    mi_free(live);
    for (int i = 0; i < nk; i++) mi_free(blocks[i]);

    /* destroy: every block goes at once */
    mi_heap_t *d = mi_heap_new();
    CHECK(d != NULL, "second mi_heap_new: expected a heap%s", "");
    if (d != NULL) {
      for (int i = 0; i < 1000; i++) CHECK_NONNULL(mi_heap_malloc(d, (size_t)(i % 300) + 1));
      mi_heap_destroy(d);
    }
  }
}

static void test_zero_realloc(void) {
  SECTION("rezalloc/recalloc (plain, aligned, _at, heap): growth reads as zero") {
    unsigned char *p = mi_zalloc(100);
    memset(p, 9, 100);
    p = mi_rezalloc(p, 10000);
    CHECK(p && p[99] == 9, "mi_rezalloc: old contents%s", "");
    CHECK_ZERO(p + 100, 9900);
    p = mi_recalloc(p, 200, 100);
    CHECK_ZERO(p + 100, 19900);
    p = mi_rezalloc_aligned(p, 30000, 256);
    CHECK_ALIGNED(p, 256);
    CHECK_ZERO(p + 100, 29900);
    p = mi_rezalloc_aligned_at(p, 40000, 256, 8);
    CHECK_ALIGNED(p + 8, 256);
    CHECK_ZERO(p + 100, 39900);
    p = mi_recalloc_aligned(p, 500, 100, 512);
    CHECK_ALIGNED(p, 512);
    CHECK_ZERO(p + 100, 49900);
    p = mi_recalloc_aligned_at(p, 600, 100, 512, 16);
    CHECK_ALIGNED(p + 16, 512);
    CHECK(p[0] == 9 && p[99] == 9, "aligned rezalloc chain: old contents kept%s", "");
    CHECK_ZERO(p + 100, 59900);
    errno = 0;
    CHECK_NULL(mi_recalloc(p, opaque_size(SIZE_MAX), 2));
    CHECK_ERRNO(ENOMEM);
    p = mi_recalloc(p, 0, 10);
    CHECK(p != NULL, "mi_recalloc(p, 0, 10): expected a minimal block as in mimalloc%s", "");
    mi_free(p);

    mi_heap_t *h = mi_heap_new();
    if (h == NULL) return;
    unsigned char *q = mi_heap_zalloc(h, 50);
    memset(q, 5, 50);
    q = mi_heap_rezalloc(h, q, 5000);
    CHECK_ZERO(q + 50, 4950);
    q = mi_heap_recalloc(h, q, 100, 100);
    CHECK_ZERO(q + 50, 9950);
    q = mi_heap_rezalloc_aligned(h, q, 20000, 128);
    CHECK_ALIGNED(q, 128);
    CHECK_ZERO(q + 50, 19950);
    q = mi_heap_rezalloc_aligned_at(h, q, 30000, 128, 8);
    CHECK_ALIGNED(q + 8, 128);
    q = mi_heap_recalloc_aligned(h, q, 400, 100, 256);
    CHECK_ALIGNED(q, 256);
    q = mi_heap_recalloc_aligned_at(h, q, 500, 100, 256, 32);
    CHECK_ALIGNED(q + 32, 256);
    CHECK(q[0] == 5 && q[49] == 5 && mi_heap_contains_block(h, q), "heap rezalloc chain: old contents, heap%s", "");
    CHECK_ZERO(q + 50, 49950);
    mi_heap_destroy(h);
  }
}

static void test_analysis(void) {
  SECTION("check_owned, is_in_heap_region, is_redirected") {
    void *p = mi_malloc(10);
    int local = 0;
    CHECK(mi_check_owned(p) && mi_is_in_heap_region(p), "a block of ours: expected owned and in the heap region%s", "");
    CHECK(!mi_check_owned(&local) && !mi_is_in_heap_region(&local), "a stack address: expected not owned%s", "");
    mi_free(p);
    /* this test links libshardmalloc.so, whose malloc replaces glibc's */
    CHECK(mi_is_redirected(), "mi_is_redirected: expected true (malloc is shardmalloc's here)%s", "");
  }
}

static int out_calls;
static char out_text[1 << 16];
static size_t out_len;
static void capture_out(const char *msg, void *arg) {
  if (arg != &out_calls) return;
  out_calls++;
  size_t n = strlen(msg);
  if (out_len + n < sizeof out_text) {
    memcpy(out_text + out_len, msg, n + 1);
    out_len += n;
  }
}
static int null_arg_calls;
static void capture_null_arg(const char *msg, void *arg) {
  if (arg == NULL && msg != NULL) null_arg_calls++;
}
static int error_calls;
static void on_error(int err, void *arg) {
  (void)err;
  (void)arg;
  error_calls++;
}
static int deferred_calls, deferred_forced;
static unsigned long long last_heartbeat;
static bool heartbeat_grows = true;
static void deferred(bool force, unsigned long long heartbeat, void *arg) {
  if (arg != &deferred_calls) return;
  if (deferred_calls > 0 && heartbeat <= last_heartbeat) heartbeat_grows = false;
  last_heartbeat = heartbeat;
  deferred_calls++;
  if (force) deferred_forced++;
}

static void test_stats_hooks(void) {
  SECTION("statistics, process info, output/error/deferred-free hooks, version") {
    CHECK_EQ(mi_version(), MI_MALLOC_VERSION);
    CHECK_EQ(MI_MALLOC_SHARDMALLOC, sm_version());
    mi_stats_reset();
    void *p = mi_malloc(1000);
    mi_stats_merge();
    out_calls = 0, out_len = 0;
    mi_stats_print_out(capture_out, &out_calls);
    CHECK(out_calls > 0 && out_len > 0, "mi_stats_print_out: expected text through the function, seen %d calls", out_calls);
    out_calls = 0, out_len = 0;
    mi_thread_stats_print_out(capture_out, &out_calls);
    CHECK(out_calls > 0, "mi_thread_stats_print_out: expected text through the function, seen %d calls", out_calls);
    /* the registered output receives what goes to "stderr" (mi_stats_print(NULL)) */
    mi_register_output(capture_out, &out_calls);
    out_calls = 0, out_len = 0;
    mi_stats_print(NULL);
    CHECK(out_calls > 0, "mi_stats_print(NULL) with a registered output: expected it used, seen %d calls", out_calls);
    mi_register_output(NULL, NULL);
    char *json = mi_stats_get_json(0, NULL);
    CHECK(json != NULL && json[0] == '{' && strstr(json, "\"process\"") != NULL, "mi_stats_get_json(0, NULL): expected "
          "a JSON object, seen %.40s", json ? json : "(null)");
    size_t json_len = json ? strlen(json) : 0;
    mi_free(json);
    char small[8];
    CHECK_NULL(mi_stats_get_json(sizeof small, small));
    char *big = malloc(json_len + 4096);
    CHECK(mi_stats_get_json(json_len + 4096, big) == big, "mi_stats_get_json into a large buffer: expected the buffer%s", "");
    free(big);
    /* mi_stats_print with an mi_output_fun passed as void * (mimalloc's old signature; arg NULL) */
    void *as_ptr;
    mi_output_fun *fn = capture_null_arg;
    memcpy(&as_ptr, &fn, sizeof as_ptr);
    null_arg_calls = 0;
    mi_stats_print(as_ptr);
    CHECK(null_arg_calls > 0, "mi_stats_print(fun): expected the table through fun, seen %d calls", null_arg_calls);
    mi_free(p);

    size_t elapsed = 0, user = 0, sys = 0, rss = 0, peak_rss = 0, commit = 0, peak_commit = 0, faults = 0;
    mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
    CHECK(rss > 0 && peak_rss >= rss && peak_commit >= commit && faults > 0,
          "mi_process_info: expected rss > 0, peak >= current, faults > 0; seen rss %zu peak %zu commit %zu/%zu faults %zu",
          rss, peak_rss, commit, peak_commit, faults);
    mi_process_info(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL); /* every pointer may be NULL */

    error_calls = 0;
    mi_register_error(on_error, NULL);
    void *q = mi_malloc(10);
    mi_free(q);
    CHECK(error_calls == 0, "a registered error function: expected no call without an error, seen %d", error_calls);
    mi_register_error(NULL, NULL);

    deferred_calls = deferred_forced = 0;
    mi_register_deferred_free(deferred, &deferred_calls);
    mi_collect(true);
    mi_collect(false);
    CHECK(deferred_calls >= 1 && deferred_forced >= 1 && heartbeat_grows,
          "deferred free: expected calls from mi_collect (forced at least once), heartbeat growing; seen %d calls, %d "
          "forced, growing %d", deferred_calls, deferred_forced, (int)heartbeat_grows);
    mi_register_deferred_free(NULL, NULL);
  }
}

static void *thread_body(void *arg) {
  (void)arg;
  mi_thread_init();
  void *p = mi_malloc(5000);
  mi_free(p);
  mi_thread_done();
  return p;
}

static void test_options(void) {
  SECTION("options: mapped ones are shardmalloc's; KiB units; unmapped ones keep mimalloc's default") {
    CHECK_EQ((long)mi_option_purge_delay, (long)sm_option_purge_delay);
    CHECK_EQ((long)mi_option_reset_delay, (long)mi_option_purge_delay);
    CHECK_EQ((long)mi_option_large_os_pages, (long)mi_option_allow_large_os_pages);
    CHECK_EQ((long)mi_option_limit_os_alloc, (long)mi_option_disallow_os_alloc);
    CHECK_EQ((long)mi_option_eager_region_commit, (long)mi_option_arena_eager_commit);
    CHECK_EQ((long)mi_option_reset_decommits, (long)mi_option_purge_decommits);
    CHECK_EQ((long)mi_option_abandoned_page_reset, (long)mi_option_abandoned_page_purge);
    long saved = mi_option_get(mi_option_purge_delay);
    CHECK_EQ(saved, sm_option_get(sm_option_purge_delay));
    mi_option_set(mi_option_purge_delay, 37);
    CHECK(mi_option_get(mi_option_purge_delay) == 37 && sm_option_get(sm_option_purge_delay) == 37,
          "mi_option_set(purge_delay, 37): expected 37 on both sides, seen %ld", mi_option_get(mi_option_purge_delay));
    CHECK_EQ(mi_option_get_clamp(mi_option_purge_delay, 0, 20), 20);
    CHECK_EQ(mi_option_get_clamp(mi_option_purge_delay, 50, 60), 50);
    CHECK_EQ(mi_option_get_size(mi_option_purge_delay), 37);
    mi_option_set(mi_option_purge_delay, saved);

    long saved_max = mi_option_get(mi_option_max_warnings);
    mi_option_enable(mi_option_max_warnings);
    CHECK(mi_option_is_enabled(mi_option_max_warnings) && mi_option_get(mi_option_max_warnings) == 1,
          "mi_option_enable: expected 1, seen %ld", mi_option_get(mi_option_max_warnings));
    mi_option_disable(mi_option_max_warnings);
    CHECK(!mi_option_is_enabled(mi_option_max_warnings), "mi_option_disable: expected 0, seen %ld",
          mi_option_get(mi_option_max_warnings));
    mi_option_set_enabled(mi_option_max_warnings, true);
    CHECK_EQ(sm_option_get(sm_option_max_warnings), 1);
    mi_option_set(mi_option_max_warnings, saved_max);
    /* a new default does not override a value that was set */
    mi_option_set_default(mi_option_max_warnings, 77);
    mi_option_set_enabled_default(mi_option_max_warnings, false);
    CHECK_EQ(mi_option_get(mi_option_max_warnings), saved_max);

    /* sizes: KiB through mi_option_get/set (mimalloc's unit), bytes through mi_option_get_size */
    long saved_res = sm_option_get(sm_option_reserve_os_memory);
    mi_option_set(mi_option_reserve_os_memory, 2048);
    CHECK(sm_option_get(sm_option_reserve_os_memory) == 2048L * 1024 && mi_option_get(mi_option_reserve_os_memory) == 2048 &&
          mi_option_get_size(mi_option_reserve_os_memory) == 2048u * 1024,
          "reserve_os_memory = 2048 KiB: expected %ld bytes inside, 2048 back and %u from get_size; seen %ld, %ld, %zu",
          2048L * 1024, 2048u * 1024, sm_option_get(sm_option_reserve_os_memory), mi_option_get(mi_option_reserve_os_memory),
          mi_option_get_size(mi_option_reserve_os_memory));
    sm_option_set(sm_option_reserve_os_memory, saved_res);

    /* options shardmalloc does not have: mimalloc's default, set does nothing */
    CHECK_EQ(mi_option_get(mi_option_arena_eager_commit), 2);
    CHECK_EQ(mi_option_get(mi_option_eager_commit), 1);
    mi_option_set(mi_option_eager_commit, 0);
    mi_option_disable(mi_option_eager_commit);
    mi_option_set_default(mi_option_eager_commit, 0);
    CHECK(mi_option_is_enabled(mi_option_eager_commit), "unmapped eager_commit: expected its default 1 to stay%s", "");
    CHECK_EQ(mi_option_get(mi_option_retry_on_oom), 400);
    CHECK_EQ(mi_option_get(mi_option_os_tag), 100);
    CHECK_EQ(mi_option_get(mi_option_generic_collect), 10000);
    CHECK_EQ(mi_option_get(mi_option_deprecated_segment_cache), 0);
    CHECK_EQ(mi_option_get_size(mi_option_guarded_max), (size_t)1 << 30);
    CHECK_EQ(mi_option_get_clamp(mi_option_guarded_sample_rate, 0, 100), 100);
    /* every value up to _mi_option_last can be asked (mimalloc code loops like this) */
    long sum = 0;
    for (int i = 0; i < _mi_option_last; i++) sum += mi_option_get((mi_option_t)i) != 0;
    CHECK(sum > 0, "a loop over every option: expected some enabled, seen none%s", "");
  }
}

static void test_lifecycle_os(void) {
  SECTION("process/thread init and done; reserving and managing OS memory") {
    mi_process_init(); /* again: harmless */
    mi_thread_init();
    pthread_t t;
    void *ret = NULL;
    CHECK_EQ(pthread_create(&t, NULL, thread_body, NULL), 0);
    pthread_join(t, &ret);
    CHECK(ret != NULL, "a thread with mi_thread_init/mi_thread_done: expected it to allocate%s", "");

    int r = mi_reserve_os_memory(32u << 20, false, false);
    CHECK(r == 0, "mi_reserve_os_memory(32 MiB): expected 0, seen %d", r);
    void *after = mi_malloc(1u << 20);
    CHECK_NONNULL(after);
    mi_free(after);
    size_t region = 64u << 20;
    void *mem = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(mem != MAP_FAILED, "mmap of 64 MiB for mi_manage_os_memory failed%s", "");
    if (mem != MAP_FAILED)
      CHECK(mi_manage_os_memory(mem, region, true, false, true, -1), "mi_manage_os_memory(64 MiB): expected true%s", "");
    /* 1 GiB pages are rarely reserved on a test machine: 0, or an errno value, never a crash */
    r = mi_reserve_huge_os_pages_interleave(0, 0, 10);
    CHECK_EQ(r, 0);
    r = mi_reserve_huge_os_pages_at(1, 0, 10);
    CHECK(r == 0 || (r > 0 && r < 4096 && strerror(r) != NULL),
          "mi_reserve_huge_os_pages_at(1): expected 0 or an errno value (ENOMEM, EOPNOTSUPP in secure builds...), seen %d", r);
    size_t reserved = 99;
    r = mi_reserve_huge_os_pages(0, 0.01, &reserved);
    CHECK(r == 0 && reserved == 0, "mi_reserve_huge_os_pages(0): expected 0 and 0 reserved, seen %d and %zu", r, reserved);
  }
  SECTION("arenas by id: mi_reserve_os_memory_ex, mi_manage_os_memory_ex, mi_arena_area, mi_heap_new_in_arena") {
    mi_arena_id_t id = 0, handed = 0;
    CHECK_EQ(mi_reserve_os_memory_ex(16u << 20, false, false, true, &id), 0);
    size_t size = 0;
    unsigned char *area = (unsigned char *)mi_arena_area(id, &size);
    CHECK(id > 0 && area != NULL && size == (16u << 20), "an exclusive 16 MiB arena: id %d at %p, %zu bytes", id, (void *)area, size);
    mi_heap_t *h = mi_heap_new_in_arena(id);
    unsigned char *p = (unsigned char *)mi_heap_malloc(h, 1000), *q = (unsigned char *)mi_malloc(1000);
    CHECK(p != NULL && p >= area && p < area + size, "a block of the heap in it: %p, in the arena", (void *)p);
    CHECK(q != NULL && (q < area || q >= area + size), "a block of the default heap: %p, outside it", (void *)q);
    mi_free(q);
    mi_heap_destroy(h);
    size_t len = 12u << 20;
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(mem != MAP_FAILED && mi_manage_os_memory_ex(mem, len, true, false, true, -1, true, &handed) && handed > id,
          "mi_manage_os_memory_ex: 12 MiB as an exclusive arena (id %d)", handed);
    CHECK(mi_heap_new_in_arena(0) == NULL, "mi_heap_new_in_arena(0): expected NULL (no such arena)%s", "");
    mi_arena_id_t none = -7;
    CHECK(mi_reserve_huge_os_pages_at_ex(0, 0, 10, true, &none) == 0 && none == 0,
          "mi_reserve_huge_os_pages_at_ex of no pages: expected 0 and no arena (id 0, as mimalloc's \"none\"), seen id %d", none);
    mi_debug_show_arenas();
  }
}

static void test_posix(void) {
  SECTION("the POSIX/Unix/Windows family under mi_ names") {
    int local = 0;
    mi_cfree(&local); /* mimalloc's cfree only frees its own blocks */
    mi_cfree(mi_malloc(30));
    mi_cfree(NULL);
    void *p = mi_malloc(100);
    CHECK(mi_malloc_size(p) >= 100 && mi_malloc_usable_size(p) == mi_usable_size(p),
          "mi_malloc_size / mi_malloc_usable_size: expected >= 100 and equal to mi_usable_size, seen %zu and %zu",
          mi_malloc_size(p), mi_malloc_usable_size(p));
    CHECK(mi__expand(p, 50) == p, "mi__expand(p, 50): expected p (shrinks in place)%s", "");
    CHECK_NULL(mi__expand(p, 64u << 20));
    CHECK_EQ(mi_malloc_good_size(100), mi_good_size(100));
    mi_free_size(p, 50); /* its size is now 50 (what padded builds check) */
    void *a = NULL;
    CHECK_EQ(mi_posix_memalign(&a, 256, 1000), 0);
    CHECK_ALIGNED(a, 256);
    mi_free_size_aligned(a, 1000, 256);
    CHECK_EQ(mi_posix_memalign(&a, 3, 1000), EINVAL);
    a = mi_memalign(512, 100);
    CHECK_ALIGNED(a, 512);
    mi_free_aligned(a, 512);
    a = mi_memalign(opaque_size(100), 100); /* rounded up to 128, as glibc (mimalloc: NULL) */
    CHECK(a != NULL, "mi_memalign(100, 100): expected a block (the alignment rounded up), seen NULL%s", "");
    CHECK_ALIGNED(a, 128);
    mi_free(a);
    a = mi_valloc(100);
    CHECK_ALIGNED(a, 4096);
    mi_free(a);
    a = mi_pvalloc(5000);
    CHECK(a != NULL && mi_usable_size(a) >= 8192, "mi_pvalloc(5000): expected 2 pages, seen %zu", a ? mi_usable_size(a) : 0);
    CHECK_ALIGNED(a, 4096);
    mi_free(a);
    a = mi_aligned_alloc(64, 100);
    CHECK_ALIGNED(a, 64);
    errno = 0;
    CHECK_NULL(mi_reallocarray(a, opaque_size(SIZE_MAX), 2));
    CHECK_ERRNO(ENOMEM);
    a = mi_reallocarray(a, 100, 100);
    CHECK(a != NULL && mi_usable_size(a) >= 10000, "mi_reallocarray(a, 100, 100): expected 10000 bytes%s", "");
    a = mi_reallocarray(a, 0, 100);
    CHECK(a != NULL, "mi_reallocarray(a, 0, 100): expected a minimal block as in mimalloc, seen NULL%s", "");
    CHECK_EQ(mi_reallocarr(&a, 50, 10), 0);
    CHECK(a != NULL && mi_usable_size(a) >= 500, "mi_reallocarr(&a, 50, 10): expected 500 bytes%s", "");
    CHECK_EQ(mi_reallocarr(&a, opaque_size(SIZE_MAX), 2), EOVERFLOW);
    mi_free(a);
    unsigned char *z = mi_calloc_aligned(10, 10, 64);
    memset(z, 1, 100);
    z = mi_aligned_recalloc(z, 100, 100, 64);
    CHECK_ALIGNED(z, 64);
    CHECK(z[99] == 1, "mi_aligned_recalloc: old contents kept%s", "");
    CHECK_ZERO(z + 100, 9900);
    z = mi_aligned_offset_recalloc(z, 200, 100, 64, 16);
    CHECK_ALIGNED(z + 16, 64);
    CHECK_ZERO(z + 100, 19900);
    mi_free(z);
    const unsigned short w[] = {'w', 'i', 'd', 'e', 0};
    unsigned short *wc = mi_wcsdup(w);
    CHECK(wc != NULL && memcmp(wc, w, sizeof w) == 0, "mi_wcsdup: expected a copy%s", "");
    mi_free(wc);
    unsigned char *mb = mi_mbsdup((const unsigned char *)"bytes");
    CHECK(mb != NULL && strcmp((char *)mb, "bytes") == 0, "mi_mbsdup: expected a copy%s", "");
    mi_free(mb);
    setenv("SMTEST_MI_ENV", "abc", 1);
    char *e = NULL;
    size_t n = 0;
    CHECK_EQ(mi_dupenv_s(&e, &n, "SMTEST_MI_ENV"), 0);
    CHECK(e != NULL && strcmp(e, "abc") == 0 && n == 3, "mi_dupenv_s: expected \"abc\" with size 3 (mimalloc: no "
          "terminator), seen %zu", n);
    mi_free(e);
    const unsigned short wn[] = {'S', 'M', 'T', 'E', 'S', 'T', '_', 'M', 'I', '_', 'E', 'N', 'V', 0};
    unsigned short *we = NULL;
    CHECK_EQ(mi_wdupenv_s(&we, &n, wn), 0);
    CHECK(we != NULL && we[0] == 'a' && we[2] == 'c' && we[3] == 0 && n == 3, "mi_wdupenv_s: expected u\"abc\" with size "
          "3, seen %zu", n);
    mi_free(we);
  }
}

int main(void) {
  sm_test_name = "test-compat-mimalloc";
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_basic();
  test_extended();
  test_aligned();
  test_heaps();
  test_zero_realloc();
  test_analysis();
  test_stats_hooks();
  test_options();
  test_lifecycle_os();
  test_posix();
  int rc = sm_test_summary();
  mi_process_done(); /* last: what a program would do at its very end */
  return rc;
}
