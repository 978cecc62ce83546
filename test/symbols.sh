#!/bin/bash
# symbols: every name a drop-in malloc must export (DROPIN 13) is a defined, exported function of
# libshardmalloc.so (checked with nm -D) and is defined in shardmalloc.o and libshardmalloc.a (for
# the static override); the shared library uses initial-exec TLS only (DROPIN 14: no
# __tls_get_addr, STATIC_TLS flag) and the local-dynamic build does not need static TLS.
# usage: symbols.sh libshardmalloc.so shardmalloc.o libshardmalloc.a libshardmalloc-ldtls.so
set -u
so=$1 obj=$2 ar=$3 ldtls=${4:-}
if ! command -v nm >/dev/null || ! command -v readelf >/dev/null; then
  echo "symbols: SKIPPED: nm/readelf (binutils) not installed"; exit 77
fi
checks=0 failures=0
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  checks=$((checks + 1))
  if "$@"; then return 0; fi
  failures=$((failures + 1))
  echo "FAIL $what" >&2
  return 1
}
section_ok() { printf 'ok    %-58s %s checks\n' "$1" "$2"; }

c_names="malloc free calloc realloc reallocarray aligned_alloc posix_memalign memalign valloc pvalloc
  malloc_usable_size free_sized free_aligned_sized cfree"
libc_names="__libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign __libc_valloc __libc_pvalloc
  __libc_mallopt __libc_mallinfo"
sm_names="sm_malloc sm_calloc sm_realloc sm_free sm_malloc_small sm_zalloc sm_mallocn sm_reallocn sm_reallocf
  sm_usable_size sm_good_size sm_malloc_aligned sm_zalloc_aligned sm_calloc_aligned sm_realloc_aligned
  sm_malloc_aligned_at sm_strdup sm_strndup sm_realpath sm_version sm_collect sm_check_owned
  sm_rezalloc sm_recalloc sm_expand sm_zalloc_small sm_posix_memalign sm_aligned_alloc sm_reallocarr
  sm_heap_new sm_heap_delete sm_heap_destroy sm_heap_set_default sm_heap_malloc sm_heap_visit_blocks
  sm_option_get sm_option_set sm_stats_print_out sm_stats_get_json sm_process_info
  sm_register_deferred_free sm_thread_done sm_process_done sm_is_redirected sm_reserve_os_memory
  sm_reserve_os_memory_ex sm_manage_os_memory_ex sm_heap_new_in_arena sm_arena_area
  sm_new sm_new_nothrow sm_new_aligned sm_heap_alloc_new"
# operator new/delete: plain, array, nothrow, sized, aligned, aligned+nothrow, sized+aligned
cxx_names="_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
  _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
  _ZnwmSt11align_val_t _ZnamSt11align_val_t _ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t
  _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t
  _ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t"

# defined, exported symbols of the shared library: type T/W (function) or i (ifunc)
dyn=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TWi]$/ {print $3}' | sed 's/@.*//' | sort -u)
declare -A label=([c_names]="the standard C names" [libc_names]="the glibc __libc_* entry points"
                  [sm_names]="the sm_ API" [cxx_names]="every C++ operator new/delete")
for group in c_names libc_names sm_names cxx_names; do
  n=0 before=$failures
  for s in ${!group}; do
    n=$((n + 1))
    check "$(basename "$so") exports $s: expected a defined function, not found in nm -D" grep -qx -- "$s" <<<"$dyn"
  done
  [ $failures -eq $before ] && section_ok "libshardmalloc.so exports ${label[$group]} ($n names)" $n \
    || printf 'FAIL  %-58s\n' "libshardmalloc.so exports ${label[$group]}"
done

# the object file and the archive define the standard names (static override)
for f in "$obj" "$ar"; do
  if [ ! -f "$f" ]; then check "$f exists" false; continue; fi
  defs=$(nm --defined-only "$f" 2>/dev/null | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u)
  n=0 before=$failures
  for s in $c_names; do
    n=$((n + 1))
    check "$(basename "$f") defines $s (global): not found" grep -qx -- "$s" <<<"$defs"
  done
  [ $failures -eq $before ] && section_ok "$(basename "$f") defines the standard names" $n \
    || printf 'FAIL  %-58s\n' "$(basename "$f") defines the standard names"
done

# TLS model (DROPIN 14)
before=$failures
if readelf -lW "$so" | grep -q '^ *TLS '; then
  check "libshardmalloc.so uses TLS, so it must be initial-exec: expected FLAGS STATIC_TLS in the dynamic section" \
    bash -c "readelf -dW '$so' | grep -q STATIC_TLS"
fi
check "libshardmalloc.so must not import __tls_get_addr (general/local-dynamic TLS can call malloc)" \
  bash -c "! nm -D --undefined-only '$so' | grep -q __tls_get_addr"
[ $failures -eq $before ] && section_ok "libshardmalloc.so: initial-exec TLS only" 2 \
  || printf 'FAIL  %-58s\n' "libshardmalloc.so: initial-exec TLS only"
if [ -n "$ldtls" ]; then
  before=$failures
  check "the local-dynamic build must not need static TLS (no STATIC_TLS flag)" \
    bash -c "! readelf -dW '$ldtls' | grep -q STATIC_TLS"
  [ $failures -eq $before ] && section_ok "local-dynamic TLS build: no static TLS needed" 1 \
    || printf 'FAIL  %-58s\n' "local-dynamic TLS build: no static TLS needed"
fi
# soname
before=$failures
check "libshardmalloc.so has a SONAME" bash -c "readelf -dW '$so' | grep -q 'SONAME.*libshardmalloc'"
[ $failures -eq $before ] && section_ok "libshardmalloc.so has a soname" 1

if [ $failures -ne 0 ]; then
  echo "symbols: FAILED: $failures of $checks checks failed"; exit 1
fi
echo "symbols: all $checks checks passed"
