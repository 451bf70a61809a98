-- Take over an execution whose lease expired (or was released), bumping its epoch (SPEC §7).
-- KEYS: exec, lease   ARGV: owner, lease_ttl_ms
-- Returns {'acquired', epoch} | {'held', lease_value} | {'finished', status} | {'missing'}
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
local held = redis.call('GET', KEYS[2])
if held then return {'held', held} end
-- a paused execution (waiting for a human) is taken by whoever resumes it or fires its review timer
if status ~= 'running' and status ~= 'paused' then return {'finished', status} end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
return {'acquired', tostring(epoch)}
