-- reap: return jobs whose lease expired (their worker died or hung) to pending or their lane,
-- so another worker claims them; or, given a holder known to be dead (ARGV[3]), every job that
-- holder leased, whatever its deadline (the owner of a data directory, restarted after a crash,
-- knows its predecessor held them and is gone: its chats need not wait out the leases). Attempts
-- are unchanged; the next claim raises them.
-- transition: active -> pending | pending (lane)
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch, ARGV[3] (optional) a dead holder, ARGV[4] with
-- it, the lease deadline to read active from ('' for the start; a page of batch jobs and the
-- rest of its last deadline's, so the jobs of other holders, left where they are, are passed
-- once, whatever other holders do meanwhile)
-- While the queue's waits are being carried across a step of the clock (meta.clock_fix, see
-- clock.lua), and until meta.clock_reap_after, nothing expires: a lease deadline from before a
-- step is not an expiry until its holder has had time to renew it on the new clock.
-- Returns {reaped, server now ms, 1 while the clock's step is being carried (else 0), and with
-- a holder: the deadline the next page reads from, '' when active is read to its end}.
-- fields: reaped, now, carrying, next_from?
-- cost: O(batch), each O(log n) (plus, with a holder, the jobs sharing the page's last deadline)
local qp = ARGV[1]
local now = now_ms()
local batch = tonumber(ARGV[2])
local dead = ARGV[3]
if dead == '' then dead = nil end
local chosen, after = {}, ''
if dead then
  local from = '-inf'
  if ARGV[4] ~= '' then from = '(' .. ARGV[4] end
  local page = redis.call('ZRANGE', KEYS[1], from, '+inf', 'BYSCORE', 'LIMIT', 0, batch,
    'WITHSCORES')
  local ids = {}
  for i = 1, #page, 2 do ids[#ids + 1] = page[i] end
  if #page == 2 * batch then
    -- the rest of the last deadline's jobs, so the next page can start past it
    after = page[#page]
    local seen = {}
    for _, id in ipairs(ids) do seen[id] = true end
    for _, id in ipairs(redis.call('ZRANGE', KEYS[1], after, after, 'BYSCORE')) do
      if not seen[id] then ids[#ids + 1] = id end
    end
  end
  for _, id in ipairs(ids) do
    if redis.call('HGET', qp .. KEY.job .. id, 'holder') == dead then
      chosen[#chosen + 1] = id
    end
  end
else
  local clock = redis.call('HMGET', qp .. KEY.meta, 'clock_fix', 'clock_reap_after')
  if clock[1] then return {0, now, 1} end
  if clock[2] and tonumber(clock[2]) > now then return {0, now, 0} end
  chosen = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
end
local flat = 0
for _, id in ipairs(chosen) do
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', qp .. KEY.job .. id, 'group', 'priority')
  local g = f[1] or nil
  flat = flat + to_waiting(qp, id, g, now, nil, tonumber(f[2]))
  if dead then emit(qp, 'reaped', id, 'holder', dead) else emit(qp, 'reaped', id) end
  if g then lane_done(qp, g, now) end
end
wake(qp, flat)
if dead then return {#chosen, now, 0, after} end
return {#chosen, now, 0}
