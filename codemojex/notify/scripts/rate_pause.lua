-- rate_pause: after a 429, stop sending to a chat (or to everyone) for a while. A pause only
-- ever extends. With scope 'auto' the pause is global when the bot's own window is (nearly)
-- full, since then the global limit is the likely cause, and the chat's otherwise. Scope
-- 'outage' is the pause of a process that found Telegram answering nobody: it blocks every chat
-- on its own key (a 429's pause is left alone), is extended while the probes fail and deleted
-- when one succeeds (a plain DEL of <prefix>pause:outage).
-- KEYS[1] <prefix>global (other keys derive from ARGV[1], same slot)
-- ARGV[1] key prefix (the queue's app key `rate:`, as for rate_take), ARGV[2] 'chat' | 'global'
-- | 'auto' | 'outage', ARGV[3] chat id, ARGV[4] ms, ARGV[5] global limit, ARGV[6] global window ms,
-- ARGV[7] safety margin ms
-- cost: O(log n) in the entries of the bot's window
-- Returns {scope paused ('chat' | 'global' | 'outage'), pause end in server ms}.
local p = ARGV[1]
local now = now_ms()
local scope = ARGV[2]
if scope == 'auto' then
  local window = tonumber(ARGV[6]) + tonumber(ARGV[7] or '0')
  local used = redis.call('ZCOUNT', KEYS[1], '(' .. (now - window), now)
  if used >= tonumber(ARGV[5]) - 1 then scope = 'global' else scope = 'chat' end
end
local key = p .. 'pause:global'
if scope == 'chat' then key = p .. 'pause:chat:' .. ARGV[3] end
if scope == 'outage' then key = p .. 'pause:outage' end
local untl = now + tonumber(ARGV[4])
local cur = redis.call('GET', key)
if cur and tonumber(cur) >= untl then return {scope, tonumber(cur)} end
redis.call('SET', key, untl, 'PX', tonumber(ARGV[4]))
return {scope, untl}
