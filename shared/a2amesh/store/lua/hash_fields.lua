-- Included by exec_create and exec_commit: set the fields of a hash in few calls (one HSET per 500 pairs;
-- a pair's later field wins, as with one HSET per field).
-- hset_fields(key, head, object): head, a flat list of field, value, ... set first; then object's pairs.
local function hset_fields(key, head, object)
  local args = head
  for field, value in pairs(object) do
    args[#args + 1] = field
    args[#args + 1] = value
    if #args >= 1000 then
      redis.call('HSET', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('HSET', key, unpack(args)) end
end
