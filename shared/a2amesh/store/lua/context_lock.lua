-- Fenced per-context lock of a conversational agent (SPEC §3.8).
-- KEYS: lock   ARGV: op ('renew' | 'release'), token, ttl_ms
-- Returns 1 when the caller still held the lock (and renewed or released it), else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
if ARGV[1] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
return 1
