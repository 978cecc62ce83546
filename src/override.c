/* override.c: the C++ new semantics (sm_new & co., compiled in every build) and the standard names
 * (malloc, free, ... , the glibc __libc_* entry points and every C++ operator new/delete), each a
 * one-line call of the sm_ API, whose functions carry the exact C11/POSIX/glibc error semantics
 * (posix.c). The standard names are defined in libshardmalloc.so, libshardmalloc.a and
 * shardmalloc.o alike; left out when SM_OVERRIDE is 0 (sanitizer builds, whose runtime owns malloc). */
#include "internal.h"

#include <dlfcn.h>
#include <stdlib.h>

/* ---- operator new semantics in C ----
 * Throwing new loops on the new-handler, then throws std::bad_alloc. libstdc++ (or libc++, which
 * exports the same std:: names) is reached through weak references: a C++ program has it loaded; a
 * C program that calls sm_new has no exception to throw, so a failure there aborts with a message.
 * Exceptions pass through these C frames: x86-64 and aarch64 compilers emit unwind tables for C. */
typedef void (*sm_new_handler_t)(void);
extern sm_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));
extern void _ZSt28__throw_bad_array_new_lengthv(void) __attribute__((weak, noreturn)); /* GCC >= 11 */

static sm_new_handler_t new_handler(void) { return _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL; }

static sm_noinline __attribute__((noreturn)) void throw_bad_alloc(size_t size) {
  if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
  smi_message("operator new(%zu) failed and std::bad_alloc cannot be thrown (no C++ runtime): aborting", size);
  abort();
}
/* count * size overflows: what a new-expression does for an array too large to size
 * (std::bad_array_new_length, a std::bad_alloc; [expr.new]): no handler call, which cannot help */
static sm_noinline __attribute__((noreturn)) void throw_bad_array_new_length(void) {
  if (_ZSt28__throw_bad_array_new_lengthv != NULL) _ZSt28__throw_bad_array_new_lengthv();
  throw_bad_alloc(SIZE_MAX);
}

/* one allocation attempt of the sm_new family, repeated after each new-handler call */
typedef enum { NEW_MALLOC, NEW_ALIGNED, NEW_REALLOC, NEW_HEAP } new_kind_t;
typedef struct {
  new_kind_t kind;
  size_t size, alignment;
  void *p;          /* NEW_REALLOC: the block to resize (still valid after a failure) */
  sm_heap_t *heap;  /* NEW_HEAP */
} new_request_t;

static void *new_attempt(const new_request_t *r) {
  switch (r->kind) {
  case NEW_MALLOC: return sm_malloc(r->size);
  case NEW_ALIGNED: return smi_malloc_aligned(smi_tls_heap, r->size, r->alignment, 0, false);
  case NEW_REALLOC: return sm_realloc(r->p, r->size);
  case NEW_HEAP: return sm_heap_malloc(r->heap, r->size);
  }
  return NULL;
}

/* [new.delete.single]: while the allocation fails, call the current new-handler (it may free
 * memory, install another handler, throw, or terminate); without one, throw std::bad_alloc (or,
 * nothrow, return NULL with errno ENOMEM). */
static sm_noinline void *new_failed(const new_request_t *r, bool nothrow) {
  for (;;) {
    sm_new_handler_t handler = new_handler();
    if (handler == NULL) {
      if (nothrow) return smi_enomem();
      throw_bad_alloc(r->size);
    }
    handler();
    void *p = new_attempt(r);
    if (p != NULL) return p;
  }
}

#if SM_OVERRIDE
typedef struct { int unused; } sm_nothrow_t;
#endif

/* Nothrow new must return NULL when the new-handler throws, and C cannot catch. libstdc++'s own
 * nothrow operator is exactly "try { return operator new(size); } catch (...) { return nullptr; }",
 * so with a handler installed we defer to it (the next definition after ours: dlsym(RTLD_NEXT), not
 * dlopen, which would make every -static link of shardmalloc.o warn). Its operator new is the
 * process's: ours, or that of shardmalloc-new-delete.h, which runs the handler loop with sm_new.
 * Should the process's operator new not be shardmalloc's (the library loaded with RTLD_LOCAL, a
 * program's own operators), its block goes back to the matching operator delete and the result is
 * NULL. Deferring needs the override (SM_OVERRIDE) and a dynamically linked C++ runtime; otherwise
 * we run the handler loop ourselves and an exception from the handler propagates out of
 * sm_new_nothrow (docs/api/cxx.md). Only this rare path (a failure with a handler installed) looks
 * anything up. */
static sm_noinline void *new_nothrow_failed(const new_request_t *r) {
  if (new_handler() == NULL) return smi_enomem();
#if SM_OVERRIDE
  static const sm_nothrow_t tag; /* std::nothrow_t is empty: any object will do */
  void *p;
  if (r->kind == NEW_MALLOC) {
    void *(*runtime)(size_t, const void *) = (void *(*)(size_t, const void *))dlsym(RTLD_NEXT, "_ZnwmRKSt9nothrow_t");
    if (runtime == NULL) return new_failed(r, true);
    p = runtime(r->size, &tag);
  } else {
    void *(*runtime)(size_t, size_t, const void *) =
        (void *(*)(size_t, size_t, const void *))dlsym(RTLD_NEXT, "_ZnwmSt11align_val_tRKSt9nothrow_t");
    if (runtime == NULL) return new_failed(r, true);
    p = runtime(r->size, r->alignment, &tag);
  }
  if (p != NULL && !sm_check_owned(p)) { /* the process's operator new is not shardmalloc's: give it back */
    if (r->kind == NEW_MALLOC) {
      void (*del)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
      if (del != NULL) del(p);
    } else {
      void (*del)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvSt11align_val_t");
      if (del != NULL) del(p, r->alignment);
    }
    p = NULL;
  }
  return p != NULL ? p : smi_enomem();
#else
  return new_failed(r, true);
#endif
}

void *sm_new(size_t size) {
  void *p = sm_malloc(size);
  return sm_likely(p != NULL) ? p : new_failed(&(new_request_t){.kind = NEW_MALLOC, .size = size}, false);
}

void *sm_new_nothrow(size_t size) {
  void *p = sm_malloc(size);
  return sm_likely(p != NULL) ? p : new_nothrow_failed(&(new_request_t){.kind = NEW_MALLOC, .size = size});
}

/* std::align_val_t must be a power of two. Any other alignment can never be served, so it fails at
 * once, without a handler call (which could not help): std::bad_alloc, or NULL/EINVAL for nothrow. */
void *sm_new_aligned(size_t size, size_t alignment) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) throw_bad_alloc(size);
  void *p = smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
  return sm_likely(p != NULL) ? p
                              : new_failed(&(new_request_t){.kind = NEW_ALIGNED, .size = size, .alignment = alignment}, false);
}

void *sm_new_aligned_nothrow(size_t size, size_t alignment) {
  if (sm_unlikely(!smi_is_power_of_two(alignment))) {
    errno = EINVAL;
    return NULL;
  }
  void *p = smi_malloc_aligned(smi_tls_heap, size, alignment, 0, false);
  return sm_likely(p != NULL) ? p : new_nothrow_failed(&(new_request_t){.kind = NEW_ALIGNED, .size = size, .alignment = alignment});
}

void *sm_new_n(size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) throw_bad_array_new_length();
  return sm_new(total);
}

/* realloc with new's failure semantics; p is untouched when it throws. A new size of 0 gives a
 * minimal block (like operator new(0)), not realloc's free-and-return-NULL. */
void *sm_new_realloc(void *p, size_t newsize) {
  if (newsize == 0) newsize = 1;
  void *q = sm_realloc(p, newsize);
  return sm_likely(q != NULL) ? q : new_failed(&(new_request_t){.kind = NEW_REALLOC, .size = newsize, .p = p}, false);
}

void *sm_new_reallocn(void *p, size_t newcount, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(newcount, size, &total))) throw_bad_array_new_length();
  return sm_new_realloc(p, total);
}

void *sm_heap_alloc_new(sm_heap_t *heap, size_t size) {
  void *p = sm_heap_malloc(heap, size);
  return sm_likely(p != NULL) ? p : new_failed(&(new_request_t){.kind = NEW_HEAP, .size = size, .heap = heap}, false);
}

void *sm_heap_alloc_new_n(sm_heap_t *heap, size_t count, size_t size) {
  size_t total;
  if (sm_unlikely(__builtin_mul_overflow(count, size, &total))) throw_bad_array_new_length();
  return sm_heap_alloc_new(heap, total);
}

#if SM_OVERRIDE

#include <stdio.h>

#define SM_PUBLIC __attribute__((visibility("default")))

/* ---- C ---- */
SM_PUBLIC SM_HOT_ENTRY void *malloc(size_t size) { return smi_malloc(size); } /* the body itself, as free's */
SM_PUBLIC SM_HOT_ENTRY void free(void *p) { smi_free(p); } /* the body itself: no jump in between */
SM_PUBLIC void *calloc(size_t count, size_t size) { return sm_calloc(count, size); }
SM_PUBLIC void *realloc(void *p, size_t size) { return smi_realloc(p, size, false); }
SM_PUBLIC void cfree(void *p) { sm_cfree(p); }
SM_PUBLIC size_t malloc_usable_size(void *p) { return sm_malloc_usable_size(p); }
SM_PUBLIC void *reallocarray(void *p, size_t count, size_t size) { return sm_reallocarray(p, count, size); }
SM_PUBLIC void free_sized(void *p, size_t size) { sm_free_size(p, size); }
SM_PUBLIC void free_aligned_sized(void *p, size_t alignment, size_t size) { sm_free_size_aligned(p, size, alignment); }
SM_PUBLIC void *aligned_alloc(size_t alignment, size_t size) { return sm_aligned_alloc(alignment, size); }
SM_PUBLIC int posix_memalign(void **out, size_t alignment, size_t size) { return sm_posix_memalign(out, alignment, size); }
SM_PUBLIC void *memalign(size_t alignment, size_t size) { return sm_memalign(alignment, size); }
SM_PUBLIC void *valloc(size_t size) { return sm_valloc(size); }
SM_PUBLIC void *pvalloc(size_t size) { return sm_pvalloc(size); }

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

/* glibc's reporting extensions, from the statistics, in glibc's meaning: `arena` is the memory
 * taken from the OS for segments (committed, huge mappings apart), `uordblks` the bytes of the
 * normal and large blocks in use (exact for the calling thread's heaps, which are merged first;
 * other threads' lag by at most 1 MiB each, docs/api/stats.md), `fordblks` the rest of `arena`,
 * `hblks`/`hblkhd` the huge blocks and their mappings. */
#include <malloc.h>
static void fill_mallinfo(size_t *arena, size_t *hblks, size_t *hblkhd, size_t *uord, size_t *ford) {
  sm_stats_merge();
  int64_t committed = smi_count_current(SM_COUNT_COMMITTED), huge = smi_count_current(SM_COUNT_HUGE);
  int64_t in_use = smi_count_current(SM_COUNT_NORMAL) + smi_count_current(SM_COUNT_LARGE);
  *arena = committed > huge ? (size_t)(committed - huge) : 0;
  *hblks = (size_t)smi_count_current(SM_COUNT_HUGE_BLOCKS);
  *hblkhd = huge > 0 ? (size_t)huge : 0;
  *uord = in_use <= 0 ? 0 : (size_t)in_use < *arena ? (size_t)in_use : *arena;
  *ford = *arena - *uord;
}
#if defined(__GLIBC__) /* musl has no mallinfo */
SM_PUBLIC struct mallinfo2 mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  fill_mallinfo(&mi.arena, &mi.hblks, &mi.hblkhd, &mi.uordblks, &mi.fordblks);
  return mi;
}
static struct mallinfo mallinfo_saturated(void) { /* the old int fields saturate */
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
SM_PUBLIC struct mallinfo mallinfo(void) { return mallinfo_saturated(); }
SM_PUBLIC struct mallinfo __libc_mallinfo(void) { return mallinfo_saturated(); }
#endif
SM_PUBLIC void malloc_stats(void) { sm_stats_print(); }
/* glibc returns EINVAL for options it does not know (errno untouched); it has no answer for a NULL
 * stream (it writes to it), here -1 and EINVAL, as its manual page says of errors */
SM_PUBLIC int malloc_info(int options, FILE *out) {
  if (options != 0) return EINVAL;
  if (out == NULL) {
    errno = EINVAL;
    return -1;
  }
  size_t arena, hblks, hblkhd, uord, ford;
  fill_mallinfo(&arena, &hblks, &hblkhd, &uord, &ford);
  fprintf(out, "<malloc version=\"shardmalloc-%d\">\n<total type=\"rest\" size=\"%zu\"/>\n"
               "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n<system type=\"current\" size=\"%zu\"/>\n</malloc>\n",
          SM_VERSION, ford, hblks, hblkhd, arena + hblkhd);
  return 0;
}

/* glibc's internal names, which some programs and libraries call directly */
SM_PUBLIC void *__libc_malloc(size_t size) { return sm_malloc(size); }
SM_PUBLIC void __libc_free(void *p) { sm_free(p); }
SM_PUBLIC void *__libc_calloc(size_t count, size_t size) { return sm_calloc(count, size); }
SM_PUBLIC void *__libc_realloc(void *p, size_t size) { return smi_realloc(p, size, false); }
SM_PUBLIC void *__libc_memalign(size_t alignment, size_t size) { return sm_memalign(alignment, size); }
SM_PUBLIC void *__libc_valloc(size_t size) { return sm_valloc(size); }
SM_PUBLIC void *__libc_pvalloc(size_t size) { return sm_pvalloc(size); }
SM_PUBLIC void __libc_cfree(void *p) { sm_cfree(p); }
SM_PUBLIC int __libc_mallopt(int param, int value) { return mallopt(param, value); }
SM_PUBLIC int __posix_memalign(void **out, size_t alignment, size_t size) { return sm_posix_memalign(out, alignment, size); }

/* ---- C++ operator new/delete (mangled names, so no C++ compiler is needed) ----
 * Weak, so that a program may define its own (for instance through shardmalloc-new-delete.h) and
 * still link libshardmalloc.a or shardmalloc.o; the dynamic linker does not tell weak from strong,
 * so preloading is unaffected. */
#define SM_OPERATOR SM_PUBLIC __attribute__((weak))

SM_OPERATOR void *_Znwm(size_t n) { return sm_new(n); }
SM_OPERATOR void *_Znam(size_t n) { return sm_new(n); }
SM_OPERATOR void *_ZnwmSt11align_val_t(size_t n, size_t a) { return sm_new_aligned(n, a); }
SM_OPERATOR void *_ZnamSt11align_val_t(size_t n, size_t a) { return sm_new_aligned(n, a); }
SM_OPERATOR void *_ZnwmRKSt9nothrow_t(size_t n, const sm_nothrow_t *t) { (void)t; return sm_new_nothrow(n); }
SM_OPERATOR void *_ZnamRKSt9nothrow_t(size_t n, const sm_nothrow_t *t) { (void)t; return sm_new_nothrow(n); }
SM_OPERATOR void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const sm_nothrow_t *t) { (void)t; return sm_new_aligned_nothrow(n, a); }
SM_OPERATOR void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const sm_nothrow_t *t) { (void)t; return sm_new_aligned_nothrow(n, a); }

SM_OPERATOR void _ZdlPv(void *p) { sm_free(p); }
SM_OPERATOR void _ZdaPv(void *p) { sm_free(p); }
SM_OPERATOR void _ZdlPvm(void *p, size_t n) { sm_free_size(p, n); }
SM_OPERATOR void _ZdaPvm(void *p, size_t n) { sm_free_size(p, n); }
SM_OPERATOR void _ZdlPvRKSt9nothrow_t(void *p, const sm_nothrow_t *t) { (void)t; sm_free(p); }
SM_OPERATOR void _ZdaPvRKSt9nothrow_t(void *p, const sm_nothrow_t *t) { (void)t; sm_free(p); }
SM_OPERATOR void _ZdlPvSt11align_val_t(void *p, size_t a) { sm_free_aligned(p, a); }
SM_OPERATOR void _ZdaPvSt11align_val_t(void *p, size_t a) { sm_free_aligned(p, a); }
SM_OPERATOR void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { sm_free_size_aligned(p, n, a); }
SM_OPERATOR void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { sm_free_size_aligned(p, n, a); }
SM_OPERATOR void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const sm_nothrow_t *t) { (void)t; sm_free_aligned(p, a); }
SM_OPERATOR void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const sm_nothrow_t *t) { (void)t; sm_free_aligned(p, a); }

#endif /* SM_OVERRIDE */
