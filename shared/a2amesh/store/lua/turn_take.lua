-- Take a conversation's turn pointer (SPEC §3.8): a compare-and-set, so two turns that read the same
-- previous turn cannot both start from it.
-- KEYS: pointer   ARGV: expected ('' = none), new value
-- Returns 1 when taken, 0 when another turn moved the pointer first.
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
