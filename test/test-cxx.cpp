// test-cxx: every C++ operator new/delete is served by shardmalloc (DROPIN 13); bad_alloc, the
// new-handler and nothrow behave as the standard says; containers work; thread_local and static
// destructors may allocate (DROPIN 16); the sm_new family and the STL allocators of shardmalloc.h
// (sm_stl_allocator, sm_heap_stl_allocator, sm_heap_destroy_stl_allocator) do what docs/api/cxx.md says.
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shardmalloc.h"

#include "sm-test-cxx.h"

struct alignas(64) Cache64 { char c[64]; };
struct alignas(256) Big256 { char c[300]; };
struct alignas(8192) Page8k { char c[100]; };

static int handler_calls;
static void counting_handler() {
  if (++handler_calls >= 3) std::set_new_handler(nullptr); // honoured: the next failure throws
}
struct custom_failure : std::bad_alloc {};
static void throwing_handler() {
  handler_calls++;
  throw custom_failure();
}

// ---- thread_local and static objects whose destructors allocate
static std::atomic<int> tl_dtor_runs{0};
struct Rearm;
struct AllocInDtor {
  std::string *s = nullptr;
  AllocInDtor() { s = new std::string("constructed"); }
  ~AllocInDtor();
};
struct Rearm {
  std::vector<int> v;
  ~Rearm() {
    std::vector<int> w(1000, 7); // allocate while being destroyed
    if (w.size() != 1000 || !sm_check_owned(w.data())) std::_Exit(31);
    tl_dtor_runs++;
  }
};
thread_local AllocInDtor tl_obj;
AllocInDtor::~AllocInDtor() {
  std::string *t = new std::string(1000, 'x'); // allocate in the destructor
  if (!sm_check_owned(t) || !sm_check_owned(s)) std::_Exit(32);
  delete t;
  delete s;
  // touching another thread_local during destruction constructs it: its destructor must run too
  static thread_local Rearm rearm;
  rearm.v.assign(100, 1);
  tl_dtor_runs++;
}
struct StaticWithDtor {
  std::map<int, std::string> m;
  ~StaticWithDtor() {
    std::map<int, std::string> n; // allocation during static destruction
    for (int i = 0; i < 1000; i++) n[i] = std::to_string(i) + std::string(50, 'z');
    if (n.size() != 1000 || m.size() != 100) std::_Exit(33);
    auto *leak = new std::vector<char>(100000, 1); // allocated at exit, never freed: fine
    if (!sm_check_owned(leak->data())) std::_Exit(34);
  }
};
static StaticWithDtor static_obj;

// ---- the sm_new family and the STL allocators
template <class T> using sm_vector = std::vector<T, sm_stl_allocator<T>>;
using sm_string = std::basic_string<char, std::char_traits<char>, sm_stl_allocator<char>>;
template <class T> using heap_vector = std::vector<T, sm_heap_stl_allocator<T>>;
using heap_string = std::basic_string<char, std::char_traits<char>, sm_heap_stl_allocator<char>>;
using destroy_string = std::basic_string<char, std::char_traits<char>, sm_heap_destroy_stl_allocator<char>>;

// the "heaps" gauge of the JSON statistics (heaps made with sm_heap_new and not yet gone), -1 if absent
static long heaps_current() {
  static char buf[1 << 16];
  if (sm_stats_get_json(sizeof buf, buf) == nullptr) return -1;
  const char *h = std::strstr(buf, "\"heaps\"");
  const char *c = h ? std::strstr(h, "\"current\":") : nullptr;
  return c ? std::strtol(c + 10, nullptr, 10) : -1;
}

enum class caught { none, bad_array_new_length, bad_alloc, other };
template <class F> static caught catch_of(F f) {
  try {
    f();
  } catch (const std::bad_array_new_length &) {
    return caught::bad_array_new_length;
  } catch (const std::bad_alloc &) {
    return caught::bad_alloc;
  } catch (...) {
    return caught::other;
  }
  return caught::none;
}
static const char *caught_name(caught c) {
  return c == caught::none ? "no exception" : c == caught::bad_array_new_length ? "std::bad_array_new_length"
         : c == caught::bad_alloc ? "std::bad_alloc" : "another exception";
}

// operator new as the very first allocation of the process, before any constructor (DROPIN 14)
static void *preinit_block;
static void cxx_preinit(int, char **, char **) { preinit_block = ::operator new(64); }
__attribute__((section(".preinit_array"), used)) static void (*const cxx_preinit_entry)(int, char **, char **) =
    cxx_preinit;

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);

  begin("operator new as the first call, from .preinit_array");
  CHECK(preinit_block != nullptr && sm_check_owned(preinit_block),
        "operator new(64) before any constructor: expected a shardmalloc block, seen %p", preinit_block);
  ::operator delete(preinit_block);
  end();

  begin("operator new/delete, all forms, are shardmalloc's");
  {
    check_plain_operator_forms();
    for (size_t al = 1; al <= (4u << 20); al <<= 1) {
      std::align_val_t av{al};
      void *p = ::operator new(al + 3, av);
      CHECK_OWNED(p);
      CHECK(reinterpret_cast<uintptr_t>(p) % al == 0, "operator new(%zu, align %zu): expected aligned, seen %p",
            al + 3, al, p);
      ::operator delete(p, av);
      p = ::operator new[](al + 3, av);
      CHECK(reinterpret_cast<uintptr_t>(p) % al == 0, "operator new[](align %zu): expected aligned, seen %p", al, p);
      CHECK_OWNED(p);
      ::operator delete[](p, av);
      p = ::operator new(al + 3, av, std::nothrow);
      CHECK(p && reinterpret_cast<uintptr_t>(p) % al == 0, "nothrow aligned new(align %zu): seen %p", al, p);
      ::operator delete(p, av, std::nothrow);
      p = ::operator new[](al + 3, av, std::nothrow);
      CHECK(p && reinterpret_cast<uintptr_t>(p) % al == 0, "nothrow aligned new[](align %zu): seen %p", al, p);
      ::operator delete[](p, av, std::nothrow);
      p = ::operator new(al + 3, av);
      ::operator delete(p, al + 3, av); // sized + aligned
      p = ::operator new[](al + 3, av);
      ::operator delete[](p, al + 3, av);
    }
    Cache64 *c64 = new Cache64;
    CHECK(reinterpret_cast<uintptr_t>(c64) % 64 == 0, "new Cache64: expected 64-aligned, seen %p", (void *)c64);
    CHECK_OWNED(c64);
    delete c64;
    Big256 *b256 = new Big256[10];
    CHECK(reinterpret_cast<uintptr_t>(b256) % 256 == 0, "new Big256[10]: expected 256-aligned, seen %p", (void *)b256);
    delete[] b256;
    Page8k *p8 = new Page8k;
    CHECK(reinterpret_cast<uintptr_t>(p8) % 8192 == 0, "new Page8k: expected 8192-aligned, seen %p", (void *)p8);
    CHECK_OWNED(p8);
    delete p8;
    // new/delete mixes with malloc/free of the same allocator: operator new memory is sm memory
    void *m = ::operator new(64);
    CHECK(sm_usable_size(m) >= 64, "sm_usable_size(operator new(64)): expected >= 64, seen %zu", sm_usable_size(m));
    ::operator delete(m);
  }
  end();

  begin("throwing new throws std::bad_alloc; nothrow returns nullptr");
  {
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1, (size_t)1 << 47, (size_t)1 << 62};
    for (size_t n : sizes) {
      bool thrown = false;
      try {
        void *p = ::operator new(opaque(n));
        ::operator delete(p);
      } catch (const std::bad_alloc &) {
        thrown = true;
      }
      CHECK(thrown, "operator new(%#zx): expected std::bad_alloc, seen no exception", n);
      thrown = false;
      try {
        void *p = ::operator new[](opaque(n));
        ::operator delete[](p);
      } catch (const std::bad_alloc &) {
        thrown = true;
      }
      CHECK(thrown, "operator new[](%#zx): expected std::bad_alloc, seen no exception", n);
      thrown = false;
      try {
        void *p = ::operator new(opaque(n), std::align_val_t{64});
        ::operator delete(p, std::align_val_t{64});
      } catch (const std::bad_alloc &) {
        thrown = true;
      }
      CHECK(thrown, "operator new(%#zx, align 64): expected std::bad_alloc, seen no exception", n);
      void *q = ::operator new(opaque(n), std::nothrow);
      CHECK(q == nullptr, "operator new(%#zx, nothrow): expected nullptr, seen %p", n, q);
      q = ::operator new[](opaque(n), std::nothrow);
      CHECK(q == nullptr, "operator new[](%#zx, nothrow): expected nullptr, seen %p", n, q);
      q = ::operator new(opaque(n), std::align_val_t{4096}, std::nothrow);
      CHECK(q == nullptr, "operator new(%#zx, align 4096, nothrow): expected nullptr, seen %p", n, q);
    }
    bool thrown = false;
    try {
      std::vector<char> v;
      v.reserve(opaque(v.max_size()));
    } catch (const std::bad_alloc &) {
      thrown = true;
    } catch (const std::length_error &) {
      thrown = true;
    }
    CHECK(thrown, "vector::reserve(max_size()): expected an exception, seen none%s", "");
  }
  end();

  begin("the new-handler is called on failure, then honoured");
  {
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    bool thrown = false;
    try {
      void *p = ::operator new(opaque(SIZE_MAX / 2));
      ::operator delete(p);
    } catch (const std::bad_alloc &) {
      thrown = true;
    }
    CHECK(handler_calls == 3, "new-handler: expected 3 calls (it removes itself on the 3rd), seen %d", handler_calls);
    CHECK(thrown, "after the handler removed itself: expected std::bad_alloc, seen none%s", "");

    handler_calls = 0;
    std::set_new_handler(throwing_handler);
    bool custom = false;
    try {
      void *p = ::operator new(opaque((size_t)1 << 62));
      ::operator delete(p);
    } catch (const custom_failure &) {
      custom = true;
    } catch (const std::bad_alloc &) {
    }
    CHECK(custom && handler_calls == 1,
          "handler that throws its own bad_alloc: expected it to propagate after 1 call, seen custom=%d calls=%d",
          (int)custom, handler_calls);
    // nothrow new with a handler that throws: the exception must not escape (nullptr instead).
    // Run in a child, so that a std::terminate is reported as a failure instead of ending the test.
    for (int aligned = 0; aligned < 2; aligned++) {
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        handler_calls = 0;
        void *q = aligned ? ::operator new(opaque((size_t)1 << 62), std::align_val_t{128}, std::nothrow)
                          : ::operator new(opaque((size_t)1 << 62), std::nothrow);
        std::_Exit(q == nullptr && handler_calls == 1 ? 0 : q != nullptr ? 40 : 41);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "%snothrow new with a handler that throws bad_alloc: expected nullptr after 1 handler call, seen %s "
            "(exit 40: not nullptr, 41: handler calls != 1, signal 6: the exception escaped / std::terminate)",
            aligned ? "aligned " : "",
            WIFSIGNALED(st) ? ("signal " + std::to_string(WTERMSIG(st))).c_str()
                            : ("exit " + std::to_string(WEXITSTATUS(st))).c_str());
    }
    std::set_new_handler(nullptr);
    // a handler is not called when the allocation succeeds
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    delete[] new int[100];
    CHECK(handler_calls == 0, "successful new: expected 0 handler calls, seen %d", handler_calls);
    std::set_new_handler(nullptr);
  }
  end();

  begin("under address-space exhaustion (RLIMIT_AS): new throws bad_alloc, nothrow new gives nullptr");
  {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      unsigned long vm = 0, rss = 0;
      FILE *f = std::fopen("/proc/self/statm", "r");
      if (!f || std::fscanf(f, "%lu %lu", &vm, &rss) != 2) std::_Exit(50);
      std::fclose(f);
      struct rlimit rl;
      rl.rlim_cur = rl.rlim_max = vm * 4096 + (64u << 20);
      if (setrlimit(RLIMIT_AS, &rl)) std::_Exit(51);
      std::vector<char *> held;
      held.reserve(100000);
      int throws = 0, nulls = 0;
      for (int i = 0; i < 100000 && throws == 0; i++) { // exhaust with throwing new
        try {
          char *p = new char[1 << 20];
          p[0] = 1;
          held.push_back(p);
        } catch (const std::bad_alloc &) {
          throws++;
        }
      }
      for (int i = 0; i < 20; i++) {
        char *p = new (std::nothrow) char[4 << 20];
        if (!p) nulls++;
        else held.push_back(p);
        void *q = ::operator new(4 << 20, std::align_val_t{4096}, std::nothrow);
        if (!q) nulls++;
        else ::operator delete(q, std::align_val_t{4096});
        try {
          void *r = ::operator new(4 << 20, std::align_val_t{64});
          ::operator delete(r, std::align_val_t{64});
        } catch (const std::bad_alloc &) {
          throws++;
        }
      }
      for (char *p : held) delete[] p;
      char *again = new (std::nothrow) char[32 << 20]; // works again after freeing
      if (!(throws >= 1 && nulls >= 30 && again))
        std::fprintf(stderr, "     child: %d bad_alloc, %d nullptr of 40 nothrow calls, new after freeing: %s\n", throws, nulls,
                     again ? "ok" : "nullptr");
      std::_Exit(!(throws >= 1 && nulls >= 30) ? 52 : !again ? 53 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child under RLIMIT_AS: expected exit 0, seen %s %d (52: no bad_alloc or not enough nullptr; 53: after "
          "freeing everything it held, new char[32 MiB] still failed: freed memory was not given back or reused when "
          "mmap failed; a signal: crash or std::terminate)",
          WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  end();

  begin("standard containers on shardmalloc");
  {
    std::vector<std::string> v;
    for (int i = 0; i < 20000; i++) v.push_back(std::string("item-") + std::to_string(i) + std::string(i % 200, 'q'));
    CHECK_OWNED(v.data());
    CHECK_OWNED(v[19999].data());
    std::map<std::string, int> m;
    std::unordered_map<int, std::vector<int>> um;
    for (int i = 0; i < 20000; i++) {
      m[v[i]] = i;
      um[i].assign(i % 50, i);
    }
    long sum = 0;
    for (auto &kv : m) sum += kv.second;
    CHECK(sum == 19999L * 20000 / 2, "map sum: expected %ld, seen %ld", 19999L * 20000 / 2, sum);
    size_t total = 0;
    for (auto &kv : um) total += kv.second.size();
    size_t expect = 0;
    for (int i = 0; i < 20000; i++) expect += i % 50;
    CHECK(total == expect, "unordered_map sizes: expected %zu, seen %zu", expect, total);
    auto sp = std::make_shared<std::vector<double>>(100000, 1.5);
    CHECK_OWNED(sp.get());
    CHECK_OWNED(sp->data());
    std::unique_ptr<int[]> up(new int[12345]());
    for (int i = 0; i < 12345; i++) CHECK(up[i] == 0, "new int[]() not zero at %d", i);
    for (int i = 0; i < 100; i++) static_obj.m[i] = std::to_string(i);
  }
  end();

  begin("sm_new family: operator new semantics (handler loop, bad_alloc, nothrow NULL)");
  {
    void *p = sm_new(100);
    CHECK_OWNED(p);
    sm_free(p);
    void *z1 = sm_new(0), *z2 = sm_new(0);
    CHECK(z1 && z2 && z1 != z2, "sm_new(0) twice: expected two unique blocks, seen %p %p", z1, z2);
    sm_free(z1);
    sm_free(z2);
    p = sm_new_aligned(100, 4096);
    CHECK(p && reinterpret_cast<uintptr_t>(p) % 4096 == 0, "sm_new_aligned(100, 4096): expected aligned, seen %p", p);
    sm_free(p);
    p = sm_new_n(1000, 8);
    CHECK(p && sm_usable_size(p) >= 8000, "sm_new_n(1000, 8): expected >= 8000 bytes, seen %zu", sm_usable_size(p));
    std::memset(p, 0x42, 8000);
    p = sm_new_realloc(p, 100000);
    CHECK(p && static_cast<unsigned char *>(p)[7999] == 0x42, "sm_new_realloc: expected contents kept%s", "");
    p = sm_new_reallocn(p, 300, 1000);
    CHECK(p && sm_usable_size(p) >= 300000 && static_cast<unsigned char *>(p)[0] == 0x42,
          "sm_new_reallocn(p, 300, 1000): expected >= 300000 bytes, contents kept%s", "");
    void *q = sm_new_realloc(p, 0); // like new(0): a minimal block, not realloc's free-and-NULL
    CHECK(q != nullptr, "sm_new_realloc(p, 0): expected a minimal block, seen NULL%s", "");
    sm_free(q);
    sm_heap_t *dh = sm_heap_get_default();
    p = sm_heap_alloc_new(dh, 5000);
    CHECK(p && sm_heap_contains_block(dh, p), "sm_heap_alloc_new(default heap): expected a block of that heap, seen %p", p);
    sm_free(p);
    p = sm_heap_alloc_new_n(dh, 50, 100);
    CHECK(p && sm_usable_size(p) >= 5000, "sm_heap_alloc_new_n(50, 100): expected >= 5000 bytes, seen %p", p);
    sm_free(p);

    // failures without a handler: std::bad_alloc; count overflow: std::bad_array_new_length (a bad_alloc)
    const size_t huge = SIZE_MAX / 2;
    caught c = catch_of([&] { sm_free(sm_new(opaque(huge))); });
    CHECK(c == caught::bad_alloc, "sm_new(SIZE_MAX/2): expected std::bad_alloc, seen %s", caught_name(c));
    c = catch_of([&] { sm_free(sm_new_aligned(opaque(huge), 64)); });
    CHECK(c == caught::bad_alloc, "sm_new_aligned(SIZE_MAX/2, 64): expected std::bad_alloc, seen %s", caught_name(c));
    c = catch_of([&] { sm_free(sm_new_aligned(100, opaque(48))); });
    CHECK(c == caught::bad_alloc, "sm_new_aligned(100, 48) (not a power of two): expected std::bad_alloc, seen %s",
          caught_name(c));
    c = catch_of([&] { sm_free(sm_heap_alloc_new(dh, opaque(huge))); });
    CHECK(c == caught::bad_alloc, "sm_heap_alloc_new(SIZE_MAX/2): expected std::bad_alloc, seen %s", caught_name(c));
    void *keep = sm_new(64);
    std::memset(keep, 0x17, 64);
    void *kept = keep;
    c = catch_of([&] { keep = sm_new_realloc(keep, opaque(huge)); });
    CHECK(c == caught::bad_alloc && keep == kept && static_cast<unsigned char *>(keep)[63] == 0x17,
          "sm_new_realloc(p, SIZE_MAX/2): expected std::bad_alloc with p untouched, seen %s", caught_name(c));
    // what a new-expression throws for an array too large to size (libstdc++ >= 11 lets C throw it)
    const caught want = caught::bad_array_new_length;
    c = catch_of([&] { sm_free(sm_new_n(opaque(SIZE_MAX / 4), 8)); });
    CHECK(c == want, "sm_new_n(SIZE_MAX/4, 8) (overflow): expected %s, seen %s", caught_name(want), caught_name(c));
    c = catch_of([&] { keep = sm_new_reallocn(keep, opaque(SIZE_MAX), 2); });
    CHECK(c == want && keep == kept, "sm_new_reallocn overflow: expected %s with p untouched, seen %s", caught_name(want),
          caught_name(c));
    c = catch_of([&] { sm_free(sm_heap_alloc_new_n(dh, opaque(SIZE_MAX / 4), 8)); });
    CHECK(c == want, "sm_heap_alloc_new_n overflow: expected %s, seen %s", caught_name(want), caught_name(c));
    sm_free(keep);

    errno = 0;
    q = sm_new_nothrow(opaque(huge));
    CHECK(q == nullptr && errno == ENOMEM, "sm_new_nothrow(SIZE_MAX/2): expected NULL/ENOMEM, seen %p errno %d", q, errno);
    errno = 0;
    q = sm_new_aligned_nothrow(opaque(huge), 64);
    CHECK(q == nullptr && errno == ENOMEM, "sm_new_aligned_nothrow(SIZE_MAX/2, 64): expected NULL/ENOMEM, seen %p errno %d",
          q, errno);
    errno = 0;
    q = sm_new_aligned_nothrow(100, opaque(48));
    CHECK(q == nullptr && errno == EINVAL, "sm_new_aligned_nothrow(100, 48): expected NULL/EINVAL, seen %p errno %d", q, errno);
    q = sm_new_nothrow(100);
    CHECK_OWNED(q);
    sm_free(q);
    q = sm_new_aligned_nothrow(100, 256);
    CHECK(q && reinterpret_cast<uintptr_t>(q) % 256 == 0, "sm_new_aligned_nothrow(100, 256): expected aligned, seen %p", q);
    sm_free(q);

    // the new-handler runs until it gives up (the counting handler removes itself on its 3rd call)
    struct {
      const char *what;
      void *(*call)(size_t);
    } throwing[] = {
        {"sm_new", [](size_t n) { return sm_new(n); }},
        {"sm_new_aligned", [](size_t n) { return sm_new_aligned(n, 128); }},
        {"sm_new_n", [](size_t n) { return sm_new_n(n / 4, 4); }},
        {"sm_new_realloc", [](size_t n) { return sm_new_realloc(nullptr, n); }},
        {"sm_new_reallocn", [](size_t n) { return sm_new_reallocn(nullptr, 2, n / 2); }},
        {"sm_heap_alloc_new", [](size_t n) { return sm_heap_alloc_new(sm_heap_get_default(), n); }},
        {"sm_heap_alloc_new_n", [](size_t n) { return sm_heap_alloc_new_n(sm_heap_get_default(), 4, n / 4); }},
    };
    for (auto &t : throwing) {
      handler_calls = 0;
      std::set_new_handler(counting_handler);
      c = catch_of([&] { sm_free(t.call(opaque(huge))); });
      CHECK(c == caught::bad_alloc && handler_calls == 3,
            "%s(SIZE_MAX/2) with a handler that gives up on its 3rd call: expected 3 calls, then std::bad_alloc; seen %d "
            "calls, %s", t.what, handler_calls, caught_name(c));
    }
    for (int aligned = 0; aligned < 2; aligned++) {
      handler_calls = 0;
      std::set_new_handler(counting_handler);
      q = aligned ? sm_new_aligned_nothrow(opaque(huge), 64) : sm_new_nothrow(opaque(huge));
      CHECK(q == nullptr && handler_calls == 3, "%s(SIZE_MAX/2) with a handler giving up on its 3rd call: expected NULL "
            "after 3 calls, seen %p after %d", aligned ? "sm_new_aligned_nothrow" : "sm_new_nothrow", q, handler_calls);
    }
    // overflow cannot be helped by a handler: it is not called
    handler_calls = 0;
    std::set_new_handler(counting_handler);
    c = catch_of([&] { sm_free(sm_new_n(opaque(SIZE_MAX), 3)); });
    CHECK(c == want && handler_calls == 0, "sm_new_n overflow with a handler: expected %s and 0 calls, seen %s and %d",
          caught_name(want), caught_name(c), handler_calls);
    std::set_new_handler(nullptr);
    // a throwing handler's exception comes through sm_new; sm_new_nothrow returns NULL here (the
    // library's override is in place and libstdc++ is dynamic: docs/api/cxx.md), checked in a child
    handler_calls = 0;
    std::set_new_handler(throwing_handler);
    bool custom = false;
    try {
      sm_free(sm_new(opaque(huge)));
    } catch (const custom_failure &) {
      custom = true;
    } catch (...) {
    }
    CHECK(custom && handler_calls == 1, "sm_new with a throwing handler: expected its exception after 1 call, seen %d/%d",
          (int)custom, handler_calls);
    std::set_new_handler(nullptr);
    for (int aligned = 0; aligned < 2; aligned++) {
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        handler_calls = 0;
        std::set_new_handler(throwing_handler);
        void *r = aligned ? sm_new_aligned_nothrow(opaque(huge), 128) : sm_new_nothrow(opaque(huge));
        std::_Exit(r == nullptr && handler_calls == 1 ? 0 : r != nullptr ? 40 : 41);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "%s with a throwing handler: expected NULL after 1 call, seen %s %d (signal 6: the exception escaped)",
            aligned ? "sm_new_aligned_nothrow" : "sm_new_nothrow", WIFSIGNALED(st) ? "signal" : "exit",
            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  end();

  begin("sm_stl_allocator: vector, map, unordered_map, list, basic_string");
  {
    sm_vector<int> v;
    for (int i = 0; i < 100000; i++) v.push_back(i);
    CHECK_OWNED(v.data());
    CHECK(v[99999] == 99999, "vector contents: expected 99999, seen %d", v[99999]);
    std::map<int, sm_string, std::less<int>, sm_stl_allocator<std::pair<const int, sm_string>>> m;
    std::unordered_map<sm_string, int, std::hash<std::string_view>, std::equal_to<sm_string>,
                       sm_stl_allocator<std::pair<const sm_string, int>>> um;
    for (int i = 0; i < 5000; i++) {
      sm_string s("value number ");
      s += std::to_string(i).c_str();
      s.append(i % 64, 'y');
      m.emplace(i, s);
      um.emplace(s, i);
    }
    CHECK(m.size() == 5000 && um.size() == 5000 && um.at(m.at(4321)) == 4321, "map/unordered_map contents wrong%s", "");
    CHECK_OWNED(m.at(17).data());
    std::list<sm_string, sm_stl_allocator<sm_string>> l(100, sm_string(200, 'l'));
    CHECK_OWNED(l.back().data());
    sm_string big(100000, 'b');
    CHECK_OWNED(big.data());
    CHECK(sm_stl_allocator<int>() == sm_stl_allocator<double>() && !(sm_stl_allocator<int>() != sm_stl_allocator<char>()),
          "sm_stl_allocator: expected every instance equal%s", "");
    sm_vector<Page8k> aligned(3);
    CHECK(reinterpret_cast<uintptr_t>(aligned.data()) % 8192 == 0 && sm_check_owned(aligned.data()),
          "vector of an 8192-aligned type: expected an aligned shardmalloc block, seen %p", (void *)aligned.data());
    sm_stl_allocator<Cache64> a64;
    caught c = catch_of([&] { a64.deallocate(a64.allocate(opaque(SIZE_MAX / 64 + 1)), 1); });
    CHECK(c == caught::bad_array_new_length, "allocate(SIZE_MAX/64+1) of a 64-aligned type: expected "
          "std::bad_array_new_length, seen %s", caught_name(c));
    sm_stl_allocator<int> ai;
    c = catch_of([&] { ai.deallocate(ai.allocate(opaque(SIZE_MAX / 4 + 1)), 1); });
    CHECK(c == caught::bad_array_new_length, "allocate(SIZE_MAX/4+1) of int: expected std::bad_array_new_length, seen %s",
          caught_name(c));
    c = catch_of([&] { ai.deallocate(ai.allocate(opaque(SIZE_MAX / 8)), 1); });
    CHECK(c == caught::bad_alloc, "allocate(SIZE_MAX/8) of int: expected std::bad_alloc, seen %s", caught_name(c));
    CHECK(ai.max_size() == (size_t)PTRDIFF_MAX / sizeof(int), "max_size: expected PTRDIFF_MAX/4, seen %zu", ai.max_size());
  }
  end();

  begin("sm_heap_stl_allocator: containers in one heap; equal iff same heap");
  {
    sm_heap_t *h = sm_heap_new();
    CHECK(h != nullptr, "sm_heap_new: expected a heap, seen NULL%s", "");
    if (h != nullptr) {
      {
        sm_heap_stl_allocator<int> ah(h);
        heap_vector<int> v(ah);
        for (int i = 0; i < 50000; i++) v.push_back(i);
        CHECK(sm_heap_contains_block(h, v.data()), "vector on the heap allocator: expected its block in the heap, seen %p",
              (void *)v.data());
        std::map<int, heap_string, std::less<int>, sm_heap_stl_allocator<std::pair<const int, heap_string>>> m(ah);
        std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, sm_heap_stl_allocator<std::pair<const int, int>>>
            um(ah);
        for (int i = 0; i < 3000; i++) {
          m.emplace(std::piecewise_construct, std::forward_as_tuple(i), std::forward_as_tuple(100 + i % 50, 'h', ah));
          um[i] = -i;
        }
        CHECK(m.size() == 3000 && um.size() == 3000 && um[2999] == -2999 && m.at(7).size() == 107,
              "map/unordered_map on the heap allocator: wrong contents%s", "");
        CHECK(sm_heap_contains_block(h, m.at(2000).data()), "string in a map on the heap: expected its block in the heap%s",
              "");
        heap_string s(5000, 's', ah);
        CHECK(sm_heap_contains_block(h, s.data()), "basic_string on the heap allocator: expected its block in the heap%s",
              "");
        heap_vector<Page8k> al(2, Page8k(), sm_heap_stl_allocator<Page8k>(h));
        CHECK(reinterpret_cast<uintptr_t>(al.data()) % 8192 == 0 && sm_heap_contains_block(h, al.data()),
              "8192-aligned type on the heap allocator: expected an aligned block of the heap, seen %p",
              (void *)al.data());
        sm_heap_stl_allocator<double> rebound(ah);
        CHECK(rebound.heap() == h && rebound == ah, "rebound copy: expected the same heap and equal%s", "");
        sm_heap_stl_allocator<int> deflt;
        CHECK(deflt.heap() == sm_heap_get_default() && deflt != ah,
              "default-constructed: expected the default heap and unequal to another heap's%s", "");
        heap_vector<int> w(deflt);
        w.assign(1000, 5);
        CHECK(!sm_heap_contains_block(h, w.data()), "vector on the default-heap allocator: expected a block outside h%s", "");
        w = v; // propagate_on_container_copy_assignment: w now allocates in h
        CHECK(w.get_allocator().heap() == h && sm_heap_contains_block(h, w.data()),
              "copy assignment: expected the allocator (and the block) of the source%s", "");
        ah.collect(false);
      }
      sm_heap_delete(h);
    }
  }
  end();

  begin("sm_heap_destroy_stl_allocator: one heap per allocator family, destroyed with the last copy");
  {
    long heaps_before = heaps_current();
    sm_heap_t *h = nullptr;
    {
      sm_heap_destroy_stl_allocator<int> a;
      h = a.heap();
      CHECK(h != nullptr && h != sm_heap_get_default(), "default-constructed: expected a new heap, seen %p", (void *)h);
      long heaps_during = heaps_current();
      CHECK(heaps_before < 0 || heaps_during == heaps_before + 1,
            "heaps gauge: expected %ld while the allocator lives, seen %ld", heaps_before + 1, heaps_during);
      {
        std::vector<int, sm_heap_destroy_stl_allocator<int>> v(a);
        for (int i = 0; i < 100000; i++) v.push_back(i);
        CHECK(sm_heap_contains_block(h, v.data()), "vector: expected its block in the allocator's heap%s", "");
        std::map<int, destroy_string, std::less<int>, sm_heap_destroy_stl_allocator<std::pair<const int, destroy_string>>> m(a);
        std::unordered_map<int, int, std::hash<int>, std::equal_to<int>,
                           sm_heap_destroy_stl_allocator<std::pair<const int, int>>> um(a);
        for (int i = 0; i < 2000; i++) {
          m.emplace(std::piecewise_construct, std::forward_as_tuple(i),
                    std::forward_as_tuple(200, 'd', sm_heap_destroy_stl_allocator<char>(a)));
          um[i] = i * 2;
        }
        CHECK(sm_heap_contains_block(h, m.at(1999).data()) && um.at(1000) == 2000,
              "map/unordered_map: expected their blocks in the allocator's heap%s", "");
        sm_heap_destroy_stl_allocator<double> b(a);
        CHECK(b.heap() == h && b == a, "rebound copy: expected the same heap and equal%s", "");
        sm_heap_destroy_stl_allocator<int> other;
        CHECK(other.heap() != h && other != a, "another default-constructed one: expected its own heap%s", "");
        // deallocate does nothing: the blocks stay until the heap goes
        v.clear();
        v.shrink_to_fit();
      }
      long heaps_mid = heaps_current();
      CHECK(heaps_before < 0 || heaps_mid == heaps_before + 1,
            "heaps gauge after the containers (the allocator still lives): expected %ld, seen %ld", heaps_before + 1,
            heaps_mid);
    }
    long heaps_after = heaps_current();
    CHECK(heaps_before < 0 || heaps_after == heaps_before,
          "heaps gauge after the last copy: expected %ld (the heap destroyed), seen %ld", heaps_before, heaps_after);
    // constructed from a heap: uses it, never destroys it
    sm_heap_t *mine = sm_heap_new();
    {
      sm_heap_destroy_stl_allocator<char> borrowed(mine);
      destroy_string s(3000, 'x', borrowed);
      CHECK(sm_heap_contains_block(mine, s.data()), "constructed from a heap: expected blocks of that heap%s", "");
    }
    void *still = sm_heap_malloc(mine, 100);
    CHECK(still != nullptr && sm_heap_contains_block(mine, still),
          "the borrowed heap after the allocator went: expected it usable, seen %p", still);
    sm_heap_destroy(mine);
  }
  end();

  begin("threads: cross-thread delete, thread_local destructors allocate");
  {
    std::vector<std::vector<int> *> made(8);
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; t++)
      ts.emplace_back([t, &made] {
        tl_obj.s->append("!"); // construct this thread's thread_local
        made[t] = new std::vector<int>(1000 + t, t);
      });
    for (auto &t : ts) t.join();
    for (int t = 0; t < 8; t++) {
      CHECK(made[t]->size() == (size_t)(1000 + t) && (*made[t])[999] == t, "vector from thread %d: wrong contents", t);
      CHECK_OWNED(made[t]->data());
      delete made[t]; // freed by another thread than the one that allocated it
    }
    CHECK(tl_dtor_runs.load() == 16,
          "thread_local destructors (8 threads x AllocInDtor + the Rearm it constructs): expected 16 runs, seen %d",
          tl_dtor_runs.load());
  }
  end();

  tl_obj.s->append("main"); // the main thread's thread_local is destroyed in exit()
  // checked after this line, during exit: the main thread's thread_local destructors and the static
  // destructor allocate; a failure there ends the process with exit status 31..34
  std::printf("(at exit: thread_local and static destructors allocate; exit status 31-34 if that fails)\n");
  if (failures)
    std::printf("test-cxx: FAILED: %ld of %ld checks failed\n", failures, checks);
  else
    std::printf("test-cxx: all %ld checks passed\n", checks);
  return failures ? 1 : 0;
}
