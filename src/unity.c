/* unity.c: the whole library as one translation unit, so the compiler sees (and inlines) across
 * files. This is what CMake compiles into libshardmalloc.so, libshardmalloc.a and shardmalloc.o. */
#define _GNU_SOURCE /* pthread_setname_np, MADV_FREE, mremap */
#include "os_linux.c"
#include "options.c"
#include "stats.c"
#include "sizeclass.c"
#include "arena.c"
#include "segment.c"
#include "page.c"
#include "heap.c"
#include "free.c"
#include "alloc.c"
#include "init.c"
#include "purge.c"
#include "posix.c"
#include "override.c"
