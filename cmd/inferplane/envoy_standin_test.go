package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/inferplane/inferplane/e2e/envoystandin"
)

// startEnvoyStandIn puts our stand-in for Envoy (e2e/envoystandin: no Envoy binary runs here)
// in front of the xDS server at admin and grpcAddr, and returns its URL.
func startEnvoyStandIn(t *testing.T, admin, grpcAddr string) string {
	t.Helper()
	return envoystandin.Start(t, envoystandin.Options{Admin: admin, Authz: []string{grpcAddr}, ALS: grpcAddr, Node: "envoy-cli-test"}).URL()
}

// jsonError answers an OpenAI-style error, as the tests' stand-in replicas do.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": "not_found"}})
}
