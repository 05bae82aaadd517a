package discovery

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodFile = `
endpoints:
- tenant: acme
  job: chat
  requireAPIKey: false
  replicas:
  - address: 127.0.0.1
    port: 8001
  - address: 127.0.0.2
    port: 8001
    name: chat-second
- tenant: acme
  job: asr
  runtime: parakeet
  replicas:
  - address: "::1"
    port: 9000
`

func TestParseFile(t *testing.T) {
	reps, err := ParseFile("eps.yaml", []byte(goodFile))
	require.NoError(t, err)
	require.Len(t, reps, 3)
	// sorted by key: acme/asr-r0, acme/chat-r0, acme/chat-second
	assert.Equal(t, Replica{Tenant: "acme", Job: "asr", Runtime: "parakeet", RequireAPIKey: true, Index: "0",
		Namespace: "acme", Name: "asr-r0", Running: true, Address: "::1", Port: 9000, Ready: true}, reps[0])
	assert.Equal(t, "chat-r0", reps[1].Name)
	assert.Equal(t, "vllm", reps[1].Runtime, "runtime defaults to vllm")
	assert.False(t, reps[1].RequireAPIKey)
	assert.Equal(t, "chat-second", reps[2].Name)
	assert.Equal(t, "1", reps[2].Index)
	assert.Equal(t, "http://[::1]:9000/health", reps[0].HealthURL("/health"))

	none, err := ParseFile("eps.yaml", []byte("endpoints: []\n"))
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestParseFileErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"empty file", "  \n", `eps.yaml: file is empty (write "endpoints: []" for no endpoints)`},
		{"unknown field", "endpoints:\n- tenant: a\n  job: b\n  replicas:\n  - adress: 1.2.3.4\n", `eps.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "adress"`},
		{"not yaml", "endpoints: [", "eps.yaml: error converting YAML to JSON"},
		{"bad tenant", "endpoints:\n- tenant: Acme\n  job: b\n", `eps.yaml: endpoints[0].tenant "Acme"`},
		{"missing job", "endpoints:\n- tenant: acme\n", `eps.yaml: endpoints[0].job ""`},
		{"bad runtime", "endpoints:\n- {tenant: a, job: b, runtime: tgi}\n", `eps.yaml: endpoints[0].runtime "tgi": expected one of parakeet, vllm`},
		{"bad address", "endpoints:\n- {tenant: a, job: b, replicas: [{address: host.local, port: 80}]}\n",
			`eps.yaml: endpoints[0].replicas[0].address "host.local": expected an IP address`},
		{"port zero", "endpoints:\n- {tenant: a, job: b, replicas: [{address: 10.0.0.1}]}\n", `eps.yaml: endpoints[0].replicas[0].port 0: expected 1-65535`},
		{"duplicate job", "endpoints:\n- {tenant: a, job: b}\n- {tenant: a, job: b}\n", `eps.yaml: endpoints[1].job: a/b is already endpoints[0]`},
		{"duplicate address", "endpoints:\n- {tenant: a, job: b, replicas: [{address: 10.0.0.1, port: 80}]}\n- {tenant: a, job: c, replicas: [{address: 10.0.0.1, port: 80}]}\n",
			`eps.yaml: endpoints[1].replicas[0].address: 10.0.0.1:80 is already used by endpoints[0].replicas[0]`},
		{"duplicate name", "endpoints:\n- {tenant: a, job: b, replicas: [{name: x, address: 10.0.0.1, port: 80}, {name: x, address: 10.0.0.2, port: 80}]}\n",
			`eps.yaml: replica name "x" is used twice in tenant a`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reps, err := ParseFile("eps.yaml", []byte(tc.yaml))
			require.Error(t, err)
			assert.Nil(t, reps)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFileSourceReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "eps.yaml")
	require.NoError(t, os.WriteFile(path, []byte(goodFile), 0o644))

	var mu sync.Mutex
	var reloadErrs []error
	src := &File{Path: path, Interval: 10 * time.Millisecond, OnReloadError: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reloadErrs = append(reloadErrs, err)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan Update)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, updates) }()

	recv := func() Update {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(5 * time.Second):
			t.Fatal("no update from the file source")
			return Update{}
		}
	}
	assert.Len(t, recv().Replicas, 3)

	// A bad edit is reported once, as a problem beside the endpoints that stay in force (it
	// reaches /debug/endpoints and the problems metric), and changes nothing else.
	require.NoError(t, os.WriteFile(path, []byte("endpoints:\n- tenant: acme\n  jobb: x\n"), 0o644))
	u := recv()
	assert.Len(t, u.Replicas, 3, "the last good endpoints stay")
	require.Len(t, u.Problems, 1)
	assert.Equal(t, "file:"+path, u.Problems[0].Object)
	assert.Contains(t, u.Problems[0].Reason, `keeping the last good endpoints: `)
	assert.Contains(t, u.Problems[0].Reason, `unknown field "jobb"`)
	select {
	case u := <-updates:
		t.Fatalf("the same bad file must be reported once, got another update with %d problems", len(u.Problems))
	case <-time.After(100 * time.Millisecond):
	}
	mu.Lock()
	assert.Len(t, reloadErrs, 1, "the same bad content is reported once")
	assert.ErrorContains(t, reloadErrs[0], `unknown field "jobb"`)
	mu.Unlock()

	// Replaced atomically, as a ConfigMap mount or an editor does.
	tmp := filepath.Join(dir, "eps.yaml.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("endpoints:\n- {tenant: acme, job: chat, replicas: [{address: 127.0.0.9, port: 8001}]}\n"), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	u = recv()
	require.Len(t, u.Replicas, 1)
	assert.Equal(t, "127.0.0.9", u.Replicas[0].Address)
	assert.Empty(t, u.Problems, "a good file clears the problem")

	cancel()
	require.NoError(t, <-done)
}

func TestFileSourceStartErrors(t *testing.T) {
	src := &File{Path: filepath.Join(t.TempDir(), "missing.yaml")}
	err := src.Run(context.Background(), make(chan Update, 1))
	require.ErrorContains(t, err, "file source: open ")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("endpoints:\n- {tenant: a, job: b, replicas: [{address: x, port: 1}]}\n"), 0o644))
	err = (&File{Path: bad}).Run(context.Background(), make(chan Update, 1))
	require.ErrorContains(t, err, `bad.yaml: endpoints[0].replicas[0].address "x": expected an IP address`)
}
