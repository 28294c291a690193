-- flow: read a job's place in a flow: its state, its parent, and each of its children's state
-- and end (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:parents (the other keys are ARGV[1]'s, or its children's queues', which
-- flow_add holds to the same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id
-- Returns {state ('' for no row), parent (its prefix and id; '' for none), on_fail ('' or
-- 'ignore'), unfinished (children not yet ended; '' for a job without children), then per
-- child: its prefix and id, its state ('' for no row), its end as the parent keeps it ('r:' and
-- its result, 'n:' (completed, no result), 'd:' or 'x:' and the error (its failure ignored), ''
-- for none yet)}.
-- fields: state, parent, on_fail, unfinished, children...
-- fields of each child: ref, state, end
-- cost: O(children), each O(1)
local qp = ARGV[1]
local id = ARGV[2]
local f = redis.call('HMGET', qp .. KEY.job .. id, 'state', 'parent', 'on_fail', 'unfinished',
  'children')
local out = {job_state(qp, id, f[1]) or '', f[2] or '', f[3] or '', f[4] or ''}
if f[5] then
  local ends = qp .. KEY.flow .. id
  for ref in string.gmatch(f[5], '%S+') do
    local cqp, cid = string.sub(ref, 1, -15), string.sub(ref, -14)
    local state = job_state(cqp, cid, redis.call('HGET', cqp .. KEY.job .. cid, 'state')) or ''
    out[#out + 1] = ref
    out[#out + 1] = state
    out[#out + 1] = redis.call('HGET', ends, ref) or ''
  end
end
return out
