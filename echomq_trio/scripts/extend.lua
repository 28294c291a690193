-- extend: renew the leases of jobs still being worked on.
-- transition: active -> active
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] lease ms, then pairs ARGV[2k+1] job id, ARGV[2k+2]
-- token (lease number)
-- Returns {new deadline in server ms, then the ids whose lease was lost (token mismatch, not
-- active, or gone)}.
-- fields: deadline, lost...
-- cost: O(jobs extended), each O(log n)
local qp = ARGV[1]
local deadline = now_ms() + tonumber(ARGV[2])
if tonumber(redis.call('HGET', qp .. KEY.meta, 'lease_max') or '0') < tonumber(ARGV[2]) then
  redis.call('HSET', qp .. KEY.meta, 'lease_max', ARGV[2])  -- the longest lease (claim.lua)
end
local out = {deadline}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if held(qp, id, ARGV[i + 1]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  else
    out[#out + 1] = id
  end
end
return out
