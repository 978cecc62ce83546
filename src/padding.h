/* padding.h: the layout of the padding that secure and debug builds add to every block, shared by
 * alloc.c (which writes it at malloc) and free.c (which checks it on its fast path):
 *   [requested bytes][canary: 4 bytes][slack ...][delta: 4 bytes] <- end of the block
 * The canary follows the requested bytes, so even a one-byte overflow is seen at free; delta, the
 * distance from the requested end to the block end, lets free find the canary without any table. */
#ifndef SM_PADDING_H
#define SM_PADDING_H

#include "internal.h"

#if SM_CHECK_FREES
static inline uint32_t smi_canary_of(const void *p) { return (uint32_t)(((uintptr_t)p >> 3) ^ smi_process_secret); }

/* b: the pointer handed out; usable: bytes from b to the end of its block */
static inline void smi_padding_write(uint8_t *b, size_t size, size_t usable) {
  uint32_t canary = smi_canary_of(b), delta = (uint32_t)(usable - size);
  memcpy(b + size, &canary, 4);
  memcpy(b + usable - 4, &delta, 4);
}

/* the record is plausible and the canary intact (no checker annotations: callers in memory-checker
 * builds use the full check in alloc.c) */
static inline bool smi_padding_intact(const void *p, size_t usable) {
  const uint8_t *end = (const uint8_t *)p + usable;
  uint32_t delta, canary;
  memcpy(&delta, end - 4, 4);
  if ((size_t)delta - SM_PADDING > usable - SM_PADDING) return false; /* not in [SM_PADDING, usable] */
  memcpy(&canary, end - delta, 4);
  return canary == smi_canary_of(p);
}
#endif

#endif
