/* types.h: every shardmalloc structure and constant, and the build-mode levels.
 *
 * Memory is organised as segment -> pages -> blocks:
 *   - a segment is a SEGMENT_SIZE-aligned region from the OS; its header (this file's segment_t,
 *     followed by one page_t per page) sits at its start, so the segment of any block is found by
 *     masking the block's address;
 *   - a page holds blocks of one size class and three free lists (free, local_free, thread_free);
 *   - a heap (one per thread) keeps its pages in one queue per size class.
 * See docs/design.md for the picture and the invariants. */
#ifndef SM_TYPES_H
#define SM_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- build modes: compile-time levels, derived here only ---- */
#ifndef SM_SECURE
#define SM_SECURE 0
#endif
#ifndef SM_DEBUG
#define SM_DEBUG 0
#endif
#ifndef SM_OVERRIDE
#define SM_OVERRIDE 1 /* define malloc/free/... (off under TSan/ASan, which own malloc) */
#endif
#ifndef SM_VALGRIND
#define SM_VALGRIND 0
#endif
#ifndef SM_ASAN
#define SM_ASAN 0
#endif
/* validate every pointer passed to free, and pad blocks to record their requested size */
#define SM_CHECK_FREES (SM_SECURE || SM_DEBUG || SM_VALGRIND || SM_ASAN)
/* bytes every block carries past the requested size in those builds (canary + size record) */
#define SM_PADDING (SM_CHECK_FREES ? 8 : 0)

#define SM_KiB ((size_t)1024)
#define SM_MiB (SM_KiB * SM_KiB)

/* ---- geometry ---- */
#define SM_INTPTR_SIZE 8
#define SM_OS_PAGE_SIZE ((size_t)4096) /* granularity of headers and purges (x86-64, aarch64 4K) */
#define SM_SEGMENT_SHIFT 22             /* 4 MiB segments */
#define SM_SEGMENT_SIZE ((size_t)1 << SM_SEGMENT_SHIFT)
#define SM_SEGMENT_MASK (SM_SEGMENT_SIZE - 1)
#define SM_SMALL_PAGE_SHIFT 16 /* 64 KiB pages: 64 per segment */
#define SM_MEDIUM_PAGE_SHIFT 18 /* 256 KiB pages: 16 per segment (see docs/design.md, size classes) */
#define SM_SMALL_PAGE_SIZE ((size_t)1 << SM_SMALL_PAGE_SHIFT)
#define SM_MEDIUM_PAGE_SIZE ((size_t)1 << SM_MEDIUM_PAGE_SHIFT)
#define SM_SMALL_PAGES_PER_SEGMENT (SM_SEGMENT_SIZE / SM_SMALL_PAGE_SIZE)
#define SM_HUGE_PAGE_SHIFT 48 /* a huge segment has one page: any offset maps to 0 */

/* size limits of each page kind: at least 4 blocks fit a small or medium page */
#define SM_SMALL_OBJ_MAX (SM_SMALL_PAGE_SIZE / 4)   /* 16 KiB */
#define SM_MEDIUM_OBJ_MAX (SM_MEDIUM_PAGE_SIZE / 4) /* 64 KiB */
#define SM_LARGE_OBJ_MAX (SM_SEGMENT_SIZE / 2)      /* 2 MiB; above: huge, a mapping of its own */
/* Secure builds put a PROT_NONE guard page after every segment header and at the end of every
 * segment, so a linear overflow reaches neither metadata nor the next segment. The header area
 * is then the same for every kind (16 KiB), so guards stay in place when a cached segment is
 * reused as another kind. A guard is one OS page, 4 or 16 KiB (smi_guard_size, internal.h): the
 * layout is fixed at start-up. */
#if SM_SECURE
#define SM_GUARD_SIZE smi_guard_size()
#define SM_SECURE_HEADER_SIZE (4 * SM_OS_PAGE_SIZE)
#define SM_HUGE_HEADER_SIZE (SM_SECURE_HEADER_SIZE + SM_GUARD_SIZE) /* where a huge block starts */
#define SM_QUARANTINE_MAX 256
#else
#define SM_GUARD_SIZE 0
#define SM_HUGE_HEADER_SIZE SM_OS_PAGE_SIZE /* a huge segment's header: one page */
#endif

/* direct table: sizes up to SM_DIRECT_MAX index heap->pages_direct by (size+7)/8 */
#define SM_DIRECT_MAX 1024
#define SM_DIRECT_COUNT (SM_DIRECT_MAX / 8 + 1)

/* size classes: 8, 16..128 by 16, then 8 classes per power of two up to 8 KiB, and 4 per power
 * of two from there up to SM_LARGE_OBJ_MAX (sizeclass.c says why) */
#define SM_BIN_COARSE_SHIFT 13       /* sizes above 1 << this have 4 classes per power of two */
#define SM_BIN_COUNT 89              /* bins 0..88, the last one holds SM_LARGE_OBJ_MAX */
#define SM_BIN_FULL SM_BIN_COUNT     /* queue of pages with no free block */
#define SM_MAX_ALIGN_GUARANTEE 16    /* every block of 16 bytes or more is 16-aligned */
#define SM_MAX_ALLOC_SIZE ((size_t)PTRDIFF_MAX)

/* ---- blocks ---- */
typedef struct sm_block_s {
  struct sm_block_s *next; /* encoded in secure builds */
} sm_block_t;

/* delayed-free state, kept in the low 2 bits of page->thread_free (blocks are 8-aligned) */
typedef enum {
  SM_DELAY_NONE = 0,    /* other threads push onto page->thread_free */
  SM_DELAY_USE = 1,     /* page is full: the next remote free also notifies the owner heap */
  SM_DELAY_FREEING = 2, /* transient: a remote thread is pushing onto heap->thread_delayed_free */
  SM_DELAY_NEVER = 3,   /* page has no heap (abandoned): always page->thread_free */
} sm_delay_t;

struct sm_heap_s;
struct sm_segment_s;

/* ---- pages: blocks of one size; lives in its segment's header ----
 * Cache lines laid out so that a free by another thread never takes away a line the owner's fast
 * paths read:
 *   1. the owner's: what its malloc and free fast paths write (free, used, local_free), and its
 *      slow-path state;
 *   2. read by every thread, written only when the page changes shape: what another thread's
 *      free reads (has_aligned; in secure builds the block geometry and the link keys);
 *   3. thread_free, which other threads' frees write: a line of its own in secure builds, whose
 *      fast paths read line 2 (release ones do not, and keep it there: two lines, not three).
 * With 1 and 2 shared, in sh8bench a third of malloc's time was the load of page->free missing;
 * with 2 and 3 shared, the secure build's malloc missed on the keys after every remote free.
 * Block counts fit 16 bits (a page holds at most SM_SMALL_PAGE_SIZE / 8 blocks). */
#define SM_THREAD_FREE_ALIGN (SM_SECURE ? 64 : 8)
typedef struct sm_page_s {
  /* the owner's line */
  _Alignas(64) sm_block_t *free; /* malloc pops from here */
  uint16_t used;        /* blocks handed out, not yet back on free or local_free */
  union {
    uint16_t all; /* the owner's free fast path tests both flags at once */
    struct {
      uint8_t in_full;     /* page is in the heap's full queue */
      uint8_t has_aligned; /* the owner's copy of shared_has_aligned */
    } x;
  } flags;
  uint8_t free_is_zero; /* every block on `free` is zero past its first word */
  uint8_t retire_ticks; /* 1: an empty page kept alive until heap->slow_calls reaches purge_at */
  uint8_t bin;
  uint8_t is_purged;    /* the page's memory was given back and not used since: SM_PURGED_* */
  sm_block_t *local_free; /* frees by the owning thread */
  uint16_t reserved;    /* blocks that fit the page */
  /* refill accounting (page.c): blocks freed since the last fold, and the blocks on `free` and the
   * capacity at that fold */
  uint16_t stat_freed, stat_base_on_free, stat_base_capacity;
  uint8_t in_use;       /* handed out by its segment */
  uint8_t mem_is_zero;  /* the page's memory is known zero (fresh or purged) */
  uint8_t purge_pending;
  uint8_t span_slots;   /* large segments: slots the page covers (in use, or waiting to be purged) */
  uint8_t free_is_remote; /* release build: `free` is a list other threads freed (page_borrow) */
  struct sm_page_s *next, *prev; /* in a heap page queue, or in the tld purge list when unused */
  uint64_t purge_at;    /* unused page: ms at which it is purged; retired page: slow call at which it goes */
  /* the read-mostly line: written by the owner only when the page changes shape */
  _Alignas(64) _Atomic(struct sm_heap_s *) heap; /* owner heap; NULL while abandoned */
  size_t block_size;
  uintptr_t start_;     /* first block: use smi_page_start (hidden from valgrind's leak scan) */
  uint16_t capacity;    /* blocks carved out so far (free lists are built lazily) */
  uint8_t shared_has_aligned; /* some block was handed out at an interior (aligned) address */
#if SM_DEBUG
  uint32_t freed_fill;  /* debug: bytes from the start holding the freed fill since a release (alloc.c) */
#endif
#if SM_SECURE
  size_t carved;        /* capacity * block_size, kept with capacity: the fast paths' range tests
                         * without a multiply (smi_page_carved) */
#endif
#if SM_SECURE
  uintptr_t keys[2];    /* free-list pointer encoding */
  uint64_t block_magic; /* ceil(2^64 / block_size): free's block-start test without a division;
                         * 0 while the page is not in use and in huge segments (that test fails) */
#endif
  /* other threads' line (secure builds) */
  _Alignas(SM_THREAD_FREE_ALIGN) _Atomic(uintptr_t) thread_free; /* frees by other threads: block pointer | sm_delay_t */
} sm_page_t;

/* is_purged: 0, or how the page's memory went (segment.c, purge_exchange) */
#define SM_PURGED_DUE 1       /* its delay had passed (or everything was purged) */
#define SM_PURGED_EXCHANGED 2 /* early, for fresh memory another page was about to touch */

typedef enum {
  SM_SEGMENT_SMALL,  /* 64 KiB pages */
  SM_SEGMENT_MEDIUM, /* 256 KiB pages */
  SM_SEGMENT_LARGE,  /* one block per page, each page a span of consecutive 64 KiB slots */
  SM_SEGMENT_HUGE,   /* one block in a mapping of its own (may exceed SM_SEGMENT_SIZE) */
} sm_segment_kind_t;

/* ---- segments: SEGMENT_SIZE-aligned OS regions; header at the start ---- */
typedef struct sm_segment_s {
  _Atomic(uintptr_t) thread_id; /* owner thread's id; 0 when abandoned or huge */
  uint8_t kind;
  uint8_t in_free_queue; /* in the tld queue of segments with an unused page */
  uint8_t purged;        /* cached segment whose memory was given back (reads as zero): SM_PURGED_* */
  uint8_t arena_excl;    /* its memory is in an exclusive arena: that arena's id (else 0) */
  size_t purged_bytes;   /* bytes of it given back and not used since (stats: committed) */
  size_t page_shift;    /* page index = (p - segment) >> page_shift */
  size_t page_count;    /* pages in this segment */
  size_t used;          /* pages in use */
  uint64_t span_map;    /* large segments: a bit per 64 KiB slot that an in-use page covers */
  size_t span_free_max; /* large segments: the longest run of unused slots (a quick skip) */
  size_t huge_requested; /* padded builds, huge blocks: the requested size, where the padding's
                          * 32-bit record cannot hold the slack past it (alloc.c, padding_resize) */
  size_t size;          /* bytes from the segment start to its end */
  uint8_t *map_start;   /* the OS mapping (differs from the segment for over-aligned huge blocks) */
  size_t map_size;
  uint64_t purge_at;    /* cached segments: when to purge them; once purged, when that was */
  uintptr_t cached_by;  /* cached segments: the thread that left it there (0: none) */
  struct sm_segment_s *next, *prev;   /* tld queue of segments with an unused page */
  struct sm_segment_s *abandoned_next;
  uintptr_t cookie;     /* address ^ process secret: a cheap validity check */
  sm_page_t pages[];    /* page_count entries */
} sm_segment_t;

typedef struct sm_page_queue_s {
  sm_page_t *first, *last;
} sm_page_queue_t;

typedef struct sm_segment_queue_s {
  sm_segment_t *first, *last;
} sm_segment_queue_t;

/* ---- per-thread segment bookkeeping ---- */
typedef struct sm_tld_s {
  sm_segment_queue_t small_free;  /* small segments with an unused page */
  sm_segment_queue_t medium_free; /* medium segments with an unused page */
  /* large segments with an unused slot, by their longest run of unused slots (best fit) */
  sm_segment_queue_t large_free[SM_SMALL_PAGES_PER_SEGMENT + 1];
  size_t segment_count;           /* segments owned (excluding cache) */
  size_t segment_peak;            /* the most it has owned at once */
  sm_page_t *purge_first, *purge_last; /* unused pages waiting to be purged, oldest first */
  size_t purge_bytes;             /* their memory */
  size_t exchange_slack;          /* purge_exchange leaves this much of it (segment.c) */
  uint64_t now_ms;                /* last clock reading */
  int arena_id;                   /* heaps made in an arena: all memory from there (0: anywhere) */
  int visits;                     /* heap visits under way: segments that empty stay mapped... */
  struct sm_segment_s *visit_held; /* ...here (linked by next), freed when the last one ends */
} sm_tld_t;

/* ---- heaps: one per thread (its backing heap), plus those made with sm_heap_new ----
 * A heap owns its pages; a heap made with sm_heap_new also has segments of its own (its own tld),
 * so it can be destroyed, or outlive its creator, without touching any other heap.
 * Allocation without a lock is for the heap's owner thread only (thread_id == the caller's id).
 * Any other thread allocates from `shared`, a second part of the heap (made on first use) that
 * every allocation locks; a heap whose creator has ended is itself served that way
 * (locked_access). Segments of locked parts carry an id that no thread has, so all their frees
 * take the remote path. */
typedef enum { SM_HEAP_THREAD, SM_HEAP_USER, SM_HEAP_SHARED } sm_heap_kind_t;

typedef struct sm_heap_s {
  sm_page_t *pages_direct[SM_DIRECT_COUNT]; /* small size -> page with (maybe) free blocks */
  sm_page_queue_t pages[SM_BIN_FULL + 1];   /* per size class, plus the full queue */
  _Atomic(sm_block_t *) thread_delayed_free; /* remote frees into full pages */
  uintptr_t thread_id;
  sm_tld_t *tld;
  size_t page_count;
  size_t retired_min, retired_max; /* bins that may hold a retired (kept empty) page */
  size_t retired_next;             /* slow_calls value at which the first retired page expires */
  uint64_t random;
  struct sm_heap_s *pool_next;
  uint8_t kind;               /* sm_heap_kind_t */
  bool locked_access;         /* every allocation takes `lock` (shared parts, heaps whose creator ended) */
  struct sm_heap_s *shared;   /* user heaps: the part other threads allocate from (or NULL) */
  struct sm_heap_s *parent;   /* shared parts: their heap */
  struct sm_heap_s *user_next, *user_prev; /* user heaps: list of all of them (init.c) */
  struct sm_segment_s *huge_first; /* its huge blocks (linked by segment next/prev; under huge_lock) */
  bool full_have_free;        /* the purger left free blocks in full pages: owner, have a look */
  bool fork_orphan;           /* a fork child's heap of a thread that did not survive the fork (purge.c) */
  uint32_t quick_refills;     /* refills that skipped the slow path (page.c, page_refill_quick) */
  int64_t stat_delta[8];      /* block statistics not yet added to the process totals (stats.c) */
  /* From here on: fields the purger reads without the lock, kept when a heap is reused.
   * The owner takes `lock` in its slow paths only (never on a fast path); the background purger
   * only tries it, for heaps that have been idle (slow_calls unchanged) since its last look. */
  _Atomic(bool) lock;
  /* guards huge_first and its blocks' links: taken by whichever thread frees or moves a huge
   * block, for a few instructions, never with a system call; a lock of its own, so that other
   * threads never hold `lock` of a thread's own heap (a fork would leave it held in the child) */
  _Atomic(bool) huge_lock;
  /* bumped (under huge_lock) whenever the list is let go (thread exit, sm_heap_delete, destroy):
   * a block taken off it to be moved goes back on only if the epoch is the same (segment.c) */
  uint32_t huge_epoch;
  _Atomic(size_t) slow_calls;
  size_t purger_seen;         /* the purger's copy of slow_calls (only the purger uses it) */
  struct sm_heap_s *all_next; /* every heap ever made (they are never unmapped) */
} sm_heap_t;

#if SM_SECURE
/* freed blocks waiting before their real free (a FIFO ring; free.c) */
typedef struct sm_quarantine_s {
  size_t head, count;
  _Atomic(bool) busy; /* its thread is using it (sm_heap_destroy waits that out) */
  void *blocks[SM_QUARANTINE_MAX]; /* NULL: a block whose heap was destroyed */
} sm_quarantine_t;
#endif

/* heap and tld of one thread (or of a heap made by sm_heap_new), allocated together: one OS page
 * in the release build, so a thread costs one page fault and 4 KiB of it */
typedef struct sm_thread_data_s {
  sm_heap_t heap;
  sm_tld_t tld;
#if SM_SECURE
  sm_quarantine_t quarantine; /* last: its 2 KiB are touched only while the quarantine option is on */
#endif
} sm_thread_data_t;

/* ---- layout facts the code relies on ---- */
_Static_assert((SM_SEGMENT_SIZE & (SM_SEGMENT_SIZE - 1)) == 0, "segment size is a power of two");
_Static_assert(SM_SEGMENT_SIZE % SM_MEDIUM_PAGE_SIZE == 0, "medium pages tile a segment");
_Static_assert(sizeof(sm_block_t) == SM_INTPTR_SIZE, "a free block holds one pointer");
_Static_assert(sizeof(void *) == 8, "64-bit platforms only");
_Static_assert(SM_DIRECT_MAX <= SM_SMALL_OBJ_MAX, "direct sizes are small");
_Static_assert(offsetof(sm_page_t, free) == 0, "free list first: one load on the fast path");
_Static_assert(SM_SMALL_PAGES_PER_SEGMENT <= 64, "a large segment's slots fit span_map");
_Static_assert(SM_SMALL_PAGE_SIZE / 8 <= UINT16_MAX, "block counts of a page fit 16 bits");
_Static_assert(sizeof(sm_page_t) == (SM_SECURE ? 192 : 128) && offsetof(sm_page_t, heap) == 64 &&
                   offsetof(sm_page_t, thread_free) == (SM_SECURE ? 128 : 96),
               "a page descriptor is the owner's cache line, the read-mostly one, and (secure) other threads'");

#endif
