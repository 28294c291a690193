-- enqueue: admit jobs to the flat pending set, ready to claim.
-- transition: (none) -> pending
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] idempotency key ('' for none), ARGV[3] its TTL in ms,
-- ARGV[4] the jobs' timeout in ms ('' for none: kept in each row as timeout_ms, the handler's
-- deadline per attempt), ARGV[5] the jobs' priority ('' for none: 0; an integer, kept in each
-- row as priority when not 0; a job waits in pending at minus it, so higher first and equal
-- priorities in id order), ARGV[6] the jobs' expiry ('' for none; server ms, or '+ms' from the
-- server's now: kept in each row as expires_ms, the time after which a claim never leases it,
-- and in emq:{q}:expiries for the metronome's sweep), then pairs ARGV[2k+5] job id, ARGV[2k+6]
-- payload
-- With a key (sent with exactly one job): if emq:{q}:key:<key> exists the job is a duplicate
-- and nothing changes; otherwise the job is admitted and the key is set to its id with PX TTL,
-- so it is remembered for the TTL even after the job has finished.
-- Returns one word per job, in order: 'enqueued', or 'duplicate' (a row with that id exists,
-- or the key was used; nothing is changed).
-- cost: O(jobs admitted), each O(log n); at most ENQUEUE_CHUNK (10,000) jobs a call; per job at
-- most 3 commands (its row, its place in pending, its event; 1 more with a timeout, a priority
-- or an expiry, or any of them, and 1 more with an expiry: its place in expiries), per call 2
-- (the meta read, the wake), 2 more with a key, 1 more with a relative expiry (the clock), and 3
-- more the first time (the clock, the queue's creation noted)
local qp = ARGV[1]
local out = {}
local added = 0
local guard = nil
if ARGV[2] ~= '' then
  if #ARGV ~= 8 then return redis.error_reply('ERR an idempotency key guards exactly one job') end
  guard = qp .. KEY.idempotency .. ARGV[2]
  if redis.call('EXISTS', guard) == 1 then return {'duplicate'} end
end
created(qp)
local more, prio, expires = row_options(ARGV[4], ARGV[5], ARGV[6])
for i = 7, #ARGV, 2 do
  local id = ARGV[i]
  -- A new row is its payload alone (a pending job's row has no state): HSETNX writes it only
  -- when no row with this id exists, so one command both checks and writes.
  if redis.call('HSETNX', qp .. KEY.job .. id, 'payload', ARGV[i + 1]) == 0 then
    out[#out + 1] = 'duplicate'
  else
    if #more > 0 then redis.call('HSET', qp .. KEY.job .. id, unpack(more)) end
    if expires then redis.call('ZADD', qp .. KEY.expiries, expires, id) end
    added = added + to_pending(qp, id, prio)
    emit(qp, 'enqueued', id)
    if guard then redis.call('SET', guard, id, 'PX', ARGV[3]) end
    out[#out + 1] = 'enqueued'
  end
end
wake(qp, added)
return out
