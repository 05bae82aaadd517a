// Package lifecycle says where a job is on its way from "created" to "serving": it joins what
// the host cluster's Argo CD, the tenant cluster's KubeVirt objects and the gateway report about
// one job into a readiness stage per replica and for the job. Everything here is a pure
// function over objects already read (package lifecycle/cluster reads them, lifecycle/gateway
// asks the gateway), so each stage and its reason is tested as a table.
package lifecycle

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Job is the part of a planned job the stages need.
type Job struct {
	Tenant, Name string
	// Replicas and NodesPerReplica come from the plan: the VMs the job should have.
	Replicas, NodesPerReplica int32
}

// Observed is what was read about one job, at one time.
type Observed struct {
	// App is the job's Argo CD Application in the host cluster; nil when there is none.
	App *Application
	// VMs, VMIs and PVCs are the job's objects in its tenant cluster (by the job's labels).
	VMs  []kubevirtv1.VirtualMachine
	VMIs []kubevirtv1.VirtualMachineInstance
	PVCs []corev1.PersistentVolumeClaim
	// Events are events about the job's PVCs, the only place a claim says why it is pending.
	Events []corev1.Event
	// Gateway is the gateway's view of the job's endpoint; nil when it could not be asked,
	// with GatewayError saying why.
	Gateway      *Rotation
	GatewayError string
	// Agent is what the inference agent of each running VM last reported, by VM name, for
	// the VMs AgentWanted names (nil: none read; a VM without an entry shows its VMI's stage).
	Agent map[string]*AgentReport
}

// Application is the part of an Argo CD Application (argoproj.io/v1alpha1) read here. Argo
// CD's Go module cannot be imported beside ours (docs/design.md), so these are our own
// structs; the field names are the CRD's, which the e2e tests hold them to by writing them
// into a real API server with strict field validation.
type Application struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            ApplicationStatus `json:"status,omitempty"`
}

// ApplicationStatus is an Application's status.
type ApplicationStatus struct {
	Sync           SyncStatus             `json:"sync,omitempty"`
	Health         HealthStatus           `json:"health,omitempty"`
	Conditions     []ApplicationCondition `json:"conditions,omitempty"`
	OperationState *OperationState        `json:"operationState,omitempty"`
	ReconciledAt   *metav1.Time           `json:"reconciledAt,omitempty"`
}

// Argo CD's sync statuses, health statuses and operation phases used here.
const (
	SyncSynced    = "Synced"
	SyncOutOfSync = "OutOfSync"

	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"

	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	PhaseError     = "Error"
)

// SyncStatus is status.sync.
type SyncStatus struct {
	Status   string `json:"status"`
	Revision string `json:"revision,omitempty"`
}

// HealthStatus is status.health.
type HealthStatus struct {
	Status             string       `json:"status,omitempty"`
	Message            string       `json:"message,omitempty"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// ApplicationCondition is one of status.conditions (SyncError, ComparisonError, ...).
type ApplicationCondition struct {
	Type               string       `json:"type"`
	Message            string       `json:"message"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// OperationState is status.operationState: the last or current sync.
type OperationState struct {
	Operation  Operation    `json:"operation"`
	Phase      string       `json:"phase"`
	Message    string       `json:"message,omitempty"`
	StartedAt  metav1.Time  `json:"startedAt"`
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	RetryCount int64        `json:"retryCount,omitempty"`
}

// Operation is what a sync was asked to do (only who asked and the revision are read).
type Operation struct {
	Sync        *SyncOperation      `json:"sync,omitempty"`
	InitiatedBy *OperationInitiator `json:"initiatedBy,omitempty"`
}

// SyncOperation is operation.sync.
type SyncOperation struct {
	Revision string `json:"revision,omitempty"`
}

// OperationInitiator is operation.initiatedBy.
type OperationInitiator struct {
	Username  string `json:"username,omitempty"`
	Automated bool   `json:"automated,omitempty"`
}

// Rotation is the gateway's view of one endpoint: GET /v1/health gives its status and how
// many replicas are ready, and, when the gateway says which, InRotation names them.
type Rotation struct {
	// Known is false when the gateway has no such endpoint.
	Known   bool     `json:"known"`
	Status  string   `json:"status,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Ready   int      `json:"ready"`
	Total   int      `json:"total"`
	// InRotation holds the head VMI names ("<job>-r<N>-n0") of the replicas the gateway sends
	// traffic to; nil when the gateway did not say which.
	InRotation map[string]bool `json:"inRotation,omitempty"`
}
