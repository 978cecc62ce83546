/* an installed-shardmalloc consumer: uses the header and the library, and checks that malloc is
 * served by shardmalloc (linking the library replaces malloc) */
#include <shardmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = sm_malloc(100);
  char *q = malloc(100);
  char *s = sm_strdup("installed");
  int ok = p && q && s && sm_check_owned(p) && sm_check_owned(q) && sm_check_owned(s) &&
           !strcmp(s, "installed") && sm_usable_size(p) >= 100 && sm_version() == SM_VERSION;
  sm_free(p);
  free(q);
  sm_free(s);
  printf("consumer: shardmalloc %d.%d.%d, malloc served by shardmalloc: %s\n", SM_VERSION_MAJOR, SM_VERSION_MINOR,
         SM_VERSION_PATCH, ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
