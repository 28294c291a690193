-- rate_take: take one send from the bot's global window and a chat's window together, or from
-- neither, on the server clock, so every worker process shares one budget.
-- transition: none (a send taken, booked or refused)
-- KEYS[1] rate_global: emq:{<queue>}:app:rate:global (the bot's log), KEYS[2] queue_meta: the
-- queue's meta (where steps of the server clock are recorded), KEYS[3] rate_clock:
-- emq:{<queue>}:app:rate:clock, KEYS[4] rate_pause_global: emq:{<queue>}:app:rate:pause:global,
-- KEYS[5] rate_pause_outage: emq:{<queue>}:app:rate:pause:outage, KEYS[6] rate_paused:
-- emq:{<queue>}:app:rate:paused, KEYS[7] rate_chats: emq:{<queue>}:app:rate:chats, KEYS[8]
-- rate_seq: emq:{<queue>}:app:rate:seq, KEYS[9] rate_chat_stem: emq:{<queue>}:app:rate:chat:
-- (a chat's log is KEYS[9] .. its id), KEYS[10] rate_reserved_stem: emq:{<queue>}:app:rate:rsv:
-- (a chat's reservation is KEYS[10] .. its id); one slot (every rate script takes these KEYS)
-- ARGV[1] chat id, ARGV[2] global limit, ARGV[3] global window ms, ARGV[4] chat limit, ARGV[5]
-- chat window ms, ARGV[6] safety margin ms, ARGV[7] longest booking ms (0: never book), ARGV[8]
-- a booking the caller holds and comes back for ('': none), ARGV[9..11] the caller's witness of
-- the server clock (the server ms it last read, '' for none; ms since; ms that call took)
-- cost: O(log n + limit) in the entries of the two logs (a window's worth at most)
--
-- Every time here is the limiter's own clock (rate_clock, the prelude's steady_ms): the
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
-- ARGV[7] ms ahead, it is entered in both logs and the answer is 'booked' with the wait until
-- the slot, the entry and when to ask again (0: never). Nothing is remembered for the
-- chat, so a booking never sent only leaves one entry more in the logs than was sent, which is
-- always safe.
-- Coming back (a reservation, or a booking passed in ARGV[8]) up to half the margin late, the
-- slot is refined: it moves as early as the logs allow now that the sends it was queued behind
-- have been answered (it never moves later); the answer is send now, a booking, or (when
-- booking is off) the wait. Asking again half a global window before a slot leaves the sends it
-- waits for time to be answered. Later than half the margin (the other half is the trip's), a
-- send goes now if the logs hold it at its real time; otherwise its slot is given back (one
-- entry fewer is always safe) and it queues again.
-- A pause (after a 429) blocks its scope; an outage pause (rate_pause 'outage': a process found
-- Telegram answering nobody and probes it) blocks every chat.
-- Returns {outcome = 'taken', entry: the member, now: server now} send now (then rate_sent
-- with the entry), or {outcome = 'global' | 'chat' | 'paused' (the window or pause that holds
-- it), wait_ms, now}, or {outcome = 'booked', wait_ms, entry, ask_ms: ms until asking again (0:
-- never), now} (now: the server clock, for the witness).
local chat = ARGV[1]
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[9], ARGV[10], ARGV[11])
local now = steady_ms(KEYS[2], KEYS[3], server_now)
local margin = tonumber(ARGV[6])
local wait = 0
for _, key in ipairs({KEYS[4], KEYS[5]}) do
  local untl = redis.call('GET', key)
  if untl and tonumber(untl) - now > wait then wait = tonumber(untl) - now end
end
local chat_pause = redis.call('ZSCORE', KEYS[6], chat)
if chat_pause and tonumber(chat_pause) - now > wait then wait = tonumber(chat_pause) - now end
if wait > 0 then return {'outcome', 'paused', 'wait_ms', wait, 'now', server_now} end

local glimit, gwin = tonumber(ARGV[2]), tonumber(ARGV[3]) + margin
local climit, cwin = tonumber(ARGV[4]), tonumber(ARGV[5]) + margin
local chat_key = KEYS[9] .. chat
local rsv_key = KEYS[10] .. chat

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

local book_max = tonumber(ARGV[7])
local lead = math.floor(tonumber(ARGV[3]) / 2)

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

-- Move the send `own` to slot t in both logs; its member names the slot, so it is renamed. A
-- later slot keeps the chat's log a window past it (rate_chats).
local function move(own, t)
  local moved = t .. ':' .. string.match(own, ':(%d+)$')
  redis.call('ZREM', KEYS[1], own)
  redis.call('ZREM', chat_key, own)
  redis.call('ZADD', KEYS[1], t, moved)
  redis.call('ZADD', chat_key, t, moved)
  redis.call('ZADD', KEYS[7], 'GT', t + cwin, chat)
  return moved
end

local own = redis.call('GET', rsv_key)
if ARGV[8] ~= '' then own = ARGV[8] end
if own then
  local at = tonumber(string.match(own, '^(%d+):'))
  local slack = math.floor(margin / 2)
  redis.call('DEL', rsv_key)
  if now <= at + slack then
    -- In time: refine the slot, then send, book or wait for it (never before it).
    local r = math.max(now, earliest(KEYS[1], glimit, gwin, at, own),
      earliest(chat_key, climit, cwin, at, own))
    if r < at and fits_both(r, own) then own, at = move(own, r), r end
    if at <= now then return {'outcome', 'taken', 'entry', own, 'now', server_now} end
    if at - now <= book_max then
      return {'outcome', 'booked', 'wait_ms', at - now, 'entry', own, 'ask_ms', ask_at(at),
        'now', server_now}
    end
    redis.call('SET', rsv_key, own, 'PX', at - now + gwin)
    return {'outcome', 'global', 'wait_ms', come_back(at), 'now', server_now}
  end
  -- Late: send now if the logs hold the send at its real time; else give the slot back (an
  -- entry fewer is always safe) and queue again like anyone else.
  if fits_both(now, own) then return {'outcome', 'taken', 'entry', move(own, now), 'now', server_now} end
  redis.call('ZREM', KEYS[1], own)
  redis.call('ZREM', chat_key, own)
end

-- The logs have no lifetime on the server (a step forward of its clock would expire them at
-- once): the bot's is trimmed by next_slot, and a chat's log is forgotten a window after its
-- last entry, on the limiter's clock (rate_chats: chat -> when), a few chats per call.
-- Chats' pauses that have ended are forgotten the same way (rate_paused: chat -> end).
local quiet = redis.call('ZRANGE', KEYS[7], '-inf', now, 'BYSCORE', 'LIMIT', 0, 2)
for _, c in ipairs(quiet) do
  redis.call('DEL', KEYS[9] .. c)
  redis.call('ZREM', KEYS[7], c)
end
quiet = redis.call('ZRANGE', KEYS[6], '-inf', now, 'BYSCORE', 'LIMIT', 0, 2)
if #quiet > 0 then redis.call('ZREM', KEYS[6], unpack(quiet)) end

local chat_at = next_slot(chat_key, climit, cwin)
if chat_at > now then return {'outcome', 'chat', 'wait_ms', chat_at - now, 'now', server_now} end
local at = next_slot(KEYS[1], glimit, gwin)
local member = at .. ':' .. redis.call('INCR', KEYS[8])
redis.call('ZADD', KEYS[1], at, member)
redis.call('ZADD', chat_key, at, member)
redis.call('ZADD', KEYS[7], 'GT', at + cwin, chat)
if at == now then return {'outcome', 'taken', 'entry', member, 'now', server_now} end
if at - now <= book_max then
  return {'outcome', 'booked', 'wait_ms', at - now, 'entry', member, 'ask_ms', ask_at(at),
    'now', server_now}
end
redis.call('SET', rsv_key, member, 'PX', at - now + gwin)
return {'outcome', 'global', 'wait_ms', come_back(at), 'now', server_now}
