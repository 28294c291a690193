-- ack: the handler finished; the job is done and its row deleted.  active -> (none)
-- KEYS[1] emq:{q}:active (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, then triples: job id, fencing token (lease number), note (free text the
-- handler leaves for the audit record; '' for none)
-- A job reaped back to pending but not yet claimed again still carries the same token and is
-- acked (the work is done). A lane job frees its lane's slot, which may put the lane back on
-- the ring. Returns one integer per job: 1 acked, 0 stale (the token no longer matches: the
-- job was claimed again), -1 gone (no such row).
local qp = ARGV[1]
local now = now_ms()
local out = {}
local done = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  local f = redis.call('HMGET', row, 'state', 'lease', 'group', 'attempts')
  if not f[1] then
    out[#out + 1] = -1
  elseif f[2] ~= ARGV[i + 1] or (f[1] ~= 'active' and f[1] ~= 'pending') then
    out[#out + 1] = 0
  else
    if f[1] == 'active' then
      redis.call('ZREM', KEYS[1], id)
      if f[3] then lane_done(qp, f[3], now) end
    elseif f[3] then
      redis.call('ZREM', qp .. 'g:' .. f[3], id)
    else
      redis.call('ZREM', qp .. 'pending', id)
    end
    audit(qp, row, id, 'acked', f[4], now, ARGV[i + 2], '')
    redis.call('DEL', row)
    emit(qp, 'acked', id)
    done = done + 1
    out[#out + 1] = 1
  end
end
if done > 0 then redis.call('HINCRBY', qp .. 'metrics', 'completed', done) end
return out
