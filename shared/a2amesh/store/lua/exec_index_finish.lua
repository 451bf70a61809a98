-- Move a finished execution from the 'running' listing index to its final status's, keeping its score
-- (its start time), so a listing by status pages in the same order as every other listing.
-- KEYS: running index, status index   ARGV: execution id, now (ms; the score when it was never indexed)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZSCORE', KEYS[2], ARGV[1]) or ARGV[2]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], score, ARGV[1])
return 1
