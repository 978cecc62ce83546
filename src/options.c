/* options.c: run-time options (docs/api/options.md) and the message/warning/error output.
 *
 * Options are read once, before any heap exists: by smi_process_init, or by the first sm_option_*
 * call if that comes earlier. Sources, lowest precedence first: the built-in default,
 * sm_option_set_default, MIMALLOC_<NAME> (mimalloc's names where the meaning is the same),
 * SHARDMALLOC_CONF="name=value,...", SHARDMALLOC_<NAME>; sm_option_set overrides them all.
 * Nothing here allocates: the environment is scanned in place and messages are formatted into a
 * stack buffer and written with write(2), so all of it is safe inside malloc. */
#include "internal.h"

#include <ctype.h>
#include <dlfcn.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

/* Reports whether malloc resolves to shardmalloc (with verbose, or for shardmalloc-run --check).
 * dlsym/dladdr may allocate, so this cannot run in smi_options_init (possibly inside the process's
 * first malloc). The constructor at the end of this file calls it; the lifecycle code may call it
 * too, once the calling thread has a heap. Prints at most once per process image. */
void smi_verbose_late(void);

typedef enum { UNIT_NUMBER, UNIT_BOOL, UNIT_MS, UNIT_BYTES } unit_t;
/* where a value came from, in increasing precedence */
typedef enum { FROM_DEFAULT, FROM_SET_DEFAULT, FROM_MIMALLOC, FROM_CONF, FROM_ENV, FROM_SET } origin_t;

typedef struct option_desc_s {
  long value; /* the built-in default */
  const char *name;
  unit_t unit;
} option_desc_t;

static const option_desc_t options[_sm_option_last] = {
    [sm_option_show_errors] = {SM_DEBUG || SM_SECURE, "show_errors", UNIT_BOOL},
    [sm_option_show_stats] = {0, "show_stats", UNIT_NUMBER},
    [sm_option_verbose] = {0, "verbose", UNIT_BOOL},
    [sm_option_max_errors] = {-1, "max_errors", UNIT_NUMBER},
    [sm_option_max_warnings] = {-1, "max_warnings", UNIT_NUMBER},
    [sm_option_purge_delay] = {10, "purge_delay", UNIT_MS},
    [sm_option_purge_decommits] = {1, "purge_decommits", UNIT_BOOL},
    [sm_option_segment_cache] = {16, "segment_cache", UNIT_NUMBER},
    [sm_option_background_purge] = {1, "background_purge", UNIT_NUMBER},
    [sm_option_abort_on_error] = {SM_SECURE, "abort_on_error", UNIT_BOOL},
    [sm_option_zero_on_free] = {0, "zero_on_free", UNIT_BOOL},
    [sm_option_quarantine] = {0, "quarantine", UNIT_NUMBER},
    [sm_option_eager_commit] = {0, "eager_commit", UNIT_BOOL},
    [sm_option_eager_commit_delay] = {1, "eager_commit_delay", UNIT_NUMBER},
    [sm_option_populate] = {0, "populate", UNIT_BOOL},
    [sm_option_allow_large_os_pages] = {0, "allow_large_os_pages", UNIT_BOOL},
    [sm_option_reserve_huge_os_pages] = {0, "reserve_huge_os_pages", UNIT_NUMBER},
    [sm_option_reserve_huge_os_pages_at] = {-1, "reserve_huge_os_pages_at", UNIT_NUMBER},
    [sm_option_reserve_os_memory] = {0, "reserve_os_memory", UNIT_BYTES},
    [sm_option_arena_reserve] = {0, "arena_reserve", UNIT_BYTES},
    [sm_option_use_numa_nodes] = {0, "use_numa_nodes", UNIT_NUMBER},
    [sm_option_disallow_os_alloc] = {0, "disallow_os_alloc", UNIT_BOOL},
    [sm_option_destroy_on_exit] = {0, "destroy_on_exit", UNIT_BOOL},
    [sm_option_memory_limit] = {0, "memory_limit", UNIT_BYTES},
    [sm_option_huge_timeout] = {1000, "huge_timeout", UNIT_MS},
    [sm_option_shuffle] = {SM_SECURE, "shuffle", UNIT_BOOL},
    [sm_option_atomic_free] = {0, "atomic_free", UNIT_BOOL},
};

/* mimalloc's names for the same settings, read as MIMALLOC_<NAME>; old names first, so that the
 * current name wins when both are set. Not mapped because the meaning differs: eager_commit (in
 * mimalloc: commit, not pre-fault, and on by default), segment_cache (per thread in mimalloc). */
static const struct {
  const char *name;
  sm_option_t option;
} mimalloc_names[] = {
    {"large_os_pages", sm_option_allow_large_os_pages}, {"reset_delay", sm_option_purge_delay},
    {"reset_decommits", sm_option_purge_decommits},    {"limit_os_alloc", sm_option_disallow_os_alloc},
    {"show_errors", sm_option_show_errors},             {"show_stats", sm_option_show_stats},
    {"verbose", sm_option_verbose},                     {"max_errors", sm_option_max_errors},
    {"max_warnings", sm_option_max_warnings},           {"purge_delay", sm_option_purge_delay},
    {"purge_decommits", sm_option_purge_decommits},     {"eager_commit_delay", sm_option_eager_commit_delay},
    {"allow_large_os_pages", sm_option_allow_large_os_pages},
    {"reserve_huge_os_pages", sm_option_reserve_huge_os_pages},
    {"reserve_huge_os_pages_at", sm_option_reserve_huge_os_pages_at},
    {"reserve_os_memory", sm_option_reserve_os_memory}, {"arena_reserve", sm_option_arena_reserve},
    {"use_numa_nodes", sm_option_use_numa_nodes},       {"disallow_os_alloc", sm_option_disallow_os_alloc},
    {"destroy_on_exit", sm_option_destroy_on_exit},
};
#define MIMALLOC_NAMES (sizeof mimalloc_names / sizeof mimalloc_names[0])

_Atomic(long) smi_option_values[_sm_option_last];
static _Atomic(int) option_source[_sm_option_last]; /* origin_t, plus 16 * the mimalloc name's index */
static _Atomic(int) options_state;                  /* 0: not read, 1: being read, 2: read */
static long check_pid;                              /* SHARDMALLOC_CHECK_REDIRECT=<pid>[:<fd>] */
static int check_fd = 2;

static origin_t option_origin(sm_option_t opt) {
  return (origin_t)(atomic_load_explicit(&option_source[opt], memory_order_relaxed) & 15);
}
static void option_store(sm_option_t opt, long value, int source) {
  atomic_store_explicit(&smi_option_values[opt], value, memory_order_relaxed);
  atomic_store_explicit(&option_source[opt], source, memory_order_relaxed);
#if SM_SECURE
  smi_free_options_update();
#endif
}

#if SM_SECURE
void smi_free_options_update(void) {
  bool costly = smi_option(sm_option_zero_on_free) != 0 || smi_option(sm_option_quarantine) > 0;
  bool on = costly || smi_option(sm_option_atomic_free) != 0;
  atomic_store_explicit(&smi_read_mostly.free_claim_only, on && !costly, memory_order_relaxed);
  atomic_store_explicit(&smi_read_mostly.free_options_on, on, memory_order_relaxed);
  __atomic_store_n(&smi_read_mostly.free_secret, smi_read_mostly.secret ^ (uintptr_t)on, __ATOMIC_RELAXED);
}
#endif

/* ---- reading the environment ---- */

/* ASCII only and no libc call: this runs at start-up of every program, and each libc function it
 * calls costs the process up to 64 KiB of RSS (the kernel maps the libc text around a fault) */
static bool same_ci(const char *s, const char *t, size_t len) {
  for (size_t i = 0; i < len; i++) {
    char a = s[i], b = t[i];
    if (a >= 'A' && a <= 'Z') a = (char)(a + 'a' - 'A');
    if (b >= 'A' && b <= 'Z') b = (char)(b + 'a' - 'A');
    if (a != b) return false;
    if (a == 0) return true;
  }
  return true;
}
static bool name_eq(const char *s, size_t len, const char *name) {
  return strlen(name) == len && same_ci(s, name, len);
}
static int option_find(const char *s, size_t len) {
  for (int i = 0; i < _sm_option_last; i++)
    if (name_eq(s, len, options[i].name)) return i;
  return -1;
}
/* the value of <prefix><name>, both without regard to case (the first one in environ) */
static const char *env_find(char **env, const char *prefix, const char *name) {
  size_t plen = strlen(prefix), nlen = strlen(name);
  for (char **e = env; *e != NULL; e++) {
    if (same_ci(*e, prefix, plen) && same_ci(*e + plen, name, nlen) && (*e)[plen + nlen] == '=')
      return *e + plen + nlen + 1;
  }
  return NULL;
}

static const char *value_expected(sm_option_t opt) {
  if (opt == sm_option_show_stats) return "0, 1, 2 or json";
  switch (options[opt].unit) {
    case UNIT_BOOL: return "1/0, on/off, true/false or yes/no";
    case UNIT_MS: return "an integer, in ms";
    case UNIT_BYTES: return "bytes, with an optional K/M/G/T suffix";
    default: return "an integer";
  }
}

/* integers; on/off, true/false, yes/no; sizes with K/M/G/T (KiB, KB, ...: all powers of 1024) */
static bool value_parse(sm_option_t opt, const char *s, long *out) {
  if (!strcasecmp(s, "on") || !strcasecmp(s, "true") || !strcasecmp(s, "yes")) return *out = 1, true;
  if (!strcasecmp(s, "off") || !strcasecmp(s, "false") || !strcasecmp(s, "no")) return *out = 0, true;
  if (opt == sm_option_show_stats && !strcasecmp(s, "json")) return *out = 2, true;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || errno != 0) return false;
  const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
  if (options[opt].unit == UNIT_BYTES && u != NULL) {
    if (__builtin_mul_overflow(v, 1L << (10 * (u - units + 1)), &v)) return false;
    end++;
    if (*end == 'i' || *end == 'I') end++;
  }
  if (options[opt].unit == UNIT_BYTES && (*end == 'B' || *end == 'b')) end++;
  if (*end != 0) return false;
  *out = v;
  return true;
}

/* what: the variable (or CONF entry) for messages. An empty value counts as unset. */
static void option_apply(sm_option_t opt, const char *value, int source, bool report, const char *what) {
  long v;
  if (*value == 0) return;
  if (value_parse(opt, value, &v)) option_store(opt, v, source);
  else if (report)
    smi_warning("%s: cannot read the value \"%s\" (expected %s); %s stays %ld", what, value, value_expected(opt),
                options[opt].name, smi_option(opt));
}

/* "name=value,name:value,...", jemalloc style; later entries win */
static void conf_apply(const char *conf, bool report) {
  for (const char *p = conf; *p != 0;) {
    size_t len = strcspn(p, ",");
    const char *item = p, *item_end = p + len;
    p = *item_end ? item_end + 1 : item_end;
    while (item < item_end && isspace((unsigned char)*item)) item++;
    while (item_end > item && isspace((unsigned char)item_end[-1])) item_end--;
    if (item == item_end) continue;
    size_t klen = strcspn(item, "=:");
    if (item + klen >= item_end) {
      if (report) smi_warning("SHARDMALLOC_CONF: \"%.*s\" is not name=value; ignored", (int)(item_end - item), item);
      continue;
    }
    size_t vstart = klen + 1;
    while (klen > 0 && isspace((unsigned char)item[klen - 1])) klen--;
    while (item + vstart < item_end && isspace((unsigned char)item[vstart])) vstart++;
    char value[64], what[96];
    size_t vlen = (size_t)(item_end - item) - vstart;
    int opt = option_find(item, klen);
    if (opt < 0) {
      if (report) smi_warning("SHARDMALLOC_CONF: no option is named \"%.*s\"; ignored", (int)klen, item);
      continue;
    }
    if (vlen >= sizeof value) { /* cut short, "000...05" would read as 0 */
      if (report)
        smi_warning("SHARDMALLOC_CONF entry %s: the value (%zu characters) is too long; %s stays %ld", options[opt].name,
                    vlen, options[opt].name, smi_option((sm_option_t)opt));
      continue;
    }
    snprintf(value, sizeof value, "%.*s", (int)vlen, item + vstart);
    snprintf(what, sizeof what, "SHARDMALLOC_CONF entry %s", options[opt].name);
    option_apply((sm_option_t)opt, value, FROM_CONF, report, what);
  }
}

/* earlier in env than e, a SHARDMALLOC_ variable of the same name (in another case)? */
static bool env_earlier(char **env, char **e, size_t len) {
  for (char **f = env; f < e; f++)
    if (same_ci(*f, *e, len) && (*f)[len] == '=') return true;
  return false;
}

/* smi_options_init reads twice: silently first, then again over the values found, reporting; so
 * max_warnings and show_errors from anywhere in the environment govern every warning. */
static void options_read(bool report) {
  if (!report)
    for (int i = 0; i < _sm_option_last; i++) option_store((sm_option_t)i, options[i].value, FROM_DEFAULT);
  char **env = smi_os_environ(); /* NULL in setuid/setgid programs */
  if (env == NULL) return;
  bool mimalloc_vars = false, our_vars = false; /* one pass over environ, usually the only one */
  for (char **e = env; *e != NULL; e++) {
    mimalloc_vars |= same_ci(*e, "MIMALLOC_", 9);
    our_vars |= same_ci(*e, "SHARDMALLOC_", 12);
  }
  for (size_t a = 0; a < MIMALLOC_NAMES && mimalloc_vars; a++) {
    const char *value = env_find(env, "MIMALLOC_", mimalloc_names[a].name);
    if (value == NULL) continue;
    char what[64];
    snprintf(what, sizeof what, "MIMALLOC_%s", mimalloc_names[a].name);
    for (char *c = what; *c; c++) *c = (char)toupper((unsigned char)*c);
    option_apply(mimalloc_names[a].option, value, FROM_MIMALLOC + 16 * (int)a, report, what);
  }
  if (!our_vars) return;
  const char *conf = env_find(env, "SHARDMALLOC_", "CONF");
  if (conf != NULL) conf_apply(conf, report);
  for (char **e = env; *e != NULL; e++) {
    if (!same_ci(*e, "SHARDMALLOC_", 12)) continue;
    const char *key = *e + 12;
    size_t klen = strcspn(key, "=");
    const char *value = key[klen] == '=' ? key + klen + 1 : "";
    char what[64];
    snprintf(what, sizeof what, "%.*s", (int)(klen + 12), *e);
    if (name_eq(key, klen, "conf")) continue;
    if (name_eq(key, klen, "check_redirect")) {
      char *end;
      check_pid = strtol(value, &end, 10);
      check_fd = *end == ':' ? (int)strtol(end + 1, &end, 10) : 2;
      if (*end != 0 && report) smi_warning("%s: cannot read \"%s\" (expected pid[:fd])", what, value);
      continue;
    }
    int opt = option_find(key, klen);
    if (opt < 0) {
      if (report) smi_warning("%s: no option is named \"%.*s\"; ignored", *e, (int)klen, key);
    } else if (env_earlier(env, e, klen + 12)) {
      if (report) smi_warning("%s ignored: the same variable comes earlier (names differ in case only)", *e);
    } else {
      option_apply((sm_option_t)opt, value, FROM_ENV, report, what);
    }
  }
}

void smi_options_init(void) {
  int state = 0;
  if (!atomic_compare_exchange_strong_explicit(&options_state, &state, 1, memory_order_acq_rel, memory_order_acquire)) {
    while (atomic_load_explicit(&options_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  int saved = errno;
  options_read(false);
  options_read(true);
  errno = saved;
  atomic_store_explicit(&options_state, 2, memory_order_release);
  if (smi_option(sm_option_verbose)) {
    smi_message("shardmalloc %d.%d.%d, %s build%s%s%s, pid %d", SM_VERSION_MAJOR, SM_VERSION_MINOR, SM_VERSION_PATCH,
                SM_DEBUG ? "debug" : SM_SECURE ? "secure" : "release", SM_VALGRIND ? " (valgrind)" : "",
                SM_ASAN ? " (asan)" : "", SM_OVERRIDE ? "" : " without malloc (SM_OVERRIDE=0)", (int)getpid());
    smi_options_print();
  }
}

static inline void options_ensure(void) {
  if (sm_unlikely(atomic_load_explicit(&options_state, memory_order_acquire) != 2)) smi_options_init();
}

static void format_value(char *buf, size_t n, sm_option_t opt, long v) {
  static const char *const names[] = {"KiB", "MiB", "GiB", "TiB"};
  int unit = -1;
  for (int i = 0; i < 4 && v != 0 && v % (1L << (10 * (i + 1))) == 0; i++) unit = i;
  if (options[opt].unit == UNIT_BYTES && unit >= 0) snprintf(buf, n, "%ld (%ld %s)", v, v >> (10 * (unit + 1)), names[unit]);
  else if (options[opt].unit == UNIT_MS) snprintf(buf, n, "%ld ms", v);
  else snprintf(buf, n, "%ld", v);
}

static void origin_text(char *buf, size_t n, sm_option_t opt) {
  int source = atomic_load_explicit(&option_source[opt], memory_order_relaxed);
  const char *prefix = "environment SHARDMALLOC_", *name = options[opt].name;
  switch ((origin_t)(source & 15)) {
    case FROM_DEFAULT: snprintf(buf, n, "default"); return;
    case FROM_SET_DEFAULT: snprintf(buf, n, "sm_option_set_default"); return;
    case FROM_CONF: snprintf(buf, n, "SHARDMALLOC_CONF"); return;
    case FROM_SET: snprintf(buf, n, "sm_option_set"); return;
    case FROM_MIMALLOC: prefix = "environment MIMALLOC_", name = mimalloc_names[source >> 4].name; break;
    case FROM_ENV: break;
  }
  snprintf(buf, n, "%s%s", prefix, name);
  for (char *c = buf + strlen(prefix); *c; c++) *c = (char)toupper((unsigned char)*c);
}

void smi_options_print(void) {
  options_ensure();
  for (int i = 0; i < _sm_option_last; i++) {
    char value[48], from[64];
    format_value(value, sizeof value, (sm_option_t)i, smi_option((sm_option_t)i));
    origin_text(from, sizeof from, (sm_option_t)i);
    smi_message("option %-24s %-22s %s", options[i].name, value, from);
  }
}

/* ---- the public API ---- */

static bool option_valid(sm_option_t option, const char *func) {
  static _Atomic(bool) warned;
  if ((unsigned)option < _sm_option_last) return true;
  if (!atomic_exchange(&warned, true)) smi_warning("%s: invalid option %d; ignored (reported once)", func, (int)option);
  return false;
}

long sm_option_get(sm_option_t option) {
  options_ensure();
  return option_valid(option, __func__) ? smi_option(option) : 0;
}
long sm_option_get_clamp(sm_option_t option, long min, long max) {
  long v = sm_option_get(option);
  return v < min ? min : v > max ? max : v;
}
size_t sm_option_get_size(sm_option_t option) {
  long v = sm_option_get(option);
  return v < 0 ? 0 : (size_t)v;
}
bool sm_option_is_enabled(sm_option_t option) { return sm_option_get(option) != 0; }

void sm_option_set(sm_option_t option, long value) {
  options_ensure();
  if (option_valid(option, __func__)) option_store(option, value, FROM_SET);
}
void sm_option_set_default(sm_option_t option, long value) {
  options_ensure();
  if (!option_valid(option, __func__)) return;
  if (option_origin(option) <= FROM_SET_DEFAULT) option_store(option, value, FROM_SET_DEFAULT);
}
void sm_option_enable(sm_option_t option) { sm_option_set(option, 1); }
void sm_option_disable(sm_option_t option) { sm_option_set(option, 0); }
void sm_option_set_enabled(sm_option_t option, bool enable) { sm_option_set(option, enable); }
void sm_option_set_enabled_default(sm_option_t option, bool enable) { sm_option_set_default(option, enable); }
const char *sm_option_name(sm_option_t option) {
  return (unsigned)option < _sm_option_last ? options[option].name : NULL;
}

/* ---- is malloc ours? ---- */

/* True iff the process's malloc is this copy of shardmalloc's; `where` (if not NULL) says what
 * malloc resolves to otherwise. */
static bool redirect_probe(char *where, size_t n) {
#if SM_OVERRIDE
  void *sym = dlsym(RTLD_DEFAULT, "malloc");
  if (sym == NULL) return true; /* no dynamic symbols: a static executable, linked with our malloc */
  /* Call it rather than compare addresses: in a non-PIE program dlsym gives the program's PLT
   * entry for malloc, which jumps to whichever malloc won. */
  void *(*fn)(size_t);
  memcpy(&fn, &sym, sizeof fn);
  void *p = fn(16);
  Dl_info ours, theirs, main_program;
  bool have_ours = dladdr((const void *)options, &ours) != 0, have_theirs = dladdr(sym, &theirs) != 0;
  if (p != NULL) {
    if (sm_check_owned(p)) {
      sm_free(p);
      return true;
    } /* else left allocated on purpose (16 bytes, once): which free matches it is not known */
  } else if (have_ours && have_theirs && ours.dli_fbase == theirs.dli_fbase) {
    return true; /* out of memory: fall back to where the symbol lies */
  }
  if (where == NULL) return false;
  bool in_main = have_theirs && dladdr((const void *)getauxval(AT_PHDR), &main_program) &&
                 main_program.dli_fbase == theirs.dli_fbase;
  if (!have_theirs)
    snprintf(where, n, "an address in no loaded object (%p)", sym);
  else if (theirs.dli_saddr != sym) /* not a definition: the program's PLT entry */
    snprintf(where, n, "a malloc loaded before shardmalloc (through the program's PLT; was shardmalloc dlopen'ed?)");
  else if (in_main || theirs.dli_fname == NULL || theirs.dli_fname[0] == 0)
    snprintf(where, n, "the program itself, which defines its own malloc (it comes before any preloaded library)");
  else
    snprintf(where, n, "%s (loaded before shardmalloc: preload shardmalloc with LD_PRELOAD, or link it first)",
             theirs.dli_fname);
  return false;
#else
  if (where != NULL) snprintf(where, n, "the C library: this shardmalloc build does not define malloc (SM_OVERRIDE=0)");
  return false;
#endif
}

bool sm_is_redirected(void) { return redirect_probe(NULL, 0); }

void smi_verbose_late(void) {
  static _Atomic(bool) done;
  options_ensure();
  bool check = check_pid != 0 && check_pid == (long)getpid();
  if ((!smi_option(sm_option_verbose) && !check) || atomic_exchange(&done, true)) return;
  char where[300], exe[256], line[1024];
  Dl_info ours;
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  const char *lib = dladdr((const void *)options, &ours) && ours.dli_fname && ours.dli_fname[0] ? ours.dli_fname : exe;
  if (redirect_probe(where, sizeof where))
    snprintf(line, sizeof line, "malloc is shardmalloc's (pid %d, %s; shardmalloc in %.255s)", (int)getpid(), exe, lib);
  else
    snprintf(line, sizeof line, "malloc is NOT shardmalloc's: it resolves to %s (pid %d, %s; shardmalloc in %.255s)", where,
             (int)getpid(), exe, lib);
  if (smi_option(sm_option_verbose)) smi_message("%s", line);
  if (check) { /* for shardmalloc-run --check: one line on the descriptor it gave */
    char buf[sizeof line + 16];
    int m = snprintf(buf, sizeof buf, "shardmalloc: %s\n", line);
    if (m > 0 && (check_fd != 2 || !smi_option(sm_option_verbose))) {
      if (write(check_fd, buf, (size_t)m < sizeof buf ? (size_t)m : sizeof buf - 1) < 0) { /* nowhere to report */ }
    }
  }
}

/* early enough for verbose and --check, late enough that dlsym may allocate */
__attribute__((constructor)) static void options_constructor(void) { smi_verbose_late(); }

/* ---- messages ---- */

static sm_output_fun *output_fun;
static void *output_arg;
static sm_error_fun *error_fun;
static void *error_arg;
static _Atomic(long) warnings_seen, errors_seen;

void sm_register_output(sm_output_fun *fun, void *arg) {
  output_arg = arg;
  output_fun = fun;
}
void sm_register_error(sm_error_fun *fun, void *arg) {
  error_arg = arg;
  error_fun = fun;
}

static void message_va(sm_output_fun *out, void *arg, const char *prefix, const char *fmt, va_list args) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "shardmalloc: %s", prefix);
  if (n < 0) return;
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, args);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  buf[len] = 0;
  if (out == NULL) {
    out = output_fun;
    arg = output_arg;
  }
  if (out != NULL) out(buf, arg);
  else smi_os_write_stderr(buf, len);
}

void smi_message(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  message_va(NULL, NULL, "", fmt, args);
  va_end(args);
}

void smi_message_to(sm_output_fun *out, void *arg, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  message_va(out, arg, "", fmt, args);
  va_end(args);
}

/* at most `max` messages of a kind (-1: no limit), then one line saying the rest are not shown */
static bool message_quota(_Atomic(long) *seen, sm_option_t max_option, const char *kind) {
  long max = smi_option(max_option);
  if (max < 0 || atomic_load_explicit(&options_state, memory_order_acquire) == 0) return true; /* not read yet */
  long n = atomic_fetch_add_explicit(seen, 1, memory_order_relaxed) + 1;
  if (n == max + 1) smi_message("further %s are not shown (%s=%ld)", kind, options[max_option].name, max);
  return n <= max;
}

/* Warnings concern something the user asked for (an option, a reservation): shown unless
 * show_errors was turned off explicitly. */
void smi_warning(const char *fmt, ...) {
  bool shown = smi_option(sm_option_show_errors) || smi_option(sm_option_verbose) ||
               option_origin(sm_option_show_errors) == FROM_DEFAULT;
  if (!shown || !message_quota(&warnings_seen, sm_option_max_warnings, "warnings")) return;
  va_list args;
  va_start(args, fmt);
  message_va(NULL, NULL, "warning: ", fmt, args);
  va_end(args);
}

/* Misuse detected (secure/debug builds check frees): report it (show_errors, at most max_errors
 * times), then abort (abort_on_error, default in secure builds) or call the registered handler.
 * The bad operation itself is ignored by the caller, so no memory is corrupted either way. */
void smi_error(int err, const char *fmt, ...) {
  if (smi_option(sm_option_show_errors) && message_quota(&errors_seen, sm_option_max_errors, "errors")) {
    va_list args;
    va_start(args, fmt);
    message_va(NULL, NULL, "error: ", fmt, args);
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
