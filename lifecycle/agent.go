package lifecycle

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// AgentReport is the latest status the inference agent in one VM wrote to its console
// (agent/guestlog), as read back from the VM's console log (package joblogs).
type AgentReport struct {
	Status guestlog.Status `json:"status"`
	// At is when the agent wrote it.
	At time.Time `json:"at"`
}

// AgentWanted names the VMs whose agent's report would change the job's stages, so that a
// caller reads those only (each is a read of the VM's console log): a VM whose instance runs
// in a replica the gateway does not send traffic to. A replica in rotation serves, whatever
// its agents say; a crash-looping replica never is (its /health fails), so it is always read.
func AgentWanted(j Job, o Observed) []string {
	idx := indexObserved(o)
	var out []string
	for r := range j.Replicas {
		if replicaInRotation(j, r, idx, o.Gateway) {
			continue
		}
		for n := range max(j.NodesPerReplica, 1) {
			name := policy.VMName(j.Name, r, n)
			if vmi := idx.vmis[name]; vmi != nil && vmi.Status.Phase == kubevirtv1.Running {
				out = append(out, name)
			}
		}
	}
	return out
}

// replicaInRotation: the gateway names the replica's head among those it sends traffic to;
// or, when it names none, it has traffic going and every serving node of the replica is ready.
func replicaInRotation(j Job, r int32, idx observedIndex, g *Rotation) bool {
	if g == nil || !g.Known {
		return false
	}
	if g.InRotation != nil {
		return g.InRotation[policy.VMName(j.Name, r, 0)]
	}
	if g.Ready == 0 {
		return false
	}
	for n := range max(j.NodesPerReplica, 1) {
		vmi := idx.vmis[policy.VMName(j.Name, r, n)]
		if vmi == nil {
			return false
		}
		if vmi.Labels[v1alpha1.LabelServing] == v1alpha1.ServingValue && !vmiReady(vmi) {
			return false
		}
	}
	return true
}

// agentVerdict is a running VM's stage from its agent's report; ok is false when the report
// says nothing the VMI's own state does not (serving, or a stage this reader does not know).
func agentVerdict(rep *AgentReport, node string) (verdict, bool) {
	s := &rep.Status
	v := verdict{since: s.Since, reason: Describe(s)}
	if v.since.IsZero() {
		v.since = rep.At
	}
	switch s.Stage {
	case guestlog.StageCrashLooping:
		v.stage = StageCrashLooping
	case guestlog.StageStarting:
		v.stage, v.reason = StageBooting, "running on "+node+"; "+v.reason
	case guestlog.StagePullingImage:
		v.stage = StagePullingImage
	case guestlog.StageDownloadingWeights:
		v.stage = StageDownloadingWeights
	case guestlog.StageLoadingModel, guestlog.StageStopping:
		v.stage = StageLoadingModel
	default:
		return verdict{}, false
	}
	return v, true
}

// crashDetail is a crash-looping status's detail without what Describe said already: the
// agent's detail starts "exited with code 1 after 2.4s", which the exit says.
func crashDetail(s *guestlog.Status) string {
	if e := s.LastExit; e != nil {
		if rest, ok := strings.CutPrefix(s.Detail, fmt.Sprintf("exited with code %d after ", e.Code)); ok {
			if i := strings.IndexAny(rest, ":;"); i >= 0 {
				return strings.TrimSpace(rest[i+1:])
			}
			return ""
		}
	}
	return s.Detail
}

// Describe says in words what the agent reports, after its stage: `exit 1 after 42 s, 5
// restarts; last line: "torch.OutOfMemoryError: ..."`, `pulling the image: 3.2 GB of 9.8 GB
// (33%)`. The log readers show the same words when a VM's stage changes.
func Describe(s *guestlog.Status) string {
	var b strings.Builder
	switch s.Stage {
	case guestlog.StageCrashLooping:
		b.WriteString("the model server keeps exiting")
		if e := s.LastExit; e != nil {
			b.Reset()
			fmt.Fprintf(&b, "exit %d after %s", e.Code, Seconds(e.After))
		}
		fmt.Fprintf(&b, ", %s", plural(s.Restarts, "restart"))
		if e := s.LastExit; e != nil && len(e.LastLines) > 0 {
			fmt.Fprintf(&b, "; last line: %q", clip(e.LastLines[len(e.LastLines)-1], 200))
		}
		if d := crashDetail(s); d != "" {
			b.WriteString("; " + d)
		}
		return b.String()
	case guestlog.StageStarting:
		b.WriteString("the agent is starting the model server")
	case guestlog.StagePullingImage:
		b.WriteString("pulling the model server's image")
	case guestlog.StageDownloadingWeights:
		b.WriteString("downloading the weights")
	case guestlog.StageLoadingModel:
		b.WriteString("loading the model")
	case guestlog.StageServing:
		b.WriteString("the model server is up")
	case guestlog.StageStopping:
		b.WriteString("the agent is stopping the model server")
	default:
		b.WriteString("the agent says " + string(s.Stage))
	}
	if p := s.Progress; p != nil {
		b.WriteString(" (" + progressText(p) + ")")
	}
	if s.Detail != "" {
		b.WriteString(": " + s.Detail)
	}
	if s.Restarts > 0 && s.Stage != guestlog.StageServing {
		fmt.Fprintf(&b, "; %s so far", plural(s.Restarts, "restart"))
	}
	return b.String()
}

// progressText is "3.2 GB of 9.8 GB, 33%" or "3 of 17 files".
func progressText(p *guestlog.Progress) string {
	if p.Unit == "bytes" {
		if p.Total > 0 {
			return fmt.Sprintf("%s of %s, %d%%", bytesText(p.Done), bytesText(p.Total), p.Done*100/p.Total)
		}
		return bytesText(p.Done)
	}
	unit := cmp.Or(p.Unit, "items")
	if p.Total > 0 {
		return fmt.Sprintf("%d of %d %s", p.Done, p.Total, unit)
	}
	return fmt.Sprintf("%d %s", p.Done, unit)
}

// bytesText is a size in SI units, as image registries and download tools show them.
func bytesText(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// Seconds is a duration as people say it: "42 s", "3 min 12 s", "2 h 5 min".
func Seconds(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// clip cuts s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
