-- result: read what jobs.result needs of a job: its state, its result or error, and whether the
-- queue keeps results (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id
-- Returns {state ('' for no row), the queue's results TTL in ms (0: none kept), last error ('' for
-- none), result (nil for none)}.
-- fields: state, keeps_ms, error, result?
-- cost: O(1)
local qp = ARGV[1]
local id = ARGV[2]
local job = fields(qp .. KEY.job .. id, 'state', 'last_error', 'result')
local keeps = tonumber(redis.call('HGET', KEYS[1], 'results_ttl_ms') or '0')
local out = {job_state(qp, id, job.state) or '', keeps, job.last_error or ''}
if job.result then out[4] = job.result end
return out
