/* padding.h: the padding that secure and debug builds add to every block, shared by alloc.c
 * (which writes it at malloc) and free.c (which checks it on its fast path). Its last 8 bytes:
 *   [requested bytes][slack ...][canary: 4 bytes][delta: 4 bytes] <- end of the block
 * One word at a fixed place, so malloc writes it with one store and free checks it with one load.
 * The canary guards everything past the usable size (the block less those 8 bytes), which is what
 * the secure build reports as usable; delta, the distance from the requested end to the block end,
 * keeps the requested size (sized frees must match it). The debug and memory-checker builds report
 * the requested size as usable instead and guard the slack too: the debug build fills it and checks
 * it byte by byte at free, the memory checkers mark it no-access. */
#ifndef SM_PADDING_H
#define SM_PADDING_H

#include "internal.h"

#if SM_CHECK_FREES
/* builds whose usable size is the requested size (secure: up to the canary) */
#define SM_PADDING_EXACT (SM_DEBUG || SM_TRACK)

static inline uint32_t smi_canary_of(const void *p) { return (uint32_t)(uintptr_t)p ^ (uint32_t)smi_read_mostly.secret; }

/* b: the pointer handed out; usable: bytes from b to the end of its block */
static inline void smi_padding_write(uint8_t *b, size_t size, size_t usable) {
  uint64_t word = smi_canary_of(b) | (uint64_t)(usable - size) << 32;
  memcpy(b + usable - SM_PADDING, &word, 8);
}

/* what the canary's place holds (no checker annotations: callers in memory-checker builds use the
 * full check in alloc.c) */
static inline uint32_t smi_padding_canary(const void *p, size_t usable) {
  uint32_t canary;
  memcpy(&canary, (const uint8_t *)p + usable - SM_PADDING, 4);
  return canary;
}
static inline bool smi_padding_intact(const void *p, size_t usable) { return smi_padding_canary(p, usable) == smi_canary_of(p); }

/* a block released without a free (sm_heap_destroy) has its canary turned into this, so that no
 * dangling pointer to it passes for live (a freed block carries its link there instead:
 * SM_LINK_AT_END; secure builds combined with debug or a memory checker mark every free) */
static inline uint32_t smi_freed_mark_of(const void *p) { return ~smi_canary_of(p); }
static inline void smi_padding_store_mark(void *p, size_t usable, uint32_t mark) {
  memcpy((uint8_t *)p + usable - SM_PADDING, &mark, 4);
}
static inline void smi_padding_mark_freed(void *p, size_t usable) { smi_padding_store_mark(p, usable, smi_freed_mark_of(p)); }
static inline bool smi_padding_is_freed(const void *p, size_t usable) {
  return smi_padding_canary(p, usable) == smi_freed_mark_of(p);
}
#endif

#endif
