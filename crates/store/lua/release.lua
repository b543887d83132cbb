-- Frees one held permit of a concurrency key (Rust twin:
-- crates/core/src/algorithm/concurrency.rs, `release`). KEYS[1] the
-- key's sorted set; ARGV[1] the time (or "" for TIME), ARGV[2] the TTL
-- margin, ARGV[3] the permit's 16 hex digits. Permits whose lease ended
-- are dropped; the key keeps living until its last lease ends (plus the
-- margin), and goes with its last permit.
-- Returns one integer: 1 freed, 2 the permit's lease had ended, 0 no
-- such permit.
local key, permit = KEYS[1], ARGV[3]
local now = read_now()
local margin = tonumber(ARGV[2])
local expires = redis.call('ZSCORE', key, permit)
local found = 0
if expires then
  if tonumber(expires) > now then
    found = 1
    redis.call('ZREM', key, permit)
  else
    found = 2
  end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIRE', key, int(tonumber(last[2]) - now + margin))
end
return { found }
