-- release: a stopping worker hands back jobs it holds but did not finish. They return to
-- pending (or the head of their lane) at once and the interrupted attempt is not counted.
-- active -> pending
-- KEYS[1] emq:{q}:active (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, then pairs ARGV[2k] job id, ARGV[2k+1] fencing token (lease number)
-- Jobs whose token no longer matches (reaped and claimed elsewhere) are left alone.
-- Returns the number released.
local qp = ARGV[1]
local now = now_ms()
local released = 0
local flat = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  local f = redis.call('HMGET', row, 'state', 'lease', 'group')
  if f[1] == 'active' and f[2] == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', row, 'attempts', -1)
    redis.call('HSET', row, 'state', 'pending')
    emit(qp, 'released', id)
    if f[3] then
      lane_push(qp, f[3], id, now)
      lane_done(qp, f[3], now)
    else
      redis.call('ZADD', qp .. 'pending', 0, id)
      flat = flat + 1
    end
    released = released + 1
  end
end
wake(qp, flat)
return released
