package envoylua

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/inferplane/inferplane/internal/envoymeta"
)

// These tests run usage.lua in gopher-lua (a Lua 5.1 VM, the language LuaJIT implements)
// against testdata/harness.lua, a test double of Envoy's stream handle: Envoy itself is not
// on this machine. The double feeds body chunks exactly as bodyChunks() would.

func newVM(t testing.TB) *lua.LState {
	t.Helper()
	L := lua.NewState()
	t.Cleanup(L.Close)
	if err := L.DoString(Script); err != nil {
		t.Fatalf("usage.lua: %v", err)
	}
	h, err := os.ReadFile("testdata/harness.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := L.DoString(string(h)); err != nil {
		t.Fatalf("harness.lua: %v", err)
	}
	return L
}

// run returns the prompt and completion tokens the script set, -1 where it set none.
func run(t testing.TB, L *lua.LState, status, ctype string, chunks []string) (int, int) {
	t.Helper()
	tbl := L.NewTable()
	for _, c := range chunks {
		tbl.Append(lua.LString(c))
	}
	if err := L.CallByParam(lua.P{Fn: L.GetGlobal("run_usage"), NRet: 2, Protect: true},
		lua.LString(status), lua.LString(ctype), tbl); err != nil {
		t.Fatalf("run_usage: %v", err)
	}
	num := func(v lua.LValue) int {
		if n, ok := v.(lua.LNumber); ok {
			return int(n)
		}
		return -1
	}
	p, c := num(L.Get(-2)), num(L.Get(-1))
	L.Pop(2)
	return p, c
}

const chatJSON = `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":` +
	`{"role":"assistant","content":"I was asked to print \"usage\":{\"prompt_tokens\":999} and did"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":42,"total_tokens":242,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":0}}}`

func sse(events int, usageEvery bool) string {
	var b strings.Builder
	for i := 1; i <= events; i++ {
		u := "null"
		if usageEvery {
			u = fmt.Sprintf(`{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}`, i, 7+i)
		}
		fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}],\"usage\":%s}\n\n", i, u)
	}
	if !usageEvery {
		fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", events, 7+events)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func TestUsageLifted(t *testing.T) {
	L := newVM(t)
	cases := []struct {
		name, status, ctype, body string
		prompt, completion        int
	}{
		{"chat completion JSON (escaped fake usage in content ignored)", "200", "application/json", chatJSON, 42, 200},
		{"SSE with include_usage", "200", "text/event-stream; charset=utf-8", sse(30, false), 7, 30},
		{"SSE with continuous usage: the last one wins", "200", "text/event-stream", sse(30, true), 7, 30},
		{"SSE without usage", "200", "text/event-stream", strings.ReplaceAll(sse(5, true), `"usage":{`, `"x":{`), -1, -1},
		{"usage null only", "200", "application/json", `{"usage":null}`, -1, -1},
		{"embeddings: prompt tokens only", "200", "application/json", `{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":9,"total_tokens":9}}`, 9, 0},
		{"transcription: input/output tokens", "200", "application/json", `{"text":"hi","usage":{"type":"tokens","input_tokens":14,"output_tokens":3,"total_tokens":17}}`, 14, 3},
		{"error status skipped", "500", "application/json", chatJSON, -1, -1},
		{"other content type skipped", "200", "text/plain", chatJSON, -1, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, c := run(t, L, tc.status, tc.ctype, []string{tc.body})
			if p != tc.prompt || c != tc.completion {
				t.Fatalf("got prompt=%d completion=%d, want %d %d", p, c, tc.prompt, tc.completion)
			}
		})
	}
}

// TestUsageSplitAnywhere cuts the body at every byte (two chunks) and into random small
// chunks: the counts must not depend on where the network split the stream.
func TestUsageSplitAnywhere(t *testing.T) {
	L := newVM(t)
	for i := 0; i <= len(chatJSON); i++ {
		if p, c := run(t, L, "200", "application/json", []string{chatJSON[:i], chatJSON[i:]}); p != 42 || c != 200 {
			t.Fatalf("split at %d (%q|%q): got %d %d", i, chatJSON[max(0, i-10):i], chatJSON[i:min(len(chatJSON), i+10)], p, c)
		}
	}
	body := sse(40, false)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var chunks []string
		for rest := body; rest != ""; {
			n := min(len(rest), 1+rng.IntN(48))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		if p, c := run(t, L, "200", "text/event-stream", chunks); p != 7 || c != 40 {
			t.Fatalf("round %d: got %d %d", round, p, c)
		}
	}
}

func TestScriptNamesMetadata(t *testing.T) {
	for _, s := range []string{`"` + envoymeta.UsageNamespace + `"`, `"` + envoymeta.PromptTokens + `"`, `"` + envoymeta.CompletionTokens + `"`} {
		if !strings.Contains(Script, s) {
			t.Errorf("usage.lua does not mention %s", s)
		}
	}
}

// BenchmarkUsageScriptGopherLua runs the script per response in gopher-lua, an interpreter:
// an upper bound for LuaJIT in Envoy (`make bench-keys` also runs testdata/bench.lua under
// luajit when it is installed).
func BenchmarkUsageScriptGopherLua(b *testing.B) {
	L := newVM(b)
	for _, bc := range []struct {
		name, ctype string
		chunks      []string
	}{
		{"json", "application/json", []string{chatJSON}},
		{"sse-256-events", "text/event-stream", strings.SplitAfter(sse(256, false), "\n\n")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				run(b, L, "200", bc.ctype, bc.chunks)
			}
		})
	}
}

// TestUsageSetAsItPasses: a stream cut off after 10 of its 30 events (the client or the replica
// went away: Envoy ends the script there) keeps what the script set so far: the last
// cumulative usage with continuous usage stats, and always the number of data events.
func TestUsageSetAsItPasses(t *testing.T) {
	L := newVM(t)
	for _, tc := range []struct {
		name               string
		continuous         bool
		prompt, completion int
	}{
		{"continuous usage stats", true, 7, 10},
		{"usage only at the end", false, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := strings.SplitAfter(sse(30, tc.continuous), "\n\n")[:10]
			// split the events' bytes anywhere, as the network would
			body := strings.Join(events, "")
			chunks := []string{body[:13], body[13:200], body[200:]}
			tbl := L.NewTable()
			for _, c := range chunks {
				tbl.Append(lua.LString(c))
			}
			if err := L.CallByParam(lua.P{Fn: L.GetGlobal("run_usage"), NRet: 3, Protect: true},
				lua.LString("200"), lua.LString("text/event-stream"), tbl); err != nil {
				t.Fatal(err)
			}
			num := func(v lua.LValue) int {
				if n, ok := v.(lua.LNumber); ok {
					return int(n)
				}
				return -1
			}
			p, c, e := num(L.Get(-3)), num(L.Get(-2)), num(L.Get(-1))
			L.Pop(3)
			if p != tc.prompt || c != tc.completion || e != 10 {
				t.Fatalf("got prompt=%d completion=%d events=%d, want %d %d 10", p, c, e, tc.prompt, tc.completion)
			}
		})
	}
}
