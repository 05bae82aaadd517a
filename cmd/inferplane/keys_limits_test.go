package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/usage"
)

func TestKeysLimits(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "keys.db")
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef-cli-limits"), 0o600)
	t.Setenv(keys.SecretEnv, "")
	base := []string{"--store-file", store}

	out, stderr, err := keysCLI(t, append([]string{"keys", "create", "--force", "--secret-file", secretFile, "--tenant", "acme",
		"--requests-per-minute", "20", "--tokens-per-day", "100000", "--tokens-per-month", "1000000", "--soft", "tpmo"}, base...)...)
	if err != nil {
		t.Fatal(err, stderr)
	}
	id, _ := keys.ParseID(strings.TrimSpace(out))
	if !strings.Contains(stderr, "20 requests per minute, 100000 tokens per day, 1000000 tokens per month (soft)") {
		t.Fatalf("create's notice: %q", stderr)
	}
	rec, err := keys.NewFileStore(store).Get(context.Background(), id)
	if err != nil || rec.Limits == nil || rec.Limits.RequestsPerMinute.Value != 20 || rec.Limits.TokensPerMonth.Mode != v1alpha1.LimitSoft ||
		rec.Limits.TokensPerDay.Mode != v1alpha1.LimitHard || rec.Limits.TokensPerWeek != nil {
		t.Fatalf("stored %+v %v", rec.Limits, err)
	}

	out, _, err = keysCLI(t, append([]string{"keys", "limit", id, "--tokens-per-minute", "5000"}, base...)...)
	if err != nil || !strings.Contains(out, "5000 tokens per minute") || strings.Contains(out, "per day") {
		t.Fatalf("keys limit: %q %v", out, err)
	}
	out, _, err = keysCLI(t, append([]string{"keys", "list", "-o", "json"}, base...)...)
	var views []keyView
	if err != nil || json.Unmarshal([]byte(out), &views) != nil || len(views) != 1 || views[0].Limits.TokensPerMinute.Value != 5000 {
		t.Fatalf("keys list: %s %v", out, err)
	}
	if out, _, err = keysCLI(t, append([]string{"keys", "limit", id, "--clear"}, base...)...); err != nil || !strings.Contains(out, "no limits of its own") {
		t.Fatalf("--clear: %q %v", out, err)
	}

	for _, bad := range [][]string{
		{"keys", "limit", id, "--tokens-per-day", "-1"},
		{"keys", "limit", id, "--tokens-per-day", "5", "--soft", "weekly"},
		{"keys", "limit", id, "--soft", "tpd", "--tokens-per-minute", "5"},
		{"keys", "limit", id},
		{"keys", "limit", id, "--clear", "--tokens-per-day", "5"},
		{"keys", "limit", "nothex"},
	} {
		if _, _, err := keysCLI(t, append(bad, base...)...); exitCode(err) != 2 {
			t.Errorf("%v: want exit 2 (bad input), got %v", bad, err)
		}
	}

	// keys usage shows the spend against each limit, from /v1/limits.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case usage.UsagePath:
			json.NewEncoder(w).Encode(usage.UsageReport{Keys: []usage.KeyUsage{}})
		case limits.Path:
			json.NewEncoder(w).Encode(limits.StatusReport{StoreUp: true, Limits: []limits.LimitStatus{
				{Tenant: "acme", KeyID: id, Scope: "key", Limit: "tokensPerDay", Value: 100000, Mode: v1alpha1.LimitHard, Used: 1234, Remaining: 98766}}})
		}
	}))
	defer srv.Close()
	out, _, err = keysCLI(t, "keys", "usage", "--server", srv.URL)
	if err != nil || !strings.Contains(out, "key "+id+"  tokensPerDay  hard  1234  100000  98766") {
		t.Fatalf("keys usage: %q %v", out, err)
	}
}
