-- inferplane usage lifter: an Envoy HTTP Lua filter (LuaJIT, Lua 5.1).
--
-- Access logs carry no bodies, so this filter reads the token counts of the OpenAI "usage"
-- object in a response and sets them as dynamic metadata, namespace "inferplane.usage",
-- keys "prompt_tokens" and "completion_tokens", which the gRPC access log sends along.
--
-- It works on body chunks as they pass (bodyChunks), never buffering the response, so SSE
-- streams flow on unchanged. A non-streaming response has one "usage" object at its end; a
-- stream with stream_options.include_usage has it in its last data event, and a stream with
-- continuous usage stats has a cumulative one in every event: the last one seen wins. A
-- "usage" split between two chunks is caught by carrying the unfinished tail to the next.
-- Quotes inside generated text are escaped (\"usage\"), so model output cannot fake one.
--
-- The counts are set as soon as they are seen, not at the end: when the client or the replica
-- goes away mid-stream, Envoy ends the script, and what was set so far is what the access log
-- carries. A stream also counts its data events ("stream_events"), from which the usage
-- service estimates the tokens of a stream cut off before its usage arrived (one per event).

local NS = "inferplane.usage"
local NEEDLE = '"usage"'
local MAX_CARRY = 4096
local EVENT = "data: {"

-- count is the number of times needle occurs in s.
local function count(s, needle)
  local n, from = 0, 1
  while true do
    local _, b = string.find(s, needle, from, true)
    if not b then return n end
    n = n + 1
    from = b + 1
  end
end

-- scan finds every complete usage object in s and returns the last counts seen (or the ones
-- passed in) and the tail of s to carry into the next chunk.
local function scan(s, p, c)
  local from = 1
  local pending = nil
  while true do
    local a, b = string.find(s, NEEDLE, from, true)
    if not a then break end
    local obj = string.match(s, "^%s*:%s*(%b{})", b + 1)
    if obj then
      local np = string.match(obj, '"prompt_tokens"%s*:%s*(%d+)') or string.match(obj, '"input_tokens"%s*:%s*(%d+)')
      local nc = string.match(obj, '"completion_tokens"%s*:%s*(%d+)') or string.match(obj, '"output_tokens"%s*:%s*(%d+)')
      if np or nc then
        p = tonumber(np) or 0
        c = tonumber(nc) or 0
      end
      pending = nil
    else
      local at = string.match(s, "^%s*:?%s*()", b + 1)
      if at > #s or string.sub(s, at, at) == "{" then
        -- the colon or the object is still to come, or the object is unbalanced: it
        -- continues in the next chunk
        pending = a
      else
        pending = nil -- "usage": null, or not an object
      end
    end
    from = b + 1
  end
  local carry
  if pending then
    carry = string.sub(s, pending)
    if #carry > MAX_CARRY then carry = "" end
  else
    -- a needle may be cut at the chunk's end: keep enough bytes to see it whole
    carry = string.sub(s, -(#NEEDLE - 1))
  end
  return p, c, carry
end

local function wanted(headers)
  local status = headers:get(":status")
  if status ~= "200" then return false end
  local ct = headers:get("content-type") or ""
  return string.find(ct, "json", 1, true) ~= nil or string.find(ct, "text/event-stream", 1, true) ~= nil
end

function envoy_on_response(handle)
  local headers = handle:headers()
  if not wanted(headers) then return end
  local sse = string.find(headers:get("content-type") or "", "text/event-stream", 1, true) ~= nil
  local md = handle:streamInfo():dynamicMetadata()
  local p, c, carry = nil, nil, ""
  local events, tail = 0, ""
  for chunk in handle:bodyChunks() do
    local n = chunk:length()
    if n > 0 then
      local s = chunk:getBytes(0, n)
      local np, nc
      np, nc, carry = scan(carry .. s, p, c)
      if np ~= p or nc ~= c then
        p, c = np, nc
        md:set(NS, "prompt_tokens", p)
        md:set(NS, "completion_tokens", c)
      end
      if sse then
        -- the tail is one byte shorter than the needle: no event is counted twice
        local e = count(tail .. s, EVENT)
        if e > 0 then
          events = events + e
          md:set(NS, "stream_events", events)
        end
        tail = string.sub(s, -(#EVENT - 1))
      end
    end
  end
end
