package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
)

// StateFile is the agent's state in its state folder.
const StateFile = "state.json"

// state is what the agent keeps across its own restarts (one JSON file, replaced atomically
// on every record it writes to the console).
type state struct {
	// Seq is the Seq of the last record written (or about to be: Pending).
	Seq uint64 `json:"seq"`
	// Pending is the last record, encoded: written to the console after this file, so after a
	// crash between the two the agent writes it again, with the same Seq, which a reader
	// skips if it had it.
	Pending string `json:"pending,omitempty"`
	// Cursor is the position in the server's output after the last line written.
	Cursor runtime.Cursor `json:"cursor"`
	// ContainerID is the container the agent supervises (to reattach to after a restart).
	ContainerID string `json:"containerID,omitempty"`
	// Restarts counts the server's restarts since the state was made.
	Restarts int `json:"restarts"`
	// Status is the last status written, so that a reattached agent goes on from it.
	Status *guestlog.Status `json:"status,omitempty"`
	// BootID is the guest kernel's boot id when the file was written: after a reboot the
	// containers are gone and the last writes may not have reached the disk.
	BootID string `json:"bootID,omitempty"`
}

// rebootSeqGap is how far Seq jumps after the guest rebooted: the records of the last second
// before a crash may have reached the console but not the disk, and a reader must not take
// the new records for ones it has seen.
const rebootSeqGap = 1 << 20

// stateStore persists the state; every method is safe for concurrent use.
type stateStore struct {
	path   string
	bootID string

	mu       sync.Mutex
	s        state
	lastSync time.Time
}

// bootIDPath is the kernel's boot id; a variable for tests.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

func readBootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// openState reads the state folder's file, or starts a new state. A file that does not
// parse is an error: the agent must not start counting again from 0 and make readers skip.
func openState(dir string) (*stateStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent state folder: %w", err)
	}
	st := &stateStore{path: filepath.Join(dir, StateFile), bootID: readBootID()}
	b, err := os.ReadFile(st.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("agent state: %w", err)
	default:
		if err := json.Unmarshal(b, &st.s); err != nil {
			return nil, fmt.Errorf("agent state %s: %w (move it away to start a new one: the records' Seq then starts again at 1)", st.path, err)
		}
	}
	if st.s.BootID != "" && st.bootID != "" && st.s.BootID != st.bootID {
		st.s.Seq += rebootSeqGap
		st.s.Pending, st.s.ContainerID, st.s.Cursor, st.s.Status = "", "", runtime.Cursor{}, nil
	}
	st.s.BootID = st.bootID
	return st, st.write(true)
}

// get returns a copy of the state.
func (st *stateStore) get() state {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// update changes the state and writes it.
func (st *stateStore) update(f func(*state)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	f(&st.s)
	return st.write(false)
}

// write replaces the file (a new file renamed over the old: never half written). It syncs to
// disk at most once a second: a process crash loses nothing either way, a guest crash is
// what rebootSeqGap covers.
func (st *stateStore) write(sync bool) error {
	b, err := json.Marshal(st.s)
	if err != nil {
		return err
	}
	tmp := st.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	_, err = f.Write(b)
	if now := time.Now(); err == nil && (sync || now.Sub(st.lastSync) >= time.Second) {
		err = f.Sync()
		st.lastSync = now
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, st.path)
	}
	if err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	return nil
}
