/* shardmalloc-new-delete.h: every global operator new and delete on shardmalloc.
 *
 * Include it in exactly ONE C++ source file of a program (it defines the replaceable operators,
 * which may be defined once per program and must not be inline). Meant for programs that link
 * shardmalloc without its malloc override (for instance libshardmalloc.a in a sanitizer build, or a
 * build whose malloc stays glibc's) or that want new/delete on shardmalloc whatever the link order.
 * With the override in place it changes nothing but where the operators live: libshardmalloc's own
 * operators are weak, so these take precedence without a duplicate-symbol error.
 *
 * Sized delete needs C++14, aligned new/delete C++17 (__cpp_aligned_new): compile the file that
 * includes this header with the newest standard any part of the program uses. */
#ifndef SHARDMALLOC_NEW_DELETE_H
#define SHARDMALLOC_NEW_DELETE_H

#ifdef __cplusplus
#include <cstddef>
#include <new>

#include "shardmalloc.h"

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
/* nothrow new must return nullptr whatever the new-handler does, including throwing: C++ can
 * catch what the C library's sm_new_nothrow cannot (see docs/api/cxx.md) */
#define SM_NEW_NOTHROW(call)                                                                        \
  try {                                                                                             \
    return call;                                                                                    \
  } catch (...) {                                                                                   \
    return nullptr;                                                                                 \
  }
#else
#define SM_NEW_NOTHROW(call) return call;
#endif

void operator delete(void *p) noexcept { sm_free(p); }
void operator delete[](void *p) noexcept { sm_free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { sm_free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { sm_free(p); }

void *operator new(std::size_t n) { return sm_new(n); }
void *operator new[](std::size_t n) { return sm_new(n); }
void *operator new(std::size_t n, const std::nothrow_t &) noexcept { SM_NEW_NOTHROW(sm_new_nothrow(n)) }
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { SM_NEW_NOTHROW(sm_new_nothrow(n)) }

#if __cplusplus >= 201402L
void operator delete(void *p, std::size_t n) noexcept { sm_free_size(p, n); }
void operator delete[](void *p, std::size_t n) noexcept { sm_free_size(p, n); }
#endif

#if defined(__cpp_aligned_new)
void operator delete(void *p, std::align_val_t al) noexcept { sm_free_aligned(p, static_cast<std::size_t>(al)); }
void operator delete[](void *p, std::align_val_t al) noexcept { sm_free_aligned(p, static_cast<std::size_t>(al)); }
void operator delete(void *p, std::size_t n, std::align_val_t al) noexcept {
  sm_free_size_aligned(p, n, static_cast<std::size_t>(al));
}
void operator delete[](void *p, std::size_t n, std::align_val_t al) noexcept {
  sm_free_size_aligned(p, n, static_cast<std::size_t>(al));
}
void operator delete(void *p, std::align_val_t al, const std::nothrow_t &) noexcept {
  sm_free_aligned(p, static_cast<std::size_t>(al));
}
void operator delete[](void *p, std::align_val_t al, const std::nothrow_t &) noexcept {
  sm_free_aligned(p, static_cast<std::size_t>(al));
}

void *operator new(std::size_t n, std::align_val_t al) { return sm_new_aligned(n, static_cast<std::size_t>(al)); }
void *operator new[](std::size_t n, std::align_val_t al) { return sm_new_aligned(n, static_cast<std::size_t>(al)); }
void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  SM_NEW_NOTHROW(sm_new_aligned_nothrow(n, static_cast<std::size_t>(al)))
}
void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  SM_NEW_NOTHROW(sm_new_aligned_nothrow(n, static_cast<std::size_t>(al)))
}
#endif

#undef SM_NEW_NOTHROW
#endif /* __cplusplus */

#endif
