-- Write a task's record and state while holding (or finishing) its claim.
-- KEYS: task, claim, subs   ARGV: instance, record_json, state, now_ms, ttl_s, release ('1' releases the claim)
-- Returns {outcome, state, record, subscribers...}: written | terminal (an earlier final stands; it is returned)
local state = redis.call('HGET', KEYS[1], 'state')
local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
local result
if state and terminal[state] then
  result = {'terminal', state, redis.call('HGET', KEYS[1], 'record') or ''}
else
  redis.call('HSET', KEYS[1], 'record', ARGV[2], 'state', ARGV[3], 'updated', ARGV[4])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  result = {'written', ARGV[3], ''}
end
if ARGV[6] == '1' then
  if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
  redis.call('EXPIRE', KEYS[3], 600)
end
for _, s in ipairs(redis.call('SMEMBERS', KEYS[3])) do table.insert(result, s) end
return result
