/* options.c: run-time options (environment SHARDMALLOC_<NAME>, read once at process start) and
 * the message/warning/error output. Messages are formatted into a stack buffer and written with
 * write(2): they never allocate, so they are safe inside malloc. */
#include "internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct option_desc_s {
  long value; /* the default */
  const char *name; /* environment: SHARDMALLOC_<NAME> (upper case) */
} option_desc_t;

static option_desc_t options[_sm_option_last] = {
    [sm_option_show_errors] = {SM_DEBUG || SM_SECURE, "show_errors"},
    [sm_option_show_stats] = {0, "show_stats"},
    [sm_option_verbose] = {0, "verbose"},
    [sm_option_max_errors] = {-1, "max_errors"},
    [sm_option_max_warnings] = {-1, "max_warnings"},
    [sm_option_purge_delay] = {10, "purge_delay"},
    [sm_option_purge_decommits] = {1, "purge_decommits"},
    [sm_option_segment_cache] = {16, "segment_cache"},
    [sm_option_background_purge] = {1, "background_purge"},
    [sm_option_abort_on_error] = {SM_SECURE, "abort_on_error"},
    [sm_option_zero_on_free] = {0, "zero_on_free"},
    [sm_option_quarantine] = {0, "quarantine"},
    [sm_option_eager_commit] = {0, "eager_commit"},
    [sm_option_eager_commit_delay] = {1, "eager_commit_delay"},
    [sm_option_populate] = {0, "populate"},
    [sm_option_allow_large_os_pages] = {0, "allow_large_os_pages"},
    [sm_option_reserve_huge_os_pages] = {0, "reserve_huge_os_pages"},
    [sm_option_reserve_huge_os_pages_at] = {-1, "reserve_huge_os_pages_at"},
    [sm_option_reserve_os_memory] = {0, "reserve_os_memory"},
    [sm_option_arena_reserve] = {0, "arena_reserve"},
    [sm_option_use_numa_nodes] = {0, "use_numa_nodes"},
    [sm_option_disallow_os_alloc] = {0, "disallow_os_alloc"},
    [sm_option_destroy_on_exit] = {0, "destroy_on_exit"},
    [sm_option_memory_limit] = {0, "memory_limit"},
    [sm_option_huge_timeout] = {1000, "huge_timeout"},
};

_Atomic(long) smi_option_values[_sm_option_last];

/* "12", "-1", "on"/"off", "true"/"false", with optional K/M/G suffix */
static bool option_parse(const char *s, long *out) {
  if (strcasecmp(s, "on") == 0 || strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0) { *out = 1; return true; }
  if (strcasecmp(s, "off") == 0 || strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0) { *out = 0; return true; }
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || errno != 0) return false;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != 0) return false;
  *out = v * (1L << shift);
  return true;
}

void smi_options_init(void) {
  int saved = errno;
  for (int i = 0; i < _sm_option_last; i++) atomic_store_explicit(&smi_option_values[i], options[i].value, memory_order_relaxed);
  for (int i = 0; i < _sm_option_last; i++) {
    char env[64] = "SHARDMALLOC_";
    size_t n = strlen(env);
    for (const char *c = options[i].name; *c && n < sizeof env - 1; c++) env[n++] = (char)toupper((unsigned char)*c);
    env[n] = 0;
    const char *s = smi_os_getenv(env);
    if (s == NULL) continue;
    long v;
    if (option_parse(s, &v)) atomic_store_explicit(&smi_option_values[i], v, memory_order_relaxed);
    else smi_warning("option %s: cannot read value \"%s\"; keeping %ld", env, s, smi_option((sm_option_t)i));
  }
  errno = saved;
  if (smi_option(sm_option_verbose)) {
    smi_message("shardmalloc %d.%d.%d (%s build) active", SM_VERSION_MAJOR, SM_VERSION_MINOR, SM_VERSION_PATCH,
                SM_DEBUG ? "debug" : SM_SECURE ? "secure" : "release");
    for (int i = 0; i < _sm_option_last; i++) smi_message("option %s: %ld", options[i].name, smi_option((sm_option_t)i));
  }
}

static sm_output_fun *output_fun;
static void *output_arg;
static sm_error_fun *error_fun;
static void *error_arg;

void sm_register_output(sm_output_fun *fun, void *arg) {
  output_arg = arg;
  output_fun = fun;
}
void sm_register_error(sm_error_fun *fun, void *arg) {
  error_arg = arg;
  error_fun = fun;
}

static void message_va(const char *prefix, const char *fmt, va_list args) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "shardmalloc: %s", prefix);
  if (n < 0) return;
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, args);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  sm_output_fun *fun = output_fun;
  if (fun != NULL) {
    buf[len] = 0;
    fun(buf, output_arg);
  } else {
    smi_os_write_stderr(buf, len);
  }
}

void smi_message(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  message_va("", fmt, args);
  va_end(args);
}

void smi_warning(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  message_va("warning: ", fmt, args);
  va_end(args);
}

/* Misuse detected (secure/debug builds check frees): report it, then abort (abort_on_error,
 * default in secure builds) or call the registered handler. The bad operation itself is ignored
 * by the caller, so no memory is corrupted either way. */
void smi_error(int err, const char *fmt, ...) {
  if (smi_option(sm_option_show_errors)) {
    va_list args;
    va_start(args, fmt);
    message_va("error: ", fmt, args);
    va_end(args);
  }
  if (smi_option(sm_option_abort_on_error)) abort();
  sm_error_fun *fun = error_fun;
  if (fun != NULL) fun(err, error_arg);
}

#if SM_DEBUG
void smi_assert_fail(const char *expr, const char *file, int line) {
  smi_message("assertion failed: %s (%s:%d)", expr, file, line);
  abort();
}
#endif
