-- audit_enable: make the queue keep an audit. From now on every script that settles a job (ack,
-- and retry when it buries one) appends the job's record to emq:{q}:audit in the same step.
-- KEYS[1] emq:{q}:meta
-- ARGV[1] '1' to keep an audit, '0' to stop
-- Returns 1.
redis.call('HSET', KEYS[1], 'audit', ARGV[1])
return 1
