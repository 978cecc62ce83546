// test-cxx-newdelete: including shardmalloc-new-delete.h in one file puts every operator new and
// delete of the program on shardmalloc. Built twice:
//   SM_TEST_NO_OVERRIDE=1: against a libshardmalloc.a built without the malloc override, so malloc
//     stays glibc's and only the header can bring new/delete to shardmalloc;
//   otherwise: against the normal libshardmalloc.a, whose own operators are weak: the program must
//     link, and the header's operators (not the library's) must be the ones in use, which the
//     nothrow-new-with-a-throwing-handler case tells apart (the header catches; C cannot).
#include <shardmalloc-new-delete.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "shardmalloc.h"

#include "sm-test-cxx.h"

struct alignas(256) Big256 { char c[300]; };

static int handler_calls;
static void counting_handler() {
  if (++handler_calls >= 3) std::set_new_handler(nullptr);
}
static void throwing_handler() {
  handler_calls++;
  throw std::bad_alloc();
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);

#if SM_TEST_NO_OVERRIDE
  begin("malloc stays glibc's (the library has no override)");
  {
    void *m = std::malloc(100);
    CHECK(m != nullptr && !sm_check_owned(m), "malloc(100): expected a block that is not shardmalloc's, seen %p", m);
    std::free(m);
  }
  end();
#endif

  begin("every operator new/delete form is shardmalloc's");
  {
    check_plain_operator_forms();
    for (size_t al = 1; al <= (1u << 20); al <<= 3) {
      std::align_val_t av{al};
      void *p = ::operator new(al + 3, av);
      CHECK_OWNED(p);
      CHECK(reinterpret_cast<uintptr_t>(p) % al == 0, "operator new(align %zu): expected aligned, seen %p", al, p);
      ::operator delete(p, av);
      p = ::operator new[](al + 3, av);
      CHECK_OWNED(p);
      ::operator delete[](p, al + 3, av);
      p = ::operator new(al + 3, av, std::nothrow);
      CHECK_OWNED(p);
      ::operator delete(p, av, std::nothrow);
      p = ::operator new[](al + 3, av, std::nothrow);
      CHECK_OWNED(p);
      ::operator delete[](p, av, std::nothrow);
      p = ::operator new(al + 3, av);
      ::operator delete(p, al + 3, av);
    }
    Big256 *big = new Big256[4];
    CHECK_OWNED(big);
    CHECK(reinterpret_cast<uintptr_t>(big) % 256 == 0, "new Big256[4]: expected 256-aligned, seen %p", (void *)big);
    delete[] big;
  }
  end();

  begin("standard containers and strings allocate through it");
  {
    std::vector<std::string> v;
    for (int i = 0; i < 5000; i++) v.push_back("string number " + std::to_string(i) + std::string(i % 100, 'x'));
    CHECK_OWNED(v.data());
    CHECK_OWNED(v[4999].data());
    std::map<int, std::string> m;
    std::unordered_map<std::string, int> um;
    for (int i = 0; i < 5000; i++) {
      m[i] = v[i];
      um[v[i]] = i;
    }
    CHECK(m.size() == 5000 && um.size() == 5000 && um[v[1234]] == 1234, "containers: wrong contents%s", "");
    auto sp = std::make_shared<std::vector<double>>(1000, 2.5);
    CHECK_OWNED(sp.get());
    CHECK_OWNED(sp->data());
  }
  end();

  begin("failures: bad_alloc, nullptr, the new-handler; nothrow catches a throwing handler");
  {
    bool thrown = false;
    try {
      void *p = ::operator new(opaque(SIZE_MAX / 2));
      ::operator delete(p);
    } catch (const std::bad_alloc &) {
      thrown = true;
    }
    CHECK(thrown, "operator new(SIZE_MAX/2): expected std::bad_alloc%s", "");
    thrown = false;
    try {
      void *p = ::operator new[](opaque(SIZE_MAX / 2), std::align_val_t{64});
      ::operator delete[](p, std::align_val_t{64});
    } catch (const std::bad_alloc &) {
      thrown = true;
    }
    CHECK(thrown, "operator new[](SIZE_MAX/2, align 64): expected std::bad_alloc%s", "");
    void *q = ::operator new(opaque(SIZE_MAX / 2), std::nothrow);
    CHECK(q == nullptr, "nothrow new(SIZE_MAX/2): expected nullptr, seen %p", q);
    q = ::operator new(opaque(SIZE_MAX / 2), std::align_val_t{4096}, std::nothrow);
    CHECK(q == nullptr, "nothrow aligned new(SIZE_MAX/2): expected nullptr, seen %p", q);

    handler_calls = 0;
    std::set_new_handler(counting_handler);
    q = ::operator new[](opaque(SIZE_MAX / 2), std::nothrow);
    CHECK(q == nullptr && handler_calls == 3, "nothrow new[] with a handler that gives up after 3 calls: expected nullptr "
          "after 3 calls, seen %p after %d", q, handler_calls);

    for (int aligned = 0; aligned < 2; aligned++) {
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        handler_calls = 0;
        std::set_new_handler(throwing_handler);
        void *r = aligned ? ::operator new(opaque(SIZE_MAX / 2), std::align_val_t{128}, std::nothrow)
                          : ::operator new(opaque(SIZE_MAX / 2), std::nothrow);
        std::_Exit(r == nullptr && handler_calls == 1 ? 0 : r != nullptr ? 40 : 41);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "%snothrow new with a handler that throws: expected nullptr after 1 call, seen %s %d (signal 6: the "
            "exception escaped, so the library's operator, not the header's, was used)",
            aligned ? "aligned " : "", WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  end();

  if (failures)
    std::printf("test-cxx-newdelete: FAILED: %ld of %ld checks failed\n", failures, checks);
  else
    std::printf("test-cxx-newdelete: all %ld checks passed\n", checks);
  return failures ? 1 : 0;
}
