-- ack: the handler finished; the job is done and its row deleted, or, while the queue keeps
-- results (meta.results_ttl_ms, keep_results.lua), kept as 'completed' with its result for that
-- long (a key TTL) and its end published on its channel (finished).
-- transition: active | pending | pending (lane) | waiting_children -> (none) | completed | pending
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, then triples: job id, fencing token (lease number), note (free
-- text the handler leaves for the audit record; '' for none); or ARGV[2] 'results', then
-- quads: job id, token, note, result (kept with the finished job; dropped where no results are
-- kept)
-- A flow's child (its row names its parent) is counted by its parent, its result kept there for
-- the parent's handler (flow_end); the last moves the parent to pending. A flow's parent takes
-- its children's results with it (its flow key: deleted, or kept as long as its row; every job
-- of a flow has the parent field, '' for the root).
-- A job reaped back to pending but not yet claimed again still carries the same token and is
-- acked (the work is done). A lane job frees its lane's slot, which may put the lane back on
-- the ring.
-- Returns one word per job: 'acked', 'stale' (the token no longer holds: the job was claimed
-- again), 'gone' (no such row).
-- cost: O(jobs acked), each O(log n) in the size of the sets touched; per job 2 commands (its
-- row read, its event), a lane job 1 more (1 more when it was its lane's last in flight and
-- nothing waits in the lane; in a queue with lane limits 1 more, and up to 6 more to put its
-- lane back on the ring), one ZREM and one DEL per call; a job kept with its result 3 or 4
-- more (its row's fields, its TTL, its publish); a flow's child 2 or 3 more (its parent's row
-- read, its result kept, its count; its last child 4 more to move the parent, and a failure
-- read on_fail), a flow's parent 1 more
local qp = ARGV[1]
local from, step = 2, 3
if ARGV[2] == 'results' then from, step = 3, 4 end
local now = now_ms()
local out = {}
local done = {}  -- id -> true: acked by this call (a repeated id answers 'gone', as it would after)
local leased, rows = {}, {}  -- ids to take out of active, rows to delete: once each, at the end
local acked = 0
for i = from, #ARGV, step do
  local id = ARGV[i]
  local job, why = nil, 'gone'
  if not done[id] then job, why = held(qp, id, ARGV[i + 1], true) end
  if not job then
    out[#out + 1] = why
  else
    done[id] = true
    if job.state == 'active' then
      leased[#leased + 1] = id
      if job.group then lane_done(qp, job.group, now) end
    elseif job.group then
      local lane = qp .. KEY.lane .. job.group
      if redis.call('ZREM', lane, id) == 1 then
        redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -1)
        if redis.call('ZCARD', lane) == 0 then lane_emptied(qp, job.group) end
      end
    else
      redis.call('ZREM', qp .. KEY.pending, id)
    end
    audit(qp, id, 'acked', job.attempts, now, ARGV[i + 2], '')
    local row = qp .. KEY.job .. id
    local keep = retention(qp).results
    -- a flow's job: its parent counts it and keeps its result; its own children's ends (a
    -- parent's; none for a leaf) go with its row
    local flow = nil
    if job.parent then
      flow = qp .. KEY.flow .. id
      flow_end(qp, id, job.parent, 'completed', step == 4 and ARGV[i + 3] or nil, now)
    end
    if keep then
      if step == 4 then
        redis.call('HSET', row, 'state', 'completed', 'finished_ms', now, 'result', ARGV[i + 3])
      else
        redis.call('HSET', row, 'state', 'completed', 'finished_ms', now)
      end
      redis.call('PEXPIRE', row, keep)
      if flow then redis.call('PEXPIRE', flow, keep) end
      finished(qp, id, 'completed')
    else
      rows[#rows + 1] = row
      if flow then rows[#rows + 1] = flow end
    end
    emit(qp, 'acked', id)
    out[#out + 1] = 'acked'
    acked = acked + 1
  end
end
in_runs('ZREM', KEYS[1], leased)
cap_freed(qp, #leased)
in_runs('DEL', nil, rows)
if acked > 0 then redis.call('HINCRBY', qp .. KEY.metrics, 'completed', acked) end
return out
