/* pagesize-model: the memory system calls of a Linux kernel with larger pages than this machine's
 * (aarch64 kernels run with 16 KiB or 64 KiB pages), for the tests of the library's page-size
 * handling on an x86-64 machine. Linked into a static test program with
 *   -Wl,--wrap=mmap,--wrap=munmap,--wrap=mprotect,--wrap=madvise,--wrap=mremap,--wrap=getauxval
 * the library's calls come here: getauxval(AT_PAGESZ) reports the model's page size
 * (SM_TEST_PAGE_SIZE, default 65536), and every call follows that kernel's rules: an address that
 * is not page-aligned is EINVAL, lengths are rounded up to whole pages (madvise(MADV_DONTNEED)
 * clears all of the last page), and new mappings start on a page boundary. The real calls below
 * then act on whole model pages, which are whole pages of this machine too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
int __real_mprotect(void *addr, size_t len, int prot);
int __real_madvise(void *addr, size_t len, int advice);
void *__real_mremap(void *old, size_t old_len, size_t new_len, int flags, ...);
unsigned long __real_getauxval(unsigned long type);

static uintptr_t model_page(void) {
  static uintptr_t page;
  if (page == 0) {
    const char *s = getenv("SM_TEST_PAGE_SIZE");
    uintptr_t p = s != NULL ? (uintptr_t)strtoul(s, NULL, 0) : 65536;
    page = (p >= 4096 && (p & (p - 1)) == 0) ? p : 65536;
  }
  return page;
}
static int misaligned(const void *addr) { return ((uintptr_t)addr & (model_page() - 1)) != 0; }
static size_t round_up(size_t len) { return (len + model_page() - 1) & ~(model_page() - 1); }

unsigned long __wrap_getauxval(unsigned long type) {
  return type == AT_PAGESZ ? model_page() : __real_getauxval(type);
}

/* a page-aligned range of len bytes (len a whole number of model pages) mapped anywhere */
static void *map_aligned(size_t len, int prot, int flags, int fd, off_t off) {
  size_t page = model_page();
  uint8_t *base = __real_mmap(NULL, len + page, prot, flags, fd, off);
  if (base == MAP_FAILED) return base;
  uint8_t *p = (uint8_t *)(((uintptr_t)base + page - 1) & ~(uintptr_t)(page - 1));
  if (p > base) __real_munmap(base, (size_t)(p - base));
  if (p + len < base + len + page) __real_munmap(p + len, (size_t)(base + len + page - (p + len)));
  return p;
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (len == 0 || ((flags & MAP_FIXED) && misaligned(addr))) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  len = round_up(len);
  if ((flags & MAP_FIXED) || (fd >= 0 && !(flags & MAP_ANONYMOUS))) return __real_mmap(addr, len, prot, flags, fd, off);
  if (addr != NULL && !misaligned(addr)) { /* a hint the kernel may honour */
    void *p = __real_mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED || !misaligned(p)) return p;
    __real_munmap(p, len);
  }
  return map_aligned(len, prot, flags, fd, off);
}

int __wrap_munmap(void *addr, size_t len) {
  if (len == 0 || misaligned(addr)) {
    errno = EINVAL;
    return -1;
  }
  return __real_munmap(addr, round_up(len));
}

int __wrap_mprotect(void *addr, size_t len, int prot) {
  if (misaligned(addr)) {
    errno = EINVAL;
    return -1;
  }
  return __real_mprotect(addr, round_up(len), prot);
}

int __wrap_madvise(void *addr, size_t len, int advice) {
  if (misaligned(addr)) {
    errno = EINVAL;
    return -1;
  }
  return __real_madvise(addr, round_up(len), advice);
}

void *__wrap_mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *target = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void *);
    va_end(ap);
  }
  if (misaligned(old) || new_len == 0 || ((flags & MREMAP_FIXED) && misaligned(target))) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  old_len = round_up(old_len);
  new_len = round_up(new_len);
  if (flags & MREMAP_FIXED) return __real_mremap(old, old_len, new_len, flags, target);
  void *p = __real_mremap(old, old_len, new_len, flags & ~MREMAP_MAYMOVE);
  if (p != MAP_FAILED || !(flags & MREMAP_MAYMOVE)) return p;
  /* it has to move: to a page-aligned place, as that kernel would choose */
  void *to = map_aligned(new_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (to == MAP_FAILED) return to;
  p = __real_mremap(old, old_len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  if (p == MAP_FAILED) __real_munmap(to, new_len);
  return p;
}
