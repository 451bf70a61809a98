-- Renew a claim held by this instance. KEYS: claim   ARGV: instance, ttl_ms.  Returns 1 if renewed.
-- A task claim's renewal also gives KEYS[2] = task and ARGV[3] = the claim's fencing token: it renews only
-- while no later claim took the task over (the task's 'fence' is still the token), and takes back a claim
-- that lapsed meanwhile (a process paused past its TTL that nobody replaced).
local held = redis.call('GET', KEYS[1])
if KEYS[2] and ARGV[3] and ARGV[3] ~= '' then
  if redis.call('HGET', KEYS[2], 'fence') ~= ARGV[3] then return 0 end
  if held == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
  if not held then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
  end
  return 0
end
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
