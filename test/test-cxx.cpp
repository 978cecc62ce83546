// test-cxx: every C++ operator new/delete is served by shardmalloc (DROPIN 13); bad_alloc, the
// new-handler and nothrow behave as the standard says; containers work; thread_local and static
// destructors may allocate (DROPIN 16).
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static long checks, failures;
static const char *section_name;
static long sec_checks, sec_failures;

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    checks++;                                                                       \
    sec_checks++;                                                                   \
    if (!(cond)) {                                                                  \
      failures++;                                                                   \
      sec_failures++;                                                               \
      std::fprintf(stderr, "FAIL %s:%d [%s] %s\n     ", __FILE__, __LINE__, section_name, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                     \
    }                                                                               \
  } while (0)
#define CHECK_OWNED(p)                                                              \
  CHECK(sm_check_owned(p), "%s: expected a block owned by shardmalloc, seen %p (not owned)", #p, (const void *)(p))

static void begin(const char *name) {
  section_name = name;
  sec_checks = sec_failures = 0;
}
static void end() {
  std::printf("%-4s  %-60s %ld checks\n", sec_failures ? "FAIL" : "ok", section_name, sec_checks);
  std::fflush(stdout);
}

static size_t opaque(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}

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
    int *a = new int(5);
    CHECK_OWNED(a);
    delete a;
    int *b = new int[1000];
    CHECK_OWNED(b);
    delete[] b;
    int *c = new (std::nothrow) int(3);
    CHECK_OWNED(c);
    delete c;
    int *d = new (std::nothrow) int[77];
    CHECK_OWNED(d);
    delete[] d;
    void *e = ::operator new(100);
    CHECK_OWNED(e);
    ::operator delete(e, 100); // sized
    void *f = ::operator new[](100);
    CHECK_OWNED(f);
    ::operator delete[](f, 100); // sized array
    void *g = ::operator new(100, std::nothrow);
    CHECK_OWNED(g);
    ::operator delete(g, std::nothrow);
    void *h = ::operator new[](100, std::nothrow);
    CHECK_OWNED(h);
    ::operator delete[](h, std::nothrow);
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
