package inputsrepo

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
)

// TestHistory lists, newest first, the commits whose trailer has a value: one tenant's changes
// among others', up to a number.
func TestHistory(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "inputs.git")
	gitserver.Init(t, dir, initial)
	r := open(t, Options{URL: "file://" + dir})
	var last string
	for i, c := range []struct{ tenant, subject string }{
		{"acme", "acme: quota gpus 16 -> 32"}, {"globex", "globex: tier h200-dedicated"}, {"", "acme: create job chat"},
		{"acme", "acme: tier h200-dedicated"},
	} {
		msg := c.subject
		if c.tenant != "" {
			msg += "\n\nInferplane-Tenant: " + c.tenant + "\nInferplane-Reason: order 47" + string(rune('0'+i))
		}
		res, err := r.Write(ctx, Change{Author: dana, Message: msg, Apply: func(tr *Tree) error {
			return tr.WriteFile("notes/"+string(rune('a'+i)), []byte(msg))
		}})
		require.NoError(t, err)
		last = res.Commit
	}
	got, err := r.History(last, "Inferplane-Tenant", "acme", 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "acme: tier h200-dedicated", got[0].Subject)
	assert.Equal(t, "order 473", got[0].Trailers["Inferplane-Reason"])
	assert.Equal(t, dana, got[0].Author)
	assert.Equal(t, last, got[0].Commit)
	assert.Equal(t, "acme: quota gpus 16 -> 32", got[1].Subject)
	got, err = r.History(last, "Inferplane-Tenant", "acme", 1)
	require.NoError(t, err)
	assert.Len(t, got, 1, "at most max")
}
