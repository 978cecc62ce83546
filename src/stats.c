/* stats.c: process-wide event counters. Only slow paths count (segment, page and OS events),
 * with relaxed atomic adds, so the fast paths pay nothing. Printed at exit with
 * SHARDMALLOC_SHOW_STATS=1, or with sm_stats_print(). */
#include "internal.h"

#include <stdlib.h>

smi_stats_t smi_stats;

static const char *stat_names[SM_STAT_COUNT] = {
#define SM_STAT_NAME(name, text) [SM_STAT_##name] = text,
    SM_STATS_LIST(SM_STAT_NAME)
#undef SM_STAT_NAME
};

void sm_stats_print(void) {
  for (int i = 0; i < SM_STAT_COUNT; i++) {
    smi_message("%-28s %12lld", stat_names[i],
                (long long)atomic_load_explicit(&smi_stats.counter[i], memory_order_relaxed));
  }
  smi_message("%-28s %12lld", "bytes mapped now", (long long)smi_gauge(SM_GAUGE_MAPPED));
  smi_message("%-28s %12lld", "bytes in cached segments", (long long)smi_gauge(SM_GAUGE_CACHED));
  smi_message("%-28s %12lld", "huge blocks in use", (long long)smi_gauge(SM_GAUGE_HUGE_COUNT));
  smi_message("%-28s %12lld", "bytes in huge blocks", (long long)smi_gauge(SM_GAUGE_HUGE));
#if SM_DEBUG
  smi_message("%-12s %14s %14s %14s", "block size", "allocated", "freed", "live");
  for (size_t bin = 0; bin <= SM_BIN_COUNT; bin++) {
    long long a = (long long)atomic_load_explicit(&smi_stats.bin_alloc[bin], memory_order_relaxed);
    long long f = (long long)atomic_load_explicit(&smi_stats.bin_free[bin], memory_order_relaxed);
    if (a == 0 && f == 0) continue;
    if (bin < SM_BIN_COUNT) smi_message("%-12zu %14lld %14lld %14lld", smi_bin_size(bin), a, f, a - f);
    else smi_message("%-12s %14lld %14lld %14lld", "huge", a, f, a - f);
  }
#endif
}

static void stats_at_exit(void) { sm_stats_print(); }

void smi_stats_init(void) {
  if (smi_option(SM_OPT_SHOW_STATS)) atexit(stats_at_exit);
}
