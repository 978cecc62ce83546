/* free.c: the free paths.
 *   owner thread:  push onto page->local_free, no atomic (fast path, sm_free);
 *   other thread:  one CAS onto page->thread_free; if the page is full and asked to be told
 *                  (delay state USE), the block goes onto the owner heap's delayed list instead,
 *                  once per full page, so the owner can take the page out of its full queue;
 *   huge blocks:   unmapped by whichever thread frees them;
 *   aligned:       pages that handed out interior pointers map them back to the block start.
 * In secure and debug builds every pointer is validated first (see free_check). */
#include "internal.h"
#include "padding.h"

#include <sched.h>

/* The owner's page became empty on the fast path. Keeping it as its bin's only page touches
 * nothing the purger reads, so that common case needs no lock; giving it back does. */
static sm_noinline void free_retire(sm_page_t *page) {
  sm_heap_t *heap = smi_page_heap(page);
  if (smi_page_retire_keep(heap, page)) return;
  smi_heap_lock(heap);
  if (page->used == 0 && page->in_use) smi_page_retire(page);
  /* pages given back earlier may be due: a program that frees a burst and then only frees (or
   * sleeps) takes no malloc slow path that would purge them */
  smi_segments_purge_due(heap->tld);
  bool worth = smi_purger_worth(heap->tld, false);
  smi_heap_unlock(heap);
  /* a thread that frees a burst and goes quiet (purge.c); never a thread started from here: glibc
   * frees a joined thread's TLS with its thread-stack lock held, which pthread_create takes */
  smi_purger_consider(worth, false);
}

/* heap lock held */
void smi_free_block_local(sm_page_t *page, sm_block_t *block) {
  smi_block_set_next(page, block, page->local_free);
  page->local_free = block;
  if (sm_unlikely(--page->used == 0)) smi_page_retire(page);
  else if (sm_unlikely(page->flags.x.in_full)) smi_page_unfull(page);
}

/* remote frees between USE and back to NONE (the child of a fork ends them: heap.c) */
_Atomic(size_t) smi_remote_notifying;

/* the page's delay state was USE: tell its heap, unless that changed meanwhile */
static sm_noinline void free_remote_notify(sm_page_t *page, sm_block_t *block) {
  atomic_fetch_add_explicit(&smi_remote_notifying, 1, memory_order_seq_cst); /* before FREEING is seen */
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed), nf;
  bool notify;
  do {
    notify = smi_tf_delay(tf) == SM_DELAY_USE;
    if (notify) {
      nf = smi_tf_with_delay(tf, SM_DELAY_FREEING);
    } else {
      smi_block_set_next(page, block, smi_tf_block(tf));
      nf = smi_tf_push(tf, block);
    }
  } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &tf, nf, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (notify) {
    /* FREEING keeps the owner from detaching the heap until we are done with it */
    sm_heap_t *heap = smi_page_heap(page);
    bool pushed = false;
    if (heap != NULL) {
      sm_block_t *head = atomic_load_explicit(&heap->thread_delayed_free, memory_order_relaxed);
      do {
        smi_block_set_next(page, block, head);
      } while (!atomic_compare_exchange_weak_explicit(&heap->thread_delayed_free, &head, block, memory_order_release,
                                                      memory_order_relaxed));
      pushed = true;
    }
    /* back to NONE: later remote frees go to the page's own list (or the block, if not pushed) */
    tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    do {
      if (!pushed) {
        smi_block_set_next(page, block, smi_tf_block(tf));
        nf = smi_tf_push(smi_tf_with_delay(tf, SM_DELAY_NONE), block);
      } else {
        nf = smi_tf_with_delay(tf, SM_DELAY_NONE);
      }
    } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &tf, nf, memory_order_acq_rel,
                                                    memory_order_relaxed));
  }
  atomic_fetch_sub_explicit(&smi_remote_notifying, 1, memory_order_release);
}

static void free_remote(sm_page_t *page, sm_block_t *block) {
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed), nf;
  do {
    if (sm_unlikely(smi_tf_delay(tf) == SM_DELAY_USE)) {
      free_remote_notify(page, block);
      return;
    }
    smi_block_set_next(page, block, smi_tf_block(tf));
    nf = smi_tf_push(tf, block);
  } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &tf, nf, memory_order_acq_rel,
                                                  memory_order_relaxed));
}

/* the block that an interior (aligned) pointer lies in */
static sm_block_t *page_block_of(const sm_page_t *page, const void *p) {
  return (sm_block_t *)((uintptr_t)p - smi_block_offset(page, p));
}

#if SM_CHECK_FREES
void smi_report_freed(smi_call_t call, const void *p, size_t block_size, const char *why) {
  if (call == SMI_CALL_FREE) smi_error(EINVAL, "double free of %p (block size %zu%s)", p, block_size, why);
  else smi_error(EINVAL, "%s of a freed block %p (block size %zu%s)", smi_call_name(call), p, block_size, why);
}

/* never leaves the page, so a racy or corrupted list cannot make it read unmapped memory */
static bool list_contains(const sm_page_t *page, const sm_block_t *list, const sm_block_t *block) {
  for (uint32_t n = 0; list != NULL && n <= page->capacity; n++, list = smi_block_next(page, list)) {
    if (list == block) return true;
    if (!smi_page_block_start(page, (uintptr_t)list)) return false;
  }
  return false;
}

/* A free block's link word decodes to NULL or to a block of the same page. In the secure build
 * links are encoded with random keys and every block handed out has its link word overwritten by
 * the padding, so that alone tells a free (or quarantined) block from a live one. Otherwise a
 * live block's first word may look like a link (a self-pointer, a NULL): the owner confirms by
 * scanning the page's lists, and another thread, which must not walk the owner's lists (they
 * change under it), checks the debug build's freed-memory fill. */
/* The secure build: a block that another thread freed into a full page waits on its owner's
 * list of such blocks, linked to that list's next block, which may be in any page (a second free
 * of it was reported as an overflow until 2026-11-28). */
static bool block_link_reads_delayed(const sm_page_t *page, const sm_block_t *block) {
#if SM_LINK_AT_END
  uintptr_t next = (uintptr_t)smi_link_decode(page, smi_track_peek_word(smi_block_link(page, block)));
  return next != 0 && smi_is_page_block_start(next);
#else
  (void)page, (void)block;
  return false;
#endif
}

static bool block_is_free(const sm_page_t *page, const sm_block_t *block, bool owner) {
  if (!smi_block_link_reads_free(page, block)) return SM_SECURE && block_link_reads_delayed(page, block);
  if (SM_SECURE) return true;
  if (owner) {
    uintptr_t tf = atomic_load_explicit(&((sm_page_t *)page)->thread_free, memory_order_acquire);
    return list_contains(page, page->free, block) || list_contains(page, page->local_free, block) ||
           list_contains(page, smi_tf_block(tf), block);
  }
#if SM_DEBUG
  const uint8_t *b = (const uint8_t *)block;
  size_t end = page->block_size < 64 ? page->block_size : 64;
  for (size_t i = sizeof(sm_block_t); i < end; i++) {
    if (b[i] != 0xDF) return false;
  }
  return true;
#else
  return false; /* valgrind and ASan builds: the checker itself reports double frees */
#endif
}

/* Is p a block (or aligned pointer into a block) that shardmalloc handed out and that is not free?
 * Returns its page if so. Reports and returns NULL for foreign, interior, and already-freed
 * pointers: the caller then ignores the free, so the heap is never corrupted by it. Every check,
 * in full: the debug and memory-checker builds always come here, the secure build when its fast
 * test (free_check) is not sure. */
static sm_page_t *block_validate(const void *p, bool claim, smi_call_t call) {
  const char *name = smi_call_name(call);
  sm_segment_t *segment = smi_ptr_segment(p);
  if (sm_unlikely(!smi_segment_is_registered(segment) || segment->cookie != ((uintptr_t)segment ^ smi_read_mostly.secret))) {
    smi_error(EINVAL, "%s of a pointer that was not allocated by shardmalloc: %p", name, p);
    return NULL;
  }
  sm_page_t *page = smi_segment_page_of(segment, p);
  if (sm_unlikely(!page->in_use && (const uint8_t *)p == smi_page_start(page))) {
    /* the first block of a page no longer in use: a large or huge block (one to a page, and the
     * page goes when it is freed), or a small page's first block after its last one went */
    smi_report_freed(call, p, page->block_size, "; its page is free");
    return NULL;
  }
  if (sm_unlikely(!page->in_use || (const uint8_t *)p < smi_page_start(page) ||
                  (const uint8_t *)p >= smi_page_start(page) + smi_page_carved(page))) {
    smi_error(EINVAL, "%s of an invalid pointer %p (not in a live block)", name, p);
    return NULL;
  }
  size_t lead = smi_block_offset(page, p);
  if (sm_unlikely(lead != 0 && !smi_page_has_aligned(page))) {
    smi_error(EINVAL, "%s of an interior pointer %p (block %p of size %zu)", name, p, (const void *)((const uint8_t *)p - lead),
              page->block_size);
    return NULL;
  }
  const sm_block_t *block = (const sm_block_t *)((const uint8_t *)p - lead);
  bool owner = atomic_load_explicit(&segment->thread_id, memory_order_relaxed) == smi_tls_tid;
  /* huge blocks are on no list; one waiting in a quarantine carries the marker link */
  bool huge_quarantined = SM_SECURE && segment->kind == SM_SEGMENT_HUGE && smi_option(sm_option_quarantine) > 0 &&
                          smi_block_next(page, block) == (sm_block_t *)smi_page_start(page);
  bool marked_freed = SM_CLAIM_FREES ? smi_padding_claimed(page, p, page->block_size - lead)
                                     : SM_SECURE && segment->kind != SM_SEGMENT_HUGE && smi_padding_is_freed(p, page->block_size - lead);
  if (huge_quarantined || marked_freed || (segment->kind != SM_SEGMENT_HUGE && sm_unlikely(block_is_free(page, block, owner)))) {
    smi_report_freed(call, p, page->block_size, "");
    return NULL;
  }
  if (lead != 0 && !smi_padding_intact(p, page->block_size - lead)) {
    /* a page that handed out aligned pointers takes any pointer into a block for one, but only
     * the one handed out has the canary at the block's end, and the canary names it */
    uint64_t word = smi_padding_word(p, page->block_size - lead);
    uint32_t own = smi_padding_bound((uint32_t)word, smi_padding_delta(word)); /* unbound again */
    uintptr_t named = ((uintptr_t)p & ~(uintptr_t)UINT32_MAX) | (own ^ (uint32_t)smi_read_mostly.secret);
    if (named >= (uintptr_t)block && named < (uintptr_t)block + page->block_size && named != (uintptr_t)p) {
      smi_error(EINVAL, "%s of an interior pointer %p (block %p of size %zu, handed out as %p)", name, p,
                (const void *)block, page->block_size, (void *)named);
      return NULL;
    }
  }
#if SM_CLAIM_FREES
  /* Of two threads freeing one block at the same moment, one claims it (padding.h) and the other
   * reports. The claim comes before the padding is read in full (the debug build's slack): a
   * racing free could otherwise release a huge block's memory under that read. Huge blocks are
   * claimed too: with the quarantine both frees would wait in a ring, and the second one's
   * release could meet the mapping handed out again. */
  if (claim) {
    size_t usable = page->block_size - lead;
    if (smi_padding_claim((void *)p, usable)) {
      if (smi_padding_check(p, page->block_size, true, call)) return page;
      smi_padding_store_mark((void *)p, usable, smi_padding_live_canary(p, usable)); /* an overflow: the block stays allocated */
      return NULL;
    }
    /* the canary is gone: another thread claimed the block (told at once, as its release may
     * be unmapping the block), or it was overwritten (an overflow) */
    if (smi_padding_claimed(page, p, usable) || smi_padding_check(p, page->block_size, false, call))
      smi_padding_report_raced(call, p, page->block_size);
    return NULL;
  }
#else
  (void)claim;
#endif
  /* an overflow is reported and the free ignored, as for every error: the block stays allocated */
  if (!smi_padding_check(p, page->block_size, false, call)) return NULL;
  return page;
}

/* what a free does to a block in these builds once it has passed the checks (and is claimed):
 * the debug fill, the memory checkers' bookkeeping, the per-class statistics */
static sm_page_t *free_checked(const void *p, sm_page_t *page) {
#if SM_DEBUG
  const sm_segment_t *segment = smi_page_segment(page);
  const sm_block_t *block = (const sm_block_t *)((const uint8_t *)p - smi_block_offset(page, p));
  atomic_fetch_add_explicit(&smi_stats.bin_free[segment->kind == SM_SEGMENT_HUGE ? SM_BIN_COUNT : page->bin], 1, memory_order_relaxed);
  if (segment->kind != SM_SEGMENT_HUGE) { /* freed memory carries a pattern that malloc checks */
    smi_track_undefined((uint8_t *)block, page->block_size); /* the lead of an aligned pointer too */
    memset((uint8_t *)block + sizeof(sm_block_t), 0xDF, page->block_size - sizeof(sm_block_t));
  }
#endif
  smi_track_block_free((void *)p); /* after the fill: from here on the program may not touch it */
  return page;
}

/* block_validate (claiming the block), then free_checked */
static sm_noinline sm_page_t *free_check_full(const void *p) {
  sm_page_t *page = block_validate(p, true, SMI_CALL_FREE);
  if (page == NULL) return NULL;
#if !SM_CLAIM_FREES && SM_SECURE /* combined with a memory checker: marked, not claimed */
  if (smi_page_segment(page)->kind != SM_SEGMENT_HUGE)
    smi_padding_mark_freed((void *)p, page->block_size - (smi_page_has_aligned(page) ? smi_block_offset(page, p) : 0));
#endif
  return free_checked(p, page);
}

/* The secure build's test for the common case, a block start of a small, medium or large page
 * with its canary intact: loads from the segment map, the segment header, the page descriptor and
 * the block's padding, no division, no call. A free writes the block's link over the canary (and
 * sm_heap_destroy the freed mark, for the blocks it releases), so the canary also tells a live
 * block from a freed one, and the block's first word is not read: programs often write it just
 * before the free (a byte written there and a word read back stalled the load, 30% of free's time
 * in the malloc/free pairs microbenchmark). The segment map is exact (a bit per segment start),
 * so the header's cookie is left to the full check. Anything else (huge blocks, aligned pointers,
 * freed blocks, bad pointers, overflows) goes through free_check_full, which decides and reports.
 * The block-start test divides without a division (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019): with c = ceil(2^64 / d) (the page's block_magic), a 32-bit n is a
 * multiple of d exactly when n * c mod 2^64 < c. A page not in use, and a huge segment's page,
 * has block_magic 0, so that test fails for them too: no separate test of in_use or of the kind. */
#if SM_INLINE_CHECKS
static inline __attribute__((always_inline)) sm_page_t *free_check_fast(const void *p, sm_segment_t **segment_out, bool claim) {
  sm_segment_t *segment = smi_ptr_segment(p);
  *segment_out = segment;
  /* the map first: a header is read only once the map says the segment is ours */
  if (sm_likely(smi_segment_is_registered(segment))) {
    sm_page_t *page = smi_segment_page_of(segment, p);
    __asm__("" : "+r"(page)); /* computed once: gcc otherwise re-derives it from the index */
    uintptr_t start = (uintptr_t)smi_page_start(page);
    size_t bsize = page->block_size;
    size_t limit = smi_page_carved(page); /* carved blocks span [start, start + limit) */
    uintptr_t offset = (uintptr_t)p - start;       /* p below start wraps above limit */
    uint64_t magic = page->block_magic;
    /* the block's own canary (free_secret: not while a secure option is on, which claim) */
    uint32_t canary = (uint32_t)(uintptr_t)p ^ (uint32_t)__atomic_load_n(&smi_read_mostly.free_secret, __ATOMIC_RELAXED);
    /* offset < limit, at most a segment (or a huge page, whose magic 0 fails any offset), fits
     * the 32 bits the multiply test needs */
    if (sm_likely(offset < limit && (uint64_t)offset * magic < magic && /* a block start */
                  (claim ? smi_padding_claim((void *)p, bsize) /* atomic_free: taken with a compare-and-swap */
                         : smi_padding_word_intact(smi_padding_word(p, bsize), canary)))) /* live (freed ones carry a link), no overflow or underflow */
      return page;
  }
  return NULL;
}
#endif

/* p must pass every check a free makes (reported the same way) before its block is read: a
 * sized free's recorded size, realloc's copy. With claim (realloc; SM_CLAIM_FREES builds) the
 * block is also claimed as a free claims it, so that a free of p racing the realloc reports
 * instead of releasing what the copy reads (a huge block's pages); a realloc in place gives the
 * claim back by writing the padding. */
bool smi_block_check_live(const void *p, bool claim, smi_call_t call) {
#if SM_INLINE_CHECKS
  sm_segment_t *segment;
  if (sm_likely(free_check_fast(p, &segment, claim) != NULL)) return true;
#endif
  return block_validate(p, claim, call) != NULL;
}
#endif

void smi_free_generic(sm_segment_t *segment, sm_page_t *page, void *p) {
  if (segment->kind == SM_SEGMENT_HUGE) {
    smi_huge_free(segment);
    return;
  }
  sm_block_t *block = sm_unlikely(smi_page_has_aligned(page)) ? page_block_of(page, p) : (sm_block_t *)p;
  uintptr_t owner = atomic_load_explicit(&segment->thread_id, memory_order_relaxed);
  if (owner == smi_tls_tid) {
    sm_heap_t *heap = smi_page_heap(page);
    smi_heap_lock(heap);
    smi_free_block_local(page, block);
    smi_heap_unlock(heap);
  } else {
    free_remote(page, block);
    if (owner == 0) smi_segments_note_abandoned_free(); /* its thread has ended */
    else if (sm_unlikely(atomic_load_explicit(&smi_read_mostly.fork_orphans, memory_order_relaxed))) smi_purger_note_orphan_free();
  }
}

/* a pointer known to be a live block: the owner's fast path, or the generic path */
static inline void free_block(void *p, sm_segment_t *segment, sm_page_t *page) {
  if (sm_likely(atomic_load_explicit(&segment->thread_id, memory_order_relaxed) == smi_tls_tid &&
                page->flags.all == 0)) {
    sm_block_t *block = (sm_block_t *)p;
    smi_block_set_next(page, block, page->local_free);
    page->local_free = block;
    /* a page already kept as its bin's only page (retire_ticks set) need not be retired again */
    if (sm_unlikely(--page->used == 0) && page->retire_ticks == 0) free_retire(page);
    return;
  }
  smi_free_generic(segment, page, p);
}

#if SM_SECURE
/* sm_heap_destroy frees blocks without a free, while a block of that heap that some thread freed
 * earlier may still wait in that thread's quarantine: it must leave the ring before its memory is
 * someone else's. A ring is used only by its thread, flagged busy; a destroyer takes
 * quarantines_held (one destroyer at a time: another one's heap may be going away under the
 * rings' entries), waits until no ring is busy and takes the heap's blocks out of every ring. */
static _Atomic(bool) quarantines_held;

static void quarantine_enter(sm_quarantine_t *q) {
  for (;;) {
    atomic_store_explicit(&q->busy, true, memory_order_seq_cst);
    if (!atomic_load_explicit(&quarantines_held, memory_order_seq_cst)) return;
    atomic_store_explicit(&q->busy, false, memory_order_release);
    while (atomic_load_explicit(&quarantines_held, memory_order_acquire)) sched_yield();
  }
}
static void quarantine_leave(sm_quarantine_t *q) { atomic_store_explicit(&q->busy, false, memory_order_release); }

void smi_quarantines_hold(void) {
  while (atomic_exchange_explicit(&quarantines_held, true, memory_order_seq_cst)) sched_yield();
  for (sm_heap_t *heap = smi_heaps_first(); heap != NULL; heap = heap->all_next) {
    while (atomic_load_explicit(&smi_heap_quarantine(heap)->busy, memory_order_seq_cst)) sched_yield();
  }
}
void smi_quarantines_release(void) { atomic_store_explicit(&quarantines_held, false, memory_order_release); }

/* fork child: the threads that held the rings or had theirs busy are gone (their rings are never
 * used again; a destroy in progress had taken its heap out of the list already) */
void smi_quarantines_fork_child(void) {
  atomic_store_explicit(&quarantines_held, false, memory_order_relaxed);
  for (sm_heap_t *heap = smi_heaps_first(); heap != NULL; heap = heap->all_next)
    atomic_store_explicit(&smi_heap_quarantine(heap)->busy, false, memory_order_relaxed);
}

/* A huge block waits in the quarantine without its memory: everything between its first and its
 * last OS page (the link, the padding) goes back to the OS. Kept resident, eight freed blocks of
 * 100 MiB held 524 MB (sort --parallel=2 -S 100M peaked at twice glibc's RSS). */
static void quarantine_purge_huge(void *p, const sm_page_t *page) {
  size_t os_page = smi_os_page_size();
  uintptr_t block = (uintptr_t)p - smi_block_offset(page, p);
  uintptr_t from = (block + os_page) & ~(os_page - 1), to = (block + page->block_size - 1) & ~(os_page - 1);
  if (to > from) smi_os_purge((void *)from, to - from, true);
}

/* zero_on_free, and the quarantine: a freed block waits in a per-thread FIFO until `quarantine`
 * later frees have passed, so a dangling pointer does not immediately alias a new block. Returns
 * the block to free now (p, an older one, or NULL); ring busy (see above) unless it returns p. */
static void *free_secure_options(void *p, sm_segment_t *segment, sm_page_t *page, sm_quarantine_t **ring) {
  if (smi_option(sm_option_zero_on_free) && segment->kind != SM_SEGMENT_HUGE)
    memset((uint8_t *)p - smi_block_offset(page, p), 0, page->block_size);
  long cap = smi_option(sm_option_quarantine);
  /* the thread's own ring, in its backing heap, whichever heap is its default: a heap made with
   * sm_heap_new that served as the default was released with the blocks in its ring (until
   * 2026-11-28), which were then never freed */
  sm_heap_t *heap = smi_tls_backing;
  if (cap <= 0 || heap == NULL) return p;
  if (cap > SM_QUARANTINE_MAX) cap = SM_QUARANTINE_MAX;
  sm_quarantine_t *q = smi_heap_quarantine(heap);
  quarantine_enter(q);
  for (size_t i = 0; i < q->count; i++) { /* it is on no free list while it waits */
    if (q->blocks[(q->head + i) % (size_t)cap] == p) {
      quarantine_leave(q); /* the error handler may free */
      smi_report_freed(SMI_CALL_FREE, p, page->block_size, "; the block was waiting in the quarantine");
      return NULL;
    }
  }
  *ring = q;
  /* mark it (its link word points at its page's first block) so that a second free from any
   * thread sees a free-looking block */
  smi_block_set_next(page, (sm_block_t *)((uint8_t *)p - smi_block_offset(page, p)), (sm_block_t *)smi_page_start(page));
  if (segment->kind == SM_SEGMENT_HUGE) quarantine_purge_huge(p, page);
  size_t slot = (q->head + q->count) % (size_t)cap;
  if (q->count < (size_t)cap) {
    q->blocks[slot] = p;
    q->count++;
    return NULL;
  }
  void *oldest = q->blocks[q->head];
  q->blocks[q->head] = p;
  q->head = (q->head + 1) % (size_t)cap;
  return oldest;
}

/* a block leaves the quarantine (ring busy: no destroy releases its memory meanwhile) */
static void quarantine_free(void *p) {
  sm_segment_t *segment = smi_ptr_segment(p);
  free_block(p, segment, smi_segment_page_of(segment, p));
}

static sm_noinline void free_with_options(void *p, sm_segment_t *segment, sm_page_t *page) {
  sm_quarantine_t *ring = NULL;
  void *q = free_secure_options(p, segment, page, &ring);
  if (q == p) free_block(p, segment, page); /* not quarantined */
  else if (q != NULL) quarantine_free(q);   /* an older block leaves instead */
  if (ring != NULL) quarantine_leave(ring);
}

/* Through the ring's protocol, as a destroy in another thread may be reading every ring (only
 * backing heaps fill theirs, and a pooled one is reset when its thread has flushed it) */
void smi_quarantine_reset(sm_heap_t *heap) {
  sm_quarantine_t *q = smi_heap_quarantine(heap);
  quarantine_enter(q);
  q->count = q->head = 0;
  quarantine_leave(q);
}

/* thread exit, sm_collect: free what waits in the quarantine */
void smi_quarantine_flush(sm_heap_t *heap) {
  sm_quarantine_t *q = smi_heap_quarantine(heap);
  quarantine_enter(q);
  while (q->count > 0) {
    long cap = smi_option(sm_option_quarantine);
    void *p = q->blocks[q->head];
    q->head = (q->head + 1) % (size_t)(cap > 0 && cap <= SM_QUARANTINE_MAX ? cap : SM_QUARANTINE_MAX);
    q->count--;
    if (p != NULL) quarantine_free(p);
  }
  quarantine_leave(q);
}
#endif

#if SM_CHECK_FREES
/* a checked block goes: through the secure options while one is on (see free_secret), else free */
static void free_release(void *p, sm_page_t *page) {
#if SM_SECURE
  if (sm_unlikely(atomic_load_explicit(&smi_read_mostly.free_options_on, memory_order_relaxed))) {
    free_with_options(p, smi_page_segment(page), page);
    return;
  }
#endif
  free_block(p, smi_page_segment(page), page);
}

/* every check, out of line (a separate function, so that free's fast path saves no registers),
 * then the secure options (off by default; while one is on, every free comes here: see
 * free_secret), then the free itself */
static sm_noinline void free_check_full_then_free(void *p) {
  if (p == NULL) return; /* the secure build's fast test turns NULL away (it is in no segment) */
#if SM_INLINE_CHECKS
  /* atomic_free alone: the fast test again, claiming the block; a block it does not pass (another
   * thread claimed it, or the fast test cannot tell) goes through every check, which reports it */
  if (atomic_load_explicit(&smi_read_mostly.free_claim_only, memory_order_relaxed)) {
    sm_segment_t *segment;
    sm_page_t *page = free_check_fast(p, &segment, true);
    if (sm_likely(page != NULL)) {
      free_block(p, segment, page);
      return;
    }
  }
#endif
  sm_page_t *page = free_check_full(p);
  if (page != NULL) free_release(p, page);
}

#if SM_CLAIM_FREES
/* realloc, after its copy: a block it claimed (smi_block_check_live) is freed without the checks */
void smi_free_claimed(void *p) {
  sm_segment_t *segment = smi_ptr_segment(p);
  free_release(p, free_checked(p, smi_segment_page_of(segment, p)));
}
#endif
#endif

/* the body of sm_free and free: inlined into both (one function aliased to the other would make
 * valgrind, which replaces `free`, take sm_free for its own) */
static inline __attribute__((always_inline)) void smi_free(void *p) {
#if SM_INLINE_CHECKS
  /* NULL fails the fast test (its segment is out of the map's range): no test of its own */
  sm_segment_t *segment;
  sm_page_t *page = free_check_fast(p, &segment, false);
  if (sm_unlikely(page == NULL)) free_check_full_then_free(p);
  else free_block(p, segment, page); /* no secure option is on: the fast test passed */
#elif SM_CHECK_FREES
  free_check_full_then_free(p);
#else
  if (sm_unlikely(p == NULL)) return;
  sm_segment_t *segment = smi_ptr_segment(p);
  free_block(p, segment, smi_segment_page_of(segment, p));
#endif
}

SM_HOT_ENTRY void sm_free(void *p) { smi_free(p); }
