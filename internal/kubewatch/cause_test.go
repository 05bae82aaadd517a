package kubewatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCauseComesFirst(t *testing.T) {
	const server = "https://127.0.0.1:6443"
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("failed to determine if *v1.Service is namespaced: failed to get restmapping: %w", refused),
			"connection refused at https://127.0.0.1:6443: failed to determine if *v1.Service is namespaced"},
		{fmt.Errorf("list: %w", apierrors.NewUnauthorized("the server has asked for the client to provide credentials")),
			"401 Unauthorized at https://127.0.0.1:6443: list: "},
		{apierrors.NewForbidden(schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstances"}, "", errors.New("no RBAC")),
			"403 Forbidden at https://127.0.0.1:6443: "},
		{fmt.Errorf("watch: %w", context.DeadlineExceeded), "no answer in time from https://127.0.0.1:6443: watch: "},
		{errors.New("Get \"https://x\": net/http: TLS handshake timeout"), "no answer in time at https://127.0.0.1:6443"},
		{errors.New(`failed to list: the server could not find the requested resource (unrelated)`), ""},
	} {
		got := Cause(tc.err, server)
		if tc.want == "" {
			assert.Equal(t, tc.err, got, "an error whose cause is not known stays as it is")
			continue
		}
		assert.True(t, strings.HasPrefix(got.Error(), tc.want), "%q should start with %q", got, tc.want)
		assert.ErrorIs(t, got, tc.err)
	}
	assert.NoError(t, Cause(nil, server))
}

func TestGetNamesStatusAndCause(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusOK)
		case "/hang":
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"virtualmachineinstances.kubevirt.io is forbidden: User \"x\" cannot list","reason":"Forbidden","code":403}`)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	require.NoError(t, Get(ctx, srv.Client(), srv.URL, "/ok"))
	err := Get(ctx, srv.Client(), srv.URL, "/apis/kubevirt.io/v1/namespaces/acme/virtualmachineinstances?limit=1")
	assert.EqualError(t, err, "403 Forbidden at "+srv.URL+": GET /apis/kubevirt.io/v1/namespaces/acme/virtualmachineinstances: "+
		`virtualmachineinstances.kubevirt.io is forbidden: User "x" cannot list`)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = Get(cctx, srv.Client(), srv.URL, "/hang")
	assert.True(t, strings.HasPrefix(err.Error(), "no answer in time from "+srv.URL), err.Error())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	l.Close()
	err = Get(ctx, http.DefaultClient, closed, "/readyz")
	assert.True(t, strings.HasPrefix(err.Error(), "connection refused at "+closed), err.Error())
}
