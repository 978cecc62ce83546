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
/* the same, but outside the OS's accounting of committed memory (Linux: MAP_NORESERVE): for
 * arenas the program asked to reserve, which may be larger than the machine's memory. An
 * ordinary mapping larger than what the OS can back is refused, as glibc's malloc is. */
void *smi_os_alloc_aligned_noreserve(size_t size, size_t alignment);
void smi_os_free(void *p, size_t size);
/* Give [p, p+size) back but keep its addresses: it becomes a read-only mapping of zeros (reads
 * never fault, nothing else is placed there) until smi_os_free. False if the OS refused. */
bool smi_os_free_keep_addresses(void *p, size_t size);
/* Move the mapping [p, p+old_size) to a new one of new_size bytes, aligned to `alignment`,
 * without copying (page tables move); the old range is gone, or with keep_old (if the result is
 * not p) still mapped and reading as zeros, for the caller to free (where the OS cannot keep it,
 * nothing moves). NULL (and p intact) on failure. */
void *smi_os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment, bool keep_old);
/* move the pages of [p, p+old_size) over [target, target+new_size) (mapped by the caller), as
 * many as fit; keep_old as above */
bool smi_os_move(void *p, size_t old_size, size_t new_size, void *target, bool keep_old);
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
uint64_t smi_os_now_ms(void); /* monotonic, coarse (a few ms): for deadlines, not for measuring */
uint64_t smi_os_clock_ms(void);  /* monotonic, to the ms: for measuring (statistics) */
void smi_os_write_stderr(const char *buf, size_t len);
void smi_os_stderr_keep(void); /* from now on, writes reach stderr even after the program closes it */
/* resource use of the whole process, for statistics; never allocates (no stdio). Times in ms,
 * sizes in bytes, faults counted since the process started; 0 where the OS does not tell. */
typedef struct smi_os_process_info_s {
  uint64_t user_ms, system_ms;
  uint64_t current_rss, peak_rss;
  uint64_t minor_faults, major_faults;
} smi_os_process_info_t;
void smi_os_process_info(smi_os_process_info_t *info);
/* threads the process has now (0: unknown); allocates nothing */
size_t smi_os_thread_count(void);
bool smi_os_single_threaded(void); /* known to have had one thread only, without a system call */
/* Make every thread of the process execute a full memory barrier before this returns, so that
 * whatever any thread stored before it is visible to the caller afterwards (Linux membarrier).
 * smi_os_barrier_init registers for it once; both return false where the OS cannot do it. */
bool smi_os_barrier_init(void);
bool smi_os_barrier_all(void);
/* the environment to scan (for names matched without regard to case), without allocation; NULL
 * in setuid/setgid programs, which ignore it (as secure_getenv). Before libc has set `environ`,
 * the options' entries of the process's starting environment. */
char **smi_os_environ(void);
/* page size and the random start of segment addresses (random: a word of its own from getrandom) */
void smi_os_init(uint64_t random);

/* ---- huge OS pages, pinned memory and NUMA (for arena.c) ---- */
/* PROT_NONE address space, aligned: a placeholder that smi_os_map_hugetlb fills piece by piece
 * (freed with smi_os_free) */
void *smi_os_reserve_aligned(size_t size, size_t alignment);
/* Replace [p, p+size) (inside a placeholder; p and size multiples of page_size) with hugetlb
 * pages of page_size bytes (2 MiB or 1 GiB), taken from the kernel's pool now, so that no fault
 * can fail later; preferably on numa_node (-1: any). The range becomes pinned. False if the pool
 * has too few free pages; the range may then be unmapped. */
bool smi_os_map_hugetlb(void *p, size_t size, size_t page_size, int numa_node);
/* free pages of page_size bytes in the kernel's hugetlb pool (0 if none or unknown) */
size_t smi_os_hugetlb_free(size_t page_size);
/* Pinned memory (hugetlb, or memory handed over as large pages) cannot give its pages back:
 * smi_os_purge of it does nothing and returns false, smi_os_remap_aligned returns NULL. Marks are
 * per 4 MiB of address space; smi_os_free clears them. False if the range cannot be marked. */
bool smi_os_set_pinned(void *p, size_t size, bool on);
bool smi_os_is_pinned(const void *p, size_t size);
/* make [p, p+size) readable and writable again (guard pages of memory that goes back to an arena) */
bool smi_os_unprotect(void *p, size_t size);

/* Read the NUMA nodes and their CPUs (once, at start-up); use_nodes > 0 caps the node count. */
void smi_os_numa_init(long use_nodes);
size_t smi_os_numa_count(void);    /* nodes in use: 1 on most machines */
size_t smi_os_numa_detected(void); /* nodes found (highest online node + 1) */
/* the calling thread's node, below smi_os_numa_count(); 0 without a system call on one node */
int smi_os_numa_node(void);
/* prefer node for the pages of [p, p+size) that are faulted in from now on (mbind) */
bool smi_os_numa_bind(void *p, size_t size, int node);
/* the calling thread's cpu and node, by the cheapest means: returns 0 (rseq), 1 (vDSO getcpu),
 * 2 (getcpu system call) or -1 */
int smi_os_getcpu(unsigned *cpu, unsigned *node);
const char *smi_os_numa_method(void); /* that means, in words */
/* internal test hooks: list parsing ("0-3,8"), and set-up from given texts instead of sysfs */
bool smi_os_parse_list(const char *s, uint16_t *map, size_t map_len, uint16_t value, size_t *end);
bool smi_os_numa_setup(const char *online, const char *const *cpulists, long use_nodes);
int smi_os_numa_node_of_cpu(unsigned cpu); /* -1 if unknown */

#endif
