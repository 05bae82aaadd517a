package main

import (
	"os"
	"testing"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

// clusters are the API servers of the tests that walk a job through its clusters (a host and a
// tenant cluster), started on first use.
var clusters kubeenv.Servers

func TestMain(m *testing.M) { os.Exit(clusters.Main(m)) }
