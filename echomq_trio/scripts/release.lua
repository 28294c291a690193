-- release: a stopping worker hands back jobs it holds but did not finish. They return to
-- pending at once and the interrupted attempt is not counted.  active -> pending
-- KEYS[1] active   KEYS[2] pending   KEYS[3] wake
-- ARGV[1] job key prefix, then pairs ARGV[2k] job id, ARGV[2k+1] fencing token
-- Jobs whose token no longer matches (reaped and claimed elsewhere) are left alone.
-- Returns the number released.
local prefix = ARGV[1]
local released = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = prefix .. id
  local fields = redis.call('HMGET', row, 'state', 'attempts')
  if fields[1] == 'active' and fields[2] == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', row, 'attempts', -1)
    redis.call('HSET', row, 'state', 'pending')
    redis.call('ZADD', KEYS[2], 0, id)
    released = released + 1
  end
end
wake(KEYS[3], released)
return released
