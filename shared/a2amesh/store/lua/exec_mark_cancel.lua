-- Mark a running execution for cancellation (read by its owner, or by whoever takes it over).
-- KEYS: exec   Returns the execution's status, or '' when there is no such execution.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if status == 'running' then redis.call('HSET', KEYS[1], 'cancel', '1') end
return status
