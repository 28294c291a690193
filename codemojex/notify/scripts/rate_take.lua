-- rate_take: take one send from the bot's global window and a chat's window together, or from
-- neither, on the server clock, so every worker process shares one budget.
-- KEYS[1] <prefix>global (other keys derive from ARGV[1], same slot)
-- ARGV[1] key prefix: the queue's app key `rate:` (emq:{cm.notify}:app:rate:), ARGV[2] chat id,
-- ARGV[3] global limit, ARGV[4] global window ms, ARGV[5] chat limit, ARGV[6] chat window ms,
-- ARGV[7] safety margin ms, ARGV[8] longest booking ms (optional, 0: never book), ARGV[9] a
-- booking the caller holds and comes back for late (optional, '': none)
--
-- Windows are sliding logs (sorted sets of send times), each window lengthened by the margin:
-- arrival at Telegram jitters by a few ms, and a send up to a margin early or late still keeps
-- every real window within its limit. Sends are appended in time order, so the logs hold the
-- limit in every window.
-- When only the global window is full, the chat gets a reservation: the next free global slot
-- is entered in both logs now, at its future time, and remembered for the chat; when the chat
-- comes back within half the margin of that time it sends in its slot without taking again. So
-- waiters queue in order instead of racing for each freed slot (a chat has at most one notice
-- in flight: its lane's limit is 1). Half, because a send early or late by up to half the
-- margin leaves the other half for the jitter of its trip to Telegram. A chat later than that
-- sends at once if the logs hold a send at its real time; otherwise it gives its slot back
-- (one entry fewer is always safe) and queues again.
-- A booking is a reservation the caller keeps in hand: when the next free global slot is at most
-- ARGV[8] ms ahead, it is entered in both logs and the answer is {0, ms until the slot,
-- 'booked', member}: the caller sends at that time without asking again (a chat task holding
-- its notice), unless it wakes later than half the margin past the slot; then it comes back
-- with the member (ARGV[9]) and is treated as a late reservation (below). Nothing is
-- remembered for the chat, so a booking never sent only leaves one entry more in the logs than
-- was sent, which is always safe.
-- A pause (after a 429) blocks its scope.
-- Returns {1, 0, ''} send now, or {0, wait ms, 'global' | 'chat' | 'paused' | 'booked'} (and
-- the booking's member after 'booked'); for a reservation the wait ends half a margin before the slot, where its tolerance begins.
local p = ARGV[1]
local chat = ARGV[2]
local now = now_ms()
local margin = tonumber(ARGV[7])
local wait = 0
for _, key in ipairs({p .. 'pause:global', p .. 'pause:chat:' .. chat}) do
  local untl = redis.call('GET', key)
  if untl and tonumber(untl) - now > wait then wait = tonumber(untl) - now end
end
if wait > 0 then return {0, wait, 'paused'} end

local glimit, gwin = tonumber(ARGV[3]), tonumber(ARGV[4]) + margin
local climit, cwin = tonumber(ARGV[5]), tonumber(ARGV[6]) + margin
local chat_key = p .. 'chat:' .. chat
local rsv_key = p .. 'rsv:' .. chat

-- Could a send be stamped at time t in this log without any window holding more than
-- `limit`? Every run of limit + 1 entries through t must span a whole window. (The chat's own
-- entry, `own`, is left out: it is the one being moved.)
local function fits(key, limit, window, t, own)
  local function scores(raw)
    local out = {}
    for i = 1, #raw, 2 do
      if raw[i] ~= own then out[#out + 1] = tonumber(raw[i + 1]) end
    end
    return out
  end
  local before = scores(redis.call('ZRANGE', key, t, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
    limit + 1, 'WITHSCORES'))
  local after = scores(redis.call('ZRANGE', key, '(' .. t, '+inf', 'BYSCORE', 'LIMIT', 0,
    limit + 1, 'WITHSCORES'))
  for j = 0, limit do
    local lo, hi = t, t
    if j > 0 then lo = before[j] end
    if limit - j > 0 then hi = after[limit - j] end
    if lo and hi and hi - lo < window then return false end
  end
  return true
end

-- The earliest time a send may be appended to a log: now, or when the entry `limit` places
-- back leaves the window (and never before the last entry: sends are appended in time order).
local function next_slot(key, limit, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local n = redis.call('ZCARD', key)
  if n < limit then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) > now then return tonumber(last[2]) end
    return now
  end
  local edge = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
  return math.max(now, tonumber(edge[2]) + window)
end

local own = redis.call('GET', rsv_key)
if (ARGV[9] or '') ~= '' then own = ARGV[9] end
if own then
  local at = tonumber(string.match(own, '^(%d+):'))
  local slack = math.floor(margin / 2)
  if now < at - slack then return {0, math.max(1, at - slack - now), 'global'} end
  redis.call('DEL', rsv_key)
  if now <= at + slack then return {1, 0, ''} end
  -- Late: send now if the logs hold the send at its real time; else give the slot back (an
  -- entry fewer is always safe) and queue again like anyone else.
  if fits(KEYS[1], glimit, gwin, now, own) and fits(chat_key, climit, cwin, now, own) then
    redis.call('ZADD', KEYS[1], now, own)
    redis.call('ZADD', chat_key, now, own)
    return {1, 0, ''}
  end
  redis.call('ZREM', KEYS[1], own)
  redis.call('ZREM', chat_key, own)
end

local chat_at = next_slot(chat_key, climit, cwin)
if chat_at > now then return {0, chat_at - now, 'chat'} end
local at = next_slot(KEYS[1], glimit, gwin)
local member = at .. ':' .. redis.call('INCR', p .. 'seq')
redis.call('ZADD', KEYS[1], at, member)
redis.call('ZADD', chat_key, at, member)
redis.call('PEXPIRE', KEYS[1], at - now + gwin)
redis.call('PEXPIRE', chat_key, at - now + cwin)
if at == now then return {1, 0, ''} end
if at - now <= tonumber(ARGV[8] or '0') then return {0, at - now, 'booked', member} end
redis.call('SET', rsv_key, member, 'PX', at - now + gwin)
-- Come back at the start of the slot's tolerance: waking a waiting lane takes a few ms.
return {0, math.max(1, at - math.floor(margin / 2) - now), 'global'}
