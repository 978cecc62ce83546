/* padding.h: the padding that secure and debug builds add to every block, shared by alloc.c
 * (which writes it at malloc) and free.c (which checks it on its fast path). Its last 8 bytes:
 *   [requested bytes][slack ...][canary: 4 bytes][delta: 4 bytes] <- end of the block
 * One word at a fixed place, so malloc writes it with one store and free checks it with one load.
 * The canary guards everything past the usable size (the block less those 8 bytes), which is what
 * the secure build reports as usable; delta, the distance from the requested end to the block end,
 * keeps the requested size (sized frees must match it). The canary is bound to delta (the block's
 * own canary xor delta), so the word xor the block's own canary reads delta twice, and a write to
 * either half shows: an overflow past the usable size meets the canary first, an underflow from
 * the block after meets delta first (1 to 4 bytes of it went unseen until 2026-11-28). The debug
 * and memory-checker builds report the requested size as usable instead and guard the slack too:
 * the debug build fills it and checks it byte by byte at free, the memory checkers mark it
 * no-access. */
#ifndef SM_PADDING_H
#define SM_PADDING_H

#include "internal.h"

#if SM_CHECK_FREES
/* builds whose usable size is the requested size (secure: up to the canary) */
#define SM_PADDING_EXACT (SM_DEBUG || SM_TRACK)

/* the block's own canary: its address under the process's secret */
static inline uint32_t smi_canary_of(const void *p) { return (uint32_t)(uintptr_t)p ^ (uint32_t)smi_read_mostly.secret; }

static inline uint64_t smi_padding_word(const void *p, size_t usable) {
  uint64_t word;
  memcpy(&word, (const uint8_t *)p + usable - SM_PADDING, 8);
  return word;
}
static inline uint32_t smi_padding_delta(uint64_t word) { return (uint32_t)(word >> 32); }
/* what the canary half holds: canary (the block's own) bound to the delta half */
static inline uint32_t smi_padding_bound(uint32_t canary, uint32_t delta) { return canary ^ delta; }
/* the word is as malloc wrote it for a block whose own canary is `canary`: xor that canary, both
 * halves read delta (one rotate and compare on free's fast path) */
static inline bool smi_padding_word_intact(uint64_t word, uint32_t canary) {
  uint64_t both = word ^ canary;
  return both == (both << 32 | both >> 32);
}

/* b: the pointer handed out; usable: bytes from b to the end of its block; delta: usable less
 * the requested size, or SM_PADDING_DELTA_FAR */
static inline void smi_padding_write_delta(uint8_t *b, size_t usable, uint32_t delta) {
  uint64_t word = smi_padding_bound(smi_canary_of(b), delta) | (uint64_t)delta << 32;
  memcpy(b + usable - SM_PADDING, &word, 8);
}
/* delta's record of a slack it cannot hold (a huge block resized in place to 4 GiB or more below
 * its end): the requested size is then in the segment header (huge_requested) */
#define SM_PADDING_DELTA_FAR UINT32_MAX
/* malloc's write: its slack is at most a segment */
static inline void smi_padding_write(uint8_t *b, size_t size, size_t usable) {
  smi_padding_write_delta(b, usable, (uint32_t)(usable - size));
}

/* (no checker annotations: callers in memory-checker builds use the full check in alloc.c) */
static inline uint32_t smi_padding_canary(const void *p, size_t usable) { return (uint32_t)smi_padding_word(p, usable); }
static inline bool smi_padding_intact(const void *p, size_t usable) {
  return smi_padding_word_intact(smi_padding_word(p, usable), smi_canary_of(p));
}
/* the canary half of a live block, for the delta half it holds now (read alone: another thread's
 * claim may be writing the canary half) */
static inline uint32_t smi_padding_live_canary(const void *p, size_t usable) {
  uint32_t delta;
  memcpy(&delta, (const uint8_t *)p + usable - SM_PADDING + 4, 4);
  return smi_padding_bound(smi_canary_of(p), delta);
}

/* a block released without a free (sm_heap_destroy), or claimed by one, has its canary half
 * turned into this, so that no dangling pointer to it passes for live (a freed block carries its
 * link there instead: SM_LINK_AT_END; secure builds combined with debug or a memory checker mark
 * every free) */
static inline uint32_t smi_freed_mark_of(const void *p, size_t usable) { return ~smi_padding_live_canary(p, usable); }
static inline void smi_padding_store_mark(void *p, size_t usable, uint32_t mark) {
  memcpy((uint8_t *)p + usable - SM_PADDING, &mark, 4);
}
static inline void smi_padding_mark_freed(void *p, size_t usable) { smi_padding_store_mark(p, usable, smi_freed_mark_of(p, usable)); }
static inline bool smi_padding_is_freed(const void *p, size_t usable) {
  return smi_padding_canary(p, usable) == smi_freed_mark_of(p, usable);
}

/* A free that takes the full check claims its block by turning the canary into the freed mark
 * with one compare-and-swap: of two threads freeing one block at the same moment, exactly one
 * gets it and the other finds a freed block (a double free, reported), so the block is not put on
 * two free lists and handed out twice. Every free of the debug build does, and every free of the
 * secure build while one of its options (atomic_free, quarantine, zero_on_free) is on; its
 * fast path does not: the locked instruction on every free cost 5% of its time (geometric mean
 * of the benchmark suite, 2026-11-27; the producer/consumer workloads up to 40%). Not in the
 * memory-checker builds, where the padding is no-access and the checker reports double frees. */
#define SM_CLAIM_FREES ((SM_SECURE || SM_DEBUG) && !SM_TRACK)
static inline bool smi_padding_claim(void *p, size_t usable) {
  uint32_t canary = smi_padding_live_canary(p, usable); /* the delta half is not written while live */
  return __atomic_compare_exchange_n((uint32_t *)((uint8_t *)p + usable - SM_PADDING), &canary, ~canary, false,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
/* The padding shows that a free claimed the block: the freed mark, then (the free goes on writing
 * while another thread's checks read) the debug build's fill, or the secure build's link or the
 * quarantine's marker (SM_LINK_AT_END), after zero_on_free's zeros. A huge block is claimed too
 * (its quarantine keeps it mapped), but carries no link. */
static inline bool smi_padding_claimed(const sm_page_t *page, const void *p, size_t usable) {
  uint32_t now = smi_padding_canary(p, usable);
  if (now == smi_freed_mark_of(p, usable) || (SM_DEBUG && now == 0xDFDFDFDFu)) return true;
#if SM_LINK_AT_END
  if (smi_page_segment(page)->kind == SM_SEGMENT_HUGE) return false;
  uint64_t word;
  memcpy(&word, (const uint8_t *)p + usable - SM_PADDING, 8);
  return (word == 0 && smi_option(sm_option_zero_on_free)) ||
         smi_block_link_reads_free(page, (const sm_block_t *)((const uint8_t *)p + usable - page->block_size));
#else
  (void)page;
  return false;
#endif
}
static inline void smi_padding_report_raced(smi_call_t call, const void *p, size_t block_size) {
  smi_report_freed(call, p, block_size, "; freed by another thread at the same moment");
}
#endif

#endif
