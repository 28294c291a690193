-- rate_pause: after a 429, stop sending to a chat (or to everyone) for a while. A pause only
-- ever extends. With scope 'auto' the pause is global when the bot's own window is (nearly)
-- full, since then the global limit is the likely cause, and the chat's otherwise. Scope
-- 'outage' is the pause of a process that found Telegram answering nobody: it blocks every chat
-- on its own key (a 429's pause is left alone), is extended while the probes fail and deleted
-- when one succeeds (a plain DEL of <prefix>pause:outage).
-- KEYS[1] <prefix>global, KEYS[2] the queue's meta (other keys derive from ARGV[1], same slot)
-- ARGV[1] key prefix (the queue's app key `rate:`, as for rate_take), ARGV[2] 'chat' | 'global'
-- | 'auto' | 'outage', ARGV[3] chat id, ARGV[4] ms, ARGV[5] global limit, ARGV[6] global window ms,
-- ARGV[7] safety margin ms, ARGV[8..10] the caller's witness of the server clock (as for
-- rate_take)
-- A pause's end is kept on the limiter's own clock (rate_take explains it), in keys with no
-- lifetime (a step forward of the server clock must not expire them): the bot's and the
-- outage's in <prefix>pause:global and <prefix>pause:outage (an end that has passed holds
-- nothing), a chat's in <prefix>paused (chat -> end; rate_take forgets those that ended).
-- cost: O(log n) in the entries of the bot's window
-- Returns {scope paused ('chat' | 'global' | 'outage'), pause end in server ms}.
local p = ARGV[1]
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[8], ARGV[9], ARGV[10])
local now = steady_ms(KEYS[2], p .. 'clock', server_now)
local scope = ARGV[2]
if scope == 'auto' then
  local window = tonumber(ARGV[6]) + tonumber(ARGV[7] or '0')
  local used = redis.call('ZCOUNT', KEYS[1], '(' .. (now - window), now)
  if used >= tonumber(ARGV[5]) - 1 then scope = 'global' else scope = 'chat' end
end
local untl = now + tonumber(ARGV[4])
local cur
if scope == 'chat' then
  cur = redis.call('ZSCORE', p .. 'paused', ARGV[3])
else
  cur = redis.call('GET', p .. 'pause:' .. scope)
end
-- Answered in server ms: the limiter's clock is its own.
if cur and tonumber(cur) >= untl then return {scope, tonumber(cur) - now + server_now} end
if scope == 'chat' then
  redis.call('ZADD', p .. 'paused', untl, ARGV[3])
else
  redis.call('SET', p .. 'pause:' .. scope, untl)
end
return {scope, untl - now + server_now}
