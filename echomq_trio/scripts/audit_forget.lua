-- audit_forget: remove the readers of an audit consumer group that hold no record and have been
-- idle for longer than a time (readers of past runs), in one step: a reader handed records
-- between a separate look and the removal would lose them from the group's pending list.
-- transition: none (the audit stream)
-- KEYS[1] emq:{q}:audit
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] consumer group, ARGV[3] idle ms (a reader idle for
-- more than this, by XINFO CONSUMERS' idle, goes), ARGV[4] a reader to keep whatever its state
-- ('' for none)
-- Returns the names of the readers removed (an error NOGROUP when there is no such group).
-- cost: O(the group's readers)
local qp = ARGV[1]
local stream = qp .. KEY.audit
local group, idle_ms, keep = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local removed = {}
for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
  local f = {}
  for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
  if f['name'] ~= keep and tonumber(f['pending']) == 0 and tonumber(f['idle']) > idle_ms then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, f['name'])
    removed[#removed + 1] = f['name']
  end
end
return removed
