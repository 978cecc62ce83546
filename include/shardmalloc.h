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
/* a block of `size` bytes such that (result + offset) is a multiple of alignment */
SM_EXPORT SM_MALLOC_ATTR SM_ALLOC_SIZE(1) void *sm_malloc_aligned_at(size_t size, size_t alignment, size_t offset);

/* ---- strings ---- */
SM_EXPORT SM_MALLOC_ATTR char *sm_strdup(const char *s);
SM_EXPORT SM_MALLOC_ATTR char *sm_strndup(const char *s, size_t n);
/* realpath(3) with the result (when resolved_name is NULL) allocated by shardmalloc */
SM_EXPORT char *sm_realpath(const char *fname, char *resolved_name); /* may return resolved_name */

/* ---- process ---- */
SM_EXPORT int sm_version(void);
/* Give back what can be given back: free retired empty pages, purge pending memory now,
 * flush the segment cache; with force, also reclaim and release abandoned segments. */
SM_EXPORT void sm_collect(bool force);
/* Redirect messages (statistics, warnings, errors; one line each, ending in a newline) from
 * stderr to fun, which must not allocate. NULL restores stderr. */
typedef void sm_output_fun(const char *msg, void *arg);
SM_EXPORT void sm_register_output(sm_output_fun *fun, void *arg);
/* Called after a detected error (err: EFAULT corruption, EINVAL invalid or double free) when
 * SHARDMALLOC_ABORT_ON_ERROR is off; the offending operation has been ignored. */
typedef void sm_error_fun(int err, void *arg);
SM_EXPORT void sm_register_error(sm_error_fun *fun, void *arg);

/* print event counters (segments, pages, purges, threads) to stderr */
SM_EXPORT void sm_stats_print(void);
/* true iff p points into memory that shardmalloc manages (any block, live or free) */
SM_EXPORT bool sm_check_owned(const void *p);

#ifdef __cplusplus
}
#endif

#endif
