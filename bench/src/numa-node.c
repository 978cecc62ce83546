/* numa-node: what it costs to learn the current CPU (and so the NUMA node), per call.
 *
 *   cc -O2 -o numa-node bench/src/numa-node.c && ./numa-node [runs] [calls]
 *
 * Compares the ways src/os_linux.c can use (docs/api/os-memory.md has the numbers):
 *   syscall getcpu     syscall(SYS_getcpu): enters the kernel every time
 *   vDSO getcpu        __vdso_getcpu, looked up in the vDSO image as the library does (x86-64;
 *                      returns the node too)
 *   sched_getcpu       libc's function (glibc >= 2.35 reads rseq, older ones use the vDSO)
 *   rseq cpu_id        the cpu_id field of the rseq area glibc >= 2.35 registers per thread (a
 *                      plain load), plus the cpu -> node table lookup the library adds
 * Each way is timed `runs` times (default 7) over `calls` calls (default 2,000,000; a tenth of that
 * for the system call); the table gives the median and the range in ns per call. Standalone (no
 * allocator involved): the point is the mechanism. */
#define _GNU_SOURCE
#include <elf.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef long getcpu_fun(unsigned *cpu, unsigned *node, void *unused);

/* the same lookup as os_vdso_sym in src/os_linux.c */
static void *vdso_sym(const char *name) {
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return NULL;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return NULL;
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
  uintptr_t bias = 0, dyn_vaddr = 0;
  int have_load = 0;
  for (size_t i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD && !have_load) bias = base + ph[i].p_offset - ph[i].p_vaddr, have_load = 1;
    else if (ph[i].p_type == PT_DYNAMIC) dyn_vaddr = ph[i].p_vaddr;
  }
  if (!have_load || dyn_vaddr == 0) return NULL;
  const Elf64_Sym *sym = NULL;
  const char *str = NULL;
  const uint32_t *hash = NULL, *gnu = NULL;
  for (const Elf64_Dyn *d = (const Elf64_Dyn *)(bias + dyn_vaddr); d->d_tag != DT_NULL; d++) {
    if (d->d_tag == DT_SYMTAB) sym = (const Elf64_Sym *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_STRTAB) str = (const char *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_HASH) hash = (const uint32_t *)(bias + d->d_un.d_ptr);
    else if (d->d_tag == DT_GNU_HASH) gnu = (const uint32_t *)(bias + d->d_un.d_ptr);
  }
  if (sym == NULL || str == NULL) return NULL;
  size_t count = 0;
  if (hash != NULL) {
    count = hash[1];
  } else if (gnu != NULL) {
    const uint32_t *buckets = gnu + 4 + 2 * (size_t)gnu[2], *chain = buckets + gnu[0];
    uint32_t last = 0;
    for (uint32_t b = 0; b < gnu[0]; b++) if (buckets[b] > last) last = buckets[b];
    if (last >= gnu[1]) {
      while (!(chain[last - gnu[1]] & 1)) last++;
      count = (size_t)last + 1;
    } else {
      count = gnu[1];
    }
  }
  for (size_t i = 0; i < count; i++)
    if (sym[i].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym[i].st_info) == STT_FUNC && strcmp(str + sym[i].st_name, name) == 0)
      return (void *)(bias + sym[i].st_value);
  return NULL;
}

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#define HAVE_RSEQ 1
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
static inline const volatile int32_t *rseq_cpu_id(void) {
  uintptr_t tp;
#if defined(__x86_64__)
  __asm__("mov %%fs:0, %0" : "=r"(tp));
#else
  __asm__("mrs %0, tpidr_el0" : "=r"(tp));
#endif
  return (const volatile int32_t *)(tp + (uintptr_t)__rseq_offset + 4);
}
#else
#define HAVE_RSEQ 0
#endif

static getcpu_fun *vdso_getcpu;
#if HAVE_RSEQ
static uint16_t cpu_node[4096]; /* all zero here: one node, as the library's table would say */
#endif
static volatile unsigned sink;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

enum { M_SYSCALL, M_VDSO, M_SCHED, M_RSEQ, M_COUNT };
static const char *const names[M_COUNT] = {"syscall getcpu", "vDSO getcpu", "sched_getcpu", "rseq cpu_id + node table"};

static double run(int m, long calls) {
  unsigned cpu = 0, node = 0, acc = 0;
  double t0 = now_ns();
  switch (m) {
    case M_SYSCALL:
      for (long i = 0; i < calls; i++) syscall(SYS_getcpu, &cpu, &node, NULL), acc += node;
      break;
    case M_VDSO:
      for (long i = 0; i < calls; i++) vdso_getcpu(&cpu, &node, NULL), acc += node;
      break;
    case M_SCHED:
      for (long i = 0; i < calls; i++) acc += (unsigned)sched_getcpu();
      break;
    case M_RSEQ:
#if HAVE_RSEQ
      for (long i = 0; i < calls; i++) {
        int32_t c = *rseq_cpu_id();
        acc += c >= 0 && c < 4096 ? cpu_node[c] : 0u;
      }
#endif
      break;
  }
  double t = now_ns() - t0;
  sink = acc;
  return t / (double)calls;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  long calls = argc > 2 ? atol(argv[2]) : 2000000;
  if (runs < 1 || runs > 101 || calls < 1000) {
    fprintf(stderr, "usage: %s [runs 1..101] [calls >= 1000]\n", argv[0]);
    return 2;
  }
  vdso_getcpu = (getcpu_fun *)vdso_sym("__vdso_getcpu");
  if (vdso_getcpu == NULL) vdso_getcpu = (getcpu_fun *)vdso_sym("__kernel_getcpu");
  int have[M_COUNT] = {1, vdso_getcpu != NULL, 1, 0};
#if HAVE_RSEQ
  have[M_RSEQ] = &__rseq_size != NULL && &__rseq_offset != NULL && __rseq_size >= 8 && *rseq_cpu_id() >= 0;
#endif
  /* the four must agree on the CPU (pinned, so that it cannot change between them) */
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  cpu_set_t orig;
  sched_getaffinity(0, sizeof orig, &orig);
  sched_setaffinity(0, sizeof one, &one);
  unsigned c1 = 0, n1 = 0, c2 = 0, n2 = 0;
  syscall(SYS_getcpu, &c1, &n1, NULL);
  if (have[M_VDSO]) vdso_getcpu(&c2, &n2, NULL);
  else c2 = c1;
  int c3 = sched_getcpu();
  int c4 = (int)c1;
#if HAVE_RSEQ
  if (have[M_RSEQ]) c4 = *rseq_cpu_id();
#endif
  sched_setaffinity(0, sizeof orig, &orig);
  if (c2 != c1 || c3 != (int)c1 || c4 != (int)c1) {
    fprintf(stderr, "numa-node: the ways disagree: syscall %u, vDSO %u, sched_getcpu %d, rseq %d\n", c1, c2, c3, c4);
    return 3;
  }
  printf("numa-node: %d runs of %ld calls (syscall: %ld); ns per call\n", runs, calls, calls / 10);
  printf("| way | median ns | min-max ns |\n|---|---:|---:|\n");
  static double t[M_COUNT][101];
  for (int m = 0; m < M_COUNT; m++)
    if (have[m]) run(m, calls / 100); /* warm up */
  for (int r = 0; r < runs; r++) /* interleaved: a burst of load hits every way alike */
    for (int m = 0; m < M_COUNT; m++)
      if (have[m]) t[m][r] = run(m, m == M_SYSCALL ? calls / 10 : calls);
  for (int m = 0; m < M_COUNT; m++) {
    if (!have[m]) {
      printf("| %s | n/a | not available here |\n", names[m]);
      continue;
    }
    qsort(t[m], (size_t)runs, sizeof t[m][0], cmp);
    printf("| %s | %.1f | %.1f-%.1f |\n", names[m], t[m][runs / 2], t[m][0], t[m][runs - 1]);
  }
  return 0;
}
