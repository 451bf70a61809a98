-- Included by task_cancel_final and exec_mark_cancel: note the CancelTask `request` on the hash `key`. The first
-- is kept as 'canceled_by' (its answer is CANCELED: "canceled by this very request"); the later ones before
-- the final, as 'canceled_also' (newline-separated, at most 32), so that a replica which stores the final for a
-- holder that died answers every one of them, not the first alone.
local function note_canceller(key, request)
  if not request or request == '' then return end
  if redis.call('HSETNX', key, 'canceled_by', request) == 1 then return end
  if redis.call('HGET', key, 'canceled_by') == request then return end
  local also = redis.call('HGET', key, 'canceled_also') or ''
  if also == '' then
    redis.call('HSET', key, 'canceled_also', request)
    return
  end
  if string.find('\n' .. also .. '\n', '\n' .. request .. '\n', 1, true) then return end
  local _, count = string.gsub(also, '\n', '')
  if count + 1 < 32 then redis.call('HSET', key, 'canceled_also', also .. '\n' .. request) end
end
