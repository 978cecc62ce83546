/* smtest-exitlib: a shared library linked to test-exit whose constructor and destructor allocate.
 * Its destructor runs in _dl_fini, after exit() has run the atexit handlers. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *kept;
int exitlib_fd = -1; /* set by test-exit in the child that runs the scenario */

__attribute__((constructor)) static void exitlib_init(void) {
  kept = malloc(4000);
  if (kept) memset(kept, 0x42, 4000);
}

__attribute__((destructor)) static void exitlib_fini(void) {
  if (exitlib_fd < 0) return;
  int ok = kept != NULL;
  for (int i = 0; ok && i < 4000; i++) ok = kept[i] == 0x42;
  free(kept);
  for (int i = 0; ok && i < 1000; i++) { /* allocate and free during the last destructors */
    char *p = malloc((size_t)i * 13 + 1);
    ok = p != NULL;
    if (p) memset(p, 1, (size_t)i * 13 + 1);
    free(p);
  }
  void *leak = malloc(100); /* never freed */
  (void)leak;
  const char *msg = ok ? "MARK lib-destructor ok\n" : "MARK lib-destructor FAILED\n";
  if (write(exitlib_fd, msg, strlen(msg)) < 0) _exit(5);
}

void exitlib_touch(void) {}
