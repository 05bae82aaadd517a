package inputsrepo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checks of writes that arrive together run side by side in their callers, not one after
// the other in the writer: each check here waits until all of them are running, which they
// reach only if none waits for another (the writer runs one chain at a time). A write whose
// tenant another write changed first is checked again on the head it lands on.
func TestChecksOfConcurrentWritesRunSideBySide(t *testing.T) {
	ctx := context.Background()
	bare, o := fileRemote(t)
	r := open(t, o)
	_, err := r.Head(ctx) // fetched: the writes are prepared on this head
	require.NoError(t, err)

	const n = 4
	var (
		mu      sync.Mutex
		running int
		all     = make(chan struct{})
	)
	together := func(context.Context, *Tree) error {
		mu.Lock()
		running++
		if running == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(30 * time.Second): // a guard against a hang, not a timing
			return errors.New("the checks ran one after the other")
		}
	}
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, tn := range tenants {
		wg.Go(func() {
			_, errs[i] = r.Write(ctx, Change{Author: dana, Message: "add " + tn + "/side", Apply: addJob(tn, "side"),
				Check: together, Reads: DefaultDeps(tn)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, tenants[i])
	}
	for _, tn := range tenants {
		assert.Contains(t, remoteFile(t, bare, fmt.Sprintf("tenants/%s/jobs/side.yaml", tn)), "name: side")
	}

	// A write prepared on a head that then moved under it: "two" is applied and checked while
	// "one", to the same tenant, lands; two's check refuses a tree without one's job, so two's
	// verdict there must not be carried to the head it lands on, where it is checked again.
	twoApplying, oneLanded := make(chan struct{}), make(chan struct{})
	var twoChecks int
	var once sync.Once
	var two sync.WaitGroup
	var twoErr error
	two.Go(func() {
		_, twoErr = r.Write(ctx, Change{Author: dana, Message: "add two", Reads: DefaultDeps("acme"),
			Apply: func(t *Tree) error {
				once.Do(func() {
					close(twoApplying)
					select {
					case <-oneLanded:
					case <-time.After(30 * time.Second): // a guard against a hang (the writer waiting here)
					}
				})
				return addJob("acme", "two")(t)
			},
			Check: func(_ context.Context, t *Tree) error {
				twoChecks++
				if _, err := t.ReadFile("tenants/acme/jobs/one.yaml"); err != nil {
					return errors.New("two needs one")
				}
				return nil
			}})
	})
	<-twoApplying
	_, err = r.Write(ctx, Change{Author: dana, Message: "add one", Reads: DefaultDeps("acme"), Apply: addJob("acme", "one")})
	require.NoError(t, err)
	close(oneLanded)
	two.Wait()
	require.NoError(t, twoErr, "two's refusal on the head without one was carried to the head with it")
	assert.Equal(t, 2, twoChecks, "checked where it was prepared, then again where it landed")
	assert.Contains(t, remoteFile(t, bare, "tenants/acme/jobs/two.yaml"), "name: two")
}
