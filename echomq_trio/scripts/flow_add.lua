-- flow_add: admit a flow (flows.add), a tree of jobs in which a parent runs only after all its
-- children have ended: each job without children goes to its queue's pending set, each parent
-- waits in its queue's parents set (state waiting_children) with the count of its children not
-- yet ended (unfinished). Each child's row names its parent and its on_fail; each parent's row
-- names its children; the root's names its parent as ''. All of it or nothing, in one step.
-- transition: (none) -> pending | waiting_children
-- KEYS[1] emq:{q}:pending of the root's queue (the other keys are the ARGV prefixes'; on a
-- cluster every queue of the flow must share the root's slot: flows.add refuses one that does
-- not, before any I/O)
-- ARGV[1] the root's queue prefix emq:{q}:, then 7 fields per job, the root first: its queue's
-- prefix, its id, its payload, its parent (the parent's prefix and id; '' for the root), its
-- on_fail ('ignore', or '' for fail), its timeout in ms ('' for none), its children (their
-- prefixes and ids, space-separated; '' for none)
-- Returns one word per job, in order: 'enqueued'; or {'duplicate'} alone when the root's row
-- exists (the flow was admitted already: nothing changes). An error names a job whose id is a
-- live job's already when the root's is not (nothing changes).
-- cost: O(the flow's size) (at most FLOW_MAX_JOBS, 10,000), each job O(log n); per job 3
-- commands (its row checked, written, its place) and its event, 1 to 3 more for its parent,
-- on_fail and timeout; per queue 1 meta read and 1 wake (3 more the first time)
local qp = ARGV[1]
local N = 7
if redis.call('EXISTS', qp .. KEY.job .. ARGV[3]) == 1 then return {'duplicate'} end
for i = 2, #ARGV, N do
  if redis.call('EXISTS', ARGV[i] .. KEY.job .. ARGV[i + 1]) == 1 then
    return redis.error_reply('ERR flow: job ' .. ARGV[i + 1] .. ' of queue '
      .. string.sub(ARGV[i], 6, -3) .. ' exists already')
  end
end
local now = now_ms()
local woken = {}  -- prefix -> jobs it may wake for
local out = {}
for i = 2, #ARGV, N do
  local jqp, id, parent, on_fail, timeout, children = ARGV[i], ARGV[i + 1], ARGV[i + 3],
    ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local row = jqp .. KEY.job .. id
  created(jqp, now)
  redis.call('HSET', row, 'payload', ARGV[i + 2])
  redis.call('HSET', row, 'parent', parent)  -- '' for the root: a job of a flow all the same
  if on_fail ~= '' then redis.call('HSET', row, 'on_fail', on_fail) end
  if timeout ~= '' then redis.call('HSET', row, 'timeout_ms', timeout) end
  if children ~= '' then
    local n = 0
    for _ in string.gmatch(children, '%S+') do n = n + 1 end
    redis.call('HSET', row, 'state', 'waiting_children', 'children', children, 'unfinished', n)
    redis.call('ZADD', jqp .. KEY.parents, now, id)
    emit(jqp, 'waiting', id, 'children', n)
  else
    woken[jqp] = (woken[jqp] or 0) + to_pending(jqp, id)
    emit(jqp, 'enqueued', id)
  end
  out[#out + 1] = 'enqueued'
end
for jqp, n in pairs(woken) do wake(jqp, n) end
return out
