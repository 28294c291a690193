-- inspect: read job rows (read only; not a transition).
-- KEYS[1] emq:{q}:pending (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] 'set' or 'ids'.
--   'set': ARGV[3] set suffix (pending, schedule, active, dead, or g:<group>), ARGV[4] offset,
--          ARGV[5] limit
--   'ids': ARGV[3..] job ids
-- Returns per job {id, state, attempts, payload, last_error, score, group}; state is '' for a
-- missing row; score is the run-at (scheduled), lease deadline (active) or time of death
-- (dead), else ''.
local qp = ARGV[1]
local list = {}
if ARGV[2] == 'set' then
  local off = tonumber(ARGV[4])
  list = redis.call('ZRANGE', qp .. ARGV[3], off, off + tonumber(ARGV[5]) - 1)
else
  for i = 3, #ARGV do list[#list + 1] = ARGV[i] end
end
local score_set = {scheduled = 'schedule', active = 'active', dead = 'dead'}
local out = {}
for _, id in ipairs(list) do
  local f = redis.call('HMGET', qp .. 'job:' .. id, 'state', 'attempts', 'payload', 'last_error', 'group')
  local state = f[1] or ''
  local score = ''
  if score_set[state] then score = redis.call('ZSCORE', qp .. score_set[state], id) or '' end
  out[#out + 1] = {id, state, f[2] or '0', f[3] or '', f[4] or '', score, f[5] or ''}
end
return out
