-- Append turns to a conversation, only while the caller holds the context lock (the fence).
-- KEYS: history list, lock   ARGV: token, ttl_s, max_len, message_json...
-- Returns 1 when appended, 0 when the lock was lost.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
for i = 4, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
