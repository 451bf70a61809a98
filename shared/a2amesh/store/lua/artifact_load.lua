-- Read one version of an artifact; an empty version means the latest.
-- KEYS: artifact hash   ARGV: version or ''
-- Returns {version, data, meta_json}, or {} when there is no such version.
local v = ARGV[1]
if v == '' then
  v = redis.call('HGET', KEYS[1], 'latest')
  if not v then return {} end
end
local got = redis.call('HMGET', KEYS[1], 'd:' .. v, 'm:' .. v)
if not got[1] or not got[2] then return {} end
return {tonumber(v), got[1], got[2]}
