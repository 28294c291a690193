-- rate_take: take one send from the bot's global window and a chat's window together, or from
-- neither, on the server clock, so every worker process shares one budget.
-- KEYS[1] <prefix>global, KEYS[2] the queue's meta (other keys derive from ARGV[1], same slot)
-- ARGV[1] key prefix: the queue's app key `rate:` (emq:{cm.notify}:app:rate:), ARGV[2] chat id,
-- ARGV[3] global limit, ARGV[4] global window ms, ARGV[5] chat limit, ARGV[6] chat window ms,
-- ARGV[7] safety margin ms, ARGV[8] longest booking ms (0: never book), ARGV[9] a booking the
-- caller holds and comes back for ('': none), ARGV[10..12] the caller's witness of the server
-- clock (the server ms it last read, '' for none; ms since; ms that call took)
-- cost: O(log n + limit) in the entries of the two logs (a window's worth at most)
--
-- Every time here is the limiter's own clock (<prefix>clock, the prelude's steady_ms): the
-- server's, less every step of it recorded on the queue, so a step of the server clock (an hour
-- back or forward) neither holds a chat for the hour nor empties the windows: the logs, pauses,
-- reservations and bookings keep their distances. A step this caller's witness shows is
-- recorded first.
-- Windows are sliding logs (sorted sets of send times, each entry a member `slot:seq`). An
-- entry's score bounds when its message reaches Telegram: no earlier than the slot (a send never
-- goes before its slot), and no later than the score plus the margin while the send is in
-- flight; once the caller has its answer (rate_sent), the score becomes the answer's time less
-- the margin, so that bound is exact: the message arrived before its answer came back. Each
-- window is therefore lengthened by the margin, and a window counted from a confirmed send is
-- exactly the window counted from its answer.
-- When only the global window is full, the chat gets a reservation: the next free global slot
-- is entered in both logs now, at its future time, and remembered for the chat; it comes back
-- for it. So waiters queue in order instead of racing for each freed slot (a chat has at most
-- one notice in flight: its lane's limit is 1).
-- A booking is a reservation the caller keeps in hand: when the next free global slot is at most
-- ARGV[8] ms ahead, it is entered in both logs and the answer is {0, ms until the slot,
-- 'booked', member, ms until it should ask again (0: never)}. Nothing is remembered for the
-- chat, so a booking never sent only leaves one entry more in the logs than was sent, which is
-- always safe.
-- Coming back (a reservation, or a booking passed in ARGV[9]) up to half the margin late, the
-- slot is refined: it moves as early as the logs allow now that the sends it was queued behind
-- have been answered (it never moves later); the answer is send now, a booking, or (when
-- booking is off) the wait. Asking again half a global window before a slot leaves the sends it
-- waits for time to be answered. Later than half the margin (the other half is the trip's), a
-- send goes now if the logs hold it at its real time; otherwise its slot is given back (one
-- entry fewer is always safe) and it queues again.
-- A pause (after a 429) blocks its scope; an outage pause (rate_pause 'outage': a process found
-- Telegram answering nobody and probes it) blocks every chat.
-- Returns {1, 0, '', member, 0, server now} send now (then rate_sent with the member), or
-- {0, wait ms, 'global' | 'chat' | 'paused', '', 0, server now}, or {0, wait ms, 'booked',
-- member, ms until asking again, server now} (server now: the server clock, for the witness).
local p = ARGV[1]
local chat = ARGV[2]
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[10], ARGV[11], ARGV[12])
local now = steady_ms(KEYS[2], p .. 'clock', server_now)
local margin = tonumber(ARGV[7])
local wait = 0
for _, key in ipairs({p .. 'pause:global', p .. 'pause:outage'}) do
  local untl = redis.call('GET', key)
  if untl and tonumber(untl) - now > wait then wait = tonumber(untl) - now end
end
local chat_pause = redis.call('ZSCORE', p .. 'paused', chat)
if chat_pause and tonumber(chat_pause) - now > wait then wait = tonumber(chat_pause) - now end
if wait > 0 then return {0, wait, 'paused', '', 0, server_now} end

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
  -- limit + 2: `own` may be among them
  local before = scores(redis.call('ZRANGE', key, t, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
    limit + 2, 'WITHSCORES'))
  local after = scores(redis.call('ZRANGE', key, '(' .. t, '+inf', 'BYSCORE', 'LIMIT', 0,
    limit + 2, 'WITHSCORES'))
  for j = 0, limit do
    local lo, hi = t, t
    if j > 0 then lo = before[j] end
    if limit - j > 0 then hi = after[limit - j] end
    if lo and hi and hi - lo < window then return false end
  end
  return true
end

-- The earliest time a send may be appended to a log: now, or when the entry `limit` places
-- back leaves the window, and never before the last entry (appended last, only the entries
-- before it bound it; answers re-stamp entries, so scores need not be in the order taken).
local function next_slot(key, limit, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local n = redis.call('ZCARD', key)
  local at = now
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > at then at = tonumber(last[2]) end
  if n < limit then return at end
  local edge = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
  return math.max(at, tonumber(edge[2]) + window)
end

local book_max = tonumber(ARGV[8])
local lead = math.floor(tonumber(ARGV[4]) / 2)

-- In how many ms a caller holding a slot at `at` should ask again to refine it (0: never).
local function ask_at(at)
  if at - now > lead then return at - lead - now end
  return 0
end

-- How long a caller with a reservation at `at` waits before coming back for it.
local function come_back(at)
  local ask = ask_at(at)
  if ask > 0 then return ask end
  return math.max(1, at - now)
end

-- The earliest time `own` (now at `at`) may move to by one log: `limit` entries before it must
-- lie a whole window back.
local function earliest(key, limit, window, at, own)
  local raw = redis.call('ZRANGE', key, at, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, limit + 1,
    'WITHSCORES')
  local k = 0
  for i = 1, #raw, 2 do
    if raw[i] ~= own then
      k = k + 1
      if k == limit then return tonumber(raw[i + 1]) + window end
    end
  end
  return now
end

-- Could the send `own` be at slot t in both logs?
local function fits_both(t, own)
  return fits(KEYS[1], glimit, gwin, t, own) and fits(chat_key, climit, cwin, t, own)
end

-- Move the send `own` to slot t in both logs; its member names the slot, so it is renamed.
local function move(own, t)
  local moved = t .. ':' .. string.match(own, ':(%d+)$')
  redis.call('ZREM', KEYS[1], own)
  redis.call('ZREM', chat_key, own)
  redis.call('ZADD', KEYS[1], t, moved)
  redis.call('ZADD', chat_key, t, moved)
  return moved
end

local own = redis.call('GET', rsv_key)
if ARGV[9] ~= '' then own = ARGV[9] end
if own then
  local at = tonumber(string.match(own, '^(%d+):'))
  local slack = math.floor(margin / 2)
  redis.call('DEL', rsv_key)
  if now <= at + slack then
    -- In time: refine the slot, then send, book or wait for it (never before it).
    local r = math.max(now, earliest(KEYS[1], glimit, gwin, at, own),
      earliest(chat_key, climit, cwin, at, own))
    if r < at and fits_both(r, own) then own, at = move(own, r), r end
    if at <= now then return {1, 0, '', own, 0, server_now} end
    if at - now <= book_max then
      return {0, at - now, 'booked', own, ask_at(at), server_now}
    end
    redis.call('SET', rsv_key, own, 'PX', at - now + gwin)
    return {0, come_back(at), 'global', '', 0, server_now}
  end
  -- Late: send now if the logs hold the send at its real time; else give the slot back (an
  -- entry fewer is always safe) and queue again like anyone else.
  if fits_both(now, own) then return {1, 0, '', move(own, now), 0, server_now} end
  redis.call('ZREM', KEYS[1], own)
  redis.call('ZREM', chat_key, own)
end

-- The logs have no lifetime on the server (a step forward of its clock would expire them at
-- once): the bot's is trimmed by next_slot, and a chat's log is forgotten a window after its
-- last entry, on the limiter's clock (<prefix>chats: chat -> when), a few chats per call.
-- Chats' pauses that have ended are forgotten the same way (<prefix>paused: chat -> end).
local quiet = redis.call('ZRANGE', p .. 'chats', '-inf', now, 'BYSCORE', 'LIMIT', 0, 2)
for _, c in ipairs(quiet) do
  redis.call('DEL', p .. 'chat:' .. c)
  redis.call('ZREM', p .. 'chats', c)
end
quiet = redis.call('ZRANGE', p .. 'paused', '-inf', now, 'BYSCORE', 'LIMIT', 0, 2)
if #quiet > 0 then redis.call('ZREM', p .. 'paused', unpack(quiet)) end

local chat_at = next_slot(chat_key, climit, cwin)
if chat_at > now then return {0, chat_at - now, 'chat', '', 0, server_now} end
local at = next_slot(KEYS[1], glimit, gwin)
local member = at .. ':' .. redis.call('INCR', p .. 'seq')
redis.call('ZADD', KEYS[1], at, member)
redis.call('ZADD', chat_key, at, member)
redis.call('ZADD', p .. 'chats', 'GT', at + cwin, chat)
if at == now then return {1, 0, '', member, 0, server_now} end
if at - now <= book_max then return {0, at - now, 'booked', member, ask_at(at), server_now} end
redis.call('SET', rsv_key, member, 'PX', at - now + gwin)
return {0, come_back(at), 'global', '', 0, server_now}
