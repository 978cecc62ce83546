#!/bin/bash
# pagesize: the library on kernels with larger pages than this machine's (aarch64 kernels run with
# 16 KiB or 64 KiB pages). The release, secure and debug builds are compiled here, linked
# statically into regular test programs together with test/pagesize-model.c, which stands in for
# the memory system calls of such a kernel (getauxval(AT_PAGESZ) says 16 or 64 KiB; a misaligned
# address is EINVAL; lengths round up to whole pages), and the programs run at both sizes.
# Until 2026-11-26 calloc could return memory that was not zero there (a cached segment's first
# OS page was taken as purged), and the secure build's 4 KiB guard pages covered 12 KiB of blocks
# on 16 KiB pages (a crash at the first allocation).
# A few memory-return cases of extra/test-purge.c run too (a purge reaches whole OS pages only),
# and pagesize-guards.c checks the secure build's guard pages: 16 KiB ones on 16 KiB pages (until
# 2026-11-27 there were none there), none on 64 KiB pages.
# Sections that cannot pass in a static program (dlsym) or that check release-only promises
# (exact usable sizes, realloc in place: see extra/suite-preload.sh) may fail; nothing else may.
# usage: pagesize.sh SOURCE-DIR WORK-DIR CC
set -u
# shellcheck source=sections.sh
. "$(dirname "$0")/sections.sh"
src=$1 work=$2 cc=$3
rm -rf "${work:?}" && mkdir -p "$work" # no program of an earlier run is reused
failures=0 runs=0
wrap="-Wl,--wrap=mmap,--wrap=munmap,--wrap=mprotect,--wrap=madvise,--wrap=mremap,--wrap=getauxval"
allowed_any="free_sized, free_aligned_sized and cfree are exported and work"
allowed_debug="sm_malloc / sm_free / sm_usable_size / sm_good_size"

for config in release secure debug; do
  case $config in
    release) defs="" progs="test-api test-smapi test-fuzz test-heap test-stress test-huge-threads
               extra/test-purge@delay-0@SHARDMALLOC_PURGE_DELAY=0 extra/test-purge@madv-free@SHARDMALLOC_PURGE_DECOMMITS=0
               extra/test-purge@huge-split@SHARDMALLOC_PURGE_DELAY=60000 extra/test-purge@huge-realloc
               extra/test-purge@idle-heap" ;;
    secure) defs="-DSM_SECURE=1" progs="test-smapi test-fuzz test-huge-threads pagesize-guards" ;;
    debug) defs="-DSM_DEBUG=1" progs="test-smapi test-fuzz" ;;
  esac
  obj="$work/shardmalloc-$config.o"
  # shellcheck disable=SC2086
  if ! out=$("$cc" -std=c11 -O2 -Wall -Wextra -Werror $defs -I"$src/include" -I"$src/src" -c "$src/src/unity.c" -o "$obj" 2>&1); then
    echo "FAIL  $config: does not compile"; echo "$out" | head -20
    failures=$((failures + 1)); continue
  fi
  for spec in $progs; do # PROGRAM[@ARGUMENT[@ENV=VALUE]]
    IFS=@ read -r path arg env <<<"$spec"
    prog=$(basename "$path")${arg:+ $arg}
    exe="$work/$(basename "$path")-$config"
    if [ ! -x "$exe" ] &&
       ! out=$("$cc" -std=c11 -O2 -fno-builtin -w -DSM_TEST_SM_API=1 -I"$src/include" -I"$src/test" "$src/test/$path.c" \
                 "$src/test/pagesize-model.c" "$obj" -o "$exe" $wrap -static -lpthread -lm 2>&1); then
      echo "FAIL  $prog ($config): does not link statically"; echo "$out" | head -20
      failures=$((failures + 1)); continue
    fi
    allowed=$allowed_any
    [ $config = debug ] && allowed="$allowed|$allowed_debug"
    sizes="16384 65536"
    [ $config = debug ] && sizes=65536 # its invariant checks, once
    for size in $sizes; do
      runs=$((runs + 1))
      log="$work/$(basename "$path")${arg:+-$arg}-$config-$size.log"
      # shellcheck disable=SC2086
      env SM_TEST_PAGE_SIZE=$size $env "$exe" $arg >"$log" 2>&1
      rc=$?
      bad=0
      sections_check "$log" $rc "$allowed" "($prog, $config, $((size / 1024)) KiB pages)" || bad=1
      if [ $bad = 0 ]; then
        note=$(tail -1 "$log")
        [ $rc -ne 0 ] && note="passed but for the sections a static or padded build cannot pass"
        echo "ok    $prog ($config, $((size / 1024)) KiB pages): $note"
      else
        failures=$((failures + 1))
        grep -E -B1 -A2 '^FAIL ' "$log" | head -12 | sed 's/^/  | /'
      fi
    done
  done
done
if [ $failures -gt 0 ]; then
  echo "pagesize: FAILED: $failures of $runs runs failed"
  exit 1
fi
echo "pagesize: all $runs runs passed"
