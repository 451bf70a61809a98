-- Let a paused execution go (no lease, no runner: a resume or a due timer brings it back), unless it is marked
-- for cancellation: then the runner keeps its lease and applies the cancellation, so a cancel that reaches an
-- execution while it pauses is never lost.
-- KEYS: exec, lease   ARGV: token   Returns 'parked' | 'canceled' (the lease is kept) | 'stale' (not ours)
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'stale' end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return 'canceled' end
redis.call('DEL', KEYS[2])
return 'parked'
