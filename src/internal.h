/* internal.h: cross-file prototypes (grouped by owning file) and the small inline helpers used on
 * the fast paths. Every .c file of the library includes this; src/unity.c includes every .c once,
 * so the whole library is one translation unit and the compiler inlines across files. */
#ifndef SM_INTERNAL_H
#define SM_INTERNAL_H

#include "shardmalloc.h"
#include "types.h"
#include "os.h"
#include "track.h"

#include <errno.h>
#include <string.h>

#define sm_likely(x) __builtin_expect(!!(x), 1)
#define sm_unlikely(x) __builtin_expect(!!(x), 0)
#define sm_noinline __attribute__((noinline))
/* malloc and free start on a cache line, so that where the linker puts them does not change how
 * fast they run: a change elsewhere moved malloc (71 bytes) from a line start to across two lines,
 * and simple-1 ran 2-5% slower with the same instructions */
#define SM_HOT_ENTRY __attribute__((aligned(64)))
/* large, sparsely touched zero-initialised tables go after every small global: between two of
 * them each small variable could take a resident page of its own (a process touched 6 .bss pages,
 * 3 of them for a few words each) */
#define SM_BSS_LARGE __attribute__((section(".bss.shardmalloc_large")))
#define sm_decl_hidden __attribute__((visibility("hidden")))

#if SM_TLS_LOCAL_DYNAMIC
#define SM_TLS __thread __attribute__((tls_model("local-dynamic")))
#else
#define SM_TLS __thread __attribute__((tls_model("initial-exec")))
#endif

#if SM_DEBUG
__attribute__((noreturn)) void smi_assert_fail(const char *expr, const char *file, int line);
#define sm_assert(x) ((x) ? (void)0 : smi_assert_fail(#x, __FILE__, __LINE__))
#else
#define sm_assert(x) ((void)0)
#endif

/* ---- init.c: process and thread lifecycle ---- */
extern SM_TLS sm_heap_t *smi_tls_heap;  /* this thread's heap, or &smi_heap_empty before init */
extern SM_TLS uintptr_t smi_tls_tid;    /* this thread's id (1 before init; ids start at 2) */
extern sm_heap_t smi_heap_empty;        /* an all-empty heap: every lookup misses into the slow path */
extern sm_page_t smi_page_empty;
/* Read by every malloc and free of the checked builds, written once at start-up (or by
 * sm_option_set): a cache line of their own. Next to the statistics' counters, which other threads
 * increment, that line kept moving between cores: secure SHSH swing-2, two threads, was 4-10%
 * slower (best of 11 runs, three sets). */
typedef struct smi_read_mostly_s {
  uintptr_t secret; /* the process's random secret (canaries, cookies, link encoding) */
  _Atomic(bool) fork_orphans; /* a fork child with heaps of threads the fork left behind (purge.c) */
#if SM_SECURE
  _Atomic(bool) free_options_on; /* zero_on_free, quarantine or atomic_free (options.c) */
  _Atomic(bool) free_claim_only; /* atomic_free alone */
  /* what free's fast test computes canaries with: the secret, or while free_options_on the secret
   * with its lowest bit flipped, so that every free then fails that test and takes the full path,
   * which applies the options; the fast path has no test of its own for them */
  uintptr_t free_secret;
#endif
} __attribute__((aligned(64))) smi_read_mostly_t;
extern smi_read_mostly_t smi_read_mostly;
#if SM_SECURE
void smi_free_options_update(void); /* after the secret or those options change (options.c) */
/* A guard page is one OS page after the 16 KiB header area: 4 KiB, or 16 KiB on kernels with 16
 * KiB pages (some aarch64 systems; the header area is then one OS page). On a kernel with 64 KiB
 * pages a guard would take whole small pages, so the secure build keeps the 4 KiB layout there
 * unprotected (verbose says so); its other defences do not depend on the page size. */
static inline bool smi_guard_pages(void) { return smi_os_page_size() <= SM_SECURE_HEADER_SIZE; }
static inline size_t smi_guard_size(void) { return smi_guard_pages() ? smi_os_page_size() : SM_OS_PAGE_SIZE; }
#endif
extern SM_TLS sm_heap_t *smi_tls_backing; /* this thread's own heap (NULL before init) */
sm_heap_t *smi_thread_init(void);       /* returns the new heap, or NULL when out of memory */
sm_thread_data_t *smi_thread_data_alloc(void); /* heap + tld, from the pool (heaps made by sm_heap_new too) */
void smi_thread_data_free(sm_thread_data_t *td);
uintptr_t smi_new_owner_id(void);       /* an id no thread has: for locked heap parts */
void smi_process_init(void);

/* ---- options.c ---- */
/* current values, indexed by sm_option_t; read on slow paths (and the secure free path) */
extern _Atomic(long) smi_option_values[_sm_option_last];
static inline long smi_option(sm_option_t opt) {
  return atomic_load_explicit(&smi_option_values[opt], memory_order_relaxed);
}
void smi_options_init(void); /* reads the environment; called once by smi_process_init */
void smi_options_print(void); /* verbose: every option, its value and where it came from */
void smi_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void smi_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void smi_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The checked builds' reports of a bad pointer name the call it was passed to (a block freed
 * before is a "double free" when freed again, a "realloc of a freed block" when reallocated) */
typedef enum { SMI_CALL_FREE, SMI_CALL_REALLOC, SMI_CALL_USABLE_SIZE, SMI_CALL_EXPAND } smi_call_t;
static inline const char *smi_call_name(smi_call_t call) {
  static const char *const names[] = {"free", "realloc", "malloc_usable_size", "sm_expand"};
  return names[call];
}
/* reports p, a block already freed (why: "" or "; <the reason it is known>") */
void smi_report_freed(smi_call_t call, const void *p, size_t block_size, const char *why);
/* messages to an explicit output function (NULL: the registered one, else stderr) */
void smi_message_to(sm_output_fun *out, void *arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- stats.c ----
 * Every figure is kept process-wide with relaxed atomics and updated on slow paths only, so the
 * fast paths pay nothing. Block figures for small/medium/large pages (normal, large) are counted
 * when a page's free list is refilled or the page is given back (page.c, "refill accounting"),
 * so they lag by at most one free list and 4096 blocks per page in use; sm_stats_merge
 * brings the calling thread's pages up to date. */
/* amounts with a current value: total = sum of increases, freed = sum of decreases */
#define SM_COUNTS_LIST(X)                                                       \
  X(NORMAL, "normal", true)         /* bytes in blocks of small and medium pages */ \
  X(NORMAL_BLOCKS, "normal blocks", false)                                     \
  X(LARGE, "large", true)           /* bytes in blocks of large pages */        \
  X(LARGE_BLOCKS, "large blocks", false)                                       \
  X(HUGE, "huge", true)             /* bytes in huge blocks (their whole mapping) */ \
  X(HUGE_BLOCKS, "huge blocks", false)                                         \
  X(RESERVED, "reserved", true)     /* address space mapped (segments, huge, cache, arenas) */ \
  X(COMMITTED, "committed", true)   /* reserved minus what was purged and not reused */ \
  X(CACHED, "cached", true)         /* bytes of unused segments in the segment cache */ \
  X(SEGMENTS, "segments", false)    /* segments owned by heaps */                \
  X(PAGES, "pages", false)          /* pages in use */                           \
  X(ABANDONED, "abandoned", false)  /* segments of ended threads, not yet reclaimed */ \
  X(THREADS, "threads", false)                                                  \
  X(HEAPS, "heaps", false)          /* heaps made with sm_heap_new */
typedef enum {
#define SM_COUNT_ENUM(name, text, bytes) SM_COUNT_##name,
  SM_COUNTS_LIST(SM_COUNT_ENUM)
#undef SM_COUNT_ENUM
  SM_COUNT_COUNT
} smi_count_t;
/* events */
#define SM_STATS_LIST(X)                                  \
  X(SEGMENT_MAP, "segments mapped")                       \
  X(SEGMENT_UNMAP, "segments unmapped")                   \
  X(SEGMENT_CACHE_HIT, "segments reused from cache")      \
  X(SEGMENT_RECLAIM, "segments reclaimed")                \
  X(PAGE_PURGE, "pages purged")                           \
  X(PURGED, "bytes purged")                               \
  X(PAGE_TO_FULL, "pages moved to full")                  \
  X(MMAP_CALLS, "mmap calls")                             \
  X(MUNMAP_CALLS, "munmap calls")
typedef enum {
#define SM_STAT_ENUM(name, text) SM_STAT_##name,
  SM_STATS_LIST(SM_STAT_ENUM)
#undef SM_STAT_ENUM
  SM_STAT_COUNT
} smi_stat_t;
typedef struct smi_stat_count_s {
  _Atomic(int64_t) total, freed, current, peak;
} smi_stat_count_t;
typedef struct smi_stats_s {
  smi_stat_count_t count[SM_COUNT_COUNT];
  _Atomic(int64_t) counter[SM_STAT_COUNT];
#if SM_DEBUG
  _Atomic(int64_t) bin_alloc[SM_BIN_COUNT + 1]; /* per size class (last: huge), debug builds only */
  _Atomic(int64_t) bin_free[SM_BIN_COUNT + 1];
#endif
} smi_stats_t;
extern smi_stats_t smi_stats;
static inline void smi_stat_add(smi_stat_t s, int64_t n) {
  atomic_fetch_add_explicit(&smi_stats.counter[s], n, memory_order_relaxed);
}
static inline void smi_stat_inc(smi_stat_t s) { smi_stat_add(s, 1); }
void smi_count_peak(smi_stat_count_t *c, int64_t current);
static inline void smi_count_add(smi_count_t which, int64_t delta) {
  smi_stat_count_t *c = &smi_stats.count[which];
  if (delta == 0) return;
  int64_t now = atomic_fetch_add_explicit(&c->current, delta, memory_order_relaxed) + delta;
  if (delta > 0) {
    atomic_fetch_add_explicit(&c->total, delta, memory_order_relaxed);
    if (now > atomic_load_explicit(&c->peak, memory_order_relaxed)) smi_count_peak(c, now);
  } else {
    atomic_fetch_add_explicit(&c->freed, -delta, memory_order_relaxed);
  }
}
/* plus and minus at once: current moves by the difference only (no false peak) */
static inline void smi_count_move(smi_count_t which, int64_t plus, int64_t minus) {
  smi_stat_count_t *c = &smi_stats.count[which];
  if (plus == 0 && minus == 0) return;
  int64_t now = atomic_fetch_add_explicit(&c->current, plus - minus, memory_order_relaxed) + plus - minus;
  atomic_fetch_add_explicit(&c->total, plus, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->freed, minus, memory_order_relaxed);
  if (now > atomic_load_explicit(&c->peak, memory_order_relaxed)) smi_count_peak(c, now);
}
static inline int64_t smi_count_current(smi_count_t which) {
  return atomic_load_explicit(&smi_stats.count[which].current, memory_order_relaxed);
}
void smi_stats_init(void);   /* at process start: the start time */
void smi_stats_print_at_exit(void); /* show_stats: the table or JSON (allocates nothing) */
/* page.c: refill accounting. sync brings every page of the heap up to date and flushes the heap's
 * pending figures (owner, heap lock held); discard counts a page's blocks as freed */
void smi_stats_heap_sync(sm_heap_t *heap);
void smi_stats_heap_flush(sm_heap_t *heap);
void smi_stats_page_sync(sm_page_t *page);
void smi_stats_page_discard(sm_page_t *page);

static inline uint64_t smi_heap_random(sm_heap_t *heap) { /* xorshift64: cheap, per heap */
  uint64_t x = heap->random;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return heap->random = x;
}

/* ---- sizeclass.c ---- */
extern const uint32_t smi_bin_sizes[SM_BIN_COUNT];

static inline size_t smi_bin_of(size_t size) {
  if (size <= 8) return 0;
  if (size <= 128) return (size + 15) >> 4; /* 16->1, 32->2, ..., 128->8 */
  size_t s = size - 1;
  size_t b = 63 - (size_t)__builtin_clzl(s); /* floor(log2(size-1)) >= 7 */
  if (b < SM_BIN_COARSE_SHIFT) return 9 + (b - 7) * 8 + ((s - ((size_t)1 << b)) >> (b - 3));
  return 9 + (SM_BIN_COARSE_SHIFT - 7) * 8 + (b - SM_BIN_COARSE_SHIFT) * 4 + ((s - ((size_t)1 << b)) >> (b - 2));
}
static inline size_t smi_bin_size(size_t bin) { return smi_bin_sizes[bin]; }
#if SM_DEBUG
void smi_sizeclass_check(void);
#endif

/* ---- arena.c: the memory segments are made of ---- */
/* like smi_os_alloc_aligned; NULL above the memory limit or when the OS refuses */
void *smi_mem_alloc(size_t size, size_t alignment, size_t offset);
void smi_mem_free(void *p, size_t size, size_t purged);
void *smi_mem_remap(void *p, size_t old_size, size_t new_size, size_t alignment);
bool smi_mem_move_into(void *p, size_t size, size_t purged, void *target);
void smi_mem_purged(size_t size);
void smi_mem_unpurged(size_t size);
extern _Atomic(bool) smi_mem_ever; /* memory was ever handed out by this copy of the library */
/* *is_zero: whether the memory reads as zero; avoid_pinned: huge OS pages only if nothing else;
 * arena_id: from that arena only (0: any arena that is not exclusive, then the OS) */
void *smi_mem_alloc_ex(size_t size, size_t alignment, size_t offset, bool avoid_pinned, int arena_id, bool *is_zero);
int smi_mem_exclusive_arena(const void *p); /* p's exclusive arena's id, or 0 */
bool smi_mem_arena_has_heaps(const void *p); /* exclusive, or a heap was made in it: no caching */
bool smi_arena_bind(int arena_id);           /* a heap is made in it; true the first time */
bool smi_arena_id_valid(int arena_id);
/* huge OS pages: never purge them (it would do nothing), give the segment back instead */
bool smi_mem_is_pinned(const void *p);
void smi_arenas_init(void); /* start-up reservations and NUMA detection; from smi_process_init */
bool smi_arena_contains(const void *p);
size_t smi_arenas_count(void);

/* ---- segment.c ---- */
sm_page_t *smi_segment_page_alloc(sm_heap_t *heap, size_t block_size, bool busy);
void smi_segment_page_free(sm_page_t *page, sm_tld_t *tld);
void *smi_huge_alloc(sm_heap_t *heap, size_t size, size_t alignment, bool zero);
void smi_huge_push(sm_heap_t *heap, sm_segment_t *segment); /* its huge_lock held */
void smi_huge_fork_child(sm_heap_t *heap);
sm_segment_t *smi_huge_let_go(sm_heap_t *heap); /* takes its huge_lock */
void smi_huge_free(sm_segment_t *segment);
void *smi_huge_remap(sm_segment_t *segment, size_t newsize);
void smi_segments_abandon(sm_heap_t *heap);
bool smi_segments_reclaim_abandoned(sm_heap_t *heap, size_t max, int kind);
bool smi_segments_abandoned_any(void);
void smi_segments_purge_expired(sm_tld_t *tld, bool force);
void smi_segments_visit_abandoned(size_t max, bool force);
void smi_segments_release_empty(sm_tld_t *tld);
void smi_segments_visit_end(sm_tld_t *tld);
const sm_page_t *smi_segment_page_covering(const sm_segment_t *segment, const void *p);
void smi_segments_note_abandoned_free(void);
void smi_segment_cache_sweep_due(void);
void smi_segment_cache_flush(void);
void smi_segment_cache_purge_all(void);
bool smi_segment_cache_pending(void);
/* purge what is due, if anything waits (slow paths: a malloc's, a free that gives a page back) */
static inline void smi_segments_purge_due(sm_tld_t *tld) {
  if (tld->purge_first != NULL || smi_segment_cache_pending()) smi_segments_purge_expired(tld, false);
}
bool smi_segment_is_registered(const sm_segment_t *segment);
const sm_segment_t *smi_segment_containing(const void *p); /* NULL if p is in no segment */
void smi_segments_absorb(sm_tld_t *tld, sm_tld_t *from, uintptr_t thread_id);
void smi_abandoned_lock_acquire(void); /* fork */
void smi_abandoned_lock_release(void);

/* ---- page.c ---- */
void *smi_malloc_generic(sm_heap_t *heap, size_t size, bool zero);
void *smi_malloc_refill(sm_heap_t *heap, sm_page_t *page, size_t size);
void *smi_malloc_exact(sm_heap_t *heap, size_t size, bool zero);
void smi_page_init(sm_heap_t *heap, sm_page_t *page, size_t block_size, size_t area);
#if SM_SECURE
void smi_page_shuffle_init(uint64_t seed); /* process start: the orders new blocks are handed out in */
#endif
void smi_page_collect(sm_page_t *page);
void smi_page_collect_remote(sm_page_t *page);
void smi_page_purge_free_blocks(sm_page_t *page);
void smi_page_retire(sm_page_t *page);
bool smi_page_retire_keep(sm_heap_t *heap, sm_page_t *page);
void smi_page_unfull(sm_page_t *page);
void smi_page_set_delay(sm_page_t *page, sm_delay_t delay, bool override_never);
void smi_page_queue_push(sm_heap_t *heap, sm_page_t *page, size_t bin);
void smi_page_queue_remove(sm_heap_t *heap, sm_page_t *page);
void smi_page_free_empty(sm_heap_t *heap, sm_page_t *page);

/* ---- heap.c ---- */
void smi_heap_init(sm_heap_t *heap, sm_tld_t *tld, uintptr_t thread_id);
void smi_heap_delayed_free(sm_heap_t *heap);
void smi_heap_collect(sm_heap_t *heap, bool force);
void smi_heap_abandon(sm_heap_t *heap);
void smi_heap_retired_collect(sm_heap_t *heap, bool force);
void smi_heap_collect_idle(sm_heap_t *heap);
void smi_heap_unfull_flagged(sm_heap_t *heap);
sm_heap_t *smi_heap_shared_part(sm_heap_t *heap); /* NULL when out of memory */
void smi_heaps_disown(uintptr_t thread_id);     /* thread exit: its heaps are served with the lock from now on */
void smi_deferred_free(bool force);
bool smi_deferred_free_set(void);
void smi_heaps_stats_sync(void); /* the calling thread's heaps and all locked parts: figures up to date */
extern _Atomic(size_t) smi_remote_notifying; /* free.c: remote frees telling a heap about a full page */
void smi_heaps_fork_lock(void); /* fork: the locks of the heaps made with sm_heap_new, and of their list */
void smi_heaps_fork_unlock(bool child);

/* ---- purge.c: the background purger ---- */
void smi_heaps_register(sm_heap_t *heap);
sm_heap_t *smi_heaps_first(void); /* every heap ever made, linked by all_next */
bool smi_heap_keeps(const sm_heap_t *heap, const sm_page_t *page); /* heap.c: may a realloc into heap keep page's block */
void smi_purger_want(void);
/* the purger's thread: a memory barrier on every thread of the process (false if unavailable) */
bool smi_purger_barrier(void);
void smi_purger_maybe_start(void);
/* The end of a slow path: maybe_start, or want one for a lone allocating thread (purge.c). worth:
 * the thread has memory to give back, read under its heap's lock (smi_purger_worth); may_start
 * false (free): only marks it wanted. */
void smi_purger_consider(bool worth, bool may_start);
#define SM_LONE_SEGMENTS 4 /* a lone thread holding this many segments gets a purger before it frees */
static inline bool smi_purger_worth(const sm_tld_t *tld, bool may_start) {
  return tld->purge_first != NULL || (may_start && tld->segment_count >= SM_LONE_SEGMENTS);
}
void smi_purger_stop(void);
size_t smi_threads_live(void); /* init.c: threads with a heap */
bool smi_purger_running(void);
void smi_purger_fork_prepare(void);
bool smi_fork_guard_enter(void);
void smi_fork_guard_leave(void);
void smi_purger_fork_parent(void);
void smi_purger_fork_child(void);
void smi_purger_note_orphan_free(void);
/* the allocator's few locks are flags held for a handful of instructions (or one bounded
 * collection): spin a little, then yield */
void smi_spin_lock_slow(_Atomic(bool) *lock);
static inline __attribute__((always_inline)) void smi_spin_lock(_Atomic(bool) *lock) {
  if (sm_unlikely(atomic_exchange_explicit(lock, true, memory_order_acquire))) smi_spin_lock_slow(lock);
}
static inline void smi_spin_unlock(_Atomic(bool) *lock) { atomic_store_explicit(lock, false, memory_order_release); }
static inline __attribute__((always_inline)) void smi_heap_lock(sm_heap_t *heap) { smi_spin_lock(&heap->lock); }
static inline bool smi_heap_trylock(sm_heap_t *heap) {
  return !atomic_exchange_explicit(&heap->lock, true, memory_order_acquire);
}
static inline void smi_heap_unlock(sm_heap_t *heap) { smi_spin_unlock(&heap->lock); }

/* ---- free.c ---- */
void smi_free_block_local(sm_page_t *page, sm_block_t *block);
void smi_free_generic(sm_segment_t *segment, sm_page_t *page, void *p);
#if SM_CHECK_FREES
/* every check a free makes (reported the same way, naming call) */
bool smi_block_check_live(const void *p, bool claim, smi_call_t call);
#endif
#if (SM_SECURE || SM_DEBUG) && !SM_TRACK /* SM_CLAIM_FREES (padding.h) */
void smi_free_claimed(void *p);
#endif
#if SM_SECURE
void smi_quarantine_flush(sm_heap_t *heap);
void smi_quarantine_reset(sm_heap_t *heap); /* a pooled heap taken again: its ring starts empty */
void smi_quarantines_hold(void); /* sm_heap_destroy: no thread uses its ring until released */
void smi_quarantines_release(void);
void smi_quarantines_fork_child(void);
/* every heap is the first member of its thread data (init.c, smi_thread_data_alloc) */
static inline sm_quarantine_t *smi_heap_quarantine(sm_heap_t *heap) { return &((sm_thread_data_t *)heap)->quarantine; }
#endif

/* ---- alloc.c ---- */
void *smi_malloc_aligned(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero);
void *smi_realloc(void *p, size_t newsize, bool free_on_fail);
size_t smi_usable_size(const void *p);
#if SM_CHECK_FREES
size_t smi_requested_size(const void *p); /* from the block's padding */
#endif
/* false: an overflow (reported); claimed: the canary is this thread's freed mark (padding.h) */
bool smi_padding_check(const void *p, size_t block_size, bool claimed, smi_call_t call);
void smi_track_block_free(void *p);
#if SM_DEBUG && !SM_TRACK
/* the freed fill across a page's release and its memory's next carving (alloc.c) */
void smi_debug_page_release(sm_page_t *page);    /* as any page goes: its blocks must all be free */
void smi_debug_page_fill_freed(sm_page_t *page); /* before a page of live blocks goes (sm_heap_destroy) */
void smi_debug_carve_check(const sm_page_t *page, const uint8_t *first, size_t len);
#endif
void *smi_enomem(void);

/* ---- small shared helpers ---- */
static inline uintptr_t smi_align_up(uintptr_t x, size_t align) {
  return (x + align - 1) & ~((uintptr_t)align - 1);
}
static inline bool smi_is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* The segment of a block. (p - 1), so that a huge block placed exactly SEGMENT_SIZE past its
 * segment start (over-aligned huge blocks) still maps back; no block sits at offset 0. */
static inline sm_segment_t *smi_ptr_segment(const void *p) {
  return (sm_segment_t *)(((uintptr_t)p - 1) & ~(uintptr_t)SM_SEGMENT_MASK);
}
static inline sm_page_t *smi_segment_page_of(const sm_segment_t *segment, const void *p) {
  size_t idx = ((uintptr_t)p - (uintptr_t)segment) >> segment->page_shift;
  return (sm_page_t *)&segment->pages[idx];
}
/* valgrind builds keep the page start flipped, so that memcheck's leak scan of our metadata does
 * not take it for a pointer to the page's first block (which would hide a leak of that block) */
#define SM_START_XOR (SM_VALGRIND ? (uintptr_t)1 << 63 : 0)
static inline uint8_t *smi_page_start(const sm_page_t *page) { return (uint8_t *)(page->start_ ^ SM_START_XOR); }
static inline void smi_page_set_start(sm_page_t *page, uint8_t *start) { page->start_ = (uintptr_t)start ^ SM_START_XOR; }

/* offset of p within its block; pages other than huge ones span less than 4 GiB, so a 32-bit
 * division does (several times cheaper than a 64-bit one) */
static inline size_t smi_block_offset(const sm_page_t *page, const void *p) {
  size_t offset = (size_t)((const uint8_t *)p - smi_page_start(page));
  if (page->block_size <= UINT32_MAX && offset <= UINT32_MAX) return (uint32_t)offset % (uint32_t)page->block_size;
  return offset % page->block_size;
}

static inline sm_segment_t *smi_page_segment(const sm_page_t *page) {
  return (sm_segment_t *)((uintptr_t)page & ~(uintptr_t)SM_SEGMENT_MASK);
}

/* may tld take new pages (or keep empty ones) in segment? Not in an exclusive arena's segment
 * that came to it from a heap made in that arena (segment.c, before segment_alloc) */
static inline bool smi_tld_may_carve(const sm_tld_t *tld, const sm_segment_t *segment) {
  return segment->arena_excl == 0 || segment->arena_excl == tld->arena_id;
}

/* free-list links: plain pointers, encoded with per-page keys in secure builds. The debug build
 * xors them with the process secret: a live block's first word (often 0, or a pointer to a
 * neighbour, as in a tree node) then does not decode to a link into its page, so free's
 * double-free test need not scan the page's lists for it (free.c, block_is_free): a binary-tree
 * benchmark ran at 500x release's time with plain links, nearly every free a scan. */
/* a link word as stored -> the block it links to */
static inline sm_block_t *smi_link_decode(const sm_page_t *page, uintptr_t word) {
#if SM_SECURE
  return (sm_block_t *)((word ^ page->keys[0]) - page->keys[1]);
#elif SM_DEBUG
  (void)page;
  return (sm_block_t *)(word ^ smi_read_mostly.secret);
#else
  (void)page;
  return (sm_block_t *)word;
#endif
}
/* Where a free block keeps its link. The secure build keeps it in the block's last word, the
 * padding word (padding.h), which holds the canary while the block is live: a free then writes
 * one word where it reads the canary (a cross-thread free touches one line of the block, not
 * two), a malloc's padding write overwrites the link so none leaks to the program, and no write
 * within a freed block's usable bytes (a write after free) reaches a link. Other builds keep it
 * in the first word (the debug build fills and checks the rest of a freed block). */
#define SM_LINK_AT_END SM_INLINE_CHECKS /* the secure build proper */
static inline sm_block_t **smi_block_link(const sm_page_t *page, const sm_block_t *block) {
#if SM_LINK_AT_END
  return (sm_block_t **)((uintptr_t)block + page->block_size - sizeof(sm_block_t));
#else
  (void)page;
  return (sm_block_t **)&block->next;
#endif
}
static inline sm_block_t *smi_block_next(const sm_page_t *page, const sm_block_t *block) {
  sm_block_t **link = smi_block_link(page, block);
  smi_track_defined(link, sizeof *link);
  sm_block_t *next = smi_link_decode(page, (uintptr_t)*link);
  smi_track_noaccess(link, sizeof *link);
  return next;
}
static inline void smi_block_set_next(const sm_page_t *page, sm_block_t *block, sm_block_t *next) {
  sm_block_t **link = smi_block_link(page, block);
  smi_track_undefined(link, sizeof *link);
#if SM_SECURE
  *link = (sm_block_t *)(((uintptr_t)next + page->keys[1]) ^ page->keys[0]);
#elif SM_DEBUG
  (void)page;
  *link = (sm_block_t *)((uintptr_t)next ^ smi_read_mostly.secret);
#else
  (void)page;
  *link = next;
#endif
  smi_track_noaccess(link, sizeof *link);
}

/* thread_free packs three things: the delay state in its 2 low bits, the list's first block in
 * bits 2-47 (every mapping the allocator uses lies below 2^48: os_linux.c, arena.c), and the
 * list's length in bits 48-63, so that taking the list over needs no walk to count it. */
#define SM_TF_COUNT_SHIFT 48
#define SM_TF_ADDRESS_LIMIT ((uintptr_t)1 << SM_TF_COUNT_SHIFT)
static inline sm_block_t *smi_tf_block(uintptr_t tf) { return (sm_block_t *)(tf & (SM_TF_ADDRESS_LIMIT - 4)); }
static inline sm_delay_t smi_tf_delay(uintptr_t tf) { return (sm_delay_t)(tf & 3); }
static inline uint32_t smi_tf_count(uintptr_t tf) { return (uint32_t)(tf >> SM_TF_COUNT_SHIFT); }
/* an empty list */
static inline uintptr_t smi_tf_make(sm_block_t *b, sm_delay_t d) { return (uintptr_t)b | (uintptr_t)d; }
/* the same list, another delay state */
static inline uintptr_t smi_tf_with_delay(uintptr_t tf, sm_delay_t d) { return (tf & ~(uintptr_t)3) | (uintptr_t)d; }
/* b pushed in front (its link already set to the old first block), same delay state */
static inline uintptr_t smi_tf_push(uintptr_t tf, sm_block_t *b) {
  return ((uintptr_t)(smi_tf_count(tf) + 1) << SM_TF_COUNT_SHIFT) | (uintptr_t)b | (tf & 3);
}

static inline sm_heap_t *smi_page_heap(const sm_page_t *page) {
  return atomic_load_explicit(&((sm_page_t *)page)->heap, memory_order_acquire);
}

/* has_aligned is set by the thread that allocates from the page and read by any thread that frees
 * or measures a block of it: relaxed atomics (a pointer handed over carries the happens-before
 * that matters). Two copies: the owner's free fast path tests flags (its own line), everything
 * else reads the read-mostly line's, so that other threads' frees never read the owner's line. */
static inline bool smi_page_has_aligned(const sm_page_t *page) {
  return __atomic_load_n(&page->shared_has_aligned, __ATOMIC_RELAXED) != 0;
}
static inline void smi_page_set_has_aligned(sm_page_t *page) {
  __atomic_store_n(&page->flags.x.has_aligned, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&page->shared_has_aligned, 1, __ATOMIC_RELAXED);
}

/* capacity grows (page_extend, by the owner) while other threads' frees read it to check their
 * pointer (secure and debug builds): relaxed atomics. A block being freed was carved before it was
 * handed out, so it lies below every value the read can return. */
static inline uint32_t smi_page_capacity(const sm_page_t *page) { return __atomic_load_n(&page->capacity, __ATOMIC_RELAXED); }
/* bytes carved: the carved blocks span [start, start + carved). The secure build keeps it with
 * capacity, so that its fast paths' range tests load it instead of multiplying (one instruction
 * fewer, and off the dependency chain, in malloc and in free). */
static inline size_t smi_page_carved(const sm_page_t *page) {
#if SM_SECURE
  return __atomic_load_n(&page->carved, __ATOMIC_RELAXED);
#else
  return (size_t)smi_page_capacity(page) * page->block_size;
#endif
}

#if SM_CHECK_FREES
/* is p the start of a block the page has carved? */
static inline bool smi_page_block_start(const sm_page_t *page, uintptr_t p) {
  uintptr_t start = (uintptr_t)smi_page_start(page);
#if SM_SECURE /* without a division: free's fast test (free.c; the carved span fits 32 bits) */
  uint64_t offset = (uint64_t)(p - start); /* p below start wraps above the carved span */
  return offset < smi_page_carved(page) && offset * page->block_magic < page->block_magic;
#else
  return p >= start && p < start + smi_page_carved(page) && smi_block_offset(page, (void *)p) == 0;
#endif
}
/* is p the start of a carved block of a small, medium or large page in use, in any segment of
 * ours? (a link of a list whose blocks may be in any page: a heap's delayed list) */
static inline bool smi_is_page_block_start(uintptr_t p) {
  const sm_segment_t *segment = smi_ptr_segment((const void *)p);
  if (!smi_segment_is_registered(segment) || segment->kind == SM_SEGMENT_HUGE) return false;
  const sm_page_t *page = smi_segment_page_of(segment, (const void *)p);
  return page->in_use && smi_page_block_start(page, p);
}
/* does block's link word read as a link of its page's lists (the end, or a block of the page)?
 * The block may be live: the word is read without telling the memory checkers. */
static inline bool smi_block_link_reads_free(const sm_page_t *page, const sm_block_t *block) {
  uintptr_t next = (uintptr_t)smi_link_decode(page, smi_track_peek_word(smi_block_link(page, block)));
  return next == 0 || smi_page_block_start(page, next);
}
#endif
static inline void smi_page_set_capacity(sm_page_t *page, size_t capacity) {
  __atomic_store_n(&page->capacity, (uint16_t)capacity, __ATOMIC_RELAXED);
#if SM_SECURE
  __atomic_store_n(&page->carved, capacity * page->block_size, __ATOMIC_RELAXED);
#endif
}

/* the page's blocks with an index < capacity are carved; the rest of the page is untouched */
static inline bool smi_page_is_expandable(const sm_page_t *page) { return page->capacity < page->reserved; }

/* The malloc fast path: one TLS load, one table load, pop. */
void smi_page_list_corrupted(const sm_page_t *page, const sm_block_t *block); /* the report */
void *smi_page_pop_bad_link(sm_page_t *page, const sm_block_t *block);        /* returns NULL */

/* a free-list link that leaves its page is corruption (a write after free): report it, never
 * follow it. One unsigned compare tests both ends; NULL (the list's end) fails it too and is let
 * through. */
static inline bool smi_page_link_ok(const sm_page_t *page, const sm_block_t *next) {
  return sm_likely((uintptr_t)next - (uintptr_t)smi_page_start(page) < smi_page_carved(page)) ||
         next == NULL;
}

/* the next block of a walk over a page's list: in the checked builds a link that leaves the page
 * ends the walk (never followed; the pop or collection that reaches it reports it) */
static inline sm_block_t *smi_list_next(const sm_page_t *page, const sm_block_t *block) {
  sm_block_t *next = smi_block_next(page, block);
  return SM_CHECK_FREES && !smi_page_link_ok(page, next) ? NULL : next;
}

/* Ask for the line of the block the next malloc of this size will hand out, for writing: the
 * next pop reads its link, and the program writes it once it has it. Where another thread freed
 * that block, the line sits in that thread's cache: 37% of sh8bench's time was this pop's load
 * missing. A prefetch never faults (NULL, the list's end, included), and on x86-64 cores without
 * PREFETCHW the instruction is a NOP. Measured (release, 7-9 interleaved runs, medians): sh8bench
 * 0.216 -> 0.203 s, sh6bench 0.364 -> 0.342 s, xmalloc-N 0.328 -> 0.281 s, malloc/free pairs 97.6
 * -> 105.8 Mpairs/s, cross-thread pairs 29.1 -> 31.3, simple-1 +7%, isolated-1 +3%, swing-1 +2%;
 * a plain read prefetch (prefetcht0) gained on sh8bench and xmalloc but lost on simple-1. */
static inline void smi_prefetch_write(const void *p) {
#if defined(__x86_64__)
  __asm__ volatile("prefetchw (%0)" : : "r"(p)); /* an address, not a dereference: p may be NULL */
#else
  __builtin_prefetch(p, 1);
#endif
}

/* Pop `block`, the first of page->free. In the checked builds a block whose link leaves the page
 * is not handed out: the pop reports it and returns NULL (smi_page_pop_bad_link), and the
 * caller takes the generic path. Every block handed out has its link word cleared (in the secure
 * build overwritten by the padding), so a block that reaches a list twice (freed twice at once by
 * two threads) is caught here the second time. */
static inline void *smi_page_pop(sm_page_t *page, sm_block_t *block) {
#if SM_CHECK_FREES
  sm_block_t *next = smi_block_next(page, block);
  if (sm_unlikely(!smi_page_link_ok(page, next))) return smi_page_pop_bad_link(page, block);
  page->free = next;
#else
  sm_block_t *next = smi_block_next(page, block);
  page->free = next;
#endif
  smi_prefetch_write(next);
  page->used++;
  return block; /* padded builds clear the link word in alloc.c (padding_finish) */
}

static inline void *smi_heap_malloc_small(sm_heap_t *heap, size_t size) {
  sm_page_t *page = heap->pages_direct[(size + 7) >> 3];
  sm_block_t *block = page->free;
  if (sm_unlikely(block == NULL)) return smi_malloc_refill(heap, page, size);
  void *p = smi_page_pop(page, block);
  if (SM_CHECK_FREES && sm_unlikely(p == NULL)) return smi_malloc_generic(heap, size, false);
  return p;
}

static inline void *smi_heap_malloc(sm_heap_t *heap, size_t size) {
  if (sm_likely(size <= SM_DIRECT_MAX)) return smi_heap_malloc_small(heap, size);
  return smi_malloc_generic(heap, size, false);
}

#endif
