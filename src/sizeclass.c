/* sizeclass.c: size classes ("bins").
 *   bin 0: 8 bytes; bins 1..8: 16..128 bytes in steps of 16 (16-byte alignment for every request
 *   of 16 bytes or more forbids 8-byte steps there); from 128 bytes to 8 KiB: eight classes per
 *   power of two, so a request wastes less than 12.5% of its block; above 8 KiB: four classes per
 *   power of two (less than 25%). Each class a thread uses holds a page, and freed blocks of a
 *   page stay resident until the whole page is free, so for big blocks fewer classes means less
 *   memory held: eight classes per power of two up to 2 MiB kept 15 MiB resident in medium pages
 *   for 2 MiB of live blocks in mstress (peak RSS 47 MiB; 34 MiB with four). Four from 4 KiB on
 *   cost sqlite 4% (its 4 KiB pages plus a header land in a class 25% bigger instead of 12.5%).
 * smi_bin_of (internal.h) maps a size to its bin; this table maps a bin back to its block size. */
#include "internal.h"

#define SM_CLASS(b, j) ((1u << (b)) + (j) * (1u << ((b) - 3)))
#define SM_ROW(b) SM_CLASS(b, 1), SM_CLASS(b, 2), SM_CLASS(b, 3), SM_CLASS(b, 4), \
                  SM_CLASS(b, 5), SM_CLASS(b, 6), SM_CLASS(b, 7), SM_CLASS(b, 8)
#define SM_ROW4(b) SM_CLASS(b, 2), SM_CLASS(b, 4), SM_CLASS(b, 6), SM_CLASS(b, 8)

const uint32_t smi_bin_sizes[SM_BIN_COUNT] = {
    8, 16, 32, 48, 64, 80, 96, 112, 128,
    SM_ROW(7), SM_ROW(8), SM_ROW(9), SM_ROW(10), SM_ROW(11), SM_ROW(12),
    SM_ROW4(13), SM_ROW4(14), SM_ROW4(15), SM_ROW4(16), SM_ROW4(17), SM_ROW4(18), SM_ROW4(19), SM_ROW4(20),
};

_Static_assert(SM_BIN_COARSE_SHIFT == 13, "the table above switches to four classes per power of two at 8 KiB");
_Static_assert(sizeof(smi_bin_sizes) / sizeof(smi_bin_sizes[0]) == SM_BIN_COUNT, "bin table size");
_Static_assert(SM_CLASS(20, 8) == SM_LARGE_OBJ_MAX, "the last bin holds the largest large object");

/* the block a request of `size` bytes gets */
static size_t block_size_for(size_t size) {
  if (size <= SM_LARGE_OBJ_MAX) return smi_bin_size(smi_bin_of(size));
  if (size > SM_MAX_ALLOC_SIZE - SM_SEGMENT_SIZE) return size;
  /* huge blocks span whole segments after a one-page header (segment.c, smi_huge_alloc) */
  return smi_align_up(size + SM_HUGE_HEADER_SIZE + SM_GUARD_SIZE, SM_SEGMENT_SIZE) - SM_HUGE_HEADER_SIZE - SM_GUARD_SIZE;
}

/* The padded builds ask for SM_PADDING more bytes and keep them: the secure build's usable size is
 * then exactly this (the debug build reports the requested size as usable, but any request up to
 * this size gets the same block). */
size_t sm_good_size(size_t size) {
  if (SM_CHECK_FREES && size <= SM_MAX_ALLOC_SIZE - SM_PADDING) return block_size_for(size + SM_PADDING) - SM_PADDING;
  return block_size_for(size);
}

#if SM_DEBUG
/* every size maps to the smallest class that holds it */
void smi_sizeclass_check(void) {
  for (size_t size = 0; size <= SM_LARGE_OBJ_MAX; size += (size < 70000 ? 1 : 61)) {
    size_t bin = smi_bin_of(size);
    sm_assert(bin < SM_BIN_COUNT);
    sm_assert(smi_bin_size(bin) >= size);
    sm_assert(bin == 0 || smi_bin_size(bin - 1) < size);
    sm_assert(smi_bin_size(bin) % 8 == 0); /* the write-after-free check reads blocks a word at a time */
  }
}
#endif
