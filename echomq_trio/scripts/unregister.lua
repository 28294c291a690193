-- unregister: cancel a recurring schedule. Occurrences already fired are not touched.
-- transition: registered -> (none)
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] name
-- Returns 'cancelled', or 'absent' (no such registration).
-- cost: O(log n)
local qp = ARGV[1]
local name = ARGV[2]
local existed = redis.call('DEL', qp .. KEY.registration .. name)
  + redis.call('ZREM', KEYS[1], name)
if existed > 0 then
  emit(qp, 'cancelled', name)
  return 'cancelled'
end
return 'absent'
