-- Apply one engine step to an execution, guarded by the lease epoch (SPEC §7).
-- KEYS: exec, state, lease, events, nodes, applied, timers, state_nodes, state_outputs
-- ARGV: token (owner:epoch), now_ms, state_json, nodes_json (object path -> json), events_json (array of JSON texts),
--       applied_json (array of result keys), set_timers_json (object id -> due_ms), clear_timers_json (array),
--       fields_json (object), final ('1' | '0'), retention_s, events_maxlen,
--       state_nodes_json ('' : state_json is the whole state; else object path -> 'ordinal json' of changed
--       node instances, state_json then being the state without its nodes), reset ('1': replace every instance),
--       state_outputs_json and reset_outputs (the same for the state's outputs, by node id),
--       and for a finishing step that stores the workflow task's final record with it (KEYS 10-12: task, claim,
--       subs, in the execution's slot): instance, record_json, task_state
-- Returns {'ok', next_due_ms | '', previous status} | {'stale', lease_value} | {'duplicate', key}; a finishing
-- step with the final record: {'ok', '', outcome, state, record, subscribers...} (see task_record.lua)
--#include task_record
--#include hash_fields
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return {'stale', redis.call('GET', KEYS[3]) or ''}
end
local applied = cjson.decode(ARGV[6])
for _, key in ipairs(applied) do
  if redis.call('SISMEMBER', KEYS[6], key) == 1 then return {'duplicate', key} end
end
for _, key in ipairs(applied) do redis.call('SADD', KEYS[6], key) end
redis.call('SET', KEYS[2], ARGV[3])
for i, key in ipairs({8, 9}) do  -- the split parts: node instances (ARGV 13-14), outputs (ARGV 15-16)
  local part, reset = ARGV[11 + 2 * i], ARGV[12 + 2 * i]
  if part == '' or reset == '1' then redis.call('DEL', KEYS[key]) end
  if part ~= '' then hset_fields(KEYS[key], {}, cjson.decode(part)) end
end
hset_fields(KEYS[5], {}, cjson.decode(ARGV[4]))
for _, ev in ipairs(cjson.decode(ARGV[5])) do
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[12], '*', 'event', ev)
end
for id, due in pairs(cjson.decode(ARGV[7])) do redis.call('ZADD', KEYS[7], due, id) end
for _, id in ipairs(cjson.decode(ARGV[8])) do redis.call('ZREM', KEYS[7], id) end
local was = redis.call('HGET', KEYS[1], 'status') or ''
local fields = cjson.decode(ARGV[9])
fields['updated'] = ARGV[2]
hset_fields(KEYS[1], {}, fields)
if ARGV[10] == '1' then
  redis.call('DEL', KEYS[7], KEYS[3])
  for _, i in ipairs({1, 2, 4, 5, 6, 8, 9}) do redis.call('EXPIRE', KEYS[i], ARGV[11]) end
  if ARGV[17] then
    local task = write_task_record(KEYS[10], KEYS[11], KEYS[12], ARGV[17], ARGV[18], ARGV[19], ARGV[2], ARGV[11], '1')
    return {'ok', '', unpack(task)}
  end
  return {'ok', '', was}
end
local first = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
return {'ok', first[2] or '', was}
