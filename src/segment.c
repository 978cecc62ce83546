/* segment.c: segments (SEGMENT_SIZE-aligned regions from the OS) and the pages in them.
 *
 *   small segment   64 pages of 64 KiB  (blocks up to 16 KiB)
 *   medium segment  16 pages of 256 KiB (blocks up to 64 KiB)
 *   large segment   64 slots of 64 KiB  (each block above 64 KiB, up to 2 MiB: one page spanning a few slots)
 *   huge segment     1 block in a mapping of whole segments (never in a heap queue)
 * The header (segment_t and its page_t array) fills the first OS page(s); page 0 starts after it.
 *
 * A thread owns its segments (segment->thread_id). It keeps those with an unused page in a queue
 * per kind (large ones by their longest free run), whole unused segments go to a cache shared by
 * all threads, and a list of unused pages whose memory is
 * given back (purged) once purge_delay ms have passed without reuse. When a thread ends, its
 * segments are abandoned onto a global list and reclaimed by threads that need pages.
 * No lock is held across a system call: the only lock guards the abandoned list's two pointers. */
#include "internal.h"


/* ---- segment map: which SEGMENT_SIZE chunks start a segment (for validity checks) ---- */
#define SM_MAP_CHUNKS ((size_t)1 << (47 - SM_SEGMENT_SHIFT))
static SM_BSS_LARGE _Atomic(uint64_t) segment_map[SM_MAP_CHUNKS / 64];

static void segment_map_set(const sm_segment_t *segment, bool on) {
  size_t chunk = (uintptr_t)segment >> SM_SEGMENT_SHIFT;
  if (chunk >= SM_MAP_CHUNKS) return;
  uint64_t bit = (uint64_t)1 << (chunk % 64);
  if (on) atomic_fetch_or_explicit(&segment_map[chunk / 64], bit, memory_order_release);
  else atomic_fetch_and_explicit(&segment_map[chunk / 64], ~bit, memory_order_release);
}

bool smi_segment_is_registered(const sm_segment_t *segment) {
  size_t chunk = (uintptr_t)segment >> SM_SEGMENT_SHIFT;
  if (((uintptr_t)segment & SM_SEGMENT_MASK) != 0 || chunk >= SM_MAP_CHUNKS) return false;
  uint64_t word = atomic_load_explicit(&segment_map[chunk / 64], memory_order_acquire);
  return (word >> (chunk % 64)) & 1;
}

/* The segment containing p, also for interior pointers of huge blocks (walks the map back). */
const sm_segment_t *smi_segment_containing(const void *p) {
  const sm_segment_t *seg = smi_ptr_segment(p);
  for (size_t steps = 0; steps < 4096 && (uintptr_t)seg >= SM_SEGMENT_SIZE; steps++) {
    if (smi_segment_is_registered(seg)) return (uintptr_t)p < (uintptr_t)seg + seg->size ? seg : NULL;
    seg = (const sm_segment_t *)((uintptr_t)seg - SM_SEGMENT_SIZE);
  }
  return NULL;
}

bool sm_check_owned(const void *p) {
  if (p == NULL) return false;
  const sm_segment_t *seg = smi_segment_containing(p);
  return seg != NULL && (const uint8_t *)p >= smi_page_start(&seg->pages[0]);
}

/* ---- queues of segments ---- */

static void segment_queue_push(sm_segment_queue_t *q, sm_segment_t *s) {
  s->prev = NULL;
  s->next = q->first;
  if (q->first != NULL) q->first->prev = s;
  else q->last = s;
  q->first = s;
}

static void segment_queue_remove(sm_segment_queue_t *q, sm_segment_t *s) {
  if (s->prev != NULL) s->prev->next = s->next;
  else q->first = s->next;
  if (s->next != NULL) s->next->prev = s->prev;
  else q->last = s->prev;
  s->next = s->prev = NULL;
}

/* the tld queue a segment with room belongs in (huge ones have none) */
static sm_segment_queue_t *segment_free_queue(sm_tld_t *tld, const sm_segment_t *s) {
  return s->kind == SM_SEGMENT_SMALL ? &tld->small_free : s->kind == SM_SEGMENT_MEDIUM ? &tld->medium_free
       : s->kind == SM_SEGMENT_LARGE ? &tld->large_free[s->span_free_max] : NULL;
}
static bool tld_has_room(const sm_tld_t *tld, int kind) {
  if (kind == SM_SEGMENT_SMALL) return tld->small_free.first != NULL;
  if (kind == SM_SEGMENT_MEDIUM) return tld->medium_free.first != NULL;
  for (size_t run = 1; run <= SM_SMALL_PAGES_PER_SEGMENT; run++)
    if (tld->large_free[run].first != NULL) return true;
  return false;
}

/* Large segments give each block a span of consecutive 64 KiB slots (like small pages), so that
 * blocks of every large size share segments and a freed span serves any other size: one segment
 * per large size class cost mstress 1.7x mimalloc's peak RSS and a page fault storm. A span's
 * descriptor is its first slot's; the other slots' descriptors are never in use, so a pointer
 * into them is not a block (aligned allocation keeps interior pointers out of large pages). */
static uint64_t span_mask(size_t index, size_t slots) {
  return (slots >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << slots) - 1)) << index;
}
static size_t page_slots(const sm_segment_t *segment, const sm_page_t *page) {
  return segment->kind == SM_SEGMENT_LARGE ? page->span_slots : 1;
}
/* the page whose area holds p (in a large segment: the span covering p), or NULL. Any thread may
 * ask (sm_heap_contains_block) while the owner changes other spans: the map is read atomically,
 * and a span that went away meanwhile cannot lead the walk out of the descriptors. */
const sm_page_t *smi_segment_page_covering(const sm_segment_t *segment, const void *p) {
  if (segment->kind == SM_SEGMENT_HUGE) return &segment->pages[0];
  const sm_page_t *page = smi_segment_page_of(segment, p);
  if (segment->kind != SM_SEGMENT_LARGE) return page;
  size_t index = (size_t)(page - segment->pages);
  if (((__atomic_load_n(&segment->span_map, __ATOMIC_RELAXED) >> index) & 1) == 0) return NULL;
  while (!page->in_use && page > segment->pages) page--; /* slot 0 of a covered run is a span's first slot */
  return page;
}
/* span_map changes: remember its longest run of unused slots, and keep a queued segment in the
 * queue of that run length (tld may be NULL for a segment no thread owns) */
static void span_map_set(sm_tld_t *tld, sm_segment_t *segment, uint64_t map) {
  bool queued = tld != NULL && segment->in_free_queue;
  if (queued) segment_queue_remove(segment_free_queue(tld, segment), segment);
  __atomic_store_n(&segment->span_map, map, __ATOMIC_RELAXED); /* read by other threads: above */
  size_t run = 0;
  for (uint64_t x = ~map & span_mask(0, segment->page_count); x != 0; x &= x << 1) run++;
  segment->span_free_max = run;
  if (queued) segment_queue_push(segment_free_queue(tld, segment), segment);
}
static bool segment_is_full(const sm_segment_t *segment) {
  return segment->kind == SM_SEGMENT_LARGE ? segment->span_map == span_mask(0, segment->page_count)
                                           : segment->used == segment->page_count;
}

static void segment_os_free(sm_segment_t *segment) {
  if (segment->kind != SM_SEGMENT_HUGE) smi_stat_inc(SM_STAT_SEGMENT_UNMAP);
  segment_map_set(segment, false);
  smi_mem_free(segment->map_start, segment->map_size, segment->purged_bytes);
}

/* ---- adaptive purge delay ----
 * Memory purged and then taken again within the delay means the program frees and reuses memory in
 * a rhythm slower than the delay: each purge costs a round of page faults (and, with several
 * threads, TLB shootdowns) for nothing. Such a reuse doubles the delay, up to 8x; a second without
 * one halves it again. The rhythm is the process's, not a thread's: new threads start with it,
 * and threads that share cores with others run their rhythm slower in wall-clock time (with a
 * per-thread 4x, SHSH swing-8 on 2 cores still made 900 purges a run, and 770 of the purged pages
 * were taken again within 100 ms). Two rhythms: pages (a thread's purge list) and the segment
 * cache, which counts only a segment taken by another thread than the one that left it (threads
 * that come and go in rounds, as in mstress): a single-threaded program that frees and retakes
 * segments (gcc) would otherwise hold cached segments longer and raise its peak. */
#define SM_PURGE_SCALE_MAX 8
#define SM_PURGE_SCALE_DECAY_MS 1000

typedef struct purge_rhythm_s {
  _Atomic(uint32_t) scale; /* the delay's multiplier */
  _Atomic(uint64_t) at;    /* when it last changed */
} purge_rhythm_t;
static purge_rhythm_t page_rhythm = {1, 0}, cache_rhythm = {1, 0};

static uint64_t rhythm_delay(purge_rhythm_t *r) {
  return (uint64_t)smi_option(sm_option_purge_delay) * atomic_load_explicit(&r->scale, memory_order_relaxed);
}

/* memory purged at purged_at is taken again at now (relaxed: a lost update only delays a step) */
static void rhythm_note_reuse(purge_rhythm_t *r, uint64_t purged_at, uint64_t now) {
  if (smi_option(sm_option_purge_delay) <= 0 || now >= purged_at + rhythm_delay(r)) return;
  uint32_t scale = atomic_load_explicit(&r->scale, memory_order_relaxed);
  if (scale < SM_PURGE_SCALE_MAX) atomic_store_explicit(&r->scale, scale * 2, memory_order_relaxed);
  atomic_store_explicit(&r->at, now, memory_order_relaxed);
}

static void rhythm_decay(purge_rhythm_t *r, uint64_t now) {
  uint32_t scale = atomic_load_explicit(&r->scale, memory_order_relaxed);
  if (scale > 1 && now >= atomic_load_explicit(&r->at, memory_order_relaxed) + SM_PURGE_SCALE_DECAY_MS) {
    atomic_store_explicit(&r->scale, scale / 2, memory_order_relaxed);
    atomic_store_explicit(&r->at, now, memory_order_relaxed);
  }
}

/* ---- the segment cache: unused mappings (whole segments, huge ones too), shared by all threads
 * A fixed array of slots, each holding one mapping or 0. A slot word is the segment address with
 * its size in SEGMENT_SIZE units in the low bits (segments are aligned), so a thread can pick a
 * fitting entry without touching memory it does not own; an entry changes hands with one CAS, so
 * there is no lock and no ABA problem. Entries are purged (one-segment ones) or unmapped (larger)
 * once the purge delay has passed, by whichever thread sweeps next. */
/* Without a purger (one thread), nothing purges the cache until the program calls in again: a
 * program that frees a big buffer and then computes or sleeps would keep it all. Freed huge
 * mappings larger than this are unmapped at once then, as glibc does above its mmap threshold
 * (32 MiB at most) and jemalloc above 8 MiB; smaller ones still wait to be reused. */
#define SM_HUGE_QUIET_MAX ((size_t)64 << 20)
#define SM_CACHE_SLOTS 64
#define SM_CACHE_MAX_UNITS 64 /* at most 256 MiB of address space waits in the cache */
static _Atomic(uintptr_t) segment_cache[SM_CACHE_SLOTS];
static _Atomic(size_t) segment_cache_count;
static _Atomic(size_t) segment_cache_units;
static _Atomic(size_t) segment_cache_resident; /* entries whose memory is still there */
static _Atomic(size_t) segment_cache_resident_bytes; /* their memory not yet purged */
/* Without a purger, resident cached memory beyond this (plus the slack) is purged at once, the
 * oldest first, as pages are beyond SM_PURGE_LONE_MAX: a program that freed four 50 MiB buffers
 * and then waited kept all 200 MiB. The entries stay (their address space, for reuse) and keep
 * their deadline; what the program needs again soon after raises the slack (cache_slack_add). */
#define SM_CACHE_LONE_MAX ((size_t)16 << 20)
static _Atomic(size_t) segment_cache_slack;
static _Atomic(uint64_t) segment_cache_trimmed_at; /* when cache_trim_lone last purged (ms; 0: never) */
static _Atomic(size_t) segment_cache_trimmed_from;  /* the resident memory that trim found */
/* an entry's low bits: its size in units, and whether its memory is still resident (not purged) */
#define SM_CACHE_RESIDENT ((uintptr_t)1 << 8)
#define SM_CACHE_UNITS_MASK (SM_CACHE_RESIDENT - 1)
_Static_assert(SM_CACHE_MAX_UNITS <= SM_CACHE_UNITS_MASK, "an entry's size fits below its resident bit");
static _Atomic(uint64_t) segment_cache_sweep_at = UINT64_MAX; /* earliest pending purge */

bool smi_segment_cache_pending(void) {
  return atomic_load_explicit(&segment_cache_sweep_at, memory_order_relaxed) != UINT64_MAX;
}

static size_t cache_units(const sm_segment_t *segment) { return segment->map_size >> SM_SEGMENT_SHIFT; }

/* the memory of a cached segment that is still resident (not purged) */
static size_t cache_resident_bytes(const sm_segment_t *segment) {
  return segment->purged ? 0 : segment->map_size - segment->purged_bytes;
}

/* an entry left the cache (it is the caller's now) */
static void cache_count_taken(uintptr_t entry) {
  size_t units = entry & SM_CACHE_UNITS_MASK;
  atomic_fetch_sub_explicit(&segment_cache_count, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&segment_cache_units, units, memory_order_relaxed);
  if (entry & SM_CACHE_RESIDENT) {
    atomic_fetch_sub_explicit(&segment_cache_resident, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&segment_cache_resident_bytes,
                              cache_resident_bytes((sm_segment_t *)(entry & ~(uintptr_t)SM_SEGMENT_MASK)),
                              memory_order_relaxed);
  }
  smi_count_add(SM_COUNT_CACHED, -(int64_t)(units << SM_SEGMENT_SHIFT));
}

/* a sweep runs (its claim on the deadline) */
#define SM_CACHE_SWEEPING (UINT64_MAX - 1)
/* the sweep deadline comes no later than `due` */
static void cache_arm(uint64_t due) {
  uint64_t at = atomic_load_explicit(&segment_cache_sweep_at, memory_order_relaxed);
  while (due < at && !atomic_compare_exchange_weak(&segment_cache_sweep_at, &at, due)) {}
}

/* Every push arms the sweep for the entry's deadline, also the pushes back of entries taken out
 * for a while (a trim, a split, a sweep): until 2026-11-28 only a release did, and a sweep that
 * passed an entry's slot while it was out could store a later deadline, or none (found by
 * reading the code; not seen to happen). */
static bool segment_cache_push(sm_segment_t *segment) {
  sm_assert(segment->size == segment->map_size); /* a cached segment's purge covers its size */
  uint64_t due = segment->purged == SM_PURGED_DUE ? UINT64_MAX : segment->purge_at;
  size_t units = cache_units(segment);
  uintptr_t resident = segment->purged ? 0 : SM_CACHE_RESIDENT;
  size_t limit = (size_t)smi_option(sm_option_segment_cache);
  if (limit > SM_CACHE_SLOTS) limit = SM_CACHE_SLOTS;
  if ((uint8_t *)segment != segment->map_start || (segment->map_size & SM_SEGMENT_MASK) != 0 ||
      atomic_load_explicit(&segment_cache_count, memory_order_relaxed) >= limit ||
      atomic_load_explicit(&segment_cache_units, memory_order_relaxed) + units > SM_CACHE_MAX_UNITS)
    return false;
  size_t start = ((uintptr_t)segment >> SM_SEGMENT_SHIFT) % SM_CACHE_SLOTS, bytes = cache_resident_bytes(segment);
  for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
    uintptr_t expected = 0;
    if (atomic_compare_exchange_strong_explicit(&segment_cache[(start + i) % SM_CACHE_SLOTS], &expected,
                                                (uintptr_t)segment | resident | units, memory_order_release,
                                                memory_order_relaxed)) {
      atomic_fetch_add_explicit(&segment_cache_count, 1, memory_order_relaxed);
      if (resident) {
        atomic_fetch_add_explicit(&segment_cache_resident, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&segment_cache_resident_bytes, bytes, memory_order_relaxed);
      }
      atomic_fetch_add_explicit(&segment_cache_units, units, memory_order_relaxed);
      smi_count_add(SM_COUNT_CACHED, (int64_t)(units << SM_SEGMENT_SHIFT));
      cache_arm(due); /* (the segment may be another thread's by now: a local copy) */
      return true;
    }
  }
  return false;
}

/* take the entry out of its slot (one CAS); false if it changed meanwhile. reuse: to serve a
 * request (the statistic's cache hit), not to purge it (cache_trim_lone) */
static bool cache_take(_Atomic(uintptr_t) *slot, uintptr_t entry, bool reuse) {
  if (!atomic_compare_exchange_strong_explicit(slot, &entry, 0, memory_order_acquire, memory_order_relaxed)) return false;
  cache_count_taken(entry);
  if (reuse) smi_stat_inc(SM_STAT_SEGMENT_CACHE_HIT);
  return true;
}

/* take the cached mapping of min_units..max_units segments that fits best: the smallest one whose
 * memory is still resident, else the smallest one (a purged one costs its page faults again).
 * The scan starts at `start`, so threads looking for the same size spread over equal entries. */
static sm_segment_t *segment_cache_pop(size_t start, size_t min_units, size_t max_units) {
  for (int attempt = 0; attempt < 4; attempt++) {
    if (atomic_load_explicit(&segment_cache_count, memory_order_relaxed) == 0) return NULL;
    _Atomic(uintptr_t) *best = NULL;
    uintptr_t best_entry = 0;
    for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
      _Atomic(uintptr_t) *slot = &segment_cache[(start + i) % SM_CACHE_SLOTS];
      uintptr_t entry = atomic_load_explicit(slot, memory_order_relaxed);
      size_t units = entry & SM_CACHE_UNITS_MASK;
      if (entry == 0 || units < min_units || units > max_units) continue;
      uintptr_t resident = entry & SM_CACHE_RESIDENT, best_resident = best_entry & SM_CACHE_RESIDENT;
      if (best == NULL || resident > best_resident ||
          (resident == best_resident && units < (best_entry & SM_CACHE_UNITS_MASK))) {
        best = slot;
        best_entry = entry;
      }
    }
    if (best == NULL) return NULL;
    if (cache_take(best, best_entry, true)) return (sm_segment_t *)(best_entry & ~(uintptr_t)SM_SEGMENT_MASK);
  }
  return NULL;
}

#if SM_SECURE
static sm_segment_t *huge_move_guarded(sm_segment_t *segment, size_t offset, size_t old_size, size_t map_size);
#endif

/* The largest resident cached mapping of at most max_units segments, taken out of the cache and
 * the segment map, for its pages to be moved (mremap) into a huge block: plain OS memory only, and
 * only while there are no arenas (pinned and arena memory cannot be remapped, and a program that
 * reserved arenas wants its memory from them). Its memory then needs no new page faults, where
 * it would otherwise wait to be unmapped while fresh memory is faulted in. */
static sm_segment_t *segment_cache_pop_largest(size_t max_units) {
  if (atomic_load_explicit(&segment_cache_resident, memory_order_relaxed) == 0 || smi_arenas_count() > 0) return NULL;
  _Atomic(uintptr_t) *best = NULL;
  uintptr_t best_entry = 0;
  for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
    uintptr_t entry = atomic_load_explicit(&segment_cache[i], memory_order_relaxed);
    size_t n = entry & SM_CACHE_UNITS_MASK;
    if ((entry & SM_CACHE_RESIDENT) && n <= max_units && n > (best_entry & SM_CACHE_UNITS_MASK)) {
      best = &segment_cache[i];
      best_entry = entry;
    }
  }
  sm_segment_t *segment = (sm_segment_t *)(best_entry & ~(uintptr_t)SM_SEGMENT_MASK);
  if (best == NULL || smi_mem_is_pinned(segment) || !cache_take(best, best_entry, true)) return NULL;
  segment_map_set(segment, false);
  return segment;
}

/* a huge block larger than every cached mapping: the largest resident one, grown (its first
 * *old_size bytes hold what was there, the rest is fresh) */
static sm_segment_t *segment_cache_pop_grown(size_t units, size_t *old_size_out) {
  sm_segment_t *segment = segment_cache_pop_largest(units - 1);
  if (segment == NULL) return NULL;
  size_t old_size = segment->map_size;
  smi_mem_unpurged(segment->purged_bytes);
#if SM_SECURE /* its guard pages make it several mappings: the blocks' part moves on its own */
  sm_segment_t *grown = huge_move_guarded(segment, SM_HUGE_HEADER_SIZE, old_size, units << SM_SEGMENT_SHIFT);
#else
  sm_segment_t *grown = smi_mem_remap(segment, old_size, units << SM_SEGMENT_SHIFT, SM_SEGMENT_SIZE);
#endif
  if (grown == NULL) { /* it was taken from the cache: give it back rather than put it there again */
    smi_mem_free(segment, old_size, 0);
    return NULL;
  }
  grown->map_start = (uint8_t *)grown;
  grown->map_size = units << SM_SEGMENT_SHIFT;
  *old_size_out = old_size;
  return grown;
}

/* A huge block that realloc grew by remapping has a fresh tail [tail, tail + size), page faults
 * to come as the program writes it: the largest resident cached mapping that fits there lends
 * its pages instead, moved over the fresh ones (no copy; realloc leaves what is past the old size
 * unspecified, and a zeroing realloc clears it). In the secure build only the part between the
 * mapping's guard pages moves (it is one mapping; the guards must not land inside the block), to
 * the tail's start: the tail's own end guard stays, the rest of the mapping is unmapped. */
static void huge_fill_tail(uint8_t *tail, size_t size) {
  sm_segment_t *entry = segment_cache_pop_largest(size >> SM_SEGMENT_SHIFT);
  if (entry == NULL) return;
  size_t entry_size = entry->map_size, purged = entry->purged_bytes;
#if SM_SECURE
  size_t inner = entry_size - SM_HUGE_HEADER_SIZE - SM_GUARD_SIZE; /* <= size - SM_GUARD_SIZE */
  smi_os_move((uint8_t *)entry + SM_HUGE_HEADER_SIZE, inner, inner, tail, SM_UNMAP_GRACE);
  smi_mem_free(entry, entry_size, purged); /* what is left of it (a failed move: all of it) */
#else
  if (!smi_mem_move_into(entry, entry_size, purged, tail)) smi_mem_free(entry, entry_size, purged);
#endif
}

/* take the cached entry that starts at `at`, if its memory is resident and it has at least
 * `units` segments */
static sm_segment_t *segment_cache_take_at(const void *at, size_t units) {
  if (atomic_load_explicit(&segment_cache_resident, memory_order_relaxed) == 0) return NULL;
  for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
    uintptr_t entry = atomic_load_explicit(&segment_cache[i], memory_order_relaxed);
    if ((entry & ~(uintptr_t)SM_SEGMENT_MASK) != (uintptr_t)at) continue;
    bool fits = (entry & SM_CACHE_RESIDENT) && (entry & SM_CACHE_UNITS_MASK) >= units;
    return fits && cache_take(&segment_cache[i], entry, true) ? (sm_segment_t *)at : NULL;
  }
  return NULL;
}

/* A cached segment's memory past its header page, given back: a segment taken from the cache
 * after this reads as zero there (segment->purged). A kernel with larger pages than
 * SM_OS_PAGE_SIZE (16 or 64 KiB on some aarch64 systems) keeps the whole OS page that holds the
 * header: the rest of it is cleared by hand (it is resident anyway). */
static bool segment_purge_past_header(sm_segment_t *segment) {
  size_t os_page = smi_os_page_size();
  size_t kept = os_page > SM_OS_PAGE_SIZE ? os_page : SM_OS_PAGE_SIZE;
  if (!smi_os_purge((uint8_t *)segment + kept, segment->size - kept, true)) return false;
  if (kept > SM_OS_PAGE_SIZE) memset((uint8_t *)segment + SM_OS_PAGE_SIZE, 0, kept - SM_OS_PAGE_SIZE);
  return true;
}

/* A cached mapping's memory given back (the caller has taken it out of the cache); false if the
 * purge failed or cannot be trusted (pinned memory), and the mapping should be unmapped instead:
 * a purge that fails (MADV_DONTNEED on memory locked by mlockall: EINVAL) would leave the segment
 * marked as reading zero, and calloc would hand out old data. */
static bool cache_purge(sm_segment_t *segment) {
  if (smi_mem_is_pinned(segment) || !segment_purge_past_header(segment)) return false;
  smi_mem_purged(segment->size - SM_OS_PAGE_SIZE - segment->purged_bytes);
  segment->purged_bytes = segment->size - SM_OS_PAGE_SIZE;
  segment->purged = SM_PURGED_DUE;
  return true;
}

/* A cached mapping (taken out of the cache) ends at `keep`, a segment boundary; the part past it
 * becomes a mapping of its own, returned while it is resident (the caller caches or frees it), or
 * given back to the OS at once (NULL). */
static sm_segment_t *cache_split_tail(sm_segment_t *segment, size_t keep) {
  sm_segment_t *tail = (sm_segment_t *)((uint8_t *)segment + keep);
  size_t tail_size = segment->map_size - keep;
  bool resident = !segment->purged;
  uint64_t purge_at = segment->purge_at;
  uintptr_t cached_by = segment->cached_by;
  /* both: a cached segment's purge covers its size (segment_purge_past_header). Until 2026-11-28
   * only map_size shrank, and purging the start later zeroed whatever block had taken the end */
  segment->size = segment->map_size = keep;
#if SM_SECURE
  smi_os_protect((uint8_t *)segment + keep - SM_GUARD_SIZE, SM_GUARD_SIZE); /* the block's end guard */
#endif
  if (!resident) {
    smi_mem_free(tail, tail_size, 0);
    return NULL;
  }
  smi_track_undefined(tail, sizeof(*tail)); /* its header overlays the freed block (memory checkers) */
  memset(tail, 0, sizeof(*tail));
  tail->kind = SM_SEGMENT_HUGE;
  tail->map_start = (uint8_t *)tail;
  tail->size = tail->map_size = tail_size;
  tail->purge_at = purge_at;
  tail->cached_by = cached_by;
  segment_map_set(tail, true); /* cached segments stay registered, as a segment taken from here expects */
#if SM_SECURE
  smi_os_protect((uint8_t *)tail + SM_SECURE_HEADER_SIZE, SM_GUARD_SIZE); /* the tail's header guard */
#endif
  return tail;
}

/* No purger runs and the cache holds more resident memory than SM_CACHE_LONE_MAX plus the slack:
 * purge its oldest resident entries (the earliest deadlines) down to that, marked as purged
 * early with their deadline kept (segment_cache_note_taken). */
static void cache_trim_lone(uint64_t now) {
  sm_segment_t *taken[SM_CACHE_SLOTS];
  size_t n = 0, resident = 0;
  for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
    uintptr_t entry = atomic_load_explicit(&segment_cache[i], memory_order_relaxed);
    if (!(entry & SM_CACHE_RESIDENT) || !cache_take(&segment_cache[i], entry, false)) continue;
    sm_segment_t *segment = (sm_segment_t *)(entry & ~(uintptr_t)SM_SEGMENT_MASK);
    resident += cache_resident_bytes(segment);
    size_t k = n++; /* by deadline, oldest first */
    for (; k > 0 && taken[k - 1]->purge_at > segment->purge_at; k--) taken[k] = taken[k - 1];
    taken[k] = segment;
  }
  size_t keep = SM_CACHE_LONE_MAX + atomic_load_explicit(&segment_cache_slack, memory_order_relaxed);
  if (resident > keep) atomic_store_explicit(&segment_cache_trimmed_from, resident, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) {
    sm_segment_t *segment = taken[i];
    if (resident > keep) {
      /* an entry larger than the excess (a cached huge block) keeps what is under the bound: only
       * its end, in whole segments, is split off and purged (`large` purged 36 MiB for 16 over).
       * Not in arenas: there the pieces would scatter segments over the reservation, whose long
       * free runs huge blocks need (test-arena threads: no 400 MiB run left in 4 of 12 runs) */
      size_t over = smi_align_up(resident - keep, SM_SEGMENT_SIZE), bytes = cache_resident_bytes(segment);
      if (over < bytes && segment->purged_bytes == 0 && smi_arenas_count() == 0) {
        sm_segment_t *tail = cache_split_tail(segment, segment->map_size - over);
        if (!segment_cache_push(segment)) segment_os_free(segment);
        if (tail == NULL) continue; /* (not for a resident entry: its tail is resident too) */
        segment = tail;
      }
      resident -= cache_resident_bytes(segment);
      if (!cache_purge(segment)) {
        segment_os_free(segment);
        continue;
      }
      segment->purged = SM_PURGED_EXCHANGED; /* purge_at stays its deadline */
      atomic_store_explicit(&segment_cache_trimmed_at, now, memory_order_relaxed);
    }
    if (!segment_cache_push(segment)) segment_os_free(segment);
  }
}

/* The lone bound's slack grows by what the program needed again soon after a trim: an entry
 * purged early and taken before its deadline, and fresh memory mapped within a purge delay after
 * a trim. A program that reuses more than SM_CACHE_LONE_MAX of huge blocks in a rhythm then stops
 * paying page faults for it (`large`: 16% more page faults and 12% more time with early reuse
 * counted alone). Bounded by the most the cache holds. */
static void cache_slack_add(size_t bytes) {
  size_t slack = atomic_load_explicit(&segment_cache_slack, memory_order_relaxed) + bytes;
  size_t from = atomic_load_explicit(&segment_cache_trimmed_from, memory_order_relaxed);
  if (from > SM_CACHE_LONE_MAX && slack < from - SM_CACHE_LONE_MAX) slack = from - SM_CACHE_LONE_MAX;
  if (slack > (size_t)SM_CACHE_MAX_UNITS << SM_SEGMENT_SHIFT) slack = (size_t)SM_CACHE_MAX_UNITS << SM_SEGMENT_SHIFT;
  atomic_store_explicit(&segment_cache_slack, slack, memory_order_relaxed);
}

/* A cached segment was taken: one purged early, before its deadline, is needed again */
static void segment_cache_note_taken(const sm_segment_t *segment) {
  if (segment->purged == SM_PURGED_EXCHANGED && smi_os_now_ms() < segment->purge_at) cache_slack_add(segment->map_size);
}

/* Fresh memory (`bytes`) is about to be faulted in where the cache could not serve: within a
 * purge delay of a trim, what the trim purged might have served it */
static void segment_cache_note_fresh(size_t bytes) {
  uint64_t at = atomic_load_explicit(&segment_cache_trimmed_at, memory_order_relaxed);
  if (at != 0 && smi_os_now_ms() < at + (uint64_t)smi_option(sm_option_purge_delay)) cache_slack_add(bytes);
}

/* Purge (or unmap) cached mappings whose delay has passed (now = UINT64_MAX: all of them); with
 * force, unmap them all. */
static void segment_cache_sweep(uint64_t now, bool force) {
  uint64_t at = atomic_load_explicit(&segment_cache_sweep_at, memory_order_relaxed);
  if (!force && now != UINT64_MAX &&
      (now < at || !atomic_compare_exchange_strong(&segment_cache_sweep_at, &at, SM_CACHE_SWEEPING))) return;
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < SM_CACHE_SLOTS; i++) {
    _Atomic(uintptr_t) *slot = &segment_cache[i];
    uintptr_t entry = atomic_load_explicit(slot, memory_order_relaxed);
    if (entry == 0 || !atomic_compare_exchange_strong_explicit(slot, &entry, 0, memory_order_acquire, memory_order_relaxed))
      continue;
    sm_segment_t *segment = (sm_segment_t *)(entry & ~(uintptr_t)SM_SEGMENT_MASK);
    cache_count_taken(entry);
    /* after the delay, one-segment entries are purged and larger ones (huge blocks) unmapped;
     * an entry purged early (cache_trim_lone) keeps its deadline until then */
    bool multi = segment->map_size > SM_SEGMENT_SIZE;
    uint64_t due = segment->purge_at;
    bool expired = force || (segment->purged != SM_PURGED_DUE && due <= now);
    /* a purge that fails (MADV_DONTNEED on memory locked by mlockall: EINVAL) would leave the
     * segment marked as reading zero, and calloc would hand out old data: unmap it instead */
    if (expired && (force || multi || (!segment->purged && !cache_purge(segment)))) {
      segment_os_free(segment);
      continue;
    }
    if (expired) {
      segment->purged = SM_PURGED_DUE;
      segment->purge_at = now == UINT64_MAX ? 0 : now; /* from now on: when it was purged (rhythm_note_reuse) */
    }
    if (segment->purged != SM_PURGED_DUE && due < next) next = due;
    if (!segment_cache_push(segment)) segment_os_free(segment);
  }
  /* keep an earlier deadline that a push set meanwhile */
  uint64_t cur = atomic_load_explicit(&segment_cache_sweep_at, memory_order_relaxed);
  while ((cur == SM_CACHE_SWEEPING || cur > next) && !atomic_compare_exchange_weak(&segment_cache_sweep_at, &cur, next)) {}
}

/* An unused mapping goes to the cache (to be purged after the delay) or back to the OS. */
static void segment_cache_release(sm_segment_t *segment, uint64_t now) {
  long delay = smi_option(sm_option_purge_delay);
  segment->cached_by = atomic_load_explicit(&segment->thread_id, memory_order_relaxed);
  atomic_store_explicit(&segment->thread_id, 0, memory_order_relaxed);
  bool purged = false; /* its memory still holds what was there (not zero) */
  /* -1: never purged. Huge mappings keep the plain delay: holding them 3 delays made `large` 1.6x
   * faster but its peak RSS 1.3x higher, above mimalloc's */
  uint64_t purge_at = delay < 0 ? UINT64_MAX
                    : now + (segment->map_size > SM_SEGMENT_SIZE ? (uint64_t)delay : rhythm_delay(&cache_rhythm));
  segment->purged = purged;
  segment->purge_at = purge_at;
  /* memory of an arena that heaps are made in goes straight back to it: the cache serves every
   * thread, and those heaps never take from it */
  if (delay == 0 || smi_mem_arena_has_heaps(segment) || !segment_cache_push(segment)) {
    segment_os_free(segment);
    return;
  }
  /* the segment may already be someone else's: only local copies from here on */
  if (delay > 0 && !smi_purger_running() &&
      atomic_load_explicit(&segment_cache_resident_bytes, memory_order_relaxed) >
          SM_CACHE_LONE_MAX + atomic_load_explicit(&segment_cache_slack, memory_order_relaxed))
    cache_trim_lone(now);
}

void smi_segment_cache_flush(void) { segment_cache_sweep(0, true); }
void smi_segment_cache_purge_all(void) { segment_cache_sweep(UINT64_MAX, false); }

void smi_segment_cache_sweep_due(void) {
  if (smi_segment_cache_pending()) segment_cache_sweep(smi_os_now_ms(), false);
}

/* When the OS refuses (address space exhausted, RLIMIT_AS, memory_limit), give back the cached
 * memory and try once more before reporting ENOMEM: also for a heap made in an arena, which takes
 * nothing from the cache but whose commits count against memory_limit (until 2026-11-28 it was
 * refused with the cache full). */
static void *os_alloc_or_flush(size_t size, size_t alignment, size_t offset, bool avoid_pinned, int arena_id, bool *zero) {
  void *p = smi_mem_alloc_ex(size, alignment, offset, avoid_pinned, arena_id, zero);
  if (p == NULL && atomic_load_explicit(&segment_cache_count, memory_order_relaxed) > 0) {
    smi_segment_cache_flush();
    p = smi_mem_alloc_ex(size, alignment, offset, avoid_pinned, arena_id, zero);
  }
  /* An exclusive arena's segments that emptied while abandoned (a deleted heap's blocks, handed
   * to a thread that has ended) go back to it only when someone visits them; with no purger,
   * nobody may come (until 2026-11-28 the arena's heaps got ENOMEM with the arena all but empty) */
  if (p == NULL && arena_id != 0 && smi_segments_abandoned_any() && smi_fork_guard_enter()) {
    smi_segments_visit_abandoned(SIZE_MAX, true);
    smi_fork_guard_leave();
    p = smi_mem_alloc_ex(size, alignment, offset, avoid_pinned, arena_id, zero);
  }
  return p;
}

/* Segments of an exclusive arena serve only the heaps made in it. Another tld can come to own one
 * (sm_heap_delete hands the pages to the deleting thread's heap; that thread's segments may be
 * abandoned and reclaimed): it keeps the pages it got, but never takes an unused page of such a
 * segment (they are purged at once instead of waiting on its purge list) nor keeps the segment
 * once it is empty, nor one of its pages as its bin's only page (smi_page_retire_keep). The test
 * is smi_tld_may_carve (internal.h). */

/* ---- purging unused pages after a delay ---- */


static uint64_t tld_now(sm_tld_t *tld) { return tld->now_ms = smi_os_now_ms(); }

/* bytes of `slots` page slots from `page` on: the first one starts after the header, the
 * segment's last one ends before its guard */
static size_t span_area(const sm_segment_t *segment, const sm_page_t *page, size_t slots) {
  size_t index = (size_t)(page - segment->pages);
  size_t unit = (size_t)1 << (segment->kind <= SM_SEGMENT_LARGE ? segment->page_shift : SM_SEGMENT_SHIFT);
  uint8_t *end = (uint8_t *)segment + (index + slots) * unit;
  if (index + slots == segment->page_count) end -= SM_GUARD_SIZE;
  return (size_t)(end - smi_page_start(page));
}
static size_t page_area(const sm_segment_t *segment, const sm_page_t *page) {
  return span_area(segment, page, page_slots(segment, page));
}

static void purge_list_remove(sm_tld_t *tld, sm_page_t *page) {
  tld->purge_bytes -= page_area(smi_page_segment(page), page);
  if (page->prev != NULL) page->prev->next = page->next;
  else tld->purge_first = page->next;
  if (page->next != NULL) page->next->prev = page->prev;
  else tld->purge_last = page->prev;
  page->next = page->prev = NULL;
  page->purge_pending = 0;
}

/* Unused pages are purged in runs: neighbours in one system call, and so (with several threads)
 * in one TLB shootdown. A thread ending with 63 unused pages in a segment made 63 calls. A run
 * lies in one segment; `now`, the purge time, is kept in each page's purge_at to notice a page
 * that is reused right after its purge. */
typedef struct purge_run_s {
  sm_segment_t *segment; /* NULL: empty */
  sm_page_t *first;
  size_t slots;
  uint64_t now;
  uint8_t mark; /* is_purged of its slots: SM_PURGED_DUE or SM_PURGED_EXCHANGED */
} purge_run_t;

static void purge_run_flush(purge_run_t *run) {
  sm_segment_t *segment = run->segment;
  if (segment == NULL) return;
  run->segment = NULL;
  bool zero = smi_os_purge(smi_page_start(run->first), span_area(segment, run->first, run->slots),
                           smi_option(sm_option_purge_decommits) != 0);
  for (sm_page_t *slot = run->first; slot < run->first + run->slots; slot++) { /* kept per slot: spans change */
    slot->purge_at = run->now;
    slot->mem_is_zero = zero;
    if (!slot->is_purged) {
      slot->is_purged = run->mark;
      size_t area = span_area(segment, slot, 1);
      segment->purged_bytes += area;
      smi_mem_purged(area);
    }
  }
}

static void purge_run_add(purge_run_t *run, sm_segment_t *segment, sm_page_t *page, uint64_t now) {
  if (smi_mem_is_pinned(segment)) return; /* huge OS pages: cannot be purged */
  smi_stat_inc(SM_STAT_PAGE_PURGE);
  size_t slots = page_slots(segment, page);
  if (run->segment == segment && run->first + run->slots == page && run->now == now) {
    run->slots += slots;
    return;
  }
  purge_run_flush(run);
  *run = (purge_run_t){segment, page, slots, now, run->mark};
}

static void page_purge(sm_segment_t *segment, sm_page_t *page, uint64_t now) {
  purge_run_t run = {NULL, NULL, 0, 0, SM_PURGED_DUE};
  purge_run_add(&run, segment, page, now);
  purge_run_flush(&run);
}

/* the list stays in deadline order (the delay varies): insert from the back, usually at it */
static void purge_list_insert(sm_tld_t *tld, sm_page_t *page) {
  page->purge_pending = 1;
  tld->purge_bytes += page_area(smi_page_segment(page), page);
  sm_page_t *after = tld->purge_last;
  while (after != NULL && after->purge_at > page->purge_at) after = after->prev;
  page->prev = after;
  page->next = after != NULL ? after->next : tld->purge_first;
  if (page->next != NULL) page->next->prev = page;
  else tld->purge_last = page;
  if (after != NULL) after->next = page;
  else tld->purge_first = page;
}

#define SM_PURGE_BATCH 64 /* expired pages sorted at a time */

/* A thread with no purger beside it (the only thread) may go quiet right after a burst of frees,
 * and what then waits out its delay stays for good: bursts-1 (bench/src/bursts.c) ended its first
 * idle phase at 274 MiB with 21 MiB live, its frees all within the 10 ms delay. So beyond this
 * much waiting (plus the exchange slack), the oldest pages go at once, as in an exchange: taken
 * again before their delay would have passed, they raise the slack, so a program that frees and
 * reuses more than this in a rhythm stops paying for it. */
#define SM_PURGE_LONE_MAX ((size_t)16 * 1024 * 1024)
static void purge_exchange(sm_tld_t *tld, size_t bytes);

/* Purge what has waited long enough (everything with force). Bounded by what is pending. */
void smi_segments_purge_expired(sm_tld_t *tld, bool force) {
  if (!force && tld->purge_bytes > SM_PURGE_LONE_MAX + tld->exchange_slack && !smi_purger_running())
    purge_exchange(tld, tld->purge_bytes - SM_PURGE_LONE_MAX - tld->exchange_slack);
  uint64_t now = tld_now(tld);
  sm_page_t *batch[SM_PURGE_BATCH], *page;
  size_t n;
  do { /* in batches, each in address order, so that neighbours form runs */
    for (n = 0; n < SM_PURGE_BATCH && (page = tld->purge_first) != NULL && (force || page->purge_at <= now); n++) {
      purge_list_remove(tld, page);
      size_t i = n;
      for (; i > 0 && (uintptr_t)batch[i - 1] > (uintptr_t)page; i--) batch[i] = batch[i - 1];
      batch[i] = page;
    }
    purge_run_t run = {NULL, NULL, 0, 0, SM_PURGED_DUE};
    for (size_t i = 0; i < n; i++) purge_run_add(&run, smi_page_segment(batch[i]), batch[i], now);
    purge_run_flush(&run);
  } while (n == SM_PURGE_BATCH);
  sm_assert(tld->purge_first != NULL || tld->purge_bytes == 0); /* the list's accounting */
  rhythm_decay(&page_rhythm, now);
  rhythm_decay(&cache_rhythm, now);
  if (smi_segment_cache_pending()) segment_cache_sweep(now, false);
}

/* Unused pages that still hold memory (not purged, not known zero) of a segment no thread's
 * purge list tracks (abandoned, or changing hands): fn gets each of them, or in a large segment
 * each run of such slots as one span (its first slot's descriptor, span_slots set), with the
 * earliest deadline of the run in purge_at. Deadlines survive abandonment this way, so the next
 * thread that adopts the segment can still reuse the memory without page faults. */
static void segment_dirty_unused(sm_segment_t *segment, void (*fn)(sm_segment_t *, sm_page_t *, void *), void *arg) {
  bool large = segment->kind == SM_SEGMENT_LARGE;
  for (size_t i = 0; i < segment->page_count;) {
    sm_page_t *first = &segment->pages[i];
    bool unused = large ? ((segment->span_map >> i) & 1) == 0 : !first->in_use;
    if (!unused || first->is_purged || first->mem_is_zero) {
      i += large && !unused ? segment->pages[i].span_slots : 1;
      continue;
    }
    uint64_t due = first->purge_at;
    size_t n = 1;
    while (large && i + n < segment->page_count && ((segment->span_map >> (i + n)) & 1) == 0 &&
           !first[n].is_purged && !first[n].mem_is_zero) {
      if (first[n].purge_at < due) due = first[n].purge_at;
      n++;
    }
    if (large) first->span_slots = (uint8_t)n;
    first->purge_at = due;
    fn(segment, first, arg);
    i += n;
  }
}

static void purge_list_join(sm_segment_t *segment, sm_page_t *page, void *tld) {
  (void)segment;
  purge_list_insert(tld, page);
}
static void page_purge_now(sm_segment_t *segment, sm_page_t *page, void *tld) { page_purge(segment, page, tld_now(tld)); }

/* ---- segment allocation ---- */

/* bytes before page 0's first block (header, and in secure builds its guard page) */
static size_t segment_header_size(size_t page_count) {
#if SM_SECURE
  (void)page_count;
  return SM_SECURE_HEADER_SIZE + SM_GUARD_SIZE;
#else
  return smi_align_up(sizeof(sm_segment_t) + page_count * sizeof(sm_page_t), SM_OS_PAGE_SIZE);
#endif
}

/* secure builds: guard pages after the header and at the end of a fresh mapping (cached ones
 * keep theirs: the positions are the same for every kind) */
static void segment_protect(sm_segment_t *segment, size_t size) {
#if SM_SECURE
  if (!smi_guard_pages()) return;
  if (!smi_os_protect((uint8_t *)segment + SM_SECURE_HEADER_SIZE, SM_GUARD_SIZE) ||
      !smi_os_protect((uint8_t *)segment + size - SM_GUARD_SIZE, SM_GUARD_SIZE))
    smi_warning("cannot set guard pages in segment %p (vm.max_map_count reached?)", (void *)segment);
#else
  (void)segment;
  (void)size;
#endif
}

/* pay a fresh mapping's page faults now (populate, eager_commit); not on its guard pages, where
 * they would be a segfault */
static void segment_populate(sm_segment_t *segment, size_t size) {
#if SM_SECURE
  uint8_t *blocks = (uint8_t *)segment + SM_SECURE_HEADER_SIZE + SM_GUARD_SIZE;
  smi_os_populate(segment, SM_SECURE_HEADER_SIZE);
  smi_os_populate(blocks, (size_t)((uint8_t *)segment + size - SM_GUARD_SIZE - blocks));
#else
  smi_os_populate(segment, size - SM_GUARD_SIZE);
#endif
}

#if SM_SECURE
_Static_assert(sizeof(sm_segment_t) + SM_SMALL_PAGES_PER_SEGMENT * sizeof(sm_page_t) <= SM_SECURE_HEADER_SIZE,
               "every header (huge ones too) fits the secure header area");
#else
_Static_assert(sizeof(sm_segment_t) + sizeof(sm_page_t) <= SM_HUGE_HEADER_SIZE, "a huge header fits one page");
#endif
_Static_assert(sizeof(sm_segment_t) + SM_SMALL_PAGES_PER_SEGMENT * sizeof(sm_page_t) <= SM_SMALL_PAGE_SIZE / 4,
               "segment metadata stays a small part of the first page");

static void segment_init_header(sm_segment_t *segment, sm_segment_kind_t kind, size_t page_count, size_t page_shift,
                                size_t size, uintptr_t thread_id, bool mem_zero) {
  size_t header = segment_header_size(page_count);
  smi_track_undefined(segment, sizeof(sm_segment_t) + page_count * sizeof(sm_page_t)); /* may overlay old blocks */
  memset(segment, 0, sizeof(sm_segment_t) + page_count * sizeof(sm_page_t)); /* cached ones are stale */
  segment->kind = (uint8_t)kind;
  segment->page_count = page_count;
  segment->page_shift = page_shift;
  segment->size = size;
  segment->map_start = (uint8_t *)segment;
  segment->map_size = size;
  segment->cookie = (uintptr_t)segment ^ smi_read_mostly.secret;
  if (kind == SM_SEGMENT_LARGE) span_map_set(NULL, segment, 0);
  size_t page_size = kind <= SM_SEGMENT_LARGE ? (size_t)1 << page_shift : size;
  for (size_t i = 0; i < page_count; i++) {
    sm_page_t *page = &segment->pages[i];
    smi_page_set_start(page, (uint8_t *)segment + (i == 0 ? header : i * page_size));
    page->mem_is_zero = mem_zero;
    atomic_store_explicit(&page->thread_free, smi_tf_make(NULL, SM_DELAY_NEVER), memory_order_relaxed);
  }
  atomic_store_explicit(&segment->thread_id, thread_id, memory_order_release);
}

/* A cached mapping larger than a huge block needs: the part past `keep` (a segment boundary)
 * becomes a cache entry of its own, its memory still resident, or goes back to the OS. */
static void segment_cache_split(sm_segment_t *segment, size_t keep) {
  sm_segment_t *tail = cache_split_tail(segment, keep);
  if (tail != NULL && !segment_cache_push(tail)) segment_os_free(tail); /* it is registered */
}

static sm_segment_t *segment_alloc(sm_heap_t *heap, sm_segment_kind_t kind) {
  sm_tld_t *tld = heap->tld;
  sm_segment_t *segment = tld->arena_id == 0 ? segment_cache_pop((size_t)heap->thread_id, 1, 1) : NULL;
  if (tld->segment_count >= tld->segment_peak) {
    /* A new high. The unused pages still waiting out their delay could not serve this request
     * (another kind, or runs too short), and keeping them now would add them to the peak: gcc
     * frees 14 MiB of medium pages and at once needs small ones. A thread reaches a new high at
     * most once per segment of its peak, so this cannot turn into a purge/fault cycle. A cached
     * segment still resident adds nothing to the peak: then they wait. */
    tld->segment_peak = tld->segment_count + 1;
    if (segment == NULL || segment->purged) smi_segments_purge_expired(tld, true);
  }
  bool zero, cached = segment != NULL;
  uint64_t cached_until = 0;
  if (cached) {
    zero = segment->purged;
    cached_until = segment->purge_at;
    segment_cache_note_taken(segment);
    if (segment->purged == SM_PURGED_DUE && segment->cached_by != heap->thread_id)
      rhythm_note_reuse(&cache_rhythm, cached_until, tld_now(tld));
    smi_mem_unpurged(segment->purged_bytes); /* its header is rewritten below */
  } else {
    smi_stat_inc(SM_STAT_SEGMENT_MAP);
    segment_cache_note_fresh(SM_SEGMENT_SIZE);
    segment = os_alloc_or_flush(SM_SEGMENT_SIZE, SM_SEGMENT_SIZE, 0,
                                (long)tld->segment_count < smi_option(sm_option_eager_commit_delay), tld->arena_id, &zero);
    if (segment == NULL) return NULL;
    segment_map_set(segment, true);
    segment_protect(segment, SM_SEGMENT_SIZE);
    if (smi_option(sm_option_allow_large_os_pages)) smi_os_use_large_pages(segment, SM_SEGMENT_SIZE);
    /* pay the page faults up front: populate for every segment, eager_commit except for a
     * thread's first eager_commit_delay segments, so that short-lived threads stay cheap */
    if (smi_option(sm_option_populate) ||
        (smi_option(sm_option_eager_commit) && (long)tld->segment_count >= smi_option(sm_option_eager_commit_delay)))
      segment_populate(segment, SM_SEGMENT_SIZE);
  }
  bool medium = kind == SM_SEGMENT_MEDIUM; /* small and large segments have 64 KiB slots */
  size_t count = medium ? SM_SEGMENT_SIZE / SM_MEDIUM_PAGE_SIZE : SM_SMALL_PAGES_PER_SEGMENT;
  size_t shift = medium ? SM_MEDIUM_PAGE_SHIFT : SM_SMALL_PAGE_SHIFT;
  segment_init_header(segment, kind, count, shift, SM_SEGMENT_SIZE, heap->thread_id, zero);
  if (!cached) segment->arena_excl = (uint8_t)smi_mem_exclusive_arena(segment);
  if (cached && !zero && smi_option(sm_option_purge_delay) > 0) {
    /* a cached segment still resident: its pages keep the cache's deadline, or those this thread
     * does not use would stay resident for as long as it keeps the segment */
    for (size_t i = 0; i < count; i++) segment->pages[i].purge_at = cached_until;
    segment_dirty_unused(segment, purge_list_join, tld);
  }
  tld->segment_count++;
  smi_count_add(SM_COUNT_SEGMENTS, 1);
  sm_segment_queue_t *q = segment_free_queue(tld, segment);
  if (q != NULL) {
    segment_queue_push(q, segment);
    segment->in_free_queue = 1;
  }
  return segment;
}

/* A segment with no page in use: into the cache, or back to the OS. */
static void segment_free(sm_segment_t *segment, sm_tld_t *tld) {
  sm_segment_queue_t *q = segment_free_queue(tld, segment);
  if (segment->in_free_queue) segment_queue_remove(q, segment);
  segment->in_free_queue = 0;
  if (tld->visits > 0) { /* a visit reads the descriptors of the pages it listed (heap.c) */
    segment->next = tld->visit_held;
    tld->visit_held = segment;
    return;
  }
  for (size_t i = 0; i < segment->page_count; i++) {
    if (segment->pages[i].purge_pending) purge_list_remove(tld, &segment->pages[i]);
  }
  tld->segment_count--;
  smi_count_add(SM_COUNT_SEGMENTS, -1);
  segment_cache_release(segment, tld_now(tld));
}

/* ---- pages ---- */

/* A free page of `segment` for blocks of block_size, or NULL; *slots: the slots it covers.
 * Large segments take the lowest free run that holds the block (first fit), so a taken span
 * always starts a free run. */
static sm_page_t *segment_find_page(sm_segment_t *segment, size_t block_size, size_t *slots) {
  *slots = 1;
  if (segment->kind != SM_SEGMENT_LARGE) {
    for (size_t i = 0; i < segment->page_count; i++)
      if (!segment->pages[i].in_use) return &segment->pages[i];
    return NULL;
  }
  for (size_t index = 0; index < segment->page_count; index++) {
    if ((segment->span_map >> index) & 1) continue;
    sm_page_t *page = &segment->pages[index];
    size_t lead = (size_t)(smi_page_start(page) - ((uint8_t *)segment + (index << SM_SMALL_PAGE_SHIFT)));
    size_t n = (lead + block_size + SM_SMALL_PAGE_SIZE - 1) >> SM_SMALL_PAGE_SHIFT;
    if (index + n == segment->page_count && span_area(segment, page, n) < block_size) n++; /* end guard */
    if (index + n > segment->page_count) return NULL;
    if ((segment->span_map & span_mask(index, n)) == 0) {
      *slots = n;
      return page;
    }
  }
  return NULL;
}

#define SM_PURGE_LOOK 16 /* entries of the purge list tld_find_page looks at */

/* A page from the tld's segments; large blocks go to the segment with the shortest free run that
 * holds them (best fit: long runs stay for big blocks). Small and medium pages: one whose memory
 * is still there first, from the back of the purge list, where the most recently freed wait (the
 * first unused page of the first segment may have been purged). For a size class whose pages
 * filled up (`busy`), the page that carved the most among those: the new one will likely fill
 * too, and in a page that carved little it would touch fresh memory while the fuller pages wait
 * to be purged. (A class's first page often stays sparse: it takes the most recent one.) */
static sm_page_t *tld_find_page(sm_tld_t *tld, int kind, size_t block_size, bool busy, size_t *slots) {
  if (kind != SM_SEGMENT_LARGE) {
    sm_page_t *best = NULL;
    size_t best_carved = 0, looked = 0;
    for (sm_page_t *page = tld->purge_last; page != NULL && looked < SM_PURGE_LOOK; page = page->prev, looked++) {
      if ((int)smi_page_segment(page)->kind != kind) continue;
      size_t carved = (size_t)page->capacity * page->block_size; /* its last use's; what is resident */
      if (best == NULL || carved > best_carved) {
        best = page;
        best_carved = carved;
      }
      if (!busy) break;
    }
    if (best != NULL) {
      *slots = 1;
      return best;
    }
    sm_segment_t *segment = kind == SM_SEGMENT_SMALL ? tld->small_free.first : tld->medium_free.first;
    return segment != NULL ? segment_find_page(segment, block_size, slots) : NULL;
  }
  for (size_t run = (block_size + SM_SMALL_PAGE_SIZE - 1) >> SM_SMALL_PAGE_SHIFT; run <= SM_SMALL_PAGES_PER_SEGMENT; run++) {
    for (sm_segment_t *segment = tld->large_free[run].first; segment != NULL; segment = segment->next) {
      sm_page_t *page = segment_find_page(segment, block_size, slots);
      if (page != NULL) return page;
    }
  }
  return NULL;
}

/* `slots` slots from `page` on are taken: pending purges on them are off (an entry running past
 * them keeps its rest; none starts before `page`, which starts a free run), and their purged
 * memory counts as committed again. Returns whether all of it is known zero. Called before
 * `page` gets its own span_slots: an entry that starts at `page` is read with its length. */
static bool span_take(sm_tld_t *tld, sm_segment_t *segment, sm_page_t *page, size_t slots, size_t *fresh) {
  bool zero = true, reuse_noted = false;
  *fresh = 0;
  for (sm_page_t *slot = page; slot < page + slots; slot++) {
    if (slot->is_purged || slot->mem_is_zero) *fresh += span_area(segment, slot, 1);
    if (slot->purge_pending) {
      sm_page_t *entry_end = slot + page_slots(segment, slot);
      purge_list_remove(tld, slot);
      if (entry_end > page + slots) {
        sm_page_t *rest = page + slots;
        rest->span_slots = (uint8_t)(entry_end - rest);
        rest->purge_at = slot->purge_at;
        purge_list_insert(tld, rest);
      }
    }
    if (slot->is_purged) { /* its memory comes back as it is touched */
      size_t area = span_area(segment, slot, 1);
      if (slot->is_purged == SM_PURGED_EXCHANGED) { /* not a sign that the delay is too short */
        if (tld->now_ms < slot->purge_at + rhythm_delay(&page_rhythm)) tld->exchange_slack += area;
      } else if (!reuse_noted) {
        rhythm_note_reuse(&page_rhythm, slot->purge_at, tld->now_ms);
        reuse_noted = true;
      }
      slot->is_purged = 0;
      segment->purged_bytes -= area;
      smi_mem_unpurged(area);
    }
    zero = zero && slot->mem_is_zero;
    slot->mem_is_zero = 0;
  }
  return zero;
}

/* Fresh memory (`bytes`: never touched, or purged) is about to be touched while unused pages
 * wait out their delay: pages this request could not take (tld_find_page would have). Keeping
 * them puts them on top of the program's peak: gcc frees 40 MiB of large blocks and goes on
 * with small ones, whose fresh pages then pile up on top. So as many bytes of them are purged
 * now, oldest first: an exchange. A program that alternates between kinds would then fault in
 * each phase what the other one purged, so memory purged this way and taken again before its
 * delay would have passed raises exchange_slack by its size, and exchanges leave that much on
 * the list: what the exchanges can cost in page faults is bounded by the most the list holds.
 * (The rhythm, scaled up by any purge followed by a reuse, could not be the gate: in gcc it
 * stays at its top.) */
static void purge_exchange(sm_tld_t *tld, size_t bytes) {
  if (tld->purge_bytes <= tld->exchange_slack || smi_option(sm_option_purge_delay) <= 0) return;
  size_t excess = tld->purge_bytes - tld->exchange_slack;
  uint64_t now = tld_now(tld);
  purge_run_t run = {NULL, NULL, 0, 0, SM_PURGED_EXCHANGED};
  sm_page_t *page;
  for (size_t done = 0; done < bytes && done < excess && (page = tld->purge_first) != NULL;) {
    sm_segment_t *segment = smi_page_segment(page);
    done += page_area(segment, page);
    purge_list_remove(tld, page);
    purge_run_add(&run, segment, page, now);
  }
  purge_run_flush(&run);
}

/* A new small page for a size class that has no other page (`busy`: it has, and they filled up)
 * keeps at most SM_SPARSE_KEEP bytes of the resident memory it takes over. Such a page often
 * stays nearly empty (a size class the thread uses a little, or one a growing block passes
 * through), and would keep the earlier page's memory resident for its few blocks: 2 MiB of
 * mstress's and larson's peaks, 0.3 MiB of redis's. Its blocks are carved from the start, so
 * what it needs comes back as it is carved. Only when the earlier page carved more than twice
 * that: the first pages of every short-lived thread pay the system call, and with a threshold
 * of 16 KiB SHSH chain-4 took 1.12x the time (1.00x with this one). */
#define SM_SPARSE_KEEP ((size_t)16 * 1024)

static void page_trim_taken(const sm_segment_t *segment, const sm_page_t *page, size_t touched) {
  size_t area = page_area(segment, page);
  if (touched > area) touched = area;
  if (touched <= 2 * SM_SPARSE_KEEP || smi_option(sm_option_purge_delay) <= 0 || smi_mem_is_pinned(segment)) return;
  smi_os_purge(smi_page_start(page) + SM_SPARSE_KEEP, touched - SM_SPARSE_KEEP, smi_option(sm_option_purge_decommits) != 0);
}

sm_page_t *smi_segment_page_alloc(sm_heap_t *heap, size_t block_size, bool busy) {
  sm_tld_t *tld = heap->tld;
  sm_segment_kind_t kind = block_size <= SM_SMALL_OBJ_MAX ? SM_SEGMENT_SMALL
                         : block_size <= SM_MEDIUM_OBJ_MAX ? SM_SEGMENT_MEDIUM : SM_SEGMENT_LARGE;
  size_t slots;
  sm_page_t *page = tld_find_page(tld, kind, block_size, busy, &slots);
  if (page == NULL) {
    /* before mapping more memory, adopt segments of threads that have ended (a thread's heap
     * only: their live blocks must never become part of a heap that may be destroyed) */
    if (heap->kind == SM_HEAP_THREAD && smi_segments_reclaim_abandoned(heap, 8, kind))
      page = tld_find_page(tld, kind, block_size, busy, &slots);
    if (page == NULL) {
      sm_segment_t *fresh = segment_alloc(heap, kind);
      if (fresh == NULL) return NULL;
      page = segment_find_page(fresh, block_size, &slots);
    }
  }
  sm_assert(page != NULL);
  sm_segment_t *segment = smi_page_segment(page);
  smi_count_add(SM_COUNT_PAGES, 1);
  page->in_use = 1;
  segment->used++;
  /* the earlier page's descriptor is still there: what it carved is what may be resident */
  bool resident = !page->is_purged && !page->mem_is_zero;
  size_t touched = resident ? (size_t)page->capacity * page->block_size : 0;
  size_t fresh;
  page->mem_is_zero = span_take(tld, segment, page, slots, &fresh); /* before span_slots: it reads the entry's */
  if (fresh > 0) purge_exchange(tld, fresh);
  if (kind == SM_SEGMENT_SMALL && !busy) page_trim_taken(segment, page, touched);
  if (kind == SM_SEGMENT_LARGE) {
    page->span_slots = (uint8_t)slots;
    span_map_set(tld, segment, segment->span_map | span_mask((size_t)(page - segment->pages), slots));
  }
  if (segment_is_full(segment) && segment->in_free_queue) {
    segment_queue_remove(segment_free_queue(tld, segment), segment);
    segment->in_free_queue = 0;
  }
  smi_page_init(heap, page, block_size, page_area(segment, page));
  return page;
}

/* a page (span) of `segment` is no longer in use (tld: its owner's, or NULL) */
static void segment_page_release(sm_tld_t *tld, sm_segment_t *segment, sm_page_t *page) {
#if SM_DEBUG && !SM_TRACK
  smi_debug_page_release(page);
#endif
  page->in_use = 0;
#if SM_SECURE
  page->block_magic = 0;
#endif
  page->free = page->local_free = NULL;
  page->mem_is_zero = 0;
  if (segment->kind == SM_SEGMENT_LARGE)
    span_map_set(tld, segment, segment->span_map & ~span_mask((size_t)(page - segment->pages), page->span_slots));
  segment->used--;
}

/* A thread's only segment of a kind with room stays when its last page goes (that memory is
 * purged on the page schedule), so a program that allocates and frees a block in a loop does not
 * send the segment through the cache, dirty, each time: with large blocks in spans that put up
 * to 40 MiB of cached segments into mstress's peak RSS. */
static bool segment_keep_empty(const sm_tld_t *tld, const sm_segment_t *segment) {
  if (smi_option(sm_option_purge_delay) == 0 || segment->kind == SM_SEGMENT_HUGE || !smi_tld_may_carve(tld, segment)) return false;
  if (segment->kind != SM_SEGMENT_LARGE) {
    const sm_segment_t *first = segment->kind == SM_SEGMENT_SMALL ? tld->small_free.first : tld->medium_free.first;
    return first == NULL || (first == segment && segment->next == NULL);
  }
  for (size_t run = 1; run <= SM_SMALL_PAGES_PER_SEGMENT; run++) {
    const sm_segment_t *first = tld->large_free[run].first;
    if (first != NULL && (first != segment || segment->next != NULL)) return false;
  }
  return true;
}

/* the last heap visit of the tld ended: the segments that emptied during it go */
void smi_segments_visit_end(sm_tld_t *tld) {
  while (tld->visit_held != NULL) {
    sm_segment_t *segment = tld->visit_held;
    tld->visit_held = segment->next;
    segment->next = NULL;
    segment_free(segment, tld);
  }
}

/* Segments of the tld without a page in use go (sm_collect(true), heap destroy, thread exit). */
void smi_segments_release_empty(sm_tld_t *tld) {
  sm_segment_queue_t *queues[2 + SM_SMALL_PAGES_PER_SEGMENT + 1] = {&tld->small_free, &tld->medium_free};
  for (size_t run = 0; run <= SM_SMALL_PAGES_PER_SEGMENT; run++) queues[2 + run] = &tld->large_free[run];
  for (size_t i = 0; i < sizeof queues / sizeof queues[0]; i++) {
    for (sm_segment_t *segment = queues[i]->first, *next; segment != NULL; segment = next) {
      next = segment->next;
      if (segment->used == 0) segment_free(segment, tld);
    }
  }
}

/* An empty page goes back to its segment; its memory is purged once the delay has passed. */
void smi_segment_page_free(sm_page_t *page, sm_tld_t *tld) {
  sm_segment_t *segment = smi_page_segment(page);
  sm_assert(page->in_use && segment->used > 0);
  smi_count_add(SM_COUNT_PAGES, -1);
  segment_page_release(tld, segment, page);
  if (segment->used == 0 && !segment_keep_empty(tld, segment)) {
    segment_free(segment, tld);
    return;
  }
  long delay = smi_option(sm_option_purge_delay);
  bool may_carve = smi_tld_may_carve(tld, segment);
  if (delay == 0 || (!may_carve && delay > 0)) page_purge(segment, page, tld_now(tld));
  else if (delay > 0) {
    page->purge_at = tld_now(tld) + rhythm_delay(&page_rhythm);
    purge_list_insert(tld, page);
  }
  sm_segment_queue_t *q = segment_free_queue(tld, segment);
  if (q != NULL && !segment->in_free_queue && may_carve) {
    segment_queue_push(q, segment);
    segment->in_free_queue = 1;
  }
}

/* ---- huge blocks: one mapping each, owned by no thread, freed by whoever frees the block ---- */

static void huge_link(sm_heap_t *heap, sm_segment_t *segment);

void *smi_huge_alloc(sm_heap_t *heap, size_t size, size_t alignment, bool zero) {
  if (size > SM_MAX_ALLOC_SIZE) return smi_enomem();
  size_t header = SM_HUGE_HEADER_SIZE, offset, align;
  if (alignment <= SM_OS_PAGE_SIZE) { /* the header size is a multiple of the OS page */
    offset = header;
    align = SM_SEGMENT_SIZE;
  } else if (alignment < SM_SEGMENT_SIZE) {
    offset = smi_align_up(header, alignment);
    align = SM_SEGMENT_SIZE;
  } else { /* over-aligned: the block starts one segment size in; (p-1) still finds the header */
    offset = SM_SEGMENT_SIZE;
    align = alignment;
  }
  /* whole segments, so that freed huge mappings can be cached and reused for other sizes */
  size_t map_size = smi_align_up(offset + size + SM_GUARD_SIZE, SM_SEGMENT_SIZE);
  if (map_size < size) return smi_enomem();
  sm_segment_t *segment = NULL;
  bool mem_zero = true;
  size_t dirty = map_size; /* unless mem_zero: the mapping's first bytes that may hold old data */
  int arena_id = heap->tld->arena_id;
  if (align == SM_SEGMENT_SIZE && arena_id == 0) {
    size_t units = map_size >> SM_SEGMENT_SHIFT;
    /* the best-fitting cached mapping; a larger one is split and its rest stays cached, so the
     * usable size stays what sm_good_size says, and resident pages need no new page faults */
    segment = segment_cache_pop(units, units, SIZE_MAX);
    if (segment != NULL) {
      mem_zero = segment->purged;
      segment_cache_note_taken(segment);
      smi_mem_unpurged(segment->purged_bytes);
      if (segment->map_size > map_size) segment_cache_split(segment, map_size);
    }
    else if ((segment = segment_cache_pop_grown(units, &dirty)) != NULL) {
      mem_zero = false; /* its old part holds what was there; a zeroed block clears only that */
      segment_cache_note_fresh(map_size - dirty);
    }
  }
  if (segment == NULL) {
    if (arena_id == 0) segment_cache_note_fresh(map_size);
    segment = os_alloc_or_flush(map_size, align, align == SM_SEGMENT_SIZE ? 0 : offset, false, arena_id, &mem_zero);
    if (segment == NULL) return smi_enomem();
    segment_protect(segment, map_size);
    if (smi_option(sm_option_populate)) segment_populate(segment, map_size);
  }
  segment_init_header(segment, SM_SEGMENT_HUGE, 1, SM_HUGE_PAGE_SHIFT, map_size, 0, mem_zero);
  segment->arena_excl = (uint8_t)smi_mem_exclusive_arena(segment);
  sm_page_t *page = &segment->pages[0];
  smi_page_set_start(page, (uint8_t *)segment + offset);
  page->block_size = map_size - offset - SM_GUARD_SIZE;
  page->reserved = page->used = 1;
  smi_page_set_capacity(page, 1);
  page->in_use = 1;
  segment->used = 1;
  segment_map_set(segment, true);
  smi_count_add(SM_COUNT_HUGE, (int64_t)map_size);
  smi_count_add(SM_COUNT_HUGE_BLOCKS, 1);
  /* all of it (rezalloc relies on that), but not the pages the OS cleared */
  if (zero && !mem_zero && dirty > offset) memset(smi_page_start(page), 0, dirty - offset < page->block_size ? dirty - offset : page->block_size);
  (void)size;
  huge_link(heap, segment);
  return smi_page_start(page);
}

/* Every heap lists its huge blocks (visits, sm_heap_destroy, sm_heap_delete) under its huge_lock. */
void smi_huge_push(sm_heap_t *heap, sm_segment_t *segment) { /* huge_lock held */
  atomic_store_explicit(&segment->pages[0].heap, heap, memory_order_release);
  segment->prev = NULL;
  segment->next = heap->huge_first;
  if (heap->huge_first != NULL) heap->huge_first->prev = segment;
  heap->huge_first = segment;
}

static void huge_link(sm_heap_t *heap, sm_segment_t *segment) {
  smi_spin_lock(&heap->huge_lock);
  smi_huge_push(heap, segment);
  smi_spin_unlock(&heap->huge_lock);
}

/* Off its heap's list, by whichever thread frees or moves it. The heap read before the lock may
 * have let the block go meanwhile (thread exit, sm_heap_delete) and even be another heap now
 * (heaps are reused, never unmapped; huge_lock survives that): only the one the block names
 * under the lock is its heap. Returns that heap and, in *epoch, its list's epoch then (NULL: on
 * no list). */
static sm_heap_t *huge_unlink(sm_segment_t *segment, uint32_t *epoch) {
  sm_page_t *page = &segment->pages[0];
  for (sm_heap_t *heap; (heap = smi_page_heap(page)) != NULL;) {
    smi_spin_lock(&heap->huge_lock);
    bool still = smi_page_heap(page) == heap;
    if (still) {
      if (segment->prev != NULL) segment->prev->next = segment->next;
      else heap->huge_first = segment->next;
      if (segment->next != NULL) segment->next->prev = segment->prev;
      atomic_store_explicit(&page->heap, NULL, memory_order_release);
      *epoch = heap->huge_epoch;
    }
    smi_spin_unlock(&heap->huge_lock);
    if (still) return heap;
  }
  return NULL;
}

#if SM_SECURE
/* The secure build's guard pages split a huge mapping into several, and mremap moves only one at
 * a time: the block's pages move into a new reservation, the header is copied, the guards are set
 * there anew, and what is left of the old mapping (header, guards) is unmapped. The range the
 * pages leave stays mapped until then (SM_UNMAP_GRACE): a free racing this realloc reads zeros
 * there, not a hole, and no other thread's new mapping can land in it before the unmap. */
static sm_segment_t *huge_move_guarded(sm_segment_t *segment, size_t offset, size_t old_size, size_t map_size) {
  if (smi_arena_contains(segment) || smi_mem_is_pinned(segment)) return NULL;
  uint8_t *target = smi_mem_alloc(map_size, SM_SEGMENT_SIZE, 0);
  if (target == NULL) return NULL;
  if (smi_arena_contains(target) || !smi_os_move((uint8_t *)segment + offset, old_size - offset - SM_GUARD_SIZE,
                                                 map_size - offset - SM_GUARD_SIZE, target + offset, SM_UNMAP_GRACE)) {
    smi_mem_free(target, map_size, 0);
    return NULL;
  }
  memcpy(target, segment, SM_SECURE_HEADER_SIZE);
  segment_protect((sm_segment_t *)target, map_size);
  smi_mem_free(segment, old_size, 0);
  return (sm_segment_t *)target;
}
#endif

/* The heap lets its list go (thread exit, sm_heap_destroy): its blocks name no heap from here on,
 * so whoever frees one later takes no lock. Returns the list, whose links nobody changes now. */
sm_segment_t *smi_huge_let_go(sm_heap_t *heap) {
  smi_spin_lock(&heap->huge_lock);
  sm_segment_t *first = heap->huge_first;
  for (sm_segment_t *segment = first, *next; segment != NULL; segment = next) {
    next = segment->next; /* read first: once it names no heap, another thread may free it */
    atomic_store_explicit(&segment->pages[0].heap, NULL, memory_order_release);
  }
  heap->huge_first = NULL;
  heap->huge_epoch++;
  smi_spin_unlock(&heap->huge_lock);
  return first;
}

/* A fork child: a thread that held huge_lock at the fork was linking or unlinking one block, and
 * the child sees only the stores made before the fork copied each page. Every block reachable
 * from huge_first is mapped (a block leaves the list before it is unmapped), so the list is
 * walked forwards and the back links set from it: a half-done push or unlink leaves no back link
 * to a block that is not on the list, and the next unlink or push there stays right. */
void smi_huge_fork_child(sm_heap_t *heap) {
  atomic_store_explicit(&heap->huge_lock, false, memory_order_relaxed);
  sm_segment_t *prev = NULL;
  for (sm_segment_t *segment = heap->huge_first; segment != NULL; prev = segment, segment = segment->next)
    segment->prev = prev;
}

static void *huge_remap_unlinked(sm_segment_t *segment, size_t newsize);

/* Grow a huge block without copying it: into the resident cached mapping right after it, or by
 * moving its pages (mremap). Only plain huge segments. Returns the block's new address, or NULL
 * (block untouched). */
void *smi_huge_remap(sm_segment_t *segment, size_t newsize) {
  if (segment->kind != SM_SEGMENT_HUGE || (uint8_t *)segment != segment->map_start) return NULL;
  /* its heap's list points at it: off the list while it moves (no lock is held across the
   * system calls), then back on, unless the heap let its list go meanwhile */
  uint32_t epoch = 0;
  sm_heap_t *heap = huge_unlink(segment, &epoch);
  void *p = huge_remap_unlinked(segment, newsize);
  if (heap != NULL) {
    smi_spin_lock(&heap->huge_lock);
    if (heap->huge_epoch == epoch) smi_huge_push(heap, p != NULL ? smi_ptr_segment(p) : segment);
    smi_spin_unlock(&heap->huge_lock);
  }
  return p;
}

static void *huge_remap_unlinked(sm_segment_t *segment, size_t newsize) {
  size_t offset = (size_t)(smi_page_start(&segment->pages[0]) - (uint8_t *)segment);
  size_t map_size = smi_align_up(offset + newsize + SM_GUARD_SIZE, SM_SEGMENT_SIZE);
  if (map_size < newsize || newsize > SM_MAX_ALLOC_SIZE) return NULL;
  size_t old_size = segment->map_size;
  sm_segment_t *next = (sm_segment_t *)((uint8_t *)segment + old_size), *taken = NULL;
  /* the mapping right after it waits in the cache, resident: grow into it, no page faults and
   * no remapping (mmap places new mappings below older ones, so a freed older block is often
   * right there). Plain OS memory only: the two are then unmapped together. */
  if (map_size > old_size && !smi_arena_contains(segment) && !smi_arena_contains(next) &&
      !smi_mem_is_pinned(segment) && !smi_mem_is_pinned(next))
    taken = segment_cache_take_at(next, (map_size - old_size) >> SM_SEGMENT_SHIFT);
  sm_segment_t *moved = segment;
  if (taken != NULL) {
    segment_cache_note_taken(taken);
    smi_mem_unpurged(taken->purged_bytes); /* its purged pages are the block's now, counted */
    if (taken->map_size > map_size - old_size) segment_cache_split(taken, map_size - old_size);
    segment_map_set(taken, false);
#if SM_SECURE /* the block's old end guard and the taken part's header guard are inside it now */
    smi_os_unprotect((uint8_t *)segment + old_size - SM_GUARD_SIZE, SM_GUARD_SIZE);
    smi_os_unprotect((uint8_t *)taken + SM_SECURE_HEADER_SIZE, SM_GUARD_SIZE);
#endif
  } else {
    if (map_size > old_size) segment_cache_note_fresh(map_size - old_size);
    segment_map_set(segment, false);
    /* The checked builds' moves leave the block several mappings (the secure build's guards; a
     * move that keeps the old range mapped, SM_UNMAP_GRACE, moves equal sizes only), so every
     * growth moves it: a quarter more address space when it grows by a quarter or less
     * (untouched, it costs no memory) makes growth in small steps move a few times instead of
     * at every segment (secure: 63 moves for 4 -> 256 MiB in 1 MiB steps, 10 now) */
    size_t old_block = segment->pages[0].block_size;
    if (SM_UNMAP_GRACE && map_size > old_size && newsize - old_block <= old_block / 4) {
      size_t roomy = smi_align_up(map_size + map_size / 4, SM_SEGMENT_SIZE);
      if (roomy > map_size && roomy - offset - SM_GUARD_SIZE <= SM_MAX_ALLOC_SIZE + SM_PADDING) map_size = roomy;
    }
#if SM_SECURE
    moved = huge_move_guarded(segment, offset, old_size, map_size);
#else
    moved = smi_mem_remap(segment, old_size, map_size, SM_SEGMENT_SIZE);
#endif
    if (moved == NULL) {
      segment_map_set(segment, true);
      return NULL;
    }
    moved->map_start = (uint8_t *)moved;
    moved->cookie = (uintptr_t)moved ^ smi_read_mostly.secret;
    smi_page_set_start(&moved->pages[0], (uint8_t *)moved + offset);
    segment_map_set(moved, true);
    if (map_size > old_size) huge_fill_tail((uint8_t *)moved + old_size, map_size - old_size);
  }
  moved->size = moved->map_size = map_size;
  moved->pages[0].block_size = map_size - offset - SM_GUARD_SIZE;
  smi_page_set_capacity(&moved->pages[0], 1); /* carved follows the size */
  smi_count_add(SM_COUNT_HUGE, (int64_t)map_size - (int64_t)old_size);
  return smi_page_start(&moved->pages[0]);
}

void smi_huge_free(sm_segment_t *segment) {
  /* a second free of it is then seen as invalid; of two threads that free it at the same moment
   * (both past the checks), one releases it and the other reports (until 2026-11-27 both did:
   * the mapping went to the cache twice, and two later blocks shared it; found in review) */
  if (__atomic_exchange_n(&segment->pages[0].in_use, 0, __ATOMIC_ACQ_REL) == 0) {
    if (SM_CHECK_FREES)
      smi_error(EINVAL, "double free of %p (huge block of %zu bytes, freed by two threads at once)",
                (void *)smi_page_start(&segment->pages[0]), segment->pages[0].block_size);
    return;
  }
  uint32_t epoch;
  (void)huge_unlink(segment, &epoch);
  smi_count_add(SM_COUNT_HUGE, -(int64_t)segment->map_size);
  smi_count_add(SM_COUNT_HUGE_BLOCKS, -1);
  if ((uint8_t *)segment == segment->map_start && (segment->map_size <= SM_HUGE_QUIET_MAX || smi_purger_running()))
    segment_cache_release(segment, smi_os_now_ms());
  else segment_os_free(segment);
}

/* ---- thread exit: abandon; other threads reclaim ---- */

static _Atomic(bool) abandoned_lock;
/* FIFO, so every abandoned segment comes round again; guarded by abandoned_lock */
static sm_segment_t *abandoned_first, *abandoned_last;
static _Atomic(size_t) abandoned_count;

/* fork: held across it (init.c), so that the child's list is not caught between two stores */
void smi_abandoned_lock_acquire(void) { smi_spin_lock(&abandoned_lock); }
void smi_abandoned_lock_release(void) { smi_spin_unlock(&abandoned_lock); }

bool smi_segments_abandoned_any(void) { return atomic_load_explicit(&abandoned_count, memory_order_relaxed) > 0; }

/* the oldest abandoned segment, now ours alone; NULL if none. Waits for the lock: its holders
 * only swap pointers, while giving up meant mapping a fresh segment (see docs/design.md). */
static sm_segment_t *abandoned_pop(void) {
  smi_spin_lock(&abandoned_lock);
  sm_segment_t *segment = abandoned_first;
  if (segment != NULL) {
    abandoned_first = segment->abandoned_next;
    if (abandoned_first == NULL) abandoned_last = NULL;
  }
  smi_spin_unlock(&abandoned_lock);
  if (segment != NULL) atomic_fetch_sub_explicit(&abandoned_count, 1, memory_order_relaxed);
  return segment;
}

/* A free into a segment of a thread that has ended. While no purger runs (the process is down
 * to one thread), the thread doing such frees visits the abandoned segments itself every 1024 of
 * them, so memory that ended threads left behind still comes back. */
void smi_segments_note_abandoned_free(void) {
  static _Atomic(size_t) abandoned_frees;
  size_t n = atomic_fetch_add_explicit(&abandoned_frees, 1, memory_order_relaxed);
  if ((n & 1023) != 1023 || smi_purger_running() || !smi_fork_guard_enter()) return;
  smi_segments_visit_abandoned(SIZE_MAX, true); /* nobody will come later */
  smi_fork_guard_leave();
}

/* append the list first..last (count segments, linked by abandoned_next) */
static void abandoned_push(sm_segment_t *first, sm_segment_t *last, size_t count) {
  last->abandoned_next = NULL;
  smi_spin_lock(&abandoned_lock);
  if (abandoned_last != NULL) abandoned_last->abandoned_next = first;
  else abandoned_first = first;
  abandoned_last = last;
  smi_spin_unlock(&abandoned_lock);
  atomic_fetch_add_explicit(&abandoned_count, count, memory_order_relaxed);
}

/* Called at thread exit once every page of the heap is in delay state NEVER and has no heap.
 * Pages still holding live blocks keep their segment alive; the rest is given back now.
 * Two phases: first detach everything privately (another thread may adopt a segment the moment
 * it is published, so nothing of it may be touched afterwards), then publish in one step. */
void smi_segments_abandon(sm_heap_t *heap) {
  sm_tld_t *tld = heap->tld;
  sm_segment_t *first = NULL, *last = NULL;
  size_t count = 0;
  for (size_t bin = 0; bin <= SM_BIN_FULL; bin++) {
    sm_page_t *page = heap->pages[bin].first;
    while (page != NULL) {
      sm_page_t *next = page->next;
      page->next = page->prev = NULL;
      sm_segment_t *segment = smi_page_segment(page);
      if (atomic_load_explicit(&segment->thread_id, memory_order_relaxed) != 0) {
        atomic_store_explicit(&segment->thread_id, 0, memory_order_release); /* frees are remote now */
        if (segment->in_free_queue) segment_queue_remove(segment_free_queue(tld, segment), segment);
        segment->in_free_queue = 0;
        tld->segment_count--;
        segment->abandoned_next = NULL;
        if (last != NULL) last->abandoned_next = segment;
        else first = segment;
        last = segment;
        count++;
        smi_count_add(SM_COUNT_ABANDONED, 1);
      }
      page = next;
    }
    heap->pages[bin].first = heap->pages[bin].last = NULL;
  }
  heap->page_count = 0;
  /* The purge list touches pages of the segments above, so it goes. While the purger runs, their
   * pages keep their deadlines and it purges them when due (so a thread that adopts a segment
   * soon can reuse its memory without page faults); otherwise nobody would: purge them now. */
  if (smi_purger_running() && smi_option(sm_option_purge_delay) > 0) {
    sm_page_t *page;
    while ((page = tld->purge_first) != NULL) {
      size_t slots = page_slots(smi_page_segment(page), page);
      for (size_t i = 1; i < slots; i++) page[i].purge_at = page->purge_at;
      purge_list_remove(tld, page);
    }
  } else {
    smi_segments_purge_expired(tld, true);
  }
  smi_segments_release_empty(tld); /* what is left in the free queues has no page in use */
  if (first != NULL) abandoned_push(first, last, count);
}

/* sm_heap_delete: the segments, free queues and pending purges of `from` join `tld` (both locked
 * by the caller), owned by thread_id from now on. Segments `tld` may not carve (smi_tld_may_carve)
 * join no queue; the empty ones among them go on `*drop`. */
static void segment_queue_absorb(sm_tld_t *tld, sm_segment_queue_t *into, sm_segment_queue_t *from, uintptr_t thread_id,
                                 sm_segment_queue_t *drop) {
  sm_segment_t *s;
  while ((s = from->first) != NULL) {
    segment_queue_remove(from, s);
    atomic_store_explicit(&s->thread_id, thread_id, memory_order_release);
    if (smi_tld_may_carve(tld, s)) {
      segment_queue_push(into, s);
    } else {
      s->in_free_queue = 0;
      if (s->used == 0) segment_queue_push(drop, s);
    }
  }
}

void smi_segments_absorb(sm_tld_t *tld, sm_tld_t *from, uintptr_t thread_id) {
  /* unused pages that tld may not take go now rather than wait on its list */
  for (sm_page_t *page = from->purge_first, *next; page != NULL; page = next) {
    next = page->next;
    sm_segment_t *segment = smi_page_segment(page);
    if (smi_tld_may_carve(tld, segment)) continue;
    purge_list_remove(from, page);
    page_purge(segment, page, tld_now(tld));
  }
  sm_segment_queue_t drop = {NULL, NULL};
  segment_queue_absorb(tld, &tld->small_free, &from->small_free, thread_id, &drop);
  segment_queue_absorb(tld, &tld->medium_free, &from->medium_free, thread_id, &drop);
  for (size_t run = 0; run <= SM_SMALL_PAGES_PER_SEGMENT; run++)
    segment_queue_absorb(tld, &tld->large_free[run], &from->large_free[run], thread_id, &drop);
  /* merge the purge lists, keeping them ordered by deadline */
  sm_page_t *a = tld->purge_first, *b = from->purge_first, *head = NULL, *tail = NULL;
  while (a != NULL || b != NULL) {
    sm_page_t **pick = (b == NULL || (a != NULL && a->purge_at <= b->purge_at)) ? &a : &b;
    sm_page_t *page = *pick;
    *pick = page->next;
    page->prev = tail;
    page->next = NULL;
    if (tail != NULL) tail->next = page;
    else head = page;
    tail = page;
  }
  tld->purge_first = head;
  tld->purge_last = tail;
  from->purge_first = from->purge_last = NULL;
  tld->purge_bytes += from->purge_bytes;
  from->purge_bytes = 0;
  tld->segment_count += from->segment_count;
  from->segment_count = 0;
  for (sm_segment_t *s; (s = drop.first) != NULL;) {
    segment_queue_remove(&drop, s);
    segment_free(s, tld);
  }
}

static void segment_reclaim(sm_segment_t *segment, sm_heap_t *heap) {
  sm_tld_t *tld = heap->tld;
  smi_stat_inc(SM_STAT_SEGMENT_RECLAIM);
  smi_count_add(SM_COUNT_ABANDONED, -1);
  atomic_store_explicit(&segment->thread_id, heap->thread_id, memory_order_release);
  tld->segment_count++;
  for (size_t i = 0; i < segment->page_count; i++) {
    sm_page_t *page = &segment->pages[i];
    if (!page->in_use) continue;
    atomic_store_explicit(&page->heap, heap, memory_order_release);
    smi_page_set_delay(page, SM_DELAY_NONE, true);
    page->flags.x.in_full = 0;
    smi_page_collect(page);
    smi_page_queue_push(heap, page, smi_bin_of(page->block_size));
  }
  sm_segment_queue_t *q = segment_free_queue(tld, segment);
  bool may_carve = smi_tld_may_carve(tld, segment);
  if (q != NULL && !segment_is_full(segment) && may_carve) {
    segment_queue_push(q, segment);
    segment->in_free_queue = 1;
  }
  if (smi_option(sm_option_purge_delay) > 0) /* due purges */
    segment_dirty_unused(segment, may_carve ? purge_list_join : page_purge_now, tld);
  /* pages whose blocks were all freed while abandoned go back (the last one frees the segment) */
  for (size_t i = 0; i < segment->page_count; i++) {
    sm_page_t *page = &segment->pages[i];
    if (!page->in_use || page->used != 0) continue;
    bool last = segment->used == 1;
    smi_page_free_empty(heap, page);
    if (last) return;
  }
}

/* Adopt abandoned segments, oldest first, until one offers an unused page of `kind` (or `max`
 * were taken). Segments whose blocks were all freed meanwhile go back to the cache on the way. */
bool smi_segments_reclaim_abandoned(sm_heap_t *heap, size_t max, int kind) {
  bool useful = false;
  if (atomic_load_explicit(&abandoned_count, memory_order_relaxed) == 0 || !smi_fork_guard_enter()) return false;
  for (size_t n = 0; n < max && !useful && atomic_load_explicit(&abandoned_count, memory_order_relaxed) > 0; n++) {
    sm_segment_t *segment = abandoned_pop();
    if (segment == NULL) break;
    useful = segment->kind == kind;
    segment_reclaim(segment, heap);
    if (useful) useful = tld_has_room(heap->tld, kind);
  }
  smi_fork_guard_leave();
  return useful;
}

typedef struct { uint64_t now; bool force; purge_run_t run; } purge_due_t;
static void purge_if_due(sm_segment_t *segment, sm_page_t *page, void *arg) {
  purge_due_t *due = arg;
  if (due->force || page->purge_at <= due->now) purge_run_add(&due->run, segment, page, due->now);
}

/* Run by the purger: look at up to `max` abandoned segments (at most one pass over the list, and
 * about 20 ms of work), oldest first, without adopting them.
 * Pages whose blocks were all freed since are given back, and unused memory is purged once its
 * delay has passed (all of it with force); an empty segment goes to the cache, the others go
 * back to the end of the list. No thread owns these segments, and taking one off the list makes
 * it ours alone until it goes back. */
void smi_segments_visit_abandoned(size_t max, bool force) {
  size_t pass = atomic_load_explicit(&abandoned_count, memory_order_relaxed);
  if (max > pass) max = pass;
  long delay = smi_option(sm_option_purge_delay);
  purge_due_t due = {smi_os_now_ms(), force, {NULL, NULL, 0, 0, SM_PURGED_DUE}};
  uint64_t deadline = due.now + 20;
  for (size_t n = 0; n < max && atomic_load_explicit(&abandoned_count, memory_order_relaxed) > 0; n++) {
    if ((n & 15) == 15 && smi_os_now_ms() > deadline) return;
    sm_segment_t *segment = abandoned_pop();
    if (segment == NULL) return;
    for (size_t i = 0; i < segment->page_count; i++) {
      sm_page_t *page = &segment->pages[i];
      if (!page->in_use) continue;
      smi_page_collect(page);
      if (page->used != 0) continue;
      smi_stats_page_discard(page);
      segment_page_release(NULL, segment, page);
      for (size_t k = 0; k < page_slots(segment, page); k++) page[k].purge_at = due.now + (uint64_t)(delay > 0 ? delay : 0);
      smi_count_add(SM_COUNT_PAGES, -1);
    }
    if (segment->used == 0) {
      smi_count_add(SM_COUNT_ABANDONED, -1);
      smi_count_add(SM_COUNT_SEGMENTS, -1);
      segment_cache_release(segment, smi_os_now_ms());
      continue;
    }
    if (delay >= 0 || force) {
      segment_dirty_unused(segment, purge_if_due, &due);
      purge_run_flush(&due.run); /* before the segment is anybody else's */
    }
    abandoned_push(segment, segment, 1);
  }
}
