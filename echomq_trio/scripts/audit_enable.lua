-- audit_enable: make the queue keep an audit, or stop. From then on every script that settles a
-- job (ack, and retry when it buries one) appends the job's record to emq:{q}:audit in the same
-- step.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] '1' to keep an audit, '0' to stop
-- Returns 'on' or 'off'.
-- cost: O(1)
local qp = ARGV[1]
redis.call('HSET', qp .. KEY.meta, 'audit', ARGV[2])
if ARGV[2] == '1' then return 'on' end
return 'off'
