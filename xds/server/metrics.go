package server

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	streams         *prometheus.GaugeVec
	nodes           prometheus.Gauge
	responses       *prometheus.CounterVec
	nacks           *prometheus.CounterVec
	configs         prometheus.Counter
	clusters        prometheus.Gauge
	loadAssignments prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferplane_xds_streams", Help: "Open ADS streams, by protocol (sotw or delta).",
		}, []string{"protocol"}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_xds_nodes", Help: "Connected Envoy nodes.",
		}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_xds_responses_total", Help: "Discovery responses sent, by resource type.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferplane_xds_nacks_total", Help: "Configurations Envoy rejected, by resource type.",
		}, []string{"type"}),
		configs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_xds_config_updates_total", Help: "Listener/route/cluster configurations published.",
		}),
		clusters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferplane_xds_clusters", Help: "Clusters in the published configuration.",
		}),
		loadAssignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferplane_xds_load_assignment_updates_total", Help: "Cluster load assignments (endpoint sets) published.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.nodes, m.responses, m.nacks, m.configs, m.clusters, m.loadAssignments)
	}
	return m
}

// shortType turns type.googleapis.com/envoy.config.cluster.v3.Cluster into Cluster.
func shortType(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '.'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
