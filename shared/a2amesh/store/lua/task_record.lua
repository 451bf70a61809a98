-- Included by task_write and exec_commit: write a task's record unless an earlier final stands.
-- Returns {outcome, state, record, subscribers...}: written | terminal (the earlier final is returned) |
-- fenced (fence given and a later claim took the task over: nothing written, the claim left to its owner).
-- The subscribers are dropped once an interrupted state is written: its answer is the last of their calls.
local function write_task_record(task_key, claim_key, subs_key, instance, record, state, now_ms, ttl_s, release, fence)
  local current = redis.call('HGET', task_key, 'state')
  if fence and fence ~= '' and redis.call('HGET', task_key, 'fence') ~= fence then
    return {'fenced', current or '', ''}
  end
  local terminal = {TASK_STATE_COMPLETED=1, TASK_STATE_FAILED=1, TASK_STATE_CANCELED=1, TASK_STATE_REJECTED=1}
  local result
  if current and terminal[current] then
    result = {'terminal', current, redis.call('HGET', task_key, 'record') or ''}
  else
    redis.call('HSET', task_key, 'record', record, 'state', state, 'updated', now_ms)
    redis.call('EXPIRE', task_key, ttl_s)
    result = {'written', state, ''}
  end
  if release == '1' then
    if redis.call('GET', claim_key) == instance then redis.call('DEL', claim_key) end
    redis.call('EXPIRE', subs_key, 600)
  end
  for _, s in ipairs(redis.call('SMEMBERS', subs_key)) do table.insert(result, s) end
  if result[1] == 'written' and (state == 'TASK_STATE_INPUT_REQUIRED' or state == 'TASK_STATE_AUTH_REQUIRED') then
    redis.call('DEL', subs_key)  -- an interrupted task's answer ends every call that followed it
  end
  return result
end
