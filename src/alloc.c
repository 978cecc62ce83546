/* alloc.c: the sm_ allocation API on top of the heap fast paths (internal.h) and the generic
 * path (page.c): zeroing, overflow checks, realloc, aligned allocation, strings.
 * Errors follow C11/POSIX/glibc: NULL with errno ENOMEM (EINVAL for a bad alignment). */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>

void *smi_enomem(void) {
  errno = ENOMEM;
  return NULL;
}


/* zeroed allocation: blocks carved from fresh (zero) memory only need their link word cleared */
static inline void *heap_malloc_zero(sm_heap_t *heap, size_t size) {
  if (sm_likely(size <= SM_DIRECT_MAX)) {
    sm_page_t *page = heap->pages_direct[(size + 7) >> 3];
    sm_block_t *block = page->free;
    if (sm_likely(block != NULL)) {
      bool is_zero = page->free_is_zero;
      void *p = smi_page_pop(page, block);
      if (SM_CHECK_FREES && sm_unlikely(p == NULL)) return smi_malloc_generic(heap, size, true); /* corrupted list */
      if (is_zero) *smi_block_link(page, block) = NULL;
      else memset(block, 0, page->block_size); /* the whole block: rezalloc relies on it */
      return block;
    }
  }
  return smi_malloc_generic(heap, size, true);
}


/* bytes from p to the end of its block */
static size_t usable_raw(const void *p) {
  const sm_segment_t *segment = smi_ptr_segment(p);
  const sm_page_t *page = smi_segment_page_of(segment, p);
  return page->block_size - (smi_page_has_aligned(page) ? smi_block_offset(page, p) : 0);
}

#if SM_CHECK_FREES
/* ---- padding (secure and debug builds) ----
 * Every request gets SM_PADDING more bytes: the block's last 8 bytes hold a canary and the
 * distance from the requested end to the block end (padding.h). The debug build also fills the
 * slack between the requested end and the canary (SM_FILL_SLACK, so even a one-byte overflow is
 * seen at free), new memory (SM_FILL_FRESH) and freed memory (SM_FILL_FREED), and checks at reuse
 * that freed memory was not written. */
#include "padding.h"
#define SM_FILL_FRESH 0xD0
#define SM_FILL_FREED 0xDF
#define SM_FILL_SLACK 0xDB

static size_t padded(size_t size) { return size > SM_MAX_ALLOC_SIZE ? SIZE_MAX : size + SM_PADDING; }
/* A zeroed request that becomes a huge block is cleared by smi_huge_alloc, which writes nothing
 * where the OS cleared it: clearing it here would write (and commit) every page of what may be
 * gigabytes (calloc of 1 TiB, while mappings still escaped the kernel's overcommit check, ran
 * into the OOM killer instead of returning a lazy block). */
static bool huge_zeroed(size_t size, bool zero) { return zero && padded(size) > SM_LARGE_OBJ_MAX; }

/* the requested size that delta records for a block of `usable` bytes at p (the whole span if
 * it does not fit) */
static size_t requested_of(const void *p, size_t usable, uint32_t delta) {
  if (delta == SM_PADDING_DELTA_FAR) { /* a huge block's slack of 4 GiB or more (padding_resize) */
    const sm_segment_t *segment = smi_ptr_segment(p);
    if (segment->kind == SM_SEGMENT_HUGE && segment->huge_requested + SM_PADDING <= usable) return segment->huge_requested;
  }
  return delta >= SM_PADDING && delta <= usable ? usable - delta : usable;
}
/* the requested size recorded in p's padding (the whole span if the record is damaged) */
static size_t padding_requested(const void *p, size_t usable) {
  uint32_t delta;
  smi_track_defined((const uint8_t *)p + usable - 4, 4);
  memcpy(&delta, (const uint8_t *)p + usable - 4, 4);
  smi_track_noaccess((const uint8_t *)p + usable - 4, 4);
  return requested_of(p, usable, delta);
}

/* the usable size: the requested size where it is reported exactly, else up to the canary */
static size_t padding_usable(const void *p, size_t usable) {
  return SM_PADDING_EXACT ? padding_requested(p, usable) : usable - SM_PADDING;
}
/* bytes a zeroed request clears: all it may use (rezalloc counts on bytes past the usable size
 * reading as zero after it grows in place) */
static size_t zero_len(size_t size, size_t usable) { return SM_PADDING_EXACT ? size : usable - SM_PADDING; }

#if SM_DEBUG
/* Of a huge block the debug build fills at most this much at each end of the requested bytes and
 * at the start of the slack: filling all of it made every page of a block of gigabytes resident
 * at malloc (malloc of more than the machine has was killed by the OOM killer, where the release
 * build returns a block whose untouched pages cost nothing). An overflow that reaches the block's
 * end still meets the canary. */
#define SM_DEBUG_HUGE_FILL ((size_t)64 * 1024)
static bool is_huge(const void *p) { return smi_ptr_segment(p)->kind == SM_SEGMENT_HUGE; }
/* the end of the slack that is filled (and checked at free): [size, canary_at) but for huge blocks */
static size_t slack_end(const void *p, size_t size, size_t canary_at) {
  return canary_at - size > SM_DEBUG_HUGE_FILL && is_huge(p) ? size + SM_DEBUG_HUGE_FILL : canary_at;
}
static void fill_slack(uint8_t *b, size_t size, size_t usable) {
  size_t canary_at = usable - SM_PADDING;
  memset(b + size, SM_FILL_SLACK, slack_end(b, size, canary_at) - size);
}
/* the requested bytes of a fresh block: all of them, or both ends of a huge block's */
static void fill_fresh(uint8_t *b, size_t size) {
  if (size <= 2 * SM_DEBUG_HUGE_FILL || !is_huge(b)) {
    memset(b, SM_FILL_FRESH, size);
    return;
  }
  memset(b, SM_FILL_FRESH, SM_DEBUG_HUGE_FILL);
  memset(b + size - SM_DEBUG_HUGE_FILL, SM_FILL_FRESH, SM_DEBUG_HUGE_FILL);
}

/* the first byte of b[from, to) that is not `fill`, or SIZE_MAX; a word at a time: the debug build
 * reads every freed block at its reuse and every block's slack at its free */
static void report_written_after_free(const void *block, size_t block_size, size_t offset) {
  smi_error(EFAULT, "write after free in block %p (block size %zu): byte %zu was written", block, block_size, offset);
}
static size_t first_unlike(const uint8_t *b, size_t from, size_t to, uint8_t fill) {
  const uint64_t words = 0x0101010101010101ull * fill;
  size_t i = from;
  for (; i < to && (i & 7) != 0; i++)
    if (b[i] != fill) return i;
  for (uint64_t w; i + 8 <= to; i += 8) {
    memcpy(&w, b + i, 8);
    if (w != words) break;
  }
  for (; i < to; i++)
    if (b[i] != fill) return i;
  return SIZE_MAX;
}

/* Freed memory keeps its fill until it is carved again, also when its whole page goes: else a
 * write after free into a block whose page was released (a large block, one to a page, or the
 * last block of a small page) was never seen, as its page's next carving filled over it. At a
 * page's release (segment.c) its blocks are all free, each a link and then the freed fill: that
 * is checked, the links are filled over, and the descriptor records how far the fill reaches
 * (freed_fill); a later page at that descriptor checks what it carves within that record, where
 * every byte is the fill or zero (purged). Within the record only: a segment taken from the
 * cache starts with none (it may have held a huge block, which is never filled). */
#if !SM_TRACK
void smi_debug_page_release(sm_page_t *page) {
  bool check = !(SM_SECURE && smi_option(sm_option_zero_on_free)); /* its freed blocks hold zeros */
  uint8_t *start = smi_page_start(page);
  for (size_t i = 0; i < page->capacity; i++) {
    uint8_t *block = start + i * page->block_size;
    size_t bad = check ? first_unlike(block, sizeof(sm_block_t), page->block_size, SM_FILL_FREED) : SIZE_MAX;
    if (bad != SIZE_MAX) {
      report_written_after_free(block, page->block_size, bad);
      check = false; /* one report a page */
    }
    memset(block, SM_FILL_FREED, bad == SIZE_MAX ? sizeof(sm_block_t) : page->block_size);
  }
  size_t carved = (size_t)page->capacity * page->block_size;
  if (carved > page->freed_fill) page->freed_fill = (uint32_t)carved;
}
/* sm_heap_destroy releases pages whose blocks were never freed */
void smi_debug_page_fill_freed(sm_page_t *page) {
  memset(smi_page_start(page), SM_FILL_FREED, (size_t)page->capacity * page->block_size);
}
void smi_debug_carve_check(const sm_page_t *page, const uint8_t *first, size_t len) {
  const uint8_t *start = smi_page_start(page);
  size_t from = (size_t)(first - start), to = from + len < page->freed_fill ? from + len : page->freed_fill;
  const uint64_t freed = 0x0101010101010101ull * SM_FILL_FREED;
  for (size_t i = from; i < to; i += 8) {
    uint64_t w;
    memcpy(&w, start + i, 8); /* blocks are 8-byte multiples from an 8-aligned start */
    if (sm_likely(w == 0 || w == freed)) continue;
    for (size_t k = i; k < i + 8; k++) {
      if (start[k] != 0 && start[k] != SM_FILL_FREED) {
        smi_error(EFAULT, "write after free at %p (0x%02x): a block of a page freed earlier was written, found as its "
                  "memory is carved again (block size now %zu)", (const void *)(start + k), start[k], page->block_size);
        return;
      }
    }
  }
}
#endif
#endif

/* every case: fill patterns and the write-after-free check (debug), memory checkers, aligned
 * pointers inside their block. Out of line, except for the memory checkers: they name the
 * function that announces a block as its allocator, which must be malloc. */
#if SM_TRACK
__attribute__((always_inline)) static inline
#else
static sm_noinline
#endif
void *padding_finish_full(void *p, size_t size, bool zero, bool cleared) {
  uint8_t *b = p;
  size_t usable = usable_raw(p);
  smi_track_undefined(b, usable);
#if SM_DEBUG
  const sm_segment_t *segment = smi_ptr_segment(p);
  if (segment->kind != SM_SEGMENT_HUGE) { /* freed (and fresh) blocks carry SM_FILL_FREED */
    const sm_page_t *page = smi_segment_page_of(segment, p);
    const uint8_t *block = smi_page_start(page) + (size_t)(b - smi_page_start(page)) / page->block_size * page->block_size;
    smi_track_defined(block, page->block_size); /* the fill is ours to read (memory checkers) */
    size_t i = first_unlike(block, sizeof(sm_block_t), page->block_size, SM_FILL_FREED);
    if (i != SIZE_MAX)
      report_written_after_free(block, page->block_size, i);
  }
  /* after the check: it covers the link word too */
  if (zero && !cleared) memset(b, 0, size);
  else if (!cleared) fill_fresh(b, size);
  fill_slack(b, size, usable);
#else
  /* the first word cleared: no link leaks out (usable >= SM_PADDING; the secure build's link is
   * in the padding word, which the padding write covers, and its first word is cleared too) */
  if (!cleared) memset(b, 0, zero ? zero_len(size, usable) : sizeof(sm_block_t));
#endif
  /* an aligned pointer inside its block: the block's own link must not look free either (the
   * secure build's is the padding word) */
  const sm_segment_t *seg = smi_ptr_segment(b);
  const sm_page_t *pg = smi_segment_page_of(seg, b);
  size_t lead = smi_page_has_aligned(pg) ? smi_block_offset(pg, b) : 0; /* a division: only when needed */
  if (lead != 0 && !SM_LINK_AT_END) {
    smi_track_undefined(b - lead, lead);
#if SM_DEBUG
    memset(b - lead, SM_FILL_FRESH, lead); /* nor carry the freed fill */
#else
    memset(b - lead, 0, lead < sizeof(sm_block_t) ? lead : sizeof(sm_block_t));
#endif
    smi_track_noaccess(b - lead, lead);
  }
  smi_padding_write(b, size, usable);
  smi_track_malloc(b, size, zero);
  smi_track_noaccess(b + size, usable - size); /* the padding is not the program's */
#if SM_DEBUG
  atomic_fetch_add_explicit(&smi_stats.bin_alloc[seg->kind == SM_SEGMENT_HUGE ? SM_BIN_COUNT : pg->bin], 1, memory_order_relaxed);
#endif
  return p;
}

/* The secure build's common case, a block start: clear the first word and write the padding,
 * inline. The padding overwrites the link word (SM_LINK_AT_END), so no free-list pointer leaks to
 * the program; the first word is cleared as issue 5 asks (one store to the line the program is
 * about to write). Every block is at least 8 bytes.
 * cleared: a zeroed request whose block reads as zero already (see huge_zeroed). */
__attribute__((always_inline)) static inline void *padding_finish(void *p, size_t size, bool zero, bool cleared) {
  if (p == NULL) return NULL;
  uint8_t *b = p;
  const sm_page_t *page = smi_segment_page_of(smi_ptr_segment(b), b);
  __asm__("" : "+r"(page)); /* computed once: gcc otherwise re-derives it from the index */
  if (SM_DEBUG || SM_TRACK || sm_unlikely(smi_page_has_aligned(page))) return padding_finish_full(p, size, zero, cleared);
  if (zero) {
    if (!cleared) memset(b, 0, zero_len(size, page->block_size));
  } else {
    memset(b, 0, sizeof(sm_block_t)); /* a constant size: one store */
  }
  smi_padding_write(b, size, page->block_size);
  return p;
}

/* at free: report an overflow past the usable size, naming the first overwritten byte, or an
 * underflow from the block after into the size record (free's fast path tests
 * smi_padding_intact first) */
bool smi_padding_check(const void *p, size_t block_size, bool claimed, smi_call_t call) {
  (void)call; /* the builds that claim frees name it in a report of a race */
  const uint8_t *b = p;
  size_t usable = usable_raw(p), canary_at = usable - SM_PADDING;
  smi_track_defined(b + canary_at, SM_PADDING);
  uint64_t word = smi_padding_word(p, usable);
  smi_track_noaccess(b + canary_at, SM_PADDING);
  /* The canary half tells the delta malloc bound it to. Where that one fits the block and the
   * delta half differs, the canary is intact and the record was overwritten from below (a
   * contiguous overflow meets the canary first): by a write before the block after. (A huge
   * block has no block after; a canary half an overflow wrote fits by chance, at odds of the
   * block size in 4 GiB.) A claimed canary half is the freed mark, which tells nothing. */
  uint32_t bound = smi_padding_bound((uint32_t)word, smi_canary_of(p));
  size_t bound_size = requested_of(p, usable, bound); /* usable: bound is no delta that fits */
  bool underflow = !claimed && bound != smi_padding_delta(word) && smi_ptr_segment(p)->kind != SM_SEGMENT_HUGE &&
                   bound_size != usable;
  size_t size = underflow ? bound_size : padding_requested(p, usable), bad = SIZE_MAX;
  if (underflow) { /* the record's lowest byte that differs from the one bound to the canary */
    for (bad = canary_at + 4; ((const uint8_t *)&bound)[bad - canary_at - 4] == (uint8_t)(word >> 8 * (bad - canary_at));) bad++;
  } else {
    size_t from = size < canary_at ? size : canary_at; /* the padding (size == usable: record damaged) */
    (void)from;                                        /* memory-checker builds only */
    smi_track_defined(b + from, usable - from);
#if SM_DEBUG
    if (size < canary_at) bad = first_unlike(b, size, slack_end(b, size, canary_at), SM_FILL_SLACK);
#endif
    uint32_t canary = smi_padding_bound(smi_canary_of(p), smi_padding_delta(word));
    for (size_t i = 0; bad == SIZE_MAX && !claimed && i < 4; i++) {
      if (b[canary_at + i] != ((const uint8_t *)&canary)[i]) bad = canary_at + i;
    }
    if (bad == SIZE_MAX && size == usable) bad = usable - 4; /* the size record itself */
    smi_track_noaccess(b + from, usable - from);
  }
  if (bad == SIZE_MAX) return true;
#if SM_CLAIM_FREES
  /* another thread's free claimed the block while this one checked it (its debug fill reaches the
   * slack before the canary), or its realloc moved the block's pages away (they read as zeros
   * now, and the segment left the map first): a double free at the same moment, not an overflow */
  const sm_segment_t *segment = smi_ptr_segment(p);
  if (!claimed && (smi_padding_claimed(smi_segment_page_of(segment, p), p, usable) || !smi_segment_is_registered(segment))) {
    smi_padding_report_raced(call, p, block_size);
    return false;
  }
#endif
  if (underflow)
    smi_error(EFAULT, "buffer underflow into block %p (requested %zu bytes, block size %zu): byte %zu, in its size record, "
              "was overwritten by a write before the block after it, %p", p, size, block_size, bad, (const void *)(b + usable));
  else if (size == usable && !claimed) /* both halves: from either side */
    smi_error(EFAULT, "buffer overflow in block %p (block size %zu): its canary and size record, bytes %zu to %zu, were "
              "overwritten, by a write past its end or before the block after it, %p", p, block_size, canary_at, usable - 1,
              (const void *)(b + usable));
  else
    smi_error(EFAULT, "buffer overflow in block %p (requested %zu bytes, usable %zu, block size %zu): byte %zu was overwritten",
              p, size, padding_usable(p, usable), block_size, bad);
  return false;
}

/* free: the program's part of the block is no longer the program's */
void smi_track_block_free(void *p) {
#if SM_TRACK
  size_t usable = usable_raw(p);
  smi_track_free(p, padding_requested(p, usable));
  smi_track_noaccess(p, usable);
#else
  (void)p;
#endif
}

size_t smi_usable_size(const void *p) { return p == NULL ? 0 : padding_usable(p, usable_raw(p)); }
size_t smi_requested_size(const void *p) { return padding_requested(p, usable_raw(p)); }

/* the block's requested size changes in place: rewrite the padding (p is live: checked, or
 * claimed by realloc) */
static void *padding_resize(void *p, size_t newsize) {
  uint8_t *b = p;
  size_t usable = usable_raw(p), size = padding_requested(p, usable);
  (void)size; /* only the memory checkers need it */
  if (newsize > SM_MAX_ALLOC_SIZE || newsize + SM_PADDING > usable) return NULL;
  smi_track_undefined(b + size, usable - size);
#if SM_DEBUG
  fill_slack(b, newsize, usable);
#endif
  if (usable - newsize < SM_PADDING_DELTA_FAR) {
    smi_padding_write(b, newsize, usable);
  } else { /* a huge block, 4 GiB or more below its end: until 2026-11-28 the record wrapped */
    smi_ptr_segment(b)->huge_requested = newsize;
    smi_padding_write_delta(b, usable, SM_PADDING_DELTA_FAR);
  }
  smi_track_resize(b, size, newsize);
  smi_track_noaccess(b + newsize, usable - newsize);
  return p;
}
/* p is checked as a free would check it before its padding is read or written (a freed block's
 * holds a link, a freed huge block's memory may be unmapped) */
void *sm_expand(void *p, size_t newsize) {
  return p != NULL && smi_block_check_live(p, false, SMI_CALL_EXPAND) ? padding_resize(p, newsize) : NULL;
}
size_t sm_usable_size(const void *p) {
  return p != NULL && smi_block_check_live(p, false, SMI_CALL_USABLE_SIZE) ? smi_usable_size(p) : 0;
}
#else
#define padded(size) (size)
#define padding_finish(p, size, zero, cleared) (p)
#define huge_zeroed(size, zero) (zero)
size_t smi_usable_size(const void *p) { return p == NULL ? 0 : usable_raw(p); }
void *sm_expand(void *p, size_t newsize) { return p != NULL && newsize <= usable_raw(p) ? p : NULL; }
size_t sm_usable_size(const void *p) { return smi_usable_size(p); }
#endif

/* ---- allocation in a given heap ----
 * heap_alloc/heap_alloc_aligned serve a heap the calling thread may use without a lock: its own
 * (the owner's) or a locked part whose lock the caller holds. heap_part_for_caller picks that
 * part; any_* wrap them with the lock when needed. */

#if SM_INLINE_CHECKS
/* The secure build pops from the page at hand and finishes the block with that page's block size
 * (no second lookup): the first word cleared, the padding written over the link. The rest goes
 * the generic way and is finished by padding_finish. */
static sm_noinline void *heap_alloc_generic(sm_heap_t *heap, size_t size, bool zero) {
  bool raw = huge_zeroed(size, zero);
  return padding_finish(smi_malloc_generic(heap, padded(size), raw), size, zero, raw);
}
/* the direct table's page for size has no block on `free` (smi_malloc_refill) */
static sm_noinline void *heap_alloc_refill(sm_heap_t *heap, sm_page_t *page, size_t size) {
  return padding_finish(smi_malloc_refill(heap, page, padded(size)), size, false, false);
}
/* the popped block's link leaves its page: smi_page_pop reports it and keeps the block, so the
 * generic path finds another */
static sm_noinline void *heap_alloc_bad_link(sm_heap_t *heap, sm_page_t *page, sm_block_t *block, size_t size, bool zero) {
  if (smi_page_pop(page, block) == NULL) return heap_alloc_generic(heap, size, zero);
  return padding_finish(block, size, zero, false);
}
static inline __attribute__((always_inline)) void *heap_alloc(sm_heap_t *heap, size_t size, bool zero) {
  if (sm_likely(size <= SM_DIRECT_MAX - SM_PADDING)) {
    sm_page_t *page = heap->pages_direct[(size + SM_PADDING + 7) >> 3];
    sm_block_t *block = page->free;
    if (sm_likely(block != NULL)) {
      /* smi_page_pop's check, its report out of line */
      sm_block_t *next = smi_block_next(page, block);
      if (sm_unlikely(!smi_page_link_ok(page, next))) return heap_alloc_bad_link(heap, page, block, size, zero);
      page->free = next;
      smi_prefetch_write(smi_block_link(page, next)); /* the line the next pop reads */
      page->used++;
      uint8_t *b = (uint8_t *)block;
      if (zero) memset(b, 0, zero_len(size, page->block_size));
      else block->next = NULL;
      smi_padding_write(b, size, page->block_size);
      return b;
    }
    if (!zero) return heap_alloc_refill(heap, page, size);
  }
  return heap_alloc_generic(heap, size, zero);
}
#else
/* always inline: the memory checkers name the function that announces a block (malloc's caller) */
static inline __attribute__((always_inline)) void *heap_alloc(sm_heap_t *heap, size_t size, bool zero) {
  if (SM_CHECK_FREES && huge_zeroed(size, zero)) return padding_finish(heap_malloc_zero(heap, padded(size)), size, true, true);
  if (SM_CHECK_FREES || !zero) return padding_finish(smi_heap_malloc(heap, padded(size)), size, zero, false);
  return heap_malloc_zero(heap, size);
}
#endif

/* the body of sm_malloc and malloc: inlined into both, as smi_free is (free.c) */
static inline __attribute__((always_inline)) void *smi_malloc(size_t size) { return heap_alloc(smi_tls_heap, size, false); }
SM_HOT_ENTRY void *sm_malloc(size_t size) { return smi_malloc(size); }

void *sm_malloc_small(size_t size) {
  sm_assert(size <= SM_SMALL_SIZE_MAX);
  if (SM_CHECK_FREES) return sm_malloc(size);
  return smi_heap_malloc_small(smi_tls_heap, size);
}

void *sm_zalloc(size_t size) { return heap_alloc(smi_tls_heap, size, true); }
void *sm_zalloc_small(size_t size) { return sm_zalloc(size); }

void *sm_calloc(size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_zalloc(total);
}

void *sm_mallocn(size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_malloc(total);
}

/* ---- aligned allocation ---- */

/* `alignment` is a power of two. Result r satisfies (r + offset) % alignment == 0. */
static void *malloc_aligned_raw(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero) {
  if (sm_unlikely(size > SM_MAX_ALLOC_SIZE)) return smi_enomem();
  if (size == 0) size = 1; /* a block of its own, also where the alignment asks for whole segments */
  offset &= alignment - 1;
  /* Every page starts 4 KiB-aligned, so a class that is a multiple of the alignment gives
   * aligned blocks without any padding: the first such class from `size` on, unless padding
   * would take a smaller one. An interior pointer marks its whole page (has_aligned), and every
   * free on that page then takes the generic path: in the padded builds, aligned_alloc(64, 64)
   * is a 72-byte request, and one such call had sent 6% of a benchmark's frees there. */
  if (offset == 0 && alignment <= SM_OS_PAGE_SIZE && size <= SM_LARGE_OBJ_MAX) {
    size_t s = size < alignment ? alignment : size;
    size_t last = s + alignment - 1 <= SM_LARGE_OBJ_MAX ? smi_bin_of(s + alignment - 1) : SM_BIN_COUNT - 1;
    for (size_t bin = smi_bin_of(s); bin <= last; bin++) {
      size_t block = smi_bin_size(bin);
      if (block % alignment != 0) continue;
      /* only the class's own blocks: one that borrows (page.c: page_borrow), or would when its page
       * is dry, hands out the next class's, which are not aligned alike */
      const sm_page_t *page = block <= SM_DIRECT_MAX ? heap->pages_direct[block / 8] : NULL;
      if (page != NULL && (page->block_size != block || page->free == NULL)) return smi_malloc_exact(heap, block, zero);
      return zero ? heap_malloc_zero(heap, block) : smi_heap_malloc(heap, block);
    }
  }
  /* Otherwise: pad, and hand out an aligned pointer inside the block. Only small and medium
   * pages and huge mappings take such interior pointers (a large span is found from its first
   * slot only); a huge block keeps them in its first SEGMENT_SIZE, where (p - 1) finds its
   * header, so an offset is possible up to that alignment (its block starts right after the
   * header: p + adjust = segment + SEGMENT_SIZE - offset). */
  bool pad = offset != 0 || (alignment <= SM_MEDIUM_OBJ_MAX && size + alignment <= SM_MEDIUM_OBJ_MAX);
  size_t padded = pad ? size + alignment - 1 : size;
  if (sm_unlikely(padded < size)) return smi_enomem();
  if (sm_unlikely(pad && alignment > SM_LARGE_OBJ_MAX &&
                  (alignment > SM_SEGMENT_SIZE || offset > SM_SEGMENT_SIZE - SM_HUGE_HEADER_SIZE))) {
    errno = EINVAL; /* mimalloc likewise refuses an offset with very large alignments */
    return NULL;
  }
  uint8_t *p;
  if (!pad || padded > SM_MEDIUM_OBJ_MAX) {
    if (sm_unlikely(heap == &smi_heap_empty) && (heap = smi_thread_init()) == NULL) return smi_enomem();
    p = smi_huge_alloc(heap, padded, pad ? 0 : alignment, zero); /* lists it under the heap's huge_lock */
  } else {
    p = zero ? heap_malloc_zero(heap, padded) : smi_heap_malloc(heap, padded);
  }
  if (p == NULL) return NULL;
  size_t adjust = (alignment - (((uintptr_t)p + offset) & (alignment - 1))) & (alignment - 1);
  if (adjust != 0) {
    sm_page_t *page = smi_segment_page_of(smi_ptr_segment(p), p);
    smi_page_set_has_aligned(page);
  }
  return p + adjust;
}

void *smi_malloc_aligned(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero) {
  bool raw = huge_zeroed(size, zero);
  return padding_finish(malloc_aligned_raw(heap, padded(size), alignment, offset, raw), size, zero, raw);
}

/* The part of `heap` the calling thread allocates from, with `*locked` telling whether the caller
 * must hold its lock; NULL when a shared part cannot be made (out of memory). */
static sm_heap_t *heap_part_for_caller(sm_heap_t *heap, bool *locked) {
  *locked = false;
  if (sm_likely(__atomic_load_n(&heap->thread_id, __ATOMIC_RELAXED) == smi_tls_tid)) return heap;
  *locked = true;
  if (__atomic_load_n(&heap->locked_access, __ATOMIC_ACQUIRE)) return heap;
  return smi_heap_shared_part(heap);
}

/* alignment 0: plain */
static void *any_alloc(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero) {
  bool locked;
  sm_heap_t *part = heap_part_for_caller(heap, &locked);
  if (sm_unlikely(part == NULL)) return smi_enomem();
  if (locked) smi_heap_lock(part);
  void *p = alignment == 0 ? heap_alloc(part, size, zero) : smi_malloc_aligned(part, size, alignment, offset, zero);
  if (locked) smi_heap_unlock(part);
  return p;
}

static void *any_alloc_checked(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  return any_alloc(heap, size, alignment, offset, zero);
}

/* ---- realloc ----
 * As glibc: NULL -> malloc; size 0 -> free and return NULL; failure leaves p intact (unless
 * free_on_fail). A block that still fits (and is aligned as asked) and is at most halved stays
 * where it is; so does one that shrinks more when no memory is to be had for a smaller block
 * (glibc's shrinks never fail, and `p = realloc(p, smaller)` unchecked is common). With zero,
 * bytes past the old usable size read as zero (rezalloc). */

/* b[from, to) reads as zero afterwards. In a huge block, its whole OS pages go back to the OS
 * instead (they then read as zero and cost nothing until touched): clearing them by hand made a
 * rezalloc to or from a huge size write every page of it, resident (1 GiB for a calloc'ed block
 * grown by rezalloc, where the calloc had cost nothing). Pinned memory cannot be given back. */
static void clear_range(uint8_t *b, size_t from, size_t to) {
  size_t os_page = smi_os_page_size();
  uintptr_t lo = smi_align_up((uintptr_t)b + from, os_page), hi = ((uintptr_t)b + to) & ~(uintptr_t)(os_page - 1);
  if (!SM_TRACK && to - from >= SM_LARGE_OBJ_MAX && hi > lo && smi_ptr_segment(b)->kind == SM_SEGMENT_HUGE &&
      smi_os_purge((void *)lo, hi - lo, true)) {
    memset(b + from, 0, lo - (uintptr_t)b - from);
    memset((void *)hi, 0, (uintptr_t)b + to - hi);
    return;
  }
  memset(b + from, 0, to - from);
}

/* p keeps its block at newsize (<= its usable size): padded builds rewrite its padding (the debug
 * build fills the bytes past the requested size and reports that size as usable) */
static void *realloc_in_place(void *p, size_t newsize, size_t usable, bool zero) {
#if SM_CHECK_FREES
  uint8_t *q = padding_resize(p, newsize);
  if (zero && q != NULL && newsize > usable) memset(q + usable, 0, newsize - usable);
  else if (zero && q != NULL && !SM_PADDING_EXACT) clear_range(q, newsize, usable);
  return q;
#else
  if (zero) clear_range(p, newsize, usable);
  return p;
#endif
}

/* realloc claims p at its checks (smi_block_check_live) in the builds that claim frees */
static void realloc_unclaim(void *p) { /* p stays (no memory for its move) */
#if SM_CLAIM_FREES
  smi_padding_store_mark(p, usable_raw(p), smi_padding_live_canary(p, usable_raw(p)));
#else
  (void)p;
#endif
}
static void realloc_free_claimed(void *p) {
#if SM_CLAIM_FREES
  smi_free_claimed(p);
#else
  sm_free(p);
#endif
}

static void *any_realloc(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset, bool zero,
                         bool free_on_fail) {
  if (p == NULL) return any_alloc(heap, newsize, alignment, offset, zero);
  if (newsize == 0) {
    sm_free(p);
    return NULL;
  }
#if SM_CHECK_FREES
  /* p must pass every check a free makes before anything of its block is read (a freed huge
   * block's mapping may be gone), and is claimed as a free claims it (SM_CLAIM_FREES), so that
   * a free racing this realloc cannot release it under the copy; reported, and the bad call is
   * ignored (EINVAL: NULL from realloc alone would read as out of memory) */
  if (!smi_block_check_live(p, SM_CLAIM_FREES, SMI_CALL_REALLOC)) {
    errno = EINVAL;
    return NULL;
  }
#endif
  size_t usable = smi_usable_size(p);
  bool aligned = alignment == 0 || (((uintptr_t)p + offset) & (alignment - 1)) == 0;
  /* With zero, every byte past the new size up to the usable size reads as zero afterwards (as
   * after a zeroed allocation), so that a later growth need clear only past the usable size:
   * after a shrink in place they still hold what the program wrote. The room is the whole block
   * up to its padding (the debug build's usable size is the requested size). */
  size_t room = SM_CHECK_FREES ? usable_raw(p) - SM_PADDING : usable;
  if (aligned && newsize <= room && newsize >= room / 2) return realloc_in_place(p, newsize, usable, zero); /* live again */
  if (!SM_TRACK && alignment == 0 && newsize > usable && newsize > SM_LARGE_OBJ_MAX) {
    sm_segment_t *segment = smi_ptr_segment(p);
    if (segment->kind == SM_SEGMENT_HUGE && p == smi_page_start(&segment->pages[0]) && smi_heap_keeps(heap, &segment->pages[0])) {
      uint8_t *q = smi_huge_remap(segment, padded(newsize)); /* a huge block grows by moving pages, not bytes */
      if (q != NULL) {
#if SM_CHECK_FREES
        padding_resize(q, newsize); /* the padding for the new size, live (the claim was at the old end) */
#endif
        if (zero) clear_range(q, usable, smi_usable_size(q));
        return q;
      }
    }
  }
  int saved_errno = errno;
  bool zeroed = zero && newsize > SM_LARGE_OBJ_MAX; /* a huge block is cleared where the OS did not */
  uint8_t *q = any_alloc(heap, newsize, alignment, offset, zeroed);
  if (sm_unlikely(q == NULL)) {
    if (aligned && newsize <= room) {
      errno = saved_errno;
      return realloc_in_place(p, newsize, usable, zero); /* its new padding is live */
    }
    if (free_on_fail) realloc_free_claimed(p);
    else realloc_unclaim(p);
    return NULL;
  }
  size_t kept = usable < newsize ? usable : newsize;
  memcpy(q, p, kept);
  if (zero && !zeroed) memset(q + kept, 0, smi_usable_size(q) - kept);
  realloc_free_claimed(p);
  return q;
}

void *smi_realloc(void *p, size_t newsize, bool free_on_fail) {
  return any_realloc(smi_tls_heap, p, newsize, 0, 0, false, free_on_fail);
}

void *sm_realloc(void *p, size_t newsize) { return smi_realloc(p, newsize, false); }
void *sm_reallocf(void *p, size_t newsize) { return smi_realloc(p, newsize, true); }
void *sm_rezalloc(void *p, size_t newsize) { return any_realloc(smi_tls_heap, p, newsize, 0, 0, true, false); }

void *sm_reallocn(void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return smi_realloc(p, total, false);
}
void *sm_recalloc(void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_rezalloc(p, total);
}

static void *any_realloc_aligned(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset, bool zero) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  return any_realloc(heap, p, newsize, alignment, offset, zero, false);
}
static void *any_recalloc_aligned(sm_heap_t *heap, void *p, size_t count, size_t size, size_t alignment, size_t offset) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_realloc_aligned(heap, p, total, alignment, offset, true);
}

void *sm_malloc_aligned_at(size_t size, size_t alignment, size_t offset) {
  return any_alloc_checked(smi_tls_heap, size, alignment, offset, false);
}
void *sm_malloc_aligned(size_t size, size_t alignment) { return sm_malloc_aligned_at(size, alignment, 0); }
void *sm_zalloc_aligned_at(size_t size, size_t alignment, size_t offset) {
  return any_alloc_checked(smi_tls_heap, size, alignment, offset, true);
}
void *sm_zalloc_aligned(size_t size, size_t alignment) { return sm_zalloc_aligned_at(size, alignment, 0); }
void *sm_calloc_aligned_at(size_t count, size_t size, size_t alignment, size_t offset) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_zalloc_aligned_at(total, alignment, offset);
}
void *sm_calloc_aligned(size_t count, size_t size, size_t alignment) { return sm_calloc_aligned_at(count, size, alignment, 0); }
void *sm_realloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset) {
  return any_realloc_aligned(smi_tls_heap, p, newsize, alignment, offset, false);
}
void *sm_realloc_aligned(void *p, size_t newsize, size_t alignment) { return sm_realloc_aligned_at(p, newsize, alignment, 0); }
void *sm_rezalloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset) {
  return any_realloc_aligned(smi_tls_heap, p, newsize, alignment, offset, true);
}
void *sm_rezalloc_aligned(void *p, size_t newsize, size_t alignment) { return sm_rezalloc_aligned_at(p, newsize, alignment, 0); }
void *sm_recalloc_aligned_at(void *p, size_t count, size_t size, size_t alignment, size_t offset) {
  return any_recalloc_aligned(smi_tls_heap, p, count, size, alignment, offset);
}
void *sm_recalloc_aligned(void *p, size_t count, size_t size, size_t alignment) {
  return sm_recalloc_aligned_at(p, count, size, alignment, 0);
}

/* ---- strings ---- */

static char *any_strndup(sm_heap_t *heap, const char *s, size_t n) {
  if (s == NULL) return NULL;
  size_t len = n == SIZE_MAX ? strlen(s) : strnlen(s, n);
  char *t = any_alloc(heap, len + 1, 0, 0, false);
  if (t == NULL) return NULL;
  memcpy(t, s, len);
  t[len] = 0;
  return t;
}

static char *any_realpath(sm_heap_t *heap, const char *fname, char *resolved_name) {
  if (resolved_name != NULL) return realpath(fname, resolved_name);
  char buf[PATH_MAX];
  char *r = realpath(fname, buf);
  return r == NULL ? NULL : any_strndup(heap, buf, SIZE_MAX);
}

char *sm_strdup(const char *s) { return any_strndup(smi_tls_heap, s, SIZE_MAX); }
char *sm_strndup(const char *s, size_t n) { return any_strndup(smi_tls_heap, s, n); }
char *sm_realpath(const char *fname, char *resolved_name) { return any_realpath(smi_tls_heap, fname, resolved_name); }

/* ---- the heap API: the same calls in a given heap ---- */

void *sm_heap_malloc(sm_heap_t *heap, size_t size) { return any_alloc(heap, size, 0, 0, false); }
void *sm_heap_zalloc(sm_heap_t *heap, size_t size) { return any_alloc(heap, size, 0, 0, true); }
void *sm_heap_malloc_small(sm_heap_t *heap, size_t size) { return any_alloc(heap, size, 0, 0, false); }
void *sm_heap_calloc(sm_heap_t *heap, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_alloc(heap, total, 0, 0, true);
}
void *sm_heap_mallocn(sm_heap_t *heap, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_alloc(heap, total, 0, 0, false);
}
void *sm_heap_realloc(sm_heap_t *heap, void *p, size_t newsize) { return any_realloc(heap, p, newsize, 0, 0, false, false); }
void *sm_heap_reallocf(sm_heap_t *heap, void *p, size_t newsize) { return any_realloc(heap, p, newsize, 0, 0, false, true); }
void *sm_heap_rezalloc(sm_heap_t *heap, void *p, size_t newsize) { return any_realloc(heap, p, newsize, 0, 0, true, false); }
void *sm_heap_reallocn(sm_heap_t *heap, void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_realloc(heap, p, total, 0, 0, false, false);
}
void *sm_heap_recalloc(sm_heap_t *heap, void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_realloc(heap, p, total, 0, 0, true, false);
}
char *sm_heap_strdup(sm_heap_t *heap, const char *s) { return any_strndup(heap, s, SIZE_MAX); }
char *sm_heap_strndup(sm_heap_t *heap, const char *s, size_t n) { return any_strndup(heap, s, n); }
char *sm_heap_realpath(sm_heap_t *heap, const char *fname, char *resolved_name) {
  return any_realpath(heap, fname, resolved_name);
}

void *sm_heap_malloc_aligned_at(sm_heap_t *heap, size_t size, size_t alignment, size_t offset) {
  return any_alloc_checked(heap, size, alignment, offset, false);
}
void *sm_heap_malloc_aligned(sm_heap_t *heap, size_t size, size_t alignment) {
  return any_alloc_checked(heap, size, alignment, 0, false);
}
void *sm_heap_zalloc_aligned_at(sm_heap_t *heap, size_t size, size_t alignment, size_t offset) {
  return any_alloc_checked(heap, size, alignment, offset, true);
}
void *sm_heap_zalloc_aligned(sm_heap_t *heap, size_t size, size_t alignment) {
  return any_alloc_checked(heap, size, alignment, 0, true);
}
void *sm_heap_calloc_aligned_at(sm_heap_t *heap, size_t count, size_t size, size_t alignment, size_t offset) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return any_alloc_checked(heap, total, alignment, offset, true);
}
void *sm_heap_calloc_aligned(sm_heap_t *heap, size_t count, size_t size, size_t alignment) {
  return sm_heap_calloc_aligned_at(heap, count, size, alignment, 0);
}
void *sm_heap_realloc_aligned_at(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset) {
  return any_realloc_aligned(heap, p, newsize, alignment, offset, false);
}
void *sm_heap_realloc_aligned(sm_heap_t *heap, void *p, size_t newsize, size_t alignment) {
  return any_realloc_aligned(heap, p, newsize, alignment, 0, false);
}
void *sm_heap_rezalloc_aligned_at(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset) {
  return any_realloc_aligned(heap, p, newsize, alignment, offset, true);
}
void *sm_heap_rezalloc_aligned(sm_heap_t *heap, void *p, size_t newsize, size_t alignment) {
  return any_realloc_aligned(heap, p, newsize, alignment, 0, true);
}
void *sm_heap_recalloc_aligned_at(sm_heap_t *heap, void *p, size_t count, size_t size, size_t alignment, size_t offset) {
  return any_recalloc_aligned(heap, p, count, size, alignment, offset);
}
void *sm_heap_recalloc_aligned(sm_heap_t *heap, void *p, size_t count, size_t size, size_t alignment) {
  return any_recalloc_aligned(heap, p, count, size, alignment, 0);
}

int sm_version(void) { return SM_VERSION; }
