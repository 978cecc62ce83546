/* Reports which shared object provides malloc in this process (to check that a preload took
 * effect) and exercises it a little.  Prints: RESULT malloc_from=<path> */
#include "common.h"
#include <dlfcn.h>

int main(void) {
  void *sym = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info;
  const char *from = "?";
  if (sym && dladdr(sym, &info) && info.dli_fname) from = info.dli_fname;
  void *ps[1000];
  for (int i = 0; i < 1000; i++) ps[i] = xmalloc_tagged((size_t)(i * 37 % 5000 + 1));
  for (int i = 0; i < 1000; i++) xfree_tagged(ps[i], (size_t)(i * 37 % 5000 + 1), "probe");
  void *q = realloc(NULL, 100);
  q = realloc(q, 100000);
  free(q);
  void *a = NULL;
  if (posix_memalign(&a, 4096, 5000) != 0 || ((uintptr_t)a & 4095)) verify_fail("probe: posix_memalign");
  free(a);
  printf("RESULT malloc_from=%s\n", from);
  return 0;
}
