// Package runtime is what the agent needs of a container runtime to run the model server: pull
// its image, start its container, find it again after the agent restarts, read what it prints
// from a position on, wait for its exit, stop it. Two implementations: docker (the Docker
// Engine API on its unix socket, in the guest) and process (a plain process, for tests and
// hosts without a container engine).
package runtime

import (
	"context"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
)

// Spec is the model server's container: what the launcher gave `docker run` before the agent.
type Spec struct {
	Name       string
	Image      string
	Entrypoint []string // replaces the image's entrypoint when set
	Args       []string
	Env        []string // KEY=VALUE
	Binds      []string // host:container[:ro]
	GPUs       string   // "all", a count, or "" for none
	IPC        string   // "host", or "" for the runtime's default
	Network    string   // "host", or "" for the runtime's default
	Devices    []string // host[:container[:permissions]]
	CapAdd     []string
	Ulimits    []string // name=soft[:hard]
}

// Chunk is a piece of the server's output as the runtime hands it over: one line or several,
// or part of one (a line without its end yet).
type Chunk struct {
	Stream guestlog.Stream // guestlog.Stdout or guestlog.Stderr
	Time   time.Time       // when the runtime took it from the server
	Data   []byte
	// Cursor is the position after this chunk: reading from it again does not repeat it.
	Cursor Cursor
}

// Cursor is a position in a container's output: the time of the last chunk consumed and how
// many chunks of exactly that time were consumed (the runtime resumes at a time, and two
// chunks may share one).
type Cursor struct {
	Time time.Time `json:"time,omitzero"`
	N    int       `json:"n,omitempty"`
}

// PullProgress is how far an image pull is: bytes of the layers the runtime reported sizes of.
type PullProgress struct {
	Done, Total int64
}

// State is a container's run state.
type State struct {
	Running    bool
	ExitCode   int
	StartedAt  time.Time
	FinishedAt time.Time
}

// Runtime runs containers.
type Runtime interface {
	// Pull makes the image present locally, reporting progress while it downloads.
	Pull(ctx context.Context, image string, progress func(PullProgress)) error
	// Start creates and starts the container (replacing a stopped one of that name).
	Start(ctx context.Context, spec Spec) (Container, error)
	// Find returns the container of that name, running or not, or nil when there is none or
	// the runtime cannot reattach to one.
	Find(ctx context.Context, name string) (Container, error)
}

// Container is one started container.
type Container interface {
	ID() string
	State(ctx context.Context) (State, error)
	// Logs hands every chunk of output after from to emit, in order, and follows the output
	// until the container has exited and everything was read, or ctx ends.
	Logs(ctx context.Context, from Cursor, emit func(Chunk)) error
	// Wait blocks until the container exits and returns its exit code (128+n for signal n).
	Wait(ctx context.Context) (int, error)
	// Stop asks the server to stop (SIGTERM) and kills it after grace.
	Stop(ctx context.Context, grace time.Duration) error
	// Remove deletes the exited container.
	Remove(ctx context.Context) error
}
