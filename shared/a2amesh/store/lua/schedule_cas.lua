-- Compare-and-set one schedule's state and its timer together (SPEC §7 schedules).
-- KEYS: schedules hash, schedule timers zset (same {schedules} hash tag)
-- ARGV: schedule id, expected state JSON ('' = must be absent), new state JSON ('' = delete),
--       timer score in ms ('' = no timer)
-- Returns 1 when written, 0 when the stored state is not the expected one (someone else moved it on).
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then current = '' end
if current ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
if ARGV[4] == '' or ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
end
return 1
