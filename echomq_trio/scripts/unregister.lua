-- unregister: cancel a recurring schedule. Occurrences already fired are not touched.
-- registered -> (none)
-- KEYS[1] emq:{q}:repeat (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] name
-- Returns 1 cancelled, 0 absent.
local qp = ARGV[1]
local name = ARGV[2]
local existed = redis.call('DEL', qp .. 'repeat:' .. name) + redis.call('ZREM', KEYS[1], name)
if existed > 0 then
  emit(qp, 'cancelled', name)
  return 1
end
return 0
