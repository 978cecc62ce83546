/* stats.c: statistics output: the table (sm_stats_print*), JSON (sm_stats_get_json), reset, merge
 * and process information. The figures live in smi_stats (internal.h) and are updated on slow paths
 * elsewhere; everything here runs on demand. Output is formatted in stack buffers and sent through
 * smi_message_to, so it never allocates (only sm_stats_get_json(.., NULL) does, for its result). */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

smi_stats_t smi_stats;
static uint64_t stats_start_ms; /* smi_stats_init, at process start */
#if SM_DEBUG
/* bin figures are raw event counts: a reset records the base that "since the reset" starts from,
 * so that current (allocations - frees) stays right */
static _Atomic(int64_t) bin_base_alloc[SM_BIN_COUNT + 1], bin_base_free[SM_BIN_COUNT + 1];
#endif

void smi_count_peak(smi_stat_count_t *c, int64_t current) {
  int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (current > peak && !atomic_compare_exchange_weak_explicit(&c->peak, &peak, current, memory_order_relaxed,
                                                                  memory_order_relaxed)) {}
}

/* names for the table; keys (the enum names, lower-cased) for JSON */
static const char *const stat_names[SM_STAT_COUNT] = {
#define SM_STAT_NAME(name, text) [SM_STAT_##name] = text,
    SM_STATS_LIST(SM_STAT_NAME)
#undef SM_STAT_NAME
};
static const char *const stat_keys[SM_STAT_COUNT] = {
#define SM_STAT_KEY(name, text) [SM_STAT_##name] = #name,
    SM_STATS_LIST(SM_STAT_KEY)
#undef SM_STAT_KEY
};
static const char *const count_names[SM_COUNT_COUNT] = {
#define SM_COUNT_NAME(name, text, bytes) [SM_COUNT_##name] = text,
    SM_COUNTS_LIST(SM_COUNT_NAME)
#undef SM_COUNT_NAME
};
static const char *const count_keys[SM_COUNT_COUNT] = {
#define SM_COUNT_KEY(name, text, bytes) [SM_COUNT_##name] = #name,
    SM_COUNTS_LIST(SM_COUNT_KEY)
#undef SM_COUNT_KEY
};
static const bool count_bytes[SM_COUNT_COUNT] = {
#define SM_COUNT_BYTES(name, text, bytes) [SM_COUNT_##name] = bytes,
    SM_COUNTS_LIST(SM_COUNT_BYTES)
#undef SM_COUNT_BYTES
};
static bool stat_is_bytes(int i) { return i == SM_STAT_PURGED; }

#define SM_BUILD_NAME (SM_DEBUG ? "debug" : SM_SECURE ? "secure" : "release")

/* ---- a consistent copy of every figure ---- */
enum { F_TOTAL, F_FREED, F_CURRENT, F_PEAK };
typedef struct snap_s {
  int64_t count[SM_COUNT_COUNT][4];
  int64_t counter[SM_STAT_COUNT];
#if SM_DEBUG
  int64_t bin[SM_BIN_COUNT + 1][3]; /* total, freed (since the reset), current */
#endif
  struct proc_s { /* sm_process_info, plus the major faults */
    size_t elapsed, user, system, rss, peak_rss, commit, peak_commit, faults, major_faults;
  } proc;
} snap_t;

static int64_t load(_Atomic(int64_t) *x) { return atomic_load_explicit(x, memory_order_relaxed); }

/* bring the calling thread's block figures into the totals (as the heap's owner, with its lock).
 * Other heaps of the thread (sm_heap_new) would need the same; for now the thread has one. */
static void stats_sync_self(void) { smi_heaps_stats_sync(); }

static void proc_read(struct proc_s *p) {
  smi_os_process_info_t pi;
  smi_os_process_info(&pi);
  int64_t commit = smi_count_current(SM_COUNT_COMMITTED), peak = load(&smi_stats.count[SM_COUNT_COMMITTED].peak);
  if (commit < 0) commit = 0; /* momentarily, while another thread is between two updates */
  p->elapsed = (size_t)(smi_os_clock_ms() - stats_start_ms);
  p->user = (size_t)pi.user_ms;
  p->system = (size_t)pi.system_ms;
  p->rss = (size_t)pi.current_rss;
  p->peak_rss = (size_t)pi.peak_rss;
  p->commit = (size_t)commit;
  p->peak_commit = (size_t)(peak > commit ? peak : commit);
  p->faults = (size_t)(pi.minor_faults + pi.major_faults);
  p->major_faults = (size_t)pi.major_faults;
}

static void snapshot(snap_t *s) {
  for (int i = 0; i < SM_COUNT_COUNT; i++) {
    smi_stat_count_t *c = &smi_stats.count[i];
    s->count[i][F_TOTAL] = load(&c->total);
    s->count[i][F_FREED] = load(&c->freed);
    s->count[i][F_CURRENT] = load(&c->current);
    s->count[i][F_PEAK] = load(&c->peak);
  }
  for (int i = 0; i < SM_STAT_COUNT; i++) s->counter[i] = load(&smi_stats.counter[i]);
#if SM_DEBUG
  for (int b = 0; b <= SM_BIN_COUNT; b++) {
    int64_t a = load(&smi_stats.bin_alloc[b]), f = load(&smi_stats.bin_free[b]);
    s->bin[b][0] = a - load(&bin_base_alloc[b]);
    s->bin[b][1] = f - load(&bin_base_free[b]);
    s->bin[b][2] = a - f;
  }
#endif
  proc_read(&s->proc);
}

void sm_process_info(size_t *elapsed_msecs, size_t *user_msecs, size_t *system_msecs, size_t *current_rss,
                     size_t *peak_rss, size_t *current_commit, size_t *peak_commit, size_t *page_faults) {
  smi_process_init(); /* records the start time if nothing was allocated yet */
  struct proc_s p;
  proc_read(&p);
  if (elapsed_msecs != NULL) *elapsed_msecs = p.elapsed;
  if (user_msecs != NULL) *user_msecs = p.user;
  if (system_msecs != NULL) *system_msecs = p.system;
  if (current_rss != NULL) *current_rss = p.rss;
  if (peak_rss != NULL) *peak_rss = p.peak_rss;
  if (current_commit != NULL) *current_commit = p.commit;
  if (peak_commit != NULL) *peak_commit = p.peak_commit;
  if (page_faults != NULL) *page_faults = p.faults;
}

/* ---- the table ---- */

/* "937 B", "12.3 MiB": one decimal, integer arithmetic only */
static const char *fmt_bytes(char *buf, size_t size, int64_t v) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  uint64_t a = v < 0 ? -(uint64_t)v : (uint64_t)v, div = 1;
  int u = 0;
  while (u < 6 && a / div >= 1024) div <<= 10, u++;
  const char *sign = v < 0 ? "-" : "";
  if (u == 0) {
    snprintf(buf, size, "%s%llu B", sign, (unsigned long long)a);
  } else {
    uint64_t tenths = a / div * 10 + ((a % div) * 10 + div / 2) / div;
    snprintf(buf, size, "%s%llu.%llu %s", sign, (unsigned long long)(tenths / 10), (unsigned long long)(tenths % 10),
             units[u]);
  }
  return buf;
}
static const char *fmt_num(char *buf, size_t size, int64_t v, bool bytes) {
  if (bytes) return fmt_bytes(buf, size, v);
  snprintf(buf, size, "%lld", (long long)v);
  return buf;
}
static const char *fmt_secs(char *buf, size_t size, size_t ms) {
  snprintf(buf, size, "%zu.%03zu s", ms / 1000, ms % 1000);
  return buf;
}

static void print_table(sm_output_fun *out, void *arg, const snap_t *s) {
  char a[40], b[40], c[40], d[40];
  smi_message_to(out, arg, "statistics of shardmalloc %d.%d.%d (%s build), whole process:", SM_VERSION_MAJOR,
                 SM_VERSION_MINOR, SM_VERSION_PATCH, SM_BUILD_NAME);
  smi_message_to(out, arg, "  %-16s %12s %12s %12s %12s", "", "peak", "total", "freed", "current");
  for (int i = 0; i < SM_COUNT_COUNT; i++) {
    const int64_t *v = s->count[i];
    bool by = count_bytes[i];
    smi_message_to(out, arg, "  %-16s %12s %12s %12s %12s", count_names[i], fmt_num(a, sizeof a, v[F_PEAK], by),
                   fmt_num(b, sizeof b, v[F_TOTAL], by), fmt_num(c, sizeof c, v[F_FREED], by),
                   fmt_num(d, sizeof d, v[F_CURRENT], by));
  }
  smi_message_to(out, arg, "events:");
  for (int i = 0; i < SM_STAT_COUNT; i++)
    smi_message_to(out, arg, "  %-29s %12s", stat_names[i], fmt_num(a, sizeof a, s->counter[i], stat_is_bytes(i)));
#if SM_DEBUG
  smi_message_to(out, arg, "%-18s %12s %12s %12s %12s", "size classes:", "block bytes", "total", "freed", "current");
  for (int bin = 0; bin <= SM_BIN_COUNT; bin++) {
    const int64_t *v = s->bin[bin];
    if (v[0] == 0 && v[1] == 0 && v[2] == 0) continue; /* unused classes would only be noise */
    char name[16];
    snprintf(name, sizeof name, bin == SM_BIN_COUNT ? "huge" : "bin %d", bin);
    smi_message_to(out, arg, "  %-16s %12s %12lld %12lld %12lld", name,
                   bin == SM_BIN_COUNT ? "-" : fmt_num(a, sizeof a, (int64_t)smi_bin_size((size_t)bin), false),
                   (long long)v[0], (long long)v[1], (long long)v[2]);
  }
#endif
  smi_message_to(out, arg, "process:");
  smi_message_to(out, arg, "  %-16s %s", "elapsed", fmt_secs(a, sizeof a, s->proc.elapsed));
  smi_message_to(out, arg, "  %-16s user %s, system %s", "cpu", fmt_secs(a, sizeof a, s->proc.user),
                 fmt_secs(b, sizeof b, s->proc.system));
  smi_message_to(out, arg, "  %-16s %zu (%zu major)", "page faults", s->proc.faults, s->proc.major_faults);
  smi_message_to(out, arg, "  %-16s current %s, peak %s", "rss", fmt_bytes(a, sizeof a, (int64_t)s->proc.rss),
                 fmt_bytes(b, sizeof b, (int64_t)s->proc.peak_rss));
  smi_message_to(out, arg, "  %-16s current %s, peak %s", "commit",
                 fmt_bytes(a, sizeof a, (int64_t)s->proc.commit), fmt_bytes(b, sizeof b, (int64_t)s->proc.peak_commit));
}

void sm_stats_print_out(sm_output_fun *out, void *arg) {
  stats_sync_self();
  snap_t s;
  snapshot(&s);
  print_table(out, arg, &s);
}

void sm_stats_print(void) { sm_stats_print_out(NULL, NULL); }

/* The figures are process-wide; what a thread can add is what its heap has counted but not yet
 * added to the totals. Those are shown, then merged, and the process table follows. */
void sm_thread_stats_print_out(sm_output_fun *out, void *arg) {
  sm_heap_t *heap = smi_tls_heap;
  int64_t d[8] = {0};
  if (heap != &smi_heap_empty) {
    smi_heap_lock(heap);
    memcpy(d, heap->stat_delta, sizeof d);
    smi_heap_unlock(heap);
  }
  char a[40], b[40];
  smi_message_to(out, arg, "this thread's heap, counted but not yet in the process totals (merged now):");
  for (int k = 0; k < 8; k += 4)
    smi_message_to(out, arg, "  %-16s +%s -%s (+%lld -%lld blocks)", k == 0 ? "normal" : "large",
                   fmt_bytes(a, sizeof a, d[k]), fmt_bytes(b, sizeof b, d[k + 1]), (long long)d[k + 2],
                   (long long)d[k + 3]);
  sm_stats_print_out(out, arg);
}

/* ---- JSON ----
 * One writer, two sinks: a buffer (len counts every byte, also those that did not fit) or, at exit,
 * one message per line (no buffer of the whole text, nothing allocated). Keys are fixed
 * identifiers and values numbers, so nothing needs escaping. */
typedef struct jw_s {
  char *buf;
  size_t size, len;
  bool lines;
  sm_output_fun *out;
  void *arg;
  size_t line_len;
  char line[256]; /* the longest line is a bin entry, about 100 bytes */
} jw_t;

__attribute__((format(printf, 2, 3))) static void jw_put(jw_t *w, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  if (w->lines) {
    int n = vsnprintf(w->line + w->line_len, sizeof w->line - w->line_len, fmt, args);
    if (n > 0) w->line_len += (size_t)n;
    if (w->line_len >= sizeof w->line) w->line_len = sizeof w->line - 1;
  } else {
    size_t room = w->len < w->size ? w->size - w->len : 0;
    int n = vsnprintf(room > 0 ? w->buf + w->len : NULL, room, fmt, args);
    if (n > 0) w->len += (size_t)n;
  }
  va_end(args);
}
static void jw_eol(jw_t *w) {
  if (!w->lines) {
    jw_put(w, "\n");
    return;
  }
  smi_message_to(w->out, w->arg, "%s", w->line);
  w->line_len = 0;
  w->line[0] = 0;
}
static const char *json_key(char *buf, size_t size, const char *name) {
  size_t n = 0;
  for (; name[n] != 0 && n + 1 < size; n++) buf[n] = (char)(name[n] >= 'A' && name[n] <= 'Z' ? name[n] + 32 : name[n]);
  buf[n] = 0;
  return buf;
}

static void write_json(jw_t *w, const snap_t *s) {
  char key[32];
  jw_put(w, "{\"version\": \"%d.%d.%d\", \"build\": \"%s\", \"scope\": \"process\",", SM_VERSION_MAJOR,
         SM_VERSION_MINOR, SM_VERSION_PATCH, SM_BUILD_NAME);
  jw_eol(w);
  jw_put(w, " \"counts\": {");
  jw_eol(w);
  for (int i = 0; i < SM_COUNT_COUNT; i++) {
    const int64_t *v = s->count[i];
    jw_put(w, "  \"%s\": {\"unit\": \"%s\", \"total\": %lld, \"freed\": %lld, \"current\": %lld, \"peak\": %lld}%s",
           json_key(key, sizeof key, count_keys[i]), count_bytes[i] ? "bytes" : "count", (long long)v[F_TOTAL],
           (long long)v[F_FREED], (long long)v[F_CURRENT], (long long)v[F_PEAK], i + 1 < SM_COUNT_COUNT ? "," : "");
    jw_eol(w);
  }
  jw_put(w, " },");
  jw_eol(w);
  jw_put(w, " \"counters\": {");
  jw_eol(w);
  for (int i = 0; i < SM_STAT_COUNT; i++) {
    jw_put(w, "  \"%s\": %lld%s", json_key(key, sizeof key, stat_keys[i]), (long long)s->counter[i],
           i + 1 < SM_STAT_COUNT ? "," : "");
    jw_eol(w);
  }
  jw_put(w, " },");
  jw_eol(w);
#if SM_DEBUG
  jw_put(w, " \"bins\": [");
  jw_eol(w);
  for (int bin = 0; bin <= SM_BIN_COUNT; bin++) {
    char size[24] = "null";
    if (bin < SM_BIN_COUNT) snprintf(size, sizeof size, "%zu", smi_bin_size((size_t)bin));
    jw_put(w, "  {\"bin\": %d, \"block_size\": %s, \"huge\": %s, "
              "\"total\": %lld, \"freed\": %lld, \"current\": %lld}%s",
           bin, size, bin == SM_BIN_COUNT ? "true" : "false", (long long)s->bin[bin][0], (long long)s->bin[bin][1],
           (long long)s->bin[bin][2], bin < SM_BIN_COUNT ? "," : "");
    jw_eol(w);
  }
  jw_put(w, " ],");
  jw_eol(w);
#endif
  const struct proc_s *p = &s->proc;
  jw_put(w, " \"process\": {\"elapsed_ms\": %zu, \"user_ms\": %zu, \"system_ms\": %zu, \"current_rss\": %zu,",
         p->elapsed, p->user, p->system, p->rss);
  jw_eol(w);
  jw_put(w, "  \"peak_rss\": %zu, \"current_commit\": %zu, \"peak_commit\": %zu, "
            "\"page_faults\": %zu, \"major_page_faults\": %zu}",
         p->peak_rss, p->commit, p->peak_commit, p->faults, p->major_faults);
  jw_eol(w);
  jw_put(w, "}");
  jw_eol(w);
}

char *sm_stats_get_json(size_t buf_size, char *buf) {
  if (buf != NULL && buf_size == 0) return NULL;
  stats_sync_self();
  snap_t s;
  snapshot(&s);
  jw_t w = {.buf = buf, .size = buf != NULL ? buf_size : 0};
  write_json(&w, &s);
  if (buf != NULL) {
    if (w.len < buf_size) return buf;
    buf[0] = 0; /* never leave a truncated document behind */
    return NULL;
  }
  /* the snapshot is fixed, so the second pass writes exactly w.len bytes */
  char *result = sm_malloc(w.len + 1);
  if (result == NULL) return NULL;
  jw_t w2 = {.buf = result, .size = w.len + 1};
  write_json(&w2, &s);
  return result;
}

/* ---- reset, merge, exit ---- */

void sm_stats_reset(void) {
  stats_sync_self(); /* this thread's pending figures belong before the reset */
  for (int i = 0; i < SM_COUNT_COUNT; i++) {
    smi_stat_count_t *c = &smi_stats.count[i];
    atomic_store_explicit(&c->total, 0, memory_order_relaxed);
    atomic_store_explicit(&c->freed, 0, memory_order_relaxed);
    atomic_store_explicit(&c->peak, load(&c->current), memory_order_relaxed);
  }
  for (int i = 0; i < SM_STAT_COUNT; i++) atomic_store_explicit(&smi_stats.counter[i], 0, memory_order_relaxed);
#if SM_DEBUG
  for (int b = 0; b <= SM_BIN_COUNT; b++) {
    atomic_store_explicit(&bin_base_alloc[b], load(&smi_stats.bin_alloc[b]), memory_order_relaxed);
    atomic_store_explicit(&bin_base_free[b], load(&smi_stats.bin_free[b]), memory_order_relaxed);
  }
#endif
}

void sm_stats_merge(void) { stats_sync_self(); }

/* show_stats: 1 the table, 2 JSON, one message per line (exit may be inside anything: no allocation) */
void smi_stats_print_at_exit(void) {
  long mode = smi_option(sm_option_show_stats);
  if (mode == 0) return;
  if (mode != 2) {
    sm_stats_print();
    return;
  }
  stats_sync_self();
  snap_t s;
  snapshot(&s);
  jw_t w = {.lines = true};
  write_json(&w, &s);
}

/* no atexit here: registering may allocate (glibc's table grows with calloc) while the process is
 * still being set up; sm_process_done, run as a destructor, prints instead */
void smi_stats_init(void) { stats_start_ms = smi_os_clock_ms(); }
