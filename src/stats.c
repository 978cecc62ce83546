/* stats.c: statistics output. (Being rewritten: table, JSON, reset, merge, process info.) */
#include "internal.h"

#include <stdlib.h>

smi_stats_t smi_stats;

void smi_count_peak(smi_stat_count_t *c, int64_t current) {
  int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (current > peak && !atomic_compare_exchange_weak_explicit(&c->peak, &peak, current, memory_order_relaxed,
                                                                  memory_order_relaxed)) {}
}

static const char *stat_names[SM_STAT_COUNT] = {
#define SM_STAT_NAME(name, text) [SM_STAT_##name] = text,
    SM_STATS_LIST(SM_STAT_NAME)
#undef SM_STAT_NAME
};
static const char *count_names[SM_COUNT_COUNT] = {
#define SM_COUNT_NAME(name, text, bytes) [SM_COUNT_##name] = text,
    SM_COUNTS_LIST(SM_COUNT_NAME)
#undef SM_COUNT_NAME
};

void sm_stats_print(void) {
  for (int i = 0; i < SM_COUNT_COUNT; i++) {
    smi_stat_count_t *c = &smi_stats.count[i];
    smi_message("%-14s peak %14lld total %14lld freed %14lld current %14lld", count_names[i],
                (long long)atomic_load(&c->peak), (long long)atomic_load(&c->total), (long long)atomic_load(&c->freed),
                (long long)atomic_load(&c->current));
  }
  for (int i = 0; i < SM_STAT_COUNT; i++) {
    smi_message("%-28s %12lld", stat_names[i], (long long)atomic_load_explicit(&smi_stats.counter[i], memory_order_relaxed));
  }
}

static void stats_at_exit(void) { sm_stats_print(); }

void smi_stats_init(void) {
  if (smi_option(sm_option_show_stats)) atexit(stats_at_exit);
}
