-- enqueue: admit jobs to the flat pending set, ready to claim.  (none) -> pending
-- KEYS[1] emq:{q}:pending (routes the call; other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] idempotency key ('' for none), ARGV[3] its TTL in ms,
-- then pairs ARGV[2k+2] job id, ARGV[2k+3] payload
-- With a key (sent with exactly one job): if emq:{q}:key:<key> exists the job is a duplicate
-- and nothing changes; otherwise the job is admitted and the key is set to its id with PX TTL,
-- so it is remembered for the TTL even after the job has finished.
-- Returns one integer per job, in order: 1 enqueued, 0 duplicate (a row with that id exists,
-- or the key was used; nothing is changed).
local qp = ARGV[1]
local out = {}
local added = 0
local guard = nil
if ARGV[2] ~= '' then
  if #ARGV ~= 5 then return redis.error_reply('ERR an idempotency key guards exactly one job') end
  guard = qp .. 'key:' .. ARGV[2]
  if redis.call('EXISTS', guard) == 1 then return {0} end
end
redis.call('HSETNX', qp .. 'meta', 'created_ms', now_ms())
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', row, 'state', 'pending', 'attempts', 0, 'payload', ARGV[i + 1])
    redis.call('ZADD', KEYS[1], 0, id)
    emit(qp, 'enqueued', id)
    if guard then redis.call('SET', guard, id, 'PX', ARGV[3]) end
    added = added + 1
    out[#out + 1] = 1
  end
end
wake(qp, added)
return out
