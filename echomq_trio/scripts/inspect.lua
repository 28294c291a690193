-- inspect: read job rows (read only).
-- transition: none (read only)
-- KEYS[1] the set to read ('set': emq:{q}:pending, schedule, active, dead, cancelled or
-- g:<group>), or
-- emq:{q}:pending ('ids': it only routes the call); the other keys are ARGV[1]'s, same slot
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'set' or 'ids'.
--   'set': ARGV[3] offset, ARGV[4] limit
--   'ids': ARGV[3..] job ids
-- Returns per job {id, state, attempts, payload, last_error, score, group, progress, result,
-- finished, priority, expires, debounce}; state is '' for a missing row; score is the run-at
-- (scheduled), lease deadline (active), time of death (dead) or of the cancel (cancelled), when
-- it was added (a flow's parent waiting for its children: waiting_children), else ''; a
-- cancelled job's last_error says who cancelled it and why; progress (JSON text), result and
-- finished (ms, a completed job's), expires (expires_ms) and debounce (its debounce key) are nil
-- when the row has none; priority is '' for none (0).
-- fields of each job: id, state, attempts, payload, last_error, score, group, progress, result,
--          finished, priority, expires, debounce
-- cost: O(log n + limit) or O(ids named)
local qp = ARGV[1]
local list = {}
if ARGV[2] == 'set' then
  local off = tonumber(ARGV[3])
  list = redis.call('ZRANGE', KEYS[1], off, off + tonumber(ARGV[4]) - 1)
else
  for i = 3, #ARGV do list[#list + 1] = ARGV[i] end
end
local score_set = {scheduled = qp .. KEY.schedule, active = qp .. KEY.active, dead = qp .. KEY.dead,
  cancelled = qp .. KEY.cancelled, waiting_children = qp .. KEY.parents}
local out = {}
for _, id in ipairs(list) do
  local job = fields(qp .. KEY.job .. id, 'state', 'attempts', 'payload', 'last_error', 'group',
    'progress', 'result', 'finished_ms', 'priority', 'expires_ms', 'debounce')
  local state = job_state(qp, id, job.state) or ''
  local score = ''
  if score_set[state] then score = redis.call('ZSCORE', score_set[state], id) or '' end
  out[#out + 1] = {id, state, job.attempts or '0', job.payload or '', job.last_error or '', score,
    job.group or '', job.progress or false, job.result or false, job.finished_ms or false,
    job.priority or '', job.expires_ms or false, job.debounce or false}
end
return out
