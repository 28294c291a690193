-- chat_migrate: Telegram upgraded a basic group to a supergroup, whose id is new for good.
-- Record the move and carry the chat's link (the room that plays in it) to the new id, in one
-- step.
-- transition: (old linked) -> (old -> new recorded, new linked)
-- KEYS[1] migrations: emq:{<queue>}:app:migrated (old chat id -> new chat id), KEYS[2]
-- chat_links: emq:{<queue>}:app:chat-rooms (chat id -> room id); one slot (the notify queue's)
-- ARGV[1] the old chat id, ARGV[2] the new chat id (checked by the caller: integers, unequal)
-- cost: O(1)
-- Idempotent and safe in any order: the three signals of one upgrade (the service message in
-- the old group, the one in the new supergroup, a send to the old id answered 400 with
-- migrate_to_chat_id) each call it, and the first records the move and carries the link while
-- the others change nothing. A group is upgraded once: a call naming another new id for an old
-- one already recorded changes nothing and answers the recorded one. A new id linked to a room
-- of its own already (played in before the move was known) keeps it, and the old id keeps its
-- link too (notices to it follow the record).
-- Returns {outcome = 'recorded' (by this call) | 'known' (recorded before), new: the new id
-- recorded, room: the room linked to it or ''}.
local old = ARGV[1]
local outcome = 'known'
local new = redis.call('HGET', KEYS[1], old)
if not new then
  new = ARGV[2]
  redis.call('HSET', KEYS[1], old, new)
  outcome = 'recorded'
end
local room = redis.call('HGET', KEYS[2], old)
if room then
  local there = redis.call('HGET', KEYS[2], new)
  if not there then
    redis.call('HSET', KEYS[2], new, room)
    there = room
  end
  if there == room then redis.call('HDEL', KEYS[2], old) end
end
return {'outcome', outcome, 'new', new, 'room', redis.call('HGET', KEYS[2], new) or ''}
