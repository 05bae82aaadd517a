package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplicationGVK is Argo CD's Application kind.
var ApplicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// Application is the part of an Application's status the tests read (our own struct: Argo CD's
// Go types cannot be imported beside k8s.io v0.37).
type Application struct {
	Name     string `json:"-"`
	Metadata struct {
		CreationTimestamp time.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		Sync struct {
			Status   string `json:"status"`
			Revision string `json:"revision"`
		} `json:"sync"`
		Health struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"health"`
		OperationState *struct {
			Phase      string    `json:"phase"`
			Message    string    `json:"message"`
			RetryCount int       `json:"retryCount"`
			StartedAt  time.Time `json:"startedAt"`
			FinishedAt time.Time `json:"finishedAt"`
			SyncResult *struct {
				Revision  string           `json:"revision"`
				Resources []ResourceResult `json:"resources"`
			} `json:"syncResult"`
		} `json:"operationState"`
		Conditions []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"conditions"`
		// History lists the successful syncs, oldest first.
		History []struct {
			Revision   string    `json:"revision"`
			DeployedAt time.Time `json:"deployedAt"`
		} `json:"history"`
	} `json:"status"`
}

// ResourceResult is one object's outcome in a sync.
type ResourceResult struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
	SyncPhase string `json:"syncPhase"`
}

// Sync states, health states and operation phases, as Argo CD writes them.
const (
	Synced      = "Synced"
	OutOfSync   = "OutOfSync"
	Healthy     = "Healthy"
	Progressing = "Progressing"
	Succeeded   = "Succeeded"
	Failed      = "Failed"
	Error       = "Error"
	Running     = "Running"
)

// SyncedAndSucceeded: in sync with git, and the last sync operation succeeded.
func (a *Application) SyncedAndSucceeded() bool {
	op := a.Status.OperationState
	return a.Status.Sync.Status == Synced && op != nil && op.Phase == Succeeded
}

// FirstDeployedAt is when the Application first synced successfully (zero if never).
func (a *Application) FirstDeployedAt() time.Time {
	if len(a.Status.History) == 0 {
		return time.Time{}
	}
	return a.Status.History[0].DeployedAt
}

// OperationPhase is the last operation's phase, "" when none ran.
func (a *Application) OperationPhase() string {
	if op := a.Status.OperationState; op != nil {
		return op.Phase
	}
	return ""
}

// OperationMessages joins the operation's message and every resource's message: where Argo CD
// puts an API server's refusal.
func (a *Application) OperationMessages() string {
	op := a.Status.OperationState
	if op == nil {
		return ""
	}
	msgs := []string{op.Message}
	if op.SyncResult != nil {
		for _, r := range op.SyncResult.Resources {
			if r.Message != "" {
				msgs = append(msgs, fmt.Sprintf("%s/%s: %s", r.Kind, r.Name, r.Message))
			}
		}
	}
	return strings.Join(msgs, "\n")
}

// String is a one-line summary for failure messages.
func (a *Application) String() string {
	s := fmt.Sprintf("%s: sync=%s health=%s", a.Name, a.Status.Sync.Status, a.Status.Health.Status)
	if op := a.Status.OperationState; op != nil {
		s += fmt.Sprintf(" operation=%s %q", op.Phase, op.Message)
	}
	for _, c := range a.Status.Conditions {
		s += fmt.Sprintf(" [%s: %s]", c.Type, c.Message)
	}
	return s
}

// Applications lists the Applications in Argo CD's namespace, by name.
func (a *ArgoCD) Applications(ctx context.Context) (map[string]*Application, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(ApplicationGVK.GroupVersion().WithKind("ApplicationList"))
	if err := a.host.Client.List(ctx, &list, client.InNamespace(a.Namespace)); err != nil {
		return nil, err
	}
	apps := map[string]*Application{}
	for i := range list.Items {
		app, err := decode(&list.Items[i])
		if err != nil {
			return nil, err
		}
		apps[app.Name] = app
	}
	return apps, nil
}

func decode(u *unstructured.Unstructured) (*Application, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	var app Application
	if err := json.Unmarshal(b, &app); err != nil {
		return nil, fmt.Errorf("application %s: %w", u.GetName(), err)
	}
	app.Name = u.GetName()
	return &app, nil
}

// Create creates an Application (or any Argo CD object) in Argo CD's namespace.
func (a *ArgoCD) Create(ctx context.Context, u *unstructured.Unstructured) error {
	u.SetNamespace(a.Namespace)
	return a.host.Client.Create(ctx, u)
}

// Refresh asks Argo CD to compare an Application with git again now (what a git webhook does):
// a normal refresh re-reads the branch's revision; Argo CD removes the annotation when done.
func (a *ArgoCD) Refresh(ctx context.Context, names ...string) error {
	patch := []byte(`{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"normal"}}}`)
	for _, n := range names {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ApplicationGVK)
		u.SetNamespace(a.Namespace)
		u.SetName(n)
		if err := a.host.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("refresh %s: %w", n, err)
		}
	}
	return nil
}

// WaitFor polls the Applications until done says the wait is over (true) or fails (error), an
// Argo CD process exits, or timeout passes; the error then lists every Application's state and
// the processes' last log lines.
func (a *ArgoCD) WaitFor(ctx context.Context, timeout time.Duration, what string, done func(map[string]*Application) (bool, error)) error {
	return a.WaitForProgress(ctx, timeout, timeout, what, done)
}

// WaitForProgress is WaitFor with a bound that counts from the Applications' last move: it
// waits as long as they keep moving (an Application created, a sync started, retried or
// finished, a health or a revision changed), gives up when they stood still for idle, and
// after max in all. On a loaded machine Argo CD's processes and the API servers are slow, not
// stuck: this tells the two apart.
func (a *ArgoCD) WaitForProgress(ctx context.Context, idle, max time.Duration, what string, done func(map[string]*Application) (bool, error)) error {
	start := time.Now()
	var last map[string]*Application
	var state string
	moved := start
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := a.Check(); err != nil {
			return false, err
		}
		apps, err := a.Applications(ctx)
		if err != nil {
			return false, nil // the API server may be busy: try again
		}
		last = apps
		if s := progress(apps); s != state {
			state, moved = s, time.Now()
		}
		if ok, err := done(apps); ok || err != nil {
			return ok, err
		}
		if time.Since(moved) > idle {
			return false, fmt.Errorf("no Application moved for %s (%s in all)", idle, time.Since(start).Round(time.Second))
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	var states []string
	for _, app := range last {
		states = append(states, "  "+app.String())
	}
	sort.Strings(states)
	return fmt.Errorf("waiting for %s: %w (last move %s before)\napplications:\n%s\n%s", what, err,
		time.Since(moved).Round(time.Second), strings.Join(states, "\n"), a.Logs(15))
}

// progress is what a move of the Applications changes (not the time stamps of Argo CD's
// periodic refreshes, which change while nothing moves).
func progress(apps map[string]*Application) string {
	names := make([]string, 0, len(apps))
	for n := range apps {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		st := &apps[n].Status
		fmt.Fprintf(&b, "%s %s@%s %s %q|", n, st.Sync.Status, st.Sync.Revision, st.Health.Status, st.Health.Message)
		if op := st.OperationState; op != nil {
			fmt.Fprintf(&b, "%s %q %d %s|", op.Phase, op.Message, op.RetryCount, op.StartedAt)
			if op.SyncResult != nil {
				for _, r := range op.SyncResult.Resources {
					fmt.Fprintf(&b, "%s/%s %s;", r.Kind, r.Name, r.Status)
				}
			}
		}
		fmt.Fprintf(&b, "%d\n", len(st.History))
	}
	return b.String()
}

// GaveUp says whether Argo CD's last sync of the Application failed for good: its retries are
// spent (a sync ends Failed or Error only then) and automated sync does not try a revision
// again that failed, so the Application stays as it is until a new commit.
func (a *Application) GaveUp() bool {
	switch a.OperationPhase() {
	case Failed, Error:
		return true
	}
	return false
}
