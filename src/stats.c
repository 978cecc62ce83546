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
}

static void stats_at_exit(void) { sm_stats_print(); }

void smi_stats_init(void) {
  if (smi_option(SM_OPT_SHOW_STATS)) atexit(stats_at_exit);
}
