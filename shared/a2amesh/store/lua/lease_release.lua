-- Give up a lease this owner holds (clean shutdown, or the execution finished). KEYS: lease  ARGV: token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
