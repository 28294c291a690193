-- replay: give a dead job a fresh start in pending, attempts reset to 0; its last error is kept
-- for the record.  dead -> pending
-- KEYS[1] dead   KEYS[2] pending   KEYS[3] wake
-- ARGV[1] job key prefix, ARGV[2] job id
-- Returns 1 replayed, 0 not dead, -1 gone.
local id = ARGV[2]
local row = ARGV[1] .. id
local state = redis.call('HGET', row, 'state')
if not state then return -1 end
if state ~= 'dead' then return 0 end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', row, 'state', 'pending', 'attempts', 0)
redis.call('ZADD', KEYS[2], 0, id)
wake(KEYS[3], 1)
return 1
