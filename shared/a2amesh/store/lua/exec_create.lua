-- Create an execution record with NX semantics before its request is acked (SPEC §3.3, §7).
-- KEYS: exec, state, lease, events, nodes, timers, task (the workflow task's record: its cancel mark), claim, subs
-- ARGV: owner, lease_ttl_ms, now_ms, state_json, fields_json (object), nodes_json (object path -> json),
--       events_json (array of JSON texts), timers_json (object id -> due_ms), events_maxlen, retention_s,
--       task_record_json, task_state (optional: the workflow task's record, written on KEYS[7] with the
--       execution, so the task can be read as soon as the execution exists)
-- An execution created already finished (e.g. its input was refused) gets no lease and its retention TTL.
-- Returns {'created', epoch}, {'exists', status, epoch, lease_value, final_published}, or {'canceled'}
-- when the task was canceled before its execution existed (nothing is written then).
--#include task_record
--#include hash_fields
if redis.call('EXISTS', KEYS[1]) == 1 then
  local status = redis.call('HGET', KEYS[1], 'status') or ''
  local epoch = redis.call('HGET', KEYS[1], 'epoch') or '0'
  return {'exists', status, epoch, redis.call('GET', KEYS[3]) or '', redis.call('HGET', KEYS[1], 'final_published') or ''}
end
if KEYS[7] and redis.call('HGET', KEYS[7], 'cancel') == '1' then
  return {'canceled'}
end
local fields = cjson.decode(ARGV[5])
hset_fields(KEYS[1], {'status', 'running', 'epoch', '1', 'created', ARGV[3], 'updated', ARGV[3]}, fields)
redis.call('SET', KEYS[2], ARGV[4])
local running = (fields['status'] or 'running') == 'running'
if running then redis.call('SET', KEYS[3], ARGV[1] .. ':1', 'PX', ARGV[2]) end
hset_fields(KEYS[5], {}, cjson.decode(ARGV[6]))
for _, ev in ipairs(cjson.decode(ARGV[7])) do
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'event', ev)
end
for id, due in pairs(cjson.decode(ARGV[8])) do redis.call('ZADD', KEYS[6], due, id) end
if not running then
  for _, i in ipairs({1, 2, 4, 5}) do redis.call('EXPIRE', KEYS[i], ARGV[10]) end
end
if ARGV[11] then  -- as task_write: an earlier final stands
  write_task_record(KEYS[7], KEYS[8], KEYS[9], '', ARGV[11], ARGV[12], ARGV[3], ARGV[10], '0')
end
return {'created', '1'}
