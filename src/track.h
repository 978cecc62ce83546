/* track.h: telling memory checkers which bytes the program may touch.
 *   SM_VALGRIND: memcheck client requests, so valgrind reports leaks, invalid accesses and
 *                use-after-free in programs running on shardmalloc as it does under glibc;
 *   SM_ASAN:     AddressSanitizer poisoning, for ASan-instrumented programs that use the sm_ API
 *                (ASan owns malloc itself, so that build does not override it).
 * Both are padded builds (SM_CHECK_FREES): the requested size of every block is known. Blocks are
 * addressable only between allocation and free; the allocator's own accesses to free blocks (the
 * free-list link) open the link word for the duration. Without either option all of this
 * compiles to nothing. */
#ifndef SM_TRACK_H
#define SM_TRACK_H

#if SM_VALGRIND
#include <string.h>
#include <valgrind/memcheck.h>
#define smi_track_malloc(p, size, zero) VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zero)
#define smi_track_free(p, size) VALGRIND_FREELIKE_BLOCK(p, 0)
#define smi_track_resize(p, oldsize, newsize) VALGRIND_RESIZEINPLACE_BLOCK(p, oldsize, newsize, 0)
#define smi_track_undefined(p, size) VALGRIND_MAKE_MEM_UNDEFINED(p, size)
#define smi_track_defined(p, size) VALGRIND_MAKE_MEM_DEFINED(p, size)
#define smi_track_noaccess(p, size) VALGRIND_MAKE_MEM_NOACCESS(p, size)
#elif SM_ASAN
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#define smi_track_malloc(p, size, zero) __asan_unpoison_memory_region(p, size)
#define smi_track_free(p, size) __asan_poison_memory_region(p, size)
#define smi_track_resize(p, oldsize, newsize) __asan_unpoison_memory_region(p, newsize)
#define smi_track_undefined(p, size) __asan_unpoison_memory_region(p, size)
#define smi_track_defined(p, size) __asan_unpoison_memory_region(p, size)
#define smi_track_noaccess(p, size) __asan_poison_memory_region(p, size)
#else
#define smi_track_malloc(p, size, zero) ((void)0)
#define smi_track_free(p, size) ((void)0)
#define smi_track_resize(p, oldsize, newsize) ((void)0)
#define smi_track_undefined(p, size) ((void)0)
#define smi_track_defined(p, size) ((void)0)
#define smi_track_noaccess(p, size) ((void)0)
#endif
#define SM_TRACK (SM_VALGRIND || SM_ASAN)

/* built with ThreadSanitizer (the tsan test configurations): what it cannot see is told to it */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SM_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SM_UNDER_TSAN 1
#endif

/* A block's first word, read without changing what the memory checker knows of it: free's check
 * reads it as a free-list link before it knows whether the block is live (realloc's check of a
 * live block must leave the program's bytes as they were). */
#if SM_VALGRIND
static inline uintptr_t smi_track_peek_word(const void *p) {
  uintptr_t word;
  VALGRIND_DISABLE_ERROR_REPORTING;
  memcpy(&word, p, sizeof word);
  VALGRIND_ENABLE_ERROR_REPORTING;
  VALGRIND_MAKE_MEM_DEFINED(&word, sizeof word); /* ours now, whatever the block's bytes were */
  return word;
}
#elif SM_ASAN
__attribute__((no_sanitize_address)) static inline uintptr_t smi_track_peek_word(const void *p) {
  return *(const volatile uintptr_t *)p;
}
#else
static inline uintptr_t smi_track_peek_word(const void *p) { return *(const uintptr_t *)p; }
#endif
/* the secure build checks frees and writes the padding inline; the debug and memory-checker builds
 * take the full, out-of-line checks every time */
#define SM_INLINE_CHECKS (SM_SECURE && !SM_DEBUG && !SM_TRACK)
/* the secure and debug builds keep the addresses of memory they give back for a while (arena.c:
 * os_free_after_grace), so a check that lost a race to the release reads zeros, not a hole; not
 * the memory-checker builds, whose checker would take the range for readable memory again */
#define SM_UNMAP_GRACE ((SM_SECURE || SM_DEBUG) && !SM_TRACK)

#endif
