-- replay: give a dead job a fresh start in pending (or its lane), attempts reset to 0; its last
-- error is kept for the record.  dead -> pending
-- KEYS[1] emq:{q}:dead (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] job id
-- Returns 1 replayed, 0 not dead, -1 gone.
local qp = ARGV[1]
local id = ARGV[2]
local row = qp .. 'job:' .. id
local f = redis.call('HMGET', row, 'state', 'group')
if not f[1] then return -1 end
if f[1] ~= 'dead' then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', row, 'state', 'pending', 'attempts', 0)
emit(qp, 'replayed', id)
if f[2] then
  lane_push(qp, f[2], id, now_ms())
else
  redis.call('ZADD', qp .. 'pending', 0, id)
  wake(qp, 1)
end
return 1
