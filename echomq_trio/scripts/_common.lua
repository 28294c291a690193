-- Helpers prepended to every script when it is loaded (not a transition itself).
-- Every script gets the queue prefix `emq:{q}:` as ARGV[1] and derives the queue's other keys
-- from it (job rows, lanes); they all share the `{q}` hash tag, so one slot holds them all.
--   now_ms()                 server clock, Unix ms
--   wake(qp, n)              push up to n (<= 64) wake tokens for parked consumers
--   tick(qp)                 nudge a sleeping metronome (an earlier due time exists)
--   emit(qp, event, id, ...) append to the queue's capped events stream
--   lane_ready(qp, g, now)   is lane g serviceable: non-empty, not paused, not waiting, below limit
--   ring_add(qp, g, now)     put a serviceable lane on the ring once, and wake a consumer
--   lane_push(qp, g, id, now) put a job back into its lane (at its id's place: mint order)
--   lane_done(qp, g, now)    one fewer job of lane g in flight; re-ring the lane if it can go on
--   audit(qp, row, id, outcome, attempts, now, note, err)
--                            when the queue keeps an audit (meta.audit = 1), append the settled
--                            job's record to emq:{q}:audit in the same step that settles it
local EVENTS_MAXLEN = 10000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function wake(qp, n)
  if n < 1 then return end
  if n > 64 then n = 64 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  redis.call('LPUSH', qp .. 'wake', unpack(tokens))
  redis.call('LTRIM', qp .. 'wake', 0, 63)
end

local function tick(qp)
  redis.call('LPUSH', qp .. 'tick', '1')
  redis.call('LTRIM', qp .. 'tick', 0, 0)
end

local function emit(qp, event, id, ...)
  redis.call('XADD', qp .. 'events', 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'e', event, 'id', id, ...)
end

local function lane_ready(qp, g, now)
  if redis.call('ZCARD', qp .. 'g:' .. g) == 0 then return false end
  if redis.call('SISMEMBER', qp .. 'paused', g) == 1 then return false end
  local until_ms = redis.call('ZSCORE', qp .. 'gwait', g)
  if until_ms and tonumber(until_ms) > now then return false end
  local limit = redis.call('HGET', qp .. 'glimit', g)
  if limit and tonumber(redis.call('HGET', qp .. 'gactive', g) or '0') >= tonumber(limit) then
    return false
  end
  return true
end

local function ring_add(qp, g, now)
  if lane_ready(qp, g, now) and redis.call('SADD', qp .. 'inring', g) == 1 then
    redis.call('RPUSH', qp .. 'ring', g)
    wake(qp, 1)
  end
end

local function lane_push(qp, g, id, now)
  redis.call('ZADD', qp .. 'g:' .. g, 0, id)
  redis.call('SADD', qp .. 'groups', g)
  ring_add(qp, g, now)
end

local function lane_done(qp, g, now)
  if redis.call('HINCRBY', qp .. 'gactive', g, -1) <= 0 then
    redis.call('HDEL', qp .. 'gactive', g)
  end
  ring_add(qp, g, now)
end

local function lane_wait(qp, g, until_ms)
  -- A lane's wait only ever extends. Tell the metronome when this is now the earliest wait.
  local cur = redis.call('ZSCORE', qp .. 'gwait', g)
  if cur and tonumber(cur) >= until_ms then return end
  redis.call('ZADD', qp .. 'gwait', until_ms, g)
  local head = redis.call('ZRANGE', qp .. 'gwait', 0, 0)
  if head[1] == g then tick(qp) end
end

local function schedule_at(qp, id, at)
  redis.call('ZADD', qp .. 'schedule', at, id)
  local head = redis.call('ZRANGE', qp .. 'schedule', 0, 0)
  if head[1] == id then tick(qp) end
end

local function audit(qp, row, id, outcome, attempts, now, note, err)
  if redis.call('HGET', qp .. 'meta', 'audit') ~= '1' then return end
  -- Never trimmed by a cap: the archiver trims below what it has committed.
  redis.call('XADD', qp .. 'audit', '*', 'id', id, 'outcome', outcome, 'attempts', attempts,
    'settled_ms', now, 'payload', redis.call('HGET', row, 'payload') or '', 'note', note or '',
    'error', err or '')
end
