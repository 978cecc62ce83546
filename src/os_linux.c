/* os_linux.c: the OS contract (os.h) for Linux. Segments are placed with an address hint so that
 * most mappings come back aligned in one mmap call; otherwise we over-map and trim. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static size_t os_page_size = 4096;
/* next address to try for an aligned mapping: a randomised spot in [2 TiB, 4 TiB) */
static _Atomic(uintptr_t) os_hint;
#define OS_HINT_BASE ((uintptr_t)2 << 40)
#define OS_HINT_END ((uintptr_t)4 << 40)

void smi_os_init(void) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) os_page_size = (size_t)ps;
  uint64_t r;
  smi_os_random_bytes(&r, sizeof r);
  uintptr_t start = OS_HINT_BASE + ((r % ((OS_HINT_END - OS_HINT_BASE) / 2)) & ~(uintptr_t)SM_SEGMENT_MASK);
  atomic_store_explicit(&os_hint, start, memory_order_relaxed);
}

size_t smi_os_page_size(void) { return os_page_size; }

bool smi_os_use_large_pages(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
  int saved = errno;
  bool ok = madvise(p, size, MADV_HUGEPAGE) == 0;
  errno = saved;
  return ok;
#else
  (void)p, (void)size;
  return false;
#endif
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
void smi_os_populate(void *p, size_t size) {
  int saved = errno;
  if (madvise(p, size, MADV_POPULATE_WRITE) != 0) { /* older kernel: touch every page */
    for (size_t off = 0; off < size; off += os_page_size) ((volatile uint8_t *)p)[off] = 0;
  }
  errno = saved;
}

bool smi_os_protect(void *p, size_t size) {
  int saved = errno;
  bool ok = mprotect(p, size, PROT_NONE) == 0;
  errno = saved;
  return ok;
}

static void *os_mmap(void *hint, size_t size) {
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void *os_try_hint(size_t size) {
  if (size > ((size_t)1 << 36)) return NULL; /* leave very large mappings to the kernel */
  size_t span = smi_align_up(size, SM_SEGMENT_SIZE);
  uintptr_t hint = atomic_fetch_add_explicit(&os_hint, span, memory_order_relaxed);
  if (hint + span > OS_HINT_END) {
    atomic_store_explicit(&os_hint, OS_HINT_BASE + span, memory_order_relaxed);
    hint = OS_HINT_BASE;
  }
  void *p = os_mmap((void *)hint, size);
  if (p != NULL && p != (void *)hint) { /* the kernel placed it elsewhere */
    munmap(p, size);
    p = NULL;
  }
  return p;
}

void *smi_os_alloc_aligned(size_t size, size_t alignment, size_t offset) {
  int saved = errno;
  void *result = NULL;
  if (offset == 0 && alignment == SM_SEGMENT_SIZE) result = os_try_hint(size);
  if (result == NULL) {
    size_t over = size + alignment;
    if (over >= size) { /* no overflow */
      uint8_t *base = os_mmap(NULL, over);
      if (base != NULL) {
        uintptr_t p = smi_align_up((uintptr_t)base + offset, alignment) - offset;
        if (p < (uintptr_t)base) p += alignment;
        size_t head = p - (uintptr_t)base, tail = over - head - size;
        if (head) munmap(base, head);
        if (tail) munmap((uint8_t *)p + size, tail);
        result = (void *)p;
      }
    }
  }
  errno = saved;
  return result;
}

void *smi_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment) {
  int saved = errno;
  void *result = NULL;
  if (mremap(p, old_size, new_size, 0) == p) { /* grew in place: the space after it was free */
    result = p;
  } else {
    /* reserve an aligned range, then move the pages into it */
    uint8_t *target = smi_os_alloc_aligned(new_size, alignment, 0);
    if (target != NULL) {
      void *moved = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
      if (moved == MAP_FAILED) munmap(target, new_size);
      else result = moved;
    }
  }
  errno = saved;
  return result;
}

void smi_os_free(void *p, size_t size) {
  int saved = errno;
  munmap(p, size);
  errno = saved;
}

bool smi_os_purge(void *p, size_t size, bool decommit) {
  uintptr_t start = smi_align_up((uintptr_t)p, os_page_size);
  uintptr_t end = ((uintptr_t)p + size) & ~(uintptr_t)(os_page_size - 1);
  if (end <= start) return false;
  int saved = errno;
  bool zero = false;
#ifdef MADV_FREE
  if (!decommit && madvise((void *)start, end - start, MADV_FREE) == 0) {
    errno = saved;
    return false;
  }
#endif
  zero = madvise((void *)start, end - start, MADV_DONTNEED) == 0 && start == (uintptr_t)p &&
         end == (uintptr_t)p + size;
  errno = saved;
  return zero;
}

void smi_os_random_bytes(void *buf, size_t n) {
  int saved = errno;
  long got = syscall(SYS_getrandom, buf, n, 1 /* GRND_NONBLOCK */);
  if (got != (long)n) { /* no entropy yet: mix a clock and addresses (weak, but never blocks) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)buf ^ (uintptr_t)&n;
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      ((uint8_t *)buf)[i] = (uint8_t)x;
    }
  }
  errno = saved;
}

uint64_t smi_os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void smi_os_write_stderr(const char *buf, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t w = write(2, buf, len);
    if (w <= 0) break;
    buf += w;
    len -= (size_t)w;
  }
  errno = saved;
}

const char *smi_os_getenv(const char *name) {
  if (getauxval(AT_SECURE)) return NULL; /* as secure_getenv: setuid programs ignore it */
  if (environ == NULL) return NULL;
  size_t len = strlen(name);
  for (char **e = environ; *e != NULL; e++) {
    if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  }
  return NULL;
}
