#!/bin/bash
# override-redis: redis-server with LD_PRELOAD=libshardmalloc.so on 127.0.0.1 and an unusual port,
# driven by redis-benchmark (bounded: 20000 requests, pipelined), then checked with redis-cli, then
# stopped by its PID.
. "$(dirname "$0")/common.sh"
need redis-server redis-server
need redis-cli redis-tools
need redis-benchmark redis-tools
port=$((16399 + RANDOM % 2000))
for try in 1 2 3 4 5; do # find a free port
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  port=$((16399 + RANDOM % 2000))
done
cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$port" "$@" </dev/null; }
LD_PRELOAD="$SM_LIB" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --dir "$tmp" --logfile "$tmp/redis.log" --protected-mode yes </dev/null &
pid=$!
cleanup_hooks+=("kill $pid 2>/dev/null; wait $pid 2>/dev/null")
for i in $(seq 1 100); do
  [ "$(cli ping 2>/dev/null)" = PONG ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
check "redis-server (pid $pid, port $port) answers PING" "PONG" "$(cli ping 2>&1)"
check_true "libshardmalloc is mapped into redis-server" loaded_in "$pid"
timeout 120 redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -P 16 -t lpush,lrange_100 -q </dev/null >"$tmp/bench.txt" 2>&1
rc=$?
sed 's/\r/\n/g' "$tmp/bench.txt" | grep -E "requests per second" | sed 's/^/      /'
check "redis-benchmark -n 20000 -P 16 -t lpush,lrange_100 exit status" "0" "$rc"
check_true "redis-benchmark reported LPUSH and LRANGE_100" \
  bash -c "sed 's/\r/\n/g' '$tmp/bench.txt' | grep -q '^LPUSH: .*requests per second' &&
           sed 's/\r/\n/g' '$tmp/bench.txt' | grep -q '^LRANGE_100.*requests per second'"
llen=$(cli llen mylist)
check_true "the list redis-benchmark filled: LLEN mylist ($llen) >= 20000" test "${llen:-0}" -ge 20000
check "SET" "OK" "$(cli set sm:key "$(printf 'v%.0s' {1..5000})")"
check "GET returns the 5000-byte value" "5000" "$(cli get sm:key | tr -d '\n' | wc -c)"
for i in $(seq 1 200); do echo "HSET sm:hash f$i $(printf 'x%.0s' $(seq 1 $((i % 50 + 1))))"; done | timeout 20 redis-cli -h 127.0.0.1 -p "$port" >/dev/null
check "HLEN after 200 HSETs" "200" "$(cli hlen sm:hash)"
check "DBSIZE" "3" "$(cli dbsize)"
check "INFO says the server is still up" "1" "$(cli info server | grep -c '^redis_version:')"
check_true "redis-server still running" kill -0 "$pid"
kill "$pid"
wait "$pid"
rc=$?
check "redis-server stopped by SIGTERM to its PID: exit status" "0" "$rc"
if [ $failures -ne 0 ]; then echo "--- redis log:"; tail -20 "$tmp/redis.log"; fi
finish
