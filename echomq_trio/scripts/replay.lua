-- replay: give a dead job a fresh start in pending (or its lane), attempts reset to 0; its last
-- error is kept for the record; its expiry is dropped (a job replayed runs, even one that
-- expired).
-- transition: dead -> pending | pending (lane)
-- KEYS[1] emq:{q}:dead (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id
-- Returns 'replayed', 'not_dead' (the job is in another state) or 'gone' (no row).
-- cost: O(log n)
local qp = ARGV[1]
local id = ARGV[2]
local job = fields(qp .. KEY.job .. id, 'state', 'group', 'priority')
local state = job_state(qp, id, job.state)
if not state then return 'gone' end
if state ~= 'dead' then return 'not_dead' end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', qp .. KEY.job .. id, 'attempts', 'expires_ms', 'expires_in_ms')  -- none: 0
wake(qp, to_waiting(qp, id, job.group, now_ms(), nil, tonumber(job.priority)))
emit(qp, 'replayed', id)
return 'replayed'
