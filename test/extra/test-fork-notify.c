/* test-fork-notify: a fork while another thread's free is telling the owner of a full page about
 * it (its delay state FREEING, the block already on the owner heap's delayed list, the state not
 * yet back to NONE). Only the forking thread lives on in the child, so nobody would end that
 * notification there. The child frees the rest of the page's blocks: the heap of the owner, a
 * thread the fork left behind, is collected by the child itself every 1024 such frees (purge.c,
 * orphans), and its emptied page is given back, which waits out FREEING. Until 2026-11-27 the
 * child mended only its own heap and those made with sm_heap_new, and hung there for good.
 *
 * The window is a few instructions wide, so the test builds that state itself, as the remote
 * free would have left it (the static library and its internal header: release build only), and
 * forks. The child must finish within 20 s; the parent then ends the notification it stands for. */
#include "extra-util.h"
#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 3000 /* 64-byte blocks: three full 64 KiB pages and some */
static void *blocks[N];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: the owner allocated; 2: it may end */

static void *owner(void *arg) {
  for (int i = 0; i < N; i++) blocks[i] = malloc(64);
  pthread_mutex_lock(&mu);
  stage = 1;
  pthread_cond_broadcast(&cv);
  while (stage < 2) pthread_cond_wait(&cv, &mu); /* alive and idle: its heap is the child's orphan */
  pthread_mutex_unlock(&mu);
  return arg;
}

int main(void) {
  sm_test_name = "test-fork-notify";
  setvbuf(stdout, NULL, _IOLBF, 0);
  free(malloc(16)); /* the main thread has a heap of its own */
  pthread_t t;
  pthread_create(&t, NULL, owner, NULL);
  pthread_mutex_lock(&mu);
  while (stage < 1) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < N; i++)
    if (blocks[i] == NULL) abort();

  SECTION("fork during a remote free's notification of a full page: the child frees the page's other blocks and goes on") {
    sm_block_t *block = blocks[0];
    sm_segment_t *segment = smi_ptr_segment(block);
    sm_page_t *page = smi_segment_page_of(segment, block);
    sm_heap_t *heap = smi_page_heap(page);
    uintptr_t tf = atomic_load(&page->thread_free);
    CHECK(smi_tf_delay(tf) == SM_DELAY_USE && page->flags.x.in_full,
          "expected the first block's page to be full with delay state USE, seen state %d", (int)smi_tf_delay(tf));
    /* what free_remote_notify has done when it stops after its push */
    atomic_fetch_add(&smi_remote_notifying, 1);
    atomic_store(&page->thread_free, smi_tf_with_delay(tf, SM_DELAY_FREEING));
    sm_block_t *head = atomic_load(&heap->thread_delayed_free);
    do smi_block_set_next(page, block, head);
    while (!atomic_compare_exchange_weak(&heap->thread_delayed_free, &head, block));

    pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      for (int i = 1; i < N; i++) free(blocks[i]); /* remote frees into the orphan's pages */
      void *p = malloc(1000);                       /* and the child goes on */
      free(p);
      _exit(p != NULL ? 0 : 3);
    }
    CHECK(pid > 0, "fork failed");
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "expected the child to end normally, seen %s %d",
          WIFSIGNALED(status) ? "signal" : "exit status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) printf("      the child hung (20 s)\n");

    /* the parent ends the notification (back to NONE, as free_remote_notify would) */
    tf = atomic_load(&page->thread_free);
    while (!atomic_compare_exchange_weak(&page->thread_free, &tf, smi_tf_with_delay(tf, SM_DELAY_NONE))) {
    }
    atomic_fetch_sub(&smi_remote_notifying, 1);
    for (int i = 1; i < N; i++) free(blocks[i]);
  }
  pthread_mutex_lock(&mu);
  stage = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(t, NULL);
  return sm_test_summary();
}
