package main

import (
	"cmp"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/dex"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// TestKeysLimitThroughTheAPI: `keys limit` with a signed-in context sets the limits of a key
// of the customer's tenant through the product API, each at most the tenant's own (acme's
// tenant.yaml here: 600 requests a minute, 100,000 tokens a day, as the operator wrote it);
// one above is refused by field with the tenant's value and changes nothing; bad flags are
// usage errors (exit 2) before the API is asked; --clear leaves only the tenant's; a viewer
// is refused by the API.
func TestKeysLimitThroughTheAPI(t *testing.T) {
	w := startCLIWorldWith(t, dex.Options{}, func(files map[string]string) {
		p := "tenants/acme/tenant.yaml"
		files[p] = strings.Replace(files[p], "\nspec:\n", "\nspec:\n  limits:\n    requestsPerMinute: {value: 600}\n    tokensPerDay: {value: 100000, mode: soft}\n", 1)
	})
	ctx := context.Background()
	w.signInAs(t, "dana@acme.example")
	_, stderr, err := execCLI(ctx, "login", w.apiURL)
	require.NoError(t, err, stderr)
	_, stderr, err = execCLI(ctx, "keys", "create", "--name", "ci", "--requests-per-minute", "60")
	require.NoError(t, err, stderr)
	m := regexp.MustCompile(`key ([0-9a-f]{16}) for every endpoint of acme`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	id := m[1]
	limitsNow := func() string {
		out, _, err := execCLI(ctx, "keys", "list", "-o", "json")
		require.NoError(t, err)
		var l apiv1.KeyList
		require.NoError(t, json.Unmarshal([]byte(out), &l))
		for _, k := range l.Items {
			if k.ID == id {
				return describeLimits(k.Limits)
			}
		}
		t.Fatalf("key %s not listed: %s", id, out)
		return ""
	}

	for _, tc := range []struct {
		name   string
		key    string // another key than the one created
		args   []string
		exit   int
		says   string
		limits string // the key's limits after
	}{
		{"within the tenant's", "", []string{"--requests-per-minute", "600", "--tokens-per-day", "5000", "--tokens-per-month", "9000000", "--soft", "tpd"}, 0,
			"key " + id + " (tenant acme): 600 requests per minute, 5000 tokens per day (soft), 9000000 tokens per month",
			"600 requests per minute, 5000 tokens per day (soft), 9000000 tokens per month"},
		{"above the tenant's", "", []string{"--tokens-per-day", "100001"}, 1,
			"limits.tokensPerDay.value is 100001: must be at most 100000, the tenant's own tokens per day (spec.limits.tokensPerDay of tenants/acme/tenant.yaml)",
			"600 requests per minute, 5000 tokens per day (soft), 9000000 tokens per month"},
		{"a negative limit", "", []string{"--requests-per-minute", "-1"}, 2, "--requests-per-minute -1: want a positive number", ""},
		{"no limit and no --clear", "", nil, 2, "give at least one limit", ""},
		{"--clear with a limit", "", []string{"--clear", "--requests-per-minute", "5"}, 2, "--clear removes every limit: give it alone", ""},
		{"a key that is not there", "0123456789abcdef", []string{"--requests-per-minute", "5"}, 1, "tenant acme has no key 0123456789abcdef", ""},
		{"--clear", "", []string{"--clear"}, 0, "key " + id + " (tenant acme): no limits of its own", "no limits of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := cmp.Or(tc.key, id)
			out, stderr, err := execCLI(ctx, append([]string{"keys", "limit", key}, tc.args...)...)
			assert.Equal(t, tc.exit, exitCode(err), "%v\n%s", err, stderr)
			if err != nil {
				assert.Contains(t, err.Error(), tc.says)
			} else {
				assert.Contains(t, out, tc.says)
			}
			if tc.limits != "" {
				assert.Equal(t, tc.limits, limitsNow())
			}
		})
	}

	w.signInAs(t, "vera@acme.example")
	_, stderr, err = execCLI(ctx, "login", w.apiURL)
	require.NoError(t, err, stderr)
	_, _, err = execCLI(ctx, "keys", "limit", id, "--requests-per-minute", "1")
	assert.Equal(t, 1, exitCode(err))
	assert.ErrorContains(t, err, "403")
	assert.Equal(t, "no limits of its own", limitsNow(), "a viewer's change changed the key")
}
