-- Measures usage.lua per response under LuaJIT (Envoy's Lua runtime), with the handle test
-- double of harness.lua: run as `luajit bench.lua <dir of usage.lua>`. The double's own cost
-- (building chunk objects) is included, so the figures are an upper bound for the script.
local dir = arg[1] or "."
dofile(dir .. "/usage.lua")
dofile(dir .. "/testdata/harness.lua")

local function json_body()
  local content = string.rep("The quick brown fox jumps over the lazy dog. ", 20)
  return { '{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"' ..
    content .. '"},"finish_reason":"stop"}],"usage":{"prompt_tokens":42,"total_tokens":242,"completion_tokens":200,"prompt_tokens_details":null}}' }
end

local function sse_body(events)
  local chunks = {}
  for i = 1, events do
    chunks[#chunks + 1] = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"token' ..
      i .. ' "},"finish_reason":null}],"usage":null}\n\n'
  end
  chunks[#chunks + 1] = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":42,"total_tokens":' ..
    (42 + events) .. ',"completion_tokens":' .. events .. '}}\n\n'
  chunks[#chunks + 1] = 'data: [DONE]\n\n'
  return chunks
end

local function bench(name, status, ctype, chunks, iters, want)
  local bytes = 0
  for _, c in ipairs(chunks) do bytes = bytes + #c end
  local p = run_usage(status, ctype, chunks)
  assert(p == want, name .. ": wrong prompt_tokens " .. tostring(p))
  for _ = 1, iters / 10 do run_usage(status, ctype, chunks) end -- warm the JIT
  local t0 = os.clock()
  for _ = 1, iters do run_usage(status, ctype, chunks) end
  local dt = os.clock() - t0
  io.write(string.format("lua-usage %-28s %4d chunks %7d bytes  %9.2f us/response  %7.1f ns/chunk\n",
    name, #chunks, bytes, dt / iters * 1e6, dt / iters / #chunks * 1e9))
end

print("runtime: " .. (jit and jit.version or _VERSION))
bench("json (chat completion)", "200", "application/json", json_body(), 200000, 42)
bench("sse 256 events", "200", "text/event-stream", sse_body(256), 5000, 42)
bench("sse 1024 events", "200", "text/event-stream", sse_body(1024), 1000, 42)
bench("404 (skipped)", "404", "application/json", { '{"error":"x"}' }, 200000, nil)
