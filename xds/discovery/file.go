package discovery

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/internal/warning"
)

// FileConfig is the file source's format: a list of endpoints, each with its replicas.
//
//	endpoints:
//	- tenant: acme
//	  job: chat
//	  runtime: vllm          # vllm (default) or parakeet
//	  requireAPIKey: false   # default true
//	  replicas:
//	  - address: 127.0.0.1
//	    port: 8001
//	  - address: 127.0.0.2
//	    port: 8001
//	    name: chat-r1        # default <job>-r<index>
type FileConfig struct {
	Endpoints []FileEndpoint `json:"endpoints"`
}

// FileEndpoint is one job's endpoint in the file source.
type FileEndpoint struct {
	Tenant        string        `json:"tenant"`
	Job           string        `json:"job"`
	Runtime       string        `json:"runtime,omitempty"`
	RequireAPIKey *bool         `json:"requireAPIKey,omitempty"`
	Replicas      []FileReplica `json:"replicas"`
}

// FileReplica is one replica's serving address.
type FileReplica struct {
	Name    string `json:"name,omitempty"`
	Address string `json:"address"`
	Port    uint32 `json:"port"`
}

// ParseFile reads the file source's format strictly: an unknown field, a bad address or a
// duplicate is an error naming the file and the field; nothing is returned on error.
func ParseFile(path string, data []byte) ([]Replica, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		// Likely a write in progress; an intentionally empty list is "endpoints: []".
		return nil, fmt.Errorf("%s: file is empty (write \"endpoints: []\" for no endpoints)", path)
	}
	var fc FileConfig
	if err := yaml.UnmarshalStrict(data, &fc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Replica
	jobs := map[string]int{}
	addrs := map[string]string{}
	for i, e := range fc.Endpoints {
		at := func(field string) string { return fmt.Sprintf("%s: endpoints[%d].%s", path, i, field) }
		for _, f := range []struct{ name, value string }{{"tenant", e.Tenant}, {"job", e.Job}} {
			if errs := validation.IsDNS1123Label(f.value); len(errs) > 0 {
				return nil, fmt.Errorf("%s %q: %s", at(f.name), f.value, strings.Join(errs, "; "))
			}
		}
		runtime := cmp.Or(e.Runtime, "vllm")
		if _, ok := gatewayv1.RuntimePaths(runtime); !ok {
			return nil, fmt.Errorf("%s %q: expected one of %s", at("runtime"), e.Runtime, strings.Join(gatewayv1.Runtimes(), ", "))
		}
		key := e.Tenant + "/" + e.Job
		if j, dup := jobs[key]; dup {
			return nil, fmt.Errorf("%s: %s is already endpoints[%d]", at("job"), key, j)
		}
		jobs[key] = i
		requireKey := e.RequireAPIKey == nil || *e.RequireAPIKey
		for j, r := range e.Replicas {
			rat := func(field string) string { return at(fmt.Sprintf("replicas[%d].%s", j, field)) }
			ip, err := netip.ParseAddr(r.Address)
			if err != nil {
				return nil, fmt.Errorf("%s %q: expected an IP address", rat("address"), r.Address)
			}
			if r.Port == 0 || r.Port > 65535 {
				return nil, fmt.Errorf("%s %d: expected 1-65535", rat("port"), r.Port)
			}
			ap := netip.AddrPortFrom(ip, uint16(r.Port)).String()
			if other, dup := addrs[ap]; dup {
				return nil, fmt.Errorf("%s: %s is already used by %s", rat("address"), ap, other)
			}
			addrs[ap] = fmt.Sprintf("endpoints[%d].replicas[%d]", i, j)
			name := cmp.Or(r.Name, e.Job+"-r"+strconv.Itoa(j))
			out = append(out, Replica{
				Tenant: e.Tenant, Job: e.Job, Runtime: runtime, RequireAPIKey: requireKey,
				Index: strconv.Itoa(j), Namespace: e.Tenant, Name: name,
				Running: true, Address: ip.String(), Port: r.Port, Ready: true,
			})
		}
	}
	slices.SortFunc(out, func(a, b Replica) int { return cmp.Compare(a.Key(), b.Key()) })
	for i := 1; i < len(out); i++ {
		if out[i].Key() == out[i-1].Key() {
			return nil, fmt.Errorf("%s: replica name %q is used twice in tenant %s", path, out[i].Name, out[i].Tenant)
		}
	}
	return out, nil
}

// File reads replicas from a YAML file (FileConfig) and reloads it when its content changes.
// Replicas from the file are always Ready; the health probes still decide who gets traffic.
type File struct {
	Path string
	// Interval is how often the file is checked for changes (default 1s). Polling, rather than
	// inotify, also follows the symlink swaps of a mounted ConfigMap.
	Interval time.Duration
	Logger   *slog.Logger
	// OnReloadError, when set, is told about a change that could not be used; the last good
	// content stays in force.
	OnReloadError func(error)
}

// Run implements Source. A missing or invalid file at start is an error; later, a bad edit is
// reported and the last good content stays.
func (f *File) Run(ctx context.Context, updates chan<- Update) error {
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	reps, err := ParseFile(f.Path, data)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	send := func(u Update) bool {
		select {
		case updates <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send(Update{Replicas: reps}) {
		return nil
	}
	last, reported := data, ""
	t := time.NewTicker(cmp.Or(f.Interval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		data, err := os.ReadFile(f.Path)
		if err == nil && bytes.Equal(data, last) {
			if reported != "" { // the bad edit was undone: the problem is gone
				reported = ""
				if !send(Update{Replicas: reps}) {
					return nil
				}
			}
			continue
		}
		var next []Replica
		if err == nil {
			next, err = ParseFile(f.Path, data)
		}
		if err != nil {
			if err.Error() != reported { // say it once, not every second
				reported = err.Error()
				log.Error("file source: keeping the last good endpoints", "error", err)
				if f.OnReloadError != nil {
					f.OnReloadError(err)
				}
				// The problem reaches /debug/endpoints and the problems metric with the
				// endpoints that stay in force.
				problem := warning.Warning{Object: "file:" + f.Path, Reason: "keeping the last good endpoints: " + err.Error()}
				if !send(Update{Replicas: reps, Problems: []warning.Warning{problem}}) {
					return nil
				}
			}
			continue
		}
		log.Info("file source: reloaded", "path", f.Path, "replicas", len(next))
		reps, last, reported = next, data, ""
		if !send(Update{Replicas: reps}) {
			return nil
		}
	}
}
