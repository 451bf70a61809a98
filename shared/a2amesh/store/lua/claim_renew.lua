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
    local state = redis.call('HGET', KEYS[2], 'state')
    local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
    -- a final just stored by this claim released it: nothing to take back
    if not (state and terminal[state]) then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
    return 1
  end
  return 0
end
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
