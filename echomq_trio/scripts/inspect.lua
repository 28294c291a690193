-- inspect: read job rows (read only; not a transition).
-- KEYS[1] pending   KEYS[2] schedule   KEYS[3] active   KEYS[4] dead
-- ARGV[1] job key prefix, ARGV[2] 'set' or 'ids'.
--   'set': ARGV[3] which set (1-4, as KEYS), ARGV[4] offset, ARGV[5] limit
--   'ids': ARGV[3..] job ids
-- Returns per job {id, state, attempts, payload, last_error, score}; state is '' for a missing
-- row; score is the run-at (scheduled), lease deadline (active) or time of death (dead), else ''.
local prefix = ARGV[1]
local list = {}
if ARGV[2] == 'set' then
  local off = tonumber(ARGV[4])
  list = redis.call('ZRANGE', KEYS[tonumber(ARGV[3])], off, off + tonumber(ARGV[5]) - 1)
else
  for i = 3, #ARGV do list[#list + 1] = ARGV[i] end
end
local score_set = {scheduled = KEYS[2], active = KEYS[3], dead = KEYS[4]}
local out = {}
for _, id in ipairs(list) do
  local f = redis.call('HMGET', prefix .. id, 'state', 'attempts', 'payload', 'last_error')
  local state = f[1] or ''
  local score = ''
  if score_set[state] then score = redis.call('ZSCORE', score_set[state], id) or '' end
  out[#out + 1] = {id, state, f[2] or '0', f[3] or '', f[4] or '', score}
end
return out
