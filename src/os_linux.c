/* os_linux.c: the OS contract (os.h) for Linux. Segments are placed with an address hint so that
 * most mappings come back aligned in one mmap call; otherwise we over-map and trim. */
#include "internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static size_t os_page_size = 4096;
/* next address to try for an aligned mapping: a randomised spot in [2 TiB, 4 TiB) */
static _Atomic(uintptr_t) os_hint;
#define OS_HINT_BASE ((uintptr_t)2 << 40)
#define OS_HINT_END ((uintptr_t)4 << 40)

void smi_os_init(uint64_t r) {
  unsigned long ps = getauxval(AT_PAGESZ); /* not sysconf: see same_ci in options.c */
  if (ps > 0) os_page_size = (size_t)ps;
  uintptr_t start = OS_HINT_BASE + ((r % ((OS_HINT_END - OS_HINT_BASE) / 2)) & ~(uintptr_t)SM_SEGMENT_MASK);
  atomic_store_explicit(&os_hint, start, memory_order_relaxed);
}

size_t smi_os_page_size(void) { return os_page_size; }

/* membarrier(2) commands (linux/membarrier.h), private expedited: IPIs only the CPUs that run a
 * thread of this process; needs Linux 4.14 and one registration */
#define OS_MEMBARRIER_PRIVATE_EXPEDITED (1 << 3)
#define OS_MEMBARRIER_REGISTER_PRIVATE_EXPEDITED (1 << 4)
static bool os_membarrier(int cmd) {
#if defined(SYS_membarrier)
  int saved = errno;
  bool ok = syscall(SYS_membarrier, cmd, 0, 0) == 0;
  errno = saved;
  return ok;
#else
  (void)cmd;
  return false;
#endif
}
bool smi_os_barrier_init(void) { return os_membarrier(OS_MEMBARRIER_REGISTER_PRIVATE_EXPEDITED); }
bool smi_os_barrier_all(void) { return os_membarrier(OS_MEMBARRIER_PRIVATE_EXPEDITED); }

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

/* whole OS pages only: the kernel would round the length up and change pages the caller did not
 * name (a 4 KiB guard on a kernel with 16 KiB pages would cover 12 KiB of blocks) */
static bool os_whole_pages(const void *p, size_t size) {
  return size != 0 && (((uintptr_t)p | size) & (os_page_size - 1)) == 0;
}

bool smi_os_protect(void *p, size_t size) {
  if (!os_whole_pages(p, size)) return false;
  int saved = errno;
  bool ok = mprotect(p, size, PROT_NONE) == 0;
  errno = saved;
  return ok;
}

/* flags: 0, or MAP_NORESERVE to leave the mapping out of the kernel's overcommit check. Without
 * it, a mapping larger than the machine's memory and swap is refused (overcommit mode 0), as
 * glibc's and jemalloc's are: malloc of more than the machine has gets NULL/ENOMEM at once
 * instead of a block that the OOM killer answers later (until 2026-11-27 every mapping had it). */
static void *os_mmap(void *hint, size_t size, int prot, int flags) {
  void *p = mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  /* block addresses must fit in 48 bits (page->thread_free packs a count above them); Linux maps
   * above that only for a hint that asks for it (5-level page tables, 52-bit arm64) */
  if ((uintptr_t)p + size > SM_TF_ADDRESS_LIMIT) {
    munmap(p, size);
    return NULL;
  }
  return p;
}

static void *os_try_hint(size_t size, int prot, int flags) {
  if (size > ((size_t)1 << 36)) return NULL; /* leave very large mappings to the kernel */
  size_t span = smi_align_up(size, SM_SEGMENT_SIZE);
  uintptr_t hint = atomic_fetch_add_explicit(&os_hint, span, memory_order_relaxed);
  if (hint + span > OS_HINT_END) {
    atomic_store_explicit(&os_hint, OS_HINT_BASE + span, memory_order_relaxed);
    hint = OS_HINT_BASE;
  }
  void *p = os_mmap((void *)hint, size, prot, flags);
  if (p != NULL && p != (void *)hint) { /* the kernel placed it elsewhere */
    munmap(p, size);
    p = NULL;
  }
  return p;
}

static void *os_alloc_aligned(size_t size, size_t alignment, size_t offset, int prot, int flags) {
  int saved = errno;
  void *result = NULL;
  if (offset == 0 && alignment == SM_SEGMENT_SIZE) result = os_try_hint(size, prot, flags);
  if (result == NULL) {
    size_t over = size + alignment;
    if (over >= size) { /* no overflow */
      uint8_t *base = os_mmap(NULL, over, prot, flags);
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

void *smi_os_alloc_aligned(size_t size, size_t alignment, size_t offset) {
  return os_alloc_aligned(size, alignment, offset, PROT_READ | PROT_WRITE, 0);
}
void *smi_os_alloc_aligned_noreserve(size_t size, size_t alignment) {
  return os_alloc_aligned(size, alignment, 0, PROT_READ | PROT_WRITE, MAP_NORESERVE);
}

static bool os_is_pinned(const void *p, size_t size);
static bool os_set_pinned(const void *p, size_t size, bool on);

#if defined(SM_UNDER_TSAN)
/* ThreadSanitizer does not intercept mremap, so it cannot see that a range one thread moves its
 * pages away from and a range another thread later grows into are ordered by the kernel (one
 * address space, changed under one lock): it would pair a read of a moved block's header with
 * a write at that address after a later mremap grew into it. The kernel's order, told to it. */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char os_address_space;
static void *os_mremap(void *p, size_t old_size, size_t new_size, int flags, void *target) {
  __tsan_release(&os_address_space);
  void *result = mremap(p, old_size, new_size, flags, target);
  __tsan_acquire(&os_address_space);
  return result;
}
#else
#define os_mremap mremap
#endif

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7; older C libraries lack the name */
#endif
static atomic_bool os_no_dontunmap; /* the kernel refused MREMAP_DONTUNMAP once: do not ask again */

/* Move the pages of [p, p + old_size) to target, where new_size bytes are already mapped by us.
 * A growing move grows as it moves, so that the block stays one mapping, which the next growth
 * can extend in place: moving only the old pages over the start of the fresh range left two
 * mappings, and every later growth had to move again (a block grown in 64 KiB steps to 1 GiB
 * moved 290 times, glibc's 30, until 2026-11-28; stress-ng's bigheap ran at 0.44 of glibc's
 * rate). Except where the target starts right where p ends: valgrind 3.19 marks the grown part of
 * such a move as not addressable, and its bottom-up placement of mappings makes that common
 * (false errors in every program); the kernel's top-down placement puts targets below.
 * one_mapping: [p, p + old_size) is known to be one mapping. A growing move of several (a block
 * whose tail was filled with a cached mapping's pages) fails with EFAULT after the kernel has
 * unmapped the target; moving only the pages works there (Linux 6.17 and later).
 * keep: the range the pages leave stays mapped, reading as zeros (MREMAP_DONTUNMAP, which moves
 * equal sizes only: two mappings then), for the caller to unmap; where the kernel cannot do
 * that, nothing moves. */
static void *os_move_into(void *p, size_t old_size, size_t new_size, void *target, bool keep, bool one_mapping) {
  size_t size = new_size < old_size ? new_size : old_size;
  if (!keep && one_mapping && new_size > old_size && (uint8_t *)target != (uint8_t *)p + old_size)
    return os_mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  if (!keep) return os_mremap(p, old_size, size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  if (atomic_load_explicit(&os_no_dontunmap, memory_order_relaxed)) return MAP_FAILED;
  void *moved = os_mremap(p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, target);
  if (moved == MAP_FAILED && errno == EINVAL) atomic_store_explicit(&os_no_dontunmap, true, memory_order_relaxed);
  return moved;
}

void *smi_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment, bool keep_old) {
  if (os_is_pinned(p, old_size)) return NULL; /* hugetlb: the caller copies */
  int saved = errno;
  void *result = NULL;
  if (os_mremap(p, old_size, new_size, 0, NULL) == p) { /* grew in place: the space after it was free */
    result = p;
  } else {
    bool one_mapping = errno == ENOMEM; /* no room after it (several mappings: EFAULT) */
    /* reserve an aligned range, then move the pages into it (os_move_into) */
    uint8_t *target = smi_os_alloc_aligned(new_size, alignment, 0);
    if (target != NULL) {
      void *moved = os_move_into(p, old_size, new_size, target, keep_old, one_mapping);
      if (moved == MAP_FAILED) munmap(target, new_size);
      else result = moved;
    }
  }
  errno = saved;
  return result;
}

bool smi_os_move(void *p, size_t old_size, size_t new_size, void *target, bool keep_old) {
  int saved = errno;
  bool moved = os_move_into(p, old_size, new_size, target, keep_old, false) != MAP_FAILED;
  errno = saved;
  return moved;
}

void smi_os_free(void *p, size_t size) {
  int saved = errno;
  if (munmap(p, size) == 0) os_set_pinned(p, size, false);
  errno = saved;
}

bool smi_os_free_keep_addresses(void *p, size_t size) {
  int saved = errno;
  void *q = mmap(p, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  errno = saved;
  if (q == MAP_FAILED) return false;
  os_set_pinned(p, size, false); /* hugetlb pages, if any, went with the old mapping */
  return true;
}

bool smi_os_purge(void *p, size_t size, bool decommit) {
  /* hugetlb pages go back only whole, if at all (MADV_DONTNEED may succeed and do nothing):
   * pinned memory is never purged, so it never claims to read as zero */
  if (os_is_pinned(p, size)) return false;
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

static uint64_t os_clock_ms(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
/* The coarse clock (the kernel's tick, 1-4 ms) is plenty for purge deadlines of 10 ms and more,
 * and it is read on every slow path: 8 ns a call here against 35 for CLOCK_MONOTONIC, which
 * was 9% of larson's time. */
uint64_t smi_os_now_ms(void) { return os_clock_ms(CLOCK_MONOTONIC_COARSE); }
uint64_t smi_os_clock_ms(void) { return os_clock_ms(CLOCK_MONOTONIC); }

/* a copy of stderr for what is printed at exit: GNU tools close stderr before that (gnulib's
 * close_stdout), and the statistics then vanished with EBADF */
static int stderr_copy = -1;
void smi_os_stderr_keep(void) {
  int saved = errno;
  if (stderr_copy < 0) stderr_copy = fcntl(2, F_DUPFD_CLOEXEC, 100); /* high: out of the program's way */
  errno = saved;
}

/* Files are read and written with raw system calls: open, read and write are cancellation points,
 * and a pthread_cancel pending in a thread must not take effect inside malloc or free (the block
 * taken would leak; a noexcept destructor that frees would terminate the program). */
void smi_os_write_stderr(const char *buf, size_t len) {
  int saved = errno, fd = 2;
  while (len > 0) {
    ssize_t w = (ssize_t)syscall(SYS_write, fd, buf, len);
    if (w < 0 && errno == EBADF && fd == 2 && stderr_copy >= 0) { /* stderr closed: still where it was */
      fd = stderr_copy;
      continue;
    }
    if (w <= 0) break;
    buf += w;
    len -= (size_t)w;
  }
  errno = saved;
}

/* ---- small file reads (/proc, sysfs), without stdio: nothing here may allocate (nor be a
 * cancellation point: smi_os_write_stderr) ---- */

static ssize_t os_read_text(const char *path, char *buf, size_t size) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    ssize_t n = (ssize_t)syscall(SYS_read, fd, buf + len, size - 1 - len);
    if (n <= 0) break;
    len += (size_t)n;
    if (len == size - 1) break;
  }
  syscall(SYS_close, fd);
  buf[len] = 0;
  return (ssize_t)len;
}

void smi_os_process_info(smi_os_process_info_t *info) {
  int saved = errno;
  memset(info, 0, sizeof *info);
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    info->user_ms = (uint64_t)ru.ru_utime.tv_sec * 1000 + (uint64_t)ru.ru_utime.tv_usec / 1000;
    info->system_ms = (uint64_t)ru.ru_stime.tv_sec * 1000 + (uint64_t)ru.ru_stime.tv_usec / 1000;
    info->peak_rss = (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
    info->minor_faults = (uint64_t)ru.ru_minflt;
    info->major_faults = (uint64_t)ru.ru_majflt;
  }
  /* current RSS: the second field of /proc/self/statm, in pages */
  char buf[128];
  if (os_read_text("/proc/self/statm", buf, sizeof buf) > 0) {
    const char *s = buf;
    while (*s >= '0' && *s <= '9') s++;
    while (*s == ' ') s++;
    uint64_t pages = 0;
    while (*s >= '0' && *s <= '9') pages = pages * 10 + (uint64_t)(*s++ - '0');
    info->current_rss = pages * os_page_size;
  }
  if (info->peak_rss < info->current_rss) info->peak_rss = info->current_rss; /* sampled apart */
  errno = saved;
}

/* glibc >= 2.32: false once the process has started a second thread (it stays false after they
 * end); absent elsewhere (musl) */
extern char __libc_single_threaded __attribute__((weak));

bool smi_os_single_threaded(void) { return &__libc_single_threaded != NULL && __libc_single_threaded; }

size_t smi_os_thread_count(void) {
  if (smi_os_single_threaded()) return 1; /* no read needed */
  int saved = errno;
  size_t threads = 0;
  char buf[1024];
  if (os_read_text("/proc/self/stat", buf, sizeof buf) > 0) {
    const char *s = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    for (int field = 2; s != NULL && *s != 0 && field < 20; s++) field += *s == ' '; /* to field 20 */
    while (s != NULL && *s >= '0' && *s <= '9') threads = threads * 10 + (size_t)(*s++ - '0');
  }
  errno = saved;
  return threads;
}

/* libc sets `environ` as it starts, after the executable's preinit_array has run, and a first
 * malloc can come from there (the sanitizer runtimes' does): the options then come from the
 * environment the process started with, /proc/self/environ, of which the entries the options
 * read (SHARDMALLOC_*, MIMALLOC_*, any case) are kept here. Until 2026-11-28 the options were
 * read from no environment then, silently. */
static char os_early_env_text[4096];
static char *os_early_env[64];

static bool os_env_wanted(const char *entry, size_t len) {
  return (len >= 12 && strncasecmp(entry, "SHARDMALLOC_", 12) == 0) || (len >= 9 && strncasecmp(entry, "MIMALLOC_", 9) == 0);
}

static char **os_early_environ(void) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  char chunk[1024], entry[512];
  size_t len = 0, used = 0, count = 0;
  bool too_long = false;
  ssize_t n;
  while ((n = (ssize_t)syscall(SYS_read, fd, chunk, sizeof chunk)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (chunk[i] != 0) { /* an entry longer than `entry` is no option of ours */
        if (len < sizeof entry - 1) entry[len++] = chunk[i];
        else too_long = true;
        continue;
      }
      if (!too_long && os_env_wanted(entry, len) && used + len + 1 <= sizeof os_early_env_text &&
          count + 1 < sizeof os_early_env / sizeof os_early_env[0]) {
        memcpy(os_early_env_text + used, entry, len);
        os_early_env_text[used + len] = 0;
        os_early_env[count++] = os_early_env_text + used;
        used += len + 1;
      }
      len = 0;
      too_long = false;
    }
  }
  syscall(SYS_close, fd);
  os_early_env[count] = NULL;
  return os_early_env;
}

char **smi_os_environ(void) {
  if (getauxval(AT_SECURE)) return NULL; /* as secure_getenv: setuid programs ignore it */
  return environ != NULL ? environ : os_early_environ();
}


static char *os_append(char *dst, char *end, const char *s) {
  while (*s && dst < end - 1) *dst++ = *s++;
  *dst = 0;
  return dst;
}

static char *os_append_uint(char *dst, char *end, size_t v) {
  char digits[24];
  size_t n = 0;
  do digits[n++] = (char)('0' + v % 10); while ((v /= 10) != 0 && n < sizeof digits);
  while (n > 0 && dst < end - 1) *dst++ = digits[--n];
  *dst = 0;
  return dst;
}

/* ---- pinned memory: hugetlb mappings, and memory handed over as large pages ----
 * Their physical pages go back only as whole huge pages, or not at all: MADV_DONTNEED on 64 KiB
 * of a hugetlb mapping fails, or succeeds doing nothing. One bit per 4 MiB of address space
 * marks them; purges and remaps of marked ranges are refused, so a purge never claims that memory
 * it did not clear reads as zero. The table (4 MiB of address space, touched only where such
 * memory lives) is mapped at the first pin: in .bss every process carried it, and mlockall locks
 * and faults in every mapping, so a program that calls it held 4 MiB more (and with an
 * RLIMIT_MEMLOCK of 8 MiB, as an unprivileged user has, refused it sooner). */
#define OS_PIN_BITS 47
#define OS_PIN_CHUNKS ((size_t)1 << (OS_PIN_BITS - SM_SEGMENT_SHIFT))
static _Atomic(_Atomic(uint64_t) *) os_pinned;
static _Atomic(size_t) os_pinned_chunks; /* while 0 (the usual case) a check is one load */

static _Atomic(uint64_t) *os_pinned_table(void) {
  _Atomic(uint64_t) *table = atomic_load_explicit(&os_pinned, memory_order_acquire);
  if (table != NULL) return table;
  int saved = errno;
  void *m = mmap(NULL, OS_PIN_CHUNKS / 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  errno = saved;
  if (m == MAP_FAILED) return NULL;
  if (!atomic_compare_exchange_strong_explicit(&os_pinned, &table, (_Atomic(uint64_t) *)m, memory_order_acq_rel,
                                               memory_order_acquire)) {
    munmap(m, OS_PIN_CHUNKS / 8); /* another thread mapped it first: table is theirs */
    return table;
  }
  return (_Atomic(uint64_t) *)m;
}

/* marking needs the table (false if it cannot be mapped); unmarking and checking never map it */
static bool os_set_pinned(const void *p, size_t size, bool on) {
  if (size == 0 || (!on && atomic_load_explicit(&os_pinned_chunks, memory_order_relaxed) == 0)) return true;
  _Atomic(uint64_t) *table = on ? os_pinned_table() : atomic_load_explicit(&os_pinned, memory_order_acquire);
  if (table == NULL) return !on;
  uintptr_t first = (uintptr_t)p >> SM_SEGMENT_SHIFT, last = ((uintptr_t)p + size - 1) >> SM_SEGMENT_SHIFT;
  for (uintptr_t c = first; c <= last && c < OS_PIN_CHUNKS; c++) {
    uint64_t bit = (uint64_t)1 << (c % 64);
    if (on) {
      if (!(atomic_fetch_or(&table[c / 64], bit) & bit)) atomic_fetch_add(&os_pinned_chunks, 1);
    } else if (atomic_fetch_and(&table[c / 64], ~bit) & bit) {
      atomic_fetch_sub(&os_pinned_chunks, 1);
    }
  }
  return true;
}

static bool os_is_pinned(const void *p, size_t size) {
  if (size == 0 || atomic_load_explicit(&os_pinned_chunks, memory_order_relaxed) == 0) return false;
  _Atomic(uint64_t) *table = atomic_load_explicit(&os_pinned, memory_order_acquire);
  if (table == NULL) return false;
  uintptr_t first = (uintptr_t)p >> SM_SEGMENT_SHIFT, last = ((uintptr_t)p + size - 1) >> SM_SEGMENT_SHIFT;
  for (uintptr_t c = first; c <= last && c < OS_PIN_CHUNKS; c++) {
    if ((atomic_load_explicit(&table[c / 64], memory_order_relaxed) >> (c % 64)) & 1) return true;
  }
  return false;
}

bool smi_os_set_pinned(void *p, size_t size, bool on) {
  if ((uintptr_t)p + size > ((uintptr_t)1 << OS_PIN_BITS)) return false; /* cannot be marked */
  return os_set_pinned(p, size, on);
}
bool smi_os_is_pinned(const void *p, size_t size) { return os_is_pinned(p, size); }

bool smi_os_unprotect(void *p, size_t size) {
  if (!os_whole_pages(p, size)) return false;
  int saved = errno;
  bool ok = mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
  errno = saved;
  return ok;
}

/* ---- huge OS pages (hugetlb) ---- */
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

void *smi_os_reserve_aligned(size_t size, size_t alignment) {
  return os_alloc_aligned(size, alignment, 0, PROT_NONE, MAP_NORESERVE);
}

bool smi_os_map_hugetlb(void *p, size_t size, size_t page_size, int numa_node) {
  if (!smi_is_power_of_two(page_size) || (((uintptr_t)p | size) & (page_size - 1)) != 0 || size == 0 ||
      (uintptr_t)p + size > ((uintptr_t)1 << OS_PIN_BITS) || os_pinned_table() == NULL) /* it must be marked */
    return false;
  int saved = errno;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB | (__builtin_ctzl(page_size) << MAP_HUGE_SHIFT);
  /* no MAP_NORESERVE: the kernel takes the pages from the pool now (or fails now), so that no
   * later page fault can fail with SIGBUS */
  bool ok = mmap(p, size, PROT_READ | PROT_WRITE, flags, -1, 0) == p;
  if (ok) {
    if (numa_node >= 0) smi_os_numa_bind(p, size, numa_node); /* before the pages are faulted */
    os_set_pinned(p, size, true);
  }
  errno = saved;
  return ok;
}

static size_t os_hugetlb_read(size_t page_size, const char *file) {
  char path[96], buf[32];
  char *end = path + sizeof path, *s = os_append(path, end, "/sys/kernel/mm/hugepages/hugepages-");
  s = os_append_uint(s, end, page_size >> 10);
  s = os_append(s, end, "kB/");
  os_append(s, end, file);
  ssize_t n = os_read_text(path, buf, sizeof buf);
  size_t v = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (size_t)(buf[i] - '0');
  return v;
}

/* free pages not yet promised to a mapping (reserved pages count as free until faulted in) */
size_t smi_os_hugetlb_free(size_t page_size) {
  int saved = errno;
  size_t free = os_hugetlb_read(page_size, "free_hugepages"), resv = os_hugetlb_read(page_size, "resv_hugepages");
  errno = saved;
  return free > resv ? free - resv : 0;
}

/* ---- NUMA ----
 * Nodes and each node's CPUs are read once from sysfs. The current node is asked for at most once
 * per segment, and only on machines with two or more nodes; the cheapest source wins:
 *   1. the rseq area glibc (>= 2.35) registers for every thread: its cpu_id is a plain load,
 *      mapped to a node by the table read at start-up;
 *   2. getcpu in the vDSO (x86-64), which returns the node itself, without entering the kernel;
 *   3. the getcpu system call.
 * bench/src/numa-node.c measures them (docs/api/os-memory.md). */
#define OS_NUMA_MAX_CPUS 4096
#define OS_NUMA_MAX_NODES 256 /* what the mbind mask below holds */
static SM_BSS_LARGE uint16_t os_cpu_node[OS_NUMA_MAX_CPUS]; /* node + 1; 0: unknown */
static _Atomic(size_t) os_numa_detected = 1;   /* highest online node + 1 */
static _Atomic(size_t) os_numa_used = 1;       /* capped by use_numa_nodes */
static bool os_cpu_map_ok;                     /* every online node's cpulist was read */
typedef long os_getcpu_fun(unsigned *cpu, unsigned *node, void *unused);
static os_getcpu_fun *os_vdso_getcpu;

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#define OS_HAVE_RSEQ 1
/* glibc >= 2.35; weak, so that older glibc (and static links that do not pull them in) work */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
static bool os_use_rseq;
static inline const volatile int32_t *os_rseq_cpu_id(void) {
  uintptr_t tp;
#if defined(__x86_64__)
  __asm__("mov %%fs:0, %0" : "=r"(tp));
#else
  __asm__("mrs %0, tpidr_el0" : "=r"(tp));
#endif
  return (const volatile int32_t *)(tp + (uintptr_t)__rseq_offset + 4); /* struct rseq: cpu_id_start, cpu_id */
}
#else
#define OS_HAVE_RSEQ 0
#endif

/* getcpu in the vDSO: the kernel maps a small ELF image; look its dynamic symbols up by hand
 * (dlsym would allocate, and static programs have none) */
static void *os_vdso_sym(const char *name) {
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return NULL;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return NULL;
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
  uintptr_t bias = 0, dyn_vaddr = 0;
  bool have_load = false;
  for (size_t i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD && !have_load) {
      bias = base + ph[i].p_offset - ph[i].p_vaddr;
      have_load = true;
    } else if (ph[i].p_type == PT_DYNAMIC) {
      dyn_vaddr = ph[i].p_vaddr;
    }
  }
  if (!have_load || dyn_vaddr == 0) return NULL;
  const Elf64_Sym *sym = NULL;
  const char *str = NULL;
  const uint32_t *hash = NULL, *gnu_hash = NULL;
  for (const Elf64_Dyn *d = (const Elf64_Dyn *)(bias + dyn_vaddr); d->d_tag != DT_NULL; d++) {
    if (d->d_tag == DT_SYMTAB) sym = (const Elf64_Sym *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_STRTAB) str = (const char *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_HASH) hash = (const uint32_t *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_GNU_HASH) gnu_hash = (const uint32_t *)(bias + d->d_un.d_ptr);
  }
  if (sym == NULL || str == NULL) return NULL;
  size_t count = 0;
  if (hash != NULL) {
    count = hash[1]; /* nchain: one entry per symbol */
  } else if (gnu_hash != NULL) { /* the highest symbol index reachable from a bucket, + 1 */
    uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_words = gnu_hash[2];
    const uint32_t *buckets = gnu_hash + 4 + 2 * (size_t)bloom_words, *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t b = 0; b < nbuckets; b++) if (buckets[b] > last) last = buckets[b];
    if (last >= symoffset) {
      while (!(chain[last - symoffset] & 1)) last++;
      count = (size_t)last + 1;
    } else {
      count = symoffset;
    }
  }
  for (size_t i = 0; i < count; i++) {
    if (sym[i].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym[i].st_info) == STT_FUNC && strcmp(str + sym[i].st_name, name) == 0)
      return (void *)(bias + sym[i].st_value);
  }
  return NULL;
}

/* "0-3,8,10-11": sets map[i] = value for every listed i < map_len (map may be NULL) and *end to
 * the highest listed + 1 (0 for an empty list). False for text that is not such a list. */
bool smi_os_parse_list(const char *s, uint16_t *map, size_t map_len, uint16_t value, size_t *end) {
  size_t max = 0;
  *end = 0;
  for (;;) {
    while (*s == ',' || *s == ' ' || *s == '\n' || *s == '\t') s++;
    if (*s == 0) break;
    size_t range[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
      if (*s < '0' || *s > '9') return false;
      while (*s >= '0' && *s <= '9') {
        range[k] = range[k] * 10 + (size_t)(*s++ - '0');
        if (range[k] > ((size_t)1 << 20)) return false; /* no machine has that many */
      }
      if (k == 0) {
        if (*s != '-') { range[1] = range[0]; break; }
        s++;
      }
    }
    if (range[1] < range[0] || (*s != 0 && *s != ',' && *s != ' ' && *s != '\n' && *s != '\t')) return false;
    for (size_t i = range[0]; i <= range[1] && i < map_len && map != NULL; i++) map[i] = value;
    if (range[1] + 1 > max) max = range[1] + 1;
  }
  *end = max;
  return true;
}

/* online: the text of /sys/devices/system/node/online (NULL: unknown, one node); cpulists[node]:
 * that node's cpulist text (cpulists NULL: read sysfs). use_nodes > 0 caps the count. */
bool smi_os_numa_setup(const char *online, const char *const *cpulists, long use_nodes) {
  static uint16_t online_map[OS_NUMA_MAX_NODES]; /* static: only ever used at start-up (and by tests) */
  static bool set_before; /* the tables start zeroed (.bss): clearing them again would fault their pages in */
  size_t nodes = 0;
  bool ok = online != NULL;
  if (set_before) memset(online_map, 0, sizeof online_map);
  if (ok) ok = smi_os_parse_list(online, online_map, OS_NUMA_MAX_NODES, 1, &nodes);
  if (!ok || nodes == 0) nodes = 1;
  if (set_before) memset(os_cpu_node, 0, sizeof os_cpu_node);
  set_before = true;
  /* one node: no node is ever looked up, so no cpu map (and no sysfs reads: every process pays them) */
  bool map_ok = ok && (nodes > 1 || cpulists != NULL);
  for (size_t node = 0; node < nodes && map_ok; node++) {
    if (node >= OS_NUMA_MAX_NODES) { map_ok = false; break; }
    if (!online_map[node]) continue;
    char buf[1024];
    const char *list = NULL;
    if (cpulists != NULL) {
      list = cpulists[node];
    } else {
      char path[80], *end = path + sizeof path;
      char *s = os_append(path, end, "/sys/devices/system/node/node");
      s = os_append_uint(s, end, node);
      os_append(s, end, "/cpulist");
      if (os_read_text(path, buf, sizeof buf) >= 0) list = buf;
    }
    size_t unused;
    if (list == NULL || !smi_os_parse_list(list, os_cpu_node, OS_NUMA_MAX_CPUS, (uint16_t)(node + 1), &unused) ||
        unused > OS_NUMA_MAX_CPUS)
      map_ok = false;
  }
  os_cpu_map_ok = map_ok;
  size_t used = nodes;
  if (use_nodes > 0 && (size_t)use_nodes < used) used = (size_t)use_nodes;
  atomic_store_explicit(&os_numa_detected, nodes, memory_order_relaxed);
  atomic_store_explicit(&os_numa_used, used, memory_order_relaxed);
#if OS_HAVE_RSEQ
  os_use_rseq = map_ok && &__rseq_size != NULL && &__rseq_offset != NULL && __rseq_size >= 8 && *os_rseq_cpu_id() >= 0;
#endif
  return ok;
}

/* How many nodes this process may allocate on (its cpuset's), or 0 if the kernel does not say. */
static size_t os_numa_allowed(void) {
#ifdef SYS_get_mempolicy
  unsigned long mask[OS_NUMA_MAX_NODES / (8 * sizeof(unsigned long)) + 1] = {0};
  /* MPOL_F_MEMS_ALLOWED (4); maxnode counts the bits of mask */
  if (syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)(8 * sizeof mask), NULL, 4UL) != 0) return 0;
  size_t n = 0;
  for (size_t i = 0; i < sizeof mask / sizeof mask[0]; i++) n += (size_t)__builtin_popcountl(mask[i]);
  return n;
#else
  return 0;
#endif
}

void smi_os_numa_init(long use_nodes) {
  int saved = errno;
  os_vdso_getcpu = (os_getcpu_fun *)os_vdso_sym("__vdso_getcpu");
  if (os_vdso_getcpu == NULL) os_vdso_getcpu = (os_getcpu_fun *)os_vdso_sym("__kernel_getcpu");
  /* Allowed on one node (most machines, and containers pinned to a node): nothing to place, and
   * no sysfs read, which costs every process 9 us against 0.8 for this system call. */
  char online[256];
  const char *list = "0";
  if (os_numa_allowed() != 1) list = os_read_text("/sys/devices/system/node/online", online, sizeof online) > 0 ? online : NULL;
  smi_os_numa_setup(list, NULL, use_nodes);
  errno = saved;
}

size_t smi_os_numa_count(void) { return atomic_load_explicit(&os_numa_used, memory_order_relaxed); }
size_t smi_os_numa_detected(void) { return atomic_load_explicit(&os_numa_detected, memory_order_relaxed); }

int smi_os_numa_node_of_cpu(unsigned cpu) {
  if (cpu >= OS_NUMA_MAX_CPUS || os_cpu_node[cpu] == 0) return -1;
  size_t node = os_cpu_node[cpu] - 1u, used = smi_os_numa_count();
  return (int)(node < used ? node : node % used);
}

/* the cheapest source of (cpu, node) available: 0 rseq, 1 vDSO, 2 system call, -1 none */
int smi_os_getcpu(unsigned *cpu, unsigned *node) {
#if OS_HAVE_RSEQ
  if (os_use_rseq) {
    int32_t c = *os_rseq_cpu_id();
    if (c >= 0 && c < OS_NUMA_MAX_CPUS && os_cpu_node[c] != 0) {
      *cpu = (unsigned)c;
      *node = os_cpu_node[c] - 1u;
      return 0;
    }
  }
#endif
  if (os_vdso_getcpu != NULL && os_vdso_getcpu(cpu, node, NULL) == 0) return 1;
  int saved = errno;
  long r = syscall(SYS_getcpu, cpu, node, NULL);
  errno = saved;
  return r == 0 ? 2 : -1;
}

const char *smi_os_numa_method(void) {
#if OS_HAVE_RSEQ
  if (os_use_rseq) return "rseq cpu_id";
#endif
  return os_vdso_getcpu != NULL ? "vDSO getcpu" : "getcpu system call";
}

int smi_os_numa_node(void) {
  size_t used = smi_os_numa_count();
  if (sm_likely(used <= 1)) return 0;
  unsigned cpu, node;
  if (smi_os_getcpu(&cpu, &node) < 0) return 0;
  return (int)(node < used ? node : node % used);
}

bool smi_os_numa_bind(void *p, size_t size, int node) {
#ifdef SYS_mbind
  if (node < 0 || node >= OS_NUMA_MAX_NODES) return false;
  unsigned long mask[OS_NUMA_MAX_NODES / (8 * sizeof(unsigned long))] = {0};
  mask[(size_t)node / (8 * sizeof(unsigned long))] = 1ul << ((size_t)node % (8 * sizeof(unsigned long)));
  int saved = errno;
  /* MPOL_PREFERRED (1): the node if it has memory, else another; never a failed fault */
  long r = syscall(SYS_mbind, p, size, 1, mask, (unsigned long)OS_NUMA_MAX_NODES + 1, 0);
  errno = saved;
  return r == 0;
#else
  (void)p, (void)size, (void)node;
  return false;
#endif
}
