-- Every write of the definitions store (one workflow id at a time), atomic with its version check.
-- KEYS: definition heads hash, the id's versions hash (same {defs} hash tag)
-- ARGV: id, mode, if-match etag ('' = none), now (ISO 8601), meta JSON, enabled ('1'|'0'|''),
--       mcpExport ('1'|'0'|''), document JSON
-- mode: 'create' (fails when live), 'update' (fails when not live), 'put' (create or update),
--       'apply' (put that writes nothing when the live digest is the same), 'delete', 'flags', 'purge'
-- Returns {outcome, head JSON}: outcome 'written' | 'unchanged' | 'exists' | 'missing' | 'stale'.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local head = nil
if raw then head = cjson.decode(raw) end
local live = head ~= nil and head.deleted ~= true
local mode = ARGV[2]
if mode == 'purge' then
  if not head then return {'missing', ''} end
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {'written', raw}
end
if ARGV[3] ~= '' and (not live or head.etag ~= ARGV[3]) then return {'stale', raw or ''} end
if mode == 'create' and live then return {'exists', raw} end
if (mode == 'update' or mode == 'delete' or mode == 'flags') and not live then return {'missing', raw or ''} end
local function flag(value, current)
  if value == '1' then return true end
  if value == '0' then return false end
  if current == nil then return true end
  return current
end
if mode == 'delete' or mode == 'flags' then
  if mode == 'delete' then head.deleted = true end
  head.enabled = flag(ARGV[6], head.enabled)
  head.mcpExport = flag(ARGV[7], head.mcpExport)
  head.updated_at = ARGV[4]
  local encoded = cjson.encode(head)
  redis.call('HSET', KEYS[1], ARGV[1], encoded)
  return {'written', encoded}
end
local meta = cjson.decode(ARGV[5])
if mode == 'apply' and live and head.digest == meta.digest then return {'unchanged', raw} end
local version = 1
local created_at = ARGV[4]
local enabled, mcp = nil, nil
if head then version = head.version + 1 end
if live then created_at = head.created_at; enabled = head.enabled; mcp = head.mcpExport end
local etag = '"' .. version .. '-' .. string.sub(meta.digest, 1, 16) .. '"'
local new = {
  id = ARGV[1], name = meta.name, description = meta.description, format = meta.format, digest = meta.digest,
  version = version, etag = etag, enabled = flag(ARGV[6], enabled), mcpExport = flag(ARGV[7], mcp),
  created_at = created_at, updated_at = ARGV[4], deleted = false,
}
local record = {
  version = version, etag = etag, digest = meta.digest, created_at = ARGV[4], author = meta.author,
  message = meta.message, name = meta.name, description = meta.description, format = meta.format,
}
local encoded = cjson.encode(new)
redis.call('HSET', KEYS[2], 'd:' .. version, ARGV[8], 'm:' .. version, cjson.encode(record))
redis.call('HSET', KEYS[1], ARGV[1], encoded)
return {'written', encoded}
