/* mimalloc.h for shardmalloc: mimalloc v2's public API (as of mimalloc 2.2) on top of shardmalloc,
 * so that code written for mimalloc compiles and links against libshardmalloc unchanged.
 *
 * Put this directory first on the include path (-I<prefix>/include/shardmalloc/compat after an
 * install, -Iinclude/compat -Iinclude in the source tree) and link -lshardmalloc instead of
 * -lmimalloc. Everything here is a macro or a static inline function calling the sm_ API: there are
 * no mi_ symbols in the library, so a program cannot link against mimalloc and shardmalloc at once
 * by mistake. What differs from mimalloc, and what mimalloc has that is not here, is listed in
 * docs/api/compat.md; the notes below say why where it is not obvious. */
#ifndef MIMALLOC_H
#define MIMALLOC_H

#include <limits.h>
#include <shardmalloc.h>

/* the mimalloc API level this header provides (mimalloc's numbering: major * 100 + minor * 10 + patch) */
#define MI_MALLOC_VERSION 224
/* lets code tell this header from mimalloc's own: shardmalloc's version, as SM_VERSION */
#define MI_MALLOC_SHARDMALLOC SM_VERSION

/* mimalloc's attribute macros, for code that declares its own wrappers with them */
#ifdef __cplusplus
#define mi_attr_noexcept noexcept
#else
#define mi_attr_noexcept
#endif
#if defined(__GNUC__)
#define mi_decl_nodiscard __attribute__((warn_unused_result))
#define mi_decl_export __attribute__((visibility("default")))
#define mi_attr_malloc __attribute__((malloc))
#define mi_attr_alloc_size(s) __attribute__((alloc_size(s)))
#define mi_attr_alloc_size2(s1, s2) __attribute__((alloc_size(s1, s2)))
#define mi_attr_alloc_align(p) __attribute__((alloc_align(p)))
#else
#define mi_decl_nodiscard
#define mi_decl_export
#define mi_attr_malloc
#define mi_attr_alloc_size(s)
#define mi_attr_alloc_size2(s1, s2)
#define mi_attr_alloc_align(p)
#endif
#define mi_decl_restrict
#define mi_cdecl

#ifdef __cplusplus
extern "C" {
#endif

#define MI_SHIM static inline

/* mimalloc's realloc family (mi_realloc, mi_rezalloc, the heap and aligned ones...) returns a
 * minimal block for a new size of 0, where shardmalloc's (like glibc's) frees the block and returns
 * NULL. Code written for mimalloc may take that NULL for out of memory, so 0 becomes 1 here. */
MI_SHIM size_t mi__sm_nonzero(size_t n) { return n == 0 ? 1 : n; }
/* count * size for the _n variants: false on overflow (the sm_ call then fails with ENOMEM) */
MI_SHIM bool mi__sm_total(size_t count, size_t size, size_t *total) { return !__builtin_mul_overflow(count, size, total); }

/* ---- standard malloc interface ---- */
MI_SHIM void *mi_malloc(size_t size) mi_attr_noexcept { return sm_malloc(size); }
MI_SHIM void *mi_calloc(size_t count, size_t size) mi_attr_noexcept { return sm_calloc(count, size); }
MI_SHIM void *mi_realloc(void *p, size_t newsize) mi_attr_noexcept { return sm_realloc(p, mi__sm_nonzero(newsize)); }
MI_SHIM void *mi_expand(void *p, size_t newsize) mi_attr_noexcept { return sm_expand(p, newsize); }
MI_SHIM void mi_free(void *p) mi_attr_noexcept { sm_free(p); }
MI_SHIM char *mi_strdup(const char *s) mi_attr_noexcept { return sm_strdup(s); }
MI_SHIM char *mi_strndup(const char *s, size_t n) mi_attr_noexcept { return sm_strndup(s, n); }
MI_SHIM char *mi_realpath(const char *fname, char *resolved_name) mi_attr_noexcept { return sm_realpath(fname, resolved_name); }

/* ---- extended functionality ---- */
#define MI_SMALL_WSIZE_MAX (128)
#define MI_SMALL_SIZE_MAX (MI_SMALL_WSIZE_MAX * sizeof(void *)) /* == SM_SMALL_SIZE_MAX on 64-bit */

MI_SHIM void *mi_malloc_small(size_t size) mi_attr_noexcept { return sm_malloc_small(size); }
MI_SHIM void *mi_zalloc_small(size_t size) mi_attr_noexcept { return sm_zalloc_small(size); }
MI_SHIM void *mi_zalloc(size_t size) mi_attr_noexcept { return sm_zalloc(size); }
MI_SHIM void *mi_mallocn(size_t count, size_t size) mi_attr_noexcept { return sm_mallocn(count, size); }
MI_SHIM void *mi_reallocn(void *p, size_t count, size_t size) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(count, size, &total) ? sm_realloc(p, mi__sm_nonzero(total)) : sm_reallocn(p, count, size);
}
MI_SHIM void *mi_reallocf(void *p, size_t newsize) mi_attr_noexcept { return sm_reallocf(p, mi__sm_nonzero(newsize)); }
MI_SHIM size_t mi_usable_size(const void *p) mi_attr_noexcept { return sm_usable_size(p); }
MI_SHIM size_t mi_good_size(size_t size) mi_attr_noexcept { return sm_good_size(size); }

/* ---- internals: hooks, statistics, lifecycle ---- */
typedef sm_deferred_free_fun mi_deferred_free_fun; /* void (bool force, unsigned long long heartbeat, void *arg) */
typedef sm_output_fun mi_output_fun;               /* void (const char *msg, void *arg) */
typedef sm_error_fun mi_error_fun;                 /* void (int err, void *arg) */
MI_SHIM void mi_register_deferred_free(mi_deferred_free_fun *deferred_free, void *arg) mi_attr_noexcept {
  sm_register_deferred_free(deferred_free, arg);
}
MI_SHIM void mi_register_output(mi_output_fun *out, void *arg) mi_attr_noexcept { sm_register_output(out, arg); }
MI_SHIM void mi_register_error(mi_error_fun *fun, void *arg) { sm_register_error(fun, arg); }

MI_SHIM void mi_collect(bool force) mi_attr_noexcept { sm_collect(force); }
/* the API level (MI_MALLOC_VERSION), as mimalloc's does; sm_version() gives shardmalloc's */
MI_SHIM int mi_version(void) mi_attr_noexcept { return MI_MALLOC_VERSION; }
MI_SHIM void mi_stats_reset(void) mi_attr_noexcept { sm_stats_reset(); }
MI_SHIM void mi_stats_merge(void) mi_attr_noexcept { sm_stats_merge(); }
/* out is an mi_output_fun* passed as void* (mimalloc's old signature); NULL prints to the default */
MI_SHIM void mi_stats_print(void *out) mi_attr_noexcept {
  sm_output_fun *fun; /* copied, not cast: ISO C has no object-to-function pointer conversion */
  __builtin_memcpy(&fun, &out, sizeof fun);
  if (fun == NULL) sm_stats_print();
  else sm_stats_print_out(fun, NULL);
}
MI_SHIM void mi_stats_print_out(mi_output_fun *out, void *arg) mi_attr_noexcept { sm_stats_print_out(out, arg); }
MI_SHIM void mi_thread_stats_print_out(mi_output_fun *out, void *arg) mi_attr_noexcept { sm_thread_stats_print_out(out, arg); }
/* shardmalloc's JSON (its own field names, not mimalloc's); buf == NULL: free the result with mi_free */
MI_SHIM char *mi_stats_get_json(size_t buf_size, char *buf) mi_attr_noexcept { return sm_stats_get_json(buf_size, buf); }

MI_SHIM void mi_process_info(size_t *elapsed_msecs, size_t *user_msecs, size_t *system_msecs, size_t *current_rss,
                             size_t *peak_rss, size_t *current_commit, size_t *peak_commit, size_t *page_faults) mi_attr_noexcept {
  sm_process_info(elapsed_msecs, user_msecs, system_msecs, current_rss, peak_rss, current_commit, peak_commit, page_faults);
}

MI_SHIM void mi_process_init(void) mi_attr_noexcept { sm_process_init(); }
MI_SHIM void mi_process_done(void) mi_attr_noexcept { sm_process_done(); }
MI_SHIM void mi_thread_init(void) mi_attr_noexcept { sm_thread_init(); }
MI_SHIM void mi_thread_done(void) mi_attr_noexcept { sm_thread_done(); }

/* ---- aligned allocation (alignment after size, as in mimalloc) ---- */
MI_SHIM void *mi_malloc_aligned(size_t size, size_t alignment) mi_attr_noexcept { return sm_malloc_aligned(size, alignment); }
MI_SHIM void *mi_malloc_aligned_at(size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_malloc_aligned_at(size, alignment, offset);
}
MI_SHIM void *mi_zalloc_aligned(size_t size, size_t alignment) mi_attr_noexcept { return sm_zalloc_aligned(size, alignment); }
MI_SHIM void *mi_zalloc_aligned_at(size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_zalloc_aligned_at(size, alignment, offset);
}
MI_SHIM void *mi_calloc_aligned(size_t count, size_t size, size_t alignment) mi_attr_noexcept {
  return sm_calloc_aligned(count, size, alignment);
}
MI_SHIM void *mi_calloc_aligned_at(size_t count, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_calloc_aligned_at(count, size, alignment, offset);
}
MI_SHIM void *mi_realloc_aligned(void *p, size_t newsize, size_t alignment) mi_attr_noexcept {
  return sm_realloc_aligned(p, mi__sm_nonzero(newsize), alignment);
}
MI_SHIM void *mi_realloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_realloc_aligned_at(p, mi__sm_nonzero(newsize), alignment, offset);
}

/* ---- heaps ---- */
typedef sm_heap_t mi_heap_t;

MI_SHIM mi_heap_t *mi_heap_new(void) { return sm_heap_new(); }
MI_SHIM void mi_heap_delete(mi_heap_t *heap) { sm_heap_delete(heap); }
MI_SHIM void mi_heap_destroy(mi_heap_t *heap) { sm_heap_destroy(heap); }
MI_SHIM mi_heap_t *mi_heap_set_default(mi_heap_t *heap) { return sm_heap_set_default(heap); }
MI_SHIM mi_heap_t *mi_heap_get_default(void) { return sm_heap_get_default(); }
MI_SHIM mi_heap_t *mi_heap_get_backing(void) { return sm_heap_get_backing(); }
MI_SHIM void mi_heap_collect(mi_heap_t *heap, bool force) mi_attr_noexcept { sm_heap_collect(heap, force); }

MI_SHIM void *mi_heap_malloc(mi_heap_t *heap, size_t size) mi_attr_noexcept { return sm_heap_malloc(heap, size); }
MI_SHIM void *mi_heap_zalloc(mi_heap_t *heap, size_t size) mi_attr_noexcept { return sm_heap_zalloc(heap, size); }
MI_SHIM void *mi_heap_calloc(mi_heap_t *heap, size_t count, size_t size) mi_attr_noexcept {
  return sm_heap_calloc(heap, count, size);
}
MI_SHIM void *mi_heap_mallocn(mi_heap_t *heap, size_t count, size_t size) mi_attr_noexcept {
  return sm_heap_mallocn(heap, count, size);
}
MI_SHIM void *mi_heap_malloc_small(mi_heap_t *heap, size_t size) mi_attr_noexcept { return sm_heap_malloc_small(heap, size); }

MI_SHIM void *mi_heap_realloc(mi_heap_t *heap, void *p, size_t newsize) mi_attr_noexcept {
  return sm_heap_realloc(heap, p, mi__sm_nonzero(newsize));
}
MI_SHIM void *mi_heap_reallocn(mi_heap_t *heap, void *p, size_t count, size_t size) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(count, size, &total) ? sm_heap_realloc(heap, p, mi__sm_nonzero(total))
                                           : sm_heap_reallocn(heap, p, count, size);
}
MI_SHIM void *mi_heap_reallocf(mi_heap_t *heap, void *p, size_t newsize) mi_attr_noexcept {
  return sm_heap_reallocf(heap, p, mi__sm_nonzero(newsize));
}

MI_SHIM char *mi_heap_strdup(mi_heap_t *heap, const char *s) mi_attr_noexcept { return sm_heap_strdup(heap, s); }
MI_SHIM char *mi_heap_strndup(mi_heap_t *heap, const char *s, size_t n) mi_attr_noexcept { return sm_heap_strndup(heap, s, n); }
MI_SHIM char *mi_heap_realpath(mi_heap_t *heap, const char *fname, char *resolved_name) mi_attr_noexcept {
  return sm_heap_realpath(heap, fname, resolved_name);
}

MI_SHIM void *mi_heap_malloc_aligned(mi_heap_t *heap, size_t size, size_t alignment) mi_attr_noexcept {
  return sm_heap_malloc_aligned(heap, size, alignment);
}
MI_SHIM void *mi_heap_malloc_aligned_at(mi_heap_t *heap, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_heap_malloc_aligned_at(heap, size, alignment, offset);
}
MI_SHIM void *mi_heap_zalloc_aligned(mi_heap_t *heap, size_t size, size_t alignment) mi_attr_noexcept {
  return sm_heap_zalloc_aligned(heap, size, alignment);
}
MI_SHIM void *mi_heap_zalloc_aligned_at(mi_heap_t *heap, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_heap_zalloc_aligned_at(heap, size, alignment, offset);
}
MI_SHIM void *mi_heap_calloc_aligned(mi_heap_t *heap, size_t count, size_t size, size_t alignment) mi_attr_noexcept {
  return sm_heap_calloc_aligned(heap, count, size, alignment);
}
MI_SHIM void *mi_heap_calloc_aligned_at(mi_heap_t *heap, size_t count, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_heap_calloc_aligned_at(heap, count, size, alignment, offset);
}
MI_SHIM void *mi_heap_realloc_aligned(mi_heap_t *heap, void *p, size_t newsize, size_t alignment) mi_attr_noexcept {
  return sm_heap_realloc_aligned(heap, p, mi__sm_nonzero(newsize), alignment);
}
MI_SHIM void *mi_heap_realloc_aligned_at(mi_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_heap_realloc_aligned_at(heap, p, mi__sm_nonzero(newsize), alignment, offset);
}

/* ---- zero-initialised reallocation (p must come from a zeroing call) ---- */
MI_SHIM void *mi_rezalloc(void *p, size_t newsize) mi_attr_noexcept { return sm_rezalloc(p, mi__sm_nonzero(newsize)); }
MI_SHIM void *mi_recalloc(void *p, size_t newcount, size_t size) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_rezalloc(p, mi__sm_nonzero(total)) : sm_recalloc(p, newcount, size);
}
MI_SHIM void *mi_rezalloc_aligned(void *p, size_t newsize, size_t alignment) mi_attr_noexcept {
  return sm_rezalloc_aligned(p, mi__sm_nonzero(newsize), alignment);
}
MI_SHIM void *mi_rezalloc_aligned_at(void *p, size_t newsize, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_rezalloc_aligned_at(p, mi__sm_nonzero(newsize), alignment, offset);
}
MI_SHIM void *mi_recalloc_aligned(void *p, size_t newcount, size_t size, size_t alignment) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_rezalloc_aligned(p, mi__sm_nonzero(total), alignment)
                                              : sm_recalloc_aligned(p, newcount, size, alignment);
}
MI_SHIM void *mi_recalloc_aligned_at(void *p, size_t newcount, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_rezalloc_aligned_at(p, mi__sm_nonzero(total), alignment, offset)
                                              : sm_recalloc_aligned_at(p, newcount, size, alignment, offset);
}

MI_SHIM void *mi_heap_rezalloc(mi_heap_t *heap, void *p, size_t newsize) mi_attr_noexcept {
  return sm_heap_rezalloc(heap, p, mi__sm_nonzero(newsize));
}
MI_SHIM void *mi_heap_recalloc(mi_heap_t *heap, void *p, size_t newcount, size_t size) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_heap_rezalloc(heap, p, mi__sm_nonzero(total))
                                              : sm_heap_recalloc(heap, p, newcount, size);
}
MI_SHIM void *mi_heap_rezalloc_aligned(mi_heap_t *heap, void *p, size_t newsize, size_t alignment) mi_attr_noexcept {
  return sm_heap_rezalloc_aligned(heap, p, mi__sm_nonzero(newsize), alignment);
}
MI_SHIM void *mi_heap_rezalloc_aligned_at(mi_heap_t *heap, void *p, size_t newsize, size_t alignment, size_t offset) mi_attr_noexcept {
  return sm_heap_rezalloc_aligned_at(heap, p, mi__sm_nonzero(newsize), alignment, offset);
}
MI_SHIM void *mi_heap_recalloc_aligned(mi_heap_t *heap, void *p, size_t newcount, size_t size, size_t alignment) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_heap_rezalloc_aligned(heap, p, mi__sm_nonzero(total), alignment)
                                              : sm_heap_recalloc_aligned(heap, p, newcount, size, alignment);
}
MI_SHIM void *mi_heap_recalloc_aligned_at(mi_heap_t *heap, void *p, size_t newcount, size_t size, size_t alignment,
                                          size_t offset) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(newcount, size, &total) ? sm_heap_rezalloc_aligned_at(heap, p, mi__sm_nonzero(total), alignment, offset)
                                              : sm_heap_recalloc_aligned_at(heap, p, newcount, size, alignment, offset);
}

/* ---- analysis ---- */
MI_SHIM bool mi_heap_contains_block(mi_heap_t *heap, const void *p) { return sm_heap_contains_block(heap, p); }
MI_SHIM bool mi_heap_check_owned(mi_heap_t *heap, const void *p) { return sm_heap_check_owned(heap, p); }
MI_SHIM bool mi_check_owned(const void *p) { return sm_check_owned(p); }

/* mimalloc's area has a heap_tag after the fields sm_heap_area_t has; shardmalloc has no heap tags
 * (always 0). The visitor gets a converted copy of each area. */
typedef struct mi_heap_area_s {
  void *blocks;           /* start of the area containing heap blocks */
  size_t reserved;        /* bytes reserved for this area */
  size_t committed;       /* bytes of blocks carved so far */
  size_t used;            /* number of allocated blocks */
  size_t block_size;      /* size in bytes of each block */
  size_t full_block_size; /* size in bytes of a full block including padding */
  int heap_tag;           /* always 0 */
} mi_heap_area_t;
typedef bool mi_block_visit_fun(const mi_heap_t *heap, const mi_heap_area_t *area, void *block, size_t block_size, void *arg);

typedef struct mi__sm_visit_s {
  mi_block_visit_fun *visitor;
  void *arg;
} mi__sm_visit_t;
MI_SHIM bool mi__sm_visit(const sm_heap_t *heap, const sm_heap_area_t *area, void *block, size_t block_size, void *arg) {
  const mi__sm_visit_t *v = (const mi__sm_visit_t *)arg;
  mi_heap_area_t a = {area->blocks, area->reserved, area->committed, area->used, area->block_size, area->full_block_size, 0};
  return v->visitor(heap, &a, block, block_size, v->arg);
}
MI_SHIM bool mi_heap_visit_blocks(const mi_heap_t *heap, bool visit_blocks, mi_block_visit_fun *visitor, void *arg) {
  mi__sm_visit_t v = {visitor, arg};
  return sm_heap_visit_blocks(heap, visit_blocks, &mi__sm_visit, &v);
}

MI_SHIM bool mi_is_in_heap_region(const void *p) mi_attr_noexcept { return sm_is_in_heap_region(p); }
MI_SHIM bool mi_is_redirected(void) mi_attr_noexcept { return sm_is_redirected(); }

/* ---- OS memory ---- */
MI_SHIM int mi_reserve_huge_os_pages_interleave(size_t pages, size_t numa_nodes, size_t timeout_msecs) mi_attr_noexcept {
  return sm_reserve_huge_os_pages_interleave(pages, numa_nodes, timeout_msecs);
}
/* mimalloc reports success once some pages were reserved (their arena made); the sm_ form reports
 * ETIMEDOUT or ENOMEM when fewer than asked were */
MI_SHIM int mi_reserve_huge_os_pages_at_ex(size_t pages, int numa_node, size_t timeout_msecs, bool exclusive,
                                           sm_arena_id_t *arena_id) mi_attr_noexcept {
  sm_arena_id_t id = 0;
  int err = sm_reserve_huge_os_pages_at_ex(pages, numa_node, timeout_msecs, exclusive, &id);
  if (arena_id != NULL) *arena_id = id;
  return id != 0 ? 0 : err;
}
MI_SHIM int mi_reserve_huge_os_pages_at(size_t pages, int numa_node, size_t timeout_msecs) mi_attr_noexcept {
  return mi_reserve_huge_os_pages_at_ex(pages, numa_node, timeout_msecs, false, NULL);
}
MI_SHIM int mi_reserve_os_memory(size_t size, bool commit, bool allow_large) mi_attr_noexcept {
  return sm_reserve_os_memory(size, commit, allow_large);
}
MI_SHIM bool mi_manage_os_memory(void *start, size_t size, bool is_committed, bool is_large, bool is_zero,
                                 int numa_node) mi_attr_noexcept {
  return sm_manage_os_memory(start, size, is_committed, is_large, is_zero, numa_node);
}
/* arenas by id: mimalloc's experimental arena API */
typedef sm_arena_id_t mi_arena_id_t;
MI_SHIM void *mi_arena_area(mi_arena_id_t arena_id, size_t *size) { return sm_arena_area(arena_id, size); }
MI_SHIM int mi_reserve_os_memory_ex(size_t size, bool commit, bool allow_large, bool exclusive,
                                    mi_arena_id_t *arena_id) mi_attr_noexcept {
  return sm_reserve_os_memory_ex(size, commit, allow_large, exclusive, arena_id);
}
MI_SHIM bool mi_manage_os_memory_ex(void *start, size_t size, bool is_committed, bool is_large, bool is_zero,
                                    int numa_node, bool exclusive, mi_arena_id_t *arena_id) mi_attr_noexcept {
  return sm_manage_os_memory_ex(start, size, is_committed, is_large, is_zero, numa_node, exclusive, arena_id);
}
MI_SHIM mi_heap_t *mi_heap_new_in_arena(mi_arena_id_t arena_id) { return sm_heap_new_in_arena(arena_id); }
MI_SHIM void mi_debug_show_arenas(void) mi_attr_noexcept { sm_debug_show_arenas(); }

/* deprecated in mimalloc: spread over the NUMA nodes; *pages_reserved is all or nothing (0 or pages) */
MI_SHIM int mi_reserve_huge_os_pages(size_t pages, double max_secs, size_t *pages_reserved) mi_attr_noexcept {
  size_t timeout = max_secs <= 0 ? 0 : max_secs >= 1e9 ? (size_t)1e12 : (size_t)(max_secs * 1000);
  int err = sm_reserve_huge_os_pages_interleave(pages, 0, timeout);
  if (pages_reserved != NULL) *pages_reserved = err == 0 ? pages : 0;
  return err;
}

/* ---- convenience ---- */
#define mi_malloc_tp(tp) ((tp *)mi_malloc(sizeof(tp)))
#define mi_zalloc_tp(tp) ((tp *)mi_zalloc(sizeof(tp)))
#define mi_calloc_tp(tp, n) ((tp *)mi_calloc(n, sizeof(tp)))
#define mi_mallocn_tp(tp, n) ((tp *)mi_mallocn(n, sizeof(tp)))
#define mi_reallocn_tp(p, tp, n) ((tp *)mi_reallocn(p, n, sizeof(tp)))
#define mi_recalloc_tp(p, tp, n) ((tp *)mi_recalloc(p, n, sizeof(tp)))

#define mi_heap_malloc_tp(hp, tp) ((tp *)mi_heap_malloc(hp, sizeof(tp)))
#define mi_heap_zalloc_tp(hp, tp) ((tp *)mi_heap_zalloc(hp, sizeof(tp)))
#define mi_heap_calloc_tp(hp, tp, n) ((tp *)mi_heap_calloc(hp, n, sizeof(tp)))
#define mi_heap_mallocn_tp(hp, tp, n) ((tp *)mi_heap_mallocn(hp, n, sizeof(tp)))
#define mi_heap_reallocn_tp(hp, p, tp, n) ((tp *)mi_heap_reallocn(hp, p, n, sizeof(tp)))
#define mi_heap_recalloc_tp(hp, p, tp, n) ((tp *)mi_heap_recalloc(hp, p, n, sizeof(tp)))

/* ---- options ----
 * mimalloc's names and order. An option shardmalloc has with the same meaning has the value of its
 * sm_option_t (so the two can be mixed); one it does not have gets a value from 1000 up, where
 * mi_option_get returns mimalloc's default and mi_option_set does nothing. reserve_os_memory and
 * arena_reserve are in KiB here (mimalloc's unit; shardmalloc's is bytes): use mi_option_get_size. */
#define MI__SM_UNMAPPED(n) (1000 + (n))
typedef enum mi_option_e {
  mi_option_show_errors = sm_option_show_errors,
  mi_option_show_stats = sm_option_show_stats,
  mi_option_verbose = sm_option_verbose,
  mi_option_eager_commit = MI__SM_UNMAPPED(0), /* ours pre-faults; mimalloc's commits (and is on by default) */
  mi_option_arena_eager_commit = MI__SM_UNMAPPED(1),
  mi_option_purge_decommits = sm_option_purge_decommits,
  mi_option_allow_large_os_pages = sm_option_allow_large_os_pages,
  mi_option_reserve_huge_os_pages = sm_option_reserve_huge_os_pages,
  mi_option_reserve_huge_os_pages_at = sm_option_reserve_huge_os_pages_at,
  mi_option_reserve_os_memory = sm_option_reserve_os_memory,
  mi_option_deprecated_segment_cache = MI__SM_UNMAPPED(2),
  mi_option_deprecated_page_reset = MI__SM_UNMAPPED(3),
  mi_option_abandoned_page_purge = MI__SM_UNMAPPED(4),
  mi_option_deprecated_segment_reset = MI__SM_UNMAPPED(5),
  mi_option_eager_commit_delay = sm_option_eager_commit_delay,
  mi_option_purge_delay = sm_option_purge_delay,
  mi_option_use_numa_nodes = sm_option_use_numa_nodes,
  mi_option_disallow_os_alloc = sm_option_disallow_os_alloc,
  mi_option_os_tag = MI__SM_UNMAPPED(6),
  mi_option_max_errors = sm_option_max_errors,
  mi_option_max_warnings = sm_option_max_warnings,
  mi_option_max_segment_reclaim = MI__SM_UNMAPPED(7),
  mi_option_destroy_on_exit = sm_option_destroy_on_exit,
  mi_option_arena_reserve = sm_option_arena_reserve,
  mi_option_arena_purge_mult = MI__SM_UNMAPPED(8),
  mi_option_purge_extend_delay = MI__SM_UNMAPPED(9),
  mi_option_abandoned_reclaim_on_free = MI__SM_UNMAPPED(10),
  mi_option_disallow_arena_alloc = MI__SM_UNMAPPED(11),
  mi_option_retry_on_oom = MI__SM_UNMAPPED(12),
  mi_option_visit_abandoned = MI__SM_UNMAPPED(13),
  mi_option_guarded_min = MI__SM_UNMAPPED(14),
  mi_option_guarded_max = MI__SM_UNMAPPED(15),
  mi_option_guarded_precise = MI__SM_UNMAPPED(16),
  mi_option_guarded_sample_rate = MI__SM_UNMAPPED(17),
  mi_option_guarded_sample_seed = MI__SM_UNMAPPED(18),
  mi_option_target_segments_per_thread = MI__SM_UNMAPPED(19),
  mi_option_generic_collect = MI__SM_UNMAPPED(20),
  mi_option_allow_thp = MI__SM_UNMAPPED(21),
  _mi_option_last = MI__SM_UNMAPPED(22),
  /* legacy names */
  mi_option_large_os_pages = mi_option_allow_large_os_pages,
  mi_option_eager_region_commit = mi_option_arena_eager_commit,
  mi_option_reset_decommits = mi_option_purge_decommits,
  mi_option_reset_delay = mi_option_purge_delay,
  mi_option_abandoned_page_reset = mi_option_abandoned_page_purge,
  mi_option_limit_os_alloc = mi_option_disallow_os_alloc
} mi_option_t;

MI_SHIM bool mi__sm_option_mapped(mi_option_t option) { return (int)option >= 0 && (int)option < (int)_sm_option_last; }
MI_SHIM bool mi__sm_option_kib(mi_option_t option) {
  return option == mi_option_reserve_os_memory || option == mi_option_arena_reserve;
}
/* mimalloc's defaults (64-bit Linux) for the options shardmalloc does not have */
MI_SHIM long mi__sm_option_default(mi_option_t option) {
  switch (option) {
  case mi_option_eager_commit: return 1;
  case mi_option_arena_eager_commit: return 2;
  case mi_option_os_tag: return 100;
  case mi_option_max_segment_reclaim: return 10;
  case mi_option_arena_purge_mult: return 10;
  case mi_option_purge_extend_delay: return 1;
  case mi_option_retry_on_oom: return 400;
  case mi_option_guarded_max: return 1L << 30;
  case mi_option_guarded_sample_rate: return 4000;
  case mi_option_generic_collect: return 10000;
  case mi_option_allow_thp: return 1;
  default: return 0;
  }
}
MI_SHIM long mi__sm_option_to_bytes(long kib) { return kib > LONG_MAX / 1024 ? LONG_MAX : kib < LONG_MIN / 1024 ? LONG_MIN : kib * 1024; }

MI_SHIM long mi_option_get(mi_option_t option) {
  if (!mi__sm_option_mapped(option)) return mi__sm_option_default(option);
  long value = sm_option_get((sm_option_t)option);
  return mi__sm_option_kib(option) ? value / 1024 : value;
}
MI_SHIM long mi_option_get_clamp(mi_option_t option, long min, long max) {
  long x = mi_option_get(option);
  return x < min ? min : x > max ? max : x;
}
MI_SHIM size_t mi_option_get_size(mi_option_t option) {
  if (mi__sm_option_mapped(option)) return sm_option_get_size((sm_option_t)option);
  long x = mi__sm_option_default(option);
  return x < 0 ? 0 : (size_t)x;
}
MI_SHIM void mi_option_set(mi_option_t option, long value) {
  if (!mi__sm_option_mapped(option)) return;
  sm_option_set((sm_option_t)option, mi__sm_option_kib(option) ? mi__sm_option_to_bytes(value) : value);
}
MI_SHIM void mi_option_set_default(mi_option_t option, long value) {
  if (!mi__sm_option_mapped(option)) return;
  sm_option_set_default((sm_option_t)option, mi__sm_option_kib(option) ? mi__sm_option_to_bytes(value) : value);
}
MI_SHIM bool mi_option_is_enabled(mi_option_t option) { return mi_option_get(option) != 0; }
MI_SHIM void mi_option_set_enabled(mi_option_t option, bool enable) { mi_option_set(option, enable ? 1 : 0); }
MI_SHIM void mi_option_set_enabled_default(mi_option_t option, bool enable) { mi_option_set_default(option, enable ? 1 : 0); }
MI_SHIM void mi_option_enable(mi_option_t option) { mi_option_set_enabled(option, true); }
MI_SHIM void mi_option_disable(mi_option_t option) { mi_option_set_enabled(option, false); }

/* ---- "mi" versions of the POSIX, Unix, Windows and C++ functions ---- */
/* mimalloc's cfree is a "checked free": it frees only what is ours (sm_cfree is glibc's cfree, free) */
MI_SHIM void mi_cfree(void *p) mi_attr_noexcept {
  if (sm_check_owned(p)) sm_free(p);
}
MI_SHIM void *mi__expand(void *p, size_t newsize) mi_attr_noexcept { return sm__expand(p, newsize); }
MI_SHIM size_t mi_malloc_size(const void *p) mi_attr_noexcept { return sm_malloc_size(p); }
MI_SHIM size_t mi_malloc_good_size(size_t size) mi_attr_noexcept { return sm_malloc_good_size(size); }
MI_SHIM size_t mi_malloc_usable_size(const void *p) mi_attr_noexcept { return sm_malloc_usable_size(p); }

MI_SHIM int mi_posix_memalign(void **p, size_t alignment, size_t size) mi_attr_noexcept {
  return sm_posix_memalign(p, alignment, size);
}
MI_SHIM void *mi_memalign(size_t alignment, size_t size) mi_attr_noexcept { return sm_memalign(alignment, size); }
MI_SHIM void *mi_valloc(size_t size) mi_attr_noexcept { return sm_valloc(size); }
MI_SHIM void *mi_pvalloc(size_t size) mi_attr_noexcept { return sm_pvalloc(size); }
MI_SHIM void *mi_aligned_alloc(size_t alignment, size_t size) mi_attr_noexcept { return sm_aligned_alloc(alignment, size); }

MI_SHIM void *mi_reallocarray(void *p, size_t count, size_t size) mi_attr_noexcept {
  size_t total;
  return mi__sm_total(count, size, &total) ? sm_realloc(p, mi__sm_nonzero(total)) : sm_reallocarray(p, count, size);
}
MI_SHIM int mi_reallocarr(void *p, size_t count, size_t size) mi_attr_noexcept { return sm_reallocarr(p, count, size); }
MI_SHIM void *mi_aligned_recalloc(void *p, size_t newcount, size_t size, size_t alignment) mi_attr_noexcept {
  return mi_recalloc_aligned(p, newcount, size, alignment);
}
MI_SHIM void *mi_aligned_offset_recalloc(void *p, size_t newcount, size_t size, size_t alignment, size_t offset) mi_attr_noexcept {
  return mi_recalloc_aligned_at(p, newcount, size, alignment, offset);
}

MI_SHIM unsigned short *mi_wcsdup(const unsigned short *s) mi_attr_noexcept { return sm_wcsdup(s); }
MI_SHIM unsigned char *mi_mbsdup(const unsigned char *s) mi_attr_noexcept { return sm_mbsdup(s); }
/* mimalloc reports the length without the terminator in *size, where sm_ (like Windows) counts it */
MI_SHIM int mi_dupenv_s(char **buf, size_t *size, const char *name) mi_attr_noexcept {
  int err = sm_dupenv_s(buf, size, name);
  if (err == 0 && size != NULL && *size > 0) (*size)--;
  return err;
}
MI_SHIM int mi_wdupenv_s(unsigned short **buf, size_t *size, const unsigned short *name) mi_attr_noexcept {
  int err = sm_wdupenv_s(buf, size, name);
  if (err == 0 && size != NULL && *size > 0) (*size)--;
  return err;
}

MI_SHIM void mi_free_size(void *p, size_t size) mi_attr_noexcept { sm_free_size(p, size); }
MI_SHIM void mi_free_size_aligned(void *p, size_t size, size_t alignment) mi_attr_noexcept {
  sm_free_size_aligned(p, size, alignment);
}
MI_SHIM void mi_free_aligned(void *p, size_t alignment) mi_attr_noexcept { sm_free_aligned(p, alignment); }

/* C++ semantics on failure: the new-handler, then std::bad_alloc (see docs/api/cxx.md) */
MI_SHIM void *mi_new(size_t size) { return sm_new(size); }
MI_SHIM void *mi_new_aligned(size_t size, size_t alignment) { return sm_new_aligned(size, alignment); }
MI_SHIM void *mi_new_nothrow(size_t size) mi_attr_noexcept { return sm_new_nothrow(size); }
MI_SHIM void *mi_new_aligned_nothrow(size_t size, size_t alignment) mi_attr_noexcept {
  return sm_new_aligned_nothrow(size, alignment);
}
MI_SHIM void *mi_new_n(size_t count, size_t size) { return sm_new_n(count, size); }
MI_SHIM void *mi_new_realloc(void *p, size_t newsize) { return sm_new_realloc(p, newsize); }
MI_SHIM void *mi_new_reallocn(void *p, size_t newcount, size_t size) { return sm_new_reallocn(p, newcount, size); }
MI_SHIM void *mi_heap_alloc_new(mi_heap_t *heap, size_t size) { return sm_heap_alloc_new(heap, size); }
MI_SHIM void *mi_heap_alloc_new_n(mi_heap_t *heap, size_t count, size_t size) { return sm_heap_alloc_new_n(heap, count, size); }

#undef MI_SHIM

#ifdef __cplusplus
}

/* ---- C++ STL allocators: shardmalloc's, under mimalloc's names ---- */
#define MI_HAS_HEAP_STL_ALLOCATOR 1
template <class T> using mi_stl_allocator = sm_stl_allocator<T>;
/* default-constructed: the thread's default heap (mimalloc's makes a new heap, deleted with the last copy) */
template <class T> using mi_heap_stl_allocator = sm_heap_stl_allocator<T>;
template <class T> using mi_heap_destroy_stl_allocator = sm_heap_destroy_stl_allocator<T>;
#endif

#endif
