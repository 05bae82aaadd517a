package apiv1

import "time"

// LogEntry is one object of a job's log (GET .../jobs/{job}/logs, application/x-ndjson, one
// per line): a line a VM's model server printed (kind line), a VM's new status as its
// inference agent reports it (kind status, with the status and its words in message), or
// the API's own notice (kind notice: a VM instance started again, a stream resumed, lines
// that could not be read). replica, node and vm say whose it is; a notice about the whole
// job has none.
type LogEntry struct {
	Kind    string    `json:"kind" enum:"line,status,notice"`
	Time    time.Time `json:"time" doc:"When the agent read the line from the server (a notice: when it was made)"`
	Replica *int32    `json:"replica,omitempty"`
	Node    *int32    `json:"node,omitempty" doc:"The node's rank in its replica (0 is the head)"`
	VM      string    `json:"vm,omitempty" doc:"The VirtualMachine (<job>-r<replica>-n<node>)"`
	// Stream, Line and Truncated are a line's.
	Stream    string `json:"stream,omitempty" enum:"stdout,stderr,agent" doc:"stdout or stderr of the model server; agent: the agent's own line (a start, an exit, lines dropped over its rate limit)"`
	Line      string `json:"line,omitempty" doc:"The line as printed (secrets redacted by the agent)"`
	Truncated bool   `json:"truncated,omitempty" doc:"The line was longer than the agent forwards (8 KiB) and was cut"`
	// Status is a status entry's; Message says it in words (a status or a notice).
	Status  *AgentStatus `json:"status,omitempty"`
	Message string       `json:"message,omitempty"`
}

// AgentStatus is what the inference agent in a VM says about its model server.
type AgentStatus struct {
	Stage    string     `json:"stage" doc:"starting, pulling-image, downloading-weights, loading-model, serving, crash-looping or stopping"`
	Since    *time.Time `json:"since,omitempty" doc:"When the stage was entered"`
	Detail   string     `json:"detail,omitempty"`
	Progress *Progress  `json:"progress,omitempty"`
	Restarts int        `json:"restarts" doc:"How often the agent restarted the model server"`
	LastExit *Exit      `json:"lastExit,omitempty"`
	// ReportedAt is when the agent wrote it (in a job's detail).
	ReportedAt *time.Time `json:"reportedAt,omitempty"`
}

// Progress is how much of an image pull or a download is done.
type Progress struct {
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit" doc:"bytes or files"`
}

// Exit is how the model server last ended.
type Exit struct {
	Code         int       `json:"code"`
	AfterSeconds float64   `json:"afterSeconds" doc:"How long it had run"`
	At           time.Time `json:"at"`
	LastLines    []string  `json:"lastLines,omitempty" doc:"Its last lines before the exit, oldest first"`
}
