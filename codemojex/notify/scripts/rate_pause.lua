-- rate_pause: after a 429, stop sending to a chat (or to everyone) for a while. A pause only
-- ever extends. With scope 'auto' the pause is global when the bot's own window is (nearly)
-- full, since then the global limit is the likely cause, and the chat's otherwise. Scope
-- 'outage' is the pause of a process that found Telegram answering nobody: it blocks every chat
-- on its own key (a 429's pause is left alone), is extended while the probes fail and deleted
-- when one succeeds (a plain DEL of rate_pause_outage).
-- transition: none (a pause of the windows set or extended)
-- KEYS[1] rate_global: emq:{<queue>}:app:rate:global (the bot's log), KEYS[2] queue_meta: the
-- queue's meta (where steps of the server clock are recorded), KEYS[3] rate_clock:
-- emq:{<queue>}:app:rate:clock, KEYS[4] rate_pause_global: emq:{<queue>}:app:rate:pause:global,
-- KEYS[5] rate_pause_outage: emq:{<queue>}:app:rate:pause:outage, KEYS[6] rate_paused:
-- emq:{<queue>}:app:rate:paused, KEYS[7] rate_chats: emq:{<queue>}:app:rate:chats, KEYS[8]
-- rate_seq: emq:{<queue>}:app:rate:seq, KEYS[9] rate_chat_stem: emq:{<queue>}:app:rate:chat:
-- (a chat's log is KEYS[9] .. its id), KEYS[10] rate_reserved_stem: emq:{<queue>}:app:rate:rsv:
-- (a chat's reservation is KEYS[10] .. its id); one slot (every rate script takes these KEYS)
-- ARGV[1] 'chat' | 'global' | 'auto' | 'outage', ARGV[2] chat id, ARGV[3] ms, ARGV[4] global
-- limit, ARGV[5] global window ms, ARGV[6] safety margin ms, ARGV[7..9] the caller's witness of
-- the server clock (as for rate_take)
-- A pause's end is kept on the limiter's own clock (rate_take explains it), in keys with no
-- lifetime (a step forward of the server clock must not expire them): the bot's and the
-- outage's in rate_pause_global and rate_pause_outage (an end that has passed holds
-- nothing), a chat's in rate_paused (chat -> end; rate_take forgets those that ended).
-- cost: O(log n) in the entries of the bot's window
-- Returns {scope = the scope paused ('chat' | 'global' | 'outage'), until_ms: the pause's end in
-- server ms}.
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[7], ARGV[8], ARGV[9])
local now = steady_ms(KEYS[2], KEYS[3], server_now)
local scope = ARGV[1]
if scope == 'auto' then
  local window = tonumber(ARGV[5]) + tonumber(ARGV[6] or '0')
  local used = redis.call('ZCOUNT', KEYS[1], '(' .. (now - window), now)
  if used >= tonumber(ARGV[4]) - 1 then scope = 'global' else scope = 'chat' end
end
local untl = now + tonumber(ARGV[3])
local pause_key = KEYS[4]
if scope == 'outage' then pause_key = KEYS[5] end
local cur
if scope == 'chat' then
  cur = redis.call('ZSCORE', KEYS[6], ARGV[2])
else
  cur = redis.call('GET', pause_key)
end
-- Answered in server ms: the limiter's clock is its own.
if cur and tonumber(cur) >= untl then
  return {'scope', scope, 'until_ms', tonumber(cur) - now + server_now}
end
if scope == 'chat' then
  redis.call('ZADD', KEYS[6], untl, ARGV[2])
else
  redis.call('SET', pause_key, untl)
end
return {'scope', scope, 'until_ms', untl - now + server_now}
