#!/bin/bash
# override-sqlite: the sqlite3 shell with LD_PRELOAD=libshardmalloc.so runs a scripted workload
# (tables, 200,000 rows, indexes, joins, sorting, window functions, JSON); its output must equal the
# glibc run's and the known answers.
. "$(dirname "$0")/common.sh"
need sqlite3 sqlite3
cat > "$tmp/work.sql" <<'SQL'
PRAGMA cache_size = -65536;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
INSERT INTO t SELECT i, i % 100, printf('name-%06d-%s', i, substr('abcdefghij', 1 + i % 10)), i * 0.5 FROM c;
CREATE INDEX t_grp ON t(grp, val);
CREATE TABLE g(grp INTEGER PRIMARY KEY, label TEXT);
INSERT INTO g SELECT DISTINCT grp, 'group ' || grp FROM t;
SELECT count(*), sum(id), sum(val) FROM t;
SELECT label, count(*), max(val) FROM t JOIN g USING (grp) WHERE grp IN (7, 42, 99) GROUP BY grp ORDER BY grp;
SELECT name FROM t ORDER BY name DESC LIMIT 3;
SELECT grp, rnk FROM (SELECT grp, rank() OVER (ORDER BY sum(val) DESC) AS rnk FROM t GROUP BY grp) WHERE rnk <= 2;
SELECT json_group_array(id) FROM (SELECT id FROM t WHERE id % 40000 = 0);
SELECT length(group_concat(name, ',')) FROM t;
UPDATE t SET name = upper(name) WHERE grp = 5;
DELETE FROM t WHERE grp > 90;
VACUUM;
SELECT count(*), count(DISTINCT grp), sum(length(name)) FROM t;
SQL
ref=$(sqlite3 "$tmp/ref.db" < "$tmp/work.sql" 2>&1)
out=$(preloaded sqlite3 "$tmp/sm.db" < "$tmp/work.sql" 2>&1)
check "sqlite3 output equals the glibc run ($(wc -l <<<"$ref") lines)" "$ref" "$out"
check "sqlite3: row count, sum(id), sum(val)" "200000|20000100000|10000050000.0" "$(head -1 <<<"$out")"
check "sqlite3: after the delete" "182000|91|$(sqlite3 "$tmp/ref.db" 'SELECT sum(length(name)) FROM t')" "$(tail -1 <<<"$out")"
check "sqlite3: integrity_check of the database written under shardmalloc" "ok" "$(preloaded sqlite3 "$tmp/sm.db" 'PRAGMA integrity_check')"
check_true "sqlite3's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" \
  bound_to_shardmalloc 'sqlite3' sqlite3 :memory: 'SELECT 1'
finish
