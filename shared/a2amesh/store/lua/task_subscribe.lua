-- Add a reply subject that wants a task's events, unless the task is already final.
-- KEYS: task, subs   ARGV: reply_subject, ttl_s
-- Returns {outcome, state, record}: terminal | added
local state = redis.call('HGET', KEYS[1], 'state')
local final = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1,
               TASK_STATE_INPUT_REQUIRED=1, TASK_STATE_AUTH_REQUIRED=1}
if state and final[state] then
  return {'terminal', state, redis.call('HGET', KEYS[1], 'record') or ''}
end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return {'added', state or '', redis.call('HGET', KEYS[1], 'record') or ''}
