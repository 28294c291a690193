-- claim: lease up to a batch of pending jobs, oldest id first.  pending -> active
-- KEYS[1] pending   KEYS[2] active
-- ARGV[1] job key prefix, ARGV[2] batch, ARGV[3] lease ms
-- Each claim raises the job's attempts by one; that number is the fencing token that ack,
-- retry, extend and release must present. The lease deadline (server ms) is the job's score in
-- active. Returns {lease deadline, then per job: id, payload, attempts}.
local prefix = ARGV[1]
local deadline = now_ms() + tonumber(ARGV[3])
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[2]))
local out = {deadline}
for i = 1, #popped, 2 do
  local id = popped[i]
  local row = prefix .. id
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  redis.call('HSET', row, 'state', 'active')
  redis.call('ZADD', KEYS[2], deadline, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', row, 'payload')
  out[#out + 1] = attempts
end
return out
