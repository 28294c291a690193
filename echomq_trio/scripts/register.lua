-- register: a recurring schedule under a caller-chosen name, every so many ms or at the
-- occurrences of a cron expression in a time zone. A live name is left exactly as it is (a
-- service re-registers every schedule at boot), so registering is idempotent; with ARGV[10] =
-- '1' a live name whose schedule, template, lane or priority differs is replaced (one with the
-- same is still left as it is).
-- transition: (none) | registered -> registered
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] name, ARGV[3] every ms ('' for a cron schedule),
-- ARGV[4] template payload, ARGV[5] first run in ms from the server's now (every ms), ARGV[6]
-- lane group ('' for flat pending), ARGV[7] cron expression ('' for every ms), ARGV[8] its
-- zone, ARGV[9] its first run in server ms (computed by the caller: Lua cannot compute cron),
-- ARGV[10] '1' to replace a live name that differs, else '0', ARGV[11] the priority of every
-- job it fires ('' for none: 0; kept in the record as priority when not 0)
-- Returns {'registered' or 'replaced', first run in server ms} or {'exists', next run in server
-- ms (-1 when the record has no entry)}.
-- fields: outcome, at
-- cost: O(log n)
local qp = ARGV[1]
local name = ARGV[2]
local record = qp .. KEY.registration .. name
local outcome = 'registered'
if redis.call('EXISTS', record) == 1 then
  local reg = fields(record, 'every_ms', 'template', 'group', 'cron', 'tz', 'priority')
  local same = (reg.every_ms or '') == ARGV[3] and reg.template == ARGV[4]
    and (reg.group or '') == ARGV[6] and (reg.cron or '') == ARGV[7] and (reg.tz or '') == ARGV[8]
    and (reg.priority or '') == (ARGV[11] or '')
  if same or ARGV[10] ~= '1' then
    return {'exists', tonumber(redis.call('ZSCORE', KEYS[1], name) or '-1')}
  end
  redis.call('DEL', record)
  outcome = 'replaced'
end
local now = now_ms()
created(qp, now)
local at
if ARGV[7] ~= '' then
  -- A cron record has no every_ms: the clock script leaves its wall-clock runs where they are.
  at = tonumber(ARGV[9])
  redis.call('HSET', record, 'cron', ARGV[7], 'tz', ARGV[8], 'template', ARGV[4], 'group',
    ARGV[6], 'registered_ms', now)
else
  at = now + tonumber(ARGV[5])
  redis.call('HSET', record, 'every_ms', ARGV[3], 'template', ARGV[4], 'group', ARGV[6],
    'registered_ms', now)
end
redis.call('ZADD', KEYS[1], at, name)
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == name then tick(qp) end
if ARGV[11] and ARGV[11] ~= '' then redis.call('HSET', record, 'priority', ARGV[11]) end
emit(qp, 'registered', name, 'at', at)
return {outcome, at}
