-- ack: the handler finished; the job is done and its row deleted.  active -> (none)
-- KEYS[1] active   KEYS[2] pending   KEYS[3] metrics
-- ARGV[1] job key prefix, then pairs ARGV[2k] job id, ARGV[2k+1] fencing token (attempts)
-- A job reaped back to pending but not yet claimed again still carries the same token and is
-- acked (the work is done). Returns one integer per job: 1 acked, 0 stale (the token no longer
-- matches: the job was claimed again), -1 gone (no such row).
local prefix = ARGV[1]
local out = {}
local done = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local row = prefix .. id
  local fields = redis.call('HMGET', row, 'state', 'attempts')
  if not fields[1] then
    out[#out + 1] = -1
  elseif fields[2] ~= ARGV[i + 1] or (fields[1] ~= 'active' and fields[1] ~= 'pending') then
    out[#out + 1] = 0
  else
    if fields[1] == 'active' then
      redis.call('ZREM', KEYS[1], id)
    else
      redis.call('ZREM', KEYS[2], id)
    end
    redis.call('DEL', row)
    done = done + 1
    out[#out + 1] = 1
  end
end
if done > 0 then redis.call('HINCRBY', KEYS[3], 'completed', done) end
return out
