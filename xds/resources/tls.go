package resources

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/inferplane/inferplane/api/gatewayv1"
)

// TLSListenerName is the listener that terminates TLS.
const TLSListenerName = "inferplane_https"

// Certificate is a TLS certificate Envoy may serve, delivered to it over SDS (the xDS
// server's ADS stream): the key never reaches Envoy any other way.
type Certificate struct {
	// Name is the SDS secret's name (e.g. the Kubernetes Secret's namespace/name).
	Name string
	// Hosts are the certificate's DNS names: exact, or a wildcard for one label (*.acme.example.com).
	Hosts []string
	// NotAfter orders two certificates that cover a host equally well: the later one serves.
	NotAfter time.Time
	// CertPEM is the certificate chain, KeyPEM its private key (PEM), already checked to match.
	CertPEM, KeyPEM []byte
}

// TLSReport says, per endpoint (key), which certificate serves its host, or why none does.
type TLSReport map[string]gatewayv1.TLSChoice

// covers says how well pattern (a certificate's DNS name) covers host: 2 exactly, 1 by a
// wildcard for its first label (RFC 6125: the wildcard stands for one whole label), 0 not.
func covers(pattern, host string) int {
	pattern, host = strings.ToLower(pattern), strings.ToLower(host)
	if pattern == host {
		return 2
	}
	rest, ok := strings.CutPrefix(pattern, "*.")
	if !ok || rest == "" {
		return 0
	}
	if _, after, found := strings.Cut(host, "."); found && after == rest {
		return 1
	}
	return 0
}

// chooseCertificates picks, for each endpoint's host, the certificate that covers it best: an
// exact name over a wildcard, then the one that expires last, then by name.
func chooseCertificates(cfg Config, eps []Endpoint, certs []Certificate) TLSReport {
	report := TLSReport{}
	for _, ep := range eps {
		host := cfg.Host(ep.Tenant, ep.Job)
		best, bestScore := -1, 0
		for i, c := range certs {
			score := 0
			for _, h := range c.Hosts {
				score = max(score, covers(h, host))
			}
			if score == 0 {
				continue
			}
			if best < 0 || score > bestScore || score == bestScore && (c.NotAfter.After(certs[best].NotAfter) ||
				c.NotAfter.Equal(certs[best].NotAfter) && c.Name < certs[best].Name) {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			report[ep.Key()] = gatewayv1.TLSChoice{Reason: "no valid certificate covers " + host + " (a wildcard covers one label: *." +
				ep.Tenant + "." + cfg.Domain + " does, *." + cfg.Domain + " does not)"}
			continue
		}
		report[ep.Key()] = gatewayv1.TLSChoice{Certificate: certs[best].Name}
	}
	return report
}

// tlsResources are the TLS listener (one filter chain per certificate in use, matching the
// exact host names it serves, so no two chains overlap) and the SDS secrets it names; none
// when no endpoint is on TLS (Envoy refuses a listener without filter chains).
func tlsResources(cfg Config, eps []Endpoint, certs []Certificate, report TLSReport, hcm *hcmv3.HttpConnectionManager) (*listenerv3.Listener, []*tlsv3.Secret, error) {
	hosts := map[string][]string{} // certificate -> hosts it serves
	for _, ep := range eps {
		if c := report[ep.Key()].Certificate; c != "" {
			hosts[c] = append(hosts[c], cfg.Host(ep.Tenant, ep.Job))
		}
	}
	if len(hosts) == 0 {
		return nil, nil, nil
	}
	inspector, err := anyOf(&tlsinspectorv3.TlsInspector{})
	if err != nil {
		return nil, nil, err
	}
	tlsHCM := proto.Clone(hcm).(*hcmv3.HttpConnectionManager)
	tlsHCM.StatPrefix = "inferplane_https"
	hcmAny, err := anyOf(tlsHCM)
	if err != nil {
		return nil, nil, err
	}
	lis := &listenerv3.Listener{
		Name:    TLSListenerName,
		Address: socketAddress(cfg.ListenerAddress, cfg.TLSListenerPort),
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       wellknown.TLSInspector,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: inspector},
		}},
	}
	var secrets []*tlsv3.Secret
	for _, c := range certs {
		names := hosts[c.Name]
		if len(names) == 0 {
			continue // a certificate no endpoint uses is not sent
		}
		slices.Sort(names)
		chain, err := filterChain(c.Name, names, hcmAny)
		if err != nil {
			return nil, nil, err
		}
		lis.FilterChains = append(lis.FilterChains, chain)
		secrets = append(secrets, &tlsv3.Secret{Name: c.Name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: c.CertPEM}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: c.KeyPEM}},
		}}})
	}
	return lis, secrets, nil
}

// filterChain serves the given host names with one certificate, fetched over SDS (ADS).
func filterChain(secret string, hosts []string, hcm *anypb.Any) (*listenerv3.FilterChain, error) {
	tlsCtx, err := anyOf(&tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: secret, SdsConfig: adsSource()}},
		// HTTP/2 and HTTP/1.1 by ALPN; the connection manager's codec is AUTO.
		AlpnProtocols: []string{"h2", "http/1.1"},
	}})
	if err != nil {
		return nil, err
	}
	return &listenerv3.FilterChain{
		FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: hosts},
		TransportSocket: &corev3.TransportSocket{
			Name:       wellknown.TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx},
		},
		Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}},
	}, nil
}

// requireTLS turns plain HTTP to an endpoint on TLS into a redirect to HTTPS: Envoy sets
// x-forwarded-proto from the client's connection (it is the edge and trusts no hop), and a
// virtual host that requires TLS answers a request that did not come over it with a 301.
func requireTLS(cfg Config, vh *routev3.VirtualHost, choice gatewayv1.TLSChoice) {
	if choice.Certificate != "" && !cfg.KeepPlainHTTP {
		vh.RequireTls = routev3.VirtualHost_ALL
	}
}

// checkSecretRefs checks that every SDS secret a listener names is in the set.
func (s *Set) checkSecretRefs() error {
	have := map[string]bool{}
	for _, sec := range s.Secrets {
		have[sec.GetName()] = true
	}
	var errs []error
	for _, l := range s.Listeners {
		for _, fc := range l.GetFilterChains() {
			ts := fc.GetTransportSocket()
			if ts == nil {
				continue
			}
			var ctx tlsv3.DownstreamTlsContext
			if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
				errs = append(errs, fmt.Errorf("listener %q: transport socket: %w", l.GetName(), err))
				continue
			}
			for _, sds := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				if !have[sds.GetName()] {
					errs = append(errs, fmt.Errorf("listener %q names secret %q, which the set lacks", l.GetName(), sds.GetName()))
				}
			}
		}
	}
	return errors.Join(errs...)
}
