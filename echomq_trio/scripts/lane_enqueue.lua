-- lane_enqueue: admit jobs to a fair lane (a group such as a chat).
-- transition: (none) -> pending (lane)
-- KEYS[1] emq:{q}:g:<group> (the lane; the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] group, ARGV[3] lane concurrency limit to set ('' keeps
-- it), ARGV[4] idempotency key ('' for none), ARGV[5] its TTL in ms,
-- then pairs ARGV[2k+4] job id, ARGV[2k+5] payload
-- With a key (sent with exactly one job): if emq:{q}:key:<key> exists the job is a duplicate
-- and nothing changes; otherwise the job is admitted and the key is set to its id with PX TTL,
-- so it is remembered for the TTL even after the job has finished.
-- Jobs of a lane are claimed in id (mint) order; lanes are served round-robin.
-- Returns one word per job: 'enqueued', or 'duplicate' (nothing is changed).
-- cost: O(jobs admitted), each O(log n); at most ENQUEUE_CHUNK (10,000) jobs a call
local qp = ARGV[1]
local g = ARGV[2]
local guard = nil
if ARGV[4] ~= '' then
  if #ARGV ~= 7 then return redis.error_reply('ERR an idempotency key guards exactly one job') end
  guard = qp .. KEY.idempotency .. ARGV[4]
  if redis.call('EXISTS', guard) == 1 then return {'duplicate'} end
end
local now = now_ms()
created(qp, now)
if ARGV[3] ~= '' then
  redis.call('HSET', qp .. KEY.lane_limits, g, ARGV[3])
  lanes_changed(qp .. KEY.lane_limits)
end
local out = {}
local added = 0
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('EXISTS', qp .. KEY.job .. id) == 1 then
    out[#out + 1] = 'duplicate'
  else
    to_waiting(qp, id, g, now, nil, 'payload', ARGV[i + 1])
    emit(qp, 'enqueued', id, 'group', g)
    if guard then redis.call('SET', guard, id, 'PX', ARGV[5]) end
    added = added + 1
    out[#out + 1] = 'enqueued'
  end
end
if added == 0 then
  -- Nothing admitted: the lane goes on the ring if its new limit lets it.
  ring_add(qp, g, now)
end
return out
