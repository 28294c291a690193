-- repeats: read registrations (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'all', 'due' or 'one', ARGV[3] limit, ARGV[4] offset
-- ('all': the page from that rank in next-run order), ARGV[5] the name ('one')
-- Returns per registration {name, next run ms, every ms ('' for cron), template, group, last
-- fired ms or '', cron expression or '', its zone or '', the priority of the jobs it fires
-- ('' for none: 0)}.
-- fields of each registration: name, next_run, every, template, group, last_fired, cron, tz,
--          priority
-- cost: O(log n + limit)
local qp = ARGV[1]
local limit = tonumber(ARGV[3])
local entries
if ARGV[2] == 'due' then
  entries = redis.call('ZRANGE', KEYS[1], '-inf', now_ms(), 'BYSCORE', 'WITHSCORES', 'LIMIT', 0,
    limit)
elseif ARGV[2] == 'one' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[5])
  entries = {}
  if score then entries = {ARGV[5], score} end
else
  local off = tonumber(ARGV[4])
  entries = redis.call('ZRANGE', KEYS[1], off, off + limit - 1, 'WITHSCORES')
end
local out = {}
for i = 1, #entries, 2 do
  local reg = fields(qp .. KEY.registration .. entries[i], 'every_ms', 'template', 'group',
    'last_fired_ms', 'cron', 'tz', 'priority')
  if reg.template then
    out[#out + 1] = {entries[i], entries[i + 1], reg.every_ms or '', reg.template,
      reg.group or '', reg.last_fired_ms or '', reg.cron or '', reg.tz or '', reg.priority or ''}
  end
end
return out
