-- enqueue: admit jobs to pending, ready to claim.  (none) -> pending
-- KEYS[1] pending   KEYS[2] wake
-- ARGV[1] job key prefix, then pairs ARGV[2k] job id, ARGV[2k+1] payload
-- Returns one integer per job, in order: 1 enqueued, 0 duplicate (a row with that id exists;
-- nothing is changed).
local prefix = ARGV[1]
local out = {}
local added = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = prefix .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', row, 'state', 'pending', 'attempts', 0, 'payload', ARGV[i + 1])
    redis.call('ZADD', KEYS[1], 0, id)
    added = added + 1
    out[#out + 1] = 1
  end
end
wake(KEYS[2], added)
return out
