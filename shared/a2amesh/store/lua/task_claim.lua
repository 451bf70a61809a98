-- Claim a task for one replica before doing its work (SPEC §3.3).
-- KEYS: task, claim, subs   ARGV: instance, claim_ttl_ms, now_ms, record_json, state, agent, queued_ttl_s
-- Returns {outcome, state, record, fence, subscribers...}; outcome is claimed | done | canceled | busy.
-- fence: the claim's fencing token (the task's 'fence' field, incremented by every claim; '' unless claimed):
-- the writes of this claim's worker carry it and are refused once a later claim took the task over.
local state = redis.call('HGET', KEYS[1], 'state')
local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
if state and terminal[state] then
  return {'done', state, redis.call('HGET', KEYS[1], 'record') or '', ''}
end
local owner = redis.call('GET', KEYS[2])
if owner and owner ~= ARGV[1] then
  return {'busy', state or '', redis.call('HGET', KEYS[1], 'record') or '', ''}
end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then
  return {'canceled', state or '', redis.call('HGET', KEYS[1], 'record') or '', ''}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local result = {'claimed', state or '', redis.call('HGET', KEYS[1], 'record') or '', tostring(fence)}
if not state or state == 'TASK_STATE_SUBMITTED' then
  redis.call('HSET', KEYS[1], 'record', ARGV[4], 'state', ARGV[5], 'agent', ARGV[6], 'updated', ARGV[3])
else
  redis.call('HSET', KEYS[1], 'updated', ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
for _, s in ipairs(redis.call('SMEMBERS', KEYS[3])) do table.insert(result, s) end
return result
