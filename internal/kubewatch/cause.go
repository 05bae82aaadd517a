package kubewatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Cause rewrites an error of a Kubernetes client so that it starts with its cause, as an
// operator would say it ("connection refused at https://10.0.0.5:6443", "401 Unauthorized at
// https://...", "no answer within 2s from ..."), followed by what was being done when it
// happened. The client libraries put the cause last, after what they were doing ("failed to
// determine if *v1.Service is namespaced: failed to get restmapping: ... connect: connection
// refused"), which hides it. errors.Is and errors.As still see the original error.
func Cause(err error, server string) error {
	if err == nil {
		return nil
	}
	cause := causeOf(err, server)
	if cause == "" || strings.HasPrefix(err.Error(), cause) {
		return err
	}
	return &causeError{cause: cause, err: err}
}

type causeError struct {
	cause string
	err   error
}

func (e *causeError) Error() string { return e.cause + ": " + e.err.Error() }
func (e *causeError) Unwrap() error { return e.err }

// causeOf names the cause of err, or "" when it cannot tell.
func causeOf(err error, server string) string {
	at := func(s string) string {
		if server == "" {
			return s
		}
		return s + " at " + server
	}
	if st, ok := errors.AsType[*apierrors.StatusError](err); ok && st.Status().Code != 0 {
		code := int(st.Status().Code)
		return at(fmt.Sprintf("%d %s", code, http.StatusText(code)))
	}
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return at("connection refused")
	case errors.Is(err, syscall.ECONNRESET):
		return at("connection reset")
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return at("no route to host")
	case errors.As(err, &unknownCA):
		return at("TLS: certificate signed by an unknown authority (check the CA data)")
	case errors.As(err, &hostErr):
		return at("TLS: the certificate is not valid for this host (check the server name)")
	case errors.As(err, &invalidCert):
		return at("TLS: invalid certificate (" + invalidCert.Error() + ")")
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return at("TLS: the server's certificate does not verify")
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		return "DNS: cannot resolve " + dns.Name
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return "no answer in time from " + serverOr(server)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return at("connection closed")
	}
	return causeFromText(err.Error(), at)
}

// causeFromText finds the cause in the text of errors that do not keep it as a value (some
// client libraries format their causes with %v).
func causeFromText(s string, at func(string) string) string {
	switch l := strings.ToLower(s); {
	case strings.Contains(l, "connection refused"):
		return at("connection refused")
	case strings.Contains(l, "connection reset"):
		return at("connection reset")
	case strings.Contains(l, "unauthorized"), strings.Contains(l, "provide credentials"):
		return at("401 Unauthorized")
	case strings.Contains(l, "forbidden"):
		return at("403 Forbidden")
	case strings.Contains(l, "x509:"), strings.Contains(l, "tls:"):
		return at("TLS handshake failed")
	case strings.Contains(l, "timeout"), strings.Contains(l, "deadline exceeded"):
		return at("no answer in time")
	}
	return ""
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

func serverOr(server string) string {
	if server == "" {
		return "the API server"
	}
	return server
}

// Get asks the API server for path (e.g. /readyz, or a list with limit=1) with the client's
// credentials and says why it did not answer 200, cause first.
func Get(ctx context.Context, hc *http.Client, server, path string) error {
	url := strings.TrimSuffix(server, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*neturl.Error](err); ok {
			err = ue.Err // the method and URL again: the cause says where
		}
		return Cause(err, server)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	msg := strings.TrimSpace(string(body))
	if st := statusMessage(body); st != "" {
		msg = st
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return fmt.Errorf("%s at %s: GET %s: %s", resp.Status, server, strings.SplitN(path, "?", 2)[0], msg)
}

// Backoff is the retry schedule of a watch that fails: 0.5 s, doubling to a cap of 4 s, each
// wait up to 20 % longer at random so that many watches of one server do not retry in step.
// It never runs out: a watch is retried for as long as it is wanted.
func Backoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 4 * time.Second, Steps: math.MaxInt32}
}

// statusMessage is the message of a metav1.Status body, or "".
func statusMessage(body []byte) string {
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) != nil || st.Kind != "Status" {
		return ""
	}
	return st.Message
}
