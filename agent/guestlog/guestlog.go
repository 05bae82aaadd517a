// Package guestlog is the contract between the inference agent in a replica's VM and everyone
// who reads what it says: the agent writes one record per line to the guest's serial console;
// KubeVirt's guest-console-log container (logSerialConsole) turns the console into the
// virt-launcher pod's log; the product API, the CLI and `kubectl logs` read it back through the
// tenant cluster's API server (pods/log). The serial console also carries what the guest's
// kernel, systemd and cloud-init print: a record is a line that starts with Prefix, and a
// reader skips every other line.
//
// Two kinds of record: a line the model server printed (KindLine, already redacted by the
// agent) and the agent's status (KindStatus: written on every change and again every
// StatusInterval, so a reader finds the current one in a short tail of the log). Seq counts
// the records of one VM's agent and survives the agent's restarts (the agent keeps it on
// disk): a reader that resumes a follow skips every record whose Seq it has seen, so no line
// is shown twice.
package guestlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Prefix starts every record on the console: it cannot be mistaken for a kernel, systemd or
// cloud-init line.
const Prefix = "@inferplane "

// Version is the record format's version (field "v"); a reader skips records of a version it
// does not know rather than misread them.
const Version = 1

// MaxLine is the longest model-server line the agent forwards, in bytes; longer lines are cut
// there and marked Truncated (a serial console is slow, and a reader's buffer bounded).
const MaxLine = 8 << 10

// StatusInterval is how often the agent repeats its status when nothing changes.
const StatusInterval = 15 * time.Second

// Kind tells a record's kind.
type Kind string

const (
	KindLine   Kind = "line"
	KindStatus Kind = "status"
)

// Stream is where a line came from.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
	// Agent: the agent's own lines (starting the container, its exit, a restart's backoff,
	// lines dropped over the rate limit).
	Agent Stream = "agent"
)

// Stage is where the model server is, as the agent sees it from inside the VM.
type Stage string

const (
	StageStarting           Stage = "starting"
	StagePullingImage       Stage = "pulling-image"
	StageDownloadingWeights Stage = "downloading-weights"
	StageLoadingModel       Stage = "loading-model"
	StageServing            Stage = "serving"
	// StageCrashLooping: the server exited and is being restarted with a backoff.
	StageCrashLooping Stage = "crash-looping"
	StageStopping     Stage = "stopping"
)

// Record is one line of the agent's on the console.
type Record struct {
	V    int       `json:"v"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"t"`
	Kind Kind      `json:"k"`

	// KindLine.
	Stream    Stream `json:"s,omitempty"`
	Line      string `json:"l,omitempty"`
	Truncated bool   `json:"trunc,omitempty"`

	// KindStatus.
	Status *Status `json:"status,omitempty"`
}

// Status is the agent's view of its model server.
type Status struct {
	Stage Stage `json:"stage"`
	// Since is when the stage was entered.
	Since time.Time `json:"since"`
	// Detail says more in words ("Loading safetensors checkpoint shards: 3/8").
	Detail string `json:"detail,omitempty"`
	// Progress of a pull or a download, when the runtime or the server reports it.
	Progress *Progress `json:"progress,omitempty"`
	// Restarts is how many times the agent restarted the server since the agent's state was
	// made (it survives the agent's restarts).
	Restarts int `json:"restarts"`
	// LastExit is the last exit of the server, if it exited.
	LastExit *Exit `json:"lastExit,omitempty"`
}

// Progress is how much of something is done: bytes or files.
type Progress struct {
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit"` // "bytes" or "files"
}

// Exit is how the server's container ended.
type Exit struct {
	Code int `json:"code"`
	// After is how long it had run.
	After time.Duration `json:"afterNs"`
	At    time.Time     `json:"at"`
	// LastLines are the last lines it printed before the exit (redacted), oldest first.
	LastLines []string `json:"lastLines,omitempty"`
}

// ErrNotRecord is returned by Decode for a console line that is not an agent record.
var ErrNotRecord = errors.New("not an agent record")

// Encode writes the record as one console line, newline included. The JSON escapes every
// control character, so a record is always exactly one line.
func Encode(r Record) ([]byte, error) {
	r.V = Version
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(Prefix)+len(b)+1)
	out = append(out, Prefix...)
	out = append(out, b...)
	return append(out, '\n'), nil
}

// Decode reads one console line (with or without its line end, and with any carriage return
// a serial console adds). A line without the prefix is ErrNotRecord; a record of another
// version or that does not parse is an error saying so.
func Decode(line []byte) (Record, error) {
	line = bytes.TrimRight(line, "\r\n")
	i := bytes.Index(line, []byte(Prefix))
	if i < 0 {
		return Record{}, ErrNotRecord
	}
	var r Record
	if err := json.Unmarshal(line[i+len(Prefix):], &r); err != nil {
		return Record{}, fmt.Errorf("agent record: %w", err)
	}
	if r.V != Version {
		return Record{}, fmt.Errorf("agent record of version %d (this reader knows %d)", r.V, Version)
	}
	switch r.Kind {
	case KindLine:
	case KindStatus:
		if r.Status == nil {
			return Record{}, errors.New("agent record: a status record without its status")
		}
	default:
		return Record{}, fmt.Errorf("agent record: unknown kind %q", r.Kind)
	}
	return r, nil
}
