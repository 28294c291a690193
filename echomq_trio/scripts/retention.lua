-- retention: set, or read, how much of its history a queue keeps: its dead jobs (by count and
-- by age; the script that buries a job trims the oldest, a bounded number per call) and its
-- events stream (on or off, and its length).
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] '1' to set what follows, '0' to read only;
-- ARGV[3] dead_max (most dead jobs kept, '' for no bound), ARGV[4] dead_max_age_ms ('' for no
-- bound), ARGV[5] events ('1' keep the events stream, '0' not), ARGV[6] events_maxlen ('' for
-- the bus's default, EVENTS_MAXLEN)
-- Returns {dead_max, dead_max_age_ms, events, events_maxlen} in effect ('' for no bound).
-- fields: dead_max, dead_max_age_ms, events, events_max_len
-- cost: O(1)
local qp = ARGV[1]
local meta = qp .. KEY.meta
if ARGV[2] == '1' then
  for i, field in ipairs({'dead_max', 'dead_max_age_ms', 'events', 'events_maxlen'}) do
    if ARGV[2 + i] == '' then
      redis.call('HDEL', meta, field)
    else
      redis.call('HSET', meta, field, ARGV[2 + i])
    end
  end
end
local m = redis.call('HMGET', meta, 'dead_max', 'dead_max_age_ms', 'events', 'events_maxlen')
return {m[1] or '', m[2] or '', m[3] or '1', m[4] or tostring(EVENTS_MAXLEN)}
