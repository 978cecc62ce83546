/* purge.c: the background purger, a thread that gives back memory nobody else would.
 *
 * Purging normally happens in each thread's own slow path. That fails for memory whose owner has
 * gone quiet: a thread that allocated a lot and sleeps while others free its blocks, pages
 * waiting out their purge delay, cached segments, abandoned segments whose blocks were freed
 * after their thread ended. While the process has two or more threads that allocate (or with
 * SHARDMALLOC_BACKGROUND_PURGE=2, always), a thread wakes every 100 ms and, for each heap
 * whose owner has not been in its slow path since the last look, *tries* the heap's slow-path
 * lock (smi_heap_collect_idle: full pages, purge list); then visits a few abandoned segments and
 * sweeps the segment cache. It never waits for a heap's lock, so it never delays an active thread
 * by more than a pointer swap (the abandoned list's lock, which everyone waits for); an owner that
 * wakes up may wait for one bounded collection of its own heap.
 * SHARDMALLOC_BACKGROUND_PURGE=0 turns it off (no thread is ever started).
 * A program that is single-threaded stays so: when the second-to-last allocating thread ends, it
 * does one last pass itself and stops and joins the purger before its own exit completes, so
 * after pthread_join the program has one thread again (unshare(CLONE_NEWUSER) needs that).
 * Except in a program that starts threads in rounds (the last such stop was less than a second
 * ago): there the last pass would purge the memory the next round's threads are about to adopt,
 * and they would fault it all in again (mstress: 100,000 page faults a run; 70,000 this way). The
 * purger then stays one more tick; if no thread has started by then, it does the last pass
 * itself and ends.
 * A process with one allocating thread among others that never allocate (redis: its background
 * threads) is not single-threaded, and its one heap has nobody to give back what it frees in a
 * burst before it goes quiet (a FLUSHALL kept all 18 MiB resident). So when that thread has
 * purges pending, or holds 4 segments or more, and no purger runs, its malloc slow path looks (at
 * most once a second, /proc/self/stat) whether the process has other threads, and if so starts
 * the purger, which ends by itself once the process is down to that thread (and the purger)
 * again. A free with purges pending looks too, but only marks the purger wanted for the next
 * malloc slow path: glibc calls free with its thread-stack lock held (pthread_join frees the
 * joined thread's TLS), and pthread_create takes that lock. Hence the segment count: a thread
 * whose heap grew takes a purger while it allocates, before a burst of frees that no malloc
 * follows. */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#define SM_PURGER_TICK_MS 100
#define SM_ROUNDS_WINDOW_MS 1000 /* two stops closer than this: threads come in rounds */

enum { PURGER_OFF, PURGER_WANTED, PURGER_STARTING, PURGER_RUNNING, PURGER_STOPPING };
static _Atomic(int) purger_state;
static pthread_t purger_thread;
static pthread_mutex_t purger_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t purger_wake = PTHREAD_COND_INITIALIZER;
static bool purger_stop; /* guarded by purger_mutex */
static uint64_t purger_linger_until; /* guarded by purger_mutex: 0, or when to end unless a thread starts */
static _Atomic(uint64_t) purger_last_stop_ms;
static _Atomic(sm_heap_t *) heaps_all; /* every heap, linked by all_next; append-only */
/* 0: not registered yet, 1: registered, -1: the kernel refused. Registered on first use, not when
 * the purger starts: registration takes milliseconds (25 ms seen), and a short program whose
 * threads ended meanwhile waited that long for the purger to be joined (cache-thrash-N: 14 ms a
 * run against 8.4 ms without a purger). */
static _Atomic(int) purger_barrier_state;
#define SM_LONE_LOOK_MS 1000
static _Atomic(bool) purger_lone;      /* started for a lone allocating thread (smi_purger_consider) */
static _Atomic(uint64_t) lone_look_at; /* when the thread count may be read again */

bool smi_purger_barrier(void) {
  int state = atomic_load_explicit(&purger_barrier_state, memory_order_relaxed);
  if (state == 0) {
    state = smi_os_barrier_init() ? 1 : -1;
    atomic_store_explicit(&purger_barrier_state, state, memory_order_relaxed);
  }
  return state > 0 && smi_os_barrier_all();
}

void smi_spin_lock_slow(_Atomic(bool) *lock) {
  for (unsigned spins = 0; atomic_exchange_explicit(lock, true, memory_order_acquire); spins++) {
    if (spins > 64) sched_yield();
  }
}

void smi_heaps_register(sm_heap_t *heap) {
  sm_heap_t *first = atomic_load_explicit(&heaps_all, memory_order_relaxed);
  do {
    heap->all_next = first;
  } while (!atomic_compare_exchange_weak_explicit(&heaps_all, &first, heap, memory_order_release, memory_order_relaxed));
}

sm_heap_t *smi_heaps_first(void) { return atomic_load_explicit(&heaps_all, memory_order_acquire); }

void smi_purger_want(void) {
  int expected = PURGER_OFF;
  if (smi_option(sm_option_background_purge) != 0) atomic_compare_exchange_strong(&purger_state, &expected, PURGER_WANTED);
}

/* fork: the purger must not be inside a heap when the address space is copied, or the child would
 * inherit a heap locked (and half-collected) by a thread it does not have. The prepare handler
 * waits out a tick in progress; a tick is bounded and waits for nothing, so this cannot deadlock
 * (unlike taking allocator locks in a prepare handler). */
static _Atomic(int) fork_pending; /* forks between prepare and parent: two threads may fork at once */
static _Atomic(int) purger_busy; /* ticks in progress: the purger's, or a fork child's own (below) */

void smi_purger_fork_prepare(void) {
  atomic_fetch_add(&fork_pending, 1);
  while (atomic_load(&purger_busy) != 0) sched_yield();
}
/* Work that a fork must not copy half done, by any thread (the purger's ticks; walks of the
 * abandoned list, which hold a segment off the list meanwhile: one forked then was on no list in
 * the child, never freed, until 2026-11-28): false, and nothing may be done, while a fork is
 * being prepared. Each side announces itself before it looks at the other's (sequentially
 * consistent), so one of them always sees the other. */
bool smi_fork_guard_enter(void) {
  atomic_fetch_add(&purger_busy, 1);
  if (!atomic_load(&fork_pending)) return true;
  atomic_fetch_sub(&purger_busy, 1);
  return false;
}
void smi_fork_guard_leave(void) { atomic_fetch_sub(&purger_busy, 1); }
void smi_purger_fork_parent(void) { atomic_fetch_sub(&fork_pending, 1); }
bool smi_purger_running(void) { return atomic_load_explicit(&purger_state, memory_order_relaxed) == PURGER_RUNNING; }

void smi_purger_fork_child(void) { /* it did not survive fork */
  atomic_store(&fork_pending, 0);
  atomic_store(&purger_busy, 0);
  atomic_store(&purger_state, PURGER_OFF);
  pthread_mutex_t fresh_mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
  purger_mutex = fresh_mutex;
  purger_wake = fresh_cond;
  purger_stop = false;
  purger_linger_until = 0;
  atomic_store(&purger_lone, false);
  atomic_store(&purger_barrier_state, 0); /* the child is a new process to the kernel: register again */
  for (sm_heap_t *heap = atomic_load(&heaps_all); heap != NULL; heap = heap->all_next) {
    smi_huge_fork_child(heap); /* its list of huge blocks: lock let go, back links mended */
    if (heap->kind != SM_HEAP_THREAD || heap->thread_id <= 1 || heap->tld == NULL || heap == smi_tls_backing) continue;
    heap->fork_orphan = true;
    atomic_store(&smi_read_mostly.fork_orphans, true);
  }
}

/* ---- a fork child's orphans: the heaps of the threads that did not survive the fork ----
 * Nothing ends those threads, so nothing abandons their segments, and the child cannot adopt the
 * heaps (design.md, fork). Blocks it frees there are remote frees that only the purger collects,
 * and a single-threaded child has no purger: it keeps all that memory for good. So such a child,
 * while no purger runs, does the purger's collection of its orphans itself every 1024 remote
 * frees: the pages those frees emptied go back (an orphan's bins keep their first pages, as the
 * purger leaves them). Nobody will take an orphan's unused pages again, so they are purged at once. */
void smi_purger_note_orphan_free(void) {
  static _Atomic(size_t) frees;
  if ((atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed) & 1023) != 1023 || smi_purger_running()) return;
  if (!smi_fork_guard_enter()) return; /* a fork in another thread waits this out */
  for (sm_heap_t *heap = atomic_load_explicit(&heaps_all, memory_order_acquire); heap != NULL; heap = heap->all_next) {
    if (!heap->fork_orphan || !smi_heap_trylock(heap)) continue; /* held at the fork: left as it is */
    smi_heap_collect_idle(heap);
    smi_segments_purge_expired(heap->tld, true);
    smi_heap_unlock(heap);
  }
  smi_segment_cache_sweep_due();
  smi_fork_guard_leave();
}

static void purger_tick(void) {
  sm_heap_t *self = smi_tls_heap;
  for (sm_heap_t *heap = atomic_load_explicit(&heaps_all, memory_order_acquire); heap != NULL; heap = heap->all_next) {
    if (heap == self) continue;
    size_t calls = atomic_load_explicit(&heap->slow_calls, memory_order_relaxed);
    if (calls != heap->purger_seen) { /* active since the last look: leave it alone */
      heap->purger_seen = calls;
      continue;
    }
    if (!smi_heap_trylock(heap)) continue;
    if (heap->thread_id > 1 && heap->tld != NULL) smi_heap_collect_idle(heap); /* a live thread's heap */
    smi_heap_unlock(heap);
  }
  smi_segments_visit_abandoned(SIZE_MAX, false);
  smi_segment_cache_sweep_due();
}

/* what the purger would have given back later: nobody else would (no lock held) */
static void purger_last_pass(void) {
  smi_segments_visit_abandoned(SIZE_MAX, true);
  smi_segment_cache_purge_all();
}

/* The purger does the last pass itself and ends (true), unless it is being stopped meanwhile
 * (then the stopper joins it). Called and returns with purger_mutex held. */
static bool purger_end_self(void) {
  pthread_mutex_unlock(&purger_mutex);
  if (smi_fork_guard_enter()) {
    purger_last_pass();
    smi_fork_guard_leave();
  }
  int state = PURGER_RUNNING;
  pthread_mutex_lock(&purger_mutex);
  /* cleared before OFF: a purger started for a lone thread right after keeps its flag (a stopper,
   * which the failed exchange below means, clears it too) */
  atomic_store(&purger_lone, false);
  if (!atomic_compare_exchange_strong(&purger_state, &state, PURGER_OFF)) return false; /* being stopped: joined */
  pthread_detach(pthread_self());
  return true;
}

/* A lingering purger whose tick has come: a thread has started since (keep running), or it ends.
 * One started for a lone allocating thread ends once the process has no other thread. */
static bool purger_linger_over(void) {
  if (atomic_load(&purger_lone) && smi_threads_live() <= 1 && smi_os_thread_count() <= 2) return purger_end_self();
  if (purger_linger_until == 0 || smi_os_now_ms() < purger_linger_until) return false;
  purger_linger_until = 0;
  if (smi_threads_live() >= 2) return false;
  return purger_end_self();
}

static void *purger_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "shardmalloc");
  pthread_mutex_lock(&purger_mutex);
  while (!purger_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += SM_PURGER_TICK_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&purger_wake, &purger_mutex, &until);
    if (purger_stop) break;
    pthread_mutex_unlock(&purger_mutex);
    if (smi_fork_guard_enter()) {
      purger_tick();
      smi_fork_guard_leave();
    }
    pthread_mutex_lock(&purger_mutex);
    if (purger_linger_over()) {
      pthread_mutex_unlock(&purger_mutex);
      if (smi_threads_live() >= 2) smi_purger_want(); /* one started just now: a new purger */
      return NULL;
    }
  }
  pthread_mutex_unlock(&purger_mutex);
  return NULL;
}

/* The process is down to one allocating thread: give back what the purger would have, then stop
 * it and wait until its thread is gone. Called by an ending thread (no lock held). */
void smi_purger_stop(void) {
  /* a thread inside pthread_create for it: wait (it holds nothing we need), then stop it; until
   * 2026-11-27 this returned, and that purger ran on with one thread left */
  while (atomic_load(&purger_state) == PURGER_STARTING) sched_yield();
  int state = PURGER_WANTED;
  if (atomic_compare_exchange_strong(&purger_state, &state, PURGER_OFF)) return; /* never started */
  uint64_t now = smi_os_now_ms(), last = atomic_exchange(&purger_last_stop_ms, now);
  if (state == PURGER_RUNNING && last != 0 && now - last < SM_ROUNDS_WINDOW_MS) { /* rounds: it lingers */
    pthread_mutex_lock(&purger_mutex);
    purger_linger_until = now + SM_PURGER_TICK_MS;
    pthread_mutex_unlock(&purger_mutex);
    if (atomic_load(&purger_state) == PURGER_OFF) purger_last_pass(); /* it ended just now */
    return;
  }
  if (state != PURGER_RUNNING || !atomic_compare_exchange_strong(&purger_state, &state, PURGER_STOPPING)) return;
  pthread_mutex_lock(&purger_mutex);
  purger_stop = true;
  pthread_cond_signal(&purger_wake);
  pthread_mutex_unlock(&purger_mutex);
  /* pthread_join is a cancellation point: a cancel pending in the ending thread must not take
   * effect here, inside the allocator's thread exit */
  int cancel_state;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  pthread_join(purger_thread, NULL);
  pthread_setcancelstate(cancel_state, NULL);
  atomic_store(&purger_lone, false);
  pthread_mutex_lock(&purger_mutex);
  purger_stop = false;
  purger_linger_until = 0;
  pthread_mutex_unlock(&purger_mutex);
  purger_last_pass();
  atomic_store(&purger_state, PURGER_OFF);
}

/* The end of a slow path, no lock held: start a wanted purger, or want one for a lone allocating
 * thread (top of the file). A free only marks it wanted, and the next malloc slow path starts it:
 * glibc calls free with its thread-stack lock held (pthread_join frees the thread's TLS), and
 * pthread_create takes that lock; no malloc runs under it. */
void smi_purger_consider(bool worth, bool may_start) {
  if (sm_likely(atomic_load_explicit(&purger_state, memory_order_relaxed) != PURGER_OFF)) {
    if (may_start) smi_purger_maybe_start();
    return;
  }
  if ((!worth && !smi_segment_cache_pending()) || smi_os_single_threaded()) return;
  uint64_t now = smi_os_now_ms(), at = atomic_load_explicit(&lone_look_at, memory_order_relaxed);
  if (now < at || smi_option(sm_option_background_purge) == 0 ||
      !atomic_compare_exchange_strong(&lone_look_at, &at, now + SM_LONE_LOOK_MS) || smi_os_thread_count() < 2)
    return;
  int expected = PURGER_OFF;
  atomic_store(&purger_lone, true);
  if (atomic_compare_exchange_strong(&purger_state, &expected, PURGER_WANTED) && may_start) smi_purger_maybe_start();
}

/* Called at the end of slow paths, with no lock held: pthread_create itself allocates (and a
 * nested call sees STARTING and returns). */
void smi_purger_maybe_start(void) {
  int expected = PURGER_WANTED;
  if (sm_likely(atomic_load_explicit(&purger_state, memory_order_relaxed) != PURGER_WANTED)) return;
  if (!atomic_compare_exchange_strong(&purger_state, &expected, PURGER_STARTING)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024); /* glibc carves static TLS out of it too */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* the purger inherits a full mask: signals are the program's */
  int saved = errno;
  bool ok = pthread_create(&purger_thread, &attr, purger_main, NULL) == 0;
  errno = saved;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  atomic_store(&purger_state, ok ? PURGER_RUNNING : PURGER_OFF);
}
