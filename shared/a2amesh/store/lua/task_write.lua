-- Write a task's record and state while holding (or finishing) its claim.
-- KEYS: task, claim, subs   ARGV: instance, record_json, state, now_ms, ttl_s, release ('1' releases the claim),
--   fence (optional: the writer's claim token; '' writes unfenced)
-- Returns {outcome, state, record, subscribers...}: written | terminal (an earlier final stands; it is returned)
-- | fenced (another claim took the task over since the writer's: nothing written)
--#include task_record
return write_task_record(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
