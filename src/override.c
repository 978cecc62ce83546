/* override.c: the standard names (malloc, free, ... , the glibc __libc_* entry points and every
 * C++ operator new/delete), each a thin layer over the sm_ API with the exact C11/POSIX/glibc
 * error semantics. Defined in libshardmalloc.so, libshardmalloc.a and shardmalloc.o alike; left
 * out when SM_OVERRIDE is 0 (sanitizer builds, whose runtime owns malloc). */
#include "internal.h"

#if SM_OVERRIDE

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define SM_PUBLIC __attribute__((visibility("default")))

/* ---- C ---- */
SM_PUBLIC void *malloc(size_t size) { return sm_malloc(size); }
SM_PUBLIC void free(void *p) { sm_free(p); }
SM_PUBLIC void *calloc(size_t count, size_t size) { return sm_calloc(count, size); }
SM_PUBLIC void *realloc(void *p, size_t size) { return smi_realloc(p, size, false); }
SM_PUBLIC void cfree(void *p) { sm_free(p); }
SM_PUBLIC size_t malloc_usable_size(void *p) { return smi_usable_size(p); }

SM_PUBLIC void *reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return smi_enomem();
  return smi_realloc(p, total, false);
}

/* C23 free_sized and C++ sized delete pass the size that was requested: secure and debug builds
 * know it exactly (from the block's padding) and report any other size */
SM_PUBLIC void free_sized(void *p, size_t size) {
#if SM_CHECK_FREES
  if (p != NULL && sm_check_owned(p) && size != smi_usable_size(p)) {
    smi_error(EINVAL, "sized free of %p with size %zu, but %zu bytes were requested", p, size, smi_usable_size(p));
    return;
  }
#else
  (void)size;
#endif
  sm_free(p);
}
SM_PUBLIC void free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  free_sized(p, size);
}

/* C11: any power of two; otherwise NULL/EINVAL */
SM_PUBLIC void *aligned_alloc(size_t alignment, size_t size) {
  if (!smi_is_power_of_two(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
}

/* POSIX: EINVAL unless a power of two multiple of sizeof(void*); returns the error, errno untouched */
SM_PUBLIC int posix_memalign(void **out, size_t alignment, size_t size) {
  if (alignment % sizeof(void *) != 0 || !smi_is_power_of_two(alignment)) return EINVAL;
  int saved = errno;
  void *p = smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

/* glibc: an alignment that is not a power of two is rounded up to the next one */
SM_PUBLIC void *memalign(size_t alignment, size_t size) {
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (!smi_is_power_of_two(alignment)) alignment = (size_t)1 << (64 - __builtin_clzl(alignment));
  return smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
}

SM_PUBLIC void *valloc(size_t size) { return smi_malloc_aligned(smi_tls_heap, size, smi_os_page_size(), 0, false); }

SM_PUBLIC void *pvalloc(size_t size) {
  size_t ps = smi_os_page_size();
  size_t rounded = (size + ps - 1) & ~(ps - 1);
  if (rounded < size) return smi_enomem();
  return smi_malloc_aligned(smi_tls_heap, rounded == 0 ? ps : rounded, ps, 0, false);
}

/* glibc extensions that programs call: trimming gives memory back; mallopt settings are ignored */
SM_PUBLIC int malloc_trim(size_t pad) {
  (void)pad;
  sm_collect(true);
  return 1;
}
SM_PUBLIC int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}

/* glibc's reporting extensions, from our gauges. There is no per-block accounting, so the
 * "in use" figure is the address space of segments that hold blocks (an upper bound). */
#include <malloc.h>
static void fill_mallinfo(size_t *arena, size_t *hblks, size_t *hblkhd, size_t *uord, size_t *ford) {
  size_t mapped = (size_t)smi_count_current(SM_COUNT_RESERVED), huge = (size_t)smi_count_current(SM_COUNT_HUGE);
  size_t cached = (size_t)smi_count_current(SM_COUNT_CACHED);
  *arena = mapped > huge ? mapped - huge : 0;
  *hblks = (size_t)smi_count_current(SM_COUNT_HUGE_BLOCKS);
  *hblkhd = huge;
  *uord = *arena > cached ? *arena - cached : 0;
  *ford = cached;
}
SM_PUBLIC struct mallinfo2 mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  fill_mallinfo(&mi.arena, &mi.hblks, &mi.hblkhd, &mi.uordblks, &mi.fordblks);
  return mi;
}
SM_PUBLIC struct mallinfo mallinfo(void) { /* the old int fields saturate */
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof mi);
#define SM_SAT(x) ((x) > INT32_MAX ? INT32_MAX : (int)(x))
  mi.arena = SM_SAT(m2.arena);
  mi.hblks = SM_SAT(m2.hblks);
  mi.hblkhd = SM_SAT(m2.hblkhd);
  mi.uordblks = SM_SAT(m2.uordblks);
  mi.fordblks = SM_SAT(m2.fordblks);
#undef SM_SAT
  return mi;
}
SM_PUBLIC void malloc_stats(void) { sm_stats_print(); }
SM_PUBLIC int malloc_info(int options, FILE *out) {
  if (options != 0 || out == NULL) {
    errno = EINVAL;
    return -1;
  }
  struct mallinfo2 mi = mallinfo2();
  fprintf(out, "<malloc version=\"shardmalloc-%d\">\n<system type=\"current\" size=\"%zu\"/>\n"
               "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n<total type=\"cached\" size=\"%zu\"/>\n</malloc>\n",
          SM_VERSION, mi.arena + mi.hblkhd, mi.hblks, mi.hblkhd, mi.fordblks);
  return 0;
}

/* glibc's internal names, which some programs and libraries call directly */
SM_PUBLIC void *__libc_malloc(size_t size) { return sm_malloc(size); }
SM_PUBLIC void __libc_free(void *p) { sm_free(p); }
SM_PUBLIC void *__libc_calloc(size_t count, size_t size) { return sm_calloc(count, size); }
SM_PUBLIC void *__libc_realloc(void *p, size_t size) { return smi_realloc(p, size, false); }
SM_PUBLIC void *__libc_memalign(size_t alignment, size_t size) { return memalign(alignment, size); }
SM_PUBLIC void *__libc_valloc(size_t size) { return valloc(size); }
SM_PUBLIC void *__libc_pvalloc(size_t size) { return pvalloc(size); }
SM_PUBLIC void __libc_cfree(void *p) { sm_free(p); }
SM_PUBLIC int __posix_memalign(void **out, size_t alignment, size_t size) { return posix_memalign(out, alignment, size); }

/* ---- C++ operator new/delete (mangled names, so no C++ compiler is needed) ----
 * Throwing new loops on the new-handler, then throws std::bad_alloc. libstdc++ is reached through
 * weak references: a C++ program has it loaded; a C program never calls operator new. */
typedef void (*sm_new_handler_t)(void);
extern sm_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static sm_noinline void *new_failed(size_t size, size_t alignment, bool nothrow) {
  for (;;) {
    sm_new_handler_t handler = _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
    if (handler == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
      smi_message("operator new(%zu) failed and std::bad_alloc cannot be thrown: aborting", size);
      abort();
    }
    handler(); /* may free memory, throw, or terminate */
    void *p = alignment == 0 ? sm_malloc(size) : smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
    if (p != NULL) return p;
  }
}

/* nothrow new must return nullptr when the new-handler throws, which C cannot catch. libstdc++'s
 * own nothrow operator does exactly that around the throwing operator new (ours), so on failure
 * we defer to it when it is there (only this rare path looks it up). */
typedef void *(*sm_nothrow_new_t)(size_t, const void *);
typedef void *(*sm_nothrow_new_aligned_t)(size_t, size_t, const void *);

static sm_noinline void *new_nothrow_failed(const char *libstdcxx_name, size_t size, size_t alignment, const void *tag) {
  if (_ZSt15get_new_handlerv == NULL || _ZSt15get_new_handlerv() == NULL) return NULL;
  void *next = dlsym(RTLD_NEXT, libstdcxx_name);
  if (next == NULL) return new_failed(size, alignment, true); /* static binary: call the handler ourselves */
  if (alignment == 0) return ((sm_nothrow_new_t)next)(size, tag);
  return ((sm_nothrow_new_aligned_t)next)(size, alignment, tag);
}

static inline void *new_impl(size_t size) {
  void *p = sm_malloc(size);
  return sm_likely(p != NULL) ? p : new_failed(size, 0, false);
}
static inline void *new_aligned_impl(size_t size, size_t alignment) {
  void *p = smi_is_power_of_two(alignment) ? smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false) : NULL;
  return sm_likely(p != NULL) ? p : new_failed(size, smi_is_power_of_two(alignment) ? alignment : SM_SEGMENT_SIZE, false);
}

typedef struct { int unused; } sm_nothrow_t;

SM_PUBLIC void *_Znwm(size_t n) { return new_impl(n); }
SM_PUBLIC void *_Znam(size_t n) { return new_impl(n); }
SM_PUBLIC void *_ZnwmRKSt9nothrow_t(size_t n, const sm_nothrow_t *t) {
  void *p = sm_malloc(n);
  return sm_likely(p != NULL) ? p : new_nothrow_failed("_ZnwmRKSt9nothrow_t", n, 0, t);
}
SM_PUBLIC void *_ZnamRKSt9nothrow_t(size_t n, const sm_nothrow_t *t) {
  void *p = sm_malloc(n);
  return sm_likely(p != NULL) ? p : new_nothrow_failed("_ZnamRKSt9nothrow_t", n, 0, t);
}
SM_PUBLIC void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned_impl(n, a); }
SM_PUBLIC void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned_impl(n, a); }
SM_PUBLIC void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const sm_nothrow_t *t) {
  void *p = smi_is_power_of_two(a) ? smi_malloc_aligned(smi_tls_heap, n, a, 0, false) : NULL;
  return sm_likely(p != NULL) ? p : new_nothrow_failed("_ZnwmSt11align_val_tRKSt9nothrow_t", n, a, t);
}
SM_PUBLIC void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const sm_nothrow_t *t) {
  void *p = smi_is_power_of_two(a) ? smi_malloc_aligned(smi_tls_heap, n, a, 0, false) : NULL;
  return sm_likely(p != NULL) ? p : new_nothrow_failed("_ZnamSt11align_val_tRKSt9nothrow_t", n, a, t);
}

SM_PUBLIC void _ZdlPv(void *p) { sm_free(p); }
SM_PUBLIC void _ZdaPv(void *p) { sm_free(p); }
SM_PUBLIC void _ZdlPvm(void *p, size_t n) { free_sized(p, n); }
SM_PUBLIC void _ZdaPvm(void *p, size_t n) { free_sized(p, n); }
SM_PUBLIC void _ZdlPvRKSt9nothrow_t(void *p, const sm_nothrow_t *t) { (void)t; sm_free(p); }
SM_PUBLIC void _ZdaPvRKSt9nothrow_t(void *p, const sm_nothrow_t *t) { (void)t; sm_free(p); }
SM_PUBLIC void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a; sm_free(p); }
SM_PUBLIC void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a; sm_free(p); }
SM_PUBLIC void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { free_aligned_sized(p, a, n); }
SM_PUBLIC void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { free_aligned_sized(p, a, n); }
SM_PUBLIC void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const sm_nothrow_t *t) { (void)a; (void)t; sm_free(p); }
SM_PUBLIC void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const sm_nothrow_t *t) { (void)a; (void)t; sm_free(p); }

#endif /* SM_OVERRIDE */
