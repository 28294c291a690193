-- progress: note how far held jobs have come (what their handlers last reported with
-- job.progress, coalesced by the consumer), fenced by each job's lease as extend is: a job whose
-- lease this token no longer holds is left alone.
-- transition: active -> active
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, then triples: job id, fencing token (lease number), progress
-- (JSON text)
-- The progress is kept in the job's row (field progress: get_job, a completed job's row) and
-- told on the events stream ('progress', with the value).
-- Returns one word per job: 'noted', 'stale' (the token does not hold the job's lease), 'gone'
-- (no row).
-- cost: O(jobs noted), each O(1) but its event
local qp = ARGV[1]
local out = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local job, why = held(qp, id, ARGV[i + 1])
  if job then
    redis.call('HSET', qp .. KEY.job .. id, 'progress', ARGV[i + 2])
    emit(qp, 'progress', id, 'progress', ARGV[i + 2])
    out[#out + 1] = 'noted'
  else
    out[#out + 1] = why
  end
end
return out
