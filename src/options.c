/* options.c: run-time options (environment SHARDMALLOC_<NAME>, read once at process start) and
 * the message/warning/error output. Messages are formatted into a stack buffer and written with
 * write(2): they never allocate, so they are safe inside malloc. */
#include "internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct option_desc_s {
  long value;
  const char *name; /* environment: SHARDMALLOC_<NAME> (upper case) */
} option_desc_t;

static option_desc_t options[SM_OPT_COUNT] = {
    [SM_OPT_VERBOSE] = {0, "verbose"},
    [SM_OPT_SHOW_ERRORS] = {SM_DEBUG || SM_SECURE, "show_errors"},
    [SM_OPT_PURGE_DELAY] = {10, "purge_delay"},
    [SM_OPT_PURGE_DECOMMITS] = {1, "purge_decommits"},
    [SM_OPT_SEGMENT_CACHE] = {16, "segment_cache"},
    [SM_OPT_SHOW_STATS] = {0, "show_stats"},
    [SM_OPT_BACKGROUND_PURGE] = {1, "background_purge"},
    [SM_OPT_ABORT_ON_ERROR] = {SM_SECURE, "abort_on_error"},
    [SM_OPT_ZERO_ON_FREE] = {0, "zero_on_free"},
    [SM_OPT_QUARANTINE] = {0, "quarantine"},
    [SM_OPT_ALLOW_LARGE_OS_PAGES] = {0, "allow_large_os_pages"},
    [SM_OPT_POPULATE] = {0, "populate"},
    [SM_OPT_EAGER_COMMIT_DELAY] = {1, "eager_commit_delay"},
};

long smi_option(smi_option_t opt) { return options[opt].value; }

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
  for (int i = 0; i < SM_OPT_COUNT; i++) {
    char env[64] = "SHARDMALLOC_";
    size_t n = strlen(env);
    for (const char *c = options[i].name; *c && n < sizeof env - 1; c++) env[n++] = (char)toupper((unsigned char)*c);
    env[n] = 0;
    const char *s = smi_os_getenv(env);
    if (s == NULL) continue;
    long v;
    if (option_parse(s, &v)) options[i].value = v;
    else smi_warning("option %s: cannot read value \"%s\"; keeping %ld", env, s, options[i].value);
  }
  errno = saved;
  if (options[SM_OPT_VERBOSE].value) {
    smi_message("shardmalloc %d.%d.%d (%s build) active", SM_VERSION_MAJOR, SM_VERSION_MINOR, SM_VERSION_PATCH,
                SM_DEBUG ? "debug" : SM_SECURE ? "secure" : "release");
    for (int i = 0; i < SM_OPT_COUNT; i++) smi_message("option %s: %ld", options[i].name, options[i].value);
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
  if (options[SM_OPT_SHOW_ERRORS].value) {
    va_list args;
    va_start(args, fmt);
    message_va("error: ", fmt, args);
    va_end(args);
  }
  if (options[SM_OPT_ABORT_ON_ERROR].value) abort();
  sm_error_fun *fun = error_fun;
  if (fun != NULL) fun(err, error_arg);
}

#if SM_DEBUG
void smi_assert_fail(const char *expr, const char *file, int line) {
  smi_message("assertion failed: %s (%s:%d)", expr, file, line);
  abort();
}
#endif
