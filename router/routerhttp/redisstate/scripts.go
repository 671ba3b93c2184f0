package redisstate

import "github.com/redis/rueidis"

// luaLib is prepended to the scripts: nowMs() is Redis' clock in Unix ms;
// others(reg, self, prefix) lists, for every router registered in reg and
// alive except self, its id and its hash prefix..id (HGETALL, flat).
const luaLib = `
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function others(reg, self, prefix)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', reg, nowMs(), '+inf')) do
    if id ~= self then
      table.insert(out, id)
      table.insert(out, redis.call('HGETALL', prefix .. id))
    end
  end
  return out
end
`

// claimScript writes a session's home, first write wins, and counts one request
// of this router in flight on it, in one atomic step.
//
//	KEYS[1] home key, KEYS[2] this router's in-flight hash, KEYS[3] registry
//	ARGV[1] the home the caller read ("" none), ARGV[2] session TTL ms,
//	ARGV[3] key TTL ms, ARGV[4] "1": pick the least loaded candidate,
//	ARGV[5] in-flight hash prefix, ARGV[6..] candidate replica keys
//
// When the home key holds a value other than ARGV[1], another router wrote
// first: that home is kept and returned with adopted 1. Otherwise the home is
// ARGV[6], or with ARGV[4] "1" the candidate with the fewest requests in flight
// summed over every router registered and alive (earlier candidates win ties),
// SET with the session TTL, and returned with adopted 0. Returns {replica key,
// adopted}. Redis runs a script alone, so 8 concurrent first requests of one
// conversation through any number of routers get one home, and concurrent
// placements each see the ones before them.
var claimScript = rueidis.NewLuaScript(luaLib + `
local cur = redis.call('GET', KEYS[1])
local pick, adopted = nil, 0
if cur and cur ~= ARGV[1] then
  pick, adopted = cur, 1
else
  pick = ARGV[6]
  if ARGV[4] == '1' and #ARGV > 6 then
    local now = nowMs()
    local ids = redis.call('ZRANGEBYSCORE', KEYS[3], now, '+inf')
    local best = nil
    for j = 6, #ARGV do
      local load = 0
      for _, id in ipairs(ids) do
        local v = redis.call('HGET', ARGV[5] .. id, ARGV[j])
        if v then load = load + tonumber(v) end
      end
      if best == nil or load < best then best, pick = load, ARGV[j] end
    end
  end
  redis.call('SET', KEYS[1], pick, 'PX', ARGV[2])
end
redis.call('HINCRBY', KEYS[2], pick, 1)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {pick, adopted}
`)

// beatScript is one router's heartbeat for one model.
//
//	KEYS[1] this router's in-flight hash, KEYS[2] its live hash, KEYS[3] registry
//	ARGV[1] router id, ARGV[2] key TTL ms, ARGV[3] "abs" or "delta",
//	ARGV[4] in-flight hash prefix, ARGV[5] live hash prefix, ARGV[6] n,
//	then n pairs (replica key, count), then triples (replica key, live, tokens)
//
// "abs" replaces the in-flight hash by the counts; "delta" adds them, and
// answers {"resync"} without changing anything when the hash has expired (the
// caller then sends "abs"). The live hash is replaced; the router is registered
// until now + key TTL and every key's TTL refreshed; registrations in the past
// are dropped. Returns, for every other router alive, its id, its in-flight
// hash and its live hash (HGETALL, flat).
var beatScript = rueidis.NewLuaScript(luaLib + `
local now = nowMs()
local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[6])
if ARGV[3] == 'abs' then
  redis.call('DEL', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return {'resync'}
end
for j = 0, n - 1 do
  local f, v = ARGV[7 + 2 * j], tonumber(ARGV[8 + 2 * j])
  if v ~= 0 then redis.call('HINCRBY', KEYS[1], f, v) end
end
redis.call('HSET', KEYS[1], '_beat', now)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('DEL', KEYS[2])
for j = 7 + 2 * n, #ARGV - 2, 3 do
  redis.call('HSET', KEYS[2], ARGV[j], ARGV[j + 1] .. ' ' .. ARGV[j + 2])
end
redis.call('HSET', KEYS[2], '_beat', now)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('PEXPIRE', KEYS[3], ttl)
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], now, '+inf')) do
  if id ~= ARGV[1] then
    table.insert(out, id)
    table.insert(out, redis.call('HGETALL', ARGV[4] .. id))
    table.insert(out, redis.call('HGETALL', ARGV[5] .. id))
  end
end
return out
`)

// admScript publishes one router's admission gate for one model and reads the
// others'.
//
//	KEYS[1] this router's admission hash; ARGV[1] key TTL ms, ARGV[2] admission
//	hash prefix, ARGV[3] k, then k router ids (the others alive, from
//	beatScript), then field/value pairs ("q" and "c:<id>": Pool.addRemoteAdm)
//
// The hash is replaced (deleted when no pairs: the gate is off) with the key
// TTL. Returns, per other router, its admission hash (HGETALL, flat; empty when
// it publishes none).
var admScript = rueidis.NewLuaScript(`
local k = tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
for j = 4 + k, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 1])
end
if #ARGV > 3 + k then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
end
local out = {}
for j = 4, 3 + k do
  table.insert(out, redis.call('HGETALL', ARGV[2] .. ARGV[j]))
end
return out
`)

// forgetScript deletes a home if it still holds the given replica.
//
//	KEYS[1] home key; ARGV[1] the replica key the caller placed it on
//
// Returns 1 when it deleted the home, 0 when the key held something else or
// nothing.
var forgetScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// othersScript reads the other routers' in-flight counts (Pool.Refresh).
//
//	KEYS[1] registry; ARGV[1] router id, ARGV[2] in-flight hash prefix
//
// Returns, for every other router alive, its id and its in-flight hash
// (HGETALL, flat), as flushScript does.
var othersScript = rueidis.NewLuaScript(luaLib + `
return others(KEYS[1], ARGV[1], ARGV[2])
`)

// flushScript publishes one router's in-flight changes between heartbeats.
//
//	KEYS[1] this router's in-flight hash, KEYS[2] registry
//	ARGV[1] router id, ARGV[2] key TTL ms, ARGV[3] in-flight hash prefix,
//	then pairs (replica key, change)
//
// It adds the changes and refreshes the hash's TTL, or answers {"resync"}
// without changing anything when the hash has expired (the caller's next
// heartbeat then rewrites it), and returns, for every other router alive, its
// id and its in-flight hash (HGETALL, flat).
var flushScript = rueidis.NewLuaScript(luaLib + `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'resync'}
end
for j = 4, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[j], tonumber(ARGV[j + 1]))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return others(KEYS[2], ARGV[1], ARGV[3])
`)
