/* shardmalloc: a general-purpose allocator built on free-list sharding.
 *
 * The standard entry points (malloc, free, ...) are replaced by the library itself when it is
 * preloaded or linked first; this header declares the prefixed API, which works whether or not
 * the standard names are overridden, and mixes freely with them: a block from malloc may be freed
 * with sm_free and the other way round. */
#ifndef SHARDMALLOC_H
#define SHARDMALLOC_H

#include <stdbool.h>
#include <stddef.h>

#define SM_VERSION_MAJOR 0
#define SM_VERSION_MINOR 1
#define SM_VERSION_PATCH 0
/* major*10000 + minor*100 + patch, as returned by sm_version() */
#define SM_VERSION (SM_VERSION_MAJOR * 10000 + SM_VERSION_MINOR * 100 + SM_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SM_EXPORT __attribute__((visibility("default")))
#define SM_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#define SM_ALLOC_SIZE(...) __attribute__((alloc_size(__VA_ARGS__)))
#else
#define SM_EXPORT
#define SM_MALLOC_ATTR
#define SM_ALLOC_SIZE(...)
#endif

/* ---- basic allocation (C11/glibc semantics: NULL with errno ENOMEM on failure) ---- */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_malloc(size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1, 2) void *sm_calloc(size_t count, size_t size);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_realloc(void *p, size_t newsize);
SM_EXPORT void sm_free(void *p);

/* malloc for sizes known to be at most SM_SMALL_SIZE_MAX bytes: skips the size dispatch. */
#define SM_SMALL_SIZE_MAX 1024
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_malloc_small(size_t size);
/* zero-initialised malloc */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_zalloc(size_t size);
/* count*size with an overflow check (NULL/ENOMEM on overflow), not zeroed */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1, 2) void *sm_mallocn(size_t count, size_t size);
SM_EXPORT SM_ALLOC_SIZE(2, 3) void *sm_reallocn(void *p, size_t count, size_t size);
/* like realloc, but frees p when the reallocation fails (p is never leaked) */
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_reallocf(void *p, size_t newsize);

/* bytes usable in the block p (>= the requested size); 0 for NULL */
SM_EXPORT size_t sm_usable_size(const void *p);
/* the usable size that a request of `size` bytes would get */
SM_EXPORT size_t sm_good_size(size_t size);

/* ---- aligned allocation: alignment must be a power of two (else NULL/EINVAL) ---- */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_malloc_aligned(size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_zalloc_aligned(size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1, 2) void *sm_calloc_aligned(size_t count, size_t size, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_realloc_aligned(void *p, size_t newsize, size_t alignment);
/* a block of `size` bytes such that (result + offset) is a multiple of alignment; NULL/EINVAL for
 * an offset (mod alignment) with alignments above 4 MiB, and with 4 MiB for an offset above 4 MiB
 * less a huge block's header (docs/api/alloc.md) */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_malloc_aligned_at(size_t size, size_t alignment, size_t offset);

/* ---- strings ---- */
SM_EXPORT SM_MALLOC_ATTR char *sm_strdup(const char *s);
SM_EXPORT SM_MALLOC_ATTR char *sm_strndup(const char *s, size_t n);
/* realpath(3) with the result (when resolved_name is NULL) allocated by shardmalloc */
SM_EXPORT char *sm_realpath(const char *fname, char *resolved_name); /* may return resolved_name */

/* realloc whose new bytes read as zero: p must come from a zeroing call (zalloc, calloc, rezalloc,
 * recalloc), which clear the whole usable block */
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_rezalloc(void *p, size_t newsize);
SM_EXPORT SM_ALLOC_SIZE(2, 3) void *sm_recalloc(void *p, size_t newcount, size_t size);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_rezalloc_aligned(void *p, size_t newsize, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_rezalloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset);
SM_EXPORT SM_ALLOC_SIZE(2, 3) void *sm_recalloc_aligned(void *p, size_t newcount, size_t size, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(2, 3) void *sm_recalloc_aligned_at(void *p, size_t newcount, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_zalloc_aligned_at(size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1, 2) void *sm_calloc_aligned_at(size_t count, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_realloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_zalloc_small(size_t size);
/* grow or shrink p in place: p if newsize fits its block, else NULL (p untouched) */
SM_EXPORT void *sm_expand(void *p, size_t newsize);

/* ---- the standard functions under sm_ names (same semantics as the unprefixed ones) ---- */
SM_EXPORT void sm_cfree(void *p);
SM_EXPORT int sm_posix_memalign(void **out, size_t alignment, size_t size);
SM_EXPORT SM_MALLOC_ATTR void *sm_memalign(size_t alignment, size_t size);
SM_EXPORT SM_MALLOC_ATTR void *sm_valloc(size_t size);
SM_EXPORT SM_MALLOC_ATTR void *sm_pvalloc(size_t size);
SM_EXPORT SM_MALLOC_ATTR void *sm_aligned_alloc(size_t alignment, size_t size);
SM_EXPORT void *sm_reallocarray(void *p, size_t count, size_t size);
/* NetBSD reallocarr: *(void **)p is reallocated; returns 0 or an errno value, p untouched on error */
SM_EXPORT int sm_reallocarr(void *p, size_t count, size_t size);
SM_EXPORT size_t sm_malloc_size(const void *p);
SM_EXPORT size_t sm_malloc_usable_size(const void *p);
SM_EXPORT size_t sm_malloc_good_size(size_t size);
SM_EXPORT void *sm__expand(void *p, size_t newsize);
SM_EXPORT void sm_free_size(void *p, size_t size);
SM_EXPORT void sm_free_size_aligned(void *p, size_t size, size_t alignment);
SM_EXPORT void sm_free_aligned(void *p, size_t alignment);
SM_EXPORT void *sm_aligned_recalloc(void *p, size_t newcount, size_t size, size_t alignment);
SM_EXPORT void *sm_aligned_offset_recalloc(void *p, size_t newcount, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR unsigned short *sm_wcsdup(const unsigned short *s);
SM_EXPORT SM_MALLOC_ATTR unsigned char *sm_mbsdup(const unsigned char *s);
/* Windows-style: *buf = a copy of the variable (NULL if unset); 0 or an errno value */
SM_EXPORT int sm_dupenv_s(char **buf, size_t *size, const char *name);
SM_EXPORT int sm_wdupenv_s(unsigned short **buf, size_t *size, const unsigned short *name);

/* ---- heaps ----
 * A heap is a set of pages of its own. Blocks from any heap are freed with sm_free, from any
 * thread. A heap is owned by the thread that created it, which allocates from it without any lock
 * (exactly the fast path of malloc); other threads may allocate from it too, through a second part
 * of the heap guarded by a lock (see docs/api/heaps.md for the cost). When its creator ends, a heap
 * stays valid and is served through the lock. */
typedef struct sm_heap_s sm_heap_t;
SM_EXPORT sm_heap_t *sm_heap_new(void);
/* live blocks stay valid (they move to the calling thread's backing heap); the heap is gone */
SM_EXPORT void sm_heap_delete(sm_heap_t *heap);
/* frees every block of the heap at once (time proportional to its pages, not its blocks) */
SM_EXPORT void sm_heap_destroy(sm_heap_t *heap);
/* make heap the one malloc uses in this thread; returns the previous one. The heap must be owned
 * by the calling thread (else NULL, EINVAL, nothing changes). */
SM_EXPORT sm_heap_t *sm_heap_set_default(sm_heap_t *heap);
SM_EXPORT sm_heap_t *sm_heap_get_default(void);
/* the calling thread's own heap (the default unless sm_heap_set_default changed it) */
SM_EXPORT sm_heap_t *sm_heap_get_backing(void);
SM_EXPORT void sm_heap_collect(sm_heap_t *heap, bool force);

SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_malloc(sm_heap_t *heap, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_zalloc(sm_heap_t *heap, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2, 3) void *sm_heap_calloc(sm_heap_t *heap, size_t count, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2, 3) void *sm_heap_mallocn(sm_heap_t *heap, size_t count, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_malloc_small(sm_heap_t *heap, size_t size);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_realloc(sm_heap_t *heap, void *p, size_t newsize);
SM_EXPORT SM_ALLOC_SIZE(3, 4) void *sm_heap_reallocn(sm_heap_t *heap, void *p, size_t count, size_t size);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_reallocf(sm_heap_t *heap, void *p, size_t newsize);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_rezalloc(sm_heap_t *heap, void *p, size_t newsize);
SM_EXPORT SM_ALLOC_SIZE(3, 4) void *sm_heap_recalloc(sm_heap_t *heap, void *p, size_t newcount, size_t size);
SM_EXPORT SM_MALLOC_ATTR char *sm_heap_strdup(sm_heap_t *heap, const char *s);
SM_EXPORT SM_MALLOC_ATTR char *sm_heap_strndup(sm_heap_t *heap, const char *s, size_t n);
SM_EXPORT char *sm_heap_realpath(sm_heap_t *heap, const char *fname, char *resolved_name);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_malloc_aligned(sm_heap_t *heap, size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_malloc_aligned_at(sm_heap_t *heap, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_zalloc_aligned(sm_heap_t *heap, size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_zalloc_aligned_at(sm_heap_t *heap, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2, 3) void *sm_heap_calloc_aligned(sm_heap_t *heap, size_t count, size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2, 3) void *sm_heap_calloc_aligned_at(sm_heap_t *heap, size_t count, size_t size, size_t alignment, size_t offset);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_realloc_aligned(sm_heap_t *heap, void *p, size_t newsize, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_realloc_aligned_at(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_rezalloc_aligned(sm_heap_t *heap, void *p, size_t newsize, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(3) void *sm_heap_rezalloc_aligned_at(sm_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset);
SM_EXPORT SM_ALLOC_SIZE(3, 4) void *sm_heap_recalloc_aligned(sm_heap_t *heap, void *p, size_t newcount, size_t size, size_t alignment);
SM_EXPORT SM_ALLOC_SIZE(3, 4) void *sm_heap_recalloc_aligned_at(sm_heap_t *heap, void *p, size_t newcount, size_t size, size_t alignment, size_t offset);

/* ---- introspection ---- */
/* true iff p is a block (live or free) handed out by heap, or a pointer into one */
SM_EXPORT bool sm_heap_contains_block(sm_heap_t *heap, const void *p);
/* true iff p points into memory that heap manages (slower than contains_block) */
SM_EXPORT bool sm_heap_check_owned(sm_heap_t *heap, const void *p);
/* true iff p points into memory that shardmalloc manages (any block, live or free) */
SM_EXPORT bool sm_check_owned(const void *p);
SM_EXPORT bool sm_is_in_heap_region(const void *p);

/* One area (page) of a heap: blocks of one size. */
typedef struct sm_heap_area_s {
  void *blocks;           /* start of the area's first block */
  size_t reserved;        /* bytes of blocks the area can hold */
  size_t committed;       /* bytes of blocks carved so far */
  size_t used;            /* blocks in use (a count, like mimalloc's) */
  size_t block_size;      /* usable size of each block */
  size_t full_block_size; /* size of each block including padding */
} sm_heap_area_t;
/* Called once per area with block == NULL, then (visit_all_blocks) once per live block.
 * Return false to stop. The heap must not be used by another thread meanwhile. */
typedef bool sm_block_visit_fun(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t block_size, void *arg);
SM_EXPORT bool sm_heap_visit_blocks(const sm_heap_t *heap, bool visit_all_blocks, sm_block_visit_fun *visitor, void *arg);

/* ---- options ----
 * Read at start-up from SHARDMALLOC_<NAME> (case-insensitive; sizes take K/M/G suffixes) and from
 * SHARDMALLOC_CONF="name=value,name=value" (MIMALLOC_<NAME> is honoured as an alias); settable from
 * code. See docs/api/options.md for each one's meaning and default. */
typedef enum sm_option_e {
  sm_option_show_errors,       /* print error and warning messages */
  sm_option_show_stats,        /* print statistics at exit (1: table, 2 or "json": JSON) */
  sm_option_verbose,           /* print version, build and options at start-up */
  sm_option_max_errors,        /* stop printing errors after this many (-1: no limit) */
  sm_option_max_warnings,      /* stop printing warnings after this many (-1: no limit) */
  sm_option_purge_delay,       /* ms before unused memory is given back (0: at once, -1: never) */
  sm_option_purge_decommits,   /* 1: MADV_DONTNEED (RSS drops at once), 0: MADV_FREE (lazy) */
  sm_option_segment_cache,     /* whole unused segments kept for reuse (process-wide) */
  sm_option_background_purge,  /* 0: never, 1: once the process has two threads, 2: always */
  sm_option_abort_on_error,    /* abort after reporting misuse (default in secure builds) */
  sm_option_zero_on_free,      /* secure builds: clear blocks when they are freed */
  sm_option_quarantine,        /* secure builds: freed blocks wait for this many frees before reuse */
  sm_option_eager_commit,      /* pre-fault every new segment (a thread's first ones: see eager_commit_delay) */
  sm_option_eager_commit_delay,/* a thread's first N segments are never pre-faulted */
  sm_option_populate,          /* pre-fault segments (MADV_POPULATE_WRITE, else a write per page) */
  sm_option_allow_large_os_pages, /* 2 MiB pages for segments (THP, or MAP_HUGETLB where reserved) */
  sm_option_reserve_huge_os_pages,    /* reserve N 1 GiB pages at start-up, spread over NUMA nodes */
  sm_option_reserve_huge_os_pages_at, /* ... all on this NUMA node (-1: spread) */
  sm_option_reserve_os_memory, /* bytes of address space reserved (and used first) at start-up */
  sm_option_arena_reserve,     /* bytes reserved at a time once reserve_os_memory is used up (0: map per segment) */
  sm_option_use_numa_nodes,    /* use at most N NUMA nodes (0: all detected) */
  sm_option_disallow_os_alloc, /* never map memory after start-up: only reserved memory is used */
  sm_option_destroy_on_exit,   /* give all memory back to the OS at process exit */
  sm_option_memory_limit,      /* bytes the allocator may map in all (0: none); above it, NULL/ENOMEM */
  sm_option_huge_timeout,      /* ms that reserving huge OS pages may take at start-up */
  sm_option_shuffle,           /* secure builds: hand out blocks in a random order (on by default) */
  sm_option_atomic_free,       /* secure builds: every free claims its block atomically, so that a block
                                  freed by two threads at the same moment is reported, not freed twice */
  _sm_option_last
} sm_option_t;
SM_EXPORT bool sm_option_is_enabled(sm_option_t option);
SM_EXPORT void sm_option_enable(sm_option_t option);
SM_EXPORT void sm_option_disable(sm_option_t option);
SM_EXPORT void sm_option_set_enabled(sm_option_t option, bool enable);
SM_EXPORT void sm_option_set_enabled_default(sm_option_t option, bool enable);
SM_EXPORT long sm_option_get(sm_option_t option);
SM_EXPORT long sm_option_get_clamp(sm_option_t option, long min, long max);
SM_EXPORT size_t sm_option_get_size(sm_option_t option);
SM_EXPORT void sm_option_set(sm_option_t option, long value);
/* a new default: applies unless the environment or sm_option_set gave a value */
SM_EXPORT void sm_option_set_default(sm_option_t option, long value);
/* the option's name ("purge_delay"), or NULL for an invalid option */
SM_EXPORT const char *sm_option_name(sm_option_t option);

/* ---- OS memory ---- */
/* reserve 1 GiB huge OS pages (returns 0 or an errno value; see verbose for what was obtained) */
SM_EXPORT int sm_reserve_huge_os_pages_interleave(size_t pages, size_t numa_nodes, size_t timeout_msecs);
SM_EXPORT int sm_reserve_huge_os_pages_at(size_t pages, int numa_node, size_t timeout_msecs);
/* reserve `size` bytes of address space that segments are taken from first */
SM_EXPORT int sm_reserve_os_memory(size_t size, bool commit, bool allow_large);
/* hand shardmalloc a region to carve segments from (never given back to the OS) */
SM_EXPORT bool sm_manage_os_memory(void *start, size_t size, bool is_committed, bool is_large, bool is_zero, int numa_node);

/* Arenas by id (docs/api/os-memory.md). The _ex forms also return the new arena's id; an
 * exclusive arena serves only heaps made in it with sm_heap_new_in_arena, and a heap made in an
 * arena takes all its memory from that arena (NULL, ENOMEM, once it is full). 0 is no arena. */
typedef int sm_arena_id_t;
SM_EXPORT int sm_reserve_os_memory_ex(size_t size, bool commit, bool allow_large, bool exclusive, sm_arena_id_t *arena_id);
SM_EXPORT bool sm_manage_os_memory_ex(void *start, size_t size, bool is_committed, bool is_large, bool is_zero,
                                      int numa_node, bool exclusive, sm_arena_id_t *arena_id);
SM_EXPORT int sm_reserve_huge_os_pages_at_ex(size_t pages, int numa_node, size_t timeout_msecs, bool exclusive,
                                             sm_arena_id_t *arena_id);
/* the arena's first byte and (*size) its length; NULL for an id that names no arena */
SM_EXPORT void *sm_arena_area(sm_arena_id_t arena_id, size_t *size);
/* a heap (as sm_heap_new) whose memory all comes from the arena; NULL with EINVAL for a bad id */
SM_EXPORT sm_heap_t *sm_heap_new_in_arena(sm_arena_id_t arena_id);
/* one line per arena: id, address, size, units in use, kind (to stderr or the output function) */
SM_EXPORT void sm_debug_show_arenas(void);

/* ---- statistics ---- */
typedef void sm_output_fun(const char *msg, void *arg);
/* print the statistics table to stderr (or the sm_register_output function) */
SM_EXPORT void sm_stats_print(void);
SM_EXPORT void sm_stats_print_out(sm_output_fun *out, void *arg);
SM_EXPORT void sm_thread_stats_print_out(sm_output_fun *out, void *arg);
/* the statistics as one JSON object; into buf if it is large enough (else NULL), or, with
 * buf == NULL, in a block from sm_malloc that the caller frees */
SM_EXPORT char *sm_stats_get_json(size_t buf_size, char *buf);
/* restart the counters from zero (gauges such as "current" keep their value) */
SM_EXPORT void sm_stats_reset(void);
/* bring the calling thread's pending counts into the process totals */
SM_EXPORT void sm_stats_merge(void);
/* Process figures; any pointer may be NULL. Times in ms, sizes in bytes. */
SM_EXPORT void sm_process_info(size_t *elapsed_msecs, size_t *user_msecs, size_t *system_msecs, size_t *current_rss,
                               size_t *peak_rss, size_t *current_commit, size_t *peak_commit, size_t *page_faults);

/* ---- process, threads and runtime hooks ---- */
SM_EXPORT int sm_version(void);
/* Give back what can be given back: free retired empty pages, purge pending memory now (the
 * segment cache's too); with force, also reclaim and release abandoned segments and flush the
 * segment cache. */
SM_EXPORT void sm_collect(bool force);
/* Redirect messages (statistics, warnings, errors; one line each, ending in a newline) from
 * stderr to fun, which must not allocate. NULL restores stderr. */
SM_EXPORT void sm_register_output(sm_output_fun *fun, void *arg);
/* Called after a detected error (err: EFAULT corruption, EINVAL invalid or double free; running
 * out of memory is not an error here: NULL and errno ENOMEM) when SHARDMALLOC_ABORT_ON_ERROR is
 * off; the offending operation was ignored. */
typedef void sm_error_fun(int err, void *arg);
SM_EXPORT void sm_register_error(sm_error_fun *fun, void *arg);
/* Called from allocation slow paths and from sm_collect (with its force), with a heartbeat that
 * grows by one per call, so a runtime can free lazily in bounded steps. One function at a time. */
typedef void sm_deferred_free_fun(bool force, unsigned long long heartbeat, void *arg);
SM_EXPORT void sm_register_deferred_free(sm_deferred_free_fun *fun, void *arg);
/* Explicit lifecycle, for programs that want it (everything also happens on its own). */
SM_EXPORT void sm_process_init(void);
SM_EXPORT void sm_process_done(void);
SM_EXPORT void sm_thread_init(void);
SM_EXPORT void sm_thread_done(void);
/* true iff the standard malloc of this process resolves to shardmalloc */
SM_EXPORT bool sm_is_redirected(void);

/* ---- C++: operator new semantics (std::bad_alloc after the new-handler gives up) ---- */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_new(size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_new_aligned(size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_new_nothrow(size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_new_aligned_nothrow(size_t size, size_t alignment);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1, 2) void *sm_new_n(size_t count, size_t size);
SM_EXPORT SM_ALLOC_SIZE(2) void *sm_new_realloc(void *p, size_t newsize);
SM_EXPORT SM_ALLOC_SIZE(2, 3) void *sm_new_reallocn(void *p, size_t newcount, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2) void *sm_heap_alloc_new(sm_heap_t *heap, size_t size);
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(2, 3) void *sm_heap_alloc_new_n(sm_heap_t *heap, size_t count, size_t size);

#ifdef __cplusplus
}
#endif

/* C++ STL allocators: see the end of this file (added by the C++ part). */

#ifdef __cplusplus
/* ---- C++ (C++11 and later): standard allocators over shardmalloc ----
 * sm_stl_allocator<T>               any thread's default heap, through sm_new_n / sm_free
 * sm_heap_stl_allocator<T>          one heap (by default the constructing thread's default heap)
 * sm_heap_destroy_stl_allocator<T>  a heap of its own, destroyed with every block in it when the
 *                                   last copy of the allocator goes; deallocate does nothing
 * Failures behave as std::allocator's: the new-handler, then std::bad_alloc (count overflow:
 * std::bad_array_new_length). Types aligned beyond std::max_align_t get their alignment. */
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

namespace sm_detail {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
[[noreturn]] inline void throw_bad_alloc() { throw std::bad_alloc(); }
[[noreturn]] inline void throw_bad_array_new_length() { throw std::bad_array_new_length(); }
#else
[[noreturn]] inline void throw_bad_alloc() { std::abort(); }
[[noreturn]] inline void throw_bad_array_new_length() { std::abort(); }
#endif

inline bool count_overflows(std::size_t count, std::size_t size) noexcept {
  return size != 0 && count > std::numeric_limits<std::size_t>::max() / size;
}

/* count objects of `size` bytes aligned to `alignment`, with operator new's failure semantics */
inline void *new_n(std::size_t count, std::size_t size, std::size_t alignment) {
  if (alignment <= alignof(std::max_align_t)) return sm_new_n(count, size);
  if (count_overflows(count, size)) throw_bad_array_new_length(); /* checked here: no alloc_size warning */
  return sm_new_aligned(count * size, alignment);
}
inline void *heap_new_n(sm_heap_t *heap, std::size_t count, std::size_t size, std::size_t alignment) {
  if (alignment <= alignof(std::max_align_t)) return sm_heap_alloc_new_n(heap, count, size);
  if (count_overflows(count, size)) throw_bad_array_new_length();
  for (;;) { /* no C function does an aligned heap allocation with new semantics: the loop is here */
    void *p = sm_heap_malloc_aligned(heap, count * size, alignment);
    if (p != NULL) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == NULL) throw_bad_alloc();
    handler();
  }
}

inline sm_heap_t *new_heap() {
  sm_heap_t *heap = sm_heap_new();
  if (heap == NULL) throw_bad_alloc();
  return heap;
}
inline void destroy_heap(sm_heap_t *heap) noexcept { sm_heap_destroy(heap); }
inline void keep_heap(sm_heap_t *) noexcept {}

/* what every allocator here has in common (no reference typedefs: T may be void) */
template <class T> struct stl_allocator_base {
  typedef T value_type;
  typedef std::size_t size_type;
  typedef std::ptrdiff_t difference_type;
  typedef T *pointer;
  typedef const T *const_pointer;
  size_type max_size() const noexcept { return static_cast<size_type>(std::numeric_limits<difference_type>::max()) / sizeof(T); }
};
} // namespace sm_detail

template <class T> struct sm_stl_allocator : sm_detail::stl_allocator_base<T> {
  typedef std::true_type propagate_on_container_move_assignment;
  typedef std::true_type is_always_equal;
  template <class U> struct rebind { typedef sm_stl_allocator<U> other; };

  sm_stl_allocator() noexcept {}
  template <class U> sm_stl_allocator(const sm_stl_allocator<U> &) noexcept {}

  T *allocate(std::size_t count) { return static_cast<T *>(sm_detail::new_n(count, sizeof(T), alignof(T))); }
  T *allocate(std::size_t count, const void *) { return allocate(count); }
  void deallocate(T *p, std::size_t) noexcept { sm_free(p); }
};
template <class T1, class T2> bool operator==(const sm_stl_allocator<T1> &, const sm_stl_allocator<T2> &) noexcept { return true; }
template <class T1, class T2> bool operator!=(const sm_stl_allocator<T1> &, const sm_stl_allocator<T2> &) noexcept { return false; }

/* Allocates in one heap; the heap is shared with every copy and never deleted here. Blocks go back
 * with sm_free (any thread may free them). Containers compare equal iff they use the same heap. */
template <class T> struct sm_heap_stl_allocator : sm_detail::stl_allocator_base<T> {
  typedef std::true_type propagate_on_container_copy_assignment;
  typedef std::true_type propagate_on_container_move_assignment;
  typedef std::true_type propagate_on_container_swap;
  typedef std::false_type is_always_equal;
  template <class U> struct rebind { typedef sm_heap_stl_allocator<U> other; };

  sm_heap_stl_allocator() : heap_(sm_heap_get_default()) {}
  sm_heap_stl_allocator(sm_heap_t *heap) noexcept : heap_(heap) {} /* implicit, as mimalloc's */
  template <class U> sm_heap_stl_allocator(const sm_heap_stl_allocator<U> &x) noexcept : heap_(x.heap()) {}

  T *allocate(std::size_t count) { return static_cast<T *>(sm_detail::heap_new_n(heap_, count, sizeof(T), alignof(T))); }
  T *allocate(std::size_t count, const void *) { return allocate(count); }
  void deallocate(T *p, std::size_t) noexcept { sm_free(p); }

  sm_heap_t *heap() const noexcept { return heap_; }
  void collect(bool force) { sm_heap_collect(heap_, force); }
  template <class U> bool is_equal(const sm_heap_stl_allocator<U> &x) const noexcept { return heap_ == x.heap(); }

private:
  sm_heap_t *heap_;
};
template <class T1, class T2>
bool operator==(const sm_heap_stl_allocator<T1> &x, const sm_heap_stl_allocator<T2> &y) noexcept { return x.is_equal(y); }
template <class T1, class T2>
bool operator!=(const sm_heap_stl_allocator<T1> &x, const sm_heap_stl_allocator<T2> &y) noexcept { return !x.is_equal(y); }

/* Allocates in a heap of its own (made by the default constructor), shared by every copy and
 * rebound copy through a reference count, and destroyed (sm_heap_destroy: every block at once) when
 * the last copy goes. deallocate does nothing: the point is to drop a whole structure in one step.
 * Every container using it must go before (or with) the last copy, and the heap must not be used
 * from another thread while it is destroyed. Constructed from a heap, it uses that heap and never
 * destroys it (as mimalloc's). */
template <class T> struct sm_heap_destroy_stl_allocator : sm_detail::stl_allocator_base<T> {
  typedef std::true_type propagate_on_container_copy_assignment;
  typedef std::true_type propagate_on_container_move_assignment;
  typedef std::true_type propagate_on_container_swap;
  typedef std::false_type is_always_equal;
  template <class U> struct rebind { typedef sm_heap_destroy_stl_allocator<U> other; };

  sm_heap_destroy_stl_allocator() : heap_(sm_detail::new_heap(), &sm_detail::destroy_heap) {}
  sm_heap_destroy_stl_allocator(sm_heap_t *heap) : heap_(heap, &sm_detail::keep_heap) {}
  template <class U> sm_heap_destroy_stl_allocator(const sm_heap_destroy_stl_allocator<U> &x) noexcept : heap_(x.heap_) {}

  T *allocate(std::size_t count) { return static_cast<T *>(sm_detail::heap_new_n(heap_.get(), count, sizeof(T), alignof(T))); }
  T *allocate(std::size_t count, const void *) { return allocate(count); }
  void deallocate(T *, std::size_t) noexcept {} /* freed with the heap */

  sm_heap_t *heap() const noexcept { return heap_.get(); }
  void collect(bool force) { sm_heap_collect(heap_.get(), force); }
  template <class U> bool is_equal(const sm_heap_destroy_stl_allocator<U> &x) const noexcept { return heap() == x.heap(); }

private:
  template <class U> friend struct sm_heap_destroy_stl_allocator;
  std::shared_ptr<sm_heap_t> heap_;
};
template <class T1, class T2>
bool operator==(const sm_heap_destroy_stl_allocator<T1> &x, const sm_heap_destroy_stl_allocator<T2> &y) noexcept { return x.is_equal(y); }
template <class T1, class T2>
bool operator!=(const sm_heap_destroy_stl_allocator<T1> &x, const sm_heap_destroy_stl_allocator<T2> &y) noexcept { return !x.is_equal(y); }
#endif /* __cplusplus */

#endif
