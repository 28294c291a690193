-- rate_take: take one send from the bot's global window and a chat's window together, or from
-- neither, on the server clock, so every worker process shares one budget.
-- KEYS[1] <prefix>global (other keys derive from ARGV[1], same slot)
-- ARGV[1] key prefix (emq:{cm.notify}:rate:), ARGV[2] chat id, ARGV[3] global limit,
-- ARGV[4] global window ms, ARGV[5] chat limit, ARGV[6] chat window ms, ARGV[7] safety margin ms
-- (added to each window: arrival at Telegram jitters by a few ms)
-- Windows are sliding logs (sorted sets of send times). A pause (after a 429) blocks its scope.
-- When the global window is full, waiters are spread one send-interval apart in the order they
-- asked, so they do not all come back for the same free slot.
-- Returns {1, 0, ''} taken, or {0, wait ms, 'global' | 'chat' | 'paused'}.
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

local function blocked(key, limit, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) < limit then return 0 end
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now + 1)
end

local gwin = tonumber(ARGV[4]) + margin
local cwin = tonumber(ARGV[6]) + margin
local chat_key = p .. 'chat:' .. chat
local cw = blocked(chat_key, tonumber(ARGV[5]), cwin)
if cw > 0 then return {0, cw, 'chat'} end
local gw = blocked(KEYS[1], tonumber(ARGV[3]), gwin)
if gw > 0 then
  local queued = redis.call('INCR', p .. 'gqueue')
  redis.call('PEXPIRE', p .. 'gqueue', gwin)
  return {0, gw + math.floor((queued - 1) * gwin / tonumber(ARGV[3])), 'global'}
end
local member = now .. ':' .. redis.call('INCR', p .. 'seq')
redis.call('ZADD', KEYS[1], now, member)
redis.call('ZADD', chat_key, now, member)
redis.call('PEXPIRE', KEYS[1], gwin)
redis.call('PEXPIRE', chat_key, cwin)
return {1, 0, ''}
