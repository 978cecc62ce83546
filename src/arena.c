/* arena.c: where segments' memory comes from. Every segment and huge mapping is obtained and
 * given back through smi_mem_alloc / smi_mem_free / smi_mem_remap, which keep the reserved and
 * committed figures and enforce the memory limit (sm_option_memory_limit). Today the memory
 * comes straight from the OS layer (os.h). */
#include "internal.h"

/* the limit counts reserved address space: what the allocator has mapped, in use or cached */
static bool mem_limit_allows(size_t size) {
  long limit = smi_option(sm_option_memory_limit);
  return limit <= 0 || smi_count_current(SM_COUNT_RESERVED) + (int64_t)size <= limit;
}

void *smi_mem_alloc(size_t size, size_t alignment, size_t offset) {
  if (!mem_limit_allows(size)) return NULL;
  void *p = smi_os_alloc_aligned(size, alignment, offset);
  smi_stat_inc(SM_STAT_MMAP_CALLS);
  if (p == NULL) return NULL;
  smi_count_add(SM_COUNT_RESERVED, (int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, (int64_t)size);
  return p;
}

/* purged: how many of the bytes were purged (not counted as committed any more) */
void smi_mem_free(void *p, size_t size, size_t purged) {
  smi_stat_inc(SM_STAT_MUNMAP_CALLS);
  smi_os_free(p, size);
  smi_count_add(SM_COUNT_RESERVED, -(int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, -(int64_t)(size - purged));
}

void *smi_mem_remap(void *p, size_t old_size, size_t new_size, size_t alignment) {
  if (new_size > old_size && !mem_limit_allows(new_size - old_size)) return NULL;
  void *q = smi_os_remap_aligned(p, old_size, new_size, alignment);
  if (q == NULL) return NULL;
  smi_count_add(SM_COUNT_RESERVED, (int64_t)new_size - (int64_t)old_size);
  smi_count_add(SM_COUNT_COMMITTED, (int64_t)new_size - (int64_t)old_size);
  return q;
}

/* [p, p+size) was purged (its memory given back; the range stays reserved), or is in use again */
void smi_mem_purged(size_t size) {
  smi_stat_add(SM_STAT_PURGED, (int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, -(int64_t)size);
}
void smi_mem_unpurged(size_t size) { smi_count_add(SM_COUNT_COMMITTED, (int64_t)size); }
