#!/bin/bash
# override-git: git with LD_PRELOAD=libshardmalloc.so: init a repository, commit files, branch,
# merge, log, gc and fsck; the results must be right.
. "$(dirname "$0")/common.sh"
need git git
export GIT_CONFIG_NOSYSTEM=1 HOME="$tmp/home" GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
mkdir -p "$HOME" "$tmp/repo"
cd "$tmp/repo"
g() { preloaded git "$@"; }
g init -q -b main . && g config user.email t@example.com && g config user.name tester
for i in $(seq 1 300); do
  mkdir -p "dir$((i % 10))"
  seq 1 $((i * 10)) | sed "s/^/file $i line /" > "dir$((i % 10))/f$i.txt"
done
g add -A && g commit -q -m "first: 300 files"
check "first commit lists 300 files" "300" "$(g ls-files | wc -l)"
g checkout -q -b topic
for i in $(seq 1 300 | awk 'NR % 6 == 0'); do echo "topic change" >> "dir$((i % 10))/f$i.txt"; done
g commit -q -am "topic: 50 files changed"
g checkout -q main
for i in $(seq 1 40); do echo "main $i" > "new$i.txt"; done
g add -A && g commit -q -m "main: 40 new files"
g merge -q --no-edit topic
check "commits in the log after the merge" "4" "$(g log --oneline | wc -l)"
check "files after the merge" "340" "$(g ls-files | wc -l)"
check "a merged file's last line" "topic change" "$(tail -1 dir6/f6.txt)"
check "blob read back through git show" "file 17 line 170" "$(g show HEAD:dir7/f17.txt | tail -1)"
check "diff --stat of the merge (files changed)" "50" "$(g diff --stat HEAD~1 HEAD | grep -c '|')"
g gc -q >/dev/null 2>&1
check "git gc exit status" "0" "$?"
g fsck --full --strict >/dev/null 2>&1
check "git fsck --full after gc" "0" "$?"
check "log after gc" "4" "$(g log --oneline | wc -l)"
check "git grep of the merged tree (files containing 'topic change')" "50" "$(g grep -l 'topic change' HEAD | wc -l)"
check_true "git's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" bound_to_shardmalloc 'git' git status
finish
