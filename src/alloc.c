/* alloc.c: the sm_ allocation API on top of the heap fast paths (internal.h) and the generic
 * path (page.c): zeroing, overflow checks, realloc, aligned allocation, strings.
 * Errors follow C11/POSIX/glibc: NULL with errno ENOMEM (EINVAL for a bad alignment). */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>

void *smi_enomem(void) {
  errno = ENOMEM;
  return NULL;
}

void *sm_malloc(size_t size) { return smi_heap_malloc(smi_tls_heap, size); }

void *sm_malloc_small(size_t size) {
  sm_assert(size <= SM_SMALL_SIZE_MAX);
  return smi_heap_malloc_small(smi_tls_heap, size);
}

/* zeroed allocation: blocks carved from fresh (zero) memory only need their link word cleared */
static inline void *heap_malloc_zero(sm_heap_t *heap, size_t size) {
  if (sm_likely(size <= SM_DIRECT_MAX)) {
    sm_page_t *page = heap->pages_direct[(size + 7) >> 3];
    sm_block_t *block = page->free;
    if (sm_likely(block != NULL)) {
      bool is_zero = page->free_is_zero;
      smi_page_pop(page, block);
      if (is_zero) block->next = NULL;
      else memset(block, 0, size);
      return block;
    }
  }
  return smi_malloc_generic(heap, size, true);
}

void *sm_zalloc(size_t size) { return heap_malloc_zero(smi_tls_heap, size); }

void *sm_calloc(size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return heap_malloc_zero(smi_tls_heap, total);
}

void *sm_mallocn(size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_malloc(total);
}

size_t smi_usable_size(const void *p) {
  if (p == NULL) return 0;
  const sm_segment_t *segment = smi_ptr_segment(p);
  const sm_page_t *page = smi_segment_page_of(segment, p);
  size_t offset = (size_t)((const uint8_t *)p - page->start);
  return page->block_size - (page->flags.x.has_aligned ? offset % page->block_size : 0);
}

size_t sm_usable_size(const void *p) { return smi_usable_size(p); }

/* realloc as glibc: NULL -> malloc; size 0 -> free and return NULL; failure leaves p intact.
 * A block that still fits and is at most halved stays where it is. */
void *smi_realloc(void *p, size_t newsize, bool free_on_fail) {
  if (p == NULL) return sm_malloc(newsize);
  if (newsize == 0) {
    sm_free(p);
    return NULL;
  }
  size_t usable = smi_usable_size(p);
  if (newsize <= usable && newsize >= usable / 2) return p;
  void *q = sm_malloc(newsize);
  if (sm_unlikely(q == NULL)) {
    if (free_on_fail) sm_free(p);
    return NULL;
  }
  memcpy(q, p, usable < newsize ? usable : newsize);
  sm_free(p);
  return q;
}

void *sm_realloc(void *p, size_t newsize) { return smi_realloc(p, newsize, false); }
void *sm_reallocf(void *p, size_t newsize) { return smi_realloc(p, newsize, true); }

void *sm_reallocn(void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return smi_realloc(p, total, false);
}

/* ---- aligned allocation ---- */

/* `alignment` is a power of two. Result r satisfies (r + offset) % alignment == 0. */
void *smi_malloc_aligned(sm_heap_t *heap, size_t size, size_t alignment, size_t offset, bool zero) {
  if (sm_unlikely(size > SM_MAX_ALLOC_SIZE)) return smi_enomem();
  offset &= alignment - 1;
  /* Every page starts 4 KiB-aligned, so a class that is a multiple of the alignment gives
   * aligned blocks without any padding. */
  if (offset == 0 && alignment <= SM_OS_PAGE_SIZE && size <= SM_LARGE_OBJ_MAX) {
    size_t s = size < alignment ? alignment : size;
    if (smi_bin_size(smi_bin_of(s)) % alignment == 0) return zero ? heap_malloc_zero(heap, s) : smi_heap_malloc(heap, s);
  }
  if (offset == 0 && (alignment > SM_MEDIUM_OBJ_MAX || size + alignment > SM_LARGE_OBJ_MAX)) {
    if (sm_unlikely(heap == &smi_heap_empty) && smi_thread_init() == NULL) return smi_enomem();
    return smi_huge_alloc(size, alignment, zero);
  }
  /* otherwise: pad, and hand out an aligned pointer inside the block */
  size_t padded = size + alignment - 1;
  if (sm_unlikely(padded < size)) return smi_enomem();
  uint8_t *p = zero ? heap_malloc_zero(heap, padded) : smi_heap_malloc(heap, padded);
  if (p == NULL) return NULL;
  size_t adjust = (alignment - (((uintptr_t)p + offset) & (alignment - 1))) & (alignment - 1);
  if (adjust != 0) {
    sm_page_t *page = smi_segment_page_of(smi_ptr_segment(p), p);
    page->flags.x.has_aligned = 1;
  }
  return p + adjust;
}

void *sm_malloc_aligned_at(size_t size, size_t alignment, size_t offset) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  return smi_malloc_aligned(smi_tls_heap, size, alignment, offset, false);
}

void *sm_malloc_aligned(size_t size, size_t alignment) { return sm_malloc_aligned_at(size, alignment, 0); }

void *sm_zalloc_aligned(size_t size, size_t alignment) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  return smi_malloc_aligned(smi_tls_heap, size, alignment, 0, true);
}

void *sm_calloc_aligned(size_t count, size_t size, size_t alignment) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return sm_zalloc_aligned(total, alignment);
}

void *sm_realloc_aligned(void *p, size_t newsize, size_t alignment) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  if (p == NULL) return sm_malloc_aligned(newsize, alignment);
  size_t usable = smi_usable_size(p);
  if (((uintptr_t)p & (alignment - 1)) == 0 && newsize <= usable && newsize >= usable / 2) return p;
  void *q = sm_malloc_aligned(newsize, alignment);
  if (q == NULL) return NULL;
  memcpy(q, p, usable < newsize ? usable : newsize);
  sm_free(p);
  return q;
}

/* ---- strings ---- */

char *sm_strdup(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s);
  char *t = sm_malloc(n + 1);
  if (t != NULL) memcpy(t, s, n + 1);
  return t;
}

char *sm_strndup(const char *s, size_t n) {
  if (s == NULL) return NULL;
  size_t len = strnlen(s, n);
  char *t = sm_malloc(len + 1);
  if (t == NULL) return NULL;
  memcpy(t, s, len);
  t[len] = 0;
  return t;
}

char *sm_realpath(const char *fname, char *resolved_name) {
  if (resolved_name != NULL) return realpath(fname, resolved_name);
  char buf[PATH_MAX];
  char *r = realpath(fname, buf);
  return r == NULL ? NULL : sm_strdup(buf);
}

int sm_version(void) { return SM_VERSION; }

void sm_collect(bool force) {
  sm_heap_t *heap = smi_tls_heap;
  if (heap == &smi_heap_empty) return;
  smi_heap_collect(heap, force);
}
