package main

import (
	"os"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

// testAPIEnv names, in a child of the test binary, the configuration of a product API the
// child serves instead of running tests (startLogsWorld's API in a process of its own).
const testAPIEnv = "INFERPLANE_TEST_API_CONFIG"

// clusters are the API servers of the tests that walk a job through its clusters (a host and a
// tenant cluster), started on first use.
var clusters kubeenv.Servers

func TestMain(m *testing.M) {
	if cfg := os.Getenv(testAPIEnv); cfg != "" {
		os.Exit(serveTestAPI(cfg))
	}
	os.Exit(clusters.Main(m))
}
