-- Renew a claim held by this instance. KEYS: claim   ARGV: instance, ttl_ms.  Returns 1 if renewed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
