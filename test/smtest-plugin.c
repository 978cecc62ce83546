/* smtest-plugin: a module that test-dlopen loads and unloads again and again.  It allocates in its
 * constructor and destructor, hands blocks to the program and frees the program's blocks, and has
 * a large thread-local array: glibc allocates the TLS of a dlopen'ed module with malloc, in
 * __tls_get_addr, on the first access from each thread. */
#include <stdlib.h>
#include <string.h>

static char *ctor_block;
static __thread char tls_big[256 * 1024];
static __thread int tls_counter;

__attribute__((constructor)) static void plugin_init(void) {
  ctor_block = malloc(10000);
  if (ctor_block) memset(ctor_block, 0x17, 10000);
}
__attribute__((destructor)) static void plugin_fini(void) {
  free(ctor_block);
  free(malloc(777)); /* allocation during dlclose */
}

char *plugin_make(size_t n, int fill) {
  char *p = malloc(n);
  if (p) memset(p, fill, n);
  return p;
}
char *plugin_strdup(const char *s) { return strdup(s); }
void plugin_free(void *p) { free(p); }
int plugin_ctor_ok(void) {
  if (!ctor_block) return 0;
  for (int i = 0; i < 10000; i++)
    if (ctor_block[i] != 0x17) return 0;
  return 1;
}
/* touches the thread-local array; returns the sum of what it wrote, to check it */
long plugin_tls(int v) {
  memset(tls_big, v, sizeof tls_big);
  tls_counter += v;
  long s = 0;
  for (size_t i = 0; i < sizeof tls_big; i += 4096) s += tls_big[i];
  return s + tls_counter - v;
}
