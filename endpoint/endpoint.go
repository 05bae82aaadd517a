// Package endpoint is a customer's side of a job's endpoint: which URL an endpoint argument
// names, which API key to send, an official openai-go client for it, and what an error from
// the gateway means for the customer.
package endpoint

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Environment variables the customer commands read.
const (
	// EnvAPIKey holds the API key (never a flag: a flag's value lands in shell history).
	EnvAPIKey = "INFERPLANE_API_KEY"
	// EnvDomain is the gateway's domain: <job>.<tenant>.<domain>.
	EnvDomain = "INFERPLANE_DOMAIN"
	// EnvGateway is an address to connect to instead of the endpoint's host name.
	EnvGateway = "INFERPLANE_GATEWAY"
)

// Target is where the requests for one endpoint go.
type Target struct {
	// BaseURL is the scheme and address requests are sent to, without a path.
	BaseURL string
	// Host is the endpoint's host name, sent as the Host header (and the TLS server name),
	// which is how the gateway tells endpoints apart.
	Host string
	// Tenant and Job are the endpoint's, when the host name tells them.
	Tenant, Job string
	// viaGateway: BaseURL is a gateway address, not the endpoint's own name.
	viaGateway bool
}

// Name is the endpoint as messages show it.
func (t Target) Name() string {
	if t.Job != "" {
		return t.Job + "." + t.Tenant
	}
	return t.Host
}

// Resolve reads an endpoint argument: a URL (https://chat.acme.models.example.com), a host
// name, or <job>.<tenant> under domain. gateway, when set, is a URL to connect to instead,
// while the endpoint's host name is still sent (a gateway not in DNS yet, or a port-forward).
func Resolve(arg, domain, gateway string) (Target, error) {
	var t Target
	switch {
	case strings.Contains(arg, "://"):
		u, err := url.Parse(arg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return t, fmt.Errorf("endpoint %q: expected https://<job>.<tenant>.<domain>, a host name, or <job>.<tenant>", arg)
		}
		if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/v1" {
			return t, fmt.Errorf("endpoint %q: expected the endpoint's URL without a path (the commands add /v1/...)", arg)
		}
		t.BaseURL, t.Host = u.Scheme+"://"+u.Host, u.Hostname()
	default:
		labels := strings.Split(arg, ".")
		for _, l := range labels {
			if len(validation.IsDNS1123Label(l)) > 0 {
				return t, fmt.Errorf("endpoint %q: expected <job>.<tenant> (DNS labels), a host name, or a URL", arg)
			}
		}
		switch {
		case len(labels) == 2 && domain == "":
			return t, fmt.Errorf("endpoint %q is <job>.<tenant>: set --domain or $%s to the gateway's domain (the endpoint is https://%s.<domain>), or pass the endpoint's URL", arg, EnvDomain, arg)
		case len(labels) == 2:
			t.Host = arg + "." + strings.TrimSuffix(domain, ".")
		case len(labels) > 2:
			t.Host = arg
		default:
			return t, fmt.Errorf("endpoint %q: expected <job>.<tenant>, a host name, or a URL", arg)
		}
		t.BaseURL = "https://" + t.Host
	}
	if d := strings.TrimSuffix(domain, "."); d != "" {
		if rest, ok := strings.CutSuffix(t.Host, "."+d); ok {
			if job, tenant, ok := strings.Cut(rest, "."); ok && !strings.Contains(tenant, ".") {
				t.Job, t.Tenant = job, tenant
			}
		}
	}
	if gateway != "" {
		u, err := url.Parse(gateway)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return t, fmt.Errorf("--gateway %q: expected a URL such as https://203.0.113.7 or http://127.0.0.1:8080", gateway)
		}
		t.BaseURL, t.viaGateway = u.Scheme+"://"+u.Host, true
	}
	return t, nil
}

// Key reads the API key from keyFile when set, else from $INFERPLANE_API_KEY. No key at all
// is allowed (endpoints may be open); the gateway's 401 then says what is missing.
func Key(keyFile string) (string, error) {
	if keyFile == "" {
		return strings.TrimSpace(os.Getenv(EnvAPIKey)), nil
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" || strings.ContainsAny(key, " \t\n") {
		return "", fmt.Errorf("--api-key-file %s: expected one API key (ipk_...) alone in the file", keyFile)
	}
	return key, nil
}

// Client is an openai-go client for the target. It sends key and nothing the environment
// holds for OpenAI (OPENAI_API_KEY, OPENAI_ORG_ID, ...): those are not for our gateway. It
// does not retry: a failure is reported as it happened.
func Client(t Target, key string) openai.Client {
	opts := []option.RequestOption{
		option.WithBaseURL(t.BaseURL + "/v1/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			req.Header.Del("OpenAI-Organization")
			req.Header.Del("OpenAI-Project")
			if key == "" {
				req.Header.Del("Authorization")
			}
			return next(req)
		}),
	}
	if t.viaGateway {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{ServerName: t.Host, MinVersion: tls.VersionTLS12}
		opts = append(opts, option.WithHTTPClient(viaGateway{host: t.Host, c: &http.Client{Transport: tr}}))
	}
	return openai.NewClient(opts...)
}

// viaGateway sends each request to the gateway's address with the endpoint's host name as
// its Host, as curl --connect-to does. The client has checked by then that the request goes
// to the configured base URL, the gateway: the key goes nowhere else.
type viaGateway struct {
	host string
	c    *http.Client
}

func (v viaGateway) Do(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Host = v.host
	return v.c.Do(req)
}

// Explain says what a failed call means for the customer and what to do about it.
func Explain(err error, t Target, key string) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := strings.TrimSpace(apiErr.Message)
		status := fmt.Sprintf("%d %s", apiErr.StatusCode, http.StatusText(apiErr.StatusCode))
		if msg != "" {
			status += ": " + msg
		}
		switch apiErr.StatusCode {
		case http.StatusUnauthorized:
			if key == "" {
				return fmt.Errorf("%s: %s: no API key was sent: set $%s or pass --api-key-file", t.Name(), status, EnvAPIKey)
			}
			return fmt.Errorf("%s: %s: the gateway does not know this key (mistyped, or from another installation): check $%s or --api-key-file", t.Name(), status, EnvAPIKey)
		case http.StatusForbidden:
			return fmt.Errorf("%s: %s: the key may not call this endpoint (revoked, expired, or a key of another tenant or endpoint)", t.Name(), status)
		case http.StatusNotFound:
			return fmt.Errorf("%s: %s: no such endpoint on the gateway (check the job and tenant names: inferplane jobs list), or a path its runtime does not serve (chat needs a vllm job, transcribe a parakeet job)", t.Name(), status)
		case http.StatusTooManyRequests:
			return fmt.Errorf("%s: %s: the endpoint is at its limit; retry later", t.Name(), status)
		case http.StatusServiceUnavailable:
			return fmt.Errorf("%s: %s: no healthy replica is serving the endpoint right now%s", t.Name(), status, detailHint(t))
		}
		return fmt.Errorf("%s: %s", t.Name(), status)
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ue) || errors.As(err, &ne) {
		where := t.BaseURL
		if t.viaGateway {
			where += " (gateway for " + t.Host + ")"
		}
		inner := err
		if ue != nil {
			inner = ue.Err
		}
		return fmt.Errorf("%s: cannot reach %s: %w", t.Name(), where, inner)
	}
	return fmt.Errorf("%s: %w", t.Name(), err)
}

func detailHint(t Target) string {
	if t.Job == "" {
		return " (inferplane jobs detail <tenant>/<job> shows where its replicas are)"
	}
	return " (inferplane jobs detail " + t.Tenant + "/" + t.Job + " shows where its replicas are)"
}
