-- keep_results: set, or read, how long the queue keeps a finished job with its result: while it
-- does (a TTL above 0), ack keeps the job's row as 'completed' with the handler's result, its
-- finish time and attempts, for that long (a key TTL on the row), and ack and retry (when it
-- buries a job) publish the job's end on its channel for jobs.result; 0 turns it off (rows are
-- deleted on ack, as by default; rows kept already expire on their own).
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] '1' to set ARGV[3], '0' to read only; ARGV[3] the TTL
-- in ms ('0': keep no results)
-- Returns the TTL in effect, ms (0: no results kept).
-- cost: O(1)
local qp = ARGV[1]
local meta = qp .. KEY.meta
if ARGV[2] == '1' then
  if ARGV[3] == '0' then
    redis.call('HDEL', meta, 'results_ttl_ms')
  else
    redis.call('HSET', meta, 'results_ttl_ms', ARGV[3])
  end
end
return tonumber(redis.call('HGET', meta, 'results_ttl_ms') or '0')
