-- Delete one version of an artifact, or every version when ARGV[2] is ''.
-- KEYS: artifact hash, names set   ARGV: name, version or ''
-- Returns how many versions were deleted. 'latest' moves to the highest remaining version; the 'next'
-- counter is kept, so a deleted version number is never reused for other content.
local fields = redis.call('HKEYS', KEYS[1])
local n = 0
local latest = -1
for _, f in ipairs(fields) do
  if string.sub(f, 1, 2) == 'm:' then
    local v = string.sub(f, 3)
    if ARGV[2] == '' or v == ARGV[2] then
      redis.call('HDEL', KEYS[1], 'd:' .. v, f)
      n = n + 1
    elseif tonumber(v) > latest then
      latest = tonumber(v)
    end
  end
end
if latest < 0 then
  redis.call('HDEL', KEYS[1], 'latest')
  redis.call('SREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'latest', latest)
end
return n
