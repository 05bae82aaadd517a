// Package kubestub is a stand-in for a tenant cluster's kube-apiserver in the xDS benchmark:
// an HTTP server on loopback that answers, from memory, exactly what the gateway's discovery
// asks a tenant cluster (API discovery, /readyz, and the list and watch of
// VirtualMachineInstances: streamed JSON watch events, the initial events of a watch-list with
// their bookmark). A hundred real API servers are too heavy for this machine; with this
// stub, a hundred tenant clusters are watched through the same code as a real one (the
// registry's clusters, discovery.Clusters, discovery.Kube and its controller-runtime cache,
// client-go's reflector, HTTP and JSON decoding); only the server side is a stand-in.
// Label selectors are not evaluated: every stored VMI is the gateway's.
package kubestub

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Server is one stubbed cluster.
type Server struct {
	URL string

	srv *http.Server
	lis net.Listener

	mu       sync.Mutex
	rv       int64
	objs     map[string]*kubevirtv1.VirtualMachineInstance // by namespace/name
	watchers map[chan event]struct{}
}

type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
	ns     string
}

// Start serves a stub on 127.0.0.1 holding vmis.
func Start(vmis []*kubevirtv1.VirtualMachineInstance) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + lis.Addr().String(), lis: lis, objs: map[string]*kubevirtv1.VirtualMachineInstance{},
		watchers: map[chan event]struct{}{}}
	for _, v := range vmis {
		s.rv++
		v.ResourceVersion = strconv.FormatInt(s.rv, 10)
		s.objs[v.Namespace+"/"+v.Name] = v
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Close stops the server and ends every watch.
func (s *Server) Close() error { return s.srv.Close() }

// Update changes a stored VMI and tells every watch of its namespace (MODIFIED).
func (s *Server) Update(namespace, name string, change func(*kubevirtv1.VirtualMachineInstance)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.objs[namespace+"/"+name]
	if !ok {
		return fmt.Errorf("no VMI %s/%s", namespace, name)
	}
	change(v)
	s.rv++
	v.ResourceVersion = strconv.FormatInt(s.rv, 10)
	b, err := json.Marshal(withType(v))
	if err != nil {
		return err
	}
	for w := range s.watchers {
		select {
		case w <- event{Type: "MODIFIED", Object: b, ns: namespace}:
		default: // a watcher that does not keep up is dropped, as the API server does
			delete(s.watchers, w)
			close(w)
		}
	}
	return nil
}

func withType(v *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
	v.APIVersion, v.Kind = kubevirtv1.SchemeGroupVersion.String(), "VirtualMachineInstance"
	return v
}

const vmiPath = "/apis/kubevirt.io/v1/namespaces/"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == "/readyz" || p == "/healthz" || p == "/livez":
		fmt.Fprintln(w, "ok")
	case p == "/api":
		writeJSON(w, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case p == "/api/v1":
		writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
			APIResources: []metav1.APIResource{{Name: "services", SingularName: "service", Namespaced: true, Kind: "Service",
				Verbs: metav1.Verbs{"get", "list", "watch"}}}})
	case p == "/apis":
		gv := metav1.GroupVersionForDiscovery{GroupVersion: "kubevirt.io/v1", Version: "v1"}
		writeJSON(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{{Name: "kubevirt.io", Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}}})
	case p == "/apis/kubevirt.io/v1":
		writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "kubevirt.io/v1",
			APIResources: []metav1.APIResource{{Name: "virtualmachineinstances", SingularName: "virtualmachineinstance", Namespaced: true,
				Kind: "VirtualMachineInstance", Verbs: metav1.Verbs{"get", "list", "watch"}}}})
	case strings.HasPrefix(p, vmiPath) && strings.HasSuffix(p, "/virtualmachineinstances"):
		ns := strings.TrimSuffix(strings.TrimPrefix(p, vmiPath), "/virtualmachineinstances")
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			s.watch(w, r, ns)
			return
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		s.list(w, ns, limit)
	default:
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// snapshot is the namespace's VMIs, encoded, and the current resource version.
func (s *Server) snapshot(ns string) ([]json.RawMessage, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []json.RawMessage
	for _, v := range s.objs {
		if v.Namespace == ns {
			b, _ := json.Marshal(withType(v))
			out = append(out, b)
		}
	}
	return out, strconv.FormatInt(s.rv, 10)
}

// list answers a list; limit > 0 gives at most that many, as the tenant clusters' check asks
// (one). No continue token is given: a cluster here holds fewer VMIs than a reflector's page
// (500), so only the check is ever cut short.
func (s *Server) list(w http.ResponseWriter, ns string, limit int) {
	items, rv := s.snapshot(ns)
	if items == nil {
		items = []json.RawMessage{}
	}
	if limit > 0 && len(items) > limit {
		items = items[:limit]
	}
	writeJSON(w, map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceList",
		"metadata": map[string]any{"resourceVersion": rv}, "items": items})
}

// watch streams events until the client goes: with sendInitialEvents (a watch-list), every
// object as ADDED and then a bookmark that ends the initial events.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, ns string) {
	ch := make(chan event, 1024)
	s.mu.Lock()
	s.watchers[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if _, ok := s.watchers[ch]; ok {
			delete(s.watchers, ch)
		}
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		items, rv := s.snapshot(ns)
		for _, b := range items {
			_ = enc.Encode(event{Type: "ADDED", Object: b})
		}
		bm, _ := json.Marshal(map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
			"metadata": map[string]any{"resourceVersion": rv, "annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
		_ = enc.Encode(event{Type: "BOOKMARK", Object: bm})
	}
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.ns != ns {
				continue
			}
			if err := enc.Encode(ev); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// Running sets a VMI Running and Ready with one pod-network IP, as virt-controller would.
func Running(v *kubevirtv1.VirtualMachineInstance, ip string) {
	v.Status.Phase = kubevirtv1.Running
	v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: ip, IPs: []string{ip}}}
	SetReady(v, true)
}

// SetReady sets the VMI's Ready condition.
func SetReady(v *kubevirtv1.VirtualMachineInstance, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	v.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady, Status: st}}
}
