-- enqueue: admit jobs to the flat pending set, ready to claim.  (none) -> pending
-- KEYS[1] emq:{q}:pending (routes the call; other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix emq:{q}:, then pairs ARGV[2k] job id, ARGV[2k+1] payload
-- Returns one integer per job, in order: 1 enqueued, 0 duplicate (a row with that id exists;
-- nothing is changed).
local qp = ARGV[1]
local out = {}
local added = 0
redis.call('HSETNX', qp .. 'meta', 'created_ms', now_ms())
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', row, 'state', 'pending', 'attempts', 0, 'payload', ARGV[i + 1])
    redis.call('ZADD', KEYS[1], 0, id)
    emit(qp, 'enqueued', id)
    added = added + 1
    out[#out + 1] = 1
  end
end
wake(qp, added)
return out
