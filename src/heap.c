/* heap.c: per-thread heaps. A heap owns page queues (one per bin plus the full queue), the direct
 * table for small sizes, and the delayed-free list through which other threads hand back blocks
 * of full pages. Only the owning thread touches a heap, except thread_delayed_free (atomic push).
 * Called from the generic malloc path (page.c), sm_collect, and thread exit (init.c). */
#include "internal.h"
#include "padding.h"

#include <sched.h>

/* Also re-initialises a pooled heap (its lock is held by the caller then): the fields from `lock`
 * on are the purger's and survive. */
void smi_heap_init(sm_heap_t *heap, sm_tld_t *tld, uintptr_t thread_id) {
  memset(heap, 0, offsetof(sm_heap_t, lock));
#if SM_SECURE
  smi_quarantine_reset(heap);
#endif
  for (size_t i = 0; i < SM_DIRECT_COUNT; i++) heap->pages_direct[i] = &smi_page_empty;
  heap->thread_id = thread_id;
  heap->tld = tld;
  heap->retired_min = SM_BIN_COUNT; /* empty range */
  heap->retired_max = 0;
  heap->retired_next = SIZE_MAX;
  /* per-heap randomness without a system call: a splitmix64 step of the process secret */
  uint64_t x = smi_read_mostly.secret + thread_id * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  heap->random = x ^ (x >> 31);
}

/* The next block of a heap's delayed list (its blocks belong to any page), in *next. In the checked
 * builds a link that does not lead to a block start of a live page is reported, never followed,
 * and false returned: the walk ends, and `block` itself stays allocated, as the pop leaves a block
 * whose link is bad (it may be a live block that a forged link led to: until 2026-11-28 it was
 * freed after the report, and handed out twice). */
static bool delayed_next(sm_page_t *page, sm_block_t *block, sm_block_t **next) {
  *next = smi_block_next(page, block);
#if SM_CHECK_FREES
  if (*next != NULL && !smi_is_page_block_start((uintptr_t)*next)) {
    smi_page_list_corrupted(page, block);
    return false;
  }
#else
  (void)page;
#endif
  return true;
}

/* Blocks that other threads freed into our full pages. Each is freed as the owner would, which
 * moves its page out of the full queue. */
void smi_heap_delayed_free(sm_heap_t *heap) {
  sm_block_t *block = atomic_exchange_explicit(&heap->thread_delayed_free, NULL, memory_order_acquire), *next;
  while (block != NULL) {
    sm_segment_t *segment = smi_ptr_segment(block);
    sm_page_t *page = smi_segment_page_of(segment, block);
    if (!delayed_next(page, block, &next)) break;
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
  __atomic_store_n(&heap->full_have_free, false, __ATOMIC_RELAXED); /* read without the lock: page_refill_quick */
  sm_page_t *page = heap->pages[SM_BIN_FULL].first;
  while (page != NULL) {
    sm_page_t *next = page->next;
    smi_page_collect(page);
    if (page->used == 0) smi_page_free_empty(heap, page);
    else if (page->free != NULL) smi_page_unfull(page);
    page = next;
  }
}

/* The purger, holding the lock of an idle heap: have other threads freed every live block of this
 * page? Only for a page that is not the first of its bin: the owner's lock-free paths allocate
 * from first pages only, so without the lock nobody can take a block of this page, and its
 * owner can only free blocks into it. So live blocks only decrease and blocks on thread_free only
 * increase: if `used` read after counting thread_free equals that count, no block is live and
 * none will be freed into it any more. The owner's last local free ended with the store to `used`
 * that made the two equal, but its store to local_free may become visible later (only x86 keeps
 * stores in order), so the page is only marked; after a barrier on every thread (membarrier), a
 * page still marked and unchanged is free to go although its owner may run at any moment. `used`
 * is read without the owner's synchronisation on purpose: hidden from ThreadSanitizer. A page
 * whose list and `used` did not change since the last look (remembered in purge_at, unused while
 * a page is in use and not retired) is not walked again. */
#if defined(__clang__) || defined(__GNUC__)
__attribute__((no_sanitize("thread")))
#endif
static size_t page_used_racy(const sm_page_t *page) {
  return *(const volatile uint16_t *)&page->used;
}

/* purge_at of a page found empty with this snapshot (bit 0 set: list heads are aligned, so it never
 * equals a plain snapshot) */
static uint64_t empty_snapshot(uint64_t seen) { return seen | 1; }

/* First look: is the page empty? If so it is marked (in purge_at) and *found set; it goes only
 * after a barrier, if it is still marked and unchanged (page_still_empty). */
static void page_look_empty(sm_page_t *page, bool *found) {
#if defined(SM_UNDER_TSAN)
  /* ThreadSanitizer cannot see the argument (the owner's last free is ordered before the
   * collection by the barrier, a system call), and would report it */
  (void)page;
  (void)found;
  return;
#endif
  sm_block_t *head = smi_tf_block(atomic_load_explicit(&page->thread_free, memory_order_acquire));
  if (head == NULL || page->retire_ticks != 0) return;
  size_t before = page_used_racy(page);
  uint64_t seen = (uint64_t)(uintptr_t)head ^ ((uint64_t)before << 48);
  if (page->purge_at == seen) return;
  page->purge_at = seen;
  size_t count = 0;
  for (sm_block_t *b = head; b != NULL && count <= before; b = smi_list_next(page, b)) count++;
  atomic_thread_fence(memory_order_acquire); /* `used` after the count */
  size_t after = page_used_racy(page);
  if (count != after) return;
  page->purge_at = empty_snapshot((uint64_t)(uintptr_t)head ^ ((uint64_t)after << 48));
  *found = true;
}

/* After the barrier: marked empty by page_look_empty and unchanged since */
static bool page_still_empty(sm_page_t *page) {
  sm_block_t *head = smi_tf_block(atomic_load_explicit(&page->thread_free, memory_order_acquire));
  if (head == NULL || page->retire_ticks != 0) return false;
  uint64_t seen = (uint64_t)(uintptr_t)head ^ ((uint64_t)page_used_racy(page) << 48);
  return page->purge_at == empty_snapshot(seen);
}

/* Run by the purger, with the heap's lock, while the owner may be on a fast path. Fast paths never
 * touch full pages, the purge list or the segment queues, so only those are used here: blocks
 * other threads freed into full pages are collected and pages that became empty go back; so do
 * pages that other threads emptied while they were in a bin queue (page_look_empty). */
void smi_heap_collect_idle(sm_heap_t *heap) {
  sm_block_t *block = atomic_exchange_explicit(&heap->thread_delayed_free, NULL, memory_order_acquire);
  sm_block_t *keep = NULL, *keep_last = NULL;
  while (block != NULL) {
    sm_page_t *page = smi_segment_page_of(smi_ptr_segment(block), block);
    sm_block_t *next;
    if (!delayed_next(page, block, &next)) break;
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
    else if (page->local_free != NULL) __atomic_store_n(&heap->full_have_free, true, __ATOMIC_RELAXED);
    page = next;
  }
  bool found = false;
  for (size_t bin = 0; bin < SM_BIN_FULL; bin++) {
    sm_page_t *first = heap->pages[bin].first;
    for (page = first != NULL ? first->next : NULL; page != NULL; page = page->next) page_look_empty(page, &found);
  }
  if (found && smi_purger_barrier()) { /* the owner's stores to the pages found empty are visible now */
    for (size_t bin = 0; bin < SM_BIN_FULL; bin++) {
      sm_page_t *first = heap->pages[bin].first;
      for (page = first != NULL ? first->next : NULL; page != NULL;) {
        sm_page_t *next = page->next;
        if (page_still_empty(page)) {
          smi_page_collect_remote(page);
          sm_assert(page->used == 0);
          smi_page_free_empty(heap, page);
        }
        page = next;
      }
    }
  }
  smi_segments_purge_expired(heap->tld, false);
}

/* Collect every page; empty ones go back to their segments (with force, the insides of the others'
 * free blocks go back to the OS too). */
static void heap_collect_pages(sm_heap_t *heap, bool force) {
  smi_heap_delayed_free(heap);
  smi_heap_retired_collect(heap, true);
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    sm_page_t *page = heap->pages[bin].first;
    while (page != NULL) {
      sm_page_t *next = page->next;
      smi_page_collect(page);
      if (page->used == 0) smi_page_free_empty(heap, page);
      else {
        if (page->flags.x.in_full && page->free != NULL) smi_page_unfull(page);
        if (force) smi_page_purge_free_blocks(page);
      }
      page = next;
    }
  }
}

/* Collect every page and give back all unused memory now. With force, a thread's heap also
 * adopts abandoned segments so that empty ones are released. */
void smi_heap_collect(sm_heap_t *heap, bool force) {
  heap_collect_pages(heap, force);
  if (force && heap->kind == SM_HEAP_THREAD) {
    /* adopt every abandoned segment (a bounded number of rounds), so empty ones are released */
    for (int round = 0; round < 64 && smi_segments_abandoned_any(); round++) {
      smi_segments_reclaim_abandoned(heap, 64, -1);
      smi_heap_collect(heap, false);
    }
  }
  if (force) smi_segments_release_empty(heap->tld);
  smi_segments_purge_expired(heap->tld, true);
  if (force) smi_segment_cache_flush();
  else smi_segment_cache_purge_all();
}

static void heap_part_absorb(sm_heap_t *into, sm_heap_t *part);
static void heap_part_release(sm_heap_t *part);

/* Thread exit (heap lock held): detach every page from the heap so that later frees go to the
 * pages themselves, then abandon the segments still holding live blocks. A part that other
 * threads allocated from (the heap handed to them by sm_heap_get_backing) goes with it: until
 * 2026-11-28 nothing released it, and each such thread left a segment mapped for good. */
void smi_heap_abandon(sm_heap_t *heap) {
  sm_heap_t *shared = __atomic_exchange_n(&heap->shared, NULL, __ATOMIC_ACQ_REL);
  if (shared != NULL) {
    smi_heap_lock(shared);
    heap_part_absorb(heap, shared);
    heap_part_release(shared);
  }
  smi_heap_delayed_free(heap);
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    for (sm_page_t *page = heap->pages[bin].first; page != NULL; page = page->next) {
      smi_page_set_delay(page, SM_DELAY_NEVER, false);
    }
  }
  /* no remote thread can push onto our delayed list any more: drain what arrived meanwhile */
  smi_heap_delayed_free(heap);
  heap_collect_pages(heap, false); /* memory is given back on its schedule, not at once (segment.c) */
  /* counted by this heap up to here; from now on by whoever has the pages (after the collection:
   * the empty pages it gave back were counted then, a walk of their lists each) */
  smi_stats_heap_sync(heap);
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    for (sm_page_t *page = heap->pages[bin].first; page != NULL; page = page->next) {
      atomic_store_explicit(&page->heap, NULL, memory_order_release);
    }
  }
  (void)smi_huge_let_go(heap); /* its huge blocks stay where they are, on no list */
  smi_segments_abandon(heap);
}

/* ---- heaps made with sm_heap_new ---- */

static _Atomic(bool) user_heaps_lock; /* guards the list below: heap creation and deletion, thread exit */
static sm_heap_t *user_heaps;

static void user_heaps_acquire(void) { smi_spin_lock(&user_heaps_lock); }
static void user_heaps_release(void) { smi_spin_unlock(&user_heaps_lock); }

/* fork (init.c). Heaps made with sm_heap_new may be used by the child, whichever thread owns
 * them, so their locks (and the list's) are held across the fork: a thread that held one would
 * leave it held, and the heap half changed, in the child. Not the threads' own heaps: a thread
 * may be in malloc while it holds a stdio lock (getline), and fork takes stdio's locks after the
 * prepare handlers, so holding those would deadlock; in the child, the heaps of the other threads
 * are never used again (a lock left held only keeps the purger out), and the forking thread's own
 * is not locked by anyone then (the purger is out of its tick). A thread holding one heap lock may
 * wait for another (sm_heap_delete takes two), so these are only tried: on a miss all of them are
 * let go and the round starts again. */
#define user_parts_for_each(h, part) \
  for (sm_heap_t *h = user_heaps; h != NULL; h = h->user_next) \
    for (sm_heap_t *part = h; part != NULL; part = part == h ? h->shared : NULL)

void smi_heaps_fork_lock(void) {
  user_heaps_acquire();
  for (;;) {
    sm_heap_t *missed = NULL;
    user_parts_for_each(h, part) {
      if (missed == NULL && !smi_heap_trylock(part)) missed = part;
    }
    if (missed == NULL) return;
    bool before = true;
    user_parts_for_each(h, part) {
      if (part == missed) before = false;
      if (before) smi_heap_unlock(part);
    }
    sched_yield();
  }
}

/* A remote free that was telling a heap about a full page at the fork left the page in delay
 * state FREEING, which the child, its owner now, would wait out forever (the block it carried may
 * be lost: a leak in the child). Such a page is in its heap's full queue. The heap may be the
 * forking thread's, one made with sm_heap_new, or that of a thread the fork left behind, which the
 * child collects (purge.c, orphans): until 2026-11-27 those were not mended, and the child hung in
 * that collection once it had freed the page's other blocks (found in review). */
static void fork_child_end_notify(sm_heap_t *heap) {
  for (sm_page_t *page = heap->pages[SM_BIN_FULL].first; page != NULL; page = page->next) {
    uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
    if (smi_tf_delay(tf) == SM_DELAY_FREEING)
      atomic_store_explicit(&page->thread_free, smi_tf_with_delay(tf, SM_DELAY_NONE), memory_order_relaxed);
  }
}

void smi_heaps_fork_unlock(bool child) {
  bool notifying = child && atomic_load_explicit(&smi_remote_notifying, memory_order_relaxed) > 0;
  if (notifying) { /* the threads' heaps; a lock held at the fork stays held, and its heap untouched */
    for (sm_heap_t *heap = smi_heaps_first(); heap != NULL; heap = heap->all_next) {
      if (heap->kind != SM_HEAP_THREAD || heap->tld == NULL) continue;
      if (heap == smi_tls_backing) {
        fork_child_end_notify(heap);
      } else if (smi_heap_trylock(heap)) {
        fork_child_end_notify(heap);
        smi_heap_unlock(heap);
      }
    }
  }
  user_parts_for_each(h, part) {
    if (notifying) fork_child_end_notify(part);
    smi_heap_unlock(part);
  }
  if (notifying) atomic_store_explicit(&smi_remote_notifying, 0, memory_order_relaxed);
  user_heaps_release();
}

/* the calling thread's own heap, set up on first use */
static sm_heap_t *heap_backing(void) {
  sm_heap_t *heap = smi_tls_backing;
  return heap != NULL ? heap : smi_thread_init();
}

/* a heap part with segments of its own (a tld), owned by `owner_id` */
static sm_heap_t *heap_part_new(sm_heap_kind_t kind, uintptr_t owner_id) {
  sm_thread_data_t *td = smi_thread_data_alloc();
  if (td == NULL) return NULL;
  bool fresh = td->heap.tld == NULL;
  if (!fresh) smi_heap_lock(&td->heap); /* the purger may be looking at a pooled heap */
  memset(&td->tld, 0, sizeof td->tld);
  smi_heap_init(&td->heap, &td->tld, owner_id);
  td->heap.kind = (uint8_t)kind;
  td->heap.locked_access = kind == SM_HEAP_SHARED;
  if (fresh) smi_heaps_register(&td->heap);
  else smi_heap_unlock(&td->heap);
  return &td->heap;
}

/* the part (lock held by the caller) is empty: back to the pool */
static void heap_part_release(sm_heap_t *part) {
  sm_assert(part->tld->segment_count == 0 && part->page_count == 0);
  part->thread_id = 0; /* dead: the purger skips it */
  smi_heap_unlock(part);
  smi_thread_data_free((sm_thread_data_t *)part);
}

/* Made without the heap's lock: a thread holding it while it waited for the pool's lock (taken
 * by heap_part_new) could be caught so by another thread's fork, where nothing takes a thread's
 * own heap lock first (smi_heaps_fork_lock), and the child would find that heap locked for good.
 * Of two threads making it at once, one installs its part and the other gives its own back. */
sm_heap_t *smi_heap_shared_part(sm_heap_t *heap) {
  sm_heap_t *shared = __atomic_load_n(&heap->shared, __ATOMIC_ACQUIRE);
  if (sm_likely(shared != NULL)) return shared;
  sm_heap_t *made = heap_part_new(SM_HEAP_SHARED, smi_new_owner_id());
  if (made == NULL) return NULL;
  made->parent = heap;
  made->tld->arena_id = heap->tld->arena_id;
  if (__atomic_compare_exchange_n(&heap->shared, &shared, made, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return made;
  smi_heap_lock(made);
  heap_part_release(made);
  return shared;
}

static sm_heap_t *heap_new(int arena_id) {
  if (heap_backing() == NULL) return smi_enomem();
  sm_heap_t *heap = heap_part_new(SM_HEAP_USER, smi_tls_tid);
  if (heap == NULL) return smi_enomem();
  heap->tld->arena_id = arena_id; /* before any segment: all of them from the arena (segment.c) */
  user_heaps_acquire();
  heap->user_prev = NULL;
  heap->user_next = user_heaps;
  if (user_heaps != NULL) user_heaps->user_prev = heap;
  user_heaps = heap;
  user_heaps_release();
  smi_count_add(SM_COUNT_HEAPS, 1);
  return heap;
}

sm_heap_t *sm_heap_new(void) { return heap_new(0); }

sm_heap_t *sm_heap_new_in_arena(sm_arena_id_t arena_id) {
  smi_process_init();
  if (!smi_arena_id_valid(arena_id)) {
    errno = EINVAL;
    return NULL;
  }
  /* from now on its memory skips the segment cache; what is cached already goes back */
  if (smi_arena_bind(arena_id)) smi_segment_cache_flush();
  return heap_new(arena_id);
}

static void user_heaps_remove(sm_heap_t *heap) {
  user_heaps_acquire();
  if (heap->user_prev != NULL) heap->user_prev->user_next = heap->user_next;
  else user_heaps = heap->user_next;
  if (heap->user_next != NULL) heap->user_next->user_prev = heap->user_prev;
  user_heaps_release();
  smi_count_add(SM_COUNT_HEAPS, -1);
}

/* Thread exit: heaps the thread made stay valid; from now on every allocation from them takes
 * their lock (their segments still carry the ended thread's id, so all frees are remote). */
void smi_heaps_disown(uintptr_t thread_id) {
  user_heaps_acquire();
  for (sm_heap_t *heap = user_heaps; heap != NULL; heap = heap->user_next) {
    if (heap->locked_access || heap->thread_id != thread_id) continue;
    smi_heap_lock(heap);
    __atomic_store_n(&heap->thread_id, smi_new_owner_id(), __ATOMIC_RELAXED);
    __atomic_store_n(&heap->locked_access, true, __ATOMIC_RELEASE);
    smi_heap_unlock(heap);
  }
  user_heaps_release();
}

/* Another thread's exit disowns the heaps it made (smi_heaps_disown, under their locks) at any
 * time, so the API reads a heap's owner and lock mode atomically (ThreadSanitizer saw plain
 * reads race with it, 2026-11-27). */
static bool part_owner_is_me(const sm_heap_t *part) { return __atomic_load_n(&part->thread_id, __ATOMIC_RELAXED) == smi_tls_tid; }
static bool part_locked(const sm_heap_t *part) { return __atomic_load_n(&part->locked_access, __ATOMIC_ACQUIRE); }
/* may the calling thread work on this part (under its lock)? its own, or one served with a lock */
static bool part_workable(const sm_heap_t *part) { return part_locked(part) || part_owner_is_me(part); }

static bool heap_is_user(sm_heap_t *heap, const char *what) {
  if (heap != NULL && heap->kind == SM_HEAP_USER) return true;
  if (heap != NULL) smi_warning("%s: %p is a thread's own heap, not one from sm_heap_new; ignored", what, (void *)heap);
  return false;
}

/* every page of the part (lock held), in queue order */
#define heap_for_each_page(h, page, next)                                         \
  for (size_t bin_ = 0; bin_ <= SM_BIN_FULL; bin_++)                              \
    for (sm_page_t *page = (h)->pages[bin_].first, *next = page ? page->next : NULL; page != NULL; \
         page = next, next = page ? page->next : NULL)

/* Free every block of the part at once: its pages go back to their segments without looking at
 * a single block, its huge blocks back to the OS. */
static void heap_part_destroy(sm_heap_t *part) {
  atomic_store_explicit(&part->thread_delayed_free, NULL, memory_order_relaxed);
  heap_for_each_page(part, page, next) {
    smi_stats_page_discard(page);
#if SM_SECURE && !SM_DEBUG
    /* the one place blocks leave their page without a free: their live canaries become freed
     * marks, so that neither a new page over this memory nor a dangling pointer can take them for
     * live blocks (page_extend then need not mark the blocks it carves) */
    if (page->used > 0) {
      uint8_t *start = smi_page_start(page);
      for (size_t i = 0; i < page->capacity; i++) smi_padding_mark_freed(start + i * page->block_size, page->block_size);
    }
#endif
#if SM_DEBUG && !SM_TRACK
    smi_debug_page_fill_freed(page); /* its live blocks are freed here: the release checks none of them */
#endif
    page->used = 0;
    page->free = page->local_free = NULL;
    atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&page->heap, NULL, memory_order_release);
    smi_segment_page_free(page, part->tld);
  }
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) part->pages[bin].first = part->pages[bin].last = NULL;
  part->page_count = 0;
  smi_stats_heap_flush(part);
  for (sm_segment_t *segment = smi_huge_let_go(part), *next; segment != NULL; segment = next) {
    next = segment->next;
    smi_huge_free(segment);
  }
  smi_segments_release_empty(part->tld);
  smi_segments_purge_expired(part->tld, true);
}

static bool page_of_heap(const sm_heap_t *heap, const sm_page_t *page);

#if SM_SECURE
/* blocks of `heap` freed earlier and still waiting in some thread's quarantine leave it without
 * being freed (the destroy frees them); every ring is held (free.c) */
static void quarantines_drop(const sm_heap_t *heap) {
  for (sm_heap_t *h = smi_heaps_first(); h != NULL; h = h->all_next) {
    sm_quarantine_t *q = smi_heap_quarantine(h);
    for (size_t i = 0; q->count > 0 && i < SM_QUARANTINE_MAX; i++) { /* outside the live range: stale, harmless */
      void *p = q->blocks[i];
      if (p == NULL) continue;
      sm_segment_t *segment = smi_ptr_segment(p);
      if (smi_segment_is_registered(segment) && page_of_heap(heap, smi_segment_page_of(segment, p))) q->blocks[i] = NULL;
    }
  }
}
#endif

void sm_heap_destroy(sm_heap_t *heap) {
  if (!heap_is_user(heap, "sm_heap_destroy")) return;
  if (smi_tls_heap == heap) smi_tls_heap = smi_tls_backing;
  user_heaps_remove(heap);
#if SM_SECURE
  smi_quarantines_hold(); /* before any heap lock: a thread using its ring may take one */
  quarantines_drop(heap);
#endif
  sm_heap_t *shared = heap->shared;
  if (shared != NULL) {
    smi_heap_lock(shared);
    heap_part_destroy(shared);
    heap_part_release(shared);
  }
  smi_heap_lock(heap);
  heap_part_destroy(heap);
  heap_part_release(heap);
#if SM_SECURE
  smi_quarantines_release();
#endif
}

/* Move everything of `part` (lock held) into `into` (the caller's own heap, lock held): pages,
 * segments (re-tagged to their new owner when the part was locked), pending purges. */
static void heap_part_absorb(sm_heap_t *into, sm_heap_t *part) {
  /* no remote free may be telling the part about a full page while its pages change heap */
  heap_for_each_page(part, page, next) smi_page_set_delay(page, SM_DELAY_NEVER, false);
  smi_heap_delayed_free(part);
  smi_stats_heap_flush(part);
  sm_tld_t *tld = into->tld, *from = part->tld;
  heap_for_each_page(part, page, next) {
    sm_segment_t *segment = smi_page_segment(page);
    if (atomic_load_explicit(&segment->thread_id, memory_order_relaxed) != into->thread_id)
      atomic_store_explicit(&segment->thread_id, into->thread_id, memory_order_release);
    bool full = page->flags.x.in_full;
    page->next = page->prev = NULL;
    page->retire_ticks = 0;
    atomic_store_explicit(&page->heap, into, memory_order_release);
    if (full) {
      sm_page_queue_t *pq = &into->pages[SM_BIN_FULL];
      page->prev = pq->last;
      if (pq->last != NULL) pq->last->next = page;
      else pq->first = page;
      pq->last = page;
      into->page_count++;
    } else {
      smi_page_queue_push(into, page, page->bin);
    }
    smi_page_set_delay(page, full ? SM_DELAY_USE : SM_DELAY_NONE, true);
  }
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) part->pages[bin].first = part->pages[bin].last = NULL;
  part->page_count = 0;
  smi_segments_absorb(tld, from, into->thread_id);
  smi_spin_lock(&part->huge_lock);
  smi_spin_lock(&into->huge_lock);
  for (sm_segment_t *segment = part->huge_first, *next; segment != NULL; segment = next) {
    next = segment->next;
    smi_huge_push(into, segment);
  }
  part->huge_first = NULL;
  part->huge_epoch++;
  smi_spin_unlock(&into->huge_lock);
  smi_spin_unlock(&part->huge_lock);
}

void sm_heap_delete(sm_heap_t *heap) {
  if (!heap_is_user(heap, "sm_heap_delete")) return;
  sm_heap_t *into = heap_backing();
  if (into == NULL) return;
  if (!part_workable(heap)) {
    /* its owner frees into its pages without a lock: only the owner may hand them over */
    smi_warning("sm_heap_delete: heap %p belongs to another thread that is running (or that a fork left behind); not deleted", (void *)heap);
    errno = EINVAL;
    return;
  }
  if (smi_tls_heap == heap) smi_tls_heap = into;
  user_heaps_remove(heap);
  smi_heap_lock(into);
  sm_heap_t *shared = heap->shared;
  if (shared != NULL) {
    smi_heap_lock(shared);
    heap_part_absorb(into, shared);
    heap_part_release(shared);
  }
  smi_heap_lock(heap);
  heap_part_absorb(into, heap);
  heap_part_release(heap);
  smi_heap_delayed_free(into); /* frees that raced with the move */
  smi_heap_unlock(into);
}

sm_heap_t *sm_heap_set_default(sm_heap_t *heap) {
  sm_heap_t *old = sm_heap_get_default();
  if (heap == NULL || old == NULL) {
    errno = EINVAL;
    return NULL;
  }
  if (!part_owner_is_me(heap) || part_locked(heap)) { /* the malloc fast path takes no lock */
    smi_warning("sm_heap_set_default: heap %p is not owned by this thread; unchanged", (void *)heap);
    errno = EINVAL;
    return NULL;
  }
  smi_tls_heap = heap;
  return old;
}

sm_heap_t *sm_heap_get_default(void) {
  if (heap_backing() == NULL) return NULL;
  return smi_tls_heap;
}

sm_heap_t *sm_heap_get_backing(void) { return heap_backing(); }

/* collect a part the caller may touch: its own, or a locked one */
static void heap_part_collect(sm_heap_t *part, bool force) {
  if (part_workable(part)) {
    smi_heap_lock(part);
    smi_heap_collect(part, force);
    smi_heap_unlock(part);
  }
}

void sm_heap_collect(sm_heap_t *heap, bool force) {
  if (heap == NULL) return;
  smi_deferred_free(force);
#if SM_SECURE
  if (part_owner_is_me(heap)) smi_quarantine_flush(heap);
#endif
  heap_part_collect(heap, force);
  sm_heap_t *shared = __atomic_load_n(&heap->shared, __ATOMIC_ACQUIRE);
  if (shared != NULL) heap_part_collect(shared, force);
}

/* the calling thread's heaps: its own and those it made */
void sm_collect(bool force) {
  sm_heap_t *backing = smi_tls_backing;
  if (backing == NULL) return;
  sm_heap_collect(backing, force);
  user_heaps_acquire();
  for (sm_heap_t *heap = user_heaps; heap != NULL; heap = heap->user_next) {
    if (part_owner_is_me(heap)) heap_part_collect(heap, force);
  }
  user_heaps_release();
}

/* statistics: bring every heap the calling thread may touch up to date (its own, those it owns,
 * and every locked part) */
static void heap_part_stats_sync(sm_heap_t *part) {
  if (part == NULL || !part_workable(part)) return;
  smi_heap_lock(part);
  smi_stats_heap_sync(part);
  smi_heap_unlock(part);
}

void smi_heaps_stats_sync(void) {
  heap_part_stats_sync(smi_tls_backing);
  user_heaps_acquire();
  for (sm_heap_t *heap = user_heaps; heap != NULL; heap = heap->user_next) {
    heap_part_stats_sync(heap);
    heap_part_stats_sync(__atomic_load_n(&heap->shared, __ATOMIC_ACQUIRE));
  }
  user_heaps_release();
}

/* ---- introspection ---- */

static bool page_of_heap(const sm_heap_t *heap, const sm_page_t *page) {
  const sm_heap_t *owner = smi_page_heap(page);
  return owner != NULL && (owner == heap || (owner->kind == SM_HEAP_SHARED && owner->parent == heap));
}

/* May a block of `page` grow in place for a realloc into `heap`? Only a block of that heap (or of
 * its shared part): sm_heap_realloc(h3, a block of h2, ...) that grew a huge block in place left
 * it in h2, and sm_heap_destroy(h2) then freed a block the program held as h3's (until
 * 2026-11-27; found in review). The owner is compared, never read: another thread may be
 * deleting it and a new heap reusing its memory (ThreadSanitizer). A block of another thread's
 * heap is copied. */
bool smi_heap_keeps(const sm_heap_t *heap, const sm_page_t *page) {
  const sm_heap_t *owner = smi_page_heap(page);
  return owner != NULL && (owner == heap || owner == __atomic_load_n(&heap->shared, __ATOMIC_ACQUIRE));
}

bool sm_heap_contains_block(sm_heap_t *heap, const void *p) {
  if (heap == NULL || p == NULL || !sm_check_owned(p)) return false;
  const sm_segment_t *segment = smi_segment_containing(p);
  const sm_page_t *page = smi_segment_page_covering(segment, p);
  if (page == NULL || !page->in_use) return false;
  return page_of_heap(heap, page);
}

bool sm_heap_check_owned(sm_heap_t *heap, const void *p) { return sm_heap_contains_block(heap, p); }

bool sm_is_in_heap_region(const void *p) { return sm_check_owned(p); }

/* secure build: a block the program freed that is not on a free list this visit collected, so
 * not live: one that waits in a quarantine (free.c points its link at its page's first block),
 * or one freed into a list this visit does not collect (its link) */
static bool block_freed(const sm_page_t *page, const uint8_t *block) {
#if SM_SECURE
  if (smi_option(sm_option_quarantine) > 0 && smi_block_next(page, (const sm_block_t *)block) == (sm_block_t *)smi_page_start(page))
    return true;
  if (smi_page_segment(page)->kind == SM_SEGMENT_HUGE) return false;
  return SM_LINK_AT_END ? smi_block_link_reads_free(page, (const sm_block_t *)block) : smi_padding_is_freed(block, page->block_size);
#else
  (void)page, (void)block;
  return false;
#endif
}

static sm_heap_area_t area_of(const sm_page_t *page) {
  size_t bsize = page->block_size;
  sm_heap_area_t area = {
      .blocks = smi_page_start(page),
      .reserved = (size_t)page->reserved * bsize,
      .committed = (size_t)page->capacity * bsize,
      .used = page->used,
      .block_size = bsize - SM_PADDING, /* padded builds keep SM_PADDING bytes of every block */
      .full_block_size = bsize,
  };
  return area;
}

/* A page as a visit sees it: its area, and which of its carved blocks are on a free list. Read
 * under the part's lock where the caller may take it; a visit by another thread of a part it
 * may not lock reads the lists as they are (its owner is not using it, heaps.md), including the
 * blocks other threads freed and nobody collected yet (until 2026-11-28 those passed for live). */
typedef struct {
  sm_heap_area_t area;
  uint64_t free_map[SM_SMALL_PAGE_SIZE / 8 / 64];
} page_view_t;
_Static_assert(SM_SMALL_PAGE_SIZE / 8 >= SM_MEDIUM_PAGE_SIZE / SM_SMALL_OBJ_MAX &&
                   SM_SMALL_PAGE_SIZE / 8 >= SM_SEGMENT_SIZE / SM_MEDIUM_OBJ_MAX,
               "the free map has a bit for every block of any page");

static void page_view(sm_page_t *page, page_view_t *view) {
  view->area = area_of(page);
  memset(view->free_map, 0, sizeof view->free_map);
  size_t bsize = page->block_size;
  sm_block_t *lists[3] = {page->free, page->local_free,
                          smi_tf_block(atomic_load_explicit(&page->thread_free, memory_order_acquire))};
  for (int l = 0; l < 3; l++) {
    uint32_t n = 0;
    for (sm_block_t *b = lists[l]; b != NULL && n++ <= page->capacity; b = smi_list_next(page, b)) {
      size_t idx = (size_t)((uint8_t *)b - smi_page_start(page)) / bsize;
      if (idx >= page->capacity || (view->free_map[idx / 64] & ((uint64_t)1 << (idx % 64)))) continue;
      view->free_map[idx / 64] |= (uint64_t)1 << (idx % 64);
      if (l == 2 && view->area.used > 0) view->area.used--; /* counted as used until collected */
    }
  }
}

/* the visitor over a page's view, with no lock held: it may allocate and free, in this heap too
 * (a visitor that did so waited for the lock it held, for ever, until 2026-11-28) */
static bool visit_view(const sm_heap_t *heap, const sm_page_t *page, page_view_t *view, bool all,
                       sm_block_visit_fun *visitor, void *arg) {
  sm_heap_area_t *area = &view->area;
  if (!visitor(heap, area, NULL, area->block_size, arg)) return false;
  if (!all || area->used == 0) return true;
  size_t count = area->committed / area->full_block_size;
  for (size_t i = 0; i < count; i++) {
    if (view->free_map[i / 64] & ((uint64_t)1 << (i % 64))) continue;
    uint8_t *block = (uint8_t *)area->blocks + i * area->full_block_size;
    if (block_freed(page, block)) continue;
    if (!visitor(heap, area, block, area->block_size, arg)) return false;
  }
  return true;
}

/* The part's pages are listed first (under its lock, where the caller may take it), then each is
 * looked at and visited in turn, the lock let go before its visitor calls; the part's tld keeps
 * the segments that empty meanwhile mapped until the visit ends (segment.c, visits), so a listed
 * page is always readable and tells by itself whether it is still the part's. The list comes
 * from the OS (a visit may not take memory from the heap it visits). */
static bool heap_part_visit_pages(const sm_heap_t *heap, sm_heap_t *part, bool all, sm_block_visit_fun *visitor, void *arg) {
  bool locked = part_workable(part);
  size_t cap = __atomic_load_n(&part->page_count, __ATOMIC_RELAXED) + 64, n = 0;
  size_t bytes = smi_align_up(cap * sizeof(sm_page_t *), SM_OS_PAGE_SIZE);
  sm_page_t **pages = smi_os_alloc_aligned(bytes, SM_OS_PAGE_SIZE, 0);
  if (pages == NULL) return false;
  if (locked) {
    smi_heap_lock(part);
    smi_heap_delayed_free(part); /* blocks other threads freed are free, not live */
    part->tld->visits++;
  }
  heap_for_each_page(part, page, next) {
    if (n < cap) pages[n++] = page; /* (pages made after the visit began may be left out) */
  }
  if (locked) smi_heap_unlock(part);
  bool go = true;
  page_view_t view;
  for (size_t i = 0; i < n && go; i++) {
    sm_page_t *page = pages[i];
    if (locked) smi_heap_lock(part);
    bool ours = page->in_use && smi_page_heap(page) == part;
    if (ours) {
      if (locked) smi_page_collect_remote(page);
      page_view(page, &view);
    }
    if (locked) smi_heap_unlock(part);
    if (ours) go = visit_view(heap, page, &view, all, visitor, arg);
  }
  if (locked) {
    smi_heap_lock(part);
    if (--part->tld->visits == 0) smi_segments_visit_end(part->tld);
    smi_heap_unlock(part);
  }
  smi_os_free(pages, bytes);
  return go;
}

/* Huge blocks: any thread may free one meanwhile, and unmap it. So they are all read under
 * huge_lock (while listed, a block is mapped) and visited after, with no lock held. */
static bool heap_part_visit_huge(const sm_heap_t *heap, sm_heap_t *part, bool all, sm_block_visit_fun *visitor, void *arg) {
  typedef struct {
    sm_heap_area_t area;
    bool live;
  } huge_view_t;
  size_t cap = 0, n = 0;
  smi_spin_lock(&part->huge_lock);
  for (sm_segment_t *segment = part->huge_first; segment != NULL; segment = segment->next) cap++;
  smi_spin_unlock(&part->huge_lock);
  if (cap == 0) return true;
  cap += 64; /* (blocks made after the visit began may be left out) */
  size_t bytes = smi_align_up(cap * sizeof(huge_view_t), SM_OS_PAGE_SIZE);
  huge_view_t *views = smi_os_alloc_aligned(bytes, SM_OS_PAGE_SIZE, 0);
  if (views == NULL) return false;
  smi_spin_lock(&part->huge_lock);
  for (sm_segment_t *segment = part->huge_first; segment != NULL && n < cap; segment = segment->next, n++) {
    views[n].area = area_of(&segment->pages[0]);
    views[n].live = !block_freed(&segment->pages[0], views[n].area.blocks);
  }
  smi_spin_unlock(&part->huge_lock);
  bool go = true;
  for (size_t i = 0; i < n && go; i++) {
    go = visitor(heap, &views[i].area, NULL, views[i].area.block_size, arg);
    if (go && all && views[i].live) go = visitor(heap, &views[i].area, views[i].area.blocks, views[i].area.block_size, arg);
  }
  smi_os_free(views, bytes);
  return go;
}

static bool heap_part_visit(const sm_heap_t *heap, sm_heap_t *part, bool all, sm_block_visit_fun *visitor, void *arg) {
  return heap_part_visit_pages(heap, part, all, visitor, arg) && heap_part_visit_huge(heap, part, all, visitor, arg);
}

bool sm_heap_visit_blocks(const sm_heap_t *heap, bool visit_all_blocks, sm_block_visit_fun *visitor, void *arg) {
  if (heap == NULL || visitor == NULL || heap->fork_orphan) return false; /* orphans: purge.c */
  sm_heap_t *h = (sm_heap_t *)heap;
  if (!heap_part_visit(heap, h, visit_all_blocks, visitor, arg)) return false;
  sm_heap_t *shared = __atomic_load_n(&h->shared, __ATOMIC_ACQUIRE);
  return shared == NULL || heap_part_visit(heap, shared, visit_all_blocks, visitor, arg);
}

/* ---- deferred free: a runtime's hook, called from slow paths with no lock held ---- */

static sm_deferred_free_fun *_Atomic deferred_fun;
static void *_Atomic deferred_arg;
static SM_TLS bool deferred_running; /* the hook may allocate: no recursion */
static SM_TLS unsigned long long deferred_heartbeat;

void sm_register_deferred_free(sm_deferred_free_fun *fun, void *arg) {
  atomic_store(&deferred_arg, arg);
  atomic_store(&deferred_fun, fun);
}

bool smi_deferred_free_set(void) { return atomic_load_explicit(&deferred_fun, memory_order_relaxed) != NULL; }
void smi_deferred_free(bool force) {
  sm_deferred_free_fun *fun = atomic_load_explicit(&deferred_fun, memory_order_acquire);
  if (sm_likely(fun == NULL) || deferred_running) return;
  deferred_running = true;
  fun(force, ++deferred_heartbeat, atomic_load_explicit(&deferred_arg, memory_order_relaxed));
  deferred_running = false;
}
