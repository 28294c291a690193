-- sync_mark: the write a durable commit makes of its own before its WAITAOF
-- (durability.Committer): the WAITAOF that follows on this connection waits for this write, and
-- so for every write the server took before it, on any connection; and the answer names the
-- server process that took it (its run_id), so that writes answered by a process that has died
-- since are never declared on disk by its successor.
-- transition: none (a queue's bookkeeping)
-- KEYS[1] emq:{q}:meta (the queue's meta: meta.syncs counts these writes)
-- ARGV[1] queue prefix emq:{q}:
-- Returns the server's run_id.
-- cost: O(1)
local qp = ARGV[1]
redis.call('HINCRBY', qp .. KEY.meta, 'syncs', 1)
return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
