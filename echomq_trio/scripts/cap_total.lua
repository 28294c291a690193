-- cap_total: a partitioned queue's cap on jobs in flight across its partitions, kept in
-- partition 0's meta: the total (partitions_cap) and the epoch of the rounds that share it out
-- (partitions_epoch, which cap_share fences with). 'set' records a total and 'clear' removes
-- it; 'begin' starts a coordinator's round. Each bumps the epoch, so a round begun earlier is
-- refused wherever the later one has stamped. 'begin' with a holder keeps a lease on the
-- rounds (cap_holder, cap_until: server ms), so of several coordinators one runs them while
-- its lease lasts (the others' 'begin' answers epoch 0); a queue without a total answers at
-- once, its epoch untouched and nothing written (one HMGET). A 'set' or 'clear' that changes
-- the total emits queue_limit in partition 0's events (max_active: the total, 0 cleared), as
-- a plain queue's cap does; the rounds' moves of the shares emit nothing.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta, partition 0's (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'set', 'clear' or 'begin', ARGV[3] the total (set:
-- >= 1) or the holder (begin: '' for none, which takes no lease and waits for none),
-- ARGV[4] the lease ms (begin with a holder)
-- Returns {the total in effect (0: none), the epoch of the round begun or of the change made
-- (0: none begun: no total, or another holder's lease runs)}.
-- fields: total, epoch
-- cost: O(1)
local qp = ARGV[1]
local mode = ARGV[2]
if mode == 'begin' then
  local m = redis.call('HMGET', KEYS[1], 'partitions_cap', 'cap_holder', 'cap_until')
  if not m[1] then return {0, 0} end
  local holder = ARGV[3]
  if holder ~= '' then
    local now = now_ms()
    if m[2] and m[2] ~= holder and tonumber(m[3] or '0') > now then return {tonumber(m[1]), 0} end
    redis.call('HSET', KEYS[1], 'cap_holder', holder, 'cap_until', now + tonumber(ARGV[4]))
  end
  return {tonumber(m[1]), redis.call('HINCRBY', KEYS[1], 'partitions_epoch', 1)}
end
created(qp, nil)
local was = tonumber(redis.call('HGET', KEYS[1], 'partitions_cap') or '0')
local total = 0
if mode == 'set' then
  total = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'partitions_cap', total)
else
  redis.call('HDEL', KEYS[1], 'partitions_cap', 'cap_holder', 'cap_until')
end
if total ~= was then emit(qp, 'queue_limit', string.sub(qp, 6, -3), 'max_active', total) end
return {total, redis.call('HINCRBY', KEYS[1], 'partitions_epoch', 1)}
