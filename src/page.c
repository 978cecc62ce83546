/* page.c: pages and page queues, and the generic (slow) malloc path.
 *
 * A page's blocks are on one of three lists or handed out:
 *   free        malloc pops from it (owner only);
 *   local_free  the owner's frees (owner only);
 *   thread_free other threads' frees, pushed with one CAS; its low 2 bits hold the delay state,
 *               its top 16 bits the list's length.
 * When `free` runs empty, the generic path moves thread_free and local_free onto it in one go
 * ("collect", or page_refill in the release build), so the fast paths never touch an atomic.
 * `used` counts blocks not on free or local_free: a block on thread_free still counts until it is
 * collected.
 *
 * Each heap has one queue per bin; a page whose lists are all empty moves to the full queue and
 * asks (delay state USE) to be told of the next remote free through the heap's delayed list,
 * once, so that it can come back. Called by alloc.c/free.c (generic paths) and heap.c. */
#include "internal.h"
#include "padding.h"

#include <sched.h>

/* One extension carves blocks up to the next 4 KiB boundary at or after the end of its first block,
 * so that a class's last extension touches less than one OS page it does not use (see page_extend).
 * The secure build carves at least 4 blocks, so that its random order has several to pick from. */
#define SM_EXTEND_BYTES SM_OS_PAGE_SIZE
#define SM_EXTEND_MIN (SM_SECURE ? 4 : 1)
/* Release build: a page of a small class (up to SM_DIRECT_MAX) that runs out with fewer blocks
 * carved than this carves more before it reuses its freed ones. Its blocks cycle between `free`
 * and `local_free`, so a class with one block live at a time refills once per pass over what is
 * carved, and one 4 KiB extension holds only 4-7 blocks of 576-1024 bytes. In the malloc/free
 * pairs microbenchmark (8-1024 bytes) that was 144,000 refills per million pairs, each about 60
 * instructions and a mispredicted branch in malloc (92% of the run's mispredictions). With 8:
 * 86,000 refills, 105,000 mispredictions instead of 177,000, 98 -> 110 Mpairs/s (15 interleaved
 * runs; tcmalloc 119), at most 4 KiB more per class that cycles, peak RSS level. A target of 16
 * blocks (16 KiB at most) raised the benchmark's peak RSS above mimalloc's; a smaller first
 * extension, to keep each class's cycle in L1, lost 5-15% (more refills). */
#define SM_CYCLE_MIN 8
#define SM_SHUFFLE_GROUP 8 /* secure builds: new blocks are handed out in a random order within groups this large */
_Static_assert((SM_SHUFFLE_GROUP & (SM_SHUFFLE_GROUP - 1)) == 0, "a power of two: one random word gives the pick and the coin");
/* slow-path calls an empty page is kept before it goes back to its segment */
#define SM_RETIRE_CALLS_SMALL 1024
#define SM_RETIRE_CALLS_OTHER 64

/* ---- page queues ---- */

static sm_page_queue_t *page_queue_of(sm_heap_t *heap, const sm_page_t *page) {
  return &heap->pages[page->flags.x.in_full ? SM_BIN_FULL : page->bin];
}

/* The direct table points every small size at the first page of its bin, or, while the bin
 * borrows (page_borrow), at the first page of the next bin. */
static void heap_direct_set(sm_heap_t *heap, size_t bin, sm_page_t *page) {
  size_t start = (bin == 0 ? 0 : smi_bin_size(bin - 1) / 8 + 1);
  for (size_t i = start; i <= smi_bin_size(bin) / 8; i++) heap->pages_direct[i] = page;
}

static sm_page_t *heap_first_or_empty(const sm_heap_t *heap, size_t bin) {
  return heap->pages[bin].first != NULL ? heap->pages[bin].first : &smi_page_empty;
}

/* the bin stops borrowing: its sizes go to its own first page again */
static inline void heap_unborrow(sm_heap_t *heap, size_t bin) {
  if (SM_CHECK_FREES || smi_bin_size(bin) > SM_DIRECT_MAX) return;
  sm_page_t *own = heap_first_or_empty(heap, bin);
  if (heap->pages_direct[smi_bin_size(bin) / 8] != own) heap_direct_set(heap, bin, own);
}

/* the bin's first page changed: so do its entries, and the bin below stops borrowing from it */
static void heap_direct_update(sm_heap_t *heap, size_t bin) {
  if (smi_bin_size(bin) > SM_DIRECT_MAX) return;
  heap_direct_set(heap, bin, heap_first_or_empty(heap, bin));
  if (bin > 0) heap_unborrow(heap, bin - 1);
}

void smi_page_queue_remove(sm_heap_t *heap, sm_page_t *page) {
  sm_page_queue_t *pq = page_queue_of(heap, page);
  if (page->prev != NULL) page->prev->next = page->next;
  else pq->first = page->next;
  if (page->next != NULL) page->next->prev = page->prev;
  else pq->last = page->prev;
  if (page->prev == NULL && !page->flags.x.in_full) heap_direct_update(heap, page->bin);
  page->next = page->prev = NULL;
  heap->page_count--;
}

/* a fresh page goes to the front: it is where allocation continues */
void smi_page_queue_push(sm_heap_t *heap, sm_page_t *page, size_t bin) {
  page->bin = (uint8_t)bin;
  sm_page_queue_t *pq = &heap->pages[bin];
  page->prev = NULL;
  page->next = pq->first;
  if (pq->first != NULL) pq->first->prev = page;
  else pq->last = page;
  pq->first = page;
  heap->page_count++;
  heap_direct_update(heap, bin);
}

/* a page coming back from the full queue goes to the back: it has few free blocks */
static void page_queue_append(sm_heap_t *heap, sm_page_queue_t *pq, sm_page_t *page) {
  page->next = NULL;
  page->prev = pq->last;
  if (pq->last != NULL) pq->last->next = page;
  else pq->first = page;
  pq->last = page;
  heap->page_count++;
  if (pq->first == page && !page->flags.x.in_full) heap_direct_update(heap, page->bin);
}

/* ---- delay state ---- */

/* Wait out a remote thread that is in the middle of a delayed free (FREEING lasts a few
 * instructions); returns the page's thread_free word, not in FREEING. A page being given back
 * waits too (smi_page_free_empty): the remote thread writes the delay state once more after its
 * block is on the heap's delayed list, and the owner may take that block and find the page empty
 * meanwhile. A thread preempted in between wrote into a segment that another thread had reused (a
 * huge block's header; found by test-fuzz under ThreadSanitizer). */
static uintptr_t page_wait_notify(sm_page_t *page) {
  for (unsigned spins = 0;; spins++) {
    uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_acquire);
    if (smi_tf_delay(tf) != SM_DELAY_FREEING) return tf;
    if (spins > 64) sched_yield();
  }
}

/* Set the delay state once no remote thread is in FREEING; NEVER (abandoned) is kept unless
 * override_never. */
void smi_page_set_delay(sm_page_t *page, sm_delay_t delay, bool override_never) {
  uintptr_t tf = page_wait_notify(page);
  for (;;) {
    sm_delay_t old = smi_tf_delay(tf);
    if (old == SM_DELAY_FREEING) {
      tf = page_wait_notify(page);
      continue;
    }
    if (old == delay || (old == SM_DELAY_NEVER && !override_never)) return;
    if (atomic_compare_exchange_weak_explicit(&page->thread_free, &tf, smi_tf_with_delay(tf, delay),
                                              memory_order_acq_rel, memory_order_relaxed))
      return;
  }
}

/* ---- free lists ---- */

/* Take the other threads' list, keeping the delay bits; returns the word it was taken from (its
 * list and count), or one with no list when there was none. */
static uintptr_t page_take_thread_free(sm_page_t *page) {
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
  while (smi_tf_block(tf) != NULL &&
         !atomic_compare_exchange_weak_explicit(&page->thread_free, &tf, smi_tf_make(NULL, smi_tf_delay(tf)),
                                                memory_order_acquire, memory_order_relaxed)) {
  }
  return tf;
}

/* The last block of a list, at most `max` links on (n: the blocks up to it). In the checked builds a
 * block whose link leaves the page is reported and left out with everything after it: the link is
 * never followed, and the block is leaked, counted as in use (smi_page_pop_bad_link says why).
 * Returns NULL when that was the list's first block (the whole list is gone). */
static sm_block_t *list_tail(sm_page_t *page, sm_block_t *b, uint32_t max, uint32_t *n) {
  sm_block_t *next, *prev = NULL;
  for (*n = 1; (next = smi_block_next(page, b)) != NULL && *n <= max; ++*n) {
#if SM_CHECK_FREES
    if (sm_unlikely(!smi_page_link_ok(page, next))) {
      smi_page_list_corrupted(page, b);
      page->used++;
      --*n;
      if (prev != NULL) smi_block_set_next(page, prev, NULL);
      return prev;
    }
#endif
    prev = b;
    b = next;
  }
  (void)prev; /* the release build does not cut lists */
  return b;
}

/* Move the other threads' frees onto local_free (one atomic exchange keeps the delay bits). The
 * list's length travels in thread_free, so the list is taken without a walk: on a page that other
 * threads free into, walking it to its tail fetched every block's line from the freeing core, one
 * dependent miss after another, before any block was handed out (25% of a producer/consumer
 * loop's time); handed out one at a time, those misses overlap with the program's work. When
 * local_free holds blocks too, the shorter list is walked to link the two. The debug and
 * memory-checker builds walk it anyway, to compare the count. A bad link in a list taken without
 * a walk is reported when a pop reaches it (smi_page_pop), before the block is handed out. */
void smi_page_collect_remote(sm_page_t *page) {
  uintptr_t tf = page_take_thread_free(page);
  sm_block_t *remote = smi_tf_block(tf), *local = page->local_free;
  if (remote == NULL) return;
  uint32_t count = smi_tf_count(tf), walked;
#if SM_CHECK_FREES
  if (sm_unlikely(count > page->used)) { /* a block freed twice at once by two threads */
    smi_error(EFAULT, "corrupted thread-free list in page %p (block size %zu): %u blocks freed, %u allocated",
              (void *)smi_page_start(page), page->block_size, (unsigned)count, (unsigned)page->used);
    return; /* leak the list rather than use it */
  }
#endif
  if (SM_DEBUG || SM_TRACK) { /* remote list first, walked in full */
    sm_block_t *tail = list_tail(page, remote, page->capacity, &walked);
    if (sm_unlikely(tail == NULL || walked != count)) { /* a link was bad (reported), or a block is on it twice */
      smi_error(EFAULT, "corrupted thread-free list in page %p (block size %zu): %u blocks on it, %u freed",
                (void *)smi_page_start(page), page->block_size, (unsigned)walked, (unsigned)count);
      return;
    }
    smi_block_set_next(page, tail, local);
    page->local_free = remote;
  } else if (local != NULL) { /* both: walk the shorter (local_free holds capacity - used blocks) */
    bool remote_first = count < (uint32_t)(page->capacity - page->used);
    sm_block_t *first = remote_first ? remote : local, *second = remote_first ? local : remote;
    sm_block_t *tail = list_tail(page, first, page->capacity, &walked);
    if (tail != NULL) smi_block_set_next(page, tail, second);
    page->local_free = tail != NULL ? first : second;
  } else {
    page->local_free = remote;
  }
  sm_assert(page->used >= count);
  page->used -= count;
}

/* ---- statistics: refill accounting ----
 * Blocks are not counted one by one (that would cost the fast paths). Instead, when `free` is
 * refilled from local_free it is empty, so every block put on it last time was allocated, and the
 * n blocks moving over (capacity - used) were all freed since. A refill only adds n to the page's
 * stat_freed. A fold (when stat_freed reaches SM_STATS_FOLD_BLOCKS, and when the page is given
 * back, goes full or is synced) is told how many blocks are on `free` then, and works out the
 * allocations since the last fold: every block put on `free` since (refilled: stat_freed; carved:
 * the capacity's growth) and the ones that were on it then, less the ones still on it. It adds
 * both figures to the heap's, and the heap adds its figures to the process totals every
 * SM_STATS_FLUSH_BYTES. */
#define SM_STATS_FOLD_BLOCKS 4096
#define SM_STATS_FLUSH_BYTES ((int64_t)1 << 20)

/* the last block of `free` (NULL if it is empty), *n its length (cut where corrupted) */
static sm_block_t *free_tail(sm_page_t *page, uint32_t *n) {
  *n = 0;
  sm_block_t *tail = page->free != NULL ? list_tail(page, page->free, page->capacity, n) : NULL;
  if (tail == NULL) page->free = NULL;
  return tail;
}

/* local_free appended to `free`, so that one list holds every free block the page has (and no
 * block is counted twice). Returns how many were on `free`: the walk that finds its tail counts
 * them; local_free is not walked. */
static uint32_t page_join_local(sm_page_t *page) {
  uint32_t on_free;
  sm_block_t *tail = free_tail(page, &on_free);
  if (page->local_free != NULL) {
    if (tail != NULL) smi_block_set_next(page, tail, page->local_free);
    else page->free = page->local_free;
    page->local_free = NULL;
    page->free_is_zero = false;
  }
  return on_free;
}

void smi_stats_heap_flush(sm_heap_t *heap) {
  for (int k = 0; k < 8; k += 4) {
    int64_t *d = &heap->stat_delta[k];
    smi_count_move(k == 0 ? SM_COUNT_NORMAL : SM_COUNT_LARGE, d[0], d[1]);
    smi_count_move(k == 0 ? SM_COUNT_NORMAL_BLOCKS : SM_COUNT_LARGE_BLOCKS, d[2], d[3]);
    d[0] = d[1] = d[2] = d[3] = 0;
  }
}

/* the owner (or the purger, with the heap's lock) moved blocks; abandoned pages count directly */
static void page_account(sm_page_t *page, int64_t allocated, int64_t freed) {
  sm_assert(allocated >= 0 && freed >= 0);
  if (allocated == 0 && freed == 0) return;
  bool large = page->block_size > SM_MEDIUM_OBJ_MAX;
  int64_t bsize = (int64_t)page->block_size;
  sm_heap_t *heap = smi_page_heap(page);
  if (heap == NULL) {
    smi_count_move(large ? SM_COUNT_LARGE : SM_COUNT_NORMAL, allocated * bsize, freed * bsize);
    smi_count_move(large ? SM_COUNT_LARGE_BLOCKS : SM_COUNT_NORMAL_BLOCKS, allocated, freed);
    return;
  }
  int64_t *d = &heap->stat_delta[large ? 4 : 0];
  d[0] += allocated * bsize;
  d[1] += freed * bsize;
  d[2] += allocated;
  d[3] += freed;
  if (d[0] + d[1] > SM_STATS_FLUSH_BYTES) smi_stats_heap_flush(heap);
}

/* count the blocks handed out and freed since the last fold, and freed_more freed blocks the
 * refills have not counted; on_free blocks are on `free` now. One page_account: a flush between an
 * allocation count and its free count would make a false peak. */
static void page_fold(sm_page_t *page, uint32_t on_free, int64_t freed_more) {
  int64_t allocated = (int64_t)page->stat_base_on_free + page->stat_freed + (page->capacity - page->stat_base_capacity) - on_free;
  page_account(page, allocated, page->stat_freed + freed_more);
  page->stat_freed = 0;
  page->stat_base_on_free = (uint16_t)on_free;
  page->stat_base_capacity = page->capacity;
}

/* a refill: the last list was used up, n blocks come back (and make up the new `free`) */
static inline void page_refill_count(sm_page_t *page, uint32_t n) {
  page->stat_freed = (uint16_t)(page->stat_freed + n);
  if (sm_unlikely(page->stat_freed >= SM_STATS_FOLD_BLOCKS)) page_fold(page, n, 0);
}

/* `list`, everything that was on local_free, becomes `free` */
static inline void page_free_from(sm_page_t *page, sm_block_t *list) {
  page->free = list;
  page->local_free = NULL;
  page->free_is_zero = false;
  page->free_is_remote = false;
}
/* the refill itself: `list`, n blocks, becomes `free` */
static inline void page_refill_with(sm_page_t *page, sm_block_t *list, uint32_t n) {
  page_refill_count(page, n);
  page_free_from(page, list);
}
_Static_assert(SM_STATS_FOLD_BLOCKS + SM_SMALL_PAGE_SIZE / 8 <= UINT16_MAX, "stat_freed cannot overflow");

/* count everything up to now, with on_free blocks on `free` and `freed` more as freed; the page
 * then starts counting afresh */
static void page_fold_all(sm_page_t *page, uint32_t on_free, int64_t freed) {
  page_fold(page, on_free, freed);
  page->stat_base_on_free = 0;
}

/* the page goes back to its segment (or is destroyed): whatever is not on `free` counts as freed */
void smi_stats_page_discard(sm_page_t *page) {
  uint32_t on_free;
  free_tail(page, &on_free);
  page_fold_all(page, on_free, (int64_t)page->capacity - on_free);
}

/* count everything up to now; the page's free blocks end up on `free` */
void smi_stats_page_sync(sm_page_t *page) {
  smi_page_collect_remote(page);
  uint32_t on_free = page_join_local(page);
  /* the rest of the free blocks were on local_free (the other threads' are there now, and used
   * counts blocks on a delayed list) */
  int64_t on_local = (int64_t)page->capacity - page->used - on_free;
  if (on_local < 0) on_local = 0; /* (a corrupted list was cut: its rest is leaked) */
  page_fold(page, on_free, on_local);
  page->stat_base_on_free = (uint16_t)(on_free + on_local);
}

void smi_stats_heap_sync(sm_heap_t *heap) {
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    for (sm_page_t *page = heap->pages[bin].first; page != NULL; page = page->next) smi_stats_page_sync(page);
  }
  smi_stats_heap_flush(heap);
}

void smi_page_collect(sm_page_t *page) {
  if (smi_tf_block(atomic_load_explicit(&page->thread_free, memory_order_relaxed)) != NULL)
    smi_page_collect_remote(page);
  if (page->local_free != NULL && page->free == NULL)
    page_refill_with(page, page->local_free, page->capacity - page->used);
}

/* sm_collect(true): the page keeps live blocks, but the whole OS pages inside its free blocks go
 * back too, as glibc's malloc_trim gives back those inside free chunks: seven freed 32 KiB blocks
 * of every eight stayed resident for as long as the eighth lived (`test-purge collect-blocks`).
 * A free block keeps the OS page that holds its link (its first word; its last in the secure
 * build), so only blocks larger than an OS page have any to give. Memory read after this is
 * zero, which free_is_zero allows. Not in the debug build, whose freed blocks keep the fill that malloc
 * checks. The caller holds the page's heap (its owner, or its lock for a locked part) and has
 * collected the other threads' frees. */
void smi_page_purge_free_blocks(sm_page_t *page) {
#if SM_DEBUG
  (void)page;
#else
  size_t bsize = page->block_size;
  if (bsize <= smi_os_page_size() || smi_mem_is_pinned(smi_page_segment(page))) return;
  bool decommit = smi_option(sm_option_purge_decommits) != 0;
  sm_block_t *lists[2] = {page->free, page->local_free};
  for (int i = 0; i < 2; i++) {
    for (sm_block_t *b = lists[i]; b != NULL; b = smi_list_next(page, b)) {
      uintptr_t start = (uintptr_t)b, end = start + bsize;
      if (SM_LINK_AT_END) end -= sizeof(sm_block_t);
      else start += sizeof(sm_block_t);
      smi_os_purge((void *)start, end - start, decommit); /* whole OS pages only */
    }
  }
#endif
}

#if !SM_CHECK_FREES
/* The release build's refill, when `free` ran out: the longer of local_free and the other
 * threads' list becomes `free`, as it is; the other waits for the next refill (the longer one, so
 * that neither waits for ever while the other keeps getting blocks). Linking the two meant walking
 * one of them, and the other threads' blocks are lines last written on their cores: 20% of
 * sh8bench-N's time (walking only local_free, as the secure build does, was still 5% slower).
 * The checked builds choose among them: page_collect_or_extend, smi_page_collect. */
static void page_refill(sm_page_t *page) {
  sm_assert(page->free == NULL);
  uint32_t on_local = (uint32_t)(page->capacity - page->used); /* free is empty: all on local_free */
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
  if (page->local_free != NULL && smi_tf_count(tf) <= on_local) {
    page_refill_with(page, page->local_free, on_local);
    return;
  }
  tf = page_take_thread_free(page); /* only the owner takes it: it can only have grown */
  if (smi_tf_block(tf) == NULL) return;
  page->used -= smi_tf_count(tf);
  page_refill_count(page, smi_tf_count(tf));
  page->free = smi_tf_block(tf);
  page->free_is_zero = false;
  page->free_is_remote = true;
}
#endif

#if SM_SECURE
/* Orders for a group of SM_SHUFFLE_GROUP new blocks: nibble i of an order is the i-th block
 * handed out. A full group takes one of 256 random orders drawn at start-up from the process
 * secret, with every pick XORed by a random k and the sequence rotated by a random s: 2^14 orders,
 * different in every process, for a load, a XOR and a rotate; a Fisher-Yates shuffle of each group
 * cost 8 instructions per block carved, a fifth of the secure build's carving. */
static uint32_t shuffle_orders[256];

/* n < SM_SHUFFLE_GROUP blocks (a page's last few): Fisher-Yates, 8 random bits a step */
static uint32_t shuffle_order_partial(uint64_t r, uint32_t n) {
  uint32_t order = 0x76543210;
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)((r & 0xff) * (i + 1)) >> 8;
    r >>= 8;
    uint32_t x = ((order >> (4 * i)) ^ (order >> (4 * j))) & 0xf;
    order ^= (x << (4 * i)) | (x << (4 * j));
  }
  return order;
}

static inline uint32_t shuffle_order(uint64_t r) {
  uint32_t order = shuffle_orders[r & 0xff] ^ (0x11111111u * (uint32_t)((r >> 8) & 7));
  uint32_t s = 4 * (uint32_t)((r >> 11) & 7);
  return s == 0 ? order : (order >> s) | (order << (32 - s));
}

void smi_page_shuffle_init(uint64_t seed) {
  for (size_t k = 0; k < 256; k++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull; /* an LCG; its high bits serve */
    shuffle_orders[k] = shuffle_order_partial(seed >> 8, SM_SHUFFLE_GROUP);
  }
}
_Static_assert(SM_SHUFFLE_GROUP == 8, "orders are 8 nibbles");
#endif

/* Carve the next few blocks of the page into the (empty) free list. Done a little at a time so
 * that a fresh page costs page faults only for what is used: carving writes a link into every
 * block, so it touches each OS page that a new block starts in. An extension ends on a 4 KiB
 * boundary (the first at or after its first block's end), so the blocks it carves fill the pages
 * it touches and the next extension starts in one already touched. Carving 4 KiB from wherever
 * the last extension ended, and at least 4 blocks, let each class's last extension touch pages
 * that no block in use needed: a page more for small blocks, three for 16 KiB ones (13 blocks of
 * 1-15 KiB, one per class, 68 KiB in all, held 216 KiB of segment; 108 KiB now). */
static void page_extend(sm_page_t *page) {
  sm_assert(page->free == NULL && smi_page_is_expandable(page));
  /* fresh blocks are for this bin: a smaller one borrowing this page stops (page_borrow) */
  if (page->bin > 0) heap_unborrow(smi_page_heap(page), page->bin - 1);
  page->free_is_remote = false;
  size_t bsize = page->block_size;
  uint8_t *first = smi_page_start(page) + (size_t)page->capacity * bsize;
  size_t extend = (smi_align_up((uintptr_t)first + bsize, SM_EXTEND_BYTES) - (uintptr_t)first) / bsize;
  if (extend < SM_EXTEND_MIN) extend = SM_EXTEND_MIN;
  if (extend > (size_t)(page->reserved - page->capacity)) extend = page->reserved - page->capacity;
  uint8_t *last = first + (extend - 1) * bsize;
  smi_track_undefined(first, extend * bsize); /* memory of a reused mapping may be marked freed */
#if SM_DEBUG
#if !SM_TRACK
  smi_debug_carve_check(page, first, extend * bsize); /* freed with an earlier page (alloc.c) */
#endif
  memset(first, 0xDF, extend * bsize); /* fresh blocks look freed: malloc checks the pattern */
#endif
#if SM_SECURE
  /* Reused memory holds no live canary where a new block's would be: a block's canary at the same
   * place with the same value means the same address and size, and blocks of an earlier life were
   * freed (which marks them) or destroyed with their heap (heap_part_destroy marks them). A huge
   * block's canary sits at its own end, where no small block of the same start ends. */
  if (extend > 1 && smi_option(sm_option_shuffle)) {
    /* link the new blocks in a random order, shuffled within groups of SM_SHUFFLE_GROUP
     * consecutive blocks: each next address is a fresh pick among up to that many, and blocks
     * allocated one after the other stay close (programs walk what they allocated together) */
    sm_heap_t *heap = smi_page_heap(page);
    sm_block_t *head = NULL, *prev = NULL;
    for (size_t group = 0; group < extend; group += SM_SHUFFLE_GROUP) {
      size_t n = extend - group < SM_SHUFFLE_GROUP ? extend - group : SM_SHUFFLE_GROUP;
      uint64_t r = smi_heap_random(heap);
      uint32_t order = n == SM_SHUFFLE_GROUP ? shuffle_order(r) : shuffle_order_partial(r, (uint32_t)n);
      for (size_t i = 0; i < n; i++, order >>= 4) {
        sm_block_t *b = (sm_block_t *)(first + (group + (order & 0xf)) * bsize);
        if (prev == NULL) head = b;
        else smi_block_set_next(page, prev, b);
        prev = b;
      }
    }
    smi_block_set_next(page, prev, NULL);
    smi_track_noaccess(first, extend * bsize);
    page->free = head;
    page->free_is_zero = page->mem_is_zero;
    smi_page_set_capacity(page, page->capacity + extend);
    return;
  }
#endif
  for (uint8_t *b = first; b < last; b += bsize) smi_block_set_next(page, (sm_block_t *)b, (sm_block_t *)(b + bsize));
  smi_block_set_next(page, (sm_block_t *)last, NULL);
  smi_track_noaccess(first, extend * bsize); /* not the program's until allocated */
  page->free = (sm_block_t *)first;
  page->free_is_zero = page->mem_is_zero && !SM_DEBUG;
  smi_page_set_capacity(page, page->capacity + extend);
}

void smi_page_init(sm_heap_t *heap, sm_page_t *page, size_t block_size, size_t area) {
  page->free = NULL;
  page->local_free = NULL;
  page->used = 0;
  page->flags.all = 0;
  page->shared_has_aligned = 0;
  page->free_is_zero = false;
  page->free_is_remote = false;
  page->retire_ticks = 0;
  page->block_size = block_size;
  smi_page_set_capacity(page, 0);
  page->stat_freed = page->stat_base_on_free = page->stat_base_capacity = 0;
  page->reserved = (uint16_t)(area / block_size);
  atomic_store_explicit(&page->thread_free, smi_tf_make(NULL, SM_DELAY_NONE), memory_order_relaxed);
  atomic_store_explicit(&page->heap, heap, memory_order_release);
#if SM_SECURE
  page->keys[0] = (uintptr_t)heap->random ^ (uintptr_t)page ^ smi_read_mostly.secret;
  page->keys[1] = ((uintptr_t)heap->random * 0x9E3779B97F4A7C15ull) | 1;
  page->block_magic = UINT64_MAX / block_size + 1;
#endif
  sm_assert(page->reserved >= 1);
}

#if SM_CHECK_FREES
void smi_page_list_corrupted(const sm_page_t *page, const sm_block_t *block) {
  smi_error(EFAULT, "free list of page %p (block size %zu) corrupted at block %p: written after free?",
            (void *)smi_page_start(page), page->block_size, (const void *)block);
}

/* The first block of `free` has a link that leaves the page. Report it; the block and the rest of
 * the list are leaked, the block counted as in use: it may be a live block that reached a list
 * twice (two threads freed it at once), and then its count was taken off `used` twice, so the
 * page is never given back under it. */
void *smi_page_pop_bad_link(sm_page_t *page, const sm_block_t *block) {
  smi_page_list_corrupted(page, block);
  page->free = NULL;
  page->used++;
  return NULL;
}
#endif

/* ---- full pages ---- */

static void page_to_full(sm_heap_t *heap, sm_page_t *page) {
  smi_stat_inc(SM_STAT_PAGE_TO_FULL);
  /* every block of the page is out now: count them, or a program whose live blocks fill whole
   * pages would see them only when freed, netted against their frees (peak 60 KiB for 61 MiB of
   * live 64-byte blocks) */
  sm_assert(page->free == NULL);
  page_fold_all(page, 0, 0);
  smi_page_queue_remove(heap, page);
  page->retire_ticks = 0; /* only a bin's first page is kept (smi_heap_retired_collect looks there) */
  page->flags.x.in_full = 1;
  page_queue_append(heap, &heap->pages[SM_BIN_FULL], page);
  smi_page_set_delay(page, SM_DELAY_USE, false);
  /* a remote free may have landed just before USE was set */
  smi_page_collect(page);
  if (page->free != NULL) smi_page_unfull(page);
}

void smi_page_unfull(sm_page_t *page) {
  sm_heap_t *heap = smi_page_heap(page);
  sm_assert(page->flags.x.in_full);
  smi_page_set_delay(page, SM_DELAY_NONE, false);
  smi_page_queue_remove(heap, page);
  page->flags.x.in_full = 0;
  page_queue_append(heap, &heap->pages[page->bin], page);
}

/* ---- empty pages ---- */

void smi_page_free_empty(sm_heap_t *heap, sm_page_t *page) {
  sm_assert(page->used == 0);
  (void)page_wait_notify(page); /* see there */
  smi_stats_page_discard(page);
  smi_page_queue_remove(heap, page);
  atomic_store_explicit(&page->heap, NULL, memory_order_release);
  smi_segment_page_free(page, heap->tld);
}

/* the slow call at which a page kept empty now goes back */
static inline uint64_t retire_deadline(const sm_heap_t *heap, const sm_page_t *page) {
  return atomic_load_explicit(&heap->slow_calls, memory_order_relaxed) +
         (page->block_size <= SM_SMALL_OBJ_MAX ? SM_RETIRE_CALLS_SMALL : SM_RETIRE_CALLS_OTHER);
}

/* All blocks of the page are free (owner's view). Keep the only page of a bin for a few slow-path
 * calls, so a program that allocates and frees one block in a loop does not thrash the segment.
 * Uses only state that the purger never touches (bin queues, retire ticks): no lock needed. */
bool smi_page_retire_keep(sm_heap_t *heap, sm_page_t *page) {
  sm_page_queue_t *pq = page_queue_of(heap, page);
  if (page->flags.x.in_full || pq->first != page || pq->last != page || page->block_size > SM_MEDIUM_OBJ_MAX ||
      !smi_tld_may_carve(heap->tld, smi_page_segment(page)))
    return false;
  page->retire_ticks = 1;
  page->purge_at = retire_deadline(heap, page);
  if (page->purge_at < heap->retired_next) heap->retired_next = page->purge_at;
  if (page->bin < heap->retired_min) heap->retired_min = page->bin;
  if (page->bin > heap->retired_max) heap->retired_max = page->bin;
  return true;
}

void smi_page_retire(sm_page_t *page) {
  sm_heap_t *heap = smi_page_heap(page);
  if (!smi_page_retire_keep(heap, page)) smi_page_free_empty(heap, page);
}

/* ---- finding a page with a free block ---- */

#if SM_SECURE
/* The secure build's choice for a page whose free list ran out: extend it (at random, while fewer
 * than SM_SHUFFLE_GROUP freed blocks wait to be reused), or reuse its freed blocks starting with a
 * random one of the first SM_SHUFFLE_GROUP on local_free (moved to the front). Either way the next
 * address is a pick among several, as with fresh carving, and a page with blocks to reuse does not
 * grow: a coin flip at every refill had carved whole pages the program never needed (secure peak
 * RSS 1.28x release's over the quick suite, 1.03x this way). Returns whether the page was extended. */
static void page_reuse_from_random(sm_page_t *page, uint64_t r, uint32_t waiting);

/* A random word, or 0 while the `shuffle` option is off: the page is then reused from the head of
 * local_free (its last freed block first) and extended only when nothing waits, in address order,
 * as in the release build. */
static uint64_t shuffle_random(sm_heap_t *heap) { return smi_option(sm_option_shuffle) ? smi_heap_random(heap) : 0; }

static bool page_collect_or_extend(sm_heap_t *heap, sm_page_t *page) {
  if (page->free != NULL) return false;
  /* the other threads' list only while it is longer than local_free: the walk that links the two
   * is then of local_free, whose lines this thread wrote (see page_refill) */
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
  if (page->local_free == NULL || smi_tf_count(tf) > (uint32_t)(page->capacity - page->used)) smi_page_collect_remote(page);
  uint64_t r = shuffle_random(heap);
  uint32_t waiting = (uint32_t)(page->capacity - page->used); /* all on local_free now */
  if (smi_page_is_expandable(page) && waiting < SM_SHUFFLE_GROUP && (r & SM_SHUFFLE_GROUP)) {
    page_extend(page);
    return true;
  }
  page_reuse_from_random(page, r, waiting);
  return false;
}

/* local_free (its `waiting` blocks) becomes `free`, starting with a random one of its first
 * SM_SHUFFLE_GROUP blocks (r: a random word) */
static void page_reuse_from_random(sm_page_t *page, uint64_t r, uint32_t waiting) {
  sm_block_t *head = page->local_free, *before = NULL, *pick = head;
  if (head == NULL) return;
  for (uint64_t skip = r % SM_SHUFFLE_GROUP; skip > 0; skip--) {
    sm_block_t *next = smi_block_next(page, pick);
    /* only to a block whose own link is good, as that link moves: a bad one (reported when
     * popped) moved to `before` would hide a forged link to a live block, handed out then twice
     * (a one-bit write after free did so until 2026-11-28) */
    if (next == NULL || !smi_page_block_start(page, (uintptr_t)next) || !smi_page_link_ok(page, smi_block_next(page, next))) break;
    before = pick;
    pick = next;
  }
  if (before != NULL) {
    smi_block_set_next(page, before, smi_block_next(page, pick));
    smi_block_set_next(page, pick, head);
  }
  page_refill_with(page, pick, waiting);
}
#endif

/* Borrowing (release build). Each class a thread uses grows its page to that class's own peak of
 * live blocks, and where threads pass blocks to each other the peaks of neighbouring classes
 * seldom coincide: producer/consumer pairs held 5x their live bytes in pages. So before a small
 * class carves fresh memory, it borrows the next class's blocks (at most 25% larger) when that
 * class's first page has a list that other threads freed: the class's direct-table entries
 * point at that page (heap_direct_set) until the list runs out, the page is extended or leaves
 * the front of its bin (heap_unborrow), and the class's next slow path looks at its own page
 * first again. Only lists freed by other threads are lent: in a thread that frees its own
 * blocks, all classes tend to climb together (the next class's freed blocks are its own next
 * allocations), and lending there raised peak RSS by 3% (swing). The checked builds keep
 * every block in its class: their reuse order is randomized (secure) and their reports name
 * the class. Aligned allocation needs blocks of the exact class (alloc.c) and never borrows. */
static sm_page_t *page_borrow(sm_heap_t *heap, size_t bin) {
#if SM_CHECK_FREES
  (void)heap;
  (void)bin;
  return NULL;
#else
  size_t size = smi_bin_size(bin);
  if (bin + 1 >= SM_BIN_COUNT || smi_bin_size(bin + 1) > SM_DIRECT_MAX || 4 * smi_bin_size(bin + 1) > 5 * size) return NULL;
  sm_page_t *page = heap->pages[bin + 1].first;
  if (page == NULL) return NULL;
  if (page->free == NULL) page_refill(page);
  if (page->free == NULL || !page->free_is_remote) return NULL;
  heap_direct_set(heap, bin, page);
  page->retire_ticks = 0; /* in use again, as page_queue_find_free leaves a page */
  return page;
#endif
}

/* Walk the bin's queue: collect each page; use the first with a free block or room to extend
 * (unless the next bin lends a block: page_borrow); pages with neither move to the full queue, so
 * each page is visited once per time it fills. */
static sm_page_t *page_queue_find_free(sm_heap_t *heap, size_t bin, bool may_borrow) {
  sm_page_queue_t *pq = &heap->pages[bin];
  sm_page_t *page = pq->first;
  bool busy = page != NULL;
  while (page != NULL) {
    sm_page_t *next = page->next;
#if SM_SECURE
    if (page_collect_or_extend(heap, page)) break;
#elif SM_CHECK_FREES
    smi_page_collect(page);
#else
    if (page->free == NULL) page_refill(page);
#endif
    if (page->free != NULL) break;
    if (smi_page_is_expandable(page)) {
      sm_page_t *lender = may_borrow ? page_borrow(heap, bin) : NULL;
      if (lender != NULL) return lender;
      page_extend(page);
      break;
    }
    page_to_full(heap, page);
    if (page->free != NULL) break; /* came straight back */
    page = next;
  }
  if (page == NULL) {
    page = smi_segment_page_alloc(heap, smi_bin_size(bin), busy);
    if (page == NULL) return NULL;
    smi_page_queue_push(heap, page, bin);
    page_extend(page);
  } else if (page != pq->first) { /* move it to the front so the direct table finds it */
    smi_page_queue_remove(heap, page);
    smi_page_queue_push(heap, page, bin);
  } else {
    heap_unborrow(heap, bin); /* its own first page has blocks again */
  }
  page->retire_ticks = 0;
  return page;
}

/* pop a block from a page with a free one; zero the first `size` bytes if asked (blocks carved from
 * fresh memory only need their link word cleared). NULL: the checked builds found the list
 * corrupted (reported; the caller looks again). */
static void *page_pop_zero(sm_page_t *page, size_t size, bool zero) {
  bool is_zero = page->free_is_zero;
  void *p = smi_page_pop(page, page->free);
  if (SM_CHECK_FREES && p == NULL) return NULL;
  (void)size;
  if (zero) { /* the whole block: rezalloc relies on it */
    if (is_zero) *smi_block_link(page, p) = NULL;
    else memset(p, 0, page->block_size);
  }
  return p;
}

static void *malloc_generic_locked(sm_heap_t *heap, size_t size, size_t bin, bool zero, bool may_borrow) {
  size_t calls = atomic_load_explicit(&heap->slow_calls, memory_order_relaxed) + 1;
  atomic_store_explicit(&heap->slow_calls, calls, memory_order_relaxed);
  if (atomic_load_explicit(&heap->thread_delayed_free, memory_order_relaxed) != NULL) smi_heap_delayed_free(heap);
  if (heap->full_have_free) smi_heap_unfull_flagged(heap);
  if (calls >= heap->retired_next) smi_heap_retired_collect(heap, false); /* a kept page has expired */
  smi_segments_purge_due(heap->tld);
  if (sm_unlikely(size > SM_LARGE_OBJ_MAX)) return smi_huge_alloc(heap, size, 0, zero);
  for (;;) { /* once more after a corrupted list (checked builds) */
    sm_page_t *page = page_queue_find_free(heap, bin, may_borrow);
    if (sm_unlikely(page == NULL)) return smi_enomem();
    void *p = page_pop_zero(page, size, zero);
    if (p != NULL) return p;
  }
}

#if !SM_CHECK_FREES || SM_INLINE_CHECKS
/* The bin's first page ran out, and its owner freed blocks into it: local_free becomes `free`
 * without the slow path (its lock, its clock reading for due purges, its checks), unless the slow
 * path has work waiting (delayed frees, blocks in full pages, a deferred-free hook), its
 * statistics would be folded into the heap's (the purger may be doing that under the lock), or
 * the other threads' list is the longer one. A page kept empty on a deadline (retire_ticks) stays
 * kept, its deadline moved on: a loop that frees each block before its next malloc empties its
 * page at every free, and clearing the mark here made the next of those frees keep the page
 * again (free_retire), once per refill (8% of the malloc/free pairs microbenchmark's
 * instructions); an expired page that is in use just loses its mark (smi_heap_retired_collect).
 * Every 16th refill takes the slow path anyway, so due purges and expired pages are still seen.
 * A page with few blocks carved carves more instead (SM_CYCLE_MIN), its local_free left waiting.
 * The purger never touches a bin's first page, so no lock is needed. The secure build (with
 * `shuffle` on) does it only while at least SM_SHUFFLE_GROUP blocks wait, and as its slow path
 * would then (page_collect_or_extend): starting with a random one of them. */
static inline __attribute__((always_inline)) bool page_refill_quick(sm_heap_t *heap, sm_page_t *page) {
  if (page->local_free == NULL || heap->locked_access ||
      __atomic_load_n(&heap->full_have_free, __ATOMIC_RELAXED) ||
      atomic_load_explicit(&heap->thread_delayed_free, memory_order_relaxed) != NULL || smi_deferred_free_set() ||
      (++heap->quick_refills & 15) == 0)
    return false;
  uint32_t on_local = (uint32_t)(page->capacity - page->used); /* free is empty: all on local_free */
  uintptr_t tf = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
  uint32_t freed = (uint32_t)page->stat_freed + on_local; /* a fold is the slow path's */
  if (smi_tf_count(tf) > on_local || freed >= SM_STATS_FOLD_BLOCKS) return false;
#if SM_SECURE
  /* what the slow path would do (page_collect_or_extend) when this many blocks wait */
  uint64_t r = shuffle_random(heap);
  if (on_local < SM_SHUFFLE_GROUP && r != 0) return false;
  page_reuse_from_random(page, r, on_local);
#else
  if (page->capacity < SM_CYCLE_MIN && page->block_size <= SM_DIRECT_MAX && smi_page_is_expandable(page)) {
    page_extend(page); /* a short cycle: carve more first (SM_CYCLE_MIN); local_free waits */
  } else {
    page->stat_freed = (uint16_t)freed;
    page_free_from(page, page->local_free);
  }
#endif
  if (page->retire_ticks != 0) page->purge_at = retire_deadline(heap, page);
  return true;
}
#endif

/* The slow path of every allocation: thread start-up, delayed frees, retired pages, huge blocks
 * and the page search. `zero`: the block must be zeroed (calloc); `may_borrow`: a block of the
 * next class will do (page_borrow); `quick_tried`: smi_malloc_refill tried the bin's first page. */
static void *malloc_generic(sm_heap_t *heap, size_t size, bool zero, bool may_borrow, bool quick_tried) {
  if (sm_unlikely(heap == &smi_heap_empty)) {
    heap = smi_thread_init();
    if (heap == NULL) return smi_enomem();
  }
  size_t bin = smi_bin_of(size);
  /* sizes above the direct table: the first page of the bin, while it has blocks (owner-only
   * state that the purger never touches, so no lock) */
  sm_page_t *page = size <= SM_LARGE_OBJ_MAX ? heap->pages[bin].first : NULL;
#if !SM_CHECK_FREES || SM_INLINE_CHECKS
  if (page != NULL && page->free == NULL && !quick_tried && page_refill_quick(heap, page)) {
    heap_unborrow(heap, bin);
    void *p = page_pop_zero(page, size, zero);
    if (p != NULL) return p; /* NULL: a corrupted list (reported), the slow path looks again */
  }
#else
  (void)quick_tried;
#endif
  if (page != NULL && page->free != NULL) {
    heap_unborrow(heap, bin);
    void *p = page_pop_zero(page, size, zero);
    if (p != NULL) return p;
  }
  bool lock = !heap->locked_access; /* a locked part's caller holds its lock already */
  if (lock) {
    smi_deferred_free(false);
    smi_heap_lock(heap);
  }
  void *p = malloc_generic_locked(heap, size, bin, zero, may_borrow);
  if (lock) {
    bool worth = smi_purger_worth(heap->tld, true);
    smi_heap_unlock(heap);
    smi_purger_consider(worth, true);
  }
  return p;
}

void *smi_malloc_generic(sm_heap_t *heap, size_t size, bool zero) { return malloc_generic(heap, size, zero, true, false); }

/* The small-size fast path's miss: `page`, the direct table's page for size, has no block on
 * `free`. While it is the first page of size's own bin (not a lender, not the empty page), its
 * quick refill needs neither the bin's computation nor malloc_generic's saved registers: a loop
 * that frees each block before its next malloc refills every few pairs (once a class's blocks
 * have all been used once), and this took the refill from 120 instructions to about 60. */
void *smi_malloc_refill(sm_heap_t *heap, sm_page_t *page, size_t size) {
  bool tried = false;
#if !SM_CHECK_FREES || SM_INLINE_CHECKS
  if (page->local_free != NULL && (page->bin == 0 || size > smi_bin_size(page->bin - 1)) &&
      heap->pages[page->bin].first == page) {
    /* the generic path must not try it again: that would also skip the refill that every 16th
     * one leaves to the slow path (its due purges and expired pages) */
    tried = true;
    if (page_refill_quick(heap, page)) {
      void *p = smi_page_pop(page, page->free);
      if (!SM_CHECK_FREES || sm_likely(p != NULL)) return p;
    }
  }
#else
  (void)page;
#endif
  return malloc_generic(heap, size, false, true, tried);
}

/* a block of exactly size's class, never a borrowed one (aligned allocation) */
void *smi_malloc_exact(sm_heap_t *heap, size_t size, bool zero) { return malloc_generic(heap, size, zero, false, false); }
