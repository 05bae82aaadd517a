package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// File names in a cert dir (controller-runtime's defaults, and the keys of a kubernetes.io/tls
// Secret plus ca.crt).
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Bundle is a serving certificate, its key and the CA that signed it, PEM-encoded.
type Bundle struct {
	CA   []byte
	Cert []byte
	Key  []byte
}

// SelfSigned makes a fresh CA and a serving certificate for hosts (DNS names or IP addresses)
// valid from now for validity. The CA's key is thrown away: renewal makes a new CA, and the
// webhook configuration's caBundle follows.
func SelfSigned(hosts []string, now time.Time, validity time.Duration) (Bundle, error) {
	if len(hosts) == 0 {
		return Bundle{}, errors.New("a serving certificate needs at least one host name")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "inferplane-webhook-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Bundle{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Bundle{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Bundle{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Bundle{}, err
	}
	return Bundle{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// Check parses the bundle and reports when its certificate expires; it is an error when the
// key does not match the certificate, the CA did not sign it, or a host is not covered.
func (b Bundle) Check(hosts []string) (time.Time, error) {
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return time.Time{}, fmt.Errorf("certificate and key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return time.Time{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CA) {
		return time.Time{}, errors.New("no CA certificate")
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: leaf.NotBefore.Add(2 * time.Hour)}); err != nil {
			return time.Time{}, fmt.Errorf("certificate for %s: %w", h, err)
		}
	}
	return leaf.NotAfter, nil
}

// WriteDir writes tls.crt, tls.key (mode 0600) and ca.crt into dir, creating it.
func (b Bundle) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CAFile, b.CA, 0o644}, {KeyFile, b.Key, 0o600}, {CertFile, b.Cert, 0o644}} {
		if err := fileutil.WriteAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
