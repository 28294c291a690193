-- lane_enqueue: admit jobs to a fair lane (a group such as a chat).
-- transition: (none) -> pending (lane)
-- KEYS[1] emq:{q}:g:<group> (the lane; the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] group, ARGV[3] lane concurrency limit to set ('' keeps
-- it), ARGV[4] idempotency key ('' for none), ARGV[5] its TTL in ms, ARGV[6] seq scope ('' for
-- none), ARGV[7] seq number, ARGV[8] seq window, ARGV[9] the scope's TTL in ms, ARGV[10] the
-- jobs' timeout in ms ('' for none: kept in each row as timeout_ms, the handler's deadline per
-- attempt), ARGV[11] the jobs' priority ('' for none: 0; an integer, kept in each row as
-- priority when not 0), ARGV[12] the jobs' expiry ('' for none; server ms, or '+ms' from the
-- server's now: kept in each row as expires_ms and in emq:{q}:expiries, as for enqueue), then
-- pairs ARGV[2k+11] job id, ARGV[2k+12] payload
-- With a key (sent with exactly one job): if emq:{q}:key:<key> exists the job is a duplicate
-- and nothing changes; otherwise the job is admitted and the key is set to its id with PX TTL,
-- so it is remembered for the TTL even after the job has finished.
-- With a seq (exactly one job; echomq_trio.sequence): emq:{q}:seq:<scope> holds the scope's
-- highest admitted numbers, at most the window. The number is a duplicate (nothing changes) when
-- it is among them, or when the set is full and it is below the lowest; otherwise the job is
-- admitted, the number added, the lowest dropped past the window, and the TTL set anew.
-- Jobs of a lane are claimed highest priority first, equal priorities in id (mint) order (a job
-- waits in its lane at minus its priority); lanes are served round-robin.
-- Returns one word per job: 'enqueued', or 'duplicate' (nothing is changed).
-- cost: O(jobs admitted), each O(log n), plus O(w log w) with a seq of window w; at most
-- ENQUEUE_CHUNK (10,000) jobs a call
local qp = ARGV[1]
local g = ARGV[2]
local guard = nil
if ARGV[4] ~= '' then
  if #ARGV ~= 14 then return redis.error_reply('ERR an idempotency key guards exactly one job') end
  guard = qp .. KEY.idempotency .. ARGV[4]
  if redis.call('EXISTS', guard) == 1 then return {'duplicate'} end
end
local seen, drop = nil, {}
if ARGV[6] ~= '' then
  if #ARGV ~= 14 then return redis.error_reply('ERR a seq guards exactly one job') end
  seen = qp .. KEY.seq .. ARGV[6]
  if redis.call('SISMEMBER', seen, ARGV[7]) == 1 then return {'duplicate'} end
  local numbers = redis.call('SMEMBERS', seen)
  local full = #numbers >= tonumber(ARGV[8])
  numbers[#numbers + 1] = ARGV[7]
  table.sort(numbers, function(a, b) return tonumber(a) < tonumber(b) end)
  if full and numbers[1] == ARGV[7] then return {'duplicate'} end  -- below the window
  for i = 1, #numbers - tonumber(ARGV[8]) do drop[i] = numbers[i] end  -- past it once admitted
end
local now = now_ms()
created(qp, now)
if ARGV[3] ~= '' then
  redis.call('HSET', qp .. KEY.lane_limits, g, ARGV[3])
  lanes_changed(qp .. KEY.lane_limits)
end
local out = {}
local added = 0
local more, prio, expires = row_options(ARGV[10], ARGV[11], ARGV[12], now)
for i = 13, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('EXISTS', qp .. KEY.job .. id) == 1 then
    out[#out + 1] = 'duplicate'
  else
    to_waiting(qp, id, g, now, nil, prio, 'payload', ARGV[i + 1], unpack(more))
    if expires then redis.call('ZADD', qp .. KEY.expiries, expires, id) end
    emit(qp, 'enqueued', id, 'group', g)
    if guard then redis.call('SET', guard, id, 'PX', ARGV[5]) end
    if seen then
      redis.call('SADD', seen, ARGV[7])
      if #drop > 0 then redis.call('SREM', seen, unpack(drop)) end
      redis.call('PEXPIRE', seen, ARGV[9])
    end
    added = added + 1
    out[#out + 1] = 'enqueued'
  end
end
if added == 0 then
  -- Nothing admitted: the lane goes on the ring if its new limit lets it.
  ring_add(qp, g, now)
end
return out
