-- A task canceled before its request was pulled: the CancelTask stored a record that knew only the task id (no
-- contextId, no history). The request, pulled then, completes it once with its context and message, so GetTask,
-- ListTasks by context and the answers agree with what the caller sent. Nothing else of the record changes.
-- KEYS: task   ARGV: the completed record (JSON)   Returns the record stored after it.
local record = redis.call('HGET', KEYS[1], 'record')
if record and redis.call('HGET', KEYS[1], 'state') == 'TASK_STATE_CANCELED'
    and not string.find(record, '"contextId"', 1, true) then
  redis.call('HSET', KEYS[1], 'record', ARGV[1])
  return ARGV[1]
end
return record or ''
