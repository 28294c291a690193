-- queue_pause: pause a whole queue: claims answer nothing until queue_resume, for flat jobs and
-- lane jobs alike; enqueues, schedules, the metronome's promotions and the settlement of jobs
-- already running go on. The pause is meta.paused (the server ms it began), which the claim
-- reads with what it reads of meta anyway.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- Returns 'paused', or 'already' (it was paused: its start is kept).
-- cost: O(1)
local qp = ARGV[1]
local now = now_ms()
created(qp, now)
if redis.call('HSETNX', KEYS[1], 'paused', now) == 0 then return 'already' end
emit(qp, 'queue_paused', string.sub(qp, 6, -3))
return 'paused'
