-- CancelTask (SPEC §3.6): set the cancel mark and, when nobody holds the task, store it CANCELED at once, so the
-- CANCELED answered to the canceller is stored before it is answered and no later write moves the task on.
-- KEYS: task, claim, subs, and for a workflow's task its execution (same slot)   ARGV: now_ms, expected_updated (the 'updated' field read with the record, '' for
--   none), canceled_record_json (that record, CANCELED; a bare one when none was read), ttl_s, agent, request
--   (names the CancelTask: the first one to cancel the task is kept as 'canceled_by', later ones as 'canceled_also')
-- Returns {outcome, state, record, ...}: terminal (a final stands: it is returned; 4th: canceled_by) | marked (a
-- live claim: its owner stops the task and stores it; 4th: the owner) | moved (written since it was read: read
-- it again) | canceled (stored now; then the subscribers) | execution (it exists: the executor cancels it)
--#include task_record
--#include cancellers
local state = redis.call('HGET', KEYS[1], 'state')
local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
if state and terminal[state] then
  return {'terminal', state, redis.call('HGET', KEYS[1], 'record') or '', redis.call('HGET', KEYS[1], 'canceled_by') or ''}
end
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 then
  return {'execution', state or '', ''}
end
redis.call('HSET', KEYS[1], 'cancel', '1')
note_canceller(KEYS[1], ARGV[6])
local owner = redis.call('GET', KEYS[2])
if owner then
  return {'marked', state or '', redis.call('HGET', KEYS[1], 'record') or '', owner}
end
if (redis.call('HGET', KEYS[1], 'updated') or '') ~= ARGV[2] then
  return {'moved', state or '', ''}
end
if not redis.call('HGET', KEYS[1], 'agent') then redis.call('HSET', KEYS[1], 'agent', ARGV[5]) end
local result = write_task_record(KEYS[1], KEYS[2], KEYS[3], '', ARGV[3], 'TASK_STATE_CANCELED', ARGV[1], ARGV[4], '1')
result[1] = 'canceled'
result[3] = ARGV[3]
return result
