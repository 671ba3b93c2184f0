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
// of this router in flight on it, in one atomic step; with a reservation it
// also checks and reserves room for a new conversation in the same step.
//
//	KEYS[1] home key, KEYS[2] this router's in-flight hash, KEYS[3] registry,
//	KEYS[4] reservation hash, KEYS[5] drain hash
//	ARGV[1] the home the caller read ("" none), ARGV[2] session TTL ms,
//	ARGV[3] key TTL ms, ARGV[4] "1": pick the least loaded candidate,
//	ARGV[5] in-flight hash prefix, ARGV[6] the reservation as JSON ("" none:
//	Pool.Claim), ARGV[7] suffix of the value written (" weak" or ""),
//	ARGV[8..] candidate replica keys
//
// When the home key holds a value other than ARGV[1], another router wrote
// first: that home is kept, the request counted in flight on it, and returned
// with adopted 1 (nothing is reserved: the conversation is not new). Otherwise, with a reservation, the candidates
// are those whose union of counted conversations has room for it (admission
// rule below); none left and not forced: nothing is written and full 1 is
// returned. The home is the first candidate, or with ARGV[4] "1" the one with
// the fewest requests in flight summed over every router registered and alive
// (earlier candidates win ties), SET with the session TTL, the reservation
// written, and returned with adopted 0. Returns {replica key, adopted, full}.
// Redis runs a script alone, so 8 concurrent first requests of one
// conversation through any number of routers get one home, concurrent
// placements each see the ones before them, and two routers' admissions each
// see the other's reservation. A candidate in the drain hash (a replica
// draining) is dropped while another is left, so no router places a
// conversation there even before its heartbeat has read the drain.
//
// The union (router/admission.go's rule): the reservation's own conversations
// (the caller's gate, exact), every other live router's published gate (P
// a:M:<router>, "c:<id>" -> "<replica key> <tokens> <first>") and every
// unexpired reservation (field id -> "<replica key> <tokens> <first> <expiry
// ms>"; expired ones are deleted), each conversation once with the largest
// context and the smallest first context any of them gives it, the new one
// left out; a reservation's replica wins, being the store's latest placement
// (a gate counts a conversation whose claim has not returned yet on the
// policy's pick, which the claim may have changed). On a candidate of room
// fit a conversation counts at its expected peak P = max(tokens, min(G, C)),
// G = m once learned (m > 0) else its prior first + max(first - s, 0) (0 when
// first is unknown, 0), C = fit once learned else fit / 2, and the new one at
// N = max(tok, min(e, C)); with n of them summing to sum it has room when S +
// sum - n S + (N - S) <= fit (N alone when n is 0).
var claimScript = rueidis.NewLuaScript(luaLib + `
local cur = redis.call('GET', KEYS[1])
local pick, adopted = nil, 0
if cur and cur ~= ARGV[1] then
  local key = string.gsub(cur, ' weak$', '')
  redis.call('HINCRBY', KEYS[2], key, 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {cur, 1, 0}
end
local cands, fits = {}, {}
for j = 8, #ARGV do table.insert(cands, ARGV[j]) end
local res = nil
if ARGV[6] ~= '' then res = cjson.decode(ARGV[6]) end
local now = nowMs()
if res then
  local convs = {}
  local function add(id, key, tok, first, placed)
    if id == res.id then return end
    local c = convs[id]
    if c == nil then
      convs[id] = {key, tok, first}
    else
      if placed then c[1] = key end
      c[2] = math.max(c[2], tok)
      if c[3] <= 0 or (first > 0 and first < c[3]) then c[3] = first end
    end
  end
  for _, c in ipairs(res.own) do add(c[1], c[2], c[3], c[4]) end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], now, '+inf')) do
    if id ~= res.self then
      local kv = redis.call('HGETALL', res.ap .. id)
      for f = 1, #kv - 1, 2 do
        local cid = string.match(kv[f], '^c:(.+)$')
        local key, tok, first = string.match(kv[f + 1], '^(.*) (%d+) (%d+)$')
        if cid and key then add(cid, key, tonumber(tok), tonumber(first)) end
      end
    end
  end
  local kv = redis.call('HGETALL', KEYS[4])
  for f = 1, #kv - 1, 2 do
    local key, tok, first, exp = string.match(kv[f + 1], '^(.*) (%d+) (%d+) (%d+)$')
    if key and tonumber(exp) > now then
      add(kv[f], key, tonumber(tok), tonumber(first), true)
    else
      redis.call('HDEL', KEYS[4], kv[f])
    end
  end
  local on = {}
  for _, c in pairs(convs) do
    if on[c[1]] == nil then on[c[1]] = {} end
    table.insert(on[c[1]], c)
  end
  local room = {}
  for k, key in ipairs(cands) do
    local fit = res.fit[k]
    local cap = fit
    if res.m <= 0 then cap = math.floor(fit / 2) end
    local tot = math.max(res.tok, math.min(res.e, cap))
    local here = on[key] or {}
    if #here > 0 then
      tot = res.s + math.max(tot - res.s, 0)
      for _, c in ipairs(here) do
        local g = res.m
        if g <= 0 then g = c[3] + math.max(c[3] - res.s, 0) end
        tot = tot + math.max(c[2], math.min(g, cap)) - res.s
      end
    end
    if res.force == 1 or tot <= fit then table.insert(room, key) end
  end
  if #room == 0 then return {'', 0, 1} end
  cands = room
end
if #cands > 1 and redis.call('EXISTS', KEYS[5]) == 1 then
  local open = {}
  for _, key in ipairs(cands) do
    if redis.call('HEXISTS', KEYS[5], key) == 0 then table.insert(open, key) end
  end
  if #open > 0 then cands = open end
end
pick = cands[1]
if ARGV[4] == '1' and #cands > 1 then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], now, '+inf')
  local best = nil
  for _, key in ipairs(cands) do
    local load = 0
    for _, id in ipairs(ids) do
      local v = redis.call('HGET', ARGV[5] .. id, key)
      if v then load = load + tonumber(v) end
    end
    if best == nil or load < best then best, pick = load, key end
  end
end
redis.call('SET', KEYS[1], pick .. ARGV[7], 'PX', ARGV[2])
if res then
  redis.call('HSET', KEYS[4], res.id, pick .. ' ' .. res.tok .. ' ' .. res.first .. ' ' .. (now + tonumber(ARGV[3])))
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
end
redis.call('HINCRBY', KEYS[2], pick, 1)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {pick, adopted, 0}
`)

// convScript publishes one router's conversation events for one model: the
// samples of S and the starts and ends of requests, from which it measures
// each conversation's gaps whatever router served its turns.
//
//	KEYS[1] S samples (list), KEYS[2] gaps (list)
//	ARGV[1] conversation key prefix, ARGV[2] conversation key TTL ms,
//	ARGV[3] list TTL ms, ARGV[4] S samples kept, ARGV[5] gaps kept, then
//	pairs: "p" cached tokens (a true first turn), "b<side 0|1>" id (a
//	request sent), "e" id (a request ended)
//
// P c:M:<id> is a hash: "n" requests of the conversation in flight over every
// router, "end" the Unix ms its last one ended. A request sent while n is 0,
// not a side request, after an end pushes now - end (ms) onto the gaps. Each
// list keeps its newest entries; every key has a TTL. Returns nothing.
var convScript = rueidis.NewLuaScript(luaLib + `
local now = nowMs()
local ttl = ARGV[2]
for j = 6, #ARGV - 1, 2 do
  local kind, v = ARGV[j], ARGV[j + 1]
  if kind == 'p' then
    redis.call('LPUSH', KEYS[1], v)
    redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[4]) - 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  else
    local k = ARGV[1] .. v
    local n = tonumber(redis.call('HGET', k, 'n') or '0')
    if string.sub(kind, 1, 1) == 'b' then
      local last = redis.call('HGET', k, 'end')
      if n <= 0 and last and kind == 'b0' then
        redis.call('LPUSH', KEYS[2], now - tonumber(last))
        redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
      end
      redis.call('HSET', k, 'n', math.max(n, 0) + 1)
    elseif n <= 1 then
      redis.call('HSET', k, 'n', 0, 'end', now)
    else
      redis.call('HSET', k, 'n', n - 1)
    end
    redis.call('PEXPIRE', k, ttl)
  end
end
return 0
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
// others', and the estimates all routers learn together.
//
//	KEYS[1] this router's admission hash, KEYS[2] S samples, KEYS[3] gaps
//	(convScript); ARGV[1] key TTL ms, ARGV[2] admission hash prefix, ARGV[3]
//	k, then k router ids (the others alive, from beatScript), then
//	field/value pairs ("q" and "c:<id>": Pool.addRemoteAdm)
//
// The hash is replaced (deleted when no pairs: the gate is off) with the key
// TTL. Returns, per other router, its admission hash (HGETALL, flat; empty when
// it publishes none), then the S samples and the gaps (LRANGE).
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
table.insert(out, redis.call('LRANGE', KEYS[2], 0, -1))
table.insert(out, redis.call('LRANGE', KEYS[3], 0, -1))
return out
`)

// forgetScript deletes a home if it still holds the given replica.
//
//	KEYS[1] home key; ARGV[1] the replica key the caller placed it on,
//	ARGV[2] the weak suffix (the key may carry it)
//
// Returns 1 when it deleted the home, 0 when the key held something else or
// nothing.
var forgetScript = rueidis.NewLuaScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] or cur == ARGV[1] .. ARGV[2] then
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
