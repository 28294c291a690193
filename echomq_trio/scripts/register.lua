-- register: a recurring schedule under a caller-chosen name. A live name is left exactly as it
-- is (a service re-registers every schedule at boot), so registering is idempotent.
-- (none) -> registered
-- KEYS[1] emq:{q}:repeat (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] name, ARGV[3] every ms, ARGV[4] template payload,
-- ARGV[5] first run in ms from the server's now, ARGV[6] lane group ('' for flat pending)
-- Returns {1 registered | 0 exists, next run in server ms}.
local qp = ARGV[1]
local name = ARGV[2]
local row = qp .. 'repeat:' .. name
if redis.call('EXISTS', row) == 1 then
  return {0, tonumber(redis.call('ZSCORE', KEYS[1], name) or '-1')}
end
local now = now_ms()
redis.call('HSETNX', qp .. 'meta', 'created_ms', now)
local at = now + tonumber(ARGV[5])
redis.call('HSET', row, 'every_ms', ARGV[3], 'template', ARGV[4], 'group', ARGV[6],
  'registered_ms', now)
redis.call('ZADD', KEYS[1], at, name)
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == name then tick(qp) end
emit(qp, 'registered', name, 'at', at)
return {1, at}
