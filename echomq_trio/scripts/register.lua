-- register: a recurring schedule under a caller-chosen name. A live name is left exactly as it
-- is (a service re-registers every schedule at boot), so registering is idempotent.
-- transition: (none) -> registered
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] name, ARGV[3] every ms, ARGV[4] template payload,
-- ARGV[5] first run in ms from the server's now, ARGV[6] lane group ('' for flat pending)
-- Returns {'registered', first run in server ms} or {'exists', next run in server ms (-1 when
-- the record has no entry)}.
-- fields: outcome, at
-- cost: O(log n)
local qp = ARGV[1]
local name = ARGV[2]
local record = qp .. KEY.registration .. name
if redis.call('EXISTS', record) == 1 then
  return {'exists', tonumber(redis.call('ZSCORE', KEYS[1], name) or '-1')}
end
local now = now_ms()
created(qp, now)
local at = now + tonumber(ARGV[5])
redis.call('HSET', record, 'every_ms', ARGV[3], 'template', ARGV[4], 'group', ARGV[6],
  'registered_ms', now)
redis.call('ZADD', KEYS[1], at, name)
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == name then tick(qp) end
emit(qp, 'registered', name, 'at', at)
return {'registered', at}
