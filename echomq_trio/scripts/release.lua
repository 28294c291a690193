-- release: a stopping worker hands back jobs it holds but did not finish. They return to
-- pending (or the head of their lane) at once and the interrupted attempt is not counted.
-- transition: active -> pending | pending (lane)
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, then pairs ARGV[2k] job id, ARGV[2k+1] fencing token (lease
-- number)
-- Jobs whose token no longer holds (reaped and claimed elsewhere) are left alone.
-- Returns the number released.
-- cost: O(jobs released), each O(log n)
local qp = ARGV[1]
local now = now_ms()
local released = 0
local flat = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local job = held(qp, id, ARGV[i + 1])
  if job then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', qp .. KEY.job .. id, 'attempts', -1)
    flat = flat + to_waiting(qp, id, job.group, now, nil, job.priority)
    emit(qp, 'released', id)
    if job.group then lane_done(qp, job.group, now) end
    released = released + 1
  end
end
wake(qp, flat)
return released
