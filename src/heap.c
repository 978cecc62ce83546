/* heap.c: per-thread heaps. A heap owns page queues (one per bin plus the full queue), the direct
 * table for small sizes, and the delayed-free list through which other threads hand back blocks
 * of full pages. Only the owning thread touches a heap, except thread_delayed_free (atomic push).
 * Called from the generic malloc path (page.c), sm_collect, and thread exit (init.c). */
#include "internal.h"

/* Also re-initialises a pooled heap (its lock is held by the caller then): the fields from `lock`
 * on are the purger's and survive. */
void smi_heap_init(sm_heap_t *heap, sm_tld_t *tld, uintptr_t thread_id) {
  memset(heap, 0, offsetof(sm_heap_t, lock));
  for (size_t i = 0; i < SM_DIRECT_COUNT; i++) heap->pages_direct[i] = &smi_page_empty;
  for (size_t bin = 0; bin < SM_BIN_COUNT; bin++) heap->pages[bin].block_size = smi_bin_size(bin);
  heap->thread_id = thread_id;
  heap->tld = tld;
  heap->retired_min = SM_BIN_COUNT; /* empty range */
  heap->retired_max = 0;
  heap->retired_next = SIZE_MAX;
  /* per-heap randomness without a system call: a splitmix64 step of the process secret */
  uint64_t x = smi_process_secret + thread_id * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  heap->random = x ^ (x >> 31);
}

/* Blocks that other threads freed into our full pages. Each is freed as the owner would, which
 * moves its page out of the full queue. */
void smi_heap_delayed_free(sm_heap_t *heap) {
  sm_block_t *block = atomic_exchange_explicit(&heap->thread_delayed_free, NULL, memory_order_acquire);
  while (block != NULL) {
    sm_segment_t *segment = smi_ptr_segment(block);
    sm_page_t *page = smi_segment_page_of(segment, block);
    sm_block_t *next = smi_block_next(page, block);
    smi_page_collect(page); /* keep `used` exact so an emptied page is noticed */
    smi_free_block_local(page, block);
    block = next;
  }
}

/* Empty pages kept by smi_page_retire go back once their deadline (in slow calls) has passed, or
 * at once with force. A kept page that is in use again just loses its mark. */
void smi_heap_retired_collect(sm_heap_t *heap, bool force) {
  size_t min = SM_BIN_COUNT, max = 0, next = SIZE_MAX;
  size_t now = atomic_load_explicit(&heap->slow_calls, memory_order_relaxed);
  for (size_t bin = heap->retired_min; bin <= heap->retired_max; bin++) {
    sm_page_t *page = heap->pages[bin].first;
    if (page == NULL || page->retire_ticks == 0) continue;
    if (page->used != 0) {
      page->retire_ticks = 0;
    } else if (force || page->purge_at <= now) {
      smi_page_free_empty(heap, page);
    } else {
      if (bin < min) min = bin;
      if (bin > max) max = bin;
      if (page->purge_at < next) next = page->purge_at;
    }
  }
  heap->retired_min = min;
  heap->retired_max = max;
  heap->retired_next = next;
}

/* The purger left free blocks in full pages: bring those pages back to their bins. */
void smi_heap_unfull_flagged(sm_heap_t *heap) {
  heap->full_have_free = false;
  sm_page_t *page = heap->pages[SM_BIN_FULL].first;
  while (page != NULL) {
    sm_page_t *next = page->next;
    smi_page_collect(page);
    if (page->used == 0) smi_page_free_empty(heap, page);
    else if (page->free != NULL) smi_page_unfull(page);
    page = next;
  }
}

/* Run by the purger, with the heap's lock, while the owner may be on a fast path. Fast paths never
 * touch full pages, the purge list or the segment queues, so only those are used here: blocks
 * other threads freed into full pages are collected and pages that became empty go back. */
void smi_heap_collect_idle(sm_heap_t *heap) {
  sm_block_t *block = atomic_exchange_explicit(&heap->thread_delayed_free, NULL, memory_order_acquire);
  sm_block_t *keep = NULL, *keep_last = NULL;
  while (block != NULL) {
    sm_page_t *page = smi_segment_page_of(smi_ptr_segment(block), block);
    sm_block_t *next = smi_block_next(page, block);
    if (page->flags.x.in_full) {
      smi_block_set_next(page, block, page->local_free);
      page->local_free = block;
      page->used--;
    } else { /* a page the owner is using: leave the block to the owner */
      smi_block_set_next(page, block, keep);
      if (keep == NULL) keep_last = block;
      keep = block;
    }
    block = next;
  }
  if (keep != NULL) {
    sm_page_t *last_page = smi_segment_page_of(smi_ptr_segment(keep_last), keep_last);
    sm_block_t *head = atomic_load_explicit(&heap->thread_delayed_free, memory_order_relaxed);
    do {
      smi_block_set_next(last_page, keep_last, head);
    } while (!atomic_compare_exchange_weak_explicit(&heap->thread_delayed_free, &head, keep, memory_order_release,
                                                    memory_order_relaxed));
  }
  sm_page_t *page = heap->pages[SM_BIN_FULL].first;
  while (page != NULL) {
    sm_page_t *next = page->next;
    smi_page_collect_remote(page);
    if (page->used == 0) smi_page_free_empty(heap, page);
    else if (page->local_free != NULL) heap->full_have_free = true;
    page = next;
  }
  smi_segments_purge_expired(heap->tld, false);
}

/* Collect every page; empty ones go back to their segments. */
void smi_heap_collect(sm_heap_t *heap, bool force) {
  smi_heap_delayed_free(heap);
  smi_heap_retired_collect(heap, true);
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    sm_page_t *page = heap->pages[bin].first;
    while (page != NULL) {
      sm_page_t *next = page->next;
      smi_page_collect(page);
      if (page->used == 0) smi_page_free_empty(heap, page);
      else if (page->flags.x.in_full && page->free != NULL) smi_page_unfull(page);
      page = next;
    }
  }
  if (force) {
    /* adopt every abandoned segment (a bounded number of rounds), so empty ones are released */
    for (int round = 0; round < 64 && smi_segments_abandoned_any(); round++) {
      smi_segments_reclaim_abandoned(heap, 64, -1);
      smi_heap_collect(heap, false);
    }
  }
  smi_segments_purge_expired(heap->tld, true);
  if (force) smi_segment_cache_flush();
  else smi_segment_cache_purge_all();
}

/* Thread exit: detach every page from the heap so that later frees go to the pages themselves,
 * then abandon the segments still holding live blocks. */
void smi_heap_abandon(sm_heap_t *heap) {
  smi_heap_delayed_free(heap);
  smi_stats_heap_sync(heap); /* counted by this heap up to here; from now on by whoever has the pages */
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    for (sm_page_t *page = heap->pages[bin].first; page != NULL; page = page->next) {
      smi_page_set_delay(page, SM_DELAY_NEVER, false);
    }
  }
  /* no remote thread can push onto our delayed list any more: drain what arrived meanwhile */
  smi_heap_delayed_free(heap);
  smi_heap_collect(heap, false);
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    for (sm_page_t *page = heap->pages[bin].first; page != NULL; page = page->next) {
      atomic_store_explicit(&page->heap, NULL, memory_order_release);
    }
  }
  smi_segments_abandon(heap);
}
