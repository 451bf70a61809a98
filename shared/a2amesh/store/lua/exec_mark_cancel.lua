-- Mark a running or paused execution for cancellation (read by its owner, by whoever takes it over, by the
-- replica applying a resume of a paused one, and by a runner letting a paused one go: exec_park.lua).
-- KEYS: exec   ARGV: request (names the CancelTask; the first one to mark the execution is kept as
--   'canceled_by', later ones as 'canceled_also')
-- Returns {status, canceled_by}; status '' when there is no such execution.
--#include cancellers
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'', ''} end
if status == 'running' or status == 'paused' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  note_canceller(KEYS[1], ARGV[1])
end
return {status, redis.call('HGET', KEYS[1], 'canceled_by') or ''}
