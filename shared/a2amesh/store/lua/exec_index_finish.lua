-- Move an execution between the listing indexes by status, keeping its score (its start time), so a listing
-- by status pages in the same order as every other listing: from 'running' or 'paused' to its new status
-- (a finished one's, or 'paused' / 'running' when it pauses or resumes).
-- KEYS: running index, paused index, new status's index   ARGV: execution id, now (ms; the score when it
-- was never indexed)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZSCORE', KEYS[2], ARGV[1])
  or redis.call('ZSCORE', KEYS[3], ARGV[1]) or ARGV[2]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], score, ARGV[1])
return 1
