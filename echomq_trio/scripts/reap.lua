-- reap: return jobs whose lease expired (their worker died or hung) to pending or their lane,
-- so another worker claims them; or, given a holder known to be dead (ARGV[3]), every job that
-- holder leased, whatever its deadline (the owner of a data directory, restarted after a crash,
-- knows its predecessor held them and is gone: its chats need not wait out the leases). Attempts
-- are unchanged; the next claim raises them.
-- transition: active -> pending | pending (lane)
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch, ARGV[3] (optional) a dead holder, ARGV[4] with
-- it, the rank in active to read from (a page of batch jobs: the jobs of other holders are
-- passed over, so the next page starts that many ranks on)
-- While the queue's waits are being carried across a step of the clock (meta.clock_fix, see
-- clock.lua) nothing expires: a lease deadline from before a step forward is not an expiry.
-- Returns {reaped, server now ms, 1 while the clock's step is being carried (else 0), and with
-- a holder: the rank the next page reads from, -1 when active is read to its end}.
-- cost: O(batch), each O(log n)
local qp = ARGV[1]
local now = now_ms()
local batch = tonumber(ARGV[2])
local dead = ARGV[3]
if dead == '' then dead = nil end
local chosen, next_rank = {}, -1
if dead then
  local from = tonumber(ARGV[4])
  local page = redis.call('ZRANGE', KEYS[1], from, from + batch - 1)
  local passed = 0
  for _, id in ipairs(page) do
    if redis.call('HGET', qp .. KEY.job .. id, 'holder') == dead then
      chosen[#chosen + 1] = id
    else
      passed = passed + 1
    end
  end
  if #page == batch then next_rank = from + passed end
else
  if redis.call('HEXISTS', qp .. KEY.meta, 'clock_fix') == 1 then return {0, now, 1} end
  chosen = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
end
local flat = 0
for _, id in ipairs(chosen) do
  redis.call('ZREM', KEYS[1], id)
  local g = redis.call('HGET', qp .. KEY.job .. id, 'group') or nil
  flat = flat + to_waiting(qp, id, g, now)
  if dead then emit(qp, 'reaped', id, 'holder', dead) else emit(qp, 'reaped', id) end
  if g then lane_done(qp, g, now) end
end
wake(qp, flat)
if dead then return {#chosen, now, 0, next_rank} end
return {#chosen, now, 0}
