package keycheck

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/inferplane/inferplane/gateway/envoyfilters"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
)

const checkMethod = "/envoy.service.auth.v3.Authorization/Check"

// TestKeyCheckHoldsAgainstHostileClients attacks `keys serve`'s gRPC and admin servers with
// bounds set short through Config: every attack is answered or cut, a valid key is checked
// meanwhile, and the peak memory stays bounded.
func TestKeyCheckHoldsAgainstHostileClients(t *testing.T) {
	secretFile, storeFile, key := fixture(t)
	grpcAddr, admin := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{GRPCAddress: grpcAddr, AdminAddress: admin, Store: Store{File: storeFile}, SecretFile: secretFile,
			DrainDelay: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			GRPCBounds: serve.GRPC{ConnectionTimeout: time.Second, KeepaliveTime: time.Second, KeepaliveTimeout: time.Second,
				MaxConnectionIdle: time.Second, SendTimeout: time.Second, MaxRecvMsgSize: 1 << 20, Conns: serve.Conns{MaxPerClient: 50}},
			AdminBounds: serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
				IdleTimeout: 2 * time.Second, MaxHeaderBytes: 16 << 10, Conns: serve.Conns{MaxPerClient: 50}}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return servetest.Get("http://"+admin+"/readyz")(ctx) == nil }, 30*time.Second, 10*time.Millisecond)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	authz := authv3.NewAuthorizationClient(conn)
	normal := func(ctx context.Context) error {
		code, err := check(ctx, authz, key)
		if err == nil && code != int32(codes.OK) {
			err = fmt.Errorf("a valid key is refused: code %d", code)
		}
		return err
	}
	huge := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Headers: map[string]string{"x-big": strings.Repeat("a", 2<<20)}}}}}
	watch := servetest.Stream{Method: "/grpc.health.v1.Health/Watch",
		Messages: []proto.Message{&healthpb.HealthCheckRequest{Service: envoyfilters.HealthService}}}
	servetest.Run(t, servetest.Target{Addr: grpcAddr, Normal: normal}, servetest.Options{}, append([]servetest.Case{
		{Name: "oversized check", Attack: servetest.OversizedMessage(checkMethod, huge), Codes: []string{"ResourceExhausted"}},
		// A health watch sends a few bytes when the status changes: a client that never reads
		// it holds one of its connection's bounded streams, and nothing more.
		{Name: "a health watch that never reads", Attack: servetest.NeverRead(watch, true), Held: true},
	}, servetest.GRPCConnCases(checkMethod)...))

	servetest.Run(t, servetest.Target{Addr: admin, Method: http.MethodPost, Path: "/metrics",
		Normal: servetest.Get("http://" + admin + "/readyz")}, servetest.Options{}, servetest.AdminCases())
}
