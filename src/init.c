/* init.c: process and thread lifecycle.
 *
 * Every thread starts with smi_tls_heap == &smi_heap_empty, whose direct table points at an empty
 * page, so its first malloc falls into the generic path, which calls smi_thread_init. That makes
 * the very first malloc of the process (from the dynamic loader or libc start-up, before any
 * constructor) work: the first thread uses a static heap and nothing here allocates before the
 * thread's heap is in place. A pthread key's destructor abandons the heap when the thread ends.
 * TLS is initial-exec (no __tls_get_addr, which could itself call malloc). */
#include "internal.h"

#include <pthread.h>
#include <sched.h>

SM_TLS sm_heap_t *smi_tls_heap = &smi_heap_empty;
SM_TLS uintptr_t smi_tls_tid = 1;
SM_TLS sm_heap_t *smi_tls_backing;

sm_page_t smi_page_empty;
sm_heap_t smi_heap_empty = {
    .pages_direct = {[0 ... SM_DIRECT_COUNT - 1] = &smi_page_empty},
    .thread_id = 1,
    .retired_min = SM_BIN_COUNT,
    .retired_next = SIZE_MAX,
};
smi_read_mostly_t smi_read_mostly;

static sm_thread_data_t thread_data_main; /* the first thread's heap: no allocation needed */
static _Atomic(bool) thread_data_main_taken;
static _Atomic(uintptr_t) next_thread_id = 2;
static _Atomic(size_t) live_heaps; /* threads with a heap: the purger runs while there are two */
static pthread_key_t thread_key;

/* ---- process ---- */

enum { PROCESS_NONE, PROCESS_STARTING, PROCESS_READY };
static _Atomic(int) process_state;
static _Atomic(int) process_late_state;

/* Everything that must be in place before any heap exists; allocates nothing. */
void smi_process_init(void) {
  int state = atomic_load_explicit(&process_state, memory_order_acquire);
  if (sm_likely(state == PROCESS_READY)) return;
  if (state == PROCESS_NONE &&
      atomic_compare_exchange_strong_explicit(&process_state, &state, PROCESS_STARTING, memory_order_acq_rel,
                                              memory_order_acquire)) {
    uint64_t random[2]; /* one system call for both: every process pays it */
    smi_os_random_bytes(random, sizeof random);
    smi_os_init(random[1]);
    smi_read_mostly.secret = random[0] | 1;
#if SM_SECURE
    smi_page_shuffle_init(smi_read_mostly.secret);
    smi_free_options_update();
#endif
    smi_options_init();
#if SM_SECURE
    if (!smi_guard_pages() && smi_option(sm_option_verbose))
      smi_message("secure build on %zu KiB OS pages: no guard pages (they need pages of at most 16 KiB); the other checks stay",
                  smi_os_page_size() / 1024);
#endif
    if (smi_option(sm_option_show_stats)) smi_os_stderr_keep(); /* printed at exit */
    smi_stats_init();
    smi_arenas_init(); /* after the options: reserve_os_memory, reserve_huge_os_pages, NUMA */
#if SM_DEBUG
    smi_sizeclass_check();
#endif
    atomic_store_explicit(&process_state, PROCESS_READY, memory_order_release);
    return;
  }
  while (atomic_load_explicit(&process_state, memory_order_acquire) != PROCESS_READY) sched_yield();
}

static void thread_done(void *value);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);


/* Registration that may itself call malloc (pthread_atfork allocates): done once a heap exists. */
static void process_init_late(void) {
  int state = PROCESS_NONE;
  if (atomic_compare_exchange_strong(&process_late_state, &state, PROCESS_STARTING)) {
    pthread_key_create(&thread_key, thread_done);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atomic_store_explicit(&process_late_state, PROCESS_READY, memory_order_release);
    return;
  }
  /* another thread is registering: the key must exist before we use it */
  while (atomic_load_explicit(&process_late_state, memory_order_acquire) != PROCESS_READY) sched_yield();
}

__attribute__((constructor)) static void process_constructor(void) {
  if (smi_tls_heap == &smi_heap_empty) smi_thread_init();
}

/* ---- thread data: heap + tld, from a small pool ---- */

static _Atomic(bool) pool_lock;
static sm_heap_t *pool_first; /* guarded by pool_lock; heaps linked through pool_next */

static void pool_acquire(void) { smi_spin_lock(&pool_lock); }
static void pool_release(void) { smi_spin_unlock(&pool_lock); }

/* fork: a lock that another thread held at the fork would stay held in the child, which has only
 * the forking thread, and what it guards would be half changed. So the locks the child may need
 * are taken before the fork and let go on both sides: those of the heaps made with sm_heap_new
 * (not the threads' own heaps: see smi_heaps_fork_lock), then the pool's and the abandoned list's
 * (held while a heap's lock is, never the other way round). The purger is out of its tick first:
 * it holds heap locks without waiting for them. */
static void fork_prepare(void) {
  smi_purger_fork_prepare();
  smi_heaps_fork_lock();
  pool_acquire();
  smi_abandoned_lock_acquire();
}

static void fork_parent(void) {
  smi_abandoned_lock_release();
  pool_release();
  smi_heaps_fork_unlock(false);
  smi_purger_fork_parent();
}

static void fork_child(void) {
  /* only the forking thread lives on: the others' heaps are no longer live threads' (until
   * 2026-11-27 they stayed counted, and a purger the child started never stopped) */
  atomic_store(&live_heaps, smi_tls_backing != NULL ? 1 : 0);
  smi_abandoned_lock_release();
  pool_release();
  smi_heaps_fork_unlock(true);
#if SM_SECURE
  smi_quarantines_fork_child();
#endif
  smi_purger_fork_child();
}

uintptr_t smi_new_owner_id(void) { return atomic_fetch_add_explicit(&next_thread_id, 1, memory_order_relaxed); }

sm_thread_data_t *smi_thread_data_alloc(void) {
  bool expected = false;
  if (atomic_compare_exchange_strong(&thread_data_main_taken, &expected, true)) return &thread_data_main;
  pool_acquire();
  sm_heap_t *heap = pool_first;
  if (heap != NULL) pool_first = heap->pool_next;
  pool_release();
  if (heap != NULL) return (sm_thread_data_t *)heap;
  sm_thread_data_t *td = smi_os_alloc_aligned(smi_align_up(sizeof(sm_thread_data_t), SM_OS_PAGE_SIZE), SM_OS_PAGE_SIZE, 0);
  return td;
}

/* kept for the next thread rather than unmapped: thread churn stays cheap */
void smi_thread_data_free(sm_thread_data_t *td) {
  if (td == &thread_data_main) {
    atomic_store(&thread_data_main_taken, false);
    return;
  }
  pool_acquire();
  td->heap.pool_next = pool_first;
  pool_first = &td->heap;
  pool_release();
}

_Static_assert(offsetof(sm_thread_data_t, heap) == 0, "pool links thread data through its heap");

/* ---- threads ---- */

sm_heap_t *smi_thread_init(void) {
  if (smi_tls_heap != &smi_heap_empty) return smi_tls_heap;
  smi_process_init();
  sm_thread_data_t *td = smi_thread_data_alloc();
  if (td == NULL) return NULL;
  /* the purger may look at a pooled heap at any time: set it up under the heap's lock */
  bool fresh = td->heap.tld == NULL;
  if (!fresh) smi_heap_lock(&td->heap);
  memset(&td->tld, 0, sizeof td->tld);
  uintptr_t tid = smi_new_owner_id();
  smi_heap_init(&td->heap, &td->tld, tid);
  if (fresh) smi_heaps_register(&td->heap);
  else smi_heap_unlock(&td->heap);
  smi_tls_heap = &td->heap;
  smi_tls_backing = &td->heap;
  smi_tls_tid = tid;
  smi_count_add(SM_COUNT_THREADS, 1);
  /* from here on this thread can allocate, so the calls below may re-enter malloc */
  process_init_late();
  if (atomic_fetch_add(&live_heaps, 1) + 1 >= 2 || smi_option(sm_option_background_purge) == 2) smi_purger_want();
  pthread_setspecific(thread_key, td);
  return &td->heap;
}

size_t smi_threads_live(void) { return atomic_load_explicit(&live_heaps, memory_order_relaxed); }

/* pthread key destructor: the thread is ending */
static void thread_done(void *value) {
  sm_thread_data_t *td = value;
  if (td == NULL || smi_tls_backing != &td->heap) return;
  smi_heaps_disown(td->heap.thread_id); /* heaps it made outlive it */
  smi_tls_heap = &td->heap;
  smi_count_add(SM_COUNT_THREADS, -1);
#if SM_SECURE
  smi_quarantine_flush(&td->heap);
#endif
  smi_heap_lock(&td->heap);
  smi_heap_abandon(&td->heap);
  td->heap.thread_id = 0; /* dead: the purger skips it */
  smi_heap_unlock(&td->heap);
  if (atomic_fetch_sub(&live_heaps, 1) - 1 <= 1 && smi_option(sm_option_background_purge) != 2) smi_purger_stop();
  smi_tls_heap = &smi_heap_empty;
  smi_tls_backing = NULL;
  smi_tls_tid = 1;
  smi_thread_data_free(td);
}

/* ---- explicit lifecycle (all of it also happens on its own) ---- */

void sm_process_init(void) {
  smi_process_init();
  smi_thread_init();
}

void sm_thread_init(void) { smi_thread_init(); }

/* the thread is done allocating: give its heap up now (a later allocation starts a fresh one) */
void sm_thread_done(void) {
  sm_heap_t *heap = smi_tls_backing;
  if (heap == NULL) return;
  pthread_setspecific(thread_key, NULL);
  thread_done((sm_thread_data_t *)heap);
}

/* Process end (also run as a destructor): with destroy_on_exit, give back every piece of memory
 * that holds no live block (the calling thread's empty pages, abandoned segments, the cache). Live
 * blocks stay mapped: later destructors of other libraries may still use or free them. */
void sm_process_done(void) {
  static _Atomic(bool) done;
  /* an instance that never mapped memory (a second copy of the library in the process, say one
   * linked while a debug build is preloaded) has nothing to give back or report */
  if (!atomic_load_explicit(&smi_mem_ever, memory_order_relaxed) || atomic_exchange(&done, true)) return;
  if (smi_option(sm_option_destroy_on_exit)) sm_collect(true);
  smi_stats_print_at_exit();
}

__attribute__((destructor)) static void process_destructor(void) { sm_process_done(); }
