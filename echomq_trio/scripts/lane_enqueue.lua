-- lane_enqueue: admit jobs to a fair lane (a group such as a chat).  (none) -> pending (lane)
-- KEYS[1] emq:{q}:g:<group> (the lane; other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] group, ARGV[3] lane concurrency limit to set ('' keeps it),
-- ARGV[4] idempotency key ('' for none), ARGV[5] its TTL in ms,
-- then pairs ARGV[2k+4] job id, ARGV[2k+5] payload
-- With a key (sent with exactly one job): if emq:{q}:key:<key> exists the job is a duplicate
-- and nothing changes; otherwise the job is admitted and the key is set to its id with PX TTL,
-- so it is remembered for the TTL even after the job has finished.
-- Jobs of a lane are claimed in id (mint) order; lanes are served round-robin.
-- Returns one integer per job: 1 enqueued, 0 duplicate (nothing is changed).
local qp = ARGV[1]
local g = ARGV[2]
local guard = nil
if ARGV[4] ~= '' then
  if #ARGV ~= 7 then return redis.error_reply('ERR an idempotency key guards exactly one job') end
  guard = qp .. 'key:' .. ARGV[4]
  if redis.call('EXISTS', guard) == 1 then return {0} end
end
local now = now_ms()
redis.call('HSETNX', qp .. 'meta', 'created_ms', now)
if ARGV[3] ~= '' then redis.call('HSET', qp .. 'glimit', g, ARGV[3]) end
local out = {}
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', row, 'state', 'pending', 'attempts', 0, 'payload', ARGV[i + 1], 'group', g)
    redis.call('ZADD', KEYS[1], 0, id)
    emit(qp, 'enqueued', id, 'group', g)
    if guard then redis.call('SET', guard, id, 'PX', ARGV[5]) end
    out[#out + 1] = 1
  end
end
redis.call('SADD', qp .. 'groups', g)
ring_add(qp, g, now)
return out
