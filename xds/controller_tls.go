package xds

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferplane/inferplane/internal/warning"
	"github.com/inferplane/inferplane/xds/certs"
	"github.com/inferplane/inferplane/xds/resources"
)

// tlsState is what the controller knows of TLS: the certificates to serve and, from the last
// published configuration, which endpoint each serves.
type tlsState struct {
	certs  []resources.Certificate
	report resources.TLSReport
	// fingerprint of certs, so an update that changes nothing publishes nothing.
	fingerprint string
	// received says the first update came (the first publish waits for it).
	received bool
}

// CertificatesChanged takes the certificates to serve (a certs.Source's update). Only the
// latest one counts: one not yet taken is replaced.
func (c *Controller) CertificatesChanged(u certs.Update) {
	for {
		select {
		case c.certs <- u:
			return
		default:
		}
		select {
		case <-c.certs: // drop the stale one
		default:
		}
	}
}

// applyCertificates keeps new certificates and republishes the configuration if they changed.
func (c *Controller) applyCertificates(u certs.Update) publication {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setProblems(problemsCerts, u.Problems)
	fp := certFingerprint(u.Certificates)
	first := !c.tls.received
	c.tls.received = true
	if fp == c.tls.fingerprint && !first {
		return publication{}
	}
	c.tls.certs, c.tls.fingerprint = u.Certificates, fp
	if !c.initialized {
		if c.readyToStart() {
			return c.fullPublication()
		}
		return publication{}
	}
	return c.fullPublication()
}

func certFingerprint(cs []resources.Certificate) string {
	var b []byte
	for _, cert := range cs {
		b = append(b, cert.Name...)
		b = append(b, 0)
		b = append(b, cert.CertPEM...)
		b = append(b, cert.KeyPEM...)
		b = append(b, 0)
	}
	return string(b)
}

// setTLSReport keeps the published configuration's TLS report and reports the endpoints left
// on plain HTTP; mu is held.
func (c *Controller) setTLSReport(report resources.TLSReport) {
	c.tls.report = report
	if !c.cfg.TLS {
		return
	}
	var problems []warning.Warning
	onTLS := 0
	for _, key := range slices.Sorted(maps.Keys(report)) {
		if ch := report[key]; ch.Certificate != "" {
			onTLS++
		} else {
			problems = append(problems, warning.Warning{Object: "endpoint " + key, Reason: "served on plain HTTP only: " + ch.Reason})
		}
	}
	c.setProblems(problemsTLS, problems)
	c.metrics.tlsEndpoints.WithLabelValues("tls").Set(float64(onTLS))
	c.metrics.tlsEndpoints.WithLabelValues("plain").Set(float64(len(report) - onTLS))
}

func newTLSEndpointsGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "inferplane_xds_tls_endpoints", Help: "Job endpoints served on TLS (a certificate covers their host) or on plain HTTP only.",
	}, []string{"state"})
}
