-- retry: the attempt failed; schedule the job again after a delay, or bury it when it has used
-- its attempts.  active -> scheduled | dead
-- KEYS[1] active   KEYS[2] schedule   KEYS[3] dead   KEYS[4] tick   KEYS[5] metrics
-- ARGV[1] job key prefix, ARGV[2] job id, ARGV[3] fencing token, ARGV[4] delay ms,
-- ARGV[5] max attempts (attempts >= max buries the job), ARGV[6] error text
-- Returns 1 scheduled, 2 dead, 0 stale (token mismatch or not active), -1 gone.
local row = ARGV[1] .. ARGV[2]
local id = ARGV[2]
local fields = redis.call('HMGET', row, 'state', 'attempts')
if not fields[1] then return -1 end
if fields[1] ~= 'active' or fields[2] ~= ARGV[3] then return 0 end
local now = now_ms()
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', row, 'last_error', ARGV[6], 'failed_ms', now)
if tonumber(fields[2]) >= tonumber(ARGV[5]) then
  redis.call('HSET', row, 'state', 'dead')
  redis.call('ZADD', KEYS[3], now, id)
  redis.call('HINCRBY', KEYS[5], 'dead', 1)
  return 2
end
local at = now + tonumber(ARGV[4])
redis.call('HSET', row, 'state', 'scheduled')
redis.call('ZADD', KEYS[2], at, id)
local head = redis.call('ZRANGE', KEYS[2], 0, 0)
if head[1] == id then tick(KEYS[4]) end
redis.call('HINCRBY', KEYS[5], 'retried', 1)
return 1
