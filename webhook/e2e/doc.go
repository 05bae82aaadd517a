// Package e2e proves the webhook through a real kube-apiserver (e2e/kubeenv): the API server
// calls it over TLS on its own admission path, for real and dry-run requests, and refuses
// inferplane's workloads when it is down. Its load test (INFERPLANE_WEBHOOK_LOAD=1, run by
// `make bench-webhook`) measures the latency the webhook adds to API requests.
package e2e
