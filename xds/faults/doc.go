// Package faults holds the gateway's end-to-end tests under control-plane faults: real API
// servers (a host cluster and tenant clusters, e2e/kubeenv) stopped and restarted, xDS
// servers (gateway.Run, as `xds serve --source clusters` runs it) and key checks
// (gateway/keycheck, as `keys serve` runs it) killed and restarted, with replica doubles
// (e2e/replicadouble) behind a stand-in for Envoy (xds/internal/envoystandin, since no Envoy
// runs here) that takes its configuration over real ADS sessions, under steady load from a
// client on 127.0.0.1. The tests print what they measure (docs/xds.md, "Control-plane
// faults").
package faults
