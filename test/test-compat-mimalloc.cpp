// test-compat-mimalloc (C++): the parts of include/compat/mimalloc.h that need C++: the mi_new
// family (operator new semantics) and the STL allocators under mimalloc's names.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <mimalloc.h>

static long checks, failures;
#define CHECK(cond, ...)                                                                               \
  do {                                                                                                 \
    checks++;                                                                                          \
    if (!(cond)) {                                                                                     \
      failures++;                                                                                      \
      std::fprintf(stderr, "FAIL %s:%d %s\n     ", __FILE__, __LINE__, #cond);                          \
      std::fprintf(stderr, __VA_ARGS__);                                                               \
      std::fputc('\n', stderr);                                                                        \
    }                                                                                                  \
  } while (0)

static size_t opaque(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}
template <class F> static bool throws_bad_alloc(F f) {
  try {
    f();
  } catch (const std::bad_alloc &) {
    return true;
  }
  return false;
}
static int handler_calls;
static void counting_handler() {
  if (++handler_calls >= 2) std::set_new_handler(nullptr);
}

int main() {
  long before = checks;
  {
    void *p = mi_new(100);
    CHECK(p != nullptr && mi_check_owned(p), "mi_new(100): expected a shardmalloc block, seen %p", p);
    p = mi_new_realloc(p, 10000);
    CHECK(p != nullptr && mi_usable_size(p) >= 10000, "mi_new_realloc: expected 10000 bytes, seen %p", p);
    p = mi_new_reallocn(p, 100, 1000);
    CHECK(p != nullptr && mi_usable_size(p) >= 100000, "mi_new_reallocn: expected 100000 bytes, seen %p", p);
    mi_free(p);
    p = mi_new_aligned(100, 1024);
    CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % 1024 == 0, "mi_new_aligned(100, 1024): seen %p", p);
    mi_free(p);
    p = mi_new_nothrow(100);
    CHECK(p != nullptr, "mi_new_nothrow(100): seen %p", p);
    mi_free(p);
    p = mi_new_aligned_nothrow(100, 64);
    CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % 64 == 0, "mi_new_aligned_nothrow(100, 64): seen %p", p);
    mi_free(p);
    p = mi_new_n(100, 8);
    CHECK(p != nullptr && mi_usable_size(p) >= 800, "mi_new_n(100, 8): seen %p", p);
    mi_free(p);
    mi_heap_t *h = mi_heap_get_default();
    p = mi_heap_alloc_new(h, 300);
    CHECK(p != nullptr && mi_heap_contains_block(h, p), "mi_heap_alloc_new: expected a block of the heap, seen %p", p);
    mi_free(p);
    p = mi_heap_alloc_new_n(h, 30, 10);
    CHECK(p != nullptr && mi_heap_contains_block(h, p), "mi_heap_alloc_new_n: expected a block of the heap, seen %p", p);
    mi_free(p);

    const size_t huge = SIZE_MAX / 2;
    CHECK(throws_bad_alloc([&] { mi_free(mi_new(opaque(huge))); }), "mi_new(SIZE_MAX/2): expected std::bad_alloc%s", "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_new_aligned(opaque(huge), 64)); }), "mi_new_aligned: expected bad_alloc%s", "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_new_n(opaque(SIZE_MAX), 2)); }), "mi_new_n overflow: expected bad_alloc%s", "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_new_realloc(nullptr, opaque(huge))); }), "mi_new_realloc: bad_alloc%s", "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_new_reallocn(nullptr, opaque(SIZE_MAX), 4)); }), "mi_new_reallocn: bad_alloc%s",
          "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_heap_alloc_new(h, opaque(huge))); }), "mi_heap_alloc_new: bad_alloc%s", "");
    CHECK(throws_bad_alloc([&] { mi_free(mi_heap_alloc_new_n(h, opaque(SIZE_MAX), 8)); }), "mi_heap_alloc_new_n: bad_alloc%s",
          "");
    errno = 0;
    CHECK(mi_new_nothrow(opaque(huge)) == nullptr && errno == ENOMEM, "mi_new_nothrow(SIZE_MAX/2): expected NULL/ENOMEM%s",
          "");
    CHECK(mi_new_aligned_nothrow(opaque(huge), 128) == nullptr, "mi_new_aligned_nothrow(SIZE_MAX/2): expected NULL%s", "");
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    CHECK(throws_bad_alloc([&] { mi_free(mi_new(opaque(huge))); }) && handler_calls == 2,
          "mi_new with a handler giving up on its 2nd call: expected 2 calls then bad_alloc, seen %d calls", handler_calls);
    std::set_new_handler(nullptr);
  }
  std::printf("%-4s  %-60s %ld checks\n", failures ? "FAIL" : "ok", "mi_new family: operator new semantics", checks - before);

  before = checks;
  long failed_before = failures;
  {
    static_assert(std::is_same<mi_stl_allocator<int>, sm_stl_allocator<int>>::value, "mi_stl_allocator is ours");
    static_assert(std::is_same<mi_heap_stl_allocator<int>, sm_heap_stl_allocator<int>>::value, "mi_heap_stl_allocator");
    static_assert(std::is_same<mi_heap_destroy_stl_allocator<int>, sm_heap_destroy_stl_allocator<int>>::value, "destroy");
    CHECK(MI_HAS_HEAP_STL_ALLOCATOR == 1, "MI_HAS_HEAP_STL_ALLOCATOR: expected 1%s", "");

    std::vector<int, mi_stl_allocator<int>> v;
    for (int i = 0; i < 10000; i++) v.push_back(i);
    CHECK(mi_check_owned(v.data()) && v[9999] == 9999, "vector on mi_stl_allocator: expected our block%s", "");
    std::basic_string<char, std::char_traits<char>, mi_stl_allocator<char>> s(1000, 'm');
    CHECK(mi_check_owned(s.data()), "string on mi_stl_allocator: expected our block%s", "");

    mi_heap_t *h = mi_heap_new();
    CHECK(h != nullptr, "mi_heap_new: expected a heap%s", "");
    if (h != nullptr) {
      {
        mi_heap_stl_allocator<int> a(h);
        std::vector<int, mi_heap_stl_allocator<int>> hv(a);
        hv.assign(5000, 3);
        CHECK(mi_heap_contains_block(h, hv.data()), "vector on mi_heap_stl_allocator(h): expected a block of h%s", "");
        std::map<int, int, std::less<int>, mi_heap_stl_allocator<std::pair<const int, int>>> m(a);
        for (int i = 0; i < 1000; i++) m[i] = i;
        CHECK(m.size() == 1000 && a == mi_heap_stl_allocator<double>(h), "map on the heap allocator: wrong%s", "");
      }
      mi_heap_delete(h);
    }
    {
      mi_heap_destroy_stl_allocator<int> d;
      std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, mi_heap_destroy_stl_allocator<std::pair<const int, int>>>
          um(d);
      for (int i = 0; i < 5000; i++) um[i] = -i;
      std::vector<int, mi_heap_destroy_stl_allocator<int>> dv(100000, 1, d);
      CHECK(um.size() == 5000 && um[4999] == -4999 && mi_heap_contains_block(d.heap(), dv.data()),
            "containers on mi_heap_destroy_stl_allocator: expected blocks of its heap%s", "");
    } // the heap goes here, with every block
  }
  std::printf("%-4s  %-60s %ld checks\n", failures != failed_before ? "FAIL" : "ok",
              "mi_stl_allocator, mi_heap_stl_allocator, mi_heap_destroy_stl_allocator", checks - before);

  if (failures)
    std::printf("test-compat-mimalloc-cxx: FAILED: %ld of %ld checks failed\n", failures, checks);
  else
    std::printf("test-compat-mimalloc-cxx: all %ld checks passed\n", checks);
  return failures ? 1 : 0;
}
