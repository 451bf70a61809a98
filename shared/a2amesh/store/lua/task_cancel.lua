-- Mark a task canceled (SPEC §3.6): checked before start and between steps.
-- KEYS: task, claim   ARGV: now_ms, queued_ttl_s
-- Returns {outcome, state, record, owner}: terminal | marked
local state = redis.call('HGET', KEYS[1], 'state')
local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
if state and terminal[state] then
  return {'terminal', state, redis.call('HGET', KEYS[1], 'record') or '', ''}
end
redis.call('HSET', KEYS[1], 'cancel', '1', 'updated', ARGV[1])
if not state then
  redis.call('HSET', KEYS[1], 'state', 'TASK_STATE_SUBMITTED')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return {'marked', state or 'TASK_STATE_SUBMITTED', redis.call('HGET', KEYS[1], 'record') or '', redis.call('GET', KEYS[2]) or ''}
