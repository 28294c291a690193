-- Helpers prepended to every transition script when it is loaded (not a transition itself).
-- now_ms(): server clock in Unix ms. wake(key, n): push up to n (at most 64) wake tokens for
-- parked consumers, keeping the list at 64 entries at most. tick(key): nudge a sleeping metronome.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function wake(key, n)
  if n < 1 then return end
  if n > 64 then n = 64 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  redis.call('LPUSH', key, unpack(tokens))
  redis.call('LTRIM', key, 0, 63)
end

local function tick(key)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 0)
end
