// Package bench holds the xDS server's benchmark (`make bench-xds`): 10,000 endpoints over
// 2,000 jobs, 100 ADS sessions over real gRPC on loopback, and the time from one replica's
// health change until every session has the new endpoints, against the baseline of a plain
// go-control-plane snapshot cache that resends every endpoint set; and the same fleet in 100
// tenant clusters, each watched through discovery.Clusters and discovery.Kube over HTTP from a
// stub of its API server (xds/internal/kubestub), beside one cluster. The server runs in a
// child process so that its memory is measured alone. The code is in bench_test.go.
package bench
