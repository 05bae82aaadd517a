-- Test double of the part of Envoy's Lua stream handle that usage.lua uses (headers,
-- bodyChunks, streamInfo():dynamicMetadata()). Not Envoy: it runs usage.lua's logic in a
-- plain Lua VM. Loaded after usage.lua; run_usage returns the metadata the script set.

local Buffer = {}
Buffer.__index = Buffer
function Buffer:length() return #self.s end
function Buffer:getBytes(i, n) return string.sub(self.s, i + 1, i + n) end

local Headers = {}
Headers.__index = Headers
function Headers:get(k) return self.h[k] end

function run_usage(status, ctype, chunks)
  local md = {}
  local handle = {}
  function handle:headers() return setmetatable({ h = { [":status"] = status, ["content-type"] = ctype } }, Headers) end
  function handle:bodyChunks()
    local i = 0
    return function()
      i = i + 1
      if chunks[i] == nil then return nil end
      return setmetatable({ s = chunks[i] }, Buffer)
    end
  end
  function handle:streamInfo()
    return {
      dynamicMetadata = function()
        return { set = function(_, ns, k, v) md[ns .. "/" .. k] = v end }
      end,
    }
  end
  envoy_on_response(handle)
  return md["inferplane.usage/prompt_tokens"], md["inferplane.usage/completion_tokens"], md["inferplane.usage/stream_events"]
end
