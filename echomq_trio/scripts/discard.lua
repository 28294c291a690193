-- discard: delete a dead (or cancelled) job for good (its row and its place in its set).
-- transition: dead | cancelled -> (none)
-- KEYS[1] emq:{q}:dead (the other keys are ARGV[1]'s, same slot; a cancelled job leaves
-- emq:{q}:cancelled)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id
-- Returns 'discarded', 'not_dead' (the job is in another state) or 'gone' (no row).
-- cost: O(log n)
local qp = ARGV[1]
local id = ARGV[2]
local state = job_state(qp, id, redis.call('HGET', qp .. KEY.job .. id, 'state') or nil)
if not state then return 'gone' end
if state == 'cancelled' then
  redis.call('ZREM', qp .. KEY.cancelled, id)
elseif state ~= 'dead' then
  return 'not_dead'
else
  redis.call('ZREM', KEYS[1], id)
end
redis.call('DEL', qp .. KEY.job .. id, qp .. KEY.flow .. id)  -- a flow's parent: its children's ends
emit(qp, 'discarded', id)
return 'discarded'
