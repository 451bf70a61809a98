-- Store the next version of an artifact (versions count from 0).
-- KEYS: artifact hash, names set   ARGV: name, data, meta_json, ttl_s
-- Returns the new version.
local v = redis.call('HINCRBY', KEYS[1], 'next', 1) - 1
redis.call('HSET', KEYS[1], 'd:' .. v, ARGV[2], 'm:' .. v, ARGV[3], 'latest', v)
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return v
