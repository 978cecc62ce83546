/* posix.c: the standard, POSIX, glibc, BSD, macOS and Windows allocation functions under sm_
 * names, with the exact error semantics of the originals (C11/POSIX/glibc first, the others where
 * they have no glibc counterpart). override.c's standard names are one-line calls of these, so each
 * rule lives here once; this file is compiled in every build, override.c only when SM_OVERRIDE. */
#include "internal.h"

#include <stdlib.h>

void sm_cfree(void *p) { sm_free(p); } /* glibc: cfree is free */

/* C11/C17: any power of two (a size that is not a multiple of it is fine, DR 460); otherwise NULL/EINVAL */
void *sm_aligned_alloc(size_t alignment, size_t size) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  return smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
}

/* POSIX: EINVAL unless a power of two multiple of sizeof(void *). The error is returned, errno
 * and *out are left alone (glibc would crash on out == NULL; EINVAL is kinder). */
int sm_posix_memalign(void **out, size_t alignment, size_t size) {
  if (out == NULL || alignment % sizeof(void *) != 0 || !smi_is_power_of_two(alignment)) return EINVAL;
  int saved = errno;
  void *p = smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

/* glibc: an alignment that is not a power of two is rounded up to the next one; one that cannot
 * be rounded up is EINVAL */
void *sm_memalign(size_t alignment, size_t size) {
  if (sm_unlikely(alignment > SIZE_MAX / 2 + 1)) {
    errno = EINVAL;
    return NULL;
  }
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (!smi_is_power_of_two(alignment)) alignment = (size_t)1 << (64 - __builtin_clzl(alignment));
  return smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
}

void *sm_valloc(size_t size) { return smi_malloc_aligned(smi_tls_heap, size, smi_os_page_size(), 0, false); }

/* glibc: the size is rounded up to whole pages (overflow: NULL/ENOMEM); 0 gives one page */
void *sm_pvalloc(size_t size) {
  size_t ps = smi_os_page_size();
  size_t rounded = (size + ps - 1) & ~(ps - 1);
  if (sm_unlikely(rounded < size)) return smi_enomem();
  return smi_malloc_aligned(smi_tls_heap, rounded == 0 ? ps : rounded, ps, 0, false);
}

/* glibc/OpenBSD: overflow of count * size is NULL/ENOMEM with p untouched; otherwise realloc */
void *sm_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) return smi_enomem();
  return smi_realloc(p, total, false);
}

/* NetBSD reallocarr(3): p points to the pointer to reallocate. count or size 0 frees it and stores
 * NULL; overflow is EOVERFLOW, failure ENOMEM, both with *p untouched; errno is never changed. */
int sm_reallocarr(void *p, size_t count, size_t size) {
  if (p == NULL) return EINVAL;
  int saved = errno;
  void *old;
  memcpy(&old, p, sizeof old); /* p need not be aligned for a void * (NetBSD copies too) */
  if (count == 0 || size == 0) {
    sm_free(old);
    void *none = NULL;
    memcpy(p, &none, sizeof none);
    errno = saved;
    return 0;
  }
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return EOVERFLOW;
  void *q = smi_realloc(old, total, false);
  if (q == NULL) {
    errno = saved;
    return ENOMEM;
  }
  memcpy(p, &q, sizeof q);
  errno = saved;
  return 0;
}

size_t sm_malloc_size(const void *p) { return sm_usable_size(p); }        /* macOS */
size_t sm_malloc_usable_size(const void *p) { return sm_usable_size(p); } /* glibc */
size_t sm_malloc_good_size(size_t size) { return sm_good_size(size); }    /* macOS */
void *sm__expand(void *p, size_t newsize) { return sm_expand(p, newsize); } /* Windows _expand */

/* C23 free_sized / C++ sized delete pass the size that was requested: secure and debug builds know
 * it exactly (from the block's padding) and report any other size instead of freeing. */
static bool sized_free_ok(void *p, size_t size) {
#if SM_CHECK_FREES
  /* p must pass a free's checks before its recorded size is read (reported as the free would
   * report it, and not freed): an interior pointer into a huge block read past its mapping (a
   * crash), and a second sized free was reported as a size mismatch (until 2026-11-27) */
  if (p != NULL && !smi_block_check_live(p, false, SMI_CALL_FREE)) return false;
  if (p != NULL && size != smi_requested_size(p)) {
    smi_error(EINVAL, "sized free of %p with size %zu, but %zu bytes were requested", p, size, smi_requested_size(p));
    return false;
  }
#else
  (void)p;
  (void)size;
#endif
  return true;
}
/* ... and aligned frees (free_aligned_sized, aligned delete) pass the alignment it was made with */
static bool aligned_free_ok(void *p, size_t alignment) {
#if SM_CHECK_FREES
  if (p != NULL && (!smi_is_power_of_two(alignment) || ((uintptr_t)p & (alignment - 1)) != 0)) {
    smi_error(EINVAL, "aligned free of %p with alignment %zu, which the pointer does not have", p, alignment);
    return false;
  }
#else
  (void)p;
  (void)alignment;
#endif
  return true;
}

void sm_free_size(void *p, size_t size) {
  if (sized_free_ok(p, size)) sm_free(p);
}
void sm_free_size_aligned(void *p, size_t size, size_t alignment) {
  if (aligned_free_ok(p, alignment) && sized_free_ok(p, size)) sm_free(p);
}
void sm_free_aligned(void *p, size_t alignment) {
  if (aligned_free_ok(p, alignment)) sm_free(p);
}

/* Windows _aligned_recalloc / _aligned_offset_recalloc, on our recalloc */
void *sm_aligned_recalloc(void *p, size_t newcount, size_t size, size_t alignment) {
  return sm_recalloc_aligned(p, newcount, size, alignment);
}
void *sm_aligned_offset_recalloc(void *p, size_t newcount, size_t size, size_t alignment, size_t offset) {
  return sm_recalloc_aligned_at(p, newcount, size, alignment, offset);
}

/* ---- Windows strings: wide strings are UTF-16 (unsigned short), as in mimalloc's API ---- */

unsigned short *sm_wcsdup(const unsigned short *s) {
  if (s == NULL) return NULL;
  size_t n = 0;
  while (s[n] != 0) n++;
  unsigned short *t = sm_mallocn(n + 1, sizeof *t);
  if (t != NULL) memcpy(t, s, (n + 1) * sizeof *t);
  return t;
}

unsigned char *sm_mbsdup(const unsigned char *s) { return (unsigned char *)sm_strdup((const char *)s); }

/* _dupenv_s: *buf = a copy of the variable (NULL and *size 0 if unset); *size (if size is not NULL)
 * = the bytes of the copy, terminator included, as Windows reports it. 0, EINVAL or ENOMEM. */
int sm_dupenv_s(char **buf, size_t *size, const char *name) {
  if (buf == NULL || name == NULL) return EINVAL;
  *buf = NULL;
  if (size != NULL) *size = 0;
  const char *value = getenv(name);
  if (value == NULL) return 0;
  size_t n = strlen(value) + 1;
  char *copy = sm_malloc(n);
  if (copy == NULL) return ENOMEM;
  memcpy(copy, value, n);
  *buf = copy;
  if (size != NULL) *size = n;
  return 0;
}

/* UTF-16 name -> UTF-8 into out (NUL-terminated); false for an unpaired surrogate or no room */
static bool utf16_to_utf8(const unsigned short *s, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; s[i] != 0; i++) {
    uint32_t c = s[i];
    if (c >= 0xD800 && c <= 0xDBFF) {
      if (s[i + 1] < 0xDC00 || s[i + 1] > 0xDFFF) return false;
      c = 0x10000 + ((c - 0xD800) << 10) + (s[++i] - 0xDC00u);
    } else if (c >= 0xDC00 && c <= 0xDFFF) {
      return false;
    }
    size_t len = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (o + len >= cap) return false;
    if (len == 1) {
      out[o++] = (char)c;
    } else {
      static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
      for (size_t k = len; k-- > 1;) out[o + k] = (char)(0x80 | ((c >> (6 * (len - 1 - k))) & 0x3F));
      out[o] = (char)(lead[len] | (c >> (6 * (len - 1))));
      o += len;
    }
  }
  out[o] = 0;
  return true;
}

/* UTF-8 -> UTF-16 code units; writes them when out is not NULL. SIZE_MAX for invalid UTF-8. */
static size_t utf8_to_utf16(const unsigned char *s, unsigned short *out) {
  size_t n = 0;
  for (size_t i = 0; s[i] != 0;) {
    uint32_t c = s[i];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0) return SIZE_MAX;
    if (len > 1) c &= 0x3F >> (len - 1);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return SIZE_MAX; /* also stops at the terminator */
      c = (c << 6) | (s[i + k] & 0x3Fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return SIZE_MAX; /* overlong, out of range */
    i += len;
    if (c >= 0x10000) {
      if (out != NULL) {
        out[n] = (unsigned short)(0xD800 + ((c - 0x10000) >> 10));
        out[n + 1] = (unsigned short)(0xDC00 + ((c - 0x10000) & 0x3FF));
      }
      n += 2;
    } else {
      if (out != NULL) out[n] = (unsigned short)c;
      n++;
    }
  }
  return n;
}

/* _wdupenv_s on Linux, where the environment is bytes: the name is UTF-16, converted to UTF-8 for
 * the lookup, and the value (UTF-8) is returned as UTF-16. *size counts unsigned shorts, terminator
 * included. EILSEQ when either does not convert, EINVAL for a name of more than 1023 units. */
int sm_wdupenv_s(unsigned short **buf, size_t *size, const unsigned short *name) {
  if (buf == NULL || name == NULL) return EINVAL;
  *buf = NULL;
  if (size != NULL) *size = 0;
  size_t units = 0;
  while (name[units] != 0) units++;
  if (units > 1023) return EINVAL;
  char name8[1023 * 3 + 1]; /* a unit takes at most 3 bytes of UTF-8 (a surrogate pair 4 for 2) */
  if (!utf16_to_utf8(name, name8, sizeof name8)) return EILSEQ;
  const char *value = getenv(name8);
  if (value == NULL) return 0;
  size_t n = utf8_to_utf16((const unsigned char *)value, NULL);
  if (n == SIZE_MAX) return EILSEQ;
  unsigned short *copy = sm_mallocn(n + 1, sizeof *copy);
  if (copy == NULL) return ENOMEM;
  utf8_to_utf16((const unsigned char *)value, copy);
  copy[n] = 0;
  *buf = copy;
  if (size != NULL) *size = n + 1;
  return 0;
}
