-- cancel: a job that must not run, or not run on: a waiting job (flat, in a lane, scheduled, a
-- flow's parent waiting for its children, whose waiting children are cancelled with it) is
-- taken out and never runs; an active job's lease is taken from its holder at once (its ack,
-- retry, defer, extend and release answer 'stale', whichever process holds it, and the reaper
-- never sees it), and a mark tells the holder to cancel its handler. The job is kept as
-- cancelled, like a dead job, with who cancelled it and why (last_error says both).
-- transition: pending | pending (lane) | pending (lane, waiting) | scheduled | active | waiting_children -> cancelled | dead | pending
-- KEYS[1] emq:{q}:cancelled (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id, ARGV[3] reason ('' for none), ARGV[4] who
-- cancelled it ('' for no one named)
-- A lane keeps its order (the job leaves its place) and frees its slot when the job was active,
-- so the lane's next job can be claimed. The mark (cancel_marks, `<id>:<token>`) lasts until
-- MARK_KEEP_MS past the lease's deadline: by then the holder has seen it, or found its lease
-- gone when it renewed, or is dead; each cancel drops the marks past their time.
-- The cancelled set keeps the dead set's bounds (meta dead_max, dead_max_age_ms: trim_dead).
-- Returns 'cancelled', 'already_done' (the job is dead, cancelled, or completed and kept with
-- its result: nothing changes) or 'not_found' (no row: never admitted, or acked and deleted).
-- Its end is published for a waiter on its result (finished), and under a cap on jobs in
-- flight an active job's end wakes a parked consumer (cap_freed).
-- A flow's child cancelled ends for its parent as a failure: the parent dies unless the child's
-- on_fail is 'ignore' (flow_end).
-- cost: O(log n) (a flow's parent: O(log n) per child waiting, nested ones included); 6 commands for a waiting job (its row read and written, its place, its set of
-- cancelled jobs, a counter, its event), 3 more for an active one, a lane job up to 3 more (in
-- a queue with lane limits up to 7 more to put its lane back on the ring), plus the marks past
-- their time; a ZCARD under a cap, a PUBLISH while the queue keeps results
local qp = ARGV[1]
local id = ARGV[2]
local MARK_KEEP_MS = 10000
local row = qp .. KEY.job .. id
local f = redis.call('HMGET', row, 'state', 'lease', 'attempts', 'group', 'parent')
local state = job_state(qp, id, f[1])
if not state then return 'not_found' end
local g = f[4]
local now = now_ms()
if state == 'pending' then
  if g then
    local lane = qp .. KEY.lane .. g
    if redis.call('ZREM', lane, id) == 1 then
      redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -1)
      if redis.call('ZCARD', lane) == 0 then lane_emptied(qp, g) end
    end
  else
    redis.call('ZREM', qp .. KEY.pending, id)
  end
elseif state == 'scheduled' then
  redis.call('ZREM', qp .. KEY.schedule, id)
elseif state == 'waiting_children' then
  redis.call('ZREM', qp .. KEY.parents, id)
  flow_cancel(qp, id, ARGV[3], ARGV[4], now)
elseif state == 'active' then
  local deadline = tonumber(redis.call('ZSCORE', qp .. KEY.active, id)) or now
  redis.call('ZREM', qp .. KEY.active, id)
  if g then lane_done(qp, g, now) end
  cap_freed(qp, 1)  -- under a cap on jobs in flight, a parked consumer may claim again
  local marks = qp .. KEY.cancel_marks
  redis.call('ZREMRANGEBYSCORE', marks, '-inf', now)
  redis.call('ZADD', marks, math.max(deadline, now) + MARK_KEEP_MS, id .. ':' .. (f[2] or '0'))
else
  return 'already_done'
end
local why = cancelled_row(qp, id, state, f[3] or '0', ARGV[3], ARGV[4], now)
-- a flow's child: its parent goes on or fails by the child's on_fail (flow_end)
if f[5] then flow_end(qp, id, f[5], 'cancelled', why, now) end
return 'cancelled'
