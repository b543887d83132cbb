-- Gives a gcra scale its tag in its policy's registry (see gcra.lua).
-- KEYS[1] the registry, a hash: "C:n:p" -> tag, and "#tag" -> "C:n:p".
-- ARGV[1] "C:n:p"; ARGV[2] its preferred tag (a hash of the text, so a lost
-- and remade registry gives a scale the tag it had); ARGV[3] the least TTL
-- in ms the registry must keep. Answers the tag, or -1 when another scale
-- holds the preferred one (states of this scale are then text).
local tag = redis.call('HGET', KEYS[1], ARGV[1])
if not tag then
  if redis.call('HSETNX', KEYS[1], '#' .. ARGV[2], ARGV[1]) == 0 then
    return -1
  end
  tag = ARGV[2]
  redis.call('HSET', KEYS[1], ARGV[1], tag)
end
local ttl = tonumber(ARGV[3])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return tonumber(tag)
