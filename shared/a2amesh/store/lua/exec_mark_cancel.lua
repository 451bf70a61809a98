-- Mark a running or paused execution for cancellation (read by its owner, by whoever takes it over,
-- or by the replica applying a resume of a paused one).
-- KEYS: exec   Returns the execution's status, or '' when there is no such execution.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if status == 'running' or status == 'paused' then redis.call('HSET', KEYS[1], 'cancel', '1') end
return status
