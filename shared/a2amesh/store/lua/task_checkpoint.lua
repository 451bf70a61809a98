-- Store a task's checkpoint for the worker holding its claim.
-- KEYS: task   ARGV: checkpoint, fence (the worker's claim token; '' stores unfenced)
-- Returns 1 when stored, 0 when fenced (a later claim took the task over: nothing stored).
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'fence') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[1])
return 1
