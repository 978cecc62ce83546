/* arena.c: where segments' memory comes from. Every segment and huge mapping is obtained and
 * given back through smi_mem_alloc / smi_mem_free / smi_mem_remap, which keep the reserved and
 * committed figures and enforce the memory limit (sm_option_memory_limit).
 *
 * Memory comes from arenas first, then from the OS. An arena is a region reserved at once
 * (reserve_os_memory, arena_reserve, sm_reserve_os_memory, 1 GiB huge OS pages) or handed over
 * (sm_manage_os_memory), carved into SM_SEGMENT_SIZE units. A unit is claimed with a CAS on a
 * bitmap (runs of units for huge blocks), so no lock is taken; a freed unit is purged and goes
 * back to the bitmap: arenas are never unmapped. The table of arenas is static (a few KiB of
 * .bss per entry, untouched until used), so nothing here allocates and start-up reservations
 * can happen inside process initialisation.
 *
 * Pinned memory (huge OS pages: hugetlb or memory handed over as large) cannot be purged: its
 * units are handed out again as they are, and reported as not zero.
 *
 * Arena ids: the public functions name an arena by the index of its first entry plus one. A heap
 * made in an arena (its tld's arena_id) takes memory from that arena only; an exclusive arena
 * serves only such heaps (segment.c keeps its segments out of the shared cache and out of other
 * threads' reach). */
#include "internal.h"

#include <sched.h>

/* the interface (declared in internal.h) */
void *smi_mem_alloc_ex(size_t size, size_t alignment, size_t offset, bool avoid_pinned, int arena_id, bool *is_zero);
bool smi_mem_is_pinned(const void *p);
int smi_mem_exclusive_arena(const void *p);
bool smi_arena_id_valid(int arena_id);
void smi_arenas_init(void);
bool smi_arena_contains(const void *p);
size_t smi_arenas_count(void);

#define SM_ARENA_MAX 64
#define SM_ARENA_UNITS 4096 /* units per entry (16 GiB): larger regions take several entries */
#define SM_ARENA_WORDS (SM_ARENA_UNITS / 64)
#define SM_HUGE_2M ((size_t)2 << 20)
#define SM_HUGE_1G ((size_t)1 << 30)

typedef _Atomic(uint64_t) smi_bitmap_t[SM_ARENA_WORDS];
typedef struct smi_arena_s {
  _Atomic(uint8_t *) start; /* NULL until the entry is ready */
  size_t units;
  int numa_node;            /* -1: any */
  bool pinned;              /* never purged: units keep their memory and contents */
  bool exclusive;           /* only heaps made in it take its memory */
  _Atomic(bool) bound;      /* a heap was made in it (smi_arena_bind) */
  int id;                   /* the public id: its first entry's index + 1 */
  smi_bitmap_t in_use;      /* handed out */
  smi_bitmap_t committed;   /* holds memory counted in COMMITTED */
  smi_bitmap_t dirty;       /* may hold non-zero bytes */
} smi_arena_t;

static SM_BSS_LARGE smi_arena_t arenas[SM_ARENA_MAX];
static _Atomic(size_t) arena_slots;  /* entries claimed (a claimed one may not be ready yet) */
static _Atomic(int64_t) arena_idle;  /* bytes of units not handed out: outside the memory limit */
static _Atomic(bool) arena_growing;  /* one thread at a time reserves an arena_reserve arena */

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };
static _Atomic(int) arenas_state;

/* 2 MiB hugetlb pages (allow_large_os_pages): looked at once (0: not yet, 1: the pool had free
 * pages, 2: it had none). After a failed try the next `backoff` requests skip it (doubling up to
 * 1024), so a pool that has run dry costs one failing mmap now and then, not one per segment. */
static _Atomic(int) hugetlb_state;
static _Atomic(size_t) hugetlb_skip, hugetlb_backoff;

/* ---- bitmaps: runs of bits [i, i+n), word by word ---- */

static inline uint64_t word_mask(size_t j, size_t end, size_t *k) {
  size_t b = j % 64, n = 64 - b;
  if (n > end - j) n = end - j;
  *k = n;
  return (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << b;
}

static void bits_set(smi_bitmap_t bm, size_t i, size_t n, bool on) {
  for (size_t j = i, k; j < i + n; j += k) {
    uint64_t m = word_mask(j, i + n, &k);
    if (on) atomic_fetch_or_explicit(&bm[j / 64], m, memory_order_acq_rel);
    else atomic_fetch_and_explicit(&bm[j / 64], ~m, memory_order_acq_rel);
  }
}

/* the first set bit in [i, i+n), or SIZE_MAX */
static size_t bits_find_set(smi_bitmap_t bm, size_t i, size_t n) {
  for (size_t j = i, k; j < i + n; j += k) {
    uint64_t w = atomic_load_explicit(&bm[j / 64], memory_order_relaxed) & word_mask(j, i + n, &k);
    if (w != 0) return (j & ~(size_t)63) + (size_t)__builtin_ctzll(w);
  }
  return SIZE_MAX;
}

/* the first clear bit at or after i (below end), or end */
static size_t bits_find_clear(smi_bitmap_t bm, size_t i, size_t end) {
  for (size_t j = i, k; j < end; j += k) {
    uint64_t w = ~atomic_load_explicit(&bm[j / 64], memory_order_relaxed) & word_mask(j, end, &k);
    if (w != 0) return (j & ~(size_t)63) + (size_t)__builtin_ctzll(w);
  }
  return end;
}

static size_t bits_count(smi_bitmap_t bm, size_t i, size_t n) {
  size_t c = 0;
  for (size_t j = i, k; j < i + n; j += k)
    c += (size_t)__builtin_popcountll(atomic_load_explicit(&bm[j / 64], memory_order_relaxed) & word_mask(j, i + n, &k));
  return c;
}

/* set [i, i+n) if all of it is clear; else leave it as it was (undo the words already set) */
static bool bits_claim(smi_bitmap_t bm, size_t i, size_t n) {
  for (size_t j = i, k; j < i + n; j += k) {
    uint64_t m = word_mask(j, i + n, &k);
    uint64_t old = atomic_load_explicit(&bm[j / 64], memory_order_relaxed);
    do {
      if (old & m) {
        bits_set(bm, i, j - i, false);
        return false;
      }
    } while (!atomic_compare_exchange_weak_explicit(&bm[j / 64], &old, old | m, memory_order_acquire, memory_order_relaxed));
  }
  return true;
}

/* ---- the table ---- */

static size_t arena_count(void) {
  size_t n = atomic_load_explicit(&arena_slots, memory_order_acquire);
  return n < SM_ARENA_MAX ? n : SM_ARENA_MAX;
}

static smi_arena_t *arena_of(const void *p) {
  for (size_t i = 0, n = arena_count(); i < n; i++) {
    uint8_t *start = atomic_load_explicit(&arenas[i].start, memory_order_acquire);
    if (start != NULL && (const uint8_t *)p >= start && (const uint8_t *)p < start + (arenas[i].units << SM_SEGMENT_SHIFT))
      return &arenas[i];
  }
  return NULL;
}

/* Register [start, start+size) (SM_SEGMENT_SIZE-aligned, whole units) as one or more entries.
 * Returns its id, or 0 when the table is full. */
static int arena_add(uint8_t *start, size_t size, int numa_node, bool pinned, bool committed, bool zero, bool exclusive) {
  size_t units = size >> SM_SEGMENT_SHIFT, entries = (units + SM_ARENA_UNITS - 1) / SM_ARENA_UNITS;
  size_t first = atomic_load_explicit(&arena_slots, memory_order_relaxed);
  do {
    if (units == 0 || first + entries > SM_ARENA_MAX) return 0;
  } while (!atomic_compare_exchange_weak(&arena_slots, &first, first + entries));
  smi_count_add(SM_COUNT_RESERVED, (int64_t)size);
  if (committed) smi_count_add(SM_COUNT_COMMITTED, (int64_t)size);
  atomic_fetch_add_explicit(&arena_idle, (int64_t)size, memory_order_relaxed);
  for (size_t e = 0; e < entries; e++) {
    smi_arena_t *a = &arenas[first + e];
    a->units = units - e * SM_ARENA_UNITS < SM_ARENA_UNITS ? units - e * SM_ARENA_UNITS : SM_ARENA_UNITS;
    a->numa_node = numa_node;
    a->pinned = pinned;
    a->exclusive = exclusive;
    a->id = (int)first + 1;
    bits_set(a->committed, 0, a->units, committed);
    bits_set(a->dirty, 0, a->units, !zero);
    atomic_store_explicit(&a->start, start + ((e * SM_ARENA_UNITS) << SM_SEGMENT_SHIFT), memory_order_release);
  }
  return (int)first + 1;
}

/* n units of a (starting at start), such that (result + offset) is a multiple of alignment */
static void *arena_alloc_in(smi_arena_t *a, uint8_t *start, size_t n, size_t alignment, size_t offset, bool *is_zero) {
  if (n > a->units) return NULL;
  size_t first = 0, step = 1;
  if (alignment > SM_SEGMENT_SIZE) { /* every step-th unit qualifies, from `first` on */
    if ((offset & SM_SEGMENT_MASK) != 0) return NULL;
    uintptr_t at = (uintptr_t)start + offset;
    first = (smi_align_up(at, alignment) - at) >> SM_SEGMENT_SHIFT;
    step = alignment >> SM_SEGMENT_SHIFT;
  } else if ((((uintptr_t)start + offset) & (alignment - 1)) != 0) {
    return NULL;
  }
  size_t i = first;
  while (i + n <= a->units) {
    i = bits_find_clear(a->in_use, i, a->units);
    if (step > 1) i = first + smi_align_up(i - first, step);
    if (i + n > a->units) break;
    size_t busy = bits_find_set(a->in_use, i, n);
    if (busy != SIZE_MAX) {
      i = busy + 1;
      continue;
    }
    if (!bits_claim(a->in_use, i, n)) continue; /* raced with another claim: look again */
    size_t uncommitted = n - bits_count(a->committed, i, n);
    bits_set(a->committed, i, n, true);
    *is_zero = bits_find_set(a->dirty, i, n) == SIZE_MAX;
    bits_set(a->dirty, i, n, true);
    smi_count_add(SM_COUNT_COMMITTED, (int64_t)(uncommitted << SM_SEGMENT_SHIFT));
    atomic_fetch_sub_explicit(&arena_idle, (int64_t)(n << SM_SEGMENT_SHIFT), memory_order_relaxed);
    return start + (i << SM_SEGMENT_SHIFT);
  }
  return NULL;
}

/* Arenas of the current node (or of none) first, then the others. Pinned ones only if allowed.
 * arena_id: that arena only; 0: any but the exclusive ones. */
static void *arenas_alloc(size_t size, size_t alignment, size_t offset, bool pinned_ok, int arena_id, bool *is_zero) {
  size_t count = arena_count();
  if (count == 0) return NULL;
  int node = smi_os_numa_count() > 1 ? smi_os_numa_node() : -1;
  size_t n = (size + SM_SEGMENT_MASK) >> SM_SEGMENT_SHIFT;
  for (int pass = 0; pass < (node < 0 ? 1 : 2); pass++) {
    for (size_t i = 0; i < count; i++) {
      smi_arena_t *a = &arenas[i];
      uint8_t *start = atomic_load_explicit(&a->start, memory_order_acquire); /* then its fields are set */
      if (start == NULL) continue;
      bool local = node < 0 || a->numa_node < 0 || a->numa_node == node;
      if (local != (pass == 0) || (a->pinned && !pinned_ok) || (arena_id != 0 ? a->id != arena_id : a->exclusive)) continue;
      void *p = arena_alloc_in(a, start, n, alignment, offset, is_zero);
      if (p != NULL) return p;
    }
  }
  return NULL;
}

/* ---- memory from the OS ---- */

static bool hugetlb_2m_usable(void) {
  if (SM_SECURE || !smi_option(sm_option_allow_large_os_pages)) return false; /* no guard page inside a 2 MiB page */
  int state = atomic_load_explicit(&hugetlb_state, memory_order_relaxed);
  if (state == 0) {
    state = smi_os_hugetlb_free(SM_HUGE_2M) > 0 ? 1 : 2;
    atomic_store_explicit(&hugetlb_state, state, memory_order_relaxed);
  }
  if (state != 1) return false;
  size_t skip = atomic_load_explicit(&hugetlb_skip, memory_order_relaxed);
  while (skip > 0) {
    if (atomic_compare_exchange_weak_explicit(&hugetlb_skip, &skip, skip - 1, memory_order_relaxed, memory_order_relaxed))
      return false;
  }
  return true;
}

/* 2 MiB hugetlb pages for [size] bytes aligned to a segment; NULL (quietly) if the pool refuses */
static void *os_alloc_hugetlb(size_t size, int node) {
  uint8_t *p = smi_os_reserve_aligned(size, SM_SEGMENT_SIZE);
  if (p != NULL && smi_os_map_hugetlb(p, size, SM_HUGE_2M, node)) {
    atomic_store_explicit(&hugetlb_backoff, 0, memory_order_relaxed);
    return p;
  }
  if (p != NULL) smi_os_free(p, size);
  size_t backoff = atomic_load_explicit(&hugetlb_backoff, memory_order_relaxed);
  backoff = backoff == 0 ? 1 : backoff >= 1024 ? 1024 : 2 * backoff;
  atomic_store_explicit(&hugetlb_backoff, backoff, memory_order_relaxed);
  atomic_store_explicit(&hugetlb_skip, backoff, memory_order_relaxed);
  return NULL;
}

static bool os_alloc_allowed(void) {
  return !smi_option(sm_option_disallow_os_alloc) || atomic_load_explicit(&arenas_state, memory_order_acquire) != INIT_DONE;
}

/* Reserve an arena of `size` bytes from the OS: 2 MiB hugetlb pages when allowed and the pool
 * holds enough, else ordinary memory (transparent huge pages with allow_large). */
static int arena_reserve_os(size_t size, bool commit, bool allow_large, bool exclusive, int *arena_id) {
  size_t rounded = smi_align_up(size, SM_SEGMENT_SIZE);
  if (size == 0 || rounded < size) return EINVAL;
  size = rounded;
  size_t entries = (size / SM_SEGMENT_SIZE + SM_ARENA_UNITS - 1) / SM_ARENA_UNITS;
  if (entries > SM_ARENA_MAX) return EINVAL; /* more than all the entries hold: never */
  if (arena_count() + entries > SM_ARENA_MAX) return ENOMEM;
  uint8_t *p = NULL;
  bool pinned = false;
  /* the pool's count decides here (not the backoff of per-segment tries): one look per arena */
  if (allow_large && !SM_SECURE && smi_os_hugetlb_free(SM_HUGE_2M) >= size / SM_HUGE_2M)
    pinned = (p = os_alloc_hugetlb(size, -1)) != NULL;
  if (p == NULL) {
    p = smi_os_alloc_aligned_noreserve(size, SM_SEGMENT_SIZE);
    if (p == NULL) return ENOMEM;
    if (allow_large) smi_os_use_large_pages(p, size);
    if (commit) smi_os_populate(p, size);
  }
  smi_stat_inc(SM_STAT_MMAP_CALLS);
  int id = arena_add(p, size, -1, pinned, commit || pinned, true, exclusive);
  if (id == 0) {
    smi_os_free(p, size);
    return ENOMEM;
  }
  if (arena_id != NULL) *arena_id = id;
  if (smi_option(sm_option_verbose))
    smi_message("arena %d: reserved %zu MiB at %p%s%s", id, size >> 20, (void *)p,
                pinned ? " (2 MiB hugetlb pages)" : allow_large ? " (transparent huge pages)" : "", exclusive ? ", exclusive" : "");
  return 0;
}

/* arena_reserve > 0: once the arenas are full, reserve another one rather than map a segment */
static bool arena_grow(size_t size) {
  long reserve = smi_option(sm_option_arena_reserve);
  bool expected = false;
  if (reserve <= 0 || size > (size_t)reserve / 2 ||
      !atomic_compare_exchange_strong(&arena_growing, &expected, true))
    return false;
  bool ok = arena_reserve_os((size_t)reserve, false, smi_option(sm_option_allow_large_os_pages) != 0, false, NULL) == 0;
  atomic_store(&arena_growing, false);
  return ok;
}

static void *os_alloc(size_t size, size_t alignment, size_t offset, bool pinned_ok) {
  int node = smi_os_numa_count() > 1 ? smi_os_numa_node() : -1;
  void *p = NULL;
  smi_stat_inc(SM_STAT_MMAP_CALLS);
  if (pinned_ok && alignment == SM_SEGMENT_SIZE && offset == 0 && (size & SM_SEGMENT_MASK) == 0 && hugetlb_2m_usable())
    p = os_alloc_hugetlb(size, node);
  if (p == NULL) {
    p = smi_os_alloc_aligned(size, alignment, offset);
    if (p == NULL) return NULL;
    if (node >= 0) smi_os_numa_bind(p, size, node); /* pages follow this thread's node, not the first toucher's */
  }
  smi_count_add(SM_COUNT_RESERVED, (int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, (int64_t)size);
  return p;
}

/* ---- the interface to segment.c ---- */

_Atomic(bool) smi_mem_ever; /* this copy of the library has handed out memory (sm_process_done) */

/* the limit counts what the allocator has mapped, in use or cached, but not idle arena units */
static bool mem_limit_allows(size_t size) {
  long limit = smi_option(sm_option_memory_limit);
  if (limit <= 0) return true;
  int64_t used = smi_count_current(SM_COUNT_RESERVED) - atomic_load_explicit(&arena_idle, memory_order_relaxed);
  return used + (int64_t)size <= limit;
}

/* Memory for a segment or huge block. *is_zero: whether it reads as zero. avoid_pinned: take huge
 * OS pages only when nothing else is left (a thread's first segments, eager_commit_delay).
 * arena_id: from that arena only (NULL once it is full); 0: arenas that are not exclusive, then
 * the OS. */
/* an option the program set makes allocations fail: said once, so that a program that fails at
 * once (disallow_os_alloc without a reservation) is not left to guess why */
static _Atomic(bool) refusal_told[2];
static void tell_refusal(bool by_limit, size_t size) {
  if (atomic_exchange_explicit(&refusal_told[by_limit], true, memory_order_relaxed)) return;
  if (by_limit)
    smi_warning("memory_limit (%ld bytes) reached: %zu more bytes of OS memory refused, and allocations that need "
                "them fail (said once)", smi_option(sm_option_memory_limit), size);
  else
    smi_warning("disallow_os_alloc: the reserved arenas have no room for %zu more bytes, and allocations that need "
                "them fail (said once)", size);
}

void *smi_mem_alloc_ex(size_t size, size_t alignment, size_t offset, bool avoid_pinned, int arena_id, bool *is_zero) {
  if (sm_unlikely(atomic_load_explicit(&arenas_state, memory_order_acquire) != INIT_DONE)) smi_arenas_init();
  if (!mem_limit_allows(size)) {
    tell_refusal(true, size);
    return NULL;
  }
  *is_zero = true;
  void *p = arenas_alloc(size, alignment, offset, !avoid_pinned || arena_id != 0, arena_id, is_zero);
  if (p == NULL && arena_id == 0 && os_alloc_allowed()) {
    if (arena_grow(size)) p = arenas_alloc(size, alignment, offset, !avoid_pinned, 0, is_zero);
    if (p == NULL) p = os_alloc(size, alignment, offset, !avoid_pinned);
  }
  if (p == NULL && avoid_pinned && arena_id == 0) p = arenas_alloc(size, alignment, offset, true, 0, is_zero);
  if (p == NULL && arena_id == 0 && !os_alloc_allowed()) tell_refusal(false, size);
  if (p != NULL && !atomic_load_explicit(&smi_mem_ever, memory_order_relaxed))
    atomic_store_explicit(&smi_mem_ever, true, memory_order_relaxed);
  return p;
}

/* like smi_os_alloc_aligned: the memory reads as zero; NULL above the memory limit, when the OS
 * refuses, or (disallow_os_alloc) when the arenas are full */
void *smi_mem_alloc(size_t size, size_t alignment, size_t offset) {
  bool zero;
  void *p = smi_mem_alloc_ex(size, alignment, offset, false, 0, &zero);
  if (p != NULL && !zero) memset(p, 0, size); /* reused huge OS pages, or memory handed over dirty */
  return p;
}

#if SM_UNMAP_GRACE
/* The secure and debug builds read a pointer's segment map bit, then its segment header and
 * padding: a thread preempted between those reads while another thread freed and unmapped that
 * memory faulted (a free racing a realloc of the same huge block, under load). Memory they give
 * back to the OS first becomes a read-only mapping of zeros (no cookie there: "not allocated by
 * shardmalloc"), unmapped for good at the next such free: a grace period of one unmap. So does the
 * range a move takes pages from (mremap keeps it, MREMAP_DONTUNMAP; a growing realloc). Not in the
 * memory-checker builds: a new mapping would tell the checker that a freed huge block's memory is
 * readable again, hiding a read after free from it. */
static _Atomic(uint64_t) unmap_pending; /* its address and size in 4 KiB units: 36 and 28 bits */
static void os_free_after_grace(void *p, size_t size) {
  uint64_t entry = ((uint64_t)(uintptr_t)p >> 12) | ((uint64_t)(size >> 12) << 36);
  if (((uintptr_t)p | size) & 4095 || (uintptr_t)p >> 48 != 0 || size >> 40 != 0 || !smi_os_free_keep_addresses(p, size)) {
    smi_os_free(p, size);
    return;
  }
  uint64_t old = atomic_exchange_explicit(&unmap_pending, entry, memory_order_acq_rel);
  if (old != 0) smi_os_free((void *)(uintptr_t)((old & (((uint64_t)1 << 36) - 1)) << 12), (size_t)(old >> 36) << 12);
}
#else
#define os_free_after_grace smi_os_free
#endif

/* purged: how many of the bytes were purged (not counted as committed any more) */
void smi_mem_free(void *p, size_t size, size_t purged) {
  smi_arena_t *a = arena_of(p);
  if (a == NULL) {
    smi_stat_inc(SM_STAT_MUNMAP_CALLS);
    os_free_after_grace(p, size);
    smi_count_add(SM_COUNT_RESERVED, -(int64_t)size);
    smi_count_add(SM_COUNT_COMMITTED, -(int64_t)(size - purged));
    return;
  }
  /* back to the bitmap: purged now (DONTNEED, so it reads as zero when handed out again) unless
   * pinned; the units' committed state is ours again */
  size_t i = (size_t)((uint8_t *)p - atomic_load_explicit(&a->start, memory_order_relaxed)) >> SM_SEGMENT_SHIFT;
  size_t n = (size + SM_SEGMENT_MASK) >> SM_SEGMENT_SHIFT;
  if (SM_SECURE) smi_os_unprotect(p, n << SM_SEGMENT_SHIFT); /* its next use may put guards elsewhere */
  if (!a->pinned) {
    bool zero = smi_os_purge(p, n << SM_SEGMENT_SHIFT, true);
    smi_stat_add(SM_STAT_PURGED, (int64_t)((n << SM_SEGMENT_SHIFT) - purged));
    smi_count_move(SM_COUNT_COMMITTED, (int64_t)purged, (int64_t)(n << SM_SEGMENT_SHIFT));
    bits_set(a->committed, i, n, false);
    if (zero) bits_set(a->dirty, i, n, false);
  } else {
    smi_count_add(SM_COUNT_COMMITTED, (int64_t)purged); /* counted as purged, but pinned memory never is */
  }
  atomic_fetch_add_explicit(&arena_idle, (int64_t)(n << SM_SEGMENT_SHIFT), memory_order_relaxed);
  bits_set(a->in_use, i, n, false);
}

/* NULL for arena and pinned memory (the caller copies) */
void *smi_mem_remap(void *p, size_t old_size, size_t new_size, size_t alignment) {
  if (arena_of(p) != NULL) return NULL;
  if (new_size > old_size && !mem_limit_allows(new_size - old_size)) return NULL;
  /* growing maps OS memory too (until 2026-11-28 it did with disallow_os_alloc set at run time);
   * no warning: the caller's fallback, a new block, tells if it is refused too */
  if (new_size > old_size && !os_alloc_allowed()) return NULL;
  void *q = smi_os_remap_aligned(p, old_size, new_size, alignment, SM_UNMAP_GRACE);
  if (q == NULL) return NULL;
  if (SM_UNMAP_GRACE && q != p) os_free_after_grace(p, old_size); /* the range its pages left */
  smi_count_add(SM_COUNT_RESERVED, (int64_t)new_size - (int64_t)old_size);
  smi_count_add(SM_COUNT_COMMITTED, (int64_t)new_size - (int64_t)old_size);
  return q;
}

/* Move the pages of the plain OS mapping [p, p+size) over [target, target+size), a fresh part of
 * another mapping of ours whose size counts them already: the range p leaves is uncounted, the
 * memory is not (what of it was purged, `purged` bytes, reads as zero and faults in when touched).
 * False, nothing moved, for arena or pinned memory or when the OS refuses. */
bool smi_mem_move_into(void *p, size_t size, size_t purged, void *target) {
  if (arena_of(p) != NULL || arena_of(target) != NULL || !smi_os_move(p, size, size, target, SM_UNMAP_GRACE)) return false;
  if (SM_UNMAP_GRACE) os_free_after_grace(p, size); /* the range its pages left */
  smi_count_add(SM_COUNT_RESERVED, -(int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, -(int64_t)(size - purged));
  return true;
}

/* [p, p+size) was purged (its memory given back; the range stays reserved), or is in use again */
void smi_mem_purged(size_t size) {
  smi_stat_add(SM_STAT_PURGED, (int64_t)size);
  smi_count_add(SM_COUNT_COMMITTED, -(int64_t)size);
}
void smi_mem_unpurged(size_t size) { smi_count_add(SM_COUNT_COMMITTED, (int64_t)size); }

/* Huge OS pages cannot be purged (nor remapped): segment.c skips purging memory for which this
 * is true and gives such segments back (smi_mem_free) instead of purging them in its cache. */
bool smi_mem_is_pinned(const void *p) {
  smi_arena_t *a = arena_of(p);
  return a != NULL ? a->pinned : smi_os_is_pinned(p, 1);
}

/* p's exclusive arena, or 0 (segment.c: such memory never goes to the shared cache) */
int smi_mem_exclusive_arena(const void *p) {
  smi_arena_t *a = arena_of(p);
  return a != NULL && a->exclusive ? a->id : 0;
}

/* p lies in an arena that heaps made in it take memory from (an exclusive one, or one such a heap
 * was made in): segment.c gives what is freed there straight back, never to the shared segment
 * cache, which those heaps do not take from */
bool smi_mem_arena_has_heaps(const void *p) {
  smi_arena_t *a = arena_of(p);
  return a != NULL && (a->exclusive || atomic_load_explicit(&a->bound, memory_order_relaxed));
}

/* sm_heap_new_in_arena: true the first time for this arena */
bool smi_arena_bind(int arena_id) {
  bool first = false;
  for (size_t i = 0, n = arena_count(); i < n; i++) {
    if (arenas[i].id == arena_id && !atomic_exchange(&arenas[i].bound, true)) first = true;
  }
  return first;
}

/* an id that sm_..._ex returned */
bool smi_arena_id_valid(int arena_id) {
  if (arena_id <= 0 || (size_t)arena_id > arena_count()) return false;
  smi_arena_t *a = &arenas[arena_id - 1];
  return atomic_load_explicit(&a->start, memory_order_acquire) != NULL && a->id == arena_id;
}

/* debug and test queries */
bool smi_arena_contains(const void *p) { return arena_of(p) != NULL; }
size_t smi_arenas_count(void) { return arena_count(); }

/* ---- 1 GiB huge OS pages ---- */

/* `pages` 1 GiB pages, contiguous, on `node` (-1: any), one at a time until `deadline` (ms;
 * 0: none) has passed; *got tells how many. They become one pinned arena. */
static int huge_reserve_at(size_t pages, int node, uint64_t deadline, bool exclusive, int *arena_id, size_t *got) {
  *got = 0;
  if (pages == 0) return 0;
  if (SM_SECURE) return ENOTSUP; /* guard pages cannot be set inside a huge page */
  if (pages > ((size_t)1 << 14)) return EINVAL;
  uint8_t *base = smi_os_reserve_aligned(pages * SM_HUGE_1G, SM_HUGE_1G);
  if (base == NULL) return ENOMEM;
  int err = 0;
  size_t i = 0;
  for (; i < pages; i++) {
    if (i > 0 && deadline != 0 && smi_os_now_ms() > deadline) {
      err = ETIMEDOUT;
      break;
    }
    if (!smi_os_map_hugetlb(base + i * SM_HUGE_1G, SM_HUGE_1G, SM_HUGE_1G, node)) {
      err = ENOMEM;
      break;
    }
    smi_os_populate(base + i * SM_HUGE_1G, SM_HUGE_1G); /* the zeroing cost now, not in some malloc */
  }
  if (i < pages) smi_os_free(base + i * SM_HUGE_1G, (pages - i) * SM_HUGE_1G);
  int id = i > 0 ? arena_add(base, i * SM_HUGE_1G, node, true, true, true, exclusive) : 0;
  if (i > 0 && id == 0) {
    smi_os_free(base, i * SM_HUGE_1G);
    return ENOMEM;
  }
  if (id != 0 && arena_id != NULL) *arena_id = id;
  if (i > 0) smi_stat_add(SM_STAT_MMAP_CALLS, (int64_t)i);
  *got = i;
  return err;
}

/* Spread `pages` over the nodes (numa_nodes of them; 0: all in use), each node getting its share
 * of the remaining time; or (at) all on at_node (-1: any). The first error is returned. */
static int huge_reserve_spread(size_t pages, size_t numa_nodes, size_t timeout_ms, bool at, int at_node, bool exclusive,
                               int *arena_id) {
  uint64_t start = smi_os_now_ms(), deadline = timeout_ms > 0 ? start + timeout_ms : 0;
  size_t used = smi_os_numa_count(), nodes = used;
  if (numa_nodes > 0 && numa_nodes < nodes) nodes = numa_nodes;
  if (at || nodes <= 1) nodes = 1;
  size_t total = 0;
  int err = 0;
  for (size_t k = 0; k < nodes; k++) {
    size_t quota = pages / nodes + (k < pages % nodes ? 1 : 0), got = 0;
    uint64_t now = smi_os_now_ms();
    int node = at ? (at_node < 0 ? -1 : (int)((size_t)at_node % used)) : used > 1 ? (int)k : -1;
    int e = ETIMEDOUT;
    if (deadline == 0 || now <= deadline)
      e = huge_reserve_at(quota, node, deadline == 0 ? 0 : now + (deadline - now) / (nodes - k), exclusive, arena_id, &got);
    total += got;
    if (err == 0 && quota > 0) err = e;
  }
  unsigned long long ms = (unsigned long long)(smi_os_now_ms() - start);
  const char *why = err == ETIMEDOUT ? " (timed out)" : err == ENOMEM ? " (the kernel has no more free)"
                  : err == ENOTSUP ? " (not in secure builds)" : err != 0 ? " (invalid)" : "";
  if (err != 0) smi_warning("huge OS pages: reserved %zu of %zu 1 GiB pages in %llu ms%s", total, pages, ms, why);
  else if (smi_option(sm_option_verbose)) smi_message("huge OS pages: reserved %zu 1 GiB pages in %llu ms", total, ms);
  return err;
}

/* ---- start-up and the public functions ---- */

/* Start-up reservations (options reserve_huge_os_pages[_at], reserve_os_memory) and NUMA
 * detection. Called once options are read; allocates nothing. Also run by the first
 * smi_mem_alloc if process initialisation did not call it. */
void smi_arenas_init(void) {
  int state = INIT_NONE;
  if (!atomic_compare_exchange_strong(&arenas_state, &state, INIT_RUNNING)) {
    while (atomic_load_explicit(&arenas_state, memory_order_acquire) != INIT_DONE) sched_yield();
    return;
  }
  smi_os_numa_init(smi_option(sm_option_use_numa_nodes));
  bool verbose = smi_option(sm_option_verbose) != 0;
  if (verbose)
    smi_message("NUMA: %zu node%s in use (%zu detected), current node from %s", smi_os_numa_count(),
                smi_os_numa_count() == 1 ? "" : "s", smi_os_numa_detected(),
                smi_os_numa_count() > 1 ? smi_os_numa_method() : "nowhere (one node)");
  long huge = smi_option(sm_option_reserve_huge_os_pages);
  if (huge > 0) {
    long timeout = smi_option(sm_option_huge_timeout);
    long at = smi_option(sm_option_reserve_huge_os_pages_at);
    huge_reserve_spread((size_t)huge, 0, timeout > 0 ? (size_t)timeout : 0, at >= 0, (int)at, false, NULL);
  }
  long reserve = smi_option(sm_option_reserve_os_memory);
  if (reserve > 0 && arena_reserve_os((size_t)reserve, false, smi_option(sm_option_allow_large_os_pages) != 0, false, NULL) != 0)
    smi_warning("reserve_os_memory: cannot reserve %ld bytes", reserve);
  if (verbose && smi_option(sm_option_allow_large_os_pages))
    smi_message("large OS pages: %s", hugetlb_2m_usable() ? "2 MiB hugetlb pages, then transparent huge pages"
                                                          : "transparent huge pages (no free 2 MiB hugetlb pages)");
  atomic_store_explicit(&arenas_state, INIT_DONE, memory_order_release);
}

/* the _ex forms: *arena_id is 0 unless an arena was made (as mimalloc's "none") */
int sm_reserve_os_memory_ex(size_t size, bool commit, bool allow_large, bool exclusive, sm_arena_id_t *arena_id) {
  if (arena_id != NULL) *arena_id = 0;
  smi_process_init();
  smi_arenas_init();
  return arena_reserve_os(size, commit, allow_large, exclusive, arena_id);
}

int sm_reserve_os_memory(size_t size, bool commit, bool allow_large) {
  return sm_reserve_os_memory_ex(size, commit, allow_large, false, NULL);
}

bool sm_manage_os_memory_ex(void *start, size_t size, bool is_committed, bool is_large, bool is_zero, int numa_node,
                            bool exclusive, sm_arena_id_t *arena_id) {
  if (arena_id != NULL) *arena_id = 0;
  smi_process_init();
  smi_arenas_init();
  uintptr_t s = smi_align_up((uintptr_t)start, SM_SEGMENT_SIZE), e = ((uintptr_t)start + size) & ~(uintptr_t)SM_SEGMENT_MASK;
  if (start == NULL || (uintptr_t)start + size < (uintptr_t)start || e <= s) return false;
  if (e > SM_TF_ADDRESS_LIMIT) return false; /* above 48 bits: see smi_tf_push */
  if (is_large && !smi_os_set_pinned((void *)s, e - s, true)) return false; /* never purged */
  int id = arena_add((uint8_t *)s, e - s, numa_node < 0 ? -1 : numa_node, is_large, is_committed, is_zero, exclusive);
  if (id == 0) {
    if (is_large) smi_os_set_pinned((void *)s, e - s, false);
    return false;
  }
  if (arena_id != NULL) *arena_id = id;
  return true;
}

bool sm_manage_os_memory(void *start, size_t size, bool is_committed, bool is_large, bool is_zero, int numa_node) {
  return sm_manage_os_memory_ex(start, size, is_committed, is_large, is_zero, numa_node, false, NULL);
}

int sm_reserve_huge_os_pages_interleave(size_t pages, size_t numa_nodes, size_t timeout_msecs) {
  smi_process_init();
  smi_arenas_init();
  return huge_reserve_spread(pages, numa_nodes, timeout_msecs, false, -1, false, NULL);
}

int sm_reserve_huge_os_pages_at_ex(size_t pages, int numa_node, size_t timeout_msecs, bool exclusive,
                                   sm_arena_id_t *arena_id) {
  if (arena_id != NULL) *arena_id = 0;
  smi_process_init();
  smi_arenas_init();
  return huge_reserve_spread(pages, 1, timeout_msecs, true, numa_node, exclusive, arena_id);
}

int sm_reserve_huge_os_pages_at(size_t pages, int numa_node, size_t timeout_msecs) {
  return sm_reserve_huge_os_pages_at_ex(pages, numa_node, timeout_msecs, false, NULL);
}

void *sm_arena_area(sm_arena_id_t arena_id, size_t *size) {
  if (size != NULL) *size = 0;
  if (!smi_arena_id_valid(arena_id)) return NULL;
  size_t units = 0; /* its entries follow each other (arena_add) */
  for (size_t i = (size_t)arena_id - 1, n = arena_count(); i < n && arenas[i].id == arena_id; i++) units += arenas[i].units;
  if (size != NULL) *size = units << SM_SEGMENT_SHIFT;
  return atomic_load_explicit(&arenas[arena_id - 1].start, memory_order_acquire);
}

void sm_debug_show_arenas(void) {
  size_t n = arena_count();
  smi_message("arenas: %zu", n);
  for (size_t i = 0; i < n; i++) {
    smi_arena_t *a = &arenas[i];
    uint8_t *start = atomic_load_explicit(&a->start, memory_order_acquire);
    if (start == NULL) continue;
    smi_message("arena %d%s: %p, %zu MiB, %zu of %zu units in use, %zu committed%s%s, numa node %d", a->id,
                a->id == (int)i + 1 ? "" : " (continued)", (void *)start, (a->units << SM_SEGMENT_SHIFT) >> 20,
                bits_count(a->in_use, 0, a->units), a->units, bits_count(a->committed, 0, a->units),
                a->exclusive ? ", exclusive" : "", a->pinned ? ", pinned (huge OS pages)" : "", a->numa_node);
  }
}
