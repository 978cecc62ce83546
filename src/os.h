/* os.h: the whole contract between shardmalloc and the operating system. Only os_linux.c
 * implements it (and only it calls mmap/munmap/madvise); a port to another OS supplies another
 * implementation of these functions. None of them allocates, and none changes errno. */
#ifndef SM_OS_H
#define SM_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Map `size` bytes, readable and writable, zero-filled, such that (result + offset) is a
 * multiple of `alignment` (a power of two >= the OS page size). The mapping is exactly
 * [result, result + size). NULL when the OS refuses. */
void *smi_os_alloc_aligned(size_t size, size_t alignment, size_t offset);
void smi_os_free(void *p, size_t size);
/* Move the mapping [p, p+old_size) to a new one of new_size bytes, aligned to `alignment`,
 * without copying (page tables move); the old range is gone. NULL (and p intact) on failure. */
void *smi_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment);
/* Give the physical memory of [p, p+size) back; the range stays mapped. With decommit the
 * memory reads as zero afterwards (MADV_DONTNEED), otherwise it may keep its contents until the
 * kernel reclaims it (MADV_FREE). Returns true iff the range now reads as zero. */
bool smi_os_purge(void *p, size_t size, bool decommit);
/* ask for transparent huge pages on [p, p+size); false where the system has none */
bool smi_os_use_large_pages(void *p, size_t size);
/* fault [p, p+size) in now (one up-front cost instead of page faults later) */
void smi_os_populate(void *p, size_t size);
/* make [p, p+size) inaccessible (guard pages); false if the OS refused */
bool smi_os_protect(void *p, size_t size);
size_t smi_os_page_size(void);
void smi_os_random_bytes(void *buf, size_t n);
uint64_t smi_os_now_ms(void);
void smi_os_write_stderr(const char *buf, size_t len);
/* getenv without allocation, ignoring the environment in setuid/setgid programs */
const char *smi_os_getenv(const char *name);
void smi_os_init(void);

#endif
